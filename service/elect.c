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

/* A leader's value: up to DLOCK_LEADER_VALUE_MAX bytes, empty allowed, no NUL. */
static char *value_dup(const resp_arg *a, dd_buf *out)
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

/* ELECT's options, in any order, each at most once. */
static bool elect_options(resp_arg *argv, size_t argc, dd_job *j, dd_buf *out)
{
    enum { TTL, WAIT, VALUE, LABEL, FAIR, NOPTS };
    static const char *const names[NOPTS] = {"TTL", "WAIT", "VALUE", "LABEL", "FAIR"};
    bool seen[NOPTS] = {false};
    /* --max-hold bounds the hold of a lock, a section of work; a leadership is meant
     * to last, and its end is its connection's. */
    j->maxhold_ms = 0;
    for (size_t i = 2; i < argc; i++) {
        int opt = 0;
        while (opt < NOPTS && !dd_arg_is(&argv[i], names[opt]))
            opt++;
        if (opt == NOPTS) {
            dd_reply_error(out,
                           "ERR unknown ELECT option '%.*s' (TTL ms, WAIT ms, VALUE v, LABEL "
                           "text, FAIR)",
                           (int)(argv[i].len > 64 ? 64 : argv[i].len), argv[i].p);
            return false;
        }
        if (seen[opt]) {
            dd_reply_error(out, "ERR ELECT option %s given twice", names[opt]);
            return false;
        }
        seen[opt] = true;
        if (opt != FAIR && i + 1 >= argc) {
            dd_reply_error(out, "ERR ELECT option %s needs a value", names[opt]);
            return false;
        }
        if (opt == TTL && !dd_arg_ttl(&argv[++i], &j->ttl_ms, out))
            return false;
        if (opt == WAIT && !dd_arg_int(&argv[++i], -1, DLOCK_TTL_MAX_MS, &j->wait_ms)) {
            dd_reply_error(out,
                           "ERR WAIT must be -1 (forever) or an integer from 0 to %d "
                           "(milliseconds)",
                           DLOCK_TTL_MAX_MS);
            return false;
        }
        if (opt == VALUE && (j->extra = value_dup(&argv[++i], out)) == NULL)
            return false;
        if (opt == LABEL &&
            (j->label = dd_arg_dup(&argv[++i], "LABEL", DLOCK_LABEL_MAX, out)) == NULL)
            return false;
        if (opt == FAIR)
            j->fair = true;
    }
    if (j->ttl_ms < DD_SESSION_TTL_MIN_MS) {
        dd_reply_error(out,
                       "ERR TTL of a leadership must be at least %d ms, so that its renewal "
                       "keeps up on a loaded machine",
                       DD_SESSION_TTL_MIN_MS);
        return false;
    }
    return true;
}

void dd_cmd_elect(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    if (dd_would_wait_for_itself(c, &argv[1], 0, out))
        return;
    dd_job *j = dd_job_new(c);
    j->ttl_ms = DLOCK_TTL_DEFAULT_MS;
    j->elect = true;
    if (!elect_options(argv, argc, j, out) ||
        (j->name = dd_arg_dup(&argv[1], "election name", DLOCK_NAME_MAX, out)) == NULL ||
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
    j->rc = dlock_resign(j->sess->lock); /* the handle is freed whatever it says */
    j->sess->lock = NULL;
    if (atomic_load(&j->sess->lost) && j->rc == DLOCK_OK)
        j->rc = DLOCK_ERR_LOST;
    dd_reply_held(&j->reply, j->rc);
}

static void resign_done(dd_job *j)
{
    dd_session_free(j->sess);
    j->sess = NULL;
    dd_job_answer(j);
    dd_job_free(j);
}

void dd_cmd_resign(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)argc;
    dd_session *s = leadership(c, &argv[1], &argv[2]);
    if (s == NULL) {
        dd_reply_int(out, 0);
        return;
    }
    dd_session_unlink(c, s);
    dd_job *j = dd_job_new(c);
    j->sess = s;
    j->work = resign_work;
    j->done = resign_done;
    dd_job_queue(j);
}

static void proclaim_work(dd_job *j)
{
    j->rc = dlock_proclaim(j->sess->lock, j->extra);
    dd_reply_held(&j->reply, j->rc);
}

static void proclaim_done(dd_job *j)
{
    /* A leadership found lost stops blocking a new ELECT of its name. */
    if (j->rc == DLOCK_ERR_LOST)
        atomic_store(&j->sess->lost, 1);
    j->sess = NULL; /* the connection's still */
    dd_job_answer(j);
    dd_job_free(j);
}

void dd_cmd_proclaim(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)argc;
    dd_session *s = leadership(c, &argv[1], &argv[2]);
    if (s == NULL) {
        dd_reply_int(out, 0);
        return;
    }
    dd_job *j = dd_job_new(c);
    if ((j->extra = value_dup(&argv[3], out)) == NULL) {
        dd_job_free(j);
        return;
    }
    j->sess = s; /* stays listed: the connection is busy until the job is done */
    j->work = proclaim_work;
    j->done = proclaim_done;
    dd_job_queue(j);
}

/* ---- LEADER ------------------------------------------------------------------------- */

static void leader_work(dd_job *j)
{
    dlock_leader_info info;
    j->rc = dlock_leader(dd_srv.client, j->name, &info);
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

void dd_cmd_leader(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)argc;
    dd_job *j = dd_job_new(c);
    if ((j->name = dd_arg_dup(&argv[1], "election name", DLOCK_NAME_MAX, out)) == NULL) {
        dd_job_free(j);
        return;
    }
    j->work = leader_work;
    j->done = leader_done;
    dd_job_queue(j);
}
