/*
 * test_duration.c: the durations of the command line (cli/duration.c), every form it
 * accepts and refuses, and the edges: exact decimals, sub-millisecond fractions,
 * INT64 overflow, and the lease range of -t.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "dlock.h"
#include "duration.h"

/* Parse s and expect ms. A failure names the input, which cmocka would not. */
static void expect_ms(const char *s, int64_t want)
{
    int64_t got = -12345;
    char err[256] = "";
    int rc = cli_parse_duration(s, &got, err, sizeof err);
    if (rc != 0 || got != want)
        fail_msg("\"%s\": rc %d, got %lld, want %lld (%s)", s, rc, (long long)got, (long long)want,
                 err);
}

/* Expect s refused, with a message containing `why`, and *out untouched. */
static void expect_bad(int (*parse)(const char *, int64_t *, char *, size_t), const char *s,
                       const char *why)
{
    int64_t got = -12345;
    char err[256] = "";
    int rc = parse(s, &got, err, sizeof err);
    if (rc != -1)
        fail_msg("\"%s\": accepted as %lld", s ? s : "(null)", (long long)got);
    assert_int_equal(got, -12345);
    assert_true(err[0] != '\0');
    assert_null(strchr(err, '\n'));
    if (why != NULL && strstr(err, why) == NULL)
        fail_msg("\"%s\": message \"%s\" lacks \"%s\"", s ? s : "(null)", err, why);
}

static void test_units(void **state)
{
    (void)state;
    expect_ms("0", 0);
    expect_ms("0ms", 0);
    expect_ms("1ms", 1);
    expect_ms("250ms", 250);
    expect_ms("1s", 1000);
    expect_ms("1", 1000); /* a bare number is seconds */
    expect_ms("30", 30000);
    expect_ms("1m", 60000);
    expect_ms("1h", 3600000);
    expect_ms("24h", 86400000);
    expect_ms("1d", 86400000);
    expect_ms("7d", 604800000);
    expect_ms("0.5d", 43200000);
    expect_ms("0.0000003125d", 27); /* 10 fraction digits, exactly 27 ms */
    expect_ms("007s", 7000);        /* leading zeros are only zeros */
}

static void test_decimals_exact(void **state)
{
    (void)state;
    expect_ms("1.5s", 1500);
    expect_ms("0.5m", 30000);
    expect_ms("0.1s", 100);
    expect_ms("0.2s", 200);
    expect_ms("0.3s", 300); /* 0.1 + 0.2 in doubles is 0.30000000000000004 */
    expect_ms("0.7s", 700); /* 0.7 * 1000 in doubles is 699.9999999999999 */
    expect_ms("4.35s", 4350);
    expect_ms("2.675s", 2675);
    expect_ms("1.001s", 1001);
    expect_ms("0.001s", 1);
    expect_ms("1.25m", 75000);
}

static void test_decimals_units(void **state)
{
    (void)state;
    expect_ms("0.01m", 600);
    expect_ms("0.00005m", 3);
    expect_ms("0.5h", 1800000);
    expect_ms("0.0001h", 360);
    expect_ms("0.0000025h", 9);
    expect_ms("1.0ms", 1);
    expect_ms("1.000ms", 1);
    /* Trailing zeros past the millisecond are still exact. */
    expect_ms("1.50000000000000000000000000000s", 1500);
    expect_ms("0.0010000000s", 1);
}

static void test_sub_ms_refused(void **state)
{
    (void)state;
    expect_bad(cli_parse_duration, "1.5ms", "finer than 1 ms");
    expect_bad(cli_parse_duration, "0.1ms", "finer than 1 ms");
    expect_bad(cli_parse_duration, "1.0005s", "finer than 1 ms");
    expect_bad(cli_parse_duration, "0.0001s", "finer than 1 ms");
    expect_bad(cli_parse_duration, "0.0004", "finer than 1 ms");
    expect_bad(cli_parse_duration, "0.000001m", "finer than 1 ms");
    expect_bad(cli_parse_duration, "0.00001m", "finer than 1 ms");   /* 0.6 ms */
    expect_bad(cli_parse_duration, "0.0000005h", "finer than 1 ms"); /* 1.8 ms */
    expect_bad(cli_parse_duration, "0.000001h", "finer than 1 ms");  /* 3.6 ms */
    expect_bad(cli_parse_duration, "0.00000001h", "finer than 1 ms");
    expect_bad(cli_parse_duration, "0.00000031251d", "finer than 1 ms");
    expect_bad(cli_parse_duration, "1.00000000000000000001s", "finer than 1 ms");
}

