/*
 * flash_sale.c: sell a limited stock to many concurrent buyers, never one item too many.
 *
 *   dlock-flash-sale [-s URLS] [-b BUYERS] [-n STOCK] [-i ITEM] [-t TTL_MS] [-w WAIT_MS]
 *                    [-T TIMEOUT_MS] [-l LOG] [-u] [-q]
 *
 * The stock is a plain Redis string, "stock:ITEM", kept on the FIRST server of URLS: think
 * of it as the shop's database. The lock "stock:ITEM" is taken on all the servers of URLS
 * (one server, or Redlock on N independent masters). Each buyer is a process of its own
 * and does, until the stock is gone:
 *
 *     dlock_acquire("stock:ITEM", wait) -> GET stock -> if > 0: SET stock - 1 -> dlock_release
 *
 * GET then SET is a read-modify-write: without the lock, two buyers read the same stock
 * and both sell the same unit (run with -u to see it happen). With it, exactly STOCK
 * units are sold. Each buyer creates its own dlock_client and hiredis connection AFTER
 * fork(): a client inherited across fork() answers DLOCK_ERR_CLOSED.
 *
 * Every critical section appends one fixed-size record (times from CLOCK_MONOTONIC, which
 * all processes of a host share) to a log opened with O_APPEND, so that concurrent
 * appends never interleave. Once every buyer has exited, the parent reads the log back
 * and checks what a lock promises: units sold == initial stock, nothing oversold, no
 * unit sold twice, stock left 0, critical sections that never overlap, and fences that
 * strictly increase in the order the sections ran. It prints a report, then one line
 * "RESULT key=value ..." for scripts (tools/demo.sh reads it).
 *
 * Exit status: 0 every check passed, 1 a check failed or a buyer gave up, 2 usage.
 */
#define _POSIX_C_SOURCE 200809L

#include <dlock.h>
#include <hiredis/hiredis.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "example_util.h" /* the plumbing: options, the log, the buyer processes */

#define BUYERS_MAX   256
#define GIVE_UP_NS   (INT64_C(15) * 1000000000) /* a buyer with no progress this long quits */
#define ERRORS_SHOWN 3                          /* error lines each buyer prints at most */

/* The command line, shared by the parent and (read-only, after fork) the buyers. */
struct sale {
    const char *servers;
    int buyers;
    long long stock;
    const char *item;
    int64_t ttl_ms;
    int64_t wait_ms;
    int64_t timeout_ms;
    const char *log_path;
    bool unlocked;
    bool quiet;
    char lock_name[256];  /* "stock:ITEM": the lock */
    char stock_key[256];  /* "stock:ITEM": the counter on the first server */
    char stock_host[256]; /* the first server of `servers`, for hiredis */
    int stock_port;
    int stock_db;
};

/* One line of the log. Fixed size (64 bytes), written with one write(2) on an O_APPEND
 * descriptor: POSIX makes each such append atomic with respect to the others. */
enum { REC_SECTION = 1, REC_FAILED = 2 };
struct record {
    int32_t kind;         /* REC_SECTION: a critical section; REC_FAILED: an acquire failed */
    int32_t buyer;        /* 0 .. buyers-1 */
    int32_t rc;           /* REC_SECTION: dlock_release's result; REC_FAILED: dlock_acquire's */
    int32_t sold;         /* 1 when this section sold a unit */
    uint64_t fence;       /* the lock's fence (0 with -u) */
    int64_t start_ns;     /* dlock_acquire called */
    int64_t acquired_ns;  /* dlock_acquire returned */
    int64_t releasing_ns; /* dlock_release called: the section's last moment */
    int64_t released_ns;  /* dlock_release returned */
    int64_t stock_seen;   /* the stock read inside the section (the unit sold, if sold) */
};
_Static_assert(sizeof(struct record) == 64, "log records are 64 bytes");

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void usage(FILE *f)
{
    fputs("usage: dlock-flash-sale [-s URLS] [-b BUYERS] [-n STOCK] [-i ITEM] [-t TTL_MS]\n"
          "                        [-w WAIT_MS] [-T TIMEOUT_MS] [-l LOG] [-u] [-q]\n"
          "  -s URLS     lock servers, comma-separated (default $DLOCK_SERVERS, else\n"
          "              redis://127.0.0.1:6379); the stock lives on the first one\n"
          "  -b BUYERS   buyer processes (default 8)     -n STOCK  units to sell (default 1000)\n"
          "  -i ITEM     item name (default sku-1)      -t TTL_MS lease (default 5000)\n"
          "  -w WAIT_MS  how long one acquire waits (default 10000)\n"
          "  -T TIMEOUT_MS per-server command deadline (default 200)\n"
          "  -l LOG      keep the log of critical sections in LOG (64-byte records)\n"
          "  -u          no lock: show what a read-modify-write race does to the stock\n"
          "  -q          print only the RESULT line\n",
          f);
}

