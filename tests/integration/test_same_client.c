/*
 * test_same_client.c: a waiter whose own client holds the name waits in the client alone.
 *
 * Threads of one program, or a service such as dlockd that holds all its clients' locks
 * in one client, often wait for a name that their client holds itself. Such a waiter
 * sends nothing (an attempt could only be refused): the holder's release queues it with
 * its own ticket and, when it heads the queue, hands it the lock in the same script. On
 * one server and on three, against real redis-servers, asserted exactly: no command
 * while it waits, one script (the release) for the whole handoff, the fences, and that a
 * waiter of another client that came first is served first. A holder whose handle goes
 * without a release (detached) lets the waiter attempt once its lease is over, within a
 * bound times DLOCK_TEST_SLACK.
 *
 * The waiters are driven by the step API on the test's own thread (dlock_acquire_start,
 * dlock_pending_step_nowait), so that "it waits now" is a fact, not a sleep.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "internal.h" /* DLOCK_QUEUE_REFRESH_MS */
#include "itest.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every waiter's options here: a lease of 5 s, a wait of 20 s. */
static dlock_opts waiting(void)
{
    dlock_opts o = {0};
    o.ttl_ms = 5000;
    o.wait_ms = 20000;
    return o;
}

/* Start an acquisition of name by c and take its first nowait step, which must leave
 * it waiting. */
static dlock_pending *start_waiter(dlock_client *c, const char *name)
{
    dlock_opts o = waiting();
    dlock_pending *p = NULL;
    assert_int_equal(dlock_acquire_start(c, name, &o, &p), DLOCK_OK);
    dlock_lock *l = NULL;
    assert_int_equal(dlock_pending_step_nowait(p, &l), DLOCK_ERR_AGAIN);
    assert_null(l);
    return p;
}

/* Step p as an event loop would (nowait steps, a handed-back one taken blocking, a poll
 * of its descriptor until its due time between them) until it ends, within bound_ms. */
static int drive(dlock_pending *p, dlock_lock **l, int64_t bound_ms)
{
    int64_t until = dh_now_ms() + bound_ms;
    for (;;) {
        int rc = dlock_pending_step_nowait(p, l);
        if (rc == DLOCK_ERR_WOULDBLOCK)
            rc = dlock_pending_step(p, l);
        if (rc != DLOCK_ERR_AGAIN)
            return rc;
        if (dh_now_ms() > until)
            fail_msg("the waiter did not end within %lld ms", (long long)bound_ms);
        struct pollfd pf = {.fd = dlock_pending_fd(p), .events = POLLIN};
        int64_t due = dlock_pending_due_ms(p);
        poll(&pf, 1, (int)(due > 1000 ? 1000 : due));
    }
}

static void scripts_now(long long *out)
{
    for (int i = 0; i < it_nodes; i++)
        out[i] = it_script_calls(&it_node[i]);
}

static void expect_queue_len(const char *name, long long want)
{
    char qkey[256];
    it_queue_key(qkey, sizeof qkey, name);
    for (int i = 0; i < it_nodes; i++)
        assert_int_equal(it_int_reply(dh_cmd(&it_node[i], "ZCARD %s", qkey)), want);
}

/* Holder A and waiter B of one client: B sends nothing while it waits; A's release
 * queues B and hands it the lock in one script, and B takes it with no attempt. */
