/*
 * stock.c: a counted stock per SKU with leased reservations (dlock_stock_*): set and
 * add stock, reserve units for a lease, commit (sold), cancel (back), extend, status.
 * The scripts that change the counts, the key layout they name and the invariant they
 * keep are in stock_scripts.c; this file formats their calls, sends them to the SKU's
 * server, decodes the replies, and waits.
 *
 * Where it lives: with N > 1 servers, on the first of the list only: a fan-out of one
 * request, to node 0, on a connection set from the client's pool. A counter needs
 * every change applied exactly once in one order; a quorum of independent masters
 * cannot give that (a unit sold on nodes 1-2 and another on 2-3 are both "sold" with
 * different counts on each node). Errors are node 0's own, as for N = 1.
 *
 * Waiting uses the locks' wake-up path (wait.c): a waiting reserve is a member of the
 * SKU's waiters set, carrying its id (its wake-up token) and its client's channel;
 * any script that frees units (a cancel, a restock, leases found run out, a waiter
 * giving up) publishes the id of each waiter that the free units now serve. An expiry
 * publishes nothing by itself, so a busy reply carries the time until the earliest
 * lease ends, and the waiter retries then; every DLOCK_QUEUE_REFRESH_MS its retry
 * also renews its place (a waiter that died is dropped DLOCK_QUEUE_TTL_MS after its
 * last retry). Waiters are served in arrival order, strictly: a reserve, waiting or
 * not, gets units only if what is available covers it and every waiter before it (a
 * reserve that does not wait counts as arriving last). So a 5-unit buyer at the head
 * is served before any 1-unit buyer behind it, however many of those come; the price
 * is that a head waiter that died holds the others back until its place lapses. A
 * waiter asking for more than is unsold (total - sold) could only be served by a
 * restock: it is not counted, it is woken, and its retry fails at once.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- one call on the SKU's server ------------------------------------------------ */

#define STOCK_NKEYS 5

/* The keys of one SKU (the layout stock_scripts.c describes), in one allocation. */
typedef struct stock_keys {
    char *buf;
    const char *key[STOCK_NKEYS];
    size_t len[STOCK_NKEYS];
} stock_keys;

static int keys_make(const dlock_client *c, const char *sku, stock_keys *k, dlock__err *e)
{
    static const char *const suffix[STOCK_NKEYS] = {":stock", ":stock:res", ":stock:done",
                                                    ":stock:wait", ":stock:winfo"};
    size_t sku_len = strlen(sku), tag_len = dlock__tag_len(sku, sku_len), total = 0;
    for (int i = 0; i < STOCK_NKEYS; i++)
        total += c->prefix_len + tag_len + sizeof "{}" + strlen(suffix[i]);
    if ((k->buf = dlock__malloc(total)) == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    /* "P{s}" once, then each key is a copy of it with its suffix. */
    char *p = k->buf;
    memcpy(p, c->prefix, c->prefix_len);
    p[c->prefix_len] = '{';
    dlock__tag_write(p + c->prefix_len + 1, sku, sku_len);
    size_t base = c->prefix_len + tag_len + 2;
    p[base - 1] = '}';
    for (int i = 0; i < STOCK_NKEYS; i++) {
        size_t slen = strlen(suffix[i]);
        if (i > 0)
            memcpy(p, k->buf, base);
        memcpy(p + base, suffix[i], slen + 1);
        k->key[i] = p;
        k->len[i] = base + slen;
        p += base + slen + 1;
    }
    return DLOCK_OK;
}

/* One stock call: the client, the SKU's keys, a connection set from the pool, and the
 * request for node 0 (the other nodes get none). */
typedef struct stock_op {
    dlock_client *c;
    stock_keys k;
    dlock__connset *set;
    dlock__req req;
} stock_op;

static int check_id(const char *id, dlock__err *e)
{
    if (id == NULL)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "reservation id is NULL");
    if (!dlock__token_valid(id))
        return dlock__err_set(e, DLOCK_ERR_INVALID,
                              "reservation id must be %d lowercase hex characters",
                              DLOCK_TOKEN_LEN);
    return DLOCK_OK;
}