/* Connect to the stock's server with deadlines on the connect and on every command. */
static redisContext *stock_connect(const struct sale *s)
{
    struct timeval tv = {(time_t)(s->timeout_ms / 1000),
                         (suseconds_t)(s->timeout_ms % 1000) * 1000};
    struct timeval ctv = {1, 0};
    redisContext *r = redisConnectWithTimeout(s->stock_host, s->stock_port, ctv);
    if (r == NULL || r->err) {
        fprintf(stderr, "dlock-flash-sale: stock server %s:%d: %s\n", s->stock_host, s->stock_port,
                r ? r->errstr : "out of memory");
        redisFree(r);
        return NULL;
    }
    redisSetTimeout(r, tv);
    if (s->stock_db != 0) {
        redisReply *rep = redisCommand(r, "SELECT %d", s->stock_db);
        bool ok = rep != NULL && rep->type == REDIS_REPLY_STATUS;
        freeReplyObject(rep);
        if (!ok) {
            fprintf(stderr, "dlock-flash-sale: SELECT %d failed\n", s->stock_db);
            redisFree(r);
            return NULL;
        }
    }
    return r;
}

/* GET the stock: its value, or -1 with a message (the connection is then unusable). */
static long long stock_get(redisContext *r, const struct sale *s)
{
    redisReply *rep = redisCommand(r, "GET %s", s->stock_key);
    long long v = -1;
    if (rep == NULL)
        fprintf(stderr, "dlock-flash-sale: GET %s: %s\n", s->stock_key, r->errstr);
    else if (rep->type != REDIS_REPLY_STRING || !ex_parse_num(rep->str, 0, LLONG_MAX, &v))
        fprintf(stderr, "dlock-flash-sale: GET %s: not a stock count\n", s->stock_key);
    freeReplyObject(rep);
    return v;
}

static bool stock_set(redisContext *r, const struct sale *s, long long v)
{
    redisReply *rep = redisCommand(r, "SET %s %lld", s->stock_key, v);
    bool ok = rep != NULL && rep->type == REDIS_REPLY_STATUS;
    if (!ok)
        fprintf(stderr, "dlock-flash-sale: SET %s: %s\n", s->stock_key,
                rep == NULL ? r->errstr : "unexpected reply");
    freeReplyObject(rep);
    return ok;
}

static bool append_record(int fd, const struct record *rec)
{
    ssize_t w = write(fd, rec, sizeof *rec);
    if (w != (ssize_t)sizeof *rec) {
        fprintf(stderr, "dlock-flash-sale: log write: %s\n", w < 0 ? strerror(errno) : "short");
        return false;
    }
    return true;
}

/* ---- one buyer ---------------------------------------------------------------- */

/*
 * A buyer process: buy until sold out. Returns the exit status: 0 after seeing the
 * stock at 0, 1 after an error that makes going on pointless (the stock server is gone,
 * or no lock could be had for GIVE_UP_NS).
 */
