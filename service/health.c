/*
 * health.c: do the lock servers answer? A thread of its own asks every one of them
 * PING (dlock_ping) every INTERVAL_MS and hands the answers to the loop
 * (uv_async_send). The loop logs each server's changes, once each ("lock server URL
 * down: REASON", "lock server URL up"), and keeps the last answers for /health and
 * /metrics (metrics.c), which it serves without a lock.
 *
 * dlock_ping asks over the library client's pooled connections, those a LOCK uses, so
 * whatever would fail a LOCK fails the check with the same reason: a refused password,
 * a certificate that cannot be verified, a refused connection, a server that does not
 * answer within --timeout.
 *
 * Why a thread rather than libuv's pool: a burst of LOCKs against slow servers can fill
 * every pool thread for as long as the servers are slow, and a check queued behind
 * them would say nothing for exactly that long. The thread costs one stack and a
 * connection a lock server.
 *
 * A server down at the first check is logged down; one up at the first check is not
 * logged (a server that answers needs no line). Until the first check is in, /health
 * answers 503: nothing is known yet.
 */
#include "dlockd.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define INTERVAL_MS 500 /* a check of every lock server this often */

/* A lock server as the last check found it. */
typedef struct server {
    char url[256]; /* without its password */
    bool up;       /* it answered PING */
    char why[300]; /* when down: the library's reason */
} server;

static struct {
    /* Shared with the thread, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cond; /* on CLOCK_MONOTONIC: stop, or the next check's time */
    bool stop;
    bool fresh;                /* a check the loop has not taken yet */
    dlock_server_facts *taken; /* its answers, dd_srv.nservers of them */
    /* The thread's own. */
    dlock_server_facts *asking;
    pthread_t thread;
    bool running;
    /* The loop's. */
    uv_async_t async;
    bool async_on;
    dlock_server_facts *seen; /* the check being read, copied out of taken */
    server *servers;
    bool checked; /* servers holds a check */
    int up;
} hc = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* ---- the thread --------------------------------------------------------------------- */

static void deadline_after(struct timespec *ts, int64_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts->tv_nsec >= 1000000000) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000;
    }
}

static void check_once(void)
{
    int n = dd_srv.nservers;
    int rc = dlock_ping(dd_srv.client, hc.asking, n);
    if (rc != DLOCK_OK) {
        /* Nothing was asked (out of memory): every server counts as not answering,
         * with the call's reason. */
        for (int i = 0; i < n; i++) {
            hc.asking[i].error = rc;
            snprintf(hc.asking[i].detail, sizeof hc.asking[i].detail, "%s", dlock_errmsg());
        }
    }
    pthread_mutex_lock(&hc.mu);
    memcpy(hc.taken, hc.asking, (size_t)n * sizeof *hc.taken);
    hc.fresh = true;
    pthread_mutex_unlock(&hc.mu);
    uv_async_send(&hc.async);
}

static void *run(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&hc.mu);
    while (!hc.stop) {
        pthread_mutex_unlock(&hc.mu);
        /* The next check is due an interval after this one started: a check slowed by
         * a server that does not answer does not push the others back. */
        struct timespec next;
        deadline_after(&next, INTERVAL_MS);
        check_once();
        pthread_mutex_lock(&hc.mu);
        while (!hc.stop && pthread_cond_timedwait(&hc.cond, &hc.mu, &next) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&hc.mu);
    return NULL;
}

/* ---- the loop ----------------------------------------------------------------------- */

static void on_checked(uv_async_t *h)
{
    (void)h;
    int n = dd_srv.nservers;
    pthread_mutex_lock(&hc.mu);
    bool fresh = hc.fresh;
    hc.fresh = false;
    if (fresh)
        memcpy(hc.seen, hc.taken, (size_t)n * sizeof *hc.seen);
    pthread_mutex_unlock(&hc.mu);
    if (!fresh)
        return; /* uv_async_send coalesces: an earlier wake-up took this check */
    int up = 0;
    for (int i = 0; i < n; i++) {
        const dlock_server_facts *f = &hc.seen[i];
        server *s = &hc.servers[i];
        /* The URL as the library shows it, without its password (a call that failed
         * before asking leaves it empty). */
        _Static_assert(sizeof s->url == sizeof f->server, "a URL fits");
        if (f->server[0] != '\0')
            memcpy(s->url, f->server, sizeof s->url);
        bool was_up = hc.checked ? s->up : true; /* the first check logs only a down */
        /* dlockd short of descriptors learns nothing of the server: it stays as it was. */
        if (f->error != DLOCK_OK && dd_out_of_descriptors("a health check", f->detail)) {
            s->up = was_up;
            up += s->up;
            continue;
        }
        s->up = f->error == DLOCK_OK;
        up += s->up;
        if (s->up) {
            s->why[0] = '\0';
        } else if (f->detail[0] != '\0') {
            /* A PING changes nothing: what a lost reply may have done is no reason. */
            const char *unknown = strstr(f->detail, " (outcome unknown");
            int len = unknown != NULL ? (int)(unknown - f->detail) : (int)strlen(f->detail);
            snprintf(s->why, sizeof s->why, "%.*s", len, f->detail);
        } else {
            snprintf(s->why, sizeof s->why, "%s", dlock_strerror(f->error));
        }
        if (s->up && !was_up)
            dd_log("lock server %s up", s->url);
        else if (!s->up && was_up)
            dd_log("lock server %s down: %s", s->url, s->why);
    }
    hc.up = up;
    hc.checked = true;
}

