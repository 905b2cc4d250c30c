/*
 * test_linger.c: holders that linger (dlock_opts.linger_ms), paused and killed at any
 * moment: in their sections, while their releases linger, while they take the lock
 * back (docs/waiting.md, "Lingering").
 *
 * A lingering release leaves the key ours, and the next acquire takes it back without
 * a round trip while the last retake vouches for the queue and half the lease is left.
 * So the dangerous moment is a process paused while its lock lingers: the lease runs
 * out on the server, another worker takes the name, and the paused one, resumed, must
 * not take back what it no longer holds. Its clock (CLOCK_BOOTTIME) counts the pause,
 * so its handle's validity is over and the retake goes to the server, which says the
 * token is not ours.
 *
 * Setup: 4 worker processes on one server (lingering needs one), ttl 1 s, linger_ms
 * 50 (both times the slack), 2 ms of work between the register's read and its write,
 * blocking waits, renewal off. Faults from the test, on a random worker every 30 to 150
 * ms, in a cycle of 10: 2 pauses (SIGSTOP) of 1.5 x the ttl, 3 pauses of half the
 * linger, 1 SIGKILL (another worker is started in its place), 4 none. Each run lasts
 * 3 s (times the slack) and at least one cycle.
 *
 * Asserted, by the history checkers (a retake is the same token's session going on,
 * which ends with its last release): no two grants overlapping in real time, no fence
 * regression, no stale write accepted, lost updates only from writes a kill left
 * unknown; no key left after the ttl (dlock_client_free releases what lingers). And
 * that it was exercised: more sections than sessions (retakes), pauses and kills.
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
#include <sys/wait.h>
#include <unistd.h>

#define WORKERS   4
#define TTL_MS    1000
#define LINGER_MS 50
#define WORK_MS   2
#define RUN_MS    3000
#define CYCLE     10

static void lingering_holders(void **state)
{
    (void)state;
    wk_scenario sc;
    assert_int_equal(wk_scenario_open(&sc, 1, "linger", "linger"), 0);
    wk_config cfg = sc.cfg;
    int64_t slack = dh_slack();
    cfg.ttl_ms = TTL_MS * slack;
    cfg.linger_ms =
        LINGER_MS * slack > DLOCK_LINGER_MAX_MS ? DLOCK_LINGER_MAX_MS : LINGER_MS * slack;
    cfg.work_ms = WORK_MS;
    pid_t pids[WORKERS];
    assert_int_equal(wk_spawn_all(&cfg, WORKERS, pids), 0);

    long long_pauses = 0, short_pauses = 0, kills = 0, faults = 0;
    int64_t t0 = dh_now_ms(), until = t0 + RUN_MS * slack;
    while (dh_now_ms() < until || faults < CYCLE) {
        dh_sleep_ms(wk_rand(30, 150));
        int v = (int)wk_rand(0, WORKERS - 1);
        switch (faults++ % CYCLE) {
        case 0:
        case 5:
            long_pauses++;
            kill(pids[v], SIGSTOP);
            dh_sleep_ms(cfg.ttl_ms * 3 / 2);
            kill(pids[v], SIGCONT);
            break;
        case 2:
        case 4:
        case 8:
            short_pauses++;
            kill(pids[v], SIGSTOP);
            dh_sleep_ms(cfg.linger_ms / 2);
            kill(pids[v], SIGCONT);
            break;
        case 6:
            kills++;
            kill(pids[v], SIGKILL);
            assert_int_equal(wk_reap(pids[v], 2000 * slack), 128 + SIGKILL);
            pids[v] = wk_scenario_replace(&sc, &cfg, v, pids[v]);
            assert_true(pids[v] > 0);
            break;
        default:
            break;
        }
    }
    wk_stop_fire(&sc.stop);
    assert_int_equal(wk_reap_all(pids, WORKERS, 10000 * slack), 0);

    long sections = 0;
    for (int i = 0; i < WORKERS; i++)
        sections += atomic_load(&sc.sh->sections[i]);
    hist_report rep;
    assert_int_equal(wk_scenario_judge(&sc, &rep), 0);
    printf("FIG linger_sections %ld count\n", sections);
    printf("FIG linger_sessions %d count\n", rep.sessions);
    printf("FIG linger_long_pauses %ld count\n", long_pauses);
    printf("FIG linger_short_pauses %ld count\n", short_pauses);
    printf("FIG linger_kills %ld count\n", kills);
    assert_int_equal(wk_safety_violations(&rep), 0);
    assert_true(rep.lost_updates <= rep.writes_unknown);
    /* Retakes happened (sections of one token after the first), and the faults. */
    assert_true(sections > rep.sessions);
    assert_true(long_pauses >= 2 && short_pauses >= 3 && kills >= 1);
    assert_int_equal(hist_keys_left(wk_srv, 1, sc.name, cfg.ttl_ms), 0);
    wk_scenario_close(&sc);
}

int main(void)
{
    wk_seed("fault_linger");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lingering_holders),
    };
    return cmocka_run_group_tests(tests, wk_servers_setup, wk_servers_teardown);
}
