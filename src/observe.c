/*
 * observe.c: observers of a leadership (dlock_observe).
 *
 * An observer listens on the leader's record channel (elect.c has the messages)
 * through the client's subscriber thread (subscriber.c), and has a thread of its own
 * that turns what it hears into changes, in term order:
 *   - a proclamation newer than the last change (a larger term, or the same term and
 *     a larger seq) is a change: the new leader or value, reported as heard;
 *   - the end of the leader's lock (a release or a break: retire, elect.c) newer than
 *     the last change is "no one leads";
 *   - a renewal of the leader it knows moves that leader's lease end;
 *   - a node's confirmation of the subscription (a connection made or remade, when a
 *     message may have gone by), a message it cannot understand, and the end of the
 *     known leader's lease with no renewal heard (a leader that died publishes
 *     nothing), make it read the servers once (dlock__leader_read), and report what
 *     the read shows if it differs (a read that finds no one while the known leader's
 *     lease runs is not believed before that lease ends: with N > 1 it may have met
 *     servers the proclamation had not reached yet).
 * So while a leader renews and nothing changes, the observer sends no command: the
 * renewals come to it. A read that fails is tried again (100 ms, doubling to 2 s);
 * the last change stands meanwhile, since an unreachable quorum says nothing of who
 * leads.
 */
#include "subscriber.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* A change waiting for dlock_observer_next. */
struct change {
    struct change *next;
    dlock_leader_info info;
};

struct dlock_observer {
    dlock_client *client;
    dlock__keys keys;
    dlock__listener *listener;
    dlock_leader_fn fn;
    void *user;
    pthread_t thread;
    int stop_fd;        /* eventfd: the thread ends */
    int out_fd;         /* eventfd (semaphore): one count per change waiting */
    pthread_mutex_t mu; /* the changes waiting */
    struct change *first, **last_p;

    /* The thread's own: the last change reported. */
    bool reported; /* any yet */
    uint64_t term; /* its term and seq (kept after "no one leads": older messages */
    uint64_t seq;  /* are not news) */
    bool leads;    /* someone leads */
    char token[DLOCK_TOKEN_LEN + 1];
    int64_t lease_end_us; /* when the leader's lease ends unless renewed; 0: none */
};

/* Report info as the next change. */
static void report(dlock_observer *o, const dlock_leader_info *info)
{
    o->reported = true;
    if (o->fn != NULL) {
        o->fn(info, o->user);
        return;
    }
    struct change *ch = dlock__malloc(sizeof *ch);
    if (ch == NULL)
        return; /* the change is lost to a reader that out of memory could not keep */
    ch->next = NULL;
    ch->info = *info;
    /* Queued and counted under one lock, so that the descriptor's count is always the
     * queue's length (a reader between the two would leave it readable and empty). */
    pthread_mutex_lock(&o->mu);
    *o->last_p = ch;
    o->last_p = &ch->next;
    dlock__kick(o->out_fd);
    pthread_mutex_unlock(&o->mu);
}

/* When a lease of ttl_ms heard or read now ends, with a margin for the clocks' rates
 * and the message's way here. A lease longer than any the library grants is a message
 * of someone else's: counted as the longest. */
static int64_t lease_end(int64_t ttl_ms)
{
    if (ttl_ms > DLOCK_TTL_MAX_MS)
        ttl_ms = DLOCK_TTL_MAX_MS;
    return dlock__now_us() + ttl_ms * 1000 + ttl_ms * 20 + 5000;
}

static bool newer(const dlock_observer *o, uint64_t term, uint64_t seq)
{
    return !o->reported || term > o->term || (term == o->term && seq > o->seq);
}

/* "No one leads", unless that was the last change. */
static void none(dlock_observer *o)
{
    o->lease_end_us = 0;
    o->token[0] = '\0';
    if (o->reported && !o->leads)
        return;
    o->leads = false;
    dlock_leader_info info;
    memset(&info, 0, sizeof info);
    report(o, &info);
}