static int buyer(const struct sale *s, int id, int log_fd, pid_t parent)
{
    dlock_config cfg = {0};
    cfg.timeout_ms = s->timeout_ms; /* per-server deadline of one command */
    dlock_client *c = NULL;
    if (!s->unlocked && dlock_client_new(s->servers, &cfg, &c) != DLOCK_OK) {
        fprintf(stderr, "buyer %d: %s\n", id, dlock_errmsg());
        return 1;
    }
    redisContext *r = stock_connect(s);
    if (r == NULL) {
        dlock_client_free(c);
        return 1;
    }
    dlock_opts o = {0};
    o.ttl_ms = s->ttl_ms;
    o.wait_ms = s->wait_ms;
    o.label = "flash-sale buyer";

    int status = 1, errors = 0;
    int64_t progress = now_ns();
    /* Stop when the parent is gone too (killed, or Ctrl-C): getppid() changes. */
    while (getppid() == parent) {
        struct record rec = {.kind = REC_SECTION, .buyer = id, .stock_seen = -1};
        dlock_lock *l = NULL;
        rec.start_ns = now_ns();
        int rc = s->unlocked ? DLOCK_OK : dlock_acquire(c, s->lock_name, &o, &l);
        rec.acquired_ns = now_ns();
        if (rc != DLOCK_OK) {
            /* Not ours this time (a long queue, or too few servers answering): log it
             * and try again, unless nothing has worked for a long while. */
            rec.kind = REC_FAILED;
            rec.rc = rc;
            append_record(log_fd, &rec);
            if (errors++ < ERRORS_SHOWN)
                fprintf(stderr, "buyer %d: acquire: %s: %s\n", id, dlock_errname(rc),
                        dlock_errmsg());
            if (rec.acquired_ns - progress > GIVE_UP_NS) {
                fprintf(stderr, "buyer %d: no lock for %lld s, giving up\n", id,
                        (long long)(GIVE_UP_NS / 1000000000));
                break;
            }
            continue;
        }
        progress = rec.acquired_ns;
        rec.fence = dlock_fence(l);

        /* The critical section: read, decide, write. */
        long long stock = stock_get(r, s);
        bool io_ok = stock >= 0;
        rec.stock_seen = stock;
        /* Write only with enough lease left for the SET to land while we hold the lock:
         * a SET still in flight when the lease ends would not be protected. (Against a
         * holder paused mid-section, only a fenced write helps: see fenced_write.c.) */
        if (io_ok && stock > 0 && (s->unlocked || dlock_remaining_ms(l) > s->timeout_ms)) {
            io_ok = stock_set(r, s, stock - 1);
            rec.sold = io_ok;
        }

        rec.releasing_ns = now_ns();
        rec.rc = s->unlocked ? DLOCK_OK : dlock_release(l);
        rec.released_ns = now_ns();
        if (rec.rc != DLOCK_OK && errors++ < ERRORS_SHOWN)
            fprintf(stderr, "buyer %d: release: %s: %s\n", id, dlock_errname(rec.rc),
                    dlock_errmsg());
        if (!append_record(log_fd, &rec) || !io_ok)
            break; /* the stock server failed us: a SET's outcome may be unknown */
        if (stock == 0) {
            status = 0; /* sold out */
            break;
        }
    }
    redisFree(r);
    dlock_client_free(c);
    return status;
}

/* What a buyer process starts from: ex_fork_workers runs start_buyer(id, &bs) in each. */
struct buyer_start {
    const struct sale *s;
    int log_fd;
    pid_t parent;
    redisContext *parents_conn; /* the parent's connection: not the buyer's to use */
};

static int start_buyer(int id, void *arg)
{
    const struct buyer_start *bs = arg;
    redisFree(bs->parents_conn);
    return buyer(bs->s, id, bs->log_fd, bs->parent);
}

/* ---- the report --------------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sections in the order they ran: by the time their acquire returned. */
static int cmp_section(const void *a, const void *b)
{
    const struct record *x = a, *y = b;
    return (x->acquired_ns > y->acquired_ns) - (x->acquired_ns < y->acquired_ns);
}

static double ms(int64_t ns)
{
    return (double)ns / 1e6;
}

/*
 * Read the log back and check it. Prints the report (unless quiet) and the RESULT line;
 * returns true when every check passed.
 */
