/*
 * lock.c: acquire, extend, release, check and inspect, over the fan-out.
 *
 * One code path for every N (design.md section 2): a round sends one script call to
 * all N nodes at once; the outcome counts grants against the quorum N/2+1, and a
 * grant only counts as a lock while validity = ttl - elapsed - drift is positive.
 * With N = 1 the quorum is 1 and the same arithmetic applies.
 *
 * How a round's outcome becomes an error code (design.md, "Which error a call
 * returns"): refused by holders on enough nodes that no quorum was possible is
 * DLOCK_ERR_BUSY; too few answers to decide is, for N = 1, the node's own error and,
 * for N > 1, DLOCK_ERR_NOQUORUM with every node's reason in dlock_errmsg().
 */
#include "internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

int dlock__quorum(int n)
{
    return n / 2 + 1;
}

int64_t dlock__validity_us(int64_t ttl_us, int64_t elapsed_us, double drift_factor,
                           int64_t drift_min_us)
{
    /* Drift is rounded up, so validity is never overstated by a fraction. */
    double drift = (double)ttl_us * drift_factor;
    int64_t drift_us = (int64_t)drift;
    if ((double)drift_us < drift)
        drift_us++;
    return ttl_us - elapsed_us - drift_us - drift_min_us;
}

int64_t dlock_lease_validity_ms(const dlock_config *cfg, int64_t ttl_ms)
{
    double factor = cfg && cfg->drift_factor > 0 ? cfg->drift_factor : DLOCK_DRIFT_FACTOR_DEFAULT;
    int64_t min_ms = cfg && cfg->drift_min_ms > 0 ? cfg->drift_min_ms : DLOCK_DRIFT_MIN_MS_DEFAULT;
    int64_t v = dlock__validity_us(ttl_ms * 1000, 0, factor, min_ms * 1000);
    /* Round down: never claim a millisecond that is not all there. */
    return v >= 0 ? v / 1000 : -((-v + 999) / 1000);
}

int dlock__check_ttl(int64_t ttl_ms, const char *what)
{
    if (ttl_ms < DLOCK_TTL_MIN_MS || ttl_ms > DLOCK_TTL_MAX_MS)
        return dlock__fail(DLOCK_ERR_INVALID, "%s %lld ms is outside [%d, %d] ms", what,
                           (long long)ttl_ms, DLOCK_TTL_MIN_MS, DLOCK_TTL_MAX_MS);
    return DLOCK_OK;
}

static int check_name(const char *name)
{
    if (name == NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "name is NULL");
    size_t len = strnlen(name, DLOCK_NAME_MAX + 1);
    if (len == 0)
        return dlock__fail(DLOCK_ERR_INVALID, "name is empty");
    if (len > DLOCK_NAME_MAX)
        return dlock__fail(DLOCK_ERR_INVALID, "name longer than %d bytes", DLOCK_NAME_MAX);
    return DLOCK_OK;
}

/* ---- keys ------------------------------------------------------------------- */

/* The names of a lock, in one allocation: P{name}, P{name}:fence, P{name}:wake,
 * P{name}:queue and P{name}:qexp (scripts.c has the layout). */
typedef struct keys {
    char *buf;
    const char *lock, *fence, *wake, *queue, *qexp;
    size_t lock_len, fence_len, wake_len, queue_len, qexp_len;
} keys;

static int keys_make(const dlock_client *c, const char *name, size_t name_len, keys *k)
{
    static const char *const suffix[5] = {"", ":fence", ":wake", ":queue", ":qexp"};
    const char **dst[5] = {&k->lock, &k->fence, &k->wake, &k->queue, &k->qexp};
    size_t *len[5] = {&k->lock_len, &k->fence_len, &k->wake_len, &k->queue_len, &k->qexp_len};
    size_t base = c->prefix_len + name_len + sizeof "{}";
    k->buf = dlock__malloc(5 * base + sizeof ":fence:wake:queue:qexp");
    if (k->buf == NULL)
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    char *p = k->buf;
    for (int i = 0; i < 5; i++) {
        *dst[i] = p;
        *len[i] = (size_t)sprintf(p, "%s{", c->prefix);
        memcpy(p + *len[i], name, name_len);
        *len[i] += name_len;
        *len[i] += (size_t)sprintf(p + *len[i], "}%s", suffix[i]);
        p += *len[i] + 1;
    }
    return DLOCK_OK;
}

/* ---- rounds ----------------------------------------------------------------- */

/* What the nodes said in one round. */
typedef struct tally {
    int yes;                   /* granted / deleted / extended / holds our token */
    int no;                    /* refused by a holder / not our token */
    int failed;                /* no usable answer */
    int permanent;             /* failed with an error that retrying cannot fix */
    int last_err;              /* the error of a failed node (N = 1: the node's own) */
    int64_t busy_remaining_ms; /* largest holder PTTL seen in a refusal */
} tally;

static bool is_permanent(int err)
{
    return err == DLOCK_ERR_AUTH || err == DLOCK_ERR_PROTOCOL || err == DLOCK_ERR_INVALID ||
           err == DLOCK_ERR_NOMEM;
}

/* Count a node that gave no usable answer; its reason is in r->detail. */
static void count_failure(tally *t, dlock__req *r, int err)
{
    r->err = err;
    t->failed++;
    t->last_err = err;
    if (is_permanent(err))
        t->permanent++;
}

/* Read an integer reply into *v; any other reply counts as a failure of the node. */
static bool int_reply(tally *t, dlock__req *r, dlock__conn *conn, const char *what, long long *v)
{
    if (r->err != DLOCK_OK) {
        count_failure(t, r, r->err);
        return false;
    }
    const redisReply *rep = r->reply;
    if (rep->type == REDIS_REPLY_INTEGER) {
        *v = rep->integer;
        return true;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(r->detail, sizeof r->detail, "%s: %s: -%.100s", conn->node->addr.display, what,
                 rep->str);
        count_failure(t, r, dlock__server_error_code(rep->str, rep->len));
    } else {
        snprintf(r->detail, sizeof r->detail, "%s: %s: unexpected reply type %d",
                 conn->node->addr.display, what, rep->type);
        count_failure(t, r, DLOCK_ERR_PROTOCOL);
    }
    return false;
}

