/*
 * elect.c: leader election through dlockd.
 *
 *   ELECT name [TTL ms] [WAIT ms] [VALUE v] [LABEL text] [FAIR]
 *       campaign until this connection leads or WAIT ends (-1: forever; default 0, as
 *       LOCK's): [token, term, validity] as LOCK answers, or nil. The leadership is a
 *       session lock (locks.c): renewed while the connection is open, and resigned the
 *       moment it closes, so that the next candidate leads in milliseconds.
 *   RESIGN name token           1 when this connection led and resigned; 0 when it
 *                               holds no such leadership
 *   PROCLAIM name token value   1 when the new value is announced; 0 when the
 *                               connection no longer leads (lost, or not its own)
 *   LEADER name                 [value, holder, term, remaining_ms], or nil when no
 *                               one leads
 * Observers SUBSCRIBE leader:NAME (pubsub.c).
 *
 * An ELECT is a LOCK whose pending is a campaign (dlock_elect_start): parked on the loop
 * while it waits, its announcement a step on the pool. The others are one job each.
 */
#include "dlockd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void dd_cmd_elect(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    if (dd_would_wait_for_itself(c, &argv[1], 0, out))
        return;
    dd_lock_args *a;
    dd_job *j = dd_lock_job(c, &a);
    a->ttl_ms = DLOCK_TTL_DEFAULT_MS;
    a->elect = true;
    if (!dd_lock_options(argv, argc, 2, "ELECT", a, out) ||
        (a->name = dd_arg_dup(&argv[1], "election name", DLOCK_NAME_MAX, out)) == NULL ||
        !dd_lock_start(c, j, out))
        dd_job_free(j);
}

/* ---- RESIGN and PROCLAIM: on this connection's leadership ----------------------------- */

/* The connection's leadership of name with token, or NULL. */
static dd_session *leadership(dd_conn *c, const resp_arg *name, const resp_arg *token)
{
    if (token->len != DLOCK_TOKEN_LEN || memchr(token->p, '\0', token->len) != NULL)
        return NULL;
    char tok[DLOCK_TOKEN_LEN + 1];
    memcpy(tok, token->p, DLOCK_TOKEN_LEN);
    tok[DLOCK_TOKEN_LEN] = '\0';
    dd_session *s = dd_session_find(c, name->p, name->len, tok);
    return s != NULL && s->leader ? s : NULL;
}

static void resign_work(dd_job *j)
{
    dd_lock_args *a = j->args;
    j->rc = dlock_resign(a->sess->lock); /* the handle is freed whatever it says */
    a->sess->lock = NULL;
    if (atomic_load(&a->sess->lost) && j->rc == DLOCK_OK)
        j->rc = DLOCK_ERR_LOST;
    dd_reply_held(&j->reply, j->rc);
}

static void resign_done(dd_job *j)
{
    dd_lock_args *a = j->args;
    dd_session_free(a->sess);
    a->sess = NULL;
    dd_job_answer(j);
    dd_job_free(j);
}

static void dd_cmd_resign(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)argc;
    dd_session *s = leadership(c, &argv[1], &argv[2]);
    if (s == NULL) {
        dd_reply_int(out, 0);
        return;
    }
    dd_session_unlink(c, s);
    dd_lock_args *a;
    dd_job *j = dd_lock_job(c, &a);
    a->sess = s;
    j->work = resign_work;
    j->done = resign_done;
    dd_job_queue(j);
}

static void proclaim_work(dd_job *j)
{
    dd_lock_args *a = j->args;
    j->rc = dlock_proclaim(a->sess->lock, a->value);
    dd_reply_held(&j->reply, j->rc);
}

static void proclaim_done(dd_job *j)
{
    dd_lock_args *a = j->args;
    /* A leadership found lost stops blocking a new ELECT of its name. */
    if (j->rc == DLOCK_ERR_LOST)
        atomic_store(&a->sess->lost, 1);
    a->sess = NULL; /* the connection's still */
    dd_job_answer(j);
    dd_job_free(j);
}

static void dd_cmd_proclaim(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)argc;
    dd_session *s = leadership(c, &argv[1], &argv[2]);
    if (s == NULL) {
        dd_reply_int(out, 0);
        return;
    }
    dd_lock_args *a;
    dd_job *j = dd_lock_job(c, &a);
    if ((a->value = dd_arg_value(&argv[3], out)) == NULL) {
        dd_job_free(j);
        return;
    }
    a->sess = s; /* stays listed: the connection is busy until the job is done */
    j->work = proclaim_work;
    j->done = proclaim_done;
    dd_job_queue(j);
}

/* ---- LEADER ------------------------------------------------------------------------- */

static void leader_work(dd_job *j)
{
    dd_lock_args *a = j->args;
    dlock_leader_info info;
    j->rc = dlock_leader(dd_srv.client, a->name, &info);
    if (j->rc != DLOCK_OK) {
        dd_reply_dlock_error(&j->reply, j->rc);
    } else if (info.term == 0) {
        dd_reply_nil(&j->reply);
    } else {
        dd_reply_array(&j->reply, 4);
        dd_reply_cstr(&j->reply, info.value);
        dd_reply_cstr(&j->reply, info.holder);
        dd_reply_int(&j->reply, (long long)info.term);
        dd_reply_int(&j->reply, info.remaining_ms);
    }
}

static void leader_done(dd_job *j)
{
    dd_job_answer(j);
    dd_job_free(j);
}

static void dd_cmd_leader(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)argc;
    dd_lock_args *a;
    dd_job *j = dd_lock_job(c, &a);
    if ((a->name = dd_arg_dup(&argv[1], "election name", DLOCK_NAME_MAX, out)) == NULL) {
        dd_job_free(j);
        return;
    }
    j->work = leader_work;
    j->done = leader_done;
    dd_job_queue(j);
}

/* ---- the module --------------------------------------------------------------------- */

static const dd_command_def commands[] = {
    {"elect", -2, false, false, false, dd_cmd_elect},
    {"resign", 3, false, false, false, dd_cmd_resign},
    {"proclaim", 4, false, false, false, dd_cmd_proclaim},
    {"leader", 2, false, false, false, dd_cmd_leader},
    {"subscribe", -2, false, false, true, dd_cmd_subscribe},
    {"unsubscribe", -1, false, false, true, dd_cmd_unsubscribe},
};

/* A closing connection leaves its channels at once, whatever job it has in flight. */
static const dd_conn_hooks hooks = {
    .closing = dd_pubsub_conn_closed,
    .closed = NULL,
    .ending = NULL,
};

void dd_elect_register(void)
{
    dd_commands_add(commands, sizeof commands / sizeof commands[0]);
    dd_conn_hooks_add(&hooks);
}
