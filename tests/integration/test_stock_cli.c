/*
 * test_stock_cli.c: `dlock stock ...` against real redis-server processes.
 *
 * What scripts depend on is checked exactly: the reservation id line, the status line
 * and its JSON, the exit codes (64 usage or refused, 69 unreachable, 73 no such live
 * reservation, 75 not available within WAIT, 77 authentication refused), and every
 * failure being one line on stderr that starts with "dlock: ". The counts are checked
 * on the server through the library.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Run `dlock stock ARGS...` (NULL-terminated) with env (dh_run's form). */
static void stock_env(it_run *r, const char *const *env, ...)
{
    static const char *const pre[] = {"stock", NULL};
    va_list ap;
    va_start(ap, env);
    it_cli_va(r, env, pre, ap);
    va_end(ap);
}

#define STOCK(r, ...) stock_env((r), it_cli_env(&it_srv), __VA_ARGS__, (const char *)NULL)

/* Success: exit 0, nothing on stderr, and stdout exactly `out` (NULL: not checked). */
static void ok(const it_run *r, const char *out)
{
    if (r->status != 0 || r->err[0] != '\0')
        fail_msg("exit %d, want 0\nstdout: %s\nstderr: %s", r->status, r->out, r->err);
    if (out != NULL && strcmp(r->out, out) != 0)
        fail_msg("stdout \"%s\", want \"%s\"", r->out, out);
}

/* Failure: exit `status`, nothing on stdout, one line on stderr starting "dlock: " and
 * containing needle. */
static void fails(const it_run *r, int status, const char *needle)
{
    size_t len = strlen(r->err);
    if (r->status != status)
        fail_msg("exit %d, want %d\nstdout: %s\nstderr: %s", r->status, status, r->out, r->err);
    if (r->out[0] != '\0')
        fail_msg("stdout not empty on failure: %s", r->out);
    if (len == 0 || strchr(r->err, '\n') != r->err + len - 1)
        fail_msg("stderr is not one line: \"%s\"", r->err);
    if (strncmp(r->err, "dlock: ", 7) != 0 || strstr(r->err, needle) == NULL)
        fail_msg("stderr \"%s\" lacks \"%s\"", r->err, needle);
}

