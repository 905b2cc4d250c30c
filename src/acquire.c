/*
 * acquire.c: dlock_acquire, one attempt after another until granted, refused for good,
 * or out of time.
 *
 * An attempt is one round of the ACQUIRE script (scripts.c) on every node. Granted on
 * a quorum with validity left, the lock is ours; otherwise every grant, and every
 * node whose outcome is unknown, gets a release that is sent, not awaited, so a failed
 * attempt costs no extra round trip. Between attempts a caller that may wait sleeps
 * until a release wakes it or the holder's lease should be over (wait.c).
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
    if (*wait_ms < -1)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "wait_ms %lld: use -1 (forever), 0 or more",
                              (long long)*wait_ms);
    if (o->cancel_fd < 0)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "cancel_fd is negative (0 means none)");
    if (o->reserved32 != 0)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "dlock_opts.reserved32 must be zero");
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
    const char *args[] = {k->lock, k->fence, l->token, fence};
    const size_t lens[] = {k->lock_len, k->fence_len, DLOCK_TOKEN_LEN, (size_t)flen};
    dlock__call call;
    int rc = dlock__call_format(&c->scripts, DLOCK_SCRIPT_FENCE, 2, 4, args, lens, &call, e);
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

/* Send a release, not awaited, to the nodes marked in undo[]. A failure to format it
 * is not reported: the leases expire by themselves. */
static void undo_grants(dlock_client *c, dlock__round *rd, const dlock__keys *k,
                        const dlock_lock *l, const bool *undo)
{
    dlock__call rel;
    dlock__err ignored;
    const char *args[] = {k->lock, k->fence, k->queue, k->qexp, l->token, "0", k->wake, "0"};
    const size_t lens[] = {
        k->lock_len, k->fence_len, k->queue_len, k->qexp_len, DLOCK_TOKEN_LEN, 1, k->wake_len, 1};
    if (dlock__call_format(&c->scripts, DLOCK_SCRIPT_RELEASE, 4, 8, args, lens, &rel, &ignored) !=
        DLOCK_OK)
        return;
    dlock__round_send(c, rd->set, &rel, undo);
    dlock__call_free(&rel);
}

/* What an attempt learned besides its outcome. */
typedef struct attempt_info {
    int permanent;             /* nodes that failed with an error no retry can fix */
    int64_t busy_remaining_ms; /* the longest holder lease seen in a refusal */
} attempt_info;

/* The error of an attempt that was not granted, from what the nodes said. */
static int refused(const dlock_client *c, const dlock__round *rd, const dlock__tally *t,
                   int nonvoting, int64_t ttl_ms, dlock__err *e)
{
    int rc;
    if (t->yes >= c->quorum) {
        return dlock__err_set(e, DLOCK_ERR_TIMEOUT,
                              "granted, but the round took %lld ms of a %lld ms lease (no "
                              "validity left)",
                              (long long)((rd->end_us - rd->start_us) / 1000), (long long)ttl_ms);
    }
    if (t->yes + t->no + nonvoting >= c->quorum && t->no > 0) {
        if (t->busy_remaining_ms > 0)
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
static int attempt(dlock_client *c, dlock__round *rd, dlock__call *acq, const dlock__keys *k,
                   dlock_lock *l, int64_t ttl_ms, attempt_info *info, dlock__err *e)
{
    dlock__tally t = {0};
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
            rc = raise_fences(c, rd, k, l, e);
            validity = dlock__round_validity_us(c, ttl_ms * 1000, rd->start_us, rd->end_us);
            if (rc == DLOCK_OK && validity <= 0)
                rc = dlock__err_set(e, DLOCK_ERR_TIMEOUT, "fences raised, but no validity left");
        }
        if (rc == DLOCK_OK) {
            l->valid_until_us = rd->end_us + validity;
            return DLOCK_OK;
        }
    } else {
        rc = refused(c, rd, &t, nonvoting, ttl_ms, e);
    }
    /* Not acquired: undo every grant, and every outcome we do not know, including on a
     * node whose connection broke mid-reply (the server may have run the script):
     * there the release goes on a new connection. */
    for (int i = 0; i < c->n; i++)
        any |= undo[i];
    if (any)
        undo_grants(c, rd, k, l, undo);
    return rc;
}

/* The arguments of an acquire call. They outlive the formatting: the call borrows them
 * for its EVAL form, formatted only if a server answers -NOSCRIPT. */
typedef struct acquire_args {
    const char *args[10];
    size_t lens[10];
    char ttl[24], ticket[24], qttl[24];
} acquire_args;

/* Format the acquire call; ticket 0 is a plain try, anything else queues. */
static int format_acquire(dlock_client *c, const dlock__keys *k, const char *value, size_t vlen,
                          int64_t ttl_ms, int64_t ticket, bool fair, const char *token,
                          acquire_args *a, dlock__call *out, dlock__err *e)
{
    int tlen = snprintf(a->ttl, sizeof a->ttl, "%lld", (long long)ttl_ms);
    int tklen = snprintf(a->ticket, sizeof a->ticket, "%lld", (long long)ticket);
    int qlen = snprintf(a->qttl, sizeof a->qttl, "%d", DLOCK_QUEUE_TTL_MS);
    const char *args[] = {k->lock, k->fence, k->queue,  k->qexp,          value,
                          a->ttl,  token,    a->ticket, fair ? "1" : "0", a->qttl};
    const size_t lens[] = {k->lock_len,  k->fence_len,    k->queue_len,  k->qexp_len, vlen,
                           (size_t)tlen, DLOCK_TOKEN_LEN, (size_t)tklen, 1,           (size_t)qlen};
    memcpy(a->args, args, sizeof args);
    memcpy(a->lens, lens, sizeof lens);
    return dlock__call_format(&c->scripts, DLOCK_SCRIPT_ACQUIRE, 4, 10, a->args, a->lens, out, e);
}

