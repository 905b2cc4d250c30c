/*
 * locks.c: the locks module: LOCK (and the acquisitions SEM ACQUIRE and ELECT share
 * with it), its arguments, and the commands it registers.
 *
 * LOCK checks its arguments on the loop, then runs its library calls as jobs on
 * libuv's pool (jobs.c) and answers from the job's done callback on the loop. The reply
 * is built on the pool thread, where dlock_errmsg() holds the failing call's detail.
 *
 * A LOCK is an acquisition in steps (dlock_acquire_start, then dlock_pending_step on
 * the pool); a step that answers DLOCK_ERR_AGAIN parks the job on the loop (park.c)
 * until the library's descriptor is readable or its due time comes. So a waiter holds
 * no thread, however long it waits. SEM ACQUIRE (sem.c) is the same acquisition with
 * dlock_sem_acquire_start, and its permits are session locks like any other.
 *
 * Session locks (the default) are taken with auto_renew: the library's renewal thread
 * extends them every TTL/3 while the connection is open, and they are released on the
 * pool when it closes. DETACHED locks are plain leases, detached from their handle at
 * once, so that nothing of them stays in dlockd.
 *
 * Every lock is taken with a label that says who holds it (clients.c): the client's
 * LABEL or name, its address, and this dlockd.
 */
#include "dlockd.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- an acquisition's end ----------------------------------------------------------- */

/* The renewal thread found a session lock lost: the handle says so from now on; the
 * flag lets the connection take the name again without an UNLOCK. */
static void on_lost(dlock_lock *l, void *user)
{
    (void)l;
    dd_session *s = user;
    atomic_store(&s->lost, 1);
    atomic_fetch_add(&dd_srv.stats.locks_lost, 1);
    dd_loss_notify();
}

/* On the pool: the reply, and the lock kept (a session's) or left to its lease. */
static void lock_finish(dd_job *j, dlock_lock *l)
{
    dd_lock_args *a = j->args;
    if (j->rc == DLOCK_OK) {
        dd_reply_array(&j->reply, 3);
        dd_reply_cstr(&j->reply, dlock_token(l));
        dd_reply_int(&j->reply, (long long)dlock_fence(l));
        int64_t validity = dlock_remaining_ms(l);
        dd_reply_int(&j->reply, validity > 0 ? validity : 0);
        if (a->detached) {
            dlock_lock_detach(l);
        } else {
            a->sess->lock = l;
            memcpy(a->sess->token, dlock_token(l), DLOCK_TOKEN_LEN + 1);
        }
    } else if (j->rc == DLOCK_ERR_BUSY) {
        dd_reply_nil(&j->reply);
    } else {
        dd_reply_dlock_error(&j->reply, j->rc);
    }
}

static void lock_settle(dd_job *j)
{
    dd_lock_args *a = j->args;
    dd_conn *c = j->conn;
    if (j->rc == DLOCK_OK) {
        dd_metrics_granted(j);
        if (a->permits > 0)
            dd_srv.stats.permits_acquired++;
        else
            dd_srv.stats.locks_acquired++;
        if (!a->detached) {
            dd_session_link(c, a->sess);
            dd_maxhold_start(a->sess, a->maxhold_ms);
            /* Found lost before it was linked: on_lost's wake-up saw nothing. */
            if (atomic_load(&a->sess->lost))
                dd_loss_notify();
            a->sess = NULL;
        }
    } else if (j->rc == DLOCK_ERR_BUSY) {
        if (a->permits > 0)
            dd_srv.stats.permits_not_acquired++;
        else
            dd_srv.stats.locks_not_acquired++;
    }
}

/* On the pool: a session lock granted to a connection that has closed. */
static void lock_undo(dd_job *j)
{
    dd_lock_args *a = j->args;
    if (a->sess != NULL && a->sess->lock != NULL) {
        (a->sess->leader ? dlock_resign : dlock_release)(a->sess->lock);
        a->sess->lock = NULL;
    }
}

static void lock_drop(dd_job *j)
{
    dd_lock_args *a = j->args;
    dd_session_free(a->sess);
    a->sess = NULL;
}

/* On the pool, before the first step: lost session locks of the name go before it is
 * taken again. */
static void release_lost(dd_job *j)
{
    dd_lock_args *a = j->args;
    dd_sessions_release(a->release);
    a->release = NULL;
}

