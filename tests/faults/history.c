/*
 * history.c: the fault suite's history file and its checkers (history.h).
 *
 * The file is a flat array of 80-byte records. Workers append with one write(2) each
 * on an O_APPEND descriptor: Linux serialises appends to a regular file under the
 * inode lock, so concurrent records never interleave, and a process killed by SIGKILL
 * either wrote a record whole or not at all.
 *
 * The checkers never trust the file order across processes (a process can be
 * descheduled between an event and its record); they compare timestamps, and only in
 * the direction that cannot produce false alarms: an event is known to precede
 * another when the first one's call returned before the second one's call was made.
 */
#include "history.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int64_t hist_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t hist_realtime_offset_ns(void)
{
    /* Read the monotonic clock on both sides of the real-time one and take the
     * middle: good to a microsecond on an idle machine; the smallest of a few tries. */
    int64_t best = 0, best_span = INT64_MAX;
    for (int i = 0; i < 5; i++) {
        struct timespec rt;
        int64_t a = hist_now_ns();
        clock_gettime(CLOCK_REALTIME, &rt);
        int64_t b = hist_now_ns();
        int64_t real = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec;
        if (b - a < best_span) {
            best_span = b - a;
            best = real - (a + (b - a) / 2);
        }
    }
    return best;
}

/* ---- writing ------------------------------------------------------------------ */

int hist_create(const char *path)
{
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "history: create %s: %s\n", path, strerror(errno));
        return -1;
    }
    close(fd);
    return 0;
}

