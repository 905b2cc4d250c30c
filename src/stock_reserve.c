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

/* What a refused attempt learned. */
typedef struct reserve_busy {
    long long next_ms; /* until the earliest lease ends; -1: no lease */
} reserve_busy;

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

/* One attempt: DLOCK_OK granted; DLOCK_ERR_BUSY refused, with why in e and b set;
 * DLOCK_ERR_BUSY with b->next_ms -2 when no wait can help; else the node's error. */
static int reserve_attempt(stock_op *op, const reserve_req *q, reserve_busy *b, bool *sent_maybe,
                           dlock__err *e)
{
    stock_args a;
    reserve_args(op, q, op->c->wake_chan, &a);
    redisReply *r;
    long long x[8];
    size_t n;
    int rc = dlock__stock_run(op, DLOCK_SCRIPT_STOCK_RESERVE, &a, "reserve", REDIS_REPLY_ARRAY, &r,
                              sent_maybe, e);
    if (rc != DLOCK_OK)
        return rc;
    if (!dlock__stock_reply_ints(op, r, "reserve", x, 2, &n, e)) {
        /* The script ran: it may have granted. */
        *sent_maybe = true;
        rc = DLOCK_ERR_PROTOCOL;
    } else if (x[0] == 1) {
        rc = DLOCK_OK;
    } else if (x[0] == -1 && n >= 3) {
        b->next_ms = -2;
        rc = dlock__err_set(e, DLOCK_ERR_BUSY,
                            "only %lld units of %s are unsold (stock %lld): %lld cannot be "
                            "reserved without a restock",
                            x[1], q->sku, x[2], (long long)q->qty);
    } else if (x[0] == 0 && n >= 6) {
        b->next_ms = x[4] < DLOCK_TTL_MAX_MS ? x[4] : DLOCK_TTL_MAX_MS;
        rc = dlock__err_set(e, DLOCK_ERR_BUSY, "%lld units of %s available, %lld wanted",
                            x[1] > 0 ? x[1] : 0, q->sku, (long long)q->qty);
        if (x[3] > 0)
            dlock__err_append(e, "%s%lld earlier waiter(s) come first with %s%lld units",
                              x[5] ? "at least " : "", x[3], x[5] ? "at least " : "", x[2]);
    } else {
        *sent_maybe = true;
        rc = dlock__err_set(e, DLOCK_ERR_PROTOCOL, "%s: reserve: unexpected reply %lld",
                            op->c->nodes[0].addr.display, x[0]);
    }
    freeReplyObject(r);
    return rc;
}

static bool permanent(int err)
{
    return err == DLOCK_ERR_AUTH || err == DLOCK_ERR_PROTOCOL || err == DLOCK_ERR_INVALID ||
           err == DLOCK_ERR_NOMEM;
}

/* A reserve in steps (pending.c): dlock_stock_reserve runs them with sleeps between,
 * an event loop parks it on its wake-up descriptor and due time. Between steps it
 * holds no connection, unless its last attempt's outcome is unknown. */
typedef struct reservation {
    dlock_pending base;
    stock_op op;
    reserve_req q;
    dlock__waiter *w; /* listening for wake-ups, or NULL */
    int64_t deadline_us;
    int64_t outage_since_us;
    int attempts;
    bool parked;  /* waiting between steps (on base.fd, until base.due_us) */
    bool unknown; /* an attempt may have been granted unseen */
} reservation;

/* The end of a reserve, granted or not, on the connection set r->op.set (NULL: none
 * could be had, nothing is sent): stop listening, and for one given up, leave the
 * waiters and give back what an attempt whose reply was lost may have reserved. */
static void reserve_finish(reservation *r, int rc)
{
    if (r->w != NULL)
        dlock__wait_leave(r->op.c, r->w);
    r->w = NULL;
    if (rc != DLOCK_OK && (r->q.queued || r->unknown) && r->op.set != NULL) {
        stock_args a;
        dlock__stock_args_init(&a, &r->op);
        dlock__stock_args_add(&a, r->q.id);
        dlock__stock_args_add(&a, "leave");
        dlock__stock_args_add(&a, "0");
        dlock__stock_send_only(&r->op, DLOCK_SCRIPT_STOCK_END, &a);
    }
    r->base.done = true;
}

