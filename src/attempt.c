/*
 * attempt.c: one acquisition attempt and what it sends: the request (keys, lease, mode,
 * queue entry), the ACQUIRE call, the round and its outcome, the give-back of partial
 * grants, joining the queue, refreshing a place in it and leaving it, and the timing
 * rules between attempts (backoff, a holder's lease end, an outage). acquire.c decides
 * when to attempt; this file knows how.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* Strict fence mode, second round: raise the counters of a quorum to l's fence, each
 * node checking that it still holds our token. DLOCK_OK when a quorum confirmed. */
static int raise_fences(dlock_client *c, dlock__round *rd, const dlock__keys *k,
                        const dlock_lock *l, dlock__err *e)
{
    char fence[24];
    int flen = snprintf(fence, sizeof fence, "%llu", (unsigned long long)l->fence);
    const char *args[] = {k->lock, k->fence, k->holders, l->token, fence, c->retention};
    const size_t lens[] = {k->lock_len,     k->fence_len, k->holders_len,
                           DLOCK_TOKEN_LEN, (size_t)flen, strlen(c->retention)};
    dlock__call call;
    int rc = dlock__call_format(&c->scripts, DLOCK_SCRIPT_FENCE, 3, 6, args, lens, &call, e);
    if (rc != DLOCK_OK)
        return rc;
    int64_t start = rd->start_us;
    dlock__round_run(c, rd, &call, dlock__vote_one, NULL);
    rd->start_us = start; /* validity counts from the first round */
    dlock__tally t = {0};
    for (int i = 0; i < c->n; i++) {
        long long v;
        if (dlock__tally_int(&t, &rd->reqs[i], &rd->set->conns[i], "fence", &v))
            v == 1 ? t.yes++ : t.no++;
    }
    if (t.yes >= c->quorum)
        rc = DLOCK_OK;
    else if (t.no > c->n - c->quorum)
        rc = dlock__err_set(e, DLOCK_ERR_BUSY, "the lock was lost before its fence was confirmed");
    else
        rc = dlock__tally_undecided(c, &t, rd->reqs, e);
    dlock__round_free_replies(c, rd);
    dlock__call_free(&call);
    return rc;
}

/* Whether q carries a ticket: false for a plain try, and for a request never made. */
bool dlock__request_queued(const dlock__request *q)
{
    return q->ticket[0] != '\0' && strcmp(q->ticket, "0") != 0;
}

/* Send a release, not awaited, to the nodes marked in undo[]: a give-back, which keeps
 * a queued caller's place (scripts.c). A failure to format it is not reported: the
 * leases expire by themselves. */
static void undo_grants(dlock_client *c, dlock__round *rd, const dlock__request *q,
                        const dlock_lock *l, const bool *undo)
{
    dlock__call rel;
    dlock__err ignored;
    const dlock__keys *k = &q->k;
    size_t mlen = dlock__request_queued(q) ? q->member_len : 0;
    const char *args[] = {NULL, NULL,      NULL,         NULL, NULL,     l->token,
                          "0",  q->member, c->retention, "0",  q->ticket};
    size_t lens[] = {
        0, 0, 0, 0, 0, DLOCK_TOKEN_LEN, 1, mlen, strlen(c->retention), 1, strlen(q->ticket)};
    dlock__keys_all(k, args, lens);
    if (dlock__call_format(&c->scripts, DLOCK_SCRIPT_RELEASE, 5, 11, args, lens, &rel, &ignored) !=
        DLOCK_OK)
        return;
    dlock__round_send(c, rd->set, &rel, undo);
    dlock__call_free(&rel);
}

void dlock__attempt_undo(dlock_client *c, dlock__round *rd, const dlock__request *q,
                         const dlock_lock *l)
{
    bool undo[DLOCK_SERVERS_MAX], any = false;
    for (int i = 0; i < c->n; i++) {
        undo[i] = rd->reqs[i].cmd != NULL && !rd->reqs[i].held;
        any |= undo[i];
    }
    dlock__round_free_replies(c, rd);
    if (any)
        undo_grants(c, rd, q, l, undo);
}

