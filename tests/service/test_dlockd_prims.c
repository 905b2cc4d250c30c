/*
 * test_dlockd_prims.c: dlockd's STOCK command against real redis-servers (SET, ADD,
 * STATUS, RESERVE, COMMIT, CANCEL, EXTEND; a waiting RESERVE woken by a CANCEL, one
 * given up by its connection, many reservers that never oversell), and what SEM and
 * STOCK share: the lock server down, bad arguments, and redis-py as a client nobody
 * here wrote. SEM's permits are tested in test_dlockd_sem.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- STOCK -------------------------------------------------------------------------- */

typedef struct stock {
    long long stock, available, reserved, sold, reservations, waiters;
} stock;

/* The flat field/value array of STOCK SET, ADD and STATUS. */
static stock expect_stock(redisReply *r)
{
    static const char *const fields[] = {"stock", "available",    "reserved",
                                         "sold",  "reservations", "waiters"};
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("STOCK answered %s", r->str);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 12);
    long long v[6];
    for (size_t i = 0; i < 6; i++) {
        assert_string_equal(r->element[2 * i]->str, fields[i]);
        assert_int_equal(r->element[2 * i + 1]->type, REDIS_REPLY_INTEGER);
        v[i] = r->element[2 * i + 1]->integer;
    }
    freeReplyObject(r);
    stock s = {v[0], v[1], v[2], v[3], v[4], v[5]};
    assert_true(s.stock == s.sold + s.reserved + s.available);
    return s;
}

static void expect_counts(stock s, long long st, long long avail, long long res, long long sold)
{
    if (s.stock != st || s.available != avail || s.reserved != res || s.sold != sold)
        fail_msg("stock %lld available %lld reserved %lld sold %lld; wanted %lld %lld %lld %lld",
                 s.stock, s.available, s.reserved, s.sold, st, avail, res, sold);
}

/* A reservation id: a 32-character string. Copied into id. */
static void expect_id(redisReply *r, char id[33])
{
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("RESERVE answered %s", r->str);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(r->len, 32);
    memcpy(id, r->str, 33);
    freeReplyObject(r);
}

static void test_stock_set_add_status(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one);
    stock s = expect_stock(dt_cmd(a, "STOCK STATUS prims-never"));
    expect_counts(s, 0, 0, 0, 0);
    assert_true(s.reservations == 0 && s.waiters == 0);
    expect_counts(expect_stock(dt_cmd(a, "STOCK SET prims-sku 10")), 10, 10, 0, 0);
    expect_counts(expect_stock(dt_cmd(a, "stock add prims-sku 5")), 15, 15, 0, 0);
    expect_counts(expect_stock(dt_cmd(a, "STOCK ADD prims-sku -3")), 12, 12, 0, 0);
    expect_counts(expect_stock(dt_cmd(a, "STOCK STATUS prims-sku")), 12, 12, 0, 0);
    /* Refused changes: the library's reason, nothing changed. */
    char id[33];
    expect_id(dt_cmd(a, "STOCK RESERVE prims-sku 4"), id);
    dt_expect_error(dt_cmd(a, "STOCK SET prims-sku 3"), "ERR invalid argument");
    dt_expect_error(dt_cmd(a, "STOCK ADD prims-sku -9"), "ERR invalid argument");
    s = expect_stock(dt_cmd(a, "STOCK STATUS prims-sku"));
    expect_counts(s, 12, 8, 4, 0);
    assert_int_equal(s.reservations, 1);
    dt_expect_int(dt_cmd(a, "STOCK CANCEL prims-sku %s", id), 1);
    expect_counts(expect_stock(dt_cmd(a, "STOCK SET prims-sku 0")), 0, 0, 0, 0);
    redisFree(a);
}

