/*
 * pipe_pump.c: a pipe's reads and writes (pipe.c keeps its line): the pump that sends
 * what the steps queued, takes the replies and gives each to the entry at the head of
 * its line, then tells the wakers of the requests that are done; the epoll set the pump
 * waits on; and a round in flight on pipes, as fanout.c's flight functions see it.
 */
#include "pipe.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* Give each complete reply on c to its request. */
static void dispatch(dlock__conn *c)
{
    dlock__pipe *p = c->pipe;
    for (;;) {
        redisReply *reply;
        dlock__err why;
        int rc = dlock__conn_next_reply(c, &reply, &why);
        if (rc != DLOCK_OK) {
            dlock__pipe_fail_all(c, rc, &why);
            return;
        }
        if (p->nheld > p->hhead)
            dlock__pipe_send_held(c);
        if (reply == NULL)
            return;
        if (p->len == 0) {
            freeReplyObject(reply);
            dlock__node_err(&why, DLOCK_ERR_PROTOCOL, c->node, "a reply nobody asked for");
            dlock__pipe_fail_all(c, DLOCK_ERR_PROTOCOL, &why);
            return;
        }
        pipe_ent e = dlock__pipe_pop(p);
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
            dlock__pipe_done(p->ps, r, e.wk, rc);
            continue;
        }
        if (cmd != NULL) {
            dlock__pipe_queue(c, r, e.wk, cmd, len);
            if (c->state == DLOCK_CONN_CLOSED)
                return; /* out of memory: all failed */
            continue;
        }
        r->reply = reply;
        dlock__pipe_done(p->ps, r, e.wk, DLOCK_OK);
    }
}

/* Act on what the socket of c says (ev: epoll's events; 0: only send what is queued). */
void dlock__pipe_pump_conn(dlock__conn *c, uint32_t ev)
{
    dlock__err why;
    int rc;
    if (c->state == DLOCK_CONN_CONNECTING) {
        if (ev == 0)
            return;
        if ((rc = dlock__conn_on_connect(c, &why)) != DLOCK_OK) {
            dlock__pipe_fail_all(c, rc, &why);
            return;
        }
        if (c->state != DLOCK_CONN_READY)
            return;
    }
    if (c->state != DLOCK_CONN_READY)
        return;
    if (c->pipe->nheld > c->pipe->hhead)
        dlock__pipe_send_held(c);
    if (c->outpos < c->outlen && (rc = dlock__conn_flush(c, &why)) != DLOCK_OK) {
        dlock__pipe_fail_all(c, rc, &why);
        return;
    }
    c->pipe->stuck = c->outpos < c->outlen;
    if (!(ev & (EPOLLIN | EPOLLERR | EPOLLHUP)) && !dlock__conn_buffered(c))
        return;
    if ((rc = dlock__conn_read(c, &why)) != DLOCK_OK) {
        dlock__pipe_fail_all(c, rc, &why);
        return;
    }
    dispatch(c);
    /* What the replies released (requests held behind the handshake, or for room on
     * the line) goes now. */
    if (c->state == DLOCK_CONN_READY && c->outpos < c->outlen) {
        if ((rc = dlock__conn_flush(c, &why)) != DLOCK_OK)
            dlock__pipe_fail_all(c, rc, &why);
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
            dlock__pipe_unready(wk);
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
            dlock__pipe_pump_conn(c, ev);
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
            dlock__pipe_pump_conn(c, 0);
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

/* ---- a round in flight on pipes --------------------------------------------------- */

/* The round's state on piped connections (the mutex held): the requests past their
 * deadline expired (their pipes reset), the undecided abandoned; true once it ended,
 * else the next deadline in *next. */
static bool piped_over(dlock__flight *f, int64_t *next)
{
    int64_t now = dlock__now_us();
    *next = INT64_MAX;
    for (int i = 0; i < f->n; i++)
        if (!f->reqs[i].done && now >= f->reqs[i].deadline_us)
            dlock__pipe_expire(&f->conns[i], &f->reqs[i]);
    dlock__flight_abandon_decided(f);
    bool over = true;
    for (int i = 0; i < f->n; i++) {
        if (!f->reqs[i].done) {
            over = false;
            if (f->reqs[i].deadline_us < *next)
                *next = f->reqs[i].deadline_us;
        }
    }
    return over;
}

/* dlock__flight_pump on piped connections: their replies come through the pipes' pump,
 * which runs here only when the caller waits (a blocking step); an event loop's runs
 * it itself. */
bool dlock__pipe_flight_pump(dlock__flight *f, int64_t wait_us)
{
    int64_t next;
    dlock__pipe_lock(f->conns);
    bool over = piped_over(f, &next);
    dlock__pipe_unlock(f->conns);
    if (over || wait_us == 0)
        return over;
    /* A request waiting for room on its line has no deadline yet (INT64_MAX): a wait
     * of a second at most, then a look again. */
    int64_t wait = next - dlock__now_us();
    if (wait_us > 0 && wait_us < wait)
        wait = wait_us;
    if (wait > 1000000)
        wait = 1000000;
    dlock__pipes_pump(f->conns[0].pipe->ps, wait > 0 ? (int)((wait + 999) / 1000) : 0);
    dlock__pipe_lock(f->conns);
    over = piped_over(f, &next);
    dlock__pipe_unlock(f->conns);
    return over;
}
