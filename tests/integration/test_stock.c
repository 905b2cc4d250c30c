/*
 * test_stock.c: the stock with leased reservations (dlock_stock_*) against real
 * redis-server processes.
 *
 * Asserted exactly: the counts after every step (from the library and from the keys on
 * the server), the invariant sold + reserved + available == stock at sampled instants
 * of a 50-buyer sale with abandoned reservations, nothing ever sold twice, every bad
 * input refused with a message and nothing changed, arrival order among waiters.
 * Asserted with DLOCK_TEST_SLACK: how soon a waiter gets units after a cancel or an
 * expiry (well before its deadline and the refresh period). Other timings are FIG
 * lines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "internal.h" /* DLOCK_QUEUE_REFRESH_MS */
#include "itest.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

typedef char res_id[DLOCK_TOKEN_LEN + 1];

static dlock_client *client(void)
{
    return it_client(&it_srv, 1000 * dh_slack());
}

/* The stock key of sku, "dlock:{sku}:stock", and one of its fields on the server. */
static long long field(dh_server *s, const char *sku, const char *name)
{
    redisReply *r = dh_cmd(s, "HGET dlock:{%s}:stock %s", sku, name);
    assert_non_null(r);
    long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
    freeReplyObject(r);
    return v;
}

static long long card(dh_server *s, const char *sku, const char *suffix)
{
    return it_int_reply(dh_cmd(s, "ZCARD dlock:{%s}:stock:%s", sku, suffix));
}

static void show(const char *what, int rc)
{
    if (rc != DLOCK_OK)
        printf("INFO %s -> %s: %s\n", what, dlock_errname(rc), dlock_errmsg());
}

/* Status, asserted: stock, available, reserved, sold, and the invariant. */
static void expect(dlock_client *c, const char *sku, int64_t stock, int64_t avail, int64_t reserved,
                   int64_t sold)
{
    dlock_stock_info in;
    int rc = dlock_stock_status(c, sku, &in);
    show("status", rc);
    assert_int_equal(rc, DLOCK_OK);
    if (in.stock != stock || in.available != avail || in.reserved != reserved || in.sold != sold)
        fail_msg("%s: stock %lld available %lld reserved %lld sold %lld, want %lld %lld %lld %lld",
                 sku, (long long)in.stock, (long long)in.available, (long long)in.reserved,
                 (long long)in.sold, (long long)stock, (long long)avail, (long long)reserved,
                 (long long)sold);
    assert_int_equal(in.stock, in.sold + in.reserved + in.available);
}

static void set_stock(dlock_client *c, const char *sku, int64_t qty)
{
    int rc = dlock_stock_set(c, sku, qty, NULL);
    show("set", rc);
    assert_int_equal(rc, DLOCK_OK);
}

/* Reserve qty with a lease and a wait; returns the code, the id in id. */
static int reserve(dlock_client *c, const char *sku, int64_t qty, int64_t lease_ms, int64_t wait_ms,
                   res_id id)
{
    dlock_reserve_opts o = {0};
    o.lease_ms = lease_ms;
    o.wait_ms = wait_ms;
    return dlock_stock_reserve(c, sku, qty, &o, id);
}

static void reserve_ok(dlock_client *c, const char *sku, int64_t qty, int64_t lease_ms, res_id id)
{
    int rc = reserve(c, sku, qty, lease_ms, 0, id);
    show("reserve", rc);
    assert_int_equal(rc, DLOCK_OK);
    assert_true(dlock__token_valid(id));
}

/* ---- the flash sale of ten ---------------------------------------------------------- */

/* Ten units; twelve buyers take one each: the 11th and 12th cannot get in. Two sales
 * fail (canceled): the stock goes back up by two, and the 13th and 14th get in. */
static void test_ten_units_twelve_buyers(void **state)
{
    (void)state;
    dlock_client *c = client();
    set_stock(c, "ten", 10);
    expect(c, "ten", 10, 10, 0, 0);
    res_id id[14];
    for (int i = 0; i < 10; i++)
        reserve_ok(c, "ten", 1, 30000, id[i]);
    for (int i = 10; i < 12; i++) {
        assert_int_equal(reserve(c, "ten", 1, 30000, 0, id[i]), DLOCK_ERR_BUSY);
        assert_string_equal(id[i], "");
        printf("INFO buyer %d: %s\n", i + 1, dlock_errmsg());
        assert_non_null(strstr(dlock_errmsg(), "0 units of ten available"));
    }
    expect(c, "ten", 10, 0, 10, 0);
    assert_int_equal(field(&it_srv, "ten", "reserved"), 10);
    assert_int_equal(card(&it_srv, "ten", "res"), 10);

    assert_int_equal(dlock_stock_cancel(c, "ten", id[3]), DLOCK_OK);
    assert_int_equal(dlock_stock_cancel(c, "ten", id[7]), DLOCK_OK);
    expect(c, "ten", 10, 2, 8, 0);
    reserve_ok(c, "ten", 1, 30000, id[12]);
    reserve_ok(c, "ten", 1, 30000, id[13]);
    expect(c, "ten", 10, 0, 10, 0);

    for (int i = 0; i < 14; i++)
        if (i != 3 && i != 7 && i != 10 && i != 11)
            assert_int_equal(dlock_stock_commit(c, "ten", id[i]), DLOCK_OK);
    expect(c, "ten", 10, 0, 0, 10);
    assert_int_equal(field(&it_srv, "ten", "total"), 10);
    assert_int_equal(field(&it_srv, "ten", "sold"), 10);
    assert_int_equal(field(&it_srv, "ten", "reserved"), 0);
    assert_int_equal(card(&it_srv, "ten", "done"), 10);

    /* Sold out: no wait can help, so a waiting reserve is refused at once. */
    int64_t t0 = dh_now_ms();
    res_id late;
    assert_int_equal(reserve(c, "ten", 1, 30000, 5000, late), DLOCK_ERR_BUSY);
    assert_true(dh_now_ms() - t0 < 1000 * dh_slack());
    assert_non_null(strstr(dlock_errmsg(), "unsold"));
    dlock_client_free(c);
}

