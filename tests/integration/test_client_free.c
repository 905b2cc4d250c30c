/*
 * test_client_free.c: dlock_client_free while other threads are in blocking calls on
 * the client, as a program shutting down does.
 *
 *   - threads waiting in dlock_acquire, dlock_sem_acquire and dlock_stock_reserve (each
 *     forever) all return DLOCK_ERR_CLOSED, with dlock_client_free named in the
 *     detail, before the free returns, and within a bound; their queue entries are
 *     gone; the other client's lock is untouched;
 *   - the same for a file:// client waiting on a local lock;
 *   - a free racing the handoff of a lock to a waiting thread, 100 times at random
 *     moments: the thread returns OK (before the free began) or DLOCK_ERR_CLOSED,
 *     and either way no lock is left on the server once the free has returned (a lock
 *     got while the free waited is given back, never handed out).
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

/* One blocking call on another thread, and what it returned. */
typedef struct call {
    dlock_client *c;
    int kind; /* 0: acquire, 1: sem_acquire, 2: stock_reserve */
    const char *name;
    int rc;
    char msg[256];
    pthread_t t;
} call;

static void *blocking_call(void *arg)
{
    call *k = arg;
    dlock_opts o = {0};
    o.ttl_ms = 10000;
    o.wait_ms = -1;
    dlock_lock *l = NULL;
    if (k->kind == 0) {
        k->rc = dlock_acquire(k->c, k->name, &o, &l);
    } else if (k->kind == 1) {
        k->rc = dlock_sem_acquire(k->c, k->name, 1, &o, &l);
    } else {
        dlock_reserve_opts r = {0};
        r.wait_ms = -1;
        char id[DLOCK_TOKEN_LEN + 1];
        k->rc = dlock_stock_reserve(k->c, k->name, 1, &r, id);
    }
    snprintf(k->msg, sizeof k->msg, "%s", dlock_errmsg());
    return NULL;
}

static void start_call(call *k, dlock_client *c, int kind, const char *name)
{
    memset(k, 0, sizeof *k);
    k->c = c;
    k->kind = kind;
    k->name = name;
    k->rc = -1;
    assert_int_equal(pthread_create(&k->t, NULL, blocking_call, k), 0);
}

static long long queued(const char *name)
{
    char key[160];
    it_queue_key(key, sizeof key, name);
    redisReply *r = dh_cmd(&it_srv, "ZCARD %s", key);
    long long n = -1;
    assert_int_equal(dh_reply_integer(r, "ZCARD", &n), 0);
    return n;
}

/* Free c while the calls wait; each must have ended with DLOCK_ERR_CLOSED first. */
static void free_ends_calls(dlock_client *c, call *calls, int n)
{
    int64_t t0 = dh_now_ms();
    dlock_client_free(c);
    int64_t freed = dh_now_ms();
    printf("FIG client_free_with_%d_waiting %lld ms\n", n, (long long)(freed - t0));
    assert_true(freed - t0 < 2000 * dh_slack());
    /* Each call returned before the free did: one that returned later would have used
     * the freed client, which the sanitizer and valgrind runs of this test would report.
     * (A time the thread takes after its call returns may come after the free's, as the
     * scheduler pleases: no proof either way.) */
    for (int i = 0; i < n; i++) {
        assert_int_equal(pthread_join(calls[i].t, NULL), 0);
        printf("INFO call %d: %s: %s\n", i, dlock_errname(calls[i].rc), calls[i].msg);
        assert_int_equal(calls[i].rc, DLOCK_ERR_CLOSED);
        assert_non_null(strstr(calls[i].msg, "dlock_client_free"));
    }
}

