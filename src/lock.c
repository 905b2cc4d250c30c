/*
 * lock.c: what is done with a lock once held, besides its release (release.c) and its
 * extension (extend.c): the check whether it still holds, in one call or in steps, on
 * the views of one INSPECT round (views.c), and what a lock found lost becomes.
 */
#include "views.h"

#include <stdlib.h>
#include <string.h>

const char dlock__not_ours[] =
    "the lock is not held with this token (expired, released or taken by another owner)";

void dlock__lock_lost(dlock_lock *l)
{
    dlock__watchdog_remove(l->client, l, true);
    dlock__lock_mark_lost(l);
}

/* ---- check ----------------------------------------------------------------- */

int dlock_check(dlock_lock *l)
{
    dlock__err e;
    int rc = dlock__lock_enter(l, &e);
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    return dlock__err_raise(&e, l->client->backend->check(l, &e));
}

/* What the views say of l's lock: DLOCK_OK with its validity updated, DLOCK_ERR_LOST
 * (*lost: the caller marks the handle lost), or the error of a round that could not
 * tell. */
static int check_verdict(dlock_lock *l, const dlock__views *v, bool *lost, dlock__err *e)
{
    dlock_client *c = l->client;
    long long pttl = dlock__quorum_pttl(c, v, l->token);
    int answered = c->n - v->t.failed, ours = 0;
    for (int i = 0; i < c->n; i++)
        ours += dlock__view_lease(&v->node[i], l->token) >= 0;
    *lost = false;
    if (pttl >= 0) {
        /* The servers' remaining lease, less drift, counted from the round's start.
         * PTTL is the server's word: no lease of ours is longer than DLOCK_TTL_MAX_MS. */
        if (pttl > DLOCK_TTL_MAX_MS)
            pttl = DLOCK_TTL_MAX_MS;
        int64_t validity = dlock__validity_us(pttl * 1000, 0, c->drift_factor, c->drift_min_us);
        l->valid_until_us = v->start_us + (validity > 0 ? validity : 0);
        return DLOCK_OK;
    }
    /* Nodes that answered without our token: if they leave no room for a quorum, the
     * lock is lost; otherwise too few answered to tell. */
    if (answered - ours > c->n - c->quorum) {
        *lost = true;
        return dlock__err_set(e, DLOCK_ERR_LOST, "the lock is not held with this token");
    }
    *e = v->undecided;
    return v->undecided_rc;
}

int dlock__redis_check(dlock_lock *l, dlock__err *e)
{
    if (l->lost)
        return dlock__err_set(e, DLOCK_ERR_LOST, "this handle already found the lock lost");
    dlock__views v;
    bool lost = false;
    int rc = dlock__views_ask(l->client, l->name, l->name_len, l->token, &v, e);
    if (rc == DLOCK_OK)
        rc = check_verdict(l, &v, &lost, e);
    dlock__views_free(&v);
    if (rc == DLOCK_ERR_LOST && lost)
        dlock__lock_lost(l);
    return rc;
}

/* A check in steps: the handle (the caller's), the round, and the verdict once the
 * replies are in. */
typedef struct checking {
    dlock_pending base;
    dlock_lock *l;
    dlock__viewing w;
    bool decided; /* rc and why hold the verdict */
    bool lost;    /* the handle is still to be marked lost */
    int rc;
    dlock__err why;
} checking;

static int check_step(dlock_pending *base, dlock_lock **out, bool nowait, dlock__err *e)
{
    (void)out; /* a check hands out nothing */
    checking *x = (checking *)base;
    dlock_lock *l = x->l;
    dlock_client *c = l->client;
    if (!x->decided) {
        if (!dlock__confirm_settle(l, nowait)) {
            x->base.fd = -1;
            x->base.due_us = dlock__now_us();
            return dlock__pending_would_block(e);
        }
        dlock__views v;
        int rc = dlock__viewing_step(c, &x->w, &x->base, nowait, &v, e);
        if (rc != DLOCK_OK)
            return rc;
        x->rc = check_verdict(l, &v, &x->lost, &x->why);
        dlock__views_free(&v);
        x->decided = true;
    }
    /* A lock found lost is renewed no more: its renewal stops first, which waits for a
     * renewal of it in flight (a step that would block). */
    if (x->lost) {
        if (!dlock__watchdog_remove(c, l, !nowait)) {
            x->base.fd = -1;
            x->base.due_us = dlock__now_us();
            return dlock__pending_would_block(e);
        }
        dlock__lock_mark_lost(l);
        x->lost = false;
    }
    *e = x->why;
    return x->rc;
}

static void check_destroy(dlock_pending *base)
{
    checking *x = (checking *)base;
    dlock__viewing_free(x->l->client, &x->w, &x->base);
    free(x);
}

/* A check of l in steps, no I/O yet (dlock__backend_redis's check_start). */
int dlock__redis_check_start(dlock_lock *l, dlock_pending **out, dlock__err *e)
{
    if (l->lost)
        return dlock__err_set(e, DLOCK_ERR_LOST, "this handle already found the lock lost");
    checking *x = dlock__pending_new(sizeof *x, check_step, check_destroy);
    if (x == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    x->base.lockless = true;
    x->l = l;
    int rc = dlock__viewing_init(l->client, &x->w, &x->base, l->name, l->name_len, l->token, e);
    if (rc != DLOCK_OK) {
        check_destroy(&x->base);
        return rc;
    }
    x->base.due_us = dlock__now_us();
    *out = &x->base;
    return DLOCK_OK;
}

int dlock_check_start(dlock_lock *l, dlock_pending **out)
{
    dlock__err e;
    if (out != NULL)
        *out = NULL;
    int rc = dlock__lock_enter(l, &e);
    if (rc == DLOCK_OK && out == NULL)
        rc = dlock__err_set(&e, DLOCK_ERR_INVALID, "out is NULL");
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    return dlock__err_raise(&e, l->client->backend->check_start(l, out, &e));
}
