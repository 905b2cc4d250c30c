/*
 * park.c: operations in steps, and their waits on the loop.
 *
 * LOCK, SEM ACQUIRE, STOCK RESERVE, UNLOCK and EXTEND are each a dlock_pending (the
 * library's step API), driven here the same way. A step is taken on the loop when it
 * need not block (dlock_pending_step_nowait: an attempt's round is sent, and a later
 * step takes its replies), else as a job on the pool (dlock_pending_step). After one
 * answers DLOCK_ERR_AGAIN, the job waits here, holding no thread: until the library's
 * descriptor (dlock_pending_fd: a wake-up from a release, or the sockets of the round
 * in flight) is readable, or its due time (dlock_pending_due_ms) comes, whichever is
 * first; then its next step is taken the same way. So an uncontended LOCK, and an
 * UNLOCK or an EXTEND, is two steps on the loop and no thread hand-off.
 *
 * The client pipelines (dd_park_start): the rounds of every connection's steps share one
 * connection per lock server, written once per loop turn (a prepare handle flushes what
 * the turn's steps queued) and read when the pipes' descriptor is readable; a job whose
 * round is on the pipes waits on no descriptor of its own, only its due time, and the
 * pump names it when its replies are in (dlock_pending_notify). The step that ends it hands
 * the result to the job's dd_steps, which make the reply and keep what the result took
 * (a session lock, a reservation's id).
 *
 * A connection that closes gives its operation up: the pending is freed on the pool
 * (the library leaves the wait queue), and what a last step took for nobody is undone
 * (dd_steps.undo: a session lock released, a reservation canceled).
 *
 * One poll handle per descriptor, shared by every job parked on it: libuv allows only
 * one poll handle per descriptor in a loop, and several pendings may well be woken
 * through the same one. A readable descriptor wakes every job parked on it; a step
 * taken early is harmless (the library's contract), so no wake-up can be lost. The
 * watcher is stopped, not closed, when no job is left on it (a descriptor the library
 * closes in the meantime is dropped by the kernel from the poll set; a later start
 * registers whatever the number then names), and all are closed at shutdown.
 */
#include "dlockd.h"

#include <stdlib.h>
#include <string.h>

typedef struct dd_watch {
    uv_poll_t poll;
    int fd;
    bool active;
    dd_conn *parked; /* jobs' connections parked on it, through watch_next */
} dd_watch;

static void wake(dd_conn *c);
static void undo_work(dd_job *j);
static void undo_done(dd_job *j);
static void refused_done(dd_job *j);
static void park(dd_conn *c, dd_job *j);
static dd_job *unpark(dd_conn *c);

/* ---- steps -------------------------------------------------------------------------- */

/* On the pool: what the job's module does before its next step, once. */
static void before_step(dd_job *j)
{
    void (*fn)(dd_job * j) = j->before_step;
    if (fn != NULL) {
        j->before_step = NULL;
        fn(j);
    }
}

/* On the pool: one step, and at its end what it means for the reply. */
static void step_work(dd_job *j)
{
    before_step(j);
    dlock_lock *l = NULL;
    j->rc = dlock_pending_step(j->pending, &l);
    if (j->rc == DLOCK_ERR_AGAIN)
        return;
    j->steps->finish(j, l);
    dlock_pending_free(j->pending);
    j->pending = NULL;
}

static void drop_free(dd_job *j)
{
    if (j->steps->drop != NULL)
        j->steps->drop(j);
    dd_job_free(j);
}

/* On the pool: the connection closed while the operation ran or waited. */
static void give_up_work(dd_job *j)
{
    before_step(j);
    dlock_pending_free(j->pending);
    j->pending = NULL;
    if (j->rc == DLOCK_OK)
        j->steps->undo(j);
}

static void step_done(dd_job *j)
{
    dd_conn *c = j->conn;
    if (c->closing) {
        /* Nobody to answer: give up the wait, or undo what the step took. */
        dd_buf_free(&j->reply);
        if (j->pending == NULL && j->rc != DLOCK_OK && j->before_step == NULL) {
            drop_free(j);
            return;
        }
        j->work = give_up_work;
        j->done = drop_free;
        dd_job_queue(j);
        return;
    }
    if (j->rc == DLOCK_ERR_AGAIN) {
        park(c, j);
        return;
    }
    c->waiting = false; /* its wait, if it had one, is over */
    if (c->quit && j->rc == DLOCK_OK && j->steps->parked != NULL) {
        /* Granted to a connection that ends (the stop after a drain): no section may
         * begin now, while another dlockd serves the name. Undone; -SHUTDOWN. */
        dd_buf_free(&j->reply);
        j->work = undo_work;
        j->done = refused_done;
        dd_job_queue(j);
        return;
    }
    if (c->out_dead && j->rc == DLOCK_OK) {
        /* The client reset the connection: the reply can reach nobody, so what the
         * step took is undone, and the commands after it run on. */
        dd_buf_free(&j->reply);
        j->work = undo_work;
        j->done = undo_done;
        dd_job_queue(j);
        return;
    }
    j->steps->settle(j);
    dd_job_answer(j);
    drop_free(j);
}

