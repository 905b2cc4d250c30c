/*
 * test_dlockd_metrics: dlockd's HTTP side (--metrics-port). GET /metrics after LOCK,
 * UNLOCK and SEM traffic: its counters, gauges and histograms move as the traffic says,
 * and promtool accepts the text; a real Prometheus scrapes it; GET /health answers 503
 * soon after the lock server stops and 200 soon after it is back, and the log says so
 * once each way; a wrong password for the lock server is a "down" with the reason; the
 * library's dlock_ping, on which the checks stand. Real dlockd, redis-server,
 * Prometheus and promtool processes; a missing tool fails the test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- an HTTP client of a few lines ---------------------------------------------------- */

typedef struct http_reply {
    int status;
    char type[128]; /* Content-Type */
    char body[65536];
} http_reply;

/* One request on a connection of its own (HTTP/1.0: the server closes after it). */
static void http(int port, const char *method, const char *path, http_reply *r)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        fail_msg("connect to the metrics port %d: %s", port, strerror(errno));
    char req[256];
    snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", method, path);
    dt_raw_write(fd, req, strlen(req));
    static char raw[sizeof r->body + 4096];
    bool closed = false;
    size_t n = dt_raw_read_all(fd, raw, sizeof raw, 5000 * dh_slack(), &closed);
    close(fd);
    assert_true(closed);
    memset(r, 0, sizeof *r);
    if (sscanf(raw, "HTTP/1.%*d %d", &r->status) != 1)
        fail_msg("%s %s: not an HTTP answer: '%.200s'", method, path, raw);
    char *end = strstr(raw, "\r\n\r\n");
    assert_non_null(end);
    *end = '\0';
    for (char *h = strstr(raw, "\r\n"); h != NULL; h = strstr(h + 2, "\r\n"))
        if (strncasecmp(h + 2, "Content-Type: ", 14) == 0)
            snprintf(r->type, sizeof r->type, "%.*s", (int)strcspn(h + 16, "\r"), h + 16);
    size_t head = (size_t)(end + 4 - raw);
    assert_true(n - head < sizeof r->body);
    memcpy(r->body, end + 4, n - head);
}

static void scrape(int port, http_reply *r)
{
    http(port, "GET", "/metrics", r);
    assert_int_equal(r->status, 200);
    assert_string_equal(r->type, "text/plain; version=0.0.4; charset=utf-8");
}

/* The value of one series ("name" or "name{labels}") in a scrape; fails when absent. */
static double metric(const char *body, const char *series)
{
    size_t len = strlen(series);
    for (const char *p = body; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (strncmp(p, series, len) == 0 && p[len] == ' ')
            return strtod(p + len + 1, NULL);
    fail_msg("no series %s in the scrape:\n%s", series, body);
    return NAN;
}

/* ---- tools --------------------------------------------------------------------------- */

static void find_tool(const char *name, char *path, size_t len)
{
    if (dh_find_exe(name, NULL, path, len) != 0)
        fail_msg("%s is missing (Debian: prometheus; tools/ensure-deps.sh test)", name);
}

/* promtool check metrics on a scrape: exit 0 and not a word on stdout or stderr (its
 * lint findings are printed, and some do not change the exit status). */
static void promtool_check(const char *body)
{
    char promtool[512], file[512], cmd[1200];
    find_tool("promtool", promtool, sizeof promtool);
    dt_log_path(file, sizeof file, "scrape");
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs(body, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' check metrics < '%s'", promtool, file);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    char out[4096], err[4096];
    int st = dh_run(argv, NULL, out, sizeof out, err, sizeof err);
    unlink(file);
    if (st != 0 || out[0] != '\0' || err[0] != '\0')
        fail_msg("promtool check metrics: exit %d\nstdout: %s\nstderr: %s", st, out, err);
}

/* Lines of the log at path that contain both needles. */
static int log_count(const char *path, const char *a, const char *b)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f) != NULL)
        n += strstr(line, a) != NULL && strstr(line, b) != NULL;
    fclose(f);
    return n;
}

/* Until /health answers want after a check (the 503 before the first one is no
 * verdict); the time it took, or fails past bound_ms. */
