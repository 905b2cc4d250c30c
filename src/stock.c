/*
 * stock.c: a counted stock per SKU with leased reservations (dlock_stock_*): set and
 * add stock, reserve units for a lease, commit (sold), cancel (back), extend, status.
 * The scripts that change the counts, the key layout they name and the invariant they
 * keep are in stock_scripts.c; this file formats their calls, sends them to the SKU's
 * server and decodes the replies; stock_reserve.c is the reserve, which waits (stock.h:
 * what the two share).
 *
 * Where it lives: with N > 1 servers, on the first of the list only: a fan-out of one
 * request, to node 0, on a connection set from the client's pool (a commit, a cancel
 * and an extension: a round on node 0 alone, in steps, on the pipes of a pipelining
 * client). A counter needs
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
#include "stock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- one call on the SKU's server ------------------------------------------------ */

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
int dlock__stock_op_begin(stock_op *op, dlock_client *c, const char *sku, dlock__err *e)
{
    op->c = c;
    op->k.buf = NULL;
    op->set = NULL;
    op->req.reply = NULL;
    int rc = dlock__client_enter(c, e);
    if (rc != DLOCK_OK || (rc = dlock__check_key_name(sku, "sku", e)) != DLOCK_OK)
        return rc;
    /* A count that a crashed buyer's lease returns needs a clock and scripts that only
     * a server runs: a backend without them refuses. */
    if ((rc = c->backend->gate(c, DLOCK_GATE_STOCK, e)) != DLOCK_OK)
        return rc;
    return keys_make(c, sku, &op->k, e);
}

void dlock__stock_op_end(stock_op *op)
{
    freeReplyObject(op->req.reply);
    op->req.reply = NULL;
    if (op->set != NULL)
        dlock__connset_put(op->c, op->set);
    op->set = NULL;
    free(op->k.buf);
    op->k.buf = NULL;
}

void dlock__stock_args_init(stock_args *a, const stock_op *op)
{
    for (int i = 0; i < STOCK_NKEYS; i++) {
        a->arg[i] = op->k.key[i];
        a->len[i] = op->k.len[i];
    }
    a->n = STOCK_NKEYS;
}

void dlock__stock_args_add(stock_args *a, const char *s)
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
int dlock__stock_run(stock_op *op, enum dlock__script_id id, const stock_args *a, const char *what,
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
        rc = dlock__err_set(e, t.last_err, "%s", r->why.msg);
    }
    dlock__call_free(&call);
    return rc;
}

/* Send a script on the SKU's server, not awaited (a reserve that gives up). */
void dlock__stock_send_only(stock_op *op, enum dlock__script_id id, const stock_args *a)
{
    dlock__call call;
    dlock__err ignored;
    bool mask[DLOCK_SERVERS_MAX] = {true};
    if (format_call(op, id, a, &call, &ignored) != DLOCK_OK)
        return; /* the waiter's place lapses, a reservation's lease runs out */
    dlock__round_send(op->c, op->set, &call, mask);
    dlock__call_free(&call);
}

/* The integers of an array reply, at least n of them, into v[]; false (with why in e
 * and DLOCK_ERR_PROTOCOL) for another shape. */
bool dlock__stock_reply_ints(const stock_op *op, const redisReply *r, const char *what,
                             long long *v, size_t n, size_t *got, dlock__err *e)
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
    int rc = dlock__stock_op_begin(&op, c, sku, e);
    if (rc == DLOCK_OK && (op.set = dlock__connset_get(c)) == NULL)
        rc = dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    if (rc != DLOCK_OK) {
        dlock__stock_op_end(&op);
        return rc;
    }
    char v[24], max[24];
    snprintf(v, sizeof v, "%lld", (long long)value);
    snprintf(max, sizeof max, "%lld", (long long)DLOCK_STOCK_QTY_MAX);
    stock_args a;
    dlock__stock_args_init(&a, &op);
    dlock__stock_args_add(&a, "");
    dlock__stock_args_add(&a, mode);
    dlock__stock_args_add(&a, v);
    dlock__stock_args_add(&a, max);
    redisReply *r;
    long long x[8];
    if ((rc = dlock__stock_run(&op, DLOCK_SCRIPT_STOCK_UPDATE, &a, "stock", REDIS_REPLY_ARRAY, &r,
                               NULL, e)) != DLOCK_OK) {
        dlock__stock_op_end(&op);
        return rc;
    }
    if (!dlock__stock_reply_ints(&op, r, "stock", x, 6, NULL, e)) {
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
    dlock__stock_op_end(&op);
    return rc;
}

