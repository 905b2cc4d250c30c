/*
 * test_soak.c: the soak of the fault suite (docs/testing.md, scenario 16): 10 minutes of mixed
 * faults against 4 worker processes and 3 lock servers, judged by every checker of
 * history.h. Not in any CI tier: `ctest -L soak` (label "soak" only). Set
 * DLOCK_SOAK_SECONDS to run it for less (or more) than 600 s.
 *
 * Setup: 3 independent masters with restart-aware voting STRICT in every worker (a
 * worker started after a crash is a fresh client: STRICT distrusts any node younger
 * than the longest lease, so a restart cannot slip past it), max lease 1 s; 4 workers
 * (ttl 800 ms, blocking wait, 20 ms of work between the register's read and its write),
 * two with renewal on, two without. Faults, one every 0.5 to 1.5 s, at random:
 *   - the worker in its section SIGSTOPped for 1.5 x ttl;
 *   - the worker in its section SIGKILLed (a new one takes its place);
 *   - a lock server SIGKILLed and restarted at once, empty;
 *   - a lock server SIGSTOPped for 50 to 300 ms;
 *   - SCRIPT FLUSH on a lock server.
 * None of these may break the guarantees (docs/guarantees.md): clock jumps and
 * failovers, which do, have their own scenarios.
 *
 * Asserted at the end: no fence regression; no granted-interval overlap; no stale write
 * accepted and no write refused without reason; a lost update only where a paused
 * holder's late write was accepted before the next holder's (the limit of a fenced
 * read-modify-write: history.c); every late holder told LOST; no lock key left; no fd
 * or thread leaked by the workers that ended normally.
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
#define TTL_MS  800

/* The shared servers, then a pause: STRICT distrusts nodes younger than the max lease,
 * so they age first. */
static int setup(void **state)
{
    if (wk_servers_setup(state) < 0)
        return -1;
    dh_sleep_ms(1100);
    return 0;
}

static long soak_seconds(void)
{
    const char *v = getenv("DLOCK_SOAK_SECONDS");
    long s = v && *v ? strtol(v, NULL, 10) : 600;
    return s > 0 ? s : 600;
}

enum { F_PAUSE, F_KILL, F_NODE_RESTART, F_NODE_PAUSE, F_FLUSH, F_KINDS };
static const char *const fault_names[F_KINDS] = {"holder_pauses", "holder_kills", "node_restarts",
                                                 "node_pauses", "script_flushes"};

static void test_soak(void **state)
{
    (void)state;
    long seconds = soak_seconds();
    wk_scenario sc;
    assert_int_equal(wk_scenario_open(&sc, WK_NODES, "soak", "soak"), 0);
    wk_shared *sh = sc.sh;
    hist_writer *hw = &sc.hw;
    wk_config cfg = sc.cfg;
    cfg.ttl_ms = TTL_MS;
    cfg.work_ms = 20;
    cfg.check_when_late = true;
    cfg.restart_voting = DLOCK_RESTART_STRICT;
    cfg.max_lease_ms = 1000;
    pid_t pids[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        wk_config w = cfg;
        w.id = i;
        w.auto_renew = i < 2;
        pids[i] = wk_spawn(&w);
        assert_true(pids[i] > 0);
    }

    int count[F_KINDS] = {0};
    int64_t t_end = dh_now_ms() + seconds * 1000;
    while (dh_now_ms() < t_end) {
        dh_sleep_ms(wk_rand(500, 1500));
        int kind = (int)wk_rand(0, F_KINDS - 1);
        int node = (int)wk_rand(0, 2);
        int v = wk_in_section(sh, pids, WORKERS);
        switch (kind) {
        case F_PAUSE:
            if (v < 0)
                continue;
            kill(pids[v], SIGSTOP);
            hist_fault(hw, HIST_F_PAUSE, (uint64_t)pids[v]);
            dh_sleep_ms(TTL_MS * 3 / 2);
            kill(pids[v], SIGCONT);
            hist_fault(hw, HIST_F_RESUME, (uint64_t)pids[v]);
            break;
        case F_KILL: {
            if (v < 0)
                continue;
            kill(pids[v], SIGKILL);
            hist_fault(hw, HIST_F_KILL, (uint64_t)pids[v]);
            wk_reap(pids[v], 2000);
            atomic_store(&sh->in_section[v], 0);
            wk_config w = cfg;
            w.id = v;
            w.auto_renew = v < 2;
            pids[v] = wk_spawn(&w);
            assert_true(pids[v] > 0);
            break;
        }
        case F_NODE_RESTART:
            hist_fault(hw, HIST_F_SERVER_KILL, (uint64_t)node);
            assert_int_equal(dh_server_restart(&wk_srv[node]), 0);
            hist_fault(hw, HIST_F_SERVER_START, (uint64_t)node);
            break;
        case F_NODE_PAUSE:
            dh_server_pause(&wk_srv[node]);
            hist_fault(hw, HIST_F_SERVER_PAUSE, (uint64_t)node);
            dh_sleep_ms(wk_rand(50, 300));
            dh_server_resume(&wk_srv[node]);
            hist_fault(hw, HIST_F_SERVER_RESUME, (uint64_t)node);
            break;
        default: {
            redisReply *r = dh_cmd(&wk_srv[node], "SCRIPT FLUSH");
            freeReplyObject(r);
            break;
        }
        }
        count[kind]++;
    }
    dh_sleep_ms(2 * TTL_MS);
    wk_stop_fire(&sc.stop);
    assert_int_equal(wk_reap_all(pids, WORKERS, 20000 * dh_slack()), 0);
    printf("INFO soak: %ld s\n", seconds);
    for (int k = 0; k < F_KINDS; k++)
        printf("FIG soak_%s %d count\n", fault_names[k], count[k]);

    hist_report rep;
    assert_int_equal(wk_scenario_judge(&sc, &rep), 0);
    assert_true(rep.sessions > 0);
    assert_int_equal(wk_safety_violations(&rep), 0);
    assert_int_equal(rep.spurious_rejections, 0);
    assert_true(rep.lost_updates <= rep.late_accepted);
    assert_int_equal(rep.late_check_not_lost, 0);
    assert_int_equal(rep.late_release_not_lost, 0);
    assert_int_equal(hist_keys_left(wk_srv, WK_NODES, "soak", 2 * TTL_MS * dh_slack()), 0);
    wk_scenario_close(&sc);
}

int main(void)
{
    wk_seed("fault_soak");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_soak),
    };
    return cmocka_run_group_tests_name("fault_soak", tests, setup, wk_servers_teardown);
}
