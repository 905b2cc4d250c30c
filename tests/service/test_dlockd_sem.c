/*
 * test_dlockd_sem.c: dlockd's SEM command against a real redis-server: permits (never
 * more holders than K among contending connections, session permits released with
 * their connection, DETACHED ones kept, UNLOCK and EXTEND on permits, several of one
 * name on one connection, the refusals of a wait for oneself), and K >= 2 refused on
 * three servers. STOCK, the lock server down, bad input and redis-py are in
 * test_dlockd_prims.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* Workers contend for K permits, each holding one a while: at most K hold at once,
 * and K do. Each thread has its own connection and no cmocka assertion (they are not
 * thread-safe): failures are counted and checked by the main thread. */
enum { SEM_K = 3, SEM_WORKERS = 8, SEM_ROUNDS = 5 };

typedef struct sem_worker {
    pthread_t t;
    redisContext *c;
    int errors;
    char what[256];
} sem_worker;

static atomic_int sem_holders, sem_peak;

static void *sem_work(void *arg)
{
    sem_worker *w = arg;
    for (int i = 0; i < SEM_ROUNDS; i++) {
        redisReply *r = redisCommand(w->c, "SEM ACQUIRE prims-peak %d WAIT 30000", SEM_K);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 3) {
            snprintf(w->what, sizeof w->what, "SEM ACQUIRE: %s",
                     r == NULL                      ? w->c->errstr
                     : r->type == REDIS_REPLY_ERROR ? r->str
                                                    : "nil");
            w->errors++;
            freeReplyObject(r);
            return NULL;
        }
        char token[33];
        snprintf(token, sizeof token, "%s", r->element[0]->str);
        freeReplyObject(r);
        int now = atomic_fetch_add(&sem_holders, 1) + 1;
        int peak = atomic_load(&sem_peak);
        while (now > peak && !atomic_compare_exchange_weak(&sem_peak, &peak, now))
            ;
        dh_sleep_ms(30);
        atomic_fetch_sub(&sem_holders, 1);
        r = redisCommand(w->c, "SEM RELEASE prims-peak %s", token);
        if (r == NULL || r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
            snprintf(w->what, sizeof w->what, "SEM RELEASE did not answer 1");
            w->errors++;
        }
        freeReplyObject(r);
    }
    return NULL;
}

static void test_sem_peak(void **state)
{
    (void)state;
    static sem_worker w[SEM_WORKERS];
    atomic_store(&sem_holders, 0);
    atomic_store(&sem_peak, 0);
    for (int i = 0; i < SEM_WORKERS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].c = dt_connect(&dt_one);
    }
    int64_t t0 = dh_now_ms();
    for (int i = 0; i < SEM_WORKERS; i++)
        assert_int_equal(pthread_create(&w[i].t, NULL, sem_work, &w[i]), 0);
    for (int i = 0; i < SEM_WORKERS; i++) {
        assert_int_equal(pthread_join(w[i].t, NULL), 0);
        if (w[i].errors > 0)
            fail_msg("worker %d: %s", i, w[i].what);
    }
    print_message("FIG dlockd_sem_%d_workers_%d_rounds_ms %lld ms\n", SEM_WORKERS, SEM_ROUNDS,
                  (long long)(dh_now_ms() - t0));
    print_message("FIG dlockd_sem_peak_holders %d (K = %d)\n", atomic_load(&sem_peak), SEM_K);
    assert_int_equal(atomic_load(&sem_peak), SEM_K);
    redisContext *c = w[0].c;
    assert_int_equal(dt_info(c, "permits_acquired"), SEM_WORKERS * SEM_ROUNDS);
    assert_int_equal(dt_info(c, "session_permits"), 0);
    assert_int_equal(dt_lockinfo(c, "prims-peak", "shared"), 0);
    for (int i = 0; i < SEM_WORKERS; i++)
        redisFree(w[i].c);
}

