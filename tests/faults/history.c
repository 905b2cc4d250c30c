/*
 * history.c: the fault suite's history file (history.h): writing and reading its
 * records, rebuilding the sessions (one per acquisition) the checkers judge
 * (history_check.c), and printing records for a post-mortem.
 *
 * The file is a flat array of 80-byte records. Workers append with one write(2) each
 * on an O_APPEND descriptor: Linux serialises appends to a regular file under the
 * inode lock, so concurrent records never interleave, and a process killed by SIGKILL
 * either wrote a record whole or not at all.
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
            /* A lock that lingers (dlock_opts.linger_ms) is taken back with its token and
             * released again: one session, whose hold ends with its last release. */
            if (!x->release_invoked || r->t_ns > x->release_ns)
                x->release_ns = r->t_ns;
            x->release_invoked = true;
            break;
        case HIST_RELEASE:
            if (!x->release_invoked && (x->release_ns == 0 || r->start_ns < x->release_ns))
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

/* ---- post-mortems and small helpers ---------------------------------------------- */

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
