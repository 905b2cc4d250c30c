/*
 * jobs.c: commands' work on libuv's pool, and the argument checks they share.
 *
 * A library call can block for the client's timeout when a lock server is slow, so
 * every call that talks to the servers runs as a job on the pool (work() on a pool
 * thread, done() on the loop), except the nowait steps of a LOCK or an UNLOCK (park.c). A
 * connection has at most one job in flight (it is busy meanwhile), and its steps on
 * the loop run only while none is, so its session handles and its pending acquisition
 * are used by one thread at a time. Jobs are never canceled: each must run to free
 * what it holds.
 */
#include "dlockd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
    if (c->closing && c->jobs == 0)
        dd_conn_release_all(c);
    dd_conn_unref(c);
}

void dd_job_queue(dd_job *j)
{
    dd_conn *c = j->conn;
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
    free(j->name);
    free(j->label);
    free(j->by);
    free(j->extra);
    free(j);
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

/* ---- arguments ---------------------------------------------------------------------- */

bool dd_arg_is(const resp_arg *a, const char *word)
{
    size_t n = strlen(word);
    return a->len == n && strncasecmp(a->p, word, n) == 0;
}

/* A lock name or label for the library: a C string, so no NUL inside. */
char *dd_arg_dup(const resp_arg *a, const char *what, size_t max, dd_buf *out)
{
    if (a->len == 0 || a->len > max) {
        dd_reply_error(out, "ERR %s must be 1 to %zu bytes", what, max);
        return NULL;
    }
    if (memchr(a->p, '\0', a->len) != NULL) {
        dd_reply_error(out, "ERR %s must not contain NUL bytes", what);
        return NULL;
    }
    char *s = strndup(a->p, a->len);
    if (s == NULL)
        abort();
    return s;
}

char *dd_arg_value(const resp_arg *a, dd_buf *out)
{
    if (a->len > DLOCK_LEADER_VALUE_MAX) {
        dd_reply_error(out, "ERR a leader's value must be at most %d bytes",
                       DLOCK_LEADER_VALUE_MAX);
        return NULL;
    }
    if (a->len == 0) {
        char *v = strdup("");
        if (v == NULL)
            abort();
        return v;
    }
    return dd_arg_dup(a, "a leader's value", DLOCK_LEADER_VALUE_MAX, out);
}

/* A decimal integer in [lo, hi], read as redis-server's string2ll reads one: an
 * optional '-', then digits with no leading zero ("0" alone excepted), nothing else
 * (no sign '+', no space, tab or newline before or after), within 64 bits. */
bool dd_arg_int(const resp_arg *a, int64_t lo, int64_t hi, int64_t *v)
{
    const char *p = a->p;
    size_t n = a->len;
    if (n == 0 || n > 20)
        return false;
    if (n == 1 && p[0] == '0') {
        if (lo > 0 || hi < 0)
            return false;
        *v = 0;
        return true;
    }
    bool neg = p[0] == '-';
    size_t i = neg ? 1 : 0;
    if (i == n || p[i] < '1' || p[i] > '9')
        return false;
    uint64_t x = 0;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        unsigned d = (unsigned)(p[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            return false;
        x = x * 10 + d;
    }
    int64_t r;
    if (neg) {
        if (x > (uint64_t)INT64_MAX + 1)
            return false;
        r = x == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)x;
    } else {
        if (x > (uint64_t)INT64_MAX)
            return false;
        r = (int64_t)x;
    }
    if (r < lo || r > hi)
        return false;
    *v = r;
    return true;
}

bool dd_arg_ttl(const resp_arg *a, int64_t *ttl, dd_buf *out)
{
    if (dd_arg_int(a, DLOCK_TTL_MIN_MS, DLOCK_TTL_MAX_MS, ttl))
        return true;
    dd_reply_error(out, "ERR TTL must be an integer from %d to %d (milliseconds)", DLOCK_TTL_MIN_MS,
                   DLOCK_TTL_MAX_MS);
    return false;
}
