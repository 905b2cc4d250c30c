/*
 * metrics.c: dlockd's HTTP listener (--metrics-port): GET /metrics, the counters and
 * gauges of INFO and two histograms in Prometheus's text format (version 0.0.4), and
 * GET /health, whether a quorum of the lock servers answered the last check (health.c).
 *
 * HTTP is libmicrohttpd's to parse, not ours. It runs without a thread of its own: it
 * keeps its sockets in an epoll set (MHD_USE_EPOLL), the loop watches that set's
 * descriptor with a uv_poll_t and wakes at the time MHD_get_timeout gives with a
 * uv_timer_t, and either calls MHD_run, which serves what is ready without blocking.
 * So the handlers run on the loop thread and read dd_srv as every command does, with
 * no lock, and a scrape sees the counters of one instant.
 *
 * What it may cost is bounded: at most CONN_MAX connections at once, each closed after
 * TIMEOUT_S of silence, so a flood of scrapers holds a known number of descriptors
 * (main.c's fit_nofile keeps them), and a reply is built only for a whole request.
 *
 * The hot path pays a few increments: a LOCK's or SEM ACQUIRE's grant finds its wait's
 * bucket (a walk over a score of bounds), and a session lock that leaves its
 * connection finds its hold's. The histograms keep a count a bucket, not cumulative,
 * and are summed up at a scrape.
 */
#include "dlockd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NS_PER_S        UINT64_C(1000000000)
#define PROMETHEUS_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define TEXT_TYPE       "text/plain; charset=utf-8"
/* HTTP connections at once (scrapers, health checks): past it, new ones wait in the
 * listen backlog, so that a flood of them cannot take dlockd's descriptors. */
#define CONN_MAX 16
_Static_assert(DD_METRICS_FDS == CONN_MAX + 2, "fit_nofile keeps the socket, the epoll set, each");
/* An HTTP connection that says nothing for this long is closed. */
#define TIMEOUT_S 10
/* The longest the HTTP side sleeps (run_http says why it wakes at all). */
#define RECHECK_MS 1000

/* ---- histograms --------------------------------------------------------------------- */

#define HIST_MAX 20 /* bounds of a histogram, +Inf not counted */

typedef struct hist {
    const char *name, *help;
    uint64_t le_ns[HIST_MAX]; /* upper bounds, inclusive, rising */
    int nle;
    uint64_t bucket[HIST_MAX + 1]; /* observations in (le[i-1], le[i]]; the last: above all */
    uint64_t sum_ns, count;
} hist;

#define MS(x) ((uint64_t)(x)*UINT64_C(1000000))
#define S(x)  ((uint64_t)(x)*NS_PER_S)
/* A histogram's bounds, and how many there are. */
#define BOUNDS(...)                                                                                \
    .le_ns = {__VA_ARGS__}, .nle = (int)(sizeof((uint64_t[]){__VA_ARGS__}) / sizeof(uint64_t))

/* A LOCK served at once takes a round trip to the lock servers, under a millisecond
 * on a LAN; a waiter, as long as its holder holds. */
static hist wait_hist = {
    .name = "dlockd_lock_wait_seconds",
    .help = "Time from a LOCK's or SEM ACQUIRE's arrival to its grant (granted ones only).",
    BOUNDS(MS(1) / 2, MS(1), MS(5) / 2, MS(5), MS(10), MS(25), MS(50), MS(100), MS(250), MS(500),
           S(1), S(5) / 2, S(5), S(10), S(30), S(60), S(300)),
};
/* Session locks are held for a request's length or a job's. */
static hist hold_hist = {
    .name = "dlockd_lock_hold_seconds",
    .help = "How long a session lock or permit was held: from its grant until it left its "
            "connection (UNLOCK, the connection's close, found lost).",
    BOUNDS(MS(10), MS(50), MS(100), MS(500), S(1), S(5), S(10), S(30), S(60), S(300), S(900),
           S(3600), S(14400), S(86400)),
};

