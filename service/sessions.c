/*
 * sessions.c: the session locks of a connection, and their release at its end.
 *
 * A session lock (LOCK without DETACHED, a SEM ACQUIRE's permit, an ELECT's
 * leadership) is held while its connection is open: the library renews it, and the
 * connection's close releases it on the pool. The list of a connection's sessions is
 * the locks module's state in it, in the slot it took at the start (c->mod[slot]); the
 * core knows it only through the hooks registered here: a connection that closes, or
 * is told to end, has its sessions released.
 */
#include "dlockd.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Which of every connection's mod[] holds its sessions: taken once, at the start
 * (dd_sessions_register), and only read after. */
static int slot = -1;

dd_session *dd_conn_sessions(const dd_conn *c)
{
    return c->mod[slot];
}

static void set_sessions(dd_conn *c, dd_session *list)
{
    c->mod[slot] = list;
}

void dd_session_link(dd_conn *c, dd_session *s)
{
    s->next = dd_conn_sessions(c);
    set_sessions(c, s);
    account(s, +1);
}

static bool named(const dd_session *s, const char *name, size_t len)
{
    return s->name_len == len && memcmp(s->name, name, len) == 0;
}

dd_session *dd_session_find(dd_conn *c, const char *name, size_t len, const char *token)
{
    for (dd_session *s = dd_conn_sessions(c); s != NULL; s = s->next)
        if (named(s, name, len) && strcmp(s->token, token) == 0)
            return s;
    return NULL;
}

static dd_held dd_session_held(dd_conn *c, const char *name, size_t len)
{
    dd_held h = {0, 0, 0};
    for (dd_session *s = dd_conn_sessions(c); s != NULL; s = s->next) {
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
    dd_session *list = dd_conn_sessions(c);
    for (dd_session **pp = &list; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            s->next = NULL;
            set_sessions(c, list);
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
dd_session *dd_sessions_take_lost(dd_conn *c, const char *name)
{
    dd_session *lost = NULL, *list = dd_conn_sessions(c);
    size_t len = strlen(name);
    for (dd_session **pp = &list; *pp != NULL;) {
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
    set_sessions(c, list);
    return lost;
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

/* ---- a connection's end ------------------------------------------------------------- */

/* On the pool: the sessions taken off an ending connection, released. */
static void release_all_work(dd_job *j)
{
    dd_sessions_release(j->args);
    j->args = NULL;
}

static void release_all_done(dd_job *j)
{
    dd_job_free(j);
}

/* The connection's closed and ending hooks: its session locks are released on the
 * pool, now unless a job in flight may be using a session's handle (then the close, or
 * that job's end after it, comes back here). */
static void release_sessions(dd_conn *c)
{
    dd_session *list = dd_conn_sessions(c);
    if (c->jobs > 0 || list == NULL)
        return;
    bool busy = c->busy;
    dd_job *j = dd_job_new(c);
    j->args = list; /* a list of sessions: release_all_work frees each */
    for (dd_session *s = list; s != NULL; s = s->next) {
        account(s, -1);
        atomic_fetch_add(&dd_srv.releasing, 1);
    }
    set_sessions(c, NULL);
    j->work = release_all_work;
    j->done = release_all_done;
    dd_job_queue(j);
    c->busy = busy; /* no command waits behind a release of an ending connection */
}

static const dd_conn_hooks hooks = {
    .closing = NULL,
    .closed = release_sessions,
    .ending = release_sessions,
};

void dd_sessions_register(void)
{
    slot = dd_conn_slot_new();
    dd_conn_hooks_add(&hooks);
}