static void free_replies(dlock__req *reqs, int n)
{
    for (int i = 0; i < n; i++) {
        freeReplyObject(reqs[i].reply);
        reqs[i].reply = NULL;
    }
}

/* The error of a round that could not decide, with every failed node's reason. */
static int undecided(const dlock_client *c, const tally *t, const dlock__req *reqs)
{
    if (c->n == 1)
        return dlock__fail(t->last_err, "%s", reqs[0].detail);
    dlock__fail(DLOCK_ERR_NOQUORUM, "%d of %d servers answered, %d needed", c->n - t->failed, c->n,
                c->quorum);
    for (int i = 0; i < c->n; i++)
        if (reqs[i].err != DLOCK_OK)
            dlock__append_error("%s", reqs[i].detail);
    return DLOCK_ERR_NOQUORUM;
}

/* One round of one script call on every node (dlock__round in internal.h). */
typedef dlock__round round;

/* Votes: an acquire's grant (a positive fence) from a node whose grants count, and a
 * token-checked script's 1. */
static bool node_votes(dlock__node *node, int64_t now);

static bool grant_vote(const dlock__req *r, int i, void *arg)
{
    const round *rd = arg;
    return r->reply->type == REDIS_REPLY_INTEGER && r->reply->integer > 0 &&
           node_votes(rd->set->conns[i].node, dlock__now_us());
}

static bool one_vote(const dlock__req *r, int i, void *arg)
{
    (void)i;
    (void)arg;
    return r->reply->type == REDIS_REPLY_INTEGER && r->reply->integer == 1;
}

/* Run call on every node, awaited; with a vote function, the round ends once decided. */
static int round_run_vote(dlock_client *c, round *rd, dlock__call *call, dlock__vote_fn vote)
{
    dlock__call_reqs(call, rd->reqs, c->n, true);
    rd->start_us = dlock__now_us();
    dlock__fanout_vote(c, rd->set->conns, rd->reqs, c->n, vote, rd);
    rd->end_us = dlock__now_us();
    return DLOCK_OK;
}

static int round_run(dlock_client *c, round *rd, dlock__call *call)
{
    return round_run_vote(c, rd, call, NULL);
}

/* ---- the lock handle -------------------------------------------------------- */

static void attach(dlock_client *c, dlock_lock *l)
{
    pthread_mutex_lock(&c->mu);
    l->next = c->locks;
    if (c->locks != NULL)
        c->locks->prev = l;
    c->locks = l;
    l->attached = true;
    pthread_mutex_unlock(&c->mu);
}

/* Free a handle, taking it off the renewal thread and its client's list first. */
static void lock_free(dlock_lock *l)
{
    dlock_client *c = l->client;
    if (dlock__client_forked(c)) {
        /* A copy inherited across fork(): the parent's threads are not here, and a
         * mutex copied while one of them held it would never be released. Free the
         * memory and touch nothing shared but the child's own copy of the list of
         * handles (no other thread of the child can hold its mutex: only the thread
         * that forked is copied, and dlock calls never fork). */
        if (l->attached) {
            if (l->prev != NULL)
                l->prev->next = l->next;
            else
                c->locks = l->next;
            if (l->next != NULL)
                l->next->prev = l->prev;
        }
        if (l->lost_fd >= 0)
            close(l->lost_fd);
        free(l->renew_key);
        free(l->name);
        l->magic = 0;
        free(l);
        return;
    }
    dlock__watchdog_remove(c, l);
    if (l->attached) {
        pthread_mutex_lock(&c->mu);
        if (l->prev != NULL)
            l->prev->next = l->next;
        else
            c->locks = l->next;
        if (l->next != NULL)
            l->next->prev = l->prev;
        pthread_mutex_unlock(&c->mu);
    }
    if (l->lost_fd >= 0)
        close(l->lost_fd);
    free(l->renew_key);
    free(l->name);
    l->magic = 0;
    free(l);
}

static int lock_new(dlock_client *c, const char *name, dlock_lock **out)
{
    dlock_lock *l = dlock__calloc(1, sizeof *l);
    if (l == NULL || (l->name = dlock__strdup(name)) == NULL) {
        free(l);
        /* The code, not dlock__fail's return, so that the compiler sees *out set on
         * every DLOCK_OK path (gcc -O3 -Warray-bounds in dlock_lock_adopt). */
        dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
        return DLOCK_ERR_NOMEM;
    }
    l->magic = DLOCK_LOCK_MAGIC;
    l->client = c;
    l->name_len = strlen(name);
    l->lost_fd = -1;
    *out = l;
    return DLOCK_OK;
}

void dlock__lock_mark_lost(dlock_lock *l)
{
    dlock_client *c = l->client;
    l->valid_until_us = 0;
    l->lost = true;
    pthread_mutex_lock(&c->mu);
    if (l->lost_fd >= 0) {
        uint64_t one = 1;
        /* A full counter (never, at one write per loss) only means already readable. */
        ssize_t w = write(l->lost_fd, &one, sizeof one);
        (void)w;
    }
    pthread_mutex_unlock(&c->mu);
}

static void mark_lost(dlock_lock *l)
{
    dlock__watchdog_remove(l->client, l);
    dlock__lock_mark_lost(l);
}

int64_t dlock__round_validity_us(const dlock_client *c, int64_t ttl_us, int64_t start_us,
                                 int64_t end_us)
{
    return dlock__validity_us(ttl_us, end_us - start_us, c->drift_factor, c->drift_min_us);
}

/* Check a handle and its client on entry to a call. */
static int enter_lock(dlock_lock *l)
{
    dlock__clear_error();
    if (l == NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "lock is NULL");
    if (l->magic != DLOCK_LOCK_MAGIC)
        return dlock__fail(DLOCK_ERR_INVALID, "not a dlock_lock (released or corrupted?)");
    return dlock__client_enter(l->client);
}