/* Check the client and the SKU, make the keys, take a connection set from the pool. */
static int op_begin(stock_op *op, dlock_client *c, const char *sku, dlock__err *e)
{
    op->c = c;
    op->k.buf = NULL;
    op->set = NULL;
    op->req.reply = NULL;
    int rc = dlock__client_enter(c, e);
    if (rc != DLOCK_OK || (rc = dlock__check_key_name(sku, "sku", e)) != DLOCK_OK)
        return rc;
    /* A file:// client has no server: a count that a crashed buyer's lease returns
     * needs a clock and scripts that only a server runs. */
    if (c->local != NULL)
        return dlock__err_set(e, DLOCK_ERR_INVALID,
                              "the stock needs a Redis server: a file:// client has none");
    if ((rc = keys_make(c, sku, &op->k, e)) != DLOCK_OK)
        return rc;
    if ((op->set = dlock__connset_get(c)) == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    return DLOCK_OK;
}

static void op_end(stock_op *op)
{
    freeReplyObject(op->req.reply);
    op->req.reply = NULL;
    if (op->set != NULL)
        dlock__connset_put(op->c, op->set);
    op->set = NULL;
    free(op->k.buf);
    op->k.buf = NULL;
}

/* The arguments of a stock script: the SKU's keys, then the script's own. They outlive
 * the formatting: the call borrows them for its EVAL form. */
#define STOCK_ARGS_MAX 6
typedef struct stock_args {
    const char *arg[STOCK_NKEYS + STOCK_ARGS_MAX];
    size_t len[STOCK_NKEYS + STOCK_ARGS_MAX];
    int n;
} stock_args;

static void args_init(stock_args *a, const stock_op *op)
{
    for (int i = 0; i < STOCK_NKEYS; i++) {
        a->arg[i] = op->k.key[i];
        a->len[i] = op->k.len[i];
    }
    a->n = STOCK_NKEYS;
}

static void args_add(stock_args *a, const char *s)
{
    a->arg[a->n] = s;
    a->len[a->n++] = strlen(s);
}

static int format_call(const stock_op *op, enum dlock__script_id id, const stock_args *a,
                       dlock__call *call, dlock__err *e)
{
    return dlock__call_format(&op->c->scripts, id, STOCK_NKEYS, a->n, a->arg, a->len, call, e);
}

/* Run a script on the SKU's server (node 0; the other nodes get no command). DLOCK_OK
 * with the reply in *out (the caller frees it), or the node's own error, with
 * *sent_maybe telling whether the server may have run the script all the same. */
static int run(stock_op *op, enum dlock__script_id id, const stock_args *a, const char *what,
               int type, redisReply **out, bool *sent_maybe, dlock__err *e)
{
    dlock__call call;
    *out = NULL;
    if (sent_maybe != NULL)
        *sent_maybe = false;
    int rc = format_call(op, id, a, &call, e);
    if (rc != DLOCK_OK)
        return rc;
    dlock__req *r = &op->req;
    freeReplyObject(r->reply);
    memset(r, 0, sizeof *r);
    dlock__call_reqs(&call, r, 1, true);
    dlock__fanout(op->set->conns, r, 1); /* node 0 alone */
    dlock__tally t = {0};
    if (dlock__tally_reply(&t, r, &op->set->conns[0], what, type)) {
        *out = r->reply;
        r->reply = NULL;
    } else {
        /* A command held behind a handshake that never finished was never sent; any
         * other failure may have come after the server ran it. */
        if (sent_maybe != NULL)
            *sent_maybe = !r->held && t.last_err != DLOCK_ERR_NOMEM;
        rc = dlock__err_set(e, t.last_err, "%s", r->detail);
    }
    dlock__call_free(&call);
    return rc;
}

/* Send a script on the SKU's server, not awaited (a reserve that gives up). */
static void send_only(stock_op *op, enum dlock__script_id id, const stock_args *a)
{
    dlock__call call;
    dlock__err ignored;
    bool mask[DLOCK_SERVERS_MAX] = {true};
    if (format_call(op, id, a, &call, &ignored) != DLOCK_OK)
        return; /* the waiter's place lapses, a reservation's lease runs out */
    dlock__round_send(op->c, op->set, &call, mask);
    dlock__call_free(&call);
}

/* The integers of an array reply, at least n of them, into v[]; false (with a detail
 * and DLOCK_ERR_PROTOCOL) for another shape. */
static bool reply_ints(const stock_op *op, const redisReply *r, const char *what, long long *v,
                       size_t n, size_t *got, dlock__err *e)
{
    bool ok = r->elements >= n && r->elements <= 8;
    for (size_t i = 0; ok && i < r->elements; i++) {
        ok = r->element[i]->type == REDIS_REPLY_INTEGER;
        if (ok)
            v[i] = r->element[i]->integer;
    }
    if (!ok) {
        dlock__err_set(e, DLOCK_ERR_PROTOCOL, "%s: %s: unexpected reply shape",
                       op->c->nodes[0].addr.display, what);
        return false;
    }
    if (got != NULL)
        *got = r->elements;
    return true;
}

/* ---- set, add, status ------------------------------------------------------------ */

static int update(dlock_client *c, const char *sku, const char *mode, int64_t value,
                  dlock_stock_info *out, dlock__err *e)
{
    stock_op op;
    int rc = op_begin(&op, c, sku, e);
    if (rc != DLOCK_OK) {
        op_end(&op);
        return rc;
    }
    char v[24], max[24];
    snprintf(v, sizeof v, "%lld", (long long)value);
    snprintf(max, sizeof max, "%lld", (long long)DLOCK_STOCK_QTY_MAX);
    stock_args a;
    args_init(&a, &op);
    args_add(&a, "");
    args_add(&a, mode);
    args_add(&a, v);
    args_add(&a, max);
    redisReply *r;
    long long x[8];
    if ((rc = run(&op, DLOCK_SCRIPT_STOCK_UPDATE, &a, "stock", REDIS_REPLY_ARRAY, &r, NULL, e)) !=
        DLOCK_OK) {
        op_end(&op);
        return rc;
    }
    if (!reply_ints(&op, r, "stock", x, 6, NULL, e)) {
        rc = DLOCK_ERR_PROTOCOL;
    } else if (x[0] == 1) {
        if (out != NULL) {
            memset(out, 0, sizeof *out);
            out->stock = x[1];
            out->sold = x[2];
            out->reserved = x[3];
            out->available = x[1] - x[2] - x[3];
            out->reservations = x[4];
            out->waiters = x[5];
        }
    } else if (x[0] == 0 && strcmp(mode, "set") == 0) {
        rc = dlock__err_set(e, DLOCK_ERR_INVALID,
                            "refused: %s has %lld units sold and %lld reserved, so its stock "
                            "cannot be set to %lld",
                            sku, x[2], x[3], (long long)value);
    } else if (x[0] == 0) {
        rc = dlock__err_set(e, DLOCK_ERR_INVALID,
                            "refused: %s has only %lld units available (stock %lld, sold %lld, "
                            "reserved %lld): %lld cannot be taken away",
                            sku, x[1] - x[2] - x[3], x[1], x[2], x[3], -(long long)value);
    } else {
        rc = dlock__err_set(e, DLOCK_ERR_INVALID,
                            "refused: the stock of %s (%lld) cannot grow past %lld units", sku,
                            x[1], (long long)DLOCK_STOCK_QTY_MAX);
    }
    freeReplyObject(r);
    op_end(&op);
    return rc;
}

int dlock_stock_set(dlock_client *c, const char *sku, int64_t qty, dlock_stock_info *out)
{
    dlock__err e;
    if (qty < 0 || qty > DLOCK_STOCK_QTY_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "stock %lld is outside [0, %lld]", (long long)qty,
                           (long long)DLOCK_STOCK_QTY_MAX);
    int rc = update(c, sku, "set", qty, out, &e);
    return dlock__err_raise(&e, rc);
}

int dlock_stock_add(dlock_client *c, const char *sku, int64_t delta, dlock_stock_info *out)
{
    dlock__err e;
    if (delta == 0)
        return dlock__fail(DLOCK_ERR_INVALID, "delta 0 adds nothing");
    if (delta < -DLOCK_STOCK_QTY_MAX || delta > DLOCK_STOCK_QTY_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "delta %lld is outside [-%lld, %lld]",
                           (long long)delta, (long long)DLOCK_STOCK_QTY_MAX,
                           (long long)DLOCK_STOCK_QTY_MAX);
    int rc = update(c, sku, "add", delta, out, &e);
    return dlock__err_raise(&e, rc);
}

int dlock_stock_status(dlock_client *c, const char *sku, dlock_stock_info *out)
{
    dlock__err e;
    if (out == NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "out is NULL");
    memset(out, 0, sizeof *out);
    int rc = update(c, sku, "get", 0, out, &e);
    return dlock__err_raise(&e, rc);
}

/* ---- commit, cancel, extend ------------------------------------------------------ */

static int end_reservation(dlock_client *c, const char *sku, const char *id, const char *mode,
                           int64_t ms, dlock__err *e)
{
    stock_op op;
    int rc = check_id(id, e);
    if (rc != DLOCK_OK)
        return rc;
    if ((rc = op_begin(&op, c, sku, e)) != DLOCK_OK) {
        op_end(&op);
        return rc;
    }
    char v[24];
    snprintf(v, sizeof v, "%lld", (long long)ms);
    stock_args a;
    args_init(&a, &op);
    args_add(&a, id);
    args_add(&a, mode);
    args_add(&a, v);
    redisReply *r;
    rc = run(&op, DLOCK_SCRIPT_STOCK_END, &a, mode, REDIS_REPLY_INTEGER, &r, NULL, e);
    if (rc == DLOCK_OK) {
        long long x = r->integer;
        if (x == 1 || x == 2)
            rc = DLOCK_OK;
        else if (x == 0)
            rc = dlock__err_set(e, DLOCK_ERR_LOST,
                                "%s: no such reservation of %s (unknown, canceled, or its lease "
                                "ran out and its units went back)",
                                mode, sku);
        else if (x == -1)
            rc = dlock__err_set(e, DLOCK_ERR_LOST,
                                "%s: the reservation was committed: its units are sold", mode);
        else
            rc = dlock__err_set(e, DLOCK_ERR_PROTOCOL, "%s: %s: unexpected reply %lld",
                                c->nodes[0].addr.display, mode, x);
        freeReplyObject(r);
    }
    op_end(&op);
    return rc;
}

int dlock_stock_commit(dlock_client *c, const char *sku, const char *id)
{
    dlock__err e;
    memset(&e, 0, sizeof e);
    int rc = end_reservation(c, sku, id, "commit", DLOCK_STOCK_COMMIT_RETENTION_MS, &e);
    return dlock__err_raise(&e, rc);
}

int dlock_stock_cancel(dlock_client *c, const char *sku, const char *id)
{
    dlock__err e;
    memset(&e, 0, sizeof e);
    int rc = end_reservation(c, sku, id, "cancel", 0, &e);
    return dlock__err_raise(&e, rc);
}

int dlock_stock_extend(dlock_client *c, const char *sku, const char *id, int64_t lease_ms)
{
    dlock__err e;
    memset(&e, 0, sizeof e);
    int rc = dlock__check_ttl(lease_ms, "lease_ms", &e);
    if (rc == DLOCK_OK)
        rc = end_reservation(c, sku, id, "extend", lease_ms, &e);
    return dlock__err_raise(&e, rc);
}

/* ---- reserve --------------------------------------------------------------------- */

static int check_reserve_opts(const dlock_reserve_opts *o, int64_t *lease_ms, int64_t *wait_ms,
                              dlock__err *e)
{
    static const dlock_reserve_opts defaults = {0};
    if (o == NULL)
        o = &defaults;
    for (size_t i = 0; i < sizeof o->reserved / sizeof *o->reserved; i++)
        if (o->reserved[i] != 0)
            return dlock__err_set(e, DLOCK_ERR_INVALID, "dlock_reserve_opts.reserved must be zero");
    if (o->reserved32 != 0)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "dlock_reserve_opts.reserved32 must be zero");
    *lease_ms = o->lease_ms ? o->lease_ms : DLOCK_STOCK_LEASE_DEFAULT_MS;
    int rc = dlock__check_ttl(*lease_ms, "lease_ms", e);
    if (rc != DLOCK_OK)
        return rc;
    *wait_ms = o->wait_ms;
    return dlock__check_wait(o->wait_ms, o->cancel_fd, e);
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
    args_init(a, op);
    args_add(a, q->id);
    args_add(a, q->qty_s);
    args_add(a, q->lease_s);
    args_add(a, q->queued ? "1" : "0");
    args_add(a, chan);
    args_add(a, q->wttl_s);
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
    int rc =
        run(op, DLOCK_SCRIPT_STOCK_RESERVE, &a, "reserve", REDIS_REPLY_ARRAY, &r, sent_maybe, e);
    if (rc != DLOCK_OK)
        return rc;
    if (!reply_ints(op, r, "reserve", x, 2, &n, e)) {
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
 * holds no connection. */
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
        args_init(&a, &r->op);
        args_add(&a, r->q.id);
        args_add(&a, "leave");
        args_add(&a, "0");
        send_only(&r->op, DLOCK_SCRIPT_STOCK_END, &a);
    }
    r->base.done = true;
}

