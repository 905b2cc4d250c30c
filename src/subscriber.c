/*
 * subscriber.c: the client's subscriber thread. One background thread per client
 * holds one subscriber connection per node, SUBSCRIBEd to the client's wake-up channel
 * (P wake:<32 hex>, made when the client is) and to the channel of each listener (a
 * leader's observer, observe.c). A wake-up message carries a waiter's token: the thread
 * notes which node sent it in that waiter's grants and writes to its eventfd (wait.c
 * says what the waiter does then). Whatever a listener's channel carries is queued for
 * it, with each node's confirmation of the subscription, and its eventfd written.
 *
 * The thread starts on the client's first wait or first listener and stays until the
 * client is freed. A node whose connection fails is reconnected (100 ms, doubling to
 * 2 s) and every channel subscribed again; since a message may have gone by while it
 * was down, every waiter retries once and every listener hears the new confirmation.
 *
 * The connections are read by the thread, or by a client's only waiter the thread
 * lends the reading to (subscriber_lend.c): each runs the turn below.
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

/* ---- helpers ------------------------------------------------------------------ */

void dlock__kick(int fd)
{
    uint64_t one = 1;
    ssize_t w = write(fd, &one, sizeof one);
    (void)w; /* a full counter means a wake-up is already pending */
}

void dlock__drain(int fd)
{
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof v);
    (void)r;
}

/* Queue "VERB channel" (SUBSCRIBE, UNSUBSCRIBE) on a subscriber connection. */
static int send_verb(dlock__conn *conn, const char *verb, const char *chan)
{
    const char *argv[2] = {verb, chan};
    size_t lens[2] = {strlen(verb), strlen(chan)};
    char *cmd;
    int len = redisFormatCommandArgv(&cmd, 2, argv, lens);
    if (len < 0)
        return DLOCK_ERR_NOMEM;
    int rc = dlock__conn_queue(conn, cmd, (size_t)len);
    redisFreeCommand(cmd);
    return rc;
}

/* Queue what l heard from node i (text NULL: the subscription's confirmation), and
 * wake its reader. With ws->mu held. */
static void heard(dlock__listener *l, int i, const char *text, size_t len)
{
    dlock__heard *h = dlock__malloc(sizeof *h + len + 1);
    if (h == NULL) {
        l->missed = true; /* its reader reads again what it could not be told */
        dlock__kick(l->efd);
        return;
    }
    h->next = NULL;
    h->node = i;
    h->confirmed = text == NULL;
    h->len = len;
    if (len > 0)
        memcpy(h->text, text, len);
    h->text[len] = '\0';
    *l->last_p = h;
    l->last_p = &h->next;
    dlock__kick(l->efd);
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
    for (dlock__listener *l = ws->listeners; l != NULL; l = l->next)
        l->sent &= ~(1u << i);
    pthread_mutex_unlock(&ws->mu);
    int64_t b = ws->backoff_us[i];
    ws->backoff_us[i] = b == 0 ? 100000 : (b * 2 > 2000000 ? 2000000 : b * 2);
    ws->retry_at_us[i] = dlock__now_us() + ws->backoff_us[i];
}

/* Subscribe node i's ready connection to every listener's channel it was not asked
 * for yet, and unsubscribe it from those whose listeners are gone. */
static int sync_listeners(struct dlock__waitsys *ws, int i)
{
    int rc = DLOCK_OK;
    pthread_mutex_lock(&ws->mu);
    /* The unsubscriptions first: a channel left and listened to again since (its
     * unsubscription dropped by dlock__listen) must end subscribed. */
    for (dlock__unsub *u = ws->unsubs; u != NULL && rc == DLOCK_OK; u = u->next)
        rc = send_verb(&ws->conns[i], "UNSUBSCRIBE", u->chan);
    for (dlock__listener *l = ws->listeners; l != NULL && rc == DLOCK_OK; l = l->next)
        if (!(l->sent & (1u << i)) &&
            (rc = send_verb(&ws->conns[i], "SUBSCRIBE", l->chan)) == DLOCK_OK)
            l->sent |= 1u << i;
    pthread_mutex_unlock(&ws->mu);
    return rc;
}