static void waiting_calls_end(void **state)
{
    (void)state;
    dlock_client *a = it_client(&it_srv, it_timeout_ms());
    dlock_client *b = it_client(&it_srv, it_timeout_ms());
    dlock_lock *held = it_acquire(a, "free-lock", 30000);
    dlock_opts o = {0};
    o.ttl_ms = 30000;
    dlock_lock *permit = NULL;
    assert_int_equal(dlock_sem_acquire(a, "free-sem", 1, &o, &permit), DLOCK_OK);
    /* The only unit reserved: a reserve waits for it. */
    assert_int_equal(dlock_stock_set(a, "free-sku", 1, NULL), DLOCK_OK);
    dlock_reserve_opts ro = {0};
    ro.lease_ms = 30000;
    char unit[DLOCK_TOKEN_LEN + 1];
    assert_int_equal(dlock_stock_reserve(a, "free-sku", 1, &ro, unit), DLOCK_OK);

    call calls[3];
    start_call(&calls[0], b, 0, "free-lock");
    start_call(&calls[1], b, 1, "free-sem");
    start_call(&calls[2], b, 2, "free-sku");
    int64_t until = dh_now_ms() + 5000 * dh_slack();
    while (queued("free-lock") < 1 && dh_now_ms() < until)
        dh_sleep_ms(5);
    assert_int_equal(queued("free-lock"), 1); /* waiting, in the queue */
    dh_sleep_ms(100);
    free_ends_calls(b, calls, 3);

    /* They left the queues; a's lock and permit are untouched. */
    char key[128];
    it_key(key, sizeof key, "free-lock");
    assert_true(it_pttl(&it_srv, key) > 0);
    assert_int_equal(dlock_check(held), DLOCK_OK);
    assert_int_equal(dlock_check(permit), DLOCK_OK);
    /* Leaving a queue is sent, not awaited, on the freed client's connection: the
     * server may serve this one's questions first, so they are asked until it is done. */
    dlock_stock_info st;
    until = dh_now_ms() + 1000 * dh_slack();
    do
        assert_int_equal(dlock_stock_status(a, "free-sku", &st), DLOCK_OK);
    while ((st.waiters != 0 || queued("free-lock") != 0) && dh_now_ms() < until);
    assert_int_equal(queued("free-lock"), 0);
    assert_int_equal(st.waiters, 0);
    assert_int_equal(st.reserved, 1);
    assert_int_equal(dlock_release(held), DLOCK_OK);
    assert_int_equal(dlock_release(permit), DLOCK_OK);
    dlock_client_free(a);
}

static void local_wait_ends(void **state)
{
    (void)state;
    dlock_client *a = NULL, *b = NULL;
    assert_int_equal(dlock_client_new(it_local_url, NULL, &a), DLOCK_OK);
    assert_int_equal(dlock_client_new(it_local_url, NULL, &b), DLOCK_OK);
    dlock_lock *held = it_acquire(a, "free-local", 30000);
    call k;
    start_call(&k, b, 0, "free-local");
    dh_sleep_ms(200); /* waiting by now (a call that begins late ends the same way) */
    free_ends_calls(b, &k, 1);
    assert_int_equal(dlock_release(held), DLOCK_OK);
    dlock_client_free(a);
}

static void free_races_a_grant(void **state)
{
    (void)state;
    char key[128];
    it_key(key, sizeof key, "free-race");
    dlock_client *a = it_client(&it_srv, it_timeout_ms());
    int ok = 0, closed = 0;
    for (int i = 0; i < 100; i++) {
        dlock_client *c = it_client(&it_srv, it_timeout_ms());
        dlock_lock *held = it_acquire(a, "free-race", 10000);
        call k;
        start_call(&k, c, 0, "free-race");
        /* Waiting in the call (queued) before the free can race it: a call that begins
         * after the free has returned would use a freed client. */
        int64_t until = dh_now_ms() + 5000 * dh_slack();
        while (queued("free-race") < 1 && dh_now_ms() < until)
            dh_sleep_ms(1);
        assert_int_equal(queued("free-race"), 1);
        /* The lock handed to the waiter, and the free, each at a random moment: the
         * free comes before, during or after the handoff. */
        usleep((useconds_t)(rand() % 2000));
        assert_int_equal(dlock_release(held), DLOCK_OK);
        usleep((useconds_t)(rand() % 400));
        dlock_client_free(c);
        assert_int_equal(pthread_join(k.t, NULL), 0);
        assert_true(k.rc == DLOCK_OK || k.rc == DLOCK_ERR_CLOSED);
        ok += k.rc == DLOCK_OK;
        closed += k.rc == DLOCK_ERR_CLOSED;
        assert_int_equal(it_pttl(&it_srv, key), -2); /* no lock left behind */
    }
    printf("FIG client_free_race ok=%d closed=%d of 100\n", ok, closed);
    dlock_client_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(waiting_calls_end),
        cmocka_unit_test(local_wait_ends),
        cmocka_unit_test(free_races_a_grant),
    };
    return cmocka_run_group_tests_name("client_free", tests, it_srv_local_setup,
                                       it_srv_local_teardown);
}
