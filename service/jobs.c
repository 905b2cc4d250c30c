/*
 * jobs.c: commands' work on libuv's pool.
 *
 * A library call can block for the client's timeout when a lock server is slow, so
 * every call that talks to the servers runs as a job on the pool (work() on a pool
 * thread, done() on the loop), except the nowait steps of the operations in steps
 * (park.c; a closed connection's releases, sessions.c). A connection has at most one job in flight
 * (it is busy meanwhile), and its steps on the loop run only while none is, so its session handles
 * and its pending acquisition are used by one thread at a time. Jobs are never canceled: each must
 * run to free what it holds.
 */
#include "dlockd.h"

#include <stdlib.h>

static void on_work(uv_work_t *req)
{
    dd_job *j = req->data;
    j->work(j);
}

static void on_after_work(uv_work_t *req, int status)
{
    dd_job *j = req->data;
    dd_conn *c = j->conn;
    (void)status; /* jobs are never canceled: each must run to free what it holds */
    c->jobs--;
    j->done(j);
    /* A connection that closed while the job ran gives up the rest now. */
    if (c->closing)
        dd_conn_closed_idle(c);
    dd_conn_unref(c);
}

void dd_job_queue(dd_job *j)
{
    dd_conn *c = j->conn;
    dd_srv.stats.pool_jobs++;
    c->busy = true;
    c->jobs++;
    c->refs++;
    j->req.data = j;
    int rc = uv_queue_work(dd_srv.loop, &j->req, on_work, on_after_work);
    if (rc < 0) {
        /* Only for invalid arguments in libuv: a bug, not a condition to handle. */
        dd_log("uv_queue_work: %s", uv_strerror(rc));
        abort();
    }
}

void dd_job_free(dd_job *j)
{
    dd_buf_free(&j->reply);
    if (j->args_free != NULL)
        j->args_free(j->args);
    else
        free(j->args);
    free(j);
}

void *dd_job_args(dd_job *j, size_t size, void (*args_free)(void *args))
{
    j->args = calloc(1, size);
    if (j->args == NULL)
        abort();
    j->args_free = args_free;
    return j->args;
}

dd_job *dd_job_new(dd_conn *c)
{
    dd_job *j = calloc(1, sizeof *j);
    if (j == NULL)
        abort();
    j->conn = c;
    /* A LOCK's wait (metrics.c) counts from here: the command taken up. */
    j->arrived_ns = uv_hrtime();
    return j;
}

/* The job's reply, then the connection's next commands. */
void dd_job_answer(dd_job *j)
{
    dd_conn *c = j->conn;
    dd_conn_reply(c, &j->reply);
    dd_conn_resume(c);
}
