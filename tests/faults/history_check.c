/*
 * history_check.c: the checkers of the fault suite's history (history.h): fences,
 * granted and believed intervals, writes and lost updates, the workers' resources;
 * their report as FIG lines, and the overlaps printed for a post-mortem.
 *
 * The checkers never trust the file order across processes (a process can be
 * descheduled between an event and its record); they compare timestamps, and only in
 * the direction that cannot produce false alarms: an event is known to precede
 * another when the first one's call returned before the second one's call was made.
 * The sessions they judge are rebuilt by hist_sessions (history.c).
 */
#include "history.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A point in time with a fence, for "the highest fence known before time t". */
typedef struct tf {
    int64_t t;
    uint64_t f;
} tf;

static int cmp_tf(const void *a, const void *b)
{
    const tf *x = a, *y = b;
    return (x->t > y->t) - (x->t < y->t);
}

/* Sort by time and turn f into the running maximum. */
static void prefix_max(tf *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_tf);
    for (size_t i = 1; i < n; i++)
        if (v[i - 1].f > v[i].f)
            v[i].f = v[i - 1].f;
}

/* Highest fence among the entries with t < before (0 when none). */
static uint64_t max_before(const tf *v, size_t n, int64_t before)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid].t < before)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo ? v[lo - 1].f : 0;
}

typedef struct span {
    int64_t a, b; /* [a, b) */
    long s;       /* session index */
} span;

static int cmp_span(const void *x, const void *y)
{
    const span *p = x, *q = y;
    return (p->a > q->a) - (p->a < q->a);
}

/* Sweep spans sorted by start: count the spans that begin before an earlier span
 * ended, the longest such overlap, the total overlapped time, and mark the sessions
 * involved in `hit` (may be NULL). */
