/*
 * slot.c: a scheduled job's slots (dlock_slot_claim). A job that a fleet's cron starts
 * on every host runs once per slot: the holder of the job's lock claims the slot the
 * servers' clock is in, and a slot that was claimed already is refused.
 *
 * Why the servers' clock: the hosts' clocks differ, and a host whose clock is a few
 * seconds late would otherwise see the slot before the boundary and claim the slot
 * that already ran, or one whose cron fires late would claim the next. The servers
 * are the one clock every host asks. With N > 1 servers, each may tell another time;
 * the median of those that still hold the caller's token is the slot's clock (and the
 * time the claim records): of three clocks or more, one wrong clock cannot move it past
 * the others (of two, the earlier counts).
 *
 * Why two rounds: the slot must be one number for all servers, and a server that
 * computed its own from its clock could disagree with another near a boundary. So the
 * first round reads each server's clock and record (SLOT_READ), the caller decides the
 * slot, and the second writes it (SLOT_CLAIM) on a quorum, each write checked against
 * the lock's token. Two holders cannot run the rounds at once (they hold the lock),
 * and any two quorums meet, so a claim recorded on a quorum is seen by every later
 * read of a quorum; and a server whose record holds the slot already (a claim that
 * reached it but not a quorum) refuses the claim however many others accept it. A
 * record is a hash beside the lock's keys (keys.c), kept two
 * periods and a minute: past the end of its slot by any clock that is less than a
 * period and a minute off.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How long a record outlives its claim beyond two periods (the clocks' disagreement). */
#define KEEP_EXTRA_MS 60000

/* The public struct's size is part of the ABI (its reserved words are for growth). */
_Static_assert(sizeof(void *) != 8 || sizeof(dlock_slot) == 568, "dlock_slot changed size");

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* A bulk string as a number of ms; -1 when empty or not one. */
static int64_t ms_of(const redisReply *r)
{
    if (r->type != REDIS_REPLY_STRING || r->len == 0)
        return -1;
    char *end;
    long long v = strtoll(r->str, &end, 10);
    /* Up to 2^53 (ms for 285,000 years; s times 1000 cannot overflow): a larger value is
     * not a clock or a record of ours. */
    return end == r->str + r->len && v >= 0 && v <= (INT64_C(1) << 53) ? v : -1;
}

const char *dlock__utc_text(int64_t ms, char buf[32])
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    if (gmtime_r(&s, &tm) == NULL || strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, 32, "%lld ms", (long long)ms);
    return buf;
}

int dlock__slot_refused(const dlock_slot *out, dlock__err *e)
{
    char slot[32], last[32], at[32];
    const char *by = out->last_by[0] ? out->last_by : "an unknown holder";
    dlock__utc_text(out->start_ms, slot);
    if (out->last_at_ms < 0)
        return dlock__err_set(e, DLOCK_ERR_BUSY,
                              "slot %s: a server holds a claim of it or of a later slot that "
                              "the first round did not see",
                              slot);
    dlock__utc_text(out->last_at_ms, at);
    if (out->last_ms == out->start_ms)
        return dlock__err_set(e, DLOCK_ERR_BUSY, "slot %s was claimed already, at %s by %s", slot,
                              at, by);
    return dlock__err_set(e, DLOCK_ERR_BUSY,
                          "slot %s is older than the last one claimed, %s (at %s by %s)", slot,
                          dlock__utc_text(out->last_ms, last), at, by);
}

/* The first round: each server's clock and record. Fills out (the slot, the latest
 * record) and *now_ms (the median clock) and returns DLOCK_OK when a quorum still holds
 * l's token. */
static int read_slot(dlock_lock *l, const dlock__keys *k, int64_t period_ms, dlock_slot *out,
                     int64_t *now_ms, dlock__err *e)
{
    dlock_client *c = l->client;
    const char *args[] = {k->lock, k->slot, l->token};
    const size_t lens[] = {k->lock_len, k->slot_len, DLOCK_TOKEN_LEN};
    const dlock__script_args sa = {DLOCK_SCRIPT_SLOT_READ, 2, 3, args, lens};
    dlock__script_round s;
    int rc = dlock__script_run(c, &sa, &s, e);
    dlock__round *rd = &s.rd;
    int64_t now[DLOCK_SERVERS_MAX];
    dlock__tally t = {0};
    for (int i = 0; rc == DLOCK_OK && i < c->n; i++) {
        dlock__req *r = &rd->reqs[i];
        if (!dlock__tally_reply(&t, r, &rd->set->conns[i], "slot read", REDIS_REPLY_ARRAY))
            continue;
        const redisReply *rep = r->reply;
        bool shaped = rep->elements == 6 && rep->element[0]->type == REDIS_REPLY_INTEGER;
        for (size_t j = 1; shaped && j < 6; j++)
            shaped = rep->element[j]->type == REDIS_REPLY_STRING;
        int64_t sec = shaped ? ms_of(rep->element[1]) : -1,
                us = shaped ? ms_of(rep->element[2]) : -1;
        if (sec < 0 || us < 0) {
            dlock__err_set(&r->why, 0, "%s: slot read: unexpected reply shape",
                           rd->set->conns[i].node->addr.display);
            dlock__tally_failure(&t, r, DLOCK_ERR_PROTOCOL);
            continue;
        }
        if (rep->element[0]->integer == 1)
            now[t.yes++] = sec * 1000 + us / 1000;
        else
            t.no++;
        int64_t slot = ms_of(rep->element[3]);
        if (slot > out->last_ms) {
            out->last_ms = slot;
            out->last_at_ms = ms_of(rep->element[4]);
            dlock__copy_text(out->last_by, sizeof out->last_by, rep->element[5]->str,
                             rep->element[5]->len);
        }
    }
    if (rc == DLOCK_OK && t.yes < c->quorum) {
        if (t.no > c->n - c->quorum) {
            dlock__lock_lost(l);
            rc = dlock__err_set(e, DLOCK_ERR_LOST, "the lock is not held with this token");
        } else {
            rc = dlock__tally_undecided(c, &t, rd->reqs, e);
        }
    }
    if (rc == DLOCK_OK) {
        qsort(now, (size_t)t.yes, sizeof now[0], cmp_i64);
        *now_ms = now[(t.yes - 1) / 2];
        out->start_ms = *now_ms - *now_ms % period_ms;
    }
    dlock__script_run_end(c, &s);
    return rc;
}

