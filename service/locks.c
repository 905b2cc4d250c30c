/*
 * locks.c: LOCK, the session locks, and what a closing connection gives up.
 *
 * LOCK checks its arguments on the loop, then runs its library calls as jobs on
 * libuv's pool (jobs.c) and answers from the job's done callback on the loop. The reply
 * is built on the pool thread, where dlock_errmsg() holds the failing call's detail.
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

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- sessions ---------------------------------------------------------------------- */

dd_session *dd_session_find(dd_conn *c, const char *name, size_t len)
{
    for (dd_session *s = c->sessions; s != NULL; s = s->next)
        if (strlen(s->name) == len && memcmp(s->name, name, len) == 0)
            return s;
    return NULL;
}

void dd_session_unlink(dd_conn *c, dd_session *s)
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

void dd_session_free(dd_session *s)
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
        dd_session_free(j->release);
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
        dd_session_free(j->sess);
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
            dd_session_free(j->sess);
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
    dd_session_free(j->sess);
    j->sess = NULL;
    dd_job_answer(j);
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
    dd_session *held = dd_session_find(c, argv[1].p, argv[1].len);
    if (held != NULL && !atomic_load(&held->lost)) {
        /* The library is not reentrant: a second LOCK would wait for this connection's
         * own lock until its lease ran out, which renewal never lets happen. */
        dd_reply_error(out, "ERR this connection already holds lock '%.*s' (UNLOCK it first)",
                       (int)(argv[1].len > 128 ? 128 : argv[1].len), argv[1].p);
        return;
    }
    dd_job *j = dd_job_new(c);
    j->ttl_ms = DLOCK_TTL_DEFAULT_MS;
    /* Options in any order, each at most once; TTL, WAIT and LABEL take a value. */
    enum { TTL, WAIT, DETACHED, FAIR, SHARED, LABEL, NOPTS };
    static const char *const names[NOPTS] = {"TTL", "WAIT", "DETACHED", "FAIR", "SHARED", "LABEL"};
    bool seen[NOPTS] = {false};
    for (size_t i = 2; i < argc; i++) {
        int opt = 0;
        while (opt < NOPTS && !dd_arg_is(&argv[i], names[opt]))
            opt++;
        if (opt == NOPTS) {
            dd_reply_error(out,
                           "ERR unknown LOCK option '%.*s' (TTL ms, WAIT ms, DETACHED, "
                           "FAIR, SHARED, LABEL text)",
                           (int)(argv[i].len > 64 ? 64 : argv[i].len), argv[i].p);
            goto fail;
        }
        if (seen[opt]) {
            dd_reply_error(out, "ERR LOCK option %s given twice", names[opt]);
            goto fail;
        }
        seen[opt] = true;
        if ((opt == TTL || opt == WAIT || opt == LABEL) && i + 1 >= argc) {
            dd_reply_error(out, "ERR LOCK option %s needs a value", names[opt]);
            goto fail;
        }
        switch (opt) {
        case TTL:
            if (!dd_arg_ttl(&argv[++i], &j->ttl_ms, out))
                goto fail;
            break;
        case WAIT:
            if (!dd_arg_int(&argv[++i], -1, DLOCK_TTL_MAX_MS, &j->wait_ms)) {
                dd_reply_error(out,
                               "ERR WAIT must be -1 (forever) or an integer from 0 to %d "
                               "(milliseconds)",
                               DLOCK_TTL_MAX_MS);
                goto fail;
            }
            break;
        case DETACHED:
            j->detached = true;
            break;
        case FAIR:
            j->fair = true;
            break;
        case SHARED:
            j->shared = true;
            break;
        default: /* LABEL */
            j->label = dd_arg_dup(&argv[++i], "LABEL", DLOCK_LABEL_MAX, out);
            if (j->label == NULL)
                goto fail;
            break;
        }
    }
    j->name = dd_arg_dup(&argv[1], "lock name", DLOCK_NAME_MAX, out);
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
        dd_session_unlink(c, held);
        j->release = held;
    }
    dd_lock_step(j);
    return;
fail:
    if (j->sess != NULL)
        dd_session_free(j->sess);
    dd_job_free(j);
}

/* ---- a connection's end ------------------------------------------------------------- */

static void release_all_work(dd_job *j)
{
    while (j->release != NULL) {
        dd_session *s = j->release;
        j->release = s->next;
        dlock_release(s->lock);
        dd_session_free(s);
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
    if (c->jobs > 0)
        return;
    dd_job *parked = dd_unpark(c);
    if (parked != NULL) {
        parked->rc = DLOCK_ERR_AGAIN;
        dd_lock_step_done(parked); /* c->closing: gives the wait up on the pool */
    }
    if (c->sessions == NULL)
        return;
    dd_job *j = dd_job_new(c);
    j->release = c->sessions;
    for (dd_session *s = c->sessions; s != NULL; s = s->next)
        dd_srv.session_locks--;
    c->sessions = NULL;
    j->work = release_all_work;
    j->done = release_all_done;
    dd_job_queue(j);
}
