/*
 * test_cli.c: the dlock command against real redis-server processes (its manual is
 * docs/dlock.1.md).
 *
 * What scripts depend on is checked exactly: the "TOKEN FENCE" line, the exit codes
 * (64 usage, 69 unreachable, 73 not held, 75 not acquired, 77 auth refused), every
 * failure being one line on stderr that starts with "dlock: ", and what the keys on
 * the server look like afterwards. Timing only orders events (DLOCK_TEST_SLACK scales
 * the few bounds).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- running the command ---------------------------------------------------- */

typedef it_run run;

#define ARGS_MAX 32

/* Run the CLI with the NULL-terminated arguments that follow, under env (dh_run's
 * form: "NAME=VALUE" to set, "NAME" to remove). */
static void run_env(run *r, const char *const env[], ...)
{
    va_list ap;
    va_start(ap, env);
    it_cli_va(r, env, NULL, ap);
    va_end(ap);
}

/* The default environment: the plain server, no password from the caller's shell. */
static const char *const *plain_env(void)
{
    return it_cli_env(&it_srv);
}

#define RUN(r, ...) run_env((r), plain_env(), __VA_ARGS__, (const char *)NULL)

/* Lines in s that are not the library's warnings ("dlock: warning: ..."). */
static int error_lines(const char *s)
{
    int n = 0;
    for (const char *p = s; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (strncmp(p, "dlock: warning: ", 16) != 0 || len < 16)
            n++;
        p += len + (nl != NULL);
    }
    return n;
}

/* A failure: exit `want`, nothing on stdout, and exactly one line on stderr, which
 * starts with "dlock: " and contains `needle` (NULL: anything). With strict, no
 * warning line either. */
