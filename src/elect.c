/*
 * elect.c: leader election (dlock_elect, dlock_proclaim, dlock_resign, dlock_leader),
 * made of the lock and a record beside it.
 *
 * A leader is the holder of the exclusive lock `name`, taken as dlock_acquire takes
 * it (the wait queue, handoff without polling, fences) and renewed by the watchdog.
 * Its term is the lock's fence: every later acquisition's is larger, so a deposed
 * leader's writes can be refused by a resource that checks terms. What the lock does
 * not have is a value and a voice, which the record P{name}:leader (keys.c) gives:
 * a hash of the term, the seq of the proclamation (1 at election, one more for each
 * dlock_proclaim), the token and the value, written by a token-checked script on a
 * quorum and kept with the lock's lease. Each proclamation is published on the
 * record's channel, as is each renewal (RENEW, scripts.c) and each resignation, so
 * that observers (observe.c) follow the leadership without asking.
 *
 * The messages on the channel, which only this file and observe.c read:
 *   "T <term> <seq> <pttl> <n> <lock value, n bytes><value>"  a proclamation
 *   "R <token> <ttl>"                         a renewal (RENEW, EXTEND: scripts.c)
 *   "N <term> <seq>"                          the lock released or broken (retire)
 * A proclamation carries the lock's value ("<token> <holder>") so that an observer
 * has the holder without a read.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(void *) != 8 || sizeof(dlock_leader_info) == 1592,
               "dlock_leader_info changed size");
_Static_assert(sizeof(void *) != 8 || sizeof(dlock_elect_opts) == sizeof(dlock_opts) + 40,
               "dlock_elect_opts changed size");

/* A bulk string as a number; -1 when empty or not one. */
static long long num_of(const redisReply *r)
{
    if (r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 19)
        return -1;
    char *end;
    long long v = strtoll(r->str, &end, 10);
    return end == r->str + r->len && v >= 0 ? v : -1;
}

static int cmp_desc(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x < y) - (x > y);
}

int dlock__check_value(const char *value, dlock__err *e)
{
    if (value != NULL && strlen(value) > DLOCK_LEADER_VALUE_MAX)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "value of %zu bytes is longer than %d",
                              strlen(value), DLOCK_LEADER_VALUE_MAX);
    return DLOCK_OK;
}

void dlock__leader_holder(dlock_leader_info *info, const char *v, size_t len)
{
    size_t skip = len > DLOCK_TOKEN_LEN ? DLOCK_TOKEN_LEN + 1 : len;
    dlock__copy_text(info->holder, sizeof info->holder, v + skip, len - skip);
}