/* On the pool: a step's grant that nobody can be told of. */
static void undo_work(dd_job *j)
{
    j->steps->undo(j);
}

static void undo_done(dd_job *j)
{
    dd_conn *c = j->conn;
    drop_free(j);
    if (!c->closing)
        dd_conn_resume(c);
}

/* On the loop: the next step, if it can be taken without blocking (the library's
 * nowait step: it sends an attempt's round, or takes its replies); false when it must
 * run on the pool. The module's work before it (j->before_step) runs first, on the
 * pool. */
static bool step_here(dd_job *j)
{
    if (j->before_step != NULL)
        return false;
    dlock_lock *l = NULL;
    j->rc = dlock_pending_step_nowait(j->pending, &l);
    if (j->rc == DLOCK_ERR_WOULDBLOCK)
        return false;
    if (j->rc != DLOCK_ERR_AGAIN) {
        j->steps->finish(j, l);
        dlock_pending_free(j->pending); /* finished: frees, nothing more */
        j->pending = NULL;
    }
    return true;
}

/* The pipes' pump says the round in flight of c's job has its replies. */
static void on_piped(void *arg)
{
    wake(arg);
}

void dd_step(dd_job *j)
{
    j->conn->busy = true;
    if (dd_srv.piped)
        dlock_pending_notify(j->pending, on_piped, j->conn);
    if (step_here(j)) {
        step_done(j);
        return;
    }
    j->work = step_work;
    j->done = step_done;
    dd_job_queue(j);
}

/* A wait given up (give_up_work), or a grant undone, for a drain or for a connection
 * that ends: -SHUTDOWN and the connection's next commands; or, when a session lock of
 * the connection ended (loss.c), its -LOST as the answer, and the end. */
static void refused_done(dd_job *j)
{
    dd_conn *c = j->conn;
    if (!c->closing) {
        c->waiting = false;
        if (c->end_msg != NULL) {
            dd_conn_resume(c);
        } else {
            j->reply.len = 0;
            dd_reply_shutdown(&j->reply);
            dd_job_answer(j);
        }
    }
    drop_free(j);
}

static void refuse(dd_job *j)
{
    j->rc = DLOCK_ERR_AGAIN;
    j->work = give_up_work;
    j->done = refused_done;
    dd_job_queue(j);
}

void dd_park_refuse(dd_conn *c)
{
    if (c->parked_job != NULL && c->parked_job->blocked)
        refuse(unpark(c));
}

void dd_park_give_up(dd_conn *c)
{
    dd_job *j = unpark(c);
    if (j != NULL) {
        j->rc = DLOCK_ERR_AGAIN;
        step_done(j); /* c->closing: gives the wait up on the pool */
    }
}

/* ---- waits -------------------------------------------------------------------------- */

static void watch_remove(dd_conn *c)
{
    dd_watch *w = c->watch;
    if (w == NULL)
        return;
    for (dd_conn **pp = &w->parked; *pp != NULL; pp = &(*pp)->watch_next) {
        if (*pp == c) {
            *pp = c->watch_next;
            break;
        }
    }
    c->watch = NULL;
    c->watch_next = NULL;
    if (w->parked == NULL && w->active) {
        uv_poll_stop(&w->poll);
        w->active = false;
    }
}

static void on_readable(uv_poll_t *h, int status, int events)
{
    dd_watch *w = h->data;
    (void)status; /* an error (the descriptor went away) wakes them too: a step will
                     tell what happened */
    (void)events;
    /* Take the whole list first: each wake may park its job again on this watcher. */
    dd_conn *list = w->parked;
    w->parked = NULL;
    uv_poll_stop(&w->poll);
    w->active = false;
    while (list != NULL) {
        dd_conn *c = list;
        list = c->watch_next;
        c->watch = NULL;
        c->watch_next = NULL;
        wake(c);
    }
}

static void on_due(uv_timer_t *t)
{
    wake(t->data);
}

/* Off the watch, and on to its next step. */
static void wake(dd_conn *c)
{
    dd_job *j = unpark(c);
    if (j != NULL)
        dd_step(j);
}

