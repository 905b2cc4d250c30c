/*
 * locks.c: LOCK, UNLOCK, EXTEND and LOCKINFO, and the session locks.
 *
 * Each of these commands checks its arguments on the loop, then runs its library calls
 * as a job on libuv's pool (a call can block for the client's timeout when a lock
 * server is slow) and answers from the job's done callback on the loop. The reply is
 * built on the pool thread, where dlock_errmsg() holds the failing call's detail.
 *
 * A LOCK is an acquisition in steps (dlock_acquire_start, then dlock_pending_step on
 * the pool); a step that answers DLOCK_ERR_AGAIN parks the job on the loop (park.c)
 * until the library's descriptor is readable or its due time comes. So a waiter holds
 * no thread, however long it waits.
 *
 * Session locks (the default) are taken with auto_renew: the library's renewal thread
 * extends them every TTL/3 while the connection is open, and they are released on the
 * pool when it closes. DETACHED locks are plain leases, detached from their handle at
 * once, so that nothing of them stays in dlockd.
 */
#include "dlockd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- jobs --------------------------------------------------------------------------- */

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
    c->job = false;
    j->done(j);
    /* A connection that closed while the job ran gives up the rest now. */
    if (c->closing && !c->job)
        dd_conn_release_all(c);
    dd_conn_unref(c);
}

void dd_job_queue(dd_job *j)
{
    dd_conn *c = j->conn;
    c->busy = true;
    c->job = true;
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
    free(j);
}

static dd_job *job_new(dd_conn *c)
{
    dd_job *j = calloc(1, sizeof *j);
    if (j == NULL)
        abort();
    j->conn = c;
    return j;
}

/* The job's reply, then the connection's next commands. */
static void answer(dd_job *j)
{
    dd_conn *c = j->conn;
    dd_conn_reply(c, &j->reply);
    dd_conn_resume(c);
}

/* ---- arguments ---------------------------------------------------------------------- */

static bool arg_is(const resp_arg *a, const char *word)
{
    size_t n = strlen(word);
    return a->len == n && strncasecmp(a->p, word, n) == 0;
}

/* A lock name or label for the library: a C string, so no NUL inside. */
static char *arg_dup(const resp_arg *a, const char *what, size_t max, dd_buf *out)
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

/* A decimal integer in [lo, hi]. */
static bool arg_int(const resp_arg *a, int64_t lo, int64_t hi, int64_t *v)
{
    char tmp[24];
    if (a->len == 0 || a->len >= sizeof tmp)
        return false;
    memcpy(tmp, a->p, a->len);
    tmp[a->len] = '\0';
    char *end;
    errno = 0;
    long long x = strtoll(tmp, &end, 10);
    if (errno != 0 || *end != '\0' || tmp[0] == '+' || tmp[0] == ' ' || x < lo || x > hi)
        return false;
    *v = x;
    return true;
}

static bool arg_ttl(const resp_arg *a, int64_t *ttl, dd_buf *out)
{
    if (arg_int(a, DLOCK_TTL_MIN_MS, DLOCK_TTL_MAX_MS, ttl))
        return true;
    dd_reply_error(out, "ERR TTL must be an integer from %d to %d (milliseconds)", DLOCK_TTL_MIN_MS,
                   DLOCK_TTL_MAX_MS);
    return false;
}

static dd_session *session_find(dd_conn *c, const char *name, size_t len)
{
    for (dd_session *s = c->sessions; s != NULL; s = s->next)
        if (strlen(s->name) == len && memcmp(s->name, name, len) == 0)
            return s;
    return NULL;
}

static void session_unlink(dd_conn *c, dd_session *s)
{
    for (dd_session **pp = &c->sessions; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            s->next = NULL;
            dd_srv.session_locks--;
            return;
        }
    }
}

static void session_free(dd_session *s)
{
    if (s == NULL)
        return;
    free(s->name);
    free(s);
}

/* ---- LOCK --------------------------------------------------------------------------- */

/* The renewal thread found a session lock lost: the handle says so from now on; the
 * flag lets the connection take the name again without an UNLOCK. */
static void on_lost(dlock_lock *l, void *user)
{
    (void)l;
    dd_session *s = user;
    atomic_store(&s->lost, 1);
    atomic_fetch_add(&dd_srv.stats.locks_lost, 1);
}

