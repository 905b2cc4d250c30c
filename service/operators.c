/*
 * operators.c: LOCKS and BREAK, what an operator asks of dlockd about every lock on its
 * servers, not only its own clients': the held names (dlock_list) and breaking a stuck
 * one (dlock_break), each one job on the pool, as `dlock list` and `dlock break` do them.
 *
 * BREAK frees a lock whoever holds it, a client of this dlockd or not, so only the user
 * admin may run it (the command table's gate); the break records this dlockd's admin
 * connection as who broke it. LOCKS shows what `dlock status` shows of any name, so any
 * authenticated client may run it, as LOCKINFO.
 */
#include "dlockd.h"

#include <stdlib.h>
#include <string.h>

/* Reasons and patterns: as the library takes them. */
#define REASON_MAX 500
/* The largest LOCKS reply: half of what a client may leave unread (DD_OUT_HARD), so
 * that one reply never gets its client closed. About 15,000 names of one holder. */
#define LOCKS_REPLY_MAX (DD_OUT_HARD / 2)

/* The arguments of LOCKS (its pattern in name) and BREAK. */
typedef struct ops_args {
    char *name;
    char *reason, *by, *fence_key; /* BREAK's REASON, who breaks, its FENCEKEY */
    char *evicted;                 /* whom a BREAK evicted (dlock_break_info.holder) */
} ops_args;

static void ops_args_free(void *p)
{
    ops_args *a = p;
    if (a != NULL) {
        free(a->name);
        free(a->reason);
        free(a->by);
        free(a->fence_key);
        free(a->evicted);
    }
    free(a);
}

static dd_job *ops_job(dd_conn *c, ops_args **a)
{
    dd_job *j = dd_job_new(c);
    *a = dd_job_args(j, sizeof **a, ops_args_free);
    return j;
}

static void done(dd_job *j)
{
    dd_job_answer(j);
    dd_job_free(j);
}

/* ---- LOCKS [PATTERN] ------------------------------------------------------------------ */

static const char *kind_word(int kind)
{
    return kind == DLOCK_KIND_SEMAPHORE ? "semaphore"
           : kind == DLOCK_KIND_SHARED  ? "shared"
                                        : "exclusive";
}

/* One name as a flat field/value array, the fields of `dlock list --json`. */
static void reply_listed(dd_buf *b, const dlock_listed *l)
{
    dd_reply_array(b, 16);
    dd_reply_cstr(b, "name");
    dd_reply_cstr(b, l->name);
    dd_reply_cstr(b, "kind");
    dd_reply_cstr(b, kind_word(l->kind));
    dd_reply_cstr(b, "holders");
    dd_reply_array(b, (size_t)l->nlisted);
    for (int i = 0; i < l->nlisted; i++) {
        const dlock_holder *h = &l->holders[i];
        dd_reply_array(b, 4);
        dd_reply_cstr(b, "holder");
        dd_reply_bulk(b, h->description, strnlen(h->description, sizeof h->description));
        dd_reply_cstr(b, "remaining_ms");
        dd_reply_int(b, h->remaining_ms);
    }
    dd_reply_cstr(b, "nholders");
    dd_reply_int(b, l->nholders);
    dd_reply_cstr(b, "permits");
    dd_reply_int(b, l->permits);
    dd_reply_cstr(b, "remaining_ms");
    dd_reply_int(b, l->remaining_ms);
    dd_reply_cstr(b, "fence");
    dd_reply_int(b, (long long)l->fence);
    dd_reply_cstr(b, "waiters");
    dd_reply_int(b, l->waiters);
}

static void locks_work(dd_job *j)
{
    ops_args *a = j->args;
    dlock_lister *it;
    int rc = dlock_list(dd_srv.client, a->name, &it);
    if (rc != DLOCK_OK) {
        dd_reply_dlock_error(&j->reply, rc);
        return;
    }
    /* The count comes first in RESP: the rows are made apart, then prefixed. */
    dd_buf rows = {0};
    size_t n = 0;
    const dlock_listed *l;
    while ((rc = dlock_list_next(it, &l)) == DLOCK_OK && l != NULL) {
        if (rows.len > LOCKS_REPLY_MAX) {
            /* A reply the client could not take in (past DD_OUT_HARD it would be closed,
             * and its session locks released with it): say so rather than send part. */
            dlock_list_free(it);
            dd_buf_free(&rows);
            dd_reply_error(&j->reply,
                           "ERR LOCKS: more than %zu names match, over %d MiB: narrow the "
                           "pattern, or list with dlock list",
                           n, LOCKS_REPLY_MAX >> 20);
            return;
        }
        reply_listed(&rows, l);
        n++;
    }
    dlock_list_free(it);
    if (rc != DLOCK_OK) {
        dd_buf_free(&rows);
        dd_reply_dlock_error(&j->reply, rc);
        return;
    }
    dd_reply_array(&j->reply, n);
    dd_buf_append(&j->reply, rows.p, rows.len);
    dd_buf_free(&rows);
}

