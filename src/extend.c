/*
 * extend.c: dlock_extend, in one call or in steps (dlock_extend_start).
 *
 * An extension is one round of the EXTEND script (scripts.c), token-checked and voted
 * on by a quorum: DLOCK_ERR_LOST when so many nodes no longer hold our token that no
 * quorum can, and the handle is then lost. Before the round, the lock's renewal takes
 * the new ttl (a renewal formatted with the old one could land after the extension and
 * shorten the lease again). The new lease runs from when the round started, at the
 * latest.
 *
 * In steps, like a release: a blocking step runs the round to its end; a nowait step
 * sends it, and later ones take the replies. A nowait step hands back
 * (DLOCK_ERR_WOULDBLOCK) what would block: a client whose servers must be looked up,
 * no connection set left for a round in flight, and a renewal of this very lock in
 * flight, which the change of its ttl must wait for.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>

/* An extension in steps: the handle (the caller's), and the call, whose arguments it
 * keeps. */
typedef struct extension {
    dlock_pending base;
    dlock_lock *l;
    int64_t ttl_ms;
    dlock__keys k;
    char ttl[24];
    const char *args[6];
    size_t lens[6];
    dlock__call call;
    dlock__step_round sr;
} extension;

static int extend_step(dlock_pending *base, dlock_lock **out, bool nowait, dlock__err *e)
{
    (void)out; /* an extension hands out nothing */
    extension *x = (extension *)base;
    dlock_lock *l = x->l;
    dlock_client *c = l->client;
    if (!x->sr.sent) {
        if (nowait && !c->nowait_ok)
            return dlock__pending_would_block(e);
        /* Before the round: no renewal with the old ttl may land after it. */
        if (!dlock__watchdog_set_ttl(c, l, x->ttl_ms, !nowait) || !dlock__confirm_settle(l, nowait))
            return dlock__pending_would_block(e);
        int rc = dlock__step_round_begin(c, &x->sr, nowait, e);
        if (rc != DLOCK_OK)
            return rc;
        dlock__round_start(c, x->sr.rd, &x->call, dlock__vote_one, NULL);
        x->sr.sent = true;
    }
    if (!dlock__step_round_over(c, &x->sr, &x->base, nowait))
        return dlock__pending_again(e);
    dlock__round *rd = x->sr.rd;
    int64_t start = rd->start_us;
    int rc = dlock__round_yes_no_outcome(c, rd, "extend", DLOCK_ERR_LOST, dlock__not_ours, 1, e);
    dlock__step_round_end(c, &x->sr);
    if (rc == DLOCK_OK) {
        int64_t now = dlock__now_us();
        int64_t validity = dlock__round_validity_us(c, x->ttl_ms * 1000, start, now);
        if (validity <= 0)
            return dlock__err_set(e, DLOCK_ERR_TIMEOUT,
                                  "extended, but the round used up the new lease");
        l->valid_until_us = now + validity;
    } else if (rc == DLOCK_ERR_LOST) {
        dlock__lock_lost(l);
    }
    return rc;
}

static void extend_destroy(dlock_pending *base)
{
    extension *x = (extension *)base;
    /* An extension given up in flight was sent: its replies are left to a later round.
     * The lease it may have set is the handle's to find out (dlock_check). */
    if (x->base.in_flight)
        dlock__flight_drop(&x->sr.rd->flight);
    dlock__step_round_free(x->l->client, &x->sr);
    dlock__call_free(&x->call);
    free(x->k.buf);
    free(x);
}

/* An extension of l in steps, no I/O yet (dlock__backend_redis's extend_start). */
int dlock__redis_extend_start(dlock_lock *l, int64_t ttl_ms, dlock_pending **out, dlock__err *e)
{
    if (l->lost)
        return dlock__err_set(e, DLOCK_ERR_LOST, "this handle already found the lock lost");
    extension *x = dlock__pending_new(sizeof *x, extend_step, extend_destroy);
    if (x == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    dlock_client *c = l->client;
    x->base.lockless = true;
    x->l = l;
    x->ttl_ms = ttl_ms;
    dlock__step_round_init(&x->sr, &x->base);
    int rc = dlock__keys_make(c->prefix, c->prefix_len, l->name, l->name_len, &x->k, e);
    if (rc != DLOCK_OK) {
        extend_destroy(&x->base);
        return rc;
    }
    int tlen = snprintf(x->ttl, sizeof x->ttl, "%lld", (long long)ttl_ms);
    /* A leader's record (elect.c) keeps the lock's lease, and its observers hear of it:
     * the record is the fourth key then. */
    const dlock__keys *k = &x->k;
    const char *keys[4] = {k->lock, k->holders, k->info, k->leader};
    size_t klens[4] = {k->lock_len, k->holders_len, k->info_len, k->leader_len};
    int nkeys = l->leading ? 4 : 3, n = 0;
    for (; n < nkeys; n++) {
        x->args[n] = keys[n];
        x->lens[n] = klens[n];
    }
    x->args[n] = l->token;
    x->lens[n++] = DLOCK_TOKEN_LEN;
    x->args[n] = x->ttl;
    x->lens[n++] = (size_t)tlen;
    rc = dlock__call_format(&c->scripts, DLOCK_SCRIPT_EXTEND, nkeys, n, x->args, x->lens, &x->call,
                            e);
    if (rc != DLOCK_OK) {
        extend_destroy(&x->base);
        return rc;
    }
    x->base.due_us = dlock__now_us();
    *out = &x->base;
    return DLOCK_OK;
}

/* dlock__backend_redis's extend: its steps, run at once. */
int dlock__redis_extend(dlock_lock *l, int64_t ttl_ms, dlock__err *e)
{
    dlock_pending *p;
    int rc = dlock__redis_extend_start(l, ttl_ms, &p, e);
    if (rc != DLOCK_OK)
        return rc;
    rc = extend_step(p, NULL, false, e);
    extend_destroy(p);
    return rc;
}

int dlock_extend(dlock_lock *l, int64_t ttl_ms)
{
    dlock__err e;
    int rc = dlock__lock_enter(l, &e);
    if (rc != DLOCK_OK || (rc = dlock__check_ttl(ttl_ms, "ttl_ms", &e)) != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    return dlock__err_raise(&e, l->client->backend->extend(l, ttl_ms, &e));
}

int dlock_extend_start(dlock_lock *l, int64_t ttl_ms, dlock_pending **out)
{
    dlock__err e;
    if (out != NULL)
        *out = NULL;
    int rc = dlock__lock_enter(l, &e);
    if (rc == DLOCK_OK && out == NULL)
        rc = dlock__err_set(&e, DLOCK_ERR_INVALID, "out is NULL");
    if (rc == DLOCK_OK)
        rc = dlock__check_ttl(ttl_ms, "ttl_ms", &e);
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    return dlock__err_raise(&e, l->client->backend->extend_start(l, ttl_ms, out, &e));
}