/* On the pool: one step, and what it means for the reply. */
static void lock_work(dd_job *j)
{
    if (j->release != NULL) {
        /* A lost session lock of the same name goes before the name is taken again. */
        dlock_release(j->release->lock);
        session_free(j->release);
        j->release = NULL;
    }
    dlock_lock *l = NULL;
    j->rc = dlock_pending_step(j->pending, &l);
    if (j->rc == DLOCK_ERR_AGAIN)
        return;
    if (j->rc == DLOCK_OK) {
        dd_reply_array(&j->reply, 3);
        dd_reply_cstr(&j->reply, dlock_token(l));
        dd_reply_int(&j->reply, (long long)dlock_fence(l));
        int64_t validity = dlock_remaining_ms(l);
        dd_reply_int(&j->reply, validity > 0 ? validity : 0);
        if (j->detached) {
            dlock_lock_detach(l);
        } else {
            j->sess->lock = l;
            memcpy(j->sess->token, dlock_token(l), DLOCK_TOKEN_LEN + 1);
        }
    } else if (j->rc == DLOCK_ERR_BUSY) {
        dd_reply_nil(&j->reply);
    } else {
        dd_reply_dlock_error(&j->reply, j->rc);
    }
    dlock_pending_free(j->pending);
    j->pending = NULL;
}

/* On the pool: a connection closed while its LOCK ran or waited. */
static void lock_abandon_work(dd_job *j)
{
    dlock_pending_free(j->pending);
    j->pending = NULL;
    if (j->sess != NULL && j->sess->lock != NULL)
        dlock_release(j->sess->lock);
}

static void lock_abandon_done(dd_job *j)
{
    if (j->sess != NULL)
        session_free(j->sess);
    dd_job_free(j);
}

void dd_lock_step_done(dd_job *j)
{
    dd_conn *c = j->conn;
    if (c->closing) {
        /* Nobody to answer: give up the wait, or release what the step took. */
        dd_buf_free(&j->reply);
        j->work = lock_abandon_work;
        j->done = lock_abandon_done;
        if (j->rc != DLOCK_OK || j->detached) {
            session_free(j->sess);
            j->sess = NULL;
        }
        if (j->pending == NULL && j->sess == NULL) {
            dd_job_free(j);
            return;
        }
        dd_job_queue(j);
        return;
    }
    if (j->rc == DLOCK_ERR_AGAIN) {
        dd_park(c, j);
        return;
    }
    if (j->rc == DLOCK_OK) {
        dd_srv.stats.locks_acquired++;
        if (!j->detached) {
            j->sess->next = c->sessions;
            c->sessions = j->sess;
            dd_srv.session_locks++;
            j->sess = NULL;
        }
    } else if (j->rc == DLOCK_ERR_BUSY) {
        dd_srv.stats.locks_not_acquired++;
    }
    session_free(j->sess);
    j->sess = NULL;
    answer(j);
    dd_job_free(j);
}

void dd_lock_step(dd_job *j)
{
    j->work = lock_work;
    j->done = dd_lock_step_done;
    dd_job_queue(j);
}

