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

/* One step of a history written by hand, by a worker holding token tok with fence:
 * - SECTION: a whole section, acquired at ok (called at inv), valid until dl, its
 *   section ended at exit, released at rel;
 * - WRITE: a register write of value sent at `at` (the lock valid until dl), and its
 *   outcome one ms later: HIST_WRITE_OK, HIST_WRITE_REJECTED (refused for its fence),
 *   or 0 for none (the worker died before the reply);
 * - REC: one record of type, called at start, returned at t (the lock valid until dl),
 *   with rc and aux.
 * A kind of 0 ends a history. */
typedef struct step {
    char kind;
    int type, worker;
    uint8_t tok;
    uint64_t fence;
    int64_t t[5];
    uint64_t value, aux;
    int rc;
} step;
#define SECTION(who, token, f, inv, ok, dl, exit, rel)                                             \
    {                                                                                              \
        .kind = 'S', .t = {inv, ok, dl, exit, rel}, .worker = (who), .tok = (token), .fence = (f)  \
    }
#define WRITE(who, token, f, at, dl, v, outcome)                                                   \
    {                                                                                              \
        .kind = 'W', .t = {at, dl}, .type = (outcome), .worker = (who), .tok = (token),            \
        .fence = (f), .value = (v)                                                                 \
    }
#define REC(typ, who, token, f, start, end, dl, code, extra)                                       \
    {                                                                                              \
        .kind = 'R', .t = {start, end, dl}, .type = (typ), .worker = (who), .tok = (token),        \
        .fence = (f), .rc = (code), .aux = (extra)                                                 \
    }

