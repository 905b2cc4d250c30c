/*
 * test_dlockd_scale.c: dlockd with 9,850 clients, 2,000 of them blocked in LOCK on 100
 * names: no thread per client (at most 16 in all), bounded memory, and every waiter
 * served as the names pass from hand to hand, each holder's lock released by closing
 * its connection (session locks). 9,850: dlockd counts two descriptors a client (a
 * waiter's wake-up too) and keeps 224 for its lock server, so the hard limit of 20,000
 * that test machines have (and that an unprivileged process cannot raise) allows 9,888
 * clients. Needs
 * 10,000 descriptors in this process and in dlockd (both raise their soft limit to the
 * hard one); fails, never skips, without.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

enum { CLIENTS = 9850, WAITERS = 2000, NAMES = 100 };

static void raise_nofile(void)
{
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = rl.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < CLIENTS + 100)
        fail_msg("this test needs %d descriptors; the hard limit is %llu (ulimit -Hn)",
                 CLIENTS + 100, (unsigned long long)rl.rlim_cur);
}

/* Connections so far must all be accepted before more come, so that the listen queue
 * never overflows (a dropped SYN costs a second). */
static void wait_connected(redisContext *mon, long n)
{
    int64_t deadline = dh_now_ms() + 30000 * dh_slack();
    while (dt_info(mon, "connected_clients") < n)
        assert_true(dh_now_ms() < deadline);
}

static void test_ten_thousand_clients(void **state)
{
    (void)state;
    raise_nofile();
    dt_daemon d;
    dt_start(&d, it_srv.url, NULL);
    redisContext *mon = dt_connect(&d);
    /* The holder takes the 100 names with session locks. */
    int holder = dt_raw(&d);
    for (int i = 0; i < NAMES; i++) {
        char cmd[64];
        int n = snprintf(cmd, sizeof cmd, "LOCK scale-%d\r\n", i);
        dt_raw_write(holder, cmd, (size_t)n);
    }
    int64_t deadline = dh_now_ms() + 30000 * dh_slack();
    while (dt_info(mon, "session_locks") != NAMES)
        assert_true(dh_now_ms() < deadline);

    static int w[WAITERS];
    for (int i = 0; i < WAITERS; i++) {
        w[i] = dt_raw(&d);
        char cmd[64];
        int n = snprintf(cmd, sizeof cmd, "LOCK scale-%d WAIT 600000\r\n", i % NAMES);
        dt_raw_write(w[i], cmd, (size_t)n);
        if (i % 500 == 499)
            wait_connected(mon, i + 3);
    }
    static int idle[CLIENTS - WAITERS - 2];
    int nidle = CLIENTS - WAITERS - 2;
    for (int i = 0; i < nidle; i++) {
        idle[i] = dt_raw(&d);
        if (i % 500 == 499)
            wait_connected(mon, WAITERS + 2 + i + 1);
    }
    wait_connected(mon, CLIENTS);
    while (dt_info(mon, "blocked_clients") != WAITERS)
        assert_true(dh_now_ms() < deadline);
    long long threads = dt_threads(d.pid), rss = dt_rss_kib(d.pid);
    print_message("FIG dlockd_scale_threads %lld threads\n", threads);
    print_message("FIG dlockd_scale_rss_kib %lld KiB\n", rss);
    assert_true(threads > 0 && threads <= 16);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    assert_true(rss > 0 && rss < 200 * 1024);
#endif

    /* The holder goes: each name passes to its first waiter, who goes in turn. */
    int64_t t0 = dh_now_ms();
    close(holder);
    static struct pollfd p[WAITERS];
    int served = 0;
    deadline = dh_now_ms() + 120000 * dh_slack();
    while (served < WAITERS) {
        assert_true(dh_now_ms() < deadline);
        for (int i = 0; i < WAITERS; i++)
            p[i] = (struct pollfd){.fd = w[i], .events = POLLIN};
        assert_true(poll(p, WAITERS, 1000) >= 0);
        for (int i = 0; i < WAITERS; i++) {
            if (w[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[256];
            ssize_t n = recv(w[i], buf, sizeof buf - 1, 0);
            assert_true(n > 0);
            buf[n] = '\0';
            if (strncmp(buf, "*3\r\n$32\r\n", 9) != 0)
                fail_msg("waiter %d got '%s'", i, buf);
            close(w[i]); /* its session lock goes with it */
            w[i] = -1;
            served++;
        }
    }
    int64_t took = dh_now_ms() - t0;
    print_message("FIG dlockd_scale_%d_waiters_served_ms %lld ms\n", WAITERS, (long long)took);
    for (int i = 0; i < nidle; i++)
        close(idle[i]);
    deadline = dh_now_ms() + 30000 * dh_slack();
    while (dt_info(mon, "session_locks") != 0)
        assert_true(dh_now_ms() < deadline);
    assert_int_equal(dt_info(mon, "blocked_clients"), 0);
    redisFree(mon);
    assert_int_equal(dt_stop(&d), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ten_thousand_clients),
    };
    return cmocka_run_group_tests(tests, it_srv_setup, it_srv_teardown);
}
