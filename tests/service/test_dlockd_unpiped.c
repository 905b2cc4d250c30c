/*
 * test_dlockd_unpiped.c: dlockd in front of a lock server named by a host name, which
 * its library client cannot pipeline (each round then takes connections of its own, and
 * the steps that would block run on the pool): the log says so at the start, and LOCK,
 * LOCKINFO, CHECK, EXTEND, UNLOCK, a waiter served by an UNLOCK, and the release of a
 * closing connection's session lock work as they do on the pipes. Real redis-server and
 * dlockd processes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <stdio.h>
#include <unistd.h>

static void test_dlockd_unpiped_commands(void **state)
{
    (void)state;
    char log[512], url[128];
    dt_log_path(log, sizeof log, "unpiped");
    dt_next_log(log);
    snprintf(url, sizeof url, "redis://localhost:%d", it_srv.port);
    dt_daemon d;
    dt_start(&d, url, NULL);
    assert_true(dt_log_has(log, "lock servers not pipelined"));
    redisContext *a = dt_connect(&d), *b = dt_connect(&d);
    long jobs0 = dt_info(a, "pool_jobs");
    dt_lock l, l2;
    dt_expect_lock(dt_cmd(a, "LOCK unpiped"), &l);
    it_expect_holder(&it_srv, "unpiped", l.token);
    assert_int_equal(dt_lockinfo(b, "unpiped", "fence"), l.fence);
    dt_expect_int(dt_cmd(a, "CHECK unpiped %s", l.token), 1);
    dt_expect_int(dt_cmd(a, "EXTEND unpiped %s 60000", l.token), 1);
    /* A waiter, served by the holder's UNLOCK. */
    dt_send(b, "LOCK unpiped WAIT %lld", (long long)(10000 * dh_slack()));
    dt_wait_info(a, "blocked_clients", 1, 5000 * dh_slack());
    dt_expect_int(dt_cmd(a, "UNLOCK unpiped %s", l.token), 1);
    dt_expect_lock(dt_reply(b), &l2);
    assert_true(l2.fence > l.fence);
    it_expect_holder(&it_srv, "unpiped", l2.token);
    /* The waiter's session lock, released at its close. */
    redisFree(b);
    dt_wait_key_gone("unpiped", 5000 * dh_slack());
    assert_int_equal(dt_info(a, "session_locks"), 0);
    /* Each of those rounds ran on the pool. */
    assert_true(dt_info(a, "pool_jobs") > jobs0);
    redisFree(a);
    assert_int_equal(dt_stop(&d), 0);
    unlink(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dlockd_unpiped_commands),
    };
    return cmocka_run_group_tests(tests, it_srv_setup, it_srv_teardown);
}