static void write_step(const step *s)
{
    const int64_t *t = s->t;
    switch (s->kind) {
    case 'S':
        put_aux(HIST_ACQ_OK, s->worker, s->tok, s->fence, t[0], t[1], t[2], 0, 0, 0);
        put_aux(HIST_EXIT, s->worker, s->tok, s->fence, t[3], t[3], t[2], 0, 0, 0);
        put_aux(HIST_RELEASE, s->worker, s->tok, s->fence, t[4], t[4] + 1, 0, 0, DLOCK_OK, 0);
        break;
    case 'W':
        put_aux(HIST_WRITE_INVOKE, s->worker, s->tok, s->fence, t[0], t[0], t[1], s->value, 0, 0);
        if (s->type != 0)
            put_aux(s->type, s->worker, s->tok, s->fence, t[0], t[0] + 1, t[1], s->value,
                    s->type == HIST_WRITE_REJECTED ? DLOCK_ERR_FENCED : 0, 0);
        break;
    default:
        put_aux(s->type, s->worker, s->tok, s->fence, t[0], t[1], t[2], 0, s->rc, s->aux);
        break;
    }
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

/* A field of the report and what it must be: value, or at least value. A field of
 * NULL ends a list. */
typedef struct want {
    const char *field;
    size_t at, size;
    int64_t value;
    bool at_least;
} want;
#define WANT_IS(f, v, least)                                                                       \
    {                                                                                              \
        .field = #f, .at = offsetof(hist_report, f), .size = sizeof(((hist_report *)0)->f),        \
        .value = (v), .at_least = (least)                                                          \
    }
#define WANT(f, v)          WANT_IS(f, v, false)
#define WANT_AT_LEAST(f, v) WANT_IS(f, v, true)

/* A history and what the checkers must report on it, given the register's counter at
 * the end (final; -1: no register). */
typedef struct hcase {
    const char *name;
    step steps[10];
    int64_t final;
    want wants[5];
} hcase;

/* Worker 0 holds token 1 (fence 10) from 1 ms, releases at 6, takes it back from its
 * linger at 8 and releases again at 13. */
#define LINGERED                                                                                   \
    REC(HIST_ACQ_OK, 0, 1, 10, 0, 1, 100, 0, 0), REC(HIST_EXIT, 0, 1, 10, 5, 5, 100, 0, 0),        \
        REC(HIST_RELEASE_INVOKE, 0, 1, 10, 6, 6, 100, 0, 0),                                       \
        REC(HIST_RELEASE, 0, 1, 10, 6, 7, 0, DLOCK_OK, 0),                                         \
        REC(HIST_ACQ_OK, 0, 1, 10, 8, 8, 100, 0, 0), REC(HIST_EXIT, 0, 1, 10, 12, 12, 100, 0, 0),  \
        REC(HIST_RELEASE_INVOKE, 0, 1, 10, 13, 13, 100, 0, 0),                                     \
        REC(HIST_RELEASE, 0, 1, 10, 13, 14, 0, DLOCK_OK, 0)

static hcase cases[] = {
    {"clean_history",
     {SECTION(0, 1, 10, 0, 1, 100, 5, 6), SECTION(1, 2, 11, 2, 8, 100, 12, 13)},
     -1,
     {WANT(sessions, 2), WANT(fence_regressions, 0), WANT(granted_overlaps, 0),
      WANT(believed_overlaps, 0)}},
    /* B is granted while A is valid and has not released. */
    {"granted_overlap",
     {SECTION(0, 1, 10, 0, 1, 100, 5, 50), SECTION(1, 2, 11, 2, 8, 100, 12, 13)},
     -1,
     {WANT(granted_overlaps, 1), WANT_AT_LEAST(granted_overlap_max_ns, 5 * MS)}},
    /* A's validity ended before B's grant: no overlap, however late A's section ran
     * (its release told LOST, as the servers must tell it then). */
    {"granted_overlap_not_past_validity",
     {REC(HIST_ACQ_OK, 0, 1, 10, 0, 1, 7, 0, 0), REC(HIST_EXIT, 0, 1, 10, 40, 40, 7, 0, 0),
      REC(HIST_RELEASE, 0, 1, 10, 41, 42, 0, DLOCK_ERR_LOST, 0),
      SECTION(1, 2, 11, 2, 8, 100, 12, 13)},
     -1,
     {WANT(granted_overlaps, 0), WANT(believed_overlaps, 2), WANT(late_sections, 1)}},
    /* The same, but the servers told the late A its release was of a lock it still
     * held: A held it until then, so B's grant overlaps it. */
    {"granted_overlap_held_late",
     {SECTION(0, 1, 10, 0, 1, 7, 40, 41), SECTION(1, 2, 11, 2, 8, 100, 12, 13)},
     -1,
     {WANT(granted_overlaps, 1)}},
    /* A holder killed inside dlock_release leaves no RELEASE record: from its
     * RELEASE_INVOKE on, the lock may be released, and the next grant is no overlap. */
    {"killed_mid_release",
     {REC(HIST_ACQ_OK, 0, 1, 10, 0, 1, 100, 0, 0), REC(HIST_EXIT, 0, 1, 10, 5, 5, 100, 0, 0),
      REC(HIST_RELEASE_INVOKE, 0, 1, 10, 6, 6, 100, 0, 0), SECTION(1, 2, 11, 2, 8, 100, 12, 13)},
     -1,
     {WANT(granted_overlaps, 0)}},
    /* Without it, the same history is an overlap: the checker is not blind. */
    {"killed_before_release",
     {REC(HIST_ACQ_OK, 0, 1, 10, 0, 1, 100, 0, 0), REC(HIST_EXIT, 0, 1, 10, 5, 5, 100, 0, 0),
      SECTION(1, 2, 11, 2, 8, 100, 12, 13)},
     -1,
     {WANT(granted_overlaps, 1)}},
    /* A lock found lost says 0 ms left: its EXIT "deadline" equals its time and must not
     * stretch the granted interval. */
    {"lost_lock_reports_no_validity",
     {REC(HIST_ACQ_OK, 0, 1, 10, 0, 1, 7, 0, 0), REC(HIST_EXIT, 0, 1, 10, 40, 40, 40, 0, 0),
      SECTION(1, 2, 11, 2, 8, 100, 12, 13)},
     -1,
     {WANT(granted_overlaps, 0), WANT(late_sections, 1)}},
    /* A lock that lingers is taken back with its token (and fence) and released again:
     * one session, held until its last release, so B's grant after it is no overlap and
     * its fence no regression... */
    {"linger_retake",
     {LINGERED, SECTION(1, 2, 11, 2, 20, 100, 25, 26)},
     -1,
     {WANT(sessions, 2), WANT(fence_regressions, 0), WANT(granted_overlaps, 0)}},
    /* ...but B granted between the first release and the last is: the lock was A's. */
    {"linger_retake_overlap",
     {LINGERED, SECTION(1, 2, 11, 2, 10, 100, 25, 26)},
     -1,
     {WANT(granted_overlaps, 1)}},
    /* A grant already over when it returned (deadline 0: its lock found lost at once)
     * ends at its grant: B, granted before it with a lower fence, is no regression. */
    {"grant_lost_at_once",
     {SECTION(1, 2, 11, 0, 1, 100, 5, 6), REC(HIST_ACQ_OK, 0, 1, 20, 10, 11, 0, 0, 0)},
     -1,
     {WANT(sessions, 2), WANT(fence_regressions, 0)}},
    {"late_holder_told",
     {REC(HIST_ACQ_OK, 0, 1, 10, 0, 1, 7, 0, 0), REC(HIST_EXIT, 0, 1, 10, 40, 40, 30, 0, 0),
      REC(HIST_CHECK, 0, 1, 10, 41, 42, 30, DLOCK_OK, 0),
      REC(HIST_RELEASE, 0, 1, 10, 43, 44, 0, DLOCK_OK, 0)},
     -1,
     {WANT(late_sections, 1), WANT(late_check_not_lost, 1), WANT(late_release_held, 1)}},
};

/* One case: its history in an empty file, then every field it names checked. */
static void run_case(void **state)
{
    const hcase *c = *state;
    reset();
    for (size_t i = 0; i < sizeof c->steps / sizeof c->steps[0] && c->steps[i].kind != 0; i++)
        write_step(&c->steps[i]);
    hist_report rep = check(c->final);
    for (size_t i = 0; i < sizeof c->wants / sizeof c->wants[0] && c->wants[i].field; i++) {
        const want *w = &c->wants[i];
        const char *at = (const char *)&rep + w->at;
        int64_t got;
        if (w->size == sizeof(int)) {
            int v;
            memcpy(&v, at, sizeof v);
            got = v;
        } else {
            memcpy(&got, at, sizeof got);
        }
        if (w->at_least ? got < w->value : got != w->value)
            fail_msg("%s: %s is %lld, want %s%lld", c->name, w->field, (long long)got,
                     w->at_least ? "at least " : "", (long long)w->value);
    }
}

/* Fences in order or not: A's section and B's, and whether B's fence is a regression. */
static const struct {
    step a, b;
    int regressions;
} fence_cases[] = {
    /* B asked after A returned, and got a smaller fence. */
    {SECTION(0, 1, 10, 0, 1, 4, 2, 3), SECTION(1, 2, 9, 5, 6, 100, 7, 8), 1},
    /* Concurrent calls prove nothing by their start: B asked before A returned, and
     * was granted before A's (still running) call returned. */
    {SECTION(0, 1, 10, 0, 6, 9, 7, 8), SECTION(1, 2, 9, 0, 1, 4, 2, 3), 0},
    /* The handover of a blocking wait: B asked while A held the lock, and its call
     * returned after A had released; a smaller fence is a regression all the same. */
    {SECTION(0, 1, 10, 1, 2, 100, 5, 6), SECTION(1, 2, 9, 0, 9, 100, 10, 11), 1},
    /* The same with the larger fence: in order. */
    {SECTION(0, 1, 10, 1, 2, 100, 5, 6), SECTION(1, 2, 11, 0, 9, 100, 10, 11), 0},
};

static void test_fence_order(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof fence_cases / sizeof fence_cases[0]; i++) {
        reset();
        write_step(&fence_cases[i].a);
        write_step(&fence_cases[i].b);
        int got = check(-1).fence_regressions;
        if (got != fence_cases[i].regressions)
            fail_msg("fence case %zu: %d regressions, want %d", i, got, fence_cases[i].regressions);
    }
}

