/*
 * test_dlockd_soak.c: the composed soak of dlockd (docs/service.md), its promises held at
 * once for DLOCK_SOAK_SECONDS (600 by default; CI 120). The seed is printed first;
 * DLOCK_TEST_SEED repeats the choices (the timing is the machine's).
 *
 * A redis-server, two dlockds in front of it (a password, --auth-timeout 500); 200
 * connections over both, 4 threads each polling its own, loop: LOCK one of 8 names as a
 * session lock (TTL 1000 to 3000, WAIT 0 to 2000, a quarter FAIR), hold a grant 1 to 20
 * ms, UNLOCK. Meanwhile, each every few seconds: a burst (2,000 LOCKs in one write, held
 * 1 to 4 s: renewed), a half-close (UNLOCKs of DETACHED locks, then a FIN), a reset of a
 * LOCK waiting for a contended name, a pre-AUTH flood (100 connections that send nothing
 * or half an AUTH), the server SIGSTOPped for 150 to 300 ms (within every lease).
 *
 * A violation (counted, the first 30 printed) is a bug of dlockd: grants of a name whose
 * intervals (reply read to UNLOCK sent) overlap, or whose fences do not rise in that order;
 * a session lock lost; a LOCK unanswered (WAIT + 5 s) x slack after it was sent; a
 * half-close's UNLOCK not answered :1 before the close; a flood connection not told why
 * and closed; resources not given back (check_daemon); an exit status but 0 at SIGTERM.
 * -UNAVAILABLE while the server is paused (or 1 s after) is none; a LOCK's is counted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { DAEMONS = 2, NAMES = 8, THREADS = 4, PER_THREAD = 50, BURST = 2000, HALF_LOCKS = 4 };
enum { FLOOD = 100, SHOWN = 30, FD_SLACK = 4, RSS_GROWTH_KIB = 20 * 1024 };
#define PASSWORD  "dlockd soak password"
#define LOCK_FMT  "LOCK soak-%d TTL %d WAIT %d"
#define RESET_FMT "LOCK soak-%d TTL 2000 WAIT 10000"
#define COUNT(k)  atomic_fetch_add(&S.n[k], 1)

/* The counters: the kinds of violation, then what happened (FIG dlockd_soak_NAME). */
enum { V_OVERLAP, V_FENCE, V_HANG, V_REPLY, V_HALF, V_FLOOD, V_LOST, V_RES, V_KINDS };
enum { C_GRANTS = V_KINDS, C_NIL, C_UNAVAIL, C_UNPAUSED, C_BURSTS, C_BURST_GRANTS, C_HALF };
enum { C_RESETS = C_HALF + 1, C_RESETS_WAITING, C_FLOODS, C_PAUSES, KINDS };
static const char *const v_name[V_KINDS] = {"overlap",    "fence_order", "hang",      "bad_reply",
                                            "half_close", "flood",       "lost_lock", "resources"};
static const char *const c_name[KINDS - V_KINDS] = {
    "grants",       "not_acquired", "unavailable", "unavailable_unpaused", "bursts",
    "burst_grants", "half_closes",  "resets",      "resets_while_waiting", "floods",
    "pauses_done"};

/* The test's shared state. The threads never assert (cmocka's jumps are the main
 * thread's): they count. */
static struct {
    dh_server srv;
    dt_daemon d[DAEMONS];
    redisContext *info[DAEMONS]; /* an observer of each dlockd */
    int fd0[DAEMONS];            /* the baseline: descriptors (count_fds), RSS */
    long long rss0[DAEMONS];
    int64_t t0_us; /* the load's start, for the times printed */
    atomic_bool stop;
    atomic_long n[KINDS], shown;
    atomic_llong pause_end_us; /* the last pause's end; INT64_MAX during one, 0: none yet */
} S;

__attribute__((format(printf, 2, 3))) static void violation(int kind, const char *fmt, ...)
{
    COUNT(kind);
    if (atomic_fetch_add(&S.shown, 1) >= SHOWN)
        return;
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("VIOLATION %s at %.3f s: %s\n", v_name[kind], (dh_now_us() - S.t0_us) / 1e6, msg);
}