int dlock__leader_read(dlock_client *c, const dlock__keys *k, dlock__leader *out, dlock__err *e)
{
    memset(out, 0, sizeof *out);
    const char *args[] = {k->lock, k->leader};
    const size_t lens[] = {k->lock_len, k->leader_len};
    const dlock__script_args sa = {DLOCK_SCRIPT_LEADER, 2, 2, args, lens};
    dlock__script_round s;
    int rc = dlock__script_run(c, &sa, &s, e);
    dlock__tally t = {0};
    /* Each server's leader: the token its lock and its record agree on. */
    const redisReply *says[DLOCK_SERVERS_MAX] = {0};
    for (int i = 0; rc == DLOCK_OK && i < c->n; i++) {
        dlock__req *r = &s.rd.reqs[i];
        if (!dlock__tally_reply(&t, r, &s.rd.set->conns[i], "leader", REDIS_REPLY_ARRAY))
            continue;
        const redisReply *rep = r->reply;
        bool shaped = rep->elements == 6 && rep->element[1]->type == REDIS_REPLY_INTEGER;
        for (size_t j = 0; shaped && j < 6; j++)
            shaped = j == 1 || rep->element[j]->type == REDIS_REPLY_STRING;
        if (!shaped) {
            dlock__err_set(&r->why, 0, "%s: leader: unexpected reply shape",
                           s.rd.set->conns[i].node->addr.display);
            dlock__tally_failure(&t, r, DLOCK_ERR_PROTOCOL);
            continue;
        }
        t.yes++;
        const redisReply *v = rep->element[0], *tok = rep->element[4];
        if (v->len >= DLOCK_TOKEN_LEN && tok->len == DLOCK_TOKEN_LEN &&
            memcmp(v->str, tok->str, DLOCK_TOKEN_LEN) == 0 && num_of(rep->element[2]) > 0 &&
            num_of(rep->element[3]) > 0 && rep->element[1]->integer > 0)
            says[i] = rep;
    }
    if (rc == DLOCK_OK && t.yes < c->quorum)
        rc = dlock__tally_undecided(c, &t, s.rd.reqs, e);
    int64_t elapsed_ms = (dlock__now_us() - s.rd.start_us) / 1000;
    for (int i = 0; rc == DLOCK_OK && i < c->n && out->info.term == 0; i++) {
        if (says[i] == NULL)
            continue;
        long long pttl[DLOCK_SERVERS_MAX];
        int m = 0, best = i;
        for (int j = 0; j < c->n; j++) {
            if (says[j] == NULL ||
                memcmp(says[j]->element[4]->str, says[i]->element[4]->str, DLOCK_TOKEN_LEN) != 0)
                continue;
            pttl[m++] = says[j]->element[1]->integer;
            long long tj = num_of(says[j]->element[2]), tb = num_of(says[best]->element[2]);
            if (tj > tb ||
                (tj == tb && num_of(says[j]->element[3]) > num_of(says[best]->element[3])))
                best = j;
        }
        if (m < c->quorum)
            continue;
        qsort(pttl, (size_t)m, sizeof pttl[0], cmp_desc);
        const redisReply *b = says[best];
        out->info.term = (uint64_t)num_of(b->element[2]);
        out->seq = (uint64_t)num_of(b->element[3]);
        out->info.remaining_ms = pttl[c->quorum - 1] - elapsed_ms;
        if (out->info.remaining_ms < 0)
            out->info.remaining_ms = 0;
        dlock__copy_text(out->info.value, sizeof out->info.value, b->element[5]->str,
                         b->element[5]->len);
        dlock__leader_holder(&out->info, b->element[0]->str, b->element[0]->len);
        memcpy(out->token, b->element[4]->str, DLOCK_TOKEN_LEN);
    }
    dlock__script_run_end(c, &s);
    return rc;
}

/* Record and publish value as lead's proclamation number seq. */
static int proclaim(dlock_lock *l, const char *value, int64_t seq, dlock__err *e)
{
    dlock__keys k;
    int rc =
        dlock__keys_make(l->client->prefix, l->client->prefix_len, l->name, l->name_len, &k, e);
    if (rc != DLOCK_OK)
        return rc;
    char term[24], sq[24];
    snprintf(term, sizeof term, "%llu", (unsigned long long)l->fence);
    snprintf(sq, sizeof sq, "%lld", (long long)seq);
    const char *args[] = {k.lock, k.leader, l->token, term, sq, value};
    const size_t lens[] = {k.lock_len,   k.leader_len, DLOCK_TOKEN_LEN,
                           strlen(term), strlen(sq),   strlen(value)};
    const dlock__script_args sa = {DLOCK_SCRIPT_PROCLAIM, 2, 6, args, lens};
    int64_t start_us;
    rc = dlock__round_yes_no(l->client, &sa, "proclaim", DLOCK_ERR_LOST,
                             "the lock is not held with this token", &start_us, e);
    free(k.buf);
    return rc;
}