static void expect_failure(const run *r, int want, const char *needle, bool strict)
{
    it_expect_status(r, want);
    if (r->out[0] != '\0')
        fail_msg("stdout not empty on failure: %s", r->out);
    size_t len = strlen(r->err);
    if (len == 0 || r->err[len - 1] != '\n')
        fail_msg("stderr is not whole lines: \"%s\"", r->err);
    if (strict && strchr(r->err, '\n') != r->err + len - 1)
        fail_msg("stderr is more than one line: \"%s\"", r->err);
    if (error_lines(r->err) != 1)
        fail_msg("stderr has %d error lines: \"%s\"", error_lines(r->err), r->err);
    /* The error is the last line (warnings, if any, come before it). */
    const char *last = r->err;
    for (const char *p = r->err; p < r->err + len - 1; p++)
        if (*p == '\n')
            last = p + 1;
    if (strncmp(last, "dlock: ", 7) != 0)
        fail_msg("error line does not start with \"dlock: \": %s", last);
    if (needle != NULL && strstr(last, needle) == NULL)
        fail_msg("error line lacks \"%s\": %s", needle, last);
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Parse "TOKEN FENCE\n": 32 lowercase hex characters, one space, a decimal number,
 * one newline, nothing else. */
static void parse_token_line(const char *out, char token[DLOCK_TOKEN_LEN + 1], uint64_t *fence)
{
    size_t i = 0;
    for (; i < DLOCK_TOKEN_LEN; i++)
        if (!((out[i] >= '0' && out[i] <= '9') || (out[i] >= 'a' && out[i] <= 'f')))
            fail_msg("not a token line: \"%s\"", out);
    if (out[i] != ' ' || out[i + 1] < '0' || out[i + 1] > '9')
        fail_msg("not a token line: \"%s\"", out);
    memcpy(token, out, DLOCK_TOKEN_LEN);
    token[DLOCK_TOKEN_LEN] = '\0';
    char *end;
    errno = 0;
    unsigned long long v = strtoull(out + i + 1, &end, 10);
    if (errno != 0 || strcmp(end, "\n") != 0 || v == 0)
        fail_msg("not a token line: \"%s\"", out);
    *fence = v;
}

/* Acquire name with the CLI (-w 0) and return its token and fence. */
static void acquire(const char *name, const char *ttl, char token[DLOCK_TOKEN_LEN + 1],
                    uint64_t *fence)
{
    run r;
    RUN(&r, "acquire", "-t", ttl, "-w", "0", name);
    it_expect_status(&r, 0);
    assert_string_equal(r.err, "");
    parse_token_line(r.out, token, fence);
}

static bool key_exists(dh_server *s, const char *name)
{
    char key[256];
    it_key(key, sizeof key, name);
    return it_exists(s, key) == 1;
}

static long long key_pttl(dh_server *s, const char *name)
{
    char key[256];
    it_key(key, sizeof key, name);
    return it_pttl(s, key);
}

/* ---- acquire, release, extend ----------------------------------------------- */

static void test_acquire_prints_token_and_fence(void **state)
{
    (void)state;
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t fence;
    acquire("cli-acq", "30s", token, &fence);

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
    expect_failure(&r, 75, "held by another owner", true);
    value = it_get(&it_srv, key);
    assert_non_null(value);
    assert_memory_equal(value, token, DLOCK_TOKEN_LEN);
    free(value);

    /* A bounded wait runs out the same way, and not before WAIT. */
    int64_t start = dh_now_ms();
    RUN(&r, "acquire", "-w", "300ms", "cli-acq");
    expect_failure(&r, 75, NULL, true);
    assert_true(dh_now_ms() - start >= 300);

    RUN(&r, "release", "cli-acq", token);
    it_expect_status(&r, 0);
}

static void test_release(void **state)
{
    (void)state;
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t fence;
    acquire("cli-rel", "30s", token, &fence);
    run r;
    RUN(&r, "release", "cli-rel", token);
    it_expect_status(&r, 0);
    assert_string_equal(r.out, "");
    assert_string_equal(r.err, "");
    assert_false(key_exists(&it_srv, "cli-rel"));

    /* The same token again: nothing held any more. */
    RUN(&r, "release", "cli-rel", token);
    expect_failure(&r, 73, "release cli-rel: ", true);

    /* Another owner's lock is never touched by a stale token. */
    char token2[DLOCK_TOKEN_LEN + 1];
    acquire("cli-rel", "30s", token2, &fence);
    RUN(&r, "release", "cli-rel", token);
    expect_failure(&r, 73, NULL, true);
    assert_true(key_exists(&it_srv, "cli-rel"));
    RUN(&r, "release", "cli-rel", token2);
    it_expect_status(&r, 0);
}

static void test_extend(void **state)
{
    (void)state;
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t fence;
    acquire("cli-ext", "2s", token, &fence);
    assert_true(key_pttl(&it_srv, "cli-ext") <= 2000);

    run r;
    RUN(&r, "extend", "-t", "10s", "cli-ext", token);
    it_expect_status(&r, 0);
    assert_string_equal(r.out, "");
    assert_string_equal(r.err, "");
    /* Set to 10 s from now, not added to what was left. */
    long long pttl = key_pttl(&it_srv, "cli-ext");
    assert_true(pttl <= 10000);
    assert_true(pttl > 10000 - 1000 * dh_slack());

    /* Options after the operands work too (GNU getopt order). */
    RUN(&r, "extend", "cli-ext", token, "--ttl=20s");
    it_expect_status(&r, 0);
    assert_true(key_pttl(&it_srv, "cli-ext") > 10000);

    /* Extending never releases: the key is still there after the command exits. */
    assert_true(key_exists(&it_srv, "cli-ext"));

    RUN(&r, "release", "cli-ext", token);
    it_expect_status(&r, 0);
    RUN(&r, "extend", "-t", "10s", "cli-ext", token);
    expect_failure(&r, 73, "extend cli-ext: ", true);
    assert_false(key_exists(&it_srv, "cli-ext"));

    /* A lease of 0 would be a release in disguise: refused before any server. */
    RUN(&r, "extend", "-t", "0", "cli-ext", token);
    expect_failure(&r, 64, NULL, true);
}

static void test_fences_grow(void **state)
{
    (void)state;
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t prev = 0;
    for (int i = 0; i < 3; i++) {
        uint64_t fence;
        acquire("cli-fence", "30s", token, &fence);
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
    acquire("cli-wait", "500ms", token, &fence);
    int64_t start = dh_now_ms();
    run r;
    char wait[32];
    snprintf(wait, sizeof wait, "%llds", 10 * dh_slack());
    RUN(&r, "acquire", "-w", wait, "cli-wait");
    it_expect_status(&r, 0);
    parse_token_line(r.out, token2, &fence2);
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
    parse_token_line(r.out, token, &fence);
    assert_false(key_exists(&it_srv, "cli-pre")); /* not under the default prefix */
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
    parse_token_line(r.out, token, &fence);

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
    parse_token_line(r.out, token, &fence);

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

/* ---- errors ----------------------------------------------------------------- */

/* ---- shared locks and semaphores --------------------------------------------- */

static void test_shared(void **state)
{
    (void)state;
    run r;
    char t1[DLOCK_TOKEN_LEN + 1], t2[DLOCK_TOKEN_LEN + 1];
    uint64_t f1, f2;
    RUN(&r, "acquire", "--shared", "-t", "60s", "-w", "0", "-l", "reader-one", "cli-sh");
    it_expect_status(&r, 0);
    parse_token_line(r.out, t1, &f1);
    RUN(&r, "acquire", "-w", "0", "--shared", "-t", "30s", "cli-sh");
    it_expect_status(&r, 0);
    parse_token_line(r.out, t2, &f2);
    assert_true(f2 > f1);
    RUN(&r, "acquire", "-w", "0", "cli-sh");
    expect_failure(&r, 75, "held by another owner", false);

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
    expect_failure(&r, 75, NULL, false);

    RUN(&r, "release", "cli-sh", t1);
    it_expect_status(&r, 0);
    RUN(&r, "release", "cli-sh", t1);
    expect_failure(&r, 73, NULL, true);
    RUN(&r, "release", "cli-sh", t2);
    it_expect_status(&r, 0);
    RUN(&r, "acquire", "-w", "0", "cli-sh");
    it_expect_status(&r, 0);
    parse_token_line(r.out, t1, &f1);
    RUN(&r, "acquire", "--shared", "-w", "0", "cli-sh");
    expect_failure(&r, 75, NULL, false);
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
    parse_token_line(r.out, t1, &f1);
    RUN(&r, "sem", "acquire", "-n", "2", "-w", "0", "-l", "second", "cli-sem");
    it_expect_status(&r, 0);
    parse_token_line(r.out, t2, &f2);
    assert_true(f2 > f1);
    RUN(&r, "sem", "acquire", "-n", "2", "-w", "0", "cli-sem");
    expect_failure(&r, 75, "the 2 permits are taken", false);
    RUN(&r, "sem", "run", "-n", "2", "-w", "0", "cli-sem", "--", "true");
    expect_failure(&r, 75, NULL, false);
    RUN(&r, "status", "--json", "cli-sem");
    it_expect_status(&r, 0);
    assert_non_null(strstr(r.out, ",\"shared\":2,\"holders\":[{"));

    /* Given back without K; twice is 73. */
    RUN(&r, "sem", "release", "cli-sem", t1);
    it_expect_status(&r, 0);
    assert_string_equal(r.out, "");
    RUN(&r, "sem", "release", "cli-sem", t1);
    expect_failure(&r, 73, NULL, true);
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
    parse_token_line(r.out, t1, &f1);
    RUN(&r, "acquire", "-w", "0", "cli-sem");
    expect_failure(&r, 75, NULL, false);
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
        expect_failure(&r, 64, "permits are 1 to 2147483647", true);
    }
    RUN(&r, "sem", "acquire", "cli-semu");
    expect_failure(&r, 64, "missing -n K", true);
    RUN(&r, "sem", "run", "cli-semu", "--", "true");
    expect_failure(&r, 64, "missing -n K", true);
    RUN(&r, "sem");
    expect_failure(&r, 64, "sem: missing SUBCOMMAND", true);
    RUN(&r, "sem", "grab", "x");
    expect_failure(&r, 64, "sem: unknown subcommand \"grab\"", true);
    RUN(&r, "sem", "--help");
    it_expect_status(&r, 0);
    assert_true(starts_with(r.out, "Usage: dlock [OPTIONS] sem SUBCOMMAND"));
    RUN(&r, "sem", "acquire", "--shared", "-n", "2", "cli-semu");
    expect_failure(&r, 64, "unknown option --shared", true);
    RUN(&r, "release", "--shared", "cli-semu", "0123456789abcdef0123456789abcdef");
    expect_failure(&r, 64, "unknown option --shared", true);
    RUN(&r, "acquire", "-n", "2", "cli-semu");
    expect_failure(&r, 64, "unknown option -n", true);
    RUN(&r, "sem", "release", "cli-semu");
    expect_failure(&r, 64, "missing TOKEN", true);
    /* K >= 2 on several servers: refused by the library, with the reason. */
    char two[300];
    snprintf(two, sizeof two, "%s,redis://127.0.0.1:1", it_srv.url);
    RUN(&r, "-s", two, "sem", "acquire", "-n", "2", "cli-semu");
    expect_failure(&r, 64, "one server", false);
    assert_int_equal(key_exists(&it_srv, "cli-semu"), 0);
}

static void test_usage_errors(void **state)
{
    (void)state;
    run r;
    RUN(&r, "acquire", "-t", "0", "cli-use");
    expect_failure(&r, 64, "TTL", true);
    RUN(&r, "acquire", "-t", "5x", "cli-use");
    expect_failure(&r, 64, "unit", true);
    RUN(&r, "acquire", "-t", "-1s", "cli-use");
    expect_failure(&r, 64, "negative", true);
    RUN(&r, "acquire", "-t", "1.5ms", "cli-use");
    expect_failure(&r, 64, "1 ms", true);
    RUN(&r, "acquire", "-t", "5ms", "cli-use");
    expect_failure(&r, 64, "10ms", true);
    RUN(&r, "acquire", "-t", "25d", "cli-use");
    expect_failure(&r, 64, NULL, true);
    RUN(&r, "acquire", "-w", "soon", "cli-use");
    expect_failure(&r, 64, "WAIT", true);
    RUN(&r, "acquire", "-w", "nan", "cli-use");
    expect_failure(&r, 64, NULL, true);
    RUN(&r, "acquire", "-t");
    expect_failure(&r, 64, "-t", true);
    RUN(&r, "acquire");
    expect_failure(&r, 64, "NAME", true);
    RUN(&r, "acquire", "a", "b");
    expect_failure(&r, 64, "\"b\"", true);
    RUN(&r, "release", "cli-use");
    expect_failure(&r, 64, "TOKEN", true);
    RUN(&r, "release", "-t", "5s", "cli-use", "0123456789abcdef0123456789abcdef");
    expect_failure(&r, 64, "-t", true);
    RUN(&r, "release", "cli-use", "not-a-token");
    expect_failure(&r, 64, NULL, true);
    RUN(&r, "status");
    expect_failure(&r, 64, NULL, true);
    RUN(&r, "frobnicate", "x");
    expect_failure(&r, 64, "frobnicate", true);
    RUN(&r, "run", "cli-use", "true"); /* no "--" before the command */
    expect_failure(&r, 64, NULL, true);
    RUN(&r, "--no-such-option", "status", "x");
    expect_failure(&r, 64, "--no-such-option", true);
    run_env(&r, plain_env(), (const char *)NULL); /* no command at all */
    expect_failure(&r, 64, NULL, true);
    RUN(&r, "status", "");
    expect_failure(&r, 64, NULL, true);
    /* None of this reached the server. */
    assert_false(key_exists(&it_srv, "cli-use"));
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

static void test_server_down(void **state)
{
    (void)state;
    /* A port that was just ours and is certainly closed now. */
    dh_server gone;
    assert_int_equal(dh_server_start(&gone, NULL), 0);
    dh_server_kill(&gone);
    run r;
    /* Unreachable ends a wait, even the default "forever" one. */
    int64_t start = dh_now_ms();
    RUN(&r, "-s", gone.url, "acquire", "cli-down");
    expect_failure(&r, 69, "acquire cli-down: ", true);
    assert_true(dh_now_ms() - start < 10000 * dh_slack());
    RUN(&r, "-s", gone.url, "status", "cli-down");
    expect_failure(&r, 69, NULL, true);
    RUN(&r, "-s", gone.url, "release", "cli-down", "0123456789abcdef0123456789abcdef");
    expect_failure(&r, 69, NULL, true);
    RUN(&r, "-s", gone.url, "extend", "cli-down", "0123456789abcdef0123456789abcdef");
    expect_failure(&r, 69, NULL, true);

    /* Three servers, all down: no quorum, still 69. */
    char list[512];
    snprintf(list, sizeof list, "%s,redis://127.0.0.1:1,redis://127.0.0.1:2", gone.url);
    RUN(&r, "-s", list, "acquire", "-w", "0", "cli-down");
    expect_failure(&r, 69, NULL, true);
    dh_server_stop(&gone);
}

static void test_auth(void **state)
{
    (void)state;
    char servers[160], right[80], wrong[80];
    snprintf(servers, sizeof servers, "DLOCK_SERVERS=%s", it_auth_srv.url);
    snprintf(right, sizeof right, "DLOCK_PASSWORD=%s", IT_PASSWORD);
    snprintf(wrong, sizeof wrong, "DLOCK_PASSWORD=not-%s", IT_PASSWORD);
    const char *const env_right[] = {servers, right, NULL};
    const char *const env_wrong[] = {servers, wrong, NULL};
    const char *const env_none[] = {servers, "DLOCK_PASSWORD", NULL};

    run r;
    run_env(&r, env_right, "acquire", "-w", "0", "cli-auth", (const char *)NULL);
    it_expect_status(&r, 0);
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t fence;
    parse_token_line(r.out, token, &fence);
    run_env(&r, env_right, "status", "cli-auth", (const char *)NULL);
    it_expect_status(&r, 0);

    run_env(&r, env_wrong, "status", "cli-auth", (const char *)NULL);
    expect_failure(&r, 77, NULL, true);
    assert_null(strstr(r.err, IT_PASSWORD)); /* the password is never printed */
    run_env(&r, env_wrong, "acquire", "cli-auth", (const char *)NULL);
    expect_failure(&r, 77, NULL, true);
    run_env(&r, env_wrong, "release", "cli-auth", token, (const char *)NULL);
    expect_failure(&r, 77, NULL, true);

    /* No password at all: refused too (a warning may precede the error line). */
    run_env(&r, env_none, "status", "cli-auth", (const char *)NULL);
    expect_failure(&r, 77, NULL, false);

    /* The password in the URL works the same, and a wrong one is not echoed. */
    char url[200];
    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d", IT_PASSWORD, it_auth_srv.port);
    run_env(&r, env_none, "-s", url, "status", "cli-auth", (const char *)NULL);
    it_expect_status(&r, 0);
    snprintf(url, sizeof url, "redis://:wrong-%s@127.0.0.1:%d", IT_PASSWORD, it_auth_srv.port);
    run_env(&r, env_none, "-s", url, "status", "cli-auth", (const char *)NULL);
    expect_failure(&r, 77, NULL, true);
    assert_null(strstr(r.err, IT_PASSWORD));

    run_env(&r, env_right, "release", "cli-auth", token, (const char *)NULL);
    it_expect_status(&r, 0);
}

static void test_rediss_refused(void **state)
{
    (void)state;
    run r;
    /* rediss:// parameters are checked before anything connects: a usage error. */
    RUN(&r, "-s", "rediss://127.0.0.1:6380?verify=1", "status", "cli-tls");
    expect_failure(&r, 64, "unknown parameter", true);
    const char *const env[] = {"DLOCK_SERVERS=rediss://:pw@127.0.0.1:6380?cacert=/nonexistent",
                               NULL};
    run_env(&r, env, "acquire", "cli-tls", (const char *)NULL);
    expect_failure(&r, 64, "cacert /nonexistent", true);
    /* Other malformed lists are usage errors too, naming the bad part. */
    RUN(&r, "-s", "redis://127.0.0.1:0", "status", "cli-tls");
    expect_failure(&r, 64, "port", true);
    RUN(&r, "-s", "redis://alice@127.0.0.1", "status", "cli-tls");
    expect_failure(&r, 64, NULL, true);
}

/* ---- signals and closed output ---------------------------------------------- */

/* Start the CLI with args, DLOCK_SERVERS set to the plain server, stderr into a pipe
 * (*err_fd) and stdout to stdout_fd (-1: /dev/null). */
static pid_t spawn_cli(const char *const args[], int stdout_fd, int *err_fd)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    const char *argv[ARGS_MAX + 2];
    int n = 0;
    argv[n++] = dh_cli_path();
    for (; args[n - 1] != NULL; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(stdout_fd >= 0 ? stdout_fd : null, 1);
        dup2(p[1], 2);
        /* A SIGINT ignored by whoever started the tests would stay ignored (the CLI
         * keeps inherited SIG_IGN, as nohup needs): start from the default. */
        signal(SIGINT, SIG_DFL);
        setenv("DLOCK_SERVERS", it_srv.url, 1);
        unsetenv("DLOCK_PASSWORD");
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    close(p[1]);
    *err_fd = p[0];
    return pid;
}

static int wait_status(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        assert_int_equal(errno, EINTR);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void read_all(int fd, char *buf, size_t len)
{
    size_t n = 0;
    ssize_t k;
    while (n + 1 < len && (k = read(fd, buf + n, len - n - 1)) != 0) {
        if (k < 0) {
            assert_int_equal(errno, EINTR);
            continue;
        }
        n += (size_t)k;
    }
    buf[n] = '\0';
    close(fd);
}

static void test_sigint_cancels_wait(void **state)
{
    (void)state;
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t fence;
    acquire("cli-sig", "60s", token, &fence);

    long long before = it_connected_clients(&it_srv);
    /* A long wait rather than forever, so that a broken cancel fails the test (by its
     * message and timing below) instead of hanging it. */
    static const char *const args[] = {"acquire", "-w", "120s", "cli-sig", NULL};
    int err_fd;
    pid_t pid = spawn_cli(args, -1, &err_fd);
    /* Once the waiter is connected it is past installing its handler (it connects on
     * its first attempt): only then is SIGINT a cancellation and not a plain kill. */
    int64_t deadline = dh_now_ms() + 10000 * dh_slack();
    while (it_connected_clients(&it_srv) <= before) {
        assert_true(dh_now_ms() < deadline);
        dh_sleep_ms(10);
    }
    dh_sleep_ms(100);
    int64_t sent = dh_now_ms();
    assert_int_equal(kill(pid, SIGINT), 0);
    int status = wait_status(pid);
    char err[2048];
    read_all(err_fd, err, sizeof err);
    if (status != 75)
        fail_msg("exit %d, want 75; stderr: %s", status, err);
    assert_true(dh_now_ms() - sent < 5000 * dh_slack());
    assert_non_null(strstr(err, "canceled"));
    assert_int_equal(strncmp(err, "dlock: ", 7), 0);
    assert_true(strchr(err, '\n') == err + strlen(err) - 1);

    /* The holder's lock is untouched. */
    it_expect_holder(&it_srv, "cli-sig", token);
    run r;
    RUN(&r, "release", "cli-sig", token);
    it_expect_status(&r, 0);
}

static void test_closed_stdout_releases(void **state)
{
    (void)state;
    /* A pipe with no reader: printing the token fails with EPIPE. The token would be
     * lost, so the command must not leave the lock held. */
    int p[2];
    assert_int_equal(pipe(p), 0);
    close(p[0]);
    static const char *const args[] = {"acquire", "-w", "0", "cli-epipe", NULL};
    int err_fd;
    pid_t pid = spawn_cli(args, p[1], &err_fd);
    close(p[1]);
    int status = wait_status(pid);
    char err[2048];
    read_all(err_fd, err, sizeof err);
    if (status != 70)
        fail_msg("exit %d, want 70; stderr: %s", status, err);
    assert_true(strchr(err, '\n') == err + strlen(err) - 1);
    assert_false(key_exists(&it_srv, "cli-epipe"));
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
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_help_and_version),
        cmocka_unit_test(test_server_down),
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_rediss_refused),
        cmocka_unit_test(test_sigint_cancels_wait),
        cmocka_unit_test(test_closed_stdout_releases),
    };
    return cmocka_run_group_tests(tests, it_srv_auth_setup, it_srv_auth_teardown);
}
