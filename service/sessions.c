/*
 * sessions.c: the session locks of a connection, and their release at its end.
 *
 * A session lock (LOCK without DETACHED, a SEM ACQUIRE's permit, an ELECT's
 * leadership) is held while its connection is open: the library renews it, and the
 * connection's close releases it, in steps on the loop as an UNLOCK releases. The
 * list of a connection's sessions is the locks module's state in it, in the slot it
 * took at the start (c->mod[slot]); the core knows it only through the hooks registered
 * here: a connection that closes, or is told to end, has its sessions released.
 */
#include "dlockd.h"

#include <poll.h>
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
    dd_held h = {0, 0, 0, 0};
    for (dd_session *s = dd_conn_sessions(c); s != NULL; s = s->next) {
        if (!named(s, name, len) || atomic_load(&s->lost))
            continue;
        if (s->shared)
            h.shared++;
        else
            h.exclusive++;
        if (s->permit)
            h.permits++;
        if (s->leader)
            h.leads++;
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

/* What a session's release came to, on the thread that took its last step (whose
 * dlock_errmsg tells why it failed): counted, a failure's reason kept for the summary
 * at the stop. */
static void count_release(const dd_session *s, int rc)
{
    if (atomic_load(&s->lost)) {
        /* found lost by the renewal: counted there (session_locks_lost) */
    } else if (rc == DLOCK_OK) {
        atomic_fetch_add(&dd_srv.stats.released, 1);
    } else {
        atomic_fetch_add(&dd_srv.stats.release_failed, 1);
        pthread_mutex_lock(&release_mu);
        snprintf(release_error, sizeof release_error, "%s: %s", dlock_strerror(rc), dlock_errmsg());
        pthread_mutex_unlock(&release_mu);
    }
}

/* A session's end: a leader's tells its observers first (dlock_resign). */
static int end_session(dd_session *s)
{
    int rc = (s->leader ? dlock_resign : dlock_release)(s->lock);
    s->lock = NULL;
    count_release(s, rc);
    return rc;
}

void dd_sessions_release(dd_session *list)
{
    while (list != NULL) {
        dd_session *s = list;
        list = s->next;
        end_session(s);
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
    else if (permits == 0 && held.leads > 0)
        dd_reply_error(out, "ERR this connection already leads '%.*s' (RESIGN it first)", shown,
                       name->p);
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

/* A session lock of a connection that ended, released in steps on the loop as an
 * UNLOCK is (its round rides the pipes), or on the pool when a step would block (its
 * renewal in flight at that moment, lock servers not pipelined) or when it has no step
 * form (a leader's resignation, which tells its observers). It keeps a reference to
 * the connection until it is over, so that a stop waits for it. */
typedef struct ending {
    dd_conn *conn;
    dd_session *s;
    dlock_pending *p; /* the release in steps; NULL: one blocking call on the pool */
    uv_timer_t timer; /* its due time, between steps on the loop */
    uv_work_t work;
} ending;

static void ending_step(ending *e);

static void ending_closed(uv_handle_t *h)
{
    ending *e = h->data;
    dd_conn_unref(e->conn);
    free(e);
}

/* On the loop: the release is over (counted where its last step ran). */
static void ending_over(ending *e)
{
    dlock_pending_free(e->p);
    e->p = NULL;
    atomic_fetch_sub(&dd_srv.releasing, 1);
    dd_session_free(e->s);
    e->s = NULL;
    uv_close((uv_handle_t *)&e->timer, ending_closed);
}

/* On the pool: the rest of the release, blocking. */
static void ending_work(uv_work_t *w)
{
    ending *e = w->data;
    if (e->p == NULL) {
        end_session(e->s);
        return;
    }
    int rc;
    while ((rc = dlock_pending_step(e->p, NULL)) == DLOCK_ERR_AGAIN) {
        struct pollfd pf = {.fd = dlock_pending_fd(e->p), .events = POLLIN};
        int64_t due = dlock_pending_due_ms(e->p);
        poll(&pf, pf.fd >= 0 ? 1 : 0, (int)(due > 1000 ? 1000 : due));
    }
    count_release(e->s, rc);
}

static void ending_worked(uv_work_t *w, int status)
{
    (void)status; /* never canceled */
    ending_over(w->data);
}

static void ending_to_pool(ending *e)
{
    /* The pool's thread alone steps it from now on: the pump must not. */
    if (e->p != NULL)
        dlock_pending_notify(e->p, NULL, NULL);
    dd_srv.stats.pool_jobs++;
    e->work.data = e;
    if (uv_queue_work(dd_srv.loop, &e->work, ending_work, ending_worked) < 0)
        abort(); /* only for invalid arguments: a bug */
}

/* The pipes' pump: the round in flight has its replies. */
static void ending_told(void *arg)
{
    ending *e = arg;
    uv_timer_stop(&e->timer);
    ending_step(e);
}

static void ending_due(uv_timer_t *t)
{
    ending_step(t->data);
}

static void ending_step(ending *e)
{
    int rc = dlock_pending_step_nowait(e->p, NULL);
    if (rc == DLOCK_ERR_WOULDBLOCK || (rc == DLOCK_ERR_AGAIN && dlock_pending_fd(e->p) >= 0)) {
        /* A step that would block, or a round off the pipes (its descriptor, which
         * nothing here watches): the rest on the pool. */
        ending_to_pool(e);
    } else if (rc == DLOCK_ERR_AGAIN) {
        int64_t due = dlock_pending_due_ms(e->p);
        uv_timer_start(&e->timer, ending_due, (uint64_t)(due > 0 ? due : 0), 0);
    } else {
        count_release(e->s, rc);
        ending_over(e);
    }
}

static void end_one(dd_conn *c, dd_session *s)
{
    ending *e = calloc(1, sizeof *e);
    if (e == NULL)
        abort();
    e->conn = c;
    e->s = s;
    c->refs++;
    uv_timer_init(dd_srv.loop, &e->timer);
    e->timer.data = e;
    if (s->leader || !dd_srv.piped) {
        ending_to_pool(e);
        return;
    }
    /* The handle belongs to the pending from here on, whatever happens. */
    int rc = dlock_release_start(s->lock, &e->p);
    s->lock = NULL;
    if (rc != DLOCK_OK) {
        count_release(s, rc);
        ending_over(e);
        return;
    }
    dlock_pending_notify(e->p, ending_told, e);
    ending_step(e);
}

/* The connection's closed and ending hooks: its session locks are released, now
 * unless a job in flight may be using a session's handle (then the close, or that
 * job's end after it, comes back here). */
static void release_sessions(dd_conn *c)
{
    dd_session *list = dd_conn_sessions(c);
    if (c->jobs > 0 || list == NULL)
        return;
    set_sessions(c, NULL);
    while (list != NULL) {
        dd_session *s = list;
        list = s->next;
        s->next = NULL;
        account(s, -1);
        atomic_fetch_add(&dd_srv.releasing, 1);
        end_one(c, s);
    }
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
