/*
 * test_serverclock.c: the lock servers' own clocks faulted, on real redis-servers run
 * under libfaketime (the test support's dh_server_opts.clock): stepped back across a
 * restart without persistence (N = 1), running fast against the lease (N = 1), and
 * apart from each other by more or less than the lease (N = 3, the default fence mode).
 *
 * Each fault is tried within the assumption docs/guarantees.md states and beyond it.
 * Within it, fences never go back and no two holders overlap: counted and asserted
 * zero (FIG serverclock_fence_regressions, serverclock_overlaps). Beyond it, the
 * hazard must show (a test that could not show it could not fail either: asserted),
 * and where it is a fence that went back, the resource's own check (dlock_fenced_set
 * on a server of its own, on the host's clock) refuses the holder whose fence is the
 * lower one, whatever the lock did: FIG serverclock_hazard_*.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"
#include "workers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RESTARTS 10

/* The resource's register is on wk_res, on the host's clock. */
static int g_regressions, g_overlaps;

static int teardown(void **state)
{
    wk_res_teardown(state);
    printf("FIG serverclock_fence_regressions %d count\n", g_regressions);
    printf("FIG serverclock_overlaps %d count\n", g_overlaps);
    assert_int_equal(g_regressions, 0);
    assert_int_equal(g_overlaps, 0);
    return 0;
}

static dlock_client *client_of(const dh_server *s, int n)
{
    char urls[512];
    dh_server_urls(s, n, urls, sizeof urls);
    dlock_config cfg;
    it_config_init(&cfg);
    return it_client_cfg(urls, &cfg);
}

/* A lock server whose wall clock starts as clock says (dh_server_opts.clock) and can be
 * stepped while it runs or restarts, and a client of it. */
static dlock_client *clocked_server(dh_server *s, const char *clock)
{
    dh_server_opts o = {.clock = clock};
    assert_int_equal(dh_server_start_opts(s, &o), 0);
    return client_of(s, 1);
}

/* A holder that crashed holding name: its lock is left to its lease. */
static uint64_t take_and_crash(dlock_client *c, const char *name, int64_t ttl_ms)
{
    dlock_lock *l = it_acquire(c, name, ttl_ms);
    uint64_t fence = dlock_fence(l);
    dlock_lock_detach(l);
    return fence;
}

/* The resource's register: DLOCK_OK when it accepts a write with this fence. */
static int write_resource(dlock_client *res, uint64_t fence, const char *value)
{
    return dlock_fenced_set(res, "serverclock-register", fence, value, strlen(value));
}

/* N = 1, AOF off: the server is SIGKILLed and restarted at once, forgetting the lock
 * and its counter; the next grant's fence comes from the TIME floor, which is above
 * every earlier fence unless the clock went back by more than the restart took. */
static void restart_within(void **state)
{
    (void)state;
    dh_server s;
    dlock_client *c = clocked_server(&s, "+0");
    uint64_t last = take_and_crash(c, "sc-within", 60000);
    for (int i = 0; i < RESTARTS; i++) {
        dh_server_kill(&s);
        assert_int_equal(dh_server_restart(&s), 0);
        dlock_lock *l = it_acquire(c, "sc-within", 60000); /* forgotten: granted at once */
        uint64_t f = dlock_fence(l);
        g_regressions += f <= last;
        last = f;
        dlock_lock_detach(l);
    }
    dlock_client_free(c);
    dh_server_stop(&s);
}

/* The same restart with the server's clock stepped back a minute meanwhile: beyond
 * the assumption, the new holder's fence is below the crashed one's. The resource that
 * saw the crashed holder's write refuses the new holder's. */
static void restart_clock_back(void **state)
{
    (void)state;
    dh_server s;
    dlock_client *c = clocked_server(&s, "+0");
    dlock_client *res = it_client(&wk_res, it_timeout_ms());
    uint64_t a = take_and_crash(c, "sc-back", 60000);
    assert_int_equal(write_resource(res, a, "A"), DLOCK_OK);
    dh_server_kill(&s);
    assert_int_equal(dh_server_set_clock(&s, "-60s"), 0);
    assert_int_equal(dh_server_restart(&s), 0);
    dlock_lock *l = it_acquire(c, "sc-back", 60000);
    uint64_t b = dlock_fence(l);
    int shown = b < a;
    int refused = write_resource(res, b, "B") == DLOCK_ERR_FENCED;
    printf("FIG serverclock_hazard_shown %d bool\n", shown);
    printf("FIG serverclock_hazard_fence_back_ms %lld ms\n", (long long)(a - b) / 1000);
    printf("FIG serverclock_hazard_writes_refused %d bool\n", refused);
    assert_int_equal(shown, 1);
    assert_int_equal(refused, 1);
    dlock_release(l);
    dlock_client_free(res);
    dlock_client_free(c);
    dh_server_stop(&s);
}

