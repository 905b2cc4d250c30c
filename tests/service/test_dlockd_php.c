/*
 * test_dlockd_php.c: session locks of PHP-FPM workers on persistent connections
 * (phpredis pconnect), with real processes: php-fpm (one worker, pm = static, so that
 * every request runs in the same process and finds its pconnect connection again),
 * cgi-fcgi as the web server's FastCGI client, dlockd in front of a redis-server, and
 * tests/service/clients/php_pconnect.php as the request. What docs/service.md, "PHP-FPM
 * and persistent connections", says:
 *   - MAXHOLD: a request that dies inside its section (an undefined function) leaves
 *     the lock held on the worker's connection; dlockd releases it at MAXHOLD, not
 *     before, and closes the connection; the worker's next request pconnects again (a
 *     new connection, the same process) and takes the lock;
 *   - the shutdown function that UNLOCKs the token: after a fatal error proper (memory
 *     exhausted, which skips `finally`), the lock is free when the request ends, long
 *     before its TTL, and the worker's connection is clean for its next request;
 *   - neither: the lock stays held by the idle worker's connection, renewed by dlockd
 *     past several TTLs (the next request on that connection is told it holds it), and
 *     goes only when the worker does.
 * php-fpm (Debian's php-fpm), cgi-fcgi (libfcgi-bin) or phpredis missing fails the
 * test, never skips it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <arpa/inet.h>
#include <glob.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TTL_MS     2000
#define MAXHOLD_MS 3000

static dt_daemon d;
static char dlockd_log[512];
static char php_fpm[512], cgi_fcgi[512];

/* The php-fpm of one test: its master's PID, its FastCGI address, its directory. */
static struct {
    pid_t pid;
    char addr[64];
    char dir[512];
    char log[600];
} fpm;

static void find_tools(void)
{
    if (dh_find_exe("php-fpm", "DLOCK_PHP_FPM", php_fpm, sizeof php_fpm) != 0) {
        /* Debian names it by PHP's version (/usr/sbin/php-fpm8.2). */
        glob_t g;
        if (glob("/usr/sbin/php-fpm[0-9]*", 0, NULL, &g) != 0)
            fail_msg("php-fpm is missing: apt-get install php-fpm (tools/ensure-deps.sh "
                     "test does it as root), or set $DLOCK_PHP_FPM");
        snprintf(php_fpm, sizeof php_fpm, "%s", g.gl_pathv[0]);
        globfree(&g);
    }
    if (dh_find_exe("cgi-fcgi", NULL, cgi_fcgi, sizeof cgi_fcgi) != 0)
        fail_msg("cgi-fcgi is missing: apt-get install libfcgi-bin");
}

static int setup(void **state)
{
    it_srv_setup(state);
    find_tools();
    dt_log_path(dlockd_log, sizeof dlockd_log, "php");
    dt_next_log(dlockd_log);
    dt_start(&d, it_srv.url, NULL);
    return 0;
}

static int teardown(void **state)
{
    assert_int_equal(dt_stop(&d), 0);
    unlink(dlockd_log);
    return it_srv_teardown(state);
}