/* Two register writes (the second one may be missing), the counter at the end, and
 * what the checkers of writes must count: stale writes accepted, accepted late, stale
 * writes refused, refusals without a cause, lost updates, values written twice,
 * writes of unknown outcome, and phantom writes. */
static const struct {
    step a, b;
    int64_t final;
    int64_t counts[8];
} write_cases[] = {
    /* Sent after fence 11 was accepted, with fence 10: must be refused. */
    {WRITE(1, 2, 11, 10, 100, 1, HIST_WRITE_OK),
     WRITE(0, 1, 10, 12, 5, 2, HIST_WRITE_OK),
     2,
     {1, 1, 0, 0, 0, 0, 0, 0}},
    /* Refused properly instead. */
    {WRITE(1, 2, 11, 10, 100, 1, HIST_WRITE_OK),
     WRITE(0, 1, 10, 12, 5, 2, HIST_WRITE_REJECTED),
     1,
     {0, 0, 1, 0, 0, 0, 0, 0}},
    /* Refused with no higher fence accepted first. */
    {WRITE(0, 1, 10, 12, 100, 1, HIST_WRITE_REJECTED), {0}, 0, {0, 0, 1, 1, 0, 0, 0, 0}},
    /* Two overlapping holders both read 0 and wrote 1 (the lower fence first). */
    {WRITE(0, 1, 10, 5, 100, 1, HIST_WRITE_OK),
     WRITE(1, 2, 11, 7, 100, 1, HIST_WRITE_OK),
     1,
     {0, 0, 0, 0, 1, 1, 0, 0}},
    /* A write whose worker died before the reply: counted as maybe applied. */
    {WRITE(0, 1, 10, 5, 100, 1, HIST_WRITE_OK),
     WRITE(1, 2, 11, 7, 100, 2, 0),
     2,
     {0, 0, 0, 0, 0, 0, 1, 0}},
    /* The same with a counter above every write that could have happened. */
    {WRITE(0, 1, 10, 5, 100, 1, HIST_WRITE_OK),
     WRITE(1, 2, 11, 7, 100, 2, 0),
     5,
     {0, 0, 0, 0, 0, 0, 1, 3}},
};

