/*
 * unlock.c: UNLOCK, a release in steps, EXTEND, an extension in steps, CHECK, a
 * check in steps, and LOCKINFO, an inspect in steps (park.c).
 *
 * LOCKINFO names who holds a name: the holder description each holder's lock carries
 * (for a lock taken through dlockd, the client's label or name, its address, and the
 * dlockd), every shared holder's for a name held shared or a semaphore's permits.
 *
 * UNLOCK, EXTEND and CHECK work on a name and a token, on a lock or a semaphore's
 * permit alike (SEM RELEASE is UNLOCK). When the name and token are one of this
 * connection's session locks, they use its handle (a release also stops its renewal;
 * an extend also sets the renewal's ttl; a check that finds it lost stops its renewal
 * too); otherwise a handle is adopted for the call (dlock_lock_adopt), so that a lock
 * taken by another connection, another dlockd or `dlock acquire` can be released,
 * extended or checked here.
 *
 * CHECK only asks (dlock_check): it neither renews the lease nor releases the lock, so
 * that a client can ask whether its token still holds a name (an isHeld()) as often as
 * it likes without keeping a forgotten lock alive.
 */
#include "dlockd.h"

#include <stdlib.h>
#include <string.h>

/* ---- UNLOCK, EXTEND and CHECK ------------------------------------------------------- */

/* An UNLOCK is a release in steps (park.c), on the loop unless a step would block. */
static void unlock_finish(dd_job *j, dlock_lock *l)
{
    (void)l;
    dd_reply_held(&j->reply, j->rc);
}

static void unlock_settle(dd_job *j)
{
    (void)j;
}

static void unlock_undo(dd_job *j)
{
    (void)j; /* a release takes nothing */
}

static void unlock_drop(dd_job *j)
{
    dd_lock_args *a = j->args;
    dd_session_free(a->sess);
    a->sess = NULL;
}

static const dd_steps unlock_steps = {
    .finish = unlock_finish,
    .settle = unlock_settle,
    .undo = unlock_undo,
    .drop = unlock_drop,
};

/* NAME TOKEN: copied into the job, the token checked for its form. */
static dd_job *name_token_job(dd_conn *c, const resp_arg *name, const resp_arg *token,
                              const char *what, dd_buf *out)
{
    if (token->len != DLOCK_TOKEN_LEN) {
        dd_reply_error(out, "ERR a token is %d hexadecimal characters", DLOCK_TOKEN_LEN);
        return NULL;
    }
    dd_lock_args *a;
    dd_job *j = dd_lock_job(c, &a);
    a->name = dd_arg_dup(name, what, DLOCK_NAME_MAX, out);
    if (a->name == NULL) {
        dd_job_free(j);
        return NULL;
    }
    memcpy(a->token, token->p, DLOCK_TOKEN_LEN);
    a->token[DLOCK_TOKEN_LEN] = '\0';
    return j;
}

void dd_unlock(dd_conn *c, const resp_arg *name, const resp_arg *token, const char *what,
               dd_buf *out)
{
    dd_job *j = name_token_job(c, name, token, what, out);
    if (j == NULL)
        return;
    dd_lock_args *a = j->args;
    dd_session *s = dd_session_find(c, name->p, name->len, a->token);
    dlock_lock *l = NULL;
    int rc = DLOCK_OK;
    if (s != NULL) {
        /* This connection's own session lock: release its handle, which also stops
         * its renewal. */
        dd_session_unlink(c, s);
        a->sess = s;
        l = s->lock;
        s->lock = NULL;
    } else {
        rc = dlock_lock_adopt(dd_srv.client, a->name, a->token, &l);
    }
    if (rc == DLOCK_OK)
        rc = dlock_release_start(l, &j->pending); /* the pending's handle from now on */
    if (rc != DLOCK_OK) {
        dd_reply_held(&j->reply, rc);
        dd_buf_move(out, &j->reply);
        dd_session_free(a->sess);
        dd_job_free(j);
        return;
    }
    j->steps = &unlock_steps;
    dd_step(j);
}

void dd_cmd_unlock(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)argc;
    dd_unlock(c, &argv[1], &argv[2], "lock name", out);
}

/* An EXTEND is an extension in steps (park.c), on the loop unless a step would block,
 * on the session's handle or on one borrowed for it. */
static void extend_finish(dd_job *j, dlock_lock *l)
{
    (void)l;
    dd_lock_args *a = j->args;
    /* A session lock found lost stops blocking a new LOCK of its name. */
    if (a->sess != NULL && j->rc == DLOCK_ERR_LOST)
        atomic_store(&a->sess->lost, 1);
    dd_reply_held(&j->reply, j->rc);
}

static void extend_drop(dd_job *j)
{
    dd_lock_args *a = j->args;
    /* The borrowed handle goes, the lock stays on the servers whatever the answer; the
     * pending that used it went first. */
    if (a->adopted != NULL)
        dlock_lock_detach(a->adopted);
    a->adopted = NULL;
}

static const dd_steps extend_steps = {
    .finish = extend_finish,
    .settle = unlock_settle,
    .undo = unlock_undo, /* an extension takes nothing */
    .drop = extend_drop,
};

