/*
 * deadlines.c: how long a client may stay without authenticating, or idle.
 *
 * --auth-timeout MS: a connection that has not authenticated MS after it was accepted
 * is told so and closed. Without it, connections that never send AUTH would hold every
 * --maxclients slot for ever, and each the query buffer of a command in progress. All
 * get the same deadline, so the unauthenticated connections are a list in the order
 * they were accepted, and one timer is armed for the first one's deadline: O(1) a
 * connection, however many there are.
 *
 * --timeout-idle S: redis-server's `timeout`: a client that has neither sent anything
 * nor been answered for S seconds is closed (its session locks are released, as at any
 * close). A client waiting for a lock, or subscribed to a channel, is not idle. A sweep once a
 * second suffices for a limit in whole seconds.
 */
#include "dlockd.h"

static void arm_auth_timer(void);

static void on_auth_deadline(uv_timer_t *t)
{
    (void)t;
    int64_t now = dd_now_ms();
    while (dd_srv.preauth_head != NULL &&
           dd_srv.preauth_head->accepted_ms + dd_srv.auth_timeout_ms <= now) {
        dd_conn *c = dd_srv.preauth_head;
        dd_preauth_remove(c);
        dd_srv.stats.auth_timeouts++;
        dd_conn_end(c, "ERR authentication timeout: no AUTH within %lld ms of connecting",
                    (long long)dd_srv.auth_timeout_ms);
    }
    arm_auth_timer();
}

static void arm_auth_timer(void)
{
    if (!dd_srv.timers_on)
        return;
    if (dd_srv.preauth_head == NULL) {
        uv_timer_stop(&dd_srv.auth_timer);
        return;
    }
    int64_t due = dd_srv.preauth_head->accepted_ms + dd_srv.auth_timeout_ms - dd_now_ms();
    uv_timer_start(&dd_srv.auth_timer, on_auth_deadline, (uint64_t)(due > 0 ? due : 0), 0);
}

void dd_preauth_add(dd_conn *c)
{
    if (dd_srv.auth_timeout_ms <= 0 || c->authed)
        return;
    c->on_preauth = true;
    c->preauth_prev = dd_srv.preauth_tail;
    c->preauth_next = NULL;
    if (dd_srv.preauth_tail != NULL)
        dd_srv.preauth_tail->preauth_next = c;
    else
        dd_srv.preauth_head = c;
    dd_srv.preauth_tail = c;
    if (dd_srv.preauth_head == c)
        arm_auth_timer();
}

void dd_preauth_remove(dd_conn *c)
{
    if (!c->on_preauth)
        return;
    c->on_preauth = false;
    bool was_head = dd_srv.preauth_head == c;
    if (c->preauth_prev != NULL)
        c->preauth_prev->preauth_next = c->preauth_next;
    else
        dd_srv.preauth_head = c->preauth_next;
    if (c->preauth_next != NULL)
        c->preauth_next->preauth_prev = c->preauth_prev;
    else
        dd_srv.preauth_tail = c->preauth_prev;
    c->preauth_prev = c->preauth_next = NULL;
    if (was_head)
        arm_auth_timer();
}

static void on_idle_sweep(uv_timer_t *t)
{
    (void)t;
    int64_t limit = dd_now_ms() - dd_srv.idle_timeout_s * 1000;
    for (dd_conn *c = dd_srv.conns; c != NULL; c = c->next) {
        /* A subscriber waits for what is published, as redis-server's `timeout` spares
         * pub/sub clients. */
        if (c->closing || c->busy || c->parked_job != NULL || c->nsubs > 0 || c->active_ms > limit)
            continue;
        dd_srv.stats.idle_timeouts++;
        dd_conn_close(c);
    }
}

void dd_deadlines_start(void)
{
    uv_timer_init(dd_srv.loop, &dd_srv.auth_timer);
    uv_timer_init(dd_srv.loop, &dd_srv.idle_timer);
    dd_srv.timers_on = true;
    if (dd_srv.idle_timeout_s > 0)
        uv_timer_start(&dd_srv.idle_timer, on_idle_sweep, 1000, 1000);
}

void dd_deadlines_stop(void)
{
    if (!dd_srv.timers_on)
        return;
    dd_srv.timers_on = false;
    uv_close((uv_handle_t *)&dd_srv.auth_timer, NULL);
    uv_close((uv_handle_t *)&dd_srv.idle_timer, NULL);
}