static int64_t wait_health(int port, int want, int64_t bound_ms, http_reply *r)
{
    int64_t t0 = dh_now_ms();
    for (;;) {
        http(port, "GET", "/health", r);
        if (r->status == want && strstr(r->body, "not checked yet") == NULL)
            return dh_now_ms() - t0;
        if (dh_now_ms() - t0 > bound_ms)
            fail_msg("/health still %d after %lld ms, want %d: %s", r->status, (long long)bound_ms,
                     want, r->body);
        dh_sleep_ms(20);
    }
}

/* A dlockd for servers with an HTTP listener on a free port (*mport), logging to log. */
static void start_with_metrics(dt_daemon *d, const char *servers, int *mport, const char *log)
{
    *mport = dh_free_port("127.0.0.1");
    assert_true(*mport > 0);
    char port[16];
    snprintf(port, sizeof port, "%d", *mport);
    dt_next_log(log);
    dt_start(d, servers, "--metrics-port", port, NULL);
}

/* A dlockd with a metrics port (start_with_metrics) logging to a file of its own, and a
 * buffer for that port's replies. */
typedef struct metered {
    char log[512];
    dt_daemon d;
    int mport;
    http_reply *r;
} metered;

/* Start one for servers, its log named after what. */
static void metered_start(metered *m, const char *servers, const char *what)
{
    dt_log_path(m->log, sizeof m->log, what);
    start_with_metrics(&m->d, servers, &m->mport, m->log);
    m->r = malloc(sizeof *m->r);
    assert_non_null(m->r);
}

/* Stop it (dlockd must exit 0), then remove its log and free the buffer. */
static void metered_stop(metered *m)
{
    assert_int_equal(dt_stop(&m->d), 0);
    unlink(m->log);
    free(m->r);
}

/* dlockd still answers on c, which is closed; then stop it and its own lock server s. */
static void metered_stop_with(metered *m, redisContext *c, dh_server *s)
{
    dt_expect_status(dt_cmd(c, "PING"), "PONG");
    redisFree(c);
    metered_stop(m);
    dh_server_stop(s);
}

/* ---- the tests ----------------------------------------------------------------------- */

