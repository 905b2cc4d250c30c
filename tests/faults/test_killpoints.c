/*
 * test_killpoints.c: holders and waiters SIGKILLed at random instants of the whole
 * lifecycle, not only inside the section: mid-acquire (a plain try, or queued and
 * waiting for a handoff), between a grant and its return, in the section, mid-write,
 * mid-release, and mid-renewal (renewal is on, every ttl/3).
 *
 * Setup: 4 worker processes contend for one lock on N = 1 and on N = 3 (ttl 300 ms,
 * blocking waits, so that most of them are queued at any instant and a release hands
 * the lock over; 20 ms of work between the register's read and its write). Fault: 60
 * times per N (so at least 120 kills a run), 10 to 120 ms apart, a worker is SIGKILLed
 * and another is started in its place: half the time the holder, at a random moment
 * from its section to a little past it, else any worker, whatever it is doing.
 *
 * Asserted, by the history checkers: no fence regression in the real-time order of
 * grants, no two grants overlapping, no stale write accepted, no write from nowhere,
 * lost updates only from writes whose outcome the kill left unknown; after the last
 * kill every worker completes another section within 10 s (times the slack): nothing a
 * dead process left on the servers blocks the name for good; the workers end cleanly;
 * no lock key is left after the ttl.
 * Figures: killpoint_kills, killpoint_overlaps (granted, must be 0), the kills that
 * found their victim in the section, and the sections completed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"

#include "history.h"
#include "workers.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORKERS 4
#define KILLS   60 /* per N */
#define TTL_MS  300
#define WORK_MS 20

static int g_kills, g_overlaps;

/* One function for both cases; its state is the number of lock servers. */
static void kill_points(void **state)
{
    int n = *(int *)*state;
    wk_scenario sc;
    assert_int_equal(wk_scenario_open_n(&sc, n, "killpoint", "killpoint"), 0);
    const char *name = sc.name, *fig = sc.fig;
    wk_config cfg = sc.cfg;
    cfg.ttl_ms = TTL_MS;
    cfg.work_ms = WORK_MS;
    cfg.auto_renew = 1;
    pid_t pids[WORKERS];
    assert_int_equal(wk_spawn_all(&cfg, WORKERS, pids), 0);

    int kills = 0, in_section = 0;
    while (kills < KILLS) {
        dh_sleep_ms(wk_rand(10, 120));
        /* Half the kills aim at the holder, at a random moment from its section to a
         * little past it (mid-write, mid-release, just after); the rest at anyone,
         * which mostly means a waiter (queued, being handed the lock, confirming). */
        int victim = wk_rand(0, 1) ? wk_wait_in_section(sc.sh, pids, WORKERS, 500) : -1;
        if (victim >= 0)
            dh_sleep_ms(wk_rand(0, WORK_MS + 10));
        else
            victim = (int)wk_rand(0, WORKERS - 1);
        in_section += atomic_load(&sc.sh->in_section[victim]) != 0;
        kill(pids[victim], SIGKILL);
        assert_int_equal(wk_reap(pids[victim], 2000), 128 + SIGKILL);
        kills++;
        pids[victim] = wk_scenario_replace(&sc, &cfg, victim, pids[victim]);
        assert_true(pids[victim] > 0);
    }
    /* Whatever the kills left behind (a dead holder's lease, a dead waiter's handoff,
     * queue entries of the dead), every worker then gets its turn: each completes
     * one more section within a bound (its queue's dead entries expire, leases end). */
    long base[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        base[i] = atomic_load(&sc.sh->sections[i]);
    int64_t until = dh_now_ms() + 10000 * dh_slack();
    int behind = WORKERS;
    while (behind > 0 && dh_now_ms() < until) {
        dh_sleep_ms(20);
        behind = 0;
        for (int i = 0; i < WORKERS; i++)
            behind += atomic_load(&sc.sh->sections[i]) == base[i];
    }
    printf("FIG %s_workers_starved_after_kills %d count\n", fig, behind);
    assert_int_equal(behind, 0);
    wk_stop_fire(&sc.stop);
    assert_int_equal(wk_reap_all(pids, WORKERS, 10000 * dh_slack()), 0);

    hist_report rep;
    assert_int_equal(wk_scenario_judge(&sc, &rep), 0);
    printf("FIG %s_kills %d count\n", fig, kills);
    printf("FIG %s_kills_in_section %d count\n", fig, in_section);
    g_kills += kills;
    g_overlaps += rep.granted_overlaps;
    assert_int_equal(wk_safety_violations(&rep), 0);
    /* An update is lost only where a kill left a write's outcome unknown. */
    assert_true(rep.lost_updates <= rep.writes_unknown);
    assert_int_equal(hist_keys_left(wk_srv, n, name, TTL_MS * dh_slack()), 0);
    wk_scenario_close(&sc);
}

static int teardown(void **state)
{
    printf("FIG killpoint_kills %d count\n", g_kills);
    printf("FIG killpoint_overlaps %d count\n", g_overlaps);
    return wk_servers_teardown(state);
}

int main(void)
{
    wk_seed("fault_killpoints");
    static int n1 = 1, n3 = 3;
    const struct CMUnitTest tests[] = {
        IT_CASE("one_node", kill_points, &n1),
        IT_CASE("three_nodes", kill_points, &n3),
    };
    return cmocka_run_group_tests(tests, wk_servers_setup, teardown);
}