/* The error of an attempt that was not granted, from what the nodes said. */
static int refused(const dlock_client *c, const dlock__round *rd, const dlock__tally *t,
                   int nonvoting, const dlock__request *q, dlock__err *e)
{
    int rc;
    if (t->yes >= c->quorum) {
        return dlock__err_set(e, DLOCK_ERR_TIMEOUT,
                              "granted, but the round took %lld ms of a %lld ms lease (no "
                              "validity left)",
                              (long long)((rd->end_us - rd->start_us) / 1000),
                              (long long)q->ttl_ms);
    }
    if (t->yes + t->no + nonvoting >= c->quorum && t->no > 0) {
        if (q->limit > 0 && q->limit < DLOCK_PERMITS_MAX)
            rc = dlock__err_set(e, DLOCK_ERR_BUSY,
                                "%d of %d servers refused: the %lld permits are taken, or an "
                                "exclusive holder or an earlier waiter comes first (the first "
                                "lease ends in %lld ms)",
                                t->no, c->n, (long long)q->limit, (long long)t->busy_remaining_ms);
        else if (q->limit > 0)
            rc = dlock__err_set(e, DLOCK_ERR_BUSY,
                                "%d of %d servers refused: an exclusive holder or an earlier "
                                "waiter comes first (the first lease ends in %lld ms)",
                                t->no, c->n, (long long)t->busy_remaining_ms);
        else if (t->busy_remaining_ms > 0)
            rc = dlock__err_set(e, DLOCK_ERR_BUSY,
                                "%d of %d servers refused: their holder's lease has %lld ms left",
                                t->no, c->n, (long long)t->busy_remaining_ms);
        else
            rc = dlock__err_set(e, DLOCK_ERR_BUSY,
                                "%d of %d servers refused: the holder's lease is ending or has "
                                "no expiry",
                                t->no, c->n);
        if (nonvoting > 0)
            dlock__err_append(e, "%d grant(s) from restarted servers not counted", nonvoting);
        /* The nodes that did not answer could have made a quorum: name them, or the
         * refusal reads as if the holder alone stood in the way. */
        for (int i = 0; i < c->n; i++)
            if (rd->reqs[i].err != DLOCK_OK)
                dlock__err_append(e, "%s", rd->reqs[i].why.msg);
        return rc;
    }
    rc = dlock__tally_undecided(c, t, rd->reqs, e);
    if (nonvoting > 0)
        dlock__err_append(e,
                          "%d grant(s) from restarted servers not counted (they vote again "
                          "once up for the longest lease)",
                          nonvoting);
    return rc;
}

int dlock__attempt_end(dlock_client *c, dlock__round *rd, const dlock__request *q, dlock_lock *l,
                       dlock__attempt_info *info, dlock__err *e)
{
    dlock__tally t = {0};
    int64_t ttl_ms = q->ttl_ms;
    uint64_t fence = 0;
    int64_t fence_max = dlock__wallclock_us() + DLOCK_FENCE_AHEAD_MAX_US;
    int nonvoting = 0;
    bool undo[DLOCK_SERVERS_MAX], any = false;
    for (int i = 0; i < c->n; i++) {
        long long v;
        /* Until we know better, a node's outcome is unknown: it may have run the
         * script even if its answer never arrived. A command held behind a
         * handshake that never finished was never sent: nothing to undo there. */
        undo[i] = !rd->reqs[i].held;
        if (!dlock__tally_int(&t, &rd->reqs[i], &rd->set->conns[i], "acquire", &v)) {
            info->unknown |= undo[i] && rd->reqs[i].reply == NULL;
            continue;
        }
        info->refused[i] = v <= 0;
        if (v <= 0) {
            undo[i] = false; /* a clean refusal: nothing of ours there */
            t.no++;
            /* A server's word, bounded: a broken one could send LLONG_MIN. */
            int64_t left = v < -(long long)DLOCK_TTL_MAX_MS ? DLOCK_TTL_MAX_MS : -v;
            if (left > t.busy_remaining_ms)
                t.busy_remaining_ms = left;
            continue;
        }
        if (v > fence_max) {
            /* Undone there like any unknown outcome. */
            dlock__err_set(&rd->reqs[i].why, 0,
                           "%s: acquire: fence %lld is more than a day ahead of this host's clock "
                           "(a server clock that far off, or a server that lies)",
                           rd->set->conns[i].node->addr.display, v);
            dlock__tally_failure(&t, &rd->reqs[i], DLOCK_ERR_PROTOCOL);
            continue;
        }
        if ((uint64_t)v > fence)
            fence = (uint64_t)v;
        if (dlock__conn_votes(&rd->set->conns[i], rd->end_us))
            t.yes++;
        else
            nonvoting++;
    }
    dlock__round_free_replies(c, rd);
    info->permanent = t.permanent;
    info->busy_remaining_ms = t.busy_remaining_ms;
    int64_t validity = dlock__round_validity_us(c, ttl_ms * 1000, rd->start_us, rd->end_us);
    int rc;
    if (t.yes >= c->quorum && validity > 0) {
        l->fence = fence;
        rc = DLOCK_OK;
        if (c->n > 1 && c->fence_mode == DLOCK_FENCE_STRICT) {
            rc = raise_fences(c, rd, &q->k, l, e);
            validity = dlock__round_validity_us(c, ttl_ms * 1000, rd->start_us, rd->end_us);
            if (rc == DLOCK_OK && validity <= 0)
                rc = dlock__err_set(e, DLOCK_ERR_TIMEOUT, "fences raised, but no validity left");
        }
        if (rc == DLOCK_OK) {
            l->valid_until_us = rd->end_us + validity;
            return DLOCK_OK;
        }
    } else {
        rc = refused(c, rd, &t, nonvoting, q, e);
    }
    /* Not acquired: undo every grant, and every outcome we do not know, including on a
     * node whose connection broke mid-reply (the server may have run the script):
     * there the release goes on a new connection. */
    for (int i = 0; i < c->n; i++)
        any |= undo[i];
    if (any)
        undo_grants(c, rd, q, l, undo);
    info->gave_back |= any;
    return rc;
}

