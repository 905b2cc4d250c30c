/*
 * test_linger.c: dlock_opts.linger_ms, a release held back for the client's next
 * acquire of the name (src/linger.c, docs/waiting.md "Lingering"), against a real
 * redis-server.
 *
 * Asserted exactly: a release that lingers leaves the key ours and sends nothing; the
 * retake that follows is one script call that keeps the token and the fence, and the
 * next one, while the reply vouches for the queue, none; a release nobody takes back
 * goes out by itself; dlock_client_free releases at once; a lock that ran out while it
 * lingered is not taken back; a waiting thread of the same client makes it a plain
 * release, and one that comes while it lingers is served before any retake; another client's waiter
 * is passed over and then served, its section never overlapping the retaker's, its fence larger;
 * a waiter that has waited linger_ms in all is passed over no more; the bound is shared out
 * among the waiters, each head passed over for its share from when it became the head; and
 * the options refused where a lock cannot linger. The waits are bounded by their bound times
 * DLOCK_TEST_SLACK.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dlock_opts lingering(int64_t linger_ms)
{
    dlock_opts o = {0};
    o.ttl_ms = 5000;
    o.linger_ms = linger_ms;
    return o;
}

/* Take name on c with o (asserting DLOCK_OK), its token copied into token. */
static dlock_lock *take(dlock_client *c, const char *name, const dlock_opts *o,
                        char token[DLOCK_TOKEN_LEN + 1])
{
    dlock_lock *l = it_acquire_opts(c, name, o);
    memcpy(token, dlock_token(l), DLOCK_TOKEN_LEN + 1);
    return l;
}

static void expect_free(const char *name)
{
    char key[256];
    it_key(key, sizeof key, name);
    assert_int_equal(it_exists(&it_node[0], key), 0);
}

/* A retake keeps the token and the fence; the first costs one script call, the next
 * none; the client's end releases what lingers, at once. */
static void test_retake_keeps_the_lock(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client();
    it_warm_up(c, "retake-warm", 5000); /* the scripts cached: one call each from now */
    dlock_opts o = lingering(DLOCK_LINGER_MAX_MS);
    char token[DLOCK_TOKEN_LEN + 1];
    dlock_lock *l = take(c, "retake", &o, token);
    uint64_t fence = dlock_fence(l);

    long long before = it_script_calls(&it_node[0]);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(it_script_calls(&it_node[0]), before);
    it_expect_holder(&it_node[0], "retake", token);

    /* The first retake asks the server: one script call. */
    l = it_acquire_opts(c, "retake", &o);
    assert_string_equal(dlock_token(l), token);
    assert_int_equal(dlock_fence(l), fence);
    assert_int_equal(it_script_calls(&it_node[0]), before + 1);
    assert_true(dlock_remaining_ms(l) > 0);

    /* The next, within a quarter of linger_ms and with more than half the lease left,
     * asks nothing. */
    assert_int_equal(dlock_release(l), DLOCK_OK);
    l = it_acquire_opts(c, "retake", &o);
    assert_string_equal(dlock_token(l), token);
    assert_int_equal(it_script_calls(&it_node[0]), before + 1);

    assert_int_equal(dlock_release(l), DLOCK_OK);
    it_expect_holder(&it_node[0], "retake", token);
    dlock_client_free(c);
    expect_free("retake");
}

/* A release nobody takes back goes out by itself, linger_ms later. */
static void test_unclaimed_release_goes_out(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client();
    dlock_opts o = lingering(200);
    char token[DLOCK_TOKEN_LEN + 1];
    dlock_lock *l = take(c, "unclaimed", &o, token);
    int64_t t0 = dh_now_ms();
    assert_int_equal(dlock_release(l), DLOCK_OK);
    char key[256];
    it_key(key, sizeof key, "unclaimed");
    if (dh_now_ms() - t0 < 100)
        it_expect_holder(&it_node[0], "unclaimed", token);
    int64_t limit = t0 + 2000 * dh_slack();
    while (it_exists(&it_node[0], key) != 0 && dh_now_ms() < limit)
        dh_sleep_ms(5);
    int64_t took = dh_now_ms() - t0;
    printf("FIG linger_unclaimed_release_ms %lld (linger 200)\n", (long long)took);
    assert_int_equal(it_exists(&it_node[0], key), 0);
    assert_true(took >= 200);
    dlock_client_free(c);
}