/* ---- acquire ---------------------------------------------------------------- */

/* Sleep before the next attempt: exponential backoff (1 ms doubling to 32 ms) with
 * full jitter, never past the holder's remaining lease or the caller's deadline. The
 * waiting issue replaces this with wake-ups from releases. */
static int backoff(int attempt, int64_t busy_ms, int64_t deadline_us, int cancel_fd)
{
    int64_t cap_us = (int64_t)1000 << (attempt < 5 ? attempt : 5);
    if (busy_ms > 0 && busy_ms * 1000 + 1000 < cap_us)
        cap_us = busy_ms * 1000 + 1000;
    int64_t delay_us = cap_us / 2 + (int64_t)dlock__random_below((uint64_t)cap_us / 2 + 1);
    int64_t left = deadline_us - dlock__now_us();
    if (delay_us > left)
        delay_us = left > 0 ? left : 0;
    struct pollfd p = {.fd = cancel_fd > 0 ? cancel_fd : -1, .events = POLLIN};
    struct timespec ts = {(time_t)(delay_us / 1000000), (long)(delay_us % 1000000) * 1000};
    for (;;) {
        int r = ppoll(&p, 1, &ts, NULL);
        if (r > 0)
            return dlock__fail(DLOCK_ERR_CANCELED, "canceled through cancel_fd");
        if (r == 0 || errno != EINTR)
            return DLOCK_OK;
    }
}

static bool opts_ok(const dlock_opts *o, int64_t *ttl_ms, int64_t *wait_ms, int *rc)
{
    static const dlock_opts defaults = {0};
    if (o == NULL)
        o = &defaults;
    for (size_t i = 0; i < sizeof o->reserved / sizeof *o->reserved; i++)
        if (o->reserved[i] != 0) {
            *rc = dlock__fail(DLOCK_ERR_INVALID, "dlock_opts.reserved must be zero");
            return false;
        }
    *ttl_ms = o->ttl_ms ? o->ttl_ms : DLOCK_TTL_DEFAULT_MS;
    if ((*rc = dlock__check_ttl(*ttl_ms, "ttl_ms")) != DLOCK_OK)
        return false;
    *wait_ms = o->wait_ms;
    if (*wait_ms < -1) {
        *rc = dlock__fail(DLOCK_ERR_INVALID, "wait_ms %lld: use -1 (forever), 0 or more",
                          (long long)*wait_ms);
        return false;
    }
    if (o->cancel_fd < 0) {
        *rc = dlock__fail(DLOCK_ERR_INVALID, "cancel_fd is negative (0 means none)");
        return false;
    }
    if (o->reserved32 != 0) {
        *rc = dlock__fail(DLOCK_ERR_INVALID, "dlock_opts.reserved32 must be zero");
        return false;
    }
    if (o->on_lost != NULL && !o->auto_renew) {
        *rc = dlock__fail(DLOCK_ERR_INVALID, "on_lost is only called with auto_renew");
        return false;
    }
    if (o->label != NULL && strnlen(o->label, DLOCK_LABEL_MAX + 1) > DLOCK_LABEL_MAX) {
        *rc = dlock__fail(DLOCK_ERR_INVALID, "label longer than %d bytes", DLOCK_LABEL_MAX);
        return false;
    }
    return true;
}

/* Whether node's grants count now (restart-aware voting). */
static bool node_votes(dlock__node *node, int64_t now)
{
    pthread_mutex_lock(&node->mu);
    bool v = node->votes_from_us <= now;
    pthread_mutex_unlock(&node->mu);
    return v;
}

/* Strict fence mode, second round: raise the counters of a quorum to `fence`, each
 * node checking that it still holds our token. DLOCK_OK when a quorum confirmed. */
static int raise_fences(dlock_client *c, round *rd, const keys *k, const dlock_lock *l)
{
    char fence[24];
    int flen = snprintf(fence, sizeof fence, "%llu", (unsigned long long)l->fence);
    const char *args[] = {k->lock, k->fence, l->token, fence};
    const size_t lens[] = {k->lock_len, k->fence_len, DLOCK_TOKEN_LEN, (size_t)flen};
    dlock__call call;
    int rc = dlock__call_format(&c->scripts, DLOCK_SCRIPT_FENCE, 2, 4, args, lens, &call);
    if (rc != DLOCK_OK)
        return rc;
    int64_t start = rd->start_us;
    round_run_vote(c, rd, &call, one_vote);
    rd->start_us = start; /* validity counts from the first round */
    tally t = {0};
    for (int i = 0; i < c->n; i++) {
        long long v;
        if (int_reply(&t, &rd->reqs[i], &rd->set->conns[i], "fence", &v))
            v == 1 ? t.yes++ : t.no++;
    }
    if (t.yes >= c->quorum)
        rc = DLOCK_OK;
    else if (t.no > c->n - c->quorum)
        rc = dlock__fail(DLOCK_ERR_BUSY, "the lock was lost before its fence was confirmed");
    else
        rc = undecided(c, &t, rd->reqs);
    free_replies(rd->reqs, c->n);
    dlock__call_free(&call);
    return rc;
}

/* Send a script call, not awaited, to the nodes marked in mask[] whose connection is
 * up. Nobody reads the reply, so a -NOSCRIPT would go unnoticed; a node that just
 * restarted has no scripts cached. So the script itself goes (EVAL), not its SHA. */
static void send_unawaited(dlock_client *c, dlock__connset *set, dlock__call *call,
                           const bool *mask)
{
    dlock__req reqs[DLOCK_SERVERS_MAX];
    bool any = false;
    if (dlock__call_eval(call) != DLOCK_OK)
        return; /* out of memory: leases expire, queue entries too */
    for (int i = 0; i < c->n; i++) {
        memset(&reqs[i], 0, sizeof reqs[i]);
        if (mask[i]) {
            reqs[i].cmd = call->eval;
            reqs[i].cmdlen = (size_t)call->eval_len;
            any = true;
        }
    }
    if (any)
        dlock__fanout(c, set->conns, reqs, c->n);
}