/* The stock keys and a lock of the same name live side by side. */
static void test_layout_beside_lock(void **state)
{
    (void)state;
    dlock_client *c = client();
    dlock_lock *l = it_acquire(c, "both", 5000);
    set_stock(c, "both", 3);
    res_id id;
    reserve_ok(c, "both", 2, 5000, id);
    it_expect_holder(&it_srv, "both", dlock_token(l));
    assert_int_equal(it_exists(&it_srv, "dlock:{both}:stock"), 1);
    assert_int_equal(it_exists(&it_srv, "dlock:{both}:stock:res"), 1);
    redisReply *r = dh_cmd(&it_srv, "HGET dlock:{both}:stock r:%s", id);
    assert_non_null(r);
    assert_string_equal(r->str, "2");
    freeReplyObject(r);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    expect(c, "both", 3, 1, 2, 0);
    assert_int_equal(dlock_stock_commit(c, "both", id), DLOCK_OK);
    expect(c, "both", 3, 1, 0, 2);
    dlock_client_free(c);
}

/* ---- commit, cancel, extend --------------------------------------------------------- */

static void test_commit_is_idempotent(void **state)
{
    (void)state;
    dlock_client *c = client();
    set_stock(c, "idem", 5);
    res_id id;
    reserve_ok(c, "idem", 3, 30000, id);
    assert_int_equal(dlock_stock_commit(c, "idem", id), DLOCK_OK);
    expect(c, "idem", 5, 2, 0, 3);
    /* Repeated (say after a client-side timeout): succeeds, counts nothing more. */
    assert_int_equal(dlock_stock_commit(c, "idem", id), DLOCK_OK);
    assert_int_equal(dlock_stock_commit(c, "idem", id), DLOCK_OK);
    expect(c, "idem", 5, 2, 0, 3);
    /* A committed reservation cannot be canceled or extended. */
    assert_int_equal(dlock_stock_cancel(c, "idem", id), DLOCK_ERR_LOST);
    assert_non_null(strstr(dlock_errmsg(), "committed"));
    assert_int_equal(dlock_stock_extend(c, "idem", id, 5000), DLOCK_ERR_LOST);
    expect(c, "idem", 5, 2, 0, 3);
    /* The committed id is kept for the retention period. */
    redisReply *r = dh_cmd(&it_srv, "PTTL dlock:{idem}:stock:done");
    assert_non_null(r);
    assert_true(r->integer > DLOCK_STOCK_COMMIT_RETENTION_MS - 60000 &&
                r->integer <= DLOCK_STOCK_COMMIT_RETENTION_MS + 1000);
    freeReplyObject(r);
    /* Unknown ids: LOST, nothing changed. */
    res_id other;
    memcpy(other, id, sizeof other);
    other[0] = other[0] == 'a' ? 'b' : 'a';
    assert_int_equal(dlock_stock_commit(c, "idem", other), DLOCK_ERR_LOST);
    assert_int_equal(dlock_stock_cancel(c, "idem", other), DLOCK_ERR_LOST);
    assert_int_equal(dlock_stock_extend(c, "idem", other, 5000), DLOCK_ERR_LOST);
    assert_int_equal(dlock_stock_commit(c, "idem-other-sku", id), DLOCK_ERR_LOST);
    expect(c, "idem", 5, 2, 0, 3);
    dlock_client_free(c);
}

static void test_cancel_gives_units_back(void **state)
{
    (void)state;
    dlock_client *c = client();
    set_stock(c, "cxl", 4);
    res_id a, b;
    reserve_ok(c, "cxl", 3, 30000, a);
    reserve_ok(c, "cxl", 1, 30000, b);
    expect(c, "cxl", 4, 0, 4, 0);
    assert_int_equal(dlock_stock_cancel(c, "cxl", a), DLOCK_OK);
    expect(c, "cxl", 4, 3, 1, 0);
    /* Once only, and a canceled reservation cannot be committed. */
    assert_int_equal(dlock_stock_cancel(c, "cxl", a), DLOCK_ERR_LOST);
    assert_int_equal(dlock_stock_commit(c, "cxl", a), DLOCK_ERR_LOST);
    assert_int_equal(dlock_stock_extend(c, "cxl", a, 1000), DLOCK_ERR_LOST);
    expect(c, "cxl", 4, 3, 1, 0);
    assert_int_equal(dlock_stock_commit(c, "cxl", b), DLOCK_OK);
    expect(c, "cxl", 4, 3, 0, 1);
    dlock_client_free(c);
}

static void test_commit_after_expiry_is_lost(void **state)
{
    (void)state;
    dlock_client *c = client();
    long long k = dh_slack();
    set_stock(c, "exp", 2);
    res_id id;
    reserve_ok(c, "exp", 2, 100 * k, id);
    expect(c, "exp", 2, 0, 2, 0);
    dh_sleep_ms(200 * k);
    assert_int_equal(dlock_stock_commit(c, "exp", id), DLOCK_ERR_LOST);
    printf("INFO commit after expiry: %s\n", dlock_errmsg());
    assert_non_null(strstr(dlock_errmsg(), "lease ran out"));
    expect(c, "exp", 2, 2, 0, 0);
    /* Its units are sold to the next buyer. */
    res_id next;
    reserve_ok(c, "exp", 2, 30000, next);
    assert_int_equal(dlock_stock_commit(c, "exp", next), DLOCK_OK);
    expect(c, "exp", 2, 0, 0, 2);
    dlock_client_free(c);
}