/* Format the acquire call, a plain try or a queued attempt as q->ticket says: ACQUIRE
 * for an exclusive lock (TRY for its plain try, not fair), ACQUIRE_SHARED for a shared
 * one (scripts.c). */
int dlock__request_format(dlock_client *c, const dlock__request *q, dlock__acquire_args *a,
                          dlock__call *out, dlock__err *e)
{
    const dlock__keys *k = &q->k;
    const char *value = q->member + q->value_at;
    size_t vlen = q->member_len - q->value_at;
    dlock__keys_all(k, a->args, a->lens);
    if (q->limit == 0 && !q->fair && strcmp(q->ticket, "0") == 0) {
        /* A plain try: TRY reads the lock and fence keys (args[0] and [1]) and these. */
        const char *args[] = {value, q->ttl, c->retention};
        const size_t lens[] = {vlen, strlen(q->ttl), strlen(c->retention)};
        memcpy(a->args + 2, args, sizeof args);
        memcpy(a->lens + 2, lens, sizeof lens);
        return dlock__call_format(&c->scripts, DLOCK_SCRIPT_TRY, 2, 5, a->args, a->lens, out, e);
    }
    if (q->limit == 0) {
        const char *args[] = {value,     q->ttl,  value,       q->ticket, q->fair ? "1" : "0",
                              q->member, q->qttl, c->retention};
        const size_t lens[] = {vlen, strlen(q->ttl), DLOCK_TOKEN_LEN, strlen(q->ticket),
                               1,    q->member_len,  strlen(q->qttl), strlen(c->retention)};
        memcpy(a->args + 5, args, sizeof args);
        memcpy(a->lens + 5, lens, sizeof lens);
        return dlock__call_format(&c->scripts, DLOCK_SCRIPT_ACQUIRE, 5, 13, a->args, a->lens, out,
                                  e);
    }
    const char *args[] = {value,         value + DLOCK_TOKEN_LEN + 1,
                          q->ttl,        q->ticket,
                          q->limit_text, q->member,
                          q->qttl,       c->retention};
    const size_t lens[] = {DLOCK_TOKEN_LEN,   vlen - DLOCK_TOKEN_LEN - 1, strlen(q->ttl),
                           strlen(q->ticket), strlen(q->limit_text),      q->member_len,
                           strlen(q->qttl),   strlen(c->retention)};
    memcpy(a->args + 5, args, sizeof args);
    memcpy(a->lens + 5, lens, sizeof lens);
    return dlock__call_format(&c->scripts, DLOCK_SCRIPT_ACQUIRE_SHARED, 5, 13, a->args, a->lens,
                              out, e);
}

void dlock__request_set_ticket(dlock__request *q, int64_t ticket)
{
    snprintf(q->ticket, sizeof q->ticket, "%lld", (long long)ticket);
}

/* Join the queue: from now on the attempts carry the ticket. */
int dlock__queue_up(dlock_client *c, dlock__request *q, int64_t ticket, dlock__acquire_args *a,
                    dlock__call *acq)
{
    dlock__call queued_call;
    dlock__err ignored;
    dlock__request_set_ticket(q, ticket);
    if (dlock__request_format(c, q, a, &queued_call, &ignored) != DLOCK_OK) {
        strcpy(q->ticket, "0");
        return DLOCK_ERR_NOMEM;
    }
    dlock__call_free(acq);
    *acq = queued_call;
    return DLOCK_OK;
}

