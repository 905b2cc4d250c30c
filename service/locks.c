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

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- sessions ---------------------------------------------------------------------- */

/* The one place a session joins (+1) or leaves (-1) its connection: where its hold
 * starts and ends for the metrics too. */
static void account(dd_session *s, int d)
{
    dd_srv.session_locks += d;
    if (s->permit)
        dd_srv.session_permits += d;
    dd_metrics_session(s, d);
    if (d < 0)
        dd_drain_check();
}

static bool named(const dd_session *s, const char *name, size_t len)
{
    return s->name_len == len && memcmp(s->name, name, len) == 0;
}

dd_session *dd_session_find(dd_conn *c, const char *name, size_t len, const char *token)
{
    for (dd_session *s = c->sessions; s != NULL; s = s->next)
        if (named(s, name, len) && strcmp(s->token, token) == 0)
            return s;
    return NULL;
}

static dd_held dd_session_held(dd_conn *c, const char *name, size_t len)
{
    dd_held h = {0, 0, 0};
    for (dd_session *s = c->sessions; s != NULL; s = s->next) {
        if (!named(s, name, len) || atomic_load(&s->lost))
            continue;
        if (s->shared)
            h.shared++;
        else
            h.exclusive++;
        if (s->permit)
            h.permits++;
    }
    return h;
}

