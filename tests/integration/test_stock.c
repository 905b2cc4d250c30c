/*
 * test_stock.c: the stock with leased reservations (dlock_stock_*) against real
 * redis-server processes: the flash sale of ten, the keys beside a lock of the same
 * name, set and add and what they refuse, every bad input refused, a 50-buyer sale with
 * abandoned reservations, the server's scripts forgotten, and three servers (the stock
 * on the first). A reservation's commit, cancel, extend and expiry, and reserves that
 * wait: test_stock_reserve.c.
 *
 * Asserted exactly: the counts after every step (from the library and from the keys on
 * the server), the invariant sold + reserved + available == stock at sampled instants
 * of a 50-buyer sale with abandoned reservations, nothing ever sold twice, every bad
 * input refused with a message and nothing changed. Asserted with DLOCK_TEST_SLACK: how
 * soon a reserve that cannot be served is refused (sold out, the first server down).
 * Other timings are FIG lines.
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
#include <unistd.h>

/* ---- the flash sale of ten ---------------------------------------------------------- */

/* Ten units; twelve buyers take one each: the 11th and 12th cannot get in. Two sales
 * fail (canceled): the stock goes back up by two, and the 13th and 14th get in. */
static void test_ten_units_twelve_buyers(void **state)
{
    (void)state;
    dlock_client *c = it_stock_client();
    it_stock_set(c, "ten", 10);
    it_stock_expect(c, "ten", 10, 10, 0, 0);
    it_res_id id[14];
    for (int i = 0; i < 10; i++)
        it_stock_reserve_ok(c, "ten", 1, 30000, id[i]);
    for (int i = 10; i < 12; i++) {
        assert_int_equal(it_stock_reserve(c, "ten", 1, 30000, 0, id[i]), DLOCK_ERR_BUSY);
        assert_string_equal(id[i], "");
        printf("INFO buyer %d: %s\n", i + 1, dlock_errmsg());
        assert_non_null(strstr(dlock_errmsg(), "0 units of ten available"));
    }
    it_stock_expect(c, "ten", 10, 0, 10, 0);
    assert_int_equal(it_stock_field(&it_srv, "ten", "reserved"), 10);
    assert_int_equal(it_stock_card(&it_srv, "ten", "res"), 10);

    assert_int_equal(dlock_stock_cancel(c, "ten", id[3]), DLOCK_OK);
    assert_int_equal(dlock_stock_cancel(c, "ten", id[7]), DLOCK_OK);
    it_stock_expect(c, "ten", 10, 2, 8, 0);
    it_stock_reserve_ok(c, "ten", 1, 30000, id[12]);
    it_stock_reserve_ok(c, "ten", 1, 30000, id[13]);
    it_stock_expect(c, "ten", 10, 0, 10, 0);

    for (int i = 0; i < 14; i++)
        if (i != 3 && i != 7 && i != 10 && i != 11)
            assert_int_equal(dlock_stock_commit(c, "ten", id[i]), DLOCK_OK);
    it_stock_expect(c, "ten", 10, 0, 0, 10);
    assert_int_equal(it_stock_field(&it_srv, "ten", "total"), 10);
    assert_int_equal(it_stock_field(&it_srv, "ten", "sold"), 10);
    assert_int_equal(it_stock_field(&it_srv, "ten", "reserved"), 0);
    assert_int_equal(it_stock_card(&it_srv, "ten", "done"), 10);

    /* Sold out: no wait can help, so a waiting reserve is refused at once. */
    int64_t t0 = dh_now_ms();
    it_res_id late;
    assert_int_equal(it_stock_reserve(c, "ten", 1, 30000, 5000, late), DLOCK_ERR_BUSY);
    assert_true(dh_now_ms() - t0 < 1000 * dh_slack());
    assert_non_null(strstr(dlock_errmsg(), "unsold"));
    dlock_client_free(c);
}

/* The stock keys and a lock of the same name live side by side. */
static void test_layout_beside_lock(void **state)
{
    (void)state;
    dlock_client *c = it_stock_client();
    dlock_lock *l = it_acquire(c, "both", 5000);
    it_stock_set(c, "both", 3);
    it_res_id id;
    it_stock_reserve_ok(c, "both", 2, 5000, id);
    it_expect_holder(&it_srv, "both", dlock_token(l));
    assert_int_equal(it_exists(&it_srv, "dlock:{both}:stock"), 1);
    assert_int_equal(it_exists(&it_srv, "dlock:{both}:stock:res"), 1);
    redisReply *r = dh_cmd(&it_srv, "HGET dlock:{both}:stock r:%s", id);
    assert_non_null(r);
    assert_string_equal(r->str, "2");
    freeReplyObject(r);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    it_stock_expect(c, "both", 3, 1, 2, 0);
    assert_int_equal(dlock_stock_commit(c, "both", id), DLOCK_OK);
    it_stock_expect(c, "both", 3, 1, 0, 2);
    dlock_client_free(c);
}