static void test_forms_refused(void **state)
{
    (void)state;
    expect_bad(cli_parse_duration, NULL, "empty");
    expect_bad(cli_parse_duration, "", "empty");
    expect_bad(cli_parse_duration, "-1s", "negative");
    expect_bad(cli_parse_duration, "-0", "negative");
    expect_bad(cli_parse_duration, "+1s", "not a duration");
    expect_bad(cli_parse_duration, " 1s", "not a duration");
    expect_bad(cli_parse_duration, "1s ", "unknown unit");
    expect_bad(cli_parse_duration, "1 s", "unknown unit");
    expect_bad(cli_parse_duration, "abc", "not a duration");
    expect_bad(cli_parse_duration, "s", "not a duration");
    expect_bad(cli_parse_duration, "5x", "unknown unit");
    expect_bad(cli_parse_duration, "5sec", "unknown unit");
    expect_bad(cli_parse_duration, "5S", "unknown unit");
    expect_bad(cli_parse_duration, "5D", "unknown unit");
    expect_bad(cli_parse_duration, "5us", "unknown unit");
    expect_bad(cli_parse_duration, "1s1", "unknown unit");
    expect_bad(cli_parse_duration, "1s5ms", "unknown unit");
    expect_bad(cli_parse_duration, "1e3", "unknown unit");
    expect_bad(cli_parse_duration, "1e3ms", "unknown unit");
    expect_bad(cli_parse_duration, "0x10", "unknown unit");
    expect_bad(cli_parse_duration, "1,5s", "unknown unit");
    expect_bad(cli_parse_duration, "1..5s", "digit is needed after");
    expect_bad(cli_parse_duration, "1.s", "digit is needed after");
    expect_bad(cli_parse_duration, "1.", "digit is needed after");
    expect_bad(cli_parse_duration, ".5s", "digit is needed before");
    expect_bad(cli_parse_duration, "1.5.5s", "unknown unit");
    expect_bad(cli_parse_duration, "nan", "not a duration");
    expect_bad(cli_parse_duration, "NaN", "not a duration");
    expect_bad(cli_parse_duration, "inf", "not a duration");
    expect_bad(cli_parse_duration, "-inf", "negative");
    expect_bad(cli_parse_duration, "infinity", "not a duration");
    expect_bad(cli_parse_duration, "forever", "not a duration"); /* only for WAIT */
    expect_bad(cli_parse_duration, "1s\n", "unknown unit \"s?\"");
    expect_bad(cli_parse_duration, "1\x1b[2J", "unknown unit \"?[2J\"");
    /* An embedded NUL ends the string as the shell passes it: "1\0x" is "1". */
}

static void test_overflow(void **state)
{
    (void)state;
    char buf[64];
    /* INT64_MAX ms itself is the largest value. */
    snprintf(buf, sizeof buf, "%lldms", (long long)INT64_MAX);
    expect_ms(buf, INT64_MAX);
    expect_ms("9223372036854775807ms", INT64_MAX);
    expect_bad(cli_parse_duration, "9223372036854775808ms", "too large");
    expect_bad(cli_parse_duration, "99999999999999999999999999ms", "too large");
    expect_bad(cli_parse_duration, "18446744073709551616ms", "too large"); /* 2^64 */
    /* Largest whole seconds: floor(INT64_MAX / 1000). */
    expect_ms("9223372036854775s", 9223372036854775000);
    expect_ms("9223372036854775.807s", INT64_MAX);
    expect_bad(cli_parse_duration, "9223372036854775.808s", "too large");
    expect_bad(cli_parse_duration, "9223372036854776s", "too large");
    expect_ms("2562047788015h", 2562047788015 * 3600000LL);
    expect_bad(cli_parse_duration, "2562047788016h", "too large");
    expect_ms("153722867280912.9m", 9223372036854774000);
    expect_bad(cli_parse_duration, "153722867280912.95m", "too large");
    expect_ms("153722867280912m", 153722867280912 * 60000LL);
    /* Unit errors come before size errors: the unit is the likelier mistake. */
    expect_bad(cli_parse_duration, "99999999999999999999999x", "unknown unit");
}