/* A lease that ran out while the lock lingered is not taken back: another client took
 * the name, and the retake finds it theirs. */
static void test_lost_while_lingering(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client(), *other = it_nodes_client();
    dlock_opts o = lingering(DLOCK_LINGER_MAX_MS);
    o.ttl_ms = 100;
    dlock_lock *l = it_acquire_opts(c, "ranout", &o);
    /* A retake that asks the server first: the next may then ask nothing, for a quarter
     * of linger_ms (250 ms), but not once the lease ran out (below, after 100 ms). */
    assert_int_equal(dlock_release(l), DLOCK_OK);
    l = it_acquire_opts(c, "ranout", &o);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    char key[256];
    it_key(key, sizeof key, "ranout");
    int64_t limit = dh_now_ms() + 2000 * dh_slack();
    while (it_exists(&it_node[0], key) != 0 && dh_now_ms() < limit)
        dh_sleep_ms(5);
    dlock_lock *theirs = it_acquire(other, "ranout", 5000);
    assert_int_equal(dlock_acquire(c, "ranout", &o, &l), DLOCK_ERR_BUSY);
    assert_null(l);
    it_expect_holder(&it_node[0], "ranout", dlock_token(theirs));
    /* And a handle whose lease ran out before its release does not linger: LOST. */
    o.ttl_ms = 50;
    dlock_lock *late = it_acquire_opts(c, "late", &o);
    dh_sleep_ms(100);
    assert_int_equal(dlock_release(late), DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(theirs), DLOCK_OK);
    dlock_client_free(other);
    dlock_client_free(c);
}

/* Asked for without linger_ms, a lingering lock is released first, then taken anew: a
 * new token and a larger fence. */
static void test_plain_acquire_after_linger(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client();
    dlock_opts o = lingering(DLOCK_LINGER_MAX_MS);
    char token[DLOCK_TOKEN_LEN + 1];
    dlock_lock *l = take(c, "plain", &o, token);
    uint64_t fence = dlock_fence(l);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    l = it_acquire(c, "plain", 5000);
    assert_string_not_equal(dlock_token(l), token);
    assert_true(dlock_fence(l) > fence);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    expect_free("plain");
    dlock_client_free(c);
}

/* A waiter of the same client for the name makes the release a plain one: by the time
 * dlock_release returns, the key is no longer the releaser's, and the waiter has it. */
static void test_waiting_thread_gets_it(void **state)
{
    (void)state;
    dlock_client *c = it_hot_client();
    dlock_opts o = lingering(DLOCK_LINGER_MAX_MS);
    char token[DLOCK_TOKEN_LEN + 1];
    dlock_lock *l = take(c, "thread", &o, token);
    dlock_pending *p = it_pending_start(c, "thread", 20000);
    dlock_lock *got = NULL;
    assert_int_equal(dlock_pending_step_nowait(p, &got), DLOCK_ERR_AGAIN);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    char key[256];
    it_key(key, sizeof key, "thread");
    char *v = it_get(&it_node[0], key);
    assert_true(v == NULL || memcmp(v, token, DLOCK_TOKEN_LEN) != 0);
    free(v);
    it_pending_readable(p);
    assert_int_equal(dlock_pending_step(p, &got), DLOCK_OK);
    assert_non_null(got);
    it_pending_done(p, got);

    /* A waiter that comes while the lock lingers (queued on no server: its client holds
     * the name) is not passed over: the next acquire releases to it, and is refused. */
    l = take(c, "thread", &o, token);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    it_expect_holder(&it_node[0], "thread", token);
    p = it_pending_start(c, "thread", 20000);
    got = NULL;
    assert_int_equal(dlock_pending_step_nowait(p, &got), DLOCK_ERR_AGAIN);
    assert_int_equal(dlock_acquire(c, "thread", &o, &l), DLOCK_ERR_BUSY);
    it_pending_readable(p);
    assert_int_equal(dlock_pending_step(p, &got), DLOCK_OK);
    assert_string_not_equal(dlock_token(got), token);
    it_pending_done(p, got);
    dlock_client_free(c);
}