static void observe(hist *h, uint64_t ns)
{
    int i = 0;
    while (i < h->nle && ns > h->le_ns[i])
        i++;
    h->bucket[i]++;
    h->sum_ns += ns;
    h->count++;
}

void dd_metrics_granted(const dd_job *j)
{
    observe(&wait_hist, uv_hrtime() - j->arrived_ns);
}

void dd_metrics_session(dd_session *s, int d)
{
    if (d > 0)
        s->granted_ns = uv_hrtime();
    else if (s->granted_ns != 0)
        observe(&hold_hist, uv_hrtime() - s->granted_ns);
}

/* ---- the text format ---------------------------------------------------------------- */

/* Seconds in decimal, exactly: "0.0005", "2.5", "300". */
static void put_seconds(dd_buf *b, uint64_t ns)
{
    char frac[16];
    snprintf(frac, sizeof frac, "%09llu", (unsigned long long)(ns % NS_PER_S));
    size_t n = strlen(frac);
    while (n > 0 && frac[n - 1] == '0')
        n--;
    frac[n] = '\0';
    dd_buf_printf(b, "%llu%s%s", (unsigned long long)(ns / NS_PER_S), n > 0 ? "." : "", frac);
}

static void family(dd_buf *b, const char *name, const char *type, const char *help)
{
    dd_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample(dd_buf *b, const char *name, const char *type, const char *help,
                   unsigned long long v)
{
    family(b, name, type, help);
    dd_buf_printf(b, "%s %llu\n", name, v);
}

static void put_hist(dd_buf *b, const hist *h)
{
    family(b, h->name, "histogram", h->help);
    uint64_t below = 0;
    for (int i = 0; i < h->nle; i++) {
        below += h->bucket[i];
        dd_buf_printf(b, "%s_bucket{le=\"", h->name);
        put_seconds(b, h->le_ns[i]);
        dd_buf_printf(b, "\"} %llu\n", (unsigned long long)below);
    }
    dd_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum ", h->name, (unsigned long long)h->count,
                  h->name);
    put_seconds(b, h->sum_ns);
    dd_buf_printf(b, "\n%s_count %llu\n", h->name, (unsigned long long)h->count);
}

/* INFO's counters, each a counter of its own: a new one is a row. */
static const struct {
    const char *name, *help;
    size_t offset; /* of its uint64_t in dd_stats */
} counters[] = {
    {"dlockd_connections_received_total", "Connections accepted.",
     offsetof(dd_stats, connections_received)},
    {"dlockd_rejected_connections_total", "Connections refused past --maxclients.",
     offsetof(dd_stats, rejected_connections)},
    {"dlockd_commands_processed_total", "Commands run.", offsetof(dd_stats, commands_processed)},
    {"dlockd_locks_acquired_total", "LOCKs granted.", offsetof(dd_stats, locks_acquired)},
    {"dlockd_locks_not_acquired_total", "LOCKs answered nil: not acquired within WAIT.",
     offsetof(dd_stats, locks_not_acquired)},
    {"dlockd_permits_acquired_total", "SEM ACQUIREs granted.",
     offsetof(dd_stats, permits_acquired)},
    {"dlockd_permits_not_acquired_total", "SEM ACQUIREs answered nil.",
     offsetof(dd_stats, permits_not_acquired)},
    {"dlockd_waits_total", "LOCKs and SEM ACQUIREs that had to wait.", offsetof(dd_stats, waits)},
    {"dlockd_stock_reserved_total", "STOCK RESERVEs granted.", offsetof(dd_stats, stock_reserved)},
    {"dlockd_stock_not_reserved_total", "STOCK RESERVEs answered nil.",
     offsetof(dd_stats, stock_not_reserved)},
    {"dlockd_stock_waits_total", "STOCK RESERVEs that had to wait.",
     offsetof(dd_stats, stock_waits)},
    {"dlockd_stock_committed_total", "STOCK COMMITs that sold a reservation.",
     offsetof(dd_stats, stock_committed)},
    {"dlockd_stock_canceled_total", "STOCK CANCELs that gave a reservation back.",
     offsetof(dd_stats, stock_canceled)},
    {"dlockd_auth_failures_total", "AUTHs refused.", offsetof(dd_stats, auth_failures)},
    {"dlockd_admin_refused_total", "Admin commands refused with -NOPERM.",
     offsetof(dd_stats, admin_refused)},
    {"dlockd_auth_timeouts_total", "Connections closed by --auth-timeout.",
     offsetof(dd_stats, auth_timeouts)},
    {"dlockd_idle_timeouts_total", "Connections closed by --timeout-idle.",
     offsetof(dd_stats, idle_timeouts)},
    {"dlockd_pool_jobs_total",
     "Operations handed to the thread pool: steps that would block, LOCKINFO, STOCK.",
     offsetof(dd_stats, pool_jobs)},
    {"dlockd_maxhold_released_total",
     "Session locks released for being held past MAXHOLD (their connections closed).",
     offsetof(dd_stats, maxhold_released)},
    {"dlockd_shutdown_refused_total",
     "LOCKs, SEM ACQUIREs and STOCK RESERVEs refused or ended with -SHUTDOWN by a drain.",
     offsetof(dd_stats, shutdown_refused)},
};