void dd_session_unlink(dd_conn *c, dd_session *s)
{
    for (dd_session **pp = &c->sessions; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            s->next = NULL;
            account(s, -1);
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

/* The last reason a release failed, for the summary at the stop (pool threads write
 * it). */
static pthread_mutex_t release_mu = PTHREAD_MUTEX_INITIALIZER;
static char release_error[256];

void dd_sessions_release(dd_session *list)
{
    while (list != NULL) {
        dd_session *s = list;
        list = s->next;
        /* A leader's end tells its observers first (dlock_resign). */
        int rc = (s->leader ? dlock_resign : dlock_release)(s->lock);
        if (atomic_load(&s->lost)) {
            /* found lost by the renewal: counted there (session_locks_lost) */
        } else if (rc == DLOCK_OK) {
            atomic_fetch_add(&dd_srv.stats.released, 1);
        } else {
            atomic_fetch_add(&dd_srv.stats.release_failed, 1);
            pthread_mutex_lock(&release_mu);
            snprintf(release_error, sizeof release_error, "%s: %s", dlock_strerror(rc),
                     dlock_errmsg());
            pthread_mutex_unlock(&release_mu);
        }
        atomic_fetch_sub(&dd_srv.releasing, 1);
        dd_session_free(s);
    }
}

/* The counts when the stop began: its summary tells the stop's releases, not those of
 * every client that closed in the process's life. */
static unsigned long long released_before, failed_before;

void dd_release_mark(void)
{
    released_before = atomic_load(&dd_srv.stats.released);
    failed_before = atomic_load(&dd_srv.stats.release_failed);
    pthread_mutex_lock(&release_mu);
    release_error[0] = '\0';
    pthread_mutex_unlock(&release_mu);
}

unsigned long long dd_released_since_mark(void)
{
    return atomic_load(&dd_srv.stats.released) - released_before;
}

void dd_release_report(void)
{
    unsigned long long ok = dd_released_since_mark();
    unsigned long long failed = atomic_load(&dd_srv.stats.release_failed) - failed_before;
    pthread_mutex_lock(&release_mu);
    if (failed == 0)
        dd_log("released %llu session locks at their clients' close", ok);
    else
        dd_log("released %llu session locks at their clients' close; %llu could not be "
               "released (last: %s): they end with their leases",
               ok, failed, release_error);
    pthread_mutex_unlock(&release_mu);
}

/* The sessions of a name that the renewal found lost, off the connection's list: they
 * are released before the name is taken again. */
static dd_session *take_lost(dd_conn *c, const char *name)
{
    dd_session *lost = NULL;
    size_t len = strlen(name);
    for (dd_session **pp = &c->sessions; *pp != NULL;) {
        dd_session *s = *pp;
        if (named(s, name, len) && atomic_load(&s->lost)) {
            *pp = s->next;
            account(s, -1);
            atomic_fetch_add(&dd_srv.releasing, 1);
            s->next = lost;
            lost = s;
        } else {
            pp = &s->next;
        }
    }
    return lost;
}

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
}

static void lock_settle(dd_job *j)
{
    dd_conn *c = j->conn;
    if (j->rc == DLOCK_OK) {
        dd_metrics_granted(j);
        if (j->permits > 0)
            dd_srv.stats.permits_acquired++;
        else
            dd_srv.stats.locks_acquired++;
        if (!j->detached) {
            j->sess->next = c->sessions;
            c->sessions = j->sess;
            account(j->sess, +1);
            dd_maxhold_start(j->sess, j->maxhold_ms);
            /* Found lost before it was linked: on_lost's wake-up saw nothing. */
            if (atomic_load(&j->sess->lost))
                dd_loss_notify();
            j->sess = NULL;
        }
    } else if (j->rc == DLOCK_ERR_BUSY) {
        if (j->permits > 0)
            dd_srv.stats.permits_not_acquired++;
        else
            dd_srv.stats.locks_not_acquired++;
    }
}

/* On the pool: a session lock granted to a connection that has closed. */
static void lock_undo(dd_job *j)
{
    if (j->sess != NULL && j->sess->lock != NULL) {
        (j->sess->leader ? dlock_resign : dlock_release)(j->sess->lock);
        j->sess->lock = NULL;
    }
}

static void lock_drop(dd_job *j)
{
    dd_session_free(j->sess);
    j->sess = NULL;
}

static const dd_steps lock_steps = {
    .finish = lock_finish,
    .settle = lock_settle,
    .undo = lock_undo,
    .drop = lock_drop,
    .parked = &dd_srv.parked_locks,
    .waits = &dd_srv.stats.waits,
};

/* ---- LOCK --------------------------------------------------------------------------- */

bool dd_lock_options(resp_arg *argv, size_t argc, size_t first, const char *cmd, dd_job *j,
                     dd_buf *out)
{
    /* Options in any order, each at most once; TTL, WAIT, LABEL, MAXHOLD and VALUE take
     * a value. Which a command takes: a permit is a shared holder already (SHARED is
     * LOCK's alone); a leadership (ELECT) is a session's, meant to last, with a value. */
    enum { TTL, WAIT, DETACHED, FAIR, LABEL, MAXHOLD, SHARED, VALUE, NOPTS };
    static const char *const names[NOPTS] = {"TTL",   "WAIT",    "DETACHED", "FAIR",
                                             "LABEL", "MAXHOLD", "SHARED",   "VALUE"};
    unsigned takes = j->elect ? 1u << TTL | 1u << WAIT | 1u << VALUE | 1u << LABEL | 1u << FAIR
                     : j->permits > 0 ? (1u << SHARED) - 1
                                      : (1u << VALUE) - 1;
    const char *listed = j->elect ? "TTL ms, WAIT ms, VALUE v, LABEL text, FAIR"
                         : j->permits > 0
                             ? "TTL ms, WAIT ms, DETACHED, FAIR, LABEL text, MAXHOLD ms"
                             : "TTL ms, WAIT ms, DETACHED, FAIR, SHARED, LABEL text, MAXHOLD ms";
    /* --max-hold bounds the hold of a lock, a section of work, not a leadership. */
    j->maxhold_ms = j->elect ? 0 : dd_srv.max_hold_ms;
    bool seen[NOPTS] = {false};
    for (size_t i = first; i < argc; i++) {
        int opt = 0;
        while (opt < NOPTS && !((takes >> opt & 1u) && dd_arg_is(&argv[i], names[opt])))
            opt++;
        if (opt == NOPTS) {
            dd_reply_error(out, "ERR unknown %s option '%.*s' (%s)", cmd,
                           (int)(argv[i].len > 64 ? 64 : argv[i].len), argv[i].p, listed);
            return false;
        }
        if (seen[opt]) {
            dd_reply_error(out, "ERR %s option %s given twice", cmd, names[opt]);
            return false;
        }
        seen[opt] = true;
        if ((opt == TTL || opt == WAIT || opt == LABEL || opt == MAXHOLD || opt == VALUE) &&
            i + 1 >= argc) {
            dd_reply_error(out, "ERR %s option %s needs a value", cmd, names[opt]);
            return false;
        }
        switch (opt) {
        case TTL:
            if (!dd_arg_ttl(&argv[++i], &j->ttl_ms, out))
                return false;
            break;
        case WAIT:
            if (!dd_arg_int(&argv[++i], -1, DLOCK_TTL_MAX_MS, &j->wait_ms)) {
                dd_reply_error(out,
                               "ERR WAIT must be -1 (forever) or an integer from 0 to %d "
                               "(milliseconds)",
                               DLOCK_TTL_MAX_MS);
                return false;
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
        case MAXHOLD:
            if (!dd_arg_int(&argv[++i], 0, DLOCK_TTL_MAX_MS, &j->maxhold_ms)) {
                dd_reply_error(out,
                               "ERR MAXHOLD must be an integer from 0 (no limit) to %d "
                               "(milliseconds)",
                               DLOCK_TTL_MAX_MS);
                return false;
            }
            j->maxhold_given = true;
            break;
        case VALUE:
            if ((j->extra = dd_arg_value(&argv[++i], out)) == NULL)
                return false;
            break;
        default: /* LABEL */
            j->label = dd_arg_dup(&argv[++i], "LABEL", DLOCK_LABEL_MAX, out);
            if (j->label == NULL)
                return false;
            break;
        }
    }
    if (j->detached && j->maxhold_given) {
        dd_reply_error(out, "ERR MAXHOLD is for session locks: a DETACHED lock is never "
                            "renewed, and ends with its TTL");
        return false;
    }
    if (j->elect && j->ttl_ms < DD_SESSION_TTL_MIN_MS) {
        dd_reply_error(out,
                       "ERR TTL of a leadership must be at least %d ms, so that its renewal "
                       "keeps up on a loaded machine",
                       DD_SESSION_TTL_MIN_MS);
        return false;
    }
    if (!j->detached && j->ttl_ms < DD_SESSION_TTL_MIN_MS) {
        /* Refused, never raised: the client plans around the lease it asked for. */
        dd_reply_error(out,
                       "ERR TTL of a session lock must be at least %d ms, so that its renewal "
                       "keeps up on a loaded machine (a DETACHED lock may be as short as %d ms)",
                       DD_SESSION_TTL_MIN_MS, DLOCK_TTL_MIN_MS);
        return false;
    }
    return true;
}

bool dd_lock_start(dd_conn *c, dd_job *j, dd_buf *out)
{
    if (dd_drain_refuses(out))
        return false;
    if (!j->detached) {
        j->sess = calloc(1, sizeof *j->sess);
        if (j->sess == NULL || (j->sess->name = strdup(j->name)) == NULL)
            abort();
        j->sess->name_len = strlen(j->name);
        j->sess->permit = j->permits > 0;
        j->sess->leader = j->elect;
        /* The library makes a permit of K = 1 an exclusive lock. */
        j->sess->shared = j->shared || j->permits >= 2;
    }
    dlock_opts o;
    memset(&o, 0, sizeof o);
    o.ttl_ms = j->ttl_ms;
    o.wait_ms = j->wait_ms;
    o.fair = j->fair;
    o.shared = j->shared;
    /* Who holds it, as LOCKINFO and `dlock status` show: the client, where it connects
     * from and through which dlockd, a DETACHED lock's too (it outlives the connection,
     * and still says who took it). */
    char *label = dd_holder_label(c, j->label);
    free(j->label);
    j->label = label;
    o.label = j->label;
    o.label_is_holder = 1; /* the client's own name, not this dlockd's host:pid before it */
    if (!j->detached) {
        o.auto_renew = 1;
        o.on_lost = on_lost;
        o.on_lost_user = j->sess;
    }
    /* No I/O: the same checks as dlock_acquire, on the loop. A campaign (ELECT) is an
     * acquisition whose last step announces the leader's value. */
    dlock_elect_opts eo;
    memset(&eo, 0, sizeof eo);
    eo.lock = o;
    eo.value = j->extra;
    int rc = j->elect ? dlock_elect_start(dd_srv.client, j->name, &eo, &j->pending)
             : j->permits > 0
                 ? dlock_sem_acquire_start(dd_srv.client, j->name, j->permits, &o, &j->pending)
                 : dlock_acquire_start(dd_srv.client, j->name, &o, &j->pending);
    if (rc != DLOCK_OK) {
        dd_reply_dlock_error(out, rc);
        dd_session_free(j->sess);
        j->sess = NULL;
        return false;
    }
    j->release = take_lost(c, j->name);
    j->steps = &lock_steps;
    dd_step(j);
    return true;
}

bool dd_would_wait_for_itself(dd_conn *c, const resp_arg *name, int64_t permits, dd_buf *out)
{
    dd_held held = dd_session_held(c, name->p, name->len);
    int shown = (int)(name->len > 128 ? 128 : name->len);
    /* The library is not reentrant: the call would wait for this connection's own lock
     * or permit until its lease ran out, which renewal never lets happen. A LOCK waits
     * for any holder; a SEM ACQUIRE of K for an exclusive one, or for K holders. */
    if (permits == 0 && held.permits > 0)
        dd_reply_error(out,
                       "ERR this connection already holds a permit of '%.*s' (SEM RELEASE it "
                       "first): a LOCK would wait for it",
                       shown, name->p);
    else if (permits == 0 && held.exclusive + held.shared > 0)
        dd_reply_error(out, "ERR this connection already holds lock '%.*s' (UNLOCK it first)",
                       shown, name->p);
    else if (permits > 0 && held.exclusive > 0)
        dd_reply_error(out,
                       "ERR this connection holds '%.*s' exclusively (UNLOCK it first): a SEM "
                       "ACQUIRE would wait for it",
                       shown, name->p);
    else if (permits > 0 && held.shared >= permits)
        dd_reply_error(out,
                       "ERR this connection already holds %d of the %lld holders '%.*s' admits "
                       "(its permits and SHARED locks; SEM RELEASE one first): a SEM ACQUIRE "
                       "would wait for them",
                       held.shared, (long long)permits, shown, name->p);
    else
        return false;
    return true;
}

void dd_cmd_lock(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    if (dd_would_wait_for_itself(c, &argv[1], 0, out))
        return;
    dd_job *j = dd_job_new(c);
    j->ttl_ms = DLOCK_TTL_DEFAULT_MS;
    if (!dd_lock_options(argv, argc, 2, "LOCK", j, out) ||
        (j->name = dd_arg_dup(&argv[1], "lock name", DLOCK_NAME_MAX, out)) == NULL ||
        !dd_lock_start(c, j, out))
        dd_job_free(j);
}

/* ---- a connection's end ------------------------------------------------------------- */

static void release_all_work(dd_job *j)
{
    dd_sessions_release(j->release);
    j->release = NULL;
}

static void release_all_done(dd_job *j)
{
    dd_job_free(j);
}

void dd_conn_release_sessions(dd_conn *c)
{
    /* A job in flight may be using a session's handle: the close releases them. */
    if (c->jobs > 0 || c->sessions == NULL)
        return;
    bool busy = c->busy;
    dd_job *j = dd_job_new(c);
    j->release = c->sessions;
    for (dd_session *s = c->sessions; s != NULL; s = s->next) {
        account(s, -1);
        atomic_fetch_add(&dd_srv.releasing, 1);
    }
    c->sessions = NULL;
    j->work = release_all_work;
    j->done = release_all_done;
    dd_job_queue(j);
    c->busy = busy; /* no command waits behind a release of an ending connection */
}

void dd_conn_release_all(dd_conn *c)
{
    /* A job in flight may be using a session's handle or the pending: its done
     * callback calls here again once it is over. */
    if (c->jobs > 0)
        return;
    dd_park_give_up(c);
    dd_conn_release_sessions(c);
}