int dlock_stock_set(dlock_client *c, const char *sku, int64_t qty, dlock_stock_info *out)
{
    dlock__err e;
    if (qty < 0 || qty > DLOCK_STOCK_QTY_MAX)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "stock %lld is outside [0, %lld]",
                            (long long)qty, (long long)DLOCK_STOCK_QTY_MAX);
    int rc = update(c, sku, "set", qty, out, &e);
    return dlock__err_raise(&e, rc);
}

int dlock_stock_add(dlock_client *c, const char *sku, int64_t delta, dlock_stock_info *out)
{
    dlock__err e;
    if (delta == 0)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "delta 0 adds nothing");
    if (delta < -DLOCK_STOCK_QTY_MAX || delta > DLOCK_STOCK_QTY_MAX)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "delta %lld is outside [-%lld, %lld]",
                            (long long)delta, (long long)DLOCK_STOCK_QTY_MAX,
                            (long long)DLOCK_STOCK_QTY_MAX);
    int rc = update(c, sku, "add", delta, out, &e);
    return dlock__err_raise(&e, rc);
}

int dlock_stock_status(dlock_client *c, const char *sku, dlock_stock_info *out)
{
    dlock__err e;
    if (out == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "out is NULL");
    memset(out, 0, sizeof *out);
    int rc = update(c, sku, "get", 0, out, &e);
    return dlock__err_raise(&e, rc);
}

/* ---- commit, cancel, extend ------------------------------------------------------ */

/* What STOCK_END's reply x means for mode. */
static int end_verdict(const dlock_client *c, const char *sku, const char *mode, long long x,
                       dlock__err *e)
{
    if (x == 1 || x == 2)
        return DLOCK_OK;
    if (x == 0)
        return dlock__err_set(e, DLOCK_ERR_LOST,
                              "%s: no such reservation of %s (unknown, canceled, or its lease "
                              "ran out and its units went back)",
                              mode, sku);
    if (x == -1)
        return dlock__err_set(e, DLOCK_ERR_LOST,
                              "%s: the reservation was committed: its units are sold", mode);
    return dlock__err_set(e, DLOCK_ERR_PROTOCOL, "%s: %s: unexpected reply %lld",
                          c->nodes[0].addr.display, mode, x);
}

/* A commit, a cancel or an extension in steps: one STOCK_END call on the SKU's server,
 * its round in flight between steps (on the pipes of a pipelining client). The
 * blocking calls are one blocking step of it. */
typedef struct stock_end {
    dlock_pending base;
    stock_op op; /* the SKU's keys; no set of its own (the round takes one) */
    char *sku;
    const char *mode;
    char id[DLOCK_TOKEN_LEN + 1];
    char ms[24];
    stock_args a; /* borrowed by the call's EVAL form */
    dlock__call call;
    dlock__step_round sr;
} stock_end;

static int end_step(dlock_pending *base, dlock_lock **out, bool nowait, dlock__err *e)
{
    (void)out; /* the result is the code alone */
    stock_end *x = (stock_end *)base;
    dlock_client *c = x->op.c;
    int rc = dlock__step_call(c, &x->sr, &x->call, true, base, nowait, e);
    if (rc != DLOCK_OK)
        return rc;
    dlock__req *r = &x->sr.rd->reqs[0];
    dlock__tally t = {0};
    if (dlock__tally_reply(&t, r, &x->sr.rd->set->conns[0], x->mode, REDIS_REPLY_INTEGER))
        rc = end_verdict(c, x->sku, x->mode, r->reply->integer, e);
    else
        rc = dlock__err_set(e, t.last_err, "%s", r->why.msg);
    dlock__step_round_end(c, &x->sr);
    return rc;
}