static void dd_cmd_locks(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    if (argc > 2) {
        dd_reply_error(out, "ERR syntax error: LOCKS [PATTERN]");
        return;
    }
    ops_args *a;
    dd_job *j = ops_job(c, &a);
    a->name = argc == 2 ? dd_arg_dup(&argv[1], "pattern", DLOCK_NAME_MAX, out) : strdup("*");
    if (a->name == NULL) {
        if (argc < 2)
            abort(); /* strdup of a literal: only out of memory */
        dd_job_free(j);
        return;
    }
    j->work = locks_work;
    j->done = done;
    dd_job_queue(j);
}

/* ---- BREAK name [REASON text] [FENCEKEY key] ------------------------------------------- */

static void break_work(dd_job *j)
{
    ops_args *a = j->args;
    dlock_break_opts o;
    memset(&o, 0, sizeof o);
    o.reason = a->reason;
    o.by = a->by;
    o.fence_key = a->fence_key;
    dlock_break_info b;
    int rc = dlock_break(dd_srv.client, a->name, &o, &b);
    if (rc != DLOCK_OK) {
        dd_reply_dlock_error(&j->reply, rc);
        return;
    }
    if (!b.broken) {
        dd_reply_nil(&j->reply); /* nobody held it */
        return;
    }
    a->evicted = strdup(b.holder);
    if (a->evicted == NULL)
        abort();
    dd_buf *r = &j->reply;
    dd_reply_array(r, 10);
    dd_reply_cstr(r, "holder");
    dd_reply_cstr(r, b.holder);
    dd_reply_cstr(r, "fence");
    dd_reply_int(r, (long long)b.fence);
    dd_reply_cstr(r, "at_ms");
    dd_reply_int(r, b.at_ms);
    dd_reply_cstr(r, "by");
    dd_reply_cstr(r, b.by);
    dd_reply_cstr(r, "reason");
    dd_reply_cstr(r, b.reason);
}

/* On the loop: the break answered, and the session locks of this dlockd's clients that
 * it evicted end their connections now, not at their next renewal. */
static void break_done(dd_job *j)
{
    ops_args *a = j->args;
    char *evicted = a->evicted;
    a->evicted = NULL;
    done(j);
    if (evicted != NULL)
        dd_loss_broken(evicted);
    free(evicted);
}

static void dd_cmd_break(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    ops_args *a;
    dd_job *j = ops_job(c, &a);
    a->name = dd_arg_dup(&argv[1], "lock name", DLOCK_NAME_MAX, out);
    bool ok = a->name != NULL;
    for (size_t i = 2; ok && i < argc; i += 2) {
        char **into = dd_arg_is(&argv[i], "REASON")     ? &a->reason
                      : dd_arg_is(&argv[i], "FENCEKEY") ? &a->fence_key
                                                        : NULL;
        if (into == NULL || i + 1 == argc || *into != NULL) {
            dd_reply_error(out, "ERR syntax error: BREAK name [REASON text] [FENCEKEY key]");
            ok = false;
            break;
        }
        *into = dd_arg_dup(&argv[i + 1], into == &a->reason ? "REASON" : "FENCEKEY",
                           into == &a->reason ? REASON_MAX : DLOCK_NAME_MAX, out);
        ok = *into != NULL;
    }
    if (!ok) {
        dd_job_free(j);
        return;
    }
    /* Who broke it, in the record: the admin connection, as its locks name it. */
    a->by = dd_holder_label(c, "admin");
    j->work = break_work;
    j->done = break_done;
    dd_job_queue(j);
}

void dd_operators_register(void)
{
    static const dd_command_def commands[] = {
        {"locks", -1, false, false, false, dd_cmd_locks},
        {"break", -2, false, true, false, dd_cmd_break},
    };
    dd_commands_add(commands, sizeof commands / sizeof commands[0]);
}