/* A state per thread made from the seed: a seed repeats the choices. */
static unsigned seed;
static int rnd(unsigned *s, int lo, int hi)
{
    return lo + rand_r(s) % (hi - lo + 1);
}

/* True when a pause overlapped [from_us, now], its end stretched by 1 s for the backlog
 * a resumed server works through. Pauses come one after another, so the last one tells:
 * any earlier one that overlapped ended before it. */
static bool paused_since(int64_t from_us)
{
    int64_t end = atomic_load(&S.pause_end_us);
    return end == INT64_MAX || (end != 0 && end + 1000000 >= from_us);
}

/* True, and counted, for an -UNAVAILABLE to a command sent at from_us. */
static bool unavailable(const redisReply *r, int64_t from_us)
{
    if (r->type != REDIS_REPLY_ERROR || strncmp(r->str, "UNAVAILABLE", 11) != 0)
        return false;
    COUNT(C_UNAVAIL);
    atomic_fetch_add(&S.n[C_UNPAUSED], !paused_since(from_us));
    return true;
}

/* A LOCK's grant of the right shape: token, fence >= 1, validity in (0, ttl]. */
static bool is_grant(const redisReply *r, long ttl)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
           r->element[0]->type == REDIS_REPLY_STRING && r->element[0]->len == 32 &&
           strspn(r->element[0]->str, "0123456789abcdef") == 32 &&
           r->element[1]->type == REDIS_REPLY_INTEGER && r->element[1]->integer >= 1 &&
           r->element[2]->type == REDIS_REPLY_INTEGER && r->element[2]->integer > 0 &&
           r->element[2]->integer <= ttl;
}

/* A connection to dlockd d: authenticated unless raw; NULL (a violation) when it fails. */
static redisContext *connect_to(int d, bool raw)
{
    struct timeval tv = {.tv_sec = 5 * dh_slack()};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", S.d[d].port, tv);
    redisReply *r = NULL;
    if (c != NULL && !c->err && redisSetTimeout(c, tv) == REDIS_OK && !raw)
        r = redisCommand(c, "AUTH %s", PASSWORD);
    if (c == NULL || c->err || (!raw && (r == NULL || r->type != REDIS_REPLY_STATUS))) {
        violation(V_REPLY, "connecting to dlockd %d: %s", d, r ? r->str : c ? c->errstr : "");
        redisFree(c);
        c = NULL;
    }
    freeReplyObject(r);
    return c;
}

/* A grant: when its reply was read, when its UNLOCK was about to be sent. */
typedef struct grant {
    long long from_us, to_us, fence;
    int name;
    char token[33];
} grant;

enum { IDLE, LOCKING, HOLDING, UNLOCKING }; /* a reply is awaited in the odd ones */

typedef struct conn {
    redisContext *c; /* NULL once closed at the end (or a failed connect: a violation) */
    int d, state, ttl, wait;
    int64_t due_us, sent_us; /* the next step or the reply's deadline; the last send */
    grant g;
} conn;

static struct worker {
    pthread_t tid;
    unsigned rng;
    conn conns[PER_THREAD];
    grant *g; /* the grants released */
    size_t n, cap;
} W[THREADS];

static void keep(struct worker *w, const grant *g)
{
    if (w->n == w->cap && (w->g = realloc(w->g, (w->cap = 2 * w->cap + 4096) * sizeof *g)) == NULL)
        abort(); /* out of memory */
    w->g[w->n++] = *g;
}

/* Close k's connection (dlockd releases a session lock it holds) and open another. */
static void reconnect(conn *k)
{
    redisFree(k->c);
    k->c = connect_to(k->d, false);
    k->state = IDLE;
}

/* k's next step, now due: a LOCK when idle, the UNLOCK when its hold is over, or a
 * reply that never came (a hang). */
