/*
 * stock_reserve.c: dlock_stock_reserve and its steps (dlock_stock_reserve_start): one
 * attempt of the RESERVE script on the SKU's server, and the wait for units between
 * attempts, woken by the scripts that free units (stock.c's header says how) or when
 * the earliest lease ends.
 */
#include "stock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reserve --------------------------------------------------------------------- */

static int check_reserve_opts(const dlock_reserve_opts *o, int64_t *lease_ms, int64_t *wait_ms,
                              dlock__err *e)
{
    static const dlock_reserve_opts defaults = {0};
    if (o == NULL)
        o = &defaults;
    int rc = dlock__check_reserved(o->reserved, sizeof o->reserved / sizeof *o->reserved,
                                   "dlock_reserve_opts", e);
    if (rc == DLOCK_OK && o->reserved32 != 0)
        rc = dlock__err_set(e, DLOCK_ERR_INVALID, "dlock_reserve_opts.reserved32 must be zero");
    if (rc != DLOCK_OK)
        return rc;
    return dlock__check_lease_wait(o->lease_ms, DLOCK_STOCK_LEASE_DEFAULT_MS, "lease_ms",
                                   o->wait_ms, o->cancel_fd, lease_ms, wait_ms, e);
}

/* What one reserve asks for, the same in every attempt but for "queued". */
typedef struct reserve_req {
    char *sku; /* a copy: a pending outlives its caller's string */
    int64_t qty;
    char id[DLOCK_TOKEN_LEN + 1];
    char qty_s[24], lease_s[24], wttl_s[24];
    bool queued;
} reserve_req;

static void reserve_args(const stock_op *op, const reserve_req *q, const char *chan, stock_args *a)
{
    dlock__stock_args_init(a, op);
    dlock__stock_args_add(a, q->id);
    dlock__stock_args_add(a, q->qty_s);
    dlock__stock_args_add(a, q->lease_s);
    dlock__stock_args_add(a, q->queued ? "1" : "0");
    dlock__stock_args_add(a, chan);
    dlock__stock_args_add(a, q->wttl_s);
}

static bool permanent(int err)
{
    return err == DLOCK_ERR_AUTH || err == DLOCK_ERR_PROTOCOL || err == DLOCK_ERR_INVALID ||
           err == DLOCK_ERR_NOMEM;
}

/* Between attempts: until the due time (or a wake-up), or to listen for wake-ups and
 * then attempt at once. */
typedef enum { WAITING, JOINING } reserve_phase;

/* A reserve in steps (pending.c): dlock_stock_reserve runs them with sleeps between,
 * an event loop parks it on its wake-up descriptor and due time. An attempt is one
 * call on the SKU's server, sent by a step and read by a later one (on the pipes of a
 * pipelining client), as a lock's attempt is. Between attempts it holds no connection,
 * unless its last attempt's outcome is unknown: what follows it (the next attempt, or
 * the leaving of a reserve given up) must reach the server after it, which only the
 * same connection ensures. */
typedef struct reservation {
    dlock_pending base;
    stock_op op; /* the SKU's keys; the rounds take the connections */
    reserve_req q;
    dlock__waiter *w; /* listening for wake-ups, or NULL */
    int64_t deadline_us;
    int64_t outage_since_us;
    int attempts;
    reserve_phase phase;
    long long next_ms; /* the last refusal's time to the earliest lease end */
    bool unknown;      /* an attempt may have been granted unseen */
    stock_args a;      /* the attempt's, borrowed by its call */
    dlock__call call;
    dlock__step_round sr;
} reservation;

/* What an attempt's reply says: DLOCK_OK granted; DLOCK_ERR_BUSY refused, with why in
 * e and r->next_ms set (-2 when no wait can help); else the node's error, with
 * *sent_maybe telling whether the server may have run it all the same. */
