/*
 * test_stock_reserve.c: a stock reservation's life (dlock_stock_*) against a real
 * redis-server: a commit repeated, a cancel, a commit after the lease ran out, status
 * alone returning run-out units, extend; and reserves that wait: woken by a cancel (one
 * PUBLISH, no polling), by an expiry and by a restock, quiet while they wait, served in
 * arrival order (a 5-unit waiter before 1-unit ones), ended by their deadline or
 * cancel_fd, and a SIGKILLed buyer's units back after its lease. The stock as a whole
 * (the flash sale, set and add, bad input, a 50-buyer sale): test_stock.c.
 *
 * Asserted exactly: the counts after every step (from the library and from the keys on
 * the server), arrival order among waiters. Asserted with DLOCK_TEST_SLACK: how soon a
 * waiter gets units after a cancel or an expiry (well before its deadline and the
 * refresh period). Other timings are FIG lines.
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

/* ---- commit, cancel, extend --------------------------------------------------------- */

static void test_commit_is_idempotent(void **state)
{
    (void)state;
    dlock_client *c = it_stock_client();
    it_stock_set(c, "idem", 5);
    it_res_id id;
    it_stock_reserve_ok(c, "idem", 3, 30000, id);
    assert_int_equal(dlock_stock_commit(c, "idem", id), DLOCK_OK);
    it_stock_expect(c, "idem", 5, 2, 0, 3);
    /* Repeated (say after a client-side timeout): succeeds, counts nothing more. */
    assert_int_equal(dlock_stock_commit(c, "idem", id), DLOCK_OK);
    assert_int_equal(dlock_stock_commit(c, "idem", id), DLOCK_OK);
    it_stock_expect(c, "idem", 5, 2, 0, 3);
    /* A committed reservation cannot be canceled or extended. */
    assert_int_equal(dlock_stock_cancel(c, "idem", id), DLOCK_ERR_LOST);
    assert_non_null(strstr(dlock_errmsg(), "committed"));
    assert_int_equal(dlock_stock_extend(c, "idem", id, 5000), DLOCK_ERR_LOST);
    it_stock_expect(c, "idem", 5, 2, 0, 3);
    /* The committed id is kept for the retention period. */
    redisReply *r = dh_cmd(&it_srv, "PTTL dlock:{idem}:stock:done");
    assert_non_null(r);
    assert_true(r->integer > DLOCK_STOCK_COMMIT_RETENTION_MS - 60000 &&
                r->integer <= DLOCK_STOCK_COMMIT_RETENTION_MS + 1000);
    freeReplyObject(r);
    /* Unknown ids: LOST, nothing changed. */
    it_res_id other;
    memcpy(other, id, sizeof other);
    other[0] = other[0] == 'a' ? 'b' : 'a';
    assert_int_equal(dlock_stock_commit(c, "idem", other), DLOCK_ERR_LOST);
    assert_int_equal(dlock_stock_cancel(c, "idem", other), DLOCK_ERR_LOST);
    assert_int_equal(dlock_stock_extend(c, "idem", other, 5000), DLOCK_ERR_LOST);
    assert_int_equal(dlock_stock_commit(c, "idem-other-sku", id), DLOCK_ERR_LOST);
    it_stock_expect(c, "idem", 5, 2, 0, 3);
    dlock_client_free(c);
}

static void test_cancel_gives_units_back(void **state)
{
    (void)state;
    dlock_client *c = it_stock_client();
    it_stock_set(c, "cxl", 4);
    it_res_id a, b;
    it_stock_reserve_ok(c, "cxl", 3, 30000, a);
    it_stock_reserve_ok(c, "cxl", 1, 30000, b);
    it_stock_expect(c, "cxl", 4, 0, 4, 0);
    assert_int_equal(dlock_stock_cancel(c, "cxl", a), DLOCK_OK);
    it_stock_expect(c, "cxl", 4, 3, 1, 0);
    /* Once only, and a canceled reservation cannot be committed. */
    assert_int_equal(dlock_stock_cancel(c, "cxl", a), DLOCK_ERR_LOST);
    assert_int_equal(dlock_stock_commit(c, "cxl", a), DLOCK_ERR_LOST);
    assert_int_equal(dlock_stock_extend(c, "cxl", a, 1000), DLOCK_ERR_LOST);
    it_stock_expect(c, "cxl", 4, 3, 1, 0);
    assert_int_equal(dlock_stock_commit(c, "cxl", b), DLOCK_OK);
    it_stock_expect(c, "cxl", 4, 3, 0, 1);
    dlock_client_free(c);
}

