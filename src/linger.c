/*
 * linger.c: dlock_opts.linger_ms, a release held back for the client's next acquire
 * of the same name (docs/waiting.md, "Lingering").
 *
 * A program that takes the same lock again and again (a buyer in a flash sale, a
 * consumer draining a queue) pays a handoff on every section when it releases: the
 * lock goes to the head of the queue, and the program queues behind everyone. With
 * linger_ms, dlock_release keeps the lock instead, for at most linger_ms, and the
 * client's next dlock_acquire of the name takes it back: in one round trip (a retake:
 * RELEASE's script in its retake mode, which keeps the lock with a new lease while
 * the queue's head has waited less than linger_ms in all and has been passed over for
 * less than its share of it, and releases it otherwise), or in none while the last
 * retake's reply says that the head cannot have reached either yet and the lease has
 * at least half its length left. No one can hold the name between the release and
 * the retake: the key stays ours throughout, so the handle keeps its fence, and
 * mutual exclusion is the lease's, as for any held lock.
 *
 * What it costs the others: a waiter that has waited linger_ms in all (from its
 * ticket, against the server's clock) is passed over no more, and the head is passed
 * over for at most linger_ms divided by the number of waiters (its share), counted
 * from when it became the head (the later of its ticket and the hold's start, by the
 * holder's clock); then the next release hands it the lock. A release that nobody
 * takes back goes out linger_ms late, sent by this file's thread. So lingering brings
 * no wait much past linger_ms (by a share and a handoff), unless the queue's turn
 * alone takes longer, and the holders ahead of a waiter take turns instead of one of
 * them keeping the lock for all of it. A whole linger_ms for every holder, counted
 * from the head, would let the last of 50 waiters wait for 50 of them; counting only
 * the whole wait, as the first version did, lets one holder keep the lock until the
 * head has waited linger_ms, after which every head has waited as long and the lock
 * falls back to FIFO. The share keeps each holder's part small enough for the queue to
 * come round within linger_ms.
 * A thread of the same client that waits for the name when the release comes makes
 * it a plain release (it is the heir: waiting.md).
 *
 * Only for exclusive locks of a client of one server (a Sentinel's master or a
 * Cluster's slot count as one): across N servers a retake could keep the lock on some
 * and hand it off on others.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

struct dlock__linger {
    pthread_mutex_t mu;
    pthread_cond_t wake; /* a release due before wake_at_us was added, or stop */
    pthread_t thread;
    bool stop;
    int64_t wake_at_us; /* when the thread wakes next; 0: it is busy (no signal needed) */
    dlock_lock *list;   /* the lingering handles, newest first */
};

/* The thread: each lingering handle whose time is up is released, as dlock_release
 * would have released it. */
static void *linger_main(void *arg)
{
    dlock_client *c = arg;
    struct dlock__linger *lg = atomic_load(&c->linger);
    pthread_mutex_lock(&lg->mu);
    while (!lg->stop) {
        int64_t now = dlock__now_us(), next = INT64_MAX;
        dlock_lock *due = NULL;
        for (dlock_lock **pp = &lg->list; *pp != NULL;) {
            dlock_lock *l = *pp;
            if (l->linger_until_us <= now) {
                *pp = l->linger_next;
                l->linger_next = due;
                due = l;
                continue;
            }
            if (l->linger_until_us < next)
                next = l->linger_until_us;
            pp = &l->linger_next;
        }
        if (due != NULL) {
            pthread_mutex_unlock(&lg->mu);
            while (due != NULL) {
                dlock_lock *l = due;
                due = l->linger_next;
                dlock__err ignored;
                dlock__lock_release(l, &ignored);
            }
            pthread_mutex_lock(&lg->mu);
            continue;
        }
        lg->wake_at_us = next;
        dlock__cond_wait_until(&lg->wake, &lg->mu, now, next);
        lg->wake_at_us = 0;
    }
    pthread_mutex_unlock(&lg->mu);
    return NULL;
}

