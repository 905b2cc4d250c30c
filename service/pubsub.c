/*
 * pubsub.c: SUBSCRIBE leader:NAME, observing a leadership with any Redis client's
 * pub/sub API (redis-cli, phpredis, predis, redis-py, ioredis).
 *
 * A channel is "leader:" and an election's name. Its first subscriber makes a topic:
 * one library observer of the name (dlock_observe, fd form), whose descriptor the loop
 * polls. Each change the observer reports is published to every subscriber of the
 * topic as Redis publishes, ["message", channel, payload], the payload "TERM VALUE"
 * ("0" when no one leads). A subscriber gets the state the topic knows at once, after
 * its ["subscribe", channel, count]; a topic that knows none yet sends its observer's
 * first report to all. The last subscriber's leaving frees the topic and its observer.
 *
 * As in Redis, a connection with subscriptions takes only SUBSCRIBE, UNSUBSCRIBE, PING
 * (answered ["pong", ARG]) and QUIT (commands.c enforces it); other channels than
 * leader:NAME are refused, since dlockd publishes nothing else.
 */
#include "dlockd.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHANNEL_PREFIX     "leader:"
#define CHANNEL_PREFIX_LEN (sizeof CHANNEL_PREFIX - 1)
/* Names observed at once: each is a library observer, a thread and two descriptors, so
 * a client must not be able to make them without bound. Elections are few. */
#define TOPICS_MAX 256

typedef struct topic {
    struct topic *next;
    uv_work_t free_req; /* the observer's free, on the pool */
    char *chan;         /* "leader:NAME" */
    size_t chan_len;
    dlock_observer *obs;
    uv_poll_t poll;
    bool known; /* last holds the state */
    dlock_leader_info last;
    int nsubs;
} topic;

/* A connection's subscription to one topic. */
typedef struct dd_sub {
    struct dd_sub *next;
    topic *t;
} dd_sub;

static topic *topics;
static int ntopics;

/* ["message", channel, "TERM VALUE"] of info into b. */
static void message(dd_buf *b, const topic *t, const dlock_leader_info *info)
{
    char head[32];
    int n = snprintf(head, sizeof head, "%" PRIu64, info->term);
    size_t vlen = info->term != 0 ? strlen(info->value) : 0;
    dd_buf payload = {0};
    dd_buf_append(&payload, head, (size_t)n);
    if (info->term != 0) {
        dd_buf_append(&payload, " ", 1);
        dd_buf_append(&payload, info->value, vlen);
    }
    dd_reply_array(b, 3);
    dd_reply_cstr(b, "message");
    dd_reply_bulk(b, t->chan, t->chan_len);
    dd_reply_bulk(b, payload.p != NULL ? payload.p : "", payload.len);
    dd_buf_free(&payload);
}

static void on_change(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    topic *t = h->data;
    dlock_leader_info info;
    while (dlock_observer_next(t->obs, &info) == DLOCK_OK) {
        t->last = info;
        t->known = true;
        for (dd_conn *c = dd_srv.conns; c != NULL; c = c->next) {
            if (c->quit)
                continue; /* told to end: nothing is written after its last reply */
            bool subscribed = false;
            for (dd_sub *s = c->subs; s != NULL && !subscribed; s = s->next)
                subscribed = s->t == t;
            if (!subscribed)
                continue;
            /* The reply may close c (a subscriber that reads nothing): its
             * subscriptions go then, so none of them is touched after. */
            dd_buf b = {0};
            message(&b, t, &info);
            dd_conn_reply(c, &b);
            dd_buf_free(&b);
        }
    }
}

/* On the pool: the observer's free waits for its thread, which may be in a read of
 * the lock servers, as long as their deadline: never on the loop. */
static void free_observer(uv_work_t *w)
{
    topic *t = w->data;
    dlock_observer_free(t->obs);
}

static void free_topic(uv_work_t *w, int status)
{
    (void)status;
    topic *t = w->data;
    free(t->chan);
    free(t);
}

static void on_topic_closed(uv_handle_t *h)
{
    topic *t = h->data;
    t->free_req.data = t;
    if (uv_queue_work(dd_srv.loop, &t->free_req, free_observer, free_topic) != 0) {
        free_observer(&t->free_req);
        free_topic(&t->free_req, 0);
    }
}

static void topic_unref(topic *t)
{
    if (--t->nsubs > 0)
        return;
    for (topic **p = &topics; *p != NULL; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            ntopics--;
            break;
        }
    uv_poll_stop(&t->poll);
    uv_close((uv_handle_t *)&t->poll, on_topic_closed);
}

static topic *topic_find(const resp_arg *chan)
{
    for (topic *t = topics; t != NULL; t = t->next)
        if (t->chan_len == chan->len && memcmp(t->chan, chan->p, chan->len) == 0)
            return t;
    return NULL;
}

/* Whether chan is one dlockd publishes (else the error in out). */
static bool channel_ok(const resp_arg *chan, dd_buf *out)
{
    if (chan->len <= CHANNEL_PREFIX_LEN || chan->len > CHANNEL_PREFIX_LEN + DLOCK_NAME_MAX ||
        memcmp(chan->p, CHANNEL_PREFIX, CHANNEL_PREFIX_LEN) != 0 ||
        memchr(chan->p, '\0', chan->len) != NULL) {
        dd_reply_error(out, "ERR dlockd publishes only leader:NAME channels, not '%.*s'",
                       (int)(chan->len > 64 ? 64 : chan->len), chan->p);
        return false;
    }
    return true;
}