static void step(struct worker *w, conn *k, int64_t now)
{
    if (k->state % 2 == 1) {
        violation(V_HANG, "%s soak-%d (WAIT %d) to dlockd %d unanswered",
                  k->state == LOCKING ? "LOCK" : "UNLOCK", k->g.name, k->wait, k->d);
        if (k->state == UNLOCKING)
            keep(w, &k->g);
        reconnect(k);
        return;
    } else if (k->state == IDLE) {
        k->g.name = rnd(&w->rng, 0, NAMES - 1);
        k->ttl = rnd(&w->rng, 1000, 3000);
        k->wait = rnd(&w->rng, 0, 3) == 0 ? 0 : rnd(&w->rng, 1, 2000);
        redisAppendCommand(k->c, rnd(&w->rng, 0, 3) ? LOCK_FMT : LOCK_FMT " FAIR", k->g.name,
                           k->ttl, k->wait);
    } else {
        redisAppendCommand(k->c, "UNLOCK soak-%d %s", k->g.name, k->g.token);
    }
    k->due_us = now + (k->state == IDLE ? k->wait + 5000 : 5000) * dh_slack() * 1000;
    k->state++; /* LOCKING or UNLOCKING */
    k->sent_us = k->g.to_us = dh_now_us();
    int done = 0; /* a command this small goes in one write */
    if (redisBufferWrite(k->c, &done) != REDIS_OK || !done) {
        violation(V_REPLY, "write to dlockd %d: %s", k->d, k->c->errstr);
        reconnect(k);
    }
}

/* Act on the reply to k's command; false when the connection must be replaced. */
static bool on_reply(struct worker *w, conn *k, const redisReply *r)
{
    int64_t now = dh_now_us();
    bool unavail = unavailable(r, k->sent_us);
    if (k->state == LOCKING && is_grant(r, k->ttl)) {
        memcpy(k->g.token, r->element[0]->str, 33);
        k->g.fence = r->element[1]->integer;
        k->g.from_us = now;
        k->state = HOLDING;
        k->due_us = now + rnd(&w->rng, 1000, 20000);
        COUNT(C_GRANTS);
        return true;
    } else if (k->state == LOCKING && r->type == REDIS_REPLY_NIL) {
        COUNT(C_NIL);
    } else if (k->state == UNLOCKING &&
               ((r->type == REDIS_REPLY_INTEGER && r->integer == 1) || unavail)) {
        /* After an -UNAVAILABLE, released or not, the lock was held until the UNLOCK was
         * sent; the close releases it if it still is. */
        keep(w, &k->g);
        if (unavail)
            return false;
    } else if (!unavail) {
        violation(r->type == REDIS_REPLY_INTEGER ? V_LOST : V_REPLY, "%s soak-%d %s: %d '%s' %lld",
                  k->state == LOCKING ? "LOCK" : "UNLOCK", k->g.name, k->g.token, r->type,
                  r->str ? r->str : "", r->integer);
        return false;
    }
    k->state = IDLE;
    k->due_us = now + rnd(&w->rng, 0, 10000);
    return true;
}

/* A client thread: its connections' steps, polled together. After the stop each ends
 * what it is doing (a waiting LOCK, a grant's UNLOCK) and closes. */
static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct pollfd pf[PER_THREAD];
    w->rng = seed + (unsigned)(w - W);
    for (int i = 0; i < PER_THREAD; i++)
        w->conns[i].c = connect_to(w->conns[i].d = (int)((w - W) + i) % DAEMONS, false);
    for (int live = 1; live > 0;) {
        int64_t now = dh_now_us(), next = now + 100000;
        live = 0;
        for (int i = 0; i < PER_THREAD; i++) {
            conn *k = &w->conns[i];
            if (k->c != NULL && k->state == IDLE && atomic_load(&S.stop)) {
                redisFree(k->c);
                k->c = NULL;
            }
            if (k->c != NULL && now >= k->due_us)
                step(w, k, now);
            live += k->c != NULL;
            next = k->c != NULL && k->due_us < next ? k->due_us : next;
            pf[i] = (struct pollfd){.fd = k->c && k->state % 2 ? k->c->fd : -1, .events = POLLIN};
        }
        poll(pf, PER_THREAD, next > now ? (int)((next - now + 999) / 1000) : 0);
        for (int i = 0; i < PER_THREAD; i++) {
            conn *k = &w->conns[i];
            void *r = NULL;
            if (pf[i].fd < 0 || pf[i].revents == 0)
                continue;
            bool ok =
                redisBufferRead(k->c) == REDIS_OK && redisGetReplyFromReader(k->c, &r) == REDIS_OK;
            if (!ok)
                violation(V_REPLY, "reading dlockd %d: %s", k->d, k->c->errstr);
            if (!ok || (r != NULL && !on_reply(w, k, r)))
                reconnect(k);
            freeReplyObject(r);
        }
    }
    return NULL;
}

