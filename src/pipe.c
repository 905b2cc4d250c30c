/*
 * pipe.c: one connection per server that the rounds of many callers share.
 *
 * An event loop that serves many clients (dlockd) runs many operations of one client
 * at once. On connections of their own, each round costs its own writes, reads and
 * poll registrations, and the server sees as many connections as rounds in flight. On
 * a pipe, every round's command is queued behind the others on the one connection to
 * its server and the pump sends them together (one write per loop turn), and the
 * server answers them in order: the replies are matched to their requests by their
 * place in the line (a ring of entries, one per command sent, each with its sequence
 * number; a request knows its own, so giving it up costs nothing).
 *
 * What keeps one caller's reply from reaching another:
 * - every command sent has its entry, also those nobody awaits (a clean-up release, a
 *   waiter leaving its queue: their replies are discarded in turn), and the handshake's
 *   replies are taken by conn.c before any of them;
 * - a request given up keeps its entry, emptied: its reply is discarded when it comes;
 * - a command that must wait for the connection's handshake (it would run as the wrong
 *   user, or in the wrong database, behind a failed AUTH or SELECT) waits in a list of
 *   its own and gets its entry only when it is sent;
 * - so does one that finds PIPE_DEPTH commands on the line already: a burst of requests
 *   waits in the client, its deadline starting when it is sent, rather than in the
 *   server's queue, where the last of a long line would miss its deadline and fail the
 *   whole line with it (the pending is told when it is sent, to wait for the new
 *   deadline);
 * - a reply with no entry left, a read error, the end of the stream, or the oldest
 *   request missing its deadline (a server that stalls) fails every request on the
 *   connection and resets it: nothing on it can be trusted to come in order any more.
 *   A reset (not a close) keeps what the server has not yet received from running
 *   late, as conn.c says.
 *
 * This file keeps the lines; pipe_pump.c reads and writes them. A piped connection is
 * used under its client's pipes mutex (dlock__pipes.mu), by
 * whichever thread steps a round or pumps. Only servers reached directly are piped (a
 * cluster's redirections and a Sentinel's demoted master are not replies in order), and
 * the resend of a script the server lost (-NOSCRIPT) goes to the back of the line.
 */