static void test_commit_after_expiry_is_lost(void **state)
{
    (void)state;
    dlock_client *c = it_stock_client();
    long long k = dh_slack();
    it_stock_set(c, "exp", 2);
    it_res_id id;
    it_stock_reserve_ok(c, "exp", 2, 100 * k, id);
    it_stock_expect(c, "exp", 2, 0, 2, 0);
    dh_sleep_ms(200 * k);
    assert_int_equal(dlock_stock_commit(c, "exp", id), DLOCK_ERR_LOST);
    printf("INFO commit after expiry: %s\n", dlock_errmsg());
    assert_non_null(strstr(dlock_errmsg(), "lease ran out"));
    it_stock_expect(c, "exp", 2, 2, 0, 0);
    /* Its units are sold to the next buyer. */
    it_res_id next;
    it_stock_reserve_ok(c, "exp", 2, 30000, next);
    assert_int_equal(dlock_stock_commit(c, "exp", next), DLOCK_OK);
    it_stock_expect(c, "exp", 2, 0, 0, 2);
    dlock_client_free(c);
}

/* A lease that runs out is seen by status alone: no other call returns the units. */
static void test_status_alone_shows_expired_units(void **state)
{
    (void)state;
    dlock_client *c = it_stock_client();
    long long k = dh_slack();
    it_stock_set(c, "alone", 7);
    it_res_id a, b;
    it_stock_reserve_ok(c, "alone", 3, 100 * k, a);
    it_stock_reserve_ok(c, "alone", 2, 60000, b);
    dh_sleep_ms(200 * k);
    /* Nothing ran since: the server still counts them ... */
    assert_int_equal(it_stock_field(&it_srv, "alone", "reserved"), 5);
    /* ... and status counts them back, and says so from then on. */
    it_stock_expect(c, "alone", 7, 5, 2, 0);
    assert_int_equal(it_stock_field(&it_srv, "alone", "reserved"), 2);
    assert_int_equal(it_stock_card(&it_srv, "alone", "res"), 1);
    dlock_stock_info in;
    assert_int_equal(dlock_stock_status(c, "alone", &in), DLOCK_OK);
    assert_int_equal(in.reservations, 1);
    assert_int_equal(in.waiters, 0);
    assert_int_equal(dlock_stock_cancel(c, "alone", b), DLOCK_OK);
    it_stock_expect(c, "alone", 7, 7, 0, 0);
    /* A SKU never set reads as zeros, and reading it writes nothing. */
    it_stock_expect(c, "never-set", 0, 0, 0, 0);
    assert_int_equal(it_exists(&it_srv, "dlock:{never-set}:stock"), 0);
    dlock_client_free(c);
}

static void test_extend(void **state)
{
    (void)state;
    dlock_client *c = it_stock_client();
    long long k = dh_slack();
    it_stock_set(c, "ext", 1);
    it_res_id id;
    it_stock_reserve_ok(c, "ext", 1, 300 * k, id);
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
    it_stock_expect(c, "ext", 1, 0, 1, 0);
    /* It sets, it does not add: 100 ms brings it down. */
    assert_int_equal(dlock_stock_extend(c, "ext", id, 100 * k), DLOCK_OK);
    dh_sleep_ms(200 * k);
    it_stock_expect(c, "ext", 1, 1, 0, 0);
    assert_int_equal(dlock_stock_extend(c, "ext", id, 1000), DLOCK_ERR_LOST);
    assert_int_equal(dlock_stock_commit(c, "ext", id), DLOCK_ERR_LOST);
    it_stock_expect(c, "ext", 1, 1, 0, 0);
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
    it_res_id id;
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
    w->c = it_stock_client();
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
    while (it_stock_card(&it_srv, sku, "wait") < n && dh_now_ms() < until)
        dh_sleep_ms(5);
    assert_int_equal(it_stock_card(&it_srv, sku, "wait"), n);
}

