/*
 * break.c: an operator's break of a stuck lock (dlock_break), and the record it leaves
 * (dlock_break_last).
 *
 * A break is one BREAK script (scripts.c) sent to every server: whoever holds the name
 * there is evicted, the fence counter raised, the break recorded in P{name}:break
 * (keys.c) and the queue served. Unlike a release it takes no token, so it is not a
 * vote: every server that answers is broken, and a quorum of answers is needed for the
 * result to say what the name's state is. The evicted holder finds out on its next
 * call that reads its token (extend, check, renewal, release), as for any lost lock.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A break is recorded for a day: long enough for the operator who comes to look at a
 * failed job the next morning, short enough that names do not pile up records. */
#define BREAK_RECORD_TTL_MS (24LL * 3600 * 1000)
/* reason and by, recorded: bounded so that a record fits dlock_break_info. */
#define BREAK_TEXT_MAX 500

/* The public structs' sizes are part of the ABI (their reserved words are for growth). */
_Static_assert(sizeof(void *) != 8 || sizeof(dlock_break_info) == 2104,
               "dlock_break_info changed size");
_Static_assert(sizeof(void *) != 8 || sizeof(dlock_break_opts) == 56,
               "dlock_break_opts changed size");

/* Enter a break call: the client, the name, the backend's gate (dlock_break_last's
 * with last), the name's keys into k (free k->buf). */
static int enter(dlock_client *c, const char *name, bool last, dlock_break_info *out,
                 dlock__keys *k, dlock__err *e)
{
    k->buf = NULL;
    int rc = dlock__client_enter(c, e);
    if (rc != DLOCK_OK)
        return rc;
    if (out == NULL)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "out is NULL");
    memset(out, 0, sizeof *out);
    if ((rc = dlock__check_name(name, e)) != DLOCK_OK)
        return rc;
    if ((rc = c->backend->gate(c, last ? DLOCK_GATE_BREAK_LAST : DLOCK_GATE_BREAK, e)) != DLOCK_OK)
        return rc;
    return dlock__keys_make(c->prefix, c->prefix_len, name, strlen(name), k, e);
}

/* A quorum of servers answered, or the round's unavailability error. */
static int answered(const dlock_client *c, const dlock__tally *t, const dlock__round *rd,
                    dlock__err *e)
{
    if (c->n - t->failed >= c->quorum)
        return DLOCK_OK;
    return dlock__tally_undecided(c, t, rd->reqs, e);
}

/* The fenced register at key raised to fence, on a quorum (as dlock_fenced_set writes). */
static int raise_register(dlock_client *c, const char *key, uint64_t fence, dlock__err *e)
{
    char f[24];
    int flen = snprintf(f, sizeof f, "%llu", (unsigned long long)fence);
    const char *args[] = {key, f};
    const size_t lens[] = {strlen(key), (size_t)flen};
    const dlock__script_args sa = {DLOCK_SCRIPT_FENCE_RAISE, 1, 2, args, lens};
    int64_t start;
    return dlock__round_yes_no(c, &sa, "fence raise", DLOCK_ERR_PROTOCOL, "refused", &start, e);
}