static int sweep(span *v, size_t n, int64_t *max_ns, int64_t *total_ns, bool *hit)
{
    qsort(v, n, sizeof *v, cmp_span);
    int count = 0;
    int64_t end = INT64_MIN;
    long end_s = -1;
    for (size_t i = 0; i < n; i++) {
        if (v[i].a < end) {
            int64_t o = (v[i].b < end ? v[i].b : end) - v[i].a;
            count++;
            if (max_ns && o > *max_ns)
                *max_ns = o;
            if (total_ns)
                *total_ns += o;
            if (hit) {
                hit[v[i].s] = true;
                hit[end_s] = true;
            }
        }
        if (v[i].b > end) {
            end = v[i].b;
            end_s = v[i].s;
        }
    }
    return count;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* (1b) and (4): the register's writes. */
static void check_writes(const hist_log *log, int64_t final_value, hist_report *rep)
{
    size_t n = log->n;
    tf *acc = calloc(n + 1, sizeof *acc);   /* accepted writes: completion, fence */
    tf *sent = calloc(n + 1, sizeof *sent); /* every write sent: invoke, fence */
    uint64_t *vals = calloc(n + 1, sizeof *vals);
    if (!acc || !sent || !vals) {
        free(acc);
        free(sent);
        free(vals);
        return;
    }
    size_t na = 0, ns = 0, nv = 0;
    int invokes = 0, rejected = 0;
    for (size_t i = 0; i < n; i++) {
        const hist_rec *r = &log->r[i];
        if (r->type == HIST_WRITE_INVOKE)
            invokes++;
        if (r->type == HIST_WRITE_OK) {
            acc[na++] = (tf){r->t_ns, r->fence};
            vals[nv++] = r->value;
            if (r->deadline_ns != 0 && r->start_ns > r->deadline_ns)
                rep->late_accepted++;
        }
        if (r->type == HIST_WRITE_INVOKE)
            sent[ns++] = (tf){r->t_ns, r->fence};
        if (r->type == HIST_WRITE_REJECTED)
            rejected++;
    }
    rep->writes_accepted = (int)na;
    rep->stale_rejected = rejected;
    rep->writes_unknown = invokes - (int)na - rejected;
    if (rep->writes_unknown < 0)
        rep->writes_unknown = 0;

    /* Stale accepted: a write whose invoke came after an accepted write with a higher
     * fence had returned. */
    prefix_max(acc, na);
    for (size_t i = 0; i < n; i++) {
        const hist_rec *r = &log->r[i];
        if (r->type == HIST_WRITE_OK && max_before(acc, na, r->start_ns) > r->fence)
            rep->stale_accepted++;
    }
    /* Spurious rejection: refused although no write with a higher fence had even been
     * sent before the refusal came back. Writes with the reply lost are counted as
     * possibly accepted (sent[] has every invoke). */
    prefix_max(sent, ns);
    for (size_t i = 0; i < n; i++) {
        const hist_rec *r = &log->r[i];
        if (r->type == HIST_WRITE_REJECTED && max_before(sent, ns, r->t_ns) <= r->fence)
            rep->spurious_rejections++;
    }
    /* Each accepted write sets read + 1; a value written twice is a lost update. */
    qsort(vals, nv, sizeof *vals, cmp_u64);
    for (size_t i = 1; i < nv; i++)
        rep->duplicate_values += vals[i] == vals[i - 1];
    if (final_value >= 0) {
        int64_t lost = (int64_t)na - final_value;
        rep->lost_updates = lost > 0 ? lost : 0;
        int64_t phantom = final_value - (int64_t)na - rep->writes_unknown;
        rep->phantom = phantom > 0 ? phantom : 0;
    }
    free(acc);
    free(sent);
    free(vals);
}

void hist_check(const hist_log *log, int64_t final_value, hist_report *rep)
{
    memset(rep, 0, sizeof *rep);
    hist_session *s = NULL;
    long ns = hist_sessions(log, &s);
    if (ns < 0) {
        fprintf(stderr, "history: out of memory\n");
        rep->fence_regressions = -1;
        return;
    }
    rep->sessions = (int)ns;
    for (size_t i = 0; i < log->n; i++) {
        const hist_rec *r = &log->r[i];
        if (r->type == HIST_ACQ_FAIL)
            rep->acquire_fails++;
        if (r->type == HIST_LOST)
            rep->lost_callbacks++;
        if (r->type == HIST_WORKER_END) {
            rep->workers_ended++;
            rep->fd_leaks += r->fence != r->value;
            rep->thread_leaks += (r->aux >> 32) != (r->aux & 0xffffffffu);
            int64_t g = r->deadline_ns - r->start_ns;
            if (g > rep->rss_growth_max_kb)
                rep->rss_growth_max_kb = g;
        }
    }

    /* (1a) An acquisition that began after another returned has a larger fence. */
    tf *oks = calloc((size_t)ns + 1, sizeof *oks);
    span *sp = calloc((size_t)ns + 1, sizeof *sp);
    bool *hit = calloc((size_t)ns + 1, sizeof *hit);
    if (oks && sp && hit) {
        for (long i = 0; i < ns; i++)
            oks[i] = (tf){s[i].ok_ns, s[i].fence};
        prefix_max(oks, (size_t)ns);
        for (long i = 0; i < ns; i++)
            hit[i] = max_before(oks, (size_t)ns, s[i].invoke_ns) >= s[i].fence;

        /* (1b) In the real-time order of grants: a grant that returned after another
         * holder's granted interval had ended has the larger fence. With blocking
         * waits the next holder's call began long before the last one's grant ended,
         * so (1a) compares almost nothing there; this compares every handover. */
        for (long i = 0; i < ns; i++) {
            int64_t end = s[i].deadline_ns;
            if (s[i].release_ns != 0 && s[i].release_ns < end)
                end = s[i].release_ns;
            /* A grant already over when it returned (its lock found lost at once: 0 ms
             * left, deadline 0) has an empty interval, which ends at its grant, not at
             * time 0, before every grant of the run. */
            if (end < s[i].ok_ns)
                end = s[i].ok_ns;
            oks[i] = (tf){end, s[i].fence};
        }
        prefix_max(oks, (size_t)ns);
        for (long i = 0; i < ns; i++) {
            hit[i] |= max_before(oks, (size_t)ns, s[i].ok_ns) >= s[i].fence;
            rep->fence_regressions += hit[i]; /* a session counts once */
            hit[i] = false;
        }

        /* (2) Granted intervals: [ok, min(release sent, latest validity deadline)];
         * and for a late holder that the servers told it still held the lock (its
         * lease had not run out there yet), until that answer: the lock was its
         * alone until then, or the servers lied. */
        size_t k = 0;
        for (long i = 0; i < ns; i++) {
            int64_t end = s[i].deadline_ns;
            if (s[i].release_ns != 0 && s[i].release_ns < end)
                end = s[i].release_ns;
            if (s[i].late && s[i].check_rc == DLOCK_OK && s[i].check_ns > end)
                end = s[i].check_ns;
            if (s[i].late && s[i].release_held && s[i].release_ns > end)
                end = s[i].release_ns;
            if (end > s[i].ok_ns)
                sp[k++] = (span){s[i].ok_ns, end, i};
        }
        rep->granted_overlaps = sweep(sp, k, &rep->granted_overlap_max_ns, NULL, NULL);

        /* (3) Believed intervals: [ok, section exit] (or the token's last record). */
        k = 0;
        for (long i = 0; i < ns; i++) {
            int64_t end = s[i].exit_ns ? s[i].exit_ns : s[i].last_ns;
            if (end > s[i].ok_ns)
                sp[k++] = (span){s[i].ok_ns, end, i};
        }
        sweep(sp, k, NULL, &rep->believed_overlap_ns, hit);
        for (long i = 0; i < ns; i++)
            rep->believed_overlaps += hit[i];
    }
    free(oks);
    free(sp);
    free(hit);

    /* What a late holder was told, and whether holders within validity released. */
    for (long i = 0; i < ns; i++) {
        if (s[i].late) {
            rep->late_sections++;
            rep->late_check_not_lost += s[i].check_rc != -1 && s[i].check_rc != DLOCK_ERR_LOST;
            rep->late_release_held += s[i].release_held;
        } else if (s[i].exit_ns != 0 && s[i].release_rc != -1 && s[i].release_rc != DLOCK_OK) {
            rep->valid_release_not_ok++;
        }
    }
    free(s);
    check_writes(log, final_value, rep);
}

void hist_print(const char *name, const hist_report *r)
{
#define FIG(what, val, unit) printf("FIG %s_%s %lld %s\n", name, what, (long long)(val), unit)
    FIG("sections", r->sessions, "count");
    FIG("acquire_fails", r->acquire_fails, "count");
    FIG("fence_regressions", r->fence_regressions, "count");
    FIG("granted_overlaps", r->granted_overlaps, "count");
    FIG("granted_overlap_max_us", r->granted_overlap_max_ns / 1000, "us");
    FIG("believed_overlaps", r->believed_overlaps, "count");
    printf("FIG %s_believed_overlap_rate %.2f %%\n", name,
           r->sessions ? 100.0 * r->believed_overlaps / r->sessions : 0.0);
    FIG("believed_overlap_ms", r->believed_overlap_ns / 1000000, "ms");
    FIG("late_sections", r->late_sections, "count");
    FIG("writes_accepted", r->writes_accepted, "count");
    FIG("stale_writes_rejected", r->stale_rejected, "count");
    FIG("stale_writes_accepted", r->stale_accepted, "count");
    FIG("late_writes_accepted", r->late_accepted, "count");
    FIG("lost_updates", r->lost_updates, "count");
    if (r->workers_ended > 0) {
        FIG("fd_leaks", r->fd_leaks, "workers");
        FIG("thread_leaks", r->thread_leaks, "workers");
        FIG("rss_growth_max_kb", r->rss_growth_max_kb, "kB");
    }
#undef FIG
    if (r->spurious_rejections || r->phantom || r->duplicate_values || r->writes_unknown ||
        r->late_check_not_lost || r->late_release_held || r->valid_release_not_ok)
        printf("INFO %s: spurious_rejections=%d phantom=%lld duplicate_values=%d "
               "unknown_writes=%d late_check_not_lost=%d late_release_held=%d "
               "valid_release_not_ok=%d lost_callbacks=%d\n",
               name, r->spurious_rejections, (long long)r->phantom, r->duplicate_values,
               r->writes_unknown, r->late_check_not_lost, r->late_release_held,
               r->valid_release_not_ok, r->lost_callbacks);
}

void hist_print_overlaps(const hist_log *log, int max)
{
    hist_session *s = NULL;
    long ns = hist_sessions(log, &s);
    if (ns <= 0) {
        free(s);
        return;
    }
    int64_t base = log->n ? log->r[0].t_ns : 0;
    int shown = 0;
    for (long i = 0; i < ns && shown < max; i++) {
        int64_t ei = s[i].release_ns && s[i].release_ns < s[i].deadline_ns ? s[i].release_ns
                                                                           : s[i].deadline_ns;
        for (long j = 0; j < ns && shown < max; j++) {
            int64_t ej = s[j].release_ns && s[j].release_ns < s[j].deadline_ns ? s[j].release_ns
                                                                               : s[j].deadline_ns;
            if (i == j || s[j].ok_ns < s[i].ok_ns || s[j].ok_ns >= ei || ej <= s[j].ok_ns)
                continue;
            printf("INFO overlap: w%d fence %llu granted [%.3f, %.3f] ms and w%d fence %llu "
                   "granted [%.3f, %.3f] ms\n",
                   s[i].worker, (unsigned long long)s[i].fence, (double)(s[i].ok_ns - base) / 1e6,
                   (double)(ei - base) / 1e6, s[j].worker, (unsigned long long)s[j].fence,
                   (double)(s[j].ok_ns - base) / 1e6, (double)(ej - base) / 1e6);
            shown++;
        }
    }
    free(s);
}