static void test_waits_in_its_client(void **state)
{
    (void)state;
    dlock_client *hc = it_hot_client();
    dlock_lock *a = it_acquire(hc, "own", 10000);
    uint64_t fence_a = dlock_fence(a);
    long long before[IT_NODES_MAX], after[IT_NODES_MAX];
    scripts_now(before);
    dlock_pending *b = start_waiter(hc, "own");
    assert_false(dlock_pending_in_flight(b));
    dlock_lock *lb = NULL;
    /* Steps while A holds: still waiting, nothing sent, queued nowhere. */
    assert_int_equal(dlock_pending_step_nowait(b, &lb), DLOCK_ERR_AGAIN);
    scripts_now(after);
    for (int i = 0; i < it_nodes; i++)
        assert_int_equal(after[i], before[i]);
    expect_queue_len("own", 0);

    long long pub = it_cmd_calls(&it_node[0], "publish");
    int64_t t0 = dh_now_us();
    assert_int_equal(dlock_release(a), DLOCK_OK);
    assert_int_equal(drive(b, &lb, 5000 * dh_slack()), DLOCK_OK);
    printf("FIG same_client_handoff_us %lld us\n", (long long)(dh_now_us() - t0));
    dlock_pending_free(b);
    assert_non_null(lb);
    assert_true(dlock_fence(lb) > fence_a);
    assert_true(dlock_remaining_ms(lb) > 4000);
    scripts_now(after);
    for (int i = 0; i < it_nodes; i++) {
        it_expect_holder(&it_node[i], "own", dlock_token(lb));
        /* The release alone; with N > 1 a node whose reply came after the quorum may
         * get B's leaving of its queue too. */
        long long calls = after[i] - before[i];
        assert_true(calls >= 1 && calls <= (it_nodes == 1 ? 1 : 2));
    }
    assert_int_equal(it_cmd_calls(&it_node[0], "publish"), pub);
    expect_queue_len("own", 0);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_client_free(hc);
}

typedef struct other_waiter {
    dlock_client *c;
    dlock_lock *l;
    int rc;
    pthread_t t;
} other_waiter;

static void *other_wait(void *arg)
{
    other_waiter *w = arg;
    dlock_opts o = waiting();
    w->rc = dlock_acquire(w->c, "order", &o, &w->l);
    return NULL;
}

/* A waiter X of another client queued before B, which waits in its client behind A:
 * A's release serves X (the first ticket) and queues B, which then waits for X like
 * any waiter and gets the lock at X's release. */
static void test_earlier_waiter_of_another_client_first(void **state)
{
    (void)state;
    dlock_client *hc = it_hot_client();
    dlock_lock *a = it_acquire(hc, "order", 10000);
    uint64_t fence_a = dlock_fence(a);
    other_waiter x = {.c = it_nodes_client()};
    assert_int_equal(pthread_create(&x.t, NULL, other_wait, &x), 0);
    it_wait_queued("order", 1);
    dlock_pending *b = start_waiter(hc, "order");
    expect_queue_len("order", 1); /* X's entry alone */

    assert_int_equal(dlock_release(a), DLOCK_OK);
    assert_int_equal(pthread_join(x.t, NULL), 0);
    assert_int_equal(x.rc, DLOCK_OK);
    assert_true(dlock_fence(x.l) > fence_a);
    it_expect_holder(&it_node[0], "order", dlock_token(x.l));
    /* The release queued B; B's own steps keep it there until X releases. */
    dlock_lock *lb = NULL;
    struct pollfd pf = {.fd = dlock_pending_fd(b), .events = POLLIN};
    assert_int_equal(poll(&pf, 1, (int)(1000 * dh_slack())), 1); /* the release woke B */
    int rc = dlock_pending_step_nowait(b, &lb);
    if (rc == DLOCK_ERR_WOULDBLOCK)
        rc = dlock_pending_step(b, &lb);
    assert_int_equal(rc, DLOCK_ERR_AGAIN);
    it_wait_queued("order", 1);

    assert_int_equal(dlock_release(x.l), DLOCK_OK);
    assert_int_equal(drive(b, &lb, 5000 * dh_slack()), DLOCK_OK);
    dlock_pending_free(b);
    it_expect_holder(&it_node[0], "order", dlock_token(lb));
    assert_true(dlock_fence(lb) > fence_a);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    expect_queue_len("order", 0);
    dlock_client_free(x.c);
    dlock_client_free(hc);
}

/* A holder's handle freed without a release (dlock_lock_detach) tells nobody: the
 * waiter behind it attempts once the holder's lease should be over, and gets the lock
 * once the servers let it go, never before. */
static void test_holder_detached(void **state)
{
    (void)state;
    dlock_client *hc = it_hot_client();
    dlock_lock *a = it_acquire(hc, "gone", 600);
    dlock_pending *b = start_waiter(hc, "gone");
    char key[256];
    it_key(key, sizeof key, "gone");
    long long pttl_ms = it_pttl(&it_node[0], key);
    assert_true(pttl_ms > 0);
    int64_t t0 = dh_now_ms();
    assert_int_equal(dlock_lock_detach(a), DLOCK_OK);
    dlock_lock *lb = NULL;
    int64_t bound_ms = (600 + DLOCK_QUEUE_REFRESH_MS + 500) * dh_slack();
    assert_int_equal(drive(b, &lb, bound_ms), DLOCK_OK);
    int64_t took_ms = dh_now_ms() - t0;
    printf("FIG same_client_after_detached_ms %lld ms (lease left %lld ms, bound %lld ms)\n",
           (long long)took_ms, pttl_ms, (long long)bound_ms);
    assert_true(took_ms >= pttl_ms - 1);
    dlock_pending_free(b);
    it_expect_holder(&it_node[0], "gone", dlock_token(lb));
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_client_free(hc);
}

