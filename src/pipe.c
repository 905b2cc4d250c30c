/*
 * pipe.c: one connection per server that the rounds of many callers share.
 *
 * An event loop that serves many clients (dlockd) runs many operations of one client
 * at once. On connections of their own, each round costs its own writes, reads and
 * poll registrations, and the server sees as many connections as rounds in flight. On
 * a pipe, every round's command is queued behind the others on the one connection to
 * its server and the pump sends them together (one write per loop turn), and the
 * server answers them in order: the replies are matched to their requests by their
 * place in the line (a ring of entries, one per command sent, each with its sequence
 * number; a request knows its own, so giving it up costs nothing).
 *
 * What keeps one caller's reply from reaching another:
 * - every command sent has its entry, also those nobody awaits (a clean-up release, a
 *   waiter leaving its queue: their replies are discarded in turn), and the handshake's
 *   replies are taken by conn.c before any of them;
 * - a request given up keeps its entry, emptied: its reply is discarded when it comes;
 * - a command that must wait for the connection's handshake (it would run as the wrong
 *   user, or in the wrong database, behind a failed AUTH or SELECT) waits in a list of
 *   its own and gets its entry only when it is sent;
 * - a reply with no entry left, a read error, the end of the stream, or the oldest
 *   request missing its deadline (a server that stalls) fails every request on the
 *   connection and resets it: nothing on it can be trusted to come in order any more.
 *   A reset (not a close) keeps what the server has not yet received from running
 *   late, as conn.c says.
 *
 * A piped connection is used under its client's pipes mutex (dlock__pipes.mu), by
 * whichever thread steps a round or pumps. Only servers reached directly are piped (a
 * cluster's redirections and a Sentinel's demoted master are not replies in order), and
 * the resend of a script the server lost (-NOSCRIPT) goes to the back of the line.
 */
#include "transport.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

typedef struct pipe_ent {
    dlock__req *req;  /* NULL: nobody awaits its reply (never, or given up) */
    dlock__waker *wk; /* told when req is done */
    bool harmless;    /* run late, it harms nobody (conn.c's risky, for a reset) */
} pipe_ent;

typedef struct dlock__pipe {
    dlock__pipes *ps;
    pipe_ent *ring; /* commands sent, oldest first: ring[(head + k) % cap] for k < len */
    size_t cap, head, len;
    uint64_t head_seq; /* sequence number of ring[head] */
    pipe_ent *held;    /* awaited, waiting for the handshake before they are sent */
    size_t nheld, heldcap;
    bool stuck; /* the last flush left bytes the socket would not take */
} dlock__pipe;

/* ---- the mutex and the wakers --------------------------------------------------- */

void dlock__pipe_lock(const dlock__conn *conns)
{
    pthread_mutex_lock(&conns[0].pipe->ps->mu);
}

void dlock__pipe_unlock(const dlock__conn *conns)
{
    pthread_mutex_unlock(&conns[0].pipe->ps->mu);
}

dlock__pipes *dlock__pipe_of(const dlock__conn *c)
{
    return c->pipe->ps;
}

static void ready(dlock__pipes *ps, dlock__waker *wk)
{
    if (wk == NULL || wk->fn == NULL || wk->prev != NULL)
        return;
    wk->next = ps->ready;
    if (wk->next != NULL)
        wk->next->prev = &wk->next;
    wk->prev = &ps->ready;
    ps->ready = wk;
}

static void unready(dlock__waker *wk)
{
    if (wk->prev == NULL)
        return;
    *wk->prev = wk->next;
    if (wk->next != NULL)
        wk->next->prev = wk->prev;
    wk->next = NULL;
    wk->prev = NULL;
}

void dlock__pipes_forget(dlock__pipes *ps, dlock__waker *wk)
{
    pthread_mutex_lock(&ps->mu);
    unready(wk);
    pthread_mutex_unlock(&ps->mu);
}

/* ---- the line of replies ---------------------------------------------------------- */

static pipe_ent *at(dlock__pipe *p, size_t k)
{
    return &p->ring[(p->head + k) % p->cap];
}

