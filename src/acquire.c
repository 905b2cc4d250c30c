/*
 * acquire.c: dlock_acquire, one attempt after another until granted, refused for good,
 * or out of time.
 *
 * An attempt is one round of the ACQUIRE script (scripts.c) on every node. Granted on
 * a quorum with validity left, the lock is ours; otherwise every grant, and every
 * node whose outcome is unknown, gets a release that is sent, not awaited, so a failed
 * attempt costs no extra round trip. A caller that may wait joins the name's queue:
 * a release then hands it the lock and wakes it (wait.c), and its next attempt
 * confirms the lock it already holds. Between wake-ups it sleeps until the holder's
 * lease should be over, refreshing its place in the queue meanwhile.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int check_opts(const dlock_opts *o, int64_t *ttl_ms, int64_t *wait_ms, dlock__err *e)
{
    static const dlock_opts defaults = {0};
    if (o == NULL)
        o = &defaults;
    for (size_t i = 0; i < sizeof o->reserved / sizeof *o->reserved; i++)
        if (o->reserved[i] != 0)
            return dlock__err_set(e, DLOCK_ERR_INVALID, "dlock_opts.reserved must be zero");
    *ttl_ms = o->ttl_ms ? o->ttl_ms : DLOCK_TTL_DEFAULT_MS;
    int rc = dlock__check_ttl(*ttl_ms, "ttl_ms", e);
    if (rc != DLOCK_OK)
        return rc;
    *wait_ms = o->wait_ms;
    if ((rc = dlock__check_wait(o->wait_ms, o->cancel_fd, e)) != DLOCK_OK)
        return rc;
    if (o->shared != 0 && o->shared != 1)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "dlock_opts.shared must be 0 or 1");
    if (o->on_lost != NULL && !o->auto_renew)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "on_lost is only called with auto_renew");
    if (o->label != NULL && strnlen(o->label, DLOCK_LABEL_MAX + 1) > DLOCK_LABEL_MAX)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "label longer than %d bytes", DLOCK_LABEL_MAX);
    return DLOCK_OK;
}

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

/* What one dlock_acquire asks the servers for, the same in every attempt: the name's
 * keys, the lease, the mode, and the queue entry "<handoff ms> <limit> <channel
 * length> <channel><value>" (scripts.c), whose value (from value_at on) is "<token>
 * <host:pid>[ <label>]", what `dlock status` shows. */
typedef struct request {
    dlock__keys k;
    int64_t ttl_ms;
    int64_t limit; /* 0: exclusive; else a shared holder among at most limit */
    char limit_text[24];
    char ttl[24];
    char ticket[24]; /* "0" until the caller queues */
    char qttl[24];   /* DLOCK_QUEUE_TTL_MS, for the scripts */
    bool fair;
    size_t value_at; /* the value's offset in member */
    size_t member_len;
    char member[64 + sizeof((dlock_client *)0)->wake_chan + DLOCK_TOKEN_LEN +
                sizeof((dlock_client *)0)->holder + DLOCK_LABEL_MAX];
} request;

/* Whether q carries a ticket: false for a plain try, and for a request never made. */
static bool queued(const request *q)
{
    return q->ticket[0] != '\0' && strcmp(q->ticket, "0") != 0;
}

/* Send a release, not awaited, to the nodes marked in undo[]: a give-back, which keeps
 * a queued caller's place (scripts.c). A failure to format it is not reported: the
 * leases expire by themselves. */
