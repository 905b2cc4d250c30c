/*
 * test_dlockd_waiters.c: waiters that dlockd queues on the lock server, behind another
 * client (a second dlockd holds the names), as a fleet of dlockds in front of one Redis
 * has them. While they wait, each refreshes its place once a second: rounds on the
 * pipes, never a job on the pool (INFO pool_jobs), so waiting costs no thread however
 * many wait; a waiter that leaves mid-wait leaves the queue; and the holder's UNLOCKs
 * serve the others through the queue, in fence order per name.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <stdio.h>
#include <string.h>

enum { NAMES = 4, WAITERS = 40, LEAVERS = 4 };

static void test_waiters_refresh_on_the_loop(void **state)
{
    (void)state;
    dt_daemon other;
    dt_start(&other, it_srv.url, NULL);
    redisContext *holder = dt_connect(&other), *mon = dt_connect(&dt_one);
    dt_lock held[NAMES];
    for (int i = 0; i < NAMES; i++)
        dt_expect_lock(dt_cmd(holder, "LOCK refresh-%d", i), &held[i]);
    static redisContext *w[WAITERS];
    static bool served[WAITERS];
    for (int i = 0; i < WAITERS; i++) {
        w[i] = dt_connect(&dt_one);
        served[i] = false;
        dt_send(w[i], "LOCK refresh-%d WAIT 60000", i % NAMES);
    }
    dt_wait_info(mon, "blocked_clients", WAITERS, 10000 * dh_slack());
    char queue[64];
    it_queue_key(queue, sizeof queue, "refresh-0");
    assert_int_equal(it_int_reply(dh_cmd(&it_srv, "ZCARD %s", queue)), WAITERS / NAMES);

    /* Two refreshes a waiter (a refresh is a script call on the server), about 2 s. */
    long jobs0 = dt_info(mon, "pool_jobs");
    long long calls0 = it_script_calls(&it_srv), calls;
    int64_t t0 = dh_now_ms(), deadline = t0 + 5000 * dh_slack();
    while ((calls = it_script_calls(&it_srv) - calls0) < 2 * WAITERS) {
        assert_true(dh_now_ms() < deadline);
        dh_sleep_ms(50);
    }
    long jobs = dt_info(mon, "pool_jobs") - jobs0;
    print_message("FIG dlockd_waiters_refreshes %lld script calls in %lld ms for %d waiters, %ld "
                  "pool jobs\n",
                  calls, (long long)(dh_now_ms() - t0), WAITERS, jobs);
    assert_int_equal(jobs, 0);

    /* Waiters that leave mid-wait leave the queue (the first of each name: the next in
     * line is served instead). */
    for (int i = 0; i < LEAVERS; i++) {
        redisFree(w[i]);
        w[i] = NULL;
        served[i] = true;
    }
    dt_wait_info(mon, "blocked_clients", WAITERS - LEAVERS, 5000 * dh_slack());
    deadline = dh_now_ms() + 5000 * dh_slack();
    while (it_int_reply(dh_cmd(&it_srv, "ZCARD %s", queue)) != WAITERS / NAMES - 1)
        assert_true(dh_now_ms() < deadline);

    /* The holder's UNLOCKs hand each name to its first waiter still there; each waiter
     * served unlocks, which serves the next. */
    for (int i = 0; i < NAMES; i++)
        dt_expect_int(dt_cmd(holder, "UNLOCK refresh-%d %s", i, held[i].token), 1);
    long long last_fence[NAMES];
    for (int i = 0; i < NAMES; i++)
        last_fence[i] = held[i].fence;
    dt_serve_in_turn(w, served, WAITERS, "refresh", NAMES, last_fence,
                     dh_now_ms() + 20000 * dh_slack());
    assert_int_equal(dt_info(mon, "blocked_clients"), 0);
    for (int i = 0; i < NAMES; i++) {
        char name[32], key[64];
        snprintf(name, sizeof name, "refresh-%d", i);
        it_key(key, sizeof key, name);
        assert_int_equal(it_exists(&it_srv, key), 0);
    }
    for (int i = LEAVERS; i < WAITERS; i++)
        redisFree(w[i]);
    redisFree(mon);
    redisFree(holder);
    assert_int_equal(dt_stop(&other), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_waiters_refresh_on_the_loop),
    };
    return cmocka_run_group_tests(tests, dt_one_setup, dt_one_teardown);
}