static int reserve_step(dlock_pending *base, dlock_lock **out, bool nowait, dlock__err *e)
{
    if (nowait)
        return dlock__pending_would_block(e); /* its rounds wait for their replies */
    (void)out;                                /* a reservation's result is its id */
    reservation *r = (reservation *)base;
    dlock_client *c = r->op.c;
    /* Parked: a step before the due time without a wake-up is early, and changes
     * nothing. */
    if (r->parked && !(r->w != NULL && base->fd >= 0 && dlock__wait_woken(r->w)) &&
        dlock__now_us() < base->due_us)
        return dlock__pending_again(e);
    r->parked = false;
    if (r->op.set == NULL && (r->op.set = dlock__connset_get(c)) == NULL) {
        reserve_finish(r, DLOCK_ERR_NOMEM);
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    }
    int rc;
    for (;;) {
        reserve_busy b = {-1};
        bool sent_maybe = false;
        rc = reserve_attempt(&r->op, &r->q, &b, &sent_maybe, e);
        r->unknown |= sent_maybe;
        if (rc == DLOCK_OK || (rc == DLOCK_ERR_BUSY && b.next_ms == -2))
            break;
        int64_t now = dlock__now_us();
        /* The server unreachable for longer than the connect timeout in a row ends
         * even an endless wait, as for a lock: a wait is for units, not for an outage
         * to end. */
        if (dlock__outage_over(&r->outage_since_us, rc, now, c->rules.connect_timeout_us) ||
            (rc != DLOCK_ERR_BUSY && permanent(rc)) || now >= r->deadline_us)
            break;
        if (rc == DLOCK_ERR_BUSY && r->w == NULL &&
            dlock__wait_join(c, r->q.id, false, NULL, 0, &r->w) == DLOCK_OK) {
            /* Listening now: ask again at once, as a waiter, so that units freed
             * between the refusal and the subscription are not missed. */
            r->q.queued = true;
            continue;
        }
        if (rc == DLOCK_ERR_BUSY && r->w != NULL) {
            base->fd = r->w->efd;
            base->due_us = dlock__retry_at(now, b.next_ms >= 0 ? b.next_ms + 1 : 0, r->deadline_us);
        } else {
            base->fd = -1;
            base->due_us = now + dlock__backoff_us(r->attempts++, b.next_ms > 0 ? b.next_ms : 0);
            if (base->due_us > r->deadline_us)
                base->due_us = r->deadline_us;
        }
        r->parked = true;
        /* An attempt the server may still run (its reply never came) keeps its
         * connections: what follows it, the next attempt or the leaving of a reserve
         * given up, must reach the server after it, which only the same connection
         * ensures. */
        if (!sent_maybe) {
            dlock__connset_put(c, r->op.set);
            r->op.set = NULL;
        }
        return dlock__pending_again(e);
    }
    reserve_finish(r, rc);
    if (rc == DLOCK_OK)
        memcpy(base->id, r->q.id, sizeof r->q.id);
    return rc;
}

/* Free a reserve; one not finished gives up first. */
static void reserve_destroy(dlock_pending *base)
{
    reservation *r = (reservation *)base;
    if (!base->done) {
        if (r->op.set == NULL)
            r->op.set = dlock__connset_get(r->op.c);
        reserve_finish(r, DLOCK_ERR_CANCELED);
    }
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
    int64_t lease_ms = 0, wait_ms = 0;
    int rc = dlock__stock_op_begin(&r->op, c, sku, e);
    if (rc == DLOCK_OK) {
        /* Connections are taken per step. */
        dlock__connset_put(c, r->op.set);
        r->op.set = NULL;
        rc = check_reserve_opts(opts, &lease_ms, &wait_ms, e);
    }
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
