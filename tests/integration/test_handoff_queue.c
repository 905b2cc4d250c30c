/*
 * test_handoff_queue.c: the wait queue behind a lock, on one server: its fair order
 * across processes (waiters of two processes served in their arrival order, each after
 * the previous one's section, with fences that go up), and its keys that expire: a
 * fence counter after its retention (fences still go up, bad retentions refused, the
 * default an hour) and a queue whose only waiter was SIGKILLed, the holder's lock
 * untouched. The handoff itself, dead heads and what idle waiters cost: test_handoff.c.
 *
 * Waiters live in other processes (forked children that make their own client).
 * Asserted exactly: arrival order in fair mode, the queue's entries, fences that go up,
 * the holder's lock untouched. Asserted with DLOCK_TEST_SLACK: how soon the keys expire.
 * Other timings are FIG lines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "internal.h" /* DLOCK_QUEUE_TTL_MS, DLOCK_FENCE_RETENTION_* */
#include "itest.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

/* ---- 1. fair order across processes ----------------------------------------------- */

#define FAIR_MAX 4

typedef struct fair_arg {
    dlock_client *c;
    int idx, rep, rc;
    pthread_t t;
} fair_arg;

/* A fair waiter for "f" in a child process: reports when it got the lock, holds it
 * for 20 ms, releases it. */
static void *fair_waiter(void *p)
{
    fair_arg *a = p;
    dlock_opts o = {0};
    o.ttl_ms = 5000;
    o.wait_ms = 20000;
    o.fair = 1;
    dlock_lock *l = NULL;
    it_waiter_report r = {.idx = a->idx};
    r.rc = dlock_acquire(a->c, "f", &o, &l);
    r.got_us = dh_now_us();
    if (r.rc == DLOCK_OK) {
        r.fence = dlock_fence(l);
        memcpy(r.token, dlock_token(l), DLOCK_TOKEN_LEN);
    }
    if (write(a->rep, &r, sizeof r) != (ssize_t)sizeof r)
        r.rc = -1;
    if (r.rc != DLOCK_OK) {
        a->rc = r.rc;
        return NULL;
    }
    dh_sleep_ms(20);
    a->rc = dlock_release(l);
    return NULL;
}

/* A child process that starts a fair waiter for each byte (its index) read from ctl,
 * all on one client, until EOF; then it waits for them. Exit status 0 when all of them
 * got the lock and released it. */
static int fair_process(int ctl, int rep)
{
    dlock_config cfg;
    it_config_init(&cfg);
    dlock_client *c = NULL;
    if (dlock_client_new(it_node_urls, &cfg, &c) != DLOCK_OK)
        return 2;
    fair_arg a[FAIR_MAX];
    int n = 0, bad = 0;
    unsigned char idx;
    while (n < FAIR_MAX && read(ctl, &idx, 1) == 1) {
        a[n] = (fair_arg){.c = c, .idx = idx, .rep = rep};
        if (pthread_create(&a[n].t, NULL, fair_waiter, &a[n]) != 0)
            return 3;
        n++;
    }
    for (int i = 0; i < n; i++) {
        pthread_join(a[i].t, NULL);
        bad += a[i].rc != DLOCK_OK;
    }
    dlock_client_free(c);
    return bad == 0 ? 0 : 1;
}

/* Fork a fair_process on ctl[0] and rep[1], closing in the child every other
 * descriptor of this test's pipes (so that closing ctl[1] here means EOF there). */
static pid_t spawn_fair(const int *fds, int nfds, int ctl, int rep)
{
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (int i = 0; i < nfds; i++)
            if (fds[i] != ctl && fds[i] != rep)
                close(fds[i]);
        _exit(fair_process(ctl, rep));
    }
    return pid;
}

static void order(int ctl, unsigned char idx, long long queued)
{
    assert_int_equal(write(ctl, &idx, 1), 1);
    it_wait_queued("f", queued);
}

/* W1 (process P1), then W2 (P2), then W3 (P1 again), each queued before the next
 * starts: the lock goes to them in that order. */
static void test_fair_order_two_processes(void **state)
{
    (void)state;
    dlock_client *hc = it_nodes_client();
    dlock_lock *a = it_acquire(hc, "f", 10000);
    it_held ha = it_keep(a);
    int rep[2], ctl1[2], ctl2[2];
    assert_int_equal(pipe(rep), 0);
    assert_int_equal(pipe(ctl1), 0);
    assert_int_equal(pipe(ctl2), 0);
    const int fds[] = {rep[0], rep[1], ctl1[0], ctl1[1], ctl2[0], ctl2[1]};
    pid_t p1 = spawn_fair(fds, 6, ctl1[0], rep[1]);
    pid_t p2 = spawn_fair(fds, 6, ctl2[0], rep[1]);
    close(rep[1]);
    close(ctl1[0]);
    close(ctl2[0]);
    order(ctl1[1], 1, 1);
    order(ctl2[1], 2, 2);
    order(ctl1[1], 3, 3);
    close(ctl1[1]);
    close(ctl2[1]);
    /* The queue holds them in arrival order: P1's, P2's, P1's. */
    const pid_t owner[3] = {p1, p2, p1};
    for (int i = 0; i < 3; i++) {
        char value[512], pid[32];
        it_queue_entry(&it_node[0], "f", i, value, sizeof value);
        snprintf(pid, sizeof pid, ":%ld", (long)owner[i]);
        assert_non_null(strstr(value, pid));
    }

    int64_t t0 = dh_now_us();
    assert_int_equal(dlock_release(a), DLOCK_OK);
    it_waiter_report r[3];
    for (int i = 0; i < 3; i++) {
        it_read_report(rep[0], &r[i], 10000 * dh_slack());
        printf("INFO fair: section %d went to W%d after %lld us\n", i, r[i].idx,
               (long long)(r[i].got_us - t0));
        assert_int_equal(r[i].rc, DLOCK_OK);
    }
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r[i].idx, i + 1);
        if (i > 0) {
            /* Each got it after the previous one's 20 ms section. */
            assert_true(r[i].got_us >= r[i - 1].got_us + 20000);
            assert_true(r[i].fence > r[i - 1].fence);
            printf("FIG fair_cross_process_handoff_us %lld us (after a 20 ms section)\n",
                   (long long)(r[i].got_us - r[i - 1].got_us - 20000));
        }
    }
    assert_true(r[0].fence > ha.fence);
    it_expect_exit(p1, 0);
    it_expect_exit(p2, 0);
    close(rep[0]);
    dlock_client_free(hc);
}

