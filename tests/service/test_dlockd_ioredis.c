/*
 * test_dlockd_ioredis.c: dlockd with ioredis, the Node client, from npm at the exact
 * version tests/service/clients/node/package.json pins (package-lock.json beside it;
 * tools/ensure-deps.sh installs it there with `npm ci`). The checks are in
 * clients/node/ioredis_test.js: ioredis' ready check (INFO with loading:0), LOCK through
 * call(), a second connection's LOCK ... WAIT served by the first's UNLOCK, LOCKINFO,
 * a session lock released when its connection quits, pipelined LOCKs. node or ioredis
 * missing fails the test, never skips it.
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

static void test_ioredis(void **state)
{
    (void)state;
    char node[512];
    if (dh_find_exe("node", "DLOCK_NODE", node, sizeof node) != 0)
        fail_msg("node is missing: tools/ensure-deps.sh installs Debian's nodejs and npm "
                 "when no node is on PATH");
    const char *dir = getenv("DLOCKD_CLIENTS");
    if (dir == NULL)
        fail_msg("$DLOCKD_CLIENTS is not set; run through CTest");
    char script[1024], resolve[1200];
    snprintf(script, sizeof script, "%s/node/ioredis_test.js", dir);
    snprintf(resolve, sizeof resolve, "require.resolve('ioredis', {paths: ['%s/node']})", dir);
    char out[16384], err[8192];
    const char *check[] = {node, "-e", resolve, NULL};
    if (dh_run(check, NULL, out, sizeof out, err, sizeof err) != 0)
        fail_msg("ioredis is not installed in %s/node: run tools/ensure-deps.sh (npm ci "
                 "there)\n%s",
                 dir, err);
    char port[16];
    snprintf(port, sizeof port, "%d", dt_one.port);
    const char *argv[] = {node, script, port, NULL};
    int st = dh_run(argv, NULL, out, sizeof out, err, sizeof err);
    fputs(out, stdout); /* its FIG lines */
    if (st != 0)
        fail_msg("ioredis_test.js exited %d\nstdout:\n%s\nstderr:\n%s", st, out, err);
    assert_non_null(strstr(out, "ioredis: all checks passed"));
    /* Both connections are gone: nothing of theirs is left in dlockd. */
    redisContext *c = dt_connect(&dt_one);
    int64_t deadline = dh_now_ms() + 5000 * dh_slack();
    while (dt_info(c, "connected_clients") != 1 || dt_info(c, "session_locks") != 0) {
        if (dh_now_ms() > deadline)
            fail_msg("after ioredis left: connected_clients %ld, session_locks %ld",
                     dt_info(c, "connected_clients"), dt_info(c, "session_locks"));
        dh_sleep_ms(5);
    }
    redisFree(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ioredis),
    };
    return cmocka_run_group_tests(tests, dt_one_setup, dt_one_teardown);
}