int hist_open(hist_writer *w, const char *path, int worker)
{
    w->worker = worker;
    w->fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (w->fd < 0) {
        fprintf(stderr, "history: open %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

void hist_close(hist_writer *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
}

void hist_token_bytes(const char *hex, uint8_t out[16])
{
    memset(out, 0, 16);
    if (hex == NULL || strlen(hex) != 32)
        return;
    for (int i = 0; i < 16; i++) {
        unsigned v = 0;
        for (int k = 0; k < 2; k++) {
            char ch = hex[2 * i + k];
            unsigned d = ch >= '0' && ch <= '9'   ? (unsigned)(ch - '0')
                         : ch >= 'a' && ch <= 'f' ? (unsigned)(ch - 'a' + 10)
                                                  : 0;
            v = v * 16 + d;
        }
        out[i] = (uint8_t)v;
    }
}

void hist_put(const hist_writer *w, int type, int rc, int64_t start_ns, const dlock_lock *l,
              uint64_t value, uint64_t aux)
{
    hist_rec r;
    memset(&r, 0, sizeof r);
    r.t_ns = hist_now_ns();
    r.start_ns = start_ns ? start_ns : r.t_ns;
    r.type = type;
    r.worker = w->worker;
    r.pid = (int32_t)getpid();
    r.rc = rc;
    r.value = value;
    r.aux = aux;
    if (l != NULL) {
        r.fence = dlock_fence(l);
        hist_token_bytes(dlock_token(l), r.token);
        /* The deadline in this process's monotonic time: now + what the library says
         * is left (rounded down by it to the millisecond). */
        r.deadline_ns = r.t_ns + dlock_remaining_ms(l) * 1000000;
    }
    hist_write(w, &r);
}

void hist_write(const hist_writer *w, hist_rec *r)
{
    if (r->t_ns == 0)
        r->t_ns = hist_now_ns();
    if (r->start_ns == 0)
        r->start_ns = r->t_ns;
    r->worker = w->worker;
    r->pid = (int32_t)getpid();
    if (w->fd < 0)
        return;
    /* One write: the record is whole or absent. A short write to a regular file only
     * happens when the disk is full, and then the test fails on a partial file. */
    ssize_t n = write(w->fd, r, sizeof *r);
    (void)n;
}

void hist_fault(const hist_writer *w, int fault, uint64_t aux)
{
    hist_put(w, HIST_FAULT, fault, 0, NULL, 0, aux);
}

/* ---- reading -------------------------------------------------------------------- */

int hist_load(const char *path, hist_log *out)
{
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "history: open %s: %s\n", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        close(fd);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    if (size % sizeof(hist_rec) != 0)
        fprintf(stderr, "history: %s: %zu trailing bytes dropped\n", path, size % sizeof(hist_rec));
    size_t n = size / sizeof(hist_rec);
    out->r = calloc(n ? n : 1, sizeof(hist_rec));
    if (out->r == NULL) {
        close(fd);
        return -1;
    }
    size_t got = 0, want = n * sizeof(hist_rec);
    while (got < want) {
        ssize_t k = read(fd, (char *)out->r + got, want - got);
        if (k <= 0) {
            if (k < 0 && errno == EINTR)
                continue;
            break;
        }
        got += (size_t)k;
    }
    close(fd);
    out->n = got / sizeof(hist_rec);
    return 0;
}

void hist_free(hist_log *log)
{
    free(log->r);
    log->r = NULL;
    log->n = 0;
}

/* ---- sessions ------------------------------------------------------------------- */

static bool token_zero(const uint8_t t[16])
{
    for (int i = 0; i < 16; i++)
        if (t[i] != 0)
            return false;
    return true;
}

/* An open-addressing table from token to session index. */
typedef struct tok_map {
    long *slot; /* -1: empty */
    size_t cap;
} tok_map;

static uint64_t tok_hash(const uint8_t t[16])
{
    uint64_t h;
    memcpy(&h, t, sizeof h); /* tokens are random: their first bytes are a good hash */
    return h;
}

static long tok_find(const tok_map *m, const hist_session *s, const uint8_t t[16])
{
    for (size_t i = tok_hash(t) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->slot[i] < 0)
            return -1;
        if (memcmp(s[m->slot[i]].token, t, 16) == 0)
            return m->slot[i];
    }
}

static void tok_add(tok_map *m, const uint8_t t[16], long idx)
{
    size_t i = tok_hash(t) & (m->cap - 1);
    while (m->slot[i] >= 0)
        i = (i + 1) & (m->cap - 1);
    m->slot[i] = idx;
}

/* The sessions and the token map that finds them. */
static long build_sessions(const hist_log *log, hist_session **out, tok_map *map)
{
    size_t n = 0;
    for (size_t i = 0; i < log->n; i++)
        n += log->r[i].type == HIST_ACQ_OK;
    hist_session *s = calloc(n ? n : 1, sizeof *s);
    map->cap = 16;
    while (map->cap < 2 * n + 2)
        map->cap *= 2;
    map->slot = malloc(map->cap * sizeof *map->slot);
    if (s == NULL || map->slot == NULL) {
        free(s);
        free(map->slot);
        map->slot = NULL;
        return -1;
    }
    for (size_t i = 0; i < map->cap; i++)
        map->slot[i] = -1;
    long k = 0;
    for (size_t i = 0; i < log->n; i++) {
        const hist_rec *r = &log->r[i];
        if (r->type != HIST_ACQ_OK || token_zero(r->token) || tok_find(map, s, r->token) >= 0)
            continue;
        hist_session *x = &s[k];
        memcpy(x->token, r->token, 16);
        x->worker = r->worker;
        x->fence = r->fence;
        x->invoke_ns = r->start_ns;
        x->ok_ns = r->t_ns;
        x->deadline_ns = r->deadline_ns;
        x->last_ns = r->t_ns;
        x->release_rc = -1;
        x->check_rc = -1;
        tok_add(map, r->token, k);
        k++;
    }
    /* Second pass: the token's other records (the renewal thread's LOST can even come
     * before the worker's ACQ_OK in the file). */
    for (size_t i = 0; i < log->n; i++) {
        const hist_rec *r = &log->r[i];
        if (r->type == HIST_ACQ_OK || token_zero(r->token))
            continue;
        long idx = tok_find(map, s, r->token);
        if (idx < 0)
            continue;
        hist_session *x = &s[idx];
        if (r->t_ns > x->last_ns)
            x->last_ns = r->t_ns;
        /* A later deadline only counts when it was still ahead when seen: a lock that
         * is over reports 0 left, which would read as "valid until now". */
        if (r->deadline_ns > x->deadline_ns && r->deadline_ns > r->t_ns &&
            (r->type == HIST_EXIT || r->type == HIST_WRITE_INVOKE))
            x->deadline_ns = r->deadline_ns;
        switch (r->type) {
        case HIST_EXIT:
            x->exit_ns = r->t_ns;
            /* remaining_ms <= 0: the lease was over (or the lock known lost) when the
             * section ended. */
            x->late = r->deadline_ns <= r->t_ns;
            break;
        case HIST_CHECK:
            x->check_rc = r->rc;
            x->check_ns = r->start_ns ? r->start_ns : r->t_ns;
            break;
        case HIST_RELEASE_INVOKE:
            if (x->release_ns == 0 || r->t_ns < x->release_ns)
                x->release_ns = r->t_ns;
            break;
        case HIST_RELEASE:
            if (x->release_ns == 0 || r->start_ns < x->release_ns)
                x->release_ns = r->start_ns;
            x->release_rc = r->rc;
            x->release_held = r->rc == DLOCK_OK || r->aux == 1;
            break;
        case HIST_LOST:
            x->lost = true;
            break;
        default:
            break;
        }
    }
    *out = s;
    return k;
}

long hist_sessions(const hist_log *log, hist_session **out)
{
    tok_map map = {0};
    long n = build_sessions(log, out, &map);
    free(map.slot);
    return n;
}

/* ---- checkers ------------------------------------------------------------------- */

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

static const char *type_name(int t)
{
    static const char *const names[] = {"?",      "START", "ACQ_INV", "ACQ_OK",  "ACQ_FAIL",
                                        "ENTER",  "READ",  "W_INV",   "W_OK",    "W_REJ",
                                        "W_FAIL", "EXIT",  "CHECK",   "RELEASE", "LOST",
                                        "FAULT",  "END",   "NOTE",    "REL_INV"};
    return t >= 0 && t < (int)(sizeof names / sizeof *names) ? names[t] : "?";
}

static void print_rec(const hist_rec *r, int64_t base)
{
    printf("INFO   %+10.3f ms w%-2d pid %-7d %-8s rc=%-2d fence=%llu tok=%02x%02x%02x%02x "
           "start=%+.3f dl=%+.3f value=%llu aux=%llu\n",
           (double)(r->t_ns - base) / 1e6, r->worker, r->pid, type_name(r->type), r->rc,
           (unsigned long long)r->fence, r->token[0], r->token[1], r->token[2], r->token[3],
           (double)(r->start_ns - base) / 1e6,
           r->deadline_ns ? (double)(r->deadline_ns - base) / 1e6 : 0.0,
           (unsigned long long)r->value, (unsigned long long)r->aux);
}

void hist_dump(const hist_log *log, int64_t t_ns, int64_t window_ns)
{
    int64_t base = log->n ? log->r[0].t_ns : 0;
    for (size_t i = 0; i < log->n; i++)
        if (log->r[i].t_ns >= t_ns - window_ns && log->r[i].t_ns <= t_ns + window_ns)
            print_rec(&log->r[i], base);
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

int hist_keys_left(dh_server *srv, int n, const char *name, int64_t within_ms)
{
    char key[512];
    snprintf(key, sizeof key, "dlock:{%s}", name);
    int64_t until = dh_now_ms() + within_ms;
    int left;
    for (;;) {
        left = 0;
        for (int i = 0; i < n; i++) {
            if (srv[i].pid == 0)
                continue; /* a node that is down holds nothing */
            redisReply *r = dh_cmd(&srv[i], "EXISTS %s", key);
            left += r == NULL || r->type != REDIS_REPLY_INTEGER || r->integer != 0;
            freeReplyObject(r);
        }
        if (left == 0 || dh_now_ms() >= until)
            return left;
        dh_sleep_ms(20);
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int64_t hist_percentile(int64_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_i64);
    /* Nearest rank: the smallest value with at least p % of the values at or below. */
    size_t rank = (size_t)((p / 100.0) * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return v[rank - 1];
}
