/*
 * pending.c: operations in steps (dlock_pending), for callers that wait without a
 * thread, and the loop that runs them for callers that do.
 *
 * An acquisition (acquire.c), a release (release.c) and a stock reservation
 * (stock_reserve.c) wait the same way: a step makes the attempts that are due and, when
 * it must wait, says on what (a wake-up descriptor, or the sockets of a round in
 * flight) and until when. A pending is the operation's own struct, which begins with a
 * dlock_pending carrying its step, its clean-up and those two facts. This file holds
 * what is common to them: the public calls; dlock__pending_run, the sleeping loop that
 * the blocking calls are built on (so a blocking call and an event loop run one code
 * path); and the round a step uses (dlock__step_round), which a nowait step keeps in
 * flight between steps, its connection set counted against DLOCK_NOWAIT_SETS_MAX, with
 * the descriptor its caller waits on meanwhile.
 */
#include "internal.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

void *dlock__pending_new(size_t size,
                         int (*step)(dlock_pending *, dlock_lock **, bool, dlock__err *),
                         void (*destroy)(dlock_pending *))
{
    dlock_pending *p = dlock__calloc(1, size);
    if (p != NULL) {
        p->step = step;
        p->destroy = destroy;
        p->fd = -1;
    }
    return p;
}

int dlock__pending_again(dlock__err *e)
{
    return dlock__err_set(e, DLOCK_ERR_AGAIN,
                          "waiting: step again when dlock_pending_fd is readable or "
                          "dlock_pending_due_ms has passed");
}

int dlock__pending_would_block(dlock__err *e)
{
    return dlock__err_set(e, DLOCK_ERR_WOULDBLOCK,
                          "this step would block: take it with dlock_pending_step on a thread "
                          "that may");
}

int dlock__pending_run(dlock_pending *p, int cancel_fd, int close_fd, dlock_lock **out,
                       dlock__err *e)
{
    int rc;
    while ((rc = p->step(p, out, false, e)) == DLOCK_ERR_AGAIN) {
        int src = p->wake_c != NULL
                      ? dlock__wait_sleep(p->wake_c, p->fd, p->due_us, cancel_fd, close_fd)
                      : dlock__sleep_on(p->fd, p->due_us, cancel_fd, close_fd);
        if (src != DLOCK_OK) {
            rc = dlock__sleep_ended(e, src);
            break; /* not finished: freeing it gives up */
        }
    }
    return rc;
}

static int step(dlock_pending *p, dlock_lock **out, bool nowait)
{
    dlock__err e;
    if (out != NULL)
        *out = NULL;
    if (p == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "pending is NULL");
    if (out == NULL && !p->lockless)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "out is NULL (it receives the lock)");
    if (p->done)
        return dlock__raise(&e, DLOCK_ERR_INVALID,
                            "the operation has finished: only dlock_pending_free is left");
    int rc = p->step(p, out, nowait, &e);
    p->done = rc != DLOCK_ERR_AGAIN && rc != DLOCK_ERR_WOULDBLOCK;
    /* The caller's loop waits on the waiter's descriptor: the thread must read. */
    if (rc == DLOCK_ERR_AGAIN && p->wake_c != NULL)
        dlock__wait_recall(p->wake_c);
    return dlock__err_raise(&e, rc);
}

int dlock_pending_step(dlock_pending *p, dlock_lock **out)
{
    return step(p, out, false);
}

int dlock_pending_step_nowait(dlock_pending *p, dlock_lock **out)
{
    return step(p, out, true);
}

int dlock_pending_in_flight(const dlock_pending *p)
{
    return p != NULL && !p->done && p->in_flight;
}

int dlock_pending_fd(const dlock_pending *p)
{
    return p != NULL && !p->done ? p->fd : -1;
}

int64_t dlock_pending_due_ms(const dlock_pending *p)
{
    if (p == NULL || p->done)
        return 0;
    int64_t left = p->due_us - dlock__now_us();
    return left <= 0 ? 0 : (left + 999) / 1000; /* rounded up: never early */
}

const char *dlock_pending_id(const dlock_pending *p)
{
    return p != NULL ? p->id : "";
}

void dlock_pending_free(dlock_pending *p)
{
    if (p != NULL)
        p->destroy(p);
}

