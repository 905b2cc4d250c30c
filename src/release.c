/*
 * release.c: dlock_release, in one call or in steps (dlock_release_start).
 *
 * A release is one round of the RELEASE script (scripts.c), token-checked and voted on
 * by a quorum: DLOCK_ERR_LOST when so many nodes no longer hold our token that no
 * quorum can. The renewal of the lock stops first (a renewal landing after the release
 * would take the lock again for nobody), and the handle is freed at the end, whatever
 * the outcome.
 *
 * In steps, like an acquisition: a blocking step runs the round to its end; a nowait
 * step sends it, and later ones take the replies, the round kept in flight between
 * them. A nowait step hands back (DLOCK_ERR_WOULDBLOCK) what would block: a client
 * whose servers must be looked up, no connection set left for a round in flight, and
 * a renewal of this very lock in flight, which the renewal's stop must wait for.
 */
#include "internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A release in steps: the handle, and the call, whose arguments it keeps. */
typedef struct release {
    dlock_pending base;
    dlock_lock *l; /* the pending's: freed with it */
    dlock__keys k;
    char fence[24];
    dlock__heir heir; /* the waiter of ours the release may hand the lock to */
    /* A retake (linger.c): the pass bound, the new lease and how long the hold has
     * lasted, as the script's last three arguments; pass_us 0: a plain release. */
    int64_t pass_us;
    char pass[24], ttl[24], held[24];
    bool kept;             /* the retake kept the lock: the handle is the caller's again */
    int64_t kept_left_us;  /* its reply: how much longer the queue's head may be passed over */
    int64_t kept_start_us; /* when its round began */
    const char *args[18];
    size_t lens[18];
    dlock__call call;
    dlock__step_round sr;
    bool expired; /* the lease had run out before the release */
    bool told;    /* the client's waiters for the name were told how it ended */
} release;

bool dlock__release_has_heirs(const dlock_client *c)
{
    return c->n == 1 || c->fence_mode != DLOCK_FENCE_STRICT;
}

/* The call for l's release. With N > 1 the release raises every node's fence counter
 * to this lock's fence (the default fence mode, docs/guarantees.md), so a later quorum,
 * which meets at least one of these nodes, hands out a larger fence. With N = 1 the
 * counter is already there. A waiter of our own client for the same name is the heir:
 * if it heads the queue, the release hands it its own lease and a fence, and the reply
 * confirms it (tell_waiters); one that waits behind its own client, queued on no
 * server, is queued first with its ticket. Not with strict fences and N > 1, whose
 * fence must be raised on a quorum in a round of its own. */
static int format_call(release *r, dlock__err *e)
{
    dlock_lock *l = r->l;
    dlock_client *c = l->client;
    int rc = dlock__keys_make(c->prefix, c->prefix_len, l->name, l->name_len, &r->k, e);
    if (rc != DLOCK_OK)
        return rc;
    strcpy(r->fence, "0");
    if (c->n > 1)
        snprintf(r->fence, sizeof r->fence, "%llu", (unsigned long long)l->fence);
    if (dlock__release_has_heirs(c))
        dlock__wait_heir(c, r->k.lock, r->k.lock_len, &r->heir);
    const char *heir = r->heir.member != NULL ? r->heir.member : "";
    size_t heir_len = r->heir.member != NULL ? r->heir.member_len : 0;
    size_t fence_len = strlen(r->fence), retention_len = strlen(c->retention);
    size_t ttl_len = strlen(r->heir.ttl), ticket_len = strlen(r->heir.ticket);
    /* The sixth key, a leader's record (elect.c): the release of a leader's lock retires
     * it and tells the observers that no one leads. Only where the lock may be a
     * leader's: a leader's handle, or one adopted by token (dlock release, dlockd's
     * UNLOCK); a plain handle's release saves the record's read. */
    bool record = l->leading || l->adopted;
    int nkeys = DLOCK_KEYS_ALL + record, n = DLOCK_KEYS_ALL;
    dlock__keys_all(&r->k, r->args, r->lens);
    if (record) {
        r->args[n] = r->k.leader;
        r->lens[n++] = r->k.leader_len;
    }
    const char *argv[] = {l->token, r->fence, "",          c->retention,  "1",
                          "0",      heir,     r->heir.ttl, r->heir.ticket};
    const size_t lens[] = {DLOCK_TOKEN_LEN, fence_len, 0,         retention_len, 1, 1,
                           heir_len,        ttl_len,   ticket_len};
    memcpy(r->args + n, argv, sizeof argv);
    memcpy(r->lens + n, lens, sizeof lens);
    n += (int)(sizeof argv / sizeof argv[0]);
    if (r->pass_us > 0) {
        r->lens[n] = (size_t)snprintf(r->pass, sizeof r->pass, "%lld", (long long)r->pass_us);
        r->args[n++] = r->pass;
        r->lens[n] = strlen(r->ttl);
        r->args[n++] = r->ttl;
        int64_t held = dlock__now_us() - r->l->held_since_us;
        r->lens[n] =
            (size_t)snprintf(r->held, sizeof r->held, "%lld", (long long)(held > 0 ? held : 0));
        r->args[n++] = r->held;
    }
    return dlock__call_format(&c->scripts, DLOCK_SCRIPT_RELEASE, nkeys, n, r->args, r->lens,
                              &r->call, e);
}