/* The topic of chan (a channel_ok one), made on first use; NULL with an error in out. */
static topic *topic_get(const resp_arg *chan, dd_buf *out)
{
    topic *found = topic_find(chan);
    if (found != NULL)
        return found;
    if (ntopics >= TOPICS_MAX) {
        dd_reply_error(out, "ERR dlockd observes at most %d leader:NAME channels at once",
                       TOPICS_MAX);
        return NULL;
    }
    size_t nlen = chan->len - CHANNEL_PREFIX_LEN;
    char *n = malloc(nlen + 1);
    topic *t = calloc(1, sizeof *t);
    if (n == NULL || t == NULL || (t->chan = malloc(chan->len + 1)) == NULL)
        abort();
    memcpy(n, chan->p + CHANNEL_PREFIX_LEN, nlen);
    n[nlen] = '\0';
    memcpy(t->chan, chan->p, chan->len);
    t->chan[chan->len] = '\0';
    t->chan_len = chan->len;
    int rc = dlock_observe(dd_srv.client, n, NULL, NULL, &t->obs);
    free(n);
    if (rc != DLOCK_OK) {
        dd_reply_dlock_error(out, rc);
        free(t->chan);
        free(t);
        return NULL;
    }
    t->poll.data = t;
    if ((rc = uv_poll_init(dd_srv.loop, &t->poll, dlock_observer_fd(t->obs))) != 0 ||
        (rc = uv_poll_start(&t->poll, UV_READABLE, on_change)) != 0) {
        dd_reply_error(out, "ERR cannot watch the leader's changes: %s", uv_strerror(rc));
        /* A handle that was initialized is the loop's until closed: closing it frees
         * the topic (on_topic_closed); one that was not, is freed here. */
        if (t->poll.loop != NULL)
            uv_close((uv_handle_t *)&t->poll, on_topic_closed);
        else {
            dlock_observer_free(t->obs);
            free(t->chan);
            free(t);
        }
        return NULL;
    }
    t->next = topics;
    topics = t;
    ntopics++;
    return t;
}

/* ["subscribe" | "unsubscribe", channel, count]. */
static void confirm(dd_buf *out, const char *kind, const char *chan, size_t len, int count)
{
    dd_reply_array(out, 3);
    dd_reply_cstr(out, kind);
    if (chan != NULL)
        dd_reply_bulk(out, chan, len);
    else
        dd_reply_nil(out);
    dd_reply_int(out, count);
}

void dd_cmd_subscribe(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    /* Every channel checked first, so that a refusal subscribes to none of them. */
    for (size_t i = 1; i < argc; i++)
        if (!channel_ok(&argv[i], out))
            return;
    for (size_t i = 1; i < argc; i++) {
        dd_sub *s = c->subs;
        while (s != NULL &&
               !(s->t->chan_len == argv[i].len && memcmp(s->t->chan, argv[i].p, argv[i].len) == 0))
            s = s->next;
        if (s == NULL) {
            topic *t = topic_get(&argv[i], out);
            if (t == NULL)
                return;
            if ((s = calloc(1, sizeof *s)) == NULL)
                abort();
            s->t = t;
            t->nsubs++;
            s->next = c->subs;
            c->subs = s;
            c->nsubs++;
        }
        confirm(out, "subscribe", s->t->chan, s->t->chan_len, c->nsubs);
        if (s->t->known)
            message(out, s->t, &s->t->last);
    }
}

/* Leave one subscription (prev: its predecessor on c's list, or NULL). */
static void leave(dd_conn *c, dd_sub *s, dd_sub *prev)
{
    if (prev != NULL)
        prev->next = s->next;
    else
        c->subs = s->next;
    c->nsubs--;
    topic_unref(s->t);
    free(s);
}

void dd_cmd_unsubscribe(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    if (argc == 1) {
        if (c->subs == NULL)
            confirm(out, "unsubscribe", NULL, 0, 0);
        while (c->subs != NULL) {
            dd_sub *s = c->subs;
            char *chan = strdup(s->t->chan);
            if (chan == NULL)
                abort();
            leave(c, s, NULL);
            confirm(out, "unsubscribe", chan, strlen(chan), c->nsubs);
            free(chan);
        }
        return;
    }
    for (size_t i = 1; i < argc; i++) {
        dd_sub *s = c->subs, *prev = NULL;
        while (s != NULL && !(s->t->chan_len == argv[i].len &&
                              memcmp(s->t->chan, argv[i].p, argv[i].len) == 0)) {
            prev = s;
            s = s->next;
        }
        if (s != NULL)
            leave(c, s, prev);
        confirm(out, "unsubscribe", argv[i].p, argv[i].len, c->nsubs);
    }
}

void dd_pubsub_ping(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)c;
    dd_reply_array(out, 2);
    dd_reply_cstr(out, "pong");
    if (argc > 1)
        dd_reply_bulk(out, argv[1].p, argv[1].len);
    else
        dd_reply_cstr(out, "");
}

void dd_pubsub_conn_closed(dd_conn *c)
{
    while (c->subs != NULL)
        leave(c, c->subs, NULL);
}
