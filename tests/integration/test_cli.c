/*
 * test_cli.c: the dlock command against a real redis-server (its manual is
 * docs/dlock.1.md): acquire, release, extend, fences that grow, a waiting acquire,
 * --prefix and labels, status in text and JSON (hostile descriptions escaped), shared
 * locks and semaphores (their usage errors too), help and version. The other usage
 * errors, servers down or refusing the password, signals and a closed stdout:
 * test_cli_errors.c.
 *
 * What scripts depend on is checked exactly: the "TOKEN FENCE" line, the exit codes
 * (64 usage, 73 not held, 75 not acquired), every failure being one line on stderr that
 * starts with "dlock: ", and what the keys on the server look like afterwards. Timing
 * only orders events (DLOCK_TEST_SLACK scales the few bounds).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- running the command ---------------------------------------------------- */

typedef it_run run;

/* Run the CLI against it_srv (no password from the caller's shell) with the
 * NULL-terminated arguments that follow. */
#define RUN(r, ...) it_cli((r), it_cli_env(&it_srv), NULL, __VA_ARGS__, (const char *)NULL)

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* ---- acquire, release, extend ----------------------------------------------- */

static void test_acquire_prints_token_and_fence(void **state)
{
    (void)state;
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t fence;
    it_cli_acquire("cli-acq", "30s", token, &fence);

    /* The lock is kept after the command exits (detached, not released). */
    char key[256], fkey[256];
    it_key(key, sizeof key, "cli-acq");
    it_fence_key(fkey, sizeof fkey, "cli-acq");
    char *value = it_get(&it_srv, key);
    assert_non_null(value);
    assert_memory_equal(value, token, DLOCK_TOKEN_LEN); /* the value starts with the token */
    free(value);
    long long pttl = it_pttl(&it_srv, key);
    assert_true(pttl > 0 && pttl <= 30000);
    /* With one server the fence printed is the server's counter. */
    char *counter = it_get(&it_srv, fkey);
    assert_non_null(counter);
    assert_int_equal(strtoull(counter, NULL, 10), fence);
    free(counter);

    /* Held: a second acquire that tries once fails with 75, and the lock is intact. */
    run r;
    RUN(&r, "acquire", "-w", "0", "cli-acq");
    it_expect_failure(&r, 75, "held by another owner", true);
    value = it_get(&it_srv, key);
    assert_non_null(value);
    assert_memory_equal(value, token, DLOCK_TOKEN_LEN);
    free(value);

    /* A bounded wait runs out the same way, and not before WAIT. */
    int64_t start = dh_now_ms();
    RUN(&r, "acquire", "-w", "300ms", "cli-acq");
    it_expect_failure(&r, 75, NULL, true);
    assert_true(dh_now_ms() - start >= 300);

    RUN(&r, "release", "cli-acq", token);
    it_expect_status(&r, 0);
}

static void test_release(void **state)
{
    (void)state;
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t fence;
    it_cli_acquire("cli-rel", "30s", token, &fence);
    run r;
    RUN(&r, "release", "cli-rel", token);
    it_expect_status(&r, 0);
    assert_string_equal(r.out, "");
    assert_string_equal(r.err, "");
    assert_false(it_lock_exists(&it_srv, "cli-rel"));

    /* The same token again: nothing held any more. */
    RUN(&r, "release", "cli-rel", token);
    it_expect_failure(&r, 73, "release cli-rel: ", true);

    /* Another owner's lock is never touched by a stale token. */
    char token2[DLOCK_TOKEN_LEN + 1];
    it_cli_acquire("cli-rel", "30s", token2, &fence);
    RUN(&r, "release", "cli-rel", token);
    it_expect_failure(&r, 73, NULL, true);
    assert_true(it_lock_exists(&it_srv, "cli-rel"));
    RUN(&r, "release", "cli-rel", token2);
    it_expect_status(&r, 0);
}