/* BURST session LOCKs in one write, read, held 1 to 4 s (renewed), then the close. */
static void burst(unsigned *rng, int d)
{
    redisContext *c = connect_to(d, false);
    int64_t t0 = dh_now_us();
    for (int i = 0; c != NULL && i < BURST; i++)
        redisAppendCommand(c, "LOCK burst-%d TTL 3000", i);
    /* The first read writes them all. */
    for (int i = 0; c != NULL && i < BURST; i++) {
        redisReply *r = NULL;
        if (redisGetReply(c, (void **)&r) != REDIS_OK) {
            violation(V_HANG, "burst to dlockd %d: reply %d missing: %s", d, i + 1, c->errstr);
            break;
        }
        if (is_grant(r, 3000))
            COUNT(C_BURST_GRANTS);
        else if (r->type != REDIS_REPLY_NIL && !unavailable(r, t0))
            violation(V_REPLY, "burst LOCK %d on dlockd %d: '%s'", i, d, r->str ? r->str : "");
        freeReplyObject(r);
    }
    dh_sleep_ms(rnd(rng, 1000, 4000));
    redisFree(c);
    COUNT(C_BURSTS);
}

/* DETACHED locks, then their UNLOCKs in one write (inline, as docs/service.md's nc
 * example) with a FIN after it: each must be run and answered :1 before the close. */
static void half_close(int d, long seq)
{
    redisContext *c = connect_to(d, false);
    char req[1024], buf[1024] = "";
    int held = 0, len = 0, lines = 0, ones = 0, unavail = 0;
    int64_t t0 = dh_now_us();
    for (int j = 0; c != NULL && j < HALF_LOCKS; j++) {
        redisReply *r = redisCommand(c, "LOCK half-%d-%ld-%d TTL 10000 DETACHED", d, seq, j);
        if (r != NULL && is_grant(r, 10000)) {
            len += snprintf(req + len, sizeof req - (size_t)len, "UNLOCK half-%d-%ld-%d %s\r\n", d,
                            seq, j, r->element[0]->str);
            held++;
        } else if (r == NULL || !unavailable(r, t0)) {
            violation(V_REPLY, "half-close LOCK on dlockd %d: %s", d, r ? r->str : c->errstr);
        }
        freeReplyObject(r);
    }
    bool closed = false;
    t0 = dh_now_us();
    if (held > 0 && dh_send_all(c->fd, req, (size_t)len) == 0 && shutdown(c->fd, SHUT_WR) == 0)
        dt_raw_read_all(c->fd, buf, sizeof buf, 5000 * dh_slack(), &closed);
    redisFree(c);
    if (held == 0)
        return;
    for (const char *p = buf, *q; (q = strstr(p, "\r\n")) != NULL; p = q + 2, lines++) {
        ones += strncmp(p, ":1\r\n", 4) == 0;
        unavail += strncmp(p, "-UNAVAILABLE", 12) == 0;
    }
    atomic_fetch_add(&S.n[C_UNAVAIL], unavail);
    for (char *p = buf; (p = strpbrk(p, "\r\n")) != NULL;)
        *p = ' '; /* the replies shown on one line */
    if (!closed || lines != held || ones + unavail != held || (unavail > 0 && !paused_since(t0)))
        violation(V_HALF, "%d UNLOCKs, FIN to dlockd %d: %d :1, %d -UNAVAILABLE of %d (%.80s), %s",
                  held, d, ones, unavail, lines, buf, closed ? "closed" : "not closed in 5 s");
    COUNT(C_HALF);
}