static void test_metrics(void **state)
{
    (void)state;
    char log[512];
    dt_log_path(log, sizeof log, "metrics");
    dt_daemon d;
    int mport;
    start_with_metrics(&d, it_srv.url, &mport, log);
    http_reply *r = malloc(sizeof *r), *r0 = malloc(sizeof *r0);
    assert_non_null(r);
    assert_non_null(r0);
    /* The first health check is in: dlockd_server_up has its series. */
    wait_health(mport, 200, 2000 * dh_slack(), r0);
    scrape(mport, r0);
    promtool_check(r0->body);

    /* a: a session lock UNLOCKed, another held; b: refused (held by a), then an
     * error; a permit held. */
    redisContext *a = dt_connect(&d), *b = dt_connect(&d);
    dt_lock l;
    dt_expect_lock(dt_cmd(a, "LOCK m:one TTL 10000"), &l);
    dt_expect_int(dt_cmd(a, "UNLOCK m:one %s", l.token), 1);
    dt_expect_lock(dt_cmd(a, "LOCK m:two TTL 10000"), &l);
    dt_expect_nil(dt_cmd(b, "LOCK m:two WAIT 0"));
    dt_expect_error(dt_cmd(b, "LOCK"), "ERR");
    dt_expect_lock(dt_cmd(b, "SEM ACQUIRE m:sem 2"), &l);
    int64_t t0 = dh_now_ms();
    scrape(mport, r);
    print_message("FIG metrics_scrape_ms %lld ms\n", (long long)(dh_now_ms() - t0));
    promtool_check(r->body);
#define DELTA(series) (metric(r->body, series) - metric(r0->body, series))
    assert_true(DELTA("dlockd_locks_acquired_total") == 2);
    assert_true(DELTA("dlockd_locks_not_acquired_total") == 1);
    assert_true(DELTA("dlockd_permits_acquired_total") == 1);
    assert_true(DELTA("dlockd_errors_total{kind=\"err\"}") == 1);
    assert_true(metric(r->body, "dlockd_clients") == 2);
    assert_true(metric(r->body, "dlockd_session_locks") == 2);
    assert_true(metric(r->body, "dlockd_session_permits") == 1);
    assert_true(metric(r->body, "dlockd_waiting") == 0);
    /* Three grants waited; one session lock left its connection (the UNLOCK). */
    assert_true(DELTA("dlockd_lock_wait_seconds_count") == 3);
    assert_true(DELTA("dlockd_lock_wait_seconds_bucket{le=\"+Inf\"}") == 3);
    assert_true(DELTA("dlockd_lock_hold_seconds_count") == 1);
    assert_true(metric(r->body, "dlockd_lock_hold_seconds_sum") > 0);
    char series[256];
    snprintf(series, sizeof series, "dlockd_server_up{server=\"%s\"}", it_srv.url);
    assert_true(metric(r->body, series) == 1);
    assert_true(metric(r->body, "dlockd_quorum_up") == 1);
    assert_non_null(strstr(r->body, "# TYPE dlockd_lock_hold_seconds histogram\n"));
    assert_non_null(strstr(r->body, "# HELP dlockd_clients "));

    /* A waiter: a gauge while it waits, a wait of at least the holder's time after. */
    dt_send(b, "LOCK m:two WAIT 10000");
    int64_t w0 = dh_now_ms();
    for (;;) {
        scrape(mport, r);
        if (metric(r->body, "dlockd_waiting") == 1)
            break;
        assert_true(dh_now_ms() - w0 < 5000 * dh_slack());
        dh_sleep_ms(10);
    }
    dh_sleep_ms(200);
    /* a's close releases both of its session locks and serves b. */
    redisFree(a);
    dt_expect_lock(dt_reply(b), &l);
    scrape(mport, r);
    assert_true(metric(r->body, "dlockd_waiting") == 0);
    assert_true(DELTA("dlockd_lock_hold_seconds_count") == 2);
    assert_true(DELTA("dlockd_lock_wait_seconds_count") == 4);
    /* The wait of at least 200 ms is above the 0.1 s bound, whatever the others took. */
    assert_true(DELTA("dlockd_lock_wait_seconds_bucket{le=\"0.1\"}") <= 3);
    assert_true(DELTA("dlockd_lock_wait_seconds_bucket{le=\"+Inf\"}") -
                    DELTA("dlockd_lock_wait_seconds_bucket{le=\"0.1\"}") >=
                1);
    assert_true(DELTA("dlockd_waits_total") == 1);
    redisFree(b);
    for (int64_t t = dh_now_ms(); metric(r->body, "dlockd_session_locks") != 0;) {
        assert_true(dh_now_ms() - t < 5000 * dh_slack());
        dh_sleep_ms(10);
        scrape(mport, r);
    }
    assert_true(DELTA("dlockd_lock_hold_seconds_count") == 4);
#undef DELTA

    /* /health; other paths and methods. */
    http(mport, "GET", "/health", r);
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "OK\n");
    http(mport, "HEAD", "/metrics", r);
    assert_int_equal(r->status, 200);
    assert_string_equal(r->body, "");
    http(mport, "GET", "/nothing", r);
    assert_int_equal(r->status, 404);
    http(mport, "POST", "/metrics", r);
    assert_int_equal(r->status, 405);
    http(mport, "DELETE", "/health", r);
    assert_int_equal(r->status, 405);
    assert_int_equal(dt_stop(&d), 0);
    assert_true(dt_log_has(log, "metrics on http://127.0.0.1:"));
    unlink(log);
    free(r);
    free(r0);
}