/* The nodes whose reply is a fence, which handed the lock to the heir, into h (with the
 * highest fence); returned, the nodes whose reply never came. */
static uint32_t heir_handoff(const dlock_client *c, const dlock__round *rd, dlock__handoff *h)
{
    int64_t fence_max = dlock__wallclock_us() + DLOCK_FENCE_AHEAD_MAX_US;
    uint32_t unknown = 0;
    for (int i = 0; i < c->n; i++) {
        const dlock__req *q = &rd->reqs[i];
        const redisReply *v = q->err == DLOCK_OK ? q->reply : NULL;
        if (v == NULL) {
            unknown |= (uint32_t)(q->cmd != NULL && !q->held) << i;
        } else if (v->type == REDIS_REPLY_INTEGER && v->integer > 1 && v->integer <= fence_max &&
                   dlock__conn_votes(&rd->set->conns[i], rd->end_us)) {
            h->nodes |= 1u << i;
            if ((uint64_t)v->integer > h->fence)
                h->fence = (uint64_t)v->integer;
        }
    }
    return unknown;
}

/* How the release ended, told to the client's waiters for the name (rd NULL: it ended
 * before its round did). The nodes whose reply is a fence handed the lock to our heir
 * with its own lease: the heir takes the lock without an attempt if they are a quorum.
 * A node whose reply never came may have handed it too, unannounced: the heir attempts
 * then, and at the latest its next refresh finds the lock its own. The waiters that
 * wait behind their own client wait on behind the heir, or attempt. */
static void tell_waiters(dlock_client *c, release *r, const dlock__round *rd)
{
    if (r->told)
        return;
    r->told = true;
    /* Before the waiters are told: one that comes later must not wait behind this
     * handle, which nobody will tell of the release again (dlock__wait_behind_own). */
    pthread_mutex_lock(&c->mu);
    r->l->released = true;
    pthread_mutex_unlock(&c->mu);
    dlock__handoff h = {0};
    uint32_t unknown = 0;
    if (rd != NULL && r->heir.member != NULL) {
        h.start_us = rd->start_us;
        h.end_us = rd->end_us;
        unknown = heir_handoff(c, rd, &h);
    } else if (r->sr.sent && r->heir.member != NULL) {
        unknown = (1u << c->n) - 1; /* given up in flight: any node may have handed it */
    }
    dlock__wait_released(c, r->k.lock, r->k.lock_len, r->heir.member ? r->heir.token : NULL, &h,
                         unknown);
}

static int release_step(dlock_pending *base, dlock_lock **out, bool nowait, dlock__err *e)
{
    (void)out; /* a release hands out nothing */
    release *r = (release *)base;
    dlock_client *c = r->l->client;
    if (!r->sr.sent) {
        if (nowait && !c->nowait_ok)
            return dlock__pending_would_block(e);
        if (!dlock__watchdog_remove(c, r->l, !nowait) || !dlock__confirm_settle(r->l, nowait))
            return dlock__pending_would_block(e);
        int rc = dlock__step_round_begin(c, &r->sr, nowait, e);
        if (rc != DLOCK_OK)
            return rc;
        r->expired = r->l->valid_until_us != 0 && dlock__now_us() >= r->l->valid_until_us;
        dlock__round_start(c, r->sr.rd, &r->call, dlock__vote_one, NULL);
        r->sr.sent = true;
    }
    if (!dlock__step_round_over(c, &r->sr, &r->base, nowait))
        return dlock__pending_again(e);
    dlock__round *rd = r->sr.rd;
    const redisReply *v = rd->reqs[0].err == DLOCK_OK ? rd->reqs[0].reply : NULL;
    if (r->pass_us > 0 && c->n == 1 && v != NULL && v->type == REDIS_REPLY_INTEGER &&
        v->integer < 0) {
        /* Kept: nothing was released, so no waiter of ours is told anything. */
        r->kept = r->told = true;
        r->kept_left_us = -1 - v->integer;
        r->kept_start_us = rd->start_us;
        dlock__step_round_end(c, &r->sr);
        return DLOCK_OK;
    }
    tell_waiters(c, r, rd);
    int rc = dlock__round_yes_no_outcome(c, rd, "release", DLOCK_ERR_LOST, dlock__not_ours,
                                         r->heir.member != NULL ? LLONG_MAX : 1, e);
    if (rc == DLOCK_OK && r->expired)
        rc = dlock__err_set(e, DLOCK_ERR_LOST,
                            "released, but the lease had run out before the release: work "
                            "after that was not protected");
    dlock__step_round_end(c, &r->sr);
    return rc;
}