/* A LOCK of a contended name that waits, its connection reset under it. */
static void reset_waiter(unsigned *rng, int d)
{
    redisContext *c = connect_to(d, false);
    int done = 0;
    if (c != NULL &&
        redisAppendCommand(c, rnd(rng, 0, 1) ? RESET_FMT : RESET_FMT " FAIR",
                           rnd(rng, 0, NAMES - 1)) == REDIS_OK &&
        redisBufferWrite(c, &done) == REDIS_OK && done) {
        dh_sleep_ms(rnd(rng, 5, 300));
        /* Still waiting when nothing came back (a grant after the reset is undone). */
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (poll(&p, 1, 0) == 0)
            COUNT(C_RESETS_WAITING);
        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &(struct linger){1, 0}, sizeof(struct linger));
        COUNT(C_RESETS);
    }
    redisFree(c);
}

/* FLOOD connections that send nothing or half an AUTH: each is told why and closed. */
static void flood(int d)
{
    static const char half_auth[] = "*2\r\n$4\r\nAUTH\r\n$20\r\ndlockd so";
    redisContext *c[FLOOD];
    for (int i = 0; i < FLOOD; i++)
        if ((c[i] = connect_to(d, true)) != NULL && i % 2 == 1)
            dh_send_all(c[i]->fd, half_auth, sizeof half_auth - 1);
    int64_t deadline = dh_now_ms() + (500 + 5000) * dh_slack();
    for (int i = 0; i < FLOOD; i++) {
        char buf[256] = "";
        bool closed = false;
        if (c[i] != NULL)
            dt_raw_read_all(c[i]->fd, buf, sizeof buf, deadline - dh_now_ms(), &closed);
        if (c[i] != NULL && (!closed || strncmp(buf, "-ERR authentication timeout", 27) != 0))
            violation(V_FLOOD, "a flood connection to dlockd %d was told '%.60s' and %s", d, buf,
                      closed ? "closed" : "left open 5 s past its AUTH deadline");
        redisFree(c[i]);
    }
    COUNT(C_FLOODS);
}

enum { F_BURST, F_HALF, F_RESET, F_FLOOD, F_PAUSE, F_KINDS };

/* One kind of fault at random intervals of a few seconds, on each dlockd in turn, until
 * the stop. A pause stops the redis-server 150 to 300 ms, within every lease. */
static void *fault_main(void *arg)
{
    static const int every_ms[F_KINDS][2] = {
        {3000, 8000}, {1000, 4000}, {1000, 4000}, {3000, 8000}, {2000, 5000}};
    int kind = (int)(intptr_t)arg;
    unsigned rng = seed + THREADS + (unsigned)kind, *r = &rng;
    for (long n = 0;; n++) {
        int64_t until = dh_now_ms() + rnd(r, every_ms[kind][0], every_ms[kind][1]);
        while (!atomic_load(&S.stop) && dh_now_ms() < until)
            dh_sleep_ms(20);
        if (atomic_load(&S.stop))
            return NULL;
        int d = (int)(n % DAEMONS);
        if (kind == F_BURST)
            burst(r, d);
        else if (kind == F_HALF)
            half_close(d, n);
        else if (kind == F_RESET)
            reset_waiter(r, d);
        else if (kind == F_FLOOD)
            flood(d);
        if (kind != F_PAUSE)
            continue;
        atomic_store(&S.pause_end_us, INT64_MAX);
        dh_server_pause(&S.srv);
        dh_sleep_ms(rnd(r, 150, 300));
        dh_server_resume(&S.srv);
        atomic_store(&S.pause_end_us, dh_now_us());
        COUNT(C_PAUSES);
    }
}

static int by_start(const void *a, const void *b)
{
    const grant *x = a, *y = b;
    return x->from_us < y->from_us ? -1 : x->from_us > y->from_us;
}

/* Per name, in the order of the grants: none begins before every earlier one ended,
 * and each fence is above the one before. */