static void put_renewal(dd_buf *b)
{
    dlock_renewal_stats r;
    if (dlock_renewal_stats_get(dd_srv.client, &r) != DLOCK_OK)
        return;
    sample(b, "dlockd_renewal_locks", "gauge", "Session locks renewed by the library now.",
           (unsigned long long)r.locks);
    sample(b, "dlockd_renewal_turns_total", "counter", "Renewal calls made.",
           (unsigned long long)r.turns);
    sample(b, "dlockd_renewal_retries_total", "counter",
           "Renewals that reached no decision and were tried again.",
           (unsigned long long)r.retries);
    family(b, "dlockd_renewal_lag_max_seconds", "gauge", "The most any renewal turn started late.");
    dd_buf_printf(b, "dlockd_renewal_lag_max_seconds %.3f\n", (double)r.lag_max_ms / 1000);
    /* Unknown before the first turn: no sample then rather than a made-up one. */
    if (r.margin_min_ms >= 0) {
        family(b, "dlockd_renewal_margin_min_seconds", "gauge",
               "The least validity any session lock had left when its renewal started.");
        dd_buf_printf(b, "dlockd_renewal_margin_min_seconds %.3f\n",
                      (double)r.margin_min_ms / 1000);
    }
}

static void exposition(dd_buf *b)
{
    const dd_stats *st = &dd_srv.stats;
    family(b, "dlockd_info", "gauge", "dlockd's version, in the label; always 1.");
    /* The version is ours, digits and dots: no escape needed in the label. */
    dd_buf_printf(b, "dlockd_info{version=\"%s\"} 1\n", dlock_version());
    family(b, "dlockd_uptime_seconds", "gauge", "Seconds since dlockd started.");
    dd_buf_printf(b, "dlockd_uptime_seconds %.3f\n",
                  (double)(dd_now_ms() - dd_srv.started_ms) / 1000);
    sample(b, "dlockd_clients", "gauge", "Clients connected now.",
           (unsigned long long)dd_srv.nconns);
    sample(b, "dlockd_maxclients", "gauge", "Connections allowed at once (--maxclients).",
           (unsigned long long)dd_srv.maxclients);
    sample(b, "dlockd_session_locks", "gauge",
           "Session locks held by open connections, permits included.",
           (unsigned long long)dd_srv.session_locks);
    sample(b, "dlockd_session_permits", "gauge", "Of the session locks, semaphore permits.",
           (unsigned long long)dd_srv.session_permits);
    sample(b, "dlockd_waiting", "gauge", "LOCKs, SEM ACQUIREs and STOCK RESERVEs waiting now.",
           (unsigned long long)dd_srv.parked);
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        uint64_t v;
        memcpy(&v, (const char *)st + counters[i].offset, sizeof v);
        sample(b, counters[i].name, "counter", counters[i].help, (unsigned long long)v);
    }
    sample(b, "dlockd_locks_lost_total", "counter",
           "Session locks the renewal found lost (taken over or expired on the servers).",
           atomic_load(&st->locks_lost));
    sample(b, "dlockd_session_locks_released_total", "counter",
           "Session locks released at their connection's close.", atomic_load(&st->released));
    sample(b, "dlockd_session_release_failures_total", "counter",
           "Of those, the releases the lock servers did not confirm (left to their leases).",
           atomic_load(&st->release_failed));
    family(b, "dlockd_errors_total", "counter", "Error replies, by their kind (code word).");
    for (int k = 0; k < DD_E_KINDS; k++)
        dd_buf_printf(b, "dlockd_errors_total{kind=\"%s\"} %llu\n", dd_error_names[k],
                      (unsigned long long)st->errors[k]);
    put_hist(b, &wait_hist);
    put_hist(b, &hold_hist);
    dd_health_metrics(b);
    sample(b, "dlockd_lock_servers", "gauge", "Lock servers configured (-s).",
           (unsigned long long)dd_srv.nservers);
    put_renewal(b);
}