static void test_extend(void **state)
{
    (void)state;
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t fence;
    it_cli_acquire("cli-ext", "2s", token, &fence);
    assert_true(it_lock_pttl(&it_srv, "cli-ext") <= 2000);

    run r;
    RUN(&r, "extend", "-t", "10s", "cli-ext", token);
    it_expect_status(&r, 0);
    assert_string_equal(r.out, "");
    assert_string_equal(r.err, "");
    /* Set to 10 s from now, not added to what was left. */
    long long pttl = it_lock_pttl(&it_srv, "cli-ext");
    assert_true(pttl <= 10000);
    assert_true(pttl > 10000 - 1000 * dh_slack());

    /* Options after the operands work too (GNU getopt order). */
    RUN(&r, "extend", "cli-ext", token, "--ttl=20s");
    it_expect_status(&r, 0);
    assert_true(it_lock_pttl(&it_srv, "cli-ext") > 10000);

    /* Extending never releases: the key is still there after the command exits. */
    assert_true(it_lock_exists(&it_srv, "cli-ext"));

    RUN(&r, "release", "cli-ext", token);
    it_expect_status(&r, 0);
    RUN(&r, "extend", "-t", "10s", "cli-ext", token);
    it_expect_failure(&r, 73, "extend cli-ext: ", true);
    assert_false(it_lock_exists(&it_srv, "cli-ext"));

    /* A lease of 0 would be a release in disguise: refused before any server. */
    RUN(&r, "extend", "-t", "0", "cli-ext", token);
    it_expect_failure(&r, 64, NULL, true);
}

static void test_fences_grow(void **state)
{
    (void)state;
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t prev = 0;
    for (int i = 0; i < 3; i++) {
        uint64_t fence;
        it_cli_acquire("cli-fence", "30s", token, &fence);
        assert_true(fence > prev);
        prev = fence;
        run r;
        RUN(&r, "release", "cli-fence", token);
        it_expect_status(&r, 0);
    }
}

static void test_wait_for_release(void **state)
{
    (void)state;
    /* A short lease held by "someone else"; a waiting acquire gets it once it ends
     * (an expired lease sends no wake-up: the waiter must notice on its own). */
    char token[DLOCK_TOKEN_LEN + 1], token2[DLOCK_TOKEN_LEN + 1];
    uint64_t fence, fence2;
    it_cli_acquire("cli-wait", "500ms", token, &fence);
    int64_t start = dh_now_ms();
    run r;
    char wait[32];
    snprintf(wait, sizeof wait, "%llds", 10 * dh_slack());
    RUN(&r, "acquire", "-w", wait, "cli-wait");
    it_expect_status(&r, 0);
    it_parse_token_line(r.out, token2, &fence2);
    assert_true(dh_now_ms() - start >= 400); /* not before the first lease ran out */
    assert_string_not_equal(token, token2);
    assert_true(fence2 > fence);
    RUN(&r, "release", "cli-wait", token2);
    it_expect_status(&r, 0);
}

static void test_prefix_and_label(void **state)
{
    (void)state;
    run r;
    RUN(&r, "--prefix", "myapp:", "acquire", "-w", "0", "-l", "nightly backup", "cli-pre");
    it_expect_status(&r, 0);
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t fence;
    it_parse_token_line(r.out, token, &fence);
    assert_false(it_lock_exists(&it_srv, "cli-pre")); /* not under the default prefix */
    char *value = it_get(&it_srv, "myapp:{cli-pre}");
    assert_non_null(value);
    assert_memory_equal(value, token, DLOCK_TOKEN_LEN);
    assert_non_null(strstr(value, "nightly backup"));
    free(value);

    RUN(&r, "status", "cli-pre");
    it_expect_status(&r, 0);
    assert_string_equal(r.out, "cli-pre: free\n"); /* other prefix, other lock */
    RUN(&r, "status", "--prefix", "myapp:", "cli-pre");
    it_expect_status(&r, 0);
    assert_non_null(strstr(r.out, "nightly backup"));
    RUN(&r, "--prefix", "myapp:", "release", "cli-pre", token);
    it_expect_status(&r, 0);
}

/* ---- status ----------------------------------------------------------------- */