/* A lease that runs out is seen by status alone: no other call returns the units. */
static void test_status_alone_shows_expired_units(void **state)
{
    (void)state;
    dlock_client *c = client();
    long long k = dh_slack();
    set_stock(c, "alone", 7);
    res_id a, b;
    reserve_ok(c, "alone", 3, 100 * k, a);
    reserve_ok(c, "alone", 2, 60000, b);
    dh_sleep_ms(200 * k);
    /* Nothing ran since: the server still counts them ... */
    assert_int_equal(field(&it_srv, "alone", "reserved"), 5);
    /* ... and status counts them back, and says so from then on. */
    expect(c, "alone", 7, 5, 2, 0);
    assert_int_equal(field(&it_srv, "alone", "reserved"), 2);
    assert_int_equal(card(&it_srv, "alone", "res"), 1);
    dlock_stock_info in;
    assert_int_equal(dlock_stock_status(c, "alone", &in), DLOCK_OK);
    assert_int_equal(in.reservations, 1);
    assert_int_equal(in.waiters, 0);
    assert_int_equal(dlock_stock_cancel(c, "alone", b), DLOCK_OK);
    expect(c, "alone", 7, 7, 0, 0);
    /* A SKU never set reads as zeros, and reading it writes nothing. */
    expect(c, "never-set", 0, 0, 0, 0);
    assert_int_equal(it_exists(&it_srv, "dlock:{never-set}:stock"), 0);
    dlock_client_free(c);
}

static void test_extend(void **state)
{
    (void)state;
    dlock_client *c = client();
    long long k = dh_slack();
    set_stock(c, "ext", 1);
    res_id id;
    reserve_ok(c, "ext", 1, 300 * k, id);
    assert_int_equal(dlock_stock_extend(c, "ext", id, 2000 * k), DLOCK_OK);
    redisReply *r = dh_cmd(&it_srv, "ZSCORE dlock:{ext}:stock:res %s", id);
    redisReply *t = dh_cmd(&it_srv, "TIME");
    assert_non_null(r);
    assert_non_null(t);
    long long end = strtoll(r->str, NULL, 10);
    long long now =
        strtoll(t->element[0]->str, NULL, 10) * 1000 + strtoll(t->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(r);
    freeReplyObject(t);
    assert_true(end - now > 300 * k && end - now <= 2000 * k);
    dh_sleep_ms(600 * k); /* twice the first lease */
    expect(c, "ext", 1, 0, 1, 0);
    /* It sets, it does not add: 100 ms brings it down. */
    assert_int_equal(dlock_stock_extend(c, "ext", id, 100 * k), DLOCK_OK);
    dh_sleep_ms(200 * k);
    expect(c, "ext", 1, 1, 0, 0);
    assert_int_equal(dlock_stock_extend(c, "ext", id, 1000), DLOCK_ERR_LOST);
    assert_int_equal(dlock_stock_commit(c, "ext", id), DLOCK_ERR_LOST);
    expect(c, "ext", 1, 1, 0, 0);
    dlock_client_free(c);
}

/* ---- set and add -------------------------------------------------------------------- */

static void test_set_and_add_rules(void **state)
{
    (void)state;
    dlock_client *c = client();
    dlock_stock_info in;
    assert_int_equal(dlock_stock_set(c, "rules", 10, &in), DLOCK_OK);
    assert_int_equal(in.stock, 10);
    assert_int_equal(in.available, 10);
    res_id a, b;
    reserve_ok(c, "rules", 4, 30000, a);
    reserve_ok(c, "rules", 2, 30000, b);
    assert_int_equal(dlock_stock_commit(c, "rules", a), DLOCK_OK);
    expect(c, "rules", 10, 4, 2, 4);

    /* Below sold + reserved: refused, with the counts, nothing changed. */
    assert_int_equal(dlock_stock_set(c, "rules", 5, NULL), DLOCK_ERR_INVALID);
    printf("INFO set 5: %s\n", dlock_errmsg());
    assert_non_null(strstr(dlock_errmsg(), "4 units sold and 2 reserved"));
    expect(c, "rules", 10, 4, 2, 4);
    assert_int_equal(dlock_stock_add(c, "rules", -5, NULL), DLOCK_ERR_INVALID);
    printf("INFO add -5: %s\n", dlock_errmsg());
    assert_non_null(strstr(dlock_errmsg(), "only 4 units available"));
    expect(c, "rules", 10, 4, 2, 4);
    /* Down to exactly sold + reserved, and up again. */
    assert_int_equal(dlock_stock_set(c, "rules", 6, &in), DLOCK_OK);
    assert_int_equal(in.available, 0);
    assert_int_equal(dlock_stock_add(c, "rules", 3, &in), DLOCK_OK);
    assert_int_equal(in.stock, 9);
    assert_int_equal(in.available, 3);
    assert_int_equal(dlock_stock_add(c, "rules", -3, NULL), DLOCK_OK);
    expect(c, "rules", 6, 0, 2, 4);
    /* Past the maximum. */
    assert_int_equal(dlock_stock_add(c, "rules", DLOCK_STOCK_QTY_MAX, NULL), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errmsg(), "cannot grow past"));
    assert_int_equal(dlock_stock_set(c, "rules", DLOCK_STOCK_QTY_MAX, NULL), DLOCK_OK);
    expect(c, "rules", DLOCK_STOCK_QTY_MAX, DLOCK_STOCK_QTY_MAX - 6, 2, 4);
    /* A huge reservation is counted exactly. */
    res_id big;
    reserve_ok(c, "rules", DLOCK_STOCK_QTY_MAX - 6, 30000, big);
    expect(c, "rules", DLOCK_STOCK_QTY_MAX, 0, DLOCK_STOCK_QTY_MAX - 4, 4);
    assert_int_equal(dlock_stock_commit(c, "rules", big), DLOCK_OK);
    assert_int_equal(dlock_stock_cancel(c, "rules", b), DLOCK_OK);
    expect(c, "rules", DLOCK_STOCK_QTY_MAX, 2, 0, DLOCK_STOCK_QTY_MAX - 2);
    dlock_client_free(c);
}

/* ---- bad input ---------------------------------------------------------------------- */