/* A cancel wakes the waiter at once: it is not polling. The waiter has waited 1.5 s
 * (the leases have 30 s left, so it only refreshes once a second); the cancel is its
 * one PUBLISH, and the waiter has its unit within a round trip of it, not at its next
 * refresh half a second later. */
static void test_cancel_wakes_waiter(void **state)
{
    (void)state;
    dlock_client *c = it_stock_client();
    it_stock_set(c, "wake", 2);
    it_res_id a, b;
    it_stock_reserve_ok(c, "wake", 1, 30000, a);
    it_stock_reserve_ok(c, "wake", 1, 30000, b);
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
    assert_int_equal(it_stock_card(&it_srv, "wake", "wait"), 0);
    it_stock_expect(c, "wake", 2, 0, 2, 0);
    assert_int_equal(dlock_stock_commit(c, "wake", w.id), DLOCK_OK);
    assert_int_equal(dlock_stock_commit(c, "wake", b), DLOCK_OK);
    it_stock_expect(c, "wake", 2, 0, 0, 2);
    dlock_client_free(c);
}

/* A waiter quiet while it waits: in 2 s, each of 4 waiters refreshes twice, one script
 * call each, and nothing else runs. */
static void test_waiters_are_quiet(void **state)
{
    (void)state;
    dlock_client *c = it_stock_client();
    it_stock_set(c, "quiet", 1);
    it_res_id a;
    it_stock_reserve_ok(c, "quiet", 1, 30000, a);
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
    assert_int_equal(it_stock_card(&it_srv, "quiet", "wait"), 0);
    assert_int_equal(dlock_stock_cancel(c, "quiet", a), DLOCK_OK);
    dlock_client_free(c);
}

/* An expiry publishes nothing: the waiter retries when the earliest lease ends. */
static void test_expiry_serves_waiter(void **state)
{
    (void)state;
    dlock_client *c = it_stock_client();
    long long k = dh_slack();
    it_stock_set(c, "lapse", 3);
    it_res_id a, b;
    it_stock_reserve_ok(c, "lapse", 2, 30000, a);
    int64_t t0 = dh_now_ms();
    it_stock_reserve_ok(c, "lapse", 1, 400 * k, b);
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
    it_stock_expect(c, "lapse", 3, 0, 0, 3);
    dlock_client_free(c);
}

/* A restock wakes waiters too. */
static void test_restock_wakes_waiter(void **state)
{
    (void)state;
    dlock_client *c = it_stock_client();
    it_stock_set(c, "restock", 0);
    waiter w;
    waiter_start(&w, "restock", 2, 0);
    waiter_join(&w);
    assert_int_equal(w.rc, DLOCK_ERR_BUSY); /* nothing unsold: at once */
    it_stock_set(c, "restock", 1);
    it_res_id a;
    it_stock_reserve_ok(c, "restock", 1, 30000, a);
    waiter_start(&w, "restock", 1, 10000 * dh_slack());
    wait_waiters("restock", 1);
    int64_t t0 = dh_now_ms();
    assert_int_equal(dlock_stock_add(c, "restock", 1, NULL), DLOCK_OK);
    waiter_join(&w);
    assert_int_equal(w.rc, DLOCK_OK);
    printf("FIG stock_restock_to_waiter_ms %lld ms\n", (long long)(w.got_ms - t0));
    assert_true(w.got_ms - t0 < 300 * dh_slack());
    it_stock_expect(c, "restock", 2, 0, 2, 0);
    dlock_client_free(c);
}

/* Arrival order: a 5-unit waiter at the head is served before a 1-unit one behind it,
 * and a reserve that does not wait cannot take units the head waits for. */