/* Append an entry; its sequence number in *seq. false when out of memory. */
static bool push(dlock__pipe *p, pipe_ent e, uint64_t *seq)
{
    if (p->len == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        pipe_ent *ring = malloc(cap * sizeof *ring);
        if (ring == NULL)
            return false;
        for (size_t k = 0; k < p->len; k++)
            ring[k] = *at(p, k);
        free(p->ring);
        p->ring = ring;
        p->cap = cap;
        p->head = 0;
    }
    *seq = p->head_seq + p->len;
    *at(p, p->len++) = e;
    return true;
}

static pipe_ent pop(dlock__pipe *p)
{
    pipe_ent e = *at(p, 0);
    p->head = (p->head + 1) % p->cap;
    p->len--;
    p->head_seq++;
    return e;
}

/* The entry of r, sent and not yet answered; NULL when r has none. */
static pipe_ent *entry_of(dlock__pipe *p, const dlock__req *r)
{
    if (r->pipe_seq < p->head_seq || r->pipe_seq - p->head_seq >= p->len)
        return NULL;
    pipe_ent *e = at(p, (size_t)(r->pipe_seq - p->head_seq));
    return e->req == r ? e : NULL;
}

static void done(dlock__pipes *ps, dlock__req *r, dlock__waker *wk, int err)
{
    r->err = err;
    r->done = true;
    r->held = false;
    ready(ps, wk);
}

/* Every request on c fails with err: why (NULL: each missed its deadline, and the
 * message says so), and c is reset. */
static void fail_all(dlock__conn *c, int err, const dlock__err *why)
{
    dlock__pipe *p = c->pipe;
    for (size_t k = 0; k < p->len; k++)
        if (!at(p, k)->harmless)
            c->risky = 1; /* a command that must not run late: reset, not closed */
    dlock__conn_close(c);
    const dlock__topology *t = c->node->topo;
    if (t->suspect != NULL)
        t->suspect(c->node);
    while (p->len > 0) {
        pipe_ent e = pop(p);
        dlock__req *r = e.req;
        if (r == NULL)
            continue;
        if (why != NULL)
            r->why = *why;
        else
            dlock__err_set(&r->why, 0,
                           "%s: no reply within %lld ms (outcome unknown: the command may "
                           "have been applied)",
                           c->node->addr.display,
                           (long long)((r->deadline_us - r->start_us) / 1000));
        done(p->ps, r, e.wk, err);
    }
    for (size_t k = 0; k < p->nheld; k++) {
        dlock__req *r = p->held[k].req;
        if (why != NULL)
            r->why = *why;
        else
            dlock__err_set(&r->why, 0, "%s: not connected within %lld ms", c->node->addr.display,
                           (long long)((r->deadline_us - r->start_us) / 1000));
        done(p->ps, r, p->held[k].wk, err);
    }
    p->nheld = 0;
}

static void fail_one(dlock__conn *c, dlock__req *r, dlock__waker *wk, int err)
{
    done(c->pipe->ps, r, wk, err);
}

/* Queue r's bytes (cmd, len) and give it an entry. */
static bool queue(dlock__conn *c, dlock__req *r, dlock__waker *wk, const char *cmd, size_t len)
{
    dlock__pipe *p = c->pipe;
    uint64_t seq;
    if (dlock__conn_queue(c, cmd, len) != DLOCK_OK ||
        !push(p, (pipe_ent){r->await ? r : NULL, r->await ? wk : NULL, r->harmless_late}, &seq)) {
        /* The bytes may be queued without their entry: the line is out of step. */
        dlock__err why;
        dlock__err_set(&why, 0, "%s: out of memory", c->node->addr.display);
        fail_all(c, DLOCK_ERR_NOMEM, &why);
        if (!r->done) {
            r->why = why;
            fail_one(c, r, wk, DLOCK_ERR_NOMEM);
        }
        return false;
    }
    r->pipe_seq = seq;
    return true;
}

/* The handshake is done: send the requests that waited for it. */
static void send_held(dlock__conn *c)
{
    dlock__pipe *p = c->pipe;
    size_t n = p->nheld;
    p->nheld = 0;
    for (size_t k = 0; k < n; k++) {
        dlock__req *r = p->held[k].req;
        r->held = false;
        if (!queue(c, r, p->held[k].wk, r->cmd, r->cmdlen)) {
            /* fail_all took those still held: none are, but the rest of ours are. */
            for (size_t j = k + 1; j < n; j++) {
                dlock__req *o = p->held[j].req;
                dlock__err_set(&o->why, 0, "%s: out of memory", c->node->addr.display);
                fail_one(c, o, p->held[j].wk, DLOCK_ERR_NOMEM);
            }
            return;
        }
    }
}