int dlock__election_enter(dlock_client *c, const char *name, const void *out, const char *what,
                          dlock__err *e)
{
    int rc = dlock__client_enter(c, e);
    if (rc == DLOCK_OK && out == NULL)
        rc = dlock__err_set(e, DLOCK_ERR_INVALID, "%s is NULL", what);
    if (rc == DLOCK_OK && name != NULL)
        rc = dlock__check_name(name, e);
    if (rc == DLOCK_OK)
        rc = c->backend->gate(c, DLOCK_GATE_ELECT, e);
    return rc;
}

/* The checks of a campaign, and the lock's options in *o (renewed only once the
 * record exists: auto_renew off; on_lost kept for then). */
static int campaign_prepare(dlock_client *c, const dlock_elect_opts *opts, const void *out,
                            const char *what, dlock_opts *o, dlock__err *e)
{
    int rc = dlock__election_enter(c, NULL, out, what, e);
    if (rc == DLOCK_OK && opts != NULL)
        rc = dlock__check_reserved(opts->reserved, 4, "dlock_elect_opts", e);
    if (rc == DLOCK_OK && opts != NULL && opts->lock.shared)
        rc = dlock__err_set(e, DLOCK_ERR_INVALID, "a leader holds its lock alone: shared is 0");
    if (rc == DLOCK_OK)
        rc = dlock__check_value(opts != NULL ? opts->value : NULL, e);
    memset(o, 0, sizeof *o);
    if (opts != NULL)
        *o = opts->lock;
    o->auto_renew = 0;
    o->on_lost = NULL;
    o->on_lost_user = NULL;
    return rc;
}

/* The lock l was won: announce value and give the lock to the renewal thread; or, when
 * that fails, retire what may have been published and give the lock back. */
static int crown(dlock_lock *l, const char *value, const dlock_elect_opts *opts, dlock__err *e)
{
    l->leading = true;
    l->proclaims = 1;
    int rc = proclaim(l, value != NULL ? value : "", 1, e);
    int64_t ttl = opts != NULL && opts->lock.ttl_ms != 0 ? opts->lock.ttl_ms : DLOCK_TTL_DEFAULT_MS;
    if (rc == DLOCK_OK)
        rc = dlock__watchdog_add(l->client, l, ttl, opts != NULL ? opts->lock.on_lost : NULL,
                                 opts != NULL ? opts->lock.on_lost_user : NULL, e);
    if (rc != DLOCK_OK) {
        /* The release retires a proclamation that reached some servers. */
        dlock__err ignored;
        dlock__lock_release(l, &ignored);
    }
    return rc;
}

int dlock_elect(dlock_client *c, const char *name, const dlock_elect_opts *opts, dlock_lock **lead)
{
    dlock__err e;
    if (lead != NULL)
        *lead = NULL;
    dlock_opts o;
    int rc = campaign_prepare(c, opts, lead, "lead", &o, &e);
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    dlock_lock *l;
    if ((rc = dlock_acquire(c, name, &o, &l)) != DLOCK_OK)
        return rc; /* its message is set */
    if ((rc = crown(l, opts != NULL ? opts->value : NULL, opts, &e)) == DLOCK_OK)
        *lead = l;
    return dlock__err_raise(&e, rc);
}

/* A campaign in steps: the acquisition's, then the crowning, a blocking step. */
typedef struct campaign {
    dlock_pending base;
    dlock_pending *acq;
    dlock_elect_opts opts; /* its value is value's */
    char *value;
    dlock_lock *won; /* the lock, once the acquisition gave it */
} campaign;

static int campaign_step(dlock_pending *base, dlock_lock **out, bool nowait, dlock__err *e)
{
    campaign *k = (campaign *)base;
    if (k->won == NULL) {
        /* The acquisition's round is the one a pipe's pump tells of: it tells whoever
         * the campaign's caller named (dlock_pending_notify). */
        k->acq->wk.fn = k->base.wk.fn;
        k->acq->wk.arg = k->base.wk.arg;
        int rc = k->acq->step(k->acq, &k->won, nowait, e);
        k->base.fd = k->acq->fd;
        k->base.wake_c = k->acq->wake_c;
        k->base.due_us = k->acq->due_us;
        k->base.in_flight = k->acq->in_flight;
        if (rc != DLOCK_OK)
            return rc;
        k->base.fd = -1;
        k->base.wake_c = NULL;
        k->base.in_flight = false;
    }
    if (nowait)
        return dlock__pending_would_block(e);
    dlock_lock *l = k->won;
    k->won = NULL;
    int rc = crown(l, k->opts.value, &k->opts, e);
    if (rc == DLOCK_OK)
        *out = l;
    return rc;
}