/* Another client's waiter, passed over while it has waited less than linger_ms. */
typedef struct waiter {
    dlock_client *c;
    const char *name;
    _Atomic int in_section; /* sections in progress, either side's */
    _Atomic int overlaps;
    _Atomic bool queued, done;
    int64_t waited_ms;
    uint64_t fence;
    int rc;
} waiter;

static void enter(waiter *w)
{
    if (atomic_fetch_add(&w->in_section, 1) != 0)
        atomic_fetch_add(&w->overlaps, 1);
}

static void *wait_thread(void *arg)
{
    waiter *w = arg;
    dlock_opts o = {0};
    o.ttl_ms = 5000;
    o.wait_ms = 20000 * dh_slack();
    dlock_lock *l = NULL;
    int64_t t0 = dh_now_ms();
    atomic_store(&w->queued, true);
    w->rc = dlock_acquire(w->c, w->name, &o, &l);
    w->waited_ms = dh_now_ms() - t0;
    if (w->rc == DLOCK_OK) {
        enter(w);
        w->fence = dlock_fence(l);
        dh_sleep_ms(10);
        atomic_fetch_sub(&w->in_section, 1);
        dlock_release(l);
    }
    atomic_store(&w->done, true);
    return NULL;
}

static void test_waiter_passed_then_served(void **state)
{
    (void)state;
    enum { LINGER = 100 };
    dlock_client *c = it_nodes_client();
    waiter w = {.c = it_nodes_client(), .name = "pass"};
    dlock_opts o = lingering(LINGER);
    o.wait_ms = 20000 * dh_slack();
    dlock_lock *l = it_acquire_opts(c, "pass", &o);
    /* The hold's fence until the waiter's turn: every retake before it keeps it. */
    const uint64_t fence = dlock_fence(l);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, wait_thread, &w), 0);
    it_wait_queued("pass", 1);
    /* Sections back to back until the waiter has had its turn. The retaker may run
     * some after its own turn before the waiter's thread says it is done. */
    long sections = 0, passed = 0, handoffs = 0;
    uint64_t last = fence;
    while (!atomic_load(&w.done)) {
        enter(&w);
        atomic_fetch_sub(&w.in_section, 1);
        assert_int_equal(dlock_release(l), DLOCK_OK);
        assert_int_equal(dlock_acquire(c, "pass", &o, &l), DLOCK_OK);
        sections++;
        assert_true(dlock_fence(l) >= last);
        handoffs += dlock_fence(l) != last;
        last = dlock_fence(l);
        passed += dlock_fence(l) == fence;
    }
    assert_int_equal(pthread_join(th, NULL), 0);
    printf("FIG linger_waiter_waited_ms %lld (linger %d, %ld sections, %ld retaken while "
           "it waited)\n",
           (long long)w.waited_ms, LINGER, sections, passed);
    assert_int_equal(w.rc, DLOCK_OK);
    assert_int_equal(atomic_load(&w.overlaps), 0);
    assert_true(passed >= 1);
    assert_int_equal(handoffs, 1);
    /* Served once it had waited linger_ms, within a quarter more and a retake. */
    assert_true(w.waited_ms >= LINGER);
    assert_true(w.waited_ms <= (LINGER + LINGER / 4 + 500) * dh_slack());
    /* The waiter's fence is larger than the retaker's before it, and the retaker's
     * after it larger still. */
    assert_true(w.fence > fence);
    assert_true(dlock_fence(l) > w.fence);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(w.c);
    dlock_client_free(c);
}