/* A real Prometheus scrapes dlockd: its query API has dlockd's series. */
static void test_prometheus(void **state)
{
    (void)state;
    char prom[512], promtool[512];
    find_tool("prometheus", prom, sizeof prom);
    find_tool("promtool", promtool, sizeof promtool);
    char log[512];
    dt_log_path(log, sizeof log, "prom-dlockd");
    dt_daemon d;
    int mport;
    start_with_metrics(&d, it_srv.url, &mport, log);

    const char *tmp = getenv("DLOCK_TEST_TMP");
    char dir[512], conf[600], data[600], listen[64], url[64];
    snprintf(dir, sizeof dir, "%s/prometheus-XXXXXX", tmp != NULL ? tmp : "/tmp");
    mkdir(tmp != NULL ? tmp : "/tmp", 0755);
    assert_non_null(mkdtemp(dir));
    snprintf(conf, sizeof conf, "%s/prometheus.yml", dir);
    snprintf(data, sizeof data, "%s/data", dir);
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fprintf(f,
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: dlockd\n    static_configs:\n"
            "      - targets: ['127.0.0.1:%d']\n",
            mport);
    fclose(f);
    int pport = dh_free_port("127.0.0.1");
    snprintf(listen, sizeof listen, "--web.listen-address=127.0.0.1:%d", pport);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", pport);
    char confarg[700], dataarg[700];
    snprintf(confarg, sizeof confarg, "--config.file=%s", conf);
    snprintf(dataarg, sizeof dataarg, "--storage.tsdb.path=%s", data);
    const char *argv[] = {prom, confarg, dataarg, listen, "--log.level=warn", NULL};
    dh_spawn_opts o = {.out_fd = -1, .err_fd = STDERR_FILENO};
    int64_t t0 = dh_now_ms();
    pid_t pid = dh_spawn(argv, &o);
    assert_true(pid > 0);

    /* The first scrape lands within a couple of scrape intervals of the start. */
    const char *query[] = {promtool, "query", "instant", url, "dlockd_clients", NULL};
    char out[4096], err[4096];
    bool seen = false;
    while (!seen && dh_now_ms() - t0 < 30000 * dh_slack()) {
        if (dh_exited(pid, NULL))
            fail_msg("prometheus exited (its log is above)");
        int st = dh_run(query, NULL, out, sizeof out, err, sizeof err);
        seen = st == 0 && strstr(out, "dlockd_clients{") != NULL &&
               strstr(out, "job=\"dlockd\"") != NULL;
        if (!seen)
            dh_sleep_ms(200);
    }
    print_message("FIG metrics_prometheus_first_sample_ms %lld ms\n",
                  (long long)(dh_now_ms() - t0));
    if (!seen)
        fail_msg("prometheus has no dlockd_clients after %lld ms: %s %s",
                 (long long)(30000 * dh_slack()), out, err);
    /* Its own view of the target: up. */
    const char *up[] = {promtool, "query", "instant", url, "up{job=\"dlockd\"} == 1", NULL};
    assert_int_equal(dh_run(up, NULL, out, sizeof out, err, sizeof err), 0);
    assert_non_null(strstr(out, "=> 1"));
    kill(pid, SIGTERM);
    assert_true(dh_reap(pid, 10000 * dh_slack(), NULL));
    dh_rm_tree(dir);
    assert_int_equal(dt_stop(&d), 0);
    unlink(log);
}

/* The lock server stops and comes back: /health and the log follow within 2 s. */
static void test_health_down_up(void **state)
{
    (void)state;
    dh_server s;
    assert_int_equal(dh_server_start(&s, NULL), 0);
    metered m;
    metered_start(&m, s.url, "health");
    int64_t bound = 2000 * dh_slack();
    wait_health(m.mport, 200, bound, m.r);
    assert_string_equal(m.r->body, "OK\n");

    dh_server_kill(&s);
    int64_t down = wait_health(m.mport, 503, bound, m.r);
    print_message("FIG metrics_health_503_after_stop_ms %lld ms\n", (long long)down);
    char want[256];
    snprintf(want, sizeof want, "lock server %s down: ", s.url);
    if (strstr(m.r->body, want) == NULL)
        fail_msg("/health 503 without '%s': %s", want, m.r->body);
    scrape(m.mport, m.r);
    char series[256];
    snprintf(series, sizeof series, "dlockd_server_up{server=\"%s\"}", s.url);
    assert_true(metric(m.r->body, series) == 0);
    assert_true(metric(m.r->body, "dlockd_quorum_up") == 0);
    /* dlockd itself keeps answering. */
    redisContext *c = dt_connect(&m.d);
    dt_expect_status(dt_cmd(c, "PING"), "PONG");

    assert_int_equal(dh_server_restart(&s), 0);
    int64_t up = wait_health(m.mport, 200, bound, m.r);
    print_message("FIG metrics_health_200_after_return_ms %lld ms\n", (long long)up);
    scrape(m.mport, m.r);
    assert_true(metric(m.r->body, series) == 1);
    /* Once each way, and nothing at the first check, when it was up. */
    char prefix[256];
    snprintf(prefix, sizeof prefix, "lock server %s ", s.url);
    int64_t t0 = dh_now_ms();
    while (log_count(m.log, prefix, " up") < 1 && dh_now_ms() - t0 < bound)
        dh_sleep_ms(10);
    dh_sleep_ms(1000); /* two more checks: no repeated line */
    assert_int_equal(log_count(m.log, prefix, " down: "), 1);
    assert_int_equal(log_count(m.log, prefix, " up"), 1);
    metered_stop_with(&m, c, &s);
}