static void test_stock_reserve_commit_cancel_extend(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one), *b = dt_connect(&dt_one);
    expect_stock(dt_cmd(a, "STOCK SET prims-rc 10"));
    char id1[33], id2[33], id3[33];
    /* RESERVE, COMMIT, CANCEL and EXTEND are calls in steps on the loop: no job on the
     * pool. */
    long jobs0 = dt_info(b, "pool_jobs");
    expect_id(dt_cmd(a, "STOCK RESERVE prims-rc 3"), id1);
    assert_int_equal(dt_info(b, "pool_jobs"), jobs0);
    stock s = expect_stock(dt_cmd(a, "STOCK STATUS prims-rc"));
    expect_counts(s, 10, 7, 3, 0);
    assert_int_equal(s.reservations, 1);
    /* Committed from another connection, as after a payment; a repeat answers 1 too. */
    jobs0 = dt_info(b, "pool_jobs");
    dt_expect_int(dt_cmd(b, "STOCK COMMIT prims-rc %s", id1), 1);
    dt_expect_int(dt_cmd(b, "STOCK COMMIT prims-rc %s", id1), 1);
    dt_expect_int(dt_cmd(b, "STOCK CANCEL prims-rc %s", id1), 0);
    dt_expect_int(dt_cmd(b, "STOCK EXTEND prims-rc %s 10000", id1), 0);
    assert_int_equal(dt_info(b, "pool_jobs"), jobs0);
    expect_counts(expect_stock(dt_cmd(a, "STOCK STATUS prims-rc")), 10, 7, 0, 3);

    expect_id(dt_cmd(a, "STOCK RESERVE prims-rc 2 TTL 60000"), id2);
    dt_expect_int(dt_cmd(b, "STOCK CANCEL prims-rc %s", id2), 1);
    dt_expect_int(dt_cmd(b, "STOCK CANCEL prims-rc %s", id2), 0);
    dt_expect_int(dt_cmd(b, "STOCK COMMIT prims-rc %s", id2), 0);
    expect_counts(expect_stock(dt_cmd(a, "STOCK STATUS prims-rc")), 10, 7, 0, 3);

    /* A lease that runs out gives its units back; EXTEND keeps one alive. */
    long long lease = 300 * dh_slack();
    expect_id(dt_cmd(a, "STOCK RESERVE prims-rc 1 TTL %lld", lease), id2);
    expect_id(dt_cmd(a, "STOCK RESERVE prims-rc 1 TTL %lld", lease), id3);
    dt_expect_int(dt_cmd(b, "STOCK EXTEND prims-rc %s 60000", id3), 1);
    dt_expect_int(dt_cmd(b, "STOCK EXTEND prims-rc ffffffffffffffffffffffffffffffff 60000"), 0);
    dh_sleep_ms(2 * lease);
    dt_expect_int(dt_cmd(b, "STOCK COMMIT prims-rc %s", id2), 0);
    dt_expect_int(dt_cmd(b, "STOCK COMMIT prims-rc %s", id3), 1);
    expect_counts(expect_stock(dt_cmd(a, "STOCK STATUS prims-rc")), 10, 6, 0, 4);

    /* More than is unsold: nil at once, whatever WAIT. */
    int64_t t0 = dh_now_ms();
    dt_expect_nil(dt_cmd(a, "STOCK RESERVE prims-rc 7 WAIT 10000"));
    assert_true(dh_now_ms() - t0 < 1000 * dh_slack());
    /* Available units taken: nil after WAIT. */
    expect_id(dt_cmd(a, "STOCK RESERVE prims-rc 6"), id1);
    t0 = dh_now_ms();
    dt_expect_nil(dt_cmd(b, "STOCK RESERVE prims-rc 1 WAIT 200"));
    int64_t waited = dh_now_ms() - t0;
    assert_true(waited >= 190 && waited < 200 + 1000 * dh_slack());
    dt_expect_int(dt_cmd(b, "STOCK CANCEL prims-rc %s", id1), 1);
    assert_true(dt_info(a, "stock_reserved") >= 5);
    assert_true(dt_info(a, "stock_not_reserved") >= 2);
    assert_true(dt_info(a, "stock_committed") >= 3);
    assert_true(dt_info(a, "stock_canceled") >= 2);
    assert_int_equal(dt_info(a, "waiting_reserves"), 0);
    redisFree(a);
    redisFree(b);
}