void dd_cmd_lock(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    dd_session *held = session_find(c, argv[1].p, argv[1].len);
    if (held != NULL && !atomic_load(&held->lost)) {
        /* The library is not reentrant: a second LOCK would wait for this connection's
         * own lock until its lease ran out, which renewal never lets happen. */
        dd_reply_error(out, "ERR this connection already holds lock '%.*s' (UNLOCK it first)",
                       (int)(argv[1].len > 128 ? 128 : argv[1].len), argv[1].p);
        return;
    }
    dd_job *j = job_new(c);
    j->ttl_ms = DLOCK_TTL_DEFAULT_MS;
    unsigned seen = 0;
    for (size_t i = 2; i < argc; i++) {
        const char *opt = NULL;
        unsigned bit = 0;
        static const char *const names[] = {"TTL", "WAIT", "DETACHED", "FAIR", "SHARED", "LABEL"};
        for (unsigned k = 0; k < 6; k++)
            if (arg_is(&argv[i], names[k]))
                opt = names[k], bit = 1u << k;
        if (opt == NULL) {
            dd_reply_error(out,
                           "ERR unknown LOCK option '%.*s' (TTL ms, WAIT ms, DETACHED, "
                           "FAIR, SHARED, LABEL text)",
                           (int)(argv[i].len > 64 ? 64 : argv[i].len), argv[i].p);
            goto fail;
        }
        if (seen & bit) {
            dd_reply_error(out, "ERR LOCK option %s given twice", opt);
            goto fail;
        }
        seen |= bit;
        bool takes_value = bit == 1u || bit == 2u || bit == 32u;
        if (takes_value && i + 1 >= argc) {
            dd_reply_error(out, "ERR LOCK option %s needs a value", opt);
            goto fail;
        }
        if (bit == 1u) {
            if (!arg_ttl(&argv[++i], &j->ttl_ms, out))
                goto fail;
        } else if (bit == 2u) {
            if (!arg_int(&argv[++i], -1, DLOCK_TTL_MAX_MS, &j->wait_ms)) {
                dd_reply_error(out,
                               "ERR WAIT must be -1 (forever) or an integer from 0 to %d "
                               "(milliseconds)",
                               DLOCK_TTL_MAX_MS);
                goto fail;
            }
        } else if (bit == 4u) {
            j->detached = true;
        } else if (bit == 8u) {
            j->fair = true;
        } else if (bit == 16u) {
            j->shared = true;
        } else {
            j->label = arg_dup(&argv[++i], "LABEL", DLOCK_LABEL_MAX, out);
            if (j->label == NULL)
                goto fail;
        }
    }
    j->name = arg_dup(&argv[1], "lock name", DLOCK_NAME_MAX, out);
    if (j->name == NULL)
        goto fail;
    if (!j->detached) {
        j->sess = calloc(1, sizeof *j->sess);
        if (j->sess == NULL || (j->sess->name = strdup(j->name)) == NULL)
            abort();
    }
    dlock_opts o;
    memset(&o, 0, sizeof o);
    o.ttl_ms = j->ttl_ms;
    o.wait_ms = j->wait_ms;
    o.fair = j->fair;
    o.shared = j->shared;
    o.label = j->label;
    if (!j->detached) {
        o.auto_renew = 1;
        o.on_lost = on_lost;
        o.on_lost_user = j->sess;
    }
    /* No I/O: the same checks as dlock_acquire, on the loop. */
    int rc = dlock_acquire_start(dd_srv.client, j->name, &o, &j->pending);
    if (rc != DLOCK_OK) {
        dd_reply_dlock_error(out, rc);
        goto fail;
    }
    if (held != NULL) {
        session_unlink(c, held);
        j->release = held;
    }
    dd_lock_step(j);
    return;
fail:
    if (j->sess != NULL)
        session_free(j->sess);
    dd_job_free(j);
}

/* ---- UNLOCK and EXTEND -------------------------------------------------------------- */

/* 1, 0 (not held with that token: lost, expired, another holder's), or an error. */
static void reply_held(dd_job *j, int rc)
{
    if (rc == DLOCK_OK)
        dd_reply_int(&j->reply, 1);
    else if (rc == DLOCK_ERR_LOST)
        dd_reply_int(&j->reply, 0);
    else
        dd_reply_dlock_error(&j->reply, rc);
}

static void unlock_work(dd_job *j)
{
    dlock_lock *l = NULL;
    int rc;
    if (j->sess != NULL) {
        rc = dlock_release(j->sess->lock);
        j->sess->lock = NULL;
    } else {
        rc = dlock_lock_adopt(dd_srv.client, j->name, j->token, &l);
        if (rc == DLOCK_OK)
            rc = dlock_release(l);
    }
    reply_held(j, rc);
}

static void unlock_done(dd_job *j)
{
    if (j->sess != NULL)
        session_free(j->sess);
    answer(j);
    dd_job_free(j);
}

/* NAME TOKEN: copied into the job, the token checked for its form. */
static dd_job *name_token_job(dd_conn *c, resp_arg *argv, dd_buf *out)
{
    if (argv[2].len != DLOCK_TOKEN_LEN) {
        dd_reply_error(out, "ERR a token is %d hexadecimal characters", DLOCK_TOKEN_LEN);
        return NULL;
    }
    dd_job *j = job_new(c);
    j->name = arg_dup(&argv[1], "lock name", DLOCK_NAME_MAX, out);
    if (j->name == NULL) {
        dd_job_free(j);
        return NULL;
    }
    memcpy(j->token, argv[2].p, DLOCK_TOKEN_LEN);
    j->token[DLOCK_TOKEN_LEN] = '\0';
    return j;
}

void dd_cmd_unlock(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)argc;
    dd_job *j = name_token_job(c, argv, out);
    if (j == NULL)
        return;
    dd_session *s = session_find(c, argv[1].p, argv[1].len);
    if (s != NULL && strcmp(s->token, j->token) == 0) {
        /* This connection's own session lock: release its handle, which also stops
         * its renewal. */
        session_unlink(c, s);
        j->sess = s;
    }
    j->work = unlock_work;
    j->done = unlock_done;
    dd_job_queue(j);
}