/* The id line a reserve prints: 32 lowercase hex characters and a newline. */
static void parse_id(const it_run *r, char id[DLOCK_TOKEN_LEN + 1])
{
    ok(r, NULL);
    if (strlen(r->out) != DLOCK_TOKEN_LEN + 1 || r->out[DLOCK_TOKEN_LEN] != '\n')
        fail_msg("not an id line: \"%s\"", r->out);
    memcpy(id, r->out, DLOCK_TOKEN_LEN);
    id[DLOCK_TOKEN_LEN] = '\0';
    for (int i = 0; i < DLOCK_TOKEN_LEN; i++)
        assert_true((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'));
}

static void expect_counts(const char *sku, int64_t stock, int64_t avail, int64_t reserved,
                          int64_t sold)
{
    dlock_client *c = it_client(&it_srv, 1000);
    dlock_stock_info in;
    assert_int_equal(dlock_stock_status(c, sku, &in), DLOCK_OK);
    assert_int_equal(in.stock, stock);
    assert_int_equal(in.available, avail);
    assert_int_equal(in.reserved, reserved);
    assert_int_equal(in.sold, sold);
    dlock_client_free(c);
}

static void test_set_add_status(void **state)
{
    (void)state;
    it_run r;
    STOCK(&r, "set", "cli-a", "10");
    ok(&r, "");
    STOCK(&r, "add", "cli-a", "5");
    ok(&r, "");
    STOCK(&r, "add", "cli-a", "--", "-3");
    ok(&r, "");
    expect_counts("cli-a", 12, 12, 0, 0);
    STOCK(&r, "status", "cli-a");
    ok(&r, "cli-a: stock 12, available 12, reserved 0 (0 reservations), sold 0, 0 waiting\n");
    char id[DLOCK_TOKEN_LEN + 1];
    STOCK(&r, "reserve", "cli-a", "4");
    parse_id(&r, id);
    STOCK(&r, "status", "cli-a");
    ok(&r, "cli-a: stock 12, available 8, reserved 4 (1 reservation), sold 0, 0 waiting\n");
    STOCK(&r, "commit", "cli-a", id);
    ok(&r, "");
    STOCK(&r, "status", "--json", "cli-a");
    ok(&r, "{\"sku\":\"cli-a\",\"stock\":12,\"available\":8,\"reserved\":0,\"sold\":4,"
           "\"reservations\":0,\"waiters\":0}\n");
    /* --json before the subcommand too, and an SKU that needs escaping. */
    static const char *const json[] = {"--json", "stock", NULL};
    it_cli(&r, it_cli_env(&it_srv), json, "status", "cli \"q\"\n", (const char *)NULL);
    ok(&r, "{\"sku\":\"cli \\\"q\\\"\\n\",\"stock\":0,\"available\":0,\"reserved\":0,"
           "\"sold\":0,\"reservations\":0,\"waiters\":0}\n");
    /* Refused changes: exit 64, nothing changed. */
    STOCK(&r, "set", "cli-a", "3");
    fails(&r, 64, "4 units sold and 0 reserved");
    STOCK(&r, "add", "cli-a", "--", "-9");
    fails(&r, 64, "only 8 units available");
    expect_counts("cli-a", 12, 8, 0, 4);
}

static void test_reserve_commit_cancel(void **state)
{
    (void)state;
    it_run r;
    char a[DLOCK_TOKEN_LEN + 1], b[DLOCK_TOKEN_LEN + 1];
    STOCK(&r, "set", "cli-b", "5");
    ok(&r, "");
    STOCK(&r, "reserve", "-t", "1m", "cli-b", "3");
    parse_id(&r, a);
    STOCK(&r, "reserve", "cli-b", "2");
    parse_id(&r, b);
    expect_counts("cli-b", 5, 0, 5, 0);
    STOCK(&r, "commit", "cli-b", a);
    ok(&r, "");
    /* A commit repeated after it succeeded succeeds again, counting nothing more. */
    STOCK(&r, "commit", "cli-b", a);
    ok(&r, "");
    STOCK(&r, "cancel", "cli-b", a);
    fails(&r, 73, "committed");
    STOCK(&r, "cancel", "cli-b", b);
    ok(&r, "");
    STOCK(&r, "cancel", "cli-b", b);
    fails(&r, 73, "stock cancel cli-b: no such live reservation");
    STOCK(&r, "commit", "cli-b", b);
    fails(&r, 73, "no such live reservation");
    expect_counts("cli-b", 5, 2, 0, 3);
}

static void test_reserve_not_available(void **state)
{
    (void)state;
    it_run r;
    char a[DLOCK_TOKEN_LEN + 1];
    STOCK(&r, "set", "cli-c", "2");
    STOCK(&r, "reserve", "cli-c", "2");
    parse_id(&r, a);
    STOCK(&r, "reserve", "cli-c", "1");
    fails(&r, 75, "not enough units available (0 units of cli-c available, 1 wanted)");
    int64_t t0 = dh_now_ms();
    STOCK(&r, "reserve", "-w", "300ms", "cli-c", "1");
    fails(&r, 75, "not enough units available");
    assert_true(dh_now_ms() - t0 >= 300);
    /* More than is unsold: no wait helps, exit 75 at once. */
    t0 = dh_now_ms();
    STOCK(&r, "reserve", "-w", "10s", "cli-c", "3");
    fails(&r, 75, "without a restock");
    assert_true(dh_now_ms() - t0 < 5000 * dh_slack());
    expect_counts("cli-c", 2, 0, 2, 0);
}

static void test_commit_after_expiry(void **state)
{
    (void)state;
    it_run r;
    char a[DLOCK_TOKEN_LEN + 1], lease[32];
    snprintf(lease, sizeof lease, "%lldms", 100 * dh_slack());
    STOCK(&r, "set", "cli-d", "1");
    STOCK(&r, "reserve", "-t", lease, "cli-d", "1");
    parse_id(&r, a);
    dh_sleep_ms(200 * dh_slack());
    STOCK(&r, "commit", "cli-d", a);
    fails(&r, 73, "lease ran out");
    STOCK(&r, "status", "cli-d");
    ok(&r, "cli-d: stock 1, available 1, reserved 0 (0 reservations), sold 0, 0 waiting\n");
}

static void test_extend(void **state)
{
    (void)state;
    it_run r;
    char a[DLOCK_TOKEN_LEN + 1], lease[32], other[DLOCK_TOKEN_LEN + 1];
    snprintf(lease, sizeof lease, "%lldms", 300 * dh_slack());
    STOCK(&r, "set", "cli-e", "1");
    STOCK(&r, "reserve", "-t", lease, "cli-e", "1");
    parse_id(&r, a);
    STOCK(&r, "extend", "-t", "10s", "cli-e", a);
    ok(&r, "");
    dh_sleep_ms(600 * dh_slack());
    expect_counts("cli-e", 1, 0, 1, 0);
    STOCK(&r, "commit", "cli-e", a);
    ok(&r, "");
    STOCK(&r, "extend", "cli-e", a);
    fails(&r, 73, "committed");
    memcpy(other, a, sizeof other);
    other[5] = other[5] == '0' ? '1' : '0';
    STOCK(&r, "extend", "cli-e", other);
    fails(&r, 73, "no such live reservation");
}

/* A command run on a thread of its own, with an environment of its own (it_cli_env's
 * is rewritten by every call of the main thread's). */
typedef struct bg {
    pthread_t th;
    it_run r;
    const char *const *argv;
    char servers[160];
    const char *env[3];
    int64_t end_ms;
} bg;

static void *bg_main(void *arg)
{
    bg *b = arg;
    b->r.status = dh_run(b->argv, b->env, b->r.out, sizeof b->r.out, b->r.err, sizeof b->r.err);
    b->end_ms = dh_now_ms();
    return NULL;
}

/* A waiting reserve gets the unit a cancel frees, at once. */
static void test_reserve_waits_for_cancel(void **state)
{
    (void)state;
    it_run r;
    char a[DLOCK_TOKEN_LEN + 1], got[DLOCK_TOKEN_LEN + 1];
    STOCK(&r, "set", "cli-f", "1");
    STOCK(&r, "reserve", "cli-f", "1");
    parse_id(&r, a);
    const char *argv[] = {dh_cli_path(), "stock", "reserve", "-w", "20s", "cli-f", "1", NULL};
    bg b = {.argv = argv};
    snprintf(b.servers, sizeof b.servers, "DLOCK_SERVERS=%s", it_srv.url);
    b.env[0] = b.servers;
    b.env[1] = "DLOCK_PASSWORD";
    assert_int_equal(pthread_create(&b.th, NULL, bg_main, &b), 0);
    dlock_client *c = it_client(&it_srv, 1000);
    dlock_stock_info in = {0};
    int64_t until = dh_now_ms() + 5000 * dh_slack();
    while (in.waiters == 0 && dh_now_ms() < until) {
        assert_int_equal(dlock_stock_status(c, "cli-f", &in), DLOCK_OK);
        dh_sleep_ms(10);
    }
    assert_int_equal(in.waiters, 1);
    int64_t t0 = dh_now_ms();
    STOCK(&r, "cancel", "cli-f", a);
    ok(&r, "");
    pthread_join(b.th, NULL);
    parse_id(&b.r, got);
    printf("FIG stock_cli_cancel_to_waiter_ms %lld ms\n", (long long)(b.end_ms - t0));
    assert_true(b.end_ms - t0 < 1000 * dh_slack());
    assert_string_not_equal(got, a);
    expect_counts("cli-f", 1, 0, 1, 0);
    dlock_client_free(c);
}

static void test_usage_errors(void **state)
{
    (void)state;
    it_run r;
    const char *id = "0123456789abcdef0123456789abcdef";
    stock_env(&r, it_cli_env(&it_srv), (const char *)NULL);
    fails(&r, 64, "stock: missing SUBCOMMAND");
    STOCK(&r, "sell", "x", "1");
    fails(&r, 64, "unknown subcommand \"sell\"");
    STOCK(&r, "set", "cli-u");
    fails(&r, 64, "stock set: missing QTY");
    STOCK(&r, "commit", "cli-u");
    fails(&r, 64, "stock commit: missing ID");
    STOCK(&r, "set", "cli-u", "1", "2");
    fails(&r, 64, "unexpected argument \"2\"");
    STOCK(&r, "set", "cli-u", "ten");
    fails(&r, 64, "invalid QTY \"ten\"");
    STOCK(&r, "set", "cli-u", "99999999999999999999");
    fails(&r, 64, "invalid QTY");
    STOCK(&r, "set", "cli-u", "1000000000001");
    fails(&r, 64, "outside [0, 1000000000000]");
    STOCK(&r, "reserve", "cli-u", "0");
    fails(&r, 64, "qty 0 is outside");
    STOCK(&r, "reserve", "cli-u", "--", "-2");
    fails(&r, 64, "qty -2 is outside");
    STOCK(&r, "add", "cli-u", "0");
    fails(&r, 64, "delta 0");
    STOCK(&r, "reserve", "-t", "5ms", "cli-u", "1");
    fails(&r, 64, "invalid TTL");
    STOCK(&r, "set", "-t", "5s", "cli-u", "1");
    fails(&r, 64, "unknown option -t");
    STOCK(&r, "commit", "cli-u", "ABC");
    fails(&r, 64, "32 lowercase hex");
    STOCK(&r, "status", "");
    fails(&r, 64, "sku is empty");
    STOCK(&r, "cancel", "cli-u", id);
    fails(&r, 73, "no such live reservation");
    expect_counts("cli-u", 0, 0, 0, 0);

    stock_env(&r, it_cli_env(&it_srv), "--help", (const char *)NULL);
    ok(&r, NULL);
    assert_non_null(strstr(r.out, "Usage: dlock [OPTIONS] stock SUBCOMMAND"));
    const char *subs[] = {"set", "add", "reserve", "commit", "cancel", "extend", "status"};
    for (size_t i = 0; i < sizeof subs / sizeof *subs; i++) {
        STOCK(&r, subs[i], "--help");
        ok(&r, NULL);
        char want[64];
        snprintf(want, sizeof want, "Usage: dlock [OPTIONS] stock %s ", subs[i]);
        assert_non_null(strstr(r.out, want));
    }
}

static void test_server_down_and_auth(void **state)
{
    (void)state;
    it_run r;
    static const char *const down[] = {"DLOCK_SERVERS=redis://127.0.0.1:1", "DLOCK_PASSWORD", NULL};
    stock_env(&r, down, "status", "cli-x", (const char *)NULL);
    fails(&r, 69, "stock status cli-x: connection to the server failed");
    stock_env(&r, down, "reserve", "-w", "forever", "cli-x", "1", (const char *)NULL);
    fails(&r, 69, "connection to the server failed");
    /* Only the first server holds the stock: a second one that is down is not asked. */
    char two[256];
    snprintf(two, sizeof two, "DLOCK_SERVERS=%s,redis://127.0.0.1:1", it_srv.url);
    const char *const first_up[] = {two, "DLOCK_PASSWORD", NULL};
    stock_env(&r, first_up, "set", "cli-x", "3", (const char *)NULL);
    ok(&r, "");
    expect_counts("cli-x", 3, 3, 0, 0);

    const char *const *env = it_cli_env(&it_auth_srv);
    stock_env(&r, env, "status", "cli-x", (const char *)NULL);
    fails(&r, 77, "authentication or permission refused");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_add_status),
        cmocka_unit_test(test_reserve_commit_cancel),
        cmocka_unit_test(test_reserve_not_available),
        cmocka_unit_test(test_commit_after_expiry),
        cmocka_unit_test(test_extend),
        cmocka_unit_test(test_reserve_waits_for_cancel),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_server_down_and_auth),
    };
    return cmocka_run_group_tests_name("stock_cli", tests, it_srv_auth_setup, it_srv_auth_teardown);
}