/* ---- HTTP --------------------------------------------------------------------------- */

static struct {
    struct MHD_Daemon *daemon;
    uv_poll_t poll;
    uv_timer_t timer;
    bool on;
    int64_t logged_ms; /* libmicrohttpd's last log line: at most one a second */
} http;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    (void)cls, (void)version, (void)upload_data;
    bool get =
        strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    bool known = strcmp(url, "/metrics") == 0 || strcmp(url, "/health") == 0;
    /* The first call comes with the headers. A GET is answered at the second, once its
     * body (if any: ignored) was read, which leaves the connection fit to be kept
     * alive for the next scrape; anything else at once, its body never read, and the
     * connection closed after the answer. */
    static int seen;
    if (get && known && *req_cls == NULL) {
        *req_cls = &seen;
        return MHD_YES;
    }
    if (get && known && *upload_data_size > 0) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    dd_buf b = {0};
    unsigned status = MHD_HTTP_OK;
    const char *type = TEXT_TYPE;
    if (!known) {
        dd_buf_printf(&b, "not found: dlockd serves GET /metrics and GET /health\n");
        status = MHD_HTTP_NOT_FOUND;
    } else if (!get) {
        dd_buf_printf(&b, "method %.64s not allowed: GET or HEAD\n", method);
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
    } else if (strcmp(url, "/metrics") == 0) {
        exposition(&b);
        type = PROMETHEUS_TYPE;
    } else {
        status = dd_health_report(&b);
    }
    /* The buffer is malloc'd; libmicrohttpd frees it once it is sent. */
    struct MHD_Response *r = MHD_create_response_from_buffer(b.len, b.p, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        dd_buf_free(&b);
        return MHD_NO; /* out of memory: the connection is closed */
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    /* Scrapes and checks must see the state of now, never a cache's. */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

static void http_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void http_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    int64_t now = dd_now_ms();
    if (now - http.logged_ms < 1000)
        return;
    http.logged_ms = now;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\r\n")] = '\0';
    dd_log("metrics: %s", line);
}

static void run_http(void);

static void on_poll(uv_poll_t *h, int status, int events)
{
    (void)h, (void)status, (void)events;
    run_http();
}

static void on_timer(uv_timer_t *h)
{
    (void)h;
    run_http();
}