/* Send a release, not awaited, to the nodes marked in undo[]. */
static void undo_grants(dlock_client *c, round *rd, const keys *k, const dlock_lock *l,
                        const bool *undo)
{
    dlock__call rel;
    const char *args[] = {k->lock, k->fence, k->queue, k->qexp, l->token, "0", k->wake, "0"};
    const size_t lens[] = {
        k->lock_len, k->fence_len, k->queue_len, k->qexp_len, DLOCK_TOKEN_LEN, 1, k->wake_len, 1};
    if (dlock__call_format(&c->scripts, DLOCK_SCRIPT_RELEASE, 4, 8, args, lens, &rel) != DLOCK_OK)
        return; /* out of memory: the leases will expire */
    send_unawaited(c, rd->set, &rel, undo);
    dlock__call_free(&rel);
}

/* A waiter that gives up leaves the queue on every node, passing on a wake-up it may
 * have been sent (not awaited). */
static void leave_queue(dlock_client *c, dlock__connset *set, const keys *k, const char *token)
{
    dlock__call call;
    const char *args[] = {k->lock, k->queue, k->qexp, token, k->wake};
    const size_t lens[] = {k->lock_len, k->queue_len, k->qexp_len, DLOCK_TOKEN_LEN, k->wake_len};
    bool all[DLOCK_SERVERS_MAX];
    for (int i = 0; i < c->n; i++)
        all[i] = true;
    if (dlock__call_format(&c->scripts, DLOCK_SCRIPT_LEAVE, 3, 5, args, lens, &call) != DLOCK_OK)
        return; /* the entry expires by itself */
    send_unawaited(c, set, &call, all);
    dlock__call_free(&call);
}

/* One acquisition attempt. DLOCK_OK with l's fence and validity set, or the attempt's
 * error, with what the nodes said in *t. */
static int attempt(dlock_client *c, round *rd, dlock__call *acq, const keys *k, dlock_lock *l,
                   int64_t ttl_ms, tally *t)
{
    memset(t, 0, sizeof *t);
    round_run_vote(c, rd, acq, grant_vote);
    uint64_t fence = 0;
    int nonvoting = 0;
    bool undo[DLOCK_SERVERS_MAX], any = false;
    for (int i = 0; i < c->n; i++) {
        long long v;
        /* Until we know better, a node's outcome is unknown: it may have run the
         * script even if its answer never arrived. A command held behind a
         * handshake that never finished was never sent: nothing to undo there. */
        undo[i] = !rd->reqs[i].held;
        if (!int_reply(t, &rd->reqs[i], &rd->set->conns[i], "acquire", &v))
            continue;
        if (v <= 0) {
            undo[i] = false; /* a clean refusal: nothing of ours there */
            t->no++;
            /* A server's word, bounded: a broken one could send LLONG_MIN. */
            int64_t left = v < -(long long)DLOCK_TTL_MAX_MS ? DLOCK_TTL_MAX_MS : -v;
            if (left > t->busy_remaining_ms)
                t->busy_remaining_ms = left;
            continue;
        }
        if ((uint64_t)v > fence)
            fence = (uint64_t)v;
        if (node_votes(rd->set->conns[i].node, rd->end_us))
            t->yes++;
        else
            nonvoting++;
    }
    free_replies(rd->reqs, c->n);
    int64_t validity = dlock__validity_us(ttl_ms * 1000, rd->end_us - rd->start_us, c->drift_factor,
                                          c->drift_min_us);
    int rc;
    if (t->yes >= c->quorum && validity > 0) {
        l->fence = fence;
        rc = DLOCK_OK;
        if (c->n > 1 && c->fence_mode == DLOCK_FENCE_STRICT) {
            rc = raise_fences(c, rd, k, l);
            validity = dlock__validity_us(ttl_ms * 1000, rd->end_us - rd->start_us, c->drift_factor,
                                          c->drift_min_us);
            if (rc == DLOCK_OK && validity <= 0)
                rc = dlock__fail(DLOCK_ERR_TIMEOUT, "fences raised, but no validity left");
        }
        if (rc == DLOCK_OK) {
            l->valid_until_us = rd->end_us + validity;
            return DLOCK_OK;
        }
    } else if (t->yes >= c->quorum) {
        rc = dlock__fail(DLOCK_ERR_TIMEOUT,
                         "granted, but the round took %lld ms of a %lld ms lease (no validity "
                         "left)",
                         (long long)((rd->end_us - rd->start_us) / 1000), (long long)ttl_ms);
    } else if (t->yes + t->no + nonvoting >= c->quorum && t->no > 0) {
        if (t->busy_remaining_ms > 0)
            rc = dlock__fail(DLOCK_ERR_BUSY,
                             "%d of %d servers refused: their holder's lease "
                             "has %lld ms left",
                             t->no, c->n, (long long)t->busy_remaining_ms);
        else
            rc = dlock__fail(
                DLOCK_ERR_BUSY,
                "%d of %d servers refused: the holder's lease is ending or has no expiry", t->no,
                c->n);
        if (nonvoting > 0)
            dlock__append_error("%d grant(s) from restarted servers not counted", nonvoting);
    } else {
        rc = undecided(c, t, rd->reqs);
        if (nonvoting > 0)
            dlock__append_error("%d grant(s) from restarted servers not counted (they vote "
                                "again once up for the longest lease)",
                                nonvoting);
    }
    /* Not acquired: undo every grant, and every outcome we do not know, including on a
     * node whose connection broke mid-reply (the server may have run the script):
     * there the release goes on a new connection. The release is sent, not awaited,
     * so a failed attempt costs no extra round trip. */
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
static int format_acquire(dlock_client *c, const keys *k, const char *value, size_t vlen,
                          int64_t ttl_ms, int64_t ticket, bool fair, const char *token,
                          acquire_args *a, dlock__call *out)
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
    return dlock__call_format(&c->scripts, DLOCK_SCRIPT_ACQUIRE, 4, 10, a->args, a->lens, out);
}

