/*
 * test_pause.c: scenario 3 of the fault suite (docs/testing.md), a holder paused past its lease.
 *
 * Setup: 4 worker processes contend for one lock (ttl 500 ms, blocking wait, 30 ms of
 * work between the register's read and its write), renewal off (N = 1) and on (N = 3).
 * Fault: every second or so the test SIGSTOPs the worker in its section, inside its
 * work, for 1.5 x ttl (a GC pause, a swap storm), then SIGCONTs it. The lease runs out
 * meanwhile (renewal cannot help: its thread is stopped with the process), another
 * worker takes the lock and writes; the paused one resumes believing it still holds the
 * lock, and writes with its old fence.
 *
 * Asserted:
 *   - every stale write is refused by the register (history checker (1)); none is lost;
 *   - granted intervals still never overlap: validity ends before the lease does, pause
 *     or not (checker (2));
 *   - on resume the paused handle reports LOST: dlock_check and dlock_release say
 *     DLOCK_ERR_LOST, and its release leaves the new holder's key alone (every holder
 *     that stayed within its validity released with DLOCK_OK);
 *   - no key left, no fd or thread leaked by any worker.
 * Figures: the believed-overlap rate (sections whose [acquired, section exit] overlaps
 * another holder's), stale writes refused, and 0 stale writes accepted.
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
#define TTL_MS  500
#define WORK_MS 30
#define PAUSES  4

/* A case: lock servers, and whether the workers renew their leases. */
typedef struct pause_case {
    int n, renew;
} pause_case;

static void test_pause(void **state)
{
    const pause_case *c = *state;
    int n = c->n, renew = c->renew;
    char name[32], fig[48];
    snprintf(name, sizeof name, "pause-n%d-r%d", n, renew);
    snprintf(fig, sizeof fig, "pause_n%d_renew_%s", n, renew ? "on" : "off");
    wk_scenario sc;
    assert_int_equal(wk_scenario_open(&sc, n, name, fig), 0);
    wk_shared *sh = sc.sh;
    wk_config cfg = sc.cfg;
    cfg.ttl_ms = TTL_MS;
    cfg.work_ms = WORK_MS;
    cfg.auto_renew = renew;
    cfg.check_when_late = true;
    pid_t pids[WORKERS];
    assert_int_equal(wk_spawn_all(&cfg, WORKERS, pids), 0);

    int paused = 0, missed = 0;
    while (paused < PAUSES && missed < 50) {
        dh_sleep_ms(wk_rand(300, 800));
        /* The worker in its section, paused inside its work (after its read). */
        int victim = wk_wait_in_section(sh, pids, WORKERS, 5000 * dh_slack());
        assert_true(victim >= 0);
        uint64_t fence = atomic_load(&sh->fence[victim]);
        dh_sleep_ms(wk_rand(2, WORK_MS - 10));
        /* Stopped, then checked: a section that ended just before the signal landed is
         * a miss, not a pause (it could not make a late section). */
        int in = wk_stop_in_section(sh, pids[victim], victim, fence);
        assert_true(in >= 0);
        if (in == 0) {
            missed++;
            continue;
        }
        hist_put(&sc.hw, HIST_FAULT, HIST_F_PAUSE, 0, NULL, fence, (uint64_t)pids[victim]);
        dh_sleep_ms(TTL_MS * 3 / 2);
        kill(pids[victim], SIGCONT);
        hist_put(&sc.hw, HIST_FAULT, HIST_F_RESUME, 0, NULL, fence, (uint64_t)pids[victim]);
        paused++;
    }
    dh_sleep_ms(TTL_MS);
    wk_stop_fire(&sc.stop);
    assert_int_equal(wk_reap_all(pids, WORKERS, 10000 * dh_slack()), 0);
    printf("INFO %s: %d pauses of %d ms in a section (%d attempts missed it)\n", fig, paused,
           TTL_MS * 3 / 2, missed);
    assert_int_equal(paused, PAUSES);

    hist_report rep;
    assert_int_equal(wk_scenario_judge(&sc, &rep), 0);
    printf("INFO %s: late sections %d: check not LOST %d, release found it held %d; holders "
           "within validity whose release was not OK: %d; on_lost calls %d\n",
           fig, rep.late_sections, rep.late_check_not_lost, rep.late_release_held,
           rep.valid_release_not_ok, rep.lost_callbacks);
    /* Fences and the register: no stale write accepted, none refused without reason;
     * validity is never overstated, even across a pause (no granted overlap). */
    assert_int_equal(wk_safety_violations(&rep), 0);
    assert_int_equal(rep.spurious_rejections, 0);
    assert_true(rep.stale_rejected >= 1);
    /* A lost update needs a late write accepted before the next holder wrote (the
     * limit of a fenced read-modify-write, history.c); the pause is long enough that
     * the next holder has written by then, but under a slow machine that is timing. */
    assert_true(rep.lost_updates <= rep.late_accepted);
    /* Every pause made a late section, which was told LOST, and whose release left
     * the next holder's key alone. */
    assert_true(rep.late_sections >= PAUSES);
    assert_int_equal(rep.late_check_not_lost, 0);
    /* A pause outlasts the lease on the servers too, so no paused holder's release
     * can have found its token still there (a lease kept too long, or a release that
     * matched another holder's token, would); only a section made late by a slow
     * machine rather than a pause may have. */
    assert_true(rep.late_release_held <= rep.late_sections - paused);
    assert_int_equal(rep.valid_release_not_ok, 0);
    /* on_lost never cries wolf: it runs only for renewed holders, and at most once per
     * late section (a paused holder's renewal thread resumes with it and may find the
     * token gone first; or its own dlock_check does, which calls no callback). */
    if (renew)
        assert_true(rep.lost_callbacks <= rep.late_sections);
    else
        assert_int_equal(rep.lost_callbacks, 0);
    /* The hazard itself happened: paused holders believed they held the lock. */
    assert_true(rep.believed_overlaps >= 2);
    assert_int_equal(hist_keys_left(wk_srv, n, name, TTL_MS * dh_slack()), 0);
    wk_scenario_close(&sc);
}

int main(void)
{
    wk_seed("fault_pause");
    static pause_case off_n1 = {1, 0}, on_n3 = {3, 1};
    const struct CMUnitTest tests[] = {
        IT_CASE("test_pause_renew_off_n1", test_pause, &off_n1),
        IT_CASE("test_pause_renew_on_n3", test_pause, &on_n3),
    };
    return cmocka_run_group_tests_name("fault_pause", tests, wk_servers_setup, wk_servers_teardown);
}
