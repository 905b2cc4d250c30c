/*
 * watchdog.c: automatic renewal of leases, and lost-lock notification.
 *
 * A job that runs longer than its lease is the most common way Redis locks fail: the
 * lease runs out, a second holder enters, both act. A lock taken with auto_renew is
 * extended every ttl/3 by one background thread per client, until it is released,
 * detached or lost.
 *
 * Renewals are batched: a turn starts when a lock is due, and every lock due by then
 * or within a twelfth of its ttl goes to each node in ONE script call
 * (RENEW, scripts.c) whose reply is a string of '1'/'0', one character per lock. So
 * 1,000 held locks cost a few round trips per node per turn, not 1,000. A batch holds
 * at most DLOCK_RENEW_BATCH_MAX locks (the others due make the next turns, at once): a
 * script over every lock due could outlast the servers' deadline on a loaded machine,
 * and a batch that can never be answered in time would lose all its locks together,
 * each retry adding more locks to it.
 *
 * Per lock, a turn's outcome is:
 *   - a quorum renewed it: its validity is recomputed as for an acquire (ttl less the
 *     round's time less drift), next renewal in ttl/3;
 *   - so many nodes answered "not ours" that no quorum can hold it: lost at once
 *     (deleted or stolen);
 *   - neither (nodes down or slow): tried again soon, the last try starting a timeout
 *     before validity ends; if that fails too, lost (so the loss is known before the
 *     lease can end on any server). Lost means dlock_remaining_ms() <= 0, later calls on the handle
 * say DLOCK_ERR_LOST, the lost fd becomes readable, and on_lost runs once, here.
 *
 * A handle in a round cannot be freed (dlock__watchdog_remove waits for the round),
 * so the thread never touches freed memory and on_lost always gets a live handle.
 */
#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct dlock__watchdog {
    pthread_mutex_t mu;
    pthread_cond_t wake; /* a lock due before wake_at_us was added, or stop */
    /* When the thread's sleep ends (INT64_MAX: it waits for a lock to be added; 0: it is
     * renewing, and looks at the list again when done). A lock due later needs no
     * wake-up: on one CPU each would cost the adder a switch to this thread and back. */
    int64_t wake_at_us;
    pthread_cond_t idle; /* a round finished: in_batch flags were cleared */
    pthread_t thread;
    bool stop;
    /* The registered locks not in a batch now: a min-heap by next_renew_us (each
     * handle's wd_pos is its index), so that a turn finds its locks and a release
     * leaves in O(log n), however many locks are held. */
    dlock_lock **heap;
    int nheap, cap;
    int nlocks; /* registered: in the heap or in the batch being renewed */
    dlock_lock *batch[DLOCK_RENEW_BATCH_MAX];
    dlock_renewal_stats stats;
    int64_t warned_us; /* when the last warning was logged (one a second at most) */
};

/* A note of the renewal falling behind, at most one a second (wd->mu held). At the
 * info level: a program that acts on it has its own words for it (dlock run stops its
 * command), and a service shows it (dlockd logs every level). */
