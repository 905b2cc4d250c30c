/*
 * test_client_clock.c: scenario 9 of the fault suite (docs/testing.md): the client's clock
 * runs fast or slow, or steps, through the test build's clock hook (src/hooks.h).
 *
 * Property: the validity the library reports never exceeds the true remaining
 * validity while the rate error is within the drift factor (1 %), and a backward
 * step never lengthens it. The truth is the server: PTTL of the key, read right
 * after dlock_remaining_ms() (so the true value can only be smaller than what PTTL
 * said at the moment of comparison by the time of a round trip, which only makes the
 * check stricter).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"
#include "internal.h" /* dlock__now_us, the hooks */

#include <stdio.h>
#include <string.h>

static void reset_clock(void)
{
    atomic_store(&dlock__test_hooks.rate_ppm, 0);
    atomic_store(&dlock__test_hooks.offset_us, 0);
    atomic_store(&dlock__test_hooks.frozen_at_us, 0);
}

/* Hold a lock of ttl_ms with the client's clock at rate_ppm, and compare the
 * reported validity with the server's PTTL every few ms until it runs out. Returns
 * the worst excess (reported - true), which must be <= 0. */
static int64_t worst_excess(dlock_client *c, int64_t rate_ppm, int64_t ttl_ms, int *samples)
{
    atomic_store(&dlock__test_hooks.rate_base_us, dlock__real_now_us());
    atomic_store(&dlock__test_hooks.rate_ppm, rate_ppm);
    dlock_lock *l = it_acquire(c, "clock", ttl_ms);
    char key[64];
    it_key(key, sizeof key, "clock");
    int64_t worst = INT64_MIN;
    *samples = 0;
    for (;;) {
        /* The server's PTTL first, then ours: the server sampled its clock before the
         * reply arrived, so any delay between the two readings (a loaded machine)
         * only makes ours look smaller. Read the other way round, a delay would show
         * as an excess the library never had. */
        long long pttl = it_pttl(&it_srv, key);
        int64_t reported = dlock_remaining_ms(l);
        if (reported <= 0 || pttl < 0)
            break;
        (*samples)++;
        if (reported - pttl > worst)
            worst = reported - pttl;
        dh_sleep_ms(ttl_ms / 40);
    }
    dlock_release(l);
    reset_clock();
    return worst;
}

static void rate_errors_within_the_drift_factor(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, it_timeout_ms());
    /* The default drift factor is 1 % (10,000 ppm): a clock 0.9 % slow or fast. */
    const int64_t rates[] = {-9000, -5000, 0, 5000, 9000};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
        int n;
        int64_t worst = worst_excess(c, rates[i], 1000 * dh_slack(), &n);
        printf("FIG clock_rate_%lldppm_worst_excess_ms %lld ms (%d samples; <= 0 is safe)\n",
               (long long)rates[i], (long long)worst, n);
        assert_true(n > 10);
        assert_true(worst <= 0);
    }
    dlock_client_free(c);
}

static void a_rate_error_beyond_the_drift_factor_is_detected(void **state)
{
    (void)state;
    /* Not a promise, a demonstration: 5 % slow exceeds the 1 % allowance, and the
     * reported validity overstates the truth near the end of the lease. */
    dlock_client *c = it_client(&it_srv, it_timeout_ms());
    int n;
    int64_t worst = worst_excess(c, -50000, 1000 * dh_slack(), &n);
    printf("FIG clock_rate_-50000ppm_worst_excess_ms %lld ms (beyond the drift factor: "
           "overstated, as documented)\n",
           (long long)worst);
    assert_true(worst > 0);
    dlock_client_free(c);
}

static void steps(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, it_timeout_ms());
    dlock_lock *l = it_acquire(c, "step", 2000 * dh_slack());
    int64_t before = dlock_remaining_ms(l);
    /* A backward step never lengthens the validity: the hook's clock steps back, and
     * the library's own guard (clock.c) holds its time where it was. */
    atomic_fetch_sub(&dlock__test_hooks.offset_us, 500000);
    int64_t after_back = dlock_remaining_ms(l);
    printf("FIG backward_step_500ms remaining %lld -> %lld ms\n", (long long)before,
           (long long)after_back);
    assert_true(after_back <= before);
    /* A forward step shortens it (the lock may look lost early: safe). */
    atomic_fetch_add(&dlock__test_hooks.offset_us, 500000 + 1500000 * dh_slack());
    int64_t after_fwd = dlock_remaining_ms(l);
    printf("FIG forward_step remaining %lld ms\n", (long long)after_fwd);
    assert_true(after_fwd <= before - 1500 * dh_slack());
    /* A frozen clock: remaining stops, never grows. */
    atomic_store(&dlock__test_hooks.frozen_at_us, dlock__now_us());
    int64_t frozen = dlock_remaining_ms(l);
    dh_sleep_ms(50);
    assert_true(dlock_remaining_ms(l) <= frozen);
    reset_clock();
    dlock_release(l);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rate_errors_within_the_drift_factor),
        cmocka_unit_test(a_rate_error_beyond_the_drift_factor_is_detected),
        cmocka_unit_test(steps),
    };
    return cmocka_run_group_tests_name("client_clock", tests, it_srv_setup, it_srv_teardown);
}
