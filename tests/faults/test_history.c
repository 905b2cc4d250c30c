/*
 * test_history.c: the checkers of history.h, on histories written by hand, so that a
 * scenario that passes is known to pass because nothing happened, not because the
 * checker cannot see it. Each case writes the records of one violation (or of a
 * legitimate event that looks like one) and asserts what the report says.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "history.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MS 1000000LL /* nanoseconds */

static char g_path[256];
static hist_writer g_w;

static int setup(void **state)
{
    (void)state;
    const char *base = getenv("DLOCK_TEST_TMP");
    if (base == NULL || *base == '\0')
        base = "/tmp";
    /* This test starts no server, so the support library has not made the directory yet. */
    if (mkdir(base, 0755) < 0 && errno != EEXIST)
        base = "/tmp";
    snprintf(g_path, sizeof g_path, "%s/history-selftest-%ld.hist", base, (long)getpid());
    if (hist_create(g_path) < 0 || hist_open(&g_w, g_path, 0) < 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    hist_close(&g_w);
    unlink(g_path);
    return 0;
}

/* Start each case with an empty file. */
static void reset(void)
{
    hist_close(&g_w);
    assert_int_equal(hist_create(g_path), 0);
    assert_int_equal(hist_open(&g_w, g_path, 0), 0);
}

static void put_aux(int type, int worker, uint8_t tok, uint64_t fence, int64_t start_ms,
                    int64_t t_ms, int64_t deadline_ms, uint64_t value, int rc, uint64_t aux)
{
    hist_rec r;
    memset(&r, 0, sizeof r);
    r.type = type;
    r.t_ns = 1000 * MS + t_ms * MS;
    r.start_ns = 1000 * MS + start_ms * MS;
    r.deadline_ns = deadline_ms ? 1000 * MS + deadline_ms * MS : 0;
    r.fence = fence;
    r.value = value;
    r.aux = aux;
    r.rc = rc;
    r.token[0] = tok;
    r.token[15] = 0xee;
    hist_writer w = g_w;
    w.worker = worker;
    hist_write(&w, &r);
}

static void put(int type, int worker, uint8_t tok, uint64_t fence, int64_t start_ms, int64_t t_ms,
                int64_t deadline_ms, uint64_t value, int rc)
{
    put_aux(type, worker, tok, fence, start_ms, t_ms, deadline_ms, value, rc, 0);
}

/* One whole section: acquired at ok (called at inv), valid until dl, released at rel. */
static void section(int worker, uint8_t tok, uint64_t fence, int64_t inv, int64_t ok, int64_t dl,
                    int64_t exit, int64_t rel)
{
    put(HIST_ACQ_OK, worker, tok, fence, inv, ok, dl, 0, 0);
    put(HIST_EXIT, worker, tok, fence, exit, exit, dl, 0, 0);
    put(HIST_RELEASE, worker, tok, fence, rel, rel + 1, 0, 0, DLOCK_OK);
}

/* A register write of value sent at `at` (the lock valid until dl), and its outcome
 * one ms later: HIST_WRITE_OK, HIST_WRITE_REJECTED (refused for its fence), or 0 for
 * none (the worker died before the reply). */
static void write_rec(int worker, uint8_t tok, uint64_t fence, int64_t at, int64_t dl,
                      uint64_t value, int outcome)
{
    put(HIST_WRITE_INVOKE, worker, tok, fence, at, at, dl, value, 0);
    if (outcome != 0)
        put(outcome, worker, tok, fence, at, at + 1, dl, value,
            outcome == HIST_WRITE_REJECTED ? DLOCK_ERR_FENCED : 0);
}

static hist_report check(int64_t final)
{
    hist_log log;
    assert_int_equal(hist_load(g_path, &log), 0);
    hist_report rep;
    hist_check(&log, final, &rep);
    hist_free(&log);
    return rep;
}

static void test_clean_history(void **state)
{
    (void)state;
    reset();
    section(0, 1, 10, 0, 1, 100, 5, 6);
    section(1, 2, 11, 2, 8, 100, 12, 13);
    hist_report r = check(-1);
    assert_int_equal(r.sessions, 2);
    assert_int_equal(r.fence_regressions, 0);
    assert_int_equal(r.granted_overlaps, 0);
    assert_int_equal(r.believed_overlaps, 0);
}

static void test_granted_overlap(void **state)
{
    (void)state;
    reset();
    /* B is granted while A is valid and has not released. */
    section(0, 1, 10, 0, 1, 100, 5, 50);
    section(1, 2, 11, 2, 8, 100, 12, 13);
    hist_report r = check(-1);
    assert_int_equal(r.granted_overlaps, 1);
    assert_true(r.granted_overlap_max_ns >= 5 * MS);
    /* A's validity ended before B's grant: no overlap, however late A's section ran
     * (its release told LOST, as the servers must tell it then). */
    reset();
    put(HIST_ACQ_OK, 0, 1, 10, 0, 1, 7, 0, 0);
    put(HIST_EXIT, 0, 1, 10, 40, 40, 7, 0, 0);
    put(HIST_RELEASE, 0, 1, 10, 41, 42, 0, 0, DLOCK_ERR_LOST);
    section(1, 2, 11, 2, 8, 100, 12, 13);
    r = check(-1);
    assert_int_equal(r.granted_overlaps, 0);
    assert_int_equal(r.believed_overlaps, 2);
    assert_int_equal(r.late_sections, 1);
    /* The same, but the servers told the late A its release was of a lock it still
     * held: A held it until then, so B's grant overlaps it. */
    reset();
    section(0, 1, 10, 0, 1, 7, 40, 41);
    section(1, 2, 11, 2, 8, 100, 12, 13);
    assert_int_equal(check(-1).granted_overlaps, 1);
}

/* A holder killed inside dlock_release leaves no RELEASE record: from its
 * RELEASE_INVOKE on, the lock may be released, and the next grant is no overlap. */
static void test_killed_mid_release(void **state)
{
    (void)state;
    reset();
    put(HIST_ACQ_OK, 0, 1, 10, 0, 1, 100, 0, 0);
    put(HIST_EXIT, 0, 1, 10, 5, 5, 100, 0, 0);
    put(HIST_RELEASE_INVOKE, 0, 1, 10, 6, 6, 100, 0, 0);
    section(1, 2, 11, 2, 8, 100, 12, 13);
    hist_report r = check(-1);
    assert_int_equal(r.granted_overlaps, 0);
    /* Without it, the same history is an overlap: the checker is not blind. */
    reset();
    put(HIST_ACQ_OK, 0, 1, 10, 0, 1, 100, 0, 0);
    put(HIST_EXIT, 0, 1, 10, 5, 5, 100, 0, 0);
    section(1, 2, 11, 2, 8, 100, 12, 13);
    assert_int_equal(check(-1).granted_overlaps, 1);
}

static void test_lost_lock_reports_no_validity(void **state)
{
    (void)state;
    reset();
    /* A lock found lost says 0 ms left: its EXIT "deadline" equals its time and must not
     * stretch the granted interval. */
    put(HIST_ACQ_OK, 0, 1, 10, 0, 1, 7, 0, 0);
    put(HIST_EXIT, 0, 1, 10, 40, 40, 40, 0, 0);
    section(1, 2, 11, 2, 8, 100, 12, 13);
    hist_report r = check(-1);
    assert_int_equal(r.granted_overlaps, 0);
    assert_int_equal(r.late_sections, 1);
}

static void test_fence_regression(void **state)
{
    (void)state;
    reset();
    /* B asked after A returned, and got a smaller fence. */
    section(0, 1, 10, 0, 1, 4, 2, 3);
    section(1, 2, 9, 5, 6, 100, 7, 8);
    assert_int_equal(check(-1).fence_regressions, 1);
    /* Concurrent calls prove nothing by their start: B asked before A returned, and
     * was granted before A's (still running) call returned. */
    reset();
    section(0, 1, 10, 0, 6, 9, 7, 8);
    section(1, 2, 9, 0, 1, 4, 2, 3);
    assert_int_equal(check(-1).fence_regressions, 0);
    /* The handover of a blocking wait: B asked while A held the lock, and its call
     * returned after A had released; a smaller fence is a regression all the same. */
    reset();
    section(0, 1, 10, 1, 2, 100, 5, 6);
    section(1, 2, 9, 0, 9, 100, 10, 11);
    assert_int_equal(check(-1).fence_regressions, 1);
    /* The same with the larger fence: in order. */
    reset();
    section(0, 1, 10, 1, 2, 100, 5, 6);
    section(1, 2, 11, 0, 9, 100, 10, 11);
    assert_int_equal(check(-1).fence_regressions, 0);
}

static void test_stale_write_accepted(void **state)
{
    (void)state;
    reset();
    write_rec(1, 2, 11, 10, 100, 1, HIST_WRITE_OK);
    /* Sent after fence 11 was accepted, with fence 10: must be refused. */
    write_rec(0, 1, 10, 12, 5, 2, HIST_WRITE_OK);
    hist_report r = check(2);
    assert_int_equal(r.stale_accepted, 1);
    assert_int_equal(r.late_accepted, 1);
    assert_int_equal(r.lost_updates, 0);
    /* Refused properly instead. */
    reset();
    write_rec(1, 2, 11, 10, 100, 1, HIST_WRITE_OK);
    write_rec(0, 1, 10, 12, 5, 2, HIST_WRITE_REJECTED);
    r = check(1);
    assert_int_equal(r.stale_accepted, 0);
    assert_int_equal(r.stale_rejected, 1);
    assert_int_equal(r.spurious_rejections, 0);
}

static void test_spurious_rejection(void **state)
{
    (void)state;
    reset();
    write_rec(0, 1, 10, 12, 100, 1, HIST_WRITE_REJECTED);
    assert_int_equal(check(0).spurious_rejections, 1);
}

static void test_lost_update(void **state)
{
    (void)state;
    reset();
    /* Two overlapping holders both read 0 and wrote 1 (the lower fence first). */
    write_rec(0, 1, 10, 5, 100, 1, HIST_WRITE_OK);
    write_rec(1, 2, 11, 7, 100, 1, HIST_WRITE_OK);
    hist_report r = check(1);
    assert_int_equal(r.lost_updates, 1);
    assert_int_equal(r.duplicate_values, 1);
    /* A write whose worker died before the reply: counted as maybe applied. */
    reset();
    write_rec(0, 1, 10, 5, 100, 1, HIST_WRITE_OK);
    write_rec(1, 2, 11, 7, 100, 2, 0);
    r = check(2);
    assert_int_equal(r.writes_unknown, 1);
    assert_int_equal(r.lost_updates, 0);
    assert_int_equal(r.phantom, 0);
    /* A counter above every write that could have happened. */
    r = check(5);
    assert_int_equal(r.phantom, 3);
}

static void test_late_holder_told(void **state)
{
    (void)state;
    reset();
    put(HIST_ACQ_OK, 0, 1, 10, 0, 1, 7, 0, 0);
    put(HIST_EXIT, 0, 1, 10, 40, 40, 30, 0, 0);
    put(HIST_CHECK, 0, 1, 10, 41, 42, 30, 0, DLOCK_OK);
    put(HIST_RELEASE, 0, 1, 10, 43, 44, 0, 0, DLOCK_OK);
    hist_report r = check(-1);
    assert_int_equal(r.late_sections, 1);
    assert_int_equal(r.late_check_not_lost, 1);
    assert_int_equal(r.late_release_held, 1);
}

static void test_late_release_found_held(void **state)
{
    (void)state;
    /* A's validity ended at 7, its section at 40; B was granted at 20. A release that
     * found A's token still held means A held the lock past B's grant: an overlap. */
    for (int held = 0; held <= 1; held++) {
        reset();
        put(HIST_ACQ_OK, 0, 1, 10, 0, 1, 7, 0, 0);
        put(HIST_EXIT, 0, 1, 10, 40, 40, 30, 0, 0);
        /* LOST either way; aux 1: the servers still held the token (the holder's
         * clock had run its validity out, not theirs the lease). */
        put_aux(HIST_RELEASE, 0, 1, 10, 41, 42, 0, 0, DLOCK_ERR_LOST, (uint64_t)held);
        section(1, 2, 11, 2, 20, 100, 25, 26);
        hist_report r = check(-1);
        assert_int_equal(r.late_sections, 1);
        assert_int_equal(r.late_release_held, held);
        assert_int_equal(r.granted_overlaps, held);
    }
}

static void test_worker_resources(void **state)
{
    (void)state;
    reset();
    hist_rec r;
    memset(&r, 0, sizeof r);
    r.type = HIST_WORKER_END;
    r.fence = 5;
    r.value = 6;
    r.aux = (1ULL << 32) | 2;
    r.start_ns = 1000;
    r.deadline_ns = 1500;
    hist_write(&g_w, &r);
    hist_report rep = check(-1);
    assert_int_equal(rep.fd_leaks, 1);
    assert_int_equal(rep.thread_leaks, 1);
    assert_int_equal(rep.rss_growth_max_kb, 500);
}

static void test_percentile(void **state)
{
    (void)state;
    int64_t v[] = {5, 1, 4, 2, 3, 10, 9, 8, 7, 6};
    assert_int_equal(hist_percentile(v, 10, 50), 5);
    assert_int_equal(hist_percentile(v, 10, 99), 10);
    assert_int_equal(hist_percentile(v, 10, 0), 1);
    assert_int_equal(hist_percentile(v, 0, 50), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_history),
        cmocka_unit_test(test_granted_overlap),
        cmocka_unit_test(test_killed_mid_release),
        cmocka_unit_test(test_lost_lock_reports_no_validity),
        cmocka_unit_test(test_fence_regression),
        cmocka_unit_test(test_stale_write_accepted),
        cmocka_unit_test(test_spurious_rejection),
        cmocka_unit_test(test_lost_update),
        cmocka_unit_test(test_late_holder_told),
        cmocka_unit_test(test_late_release_found_held),
        cmocka_unit_test(test_worker_resources),
        cmocka_unit_test(test_percentile),
    };
    return cmocka_run_group_tests_name("fault_history", tests, setup, teardown);
}