/* When a waiter retries if nothing wakes it: when the holder's lease should be over
 * (an expiry publishes nothing), with jitter so that waiters of several processes do
 * not arrive together, and at least every DLOCK_QUEUE_REFRESH_MS (which keeps its
 * queue entry alive). */
static int64_t retry_at(int64_t now, int64_t busy_ms, int64_t deadline)
{
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

int dlock_acquire(dlock_client *c, const char *name, const dlock_opts *opts, dlock_lock **out)
{
    dlock__clear_error();
    if (out == NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "out is NULL");
    *out = NULL;
    int rc = dlock__client_enter(c);
    if (rc != DLOCK_OK || (rc = check_name(name)) != DLOCK_OK)
        return rc;
    int64_t ttl_ms, wait_ms;
    if (!opts_ok(opts, &ttl_ms, &wait_ms, &rc))
        return rc;
    /* The arrival time orders fair waiters: the same number on every node. */
    int64_t ticket = dlock__wallclock_us();
    int cancel_fd = opts ? opts->cancel_fd : 0;
    bool fair = opts && opts->fair;
    dlock__note_ttl(c, ttl_ms);
    const char *label = opts && opts->label && opts->label[0] ? opts->label : NULL;

    dlock_lock *l = NULL;
    keys k = {0};
    dlock__call acq = {0};
    round rd = {0};
    dlock__waiter *w = NULL;
    if ((rc = lock_new(c, name, &l)) != DLOCK_OK || (rc = dlock__token_new(l->token)) != DLOCK_OK ||
        (rc = keys_make(c, name, l->name_len, &k)) != DLOCK_OK)
        goto out;

    /* The lock's value: "<token> <host:pid>[ <label>]" (what `dlock status` shows). */
    char value[DLOCK_TOKEN_LEN + sizeof c->holder + DLOCK_LABEL_MAX + 4];
    int vlen = snprintf(value, sizeof value, "%s %s%s%s", l->token, c->holder, label ? " " : "",
                        label ? label : "");
    /* Two sets of arguments: the plain try's, and the queued retries' (with a ticket). */
    acquire_args try_args, queued_args;
    if ((rc = format_acquire(c, &k, value, (size_t)vlen, ttl_ms, 0, fair, l->token, &try_args,
                             &acq)) != DLOCK_OK)
        goto out;
    if ((rd.set = dlock__connset_get(c)) == NULL) {
        rc = dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
        goto out;
    }

    int64_t start = dlock__now_us();
    /* A wait longer than a century is a wait forever (and must not overflow). */
    int64_t deadline =
        wait_ms < 0 || wait_ms > INT64_C(3153600000000) ? INT64_MAX : start + wait_ms * 1000;
    /* Servers that stay unreachable end even an endless wait: a wait is for a holder
     * to go away, not for an outage to end (the CLI's exit 69 even with -w forever). */
    int64_t outage_since = 0;
    for (int n = 0;; n++) {
        tally t;
        rc = attempt(c, &rd, &acq, &k, l, ttl_ms, &t);
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
            if (t.permanent > c->n - c->quorum)
                break;
            if (now - outage_since >= c->connect_timeout_us)
                break;
        }
        if (now >= deadline)
            break;
        if (rc == DLOCK_ERR_BUSY && w == NULL) {
            /* Start waiting: listen for wake-ups first, then retry at once, queued.
             * A release between the try and the subscription would otherwise pass
             * unseen. If listening cannot start, the backoff below still works. */
            dlock__call queued;
            if (dlock__wait_join(c, k.wake, k.wake_len, l->token, &w) == DLOCK_OK &&
                format_acquire(c, &k, value, (size_t)vlen, ttl_ms, ticket, fair, l->token,
                               &queued_args, &queued) == DLOCK_OK) {
                dlock__call_free(&acq);
                acq = queued;
                continue;
            }
        }
        char saved[512];
        snprintf(saved, sizeof saved, "%s", dlock_errmsg());
        int brc =
            w != NULL && rc == DLOCK_ERR_BUSY
                ? dlock__wait_sleep(w, retry_at(now, t.busy_remaining_ms, deadline), cancel_fd)
                : backoff(n, t.busy_remaining_ms, deadline, cancel_fd);
        if (brc != DLOCK_OK) {
            rc = brc;
            break;
        }
        dlock__fail(rc, "%s", saved);
    }
out:
    if (w != NULL) {
        dlock__wait_leave(c, w);
        if (rc != DLOCK_OK) {
            char saved[512];
            snprintf(saved, sizeof saved, "%s", dlock_errmsg());
            leave_queue(c, rd.set, &k, l->token);
            dlock__fail(rc, "%s", saved);
        }
    }
    if (rd.set != NULL)
        dlock__connset_put(c, rd.set);
    dlock__call_free(&acq);
    free(k.buf);
    if (rc != DLOCK_OK) {
        if (l != NULL)
            lock_free(l);
        return rc;
    }
    if (opts != NULL && opts->auto_renew &&
        (rc = dlock__watchdog_add(c, l, ttl_ms, opts->on_lost, opts->on_lost_user)) != DLOCK_OK) {
        /* Without renewal the caller would hold a lock that silently expires. */
        char saved[512];
        snprintf(saved, sizeof saved, "%s", dlock_errmsg());
        attach(c, l);
        dlock_release(l);
        return dlock__fail(rc, "%s", saved);
    }
    attach(c, l);
    DLOCK_PAUSE_POINT(DLOCK_HOOK_ACQUIRED);
    dlock__clear_error();
    *out = l;
    return DLOCK_OK;
}

/* ---- extend, release, check ------------------------------------------------- */

/* Run a script that answers 1 (yes: done) or 0 (no: refused) on every node and
 * decide: DLOCK_OK on a quorum of 1s; `no_err` with `no_msg` when so many nodes said 0
 * that no quorum of 1s is possible; else the unavailability error. */