/* A leader (from a message or a read) with its token and seq. */
static void leader(dlock_observer *o, const dlock__leader *l)
{
    if (!newer(o, l->info.term, l->seq)) {
        if (strcmp(o->token, l->token) == 0 && o->leads)
            o->lease_end_us = lease_end(l->info.remaining_ms); /* the one we know */
        return;
    }
    o->term = l->info.term;
    o->seq = l->seq;
    o->leads = true;
    memcpy(o->token, l->token, sizeof o->token);
    o->lease_end_us = lease_end(l->info.remaining_ms);
    report(o, &l->info);
}

/* Act on one message. Returns true when the state must be read (it could not be
 * understood). */
static bool on_message(dlock_observer *o, const char *m, size_t len)
{
    unsigned long long term, seq;
    long long ms;
    size_t vlen;
    int at = 0;
    enum { TTL_AT = 2 + DLOCK_TOKEN_LEN + 1 }; /* "R <token> " */
    if (m[0] == 'R' && len > TTL_AT && m[1] == ' ' && m[TTL_AT - 1] == ' ' &&
        strspn(m + TTL_AT, "0123456789") == len - TTL_AT && len - TTL_AT <= 10) {
        if (o->leads && memcmp(m + 2, o->token, DLOCK_TOKEN_LEN) == 0)
            o->lease_end_us = lease_end(strtoll(m + TTL_AT, NULL, 10));
        return false;
    }
    if (m[0] == 'N' && sscanf(m, "N %llu %llu%n", &term, &seq, &at) == 2 && (size_t)at == len) {
        if (newer(o, term, seq)) {
            o->term = term;
            o->seq = seq;
            none(o);
        }
        return false;
    }
    if (m[0] == 'T' && sscanf(m, "T %llu %llu %lld %zu %n", &term, &seq, &ms, &vlen, &at) == 4 &&
        at > 0 && (size_t)at <= len && vlen >= DLOCK_TOKEN_LEN && vlen <= len - (size_t)at &&
        term > 0) {
        dlock__leader l;
        memset(&l, 0, sizeof l);
        l.info.term = term;
        l.seq = seq;
        l.info.remaining_ms = ms > 0 ? ms : 0;
        memcpy(l.token, m + at, DLOCK_TOKEN_LEN);
        dlock__leader_holder(&l.info, m + at, vlen);
        dlock__copy_text(l.info.value, sizeof l.info.value, m + at + vlen, len - (size_t)at - vlen);
        leader(o, &l);
        return false;
    }
    return true;
}

static void *observer_main(void *arg)
{
    dlock_observer *o = arg;
    dlock_client *c = o->client;
    bool must_read = false;
    int64_t retry_at_us = 0, backoff_us = 0;
    for (;;) {
        int64_t now = dlock__now_us(), until = INT64_MAX;
        if (must_read)
            until = retry_at_us;
        else if (o->lease_end_us != 0)
            until = o->lease_end_us;
        int64_t wait_ms = until == INT64_MAX ? -1 : until <= now ? 0 : (until - now + 999) / 1000;
        struct pollfd p[2] = {{.fd = o->stop_fd, .events = POLLIN},
                              {.fd = o->listener->efd, .events = POLLIN}};
        int n = poll(p, 2, wait_ms > INT32_MAX ? INT32_MAX : (int)wait_ms);
        if (n < 0 && errno != EINTR)
            break;
        if (p[0].revents & POLLIN)
            break;
        bool missed = false;
        for (dlock__heard *h = dlock__listen_take(c, o->listener, &missed), *next; h != NULL;
             h = next) {
            next = h->next;
            if (h->confirmed || on_message(o, h->text, h->len)) {
                must_read = true;
                retry_at_us = 0;
            }
            free(h);
        }
        if (missed) {
            must_read = true;
            retry_at_us = 0;
        }
        now = dlock__now_us();
        if (!must_read && o->lease_end_us != 0 && now >= o->lease_end_us) {
            must_read = true;
            retry_at_us = 0;
        }
        if (!must_read || now < retry_at_us)
            continue;
        dlock__leader got;
        dlock__err ignored; /* tried again; the last change stands meanwhile */
        if (dlock__leader_read(c, &o->keys, &got, &ignored) != DLOCK_OK) {
            backoff_us = backoff_us == 0            ? 100000
                         : backoff_us * 2 > 2000000 ? 2000000
                                                    : backoff_us * 2;
            retry_at_us = dlock__now_us() + backoff_us;
            continue;
        }
        must_read = false;
        backoff_us = 0;
        /* A read that finds no leader while the one heard of still has a lease may
         * have met servers its proclamation had not reached yet (with N > 1): no one
         * leads only once that lease ended unrenewed, and the next look is then. */
        if (got.info.term == 0 && o->leads && dlock__now_us() < o->lease_end_us)
            continue;
        if (got.info.term == 0)
            none(o);
        else
            leader(o, &got);
        /* A leader the read shows that is not news (an older term than the last change)
         * is waited out as any other: its lease's end is the next look. */
        if (o->lease_end_us != 0 && o->lease_end_us <= dlock__now_us())
            o->lease_end_us = lease_end(got.info.remaining_ms);
    }
    return NULL;
}

