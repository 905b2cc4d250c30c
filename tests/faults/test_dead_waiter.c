/*
 * test_dead_waiter.c: a process fault next to scenario 2 of the fault suite (docs/testing.md):
 * a *waiter* SIGKILLed while it waits, rather than the holder.
 *
 * A blocked dlock_acquire puts an entry in the name's wait queue (P{name}:queue,
 * docs/waiting.md), and a release hands the lock to the queue's head with a short
 * handoff lease, which the head then confirms with its own. A head that died never
 * confirms: its handoff lease (DLOCK_HANDOFF_TIMEOUTS per-node timeouts, at least
 * DLOCK_HANDOFF_MIN_MS) runs out, and the name is free again.
 *
 * Setup: one server; a holder; a waiter process queued behind it, SIGKILLed; the holder
 * releases. Property: the release hands the lock to the dead waiter, so a try (wait_ms
 * = 0, the CLI's `-w 0`) is refused at first; once the handoff lease has run out, a try
 * is granted, in default and in fair mode, and the dead waiter's entry is gone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"
#include "internal.h" /* DLOCK_HANDOFF_* */

#include "workers.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

/* The dead waiter's handoff lease: its client has it_timeout_ms() per node. */
static int64_t handoff_ms(void)
{
    int64_t h = DLOCK_HANDOFF_TIMEOUTS * it_timeout_ms();
    return h < DLOCK_HANDOFF_MIN_MS ? DLOCK_HANDOFF_MIN_MS : h;
}

static long long zcard(const char *key)
{
    redisReply *r = dh_cmd(&it_srv, "ZCARD %s", key);
    assert_non_null(r);
    long long n = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    return n;
}

/* A process that waits for `name` forever (queued), until killed. */
static pid_t spawn_waiter(const char *name, int fair)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dlock_client *c = NULL;
        dlock_config cfg = {0};
        cfg.timeout_ms = it_timeout_ms();
        if (dlock_client_new(it_srv.url, &cfg, &c) != DLOCK_OK)
            _exit(2);
        dlock_opts o = {0};
        o.ttl_ms = 5000;
        o.wait_ms = -1;
        o.fair = fair;
        dlock_lock *l = NULL;
        dlock_acquire(c, name, &o, &l);
        _exit(3); /* never granted while the holder holds it */
    }
    return pid;
}

/* One function for both cases; its state says whether the waiters queue fairly. */
static void test_dead_waiter(void **state)
{
    int fair = *(int *)*state;
    const char *name = fair ? "dw-fair" : "dw-default";
    char queue[64];
    snprintf(queue, sizeof queue, "dlock:{%s}:queue", name);
    dlock_client *c = it_client(&it_srv, it_timeout_ms());
    dlock_lock *holder = it_acquire(c, name, 10000);
    pid_t w = spawn_waiter(name, fair);
    assert_true(w > 0);
    int64_t until = dh_now_ms() + 2000 * dh_slack();
    while (zcard(queue) < 1 && dh_now_ms() < until)
        dh_sleep_ms(10);
    assert_int_equal(zcard(queue), 1); /* the waiter is queued */
    kill(w, SIGKILL);
    assert_int_equal(wk_reap(w, 2000), 128 + SIGKILL);
    int64_t t_release = dh_now_ms();
    assert_int_equal(dlock_release(holder), DLOCK_OK);

    /* The release handed the lock to the dead waiter (the lease is at least 100 ms,
     * long enough for this try), and took its entry out of the queue. */
    dlock_opts o = {0};
    o.ttl_ms = 1000;
    o.fair = fair;
    dlock_lock *l = NULL;
    int rc = dlock_acquire(c, name, &o, &l);
    assert_int_equal(rc, DLOCK_ERR_BUSY);
    assert_int_equal(zcard(queue), 0);

    /* A try must be granted once the handoff lease has run out. */
    int64_t deadline = t_release + (handoff_ms() + 500) * dh_slack();
    do {
        rc = dlock_acquire(c, name, &o, &l);
        if (rc != DLOCK_OK)
            dh_sleep_ms(100);
    } while (rc != DLOCK_OK && dh_now_ms() < deadline);
    printf("INFO %s: try after a dead waiter -> %s (%s) after %lld ms; queue holds %lld, "
           "its PTTL %lld\n",
           name, dlock_errname(rc), rc ? dlock_errmsg() : "", (long long)(dh_now_ms() - t_release),
           zcard(queue), it_pttl(&it_srv, queue));
    if (rc == DLOCK_OK)
        printf("FIG dead_waiter_%s_blocked_ms %lld ms (handoff lease %lld ms)\n",
               fair ? "fair" : "default", (long long)(dh_now_ms() - t_release),
               (long long)handoff_ms());
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

int main(void)
{
    static int fair = 1, unfair = 0;
    /* Each case gets a fresh server. */
    const struct CMUnitTest tests[] = {
        IT_CASE_FIXTURE("test_dead_waiter_fair", test_dead_waiter, &fair),
        IT_CASE_FIXTURE("test_dead_waiter_default", test_dead_waiter, &unfair),
    };
    return cmocka_run_group_tests_name("fault_dead_waiter", tests, NULL, NULL);
}