/* A waiting RESERVE is served by another connection's CANCEL, without polling. */
static void test_stock_wait_woken_by_cancel(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one), *b = dt_connect(&dt_one);
    expect_stock(dt_cmd(a, "STOCK SET prims-wake 2"));
    char id[33], id2[33];
    expect_id(dt_cmd(a, "STOCK RESERVE prims-wake 2"), id);
    long long waits = dt_info(a, "stock_waits");
    dt_send(b, "STOCK RESERVE prims-wake 1 WAIT %lld", (long long)(20000 * dh_slack()));
    dt_wait_info(a, "waiting_reserves", 1, 5000 * dh_slack());
    assert_int_equal(dt_info(a, "blocked_clients"), 1);
    assert_int_equal(dt_info(a, "waiting_locks"), 0);
    assert_int_equal(expect_stock(dt_cmd(a, "STOCK STATUS prims-wake")).waiters, 1);
    int64_t t0 = dh_now_us();
    dt_expect_int(dt_cmd(a, "STOCK CANCEL prims-wake %s", id), 1);
    expect_id(dt_reply(b), id2);
    int64_t took = dh_now_us() - t0;
    print_message("FIG dlockd_reserve_woken_by_cancel_us %lld us\n", (long long)took);
    assert_true(took < 1000000 * dh_slack());
    assert_int_equal(dt_info(a, "stock_waits"), waits + 1);
    stock s = expect_stock(dt_cmd(a, "STOCK STATUS prims-wake"));
    expect_counts(s, 2, 1, 1, 0);
    assert_int_equal(s.waiters, 0);
    dt_expect_int(dt_cmd(a, "STOCK COMMIT prims-wake %s", id2), 1);
    redisFree(a);
    redisFree(b);
}

/* A connection that closes while its RESERVE waits gives the wait up: the SKU's
 * waiters go back to 0, and the units freed later go to a live reserve. */
static void test_stock_waiter_closes(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one), *b = dt_connect(&dt_one), *c = dt_connect(&dt_one);
    expect_stock(dt_cmd(a, "STOCK SET prims-gone 1"));
    char id[33], id2[33];
    expect_id(dt_cmd(a, "STOCK RESERVE prims-gone 1"), id);
    dt_send(b, "STOCK RESERVE prims-gone 1 WAIT -1");
    dt_wait_info(a, "waiting_reserves", 1, 5000 * dh_slack());
    assert_int_equal(expect_stock(dt_cmd(a, "STOCK STATUS prims-gone")).waiters, 1);
    redisFree(b);
    dt_wait_info(a, "waiting_reserves", 0, 5000 * dh_slack());
    int64_t deadline = dh_now_ms() + 2000 * dh_slack();
    int64_t t0 = dh_now_ms();
    while (expect_stock(dt_cmd(a, "STOCK STATUS prims-gone")).waiters != 0)
        assert_true(dh_now_ms() < deadline);
    print_message("FIG dlockd_reserve_waiter_gone_ms %lld ms\n", (long long)(dh_now_ms() - t0));
    /* The reservation itself is not the connection's: a's close leaves it. */
    redisFree(a);
    dh_sleep_ms(50);
    expect_counts(expect_stock(dt_cmd(c, "STOCK STATUS prims-gone")), 1, 0, 1, 0);
    dt_expect_int(dt_cmd(c, "STOCK CANCEL prims-gone %s", id), 1);
    expect_id(dt_cmd(c, "STOCK RESERVE prims-gone 1"), id2);
    dt_expect_int(dt_cmd(c, "STOCK CANCEL prims-gone %s", id2), 1);
    redisFree(c);
}

/* A reservation granted just as its connection closed (the server's reply delayed):
 * nobody has its id, so dlockd cancels it rather than leave it to its lease. */
static void test_stock_granted_after_close(void **state)
{
    (void)state;
    dt_slow slow;
    dt_slow_start(&slow);
    redisContext *a = dt_connect(&slow.d), *c = dt_connect(&dt_one);
    expect_stock(dt_cmd(a, "STOCK SET prims-late 5"));
    dt_slow_send_and_close(&slow, a, "STOCK RESERVE prims-late 2 TTL 60000");
    int64_t deadline = dh_now_ms() + 5000 * dh_slack();
    while (expect_stock(dt_cmd(c, "STOCK STATUS prims-late")).reserved != 2)
        assert_true(dh_now_ms() < deadline); /* the grant happened ... */
    int64_t t0 = dh_now_ms();
    while (expect_stock(dt_cmd(c, "STOCK STATUS prims-late")).reserved != 0)
        assert_true(dh_now_ms() < deadline); /* ... and was canceled, lease or not */
    print_message("FIG dlockd_reserve_after_close_canceled_ms %lld ms\n",
                  (long long)(dh_now_ms() - t0));
    expect_counts(expect_stock(dt_cmd(c, "STOCK STATUS prims-late")), 5, 5, 0, 0);
    fr_pass(slow.relay);
    redisFree(c);
    dt_slow_stop(&slow);
}