/* True when something accepts connections at 127.0.0.1:port. */
static bool accepts(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* Start php-fpm in the foreground with one pool of one worker that never retires
 * (pm.max_requests 0), errors shown in the response, in a directory of its own. */
static int fpm_setup(void **state)
{
    (void)state;
    const char *tmp = getenv("DLOCK_TEST_TMP");
    snprintf(fpm.dir, sizeof fpm.dir, "%s/dlockd-php.XXXXXX", tmp != NULL ? tmp : "/tmp");
    assert_non_null(mkdtemp(fpm.dir));
    int port = dh_free_port("127.0.0.1");
    assert_true(port > 0);
    snprintf(fpm.addr, sizeof fpm.addr, "127.0.0.1:%d", port);
    snprintf(fpm.log, sizeof fpm.log, "%s/fpm.log", fpm.dir);
    char conf[600];
    snprintf(conf, sizeof conf, "%s/fpm.conf", fpm.dir);
    FILE *f = fopen(conf, "w");
    assert_non_null(f);
    fprintf(f,
            "[global]\nerror_log = %s\ndaemonize = no\npid = %s/fpm.pid\n"
            "[dlock]\nlisten = %s\npm = static\npm.max_children = 1\npm.max_requests = 0\n"
            "php_admin_flag[display_errors] = on\n",
            fpm.log, fpm.dir, fpm.addr);
    fclose(f);
    /* -R: a test run as root (CI's containers) may start it; a pool without `user`
     * then runs as the caller. Its own process group, so that the worker goes with
     * the master in fpm_teardown whatever happens. */
    const char *argv[] = {php_fpm, "-F", "-R", "-y", conf, NULL};
    dh_spawn_opts o = {.out_fd = STDERR_FILENO, .err_fd = STDERR_FILENO, .own_group = true};
    fpm.pid = dh_spawn(argv, &o);
    assert_true(fpm.pid > 0);
    int64_t deadline = dh_now_ms() + 10000 * dh_slack();
    while (!accepts(port)) {
        if (dh_exited(fpm.pid, NULL) || dh_now_ms() > deadline) {
            fpm.pid = 0;
            fail_msg("php-fpm did not start on %s (see its log, %s)", fpm.addr, fpm.log);
        }
        dh_sleep_ms(10);
    }
    return 0;
}

/* Stop php-fpm: SIGTERM ends the master and its worker, and the worker's persistent
 * connections with it. */
static void fpm_stop(void)
{
    if (fpm.pid <= 0)
        return;
    kill(fpm.pid, SIGTERM);
    dh_reap(fpm.pid, 5000 * dh_slack(), NULL);
    kill(-fpm.pid, SIGKILL); /* a worker left behind, if any */
    fpm.pid = 0;
}

static int fpm_teardown(void **state)
{
    (void)state;
    fpm_stop();
    dh_rm_tree(fpm.dir);
    return 0;
}

/* One request of php_pconnect.php through FastCGI, with "port=DLOCKD&" before query;
 * the response (headers and body) into out. */
static void request(char *out, size_t len, const char *query)
{
    char script[1100], env_script[1200], env_query[600];
    snprintf(script, sizeof script, "%s", dt_client_script("php_pconnect.php"));
    snprintf(env_script, sizeof env_script, "SCRIPT_FILENAME=%s", script);
    snprintf(env_query, sizeof env_query, "QUERY_STRING=port=%d&%s", d.port, query);
    const char *env[] = {env_script, env_query, "REQUEST_METHOD=GET", NULL};
    const char *argv[] = {cgi_fcgi, "-bind", "-connect", fpm.addr, NULL};
    char err[4096];
    int st = dh_run(argv, env, out, len, err, sizeof err);
    if (st != 0)
        fail_msg("cgi-fcgi exited %d: %s%s", st, out, err);
}

/* The number after "KEY " on a line of a response, or -1 when no line has it. */
static long long field(const char *out, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "\n%s ", key);
    const char *p = strstr(out, pat);
    return p != NULL ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* The fence of the response's "LOCKED token fence" line. */
static long long locked_fence(const char *out)
{
    const char *p = strstr(out, "\nLOCKED ");
    assert_non_null(p);
    p = strchr(p + 8, ' ');
    assert_non_null(p);
    return strtoll(p + 1, NULL, 10);
}

static void expect_in(const char *out, const char *what)
{
    if (strstr(out, what) == NULL)
        fail_msg("expected '%s' in the response:\n%s", what, out);
}

/* LOCKINFO of name: held or not, and its remaining_ms and fence. */
typedef struct info {
    bool held;
    long long remaining_ms, fence;
} info;

static info lockinfo(redisContext *c, const char *name)
{
    redisReply *r = dt_cmd(c, "LOCKINFO %s", name);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    info i = {0};
    for (size_t k = 0; k + 1 < r->elements; k += 2) {
        const char *key = r->element[k]->str;
        const redisReply *v = r->element[k + 1];
        if (strcmp(key, "state") == 0)
            i.held = strcmp(v->str, "held") == 0;
        else if (strcmp(key, "remaining_ms") == 0)
            i.remaining_ms = v->integer;
        else if (strcmp(key, "fence") == 0)
            i.fence = v->integer;
    }
    freeReplyObject(r);
    return i;
}

/* Poll LOCKINFO until name is free, at most bound_ms; when it was first seen free. */
static int64_t wait_free(redisContext *c, const char *name, int64_t bound_ms)
{
    int64_t deadline = dh_now_ms() + bound_ms;
    while (lockinfo(c, name).held) {
        if (dh_now_ms() > deadline)
            fail_msg("%s still held after %lld ms", name, (long long)bound_ms);
        dh_sleep_ms(5);
    }
    return dh_now_ms();
}

/* A request dies inside its section holding a session lock with MAXHOLD: held after
 * the request, released at MAXHOLD (and not before) with the connection closed; the
 * same worker's next request reconnects and takes the lock. */
static void test_maxhold(void **state)
{
    (void)state;
    redisContext *c = dt_connect(&d);
    char out[8192];
    char q[128];
    snprintf(q, sizeof q, "name=php-maxhold&ttl=%d&maxhold=%d&fatal=undefined", TTL_MS, MAXHOLD_MS);
    int64_t t0 = dh_now_ms();
    request(out, sizeof out, q);
    int64_t t1 = dh_now_ms();
    expect_in(out, "\nLOCKED ");
    expect_in(out, "Call to undefined function");
    long long pid = field(out, "PID"), client = field(out, "CLIENT");
    /* The request is over; its worker's connection holds the lock. */
    assert_true(lockinfo(c, "php-maxhold").held);
    int64_t tf = wait_free(c, "php-maxhold", MAXHOLD_MS + 2000 * dh_slack());
    printf("FIG dlockd_php_maxhold_freed_after_request_ms %lld ms\n", (long long)(tf - t1));
    printf("FIG dlockd_php_maxhold_held_ms %lld ms\n", (long long)(tf - t0));
    /* Not before MAXHOLD: its lease alone (TTL_MS) is renewed. The margin covers the
     * polling and the two processes' clocks. */
    assert_true(tf - t0 >= MAXHOLD_MS - 100);
    assert_true(dt_log_has(dlockd_log, "MAXHOLD"));

    /* The same worker (pid), a new connection (client id): phpredis saw the old one
     * closed when it checked it at pconnect, and connected again. */
    snprintf(q, sizeof q, "name=php-maxhold&ttl=%d&finally=1", TTL_MS);
    request(out, sizeof out, q);
    expect_in(out, "\nLOCKED ");
    expect_in(out, "FINALLY UNLOCK 1");
    assert_int_equal(field(out, "PID"), pid);
    assert_true(field(out, "CLIENT") > 0 && field(out, "CLIENT") != client);
    redisFree(c);
}

/* The shutdown function releases the lock after a fatal error that skips `finally`,
 * before the request's response ends: free at once, long before the TTL. */
static void test_shutdown_function(void **state)
{
    (void)state;
    redisContext *c = dt_connect(&d);
    char out[8192];
    int64_t t0 = dh_now_ms();
    request(out, sizeof out, "name=php-guard&ttl=30000&shutdown=1&finally=1&fatal=memory");
    info i = lockinfo(c, "php-guard");
    printf("FIG dlockd_php_guarded_request_ms %lld ms\n", (long long)(dh_now_ms() - t0));
    expect_in(out, "\nLOCKED ");
    expect_in(out, "Allowed memory size");
    expect_in(out, "SHUTDOWN UNLOCK 1");
    if (strstr(out, "FINALLY") != NULL)
        fail_msg("the fatal error ran the finally block:\n%s", out);
    assert_false(i.held);

    /* The worker's connection is clean: its next request finds it (the same id) and
     * takes the lock. */
    long long client = field(out, "CLIENT");
    request(out, sizeof out, "name=php-guard&ttl=30000&finally=1");
    expect_in(out, "FINALLY UNLOCK 1");
    assert_int_equal(field(out, "CLIENT"), client);
    redisFree(c);
}

/* Neither guard: the idle worker's connection keeps the lock, renewed past several
 * TTLs, until the worker goes. */
static void test_leak(void **state)
{
    (void)state;
    redisContext *c = dt_connect(&d);
    char out[8192];
    request(out, sizeof out, "name=php-leak&ttl=1000&fatal=undefined");
    expect_in(out, "\nLOCKED ");
    long long pid = field(out, "PID"), client = field(out, "CLIENT");
    long long fence = locked_fence(out);
    dh_sleep_ms(3500); /* three and a half TTLs */
    info i = lockinfo(c, "php-leak");
    printf("FIG dlockd_php_leaked_remaining_ms %lld ms\n", i.remaining_ms);
    assert_true(i.held);
    assert_int_equal(i.fence, fence);
    assert_true(i.remaining_ms > 0 && i.remaining_ms <= 1000);
    /* The worker's next request gets the same connection, which holds it still. */
    request(out, sizeof out, "name=php-leak&ttl=1000");
    assert_int_equal(field(out, "PID"), pid);
    assert_int_equal(field(out, "CLIENT"), client);
    expect_in(out, "ERROR ERR this connection already holds lock");
    /* The worker's end closes its connection, which releases the lock. */
    int64_t t0 = dh_now_ms();
    fpm_stop();
    int64_t tf = wait_free(c, "php-leak", 1000 * dh_slack());
    printf("FIG dlockd_php_leak_freed_after_fpm_stop_ms %lld ms\n", (long long)(tf - t0));
    redisFree(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        IT_CASE_WITH("php-fpm shutdown function", test_shutdown_function, fpm_setup, fpm_teardown,
                     NULL),
        IT_CASE_WITH("php-fpm lock leaked without a guard", test_leak, fpm_setup, fpm_teardown,
                     NULL),
        IT_CASE_WITH("php-fpm MAXHOLD", test_maxhold, fpm_setup, fpm_teardown, NULL),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