int dd_health_start(void)
{
    int n = dd_srv.nservers;
    hc.taken = calloc((size_t)n, sizeof *hc.taken);
    hc.asking = calloc((size_t)n, sizeof *hc.asking);
    hc.seen = calloc((size_t)n, sizeof *hc.seen);
    hc.servers = calloc((size_t)n, sizeof *hc.servers);
    if (hc.taken == NULL || hc.asking == NULL || hc.seen == NULL || hc.servers == NULL) {
        dd_log("health checks: out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++)
        snprintf(hc.servers[i].url, sizeof hc.servers[i].url, "lock server %d", i + 1);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&hc.cond, &ca);
    pthread_condattr_destroy(&ca);
    uv_async_init(dd_srv.loop, &hc.async, on_checked);
    hc.async_on = true;
    /* Signals stay the loop's: the thread starts with every one blocked. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&hc.thread, NULL, run, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        dd_log("health checks: cannot start their thread: %s", strerror(rc));
        return -1;
    }
    hc.running = true;
    return 0;
}

void dd_health_stop(void)
{
    if (hc.running) {
        /* The check in flight ends within the servers' deadline (--timeout, plus the
         * connect timeout for a server being reconnected). */
        pthread_mutex_lock(&hc.mu);
        hc.stop = true;
        pthread_cond_signal(&hc.cond);
        pthread_mutex_unlock(&hc.mu);
        pthread_join(hc.thread, NULL);
        hc.running = false;
    }
    if (hc.async_on) {
        uv_close((uv_handle_t *)&hc.async, NULL);
        hc.async_on = false;
    }
    /* No check can come in any more: the thread is gone, its wake-up closed. */
    hc.checked = false;
    free(hc.taken);
    free(hc.asking);
    free(hc.seen);
    free(hc.servers);
    hc.taken = hc.asking = hc.seen = NULL;
    hc.servers = NULL;
}

/* ---- what the loop answers ---------------------------------------------------------- */

static int needed(void)
{
    return dd_srv.nservers / 2 + 1;
}

static bool quorum(void)
{
    return hc.checked && hc.up >= needed();
}

unsigned dd_health_report(dd_buf *b)
{
    unsigned status = 200;
    if (dd_srv.draining || dd_srv.stopping) {
        /* A load balancer's check takes a stopping dlockd out before it closes. */
        dd_buf_printf(b, "dlockd is stopping\n");
        status = 503;
    } else if (!hc.checked) {
        dd_buf_printf(b, "the lock servers were not checked yet\n");
        return 503;
    } else if (quorum()) {
        dd_buf_printf(b, "OK\n");
    } else {
        dd_buf_printf(b, "no quorum: %d of %d lock servers answered, %d needed\n", hc.up,
                      dd_srv.nservers, needed());
        status = 503;
    }
    /* Those down, whatever the status: a quorum may stand without them. */
    for (int i = 0; hc.checked && i < dd_srv.nservers; i++) {
        if (hc.servers[i].up)
            continue;
        dd_buf_printf(b, "lock server ");
        dd_buf_append(b, hc.servers[i].url, strlen(hc.servers[i].url));
        dd_buf_printf(b, " down: ");
        dd_buf_append(b, hc.servers[i].why, strlen(hc.servers[i].why));
        dd_buf_printf(b, "\n");
    }
    return status;
}

/* A label's value as Prometheus's text format wants it: backslash, double quote and
 * line feed escaped. */
static void put_label_value(dd_buf *b, const char *v)
{
    for (; *v != '\0'; v++) {
        const char *esc = *v == '\\' ? "\\\\" : *v == '"' ? "\\\"" : *v == '\n' ? "\\n" : NULL;
        if (esc != NULL)
            dd_buf_append(b, esc, 2);
        else
            dd_buf_append(b, v, 1);
    }
}

void dd_health_metrics(dd_buf *b)
{
    /* No sample of a server before the first check: nothing is known of it yet. */
    dd_buf_printf(b, "# HELP dlockd_server_up Whether the lock server answered the last "
                     "health check's PING (1) or not (0).\n# TYPE dlockd_server_up gauge\n");
    for (int i = 0; hc.checked && i < dd_srv.nservers; i++) {
        dd_buf_printf(b, "dlockd_server_up{server=\"");
        put_label_value(b, hc.servers[i].url);
        dd_buf_printf(b, "\"} %d\n", hc.servers[i].up ? 1 : 0);
    }
    dd_buf_printf(b,
                  "# HELP dlockd_quorum_up Whether a quorum of the lock servers answered "
                  "the last health check (1) or not (0).\n# TYPE dlockd_quorum_up gauge\n"
                  "dlockd_quorum_up %d\n",
                  quorum() ? 1 : 0);
}