static unsigned connections(void)
{
    const union MHD_DaemonInfo *i =
        MHD_get_daemon_info(http.daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return i != NULL ? i->num_connections : 0;
}

/* Serve what is ready, then wake again when libmicrohttpd says (a connection's timeout,
 * or at once when it left work undone), and at least every RECHECK_MS.
 *
 * At its connection limit libmicrohttpd takes the listening socket out of its epoll
 * set, and puts it back at the start of a later run, once a connection has gone. A run
 * that closed connections is therefore followed by another, or the socket could stay
 * out with nothing left to wake a run: no connection, no timeout, the waiting
 * clients stuck in the backlog. The periodic wake-up is the net under that. */
static void run_http(void)
{
    unsigned before = connections();
    MHD_run(http.daemon);
    if (connections() < before)
        MHD_run(http.daemon);
    MHD_UNSIGNED_LONG_LONG ms;
    if (MHD_get_timeout(http.daemon, &ms) != MHD_YES || ms > RECHECK_MS)
        ms = RECHECK_MS;
    uv_timer_start(&http.timer, on_timer, (uint64_t)ms, 0);
}

/* The listening socket on --metrics-bind and --metrics-port, or -1 after a log line. */
static int open_listener(const char *bind_addr, int port)
{
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof addr);
    if (uv_ip4_addr(bind_addr, port, (struct sockaddr_in *)&addr) != 0 &&
        uv_ip6_addr(bind_addr, port, (struct sockaddr_in6 *)&addr) != 0) {
        dd_log("--metrics-bind %s: not an IPv4 or IPv6 address", bind_addr);
        return -1;
    }
    socklen_t len =
        addr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    /* As libuv does for the RESP listeners: a restart binds while the last run's
     * connections are in TIME_WAIT. */
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&addr, len) != 0 || listen(fd, 64) != 0) {
        dd_log("cannot listen for metrics on %s:%d: %s", bind_addr, port, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

int dd_metrics_start(void)
{
    if (dd_srv.metrics_port == 0)
        return 0;
    const char *bind_addr = dd_srv.metrics_bind != NULL ? dd_srv.metrics_bind : "127.0.0.1";
    int fd = open_listener(bind_addr, dd_srv.metrics_port);
    if (fd < 0)
        return -1;
    /* No thread of its own (MHD_USE_EPOLL without MHD_USE_INTERNAL_POLLING_THREAD):
     * MHD_run on the loop does the work. SIGPIPE is ignored already (main.c). */
    http.daemon = MHD_start_daemon(
        MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, NULL,
        MHD_OPTION_EXTERNAL_LOGGER, http_log, NULL, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)CONN_MAX, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned int)TIMEOUT_S, MHD_OPTION_SIGPIPE_HANDLED_BY_APP, (int)1, MHD_OPTION_END);
    if (http.daemon == NULL) {
        /* dlockd exits next (status 70), the socket with it. */
        dd_log("cannot start the metrics listener on %s:%d (libmicrohttpd refused it)", bind_addr,
               dd_srv.metrics_port);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(http.daemon, MHD_DAEMON_INFO_EPOLL_FD);
    int rc = info != NULL ? uv_poll_init(dd_srv.loop, &http.poll, info->epoll_fd) : UV_EINVAL;
    if (rc != 0) {
        dd_log("cannot start the metrics listener: libmicrohttpd's epoll set: %s", uv_strerror(rc));
        MHD_stop_daemon(http.daemon);
        http.daemon = NULL;
        return -1;
    }
    uv_timer_init(dd_srv.loop, &http.timer);
    uv_poll_start(&http.poll, UV_READABLE, on_poll);
    http.on = true;
    run_http();
    dd_log("metrics on http://%s%s%s:%d/metrics, health on /health",
           strchr(bind_addr, ':') != NULL ? "[" : "", bind_addr,
           strchr(bind_addr, ':') != NULL ? "]" : "", dd_srv.metrics_port);
    return 0;
}

void dd_metrics_stop(void)
{
    if (!http.on)
        return;
    http.on = false;
    /* The poll handle goes before the epoll set it watches is closed. */
    uv_close((uv_handle_t *)&http.poll, NULL);
    uv_close((uv_handle_t *)&http.timer, NULL);
    MHD_stop_daemon(http.daemon);
    http.daemon = NULL;
}
