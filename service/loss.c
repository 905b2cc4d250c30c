/*
 * loss.c: a session lock its holder no longer holds, and how the holder learns it.
 *
 * A session lock ends without its holder's UNLOCK in two ways: the renewal finds it
 * lost (the lock servers were paused or unreachable past its lease, or an operator
 * broke it), or it is held past its MAXHOLD (LOCK's option, or --max-hold), after
 * which dlockd stops renewing it. Either way the holder is told as a ZooKeeper session
 * ends: its connection is closed, after the reply to a command in flight and one last
 * error that says why (-LOST), and its other session locks are released with it. A
 * connection left open would let the holder go on working in a section nobody
 * protects any more, and an UNLOCK answering 0 at the end is too late and too easy to
 * ignore; a closed connection is an error that every client library reports.
 *
 * The renewal runs on the library's thread, which sets the session's flag and wakes
 * the loop through an async handle. A BREAK through this dlockd sets the flags of the
 * session locks it evicted itself, on the loop, so that their holders are told at
 * once rather than at their next renewal. MAXHOLD deadlines are kept by one timer on the
 * loop, armed for the earliest of them; each firing walks the connections, which is
 * cheap beside the rarity of the event.
 */
#include "dlockd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uv_async_t lost_async;
static uv_timer_t maxhold_timer;
static int64_t maxhold_due_ms; /* when the timer fires; 0: not armed */
static atomic_bool started;

/* The error a connection ends with, once its command in flight is answered. */
static void end_after(dd_conn *c, const char *msg)
{
    if (c->closing || c->quit || c->end_msg != NULL)
        return;
    c->end_msg = strdup(msg);
    if (c->end_msg == NULL)
        abort();
    /* A wait for another lock is given up, and the error answers it; a command on the
     * pool or a round in flight is answered first (dd_conn_resume ends it then, and a
     * round that turns into a wait is given up as it parks). */
    if (c->parked_job != NULL && c->parked_job->blocked)
        dd_park_refuse(c);
    else if (!c->busy)
        dd_conn_end_pending(c);
}

/* Who holds the connection's locks, for the log: its name or address, and its id. */
static void log_ended(const dd_conn *c, const dd_session *s, const char *what)
{
    dd_log("session lock '%.*s' of client %llu (%s%s%s) %s; closing the connection and "
           "releasing its session locks",
           (int)(s->name_len > 200 ? 200 : s->name_len), s->name, (unsigned long long)c->id,
           c->name != NULL ? c->name : "", c->name != NULL ? " " : "", c->addr, what);
}

/* c ends for its session lock first, lost or (maxhold) held past its MAXHOLD: the
 * -LOST error names it and says why. */
static void end_for(dd_conn *c, const dd_session *first, bool maxhold)
{
    char why[96] = "was lost (its lease ran out before dlockd could renew it, or it was broken)";
    if (maxhold)
        snprintf(why, sizeof why, "was held past its MAXHOLD of %lld ms and released",
                 (long long)first->maxhold_ms);
    char msg[320];
    snprintf(msg, sizeof msg,
             "LOST session lock '%.*s' %s: this connection is closed and its other session "
             "locks released",
             (int)(first->name_len > 128 ? 128 : first->name_len), first->name, why);
    end_after(c, msg);
}

/* On the loop: the connections whose session locks the renewal found lost. */
static void on_lost_async(uv_async_t *h)
{
    (void)h;
    for (dd_conn *c = dd_srv.conns; c != NULL; c = c->next) {
        if (c->closing)
            continue;
        const dd_session *first = NULL;
        for (dd_session *s = dd_conn_sessions(c); s != NULL; s = s->next)
            if (atomic_load(&s->lost) && !s->ended) {
                s->ended = true;
                if (first == NULL)
                    first = s;
                log_ended(c, s, "lost");
            }
        if (first != NULL)
            end_for(c, first, false);
    }
}

void dd_loss_broken(const char *evicted)
{
    /* A token is 32 random hex digits: found in the text, it is that holder's. One
     * that the text lost to its truncation (hundreds of shared holders) is found by its
     * renewal instead. */
    bool any = false;
    for (dd_conn *c = dd_srv.conns; c != NULL; c = c->next)
        for (dd_session *s = dd_conn_sessions(c); s != NULL; s = s->next)
            if (!s->ended && strstr(evicted, s->token) != NULL) {
                atomic_store(&s->lost, 1);
                any = true;
            }
    if (any)
        on_lost_async(NULL);
}

void dd_loss_notify(void)
{
    if (started)
        uv_async_send(&lost_async);
}

static void on_maxhold(uv_timer_t *t);

/* The timer at the earliest MAXHOLD deadline, at_ms or one already armed. */
static void maxhold_arm(int64_t at_ms)
{
    if (maxhold_due_ms != 0 && maxhold_due_ms <= at_ms)
        return;
    int64_t now = dd_now_ms();
    maxhold_due_ms = at_ms;
    uv_timer_start(&maxhold_timer, on_maxhold, (uint64_t)(at_ms > now ? at_ms - now : 0), 0);
}

void dd_maxhold_start(dd_session *s, int64_t maxhold_ms)
{
    if (maxhold_ms <= 0)
        return;
    s->maxhold_ms = maxhold_ms;
    /* dd_now_ms counts whole ms, so the grant may have come up to 1 ms after the ms it
     * reads: a deadline of that ms + maxhold_ms could end the lock that much early. One
     * ms more, and it is never released before its MAXHOLD. */
    s->maxhold_at_ms = dd_now_ms() + maxhold_ms + 1;
    maxhold_arm(s->maxhold_at_ms);
}

/* The session locks held past their MAXHOLD: their connections end, which releases
 * them (the renewal stops with the release). */
static void on_maxhold(uv_timer_t *t)
{
    (void)t;
    maxhold_due_ms = 0;
    int64_t now = dd_now_ms(), next = 0;
    for (dd_conn *c = dd_srv.conns; c != NULL; c = c->next) {
        if (c->closing || c->quit)
            continue; /* ending: its sessions are released with it */
        const dd_session *first = NULL;
        for (dd_session *s = dd_conn_sessions(c); s != NULL; s = s->next) {
            if (s->maxhold_at_ms == 0 || s->ended || atomic_load(&s->lost))
                continue;
            if (s->maxhold_at_ms > now) {
                if (next == 0 || s->maxhold_at_ms < next)
                    next = s->maxhold_at_ms;
                continue;
            }
            s->ended = true;
            dd_srv.stats.maxhold_released++;
            char what[96];
            snprintf(what, sizeof what, "held past its MAXHOLD of %lld ms",
                     (long long)s->maxhold_ms);
            log_ended(c, s, what);
            if (first == NULL)
                first = s;
        }
        if (first != NULL)
            end_for(c, first, true);
    }
    if (next != 0)
        maxhold_arm(next);
}

void dd_loss_start(void)
{
    uv_async_init(dd_srv.loop, &lost_async, on_lost_async);
    uv_timer_init(dd_srv.loop, &maxhold_timer);
    started = true;
}

void dd_loss_stop(void)
{
    /* Every session lock was released by now (the last connection is gone, and its
     * releases ran before it): no renewal is left to wake the loop. */
    if (!started)
        return;
    started = false;
    uv_close((uv_handle_t *)&lost_async, NULL);
    uv_close((uv_handle_t *)&maxhold_timer, NULL);
}