/* A holder's acquire that waits in its own thread. */
typedef struct holder {
    dlock_client *c;
    dlock_opts o;
    dlock_lock *l;
    int rc;
} holder;

static void *hold_thread(void *arg)
{
    holder *h = arg;
    h->rc = dlock_acquire(h->c, "turn", &h->o, &h->l);
    return NULL;
}

/* A waiter that has waited linger_ms in all is passed over no more, though it has only
 * just become the head: a holder served before it, that would take the lock back,
 * hands it over at its first retake, and queues behind it. So lingering never adds to
 * a wait that is already as long as linger_ms. */
static void test_no_pass_after_the_bound(void **state)
{
    (void)state;
    enum { LINGER = 300, FIRST = LINGER * 5 / 2 };
    dlock_client *first = it_nodes_client();
    dlock_lock *p = it_acquire(first, "turn", 10000);
    holder h = {.c = it_nodes_client(), .o = lingering(LINGER)};
    h.o.wait_ms = 20000 * dh_slack();
    pthread_t hth, wth;
    assert_int_equal(pthread_create(&hth, NULL, hold_thread, &h), 0);
    it_wait_queued("turn", 1);
    waiter w = {.c = it_nodes_client(), .name = "turn"};
    assert_int_equal(pthread_create(&wth, NULL, wait_thread, &w), 0);
    it_wait_queued("turn", 2);
    dh_sleep_ms(FIRST);
    assert_int_equal(dlock_release(p), DLOCK_OK);
    assert_int_equal(pthread_join(hth, NULL), 0);
    assert_int_equal(h.rc, DLOCK_OK);
    uint64_t fence = dlock_fence(h.l);
    /* The waiter queued FIRST ms ago: the retake hands it the lock, and the acquire
     * returns after its section. */
    enter(&w);
    atomic_fetch_sub(&w.in_section, 1);
    assert_int_equal(dlock_release(h.l), DLOCK_OK);
    assert_int_equal(dlock_acquire(h.c, "turn", &h.o, &h.l), DLOCK_OK);
    assert_int_equal(pthread_join(wth, NULL), 0);
    printf("FIG linger_late_head_waited_ms %lld (linger %d)\n", (long long)w.waited_ms, LINGER);
    assert_int_equal(w.rc, DLOCK_OK);
    assert_int_equal(atomic_load(&w.overlaps), 0);
    assert_true(w.waited_ms >= FIRST);
    assert_true(w.fence > fence && dlock_fence(h.l) > w.fence);
    assert_int_equal(dlock_release(h.l), DLOCK_OK);
    dlock_client_free(w.c);
    dlock_client_free(h.c);
    dlock_client_free(first);
}

/* The bound is shared out among the waiters: with QUEUE of them queued, the head is
 * passed over for linger_ms / QUEUE, not linger_ms, so the whole queue comes round in
 * about linger_ms more than it would without lingering. The head is served after its
 * share (the retaker kept the lock meanwhile), and long before the whole bound; the
 * retaker's next acquire queues behind the others, who are served in the order they
 * queued, with fences that grow. */