static dd_watch *watch_get(int fd)
{
    if (fd >= dd_srv.nwatch) {
        int n = dd_srv.nwatch ? dd_srv.nwatch : 64;
        while (n <= fd)
            n *= 2;
        dd_watch **t = realloc(dd_srv.watch, (size_t)n * sizeof *t);
        if (t == NULL)
            abort();
        memset(t + dd_srv.nwatch, 0, (size_t)(n - dd_srv.nwatch) * sizeof *t);
        dd_srv.watch = t;
        dd_srv.nwatch = n;
    }
    dd_watch *w = dd_srv.watch[fd];
    if (w == NULL) {
        w = calloc(1, sizeof *w);
        if (w == NULL)
            abort();
        /* uv_poll_init_socket works for any descriptor on Linux (an eventfd too). */
        int rc = uv_poll_init(dd_srv.loop, &w->poll, fd);
        if (rc < 0) {
            dd_log("watching descriptor %d: %s", fd, uv_strerror(rc));
            free(w);
            return NULL;
        }
        w->poll.data = w;
        w->fd = fd;
        dd_srv.watch[fd] = w;
    }
    return w;
}

static void park(dd_conn *c, dd_job *j)
{
    /* A round in flight is a command in progress; a wait for the lock blocks, which a
     * draining dlockd does not begin, nor a connection whose session lock ended. */
    j->blocked = j->steps->parked != NULL && !dlock_pending_in_flight(j->pending);
    if (j->blocked && (dd_srv.draining || c->end_msg != NULL)) {
        refuse(j);
        return;
    }
    if (j->blocked) {
        dd_srv.parked++;
        (*j->steps->parked)++;
        if (!j->waited) {
            j->waited = true;
            (*j->steps->waits)++;
        }
    }
    c->parked_job = j;
    /* Until its reply, also between parks (a step on the pool, a round in flight). */
    c->waiting = j->waited;
    int64_t due = dlock_pending_due_ms(j->pending);
    int fd = dlock_pending_fd(j->pending);
    dd_watch *w = fd >= 0 ? watch_get(fd) : NULL;
    if (w != NULL) {
        c->watch = w;
        c->watch_next = w->parked;
        w->parked = c;
        if (!w->active) {
            int rc = uv_poll_start(&w->poll, UV_READABLE, on_readable);
            if (rc < 0) {
                /* The timer still bounds the wait; the step after it sees the rest. */
                dd_log("polling descriptor %d: %s", fd, uv_strerror(rc));
                watch_remove(c);
            } else {
                w->active = true;
            }
        }
    }
    uv_timer_start(&c->timer, on_due, (uint64_t)(due > 0 ? due : 0), 0);
    if (j->blocked)
        dd_conn_wait_starts(c);
}

static dd_job *unpark(dd_conn *c)
{
    dd_job *j = c->parked_job;
    if (j == NULL)
        return NULL;
    c->parked_job = NULL;
    if (j->blocked) {
        dd_srv.parked--;
        (*j->steps->parked)--;
    }
    watch_remove(c);
    uv_timer_stop(&c->timer);
    return j;
}

static void on_watch_closed(uv_handle_t *h)
{
    free(h->data);
}

/* The pipes have something (a reply, room to write, a connect done), or a loop turn's
 * steps are over: what they queued goes in one write per lock server. */
static void on_pipes(uv_poll_t *h, int status, int events)
{
    (void)h;
    (void)status; /* an error: the pump finds what it is */
    (void)events;
    dlock_client_pump(dd_srv.client);
}

static void on_turn(uv_prepare_t *h)
{
    (void)h;
    dlock_client_flush(dd_srv.client);
}

void dd_park_start(void)
{
    int fd;
    if (dlock_client_pipeline(dd_srv.client, &fd) != DLOCK_OK) {
        dd_log("lock servers not pipelined: %s", dlock_errmsg());
        return;
    }
    if (uv_poll_init(dd_srv.loop, &dd_srv.pipe_poll, fd) < 0 ||
        uv_poll_start(&dd_srv.pipe_poll, UV_READABLE, on_pipes) < 0) {
        /* The client's steps would then be told of nothing. */
        dd_log("watching the lock servers' pipes failed");
        abort();
    }
    uv_prepare_init(dd_srv.loop, &dd_srv.pipe_prepare);
    uv_prepare_start(&dd_srv.pipe_prepare, on_turn);
    dd_srv.piped = true;
}

void dd_park_shutdown(void)
{
    if (dd_srv.piped && !uv_is_closing((uv_handle_t *)&dd_srv.pipe_poll)) {
        uv_close((uv_handle_t *)&dd_srv.pipe_poll, NULL);
        uv_close((uv_handle_t *)&dd_srv.pipe_prepare, NULL);
    }
    for (int fd = 0; fd < dd_srv.nwatch; fd++) {
        dd_watch *w = dd_srv.watch[fd];
        if (w == NULL)
            continue;
        uv_close((uv_handle_t *)&w->poll, on_watch_closed);
        dd_srv.watch[fd] = NULL;
    }
    free(dd_srv.watch);
    dd_srv.watch = NULL;
    dd_srv.nwatch = 0;
}