int dlock_acquire(dlock_client *c, const char *name, const dlock_opts *opts, dlock_lock **out)
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
    /* The arrival time orders fair waiters: the same number on every node. */
    int64_t ticket = dlock__wallclock_us();
    int cancel_fd = opts ? opts->cancel_fd : 0;
    bool fair = opts && opts->fair;
    dlock__rules_note_ttl(&c->rules, ttl_ms);
    const char *label = opts && opts->label && opts->label[0] ? opts->label : NULL;

    dlock_lock *l = NULL;
    dlock__keys k = {0};
    dlock__call acq = {0};
    dlock__round rd = {0};
    dlock__waiter *w = NULL;
    if ((rc = dlock__lock_new(c, name, &l, &e)) != DLOCK_OK)
        goto out;
    if ((rc = dlock__token_new(l->token)) != DLOCK_OK) {
        dlock__err_set(&e, rc, "getrandom: %s", strerror(errno));
        goto out;
    }
    if ((rc = dlock__keys_make(c->prefix, c->prefix_len, name, l->name_len, &k, &e)) != DLOCK_OK)
        goto out;

    /* The lock's value: "<token> <host:pid>[ <label>]" (what `dlock status` shows). */
    char value[DLOCK_TOKEN_LEN + sizeof c->holder + DLOCK_LABEL_MAX + 4];
    int vlen = snprintf(value, sizeof value, "%s %s%s%s", l->token, c->holder, label ? " " : "",
                        label ? label : "");
    /* Two sets of arguments: the plain try's, and the queued retries' (with a ticket). */
    acquire_args try_args, queued_args;
    if ((rc = format_acquire(c, &k, value, (size_t)vlen, ttl_ms, 0, fair, l->token, &try_args, &acq,
                             &e)) != DLOCK_OK ||
        (rc = dlock__round_begin(c, &rd, &e)) != DLOCK_OK)
        goto out;

    int64_t start = dlock__now_us();
    /* A wait longer than a century is a wait forever (and must not overflow). */
    int64_t deadline =
        wait_ms < 0 || wait_ms > INT64_C(3153600000000) ? INT64_MAX : start + wait_ms * 1000;
    /* Servers that stay unreachable end even an endless wait: a wait is for a holder
     * to go away, not for an outage to end (the CLI's exit 69 even with -w forever). */
    int64_t outage_since = 0;
    for (int n = 0;; n++) {
        attempt_info info;
        rc = attempt(c, &rd, &acq, &k, l, ttl_ms, &info, &e);
        if (rc == DLOCK_OK || rc == DLOCK_ERR_NOMEM)
            break;
        int64_t now = dlock__now_us();
        if (rc == DLOCK_ERR_BUSY) {
            outage_since = 0;
        } else {
            if (outage_since == 0)
                outage_since = now;
            /* An error that no retry can fix, on enough nodes that no quorum is
             * possible, ends the call now. */
            if (info.permanent > c->n - c->quorum)
                break;
            if (now - outage_since >= c->rules.connect_timeout_us)
                break;
        }
        if (now >= deadline)
            break;
        if (rc == DLOCK_ERR_BUSY && w == NULL) {
            /* Start waiting: listen for wake-ups first, then retry at once, queued.
             * A release between the try and the subscription would otherwise pass
             * unseen. If listening cannot start, the backoff below still works. */
            dlock__call queued;
            dlock__err ignored;
            if (dlock__wait_join(c, k.wake, k.wake_len, l->token, &w) == DLOCK_OK &&
                format_acquire(c, &k, value, (size_t)vlen, ttl_ms, ticket, fair, l->token,
                               &queued_args, &queued, &ignored) == DLOCK_OK) {
                dlock__call_free(&acq);
                acq = queued;
                continue;
            }
        }
        /* The sleep leaves e alone unless it ends the call (canceled). */
        int src = w != NULL && rc == DLOCK_ERR_BUSY
                      ? dlock__wait_sleep(w, dlock__retry_at(now, info.busy_remaining_ms, deadline),
                                          cancel_fd)
                      : dlock__backoff(n, info.busy_remaining_ms, deadline, cancel_fd);
        if (src != DLOCK_OK) {
            rc = dlock__err_set(&e, src, "canceled through cancel_fd");
            break;
        }
    }
out:
    if (w != NULL) {
        dlock__wait_leave(c, w);
        if (rc != DLOCK_OK)
            dlock__leave_queue(c, rd.set, &k, l->token);
    }
    dlock__round_end(c, &rd);
    dlock__call_free(&acq);
    free(k.buf);
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