/* A queued waiter's refresh (REFRESH in scripts_queue.c) on every node, started on rd with
 * its call in *call and arguments in *a (both live until the round ends); false when it
 * cannot be formatted (the waiter then attempts). */
bool dlock__queue_refresh_start(dlock_client *c, dlock__round *rd, const dlock__request *q,
                                dlock__acquire_args *a, dlock__call *call)
{
    dlock__err ignored;
    const char *args[] = {q->k.lock,
                          q->k.queue,
                          q->k.holders,
                          q->qttl,
                          q->limit > 0 ? "1" : "0",
                          q->member + q->value_at};
    const size_t lens[] = {q->k.lock_len,  q->k.queue_len, q->k.holders_len, strlen(q->qttl), 1,
                           DLOCK_TOKEN_LEN};
    memcpy(a->args, args, sizeof args);
    memcpy(a->lens, lens, sizeof lens);
    if (dlock__call_format(&c->scripts, DLOCK_SCRIPT_REFRESH, 3, 6, a->args, a->lens, call,
                           &ignored) != DLOCK_OK)
        return false;
    dlock__round_start(c, rd, call, NULL, NULL);
    return true;
}

/* The refresh's replies, once in: true when the waiter should attempt now (the lock is
 * free somewhere, or a queue is gone), else the shortest lease left in *busy_ms. */
bool dlock__queue_refresh_end(dlock_client *c, dlock__round *rd, dlock__call *call,
                              int64_t *busy_ms)
{
    bool now = false;
    int answered = 0;
    *busy_ms = 0;
    for (int i = 0; i < c->n; i++) {
        const redisReply *r = rd->reqs[i].err == DLOCK_OK ? rd->reqs[i].reply : NULL;
        if (r == NULL || r->type != REDIS_REPLY_INTEGER)
            continue; /* an attempt would fail there too */
        answered++;
        if (r->integer == -2 || r->integer == -3)
            now = true;
        else if (r->integer > 0 && (*busy_ms == 0 || r->integer < *busy_ms))
            *busy_ms = r->integer < DLOCK_TTL_MAX_MS ? r->integer : DLOCK_TTL_MAX_MS;
    }
    dlock__round_free_replies(c, rd);
    dlock__call_free(call);
    /* Too few servers answered: an attempt, whose failure counts toward the outage that
     * ends even an endless wait (a refresh's would not, and the waiter would refresh
     * servers that are gone for as long as they stay gone). */
    return now || answered < c->quorum;
}

/* v (>= 0) in decimal at buf, NUL-terminated: its length. (snprintf's formatting was a
 * tenth of what dlockd's LOCK costs it besides its system calls.) */