/* The fence of a wake-up "<token> <fence>", a handoff's (scripts.c, dispatch): 0 when
 * it carries none (a shared holder's admission, a release by an older library) or one
 * that is not a decimal number a fence can be. */
static uint64_t grant_fence(const char *s, size_t len)
{
    if (len <= DLOCK_TOKEN_LEN + 1 || len > DLOCK_TOKEN_LEN + 1 + 19 || s[DLOCK_TOKEN_LEN] != ' ')
        return 0;
    uint64_t f = 0;
    for (size_t k = DLOCK_TOKEN_LEN + 1; k < len; k++) {
        if (s[k] < '0' || s[k] > '9')
            return 0;
        f = f * 10 + (uint64_t)(s[k] - '0');
    }
    return f;
}

/* A push from a subscriber connection: a message, or a subscription's confirmation. */
static int on_push(dlock_client *c, struct dlock__waitsys *ws, int i, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING)
        return DLOCK_ERR_PROTOCOL;
    const char *kind = r->element[0]->str;
    const redisReply *chan = r->element[1], *arg = r->element[2];
    bool message = strcmp(kind, "message") == 0 && arg->type == REDIS_REPLY_STRING;
    bool confirmed = strcmp(kind, "subscribe") == 0;
    pthread_mutex_lock(&ws->mu);
    if (strcmp(chan->str, c->wake_chan) == 0) {
        uint64_t fence = message ? grant_fence(arg->str, arg->len) : 0;
        for (dlock__waiter *w = ws->waiters; message && w != NULL; w = w->next)
            if (arg->len >= DLOCK_TOKEN_LEN && memcmp(w->token, arg->str, DLOCK_TOKEN_LEN) == 0) {
                w->grants |= 1u << i;
                if (fence > 0) {
                    w->fenced |= 1u << i;
                    if (fence > w->grant_fence)
                        w->grant_fence = fence;
                }
                dlock__kick(w->efd);
            }
        if (confirmed) {
            ws->subscribed |= 1u << i;
            pthread_cond_broadcast(&ws->confirmed);
        }
    } else if (message || confirmed) {
        for (dlock__listener *l = ws->listeners; l != NULL; l = l->next)
            if (strcmp(l->chan, chan->str) == 0)
                heard(l, i, message ? arg->str : NULL, message ? arg->len : 0);
    }
    pthread_mutex_unlock(&ws->mu);
    return DLOCK_OK;
}

/* Read what node i sent and act on every complete push. */
static void on_readable(dlock_client *c, struct dlock__waitsys *ws, int i)
{
    dlock__conn *conn = &ws->conns[i];
    dlock__err e; /* the connection is retried: its reason goes nowhere */
    int rc = dlock__conn_read(conn, &e);
    while (rc == DLOCK_OK) {
        redisReply *r;
        bool was_handshaking = conn->handshake > 0;
        rc = dlock__conn_next_reply(conn, &r, &e);
        if (rc != DLOCK_OK)
            break;
        if (was_handshaking && conn->handshake == 0) {
            /* Connected and authenticated: subscribe. If this is a reconnection, a
             * release may have gone by unseen, so every waiter retries once. */
            if ((rc = send_verb(conn, "SUBSCRIBE", c->wake_chan)) != DLOCK_OK ||
                (rc = sync_listeners(ws, i)) != DLOCK_OK ||
                (rc = dlock__conn_flush(conn, &e)) != DLOCK_OK)
                break;
            if (ws->connected_once[i]) {
                pthread_mutex_lock(&ws->mu);
                for (dlock__waiter *w = ws->waiters; w != NULL; w = w->next)
                    dlock__kick(w->efd);
                pthread_mutex_unlock(&ws->mu);
            }
            ws->connected_once[i] = true;
            ws->backoff_us[i] = 0;
        }
        if (r == NULL)
            return;
        rc = on_push(c, ws, i, r);
        freeReplyObject(r);
    }
    node_down(ws, i);
}