static int vote_round(dlock_client *c, enum dlock__script_id id, int nkeys, int nargs,
                      const char *const *args, const size_t *lens, const char *what, int no_err,
                      const char *no_msg, int64_t *start_us)
{
    dlock__call call;
    round rd = {0};
    int rc = dlock__call_format(&c->scripts, id, nkeys, nargs, args, lens, &call);
    if (rc != DLOCK_OK)
        return rc;
    if ((rd.set = dlock__connset_get(c)) == NULL) {
        dlock__call_free(&call);
        return dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    }
    round_run_vote(c, &rd, &call, one_vote);
    *start_us = rd.start_us;
    tally t = {0};
    for (int i = 0; i < c->n; i++) {
        long long v;
        if (int_reply(&t, &rd.reqs[i], &rd.set->conns[i], what, &v)) {
            if (v == 1) {
                t.yes++;
            } else if (v == 0) {
                t.no++;
            } else {
                snprintf(rd.reqs[i].detail, sizeof rd.reqs[i].detail,
                         "%s: %s: unexpected reply %lld", rd.set->conns[i].node->addr.display, what,
                         v);
                count_failure(&t, &rd.reqs[i], DLOCK_ERR_PROTOCOL);
            }
        }
    }
    if (t.yes >= c->quorum)
        rc = DLOCK_OK;
    else if (t.no > c->n - c->quorum)
        rc = dlock__fail(no_err, "%s: %s", what, no_msg);
    else
        rc = undecided(c, &t, rd.reqs);
    free_replies(rd.reqs, c->n);
    dlock__connset_put(c, rd.set);
    dlock__call_free(&call);
    return rc;
}

/* A token-checked script on the lock's servers: DLOCK_ERR_LOST when not ours. */
static int token_round(dlock_lock *l, enum dlock__script_id id, int nkeys, int nargs,
                       const char *const *args, const size_t *lens, const char *what,
                       int64_t *start_us)
{
    return vote_round(l->client, id, nkeys, nargs, args, lens, what, DLOCK_ERR_LOST,
                      "the lock is not held with this token (expired, released or taken by "
                      "another owner)",
                      start_us);
}

int dlock_extend(dlock_lock *l, int64_t ttl_ms)
{
    int rc = enter_lock(l);
    if (rc != DLOCK_OK || (rc = dlock__check_ttl(ttl_ms, "ttl_ms")) != DLOCK_OK)
        return rc;
    if (l->lost)
        return dlock__fail(DLOCK_ERR_LOST, "this handle already found the lock lost");
    dlock_client *c = l->client;
    keys k;
    if ((rc = keys_make(c, l->name, l->name_len, &k)) != DLOCK_OK)
        return rc;
    char ttl[24];
    int tlen = snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_ms);
    const char *args[] = {k.lock, l->token, ttl};
    const size_t lens[] = {k.lock_len, DLOCK_TOKEN_LEN, (size_t)tlen};
    int64_t start;
    rc = token_round(l, DLOCK_SCRIPT_EXTEND, 1, 3, args, lens, "extend", &start);
    free(k.buf);
    if (rc == DLOCK_OK) {
        /* The new lease runs from when the round started, at the latest. */
        int64_t validity = dlock__validity_us(ttl_ms * 1000, dlock__now_us() - start,
                                              c->drift_factor, c->drift_min_us);
        if (validity <= 0)
            return dlock__fail(DLOCK_ERR_TIMEOUT, "extended, but the round used up the new lease");
        l->valid_until_us = dlock__now_us() + validity;
        dlock__watchdog_set_ttl(c, l, ttl_ms);
    } else if (rc == DLOCK_ERR_LOST) {
        mark_lost(l);
    }
    return rc;
}

int dlock_release(dlock_lock *l)
{
    int rc = enter_lock(l);
    if (rc != DLOCK_OK) {
        /* "Frees l, whatever it returns": a handle inherited across fork() is freed
         * without touching the servers (the lock is the parent's). */
        if (l != NULL && l->magic == DLOCK_LOCK_MAGIC)
            lock_free(l);
        return rc;
    }
    dlock_client *c = l->client;
    keys k;
    if ((rc = keys_make(c, l->name, l->name_len, &k)) != DLOCK_OK) {
        lock_free(l);
        return rc;
    }
    /* With N > 1 the release raises every node's fence counter to this lock's fence
     * (design.md's default fence mode), so a later quorum, which meets at least one
     * of these nodes, hands out a larger fence. With N = 1 the counter is already
     * there. */
    char fence[24] = "0";
    if (c->n > 1)
        snprintf(fence, sizeof fence, "%llu", (unsigned long long)l->fence);
    const char *args[] = {k.lock, k.fence, k.queue, k.qexp, l->token, fence, k.wake, "1"};
    const size_t lens[] = {k.lock_len,      k.fence_len,   k.queue_len, k.qexp_len,
                           DLOCK_TOKEN_LEN, strlen(fence), k.wake_len,  1};
    int64_t start;
    bool expired = l->valid_until_us != 0 && dlock__now_us() >= l->valid_until_us;
    rc = token_round(l, DLOCK_SCRIPT_RELEASE, 4, 8, args, lens, "release", &start);
    free(k.buf);
    if (rc == DLOCK_OK && expired)
        rc = dlock__fail(DLOCK_ERR_LOST, "released, but the lease had run out before the "
                                         "release: work after that was not protected");
    lock_free(l);
    return rc;
}

int dlock_lock_detach(dlock_lock *l)
{
    dlock__clear_error();
    if (l == NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "lock is NULL");
    if (l->magic != DLOCK_LOCK_MAGIC)
        return dlock__fail(DLOCK_ERR_INVALID, "not a dlock_lock (released or corrupted?)");
    lock_free(l);
    return DLOCK_OK;
}