int dlock_break(dlock_client *c, const char *name, const dlock_break_opts *opts,
                dlock_break_info *out)
{
    dlock__err e;
    dlock__keys k;
    int rc = enter(c, name, false, out, &k, &e);
    const char *reason = opts != NULL && opts->reason != NULL ? opts->reason : "";
    const char *by = opts != NULL && opts->by != NULL ? opts->by : NULL;
    const char *fence_key = opts != NULL ? opts->fence_key : NULL;
    if (rc == DLOCK_OK && fence_key != NULL && fence_key[0] == '\0')
        rc = dlock__err_set(&e, DLOCK_ERR_INVALID, "fence_key is empty");
    if (rc == DLOCK_OK &&
        (strlen(reason) > BREAK_TEXT_MAX || (by != NULL && strlen(by) > BREAK_TEXT_MAX)))
        rc = dlock__err_set(&e, DLOCK_ERR_INVALID, "the reason or by is longer than %d bytes",
                            BREAK_TEXT_MAX);
    if (rc != DLOCK_OK) {
        free(k.buf);
        return dlock__err_raise(&e, rc);
    }
    if (by == NULL)
        by = c->holder;
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%lld", BREAK_RECORD_TTL_MS);
    const char *args[] = {k.lock,   k.fence, k.queue, k.holders,    k.info, k.brk,
                          k.leader, by,      reason,  c->retention, ttl};
    const size_t lens[] = {
        k.lock_len,   k.fence_len, k.queue_len,    k.holders_len,        k.info_len, k.brk_len,
        k.leader_len, strlen(by),  strlen(reason), strlen(c->retention), strlen(ttl)};
    dlock__script_round b;
    dlock__tally t = {0};
    const dlock__script_args sa = {DLOCK_SCRIPT_BREAK, 7, 11, args, lens};
    if ((rc = dlock__script_run(c, &sa, &b, &e)) == DLOCK_OK) {
        for (int i = 0; i < c->n; i++) {
            dlock__req *r = &b.rd.reqs[i];
            if (!dlock__tally_reply(&t, r, &b.rd.set->conns[i], "break", REDIS_REPLY_ARRAY))
                continue;
            const redisReply *rep = r->reply;
            bool took = rep->elements == 4 && rep->element[0]->type == REDIS_REPLY_INTEGER &&
                        rep->element[0]->integer == 1 &&
                        rep->element[1]->type == REDIS_REPLY_STRING &&
                        rep->element[2]->type == REDIS_REPLY_STRING &&
                        rep->element[3]->type == REDIS_REPLY_INTEGER;
            if (!took && (rep->elements != 1 || rep->element[0]->type != REDIS_REPLY_INTEGER)) {
                dlock__err_set(&r->why, 0, "%s: break: unexpected reply shape",
                               b.rd.set->conns[i].node->addr.display);
                dlock__tally_failure(&t, r, DLOCK_ERR_PROTOCOL);
                continue;
            }
            if (!took)
                continue;
            uint64_t f = strtoull(rep->element[2]->str, NULL, 10);
            if (!out->broken)
                dlock__copy_text(out->holder, sizeof out->holder, rep->element[1]->str,
                                 rep->element[1]->len);
            out->broken = 1;
            if (f > out->fence)
                out->fence = f;
            if (rep->element[3]->integer > out->at_ms)
                out->at_ms = rep->element[3]->integer;
        }
        rc = answered(c, &t, &b.rd, &e);
        dlock__copy_text(out->by, sizeof out->by, by, strlen(by));
        dlock__copy_text(out->reason, sizeof out->reason, reason, strlen(reason));
    }
    dlock__script_run_end(c, &b);
    free(k.buf);
    if (rc == DLOCK_OK && out->broken && fence_key != NULL)
        rc = raise_register(c, fence_key, out->fence, &e);
    return dlock__err_raise(&e, rc);
}

/* A record's field (HGETALL's flat list of fields and values), or NULL. */
static const redisReply *field(const redisReply *rep, const char *name)
{
    for (size_t i = 0; i + 1 < rep->elements; i += 2)
        if (rep->element[i]->type == REDIS_REPLY_STRING &&
            rep->element[i + 1]->type == REDIS_REPLY_STRING &&
            strcmp(rep->element[i]->str, name) == 0)
            return rep->element[i + 1];
    return NULL;
}

int dlock_break_last(dlock_client *c, const char *name, dlock_break_info *out)
{
    dlock__err e;
    dlock__keys k;
    int rc = enter(c, name, true, out, &k, &e);
    if (rc == DLOCK_ERR_AGAIN)
        rc = DLOCK_OK; /* the backend's locks are never broken, so have no record */
    if (rc != DLOCK_OK || k.buf == NULL) {
        free(k.buf);
        return dlock__err_raise(&e, rc);
    }
    const char *args[] = {k.brk};
    const size_t lens[] = {k.brk_len};
    dlock__script_round b;
    dlock__tally t = {0};
    const dlock__script_args sa = {DLOCK_SCRIPT_BREAK_RECORD, 1, 1, args, lens};
    if ((rc = dlock__script_run(c, &sa, &b, &e)) == DLOCK_OK) {
        /* With several servers, the latest record any of them keeps. */
        for (int i = 0; i < c->n; i++) {
            dlock__req *r = &b.rd.reqs[i];
            if (!dlock__tally_reply(&t, r, &b.rd.set->conns[i], "break record", REDIS_REPLY_ARRAY))
                continue;
            const redisReply *rep = r->reply, *at = field(rep, "at_ms");
            const redisReply *f = field(rep, "fence"), *h = field(rep, "holder");
            const redisReply *by = field(rep, "by"), *why = field(rep, "reason");
            if (at == NULL || f == NULL || h == NULL || by == NULL || why == NULL)
                continue;
            int64_t when = strtoll(at->str, NULL, 10);
            if (out->broken && when <= out->at_ms)
                continue;
            out->broken = 1;
            out->at_ms = when;
            out->fence = strtoull(f->str, NULL, 10);
            dlock__copy_text(out->holder, sizeof out->holder, h->str, h->len);
            dlock__copy_text(out->by, sizeof out->by, by->str, by->len);
            dlock__copy_text(out->reason, sizeof out->reason, why->str, why->len);
        }
        rc = answered(c, &t, &b.rd, &e);
    }
    dlock__script_run_end(c, &b);
    free(k.buf);
    return dlock__err_raise(&e, rc);
}
