/*
 * wait.c: blocking acquisition without polling (docs/waiting.md).
 *
 * Waiting threads do not retry on a timer. Each waiter is a member of the name's
 * wait queue on the servers (scripts.c), and a release hands the lock to the queue's
 * head and publishes the head's token on the head's client's own wake-up channel. So
 * one release wakes one waiter, and that waiter already holds the lock: its next
 * attempt only confirms it. The commands a section costs stay flat as waiters are
 * added, and so does the work: no other process hears of the release.
 *
 * In a process, the client's subscriber thread (subscriber.c) hears the wake-ups on
 * the client's channel. A wake-up message carries a token; the thread notes which node
 * sent it in that waiter's grants and writes to its eventfd, and the waiter, asleep in
 * ppoll() on its eventfd and its cancel_fd, retries. A client's only waiter, asleep
 * in a blocking call, reads the channel itself instead (dlock__wait_sleep). The thread
 * starts on a client's first wait and stays subscribed until the client is freed, so a
 * thread that comes back for a busy name queues with its first attempt.
 *
 * Nothing depends on a message arriving: a waiter also retries when the holder's
 * lease should have run out (an expiry publishes nothing), and refreshes its place
 * every DLOCK_QUEUE_REFRESH_MS, which also tells it when the lock became free
 * unannounced. A lost wake-up therefore costs time, never a hang. When a subscriber
 * connection is remade, every waiter retries once: a release may have gone by while
 * it was down.
 */
#include "subscriber.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