/* ---- the steps fanout.c takes ------------------------------------------------------ */

void dlock__pipe_send(dlock__conn *c, dlock__req *r, dlock__waker *wk)
{
    dlock__pipe *p = c->pipe;
    r->held = false;
    /* A connection nobody waits on may have been closed by the server (a restart, an
     * idle timeout): reopen it rather than fail the request. With replies owed, the
     * pump sees the end itself. */
    if (p->len == 0 && p->nheld == 0 && dlock__conn_stale(c))
        dlock__conn_close(c);
    if (c->state == DLOCK_CONN_CLOSED) {
        int rc = dlock__conn_open(c, &r->why);
        if (rc != DLOCK_OK) {
            fail_one(c, r, wk, rc);
            return;
        }
    }
    if (!r->await) {
        /* Sent behind a handshake if need be: these commands are token-checked and do
         * no harm even refused or run in the wrong database (fanout.c's start says
         * more); nobody waits for them. */
        if (queue(c, r, NULL, r->cmd, r->cmdlen))
            r->done = true;
        return;
    }
    if (c->state != DLOCK_CONN_READY || c->handshake > 0) {
        if (p->nheld == p->heldcap) {
            size_t cap = p->heldcap ? p->heldcap * 2 : 16;
            pipe_ent *h = realloc(p->held, cap * sizeof *h);
            if (h == NULL) {
                dlock__err_set(&r->why, 0, "%s: out of memory", c->node->addr.display);
                fail_one(c, r, wk, DLOCK_ERR_NOMEM);
                return;
            }
            p->held = h;
            p->heldcap = cap;
        }
        p->held[p->nheld++] = (pipe_ent){r, wk, r->harmless_late};
        r->held = true;
        if (c->connect_deadline_us > r->deadline_us)
            r->deadline_us = c->connect_deadline_us;
        return;
    }
    queue(c, r, wk, r->cmd, r->cmdlen);
}

static void pump_conn(dlock__conn *c, uint32_t ev);

void dlock__pipe_expire(dlock__conn *c, dlock__req *r)
{
    /* A loop late to pump may have the reply in the socket already: take what is
     * there first. */
    if (!r->held)
        pump_conn(c, EPOLLIN);
    if (r->done)
        return;
    /* The oldest request is at least as late: all of them fail. */
    c->lagging = true;
    fail_all(c, DLOCK_ERR_TIMEOUT, NULL);
}

void dlock__pipe_abandon(dlock__conn *c, dlock__req *r)
{
    dlock__pipe *p = c->pipe;
    if (r->held) {
        for (size_t k = 0; k < p->nheld; k++) {
            if (p->held[k].req == r) {
                p->held[k] = p->held[--p->nheld];
                break;
            }
        }
        r->held = false;
        dlock__err_set(&r->why, 0, "%s: still connecting when a quorum had decided",
                       c->node->addr.display);
    } else {
        pipe_ent *e = entry_of(p, r);
        if (e != NULL) {
            e->req = NULL; /* its reply is discarded when it comes */
            e->wk = NULL;
        }
        dlock__err_set(&r->why, 0, "%s: no reply yet when a quorum had decided",
                       c->node->addr.display);
    }
    r->err = DLOCK_ERR_TIMEOUT;
    r->done = true;
}

/* ---- the pump -------------------------------------------------------------------- */