/* The listeners changed (dlock__listen, dlock__listen_end): bring every ready
 * connection up to date. The channels left are then dropped: a connection down now
 * subscribes to none of them when it is remade. */
static void on_listeners_changed(dlock_client *c, struct dlock__waitsys *ws)
{
    dlock__err e; /* the connection is retried: its reason goes nowhere */
    for (int i = 0; i < c->n; i++) {
        dlock__conn *conn = &ws->conns[i];
        if (conn->state == DLOCK_CONN_READY && conn->handshake == 0 &&
            (sync_listeners(ws, i) != DLOCK_OK || dlock__conn_flush(conn, &e) != DLOCK_OK))
            node_down(ws, i);
    }
    pthread_mutex_lock(&ws->mu);
    while (ws->unsubs != NULL) {
        dlock__unsub *u = ws->unsubs;
        ws->unsubs = u->next;
        free(u);
    }
    pthread_mutex_unlock(&ws->mu);
}

void dlock__subscriber_turn(dlock_client *c, struct dlock__waitsys *ws, struct pollfd *extra,
                            int nextra, int64_t until_us)
{
    struct pollfd pfd[DLOCK_SERVERS_MAX + 4];
    int idx[DLOCK_SERVERS_MAX + 4];
    dlock__err e; /* the connection is retried: its reason goes nowhere */
    int64_t now = dlock__now_us(), next = until_us;
    int nfds = 0;
    pfd[nfds] = (struct pollfd){.fd = ws->ctl, .events = POLLIN};
    idx[nfds++] = -1;
    for (int k = 0; k < nextra; k++) {
        pfd[nfds] = extra[k];
        pfd[nfds].revents = 0;
        idx[nfds++] = -2 - k;
    }
    for (int i = 0; i < c->n; i++) {
        dlock__conn *conn = &ws->conns[i];
        if (conn->state == DLOCK_CONN_CLOSED && now >= ws->retry_at_us[i]) {
            if (dlock__conn_open(conn, &e) != DLOCK_OK ||
                (conn->state == DLOCK_CONN_READY && dlock__conn_flush(conn, &e) != DLOCK_OK))
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
    int64_t wait_us = next - now;
    if (wait_us < 0)
        wait_us = 0;
    struct timespec ts = {(time_t)(wait_us / 1000000), (long)(wait_us % 1000000) * 1000};
    if (ppoll(pfd, (nfds_t)nfds, &ts, NULL) < 0)
        return; /* EINTR; any other failure is retried on the next turn */
    for (int k = 0; k < nfds; k++) {
        if (idx[k] >= 0 && dlock__conn_buffered(&ws->conns[idx[k]]))
            pfd[k].revents |= ws->conns[idx[k]].read_ev;
        if (pfd[k].revents == 0)
            continue;
        if (idx[k] <= -2) {
            extra[-2 - idx[k]].revents = pfd[k].revents;
            continue;
        }
        if (idx[k] == -1) {
            dlock__drain(ws->ctl);
            on_listeners_changed(c, ws);
            continue;
        }
        int i = idx[k];
        dlock__conn *conn = &ws->conns[i];
        if (conn->state == DLOCK_CONN_CONNECTING) {
            if (dlock__conn_on_connect(conn, &e) != DLOCK_OK) {
                node_down(ws, i);
                continue;
            }
            if (conn->state != DLOCK_CONN_READY)
                continue; /* the next address, or the TLS handshake, goes on */
        }
        if (conn->outpos < conn->outlen && dlock__conn_flush(conn, &e) != DLOCK_OK) {
            node_down(ws, i);
            continue;
        }
        if (pfd[k].revents & (conn->read_ev | POLLERR | POLLHUP))
            on_readable(c, ws, i);
    }
}

static void *subscriber_main(void *arg)
{
    dlock_client *c = arg;
    struct dlock__waitsys *ws = c->wait;
    for (;;) {
        pthread_mutex_lock(&ws->mu);
        dlock__lend_thread(ws);
        bool stop = ws->stop;
        pthread_mutex_unlock(&ws->mu);
        if (stop)
            break;
        /* At least once a second: a connection down is retried on its own timer. */
        dlock__subscriber_turn(c, ws, NULL, 0, dlock__now_us() + 1000000);
    }
    return NULL;
}

/* ---- the client's side ------------------------------------------------------ */

/* What the subscriber owns besides its thread and its lock; in a forked child
 * (forget), freed without touching the sockets the parent still uses
 * (dlock__conn_forget). */
static void free_parts(dlock_client *c, struct dlock__waitsys *ws, bool forget)
{
    for (int i = 0; ws->conns != NULL && i < c->n; i++) {
        if (forget)
            dlock__conn_forget(&ws->conns[i]);
        else
            dlock__conn_free(&ws->conns[i]);
    }
    if (ws->ctl >= 0)
        close(ws->ctl);
    if (ws->park >= 0)
        close(ws->park);
    while (ws->unsubs != NULL) {
        dlock__unsub *u = ws->unsubs;
        ws->unsubs = u->next;
        free(u);
    }
    free(ws->conns);
    free(ws->retry_at_us);
    free(ws->backoff_us);
    free(ws->connected_once);
}

/* Create the subscriber and start its thread, once per client. Called with c->mu. */
static int start(dlock_client *c)
{
    struct dlock__waitsys *ws = dlock__calloc(1, sizeof *ws);
    if (ws == NULL)
        return DLOCK_ERR_NOMEM;
    ws->conns = dlock__calloc((size_t)c->n, sizeof *ws->conns);
    /* At once: free_parts closes them, and a zeroed one's descriptor is 0. */
    for (int i = 0; ws->conns != NULL && i < c->n; i++)
        dlock__conn_init(&ws->conns[i], &c->nodes[i]);
    ws->retry_at_us = dlock__calloc((size_t)c->n, sizeof *ws->retry_at_us);
    ws->backoff_us = dlock__calloc((size_t)c->n, sizeof *ws->backoff_us);
    ws->connected_once = dlock__calloc((size_t)c->n, sizeof *ws->connected_once);
    ws->ctl = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ws->park = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    dlock__cond_init(&ws->confirmed);
    dlock__cond_init(&ws->answered);
    pthread_mutex_init(&ws->mu, NULL);
    int rc = DLOCK_OK;
    if (!ws->conns || !ws->retry_at_us || !ws->backoff_us || !ws->connected_once)
        rc = DLOCK_ERR_NOMEM;
    else if (ws->ctl < 0 || ws->park < 0)
        rc = DLOCK_ERR_IO;
    if (rc == DLOCK_OK) {
        c->wait = ws;
        int err = pthread_create(&ws->thread, NULL, subscriber_main, c);
        if (err != 0) {
            c->wait = NULL;
            rc = DLOCK_ERR_NOMEM;
        }
    }
    if (rc != DLOCK_OK) {
        free_parts(c, ws, false);
        pthread_cond_destroy(&ws->answered);
        pthread_cond_destroy(&ws->confirmed);
        pthread_mutex_destroy(&ws->mu);
        free(ws);
    }
    return rc;
}

struct dlock__waitsys *dlock__subscriber(dlock_client *c, int *rc)
{
    pthread_mutex_lock(&c->mu);
    *rc = c->wait != NULL ? DLOCK_OK : start(c);
    struct dlock__waitsys *ws = c->wait;
    pthread_mutex_unlock(&c->mu);
    return ws;
}

struct dlock__waitsys *dlock__subscriber_peek(dlock_client *c)
{
    pthread_mutex_lock(&c->mu);
    struct dlock__waitsys *ws = c->wait;
    pthread_mutex_unlock(&c->mu);
    return ws;
}

int dlock__listen(dlock_client *c, const char *chan, dlock__listener **out)
{
    *out = NULL;
    int rc;
    struct dlock__waitsys *ws = dlock__subscriber(c, &rc);
    if (ws == NULL)
        return rc;
    dlock__listener *l = dlock__calloc(1, sizeof *l);
    if (l == NULL || (l->chan = dlock__strdup(chan)) == NULL) {
        free(l);
        return DLOCK_ERR_NOMEM;
    }
    if ((l->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        free(l->chan);
        free(l);
        return DLOCK_ERR_IO;
    }
    l->last_p = &l->first;
    pthread_mutex_lock(&ws->mu);
    l->next = ws->listeners;
    ws->listeners = l;
    /* An unsubscription of this channel not sent yet (its last listener just left)
     * would end the subscription this one needs. */
    for (dlock__unsub **p = &ws->unsubs; *p != NULL;) {
        dlock__unsub *u = *p;
        if (strcmp(u->chan, chan) == 0) {
            *p = u->next;
            free(u);
        } else {
            p = &u->next;
        }
    }
    dlock__waitsys_recall(ws); /* a listener's channel is read by the thread */
    pthread_mutex_unlock(&ws->mu);
    dlock__kick(ws->ctl);
    *out = l;
    return DLOCK_OK;
}

dlock__heard *dlock__listen_take(dlock_client *c, dlock__listener *l, bool *missed)
{
    struct dlock__waitsys *ws = c->wait;
    dlock__drain(l->efd);
    pthread_mutex_lock(&ws->mu);
    dlock__heard *h = l->first;
    l->first = NULL;
    l->last_p = &l->first;
    *missed = l->missed;
    l->missed = false;
    pthread_mutex_unlock(&ws->mu);
    return h;
}

void dlock__listen_end(dlock_client *c, dlock__listener *l)
{
    struct dlock__waitsys *ws = c->wait;
    size_t len = strlen(l->chan);
    dlock__unsub *u = dlock__malloc(sizeof *u + len + 1);
    pthread_mutex_lock(&ws->mu);
    for (dlock__listener **p = &ws->listeners; *p != NULL; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            break;
        }
    bool shared = false; /* another listener on the same channel keeps it */
    for (dlock__listener *o = ws->listeners; o != NULL; o = o->next)
        shared |= strcmp(o->chan, l->chan) == 0;
    if (u != NULL && !shared) {
        memcpy(u->chan, l->chan, len + 1);
        u->next = ws->unsubs;
        ws->unsubs = u;
        u = NULL;
    }
    pthread_mutex_unlock(&ws->mu);
    free(u);
    dlock__kick(ws->ctl);
    while (l->first != NULL) {
        dlock__heard *h = l->first;
        l->first = h->next;
        free(h);
    }
    close(l->efd);
    free(l->chan);
    free(l);
}

void dlock__wait_stop(dlock_client *c)
{
    struct dlock__waitsys *ws = c->wait;
    if (ws == NULL)
        return;
    pthread_mutex_lock(&ws->mu);
    ws->stop = true;
    pthread_cond_broadcast(&ws->confirmed);
    pthread_cond_broadcast(&ws->answered);
    pthread_mutex_unlock(&ws->mu);
    dlock__kick(ws->ctl);
    dlock__kick(ws->park);
    pthread_join(ws->thread, NULL);
    free_parts(c, ws, false);
    pthread_cond_destroy(&ws->answered);
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
    free_parts(c, c->wait, true);
    free(c->wait);
    c->wait = NULL;
}