/* Many reservers at once, each committing or canceling, while the stock is restocked
 * bit by bit (so that reserves wait and are woken by restocks and cancels): the stock is
 * sold exactly, never more, and stock == sold + reserved + available at every STATUS. */
enum { BUYERS = 12, SALE = 400, RESTOCK = 10 };

typedef struct buyer {
    pthread_t t;
    redisContext *c;
    long long committed;
    int errors;
    char what[256];
} buyer;

static void *buy(void *arg)
{
    buyer *b = arg;
    unsigned seed = (unsigned)(uintptr_t)b;
    for (int i = 0; i < 10 * SALE; i++) {
        redisReply *r = redisCommand(b->c, "STOCK RESERVE prims-sale 1 WAIT 2000 TTL 10000");
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            snprintf(b->what, sizeof b->what, "RESERVE: %s", r ? r->str : b->c->errstr);
            b->errors++;
            freeReplyObject(r);
            return NULL;
        }
        if (r->type == REDIS_REPLY_NIL) {
            freeReplyObject(r);
            redisReply *s = redisCommand(b->c, "STOCK STATUS prims-sale");
            bool sold_out = s != NULL && s->type == REDIS_REPLY_ARRAY && s->elements == 12 &&
                            s->element[7]->integer == SALE;
            freeReplyObject(s);
            if (sold_out)
                return NULL;
            continue;
        }
        char id[33];
        snprintf(id, sizeof id, "%s", r->str);
        freeReplyObject(r);
        bool commit = rand_r(&seed) % 4 != 0;
        r = redisCommand(b->c, "STOCK %s prims-sale %s", commit ? "COMMIT" : "CANCEL", id);
        if (r == NULL || r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
            snprintf(b->what, sizeof b->what, "%s did not answer 1", commit ? "COMMIT" : "CANCEL");
            b->errors++;
        } else if (commit) {
            b->committed++;
        }
        freeReplyObject(r);
    }
    snprintf(b->what, sizeof b->what, "never saw the sale end");
    b->errors++;
    return NULL;
}

static void test_stock_never_oversold(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one);
    expect_counts(expect_stock(dt_cmd(a, "STOCK SET prims-sale %d", RESTOCK)), RESTOCK, RESTOCK, 0,
                  0);
    long long waits = dt_info(a, "stock_waits");
    static buyer b[BUYERS];
    for (int i = 0; i < BUYERS; i++) {
        memset(&b[i], 0, sizeof b[i]);
        b[i].c = dt_connect(&dt_one);
    }
    int64_t t0 = dh_now_ms();
    for (int i = 0; i < BUYERS; i++)
        assert_int_equal(pthread_create(&b[i].t, NULL, buy, &b[i]), 0);
    /* Meanwhile: restocks, and STATUS checks the invariant (expect_stock does) and the
     * bound. */
    int checks = 0;
    long long stocked = RESTOCK;
    for (;; checks++) {
        stock s = expect_stock(dt_cmd(a, "STOCK STATUS prims-sale"));
        assert_true(s.sold <= s.stock && s.stock <= SALE && s.available >= 0 && s.reserved >= 0);
        if (s.sold == SALE)
            break;
        if (stocked < SALE) {
            s = expect_stock(dt_cmd(a, "STOCK ADD prims-sale %d", RESTOCK));
            stocked += RESTOCK;
            assert_int_equal(s.stock, stocked);
        }
        assert_true(dh_now_ms() - t0 < 60000 * dh_slack());
        dh_sleep_ms(2);
    }
    long long committed = 0;
    for (int i = 0; i < BUYERS; i++) {
        assert_int_equal(pthread_join(b[i].t, NULL), 0);
        if (b[i].errors > 0)
            fail_msg("buyer %d: %s", i, b[i].what);
        committed += b[i].committed;
        redisFree(b[i].c);
    }
    print_message("FIG dlockd_stock_%d_buyers_sold_%d_ms %lld ms (%d STATUS checks, %ld waits)\n",
                  BUYERS, SALE, (long long)(dh_now_ms() - t0), checks,
                  dt_info(a, "stock_waits") - (long)waits);
    assert_int_equal(committed, SALE);
    stock s = expect_stock(dt_cmd(a, "STOCK STATUS prims-sale"));
    expect_counts(s, SALE, 0, 0, SALE);
    assert_true(s.reservations == 0 && s.waiters == 0);
    assert_int_equal(dt_info(a, "waiting_reserves"), 0);
    redisFree(a);
}

