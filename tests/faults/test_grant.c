/*
 * test_grant.c: waiters paused and killed at the grant, the moment a waiter that heard
 * its handoff's message decides whether to start its section on it (docs/waiting.md,
 * "Starting on the grant").
 *
 * A waiter that starts on the message counts its validity from before its token
 * existed, with the handoff's lease, and confirms its own lease without waiting. So a
 * waiter paused between the message and its decision must find less validity when it
 * resumes, and none after a pause longer than the handoff's lease (the lock may have
 * gone on by then: the lease ran out unconfirmed, and the next waiter found it free);
 * and a waiter killed there leaves the lock for its handoff's lease, no longer.
 *
 * Setup: 4 worker processes contend for one lock on N = 1 and on N = 3 (ttl 1 s,
 * blocking waits, 5 ms of work between the register's read and its write), renewal
 * off. Fault, through the hooks, in the workers at the grant, by its number among all
 * the grants heard: 1 in 20 a pause of 1.5 x the handoff lease, 2 in 20 a pause of a
 * quarter of it, 1 in 20 SIGKILL (the test starts another worker in its place), and the
 * rest of the 20 untouched, so that waiters that did not wait long start on the grant.
 * Each run lasts 3 s, and at least until 20 grants were heard (under valgrind the
 * leases and pauses are ten times as long, the slack).
 *
 * Asserted, by the history checkers: no two grants overlapping in real time, no fence
 * regression in their order, no stale write accepted, lost updates only from writes a
 * kill left unknown; no key left after the ttl. And that the faults happened: some
 * sections started on the grant, some after a long pause, some waiters were killed.
 * Figures: the grants heard, the sections started on them, the pauses and the kills.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"
#include "internal.h" /* DLOCK_HANDOFF_*, the hooks */

#include "history.h"
#include "workers.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define WORKERS 4
#define TTL_MS  1000 /* times the slack: the handoff lease is at most the ttl */
#define WORK_MS 5
#define RUN_MS  3000 /* at least, and until a cycle of faults is through */
#define CYCLE   20   /* the faults' schedule, by the grant's number */

/* What the workers did at the grant, on a page they share with the test. */
typedef struct grant_counts {
    atomic_long heard, started, long_pauses, short_pauses, kills;
} grant_counts;

static grant_counts *g_counts;

/* The workers' handoff lease: their clients' per-node timeout is 100 ms x slack. */
static int64_t handoff_ms(void)
{
    int64_t h = DLOCK_HANDOFF_TIMEOUTS * 100 * dh_slack();
    return h < DLOCK_HANDOFF_MIN_MS ? DLOCK_HANDOFF_MIN_MS : h;
}

/* The hook, in a worker: the fault at the grant, by the grant's number among all the
 * workers' (so that every run has its share of each, whoever hears them). */
static void at_grant(int point)
{
    if (point == DLOCK_HOOK_GRANT_START) {
        atomic_fetch_add(&g_counts->started, 1);
        return;
    }
    if (point != DLOCK_HOOK_GRANT_HEARD)
        return;
    switch (atomic_fetch_add(&g_counts->heard, 1) % CYCLE) {
    case 1:
        atomic_fetch_add(&g_counts->long_pauses, 1);
        dh_sleep_ms(handoff_ms() * 3 / 2);
        break;
    case 3:
    case 7:
        atomic_fetch_add(&g_counts->short_pauses, 1);
        dh_sleep_ms(handoff_ms() / 4);
        break;
    case 5:
        atomic_fetch_add(&g_counts->kills, 1);
        raise(SIGKILL);
        break;
    default:
        break;
    }
}

static void hook_worker(const wk_config *cfg)
{
    (void)cfg;
    atomic_store(&dlock__test_hooks.pause, at_grant);
}

static void at_the_grant(void **state)
{
    int n = *(int *)*state;
    wk_scenario sc;
    assert_int_equal(wk_scenario_open_n(&sc, n, "grant", "grant"), 0);
    const char *name = sc.name, *fig = sc.fig;
    memset(g_counts, 0, sizeof *g_counts);
    wk_config cfg = sc.cfg;
    cfg.ttl_ms = TTL_MS * dh_slack();
    cfg.work_ms = WORK_MS;
    cfg.before_acquire = hook_worker;
    pid_t pids[WORKERS];
    assert_int_equal(wk_spawn_all(&cfg, WORKERS, pids), 0);

    /* A worker killed at the grant is replaced, as a supervisor would. */
    int64_t t0 = dh_now_ms(), limit = t0 + 60000 * dh_slack();
    while ((dh_now_ms() < t0 + RUN_MS || atomic_load(&g_counts->heard) < CYCLE) &&
           dh_now_ms() < limit) {
        dh_sleep_ms(20);
        for (int i = 0; i < WORKERS; i++) {
            int status;
            if (waitpid(pids[i], &status, WNOHANG) != pids[i])
                continue;
            assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
            pids[i] = wk_scenario_replace(&sc, &cfg, i, pids[i]);
            assert_true(pids[i] > 0);
        }
    }
    wk_stop_fire(&sc.stop);
    /* A worker may still die at the grant on its way out: that is its last word. */
    for (int i = 0; i < WORKERS; i++) {
        int st = wk_reap(pids[i], 10000 * dh_slack());
        assert_true(st == 0 || st == 128 + SIGKILL);
        if (st != 0)
            hist_put(&sc.hw, HIST_FAULT, HIST_F_KILL, 0, NULL, atomic_load(&sc.sh->fence[i]),
                     (uint64_t)pids[i]);
    }

    hist_report rep;
    assert_int_equal(wk_scenario_judge(&sc, &rep), 0);
    long heard = atomic_load(&g_counts->heard), started = atomic_load(&g_counts->started);
    long longp = atomic_load(&g_counts->long_pauses), kills = atomic_load(&g_counts->kills);
    printf("FIG %s_grants_heard %ld count\n", fig, heard);
    printf("FIG %s_started_on_grant %ld count\n", fig, started);
    printf("FIG %s_long_pauses %ld count\n", fig, longp);
    printf("FIG %s_short_pauses %ld count\n", fig, atomic_load(&g_counts->short_pauses));
    printf("FIG %s_kills %ld count\n", fig, kills);
    assert_int_equal(wk_safety_violations(&rep), 0);
    assert_true(rep.lost_updates <= rep.writes_unknown);
    /* A cycle of faults happened, and sections started on the grant. */
    assert_true(heard >= CYCLE);
    assert_true(started >= 1);
    assert_true(longp >= 1);
    assert_true(kills >= 1);
    assert_int_equal(hist_keys_left(wk_srv, n, name, cfg.ttl_ms), 0);
    wk_scenario_close(&sc);
}

static int setup(void **state)
{
    g_counts =
        mmap(NULL, sizeof *g_counts, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(g_counts != MAP_FAILED);
    return wk_servers_setup(state);
}

static int teardown(void **state)
{
    munmap(g_counts, sizeof *g_counts);
    return wk_servers_teardown(state);
}

int main(void)
{
    wk_seed("fault_grant");
    static int n1 = 1, n3 = 3;
    const struct CMUnitTest tests[] = {
        IT_CASE("one_node", at_the_grant, &n1),
        IT_CASE("three_nodes", at_the_grant, &n3),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
