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

/* A client library, run by its interpreter on a script of ours in $DLOCKD_CLIENTS
 * that prints "LIBRARY: all checks passed" at its end. */
typedef struct script_client {
    const char *library, *library_package;
    const char *exe, *exe_package;
    const char *check_flag, *check_code; /* exe FLAG CODE exits 0 when the library loads */
    const char *script;
} script_client;

static script_client redis_py = {"redis-py", "python3-redis", "/usr/bin/python3", "python3",
                                 "-c",       "import redis",  "redis_py.py"};
static script_client phpredis = {"phpredis",    "php-redis", "/usr/bin/php",
                                 "php-cli",     "-r",        "exit(class_exists('Redis') ? 0 : 1);",
                                 "phpredis.php"};

static void test_script_client(void **state)
{
    const script_client *sc = *state;
    need_exe(sc->exe, sc->exe_package);
    dt_run r;
    const char *check[] = {sc->exe, sc->check_flag, sc->check_code, NULL};
    r.status = dh_run(check, NULL, r.out, sizeof r.out, r.err, sizeof r.err);
    if (r.status != 0)
        fail_msg("%s is missing for %s (apt-get install %s): %s", sc->library, sc->exe,
                 sc->library_package, r.err);
    const char *argv[] = {sc->exe, dt_client_script(sc->script), port, NULL};
    run_argv(&r, argv);
    char passed[64];
    snprintf(passed, sizeof passed, "%s: all checks passed", sc->library);
    assert_non_null(strstr(r.out, passed));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redis_cli),
        IT_CASE("test_redis_py", test_script_client, &redis_py),
        IT_CASE("test_phpredis", test_script_client, &phpredis),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