static bool report(const struct sale *s, int log_fd, long long left, int64_t elapsed_ns,
                   int buyers_failed)
{
    size_t nrec;
    struct record *recs = ex_log_read("dlock-flash-sale", log_fd, sizeof *recs, &nrec);
    if (recs == NULL)
        return false;
    int64_t *handoffs = malloc(nrec ? nrec * sizeof *handoffs : 1);
    int64_t *waits = malloc(nrec ? nrec * sizeof *waits : 1);
    long long *per_buyer = calloc((size_t)s->buyers, sizeof *per_buyer);
    unsigned char *unit_sold = calloc((size_t)s->stock + 1, 1);
    if (!handoffs || !waits || !per_buyer || !unit_sold) {
        fprintf(stderr, "dlock-flash-sale: out of memory\n");
        exit(1);
    }

    /* Failed acquires go first and are dropped; the sections are then sorted. */
    size_t nsec = 0, failed = 0;
    for (size_t i = 0; i < nrec; i++) {
        if (recs[i].buyer < 0 || recs[i].buyer >= s->buyers) {
            fprintf(stderr, "dlock-flash-sale: the log is damaged (buyer %d)\n", recs[i].buyer);
            exit(1);
        }
        if (recs[i].kind == REC_SECTION)
            recs[nsec++] = recs[i];
        else
            failed++;
    }
    qsort(recs, nsec, sizeof *recs, cmp_section);

    long long sold = 0, doubles = 0;
    size_t nhand = 0, overlaps = 0, lost = 0, fence_drops = 0;
    for (size_t i = 0; i < nsec; i++) {
        const struct record *r = &recs[i];
        waits[i] = r->acquired_ns - r->start_ns;
        if (r->rc != DLOCK_OK)
            lost++;
        if (r->sold) {
            sold++;
            per_buyer[r->buyer]++;
            /* The unit sold is the stock seen: each of 1..STOCK must go exactly once. */
            if (r->stock_seen < 1 || r->stock_seen > s->stock || unit_sold[r->stock_seen]++)
                doubles++;
        }
        if (i == 0)
            continue;
        const struct record *p = &recs[i - 1];
        /* A section began before the previous one ended: two holders at once. */
        if (r->acquired_ns < p->releasing_ns)
            overlaps++;
        if (r->fence <= p->fence)
            fence_drops++;
        /* A handoff: the lock passed to another buyer. Its latency runs from the
         * previous holder calling dlock_release (the moment it let go) to this buyer's
         * dlock_acquire returning. Not from the release's return: the next holder can
         * win before the releaser has read its own replies, more so on a busy host. */
        if (r->buyer != p->buyer)
            handoffs[nhand++] = r->acquired_ns - p->releasing_ns;
    }
    qsort(handoffs, nhand, sizeof *handoffs, cmp_i64);
    qsort(waits, nsec, sizeof *waits, cmp_i64);

    long long oversold = sold > s->stock ? sold - s->stock : 0;
    bool locked = !s->unlocked;
    bool fences_ok = !locked || (fence_drops == 0 && nsec > 0);
    const char *fences_word = !locked || nsec == 0 ? "n/a" : fence_drops ? "no" : "yes";
    bool ok = sold == s->stock && oversold == 0 && doubles == 0 && left == 0 && overlaps == 0 &&
              fences_ok && buyers_failed == 0;
    uint64_t fence_first = nsec ? recs[0].fence : 0, fence_last = nsec ? recs[nsec - 1].fence : 0;

    if (!s->quiet) {
        printf("flash sale of %s: %lld units, %d buyer processes, %s, stock on %s:%d\n", s->item,
               s->stock, s->buyers, locked ? "locked with dlock" : "NO LOCK (-u)", s->stock_host,
               s->stock_port);
        printf("  sold %lld of %lld in %.0f ms: oversold %lld, units sold twice %lld, "
               "stock left %lld\n",
               sold, s->stock, ms(elapsed_ns), oversold, doubles, left);
        printf("  per buyer:");
        for (int b = 0; b < s->buyers; b++)
            printf(" %lld", per_buyer[b]);
        printf("\n");
        if (locked) {
            printf("  %zu critical sections, none overlapping: %s; %zu handoffs between buyers: "
                   "p50 %.2f ms, p99 %.2f ms\n",
                   nsec, overlaps ? "NO" : "yes", nhand, ms(ex_percentile(handoffs, nhand, 50)),
                   ms(ex_percentile(handoffs, nhand, 99)));
            printf("  acquire took p50 %.2f ms, p99 %.2f ms, max %.2f ms; failed acquires %zu, "
                   "releases that found the lease gone %zu\n",
                   ms(ex_percentile(waits, nsec, 50)), ms(ex_percentile(waits, nsec, 99)),
                   ms(nsec ? waits[nsec - 1] : 0), failed, lost);
            printf("  fences: first %" PRIu64 ", last %" PRIu64 ", strictly increasing: %s\n",
                   fence_first, fence_last, fences_word);
        }
        printf("  %s\n", ok ? "all checks passed" : "CHECKS FAILED");
    }
    printf("RESULT ok=%s sold=%lld stock=%lld oversold=%lld doubles=%lld left=%lld sections=%zu "
           "overlaps=%zu handoffs=%zu handoff_p50_us=%lld handoff_p99_us=%lld "
           "wait_p99_us=%lld wait_max_us=%lld failed_acquires=%zu lost_releases=%zu "
           "fence_first=%" PRIu64 " fence_last=%" PRIu64 " fences_increasing=%s "
           "buyers_failed=%d elapsed_ms=%lld\n",
           ok ? "yes" : "no", sold, s->stock, oversold, doubles, left, nsec, overlaps, nhand,
           (long long)(ex_percentile(handoffs, nhand, 50) / 1000),
           (long long)(ex_percentile(handoffs, nhand, 99) / 1000),
           (long long)(ex_percentile(waits, nsec, 99) / 1000),
           (long long)((nsec ? waits[nsec - 1] : 0) / 1000), failed, lost, fence_first, fence_last,
           fences_word, buyers_failed, (long long)(elapsed_ns / 1000000));
    fflush(stdout);
    free(recs);
    free(handoffs);
    free(waits);
    free(per_buyer);
    free(unit_sold);
    return ok;
}