static void check_grants(void)
{
    size_t n = 0;
    const grant *ended[NAMES] = {NULL}, *prev[NAMES] = {NULL}; /* ended last; began last */
    grant *all = NULL;
    for (int t = 0; t < THREADS; n += W[t].n, free(W[t].g), t++) {
        assert_non_null(all = realloc(all, (n + W[t].n + 1) * sizeof *all));
        if (W[t].n > 0)
            memcpy(all + n, W[t].g, W[t].n * sizeof *all);
    }
    qsort(all, n, sizeof *all, by_start);
    for (size_t i = 0; i < n; i++) {
        const grant *g = &all[i], *l = ended[g->name], *p = prev[g->name];
        if (l != NULL && g->from_us < l->to_us)
            violation(V_OVERLAP, "soak-%d: fence %lld at %lld us, fence %lld held until %lld us",
                      g->name, g->fence, g->from_us - S.t0_us, l->fence, l->to_us - S.t0_us);
        if (p != NULL && g->fence <= p->fence)
            violation(V_FENCE, "soak-%d: fence %lld after %lld", g->name, g->fence, p->fence);
        ended[g->name] = l == NULL || g->to_us > l->to_us ? g : l;
        prev[g->name] = g;
    }
    free(all);
}

/* dlockd pid's descriptors but its connections to the redis-server (by inode) and epoll
 * sets, those in *lock_server and *epolls: both are bounded by the connection sets. */
static int count_fds(pid_t pid, int *lock_server, int *epolls)
{
    unsigned long ino[1024], inode;
    unsigned port;
    int nino = 0, n = 0;
    char path[64], line[512], target[64];
    snprintf(path, sizeof path, "/proc/%d/net/tcp", (int)pid);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    while (fgets(line, sizeof line, fp) != NULL && nino < 1024)
        if (sscanf(line, "%*s %*s %*x:%x %*s %*s %*s %*s %*s %*s %lu", &port, &ino[nino]) == 2)
            nino += (int)port == S.srv.port;
    fclose(fp);
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *dir = opendir(path);
    assert_non_null(dir);
    *lock_server = *epolls = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL; n += e->d_name[0] != '.') {
        snprintf(line, sizeof line, "%s/%s", path, e->d_name);
        ssize_t len = readlink(line, target, sizeof target - 1);
        target[len > 0 ? len : 0] = '\0';
        *epolls += strcmp(target, "anon_inode:[eventpoll]") == 0;
        for (int j = 0; j < nino && sscanf(target, "socket:[%lu]", &inode) == 1; j++)
            *lock_server += ino[j] == inode;
    }
    closedir(dir);
    return n - *lock_server - *epolls;
}

/* dlockd d after the load, once its clients are gone (within 10 s) and 2 s more for
 * what the closes set going: no client but the observer, no waiter or session lock; its
 * descriptors other than those to the server within FD_SLACK of the baseline taken
 * before the load, at most DLOCK_NOWAIT_SETS_MAX + 16 of those (docs/service.md's
 * reserve for them); RSS grown by at most RSS_GROWTH_KIB. Returns session_locks_lost. */
static long check_daemon(int d)
{
    redisContext *info = S.info[d];
    int64_t deadline = dh_now_ms() + 10000 * dh_slack();
    while (dt_info(info, "connected_clients") != 1 && dh_now_ms() < deadline)
        dh_sleep_ms(50);
    dh_sleep_ms(2000);
    int pool, epolls, fd1 = count_fds(S.d[d].pid, &pool, &epolls);
    long long rss = dt_rss_kib(S.d[d].pid) - S.rss0[d];
    long clients = dt_info(info, "connected_clients"), waiting = dt_info(info, "blocked_clients"),
         sessions = dt_info(info, "session_locks"), lost = dt_info(info, "session_locks_lost");
    printf("FIG dlockd_soak_fds_%d %d fds (%d before; %d to the server, %d epoll sets)\n", d, fd1,
           S.fd0[d], pool, epolls);
    printf("FIG dlockd_soak_rss_growth_kib_%d %lld KiB\n", d, rss);
    if (clients != 1 || waiting != 0 || sessions != 0)
        violation(V_RES, "dlockd %d: %ld clients, %ld waiting, %ld sessions", d, clients, waiting,
                  sessions);
    if (abs(fd1 - S.fd0[d]) > FD_SLACK || pool > DLOCK_NOWAIT_SETS_MAX + 16 ||
        epolls > DLOCK_NOWAIT_SETS_MAX + 16 + 1)
        violation(V_RES, "dlockd %d: %d fds (%d before), %d to the server, %d epoll sets", d, fd1,
                  S.fd0[d], pool, epolls);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    if (rss > RSS_GROWTH_KIB)
        violation(V_RES, "dlockd %d: RSS grew by %lld KiB", d, rss);
#endif
    if (lost != 0)
        violation(V_LOST, "dlockd %d: INFO session_locks_lost:%ld", d, lost);
    redisFree(info);
    return lost;
}