static void undo_grants(dlock_client *c, dlock__round *rd, const request *q, const dlock_lock *l,
                        const bool *undo)
{
    dlock__call rel;
    dlock__err ignored;
    const dlock__keys *k = &q->k;
    size_t mlen = queued(q) ? q->member_len : 0;
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

/* What an attempt learned besides its outcome. */
typedef struct attempt_info {
    int permanent;                   /* nodes that failed with an error no retry can fix */
    int64_t busy_remaining_ms;       /* the longest holder lease seen in a refusal */
    bool refused[DLOCK_SERVERS_MAX]; /* the nodes that refused */
} attempt_info;
/* The error of an attempt that was not granted, from what the nodes said. */
static int refused(const dlock_client *c, const dlock__round *rd, const dlock__tally *t,
                   int nonvoting, const request *q, dlock__err *e)
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
                dlock__err_append(e, "%s", rd->reqs[i].detail);
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

/* One acquisition attempt. DLOCK_OK with l's fence and validity set, or the attempt's
 * error, with what it learned in *info. */
static int attempt(dlock_client *c, dlock__round *rd, dlock__call *acq, const request *q,
                   dlock_lock *l, attempt_info *info, dlock__err *e)
{
    dlock__tally t = {0};
    int64_t ttl_ms = q->ttl_ms;
    dlock__round_run(c, rd, acq, dlock__vote_grant, NULL);
    uint64_t fence = 0;
    int nonvoting = 0;
    bool undo[DLOCK_SERVERS_MAX], any = false;
    for (int i = 0; i < c->n; i++) {
        long long v;
        /* Until we know better, a node's outcome is unknown: it may have run the
         * script even if its answer never arrived. A command held behind a
         * handshake that never finished was never sent: nothing to undo there. */
        undo[i] = !rd->reqs[i].held;
        if (!dlock__tally_int(&t, &rd->reqs[i], &rd->set->conns[i], "acquire", &v))
            continue;
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
        if ((uint64_t)v > fence)
            fence = (uint64_t)v;
        if (dlock__node_votes(rd->set->conns[i].node, rd->end_us))
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
    return rc;
}

/* The arguments of an acquire call. They outlive the formatting: the call borrows them
 * for its EVAL form, formatted only if a server answers -NOSCRIPT. */
typedef struct acquire_args {
    const char *args[13];
    size_t lens[13];
} acquire_args;

/* Format the acquire call, a plain try or a queued attempt as q->ticket says: ACQUIRE
 * for an exclusive lock, ACQUIRE_SHARED for a shared one (scripts.c). */
static int format_acquire(dlock_client *c, const request *q, acquire_args *a, dlock__call *out,
                          dlock__err *e)
{
    const dlock__keys *k = &q->k;
    const char *value = q->member + q->value_at;
    size_t vlen = q->member_len - q->value_at;
    dlock__keys_all(k, a->args, a->lens);
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

static void set_ticket(request *q, int64_t ticket)
{
    snprintf(q->ticket, sizeof q->ticket, "%lld", (long long)ticket);
}

/* Join the queue: from now on the attempts carry the ticket. */
static int queue_up(dlock_client *c, request *q, int64_t ticket, acquire_args *a, dlock__call *acq)
{
    dlock__call queued_call;
    dlock__err ignored;
    set_ticket(q, ticket);
    if (format_acquire(c, q, a, &queued_call, &ignored) != DLOCK_OK) {
        strcpy(q->ticket, "0");
        return DLOCK_ERR_NOMEM;
    }
    dlock__call_free(acq);
    *acq = queued_call;
    return DLOCK_OK;
}

/* A queued waiter's refresh (REFRESH in scripts.c) on every node: true when it should
 * attempt now (the lock is free somewhere, or a queue is gone), else the shortest
 * lease left in *busy_ms. */
static bool refresh(dlock_client *c, dlock__round *rd, const request *q, int64_t *busy_ms)
{
    dlock__call call;
    dlock__err ignored;
    const char *args[] = {q->k.lock, q->k.queue, q->k.holders, q->qttl, q->limit > 0 ? "1" : "0"};
    const size_t lens[] = {q->k.lock_len, q->k.queue_len, q->k.holders_len, strlen(q->qttl), 1};
    if (dlock__call_format(&c->scripts, DLOCK_SCRIPT_REFRESH, 3, 5, args, lens, &call, &ignored) !=
        DLOCK_OK)
        return true;
    dlock__round_run(c, rd, &call, NULL, NULL);
    bool now = false;
    *busy_ms = 0;
    for (int i = 0; i < c->n; i++) {
        const redisReply *r = rd->reqs[i].err == DLOCK_OK ? rd->reqs[i].reply : NULL;
        if (r == NULL || r->type != REDIS_REPLY_INTEGER)
            continue; /* an attempt would fail there too */
        if (r->integer == -2 || r->integer == -3)
            now = true;
        else if (r->integer > 0 && (*busy_ms == 0 || r->integer < *busy_ms))
            *busy_ms = r->integer < DLOCK_TTL_MAX_MS ? r->integer : DLOCK_TTL_MAX_MS;
    }
    dlock__round_free_replies(c, rd);
    dlock__call_free(&call);
    return now;
}

/* A queued waiter's sleep between attempts: until a release hands it the lock (with
 * N > 1, on a quorum of nodes, or one per-node timeout after the first of them), a
 * wake-up of another kind (a subscriber connection was remade), the holder's lease
 * end, or the deadline. Every DLOCK_QUEUE_REFRESH_MS in between it refreshes its place.
 * DLOCK_OK when it is time to attempt, DLOCK_ERR_CANCELED through cancel_fd. */
static int await_turn(dlock_client *c, dlock__round *rd, const request *q, dlock__waiter *w,
                      int64_t busy_ms, int64_t deadline, int cancel_fd)
{
    int64_t at = dlock__retry_at(dlock__now_us(), busy_ms, deadline), first_grant = 0;
    for (;;) {
        int64_t until = at;
        if (first_grant != 0 && first_grant + c->rules.timeout_us < until)
            until = first_grant + c->rules.timeout_us;
        bool woken;
        int rc = dlock__wait_sleep(w, until, cancel_fd, &woken);
        if (rc != DLOCK_OK)
            return rc;
        int64_t now = dlock__now_us();
        uint32_t grants = dlock__wait_grants(c, w, false);
        if (grants != 0) {
            if (__builtin_popcount(grants) >= c->quorum)
                return DLOCK_OK;
            if (first_grant == 0)
                first_grant = now;
            if (now < first_grant + c->rules.timeout_us && now < at)
                continue;
            return DLOCK_OK;
        }
        if (woken || now >= deadline)
            return DLOCK_OK;
        /* The lease end or the refresh time: ask before attempting, which costs more. */
        if (refresh(c, rd, q, &busy_ms))
            return DLOCK_OK;
        at = dlock__retry_at(dlock__now_us(), busy_ms, deadline);
    }
}

/* Fill q for one acquire call: keys, lease, and the queue entry that carries the
 * lock's value and the lease a handoff gives it before it confirms. */
static int make_request(dlock_client *c, const char *name, size_t name_len, const dlock_opts *opts,
                        int64_t ttl_ms, int64_t limit, const char *token, request *q, dlock__err *e)
{
    memset(q, 0, sizeof *q);
    q->ttl_ms = ttl_ms;
    q->limit = limit;
    snprintf(q->limit_text, sizeof q->limit_text, "%lld", (long long)limit);
    snprintf(q->ttl, sizeof q->ttl, "%lld", (long long)ttl_ms);
    strcpy(q->ticket, "0");
    snprintf(q->qttl, sizeof q->qttl, "%d", DLOCK_QUEUE_TTL_MS);
    q->fair = opts && opts->fair;
    const char *label = opts && opts->label && opts->label[0] ? opts->label : NULL;
    int64_t handoff_ms = DLOCK_HANDOFF_TIMEOUTS * c->rules.timeout_us / 1000;
    if (handoff_ms < DLOCK_HANDOFF_MIN_MS)
        handoff_ms = DLOCK_HANDOFF_MIN_MS;
    if (handoff_ms > ttl_ms)
        handoff_ms = ttl_ms;
    int at = snprintf(q->member, sizeof q->member, "%lld %lld %zu %s", (long long)handoff_ms,
                      (long long)limit, strlen(c->wake_chan), c->wake_chan);
    int len = snprintf(q->member + at, sizeof q->member - (size_t)at, "%s %s%s%s", token, c->holder,
                       label ? " " : "", label ? label : "");
    q->value_at = (size_t)at;
    q->member_len = (size_t)at + (size_t)len;
    return dlock__keys_make(c->prefix, c->prefix_len, name, name_len, &q->k, e);
}

/* dlock_acquire and dlock_sem_acquire: limit 0 takes the lock exclusively, else as one
 * of at most limit shared holders. */
static int acquire(dlock_client *c, const char *name, const dlock_opts *opts, int64_t limit,
                   dlock_lock **out)
{
    dlock__err e;
    if (out == NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "out is NULL");
    *out = NULL;
    int64_t ttl_ms = 0, wait_ms = 0;
    int rc = dlock__client_enter(c, &e);
    if (rc != DLOCK_OK || (rc = dlock__check_name(name, &e)) != DLOCK_OK ||
        (rc = check_opts(opts, &ttl_ms, &wait_ms, &e)) != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    if (limit == 0 && opts != NULL && opts->shared)
        limit = DLOCK_PERMITS_MAX;
    if (c->local != NULL)
        return dlock__err_raise(
            &e, dlock__local_acquire(c, name, opts, ttl_ms, wait_ms, limit, out, &e));
    /* The arrival time orders fair waiters: the same number on every node. */
    int64_t ticket = dlock__wallclock_us();
    int cancel_fd = opts ? opts->cancel_fd : 0;
    dlock__rules_note_ttl(&c->rules, ttl_ms);

    dlock_lock *l = NULL;
    request q = {0};
    dlock__call acq = {0};
    dlock__round rd = {0};
    dlock__waiter *w = NULL;
    acquire_args args;
    attempt_info info = {0};
    if ((rc = dlock__lock_new(c, name, &l, &e)) != DLOCK_OK)
        goto out;
    if ((rc = dlock__token_new(l->token)) != DLOCK_OK) {
        dlock__err_set(&e, rc, "getrandom: %s", strerror(errno));
        goto out;
    }
    l->shared = limit > 0;
    if ((rc = make_request(c, name, l->name_len, opts, ttl_ms, limit, l->token, &q, &e)) !=
        DLOCK_OK)
        goto out;
    /* A client already listening for wake-ups (it waited moments ago) queues with its
     * first attempt: no try and retry when the lock is busy, as it is when a name
     * passes from hand to hand. */
    if (wait_ms != 0 && dlock__wait_join(c, l->token, true, &w) == DLOCK_OK)
        set_ticket(&q, ticket);
    if ((rc = format_acquire(c, &q, &args, &acq, &e)) != DLOCK_OK ||
        (rc = dlock__round_begin(c, &rd, &e)) != DLOCK_OK)
        goto out;

    int64_t start = dlock__now_us();
    /* A wait longer than a century is a wait forever (and must not overflow). */
    int64_t deadline =
        wait_ms < 0 || wait_ms > INT64_C(3153600000000) ? INT64_MAX : start + wait_ms * 1000;
    /* Servers that stay unreachable end even an endless wait (the CLI's exit 69 even
     * with -w forever). */
    int64_t outage_since = 0;
    for (int n = 0;; n++) {
        if (w != NULL)
            dlock__wait_grants(c, w, true); /* this attempt answers those */
        memset(&info, 0, sizeof info);
        rc = attempt(c, &rd, &acq, &q, l, &info, &e);
        if (rc == DLOCK_OK || rc == DLOCK_ERR_NOMEM)
            break;
        int64_t now = dlock__now_us();
        /* An error that no retry can fix, on enough nodes that no quorum is possible,
         * ends the call now. */
        if (dlock__outage_over(&outage_since, rc, now, c->rules.connect_timeout_us) ||
            (rc != DLOCK_ERR_BUSY && info.permanent > c->n - c->quorum))
            break;
        if (now >= deadline)
            break;
        if (rc == DLOCK_ERR_BUSY && w == NULL) {
            /* Start waiting: listen for wake-ups first, then retry at once, queued.
             * A handoff between the try and the subscription would otherwise pass
             * unseen. If listening cannot start, the backoff below still works. */
            if (dlock__wait_join(c, l->token, false, &w) == DLOCK_OK) {
                if (queue_up(c, &q, ticket, &args, &acq) == DLOCK_OK)
                    continue;
                dlock__wait_leave(c, w);
                w = NULL;
            }
        }
        /* The sleep leaves e alone unless it ends the call (canceled). */
        int src = w != NULL && rc == DLOCK_ERR_BUSY
                      ? await_turn(c, &rd, &q, w, info.busy_remaining_ms, deadline, cancel_fd)
                      : dlock__backoff(n, info.busy_remaining_ms, deadline, cancel_fd);
        if (src != DLOCK_OK) {
            rc = dlock__err_set(&e, src, "canceled through cancel_fd");
            break;
        }
    }
out:
    if (w != NULL)
        dlock__wait_leave(c, w);
    if (queued(&q)) {
        /* Given up: leave the queue everywhere. Granted: the nodes that refused keep
         * our entry, which a release there would hand a lease nobody confirms. */
        bool any = false;
        for (int i = 0; i < c->n; i++)
            any |= info.refused[i];
        if (rc != DLOCK_OK || any)
            dlock__leave_queue(c, rd.set, &q.k, q.member, q.member_len, l->token,
                               rc == DLOCK_OK ? info.refused : NULL);
    }
    dlock__round_end(c, &rd);
    dlock__call_free(&acq);
    free(q.k.buf);
    if (rc != DLOCK_OK) {
        if (l != NULL)
            dlock__lock_free(l);
        return dlock__err_raise(&e, rc);
    }
    dlock__lock_attach(l);
    if (opts != NULL && opts->auto_renew &&
        (rc = dlock__watchdog_add(c, l, ttl_ms, opts->on_lost, opts->on_lost_user, &e)) !=
            DLOCK_OK) {
        /* Without renewal the caller would hold a lock that silently expires. */
        dlock__err ignored;
        dlock__lock_release(l, &ignored);
        return dlock__err_raise(&e, rc);
    }
    DLOCK_PAUSE_POINT(DLOCK_HOOK_ACQUIRED);
    *out = l;
    return dlock__err_raise(&e, DLOCK_OK);
}

int dlock_acquire(dlock_client *c, const char *name, const dlock_opts *opts, dlock_lock **out)
{
    return acquire(c, name, opts, 0, out);
}

int dlock_sem_acquire(dlock_client *c, const char *name, int64_t permits, const dlock_opts *opts,
                      dlock_lock **out)
{
    if (out != NULL)
        *out = NULL;
    if (permits < 1 || permits > DLOCK_PERMITS_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "permits %lld: a semaphore has 1 to %d",
                           (long long)permits, DLOCK_PERMITS_MAX);
    if (opts != NULL && opts->shared)
        return dlock__fail(DLOCK_ERR_INVALID,
                           "dlock_opts.shared is for dlock_acquire: a permit is shared already");
    /* Only a single server can count K >= 2 holders: N independent ones cannot, by a
     * quorum (docs/guarantees.md). One permit is the exclusive lock, which a quorum
     * can bound. */
    if (permits >= 2 && c != NULL && c->magic == DLOCK_CLIENT_MAGIC && c->n > 1)
        return dlock__fail(DLOCK_ERR_INVALID,
                           "a semaphore of %lld permits needs a client of one server (this one "
                           "has %d): a quorum of independent servers cannot bound K >= 2 holders",
                           (long long)permits, c->n);
    return acquire(c, name, opts, permits == 1 ? 0 : permits, out);
}