static void end_destroy(dlock_pending *base)
{
    stock_end *x = (stock_end *)base;
    /* Given up in flight: its reply (a read) is left to a later round. */
    if (x->base.in_flight)
        dlock__flight_drop(&x->sr.rd->flight);
    dlock__step_round_free(x->op.c, &x->sr);
    dlock__call_free(&x->call); /* formatted or zeroed */
    dlock__stock_op_end(&x->op);
    free(x->sku);
    free(x);
}

/* The checks of dlock_stock_commit (cancel, extend), and its call ready for the first
 * step (no I/O). */
static int end_start(dlock_client *c, const char *sku, const char *id, const char *mode, int64_t ms,
                     dlock_pending **out, dlock__err *e)
{
    int rc = check_id(id, e);
    if (rc != DLOCK_OK)
        return rc;
    stock_end *x = dlock__pending_new(sizeof *x, end_step, end_destroy);
    if (x == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    x->base.lockless = true;
    dlock__step_round_init(&x->sr, &x->base);
    rc = dlock__stock_op_begin(&x->op, c, sku, e); /* each round takes its connections */
    if (rc == DLOCK_OK && (x->sku = dlock__strdup(sku)) == NULL)
        rc = dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    if (rc == DLOCK_OK) {
        x->mode = mode;
        memcpy(x->id, id, sizeof x->id);
        snprintf(x->ms, sizeof x->ms, "%lld", (long long)ms);
        dlock__stock_args_init(&x->a, &x->op);
        dlock__stock_args_add(&x->a, x->id);
        dlock__stock_args_add(&x->a, mode);
        dlock__stock_args_add(&x->a, x->ms);
        rc = format_call(&x->op, DLOCK_SCRIPT_STOCK_END, &x->a, &x->call, e);
    }
    if (rc != DLOCK_OK) {
        end_destroy(&x->base);
        return rc;
    }
    x->base.due_us = dlock__now_us();
    *out = &x->base;
    return DLOCK_OK;
}

/* The blocking form: one blocking step. */
static int end_reservation(dlock_client *c, const char *sku, const char *id, const char *mode,
                           int64_t ms, dlock__err *e)
{
    dlock_pending *p;
    int rc = end_start(c, sku, id, mode, ms, &p, e);
    if (rc != DLOCK_OK)
        return rc;
    rc = end_step(p, NULL, false, e);
    end_destroy(p);
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

/* The start forms: out checked, then as their blocking calls. */
static int end_start_call(dlock_client *c, const char *sku, const char *id, const char *mode,
                          int64_t ms, dlock_pending **out)
{
    dlock__err e;
    memset(&e, 0, sizeof e);
    if (out == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "out is NULL");
    *out = NULL;
    int rc = strcmp(mode, "extend") == 0 ? dlock__check_ttl(ms, "lease_ms", &e) : DLOCK_OK;
    if (rc == DLOCK_OK)
        rc = end_start(c, sku, id, mode, ms, out, &e);
    return dlock__err_raise(&e, rc);
}

int dlock_stock_commit_start(dlock_client *c, const char *sku, const char *id, dlock_pending **out)
{
    return end_start_call(c, sku, id, "commit", DLOCK_STOCK_COMMIT_RETENTION_MS, out);
}

int dlock_stock_cancel_start(dlock_client *c, const char *sku, const char *id, dlock_pending **out)
{
    return end_start_call(c, sku, id, "cancel", 0, out);
}

int dlock_stock_extend_start(dlock_client *c, const char *sku, const char *id, int64_t lease_ms,
                             dlock_pending **out)
{
    return end_start_call(c, sku, id, "extend", lease_ms, out);
}