/* A session permit goes with its connection: a waiter elsewhere is served at once. */
static void test_sem_session_close(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one), *b = dt_connect(&dt_one), *c = dt_connect(&dt_one);
    dt_lock pa, pb, pc;
    dt_expect_lock(dt_cmd(a, "SEM ACQUIRE prims-close 2"), &pa);
    dt_expect_lock(dt_cmd(b, "SEM ACQUIRE prims-close 2 TTL 5000 LABEL b"), &pb);
    assert_true(pb.validity_ms <= 5000);
    assert_int_equal(dt_info(c, "session_permits"), 2);
    assert_int_equal(dt_info(c, "session_locks"), 2);
    assert_int_equal(dt_lockinfo(c, "prims-close", "shared"), 2);
    dt_expect_nil(dt_cmd(c, "SEM ACQUIRE prims-close 2"));
    dt_send(c, "SEM ACQUIRE prims-close 2 WAIT %lld", (long long)(10000 * dh_slack()));
    dt_wait_info(b, "waiting_locks", 1, 5000 * dh_slack());
    assert_int_equal(dt_info(b, "blocked_clients"), 1);
    /* a goes holding its permit. */
    dt_expect_close_serves(a, c, &pc, "dlockd_sem_close_to_waiter_ms", 1000 * dh_slack());
    assert_int_equal(dt_info(b, "permits_not_acquired"), 1);
    assert_true(dt_info(b, "waits") >= 1);
    dt_expect_int(dt_cmd(b, "SEM RELEASE prims-close %s", pb.token), 1);
    dt_expect_int(dt_cmd(c, "SEM RELEASE prims-close %s", pc.token), 1);
    assert_int_equal(dt_info(b, "session_permits"), 0);
    assert_int_equal(dt_lockinfo(b, "prims-close", "shared"), 0);
    redisFree(b);
    redisFree(c);
}

/* A DETACHED permit is a lease: kept after its connection closes, released from
 * another connection; UNLOCK and EXTEND work on a permit too. */
static void test_sem_detached_unlock_extend(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one), *b = dt_connect(&dt_one);
    dt_lock p, q;
    dt_expect_lock(dt_cmd(a, "SEM ACQUIRE prims-det 1 DETACHED TTL 30000"), &p);
    assert_int_equal(dt_info(a, "session_permits"), 0);
    redisFree(a);
    dh_sleep_ms(50);
    dt_expect_nil(dt_cmd(b, "SEM ACQUIRE prims-det 1"));
    it_expect_holder(&it_srv, "prims-det", p.token); /* K = 1: an exclusive lock */
    dt_expect_int(dt_cmd(b, "SEM RELEASE prims-det %s", p.token), 1);
    dt_expect_int(dt_cmd(b, "SEM RELEASE prims-det %s", p.token), 0);

    /* K >= 2: UNLOCK, EXTEND on a session permit and on a detached one. */
    dt_expect_lock(dt_cmd(b, "SEM ACQUIRE prims-det2 2 TTL 1000"), &p);
    dt_expect_lock(dt_cmd(b, "SEM ACQUIRE prims-det2 2 DETACHED TTL 1000"), &q);
    assert_int_equal(dt_lockinfo(b, "prims-det2", "shared"), 2);
    dt_expect_int(dt_cmd(b, "EXTEND prims-det2 %s 60000", p.token), 1);
    dt_expect_int(dt_cmd(b, "EXTEND prims-det2 %s 60000", q.token), 1);
    dt_expect_int(dt_cmd(b, "EXTEND prims-det2 ffffffffffffffffffffffffffffffff 60000"), 0);
    dh_sleep_ms(1200); /* past the first TTL: both still held */
    assert_int_equal(dt_lockinfo(b, "prims-det2", "shared"), 2);
    dt_expect_int(dt_cmd(b, "UNLOCK prims-det2 %s", p.token), 1);
    assert_int_equal(dt_info(b, "session_permits"), 0);
    dt_expect_int(dt_cmd(b, "UNLOCK prims-det2 %s", q.token), 1);
    dt_expect_int(dt_cmd(b, "UNLOCK prims-det2 %s", q.token), 0);
    assert_int_equal(dt_lockinfo(b, "prims-det2", "shared"), 0);
    redisFree(b);
}

/* Two permits of one name on one connection, each released by its own token. */
static void test_sem_two_on_one(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one);
    dt_lock p1, p2;
    dt_expect_lock(dt_cmd(a, "SEM ACQUIRE prims-two 3"), &p1);
    dt_expect_lock(dt_cmd(a, "SEM ACQUIRE prims-two 3"), &p2);
    assert_string_not_equal(p1.token, p2.token);
    assert_int_equal(dt_info(a, "session_permits"), 2);
    assert_int_equal(dt_lockinfo(a, "prims-two", "shared"), 2);
    dt_expect_int(dt_cmd(a, "SEM RELEASE prims-two %s", p2.token), 1);
    assert_int_equal(dt_info(a, "session_permits"), 1);
    assert_int_equal(dt_lockinfo(a, "prims-two", "shared"), 1);
    /* The one left is still renewed on its own handle: EXTEND goes to it. */
    dt_expect_int(dt_cmd(a, "EXTEND prims-two %s 20000", p1.token), 1);
    dt_expect_int(dt_cmd(a, "SEM RELEASE prims-two %s", p2.token), 0);
    dt_expect_int(dt_cmd(a, "SEM RELEASE prims-two %s", p1.token), 1);
    assert_int_equal(dt_info(a, "session_permits"), 0);
    assert_int_equal(dt_lockinfo(a, "prims-two", "shared"), 0);
    redisFree(a);
}