static void release_destroy(dlock_pending *base)
{
    release *r = (release *)base;
    dlock_client *c = r->l->client;
    /* A release given up in flight was sent: its replies are left to a later round. */
    if (r->base.in_flight)
        dlock__flight_drop(&r->sr.rd->flight);
    /* Ended before its round did (given up, or failed to start): the waiters that wait
     * behind their own client attempt, and an heir it may have handed the lock to finds
     * it so. */
    if (r->k.buf != NULL)
        tell_waiters(c, r, NULL);
    dlock__step_round_free(c, &r->sr);
    dlock__call_free(&r->call);
    free(r->heir.member);
    free(r->k.buf);
    if (!r->kept)
        dlock__lock_free(r->l);
    free(r);
}

/* A release of l in steps, no I/O yet, the handle the pending's from now on; pass_us >
 * 0 makes it a retake with a lease of ttl_ms. When it cannot be made, l is freed (its
 * lease ends by itself) and the error returned. */
static int release_new(dlock_lock *l, int64_t ttl_ms, int64_t pass_us, release **out, dlock__err *e)
{
    release *r = dlock__pending_new(sizeof *r, release_step, release_destroy);
    if (r == NULL) {
        dlock__lock_free(l);
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    }
    r->base.lockless = true;
    r->l = l;
    r->pass_us = pass_us;
    snprintf(r->ttl, sizeof r->ttl, "%lld", (long long)ttl_ms);
    dlock__step_round_init(&r->sr, &r->base);
    int rc = format_call(r, e);
    if (rc != DLOCK_OK) {
        release_destroy(&r->base);
        return rc;
    }
    r->base.due_us = dlock__now_us();
    *out = r;
    return DLOCK_OK;
}

/* dlock__backend_redis's release_start. */
int dlock__redis_release_start(dlock_lock *l, dlock_pending **out, dlock__err *e)
{
    release *r = NULL;
    int rc = release_new(l, 0, 0, &r, e);
    if (rc == DLOCK_OK)
        *out = &r->base;
    return rc;
}

bool dlock__redis_retake(dlock_lock *l, int64_t ttl_ms, int64_t pass_us)
{
    release *r = NULL;
    dlock__err ignored;
    /* Not made (out of memory): l is freed as a release that cannot start frees it. */
    if (release_new(l, ttl_ms, pass_us, &r, &ignored) != DLOCK_OK)
        return false;
    /* Whatever a failed retake says (the lock ran out while it lingered, a server is
     * unreachable), its caller asks for the lock as if it had not lingered. */
    bool kept = release_step(&r->base, NULL, false, &ignored) == DLOCK_OK && r->kept;
    int64_t validity = 0;
    if (kept) {
        int64_t start = r->kept_start_us, now = dlock__now_us();
        validity = dlock__round_validity_us(l->client, ttl_ms * 1000, start, now);
        l->valid_until_us = now + validity;
        l->ttl_ms = ttl_ms;
        /* The head's time passed over grows from when the server looked, which was
         * after start; a waiter that came after the look is looked for a quarter of the
         * bound later. */
        int64_t fresh = r->kept_left_us;
        l->fresh_until_us = start + (fresh < pass_us / 4 ? fresh : pass_us / 4);
    }
    release_destroy(&r->base);
    if (kept && validity <= 0) {
        /* Kept, but the round used up the lease: let it go, as a release would. */
        dlock__lock_release(l, &ignored);
        return false;
    }
    return kept;
}

int dlock__lock_release(dlock_lock *l, dlock__err *e)
{
    return l->client->backend->release(l, e);
}

/* dlock__backend_redis's release: its steps, run at once (a release never waits). */
int dlock__redis_release(dlock_lock *l, dlock__err *e)
{
    dlock_pending *p = NULL;
    int rc = dlock__redis_release_start(l, &p, e);
    if (rc != DLOCK_OK)
        return rc;
    rc = release_step(p, NULL, false, e);
    release_destroy(p);
    return rc;
}

int dlock_release(dlock_lock *l)
{
    dlock__err e;
    int rc = dlock__lock_enter(l, &e);
    if (rc != DLOCK_OK) {
        /* "Frees l, whatever it returns": a handle inherited across fork() is freed
         * without touching the servers (the lock is the parent's). */
        if (l != NULL && l->magic == DLOCK_LOCK_MAGIC)
            dlock__lock_free(l);
        return dlock__err_raise(&e, rc);
    }
    if (l->linger_us > 0 && dlock__linger_put(l))
        return dlock__err_raise(&e, DLOCK_OK);
    return dlock__err_raise(&e, dlock__lock_release(l, &e));
}

int dlock_release_start(dlock_lock *l, dlock_pending **out)
{
    dlock__err e;
    if (out != NULL)
        *out = NULL;
    int rc = dlock__lock_enter(l, &e);
    if (rc == DLOCK_OK && out == NULL)
        rc = dlock__err_set(&e, DLOCK_ERR_INVALID, "out is NULL");
    if (rc != DLOCK_OK) {
        /* As dlock_release: the handle is freed whatever the result. */
        if (l != NULL && l->magic == DLOCK_LOCK_MAGIC)
            dlock__lock_free(l);
        return dlock__err_raise(&e, rc);
    }
    return dlock__err_raise(&e, l->client->backend->release_start(l, out, &e));
}