/* The stock's keys on the server, as one string, to show that nothing changed. */
static void snapshot(const char *sku, char *out, size_t len)
{
    redisReply *r = dh_cmd(&it_srv, "HGETALL dlock:{%s}:stock", sku);
    redisReply *z = dh_cmd(&it_srv, "ZRANGE dlock:{%s}:stock:res 0 -1 WITHSCORES", sku);
    assert_non_null(r);
    assert_non_null(z);
    size_t at = 0;
    for (size_t i = 0; i < r->elements; i++)
        at += (size_t)snprintf(out + at, len - at, "%s,", r->element[i]->str);
    for (size_t i = 0; i < z->elements; i++)
        at += (size_t)snprintf(out + at, len - at, "%s;", z->element[i]->str);
    freeReplyObject(r);
    freeReplyObject(z);
}

static void expect_invalid(int rc, const char *needle)
{
    if (rc != DLOCK_ERR_INVALID)
        fail_msg("got %s (%s), want DLOCK_ERR_INVALID with \"%s\"", dlock_errname(rc),
                 dlock_errmsg(), needle);
    if (strstr(dlock_errmsg(), needle) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", dlock_errmsg(), needle);
}

static void test_bad_input(void **state)
{
    (void)state;
    dlock_client *c = client();
    set_stock(c, "bad", 5);
    res_id held, id;
    reserve_ok(c, "bad", 1, 30000, held);
    char before[512], after[512];
    snapshot("bad", before, sizeof before);
    char longsku[DLOCK_NAME_MAX + 2];
    memset(longsku, 'x', sizeof longsku - 1);
    longsku[sizeof longsku - 1] = '\0';
    dlock_reserve_opts o = {0};

    expect_invalid(dlock_stock_reserve(c, "bad", 0, NULL, id), "qty 0");
    assert_string_equal(id, "");
    expect_invalid(dlock_stock_reserve(c, "bad", -3, NULL, id), "qty -3");
    expect_invalid(dlock_stock_reserve(c, "bad", DLOCK_STOCK_QTY_MAX + 1, NULL, id), "outside");
    expect_invalid(dlock_stock_reserve(c, "bad", INT64_MAX, NULL, id), "outside");
    expect_invalid(dlock_stock_reserve(c, "", 1, NULL, id), "sku is empty");
    expect_invalid(dlock_stock_reserve(c, NULL, 1, NULL, id), "sku is NULL");
    expect_invalid(dlock_stock_reserve(c, longsku, 1, NULL, id), "sku longer than");
    expect_invalid(dlock_stock_reserve(c, "bad", 1, NULL, NULL), "id is NULL");
    expect_invalid(dlock_stock_reserve(NULL, "bad", 1, NULL, id), "client is NULL");
    o.lease_ms = 5;
    expect_invalid(dlock_stock_reserve(c, "bad", 1, &o, id), "lease_ms 5 ms");
    o.lease_ms = INT64_C(1) << 40;
    expect_invalid(dlock_stock_reserve(c, "bad", 1, &o, id), "lease_ms");
    o.lease_ms = -1;
    expect_invalid(dlock_stock_reserve(c, "bad", 1, &o, id), "lease_ms");
    o.lease_ms = 0;
    o.wait_ms = -2;
    expect_invalid(dlock_stock_reserve(c, "bad", 1, &o, id), "wait_ms -2");
    o.wait_ms = 0;
    o.cancel_fd = -1;
    expect_invalid(dlock_stock_reserve(c, "bad", 1, &o, id), "cancel_fd");
    o.cancel_fd = 0;
    o.reserved[3] = 1;
    expect_invalid(dlock_stock_reserve(c, "bad", 1, &o, id), "reserved must be zero");
    o.reserved[3] = 0;
    o.reserved32 = 1;
    expect_invalid(dlock_stock_reserve(c, "bad", 1, &o, id), "reserved32");

    const char *bad_ids[] = {NULL,
                             "",
                             "abc",
                             "0123456789abcdef0123456789abcde",   /* 31 */
                             "0123456789abcdef0123456789abcdef0", /* 33 */
                             "0123456789ABCDEF0123456789abcdef",  /* uppercase */
                             "0123456789abcdef0123456789abcdeg"};
    for (size_t i = 0; i < sizeof bad_ids / sizeof *bad_ids; i++) {
        const char *want = bad_ids[i] ? "32 lowercase hex" : "id is NULL";
        expect_invalid(dlock_stock_commit(c, "bad", bad_ids[i]), want);
        expect_invalid(dlock_stock_cancel(c, "bad", bad_ids[i]), want);
        expect_invalid(dlock_stock_extend(c, "bad", bad_ids[i], 1000), want);
    }
    expect_invalid(dlock_stock_commit(c, "", held), "sku is empty");
    expect_invalid(dlock_stock_cancel(c, NULL, held), "sku is NULL");
    expect_invalid(dlock_stock_extend(c, "bad", held, 0), "lease_ms 0 ms");
    expect_invalid(dlock_stock_extend(c, "bad", held, 9), "lease_ms 9 ms");

    expect_invalid(dlock_stock_set(c, "bad", -1, NULL), "stock -1");
    expect_invalid(dlock_stock_set(c, "bad", DLOCK_STOCK_QTY_MAX + 1, NULL), "outside");
    expect_invalid(dlock_stock_set(c, "", 3, NULL), "sku is empty");
    expect_invalid(dlock_stock_add(c, "bad", 0, NULL), "delta 0");
    expect_invalid(dlock_stock_add(c, "bad", -DLOCK_STOCK_QTY_MAX - 1, NULL), "outside");
    expect_invalid(dlock_stock_add(c, "bad", INT64_MIN, NULL), "outside");
    expect_invalid(dlock_stock_status(c, "bad", NULL), "out is NULL");
    dlock_stock_info in;
    expect_invalid(dlock_stock_status(c, longsku, &in), "sku longer than");
    /* Refused changes are refusals too. */
    expect_invalid(dlock_stock_set(c, "bad", 0, NULL), "1 reserved");
    expect_invalid(dlock_stock_add(c, "bad", -5, NULL), "only 4 units available");

    /* A file:// client has no server to keep a stock on. */
    char dir[512];
    assert_int_equal(it_tmpdir(dir, sizeof dir, "stock-local"), 0);
    char url[600];
    snprintf(url, sizeof url, "file://%s", dir);
    dlock_client *lc = NULL;
    assert_int_equal(dlock_client_new(url, NULL, &lc), DLOCK_OK);
    expect_invalid(dlock_stock_set(lc, "bad", 3, NULL), "needs a Redis server");
    expect_invalid(dlock_stock_reserve(lc, "bad", 1, NULL, id), "needs a Redis server");
    assert_string_equal(id, "");
    expect_invalid(dlock_stock_status(lc, "bad", &in), "needs a Redis server");
    expect_invalid(dlock_stock_commit(lc, "bad", held), "needs a Redis server");
    dlock_client_free(lc);
    it_tmpdir_remove(dir);

    snapshot("bad", after, sizeof after);
    assert_string_equal(before, after);
    expect(c, "bad", 5, 4, 1, 0);
    assert_int_equal(dlock_stock_commit(c, "bad", held), DLOCK_OK);
    dlock_client_free(c);
}

/* ---- waiting -------------------------------------------------------------------------- */

typedef struct waiter {
    pthread_t th;
    dlock_client *c;
    const char *sku;
    int64_t qty, wait_ms;
    int cancel_fd;
    int rc;
    res_id id;
    int64_t got_ms; /* dh_now_ms() when the call returned */
} waiter;

static void *wait_main(void *arg)
{
    waiter *w = arg;
    dlock_reserve_opts o = {0};
    o.wait_ms = w->wait_ms;
    o.cancel_fd = w->cancel_fd;
    w->rc = dlock_stock_reserve(w->c, w->sku, w->qty, &o, w->id);
    w->got_ms = dh_now_ms();
    return NULL;
}

static void waiter_start_fd(waiter *w, const char *sku, int64_t qty, int64_t wait_ms, int cancel_fd)
{
    memset(w, 0, sizeof *w);
    w->c = client();
    w->sku = sku;
    w->qty = qty;
    w->wait_ms = wait_ms;
    w->cancel_fd = cancel_fd;
    assert_int_equal(pthread_create(&w->th, NULL, wait_main, w), 0);
}

static void waiter_start(waiter *w, const char *sku, int64_t qty, int64_t wait_ms)
{
    waiter_start_fd(w, sku, qty, wait_ms, 0);
}

static void waiter_join(waiter *w)
{
    pthread_join(w->th, NULL);
    dlock_client_free(w->c);
}

/* Wait until n reserves of sku are among its waiters. */
static void wait_waiters(const char *sku, long long n)
{
    int64_t until = dh_now_ms() + 5000 * dh_slack();
    while (card(&it_srv, sku, "wait") < n && dh_now_ms() < until)
        dh_sleep_ms(5);
    assert_int_equal(card(&it_srv, sku, "wait"), n);
}

/* A cancel wakes the waiter at once: it is not polling. The waiter has waited 1.5 s
 * (the leases have 30 s left, so it only refreshes once a second); the cancel is its
 * one PUBLISH, and the waiter has its unit within a round trip of it, not at its next
 * refresh half a second later. */
static void test_cancel_wakes_waiter(void **state)
{
    (void)state;
    dlock_client *c = client();
    set_stock(c, "wake", 2);
    res_id a, b;
    reserve_ok(c, "wake", 1, 30000, a);
    reserve_ok(c, "wake", 1, 30000, b);
    waiter w;
    waiter_start(&w, "wake", 1, 20000 * dh_slack());
    wait_waiters("wake", 1);
    dh_sleep_ms(1500);
    long long scripts0 = it_script_calls(&it_srv);
    long long pub0 = it_cmd_calls(&it_srv, "publish");
    int64_t t0 = dh_now_ms();
    assert_int_equal(dlock_stock_cancel(c, "wake", a), DLOCK_OK);
    waiter_join(&w);
    int64_t took = w.got_ms - t0;
    assert_int_equal(w.rc, DLOCK_OK);
    printf("FIG stock_cancel_to_waiter_ms %lld ms\n", (long long)took);
    long long scripts = it_script_calls(&it_srv) - scripts0;
    long long pubs = it_cmd_calls(&it_srv, "publish") - pub0;
    printf("FIG stock_cancel_wake_scripts %lld calls (cancel, woken retry)\n", scripts);
    assert_int_equal(pubs, 1);
    assert_true(scripts <= 3);
    assert_true(took < 300 * dh_slack());
    assert_int_equal(card(&it_srv, "wake", "wait"), 0);
    expect(c, "wake", 2, 0, 2, 0);
    assert_int_equal(dlock_stock_commit(c, "wake", w.id), DLOCK_OK);
    assert_int_equal(dlock_stock_commit(c, "wake", b), DLOCK_OK);
    expect(c, "wake", 2, 0, 0, 2);
    dlock_client_free(c);
}

/* A waiter quiet while it waits: in 2 s, each of 4 waiters refreshes twice, one script
 * call each, and nothing else runs. */
static void test_waiters_are_quiet(void **state)
{
    (void)state;
    dlock_client *c = client();
    set_stock(c, "quiet", 1);
    res_id a;
    reserve_ok(c, "quiet", 1, 30000, a);
    waiter w[4];
    for (int i = 0; i < 4; i++)
        waiter_start(&w[i], "quiet", 1, 2500 * dh_slack());
    wait_waiters("quiet", 4);
    dh_sleep_ms(200);
    long long s0 = it_script_calls(&it_srv);
    dh_sleep_ms(2000);
    long long calls = it_script_calls(&it_srv) - s0;
    printf("FIG stock_quiet_waiting_scripts %lld calls (4 waiters, 2 s)\n", calls);
    assert_true(calls <= 4 * (2000 / DLOCK_QUEUE_REFRESH_MS + 1));
    for (int i = 0; i < 4; i++) {
        waiter_join(&w[i]);
        assert_int_equal(w[i].rc, DLOCK_ERR_BUSY);
    }
    assert_int_equal(card(&it_srv, "quiet", "wait"), 0);
    assert_int_equal(dlock_stock_cancel(c, "quiet", a), DLOCK_OK);
    dlock_client_free(c);
}

/* An expiry publishes nothing: the waiter retries when the earliest lease ends. */
static void test_expiry_serves_waiter(void **state)
{
    (void)state;
    dlock_client *c = client();
    long long k = dh_slack();
    set_stock(c, "lapse", 3);
    res_id a, b;
    reserve_ok(c, "lapse", 2, 30000, a);
    int64_t t0 = dh_now_ms();
    reserve_ok(c, "lapse", 1, 400 * k, b);
    waiter w;
    waiter_start(&w, "lapse", 1, 10000 * k);
    waiter_join(&w);
    int64_t took = w.got_ms - t0;
    assert_int_equal(w.rc, DLOCK_OK);
    printf("FIG stock_expiry_to_waiter_ms %lld ms (lease %lld ms)\n", (long long)took, 400 * k);
    assert_true(took >= 400 * k - 5);
    assert_true(took < 400 * k + 200 * k);
    assert_int_equal(dlock_stock_commit(c, "lapse", b), DLOCK_ERR_LOST);
    assert_int_equal(dlock_stock_commit(c, "lapse", w.id), DLOCK_OK);
    assert_int_equal(dlock_stock_commit(c, "lapse", a), DLOCK_OK);
    expect(c, "lapse", 3, 0, 0, 3);
    dlock_client_free(c);
}

/* A restock wakes waiters too. */
static void test_restock_wakes_waiter(void **state)
{
    (void)state;
    dlock_client *c = client();
    set_stock(c, "restock", 0);
    waiter w;
    waiter_start(&w, "restock", 2, 0);
    waiter_join(&w);
    assert_int_equal(w.rc, DLOCK_ERR_BUSY); /* nothing unsold: at once */
    set_stock(c, "restock", 1);
    res_id a;
    reserve_ok(c, "restock", 1, 30000, a);
    waiter_start(&w, "restock", 1, 10000 * dh_slack());
    wait_waiters("restock", 1);
    int64_t t0 = dh_now_ms();
    assert_int_equal(dlock_stock_add(c, "restock", 1, NULL), DLOCK_OK);
    waiter_join(&w);
    assert_int_equal(w.rc, DLOCK_OK);
    printf("FIG stock_restock_to_waiter_ms %lld ms\n", (long long)(w.got_ms - t0));
    assert_true(w.got_ms - t0 < 300 * dh_slack());
    expect(c, "restock", 2, 0, 2, 0);
    dlock_client_free(c);
}

/* Arrival order: a 5-unit waiter at the head is served before a 1-unit one behind it,
 * and a reserve that does not wait cannot take units the head waits for. */
static void test_big_buyer_not_starved(void **state)
{
    (void)state;
    dlock_client *c = client();
    long long k = dh_slack();
    set_stock(c, "fifo", 5);
    res_id one[5];
    for (int i = 0; i < 5; i++)
        reserve_ok(c, "fifo", 1, 30000, one[i]);
    waiter big, small;
    waiter_start(&big, "fifo", 5, 10000 * k);
    wait_waiters("fifo", 1);
    waiter_start(&small, "fifo", 1, 1500 * k);
    wait_waiters("fifo", 2);
    /* One unit free: it fits the small buyer, but the big one is first. */
    assert_int_equal(dlock_stock_cancel(c, "fifo", one[0]), DLOCK_OK);
    res_id id;
    for (int i = 0; i < 3; i++) {
        int rc = reserve(c, "fifo", 1, 30000, 0, id);
        assert_int_equal(rc, DLOCK_ERR_BUSY);
        printf("INFO a buyer who does not wait: %s\n", dlock_errmsg());
        assert_non_null(strstr(dlock_errmsg(),
                               "at least 1 earlier waiter(s) come first with at least 5 units"));
        dh_sleep_ms(50);
    }
    expect(c, "fifo", 5, 1, 4, 0);
    for (int i = 1; i < 5; i++)
        assert_int_equal(dlock_stock_cancel(c, "fifo", one[i]), DLOCK_OK);
    waiter_join(&big);
    assert_int_equal(big.rc, DLOCK_OK);
    waiter_join(&small);
    assert_int_equal(small.rc, DLOCK_ERR_BUSY);
    assert_true(small.got_ms >= big.got_ms);
    expect(c, "fifo", 5, 0, 5, 0);
    assert_int_equal(card(&it_srv, "fifo", "wait"), 0);
    assert_int_equal(dlock_stock_commit(c, "fifo", big.id), DLOCK_OK);
    dlock_client_free(c);
}

/* A wait ends at its deadline, not before, or through cancel_fd; it leaves no waiter. */
static void test_deadline_and_cancel_fd(void **state)
{
    (void)state;
    dlock_client *c = client();
    set_stock(c, "dl", 1);
    res_id a, id;
    reserve_ok(c, "dl", 1, 30000, a);
    int64_t t0 = dh_now_ms();
    assert_int_equal(reserve(c, "dl", 1, 30000, 300, id), DLOCK_ERR_BUSY);
    int64_t took = dh_now_ms() - t0;
    printf("FIG stock_wait_300_busy_ms %lld ms\n", (long long)took);
    assert_true(took >= 300 && took < 300 + 500 * dh_slack());
    assert_int_equal(card(&it_srv, "dl", "wait"), 0);

    waiter w;
    int efd = eventfd(0, EFD_CLOEXEC);
    assert_true(efd > 0);
    waiter_start_fd(&w, "dl", 1, -1, efd);
    wait_waiters("dl", 1);
    uint64_t one = 1;
    t0 = dh_now_ms();
    assert_int_equal(write(efd, &one, sizeof one), (ssize_t)sizeof one);
    waiter_join(&w);
    assert_int_equal(w.rc, DLOCK_ERR_CANCELED);
    printf("FIG stock_cancel_fd_ms %lld ms\n", (long long)(w.got_ms - t0));
    close(efd);
    /* Its place is given up (sent, not awaited: give it a moment to land). */
    int64_t until = dh_now_ms() + 1000 * dh_slack();
    while (card(&it_srv, "dl", "wait") != 0 && dh_now_ms() < until)
        dh_sleep_ms(5);
    assert_int_equal(card(&it_srv, "dl", "wait"), 0);
    expect(c, "dl", 1, 0, 1, 0);
    dlock_client_free(c);
}

/* ---- a sale: 50 buyers, 10 % of them abandon their reservations --------------------- */

#define SALE_BUYERS       50
#define SALE_STOCK        300
#define SALE_ABANDON_EACH 3 /* reservations each abandoning buyer leaves behind */

typedef struct sale {
    _Atomic long committed;
    _Atomic int done;
    _Atomic int failed;
    long long lease_ms;
    pthread_mutex_t mu;
    res_id ids[SALE_STOCK + 1];
    char err[256];
} sale;

typedef struct buyer {
    pthread_t th;
    sale *s;
    int idx;
    bool abandons;
} buyer;

static void sale_fail(sale *s, const char *what, int rc)
{
    pthread_mutex_lock(&s->mu);
    if (s->failed++ == 0)
        snprintf(s->err, sizeof s->err, "%s: %s: %s", what, dlock_errname(rc), dlock_errmsg());
    pthread_mutex_unlock(&s->mu);
}

static void *buyer_main(void *arg)
{
    buyer *b = arg;
    sale *s = b->s;
    dlock_client *c = client();
    dlock_reserve_opts o = {0};
    o.lease_ms = s->lease_ms;
    o.wait_ms = 20000 * dh_slack();
    for (int n = 0; !s->failed; n++) {
        res_id id;
        int rc = dlock_stock_reserve(c, "sale", 1, &o, id);
        if (rc == DLOCK_ERR_BUSY && strstr(dlock_errmsg(), "unsold") != NULL)
            break; /* sold out */
        if (rc != DLOCK_OK) {
            sale_fail(s, "reserve", rc);
            break;
        }
        if (b->abandons) {
            /* A crash: the reservation is never committed nor canceled. */
            if (n + 1 == SALE_ABANDON_EACH)
                break;
            continue;
        }
        rc = dlock_stock_commit(c, "sale", id);
        if (rc != DLOCK_OK) {
            sale_fail(s, "commit", rc);
            break;
        }
        long i = s->committed++;
        if (i < SALE_STOCK)
            memcpy(s->ids[i], id, sizeof id);
    }
    dlock_client_free(c);
    s->done++;
    return NULL;
}

static int cmp_ids(const void *a, const void *b)
{
    return memcmp(a, b, sizeof(res_id));
}

static void test_sale_with_abandoned_reservations(void **state)
{
    (void)state;
    long long k = dh_slack();
    dlock_client *c = client();
    set_stock(c, "sale", SALE_STOCK);
    static sale s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    s.lease_ms = 500 * k;
    buyer b[SALE_BUYERS];
    int abandoners = 0;
    int64_t t0 = dh_now_ms();
    for (int i = 0; i < SALE_BUYERS; i++) {
        b[i] = (buyer){.s = &s, .idx = i, .abandons = i % 10 == 3};
        abandoners += b[i].abandons;
        assert_int_equal(pthread_create(&b[i].th, NULL, buyer_main, &b[i]), 0);
    }
    assert_int_equal(abandoners, SALE_BUYERS / 10);
    /* Sample the invariant while the sale runs: every status is one script, so each is
     * an instant of the server's state. */
    long samples = 0;
    int64_t max_reserved = 0;
    while (s.done < SALE_BUYERS) {
        dlock_stock_info in;
        int rc = dlock_stock_status(c, "sale", &in);
        show("status", rc);
        assert_int_equal(rc, DLOCK_OK);
        assert_int_equal(in.stock, SALE_STOCK);
        assert_int_equal(in.sold + in.reserved + in.available, in.stock);
        assert_true(in.sold <= in.stock);
        assert_true(in.available >= 0 && in.reserved >= 0);
        /* The server's own fields, read outside any script, hold it too. */
        long long sold = field(&it_srv, "sale", "sold");
        long long reserved = field(&it_srv, "sale", "reserved");
        assert_true(sold <= SALE_STOCK && sold + reserved <= SALE_STOCK);
        if (in.reserved > max_reserved)
            max_reserved = in.reserved;
        samples++;
        dh_sleep_ms(5);
    }
    for (int i = 0; i < SALE_BUYERS; i++)
        pthread_join(b[i].th, NULL);
    int64_t took = dh_now_ms() - t0;
    if (s.failed)
        fail_msg("%d buyer(s) failed; first: %s", s.failed, s.err);
    printf("FIG stock_sale_ms %lld ms (%d buyers, %d abandoning %d each, lease %lld ms)\n",
           (long long)took, SALE_BUYERS, abandoners, SALE_ABANDON_EACH, s.lease_ms);
    printf("INFO %ld samples of the invariant, reserved at most %lld\n", samples,
           (long long)max_reserved);
    /* Exactly the stock sold, every unit once: the abandoned units came back after
     * their lease and were sold to others. */
    assert_int_equal(s.committed, SALE_STOCK - 0);
    qsort(s.ids, SALE_STOCK, sizeof(res_id), cmp_ids);
    for (int i = 1; i < SALE_STOCK; i++)
        assert_true(memcmp(s.ids[i - 1], s.ids[i], sizeof(res_id)) != 0);
    expect(c, "sale", SALE_STOCK, 0, 0, SALE_STOCK);
    assert_int_equal(card(&it_srv, "sale", "done"), SALE_STOCK);
    assert_true(samples > 10);
    pthread_mutex_destroy(&s.mu);
    dlock_client_free(c);
}

/* ---- a buyer process killed holding reservations ------------------------------------ */

static void test_killed_buyer_units_back(void **state)
{
    (void)state;
    long long k = dh_slack();
    dlock_client *c = client();
    set_stock(c, "kill", 6);
    int p[2];
    assert_int_equal(pipe(p), 0);
    int64_t lease = 500 * k;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(p[0]);
        dlock_client *cc = NULL;
        if (dlock_client_new(it_srv.url, NULL, &cc) != DLOCK_OK)
            _exit(2);
        res_id a, b;
        dlock_reserve_opts o = {0};
        o.lease_ms = lease;
        if (dlock_stock_reserve(cc, "kill", 2, &o, a) != DLOCK_OK ||
            dlock_stock_reserve(cc, "kill", 3, &o, b) != DLOCK_OK)
            _exit(3);
        if (write(p[1], "k", 1) != 1)
            _exit(4);
        for (;;)
            pause();
    }
    close(p[1]);
    char ch;
    assert_int_equal(read(p[0], &ch, 1), 1);
    close(p[0]);
    int64_t t_kill = dh_now_ms();
    assert_int_equal(kill(pid, SIGKILL), 0);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    expect(c, "kill", 6, 1, 5, 0);
    /* A buyer that waits for all six gets them once the dead one's lease is over. */
    res_id all;
    int rc = reserve(c, "kill", 6, 30000, 10000 * k, all);
    int64_t took = dh_now_ms() - t_kill;
    show("reserve 6", rc);
    assert_int_equal(rc, DLOCK_OK);
    printf("FIG stock_killed_buyer_units_back_ms %lld ms (lease %lld ms)\n", (long long)took,
           (long long)lease);
    assert_true(took < lease + 300 * k);
    assert_int_equal(dlock_stock_commit(c, "kill", all), DLOCK_OK);
    expect(c, "kill", 6, 0, 0, 6);
    dlock_client_free(c);
}