/* Blocking waiters, threads of one client behind a holder of the same client: each
 * release hands the lock to the next of them, with no attempt. */
typedef struct team {
    pthread_mutex_t mu;
    pthread_cond_t got;
    dlock_client *c;
    int n;        /* waiters that got the lock, in order[] */
    int order[8]; /* their indexes, in the order they got it */
    dlock_lock *l[8];
    int rc[8];
} team;

typedef struct member {
    team *t;
    int idx;
    pthread_t th;
} member;

static void *member_wait(void *arg)
{
    member *m = arg;
    dlock_opts o = waiting();
    dlock_lock *l = NULL;
    int rc = dlock_acquire(m->t->c, "threads", &o, &l);
    pthread_mutex_lock(&m->t->mu);
    m->t->l[m->idx] = l;
    m->t->rc[m->idx] = rc;
    m->t->order[m->t->n++] = m->idx;
    pthread_cond_broadcast(&m->t->got);
    pthread_mutex_unlock(&m->t->mu);
    return NULL;
}

static void test_threads_of_one_client(void **state)
{
    (void)state;
    enum { WAITERS = 4 };
    team t = {.c = it_hot_client()};
    pthread_mutex_init(&t.mu, NULL);
    pthread_cond_init(&t.got, NULL);
    dlock_lock *a = it_acquire(t.c, "threads", 10000);
    uint64_t fence = dlock_fence(a);
    long long before[IT_NODES_MAX], after[IT_NODES_MAX];
    scripts_now(before);
    member m[WAITERS];
    for (int i = 0; i < WAITERS; i++) {
        m[i] = (member){.t = &t, .idx = i};
        assert_int_equal(pthread_create(&m[i].th, NULL, member_wait, &m[i]), 0);
    }
    /* No server shows that they wait: a pause lets them start (one that started only
     * after the last release would attempt, and the count below would show it). */
    dh_sleep_ms(200 * dh_slack());
    scripts_now(after);
    for (int i = 0; i < it_nodes; i++)
        assert_int_equal(after[i], before[i]);
    assert_int_equal(dlock_release(a), DLOCK_OK);
    /* Each holder in turn releases to the next. */
    for (int done = 0; done < WAITERS; done++) {
        pthread_mutex_lock(&t.mu);
        while (t.n <= done)
            pthread_cond_wait(&t.got, &t.mu);
        int next = t.order[done];
        dlock_lock *l = t.l[next];
        int rc = t.rc[next];
        pthread_mutex_unlock(&t.mu);
        assert_int_equal(rc, DLOCK_OK);
        assert_true(dlock_fence(l) > fence);
        fence = dlock_fence(l);
        it_expect_holder(&it_node[0], "threads", dlock_token(l));
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    for (int i = 0; i < WAITERS; i++)
        assert_int_equal(pthread_join(m[i].th, NULL), 0);
    scripts_now(after);
    for (int i = 0; i < it_nodes; i++)
        printf("FIG same_client_threads_scripts_node%d %lld (%d releases)\n", i,
               after[i] - before[i], WAITERS + 1);
    /* One release per lock handed on, and nothing else, on one server. */
    if (it_nodes == 1)
        assert_int_equal(after[0] - before[0], WAITERS + 1);
    expect_queue_len("threads", 0);
    dlock_client_free(t.c);
    pthread_cond_destroy(&t.got);
    pthread_mutex_destroy(&t.mu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_waits_in_its_client),
        cmocka_unit_test(test_earlier_waiter_of_another_client_first),
        cmocka_unit_test(test_holder_detached),
        cmocka_unit_test(test_threads_of_one_client),
    };
    return IT_NODES_GROUPS("same_client", tests, tests);
}