int dlock__wait_join(dlock_client *c, const char *token, bool hot, const dlock__request *q,
                     int64_t ticket, dlock__waiter **out)
{
    *out = NULL;
    int rc = DLOCK_ERR_BUSY;
    struct dlock__waitsys *ws = hot ? dlock__subscriber_peek(c) : dlock__subscriber(c, &rc);
    if (ws == NULL)
        return rc;
    pthread_mutex_lock(&ws->mu);
    bool listening = __builtin_popcount(ws->subscribed) >= c->quorum;
    pthread_mutex_unlock(&ws->mu);
    if (hot && !listening)
        return DLOCK_ERR_BUSY;
    dlock__waiter *w = dlock__calloc(1, sizeof *w);
    if (w == NULL)
        return DLOCK_ERR_NOMEM;
    memcpy(w->token, token, DLOCK_TOKEN_LEN + 1);
    w->q = q;
    w->ticket = ticket;
    if ((w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        free(w);
        return DLOCK_ERR_IO;
    }
    pthread_mutex_lock(&ws->mu);
    w->next = ws->waiters;
    ws->waiters = w;
    /* A second waiter needs the thread to read for both; so does a subscription to be
     * confirmed while nobody reads. */
    if (w->next != NULL || (!hot && __builtin_popcount(ws->subscribed) < c->quorum))
        dlock__waitsys_recall(ws);
    /* Wait (briefly) until a quorum of nodes confirms the subscription: the caller's
     * next attempt queues it, and a release after that must find it listening. If
     * they do not confirm in time, the waiter still works, on its timers. A hot join
     * never waits (it may run on an event loop): a subscription lost since the look
     * above wakes every waiter when it is made again. */
    struct timespec until;
    dlock__cond_deadline(&until, c->rules.timeout_us + c->rules.connect_timeout_us);
    while (!hot && __builtin_popcount(ws->subscribed) < c->quorum && !ws->stop)
        if (pthread_cond_timedwait(&ws->confirmed, &ws->mu, &until) != 0)
            break;
    pthread_mutex_unlock(&ws->mu);
    *out = w;
    return DLOCK_OK;
}

void dlock__sleep_fds(struct pollfd p[3], int fd, int cancel_fd, int close_fd)
{
    p[0] = (struct pollfd){.fd = fd, .events = POLLIN};
    p[1] = (struct pollfd){.fd = cancel_fd > 0 ? cancel_fd : -1, .events = POLLIN};
    p[2] = (struct pollfd){.fd = close_fd, .events = POLLIN};
}

int dlock__sleep_ends(const struct pollfd p[3])
{
    if (p[2].revents & POLLIN)
        return DLOCK_ERR_CLOSED;
    if (p[1].revents & (POLLIN | POLLHUP | POLLERR))
        return DLOCK_ERR_CANCELED;
    return DLOCK_OK;
}

int dlock__sleep_on(int fd, int64_t until_us, int cancel_fd, int close_fd)
{
    struct pollfd p[3];
    dlock__sleep_fds(p, fd, cancel_fd, close_fd);
    for (;;) {
        int64_t left = until_us - dlock__now_us();
        if (left < 0)
            left = 0;
        struct timespec ts = {(time_t)(left / 1000000), (long)(left % 1000000) * 1000};
        int r = ppoll(p, 3, &ts, NULL);
        if (r < 0 && errno == EINTR)
            continue;
        return r > 0 ? dlock__sleep_ends(p) : DLOCK_OK;
    }
}

int dlock__sleep_ended(dlock__err *e, int rc)
{
    return rc == DLOCK_ERR_CLOSED
               ? dlock__err_set(e, rc, "the client was freed (dlock_client_free) during the wait")
               : dlock__err_set(e, rc, "canceled through cancel_fd");
}

bool dlock__wait_woken(dlock__waiter *w)
{
    uint64_t v;
    return read(w->efd, &v, sizeof v) == (ssize_t)sizeof v; /* non-blocking: 0 pending fails */
}

uint32_t dlock__wait_grants(dlock_client *c, dlock__waiter *w, bool clear, dlock__handoff *h)
{
    pthread_mutex_lock(&c->wait->mu);
    uint32_t g = w->grants;
    if (h != NULL)
        *h = w->handoff;
    if (clear) {
        w->grants = w->fenced = 0;
        w->grant_fence = 0;
        memset(&w->handoff, 0, sizeof w->handoff);
        w->behind_own = false;
    }
    pthread_mutex_unlock(&c->wait->mu);
    return g;
}

uint32_t dlock__wait_fenced(dlock_client *c, dlock__waiter *w, uint64_t *fence)
{
    pthread_mutex_lock(&c->wait->mu);
    uint32_t g = w->fenced;
    *fence = w->grant_fence;
    pthread_mutex_unlock(&c->wait->mu);
    return g;
}

/* Whether a comes before b in a queue: by ticket, then as Redis orders members of one
 * score, byte by byte, a prefix first. */
static bool before(const dlock__waiter *a, const dlock__waiter *b)
{
    if (a->ticket != b->ticket)
        return a->ticket < b->ticket;
    size_t n = a->q->member_len < b->q->member_len ? a->q->member_len : b->q->member_len;
    int d = memcmp(a->q->member, b->q->member, n);
    return d != 0 ? d < 0 : a->q->member_len < b->q->member_len;
}

static bool waits_for(const dlock__waiter *w, const char *key, size_t key_len)
{
    return w->q != NULL && w->q->k.lock_len == key_len && memcmp(w->q->k.lock, key, key_len) == 0;
}

bool dlock__wait_heir(dlock_client *c, const char *key, size_t key_len, dlock__heir *out)
{
    struct dlock__waitsys *ws = dlock__subscriber_peek(c);
    out->member = NULL;
    out->ticket[0] = '\0';
    if (ws == NULL)
        return false;
    pthread_mutex_lock(&ws->mu);
    const dlock__waiter *first = NULL;
    for (const dlock__waiter *w = ws->waiters; w != NULL; w = w->next)
        if (waits_for(w, key, key_len) && (first == NULL || before(w, first)))
            first = w;
    if (first != NULL && (out->member = dlock__malloc(first->q->member_len)) != NULL) {
        memcpy(out->member, first->q->member, first->q->member_len);
        out->member_len = first->q->member_len;
        memcpy(out->token, first->token, sizeof out->token);
        memcpy(out->ttl, first->q->ttl, sizeof out->ttl);
        /* A waiter queued on no server is queued by the release, with its own ticket,
         * so that a waiter of another client that came earlier still goes first. */
        if (first->behind_own)
            snprintf(out->ticket, sizeof out->ticket, "%lld", (long long)first->ticket);
    }
    pthread_mutex_unlock(&ws->mu);
    return out->member != NULL;
}

bool dlock__wait_any(dlock_client *c, const char *key, size_t key_len)
{
    struct dlock__waitsys *ws = dlock__subscriber_peek(c);
    bool any = false;
    if (ws == NULL)
        return false;
    pthread_mutex_lock(&ws->mu);
    for (const dlock__waiter *w = ws->waiters; w != NULL && !any; w = w->next)
        any = waits_for(w, key, key_len);
    pthread_mutex_unlock(&ws->mu);
    return any;
}

void dlock__wait_released(dlock_client *c, const char *key, size_t key_len, const char *heir,
                          const dlock__handoff *h, uint32_t unknown)
{
    struct dlock__waitsys *ws = dlock__subscriber_peek(c);
    if (ws == NULL)
        return;
    pthread_mutex_lock(&ws->mu);
    bool passed = false; /* the heir holds it now: the others wait behind it */
    for (dlock__waiter *w = heir != NULL ? ws->waiters : NULL; w != NULL; w = w->next)
        if (memcmp(w->token, heir, DLOCK_TOKEN_LEN) == 0) {
            w->grants |= h->nodes | unknown;
            w->handoff = *h;
            passed = __builtin_popcount(h->nodes) >= c->quorum;
            /* An heir that waited behind its own client and got nothing is queued now, or
             * not at all: it attempts. */
            if (w->grants != 0 || w->behind_own)
                dlock__kick(w->efd);
            w->behind_own = false;
            break;
        }
    for (dlock__waiter *w = ws->waiters; w != NULL && !passed; w = w->next)
        if (w->behind_own && waits_for(w, key, key_len)) {
            w->behind_own = false;
            dlock__kick(w->efd);
        }
    pthread_mutex_unlock(&ws->mu);
}

int64_t dlock__wait_behind_own(dlock_client *c, dlock__waiter *w, const char *name, size_t name_len,
                               bool again)
{
    struct dlock__waitsys *ws = dlock__subscriber_peek(c);
    if (ws == NULL || w->q == NULL)
        return 0;
    int64_t now = dlock__now_us(), until = 0;
    /* Both locks, the client's first (its order everywhere): a release that ends marks
     * its handle under the client's lock, then wakes the waiters behind it under the wait
     * system's, so a waiter either is found by that or sees the handle released. A
     * release in flight still holds the lock: its end tells the waiters how it went. */
    pthread_mutex_lock(&c->mu);
    pthread_mutex_lock(&ws->mu);
    if (!again || w->behind_own) {
        for (const dlock_lock *l = c->locks; l != NULL && until == 0; l = l->next) {
            int64_t end = l->valid_until_us;
            if (l->name_len == name_len && memcmp(l->name, name, name_len) == 0 && !l->shared &&
                !l->released && !l->lost && end > now)
                until = end;
        }
        for (const dlock__waiter *x = ws->waiters; x != NULL && until == 0; x = x->next)
            if (x != w && waits_for(x, w->q->k.lock, w->q->k.lock_len) &&
                __builtin_popcount(x->handoff.nodes) >= c->quorum)
                until = now + DLOCK_QUEUE_REFRESH_MS * 1000;
        if (until == 0 && w->behind_own)
            until = -1;
        w->behind_own = until > 0;
    }
    pthread_mutex_unlock(&ws->mu);
    pthread_mutex_unlock(&c->mu);
    return until;
}

void dlock__wait_leave(dlock_client *c, dlock__waiter *w)
{
    struct dlock__waitsys *ws = c->wait;
    pthread_mutex_lock(&ws->mu);
    for (dlock__waiter **p = &ws->waiters; *p != NULL; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    pthread_mutex_unlock(&ws->mu);
    close(w->efd);
    free(w);
}