static void test_ttl(void **state)
{
    (void)state;
    int64_t ms = -1;
    char err[256];
    assert_int_equal(cli_parse_ttl("30s", &ms, err, sizeof err), 0);
    assert_int_equal(ms, 30000);
    assert_int_equal(cli_parse_ttl("10ms", &ms, err, sizeof err), 0);
    assert_int_equal(ms, DLOCK_TTL_MIN_MS);
    assert_int_equal(cli_parse_ttl("0.01", &ms, err, sizeof err), 0);
    assert_int_equal(ms, DLOCK_TTL_MIN_MS);
    assert_int_equal(cli_parse_ttl("2147483647ms", &ms, err, sizeof err), 0);
    assert_int_equal(ms, DLOCK_TTL_MAX_MS);
    assert_int_equal(cli_parse_ttl("2147483.647s", &ms, err, sizeof err), 0);
    assert_int_equal(ms, DLOCK_TTL_MAX_MS);
    assert_int_equal(cli_parse_ttl("596h", &ms, err, sizeof err), 0);
    assert_int_equal(ms, 596 * 3600000LL);
    expect_bad(cli_parse_ttl, "597h", "from 10ms to 2147483647ms");
    expect_bad(cli_parse_ttl, "0", "lease of 0");
    expect_bad(cli_parse_ttl, "0s", "lease of 0");
    expect_bad(cli_parse_ttl, "0ms", "lease of 0");
    expect_bad(cli_parse_ttl, "0.000s", "lease of 0");
    expect_bad(cli_parse_ttl, "9ms", "from 10ms to 2147483647ms");
    expect_bad(cli_parse_ttl, "1ms", "from 10ms to 2147483647ms");
    expect_bad(cli_parse_ttl, "0.009s", "from 10ms to 2147483647ms");
    expect_bad(cli_parse_ttl, "2147483648ms", "from 10ms to 2147483647ms");
    expect_bad(cli_parse_ttl, "2147483.648s", "from 10ms to 2147483647ms");
    expect_bad(cli_parse_ttl, "25d", "24.8 days");
    expect_bad(cli_parse_ttl, "forever", "not a duration");
    expect_bad(cli_parse_ttl, "-1", "negative");
    expect_bad(cli_parse_ttl, "99999999999999999999999", "too large");
    expect_bad(cli_parse_ttl, "", "empty");
}

static void test_wait(void **state)
{
    (void)state;
    int64_t ms = 7;
    char err[256];
    assert_int_equal(cli_parse_wait("forever", &ms, err, sizeof err), 0);
    assert_int_equal(ms, CLI_WAIT_FOREVER);
    assert_int_equal(cli_parse_wait("0", &ms, err, sizeof err), 0);
    assert_int_equal(ms, 0); /* try once */
    assert_int_equal(cli_parse_wait("0ms", &ms, err, sizeof err), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(cli_parse_wait("1ms", &ms, err, sizeof err), 0);
    assert_int_equal(ms, 1); /* no lower bound, unlike a lease */
    assert_int_equal(cli_parse_wait("2.5s", &ms, err, sizeof err), 0);
    assert_int_equal(ms, 2500);
    assert_int_equal(cli_parse_wait("9223372036854775807ms", &ms, err, sizeof err), 0);
    assert_int_equal(ms, INT64_MAX);
    expect_bad(cli_parse_wait, "Forever", "not a duration");
    expect_bad(cli_parse_wait, "forever ", "not a duration");
    expect_bad(cli_parse_wait, "forevers", "not a duration");
    expect_bad(cli_parse_wait, "-1", "negative");
    expect_bad(cli_parse_wait, "inf", "not a duration");
    expect_bad(cli_parse_wait, "", "empty");
    expect_bad(cli_parse_wait, NULL, "empty");
    expect_bad(cli_parse_wait, "1.5ms", "finer than 1 ms");
}

/* A short or absent error buffer is never overrun. */
static void test_err_buffer(void **state)
{
    (void)state;
    int64_t ms;
    char err[8];
    memset(err, 'x', sizeof err);
    assert_int_equal(cli_parse_duration("5x", &ms, err, 4), -1);
    assert_string_equal(err, "unk");
    assert_int_equal(err[4], 'x');
    assert_int_equal(cli_parse_duration("5x", &ms, NULL, 0), -1);
    assert_int_equal(cli_parse_ttl("0", &ms, NULL, 0), -1);
}

static void expect_format(int64_t ms, const char *want)
{
    char buf[32];
    assert_string_equal(cli_format_duration(ms, buf, sizeof buf), want);
}

static void test_format(void **state)
{
    (void)state;
    expect_format(-5, "0ms");
    expect_format(0, "0ms");
    expect_format(850, "850ms");
    expect_format(999, "999ms");
    expect_format(1000, "1.0s");
    expect_format(2999, "2.9s"); /* rounded down: never more time than is left */
    expect_format(59999, "59.9s");
    expect_format(60000, "1m00s");
    expect_format(245000, "4m05s");
    expect_format(3599999, "59m59s");
    expect_format(3600000, "1h00m");
    expect_format(7380000, "2h03m");
    expect_format(DLOCK_TTL_MAX_MS, "596h31m");
    char small[4];
    cli_format_duration(123456, small, sizeof small);
    assert_int_equal(strlen(small), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_units),
        cmocka_unit_test(test_decimals_exact),
        cmocka_unit_test(test_decimals_units),
        cmocka_unit_test(test_sub_ms_refused),
        cmocka_unit_test(test_forms_refused),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_ttl),
        cmocka_unit_test(test_wait),
        cmocka_unit_test(test_err_buffer),
        cmocka_unit_test(test_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