/* Give each complete reply on c to its request. */
static void dispatch(dlock__conn *c)
{
    dlock__pipe *p = c->pipe;
    for (;;) {
        redisReply *reply;
        dlock__err why;
        int rc = dlock__conn_next_reply(c, &reply, &why);
        if (rc != DLOCK_OK) {
            fail_all(c, rc, &why);
            return;
        }
        if (p->nheld > 0 && c->handshake == 0)
            send_held(c);
        if (reply == NULL)
            return;
        if (p->len == 0) {
            freeReplyObject(reply);
            dlock__node_err(&why, DLOCK_ERR_PROTOCOL, c->node, "a reply nobody asked for");
            fail_all(c, DLOCK_ERR_PROTOCOL, &why);
            return;
        }
        pipe_ent e = pop(p);
        dlock__req *r = e.req;
        if (r == NULL) {
            freeReplyObject(reply);
            continue;
        }
        /* A script the server no longer has goes again, whole, to the back of the
         * line. */
        const char *cmd = NULL;
        size_t len = 0;
        if ((rc = dlock__req_resend(c, r, &reply, &cmd, &len)) != DLOCK_OK) {
            done(p->ps, r, e.wk, rc);
            continue;
        }
        if (cmd != NULL) {
            queue(c, r, e.wk, cmd, len);
            if (c->state == DLOCK_CONN_CLOSED)
                return; /* out of memory: all failed */
            continue;
        }
        r->reply = reply;
        done(p->ps, r, e.wk, DLOCK_OK);
    }
}

/* Act on what the socket of c says (ev: epoll's events; 0: only send what is queued). */
static void pump_conn(dlock__conn *c, uint32_t ev)
{
    dlock__err why;
    int rc;
    if (c->state == DLOCK_CONN_CONNECTING) {
        if (ev == 0)
            return;
        if ((rc = dlock__conn_on_connect(c, &why)) != DLOCK_OK) {
            fail_all(c, rc, &why);
            return;
        }
        if (c->state != DLOCK_CONN_READY)
            return;
    }
    if (c->state != DLOCK_CONN_READY)
        return;
    if (c->pipe->nheld > 0 && c->handshake == 0)
        send_held(c);
    if (c->outpos < c->outlen && (rc = dlock__conn_flush(c, &why)) != DLOCK_OK) {
        fail_all(c, rc, &why);
        return;
    }
    c->pipe->stuck = c->outpos < c->outlen;
    if (!(ev & (EPOLLIN | EPOLLERR | EPOLLHUP)) && !dlock__conn_buffered(c))
        return;
    if ((rc = dlock__conn_read(c, &why)) != DLOCK_OK) {
        fail_all(c, rc, &why);
        return;
    }
    dispatch(c);
    /* What the replies released (the requests held behind the handshake) goes now. */
    if (c->state == DLOCK_CONN_READY && c->outpos < c->outlen) {
        if ((rc = dlock__conn_flush(c, &why)) != DLOCK_OK)
            fail_all(c, rc, &why);
        else
            c->pipe->stuck = c->outpos < c->outlen;
    }
}

/* Keep the epoll set in step with the connections: each socket, for reading, and for
 * writing while a connect or a flush waits for it (bytes merely queued go at the next
 * flush: watching for room meanwhile would cost two changes of the set per turn). */
static void watch(dlock__pipes *ps)
{
    for (int i = 0; i < ps->n; i++) {
        const dlock__conn *c = &ps->conns[i];
        short pe = c->fd < 0                                 ? 0
                   : c->state != DLOCK_CONN_READY            ? dlock__conn_events(c)
                   : c->pipe->stuck && c->outpos < c->outlen ? (short)(c->read_ev | c->flush_ev)
                                                             : c->read_ev;
        uint32_t ev = ((pe & POLLIN) ? EPOLLIN : 0u) | ((pe & POLLOUT) ? EPOLLOUT : 0u);
        if (c->fd == ps->reg_fd[i] && ev == ps->reg_ev[i])
            continue;
        if (ps->reg_fd[i] >= 0 && ps->reg_fd[i] != c->fd)
            epoll_ctl(ps->epfd, EPOLL_CTL_DEL, ps->reg_fd[i], NULL); /* may be closed: fine */
        struct epoll_event e = {.events = ev, .data.u32 = (uint32_t)i};
        bool mod = ps->reg_fd[i] == c->fd;
        ps->reg_fd[i] = -1;
        ps->reg_ev[i] = 0;
        /* A descriptor closed and reopened under the same number left the set when it
         * closed: the modification fails, and it is added again. */
        if (c->fd >= 0 && ((mod && epoll_ctl(ps->epfd, EPOLL_CTL_MOD, c->fd, &e) == 0) ||
                           epoll_ctl(ps->epfd, EPOLL_CTL_ADD, c->fd, &e) == 0)) {
            ps->reg_fd[i] = c->fd;
            ps->reg_ev[i] = ev;
        }
    }
}