/* ---- set and add -------------------------------------------------------------------- */

static void test_set_and_add_rules(void **state)
{
    (void)state;
    dlock_client *c = it_stock_client();
    dlock_stock_info in;
    assert_int_equal(dlock_stock_set(c, "rules", 10, &in), DLOCK_OK);
    assert_int_equal(in.stock, 10);
    assert_int_equal(in.available, 10);
    it_res_id a, b;
    it_stock_reserve_ok(c, "rules", 4, 30000, a);
    it_stock_reserve_ok(c, "rules", 2, 30000, b);
    assert_int_equal(dlock_stock_commit(c, "rules", a), DLOCK_OK);
    it_stock_expect(c, "rules", 10, 4, 2, 4);

    /* Below sold + reserved: refused, with the counts, nothing changed. */
    assert_int_equal(dlock_stock_set(c, "rules", 5, NULL), DLOCK_ERR_INVALID);
    printf("INFO set 5: %s\n", dlock_errmsg());
    assert_non_null(strstr(dlock_errmsg(), "4 units sold and 2 reserved"));
    it_stock_expect(c, "rules", 10, 4, 2, 4);
    assert_int_equal(dlock_stock_add(c, "rules", -5, NULL), DLOCK_ERR_INVALID);
    printf("INFO add -5: %s\n", dlock_errmsg());
    assert_non_null(strstr(dlock_errmsg(), "only 4 units available"));
    it_stock_expect(c, "rules", 10, 4, 2, 4);
    /* Down to exactly sold + reserved, and up again. */
    assert_int_equal(dlock_stock_set(c, "rules", 6, &in), DLOCK_OK);
    assert_int_equal(in.available, 0);
    assert_int_equal(dlock_stock_add(c, "rules", 3, &in), DLOCK_OK);
    assert_int_equal(in.stock, 9);
    assert_int_equal(in.available, 3);
    assert_int_equal(dlock_stock_add(c, "rules", -3, NULL), DLOCK_OK);
    it_stock_expect(c, "rules", 6, 0, 2, 4);
    /* Past the maximum. */
    assert_int_equal(dlock_stock_add(c, "rules", DLOCK_STOCK_QTY_MAX, NULL), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errmsg(), "cannot grow past"));
    assert_int_equal(dlock_stock_set(c, "rules", DLOCK_STOCK_QTY_MAX, NULL), DLOCK_OK);
    it_stock_expect(c, "rules", DLOCK_STOCK_QTY_MAX, DLOCK_STOCK_QTY_MAX - 6, 2, 4);
    /* A huge reservation is counted exactly. */
    it_res_id big;
    it_stock_reserve_ok(c, "rules", DLOCK_STOCK_QTY_MAX - 6, 30000, big);
    it_stock_expect(c, "rules", DLOCK_STOCK_QTY_MAX, 0, DLOCK_STOCK_QTY_MAX - 4, 4);
    assert_int_equal(dlock_stock_commit(c, "rules", big), DLOCK_OK);
    assert_int_equal(dlock_stock_cancel(c, "rules", b), DLOCK_OK);
    it_stock_expect(c, "rules", DLOCK_STOCK_QTY_MAX, 2, 0, DLOCK_STOCK_QTY_MAX - 2);
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
    dlock_client *c = it_stock_client();
    it_stock_set(c, "bad", 5);
    it_res_id held, id;
    it_stock_reserve_ok(c, "bad", 1, 30000, held);
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
    it_stock_expect(c, "bad", 5, 4, 1, 0);
    assert_int_equal(dlock_stock_commit(c, "bad", held), DLOCK_OK);
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
    it_res_id ids[SALE_STOCK + 1];
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
    dlock_client *c = it_stock_client();
    dlock_reserve_opts o = {0};
    o.lease_ms = s->lease_ms;
    o.wait_ms = 20000 * dh_slack();
    for (int n = 0; !s->failed; n++) {
        it_res_id id;
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
    return memcmp(a, b, sizeof(it_res_id));
}