/* ---- the sale ------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    struct sale s = {0};
    s.servers = getenv("DLOCK_SERVERS");
    if (s.servers == NULL || s.servers[0] == '\0')
        s.servers = "redis://127.0.0.1:6379";
    s.buyers = 8;
    s.stock = 1000;
    s.item = "sku-1";
    s.ttl_ms = 5000;
    s.wait_ms = 10000;
    s.timeout_ms = 200;

    int opt;
    long long v;
    while ((opt = getopt(argc, argv, "s:b:n:i:t:w:T:l:uqh")) != -1) {
        switch (opt) {
        case 's':
            s.servers = optarg;
            break;
        case 'b':
            if (!ex_parse_num(optarg, 1, BUYERS_MAX, &v))
                goto bad;
            s.buyers = (int)v;
            break;
        case 'n':
            if (!ex_parse_num(optarg, 1, 100000000, &s.stock))
                goto bad;
            break;
        case 'i':
            s.item = optarg;
            break;
        case 't':
            if (!ex_parse_num(optarg, DLOCK_TTL_MIN_MS, DLOCK_TTL_MAX_MS, &v))
                goto bad;
            s.ttl_ms = v;
            break;
        case 'w':
            if (!ex_parse_num(optarg, -1, DLOCK_TTL_MAX_MS, &v))
                goto bad;
            s.wait_ms = v;
            break;
        case 'T':
            if (!ex_parse_num(optarg, 1, 60000, &v))
                goto bad;
            s.timeout_ms = v;
            break;
        case 'l':
            s.log_path = optarg;
            break;
        case 'u':
            s.unlocked = true;
            break;
        case 'q':
            s.quiet = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            goto bad;
        }
    }
    if (optind != argc)
        goto bad;
    if ((size_t)snprintf(s.lock_name, sizeof s.lock_name, "stock:%s", s.item) >= sizeof s.lock_name)
        goto bad;
    snprintf(s.stock_key, sizeof s.stock_key, "%s", s.lock_name);
    if (!ex_first_server("dlock-flash-sale", s.servers, s.stock_host, sizeof s.stock_host,
                         &s.stock_port, &s.stock_db))
        return 2;

    /* Put the stock on the shelf. */
    redisContext *r = stock_connect(&s);
    if (r == NULL || !stock_set(r, &s, s.stock))
        return 1;

    /* The log: a named file with -l, else a temporary one unlinked at once (the
     * descriptor, shared with the buyers, keeps it alive; nothing is left behind). */
    int log_fd = ex_log_open("dlock-flash-sale", s.log_path);
    if (log_fd < 0)
        return 1;

    /* The buyers, each a process of its own. The parent waits for them and passes an
     * interrupt on: SIGINT or SIGTERM (Ctrl-C, or a script ending the sale) stops every
     * buyer, then the parent. */
    struct buyer_start bs = {&s, log_fd, getpid(), r};
    int64_t start = now_ns();
    int buyers_failed;
    int stop_sig = ex_fork_workers("dlock-flash-sale", s.buyers, start_buyer, &bs, &buyers_failed);
    if (stop_sig < 0)
        return 1; /* no fork: the buyers started so far see getppid() change and stop */
    if (stop_sig != 0) {
        fprintf(stderr, "dlock-flash-sale: interrupted; every buyer stopped\n");
        return 128 + stop_sig;
    }
    int64_t elapsed = now_ns() - start;

    long long left = stock_get(r, &s);
    redisFree(r);
    bool ok = report(&s, log_fd, left, elapsed, buyers_failed);
    close(log_fd);
    return ok ? 0 : 1;

bad:
    usage(stderr);
    return 2;
}