int dlock_pending_notify(dlock_pending *p, void (*fn)(void *arg), void *arg)
{
    dlock__err e;
    if (p == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "pending is NULL");
    p->wk.fn = fn;
    p->wk.arg = arg;
    return DLOCK_OK;
}

/* ---- the pipes ------------------------------------------------------------------ */

int dlock_client_pipeline(dlock_client *c, int *fd)
{
    dlock__err e;
    int rc = dlock__client_enter(c, &e);
    if (rc == DLOCK_OK && fd == NULL)
        rc = dlock__err_set(&e, DLOCK_ERR_INVALID, "fd is NULL");
    if (rc == DLOCK_OK && c->nodes == NULL)
        rc =
            dlock__err_set(&e, DLOCK_ERR_INVALID, "a file:// client has no servers to pipeline to");
    if (rc == DLOCK_OK && !c->nowait_ok)
        rc = dlock__err_set(&e, DLOCK_ERR_INVALID,
                            "pipelining needs servers reached directly by address (no host "
                            "name, Sentinel or cluster) and no strict fences with N > 1");
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    pthread_mutex_lock(&c->mu);
    bool fresh = c->pipe_set == NULL && c->sets == 0;
    pthread_mutex_unlock(&c->mu);
    if (c->pipe_set != NULL) {
        *fd = c->pipes->epfd;
        return dlock__err_raise(&e, DLOCK_OK);
    }
    if (!fresh)
        return dlock__raise(&e, DLOCK_ERR_INVALID,
                            "pipelining must begin before any nowait step is in flight");
    dlock__connset *s = dlock__connset_new(c);
    dlock__pipes *ps = dlock__malloc(sizeof *ps);
    rc = s != NULL && ps != NULL ? DLOCK_OK : DLOCK_ERR_NOMEM;
    if (rc == DLOCK_OK) {
        s->post = true; /* a pipe's sends are written by the pump */
        rc = dlock__pipes_init(ps, s->conns, c->n);
        if (rc != DLOCK_OK)
            dlock__pipes_free(ps);
    }
    if (rc != DLOCK_OK) {
        free(s);
        free(ps);
        return dlock__raise(&e, rc,
                            rc == DLOCK_ERR_NOMEM ? "out of memory" : "epoll_create1 failed");
    }
    c->pipes = ps;
    c->pipe_set = s;
    *fd = ps->epfd;
    return dlock__err_raise(&e, DLOCK_OK);
}

void dlock_client_pump(dlock_client *c)
{
    if (c != NULL && c->magic == DLOCK_CLIENT_MAGIC && c->pipes != NULL)
        dlock__pipes_pump(c->pipes, 0);
}

void dlock_client_flush(dlock_client *c)
{
    if (c != NULL && c->magic == DLOCK_CLIENT_MAGIC && c->pipes != NULL)
        dlock__pipes_flush(c->pipes);
}

/* ---- the round of a step ------------------------------------------------------- */

void dlock__step_round_init(dlock__step_round *sr, dlock_pending *p)
{
    memset(sr, 0, sizeof *sr);
    sr->wk = &p->wk;
}

/* Whether rd (on the pipes) still waits for a reply. */
static bool piped_in_flight(const dlock_client *c, const dlock__round *rd)
{
    for (int i = 0; i < c->n; i++)
        if (rd->reqs[i].cmd != NULL && !rd->reqs[i].done)
            return true;
    return false;
}

int dlock__step_round_begin(dlock_client *c, dlock__step_round *sr, bool nowait, dlock__err *e)
{
    /* Made once, not zeroed whole (dlock__round_reset zeroes what a round uses): a
     * round is large, and an acquisition or a release that never needs one pays nothing
     * for it. */
    if (sr->rd == NULL) {
        if ((sr->rd = dlock__round_new(c)) == NULL)
            return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    }
    dlock__round *rd = sr->rd;
    if (rd->set != NULL && rd->set == c->pipe_set && !nowait && !piped_in_flight(c, rd))
        dlock__step_round_end(c, sr); /* a blocking step's round goes on a set of its own */
    if (rd->set == NULL && nowait && c->pipe_set != NULL) {
        dlock__round_reset(c, rd);
        rd->set = c->pipe_set;
        rd->wk = sr->wk;
        return DLOCK_OK;
    }
    if (rd->set == NULL) {
        if (!nowait) {
            int rc = dlock__round_begin(c, rd, e);
            if (rc != DLOCK_OK)
                return rc;
        } else {
            dlock__round_reset(c, rd);
            if ((rd->set = dlock__connset_try_get(c)) == NULL)
                return dlock__pending_would_block(e);
            sr->counted = true;
        }
    }
    /* What a nowait step sends unawaited, it must not wait to write. (A piped set
     * always posts.) */
    if (rd->set != c->pipe_set)
        rd->set->post = nowait;
    return DLOCK_OK;
}

