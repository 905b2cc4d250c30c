/*
 * test_contention.c: scenario 1 of the fault suite (docs/testing.md), the contention baseline.
 *
 * Setup: 4 worker processes, one lock, N = 1 and N = 3 lock servers, and a fenced
 * register on a separate resource server. Each worker takes the lock (blocking wait),
 * reads the register, writes read + 1 through dlock_fenced_set, and releases, 100 times.
 * No fault: this is the reference every faulty scenario is compared with.
 *
 * Asserted (history.h, every checker): fences increase in acquisition order; granted
 * and even believed intervals never overlap; no write is refused or lost (the counter
 * ends at exactly 400); no lock key is left; every worker's fds and threads are back
 * to their baseline, its RSS grew by less than 2 MiB.
 * Figures: sections per second, and the checkers' counts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"

#include "history.h"
#include "workers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORKERS  4
#define SECTIONS 100

/* One function for every case; its state is the number of lock servers. */
static void test_contention(void **state)
{
    int n = *(int *)*state;
    wk_scenario sc;
    assert_int_equal(wk_scenario_open_n(&sc, n, "contended", "contention"), 0);
    wk_config cfg = sc.cfg;
    cfg.sections = SECTIONS;
    cfg.ttl_ms = 2000;
    cfg.work_ms = 1;
    cfg.verbose = true;
    pid_t pids[WORKERS];
    int64_t t0 = dh_now_ms();
    assert_int_equal(wk_spawn_all(&cfg, WORKERS, pids), 0);
    assert_int_equal(wk_reap_all(pids, WORKERS, 120000 * dh_slack()), 0);
    int64_t took = dh_now_ms() - t0;
    printf("FIG %s_sections_per_s %.0f sections/s\n", sc.fig,
           WORKERS * SECTIONS * 1000.0 / (double)(took > 0 ? took : 1));

    hist_report rep;
    assert_int_equal(wk_scenario_judge(&sc, &rep), 0);
    assert_int_equal(wk_safety_violations(&rep), 0);
    assert_int_equal(rep.sessions, WORKERS * SECTIONS);
    assert_int_equal(rep.acquire_fails, 0);
    assert_int_equal(rep.believed_overlaps, 0);
    assert_int_equal(rep.late_sections, 0);
    assert_int_equal(rep.valid_release_not_ok, 0);
    assert_int_equal(rep.writes_accepted, WORKERS * SECTIONS);
    assert_int_equal(rep.stale_rejected, 0);
    assert_int_equal(rep.lost_updates, 0);
    assert_int_equal(rep.duplicate_values, 0);
    assert_int_equal(rep.workers_ended, WORKERS);
    assert_true(rep.rss_growth_max_kb < wk_rss_bound_kb());
    assert_int_equal(hist_keys_left(wk_srv, n, sc.name, 100), 0);
    wk_scenario_close(&sc);
}

int main(void)
{
    static int n1 = 1, n3 = 3;
    const struct CMUnitTest tests[] = {
        IT_CASE("test_contention_n1", test_contention, &n1),
        IT_CASE("test_contention_n3", test_contention, &n3),
    };
    return cmocka_run_group_tests_name("fault_contention", tests, wk_servers_setup,
                                       wk_servers_teardown);
}
