/*
 * test_quorum.c: the Redlock arithmetic of src/fanout.c, src/round.c and src/node.c:
 *
 *   quorum(n)  = n/2 + 1
 *   validity   = ttl - elapsed - (ttl * drift_factor + drift_min), in microseconds
 *   a restarted server's grants wait max_lease - (uptime_in_seconds - 1) s
 *
 * validity is what a holder may count on, so it may round down (claim a little less
 * time) but never up: each expected value below is the exact real-number result,
 * and the function must give its floor or at most 1 us less.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "internal.h"

#include <limits.h>

static void test_quorum(void **state)
{
    (void)state;
    static const int want[] = {0, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6};
    for (int n = 1; n <= 10; n++)
        assert_int_equal(dlock__quorum(n), want[n]);
    assert_int_equal(dlock__quorum(DLOCK_SERVERS_MAX), DLOCK_SERVERS_MAX / 2 + 1);
    /* A quorum is a strict majority: two quorums always share a node. */
    for (int n = 1; n <= DLOCK_SERVERS_MAX; n++) {
        int q = dlock__quorum(n);
        assert_true(2 * q > n);
        assert_true(q <= n);
        assert_true(2 * (q - 1) <= n); /* and the smallest one */
    }
}

/*
 * Check dlock__validity_us against the exact value for a drift factor num/den:
 * floor(ttl - elapsed - drift_min - ttl * num / den).
 */
static void expect_validity(int64_t ttl_us, int64_t elapsed_us, double factor, int64_t num,
                            int64_t den, int64_t drift_min_us)
{
    int64_t drift_ceil = (ttl_us * num + den - 1) / den; /* ttl_us * num fits: tests are small */
    int64_t exact_floor = ttl_us - elapsed_us - drift_min_us - drift_ceil;
    int64_t got = dlock__validity_us(ttl_us, elapsed_us, factor, drift_min_us);
    if (got > exact_floor || got < exact_floor - 1)
        fail_msg("validity(ttl %lld, elapsed %lld, factor %g, min %lld) = %lld, want %lld "
                 "(or 1 less)",
                 (long long)ttl_us, (long long)elapsed_us, factor, (long long)drift_min_us,
                 (long long)got, (long long)exact_floor);
}

static void test_validity_defaults(void **state)
{
    (void)state;
    /* The defaults: factor 0.01, 2 ms. A 10 s lease granted in 1 ms: 10 s - 1 ms -
     * (100 ms + 2 ms) = 9.897 s. */
    expect_validity(10000000, 1000, 0.01, 1, 100, 2000);
    assert_int_equal(dlock__validity_us(10000000, 1000, 0.01, 2000), 9897000);
    expect_validity(30000000, 0, 0.01, 1, 100, 2000); /* 30 s: 29.698 s */
    expect_validity(30000000, 12345, 0.01, 1, 100, 2000);
    expect_validity(10000, 0, 0.01, 1, 100, 2000);    /* 10 ms: 7.9 ms */
    expect_validity(10000, 7900, 0.01, 1, 100, 2000); /* exactly nothing left */
    expect_validity(123457, 3, 0.01, 1, 100, 2000);   /* a fractional drift */
}

static void test_validity_shape(void **state)
{
    (void)state;
    /* No drift: ttl - elapsed. */
    assert_int_equal(dlock__validity_us(5000000, 1234, 0.0, 0), 5000000 - 1234);
    /* The constant part alone. */
    assert_int_equal(dlock__validity_us(5000000, 0, 0.0, 2000), 4998000);
    /* It falls one for one with elapsed time. */
    int64_t a = dlock__validity_us(20000000, 1000, 0.01, 2000);
    int64_t b = dlock__validity_us(20000000, 501000, 0.01, 2000);
    assert_int_equal(a - b, 500000);
    /* Other factors, including ones a double cannot hold exactly: 0.3 * 10 is
     * 2.9999999999999996 in doubles, and truncating it would claim 1 us too many. */
    expect_validity(1000000, 0, 0.05, 5, 100, 0);
    expect_validity(10, 0, 0.3, 3, 10, 0);
    expect_validity(1000010, 7, 0.3, 3, 10, 1);
    expect_validity(999999, 0, 0.1, 1, 10, 0);
}

static void test_validity_expired(void **state)
{
    (void)state;
    /* Slower than the lease: nothing is valid (callers test > 0). */
    assert_true(dlock__validity_us(10000, 10000, 0.01, 2000) <= 0);
    assert_true(dlock__validity_us(10000, 50000, 0.01, 2000) <= 0);
    assert_true(dlock__validity_us(10000, 7901, 0.01, 2000) <= 0);
    assert_true(dlock__validity_us(10000, 7899, 0.01, 2000) > 0);
}

static void test_validity_limits(void **state)
{
    (void)state;
    /* The longest lease, in microseconds, does not overflow. */
    int64_t ttl = (int64_t)DLOCK_TTL_MAX_MS * 1000;
    expect_validity(ttl, 0, 0.01, 1, 100, 2000);
    expect_validity(ttl, ttl / 2, 0.01, 1, 100, 2000);
    /* The shortest one. */
    expect_validity((int64_t)DLOCK_TTL_MIN_MS * 1000, 0, 0.01, 1, 100, 2000);
}

/* A server that says uptime_in_seconds:1 may have started a moment ago (its start and
 * its now are each read in whole seconds): its grants must wait a whole max lease, not
 * max lease - 1 s, which with a 1 s lease let them count at once. */
static void test_restart_wait(void **state)
{
    (void)state;
    assert_int_equal(dlock__restart_wait_ms(1000, 0), 1000);
    assert_int_equal(dlock__restart_wait_ms(1000, 1), 1000);
    assert_int_equal(dlock__restart_wait_ms(1000, 2), 0); /* up more than 1 s */
    assert_int_equal(dlock__restart_wait_ms(3000, 3), 1000);
    assert_true(dlock__restart_wait_ms(1000, 5) < 0);
    /* The server's word, bounded. */
    assert_int_equal(dlock__restart_wait_ms(1000, -7), 1000);
    assert_int_equal(dlock__restart_wait_ms(1000, LLONG_MAX), 1000 - INT64_C(315360000000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quorum),          cmocka_unit_test(test_validity_defaults),
        cmocka_unit_test(test_validity_shape),  cmocka_unit_test(test_validity_expired),
        cmocka_unit_test(test_validity_limits), cmocka_unit_test(test_restart_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
