/*
 * drain.c: the stop on SIGTERM or SIGINT, made for a rolling restart.
 *
 * Releasing every session lock at once while its holders are still inside their
 * critical sections would let another client take a lock mid-request: exclusion broken
 * by a deploy. So the first signal drains. dlockd stops listening (new connections go
 * to the other dlockd behind the same address), refuses whatever would take a lock
 * (LOCK, SEM ACQUIRE, STOCK RESERVE) with -SHUTDOWN, which a client retries, ends the
 * waits in progress the same way, and waits up to --shutdown-timeout for the session
 * locks still held to be UNLOCKed by their holders, renewing them meanwhile. UNLOCK,
 * EXTEND and everything else keep working. When the last one is UNLOCKed, or the time
 * is up, it stops as without a drain: what is left is released, and each connection
 * closed once its last reply is written (at most STOP_OVERDUE_MS later), a LOCK granted
 * meanwhile undone and answered -SHUTDOWN (park.c). A second signal ends the drain at
 * once; one during the stop exits without releasing anything (main.c).
 */
#include "dlockd.h"

static uv_timer_t timeout_timer, check_timer;
static bool timers_on;
static int64_t started_ms;

void dd_reply_shutdown(dd_buf *out)
{
    dd_srv.stats.shutdown_refused++;
    dd_reply_error(out, "SHUTDOWN dlockd is shutting down and takes no new lock: retry, "
                        "through another dlockd");
}

bool dd_drain_refuses(dd_buf *out)
{
    if (!dd_srv.draining)
        return false;
    dd_reply_shutdown(out);
    return true;
}

/* The stop closes a connection once its last reply is written, and lingers for its
 * reading: a client that never reads would hold the exit for ever. Past this, the
 * connections left are closed. */
#define STOP_OVERDUE_MS (3 * DD_LINGER_MS)

static void on_stop_overdue(uv_timer_t *t)
{
    (void)t;
    int n = 0;
    for (dd_conn *c = dd_srv.conns; c != NULL; c = c->next)
        if (!c->closing) {
            dd_conn_close(c);
            n++;
        }
    if (n > 0)
        dd_log("closed %d connections whose last replies were not read in %d ms", n,
               STOP_OVERDUE_MS);
}

void dd_drain_end(const char *why)
{
    if (!dd_srv.draining || dd_srv.stopping)
        return;
    long long took = (long long)(dd_now_ms() - started_ms);
    if (dd_srv.session_locks > 0)
        dd_log("drain over after %lld ms (%s): releasing the %d session locks still held", took,
               why, dd_srv.session_locks);
    else
        dd_log("drain over after %lld ms: no session lock held any more", took);
    /* Before the stop, which closes the timers if nothing is left to wait for. */
    uv_timer_start(&timeout_timer, on_stop_overdue, STOP_OVERDUE_MS, 0);
    dd_server_stop();
}

static void on_timeout(uv_timer_t *t)
{
    (void)t;
    dd_drain_end("--shutdown-timeout passed");
}

static void on_check(uv_timer_t *t)
{
    (void)t;
    if (dd_srv.session_locks == 0)
        dd_drain_end("nothing held");
}

void dd_drain_check(void)
{
    /* Not from here: the UNLOCK that freed the last lock has yet to queue its reply,
     * which the stop must let through; the timer runs after this callback returns. */
    if (dd_srv.draining && !dd_srv.stopping && dd_srv.session_locks == 0)
        uv_timer_start(&check_timer, on_check, 0, 0);
}

bool dd_drain_start(void)
{
    if (dd_srv.shutdown_timeout_ms <= 0)
        return false;
    dd_srv.draining = true;
    started_ms = dd_now_ms();
    dd_server_unlisten();
    int ended = 0, holders = 0;
    for (dd_conn *c = dd_srv.conns; c != NULL; c = c->next) {
        if (c->closing)
            continue;
        holders += dd_conn_sessions(c) != NULL;
        if (c->parked_job != NULL && c->parked_job->blocked) {
            dd_park_refuse(c);
            ended++;
        }
    }
    dd_log("draining: listeners closed, new locks refused (-SHUTDOWN), %d waits ended; "
           "waiting up to %lld ms for the %d session locks of %d clients to be UNLOCKed (a "
           "second signal ends the drain)",
           ended, (long long)dd_srv.shutdown_timeout_ms, dd_srv.session_locks, holders);
    uv_timer_init(dd_srv.loop, &timeout_timer);
    uv_timer_init(dd_srv.loop, &check_timer);
    timers_on = true;
    uv_timer_start(&timeout_timer, on_timeout, (uint64_t)dd_srv.shutdown_timeout_ms, 0);
    dd_drain_check();
    return true;
}

void dd_drain_stop(void)
{
    if (!timers_on)
        return;
    timers_on = false;
    uv_close((uv_handle_t *)&timeout_timer, NULL);
    uv_close((uv_handle_t *)&check_timer, NULL);
}