static int attempt_end(reservation *r, bool *sent_maybe, dlock__err *e)
{
    dlock__req *rq = &r->sr.rd->reqs[0];
    const stock_op *op = &r->op;
    const reserve_req *q = &r->q;
    dlock__tally t = {0};
    r->next_ms = -1;
    *sent_maybe = false;
    if (!dlock__tally_reply(&t, rq, &r->sr.rd->set->conns[0], "reserve", REDIS_REPLY_ARRAY)) {
        /* A command held behind a handshake that never finished was never sent; any
         * other failure may have come after the server ran it. */
        *sent_maybe = !rq->held && t.last_err != DLOCK_ERR_NOMEM;
        return dlock__err_set(e, t.last_err, "%s", rq->why.msg);
    }
    long long x[8];
    size_t n;
    if (!dlock__stock_reply_ints(op, rq->reply, "reserve", x, 2, &n, e)) {
        *sent_maybe = true; /* the script ran: it may have granted */
        return DLOCK_ERR_PROTOCOL;
    }
    if (x[0] == 1)
        return DLOCK_OK;
    if (x[0] == -1 && n >= 3) {
        r->next_ms = -2;
        return dlock__err_set(e, DLOCK_ERR_BUSY,
                              "only %lld units of %s are unsold (stock %lld): %lld cannot be "
                              "reserved without a restock",
                              x[1], q->sku, x[2], (long long)q->qty);
    }
    if (x[0] == 0 && n >= 6) {
        r->next_ms = x[4] < DLOCK_TTL_MAX_MS ? x[4] : DLOCK_TTL_MAX_MS;
        int rc = dlock__err_set(e, DLOCK_ERR_BUSY, "%lld units of %s available, %lld wanted",
                                x[1] > 0 ? x[1] : 0, q->sku, (long long)q->qty);
        if (x[3] > 0)
            dlock__err_append(e, "%s%lld earlier waiter(s) come first with %s%lld units",
                              x[5] ? "at least " : "", x[3], x[5] ? "at least " : "", x[2]);
        return rc;
    }
    *sent_maybe = true;
    return dlock__err_set(e, DLOCK_ERR_PROTOCOL, "%s: reserve: unexpected reply %lld",
                          op->c->nodes[0].addr.display, x[0]);
}

/* The end of a reserve, granted or not, on the connection set set (NULL: none could
 * be had, nothing is sent): stop listening, and for one given up, leave the waiters
 * and give back what an attempt whose reply was lost may have reserved. */
static void reserve_finish(reservation *r, dlock__connset *set, int rc)
{
    if (r->w != NULL)
        dlock__wait_leave(r->op.c, r->w);
    r->w = NULL;
    if (rc != DLOCK_OK && (r->q.queued || r->unknown) && set != NULL) {
        stock_args a;
        dlock__stock_args_init(&a, &r->op);
        dlock__stock_args_add(&a, r->q.id);
        dlock__stock_args_add(&a, "leave");
        dlock__stock_args_add(&a, "0");
        r->op.set = set;
        dlock__stock_send_only(&r->op, DLOCK_SCRIPT_STOCK_END, &a);
        r->op.set = NULL;
    }
    r->base.done = true;
}

/* Between attempts: parked until due_us, on the wake-up descriptor when listening. */
static int park(reservation *r, int rc, int64_t now, dlock__err *e)
{
    dlock_pending *base = &r->base;
    r->phase = WAITING;
    if (rc == DLOCK_ERR_BUSY && r->w != NULL) {
        base->fd = r->w->efd;
        base->wake_c = r->op.c;
        base->due_us = dlock__retry_at(now, r->next_ms >= 0 ? r->next_ms + 1 : 0, r->deadline_us);
    } else {
        base->fd = -1;
        base->wake_c = NULL;
        base->due_us = now + dlock__backoff_us(r->attempts++, r->next_ms > 0 ? r->next_ms : 0);
        if (base->due_us > r->deadline_us)
            base->due_us = r->deadline_us;
    }
    return dlock__pending_again(e);
}

/* Before an attempt: whether it is due, and, after a refusal, the listening for
 * wake-ups. DLOCK_OK to attempt now. */