static void test_status(void **state)
{
    (void)state;
    run r;
    RUN(&r, "status", "cli-st");
    it_expect_status(&r, 0);
    assert_string_equal(r.out, "cli-st: free\n");
    assert_string_equal(r.err, "");

    RUN(&r, "--json", "status", "cli-st");
    it_expect_status(&r, 0);
    assert_string_equal(r.out, "{\"name\":\"cli-st\",\"state\":\"free\",\"holder\":null,"
                               "\"remaining_ms\":0,\"fence\":0,\"shared\":0,\"holders\":[],"
                               "\"broken\":null}\n");

    RUN(&r, "acquire", "-t", "60s", "-w", "0", "-l", "st-label", "cli-st");
    it_expect_status(&r, 0);
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t fence;
    it_parse_token_line(r.out, token, &fence);

    RUN(&r, "status", "cli-st");
    it_expect_status(&r, 0);
    /* "cli-st: held by HOST:PID st-label, 59.9s left, fence N" */
    char want[128];
    snprintf(want, sizeof want, " st-label, ");
    assert_true(starts_with(r.out, "cli-st: held by "));
    assert_non_null(strstr(r.out, want));
    assert_non_null(strstr(r.out, "s left, fence "));
    snprintf(want, sizeof want, ", fence %" PRIu64 "\n", fence);
    assert_non_null(strstr(r.out, want));
    assert_null(strstr(r.out, token)); /* status never shows the token */

    /* --json after the command name works as well as before it. */
    RUN(&r, "status", "--json", "cli-st");
    it_expect_status(&r, 0);
    assert_true(starts_with(r.out, "{\"name\":\"cli-st\",\"state\":\"held\",\"holder\":\""));
    assert_non_null(strstr(r.out, " st-label\",\"remaining_ms\":"));
    snprintf(want, sizeof want,
             ",\"fence\":%" PRIu64 ",\"shared\":0,\"holders\":[],\"broken\":null}\n", fence);
    assert_non_null(strstr(r.out, want));
    long long remaining = strtoll(strstr(r.out, "\"remaining_ms\":") + 15, NULL, 10);
    assert_true(remaining > 0 && remaining <= 60000);
    assert_null(strstr(r.out, token));

    RUN(&r, "release", "cli-st", token);
    it_expect_status(&r, 0);
    RUN(&r, "status", "cli-st");
    it_expect_status(&r, 0);
    snprintf(want, sizeof want, "cli-st: free (last fence %" PRIu64 ")\n", fence);
    assert_string_equal(r.out, want);
    RUN(&r, "status", "--json", "cli-st");
    it_expect_status(&r, 0);
    snprintf(want, sizeof want,
             "{\"name\":\"cli-st\",\"state\":\"free\",\"holder\":null,\"remaining_ms\":0,"
             "\"fence\":%" PRIu64 ",\"shared\":0,\"holders\":[],\"broken\":null}\n",
             fence);
    assert_string_equal(r.out, want);
}

/* Holder descriptions are whatever another process stored: quotes, backslashes,
 * control bytes, invalid UTF-8. The JSON must stay one valid line. */
static void test_status_json_escaping(void **state)
{
    (void)state;
    const char *label = "q\"b\\c\x01\t\x1b[2J\xff";
    const char *name = "cli-\"esc\"\n";
    run r;
    RUN(&r, "acquire", "-t", "30s", "-w", "0", "-l", label, name);
    it_expect_status(&r, 0);
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t fence;
    it_parse_token_line(r.out, token, &fence);

    RUN(&r, "--json", "status", name);
    it_expect_status(&r, 0);
    size_t len = strlen(r.out);
    assert_true(len > 0 && r.out[len - 1] == '\n');
    for (size_t i = 0; i + 1 < len; i++)
        if ((unsigned char)r.out[i] < 0x20 || (unsigned char)r.out[i] == 0xff)
            fail_msg("raw byte 0x%02x in JSON: %s", (unsigned char)r.out[i], r.out);
    assert_true(starts_with(r.out, "{\"name\":\"cli-\\\"esc\\\"\\n\",\"state\":\"held\","));
    assert_non_null(strstr(r.out, " q\\\"b\\\\c\\u0001\\t\\u001b[2J\\ufffd\",\"remaining_ms\":"));

    /* The human form escapes too: one line, no terminal escape sequence. */
    RUN(&r, "status", name);
    it_expect_status(&r, 0);
    assert_non_null(strstr(r.out, "cli-\"esc\"\\x0a: held by "));
    assert_null(strchr(r.out, '\x1b'));
    assert_true(strchr(r.out, '\n') == r.out + strlen(r.out) - 1);

    RUN(&r, "release", name, token);
    it_expect_status(&r, 0);
}

/* ---- shared locks and semaphores --------------------------------------------- */

