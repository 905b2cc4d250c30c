/*
 * test_dlockd_clients.c: dlockd with Redis clients nobody here wrote, from Debian:
 * redis-cli, redis-py (python3-redis, run by /usr/bin/python3, not whatever python3
 * comes first in PATH) and phpredis (php-cli + php-redis). Each must be installed
 * (tools/ensure-deps.sh installs them): a missing one fails the test, never skips it.
 * The scripts are in tests/service/clients/ ($DLOCKD_CLIENTS, which CTest sets).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static dt_daemon d;
static char port[16];

static int setup(void **state)
{
    it_srv_setup(state);
    dt_start(&d, it_srv.url, NULL);
    snprintf(port, sizeof port, "%d", d.port);
    return 0;
}

static int teardown(void **state)
{
    assert_int_equal(dt_stop(&d), 0);
    return it_srv_teardown(state);
}

static void run_argv(dt_run *r, const char *const argv[])
{
    dt_run_ok(r, argv);
    /* Their FIG lines go to the test's output. */
    fputs(r->out, stdout);
}

static void need_exe(const char *path, const char *package)
{
    if (access(path, X_OK) != 0)
        fail_msg("%s is missing: apt-get install %s (tools/ensure-deps.sh does it as root)", path,
                 package);
}

/* redis-cli LOCK/UNLOCK/PING/INFO, one invocation each, as a shell script would. */
static void test_redis_cli(void **state)
{
    (void)state;
    char cli[512];
    if (dh_find_exe("redis-cli", NULL, cli, sizeof cli) != 0)
        fail_msg("redis-cli is missing: apt-get install redis-tools");
    dt_run r;
    const char *ping[] = {cli, "-p", port, "PING", NULL};
    run_argv(&r, ping);
    assert_string_equal(r.out, "PONG\n");
    const char *lock[] = {cli, "-p", port, "LOCK", "cli:name", "TTL", "10000", "DETACHED", NULL};
    run_argv(&r, lock);
    /* The array, one element a line: token, fence, validity. */
    char token[64];
    long long fence, validity;
    if (sscanf(r.out, "%63s %lld %lld", token, &fence, &validity) != 3 || strlen(token) != 32)
        fail_msg("LOCK printed '%s'", r.out);
    assert_true(fence >= 1 && validity > 0 && validity <= 10000);
    it_expect_holder(&it_srv, "cli:name", token);
    const char *again[] = {cli, "-p", port, "LOCK", "cli:name", NULL};
    run_argv(&r, again);
    assert_string_equal(r.out, "\n"); /* nil prints as an empty line when not a tty */
    const char *info[] = {cli, "-p", port, "LOCKINFO", "cli:name", NULL};
    run_argv(&r, info);
    assert_true(strncmp(r.out, "state\nheld\nholder\n", 18) == 0);
    const char *unlock[] = {cli, "-p", port, "UNLOCK", "cli:name", token, NULL};
    run_argv(&r, unlock);
    assert_string_equal(r.out, "1\n");
    run_argv(&r, unlock);
    assert_string_equal(r.out, "0\n");
    const char *infocmd[] = {cli, "-p", port, "INFO", NULL};
    run_argv(&r, infocmd);
    assert_non_null(strstr(r.out, "loading:0"));
    const char *bad[] = {cli, "-p", port, "LOCK", "cli:name", "TTL", "1", NULL};
    run_argv(&r, bad);
    assert_non_null(strstr(r.out, "ERR TTL must be"));
    /* Commands from stdin, as `redis-cli < file` sends them. */
    char cmdline[1024];
    snprintf(cmdline, sizeof cmdline,
             "printf 'PING\\nLOCK cli:stdin\\nCOMMAND DOCS\\nQUIT\\n' | %s -p %s", cli, port);
    const char *sh[] = {"/bin/sh", "-c", cmdline, NULL};
    run_argv(&r, sh);
    assert_true(strncmp(r.out, "PONG\n", 5) == 0);
}

static void test_redis_py(void **state)
{
    (void)state;
    need_exe("/usr/bin/python3", "python3");
    dt_run r;
    const char *check[] = {"/usr/bin/python3", "-c", "import redis", NULL};
    r.status = dh_run(check, NULL, r.out, sizeof r.out, r.err, sizeof r.err);
    if (r.status != 0)
        fail_msg("redis-py is missing for /usr/bin/python3 (apt-get install python3-redis): %s",
                 r.err);
    const char *argv[] = {"/usr/bin/python3", dt_client_script("redis_py.py"), port, NULL};
    run_argv(&r, argv);
    assert_non_null(strstr(r.out, "redis-py: all checks passed"));
}

static void test_phpredis(void **state)
{
    (void)state;
    need_exe("/usr/bin/php", "php-cli");
    dt_run r;
    const char *check[] = {"/usr/bin/php", "-r", "exit(class_exists('Redis') ? 0 : 1);", NULL};
    r.status = dh_run(check, NULL, r.out, sizeof r.out, r.err, sizeof r.err);
    if (r.status != 0)
        fail_msg("phpredis is missing (apt-get install php-redis)");
    const char *argv[] = {"/usr/bin/php", dt_client_script("phpredis.php"), port, NULL};
    run_argv(&r, argv);
    assert_non_null(strstr(r.out, "phpredis: all checks passed"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redis_cli),
        cmocka_unit_test(test_redis_py),
        cmocka_unit_test(test_phpredis),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