static void campaign_destroy(dlock_pending *base)
{
    campaign *k = (campaign *)base;
    if (k->won != NULL) {
        dlock__err ignored;
        dlock__lock_release(k->won, &ignored);
    }
    if (k->acq != NULL)
        k->acq->destroy(k->acq);
    free(k->value);
    free(k);
}

int dlock_elect_start(dlock_client *c, const char *name, const dlock_elect_opts *opts,
                      dlock_pending **out)
{
    dlock__err e;
    if (out == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "out is NULL");
    *out = NULL;
    dlock_opts o;
    int rc = campaign_prepare(c, opts, out, "out", &o, &e);
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    campaign *k = dlock__pending_new(sizeof *k, campaign_step, campaign_destroy);
    if (k != NULL && opts != NULL)
        k->opts = *opts;
    if (k == NULL || (k->value = dlock__strdup(opts != NULL && opts->value != NULL ? opts->value
                                                                                   : "")) == NULL) {
        free(k);
        return dlock__raise(&e, DLOCK_ERR_NOMEM, "out of memory");
    }
    if ((rc = dlock_acquire_start(c, name, &o, &k->acq)) != DLOCK_OK) {
        campaign_destroy(&k->base);
        return rc; /* its message is set */
    }
    k->opts.value = k->value;
    k->base.fd = k->acq->fd;
    k->base.wake_c = k->acq->wake_c;
    k->base.due_us = k->acq->due_us;
    *out = &k->base;
    return DLOCK_OK;
}

/* Enter a call on a leader's handle. */
static int leader_enter(dlock_lock *l, dlock__err *e)
{
    int rc = dlock__lock_enter(l, e);
    if (rc == DLOCK_OK && !l->leading)
        rc = dlock__err_set(e, DLOCK_ERR_INVALID, "not a leader's handle (dlock_elect)");
    if (rc == DLOCK_OK && l->lost)
        rc = dlock__err_set(e, DLOCK_ERR_LOST, "this handle already found the lock lost");
    return rc;
}

int dlock_proclaim(dlock_lock *l, const char *value)
{
    dlock__err e;
    int rc = leader_enter(l, &e);
    if (rc == DLOCK_OK)
        rc = dlock__check_value(value, &e);
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    rc = proclaim(l, value != NULL ? value : "", l->proclaims + 1, &e);
    /* A proclamation that reached some servers counts there: the next one's seq must be
     * larger whatever this one's outcome. */
    l->proclaims++;
    if (rc == DLOCK_ERR_LOST)
        dlock__lock_lost(l);
    return dlock__err_raise(&e, rc);
}

int dlock_resign(dlock_lock *l)
{
    /* The release of a leader's lock retires its record and tells its observers. */
    return dlock_release(l);
}

int dlock_leader(dlock_client *c, const char *name, dlock_leader_info *info)
{
    dlock__err e;
    if (info != NULL)
        memset(info, 0, sizeof *info);
    int rc = dlock__election_enter(c, name, info, "info", &e);
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    dlock__keys k;
    if ((rc = dlock__keys_make(c->prefix, c->prefix_len, name, strlen(name), &k, &e)) != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    dlock__leader got;
    rc = dlock__leader_read(c, &k, &got, &e);
    free(k.buf);
    if (rc == DLOCK_OK)
        *info = got.info;
    return dlock__err_raise(&e, rc);
}