static void test_bound_shared_by_the_queue(void **state)
{
    (void)state;
    enum { LINGER = 1000, QUEUE = 4, SHARE = LINGER / QUEUE };
    dlock_client *c = it_nodes_client();
    dlock_opts o = lingering(LINGER);
    o.wait_ms = 20000 * dh_slack();
    dlock_lock *l = it_acquire_opts(c, "share", &o);
    const uint64_t fence = dlock_fence(l);
    waiter w[QUEUE];
    pthread_t th[QUEUE];
    for (int i = 0; i < QUEUE; i++) {
        w[i] = (waiter){.c = it_nodes_client(), .name = "share"};
        assert_int_equal(pthread_create(&th[i], NULL, wait_thread, &w[i]), 0);
        it_wait_queued("share", i + 1);
    }
    /* The head became the head when the hold began: passed over from then. */
    long passed = 0;
    while (!atomic_load(&w[0].done)) {
        enter(&w[0]);
        atomic_fetch_sub(&w[0].in_section, 1);
        assert_int_equal(dlock_release(l), DLOCK_OK);
        assert_int_equal(dlock_acquire(c, "share", &o, &l), DLOCK_OK);
        passed += dlock_fence(l) == fence;
    }
    printf("FIG linger_shared_head_waited_ms %lld (linger %d, %d queued, %ld retaken while "
           "it waited)\n",
           (long long)w[0].waited_ms, LINGER, QUEUE, passed);
    /* The retaker's last acquire queued behind the others, who went in turn. */
    for (int i = 0; i < QUEUE; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(w[i].rc, DLOCK_OK);
        assert_true(w[i].fence > (i == 0 ? fence : w[i - 1].fence));
        dlock_client_free(w[i].c);
    }
    assert_true(dlock_fence(l) > w[QUEUE - 1].fence);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(atomic_load(&w[0].overlaps), 0);
    assert_true(passed >= 1);
    assert_true(w[0].waited_ms >= SHARE);
    assert_true(w[0].waited_ms <= (SHARE + SHARE / 4 + 300) * dh_slack());
    dlock_client_free(c);
}

/* Where a lock cannot linger, the option is refused with a message saying why. */
static void test_refused(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client();
    dlock_lock *l = NULL;
    dlock_pending *p = NULL;
    static const struct {
        int64_t linger_ms;
        int shared;
        const char *why;
    } bad[] = {{-1, 0, "0 to"}, {DLOCK_LINGER_MAX_MS + 1, 0, "0 to"}, {10, 1, "exclusive"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dlock_opts o = lingering(bad[i].linger_ms);
        o.shared = bad[i].shared;
        assert_int_equal(dlock_acquire(c, "refused", &o, &l), DLOCK_ERR_INVALID);
        assert_non_null(strstr(dlock_errmsg(), bad[i].why));
        assert_null(l);
    }
    dlock_opts o = lingering(10);
    assert_int_equal(dlock_sem_acquire(c, "refused", 2, &o, &l), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errmsg(), "permits"));
    assert_int_equal(dlock_acquire_start(c, "refused", &o, &p), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errmsg(), "steps"));
    assert_null(p);
    dlock_client_free(c);

    /* Three servers (nothing is sent: the check comes first). */
    dlock_client *three = NULL;
    assert_int_equal(dlock_client_new("redis://127.0.0.1:1,redis://127.0.0.1:2,"
                                      "redis://127.0.0.1:3",
                                      NULL, &three),
                     DLOCK_OK);
    assert_int_equal(dlock_acquire(three, "refused", &o, &l), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errmsg(), "one server"));
    dlock_client_free(three);

    char dir[256], url[300];
    assert_int_equal(it_tmpdir(dir, sizeof dir, "linger"), 0);
    snprintf(url, sizeof url, "file://%s", dir);
    dlock_client *local = NULL;
    assert_int_equal(dlock_client_new(url, NULL, &local), DLOCK_OK);
    assert_int_equal(dlock_acquire(local, "refused", &o, &l), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errmsg(), "file://"));
    dlock_client_free(local);
    assert_int_equal(it_tmpdir_remove(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retake_keeps_the_lock),
        cmocka_unit_test(test_unclaimed_release_goes_out),
        cmocka_unit_test(test_lost_while_lingering),
        cmocka_unit_test(test_plain_acquire_after_linger),
        cmocka_unit_test(test_waiting_thread_gets_it),
        cmocka_unit_test(test_waiter_passed_then_served),
        cmocka_unit_test(test_no_pass_after_the_bound),
        cmocka_unit_test(test_bound_shared_by_the_queue),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests_name("linger", tests, it_nodes_setup1, it_nodes_teardown);
}