/* A wrong password for the lock server: down from the first check, and why. */
static void test_wrong_password(void **state)
{
    (void)state;
    dh_server s;
    const char *args[] = {"--requirepass", "right-secret", NULL};
    assert_int_equal(dh_server_start(&s, args), 0);
    setenv("DLOCK_PASSWORD", "wrong-secret", 1);
    metered m;
    metered_start(&m, s.url, "wrongpass");
    unsetenv("DLOCK_PASSWORD");
    wait_health(m.mport, 503, 2000 * dh_slack(), m.r);
    /* The library's reason: the server refused the password. */
    if (strstr(m.r->body, "AUTH refused: WRONGPASS") == NULL)
        fail_msg("/health: %s", m.r->body);
    char want[256];
    snprintf(want, sizeof want, "lock server %s down: ", s.url);
    int64_t t0 = dh_now_ms();
    while (log_count(m.log, want, "WRONGPASS") < 1 && dh_now_ms() - t0 < 2000 * dh_slack())
        dh_sleep_ms(10);
    assert_int_equal(log_count(m.log, want, "AUTH refused: WRONGPASS"), 1);
    assert_false(dt_log_has(m.log, "wrong-secret"));
    metered_stop_with(&m, dt_connect(&m.d), &s);
}

/* dlock_ping: misuse refused as dlock_probe refuses it; each server's answer. */
static void test_ping_api(void **state)
{
    (void)state;
    dlock_server_facts f[2];
    assert_int_equal(dlock_ping(NULL, f, 2), DLOCK_ERR_INVALID);
    char urls[300];
    int dead = dh_free_port("127.0.0.1");
    snprintf(urls, sizeof urls, "%s,redis://127.0.0.1:%d", it_srv.url, dead);
    dlock_config cfg;
    it_config_init(&cfg);
    dlock_client *c = it_client_cfg(urls, &cfg);
    assert_int_equal(dlock_ping(c, NULL, 2), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_ping(c, f, 1), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_ping(c, f, 2), DLOCK_OK);
    assert_string_equal(f[0].server, it_srv.url);
    assert_int_equal(f[0].error, DLOCK_OK);
    assert_string_equal(f[0].detail, "");
    assert_int_equal(f[1].error, DLOCK_ERR_IO);
    assert_non_null(strstr(f[1].detail, "refused"));
    /* The facts dlock_ping does not ask stay unknown. */
    assert_int_equal(f[0].uptime_s, -1);
    assert_string_equal(f[0].version, "");
    dlock_client_free(c);
    char dir[512], local[600];
    const char *tmp = getenv("DLOCK_TEST_TMP");
    snprintf(dir, sizeof dir, "%s/ping-local-XXXXXX", tmp != NULL ? tmp : "/tmp");
    assert_non_null(mkdtemp(dir));
    snprintf(local, sizeof local, "file://%s", dir);
    c = it_client_cfg(local, &cfg);
    assert_int_equal(dlock_ping(c, f, 2), DLOCK_ERR_INVALID);
    dlock_client_free(c);
    dh_rm_tree(dir);
}