/* The second round: the claim at now_ms, written on a quorum. A server whose record
 * already holds this slot or a later one refuses it, even when a quorum accepted: that
 * record is a claim the read did not see (its server did not answer, or forgot it and
 * learned it again), and a slot runs at most once. */
static int write_slot(dlock_lock *l, const dlock__keys *k, int64_t period_ms, int64_t now_ms,
                      dlock_slot *out, dlock__err *e)
{
    dlock_client *c = l->client;
    char slot[24], at[24], keep[24];
    snprintf(slot, sizeof slot, "%lld", (long long)out->start_ms);
    snprintf(at, sizeof at, "%lld", (long long)now_ms);
    snprintf(keep, sizeof keep, "%lld", (long long)(2 * period_ms + KEEP_EXTRA_MS));
    const char *args[] = {k->lock, k->slot, l->token, slot, at, c->holder, keep};
    const size_t lens[] = {k->lock_len, k->slot_len,       DLOCK_TOKEN_LEN, strlen(slot),
                           strlen(at),  strlen(c->holder), strlen(keep)};
    const dlock__script_args sa = {DLOCK_SCRIPT_SLOT_CLAIM, 2, 7, args, lens};
    dlock__script_round s;
    int rc = dlock__script_run(c, &sa, &s, e);
    dlock__round *rd = &s.rd;
    dlock__tally t = {0};
    int lost = 0, taken = 0;
    for (int i = 0; rc == DLOCK_OK && i < c->n; i++) {
        long long v;
        if (!dlock__tally_int(&t, &rd->reqs[i], &rd->set->conns[i], "slot claim", &v))
            continue;
        if (v == 1) {
            t.yes++;
        } else if (v == 0 || v == 2) {
            t.no++;
            lost += v == 0;
            taken += v == 2;
        } else {
            dlock__err_set(&rd->reqs[i].why, 0, "%s: slot claim: unexpected reply %lld",
                           rd->set->conns[i].node->addr.display, v);
            dlock__tally_failure(&t, &rd->reqs[i], DLOCK_ERR_PROTOCOL);
        }
    }
    if (rc == DLOCK_OK && taken > 0) {
        out->last_ms = out->start_ms;
        out->last_at_ms = -1;
        out->last_by[0] = '\0';
        rc = dlock__slot_refused(out, e);
    } else if (rc == DLOCK_OK && t.yes < c->quorum) {
        if (lost > c->n - c->quorum) {
            dlock__lock_lost(l);
            rc = dlock__err_set(e, DLOCK_ERR_LOST, "the lock is not held with this token");
        } else {
            rc = dlock__tally_undecided(c, &t, rd->reqs, e);
        }
    }
    dlock__script_run_end(c, &s);
    return rc;
}

int dlock_slot_claim(dlock_lock *l, int64_t period_ms, dlock_slot *out)
{
    dlock__err e;
    int rc = dlock__lock_enter(l, &e);
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    if (out == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "out is NULL");
    memset(out, 0, sizeof *out);
    out->start_ms = out->last_ms = out->last_at_ms = -1;
    if (period_ms < DLOCK_SLOT_PERIOD_MIN_MS || period_ms > DLOCK_SLOT_PERIOD_MAX_MS)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "period %lld ms out of range (%d ms to %lld ms)",
                            (long long)period_ms, DLOCK_SLOT_PERIOD_MIN_MS,
                            (long long)DLOCK_SLOT_PERIOD_MAX_MS);
    if (l->shared)
        return dlock__raise(&e, DLOCK_ERR_INVALID,
                            "a slot is claimed by an exclusive holder, not by "
                            "a shared holder or a semaphore permit");
    return dlock__err_raise(&e, l->client->backend->slot_claim(l, period_ms, out, &e));
}

int dlock__redis_slot_claim(dlock_lock *l, int64_t period_ms, dlock_slot *out, dlock__err *e)
{
    if (l->lost)
        return dlock__err_set(e, DLOCK_ERR_LOST, "this handle already found the lock lost");
    dlock__keys k;
    int rc =
        dlock__keys_make(l->client->prefix, l->client->prefix_len, l->name, l->name_len, &k, e);
    int64_t now_ms = 0;
    if (rc == DLOCK_OK)
        rc = read_slot(l, &k, period_ms, out, &now_ms, e);
    if (rc == DLOCK_OK)
        rc = out->last_ms >= out->start_ms ? dlock__slot_refused(out, e)
                                           : write_slot(l, &k, period_ms, now_ms, out, e);
    free(k.buf);
    return rc;
}