static void test_sale_with_abandoned_reservations(void **state)
{
    (void)state;
    long long k = dh_slack();
    dlock_client *c = it_stock_client();
    it_stock_set(c, "sale", SALE_STOCK);
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
        it_stock_show("status", rc);
        assert_int_equal(rc, DLOCK_OK);
        assert_int_equal(in.stock, SALE_STOCK);
        assert_int_equal(in.sold + in.reserved + in.available, in.stock);
        assert_true(in.sold <= in.stock);
        assert_true(in.available >= 0 && in.reserved >= 0);
        /* The server's own fields, read outside any script, hold it too. */
        long long sold = it_stock_field(&it_srv, "sale", "sold");
        long long reserved = it_stock_field(&it_srv, "sale", "reserved");
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
    qsort(s.ids, SALE_STOCK, sizeof(it_res_id), cmp_ids);
    for (int i = 1; i < SALE_STOCK; i++)
        assert_true(memcmp(s.ids[i - 1], s.ids[i], sizeof(it_res_id)) != 0);
    it_stock_expect(c, "sale", SALE_STOCK, 0, 0, SALE_STOCK);
    assert_int_equal(it_stock_card(&it_srv, "sale", "done"), SALE_STOCK);
    assert_true(samples > 10);
    pthread_mutex_destroy(&s.mu);
    dlock_client_free(c);
}

/* ---- the server's scripts forgotten ------------------------------------------------- */

static void test_script_flush(void **state)
{
    (void)state;
    dlock_client *c = it_stock_client();
    it_stock_set(c, "flush", 2);
    redisReply *r = dh_cmd(&it_srv, "SCRIPT FLUSH");
    freeReplyObject(r);
    it_res_id id;
    it_stock_reserve_ok(c, "flush", 1, 30000, id);
    r = dh_cmd(&it_srv, "SCRIPT FLUSH");
    freeReplyObject(r);
    assert_int_equal(dlock_stock_commit(c, "flush", id), DLOCK_OK);
    r = dh_cmd(&it_srv, "SCRIPT FLUSH");
    freeReplyObject(r);
    it_stock_expect(c, "flush", 2, 1, 0, 1);
    dlock_client_free(c);
}

/* ---- N = 3: the stock lives on the first server -------------------------------------- */

static void test_three_servers_node0(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client();
    it_stock_set(c, "n3", 4);
    it_res_id id;
    it_stock_reserve_ok(c, "n3", 3, 30000, id);
    assert_int_equal(it_exists(&it_node[0], "dlock:{n3}:stock"), 1);
    assert_int_equal(it_exists(&it_node[1], "dlock:{n3}:stock"), 0);
    assert_int_equal(it_exists(&it_node[2], "dlock:{n3}:stock"), 0);
    assert_int_equal(it_exists(&it_node[1], "dlock:{n3}:stock:res"), 0);
    /* The others down: it goes on. */
    dh_server_kill(&it_node[1]);
    dh_server_kill(&it_node[2]);
    assert_int_equal(dlock_stock_commit(c, "n3", id), DLOCK_OK);
    it_stock_expect(c, "n3", 4, 1, 0, 3);
    /* Node 0 down: its own error (as for N = 1), not NOQUORUM. */
    dh_server_kill(&it_node[0]);
    dlock_stock_info in;
    int rc = dlock_stock_status(c, "n3", &in);
    printf("INFO status with node 0 down: %s: %s\n", dlock_errname(rc), dlock_errmsg());
    assert_true(rc == DLOCK_ERR_IO || rc == DLOCK_ERR_TIMEOUT);
    assert_non_null(strstr(dlock_errmsg(), it_node[0].url + strlen("redis://")));
    int64_t t0 = dh_now_ms();
    rc = it_stock_reserve(c, "n3", 1, 30000, 60000, id);
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
        cmocka_unit_test(test_set_and_add_rules),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_sale_with_abandoned_reservations),
        cmocka_unit_test(test_script_flush),
    };
    const struct CMUnitTest three[] = {
        cmocka_unit_test(test_three_servers_node0),
    };
    int failed = cmocka_run_group_tests_name("stock", one, it_srv_setup, it_srv_teardown);
    failed += cmocka_run_group_tests_name("stock_n3", three, it_nodes_setup3, it_nodes_teardown);
    return failed ? 1 : 0;
}