static int reserve_step(dlock_pending *base, dlock_lock **out, dlock__err *e)
{
    (void)out; /* a reservation's result is its id */
    reservation *r = (reservation *)base;
    dlock_client *c = r->op.c;
    /* Parked: a step before the due time without a wake-up is early, and changes
     * nothing. */
    if (r->parked && !(r->w != NULL && base->fd >= 0 && dlock__wait_woken(r->w)) &&
        dlock__now_us() < base->due_us)
        return dlock__pending_again(e);
    r->parked = false;
    if ((r->op.set = dlock__connset_get(c)) == NULL) {
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
            dlock__wait_join(c, r->q.id, false, &r->w) == DLOCK_OK) {
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
        dlock__connset_put(c, r->op.set);
        r->op.set = NULL;
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
    op_end(&r->op);
    free(r->q.sku);
    free(r);
}

/* dlock_stock_reserve's checks, and a reserve ready for its first step (no I/O). */
static int reserve_start(dlock_client *c, const char *sku, int64_t qty,
                         const dlock_reserve_opts *opts, dlock_pending **out, dlock__err *e)
{
    reservation *r = dlock__calloc(1, sizeof *r);
    if (r == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    r->base.step = reserve_step;
    r->base.destroy = reserve_destroy;
    r->base.fd = -1;
    r->base.reservation = true;
    int64_t lease_ms = 0, wait_ms = 0;
    int rc = op_begin(&r->op, c, sku, e);
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
    if (wait_ms != 0 && dlock__wait_join(c, r->q.id, true, &r->w) == DLOCK_OK)
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
        return dlock__fail(DLOCK_ERR_INVALID, "id is NULL (it receives the reservation id)");
    id[0] = '\0';
    dlock_pending *p;
    int rc = reserve_start(c, sku, qty, opts, &p, &e);
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    rc = dlock__pending_run(p, opts ? opts->cancel_fd : 0, NULL, &e);
    if (rc == DLOCK_OK)
        memcpy(id, p->id, DLOCK_TOKEN_LEN + 1);
    dlock_pending_free(p);
    return dlock__err_raise(&e, rc);
}

int dlock_stock_reserve_start(dlock_client *c, const char *sku, int64_t qty,
                              const dlock_reserve_opts *opts, dlock_pending **out)
{
    dlock__err e;
    if (out == NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "out is NULL");
    *out = NULL;
    return dlock__err_raise(&e, reserve_start(c, sku, qty, opts, out, &e));
}
