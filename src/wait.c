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
 * In a process, one background thread per client holds one subscriber connection
 * per node, SUBSCRIBEd to the client's channel (P wake:<32 hex>, made when the
 * client is). A wake-up message carries a token; the thread notes which node sent it
 * in that waiter's grants and writes to its eventfd, and the waiter, asleep in
 * ppoll() on its eventfd and its cancel_fd, retries. The thread starts on a client's
 * first wait and stays subscribed until the client is freed, so a thread that comes
 * back for a busy name queues with its first attempt.
 *
 * Nothing depends on a message arriving: a waiter also retries when the holder's
 * lease should have run out (an expiry publishes nothing), and refreshes its place
 * every DLOCK_QUEUE_REFRESH_MS, which also tells it when the lock became free
 * unannounced. A lost wake-up therefore costs time, never a hang. When a subscriber
 * connection is remade, every waiter retries once: a release may have gone by while
 * it was down.
 */
#include "internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

struct dlock__waitsys {
    pthread_mutex_t mu;       /* everything below, except conns (the thread's own) */
    pthread_cond_t confirmed; /* a subscription was confirmed, or the thread stopped */
    pthread_t thread;
    bool stop;
    int ctl; /* eventfd: wakes the thread to stop */
    dlock__waiter *waiters;
    uint32_t subscribed;  /* nodes that confirmed the subscription (bit per node) */
    dlock__conn *conns;   /* one subscriber connection per node */
    int64_t *retry_at_us; /* when to reconnect a closed node */
    int64_t *backoff_us;
    bool *connected_once;
};

/* ---- helpers ------------------------------------------------------------------ */

static void kick(int fd)
{
    uint64_t one = 1;
    ssize_t w = write(fd, &one, sizeof one);
    (void)w; /* a full counter means a wake-up is already pending */
}

static void drain(int fd)
{
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof v);
    (void)r;
}

static void wake_all(struct dlock__waitsys *ws)
{
    for (dlock__waiter *w = ws->waiters; w != NULL; w = w->next)
        kick(w->efd);
}

/* Queue "SUBSCRIBE channel" on a subscriber connection. */
static int subscribe(dlock__conn *conn, const char *chan)
{
    const char *argv[2] = {"SUBSCRIBE", chan};
    size_t lens[2] = {9, strlen(chan)};
    char *cmd;
    int len = redisFormatCommandArgv(&cmd, 2, argv, lens);
    if (len < 0)
        return DLOCK_ERR_NOMEM;
    int rc = dlock__conn_queue(conn, cmd, (size_t)len);
    redisFreeCommand(cmd);
    return rc;
}

/* ---- the subscriber thread -------------------------------------------------- */

/* A node's subscriber connection failed: close it, and try again later (100 ms,
 * doubling to 2 s). */
static void node_down(struct dlock__waitsys *ws, int i)
{
    dlock__conn_close(&ws->conns[i]);
    /* A cluster's channel is on any master: the next try picks one that serves. */
    if (ws->conns[i].node->cluster != NULL) {
        ws->conns[i].host[0] = '\0';
        dlock__cluster_suspect(ws->conns[i].node);
    }
    pthread_mutex_lock(&ws->mu);
    ws->subscribed &= ~(1u << i);
    pthread_mutex_unlock(&ws->mu);
    int64_t b = ws->backoff_us[i];
    ws->backoff_us[i] = b == 0 ? 100000 : (b * 2 > 2000000 ? 2000000 : b * 2);
    ws->retry_at_us[i] = dlock__now_us() + ws->backoff_us[i];
}

/* A push from a subscriber connection: a message, or the subscription's confirmation. */
static int on_push(struct dlock__waitsys *ws, int i, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return DLOCK_ERR_PROTOCOL;
    const char *kind = r->element[0]->str;
    const redisReply *arg = r->element[2];
    pthread_mutex_lock(&ws->mu);
    if (strcmp(kind, "message") == 0 && arg->type == REDIS_REPLY_STRING) {
        for (dlock__waiter *w = ws->waiters; w != NULL; w = w->next)
            if (arg->len == DLOCK_TOKEN_LEN && memcmp(w->token, arg->str, DLOCK_TOKEN_LEN) == 0) {
                w->grants |= 1u << i;
                kick(w->efd);
            }
    } else if (strcmp(kind, "subscribe") == 0) {
        ws->subscribed |= 1u << i;
        pthread_cond_broadcast(&ws->confirmed);
    }
    pthread_mutex_unlock(&ws->mu);
    return DLOCK_OK;
}