/* The options: checked as dlockd checks the others; a port in use stops the start. */
static void test_options(void **state)
{
    (void)state;
    const char *dlockd = getenv("DLOCKD");
    const char *bad[][4] = {{"--metrics-bind", "127.0.0.1", NULL},
                            {"--metrics-port", "0", NULL},
                            {"--metrics-port", "65536", NULL}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[] = {dlockd, "-s", it_srv.url, bad[i][0], bad[i][1], NULL};
        char err[512];
        int st = dh_run(argv, NULL, NULL, 0, err, sizeof err);
        if (st != 64 || strncmp(err, "dlockd: ", 8) != 0)
            fail_msg("%s %s: exit %d, '%s'", bad[i][0], bad[i][1], st, err);
    }
    /* Its metrics port taken by another dlockd's: exit 70, saying so. */
    char log[512];
    dt_log_path(log, sizeof log, "options");
    dt_daemon d;
    int mport;
    start_with_metrics(&d, it_srv.url, &mport, log);
    char port[16], dport[16];
    snprintf(port, sizeof port, "%d", mport);
    snprintf(dport, sizeof dport, "%d", dh_free_port("127.0.0.1"));
    const char *argv[] = {dlockd, "-s", it_srv.url, "-p", dport, "--metrics-port", port, NULL};
    char err[2048];
    int st = dh_run(argv, NULL, NULL, 0, err, sizeof err);
    if (st != 70 || strstr(err, "cannot listen for metrics on 127.0.0.1:") == NULL)
        fail_msg("a metrics port in use: exit %d, '%s'", st, err);
    assert_int_equal(dt_stop(&d), 0);
    unlink(log);
}

/* The descriptors process pid has open. */
static long open_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *dir = opendir(path);
    assert_non_null(dir);
    long n = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(dir);
    return n;
}

/* dlockd out of descriptors (its soft limit lowered to what it has open, its
 * connections to the lock server closed by the server): waiters are told `-ERR too
 * many open files in dlockd`, never -UNAVAILABLE, the log says so, and the health
 * checks, which cannot connect either, do not call the lock server down. */
static void test_out_of_descriptors(void **state)
{
    (void)state;
    metered m;
    metered_start(&m, it_srv.url, "nofile");
    wait_health(m.mport, 200, 2000 * dh_slack(), m.r);
    enum { WAITERS = 4 };
    redisContext *h = dt_connect(&m.d), *w[WAITERS];
    for (int i = 0; i < WAITERS; i++)
        w[i] = dt_connect(&m.d);
    dt_lock l;
    dt_expect_lock(dt_cmd(h, "LOCK nf:job TTL 10000"), &l);

    struct rlimit was;
    assert_int_equal(prlimit(m.d.pid, RLIMIT_NOFILE, NULL, &was), 0);
    /* Well below what it has open: the descriptors the server's close frees do not
     * bring it under. */
    long open_now = open_fds(m.d.pid);
    print_message("INFO dlockd has %ld descriptors open\n", open_now);
    struct rlimit low = {(rlim_t)(open_now / 2), was.rlim_max};
    assert_int_equal(prlimit(m.d.pid, RLIMIT_NOFILE, &low, NULL), 0);
    freeReplyObject(dh_cmd(&it_srv, "CLIENT KILL TYPE normal SKIPME yes"));
    for (int i = 0; i < WAITERS; i++)
        dt_expect_error(dt_cmd(w[i], "LOCK nf:job WAIT 2000"), "ERR too many open files in dlockd");
    /* Two health checks at least (one each 500 ms) while no socket can be had. */
    dh_sleep_ms(1200);
    /* Logged at most once a second, whichever failed first: a command or a check. */
    assert_true(dt_log_has(m.log, "out of descriptors: "));
    assert_int_equal(log_count(m.log, "lock server", " down"), 0);

    assert_int_equal(prlimit(m.d.pid, RLIMIT_NOFILE, &was, NULL), 0);
    wait_health(m.mport, 200, 2000 * dh_slack(), m.r);
    dt_expect_int(dt_cmd(h, "UNLOCK nf:job %s", l.token), 1);
    dt_expect_lock(dt_cmd(w[0], "LOCK nf:job WAIT 2000"), &l);
    for (int i = 0; i < WAITERS; i++)
        redisFree(w[i]);
    redisFree(h);
    metered_stop(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_prometheus),
        cmocka_unit_test(test_health_down_up),
        cmocka_unit_test(test_wrong_password),
        cmocka_unit_test(test_ping_api),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_out_of_descriptors),
    };
    return cmocka_run_group_tests(tests, it_srv_setup, it_srv_teardown);
}