/* Tell the wakers one at a time, each taken off the list under the mutex: a waker may
 * start rounds, or another thread free a request's owner, meanwhile. */
static void tell(dlock__pipes *ps)
{
    for (;;) {
        pthread_mutex_lock(&ps->mu);
        dlock__waker *wk = ps->ready;
        void (*fn)(void *) = NULL;
        void *arg = NULL;
        if (wk != NULL) {
            unready(wk);
            fn = wk->fn;
            arg = wk->arg;
        }
        pthread_mutex_unlock(&ps->mu);
        if (fn == NULL)
            return;
        fn(arg);
    }
}

void dlock__pipes_pump(dlock__pipes *ps, int wait_ms)
{
    struct epoll_event evs[DLOCK_SERVERS_MAX];
    uint32_t rev[DLOCK_SERVERS_MAX] = {0};
    pthread_mutex_lock(&ps->mu);
    watch(ps);
    /* One server's established connection, looked at without waiting: the read itself
     * says whether something came (a recv that finds nothing costs what epoll_wait
     * would, and one that finds the replies saves it). */
    bool look = wait_ms == 0 && ps->n == 1 && ps->conns[0].state == DLOCK_CONN_READY;
    int n = 0;
    if (look) {
        rev[0] = EPOLLIN;
    } else {
        /* Waiting, the mutex is left to the others. */
        pthread_mutex_unlock(&ps->mu);
        n = epoll_wait(ps->epfd, evs, DLOCK_SERVERS_MAX, wait_ms);
        pthread_mutex_lock(&ps->mu);
    }
    for (int k = 0; k < n; k++)
        if (evs[k].data.u32 < (uint32_t)ps->n)
            rev[evs[k].data.u32] |= evs[k].events;
    for (int i = 0; i < ps->n; i++) {
        dlock__conn *c = &ps->conns[i];
        /* A descriptor reused since it was registered may report for another socket:
         * only the registered one's events count. */
        uint32_t ev = look || c->fd == ps->reg_fd[i] ? rev[i] : 0;
        if (c->fd >= 0 && (ev != 0 || c->outpos < c->outlen || dlock__conn_buffered(c)))
            pump_conn(c, ev);
    }
    watch(ps);
    pthread_mutex_unlock(&ps->mu);
    tell(ps);
}

void dlock__pipes_flush(dlock__pipes *ps)
{
    pthread_mutex_lock(&ps->mu);
    for (int i = 0; i < ps->n; i++) {
        dlock__conn *c = &ps->conns[i];
        if (c->state == DLOCK_CONN_READY && c->outpos < c->outlen)
            pump_conn(c, 0);
    }
    watch(ps);
    pthread_mutex_unlock(&ps->mu);
    tell(ps);
}

/* ---- making and freeing ------------------------------------------------------------ */

int dlock__pipes_init(dlock__pipes *ps, dlock__conn *conns, int n)
{
    memset(ps, 0, sizeof *ps);
    pthread_mutex_init(&ps->mu, NULL);
    ps->conns = conns;
    ps->n = n;
    for (int i = 0; i < DLOCK_SERVERS_MAX; i++)
        ps->reg_fd[i] = -1;
    if ((ps->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
        return DLOCK_ERR_IO;
    for (int i = 0; i < n; i++) {
        if ((conns[i].pipe = calloc(1, sizeof *conns[i].pipe)) == NULL)
            return DLOCK_ERR_NOMEM;
        conns[i].pipe->ps = ps;
    }
    return DLOCK_OK;
}

void dlock__pipes_free(dlock__pipes *ps)
{
    for (int i = 0; ps->conns != NULL && i < ps->n; i++) {
        dlock__pipe *p = ps->conns[i].pipe;
        if (p == NULL)
            continue;
        free(p->ring);
        free(p->held);
        free(p);
        ps->conns[i].pipe = NULL;
    }
    if (ps->epfd >= 0)
        close(ps->epfd);
    ps->epfd = -1;
    pthread_mutex_destroy(&ps->mu);
}