static void test_shared(void **state)
{
    (void)state;
    run r;
    char t1[DLOCK_TOKEN_LEN + 1], t2[DLOCK_TOKEN_LEN + 1];
    uint64_t f1, f2;
    RUN(&r, "acquire", "--shared", "-t", "60s", "-w", "0", "-l", "reader-one", "cli-sh");
    it_expect_status(&r, 0);
    it_parse_token_line(r.out, t1, &f1);
    RUN(&r, "acquire", "-w", "0", "--shared", "-t", "30s", "cli-sh");
    it_expect_status(&r, 0);
    it_parse_token_line(r.out, t2, &f2);
    assert_true(f2 > f1);
    RUN(&r, "acquire", "-w", "0", "cli-sh");
    it_expect_failure(&r, 75, "held by another owner", false);

    RUN(&r, "status", "cli-sh");
    it_expect_status(&r, 0);
    assert_true(starts_with(r.out, "cli-sh: held by 2 shared holders, "));
    assert_non_null(strstr(r.out, " reader-one, "));
    assert_null(strstr(r.out, t1));
    RUN(&r, "status", "--json", "cli-sh");
    it_expect_status(&r, 0);
    assert_true(starts_with(r.out, "{\"name\":\"cli-sh\",\"state\":\"held\",\"holder\":null,"));
    assert_non_null(strstr(r.out, ",\"shared\":2,\"holders\":[{\"holder\":\""));
    assert_non_null(strstr(r.out, " reader-one\",\"remaining_ms\":"));
    assert_non_null(strstr(r.out, "}],\"broken\":null}\n"));

    /* `dlock run --shared` overlaps them, with its fence in the environment. */
    RUN(&r, "run", "--shared", "-w", "0", "cli-sh", "--", "sh", "-c", "echo $DLOCK_FENCE");
    it_expect_status(&r, 0);
    assert_true(strtoull(r.out, NULL, 10) > f2);
    RUN(&r, "run", "-w", "0", "cli-sh", "--", "true");
    it_expect_failure(&r, 75, NULL, false);

    RUN(&r, "release", "cli-sh", t1);
    it_expect_status(&r, 0);
    RUN(&r, "release", "cli-sh", t1);
    it_expect_failure(&r, 73, NULL, true);
    RUN(&r, "release", "cli-sh", t2);
    it_expect_status(&r, 0);
    RUN(&r, "acquire", "-w", "0", "cli-sh");
    it_expect_status(&r, 0);
    it_parse_token_line(r.out, t1, &f1);
    RUN(&r, "acquire", "--shared", "-w", "0", "cli-sh");
    it_expect_failure(&r, 75, NULL, false);
    RUN(&r, "release", "cli-sh", t1);
    it_expect_status(&r, 0);
}

static void test_sem(void **state)
{
    (void)state;
    run r;
    char t1[DLOCK_TOKEN_LEN + 1], t2[DLOCK_TOKEN_LEN + 1];
    uint64_t f1, f2;
    RUN(&r, "sem", "acquire", "-n", "2", "-w", "0", "cli-sem");
    it_expect_status(&r, 0);
    it_parse_token_line(r.out, t1, &f1);
    RUN(&r, "sem", "acquire", "-n", "2", "-w", "0", "-l", "second", "cli-sem");
    it_expect_status(&r, 0);
    it_parse_token_line(r.out, t2, &f2);
    assert_true(f2 > f1);
    RUN(&r, "sem", "acquire", "-n", "2", "-w", "0", "cli-sem");
    it_expect_failure(&r, 75, "the 2 permits are taken", false);
    RUN(&r, "sem", "run", "-n", "2", "-w", "0", "cli-sem", "--", "true");
    it_expect_failure(&r, 75, NULL, false);
    RUN(&r, "status", "--json", "cli-sem");
    it_expect_status(&r, 0);
    assert_non_null(strstr(r.out, ",\"shared\":2,\"holders\":[{"));

    /* Given back without K; twice is 73. */
    RUN(&r, "sem", "release", "cli-sem", t1);
    it_expect_status(&r, 0);
    assert_string_equal(r.out, "");
    RUN(&r, "sem", "release", "cli-sem", t1);
    it_expect_failure(&r, 73, NULL, true);
    RUN(&r, "sem", "run", "-n", "2", "-w", "0", "cli-sem", "--", "sh", "-c",
        "echo \"$DLOCK_NAME $DLOCK_FENCE\"");
    it_expect_status(&r, 0);
    assert_true(starts_with(r.out, "cli-sem "));
    assert_true(strtoull(r.out + 8, NULL, 10) > f2);
    RUN(&r, "sem", "release", "cli-sem", t2);
    it_expect_status(&r, 0);

    /* One permit is the lock: it excludes an exclusive holder and is excluded by one. */
    RUN(&r, "sem", "acquire", "-n", "1", "-w", "0", "cli-sem");
    it_expect_status(&r, 0);
    it_parse_token_line(r.out, t1, &f1);
    RUN(&r, "acquire", "-w", "0", "cli-sem");
    it_expect_failure(&r, 75, NULL, false);
    RUN(&r, "release", "cli-sem", t1);
    it_expect_status(&r, 0);
}