/* ---- the server's scripts forgotten ------------------------------------------------- */

static void test_script_flush(void **state)
{
    (void)state;
    dlock_client *c = client();
    set_stock(c, "flush", 2);
    redisReply *r = dh_cmd(&it_srv, "SCRIPT FLUSH");
    freeReplyObject(r);
    res_id id;
    reserve_ok(c, "flush", 1, 30000, id);
    r = dh_cmd(&it_srv, "SCRIPT FLUSH");
    freeReplyObject(r);
    assert_int_equal(dlock_stock_commit(c, "flush", id), DLOCK_OK);
    r = dh_cmd(&it_srv, "SCRIPT FLUSH");
    freeReplyObject(r);
    expect(c, "flush", 2, 1, 0, 1);
    dlock_client_free(c);
}

/* ---- N = 3: the stock lives on the first server -------------------------------------- */

static void test_three_servers_node0(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client();
    set_stock(c, "n3", 4);
    res_id id;
    reserve_ok(c, "n3", 3, 30000, id);
    assert_int_equal(it_exists(&it_node[0], "dlock:{n3}:stock"), 1);
    assert_int_equal(it_exists(&it_node[1], "dlock:{n3}:stock"), 0);
    assert_int_equal(it_exists(&it_node[2], "dlock:{n3}:stock"), 0);
    assert_int_equal(it_exists(&it_node[1], "dlock:{n3}:stock:res"), 0);
    /* The others down: it goes on. */
    dh_server_kill(&it_node[1]);
    dh_server_kill(&it_node[2]);
    assert_int_equal(dlock_stock_commit(c, "n3", id), DLOCK_OK);
    expect(c, "n3", 4, 1, 0, 3);
    /* Node 0 down: its own error (as for N = 1), not NOQUORUM. */
    dh_server_kill(&it_node[0]);
    dlock_stock_info in;
    int rc = dlock_stock_status(c, "n3", &in);
    printf("INFO status with node 0 down: %s: %s\n", dlock_errname(rc), dlock_errmsg());
    assert_true(rc == DLOCK_ERR_IO || rc == DLOCK_ERR_TIMEOUT);
    assert_non_null(strstr(dlock_errmsg(), it_node[0].url + strlen("redis://")));
    int64_t t0 = dh_now_ms();
    rc = reserve(c, "n3", 1, 30000, 60000, id);
    printf("INFO waiting reserve with node 0 down: %s after %lld ms: %s\n", dlock_errname(rc),
           (long long)(dh_now_ms() - t0), dlock_errmsg());
    assert_true(rc == DLOCK_ERR_IO || rc == DLOCK_ERR_TIMEOUT);
    assert_true(dh_now_ms() - t0 < 5000 * dh_slack());
    assert_int_equal(dh_server_restart(&it_node[0]), 0);
    assert_int_equal(dh_server_restart(&it_node[1]), 0);
    assert_int_equal(dh_server_restart(&it_node[2]), 0);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest one[] = {
        cmocka_unit_test(test_ten_units_twelve_buyers),
        cmocka_unit_test(test_layout_beside_lock),
        cmocka_unit_test(test_commit_is_idempotent),
        cmocka_unit_test(test_cancel_gives_units_back),
        cmocka_unit_test(test_commit_after_expiry_is_lost),
        cmocka_unit_test(test_status_alone_shows_expired_units),
        cmocka_unit_test(test_extend),
        cmocka_unit_test(test_set_and_add_rules),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_cancel_wakes_waiter),
        cmocka_unit_test(test_waiters_are_quiet),
        cmocka_unit_test(test_expiry_serves_waiter),
        cmocka_unit_test(test_restock_wakes_waiter),
        cmocka_unit_test(test_big_buyer_not_starved),
        cmocka_unit_test(test_deadline_and_cancel_fd),
        cmocka_unit_test(test_sale_with_abandoned_reservations),
        cmocka_unit_test(test_killed_buyer_units_back),
        cmocka_unit_test(test_script_flush),
    };
    const struct CMUnitTest three[] = {
        cmocka_unit_test(test_three_servers_node0),
    };
    int failed = cmocka_run_group_tests_name("stock", one, it_srv_setup, it_srv_teardown);
    failed += cmocka_run_group_tests_name("stock_n3", three, it_nodes_setup3, it_nodes_teardown);
    return failed ? 1 : 0;
}