/* c's linger list, started on first use; NULL when the thread cannot start. */
static struct dlock__linger *get_linger(dlock_client *c)
{
    pthread_mutex_lock(&c->mu);
    struct dlock__linger *lg = atomic_load(&c->linger);
    if (lg == NULL && (lg = dlock__calloc(1, sizeof *lg)) != NULL) {
        pthread_mutex_init(&lg->mu, NULL);
        dlock__cond_init(&lg->wake);
        atomic_store(&c->linger, lg);
        if (pthread_create(&lg->thread, NULL, linger_main, c) != 0) {
            atomic_store(&c->linger, NULL);
            pthread_cond_destroy(&lg->wake);
            pthread_mutex_destroy(&lg->mu);
            free(lg);
            lg = NULL;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return lg;
}

/* Whether a thread of c waits for l's name. Such a waiter waits in the client, queued on
 * no server when its client holds the name, so no retake's look at the queue sees it:
 * the lock goes to it by a plain release (it is the heir), or it could wait for as long
 * as the client takes the lock back. */
static bool own_waiter(dlock_client *c, const dlock_lock *l)
{
    dlock__keys k;
    dlock__err ignored;
    if (dlock__keys_make(c->prefix, c->prefix_len, l->name, l->name_len, &k, &ignored) != DLOCK_OK)
        return true; /* out of memory: a plain release */
    bool waits = dlock__wait_any(c, k.lock, k.lock_len);
    free(k.buf);
    return waits;
}

bool dlock__linger_put(dlock_lock *l)
{
    dlock_client *c = l->client;
    if (l->linger_us <= 0 || l->shared || l->leading || l->adopted)
        return false;
    /* What the release would have done first: no renewal after it, the confirmation's
     * reply read (it may say the lock is lost). */
    if (!dlock__watchdog_remove(c, l, true) || !dlock__confirm_settle(l, false))
        return false;
    int64_t now = dlock__now_us();
    if (l->lost || l->valid_until_us <= now)
        return false; /* the release says LOST, as it must */
    struct dlock__linger *lg = own_waiter(c, l) ? NULL : get_linger(c);
    if (lg == NULL)
        return false;
    pthread_mutex_lock(&lg->mu);
    l->linger_until_us = now + l->linger_us;
    l->linger_next = lg->list;
    lg->list = l;
    if (lg->wake_at_us > l->linger_until_us)
        pthread_cond_signal(&lg->wake);
    pthread_mutex_unlock(&lg->mu);
    return true;
}

/* The handle of c's that lingers for name, taken off the list; NULL: none. */
static dlock_lock *take(dlock_client *c, const char *name)
{
    struct dlock__linger *lg = atomic_load(&c->linger);
    if (lg == NULL)
        return NULL;
    size_t len = strlen(name);
    pthread_mutex_lock(&lg->mu);
    dlock_lock *l = NULL;
    for (dlock_lock **pp = &lg->list; *pp != NULL; pp = &(*pp)->linger_next)
        if ((*pp)->name_len == len && memcmp((*pp)->name, name, len) == 0) {
            l = *pp;
            *pp = l->linger_next;
            l->linger_next = NULL;
            break;
        }
    pthread_mutex_unlock(&lg->mu);
    return l;
}

int dlock__linger_take(dlock_client *c, const char *name, const dlock_opts *opts, int64_t ttl_ms,
                       int64_t limit, dlock_lock **out, dlock__err *e)
{
    dlock_lock *l = take(c, name);
    if (l == NULL)
        return DLOCK_ERR_AGAIN;
    int64_t linger_us = opts != NULL ? opts->linger_ms * 1000 : 0;
    if (linger_us == 0 || limit != 0 || own_waiter(c, l)) {
        /* Asked for otherwise, or a thread of ours waits for the name: released now
         * (to that thread, the heir), and then asked for as asked. */
        dlock__err ignored;
        dlock__lock_release(l, &ignored);
        return DLOCK_ERR_AGAIN;
    }
    /* Without a round trip while the last retake's reply vouches for the queue and the
     * lease has half its length left; else a retake. */
    int64_t now = dlock__now_us();
    bool kept = now < l->fresh_until_us && l->valid_until_us - now >= ttl_ms * 1000 / 2;
    if (!kept && !dlock__redis_retake(l, ttl_ms, linger_us))
        return DLOCK_ERR_AGAIN;
    l->linger_us = linger_us;
    int rc = DLOCK_OK;
    if (opts->auto_renew && (rc = dlock__watchdog_add(c, l, ttl_ms, opts->on_lost,
                                                      opts->on_lost_user, e)) != DLOCK_OK) {
        dlock__err ignored;
        dlock__lock_release(l, &ignored);
        return rc;
    }
    *out = l;
    return DLOCK_OK;
}

void dlock__linger_stop(dlock_client *c)
{
    struct dlock__linger *lg = atomic_load(&c->linger);
    if (lg == NULL)
        return;
    pthread_mutex_lock(&lg->mu);
    lg->stop = true;
    pthread_cond_signal(&lg->wake);
    pthread_mutex_unlock(&lg->mu);
    pthread_join(lg->thread, NULL);
    /* The handles stay on the client's list: dlock_client_free releases them next. */
    pthread_cond_destroy(&lg->wake);
    pthread_mutex_destroy(&lg->mu);
    free(lg);
    atomic_store(&c->linger, NULL);
}

void dlock__linger_forget(dlock_client *c)
{
    /* The thread was not copied by fork(); the handles are the parent's. */
    free(atomic_load(&c->linger));
    atomic_store(&c->linger, NULL);
}