static size_t decimal(char *buf, int64_t v)
{
    char tmp[24], *end = tmp + sizeof tmp, *at = end;
    do {
        *--at = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    size_t n = (size_t)(end - at);
    memcpy(buf, at, n);
    buf[n] = '\0';
    return n;
}

/* Append s (n bytes) to q's member, which is sized for the longest it can be. */
static void put(dlock__request *q, const char *s, size_t n)
{
    memcpy(q->member + q->member_len, s, n);
    q->member_len += n;
}

/* Fill q for one acquire call: keys, lease, and the queue entry that carries the
 * lock's value and the lease a handoff gives it before it confirms. */
int dlock__request_make(dlock_client *c, const char *name, size_t name_len, const dlock_opts *opts,
                        int64_t ttl_ms, int64_t limit, const char *token, dlock__request *q,
                        dlock__err *e)
{
    memset(q, 0, sizeof *q);
    q->ttl_ms = ttl_ms;
    q->limit = limit;
    decimal(q->limit_text, limit);
    decimal(q->ttl, ttl_ms);
    strcpy(q->ticket, "0");
    decimal(q->qttl, DLOCK_QUEUE_TTL_MS);
    q->fair = opts && opts->fair;
    const char *label = opts && opts->label && opts->label[0] ? opts->label : NULL;
    int64_t handoff_ms = DLOCK_HANDOFF_TIMEOUTS * c->rules.timeout_us / 1000;
    if (handoff_ms < DLOCK_HANDOFF_MIN_MS)
        handoff_ms = DLOCK_HANDOFF_MIN_MS;
    if (handoff_ms > ttl_ms)
        handoff_ms = ttl_ms;
    q->handoff_ms = handoff_ms;
    /* "<handoff ms> <limit> <channel length> <channel>" (at most 63 bytes and the
     * channel), then the value: "<token> <host:pid>[ <label>]", or "<token> <label>" for
     * a service naming its own client as the holder. */
    size_t chan_len = strlen(c->wake_chan);
    q->member_len = decimal(q->member, handoff_ms);
    put(q, " ", 1);
    q->member_len += decimal(q->member + q->member_len, limit);
    put(q, " ", 1);
    q->member_len += decimal(q->member + q->member_len, (int64_t)chan_len);
    put(q, " ", 1);
    put(q, c->wake_chan, chan_len);
    q->value_at = q->member_len;
    put(q, token, DLOCK_TOKEN_LEN);
    put(q, " ", 1);
    bool own = label != NULL && opts->label_is_holder;
    if (!own)
        put(q, c->holder, strlen(c->holder));
    if (label != NULL && !own)
        put(q, " ", 1);
    if (label != NULL)
        put(q, label, strlen(label));
    q->member[q->member_len] = '\0';
    return dlock__keys_make(c->prefix, c->prefix_len, name, name_len, &q->k, e);
}

/* ---- between attempts --------------------------------------------------------- */

int64_t dlock__backoff_us(int attempt, int64_t busy_ms)
{
    /* Exponential backoff (1 ms doubling to 32 ms) with full jitter, never past the
     * holder's remaining lease: for a caller that could not start listening for
     * wake-ups, and for retries after errors. */
    int64_t cap_us = (int64_t)1000 << (attempt < 5 ? attempt : 5);
    if (busy_ms > 0 && busy_ms * 1000 + 1000 < cap_us)
        cap_us = busy_ms * 1000 + 1000;
    return cap_us / 2 + (int64_t)dlock__random_below((uint64_t)cap_us / 2 + 1);
}

int dlock__backoff(int attempt, int64_t busy_ms, int64_t deadline_us, int cancel_fd, int close_fd)
{
    int64_t until = dlock__now_us() + dlock__backoff_us(attempt, busy_ms);
    return dlock__sleep_on(-1, until < deadline_us ? until : deadline_us, cancel_fd, close_fd);
}

bool dlock__outage_over(int64_t *since, int rc, int64_t now, int64_t connect_timeout_us)
{
    if (rc == DLOCK_ERR_BUSY) {
        *since = 0;
        return false;
    }
    if (*since == 0)
        *since = now;
    return now - *since >= connect_timeout_us;
}

int64_t dlock__retry_at(int64_t now, int64_t busy_ms, int64_t deadline)
{
    /* When the holder's lease should be over (an expiry publishes nothing), with
     * jitter so that waiters of several processes do not arrive together, and at
     * least every DLOCK_QUEUE_REFRESH_MS (the refresh that keeps the queue alive). */
    int64_t at = now + DLOCK_QUEUE_REFRESH_MS * 1000;
    if (busy_ms > 0) {
        int64_t spread = busy_ms * 100 < 5000 ? busy_ms * 100 : 5000; /* 10 %, <= 5 ms */
        int64_t expiry =
            now + busy_ms * 1000 + 1000 + (int64_t)dlock__random_below((uint64_t)spread + 1);
        if (expiry < at)
            at = expiry;
    }
    return at < deadline ? at : deadline;
}

void dlock__leave_queue(dlock_client *c, dlock__connset *set, const dlock__keys *k,
                        const char *member, size_t member_len, const char *token, const bool *mask)
{
    /* Sent, not awaited: a waiter that gives up leaves the queue on every node and
     * passes on a lock it may have been handed. If the call cannot even be formatted,
     * the entry stays until a release hands it a lease nobody confirms. */
    dlock__call call;
    dlock__err ignored;
    const char *args[] = {k->lock,     k->fence, k->queue, k->holders,
                          k->info,     member,   token,    mask == NULL ? "1" : "0",
                          c->retention};
    const size_t lens[] = {k->lock_len,         k->fence_len, k->queue_len,    k->holders_len,
                           k->info_len,         member_len,   DLOCK_TOKEN_LEN, 1,
                           strlen(c->retention)};
    if (set == NULL || dlock__call_format(&c->scripts, DLOCK_SCRIPT_LEAVE, 5, 9, args, lens, &call,
                                          &ignored) != DLOCK_OK)
        return;
    dlock__round_send(c, set, &call, mask);
    dlock__call_free(&call);
}