/* The lock server down: SEM and STOCK answer -UNAVAILABLE, and work again once it is
 * back. */
static void test_server_down(void **state)
{
    (void)state;
    dt_fresh f1;
    redisContext *a = dt_fresh_start(&f1, 1);
    expect_stock(dt_cmd(a, "STOCK SET prims-down 3"));
    dh_server_kill(&f1.srv[0]);
    static const char *const down[] = {"SEM ACQUIRE prims-down 2", "STOCK STATUS prims-down",
                                       "STOCK RESERVE prims-down 1 WAIT 100",
                                       "STOCK COMMIT prims-down 0123456789abcdef0123456789abcdef"};
    for (size_t i = 0; i < sizeof down / sizeof down[0]; i++)
        dt_expect_error(dt_cmd(a, down[i]), "UNAVAILABLE ");
    dt_expect_status(dt_cmd(a, "PING"), "PONG");
    assert_int_equal(dh_server_restart(&f1.srv[0]), 0);
    dt_lock p;
    dt_expect_lock(dt_cmd(a, "SEM ACQUIRE prims-down 2"), &p);
    expect_stock(dt_cmd(a, "STOCK SET prims-down 3")); /* the restarted server kept nothing */
    char id[33];
    expect_id(dt_cmd(a, "STOCK RESERVE prims-down 1"), id);
    assert_int_equal(dt_info(a, "errors_unavailable"), 4);
    redisFree(a);
    dt_fresh_stop(&f1);
}

/* ---- bad input ---------------------------------------------------------------------- */