/* Read what node i sent and act on every complete push. */
static void on_readable(dlock_client *c, struct dlock__waitsys *ws, int i)
{
    dlock__conn *conn = &ws->conns[i];
    char detail[160];
    int rc = dlock__conn_read(conn, detail, sizeof detail);
    while (rc == DLOCK_OK) {
        redisReply *r;
        bool was_handshaking = conn->handshake > 0;
        rc = dlock__conn_next_reply(conn, &r, detail, sizeof detail);
        if (rc != DLOCK_OK)
            break;
        if (was_handshaking && conn->handshake == 0) {
            /* Connected and authenticated: subscribe. If this is a reconnection, a
             * release may have gone by unseen, so every waiter retries once. */
            if ((rc = subscribe(conn, c->wake_chan)) != DLOCK_OK ||
                (rc = dlock__conn_flush(conn, detail, sizeof detail)) != DLOCK_OK)
                break;
            if (ws->connected_once[i]) {
                pthread_mutex_lock(&ws->mu);
                wake_all(ws);
                pthread_mutex_unlock(&ws->mu);
            }
            ws->connected_once[i] = true;
            ws->backoff_us[i] = 0;
        }
        if (r == NULL)
            return;
        rc = on_push(ws, i, r);
        freeReplyObject(r);
    }
    node_down(ws, i);
}

static void *subscriber_main(void *arg)
{
    dlock_client *c = arg;
    struct dlock__waitsys *ws = c->wait;
    struct pollfd pfd[DLOCK_SERVERS_MAX + 1];
    int idx[DLOCK_SERVERS_MAX + 1];
    char detail[160];
    for (;;) {
        pthread_mutex_lock(&ws->mu);
        bool stop = ws->stop;
        pthread_mutex_unlock(&ws->mu);
        if (stop)
            break;

        int64_t now = dlock__now_us(), next = INT64_MAX;
        int nfds = 0;
        pfd[nfds] = (struct pollfd){.fd = ws->ctl, .events = POLLIN};
        idx[nfds++] = -1;
        for (int i = 0; i < c->n; i++) {
            dlock__conn *conn = &ws->conns[i];
            if (conn->state == DLOCK_CONN_CLOSED && now >= ws->retry_at_us[i]) {
                if (dlock__conn_open(conn, detail, sizeof detail) != DLOCK_OK ||
                    (conn->state == DLOCK_CONN_READY &&
                     dlock__conn_flush(conn, detail, sizeof detail) != DLOCK_OK))
                    node_down(ws, i);
            }
            if (conn->state == DLOCK_CONN_CLOSED) {
                if (ws->retry_at_us[i] < next)
                    next = ws->retry_at_us[i];
                continue;
            }
            pfd[nfds] = (struct pollfd){.fd = conn->fd, .events = dlock__conn_events(conn)};
            idx[nfds++] = i;
            if (dlock__conn_buffered(conn))
                next = now; /* TLS holds decrypted bytes the socket will not report */
        }
        int64_t wait_us = next == INT64_MAX ? 1000000 : next - now;
        if (wait_us < 0)
            wait_us = 0;
        struct timespec ts = {(time_t)(wait_us / 1000000), (long)(wait_us % 1000000) * 1000};
        if (ppoll(pfd, (nfds_t)nfds, &ts, NULL) < 0)
            continue; /* EINTR; any other failure is retried on the next turn */
        for (int k = 0; k < nfds; k++) {
            if (idx[k] >= 0 && dlock__conn_buffered(&ws->conns[idx[k]]))
                pfd[k].revents |= ws->conns[idx[k]].read_ev;
            if (pfd[k].revents == 0)
                continue;
            if (idx[k] < 0) {
                drain(ws->ctl);
                continue;
            }
            int i = idx[k];
            dlock__conn *conn = &ws->conns[i];
            if (conn->state == DLOCK_CONN_CONNECTING) {
                if (dlock__conn_on_connect(conn, detail, sizeof detail) != DLOCK_OK) {
                    node_down(ws, i);
                    continue;
                }
                if (conn->state != DLOCK_CONN_READY)
                    continue; /* the next address, or the TLS handshake, goes on */
            }
            if (conn->outpos < conn->outlen &&
                dlock__conn_flush(conn, detail, sizeof detail) != DLOCK_OK) {
                node_down(ws, i);
                continue;
            }
            if (pfd[k].revents & (conn->read_ev | POLLERR | POLLHUP))
                on_readable(c, ws, i);
        }
    }
    return NULL;
}

/* ---- the client's side ------------------------------------------------------ */