/* ---- 2. keys that expire ------------------------------------------------------------ */

static void test_fence_counter_expires(void **state)
{
    (void)state;
    char fkey[256];
    it_fence_key(fkey, sizeof fkey, "e");
    dlock_config cfg;
    it_config_init(&cfg);
    cfg.fence_retention_ms = 1000;
    dlock_client *c = it_client_cfg(it_node_urls, &cfg);
    dlock_lock *l = it_acquire(c, "e", 5000);
    uint64_t f1 = dlock_fence(l);
    long long pttl = it_pttl(&it_node[0], fkey);
    assert_true(pttl > 0 && pttl <= 1000);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    pttl = it_pttl(&it_node[0], fkey);
    assert_true(pttl > 0 && pttl <= 1000);
    int64_t t0 = dh_now_ms(), until = t0 + 3000 * dh_slack();
    while (it_exists(&it_node[0], fkey) != 0 && dh_now_ms() < until)
        dh_sleep_ms(20);
    assert_int_equal(it_exists(&it_node[0], fkey), 0);
    printf("FIG fence_counter_gone_ms %lld ms (retention 1000 ms)\n",
           (long long)(dh_now_ms() - t0));
    /* The counter is gone, and fences still go up (the server's clock floors them). */
    l = it_acquire(c, "e", 5000);
    assert_true(dlock_fence(l) > f1);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);

    /* Retentions outside 1000 ms to a year are refused. */
    const int64_t bad[] = {-1, 999, DLOCK_FENCE_RETENTION_MAX_MS + 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cfg.fence_retention_ms = bad[i];
        c = NULL;
        assert_int_equal(dlock_client_new(it_node_urls, &cfg, &c), DLOCK_ERR_INVALID);
        assert_null(c);
    }

    /* The default keeps a counter an hour. */
    it_fence_key(fkey, sizeof fkey, "e-default");
    c = it_nodes_client();
    l = it_acquire(c, "e-default", 5000);
    pttl = it_pttl(&it_node[0], fkey);
    assert_true(pttl > 3000000 && pttl <= DLOCK_FENCE_RETENTION_DEFAULT_MS);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

/* A waiter killed while queued, and no release to pop its entry: the queue key
 * expires DLOCK_QUEUE_TTL_MS after the waiter's last refresh. The holder's lock is
 * untouched. */
static void test_queue_expires_after_dead_waiter(void **state)
{
    (void)state;
    char qkey[256];
    it_queue_key(qkey, sizeof qkey, "x");
    dlock_client *hc = it_nodes_client();
    dlock_lock *a = it_acquire(hc, "x", 30000);
    it_child_waiter w = {.name = "x", .wait_ms = -1, .ttl_ms = 5000, .report_fd = -1, .go_fd = -1};
    pid_t b = it_spawn_waiter(&w);
    it_wait_queued("x", 1);
    /* Queueing set the queue's lifetime (polled every 5 ms, so it is fresh). */
    long long pttl = it_pttl(&it_node[0], qkey);
    assert_true(pttl > DLOCK_QUEUE_TTL_MS - 100 * dh_slack() && pttl <= DLOCK_QUEUE_TTL_MS);
    it_kill_and_reap(b);
    int64_t t_kill = dh_now_ms();
    int64_t until = t_kill + (DLOCK_QUEUE_TTL_MS + 500) * dh_slack();
    while (it_exists(&it_node[0], qkey) != 0 && dh_now_ms() < until)
        dh_sleep_ms(50);
    assert_int_equal(it_exists(&it_node[0], qkey), 0);
    printf("FIG queue_gone_after_kill_ms %lld ms\n", (long long)(dh_now_ms() - t_kill));
    it_expect_holder(&it_node[0], "x", dlock_token(a));
    assert_int_equal(dlock_release(a), DLOCK_OK);
    dlock_client_free(hc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fair_order_two_processes),
        cmocka_unit_test(test_fence_counter_expires),
        cmocka_unit_test(test_queue_expires_after_dead_waiter),
    };
    return cmocka_run_group_tests_name("handoff_queue_1_node", tests, it_nodes_setup1,
                                       it_nodes_teardown);
}