static void test_big_buyer_not_starved(void **state)
{
    (void)state;
    dlock_client *c = it_stock_client();
    long long k = dh_slack();
    it_stock_set(c, "fifo", 5);
    it_res_id one[5];
    for (int i = 0; i < 5; i++)
        it_stock_reserve_ok(c, "fifo", 1, 30000, one[i]);
    waiter big, small;
    waiter_start(&big, "fifo", 5, 10000 * k);
    wait_waiters("fifo", 1);
    waiter_start(&small, "fifo", 1, 1500 * k);
    wait_waiters("fifo", 2);
    /* One unit free: it fits the small buyer, but the big one is first. */
    assert_int_equal(dlock_stock_cancel(c, "fifo", one[0]), DLOCK_OK);
    it_res_id id;
    for (int i = 0; i < 3; i++) {
        int rc = it_stock_reserve(c, "fifo", 1, 30000, 0, id);
        assert_int_equal(rc, DLOCK_ERR_BUSY);
        printf("INFO a buyer who does not wait: %s\n", dlock_errmsg());
        assert_non_null(strstr(dlock_errmsg(),
                               "at least 1 earlier waiter(s) come first with at least 5 units"));
        dh_sleep_ms(50);
    }
    it_stock_expect(c, "fifo", 5, 1, 4, 0);
    for (int i = 1; i < 5; i++)
        assert_int_equal(dlock_stock_cancel(c, "fifo", one[i]), DLOCK_OK);
    waiter_join(&big);
    assert_int_equal(big.rc, DLOCK_OK);
    waiter_join(&small);
    assert_int_equal(small.rc, DLOCK_ERR_BUSY);
    assert_true(small.got_ms >= big.got_ms);
    it_stock_expect(c, "fifo", 5, 0, 5, 0);
    assert_int_equal(it_stock_card(&it_srv, "fifo", "wait"), 0);
    assert_int_equal(dlock_stock_commit(c, "fifo", big.id), DLOCK_OK);
    dlock_client_free(c);
}

/* A wait ends at its deadline, not before, or through cancel_fd; it leaves no waiter. */
static void test_deadline_and_cancel_fd(void **state)
{
    (void)state;
    dlock_client *c = it_stock_client();
    it_stock_set(c, "dl", 1);
    it_res_id a, id;
    it_stock_reserve_ok(c, "dl", 1, 30000, a);
    int64_t t0 = dh_now_ms();
    assert_int_equal(it_stock_reserve(c, "dl", 1, 30000, 300, id), DLOCK_ERR_BUSY);
    int64_t took = dh_now_ms() - t0;
    printf("FIG stock_wait_300_busy_ms %lld ms\n", (long long)took);
    assert_true(took >= 300 && took < 300 + 500 * dh_slack());
    assert_int_equal(it_stock_card(&it_srv, "dl", "wait"), 0);

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
    while (it_stock_card(&it_srv, "dl", "wait") != 0 && dh_now_ms() < until)
        dh_sleep_ms(5);
    assert_int_equal(it_stock_card(&it_srv, "dl", "wait"), 0);
    it_stock_expect(c, "dl", 1, 0, 1, 0);
    dlock_client_free(c);
}

/* ---- a buyer process killed holding reservations ------------------------------------ */

static void test_killed_buyer_units_back(void **state)
{
    (void)state;
    long long k = dh_slack();
    dlock_client *c = it_stock_client();
    it_stock_set(c, "kill", 6);
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
        it_res_id a, b;
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
    it_stock_expect(c, "kill", 6, 1, 5, 0);
    /* A buyer that waits for all six gets them once the dead one's lease is over. */
    it_res_id all;
    int rc = it_stock_reserve(c, "kill", 6, 30000, 10000 * k, all);
    int64_t took = dh_now_ms() - t_kill;
    it_stock_show("reserve 6", rc);
    assert_int_equal(rc, DLOCK_OK);
    printf("FIG stock_killed_buyer_units_back_ms %lld ms (lease %lld ms)\n", (long long)took,
           (long long)lease);
    assert_true(took < lease + 300 * k);
    assert_int_equal(dlock_stock_commit(c, "kill", all), DLOCK_OK);
    it_stock_expect(c, "kill", 6, 0, 0, 6);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_is_idempotent),
        cmocka_unit_test(test_cancel_gives_units_back),
        cmocka_unit_test(test_commit_after_expiry_is_lost),
        cmocka_unit_test(test_status_alone_shows_expired_units),
        cmocka_unit_test(test_extend),
        cmocka_unit_test(test_cancel_wakes_waiter),
        cmocka_unit_test(test_waiters_are_quiet),
        cmocka_unit_test(test_expiry_serves_waiter),
        cmocka_unit_test(test_restock_wakes_waiter),
        cmocka_unit_test(test_big_buyer_not_starved),
        cmocka_unit_test(test_deadline_and_cancel_fd),
        cmocka_unit_test(test_killed_buyer_units_back),
    };
    return cmocka_run_group_tests_name("stock_reserve", tests, it_srv_setup, it_srv_teardown);
}