static void test_bad_input(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one);
    expect_stock(dt_cmd(a, "STOCK SET prims-bad 5"));
    char id[33];
    expect_id(dt_cmd(a, "STOCK RESERVE prims-bad 1"), id);
    long long before = dt_info(a, "stock_reserved");
    static const struct {
        const char *cmd;
        const char *error;
    } bad[] = {
        {"SEM", "ERR wrong number of arguments for 'sem'"},
        {"SEM BOGUS x", "ERR unknown SEM subcommand 'BOGUS'"},
        {"SEM ACQUIRE prims-bad-sem", "ERR wrong number of arguments for 'SEM ACQUIRE'"},
        {"SEM ACQUIRE prims-bad-sem 0", "ERR K (permits) must be"},
        {"SEM ACQUIRE prims-bad-sem -1", "ERR K (permits) must be"},
        {"SEM ACQUIRE prims-bad-sem 2147483648", "ERR K (permits) must be"},
        {"SEM ACQUIRE prims-bad-sem 99999999999999999999999", "ERR K (permits) must be"},
        {"SEM ACQUIRE prims-bad-sem two", "ERR K (permits) must be"},
        {"SEM ACQUIRE prims-bad-sem 2 SHARED", "ERR unknown SEM ACQUIRE option 'SHARED'"},
        {"SEM ACQUIRE prims-bad-sem 2 TTL", "ERR SEM ACQUIRE option TTL needs a value"},
        {"SEM ACQUIRE prims-bad-sem 2 TTL 5", "ERR TTL must be"},
        {"SEM ACQUIRE prims-bad-sem 2 WAIT -2", "ERR WAIT must be"},
        {"SEM ACQUIRE prims-bad-sem 2 FAIR FAIR", "ERR SEM ACQUIRE option FAIR given twice"},
        {"SEM RELEASE prims-bad-sem", "ERR wrong number of arguments for 'SEM RELEASE'"},
        {"SEM RELEASE prims-bad-sem abc", "ERR a token is"},
        {"SEM RELEASE prims-bad-sem 0123456789abcdef0123456789abcdef x",
         "ERR wrong number of arguments for 'SEM RELEASE'"},
        {"STOCK", "ERR wrong number of arguments for 'stock'"},
        {"STOCK BOGUS prims-bad", "ERR unknown STOCK subcommand 'BOGUS'"},
        {"STOCK SET prims-bad", "ERR wrong number of arguments for 'STOCK SET'"},
        {"STOCK SET prims-bad 1 2", "ERR wrong number of arguments for 'STOCK SET'"},
        {"STOCK SET prims-bad -1", "ERR qty must be an integer from 0"},
        {"STOCK SET prims-bad 1000000000001", "ERR qty must be"},
        {"STOCK SET prims-bad ten", "ERR qty must be"},
        {"STOCK SET prims-bad 1.5", "ERR qty must be"},
        {"STOCK ADD prims-bad 0", "ERR delta must be a nonzero integer"},
        {"STOCK ADD prims-bad -1000000000001", "ERR delta must be"},
        {"STOCK ADD prims-bad +3", "ERR delta must be"},
        {"STOCK RESERVE prims-bad", "ERR wrong number of arguments for 'STOCK RESERVE'"},
        {"STOCK RESERVE prims-bad 0", "ERR qty must be an integer from 1"},
        {"STOCK RESERVE prims-bad -1", "ERR qty must be"},
        {"STOCK RESERVE prims-bad 1 TTL", "ERR STOCK RESERVE option TTL needs a value"},
        {"STOCK RESERVE prims-bad 1 TTL 9", "ERR TTL must be"},
        {"STOCK RESERVE prims-bad 1 TTL 2147483648", "ERR TTL must be"},
        {"STOCK RESERVE prims-bad 1 WAIT -5", "ERR WAIT must be"},
        {"STOCK RESERVE prims-bad 1 WAIT 5 WAIT 5", "ERR STOCK RESERVE option WAIT given twice"},
        {"STOCK RESERVE prims-bad 1 DETACHED", "ERR unknown STOCK RESERVE option 'DETACHED'"},
        {"STOCK RESERVE prims-bad 1 TTL 100 WAIT 5 X", "ERR wrong number of arguments"},
        {"STOCK COMMIT prims-bad", "ERR wrong number of arguments for 'STOCK COMMIT'"},
        {"STOCK COMMIT prims-bad abc", "ERR a reservation id is 32 lowercase"},
        {"STOCK COMMIT prims-bad 0123456789ABCDEF0123456789ABCDEF", "ERR a reservation id"},
        {"STOCK CANCEL prims-bad 0123456789abcdef0123456789abcdeg", "ERR a reservation id"},
        {"STOCK CANCEL prims-bad 0123456789abcdef0123456789abcdef0", "ERR a reservation id"},
        {"STOCK EXTEND prims-bad 0123456789abcdef0123456789abcdef",
         "ERR wrong number of arguments for 'STOCK EXTEND'"},
        {"STOCK EXTEND prims-bad 0123456789abcdef0123456789abcdef 0", "ERR TTL must be"},
        {"STOCK EXTEND prims-bad xyz 1000", "ERR a reservation id"},
        {"STOCK STATUS", "ERR wrong number of arguments for 'STOCK STATUS'"},
        {"STOCK STATUS prims-bad x", "ERR wrong number of arguments for 'STOCK STATUS'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        /* The words as arguments, the way redis-cli sends a line. */
        char line[128];
        const char *words[16];
        snprintf(line, sizeof line, "%s", bad[i].cmd);
        int n = 0;
        for (char *save, *w = strtok_r(line, " ", &save); w != NULL && n < 16;
             w = strtok_r(NULL, " ", &save))
            words[n++] = w;
        redisReply *r = redisCommandArgv(a, n, words, NULL);
        assert_non_null(r);
        if (r->type != REDIS_REPLY_ERROR || strncmp(r->str, bad[i].error, strlen(bad[i].error)))
            fail_msg("%s: answered %s, not %s...", bad[i].cmd,
                     r->type == REDIS_REPLY_ERROR ? r->str : "no error", bad[i].error);
        freeReplyObject(r);
    }
    /* Through hiredis's argv form: empty, huge and NUL-holding names. */
    dt_expect_error(dt_cmd(a, "SEM ACQUIRE %s 2", ""), "ERR semaphore name must be 1 to 4096");
    dt_expect_error(dt_cmd(a, "STOCK STATUS %s", ""), "ERR SKU must be 1 to 4096");
    dt_expect_error(dt_cmd(a, "STOCK SET %b 3", "a\0b", (size_t)3), "ERR SKU must not contain");
    dt_expect_error(dt_cmd(a, "SEM RELEASE %s 0123456789abcdef0123456789abcdef", ""),
                    "ERR semaphore name must be");
    static char huge[5000];
    memset(huge, 'h', sizeof huge - 1);
    dt_expect_error(dt_cmd(a, "STOCK RESERVE %s 1", huge), "ERR SKU must be 1 to 4096");
    dt_expect_error(dt_cmd(a, "SEM ACQUIRE %s 1", huge), "ERR semaphore name must be");
    /* Nothing changed on the servers. */
    stock s = expect_stock(dt_cmd(a, "STOCK STATUS prims-bad"));
    expect_counts(s, 5, 4, 1, 0);
    assert_int_equal(s.reservations, 1);
    assert_int_equal(dt_info(a, "stock_reserved"), before);
    assert_int_equal(dt_lockinfo(a, "prims-bad-sem", "shared"), 0);
    assert_int_equal(dt_info(a, "session_locks"), 0);
    dt_expect_int(dt_cmd(a, "STOCK CANCEL prims-bad %s", id), 1);
    redisFree(a);
}