static void test_dlockd_soak(void **state)
{
    (void)state;
    const char *env = getenv("DLOCK_SOAK_SECONDS");
    long seconds = env && atol(env) > 0 ? atol(env) : 600;
    pthread_t f[F_KINDS];
    /* The server, the dlockds; for each an observer, and a lock taken, waited for and
     * released so that what starts on first use runs before the baseline. */
    char pass[512];
    dt_write_pass(pass, sizeof pass, "soak", PASSWORD);
    assert_int_equal(dh_server_start(&S.srv, NULL), 0);
    for (int d = 0, pool, epolls; d < DAEMONS; d++) {
        dt_start(&S.d[d], S.srv.url, "--requirepass-file", pass, "--auth-timeout", "500", NULL);
        redisContext *info = S.info[d] = dt_connect(&S.d[d]), *other = connect_to(d, false);
        dt_expect_status(dt_cmd(info, "AUTH %s", PASSWORD), "OK");
        assert_non_null(other);
        dt_lock l;
        dt_expect_lock(dt_cmd(info, "LOCK soak-warm TTL 1000"), &l);
        dt_expect_nil(dt_cmd(other, "LOCK soak-warm TTL 1000 WAIT 100"));
        dt_expect_int(dt_cmd(info, "UNLOCK soak-warm %s", l.token), 1);
        redisFree(other);
        dh_sleep_ms(500);
        S.fd0[d] = count_fds(S.d[d].pid, &pool, &epolls);
        S.rss0[d] = dt_rss_kib(S.d[d].pid);
    }
    unlink(pass);
    S.t0_us = dh_now_us();
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_create(&W[t].tid, NULL, worker_main, &W[t]), 0);
    for (intptr_t k = 0; k < F_KINDS; k++)
        assert_int_equal(pthread_create(&f[k], NULL, fault_main, (void *)k), 0);
    dh_sleep_ms(seconds * 1000);
    atomic_store(&S.stop, true);
    for (int k = 0; k < F_KINDS; k++)
        pthread_join(f[k], NULL);
    for (int t = 0; t < THREADS; t++)
        pthread_join(W[t].tid, NULL);
    check_grants();

    long lost = 0;
    for (int d = 0, status; d < DAEMONS; d++) {
        lost += check_daemon(d);
        if ((status = dt_stop(&S.d[d])) != 0)
            violation(V_RES, "dlockd %d: wait status %d at SIGTERM, not 0", d, status);
    }
    dh_server_stop(&S.srv);

    long violations = 0;
    for (int k = 0; k < KINDS; k++) {
        long v = atomic_load(&S.n[k]);
        violations += k < V_KINDS ? v : 0;
        printf("FIG dlockd_soak_%s%s %ld count\n", k < V_KINDS ? "violations_" : "",
               k < V_KINDS ? v_name[k] : c_name[k - V_KINDS], v);
    }
    printf("FIG dlockd_soak_locks_lost %ld count\n", lost);
    printf("FIG dlockd_soak_violations %ld count\n", violations);
    assert_int_equal(violations, 0);
    assert_int_equal(lost, 0);
    /* The load and every fault happened (30 s leave room for each kind). */
    for (int k = C_GRANTS; k < KINDS; k++)
        if (atomic_load(&S.n[k]) == 0 && k != C_UNAVAIL && k != C_UNPAUSED && seconds >= 30)
            fail_msg("no %s in %ld s", c_name[k - V_KINDS], seconds);
}

int main(void)
{
    /* Lines in the order they were written, the threads' among the main thread's. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    const char *env = getenv("DLOCK_TEST_SEED");
    seed = env && *env ? (unsigned)strtoul(env, NULL, 10) : (unsigned)(dh_now_us() ^ getpid());
    printf("INFO dlockd_soak: seed %u (DLOCK_TEST_SEED repeats it)\n", seed);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_dlockd_soak)};
    return cmocka_run_group_tests_name("dlockd_soak", tests, NULL, NULL);
}