void dd_cmd_extend(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)argc;
    int64_t ttl;
    if (!dd_arg_ttl(&argv[3], &ttl, out))
        return;
    dd_job *j = name_token_job(c, &argv[1], &argv[2], "lock name", out);
    if (j == NULL)
        return;
    dd_lock_args *a = j->args;
    a->ttl_ms = ttl;
    /* stays listed: the connection is busy until the job is done */
    a->sess = dd_session_find(c, argv[1].p, argv[1].len, a->token);
    if (a->sess != NULL && ttl < DD_SESSION_TTL_MIN_MS) {
        /* Its renewal goes on with the new TTL: the session floor holds. */
        dd_reply_error(out, "ERR TTL of a session lock must be at least %d ms",
                       DD_SESSION_TTL_MIN_MS);
        dd_job_free(j);
        return;
    }
    int rc = a->sess != NULL ? DLOCK_OK
                             : dlock_lock_adopt(dd_srv.client, a->name, a->token, &a->adopted);
    if (rc == DLOCK_OK)
        rc = dlock_extend_start(a->sess != NULL ? a->sess->lock : a->adopted, ttl, &j->pending);
    if (rc != DLOCK_OK) {
        dd_reply_held(out, rc);
        extend_drop(j);
        dd_job_free(j);
        return;
    }
    j->steps = &extend_steps;
    dd_step(j);
}

/* A CHECK is a check in steps, as an EXTEND is an extension: on the session's handle
 * (a lock found lost is renewed no more), or on one borrowed for it, which leaves the
 * lock on the servers whatever the answer. */
static const dd_steps check_steps = {
    .finish = extend_finish,
    .settle = unlock_settle,
    .undo = unlock_undo, /* a check takes nothing */
    .drop = extend_drop,
};

void dd_cmd_check(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)argc;
    dd_job *j = name_token_job(c, &argv[1], &argv[2], "lock name", out);
    if (j == NULL)
        return;
    dd_lock_args *a = j->args;
    /* stays listed: the connection is busy until the job is done */
    a->sess = dd_session_find(c, argv[1].p, argv[1].len, a->token);
    int rc = a->sess != NULL ? DLOCK_OK
                             : dlock_lock_adopt(dd_srv.client, a->name, a->token, &a->adopted);
    if (rc == DLOCK_OK)
        rc = dlock_check_start(a->sess != NULL ? a->sess->lock : a->adopted, &j->pending);
    if (rc != DLOCK_OK) {
        dd_reply_held(out, rc);
        extend_drop(j);
        dd_job_free(j);
        return;
    }
    j->steps = &check_steps;
    dd_step(j);
}

/* ---- LOCKINFO ----------------------------------------------------------------------- */

/* A LOCKINFO's name, and where the inspect in steps puts its answer. */
typedef struct lockinfo_args {
    char *name;
    dlock_holder holder;
    dlock_holder *shared; /* DLOCK_INSPECT_SHARED_MAX of them */
    int n;
} lockinfo_args;

static void lockinfo_args_free(void *p)
{
    lockinfo_args *a = p;
    free(a->name);
    free(a->shared);
    free(a);
}

static void reply_holder(dd_buf *b, const dlock_holder *h)
{
    dd_reply_bulk(b, h->description, strnlen(h->description, sizeof h->description));
}

static void lockinfo_finish(dd_job *j, dlock_lock *l)
{
    (void)l;
    lockinfo_args *a = j->args;
    const dlock_holder *h = &a->holder;
    if (j->rc != DLOCK_OK) {
        dd_reply_dlock_error(&j->reply, j->rc);
        return;
    }
    dd_buf *b = &j->reply;
    dd_reply_array(b, h->shared > 0 ? 10 : 8);
    dd_reply_cstr(b, "state");
    dd_reply_cstr(b, h->held ? "held" : "free");
    dd_reply_cstr(b, "holder");
    /* Who holds it: the exclusive holder's description, the shared holders' as an
     * array (the longest lease first; "shared" says how many there are), nil when
     * free. */
    if (h->held && h->shared > 0) {
        dd_reply_array(b, (size_t)a->n);
        for (int i = 0; i < a->n; i++)
            reply_holder(b, &a->shared[i]);
    } else if (h->held) {
        reply_holder(b, h);
    } else {
        dd_reply_nil(b);
    }
    dd_reply_cstr(b, "remaining_ms");
    dd_reply_int(b, h->held ? h->remaining_ms : 0);
    dd_reply_cstr(b, "fence");
    dd_reply_int(b, (long long)h->fence);
    if (h->shared > 0) {
        dd_reply_cstr(b, "shared");
        dd_reply_int(b, h->shared);
    }
}

static const dd_steps lockinfo_steps = {
    .finish = lockinfo_finish,
    .settle = unlock_settle,
    .undo = unlock_undo, /* an inspect takes nothing */
};

/* A LOCKINFO is an inspect in steps (park.c), on the loop unless a step would block:
 * one round tells the holder and, for a name held shared, every shared holder. */
void dd_cmd_lockinfo(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)argc;
    dd_job *j = dd_job_new(c);
    lockinfo_args *a = dd_job_args(j, sizeof *a, lockinfo_args_free);
    a->name = dd_arg_dup(&argv[1], "lock name", DLOCK_NAME_MAX, out);
    if (a->name == NULL) {
        dd_job_free(j);
        return;
    }
    a->shared = calloc(DLOCK_INSPECT_SHARED_MAX, sizeof *a->shared);
    if (a->shared == NULL)
        abort();
    int rc = dlock_inspect_start(dd_srv.client, a->name, &a->holder, a->shared,
                                 DLOCK_INSPECT_SHARED_MAX, &a->n, &j->pending);
    if (rc != DLOCK_OK) {
        dd_reply_dlock_error(out, rc);
        dd_job_free(j);
        return;
    }
    j->steps = &lockinfo_steps;
    dd_step(j);
}