static void test_sem_usage_errors(void **state)
{
    (void)state;
    static const char *const bad_k[] = {"0", "-1", "abc", "2147483648", "", "1.5", "3x"};
    run r;
    for (size_t i = 0; i < sizeof bad_k / sizeof *bad_k; i++) {
        RUN(&r, "sem", "acquire", "-n", bad_k[i], "cli-semu");
        it_expect_failure(&r, 64, "permits are 1 to 2147483647", true);
    }
    RUN(&r, "sem", "acquire", "cli-semu");
    it_expect_failure(&r, 64, "missing -n K", true);
    RUN(&r, "sem", "run", "cli-semu", "--", "true");
    it_expect_failure(&r, 64, "missing -n K", true);
    RUN(&r, "sem");
    it_expect_failure(&r, 64, "sem: missing SUBCOMMAND", true);
    RUN(&r, "sem", "grab", "x");
    it_expect_failure(&r, 64, "sem: unknown subcommand \"grab\"", true);
    RUN(&r, "sem", "--help");
    it_expect_status(&r, 0);
    assert_true(starts_with(r.out, "Usage: dlock [OPTIONS] sem SUBCOMMAND"));
    RUN(&r, "sem", "acquire", "--shared", "-n", "2", "cli-semu");
    it_expect_failure(&r, 64, "unknown option --shared", true);
    RUN(&r, "release", "--shared", "cli-semu", "0123456789abcdef0123456789abcdef");
    it_expect_failure(&r, 64, "unknown option --shared", true);
    RUN(&r, "acquire", "-n", "2", "cli-semu");
    it_expect_failure(&r, 64, "unknown option -n", true);
    RUN(&r, "sem", "release", "cli-semu");
    it_expect_failure(&r, 64, "missing TOKEN", true);
    /* K >= 2 on several servers: refused by the library, with the reason. */
    char two[300];
    snprintf(two, sizeof two, "%s,redis://127.0.0.1:1", it_srv.url);
    RUN(&r, "-s", two, "sem", "acquire", "-n", "2", "cli-semu");
    it_expect_failure(&r, 64, "one server", false);
    assert_int_equal(it_lock_exists(&it_srv, "cli-semu"), 0);
}

static void test_help_and_version(void **state)
{
    (void)state;
    run r;
    RUN(&r, "--help");
    it_expect_status(&r, 0);
    assert_non_null(strstr(r.out, "Usage: dlock"));
    assert_non_null(strstr(r.out, "acquire"));
    assert_string_equal(r.err, "");
    static const char *const cmds[] = {"acquire", "extend", "release", "status"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        RUN(&r, cmds[i], "--help");
        it_expect_status(&r, 0);
        assert_non_null(strstr(r.out, cmds[i]));
        assert_string_equal(r.err, "");
    }
    RUN(&r, "--version");
    it_expect_status(&r, 0);
    assert_non_null(strstr(r.out, DLOCK_VERSION_STRING));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acquire_prints_token_and_fence),
        cmocka_unit_test(test_release),
        cmocka_unit_test(test_extend),
        cmocka_unit_test(test_fences_grow),
        cmocka_unit_test(test_wait_for_release),
        cmocka_unit_test(test_prefix_and_label),
        cmocka_unit_test(test_status),
        cmocka_unit_test(test_status_json_escaping),
        cmocka_unit_test(test_shared),
        cmocka_unit_test(test_sem),
        cmocka_unit_test(test_sem_usage_errors),
        cmocka_unit_test(test_help_and_version),
    };
    return cmocka_run_group_tests(tests, it_srv_setup, it_srv_teardown);
}