/* A wait only the connection itself could end is refused at once, whatever WAIT. */
static void test_sem_refusals(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one), *b = dt_connect(&dt_one);
    dt_lock p1, p2, l, p3;
    int64_t t0 = dh_now_ms();
    dt_expect_lock(dt_cmd(a, "SEM ACQUIRE prims-self 2"), &p1);
    dt_expect_lock(dt_cmd(a, "SEM ACQUIRE prims-self 2"), &p2);
    dt_expect_error(dt_cmd(a, "SEM ACQUIRE prims-self 2 WAIT -1"),
                    "ERR this connection already holds 2 of the 2 holders");
    dt_expect_error(dt_cmd(a, "LOCK prims-self WAIT -1"),
                    "ERR this connection already holds a permit of 'prims-self'");
    dt_expect_error(dt_cmd(a, "LOCK prims-self SHARED WAIT -1"),
                    "ERR this connection already holds a permit");
    /* K is each caller's own: with 3, one more is admitted. */
    dt_expect_lock(dt_cmd(a, "SEM ACQUIRE prims-self 3"), &p3);
    assert_int_equal(dt_lockinfo(a, "prims-self", "shared"), 3);
    /* Another connection is not refused: it waits, and gets nil. */
    dt_expect_nil(dt_cmd(b, "SEM ACQUIRE prims-self 3 WAIT 50"));
    dt_expect_int(dt_cmd(a, "SEM RELEASE prims-self %s", p1.token), 1);
    dt_expect_int(dt_cmd(a, "SEM RELEASE prims-self %s", p2.token), 1);
    dt_expect_int(dt_cmd(a, "SEM RELEASE prims-self %s", p3.token), 1);

    /* The name held exclusively (LOCK, or a permit of K = 1). */
    dt_expect_lock(dt_cmd(a, "LOCK prims-self"), &l);
    dt_expect_error(dt_cmd(a, "SEM ACQUIRE prims-self 5 WAIT -1"),
                    "ERR this connection holds 'prims-self' exclusively");
    dt_expect_int(dt_cmd(a, "UNLOCK prims-self %s", l.token), 1);
    dt_expect_lock(dt_cmd(a, "SEM ACQUIRE prims-self 1"), &p1);
    dt_expect_error(dt_cmd(a, "SEM ACQUIRE prims-self 1 WAIT -1"), "ERR this connection holds");
    dt_expect_error(dt_cmd(a, "LOCK prims-self WAIT -1"), "ERR this connection already holds");
    dt_expect_int(dt_cmd(a, "SEM RELEASE prims-self %s", p1.token), 1);
    /* A SHARED lock counts among the holders K admits. */
    dt_expect_lock(dt_cmd(a, "LOCK prims-self SHARED"), &l);
    dt_expect_error(dt_cmd(a, "SEM ACQUIRE prims-self 1 WAIT -1"),
                    "ERR this connection already holds 1 of the 1 holders");
    dt_expect_lock(dt_cmd(a, "SEM ACQUIRE prims-self 2"), &p1);
    dt_expect_int(dt_cmd(a, "SEM RELEASE prims-self %s", p1.token), 1);
    dt_expect_int(dt_cmd(a, "UNLOCK prims-self %s", l.token), 1);
    int64_t took = dh_now_ms() - t0;
    assert_true(took < 3000 * dh_slack());
    assert_int_equal(dt_lockinfo(a, "prims-self", "shared"), 0);
    assert_int_equal(dt_info(a, "blocked_clients"), 0);
    redisFree(a);
    redisFree(b);
}

/* K >= 2 needs one lock server: with three, the library's refusal as -ERR. */
static void test_sem_redlock(void **state)
{
    (void)state;
    dt_fresh f3;
    redisContext *a = dt_fresh_start(&f3, 3);
    dt_expect_error(dt_cmd(a, "SEM ACQUIRE prims-n3 2"), "ERR invalid argument");
    redisReply *r = dt_cmd(a, "SEM ACQUIRE prims-n3 2");
    assert_non_null(strstr(r->str, "one server"));
    freeReplyObject(r);
    dt_lock p;
    dt_expect_lock(dt_cmd(a, "SEM ACQUIRE prims-n3 1"), &p);
    dt_expect_int(dt_cmd(a, "SEM RELEASE prims-n3 %s", p.token), 1);
    redisFree(a);
    dt_fresh_stop(&f3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sem_peak),
        cmocka_unit_test(test_sem_session_close),
        cmocka_unit_test(test_sem_detached_unlock_extend),
        cmocka_unit_test(test_sem_two_on_one),
        cmocka_unit_test(test_sem_refusals),
        cmocka_unit_test(test_sem_redlock),
    };
    return cmocka_run_group_tests(tests, dt_one_setup, dt_one_teardown);
}