int dlock_lock_adopt(dlock_client *c, const char *name, const char *token, dlock_lock **out)
{
    dlock__clear_error();
    if (out == NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "out is NULL");
    *out = NULL;
    int rc = dlock__client_enter(c);
    if (rc != DLOCK_OK || (rc = check_name(name)) != DLOCK_OK)
        return rc;
    if (token == NULL || !dlock__token_valid(token))
        return dlock__fail(DLOCK_ERR_INVALID, "token must be %d lowercase hex characters",
                           DLOCK_TOKEN_LEN);
    dlock_lock *l;
    if ((rc = lock_new(c, name, &l)) != DLOCK_OK)
        return rc;
    memcpy(l->token, token, DLOCK_TOKEN_LEN + 1);
    attach(c, l);
    *out = l;
    return DLOCK_OK;
}

/* ---- inspect and check ------------------------------------------------------ */

/* Copy src into dst[size], cutting it short if it does not fit (descriptions are for
 * people; the token is compared on its first DLOCK_TOKEN_LEN bytes only). */
static void copy_truncated(char *dst, size_t size, const char *src)
{
    size_t len = strnlen(src, size - 1);
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* What one node holds for a name (from the INSPECT script). */
typedef struct node_view {
    bool ok;
    char value[600]; /* "<token> <description>", truncated; "" when free */
    long long pttl;
    uint64_t fence;
} node_view;

static bool parse_view(tally *t, dlock__req *r, dlock__conn *conn, node_view *v)
{
    memset(v, 0, sizeof *v);
    if (r->err != DLOCK_OK) {
        count_failure(t, r, r->err);
        return false;
    }
    const redisReply *rep = r->reply;
    if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(r->detail, sizeof r->detail, "%s: inspect: -%.100s", conn->node->addr.display,
                 rep->str);
        count_failure(t, r, dlock__server_error_code(rep->str, rep->len));
        return false;
    }
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 3 ||
        rep->element[0]->type != REDIS_REPLY_STRING ||
        rep->element[1]->type != REDIS_REPLY_INTEGER ||
        rep->element[2]->type != REDIS_REPLY_STRING) {
        snprintf(r->detail, sizeof r->detail, "%s: inspect: unexpected reply shape",
                 conn->node->addr.display);
        count_failure(t, r, DLOCK_ERR_PROTOCOL);
        return false;
    }
    copy_truncated(v->value, sizeof v->value, rep->element[0]->str);
    v->pttl = rep->element[1]->integer;
    v->fence = strtoull(rep->element[2]->str, NULL, 10);
    v->ok = true;
    return true;
}

static int cmp_desc(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x < y) - (x > y);
}

/* Ask every node what it holds for the name; views[i].ok tells who answered. */
static int inspect_round(dlock_client *c, const char *name, size_t name_len, node_view *views,
                         tally *t, round *rd)
{
    keys k;
    dlock__call call;
    int rc = keys_make(c, name, name_len, &k);
    if (rc != DLOCK_OK)
        return rc;
    const char *args[] = {k.lock, k.fence};
    const size_t lens[] = {k.lock_len, k.fence_len};
    /* k.buf lives until the round is over: the call's EVAL form borrows the keys. */
    rc = dlock__call_format(&c->scripts, DLOCK_SCRIPT_INSPECT, 2, 2, args, lens, &call);
    if (rc == DLOCK_OK && (rd->set = dlock__connset_get(c)) == NULL)
        rc = dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    if (rc == DLOCK_OK) {
        round_run(c, rd, &call);
        memset(t, 0, sizeof *t);
        for (int i = 0; i < c->n; i++)
            parse_view(t, &rd->reqs[i], &rd->set->conns[i], &views[i]);
        free_replies(rd->reqs, c->n);
        dlock__connset_put(c, rd->set);
    }
    dlock__call_free(&call);
    free(k.buf);
    return rc;
}

/* Among the nodes whose value starts with `token`, the lease a quorum still has: the
 * quorum-th largest PTTL. -1 when fewer than a quorum hold it. */
static long long quorum_pttl(const dlock_client *c, const node_view *views, const char *token)
{
    long long p[DLOCK_SERVERS_MAX];
    int m = 0;
    for (int i = 0; i < c->n; i++)
        if (views[i].ok && strncmp(views[i].value, token, DLOCK_TOKEN_LEN) == 0 &&
            views[i].value[0] != '\0')
            p[m++] = views[i].pttl;
    if (m < c->quorum)
        return -1;
    qsort(p, (size_t)m, sizeof *p, cmp_desc);
    return p[c->quorum - 1];
}

int dlock_check(dlock_lock *l)
{
    int rc = enter_lock(l);
    if (rc != DLOCK_OK)
        return rc;
    if (l->lost)
        return dlock__fail(DLOCK_ERR_LOST, "this handle already found the lock lost");
    dlock_client *c = l->client;
    node_view views[DLOCK_SERVERS_MAX];
    tally t;
    round rd = {0};
    if ((rc = inspect_round(c, l->name, l->name_len, views, &t, &rd)) != DLOCK_OK)
        return rc;
    long long pttl = quorum_pttl(c, views, l->token);
    if (pttl >= 0) {
        /* The servers' remaining lease, less drift, counted from the round's start. */
        /* PTTL is the server's word: no lease of ours is longer than DLOCK_TTL_MAX_MS. */
        if (pttl > DLOCK_TTL_MAX_MS)
            pttl = DLOCK_TTL_MAX_MS;
        int64_t validity = dlock__validity_us(pttl * 1000, 0, c->drift_factor, c->drift_min_us);
        l->valid_until_us = rd.start_us + (validity > 0 ? validity : 0);
        return DLOCK_OK;
    }
    int answered = c->n - t.failed, ours = 0;
    for (int i = 0; i < c->n; i++)
        if (views[i].ok && views[i].value[0] != '\0' &&
            strncmp(views[i].value, l->token, DLOCK_TOKEN_LEN) == 0)
            ours++;
    /* Nodes that answered without our token: if they leave no room for a quorum, the
     * lock is lost; otherwise too few answered to tell. */
    if (answered - ours > c->n - c->quorum) {
        mark_lost(l);
        return dlock__fail(DLOCK_ERR_LOST, "the lock is not held with this token");
    }
    return undecided(c, &t, rd.reqs);
}