static int before_attempt(reservation *r, bool nowait, dlock__err *e)
{
    dlock_client *c = r->op.c;
    dlock_pending *base = &r->base;
    if (r->phase == JOINING) {
        /* A nowait step listens only if the client does already; the subscription's
         * first confirmation is a blocking step's. */
        if (dlock__wait_join(c, r->q.id, nowait, NULL, 0, &r->w) == DLOCK_OK) {
            /* Listening now: ask again at once, as a waiter, so that units freed
             * between the refusal and the subscription are not missed. */
            r->q.queued = true;
            r->phase = WAITING;
            return DLOCK_OK;
        }
        if (nowait)
            return dlock__pending_would_block(e);
        return park(r, DLOCK_ERR_UNAVAILABLE, dlock__now_us(), e); /* timers then */
    }
    /* A step before the due time without a wake-up is early, and changes nothing. */
    if (!(r->w != NULL && base->fd >= 0 && dlock__wait_woken(r->w)) &&
        dlock__now_us() < base->due_us)
        return dlock__pending_again(e);
    return DLOCK_OK;
}

static int reserve_step(dlock_pending *base, dlock_lock **out, bool nowait, dlock__err *e)
{
    (void)out; /* a reservation's result is its id */
    reservation *r = (reservation *)base;
    dlock_client *c = r->op.c;
    if (nowait && !c->nowait_ok)
        return dlock__pending_would_block(e);
    for (;;) {
        int rc;
        if (!r->sr.sent) {
            if ((rc = before_attempt(r, nowait, e)) != DLOCK_OK)
                return rc;
            dlock__call_free(&r->call);
            reserve_args(&r->op, &r->q, c->wake_chan, &r->a);
            rc = dlock__call_format(&c->scripts, DLOCK_SCRIPT_STOCK_RESERVE, STOCK_NKEYS, r->a.n,
                                    r->a.arg, r->a.len, &r->call, e);
            if (rc != DLOCK_OK) {
                reserve_finish(r, NULL, rc);
                return rc;
            }
        }
        rc = dlock__step_call(c, &r->sr, &r->call, true, base, nowait, e);
        if (rc != DLOCK_OK)
            return rc; /* in flight, or a step that would block */
        bool sent_maybe = false;
        rc = attempt_end(r, &sent_maybe, e);
        r->sr.sent = false;
        r->unknown |= sent_maybe;
        int64_t now = dlock__now_us();
        /* The server unreachable for longer than the connect timeout in a row ends
         * even an endless wait, as for a lock: a wait is for units, not for an outage
         * to end. */
        if (rc == DLOCK_OK || (rc == DLOCK_ERR_BUSY && r->next_ms == -2) ||
            dlock__outage_over(&r->outage_since_us, rc, now, c->rules.connect_timeout_us) ||
            (rc != DLOCK_ERR_BUSY && permanent(rc)) || now >= r->deadline_us) {
            reserve_finish(r, r->sr.rd->set, rc);
            dlock__step_round_end(c, &r->sr);
            if (rc == DLOCK_OK)
                memcpy(base->id, r->q.id, sizeof r->q.id);
            return rc;
        }
        /* An attempt the server may still run keeps its connections. */
        if (!sent_maybe)
            dlock__step_round_end(c, &r->sr);
        else
            dlock__round_free_replies(c, r->sr.rd);
        if (rc != DLOCK_ERR_BUSY || r->w != NULL)
            return park(r, rc, now, e);
        /* Refused, not listening yet: listen, and ask again at once (before_attempt). */
        r->phase = JOINING;
        base->fd = -1;
        base->due_us = now;
    }
}

/* Free a reserve; one not finished gives up first, on the connections of its last
 * attempt when it has them (in flight or of unknown outcome: what it may have reserved
 * is given back behind it), else on the pipes or a set of its own. */
static void reserve_destroy(dlock_pending *base)
{
    reservation *r = (reservation *)base;
    dlock_client *c = r->op.c;
    if (!base->done && c != NULL) {
        dlock__err ignored;
        dlock__round *rd = r->sr.rd;
        bool held = rd != NULL && rd->set != NULL;
        bool begun =
            held || dlock__step_round_begin(c, &r->sr, c->pipe_set != NULL, &ignored) == DLOCK_OK;
        if (begun && base->in_flight) {
            dlock__flight_drop(&r->sr.rd->flight);
            r->unknown = true;
        }
        reserve_finish(r, begun ? r->sr.rd->set : NULL, DLOCK_ERR_CANCELED);
    }
    dlock__step_round_free(c, &r->sr);
    dlock__call_free(&r->call);
    dlock__stock_op_end(&r->op);
    free(r->q.sku);
    free(r);
}