bool dlock__step_round_over(dlock_client *c, dlock__step_round *sr, dlock_pending *p, bool nowait)
{
    dlock__round *rd = sr->rd;
    if (rd->set != c->pipe_set)
        rd->set->post = nowait;
    bool over = dlock__round_wait(rd, nowait);
    p->in_flight = !over;
    if (!over) {
        p->fd = dlock__step_round_fd(sr, &p->due_us);
        p->wake_c = NULL;
    }
    return over;
}

int dlock__step_call(dlock_client *c, dlock__step_round *sr, dlock__call *call, bool first_only,
                     dlock_pending *p, bool nowait, dlock__err *e)
{
    if (!sr->sent) {
        if (nowait && !c->nowait_ok)
            return dlock__pending_would_block(e);
        int rc = dlock__step_round_begin(c, sr, nowait, e);
        if (rc != DLOCK_OK)
            return rc;
        if (first_only)
            dlock__round_start_first(sr->rd, call);
        else
            dlock__round_start(c, sr->rd, call, NULL, NULL);
        sr->sent = true;
    }
    return dlock__step_round_over(c, sr, p, nowait) ? DLOCK_OK : dlock__pending_again(e);
}

int dlock__step_round_fd(dlock__step_round *sr, int64_t *due_us)
{
    struct pollfd pfd[DLOCK_SERVERS_MAX];
    int n = dlock__flight_wants(&sr->rd->flight, pfd, due_us);
    if (sr->rd->set->conns[0].pipe != NULL)
        return -1; /* the pipes' pump tells it (dlock_pending_notify) */
    if (n == 1 && pfd[0].events == POLLIN)
        return pfd[0].fd;
    dlock__connset *set = sr->rd->set;
    if (set->epfd < 0 && (set->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        int64_t soon = dlock__now_us() + 1000;
        if (*due_us > soon)
            *due_us = soon;
        return -1;
    }
    /* Remade at each step: a descriptor closed since is gone from the set already, and
     * its removal fails, harmlessly. */
    for (int k = 0; k < set->nregs; k++)
        epoll_ctl(set->epfd, EPOLL_CTL_DEL, set->regs[k], NULL);
    set->nregs = 0;
    for (int k = 0; k < n; k++) {
        struct epoll_event ev = {.events = ((pfd[k].events & POLLIN) ? EPOLLIN : 0u) |
                                           ((pfd[k].events & POLLOUT) ? EPOLLOUT : 0u)};
        if (epoll_ctl(set->epfd, EPOLL_CTL_ADD, pfd[k].fd, &ev) == 0)
            set->regs[set->nregs++] = pfd[k].fd;
    }
    return set->epfd;
}

void dlock__step_round_end(dlock_client *c, dlock__step_round *sr)
{
    dlock__round *rd = sr->rd;
    if (rd == NULL || rd->set == NULL)
        return;
    dlock__round_free_replies(c, rd);
    if (rd->set == c->pipe_set) {
        /* Shared: nothing to give back; its waker is told nothing more. */
        dlock__pipes_forget(c->pipes, sr->wk);
        rd->set = NULL;
        return;
    }
    if (sr->counted)
        dlock__connset_land(c, rd->set);
    else
        dlock__connset_put(c, rd->set);
    rd->set = NULL;
    sr->counted = false;
}

void dlock__step_round_free(dlock_client *c, dlock__step_round *sr)
{
    dlock__step_round_end(c, sr);
    free(sr->rd);
    sr->rd = NULL;
}