/* Create the wait system and start its thread, once per client. Called with c->mu. */
static int start(dlock_client *c)
{
    struct dlock__waitsys *ws = dlock__calloc(1, sizeof *ws);
    if (ws == NULL)
        return DLOCK_ERR_NOMEM;
    ws->conns = dlock__calloc((size_t)c->n, sizeof *ws->conns);
    ws->retry_at_us = dlock__calloc((size_t)c->n, sizeof *ws->retry_at_us);
    ws->backoff_us = dlock__calloc((size_t)c->n, sizeof *ws->backoff_us);
    ws->connected_once = dlock__calloc((size_t)c->n, sizeof *ws->connected_once);
    ws->ctl = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    dlock__cond_init(&ws->confirmed);
    pthread_mutex_init(&ws->mu, NULL);
    int rc = DLOCK_OK;
    if (!ws->conns || !ws->retry_at_us || !ws->backoff_us || !ws->connected_once)
        rc = DLOCK_ERR_NOMEM;
    else if (ws->ctl < 0)
        rc = DLOCK_ERR_IO;
    if (rc == DLOCK_OK) {
        for (int i = 0; i < c->n; i++)
            dlock__conn_init(&ws->conns[i], &c->nodes[i]);
        c->wait = ws;
        int err = pthread_create(&ws->thread, NULL, subscriber_main, c);
        if (err != 0) {
            c->wait = NULL;
            rc = DLOCK_ERR_NOMEM;
        }
    }
    if (rc != DLOCK_OK) {
        if (ws->ctl >= 0)
            close(ws->ctl);
        pthread_cond_destroy(&ws->confirmed);
        pthread_mutex_destroy(&ws->mu);
        free(ws->conns);
        free(ws->retry_at_us);
        free(ws->backoff_us);
        free(ws->connected_once);
        free(ws);
    }
    return rc;
}

int dlock__wait_join(dlock_client *c, const char *token, bool hot, const dlock__request *q,
                     int64_t ticket, dlock__waiter **out)
{
    *out = NULL;
    pthread_mutex_lock(&c->mu);
    int rc = c->wait ? DLOCK_OK : hot ? DLOCK_ERR_BUSY : start(c);
    pthread_mutex_unlock(&c->mu);
    if (rc != DLOCK_OK)
        return rc;
    struct dlock__waitsys *ws = c->wait;
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
    /* Wait (briefly) until a quorum of nodes confirms the subscription: the caller's
     * next attempt queues it, and a release after that must find it listening. If
     * they do not confirm in time, the waiter still works, on its timers. */
    struct timespec until;
    dlock__cond_deadline(&until, c->rules.timeout_us + c->rules.connect_timeout_us);
    while (__builtin_popcount(ws->subscribed) < c->quorum && !ws->stop)
        if (pthread_cond_timedwait(&ws->confirmed, &ws->mu, &until) != 0)
            break;
    pthread_mutex_unlock(&ws->mu);
    *out = w;
    return DLOCK_OK;
}