int dlock_inspect(dlock_client *c, const char *name, dlock_holder *out)
{
    dlock__clear_error();
    if (out == NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "out is NULL");
    memset(out, 0, sizeof *out);
    int rc = dlock__client_enter(c);
    if (rc != DLOCK_OK || (rc = check_name(name)) != DLOCK_OK)
        return rc;
    node_view views[DLOCK_SERVERS_MAX];
    tally t;
    round rd = {0};
    if ((rc = inspect_round(c, name, strlen(name), views, &t, &rd)) != DLOCK_OK)
        return rc;
    if (c->n - t.failed < c->quorum)
        return undecided(c, &t, rd.reqs);
    for (int i = 0; i < c->n; i++) {
        if (!views[i].ok)
            continue;
        if (views[i].fence > out->fence)
            out->fence = views[i].fence;
        if (out->held || views[i].value[0] == '\0')
            continue;
        long long pttl = quorum_pttl(c, views, views[i].value);
        if (pttl < 0)
            continue;
        out->held = 1;
        out->remaining_ms = pttl;
        /* A value written by another tool may not have our "<token> <description>"
         * shape; show it whole as the description then. */
        const char *v = views[i].value;
        size_t vlen = strlen(v);
        bool ours =
            vlen >= DLOCK_TOKEN_LEN && (vlen == DLOCK_TOKEN_LEN || v[DLOCK_TOKEN_LEN] == ' ');
        if (ours) {
            memcpy(out->token, v, DLOCK_TOKEN_LEN);
            out->token[DLOCK_TOKEN_LEN] = '\0';
            v += vlen > DLOCK_TOKEN_LEN ? DLOCK_TOKEN_LEN + 1 : DLOCK_TOKEN_LEN;
        }
        copy_truncated(out->description, sizeof out->description, v);
    }
    return DLOCK_OK;
}

/* ---- accessors -------------------------------------------------------------- */

uint64_t dlock_fence(const dlock_lock *l)
{
    return l != NULL && l->magic == DLOCK_LOCK_MAGIC ? l->fence : 0;
}

int64_t dlock_remaining_ms(const dlock_lock *l)
{
    if (l == NULL || l->magic != DLOCK_LOCK_MAGIC || l->lost || l->valid_until_us == 0)
        return 0;
    int64_t left = l->valid_until_us - dlock__now_us();
    /* Round down: never claim a millisecond that is not all there. */
    return left > 0 ? left / 1000 : left / 1000 - 1;
}

const char *dlock_token(const dlock_lock *l)
{
    return l != NULL && l->magic == DLOCK_LOCK_MAGIC ? l->token : NULL;
}

const char *dlock_lock_name(const dlock_lock *l)
{
    return l != NULL && l->magic == DLOCK_LOCK_MAGIC ? l->name : NULL;
}

int dlock_lost_fd(dlock_lock *l)
{
    int rc = enter_lock(l);
    if (rc != DLOCK_OK)
        return -1;
    dlock_client *c = l->client;
    /* The renewal thread may find the lock lost at any moment: create the fd and
     * check `lost` under the mutex that dlock__lock_mark_lost takes. */
    pthread_mutex_lock(&c->mu);
    if (l->lost_fd < 0) {
        l->lost_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (l->lost_fd < 0)
            rc = dlock__fail(DLOCK_ERR_IO, "eventfd: %s", strerror(errno));
        else if (l->lost) {
            uint64_t one = 1;
            ssize_t w = write(l->lost_fd, &one, sizeof one);
            (void)w;
        }
    }
    int fd = l->lost_fd;
    pthread_mutex_unlock(&c->mu);
    return rc == DLOCK_OK ? fd : -1;
}

void dlock__lock_release_quietly(dlock_lock *l)
{
    /* Keep the caller's view of errors: freeing a client is not a failing call. */
    char saved[512];
    snprintf(saved, sizeof saved, "%s", dlock_errmsg());
    dlock_release(l);
    dlock__fail(0, "%s", saved);
}

/* ---- the resource side -------------------------------------------------------- */

int dlock_fenced_set(dlock_client *c, const char *key, uint64_t fence, const void *value,
                     size_t value_len)
{
    dlock__clear_error();
    int rc = dlock__client_enter(c);
    if (rc != DLOCK_OK)
        return rc;
    if (key == NULL || key[0] == '\0')
        return dlock__fail(DLOCK_ERR_INVALID, "key is NULL or empty");
    if (fence == 0)
        return dlock__fail(DLOCK_ERR_INVALID, "fence 0 is not a fence (adopted handle?)");
    if (value == NULL && value_len > 0)
        return dlock__fail(DLOCK_ERR_INVALID, "value is NULL");
    if (value_len > (size_t)512 * 1024 * 1024)
        return dlock__fail(DLOCK_ERR_INVALID, "value larger than 512 MiB");
    char f[24];
    int flen = snprintf(f, sizeof f, "%llu", (unsigned long long)fence);
    const char *args[] = {key, f, value ? value : ""};
    const size_t lens[] = {strlen(key), (size_t)flen, value_len};
    int64_t start;
    return vote_round(c, DLOCK_SCRIPT_FENCED_SET, 1, 3, args, lens, "fenced write",
                      DLOCK_ERR_FENCED, "a newer fence was already accepted", &start);
}

int dlock_fence_admit(uint64_t *highest, uint64_t fence)
{
    if (highest == NULL)
        return DLOCK_ERR_INVALID;
    uint64_t seen = __atomic_load_n(highest, __ATOMIC_ACQUIRE);
    do {
        if (fence < seen)
            return DLOCK_ERR_FENCED;
    } while (!__atomic_compare_exchange_n(highest, &seen, fence, false, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE));
    return DLOCK_OK;
}