/* dlock_stock_reserve's checks, and a reserve ready for its first step (no I/O). */
static int reserve_start(dlock_client *c, const char *sku, int64_t qty,
                         const dlock_reserve_opts *opts, dlock_pending **out, dlock__err *e)
{
    reservation *r = dlock__pending_new(sizeof *r, reserve_step, reserve_destroy);
    if (r == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    r->base.lockless = true;
    dlock__step_round_init(&r->sr, &r->base);
    int64_t lease_ms = 0, wait_ms = 0;
    int rc = dlock__stock_op_begin(&r->op, c, sku, e); /* connections: per attempt */
    if (rc == DLOCK_OK)
        rc = check_reserve_opts(opts, &lease_ms, &wait_ms, e);
    if (rc == DLOCK_OK && (qty < 1 || qty > DLOCK_STOCK_QTY_MAX))
        rc = dlock__err_set(e, DLOCK_ERR_INVALID, "qty %lld is outside [1, %lld]", (long long)qty,
                            (long long)DLOCK_STOCK_QTY_MAX);
    if (rc == DLOCK_OK && (rc = dlock__token_new(r->q.id)) != DLOCK_OK)
        dlock__err_set(e, rc, "getrandom: %s", strerror(errno));
    if (rc == DLOCK_OK && (r->q.sku = dlock__strdup(sku)) == NULL)
        rc = dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    if (rc != DLOCK_OK) {
        r->base.done = true;
        reserve_destroy(&r->base);
        return rc;
    }
    r->q.qty = qty;
    snprintf(r->q.qty_s, sizeof r->q.qty_s, "%lld", (long long)qty);
    snprintf(r->q.lease_s, sizeof r->q.lease_s, "%lld", (long long)lease_ms);
    snprintf(r->q.wttl_s, sizeof r->q.wttl_s, "%d", DLOCK_QUEUE_TTL_MS);
    /* A client already listening for wake-ups waits in the queue from its first
     * attempt; another one tries first, and listens only if it must wait. */
    if (wait_ms != 0 && dlock__wait_join(c, r->q.id, true, NULL, 0, &r->w) == DLOCK_OK)
        r->q.queued = true;
    int64_t now = dlock__now_us();
    r->deadline_us =
        wait_ms < 0 || wait_ms > INT64_C(3153600000000) ? INT64_MAX : now + wait_ms * 1000;
    r->base.due_us = now;
    *out = &r->base;
    return DLOCK_OK;
}

int dlock_stock_reserve(dlock_client *c, const char *sku, int64_t qty,
                        const dlock_reserve_opts *opts, char id[DLOCK_TOKEN_LEN + 1])
{
    dlock__err e;
    if (id == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "id is NULL (it receives the reservation id)");
    id[0] = '\0';
    dlock_pending *p;
    int rc = dlock__client_enter(c, &e);
    if (rc != DLOCK_OK || (rc = dlock__client_block_begin(c, &e)) != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    if ((rc = reserve_start(c, sku, qty, opts, &p, &e)) == DLOCK_OK) {
        rc = dlock__pending_run(p, opts ? opts->cancel_fd : 0, c->close_efd, NULL, &e);
        if (rc == DLOCK_OK)
            memcpy(id, p->id, DLOCK_TOKEN_LEN + 1);
        dlock_pending_free(p);
    }
    /* A reservation got is an id, not a handle: it outlives the client as it is. */
    return dlock__err_raise(&e, dlock__client_block_end(c, rc, NULL, &e));
}

int dlock_stock_reserve_start(dlock_client *c, const char *sku, int64_t qty,
                              const dlock_reserve_opts *opts, dlock_pending **out)
{
    dlock__err e;
    if (out == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "out is NULL");
    *out = NULL;
    return dlock__err_raise(&e, reserve_start(c, sku, qty, opts, out, &e));
}