static void extend_work(dd_job *j)
{
    if (j->sess != NULL) {
        /* On the session's handle, so that renewal goes on with the new ttl. */
        j->rc = dlock_extend(j->sess->lock, j->ttl_ms);
        reply_held(j, j->rc);
        return;
    }
    dlock_lock *l;
    int rc = dlock_lock_adopt(dd_srv.client, j->name, j->token, &l);
    if (rc == DLOCK_OK) {
        rc = dlock_extend(l, j->ttl_ms);
        /* Keep the lock whatever the answer: the handle was only borrowed. */
        dlock_lock_detach(l);
    }
    reply_held(j, rc);
}

static void simple_done(dd_job *j)
{
    answer(j);
    dd_job_free(j);
}

static void extend_done(dd_job *j)
{
    /* A session lock found lost stops blocking a new LOCK of its name. */
    if (j->sess != NULL && j->rc == DLOCK_ERR_LOST)
        atomic_store(&j->sess->lost, 1);
    simple_done(j);
}

void dd_cmd_extend(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)argc;
    int64_t ttl;
    if (!arg_ttl(&argv[3], &ttl, out))
        return;
    dd_job *j = name_token_job(c, argv, out);
    if (j == NULL)
        return;
    j->ttl_ms = ttl;
    dd_session *s = session_find(c, argv[1].p, argv[1].len);
    if (s != NULL && strcmp(s->token, j->token) == 0)
        j->sess = s; /* stays listed: the connection is busy until the job is done */
    j->work = extend_work;
    j->done = extend_done;
    dd_job_queue(j);
}

/* ---- LOCKINFO ----------------------------------------------------------------------- */

static void lockinfo_work(dd_job *j)
{
    dlock_holder h;
    int rc = dlock_inspect(dd_srv.client, j->name, &h);
    if (rc != DLOCK_OK) {
        dd_reply_dlock_error(&j->reply, rc);
        return;
    }
    dd_buf *b = &j->reply;
    dd_reply_array(b, h.shared > 0 ? 10 : 8);
    dd_reply_cstr(b, "state");
    dd_reply_cstr(b, h.held ? "held" : "free");
    dd_reply_cstr(b, "holder");
    /* The exclusive holder's "host:pid label"; none for a free name or shared holders. */
    if (h.held && h.shared == 0)
        dd_reply_bulk(b, h.description, strnlen(h.description, sizeof h.description));
    else
        dd_reply_nil(b);
    dd_reply_cstr(b, "remaining_ms");
    dd_reply_int(b, h.held ? h.remaining_ms : 0);
    dd_reply_cstr(b, "fence");
    dd_reply_int(b, (long long)h.fence);
    if (h.shared > 0) {
        dd_reply_cstr(b, "shared");
        dd_reply_int(b, h.shared);
    }
}

void dd_cmd_lockinfo(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)argc;
    dd_job *j = job_new(c);
    j->name = arg_dup(&argv[1], "lock name", DLOCK_NAME_MAX, out);
    if (j->name == NULL) {
        dd_job_free(j);
        return;
    }
    j->work = lockinfo_work;
    j->done = simple_done;
    dd_job_queue(j);
}

/* ---- a connection's end ------------------------------------------------------------- */

static void release_all_work(dd_job *j)
{
    while (j->release != NULL) {
        dd_session *s = j->release;
        j->release = s->next;
        dlock_release(s->lock);
        session_free(s);
    }
}

static void release_all_done(dd_job *j)
{
    dd_job_free(j);
}

void dd_conn_release_all(dd_conn *c)
{
    /* A job in flight may be using a session's handle or the pending: its done
     * callback calls here again once it is over. */
    if (c->job)
        return;
    dd_job *parked = dd_unpark(c);
    if (parked != NULL) {
        parked->rc = DLOCK_ERR_AGAIN;
        dd_lock_step_done(parked); /* c->closing: gives the wait up on the pool */
    }
    if (c->sessions == NULL)
        return;
    dd_job *j = job_new(c);
    j->release = c->sessions;
    for (dd_session *s = c->sessions; s != NULL; s = s->next)
        dd_srv.session_locks--;
    c->sessions = NULL;
    j->work = release_all_work;
    j->done = release_all_done;
    dd_job_queue(j);
}