/* N = 1, a server clock running fast: its keys expire early in real time, and a
 * second holder can be granted while the first still counts validity on its own
 * clock. The drift allowance (1% of the lease plus 2 ms) covers a clock 0.5% fast;
 * 10% fast it cannot. Returns how long the second grant came before the first
 * holder's validity ended, in ms (negative: after it). */
static double fast_clock_overlap(const char *clock, int64_t ttl_ms)
{
    dh_server s;
    dlock_client *a = clocked_server(&s, clock), *b = client_of(&s, 1);
    dlock_lock *la = it_acquire(a, "sc-fast", ttl_ms);
    int64_t valid_until = dh_now_us() + dlock_remaining_ms(la) * 1000;
    dlock_opts bo = {0};
    bo.ttl_ms = ttl_ms;
    bo.wait_ms = 3 * ttl_ms;
    dlock_lock *lb = NULL;
    int rc = dlock_acquire(b, "sc-fast", &bo, &lb);
    int64_t granted = dh_now_us();
    assert_int_equal(rc, DLOCK_OK);
    dlock_release(lb);
    dlock_lock_detach(la);
    dlock_client_free(a);
    dlock_client_free(b);
    dh_server_stop(&s);
    return (double)(valid_until - granted) / 1000.0;
}

static void fast_clock(void **state)
{
    (void)state;
    double within = fast_clock_overlap("+0 x1.005", 5000);
    double beyond = fast_clock_overlap("+0 x1.10", 5000);
    printf("FIG serverclock_fast_0_5pct_margin_ms %.1f ms\n", -within);
    printf("FIG serverclock_hazard_fast_10pct_overlap_ms %.1f ms\n", beyond);
    g_overlaps += within > 0;
    /* 10% of a 5 s lease is some 450 ms gone early, less the 52 ms allowance: the
     * second grant comes about 400 ms before the first holder's validity ends (a late
     * wake-up of the second holder only shortens the overlap shown). */
    assert_true(beyond > 0);
}

/* N = 3, the default fence mode: the lock's fence is the highest of its granting
 * quorum's, and a later quorum meets it on some node whose counter was raised past it
 * by a release, or whose TIME floor is past it once the lease is over, as long as the
 * nodes' clocks differ by less than the lease. A crashed holder granted by nodes 1 and
 * 2 (node 0 paused), node 2's clock ahead by `skew`; then a new holder granted by nodes
 * 0 and 1 (node 2 paused) once the lease is over. Returns the new fence less the
 * crashed one's, in ms. */
static double skewed_quorums(const char *skew, int64_t ttl_ms)
{
    dh_server s[3];
    assert_int_equal(dh_servers_start(s, 2, NULL), 0);
    dh_server_opts o = {.clock = skew};
    assert_int_equal(dh_server_start_opts(&s[2], &o), 0);
    dlock_client *c = client_of(s, 3);
    dlock_client *res = it_client(&wk_res, it_timeout_ms());
    /* Connections made first: a node paused in its handshake would cost the connect
     * timeout, which a slowed run (the sanitizers) could make longer than the lease. */
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "sc-skew", &h), DLOCK_OK);
    dh_server_pause(&s[0]);
    uint64_t a = take_and_crash(c, "sc-skew", ttl_ms);
    dh_server_resume(&s[0]);
    assert_int_equal(write_resource(res, a, "A"), DLOCK_OK);
    dh_sleep_ms(ttl_ms + 50);
    dh_server_pause(&s[2]);
    dlock_lock *l = it_acquire(c, "sc-skew", ttl_ms);
    uint64_t b = dlock_fence(l);
    dh_server_resume(&s[2]);
    int rc = write_resource(res, b, "B");
    /* Whatever the lock did, the register keeps its order. */
    assert_int_equal(rc, b > a ? DLOCK_OK : DLOCK_ERR_FENCED);
    dlock_release(l);
    dlock_client_free(res);
    dlock_client_free(c);
    dh_servers_stop(s, 3);
    return ((double)b - (double)a) / 1000.0;
}

static void skew_n3(void **state)
{
    (void)state;
    /* 200 ms apart against a lease of 1 s (times the slack, for slowed runs): within. */
    int64_t ttl_ms = 1000 * dh_slack();
    double within = skewed_quorums("+0.2s", ttl_ms);
    /* A minute apart: beyond. */
    double beyond = skewed_quorums("+60s", ttl_ms);
    printf("FIG serverclock_n3_skew_200ms_fence_gain_ms %.1f ms\n", within);
    printf("FIG serverclock_hazard_n3_skew_60s_fence_back_ms %.1f ms\n", -beyond);
    g_regressions += within <= 0;
    assert_true(beyond < 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(restart_within),
        cmocka_unit_test(restart_clock_back),
        cmocka_unit_test(fast_clock),
        cmocka_unit_test(skew_n3),
    };
    return cmocka_run_group_tests(tests, wk_res_setup, teardown);
}
