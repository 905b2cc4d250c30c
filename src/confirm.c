/*
 * confirm.c: the confirmation of a lock taken on its grant's message (acquire.c,
 * docs/waiting.md "Starting on the grant"): our own lease, asked for as the section
 * starts and read by the next call on the handle.
 *
 * A waiter that starts on a handoff's message holds the lock for the handoff's lease,
 * counted from before its token existed. Its own lease is a CONFIRM (scripts_queue.c) sent
 * on the connection set its acquisition used, awaited by nobody at first: the round
 * stays in the handle, and the handle's next release, extension or check reads the
 * reply (it came long before, as a rule) and moves the validity on to what the reply
 * proves; so does dlock_remaining_ms, waiting for it if need be (at most the rest of a
 * per-node timeout: it comes within a round trip). Until then the handle's validity is
 * the handoff's: never more than is known. A handle freed unread gives the round up,
 * its reply left for the set's next round to discard. Each keeps a set meanwhile, so a
 * client holds at most DLOCK_CONFIRMS_MAX of them.
 */
#include "internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dlock__confirm {
    dlock__round *rd; /* its round, once started; the set it holds */
    dlock__keys k;
    char ttl[24];
    int64_t ttl_ms;
    const char *args[3]; /* borrowed by call for its EVAL form */
    size_t lens[3];
    dlock__call call;
};

dlock__confirm *dlock__confirm_new(dlock_client *c, const dlock_lock *l, int64_t ttl_ms)
{
    if (atomic_fetch_add(&c->confirms, 1) >= DLOCK_CONFIRMS_MAX) {
        atomic_fetch_sub(&c->confirms, 1);
        return NULL;
    }
    dlock__confirm *cf = dlock__calloc(1, sizeof *cf);
    dlock__err ignored;
    if (cf == NULL) {
        atomic_fetch_sub(&c->confirms, 1);
        return NULL;
    }
    cf->ttl_ms = ttl_ms;
    int tlen = snprintf(cf->ttl, sizeof cf->ttl, "%lld", (long long)ttl_ms);
    if (dlock__keys_make(c->prefix, c->prefix_len, l->name, l->name_len, &cf->k, &ignored) !=
        DLOCK_OK) {
        dlock__confirm_free(c, cf);
        return NULL;
    }
    const char *args[] = {cf->k.lock, l->token, cf->ttl};
    const size_t lens[] = {cf->k.lock_len, DLOCK_TOKEN_LEN, (size_t)tlen};
    memcpy(cf->args, args, sizeof args);
    memcpy(cf->lens, lens, sizeof lens);
    if (dlock__call_format(&c->scripts, DLOCK_SCRIPT_CONFIRM, 1, 3, cf->args, cf->lens, &cf->call,
                           &ignored) != DLOCK_OK ||
        dlock__call_as_eval(&cf->call) != DLOCK_OK) {
        dlock__confirm_free(c, cf);
        return NULL;
    }
    return cf;
}

void dlock__confirm_start(dlock_client *c, dlock__confirm *cf, dlock__round *rd)
{
    /* On every node: one that did not hand us the lock answers 0, and counts for
     * nothing. */
    cf->rd = rd;
    dlock__round_start(c, rd, &cf->call, dlock__vote_one, NULL);
}

void dlock__confirm_free(dlock_client *c, dlock__confirm *cf)
{
    if (cf == NULL)
        return;
    if (cf->rd != NULL) {
        dlock__flight_drop(&cf->rd->flight);
        dlock__round_end(c, cf->rd);
        free(cf->rd);
    }
    dlock__call_free(&cf->call);
    free(cf->k.buf);
    free(cf);
    atomic_fetch_sub(&c->confirms, 1);
}

bool dlock__confirm_settle(dlock_lock *l, bool nowait)
{
    dlock__confirm *cf = atomic_exchange(&l->confirm, NULL);
    if (cf == NULL)
        return true;
    dlock_client *c = l->client;
    dlock__round *rd = cf->rd;
    /* What came in already counts, however late it is read: the round's deadline
     * passed long ago when the section was long. */
    dlock__flight_take_arrived(&rd->flight);
    if (!dlock__round_wait(rd, nowait)) {
        atomic_store(&l->confirm, cf);
        return false;
    }
    int yes = 0;
    for (int i = 0; i < c->n; i++) {
        const redisReply *r = rd->reqs[i].reply;
        yes += r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    }
    if (yes >= c->quorum) {
        /* Counted from the round's start: the lease began at the earliest then. */
        int64_t v = dlock__round_validity_us(c, cf->ttl_ms * 1000, rd->start_us, rd->end_us);
        int64_t until = rd->end_us + v, was = l->valid_until_us;
        while (v > 0 && until > was &&
               !atomic_compare_exchange_weak(&l->valid_until_us, &was, until))
            ;
    }
    dlock__confirm_free(c, cf);
    return true;
}

int64_t dlock__redis_remaining_ms(const dlock_lock *l)
{
    /* The public call takes the handle as const, since it changes nothing the caller
     * sees but what the handle knows of its lease; the handle itself was never made
     * const (every one is dlock__lock_new's), so writing through it is sound. The reply
     * comes within a round trip of the section's start, so only a call made at once can
     * wait for it. Not in a forked child: the connection is the parent's. */
    if (!dlock__client_forked(l->client))
        dlock__confirm_settle((dlock_lock *)(uintptr_t)l, false);
    return dlock__lock_valid_ms(l);
}