int dlock_observe(dlock_client *c, const char *name, dlock_leader_fn fn, void *user,
                  dlock_observer **out)
{
    dlock__err e;
    if (out != NULL)
        *out = NULL;
    int rc = dlock__election_enter(c, name, out, "out", &e);
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    dlock_observer *o = dlock__calloc(1, sizeof *o);
    if (o == NULL)
        return dlock__raise(&e, DLOCK_ERR_NOMEM, "out of memory");
    o->client = c;
    o->fn = fn;
    o->user = user;
    o->last_p = &o->first;
    o->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    o->out_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE);
    pthread_mutex_init(&o->mu, NULL);
    rc = dlock__keys_make(c->prefix, c->prefix_len, name, strlen(name), &o->keys, &e);
    if (rc == DLOCK_OK && (o->stop_fd < 0 || o->out_fd < 0))
        rc = dlock__err_set(&e, DLOCK_ERR_IO, "eventfd: %s", strerror(errno));
    if (rc == DLOCK_OK && (rc = dlock__listen(c, o->keys.leader, &o->listener)) != DLOCK_OK)
        dlock__err_set(&e, rc, "cannot listen for the leader's changes: %s", dlock_strerror(rc));
    if (rc == DLOCK_OK && pthread_create(&o->thread, NULL, observer_main, o) != 0)
        rc = dlock__err_set(&e, DLOCK_ERR_NOMEM, "cannot start the observer's thread");
    if (rc != DLOCK_OK) {
        if (o->listener != NULL)
            dlock__listen_end(c, o->listener);
        o->listener = NULL;
        o->thread = 0;
        dlock_observer_free(o);
        return dlock__err_raise(&e, rc);
    }
    *out = o;
    return DLOCK_OK;
}

int dlock_observer_fd(const dlock_observer *o)
{
    if (o != NULL)
        return o->out_fd;
    dlock__err e;
    dlock__raise(&e, DLOCK_ERR_INVALID, "observer is NULL");
    return -1;
}

int dlock_observer_next(dlock_observer *o, dlock_leader_info *info)
{
    dlock__err e;
    if (o == NULL || info == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "%s is NULL", o == NULL ? "observer" : "info");
    pthread_mutex_lock(&o->mu);
    struct change *ch = o->first;
    if (ch != NULL) {
        if ((o->first = ch->next) == NULL)
            o->last_p = &o->first;
        uint64_t one;
        ssize_t r = read(o->out_fd, &one, sizeof one);
        (void)r;
    }
    pthread_mutex_unlock(&o->mu);
    if (ch == NULL)
        return dlock__raise(&e, DLOCK_ERR_AGAIN, "no change waits");
    *info = ch->info;
    free(ch);
    return DLOCK_OK;
}

void dlock_observer_free(dlock_observer *o)
{
    if (o == NULL)
        return;
    /* In a forked child the thread does not exist, and the subscriber's lock may have
     * been copied locked: only this process's memory and descriptors are freed. */
    if (o->listener != NULL && !dlock__client_forked(o->client)) {
        dlock__kick(o->stop_fd);
        pthread_join(o->thread, NULL);
        dlock__listen_end(o->client, o->listener);
    }
    while (o->first != NULL) {
        struct change *ch = o->first;
        o->first = ch->next;
        free(ch);
    }
    if (o->stop_fd >= 0)
        close(o->stop_fd);
    if (o->out_fd >= 0)
        close(o->out_fd);
    pthread_mutex_destroy(&o->mu);
    free(o->keys.buf);
    free(o);
}