static void test_writes(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof write_cases / sizeof write_cases[0]; i++) {
        reset();
        write_step(&write_cases[i].a);
        if (write_cases[i].b.kind != 0)
            write_step(&write_cases[i].b);
        hist_report r = check(write_cases[i].final);
        const int64_t got[8] = {r.stale_accepted,      r.late_accepted, r.stale_rejected,
                                r.spurious_rejections, r.lost_updates,  r.duplicate_values,
                                r.writes_unknown,      r.phantom};
        for (int k = 0; k < 8; k++)
            if (got[k] != write_cases[i].counts[k])
                fail_msg("write case %zu: count %d is %lld, want %lld", i, k, (long long)got[k],
                         (long long)write_cases[i].counts[k]);
    }
}

/* A's validity ended at 7, its section at 40; B was granted at 20. A release that
 * found A's token still held means A held the lock past B's grant: an overlap. */
static void test_late_release_found_held(void **state)
{
    (void)state;
    for (int held = 0; held <= 1; held++) {
        /* LOST either way; aux 1: the servers still held the token (the holder's clock
         * had run its validity out, not theirs the lease). */
        const step history[] = {
            REC(HIST_ACQ_OK, 0, 1, 10, 0, 1, 7, 0, 0),
            REC(HIST_EXIT, 0, 1, 10, 40, 40, 30, 0, 0),
            REC(HIST_RELEASE, 0, 1, 10, 41, 42, 0, DLOCK_ERR_LOST, (uint64_t)held),
            SECTION(1, 2, 11, 2, 20, 100, 25, 26),
        };
        reset();
        for (size_t i = 0; i < sizeof history / sizeof history[0]; i++)
            write_step(&history[i]);
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
    const struct CMUnitTest own[] = {
        cmocka_unit_test(test_fence_order),
        cmocka_unit_test(test_writes),
        cmocka_unit_test(test_late_release_found_held),
        cmocka_unit_test(test_worker_resources),
        cmocka_unit_test(test_percentile),
    };
    /* A test a case of the table, named after it, then those of their own. */
    enum { CASES = sizeof cases / sizeof cases[0], OWN = sizeof own / sizeof own[0] };
    struct CMUnitTest tests[CASES + OWN];
    for (size_t i = 0; i < CASES; i++)
        tests[i] = (struct CMUnitTest){cases[i].name, run_case, NULL, NULL, &cases[i]};
    memcpy(&tests[CASES], own, sizeof own);
    return cmocka_run_group_tests_name("fault_history", tests, setup, teardown);
}