/* ---- a foreign client --------------------------------------------------------------- */

/* redis-py (Debian's python3-redis, by /usr/bin/python3) sends SEM ACQUIRE and STOCK
 * RESERVE/COMMIT as any Python program would. */
static const char py[] =
    "import sys, redis\n"
    "r = redis.Redis(host='127.0.0.1', port=int(sys.argv[1]), socket_timeout=10)\n"
    "tok, fence, valid = r.execute_command('SEM', 'ACQUIRE', 'py:sem', 2, 'TTL', 5000)\n"
    "assert len(tok) == 32 and fence >= 1 and 0 < valid <= 5000, (tok, fence, valid)\n"
    "tok2 = r.execute_command('SEM', 'ACQUIRE', 'py:sem', 2)[0]\n"
    "assert r.execute_command('SEM', 'ACQUIRE', 'py:sem', 3, 'DETACHED') is not None\n"
    "try:\n"
    "    r.execute_command('SEM', 'ACQUIRE', 'py:sem', 2, 'WAIT', -1)\n"
    "    raise AssertionError('a wait for itself was accepted')\n"
    "except redis.exceptions.ResponseError as e:\n"
    "    assert 'already holds' in str(e), e\n"
    "assert r.execute_command('SEM', 'RELEASE', 'py:sem', tok) == 1\n"
    "assert r.execute_command('UNLOCK', 'py:sem', tok2) == 1\n"
    "f = r.execute_command('STOCK', 'SET', 'py:sku', 3)\n"
    "assert dict(zip(f[0::2], f[1::2]))[b'available'] == 3, f\n"
    "rid = r.execute_command('STOCK', 'RESERVE', 'py:sku', 2, 'TTL', 10000)\n"
    "assert isinstance(rid, bytes) and len(rid) == 32, rid\n"
    "assert r.execute_command('STOCK', 'RESERVE', 'py:sku', 2) is None\n"
    "assert r.execute_command('STOCK', 'COMMIT', 'py:sku', rid) == 1\n"
    "f = dict(zip(*[iter(r.execute_command('STOCK', 'STATUS', 'py:sku'))] * 2))\n"
    "assert f[b'sold'] == 2 and f[b'available'] == 1 and f[b'reserved'] == 0, f\n"
    "print('redis-py: all checks passed')\n";

static void test_redis_py(void **state)
{
    (void)state;
    if (access("/usr/bin/python3", X_OK) != 0)
        fail_msg("/usr/bin/python3 is missing: apt-get install python3 python3-redis");
    char port[16], out[4096], err[4096];
    snprintf(port, sizeof port, "%d", dt_one.port);
    const char *argv[] = {"/usr/bin/python3", "-c", py, port, NULL};
    int st = dh_run(argv, NULL, out, sizeof out, err, sizeof err);
    if (st != 0)
        fail_msg("redis-py exited %d (apt-get install python3-redis if it is missing)\n"
                 "stdout:\n%s\nstderr:\n%s",
                 st, out, err);
    assert_non_null(strstr(out, "redis-py: all checks passed"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stock_set_add_status),
        cmocka_unit_test(test_stock_reserve_commit_cancel_extend),
        cmocka_unit_test(test_stock_wait_woken_by_cancel),
        cmocka_unit_test(test_stock_waiter_closes),
        cmocka_unit_test(test_stock_granted_after_close),
        cmocka_unit_test(test_stock_never_oversold),
        cmocka_unit_test(test_server_down),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_redis_py),
    };
    return cmocka_run_group_tests(tests, dt_one_setup, dt_one_teardown);
}