static const dd_steps lock_steps = {
    .finish = lock_finish,
    .settle = lock_settle,
    .undo = lock_undo,
    .drop = lock_drop,
    .parked = &dd_srv.parked_locks,
    .waits = &dd_srv.stats.waits,
};

bool dd_lock_start(dd_conn *c, dd_job *j, dd_buf *out)
{
    dd_lock_args *a = j->args;
    if (dd_drain_refuses(out))
        return false;
    if (!a->detached) {
        a->sess = calloc(1, sizeof *a->sess);
        if (a->sess == NULL)
            abort();
        /* The session takes the name over: the one copy of it, made from the command's
         * argument, lives as long as the lock is held. */
        a->sess->name = a->name;
        a->name_taken = true;
        a->sess->name_len = strlen(a->name);
        a->sess->permit = a->permits > 0;
        a->sess->leader = a->elect;
        /* The library makes a permit of K = 1 an exclusive lock. */
        a->sess->shared = a->shared || a->permits >= 2;
    }
    dlock_opts o;
    memset(&o, 0, sizeof o);
    o.ttl_ms = a->ttl_ms;
    o.wait_ms = a->wait_ms;
    o.fair = a->fair;
    o.shared = a->shared;
    /* Who holds it, as LOCKINFO and `dlock status` show: the client, where it connects
     * from and through which dlockd, a DETACHED lock's too (it outlives the connection,
     * and still says who took it). */
    char *label = dd_holder_label(c, a->label);
    free(a->label);
    a->label = label;
    o.label = a->label;
    o.label_is_holder = 1; /* the client's own name, not this dlockd's host:pid before it */
    if (!a->detached) {
        o.auto_renew = 1;
        o.on_lost = on_lost;
        o.on_lost_user = a->sess;
    }
    /* No I/O: the same checks as dlock_acquire, on the loop. A campaign (ELECT) is an
     * acquisition whose last step announces the leader's value. */
    dlock_elect_opts eo;
    memset(&eo, 0, sizeof eo);
    eo.lock = o;
    eo.value = a->value;
    int rc = a->elect ? dlock_elect_start(dd_srv.client, a->name, &eo, &j->pending)
             : a->permits > 0
                 ? dlock_sem_acquire_start(dd_srv.client, a->name, a->permits, &o, &j->pending)
                 : dlock_acquire_start(dd_srv.client, a->name, &o, &j->pending);
    if (rc != DLOCK_OK) {
        dd_reply_dlock_error(out, rc);
        dd_session_free(a->sess);
        a->sess = NULL;
        return false;
    }
    a->release = dd_sessions_take_lost(c, a->name);
    if (a->release != NULL)
        j->before_step = release_lost;
    j->steps = &lock_steps;
    dd_step(j);
    return true;
}

void dd_cmd_lock(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    if (dd_would_wait_for_itself(c, &argv[1], 0, out))
        return;
    dd_lock_args *a;
    dd_job *j = dd_lock_job(c, &a);
    a->ttl_ms = DLOCK_TTL_DEFAULT_MS;
    if (!dd_lock_options(argv, argc, 2, "LOCK", a, out) ||
        (a->name = dd_arg_dup(&argv[1], "lock name", DLOCK_NAME_MAX, out)) == NULL ||
        !dd_lock_start(c, j, out))
        dd_job_free(j);
}

/* ---- the module --------------------------------------------------------------------- */

static void lock_args_free(void *p)
{
    dd_lock_args *a = p;
    if (a == NULL)
        return;
    if (!a->name_taken)
        free(a->name);
    free(a->label);
    free(a->value);
    free(a);
}

dd_job *dd_lock_job(dd_conn *c, dd_lock_args **a)
{
    dd_job *j = dd_job_new(c);
    *a = dd_job_args(j, sizeof **a, lock_args_free);
    return j;
}

/* The commands on a lock by name; SEM, ELECT and the operators' register their own. */
static const dd_command_def commands[] = {
    {"lock", -2, false, false, false, dd_cmd_lock},
    {"unlock", 3, false, false, false, dd_cmd_unlock},
    {"extend", 4, false, false, false, dd_cmd_extend},
    {"lockinfo", 2, false, false, false, dd_cmd_lockinfo},
    {"check", 3, false, false, false, dd_cmd_check},
};

void dd_locks_register(void)
{
    dd_sessions_register();
    dd_commands_add(commands, sizeof commands / sizeof commands[0]);
}