#include "pipe.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* Commands on a line at most (DLOCK_PIPELINE_DEPTH): enough that a loop turn's
 * requests leave in one write (256 clients' at once), few enough that the server
 * answers the last of them within a millisecond or two of the first. */
#define PIPE_DEPTH DLOCK_PIPELINE_DEPTH

/* ---- the mutex and the wakers --------------------------------------------------- */

void dlock__pipe_lock(const dlock__conn *conns)
{
    if (conns[0].pipe != NULL)
        pthread_mutex_lock(&conns[0].pipe->ps->mu);
}

void dlock__pipe_unlock(const dlock__conn *conns)
{
    if (conns[0].pipe != NULL)
        pthread_mutex_unlock(&conns[0].pipe->ps->mu);
}

static void ready(dlock__pipes *ps, dlock__waker *wk)
{
    if (wk == NULL || wk->fn == NULL || wk->prev != NULL)
        return;
    wk->next = ps->ready;
    if (wk->next != NULL)
        wk->next->prev = &wk->next;
    wk->prev = &ps->ready;
    ps->ready = wk;
}

void dlock__pipe_unready(dlock__waker *wk)
{
    if (wk->prev == NULL)
        return;
    *wk->prev = wk->next;
    if (wk->next != NULL)
        wk->next->prev = wk->prev;
    wk->next = NULL;
    wk->prev = NULL;
}

void dlock__pipes_forget(dlock__pipes *ps, dlock__waker *wk)
{
    pthread_mutex_lock(&ps->mu);
    dlock__pipe_unready(wk);
    pthread_mutex_unlock(&ps->mu);
}

/* ---- the line of replies ---------------------------------------------------------- */

static pipe_ent *at(dlock__pipe *p, size_t k)
{
    return &p->ring[(p->head + k) % p->cap];
}

/* Append an entry; its sequence number in *seq. false when out of memory. */
static bool push(dlock__pipe *p, pipe_ent e, uint64_t *seq)
{
    if (p->len == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        pipe_ent *ring = malloc(cap * sizeof *ring);
        if (ring == NULL)
            return false;
        for (size_t k = 0; k < p->len; k++)
            ring[k] = *at(p, k);
        free(p->ring);
        p->ring = ring;
        p->cap = cap;
        p->head = 0;
    }
    *seq = p->head_seq + p->len;
    *at(p, p->len++) = e;
    return true;
}

pipe_ent dlock__pipe_pop(dlock__pipe *p)
{
    pipe_ent e = *at(p, 0);
    p->head = (p->head + 1) % p->cap;
    p->len--;
    p->head_seq++;
    return e;
}

/* The entry of r, sent and not yet answered; NULL when r has none. */
static pipe_ent *entry_of(dlock__pipe *p, const dlock__req *r)
{
    if (r->pipe_seq < p->head_seq || r->pipe_seq - p->head_seq >= p->len)
        return NULL;
    pipe_ent *e = at(p, (size_t)(r->pipe_seq - p->head_seq));
    return e->req == r ? e : NULL;
}

void dlock__pipe_done(dlock__pipes *ps, dlock__req *r, dlock__waker *wk, int err)
{
    r->err = err;
    r->done = true;
    r->held = false;
    ready(ps, wk);
}

/* Every request on c fails with err: why (NULL: each missed its deadline, and the
 * message says so), and c is reset. */
void dlock__pipe_fail_all(dlock__conn *c, int err, const dlock__err *why)
{
    dlock__pipe *p = c->pipe;
    for (size_t k = 0; k < p->len; k++)
        if (!at(p, k)->harmless)
            c->risky = 1; /* a command that must not run late: reset, not closed */
    dlock__conn_close(c);
    const dlock__topology *t = c->node->topo;
    if (t->suspect != NULL)
        t->suspect(c->node);
    while (p->len > 0) {
        pipe_ent e = dlock__pipe_pop(p);
        dlock__req *r = e.req;
        if (r == NULL)
            continue;
        if (why != NULL)
            r->why = *why;
        else
            dlock__err_set(&r->why, 0,
                           "%s: no reply within %lld ms (outcome unknown: the command may "
                           "have been applied)",
                           c->node->addr.display,
                           (long long)((r->deadline_us - r->start_us) / 1000));
        dlock__pipe_done(p->ps, r, e.wk, err);
    }
    for (size_t k = p->hhead; k < p->nheld; k++) {
        dlock__req *r = p->held[k].req;
        if (why != NULL)
            r->why = *why;
        else
            dlock__err_set(&r->why, 0, "%s: not sent: the connection failed",
                           c->node->addr.display);
        dlock__pipe_done(p->ps, r, p->held[k].wk, err);
    }
    p->hhead = p->nheld = 0;
}

static void fail_one(dlock__conn *c, dlock__req *r, dlock__waker *wk, int err)
{
    dlock__pipe_done(c->pipe->ps, r, wk, err);
}

/* Queue r's bytes (cmd, len) and give it an entry. */
bool dlock__pipe_queue(dlock__conn *c, dlock__req *r, dlock__waker *wk, const char *cmd, size_t len)
{
    dlock__pipe *p = c->pipe;
    uint64_t seq;
    if (dlock__conn_queue(c, cmd, len) != DLOCK_OK ||
        !push(p, (pipe_ent){r->await ? r : NULL, r->await ? wk : NULL, r->harmless_late}, &seq)) {
        /* The bytes may be queued without their entry: the line is out of step. */
        dlock__err why;
        dlock__err_set(&why, 0, "%s: out of memory", c->node->addr.display);
        dlock__pipe_fail_all(c, DLOCK_ERR_NOMEM, &why);
        if (!r->done) {
            r->why = why;
            fail_one(c, r, wk, DLOCK_ERR_NOMEM);
        }
        return false;
    }
    r->pipe_seq = seq;
    return true;
}

/* Send the requests that wait, oldest first, while the handshake is done and the line
 * has room; each one's deadline starts now, and the owner of one that waited for room
 * (with no deadline) is told, to wait for it. */
void dlock__pipe_send_held(dlock__conn *c)
{
    dlock__pipe *p = c->pipe;
    int64_t now = dlock__now_us();
    while (p->hhead < p->nheld && c->state == DLOCK_CONN_READY && c->handshake == 0 &&
           p->len < PIPE_DEPTH) {
        pipe_ent e = p->held[p->hhead++];
        if (p->hhead == p->nheld)
            p->hhead = p->nheld = 0;
        dlock__req *r = e.req;
        bool waited_for_room = r->deadline_us == INT64_MAX;
        r->held = false;
        r->start_us = now;
        r->deadline_us = now + c->node->rules->timeout_us;
        if (!dlock__pipe_queue(c, r, e.wk, r->cmd, r->cmdlen))
            return; /* out of memory: all failed */
        if (waited_for_room)
            ready(p->ps, e.wk); /* its owner waits for no due time yet */
    }
}

/* Hold r, sent later by send_held; false when out of memory. */
static bool hold(dlock__pipe *p, dlock__req *r, dlock__waker *wk)
{
    if (p->nheld == p->heldcap && p->hhead > 0) {
        memmove(p->held, p->held + p->hhead, (p->nheld - p->hhead) * sizeof *p->held);
        p->nheld -= p->hhead;
        p->hhead = 0;
    }
    if (p->nheld == p->heldcap) {
        size_t cap = p->heldcap ? p->heldcap * 2 : 16;
        pipe_ent *h = realloc(p->held, cap * sizeof *h);
        if (h == NULL)
            return false;
        p->held = h;
        p->heldcap = cap;
    }
    p->held[p->nheld++] = (pipe_ent){r, wk, r->harmless_late};
    r->held = true;
    return true;
}

/* Take r off the list of those waiting to be sent. */
static void unhold(dlock__pipe *p, const dlock__req *r)
{
    for (size_t k = p->hhead; k < p->nheld; k++) {
        if (p->held[k].req == r) {
            memmove(p->held + k, p->held + k + 1, (p->nheld - k - 1) * sizeof *p->held);
            p->nheld--;
            break;
        }
    }
    if (p->hhead == p->nheld)
        p->hhead = p->nheld = 0;
}

/* ---- the steps fanout.c takes ------------------------------------------------------ */

void dlock__pipe_send(dlock__conn *c, dlock__req *r, dlock__waker *wk)
{
    dlock__pipe *p = c->pipe;
    r->held = false;
    /* A connection nobody waits on may have been closed by the server (a restart, an
     * idle timeout): reopen it rather than fail the request. With replies owed, the
     * pump sees the end itself. */
    if (p->len == 0 && p->nheld == p->hhead && dlock__conn_stale(c))
        dlock__conn_close(c);
    if (c->state == DLOCK_CONN_CLOSED) {
        int rc = dlock__conn_open(c, &r->why);
        if (rc != DLOCK_OK) {
            fail_one(c, r, wk, rc);
            return;
        }
    }
    if (!r->await) {
        /* Sent behind a handshake if need be: these commands are token-checked and do
         * no harm even refused or run in the wrong database (fanout.c's start says
         * more); nobody waits for them. */
        if (dlock__pipe_queue(c, r, NULL, r->cmd, r->cmdlen))
            r->done = true;
        return;
    }
    bool connecting = c->state != DLOCK_CONN_READY || c->handshake > 0;
    if (connecting || p->len >= PIPE_DEPTH || p->nheld > p->hhead) {
        if (!hold(p, r, wk)) {
            dlock__err_set(&r->why, 0, "%s: out of memory", c->node->addr.display);
            fail_one(c, r, wk, DLOCK_ERR_NOMEM);
            return;
        }
        if (!connecting)
            r->deadline_us = INT64_MAX; /* it starts when the request is sent */
        else if (c->connect_deadline_us > r->deadline_us)
            r->deadline_us = c->connect_deadline_us;
        return;
    }
    dlock__pipe_queue(c, r, wk, r->cmd, r->cmdlen);
}

void dlock__pipe_expire(dlock__conn *c, dlock__req *r)
{
    if (r->held && c->state == DLOCK_CONN_READY && c->handshake == 0) {
        /* Waiting for room on a full line, past the deadline its round gave it (a vote
         * decided without this node): it alone fails, never sent. */
        unhold(c->pipe, r);
        r->held = false;
        dlock__err_set(&r->why, 0, "%s: not sent within %lld ms: %zu commands ahead of it",
                       c->node->addr.display, (long long)((r->deadline_us - r->start_us) / 1000),
                       c->pipe->len);
        dlock__pipe_done(c->pipe->ps, r, NULL, DLOCK_ERR_TIMEOUT);
        return;
    }
    /* A loop late to pump may have the reply in the socket already: take what is
     * there first. */
    if (!r->held)
        dlock__pipe_pump_conn(c, EPOLLIN);
    if (r->done)
        return;
    /* The oldest request is at least as late: all of them fail. */
    c->lagging = true;
    dlock__pipe_fail_all(c, DLOCK_ERR_TIMEOUT, NULL);
}

void dlock__pipe_abandon(dlock__conn *c, dlock__req *r)
{
    dlock__pipe *p = c->pipe;
    if (r->held) {
        unhold(p, r);
        r->held = false;
        dlock__err_set(&r->why, 0, "%s: not sent yet when a quorum had decided",
                       c->node->addr.display);
    } else {
        pipe_ent *e = entry_of(p, r);
        if (e != NULL) {
            e->req = NULL; /* its reply is discarded when it comes */
            e->wk = NULL;
        }
        dlock__err_set(&r->why, 0, "%s: no reply yet when a quorum had decided",
                       c->node->addr.display);
    }
    r->err = DLOCK_ERR_TIMEOUT;
    r->done = true;
}