static void warn(dlock_client *c, struct dlock__watchdog *wd, int64_t now, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void warn(dlock_client *c, struct dlock__watchdog *wd, int64_t now, const char *fmt, ...)
{
    if (wd->warned_us != 0 && now - wd->warned_us < 1000000)
        return;
    wd->warned_us = now;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    dlock__rules_log(&c->rules, DLOCK_LOG_INFO, "%s", msg);
}

/* How soon a renewal that reached no decision is tried again: a tenth of the lease,
 * between 10 ms and 1 s, so that several tries fit before validity runs out. */
static int64_t retry_us(int64_t ttl_ms)
{
    int64_t r = ttl_ms * 100;
    return r < 10000 ? 10000 : r > 1000000 ? 1000000 : r;
}

/* ---- the heap (wd->mu held) ---------------------------------------------------------- */

static void heap_set(struct dlock__watchdog *wd, int i, dlock_lock *l)
{
    wd->heap[i] = l;
    l->wd_pos = i;
}

static void sift_up(struct dlock__watchdog *wd, int i)
{
    dlock_lock *l = wd->heap[i];
    while (i > 0 && wd->heap[(i - 1) / 2]->next_renew_us > l->next_renew_us) {
        heap_set(wd, i, wd->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(wd, i, l);
}

static void sift_down(struct dlock__watchdog *wd, int i)
{
    dlock_lock *l = wd->heap[i];
    for (;;) {
        int child = 2 * i + 1;
        if (child >= wd->nheap)
            break;
        if (child + 1 < wd->nheap &&
            wd->heap[child + 1]->next_renew_us < wd->heap[child]->next_renew_us)
            child++;
        if (wd->heap[child]->next_renew_us >= l->next_renew_us)
            break;
        heap_set(wd, i, wd->heap[child]);
        i = child;
    }
    heap_set(wd, i, l);
}

/* Room for one more lock; false when out of memory. */
static bool heap_reserve(struct dlock__watchdog *wd)
{
    if (wd->nlocks < wd->cap)
        return true;
    int ncap = wd->cap ? wd->cap * 2 : 64;
    dlock_lock **h = dlock__realloc(wd->heap, (size_t)ncap * sizeof *h);
    if (h == NULL)
        return false;
    wd->heap = h;
    wd->cap = ncap;
    return true;
}

/* Never fails: room for every registered lock is kept (heap_reserve). */
static void heap_push(struct dlock__watchdog *wd, dlock_lock *l)
{
    heap_set(wd, wd->nheap++, l);
    sift_up(wd, l->wd_pos);
}

static void heap_remove(struct dlock__watchdog *wd, dlock_lock *l)
{
    int i = l->wd_pos;
    l->wd_pos = -1;
    dlock_lock *last = wd->heap[--wd->nheap];
    if (i == wd->nheap)
        return;
    heap_set(wd, i, last);
    sift_up(wd, i);
    sift_down(wd, last->wd_pos);
}

/* Take l off the renewal (wd->mu held). */
static void unlink_lock(struct dlock__watchdog *wd, dlock_lock *l)
{
    if (l->wd_pos >= 0)
        heap_remove(wd, l);
    if (l->renewing)
        wd->nlocks--;
    l->renewing = false;
}

/* Format the RENEW call for the locks marked in_batch. Called with wd->mu held (the
 * handles' keys and tokens are stable while in_batch). */
static int format_batch(dlock_client *c, dlock_lock **batch, int k, dlock__call *call,
                        dlock__err *e)
{
    /* Keys: the k lock keys, then the holders keys of the shared ones, two each, and
     * the record of the leaders' (at most 2k in all); arguments: token, ttl and where
     * those keys are, per lock. */
    const char **args = dlock__malloc((size_t)k * 6 * sizeof *args);
    size_t *lens = dlock__malloc((size_t)k * 6 * sizeof *lens);
    char(*num)[2][24] = dlock__malloc((size_t)k * sizeof *num);
    int rc = DLOCK_ERR_NOMEM;
    if (args != NULL && lens != NULL && num != NULL) {
        int nkeys = k;
        for (int j = 0; j < k; j++) {
            const dlock__keys *keys = &batch[j]->renew_keys;
            args[j] = keys->lock;
            lens[j] = keys->lock_len;
            snprintf(num[j][1], sizeof num[j][1], "%d",
                     batch[j]->shared    ? nkeys + 1
                     : batch[j]->leading ? -(nkeys + 1)
                                         : 0);
            if (batch[j]->shared) {
                args[nkeys] = keys->holders;
                lens[nkeys++] = keys->holders_len;
                args[nkeys] = keys->info;
                lens[nkeys++] = keys->info_len;
            } else if (batch[j]->leading) {
                args[nkeys] = keys->leader;
                lens[nkeys++] = keys->leader_len;
            }
        }
        for (int j = 0; j < k; j++) {
            dlock_lock *l = batch[j];
            const char **a = args + nkeys + 3 * j;
            size_t *len = lens + nkeys + 3 * j;
            a[0] = l->token;
            len[0] = DLOCK_TOKEN_LEN;
            len[1] = (size_t)snprintf(num[j][0], sizeof num[j][0], "%lld", (long long)l->ttl_ms);
            a[1] = num[j][0];
            a[2] = num[j][1];
            len[2] = strlen(num[j][1]);
        }
        rc = dlock__call_format(&c->scripts, DLOCK_SCRIPT_RENEW, nkeys, nkeys + 3 * k, args, lens,
                                call, e);
        /* The arguments are freed below, so the EVAL fallback is formatted now. */
        if (rc == DLOCK_OK && (rc = dlock__call_eval(call)) != DLOCK_OK)
            dlock__call_free(call);
    }
    free(args);
    free(lens);
    free(num);
    return rc;
}

/* For the round's early end: a node answered the batch (whatever it said per lock).
 * With a quorum of answers, a node still connecting cannot change more than it could
 * in the next turn, and waiting for it (up to the connect timeout) would come off
 * every lock's validity. */
static bool answered(const dlock__req *r, int i, void *arg)
{
    (void)i;
    return r->reply->type == REDIS_REPLY_STRING && r->reply->len == *(const size_t *)arg;
}

/* One turn: renew the k locks of batch on every node, then act on the outcome. */
static void renew(dlock_client *c, struct dlock__watchdog *wd, dlock_lock **batch, int k)
{
    dlock__call call;
    dlock__round rd = {0};
    /* A failure to start the round is an undecided turn for every lock (retried
     * below); its message is for nobody: this thread has no caller. */
    dlock__err ignored;
    pthread_mutex_lock(&wd->mu);
    int rc = format_batch(c, batch, k, &call, &ignored);
    pthread_mutex_unlock(&wd->mu);
    DLOCK_PAUSE_POINT(DLOCK_HOOK_BEFORE_RENEW);
    if (rc == DLOCK_OK && dlock__round_begin(c, &rd, &ignored) == DLOCK_OK) {
        size_t want = (size_t)k;
        dlock__round_run(c, &rd, &call, answered, &want);
    }

    /* Each node's answer: a string of k '0'/'1', or nothing usable. */
    const char *answer[DLOCK_SERVERS_MAX];
    for (int i = 0; i < c->n; i++) {
        const redisReply *r = rd.set ? rd.reqs[i].reply : NULL;
        answer[i] = r && r->type == REDIS_REPLY_STRING && r->len == (size_t)k ? r->str : NULL;
    }
    int64_t now = dlock__now_us();
    dlock_lock **lost = dlock__malloc((size_t)k * sizeof *lost);
    int nlost = 0, undecided = 0, nanswers = 0;
    int64_t least_left = INT64_MAX;
    for (int i = 0; i < c->n; i++)
        nanswers += answer[i] != NULL;
    pthread_mutex_lock(&wd->mu);
    for (int j = 0; j < k; j++) {
        dlock_lock *l = batch[j];
        int yes = 0, no = 0;
        for (int i = 0; i < c->n; i++)
            if (answer[i] != NULL)
                answer[i][j] == '1' ? yes++ : no++;
        bool is_lost = no > c->n - c->quorum;
        if (!is_lost && yes >= c->quorum) {
            int64_t v = dlock__round_validity_us(c, l->ttl_ms * 1000, rd.start_us, rd.end_us);
            if (v > 0)
                l->valid_until_us = rd.end_us + v;
            l->next_renew_us = rd.start_us + l->ttl_ms * 1000 / 3;
        } else if (!is_lost) {
            /* Undecided: keep trying while a round can still end within validity. The
             * last try starts a timeout before validity ends, so that when it fails
             * too, the loss is reported before the lease can end on the servers. */
            int64_t last_start = l->valid_until_us - c->rules.timeout_us;
            is_lost = now > last_start;
            l->next_renew_us = now + retry_us(l->ttl_ms);
            if (l->next_renew_us > last_start)
                l->next_renew_us = last_start;
            if (!is_lost) {
                undecided++;
                if (l->valid_until_us - now < least_left)
                    least_left = l->valid_until_us - now;
            }
        }
        if (is_lost) {
            /* Off the list now; the handle stays alive (in_batch) until after on_lost. */
            unlink_lock(wd, l);
            if (lost != NULL)
                lost[nlost++] = l;
            else
                l->in_batch = false; /* out of memory: marked below without callback */
            wd->stats.lost++;
        }
    }
    wd->stats.retries += undecided;
    if (undecided > 0)
        warn(c, wd, now,
             "renewal of %d locks reached no decision (%d of %d servers answered in time): "
             "trying again, %lld ms of validity left at the least",
             undecided, nanswers, c->n, (long long)(least_left / 1000));
    pthread_mutex_unlock(&wd->mu);

    for (int j = 0; j < nlost; j++) {
        dlock__lock_mark_lost(lost[j]);
        if (lost[j]->on_lost != NULL)
            lost[j]->on_lost(lost[j], lost[j]->on_lost_user);
    }
    pthread_mutex_lock(&wd->mu);
    for (int j = 0; j < k; j++) {
        batch[j]->in_batch = false;
        if (batch[j]->renewing)
            heap_push(wd, batch[j]);
    }
    pthread_cond_broadcast(&wd->idle);
    pthread_mutex_unlock(&wd->mu);

    free(lost);
    dlock__round_end(c, &rd);
    if (rc == DLOCK_OK)
        dlock__call_free(&call);
}

static void *watchdog_main(void *arg)
{
    dlock_client *c = arg;
    struct dlock__watchdog *wd = c->wd;
    pthread_mutex_lock(&wd->mu);
    while (!wd->stop) {
        /* A turn starts when a lock is due, not before: the thread also wakes when a
         * lock is added, and a turn started then would take only the locks whose early
         * margin (below) had just begun, one or two at a time while a program takes
         * many locks in a row. */
        int64_t now = dlock__now_us();
        int64_t next = wd->nheap > 0 ? wd->heap[0]->next_renew_us : INT64_MAX;
        if (next > now) {
            wd->wake_at_us = next;
            dlock__cond_wait_until(&wd->wake, &wd->mu, now, next);
            wd->wake_at_us = 0;
            continue;
        }
        /* The turn takes the locks due within a twelfth of their ttl, those due first
         * first: renewing that early is harmless, and locks taken close together then
         * share turns (one turn per ttl/12 of acquisitions) instead of each having its
         * own. */
        /* A batch is one script call, whose keys a Redis Cluster takes from one slot
         * only: with a cluster among the servers, the locks of the first due lock's
         * slot (the others are due still, and make the next turns, at once). */
        bool one_slot = false;
        for (int i = 0; i < c->n; i++)
            one_slot |= c->nodes[i].cluster != NULL;
        int k = 0, nother = 0, slot = -1;
        dlock_lock **batch = wd->batch, *other[DLOCK_RENEW_BATCH_MAX];
        int64_t margin = INT64_MAX;
        while (wd->nheap > 0 && k < DLOCK_RENEW_BATCH_MAX && nother < DLOCK_RENEW_BATCH_MAX) {
            dlock_lock *l = wd->heap[0];
            if (l->next_renew_us - l->ttl_ms * 1000 / 12 > now)
                break;
            heap_remove(wd, l);
            if (one_slot) {
                int s = l->renew_keys.buf != NULL
                            ? dlock__key_slot(l->renew_keys.lock, l->renew_keys.lock_len)
                            : slot;
                if (slot >= 0 && s != slot) {
                    other[nother++] = l;
                    continue;
                }
                slot = s;
            }
            l->in_batch = true;
            batch[k++] = l;
            if (l->valid_until_us - now < margin)
                margin = l->valid_until_us - now;
        }
        for (int j = 0; j < nother; j++)
            heap_push(wd, other[j]);
        dlock_renewal_stats *st = &wd->stats;
        st->turns++;
        st->lag_last_ms = (now - next) / 1000;
        if (st->lag_last_ms > st->lag_max_ms)
            st->lag_max_ms = st->lag_last_ms;
        if (st->margin_min_ms < 0 || margin / 1000 < st->margin_min_ms)
            st->margin_min_ms = margin > 0 ? margin / 1000 : 0;
        /* Late by more than half the validity left: the thread gets too little of the
         * machine, or its turns take too long; a little more and leases end. */
        if (2 * (now - next) > margin)
            warn(c, wd, now,
                 "renewal is running %lld ms late: %lld ms of validity left at the least",
                 (long long)((now - next) / 1000), (long long)(margin / 1000));
        pthread_mutex_unlock(&wd->mu);
        renew(c, wd, batch, k);
        pthread_mutex_lock(&wd->mu);
    }
    pthread_mutex_unlock(&wd->mu);
    return NULL;
}

/* Create the watchdog and start its thread, once per client. Called with c->mu. */
static int start(dlock_client *c, dlock__err *e)
{
    struct dlock__watchdog *wd = dlock__calloc(1, sizeof *wd);
    if (wd == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    dlock__cond_init(&wd->wake);
    pthread_cond_init(&wd->idle, NULL);
    pthread_mutex_init(&wd->mu, NULL);
    wd->stats.margin_min_ms = -1;
    c->wd = wd;
    int err = pthread_create(&wd->thread, NULL, watchdog_main, c);
    if (err != 0) {
        c->wd = NULL;
        pthread_cond_destroy(&wd->wake);
        pthread_cond_destroy(&wd->idle);
        pthread_mutex_destroy(&wd->mu);
        free(wd);
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "cannot start the renewal thread: %s",
                              strerror(err));
    }
    return DLOCK_OK;
}

int dlock__watchdog_add(dlock_client *c, dlock_lock *l, int64_t ttl_ms, dlock_lost_fn on_lost,
                        void *user, dlock__err *e)
{
    dlock__keys k;
    int rc = dlock__keys_make(c->prefix, c->prefix_len, l->name, l->name_len, &k, e);
    if (rc != DLOCK_OK)
        return rc;
    pthread_mutex_lock(&c->mu);
    rc = c->wd ? DLOCK_OK : start(c, e);
    pthread_mutex_unlock(&c->mu);
    if (rc != DLOCK_OK) {
        free(k.buf);
        return rc;
    }
    struct dlock__watchdog *wd = c->wd;
    pthread_mutex_lock(&wd->mu);
    if (!heap_reserve(wd)) {
        pthread_mutex_unlock(&wd->mu);
        free(k.buf);
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    }
    l->renew_keys = k;
    l->ttl_ms = ttl_ms;
    l->on_lost = on_lost;
    l->on_lost_user = user;
    /* A third of the lease in, or sooner when less is known of it: a lock taken on a
     * handoff's message counts only the handoff's lease until its first renewal. */
    int64_t now = dlock__now_us(), first = ttl_ms * 1000 / 3;
    if (l->valid_until_us > now && (l->valid_until_us - now) / 2 < first)
        first = (l->valid_until_us - now) / 2;
    l->next_renew_us = now + first;
    l->renewing = true;
    wd->nlocks++;
    heap_push(wd, l);
    if (l->next_renew_us < wd->wake_at_us)
        pthread_cond_signal(&wd->wake);
    pthread_mutex_unlock(&wd->mu);
    return DLOCK_OK;
}

/* The client's watchdog, or NULL if it never started. c->wd is written under c->mu;
 * read it there too (without holding it while taking wd->mu: the renewal thread takes
 * wd->mu, then c->mu). */
static struct dlock__watchdog *get_wd(dlock_client *c)
{
    pthread_mutex_lock(&c->mu);
    struct dlock__watchdog *wd = c->wd;
    pthread_mutex_unlock(&c->mu);
    return wd;
}

/* The renewal with its lock taken and no batch renewing l, waiting for that batch to
 * end (wait) or not (NULL, *busy set, when one is in flight); NULL when there is none:
 * whatever the caller changes in l then applies to every renewal formatted later. */
static struct dlock__watchdog *lock_idle(dlock_client *c, dlock_lock *l, bool wait, bool *busy)
{
    struct dlock__watchdog *wd = get_wd(c);
    *busy = false;
    if (wd == NULL)
        return NULL;
    pthread_mutex_lock(&wd->mu);
    while (l->in_batch) {
        if (!wait) {
            pthread_mutex_unlock(&wd->mu);
            *busy = true;
            return NULL;
        }
        pthread_cond_wait(&wd->idle, &wd->mu);
    }
    return wd;
}

bool dlock__watchdog_remove(dlock_client *c, dlock_lock *l, bool wait)
{
    bool busy;
    struct dlock__watchdog *wd = lock_idle(c, l, wait, &busy);
    if (wd != NULL) {
        if (l->renewing)
            unlink_lock(wd, l);
        pthread_mutex_unlock(&wd->mu);
    }
    return !busy;
}

bool dlock__watchdog_set_ttl(dlock_client *c, dlock_lock *l, int64_t ttl_ms, bool wait)
{
    /* A renewal of l already formatted with the old ttl could reach the servers after
     * the extend that follows, and shorten the lease again; and its outcome would be
     * counted with the new ttl, overstating validity. So it ends first: every renewal
     * formatted from now on uses the new ttl. */
    bool busy;
    struct dlock__watchdog *wd = lock_idle(c, l, wait, &busy);
    if (wd == NULL)
        return !busy;
    if (l->renewing) {
        l->ttl_ms = ttl_ms;
        l->next_renew_us = dlock__now_us() + ttl_ms * 1000 / 3;
        if (l->wd_pos >= 0) {
            sift_up(wd, l->wd_pos);
            sift_down(wd, l->wd_pos);
        }
        pthread_cond_signal(&wd->wake);
    }
    pthread_mutex_unlock(&wd->mu);
    return true;
}

void dlock__watchdog_stop(dlock_client *c)
{
    struct dlock__watchdog *wd = get_wd(c);
    if (wd == NULL)
        return;
    pthread_mutex_lock(&wd->mu);
    wd->stop = true;
    pthread_cond_signal(&wd->wake);
    pthread_mutex_unlock(&wd->mu);
    pthread_join(wd->thread, NULL);
    /* The handles stay with their owners (dlock_client_free releases them next);
     * they are just no longer renewed. */
    for (int i = 0; i < wd->nheap; i++) {
        wd->heap[i]->renewing = false;
        wd->heap[i]->wd_pos = -1;
    }
    free(wd->heap);
    pthread_cond_destroy(&wd->wake);
    pthread_cond_destroy(&wd->idle);
    pthread_mutex_destroy(&wd->mu);
    free(wd);
    pthread_mutex_lock(&c->mu);
    c->wd = NULL;
    pthread_mutex_unlock(&c->mu);
}

void dlock__watchdog_forget(dlock_client *c)
{
    /* The renewal thread was not copied by fork(); the handles it renewed are the
     * parent's (dlock_client_free detaches the child's copies). */
    if (c->wd != NULL)
        free(c->wd->heap);
    free(c->wd);
    c->wd = NULL;
}

int dlock_renewal_stats_get(dlock_client *c, dlock_renewal_stats *out)
{
    dlock__err e;
    if (out == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "out is NULL");
    memset(out, 0, sizeof *out);
    out->margin_min_ms = -1;
    int rc = dlock__client_enter(c, &e);
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    struct dlock__watchdog *wd = get_wd(c);
    if (wd == NULL)
        return dlock__err_raise(&e, DLOCK_OK);
    pthread_mutex_lock(&wd->mu);
    *out = wd->stats;
    out->locks = wd->nlocks;
    pthread_mutex_unlock(&wd->mu);
    return dlock__err_raise(&e, DLOCK_OK);
}