int dlock__sleep_on(int fd, int64_t until_us, int cancel_fd, int close_fd)
{
    struct pollfd p[3] = {{.fd = fd, .events = POLLIN},
                          {.fd = cancel_fd > 0 ? cancel_fd : -1, .events = POLLIN},
                          {.fd = close_fd, .events = POLLIN}};
    for (;;) {
        int64_t left = until_us - dlock__now_us();
        if (left < 0)
            left = 0;
        struct timespec ts = {(time_t)(left / 1000000), (long)(left % 1000000) * 1000};
        int r = ppoll(p, 3, &ts, NULL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r > 0 && (p[2].revents & POLLIN))
            return DLOCK_ERR_CLOSED;
        if (r > 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
            return DLOCK_ERR_CANCELED;
        return DLOCK_OK;
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
        w->grants = 0;
        memset(&w->handoff, 0, sizeof w->handoff);
        w->local = false;
    }
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

/* The wait system, if c has one yet: another thread's first wait may be starting it
 * right now, under the client's lock. */
static struct dlock__waitsys *waitsys(dlock_client *c)
{
    pthread_mutex_lock(&c->mu);
    struct dlock__waitsys *ws = c->wait;
    pthread_mutex_unlock(&c->mu);
    return ws;
}

static bool waits_for(const dlock__waiter *w, const char *key, size_t key_len)
{
    return w->q != NULL && w->q->k.lock_len == key_len && memcmp(w->q->k.lock, key, key_len) == 0;
}

bool dlock__wait_heir(dlock_client *c, const char *key, size_t key_len, dlock__heir *out)
{
    struct dlock__waitsys *ws = waitsys(c);
    out->member = NULL;
    out->ticket[0] = '\0';
    if (ws == NULL)
        return false;
    pthread_mutex_lock(&ws->mu);
    const dlock__waiter *first = NULL;
    for (const dlock__waiter *w = ws->waiters; w != NULL; w = w->next)
        if (waits_for(w, key, key_len) && (first == NULL || before(w, first)))
            first = w;
    if (first != NULL && (out->member = malloc(first->q->member_len)) != NULL) {
        memcpy(out->member, first->q->member, first->q->member_len);
        out->member_len = first->q->member_len;
        memcpy(out->token, first->token, sizeof out->token);
        memcpy(out->ttl, first->q->ttl, sizeof out->ttl);
        /* A waiter queued on no server is queued by the release, with its own ticket,
         * so that a waiter of another client that came earlier still goes first. */
        if (first->local)
            snprintf(out->ticket, sizeof out->ticket, "%lld", (long long)first->ticket);
    }
    pthread_mutex_unlock(&ws->mu);
    return out->member != NULL;
}

void dlock__wait_released(dlock_client *c, const char *key, size_t key_len, const char *heir,
                          const dlock__handoff *h, uint32_t unknown)
{
    struct dlock__waitsys *ws = waitsys(c);
    if (ws == NULL)
        return;
    pthread_mutex_lock(&ws->mu);
    bool passed = false; /* the heir holds it now: the local waiters wait behind it */
    for (dlock__waiter *w = heir != NULL ? ws->waiters : NULL; w != NULL; w = w->next)
        if (memcmp(w->token, heir, DLOCK_TOKEN_LEN) == 0) {
            w->grants |= h->nodes | unknown;
            w->handoff = *h;
            passed = __builtin_popcount(h->nodes) >= c->quorum;
            /* A local heir that got nothing is queued now, or not at all: it attempts. */
            if (w->grants != 0 || w->local)
                kick(w->efd);
            w->local = false;
            break;
        }
    for (dlock__waiter *w = ws->waiters; w != NULL && !passed; w = w->next)
        if (w->local && waits_for(w, key, key_len)) {
            w->local = false;
            kick(w->efd);
        }
    pthread_mutex_unlock(&ws->mu);
}

int64_t dlock__wait_behind_own(dlock_client *c, dlock__waiter *w, const char *name, size_t name_len,
                               bool again)
{
    struct dlock__waitsys *ws = waitsys(c);
    if (ws == NULL || w->q == NULL)
        return 0;
    int64_t now = dlock__now_us(), until = 0;
    /* Both locks, the client's first (its order everywhere): a release that ends marks
     * its handle under the client's lock, then wakes the local waiters under the wait
     * system's, so a waiter either is found by that or sees the handle released. A
     * release in flight still holds the lock: its end tells the waiters how it went. */
    pthread_mutex_lock(&c->mu);
    pthread_mutex_lock(&ws->mu);
    if (!again || w->local) {
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
        if (until == 0 && w->local)
            until = -1;
        w->local = until > 0;
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

/* What the wait system owns besides its thread and its lock. */
/* Free the wait system's memory and descriptors; in a forked child (forget), without
 * touching the sockets the parent still uses (dlock__conn_forget). */
static void free_waitsys(dlock_client *c, struct dlock__waitsys *ws, bool forget)
{
    for (int i = 0; i < c->n; i++) {
        if (forget)
            dlock__conn_forget(&ws->conns[i]);
        else
            dlock__conn_free(&ws->conns[i]);
    }
    close(ws->ctl);
    free(ws->conns);
    free(ws->retry_at_us);
    free(ws->backoff_us);
    free(ws->connected_once);
}

void dlock__wait_stop(dlock_client *c)
{
    struct dlock__waitsys *ws = c->wait;
    if (ws == NULL)
        return;
    pthread_mutex_lock(&ws->mu);
    ws->stop = true;
    pthread_cond_broadcast(&ws->confirmed);
    pthread_mutex_unlock(&ws->mu);
    kick(ws->ctl);
    pthread_join(ws->thread, NULL);
    free_waitsys(c, ws, false);
    pthread_cond_destroy(&ws->confirmed);
    pthread_mutex_destroy(&ws->mu);
    free(ws);
    c->wait = NULL;
}

void dlock__wait_forget(dlock_client *c)
{
    /* The subscriber thread was not copied by fork(), and its mutex may have been
     * copied locked: free the memory and close the child's copies of the descriptors
     * (the parent's stay open). */
    if (c->wait == NULL)
        return;
    free_waitsys(c, c->wait, true);
    free(c->wait);
    c->wait = NULL;
}
