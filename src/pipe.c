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
 * - so does one that finds PIPE_DEPTH commands on the line already: a burst of requests
 *   waits in the client, its deadline starting when it is sent, rather than in the
 *   server's queue, where the last of a long line would miss its deadline and fail the
 *   whole line with it (the pending is told when it is sent, to wait for the new
 *   deadline);
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

/* Commands on a line at most (DLOCK_PIPELINE_DEPTH): enough that a loop turn's
 * requests leave in one write (256 clients' at once), few enough that the server
 * answers the last of them within a millisecond or two of the first. */
#define PIPE_DEPTH DLOCK_PIPELINE_DEPTH

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
    /* Awaited, not sent yet, oldest first (held[hhead..nheld)): behind the connection's
     * handshake, or behind PIPE_DEPTH commands already on the line. */
    pipe_ent *held;
    size_t hhead, nheld, heldcap;
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
    for (size_t k = p->hhead; k < p->nheld; k++) {
        dlock__req *r = p->held[k].req;
        if (why != NULL)
            r->why = *why;
        else
            dlock__err_set(&r->why, 0, "%s: not sent: the connection failed",
                           c->node->addr.display);
        done(p->ps, r, p->held[k].wk, err);
    }
    p->hhead = p->nheld = 0;
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

/* Send the requests that wait, oldest first, while the handshake is done and the line
 * has room; each one's deadline starts now, and the owner of one that waited for room
 * (with no deadline) is told, to wait for it. */
static void send_held(dlock__conn *c)
{
    dlock__pipe *p = c->pipe;
    int64_t now = dlock__now_us();
    while (p->hhead < p->nheld && c->state == DLOCK_CONN_READY && c->handshake == 0 &&
           p->len < PIPE_DEPTH) {
        pipe_ent e = p->held[p->hhead++];
        if (p->hhead == p->nheld)
            p->hhead = p->nheld = 0;
        dlock__req *r = e.req;
        bool waited_for_room = r->deadline_us == INT64_MAX;
        r->held = false;
        r->start_us = now;
        r->deadline_us = now + c->node->rules->timeout_us;
        if (!queue(c, r, e.wk, r->cmd, r->cmdlen))
            return; /* out of memory: all failed */
        if (waited_for_room)
            ready(p->ps, e.wk); /* its owner waits for no due time yet */
    }
}

/* Hold r, sent later by send_held; false when out of memory. */
static bool hold(dlock__pipe *p, dlock__req *r, dlock__waker *wk)
{
    if (p->nheld == p->heldcap && p->hhead > 0) {
        memmove(p->held, p->held + p->hhead, (p->nheld - p->hhead) * sizeof *p->held);
        p->nheld -= p->hhead;
        p->hhead = 0;
    }
    if (p->nheld == p->heldcap) {
        size_t cap = p->heldcap ? p->heldcap * 2 : 16;
        pipe_ent *h = realloc(p->held, cap * sizeof *h);
        if (h == NULL)
            return false;
        p->held = h;
        p->heldcap = cap;
    }
    p->held[p->nheld++] = (pipe_ent){r, wk, r->harmless_late};
    r->held = true;
    return true;
}

/* Take r off the list of those waiting to be sent. */
static void unhold(dlock__pipe *p, const dlock__req *r)
{
    for (size_t k = p->hhead; k < p->nheld; k++) {
        if (p->held[k].req == r) {
            memmove(p->held + k, p->held + k + 1, (p->nheld - k - 1) * sizeof *p->held);
            p->nheld--;
            break;
        }
    }
    if (p->hhead == p->nheld)
        p->hhead = p->nheld = 0;
}

/* ---- the steps fanout.c takes ------------------------------------------------------ */

void dlock__pipe_send(dlock__conn *c, dlock__req *r, dlock__waker *wk)
{
    dlock__pipe *p = c->pipe;
    r->held = false;
    /* A connection nobody waits on may have been closed by the server (a restart, an
     * idle timeout): reopen it rather than fail the request. With replies owed, the
     * pump sees the end itself. */
    if (p->len == 0 && p->nheld == p->hhead && dlock__conn_stale(c))
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
    bool connecting = c->state != DLOCK_CONN_READY || c->handshake > 0;
    if (connecting || p->len >= PIPE_DEPTH || p->nheld > p->hhead) {
        if (!hold(p, r, wk)) {
            dlock__err_set(&r->why, 0, "%s: out of memory", c->node->addr.display);
            fail_one(c, r, wk, DLOCK_ERR_NOMEM);
            return;
        }
        if (!connecting)
            r->deadline_us = INT64_MAX; /* it starts when the request is sent */
        else if (c->connect_deadline_us > r->deadline_us)
            r->deadline_us = c->connect_deadline_us;
        return;
    }
    queue(c, r, wk, r->cmd, r->cmdlen);
}

static void pump_conn(dlock__conn *c, uint32_t ev);

void dlock__pipe_expire(dlock__conn *c, dlock__req *r)
{
    if (r->held && c->state == DLOCK_CONN_READY && c->handshake == 0) {
        /* Waiting for room on a full line, past the deadline its round gave it (a vote
         * decided without this node): it alone fails, never sent. */
        unhold(c->pipe, r);
        r->held = false;
        dlock__err_set(&r->why, 0, "%s: not sent within %lld ms: %zu commands ahead of it",
                       c->node->addr.display, (long long)((r->deadline_us - r->start_us) / 1000),
                       c->pipe->len);
        done(c->pipe->ps, r, NULL, DLOCK_ERR_TIMEOUT);
        return;
    }
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
        unhold(p, r);
        r->held = false;
        dlock__err_set(&r->why, 0, "%s: not sent yet when a quorum had decided",
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
        if (p->nheld > p->hhead)
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
    if (c->pipe->nheld > c->pipe->hhead)
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
    /* What the replies released (requests held behind the handshake, or for room on
     * the line) goes now. */
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
