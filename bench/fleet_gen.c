/*
 * fleet_gen.c: W7's load generator (fleet.c runs it): N client connections, to dlockd
 * or to node 1, cycling a lock's two commands for a fixed time.
 *
 * The clients are connections, not threads: a generator thread drives all of them
 * from one epoll loop, each a small state machine (write the first command, await its
 * reply, write the second, await its reply, again), with one request outstanding at a
 * time: a client waits for its answer, and putting many clients' requests on one
 * connection to Redis is dlockd's work, which the recipe's clients do not get. Replies
 * are parsed by hiredis's redisReader, commands formatted by redisFormatCommand.
 *
 * One generator thread, not two: the placement puts every client thread of the bench
 * on one CPU (with the servers under `same`, alone under `split`), where a second
 * generator would only take turns with the first; and under `none` it would take CPU
 * from dlockd and redis-server, which are what is measured. The generator does the
 * same work per request on both sides (format, write, read, parse), so its cost is on
 * both sides of the ratio. More generators split the connections between them.
 *
 * Each name is used once. Every reply is checked (LOCK a 3-element array, SET +OK,
 * UNLOCK and EVALSHA 1): any other fails the run. A cycle's latency runs from the
 * first command's write to the second command's reply; cycles/s counts the cycles
 * finished within the measured time (those in flight at its end finish, uncounted).
 * Before it, a warm-up that is not measured: the connections made, then a few cycles
 * on each (at least 3, and 200 over all of them).
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define W7_GENERATORS   1     /* generator threads (above: why one) */
#define W7_WARMUP_TOTAL 200   /* warm-up cycles over all connections, */
#define W7_WARMUP_MIN   3     /* and at least these on each */
#define W7_LATE_MS      10000 /* for a reply, once the measured time is over */
#define W7_EVENTS       256

enum fc_state { FC_IDLE, FC_FIRST, FC_SECOND }; /* FC_FIRST: awaiting LOCK's (SET's) reply */

/* One client connection and its cycle. */
typedef struct fconn {
    redisContext *rc; /* owns the socket: connected (AUTH, SELECT) while blocking */
    redisReader *rd;
    int fd, id;
    enum fc_state state;
    char *out; /* the command being written (redisFormatCommand's), or NULL */
    int out_len, out_off;
    bool want_out; /* EPOLLOUT is armed */
    long left;     /* warm-up: cycles still to start; -1 in the measured run */
    long seq;      /* cycles started, for unique names */
    int64_t t0;
    uint64_t rng; /* the recipe's tokens */
    char name[128];
    char token[72];
} fconn;

struct fleet;

/* One generator thread: its connections, its epoll set, its latencies. */
typedef struct fgen {
    struct fleet *f;
    team *t;
    fconn *c;
    int n;
    int ep;
    int busy;      /* connections not idle */
    int64_t until; /* the measured run's end; 0 in the warm-up */
    int64_t *lat;  /* cycles finished by `until`, nanoseconds */
    size_t nlat, cap;
} fgen;

/* One side's run at one client count. */
typedef struct fleet {
    bool recipe; /* the recipe on node 1, else dlockd */
    int nconns;
    const char *sha; /* the recipe's release script */
    int64_t secs_ns; /* measured time */
    char label[32];
    char tag[64];
    fconn *conns;
    fgen gen[W7_GENERATORS];
} fleet;

/* ---- the generator ---------------------------------------------------------- */

/* Record the first error for the team, naming the run and the connection. -1. */
static int gen_fail(fgen *g, const fconn *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int gen_fail(fgen *g, const fconn *c, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    team_error(g->t, "%s: connection %d: %s", g->f->label, c->id, msg);
    return -1;
}

/* A reply, for an error message: bounded, as a wrong reply may be any length. */
static void describe(const redisReply *r, char *out, size_t n)
{
    switch (r->type) {
    case REDIS_REPLY_STRING:
        snprintf(out, n, "the string \"%.*s\"", (int)(r->len > 40 ? 40 : r->len), r->str);
        break;
    case REDIS_REPLY_STATUS:
        snprintf(out, n, "+%.60s", r->str);
        break;
    case REDIS_REPLY_ERROR:
        snprintf(out, n, "-%.160s", r->str);
        break;
    case REDIS_REPLY_INTEGER:
        snprintf(out, n, "%lld", r->integer);
        break;
    case REDIS_REPLY_NIL:
        snprintf(out, n, "nil");
        break;
    case REDIS_REPLY_ARRAY:
        snprintf(out, n, "an array of %zu", r->elements);
        break;
    default:
        snprintf(out, n, "a reply of type %d", r->type);
    }
}

/* 32 hex digits, as a lock's token is: xorshift64*, as cheap as a token pool. */
static void make_token(fconn *c)
{
    static const char hex[] = "0123456789abcdef";
    for (int half = 0; half < 2; half++) {
        uint64_t x = c->rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        c->rng = x;
        x *= UINT64_C(0x2545F4914F6CDD1D);
        for (int i = 0; i < 16; i++)
            c->token[half * 16 + i] = hex[(x >> (4 * i)) & 15];
    }
    c->token[32] = '\0';
}

/* Arm or disarm EPOLLOUT, for a command the socket did not take whole. */
static int want_out(fgen *g, fconn *c, bool on)
{
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(g->ep, EPOLL_CTL_MOD, c->fd, &ev) != 0)
        return gen_fail(g, c, "epoll_ctl: %s", strerror(errno));
    c->want_out = on;
    return 0;
}

/* Write what is left of c->out; the rest waits for EPOLLOUT. A command is a few dozen
 * bytes, so the socket nearly always takes it whole: EPOLLOUT is armed only when it
 * does not, and disarmed once it is out, so that a quiet socket never wakes the loop. */
static int conn_flush(fgen *g, fconn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t w =
            send(c->fd, c->out + c->out_off, (size_t)(c->out_len - c->out_off), MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return c->want_out ? 0 : want_out(g, c, true);
        if (w < 0)
            return gen_fail(g, c, "send: %s", strerror(errno));
        c->out_off += (int)w;
    }
    redisFreeCommand(c->out);
    c->out = NULL;
    return c->want_out ? want_out(g, c, false) : 0;
}

static int conn_send(fgen *g, fconn *c, char *cmd, int len)
{
    if (len < 0)
        return gen_fail(g, c, "out of memory formatting a command");
    c->out = cmd;
    c->out_len = len;
    c->out_off = 0;
    return conn_flush(g, c);
}

/* The next cycle's first command, or idle when the warm-up's cycles are done or the
 * measured time is over. */
static int start_cycle(fgen *g, fconn *c, int64_t now)
{
    if (c->left == 0 || (g->until > 0 && now >= g->until)) {
        c->state = FC_IDLE;
        g->busy--;
        return 0;
    }
    if (c->left > 0)
        c->left--;
    snprintf(c->name, sizeof c->name, "%s:%s%d:%ld", g->f->tag, g->until > 0 ? "" : "warm:", c->id,
             c->seq++);
    char *cmd = NULL;
    int len;
    if (g->f->recipe) {
        make_token(c);
        len = redisFormatCommand(&cmd, "SET %s %s NX PX %d", c->name, c->token, BENCH_TTL_MS);
    } else {
        len = redisFormatCommand(&cmd, "LOCK %s TTL %d", c->name, BENCH_TTL_MS);
    }
    c->state = FC_FIRST;
    /* The cycle's clock starts as its first byte goes out, as a client's call would
     * time it; the name and the command were made before, on both sides alike. */
    c->t0 = now_ns();
    return conn_send(g, c, cmd, len);
}

/* One reply: check it, and send the cycle's next command or start the next cycle. */
static int on_reply(fgen *g, fconn *c, const redisReply *r)
{
    const fleet *f = g->f;
    const char *first = f->recipe ? "SET" : "LOCK", *second = f->recipe ? "EVALSHA" : "UNLOCK";
    char got[200];
    /* Read for each reply, not once per epoll_wait: with 256 connections one wake-up
     * brings many replies, and the later ones would be timed early. */
    int64_t now = now_ns();
    /* A reply with no command out, or before ours was written whole: a server that
     * answers what it was not asked, which no figure may count. */
    if (c->state == FC_IDLE || c->out != NULL) {
        describe(r, got, sizeof got);
        return gen_fail(g, c, "a reply (%s) before its command was sent", got);
    }
    if (c->state == FC_SECOND) {
        if (r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
            describe(r, got, sizeof got);
            return gen_fail(g, c, "%s %s: expected 1, got %s", second, c->name, got);
        }
        if (g->until > 0 && now <= g->until) {
            /* Doubling: a 3 s run is some 10^5 cycles, not known in advance. */
            if (g->nlat == g->cap) {
                size_t cap = g->cap ? 2 * g->cap : 65536;
                int64_t *lat = realloc(g->lat, cap * sizeof *lat);
                if (lat == NULL)
                    return gen_fail(g, c, "out of memory for latencies");
                g->lat = lat;
                g->cap = cap;
            }
            g->lat[g->nlat++] = now - c->t0;
            atomic_fetch_add(&g->t->done, 1);
        }
        return start_cycle(g, c, now);
    }
    char *cmd = NULL;
    int len;
    if (f->recipe) {
        if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0) {
            describe(r, got, sizeof got);
            return gen_fail(g, c, "SET %s NX: expected +OK, got %s", c->name, got);
        }
        len = redisFormatCommand(&cmd, "EVALSHA %s 1 %s %s", f->sha, c->name, c->token);
    } else {
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
            r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len == 0 ||
            r->element[0]->len >= sizeof c->token) {
            describe(r, got, sizeof got);
            return gen_fail(g, c, "%s %s: expected [token, fence, validity_ms], got %s", first,
                            c->name, got);
        }
        /* The token is dlockd's to choose; UNLOCK must send it back as it came. */
        memcpy(c->token, r->element[0]->str, r->element[0]->len);
        c->token[r->element[0]->len] = '\0';
        len = redisFormatCommand(&cmd, "UNLOCK %s %s", c->name, c->token);
    }
    c->state = FC_SECOND;
    return conn_send(g, c, cmd, len);
}

/* Read what the socket has, and act on every whole reply in it. One recv a wake-up:
 * the epoll set is level-triggered, so anything left wakes the loop again. With one
 * request out there is at most one reply, but one split over reads, or a server's
 * extra, is handled the same way. */
static int on_readable(fgen *g, fconn *c)
{
    char buf[16384];
    ssize_t n = recv(c->fd, buf, sizeof buf, 0);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR
                   ? 0
                   : gen_fail(g, c, "recv: %s", strerror(errno));
    if (n == 0)
        return gen_fail(g, c, "the %s closed the connection", g->f->recipe ? "server" : "dlockd");
    if (redisReaderFeed(c->rd, buf, (size_t)n) != REDIS_OK)
        return gen_fail(g, c, "out of memory reading a reply");
    for (;;) {
        void *rep = NULL;
        if (redisReaderGetReply(c->rd, &rep) != REDIS_OK)
            return gen_fail(g, c, "unreadable reply: %s", c->rd->errstr);
        if (rep == NULL)
            return 0;
        int rc = on_reply(g, c, rep);
        freeReplyObject(rep);
        if (rc != 0)
            return -1;
    }
}

/* Run cycles on every connection of g: `cycles` on each (the warm-up), or as many as
 * fit before `until`. Returns when every connection is idle, 0, or -1 on an error
 * (recorded for the team). */
static int gen_cycles(fgen *g, long cycles, int64_t until)
{
    g->until = until;
    g->busy = g->n;
    int64_t now = now_ns();
    for (int i = 0; i < g->n; i++) {
        g->c[i].left = until > 0 ? -1 : cycles;
        if (start_cycle(g, &g->c[i], now) != 0)
            return -1;
    }
    /* The warm-up's replies, or the last ones after the measured time, must come
     * within W7_LATE_MS: a server that stops answering fails the run, not hangs it. */
    int64_t limit = (until > 0 ? until : now) + (int64_t)W7_LATE_MS * 1000000;
    struct epoll_event ev[W7_EVENTS];
    while (g->busy > 0) {
        if (team_stopped(g->t))
            return -1;
        now = now_ns();
        if (now > limit) {
            team_error(g->t, "%s: %d connections still without a reply %d ms after the %s",
                       g->f->label, g->busy, W7_LATE_MS,
                       until > 0 ? "measured time" : "warm-up began");
            return -1;
        }
        /* At most 100 ms, so that another generator's error stops this one. */
        int wait_ms = (int)((limit - now) / 1000000) + 1;
        int n = epoll_wait(g->ep, ev, W7_EVENTS, wait_ms < 100 ? wait_ms : 100);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            team_error(g->t, "%s: epoll_wait: %s", g->f->label, strerror(errno));
            return -1;
        }
        for (int i = 0; i < n; i++) {
            fconn *c = ev[i].data.ptr;
            if ((ev[i].events & EPOLLOUT) && c->out != NULL && conn_flush(g, c) != 0)
                return -1;
            if ((ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && on_readable(g, c) != 0)
                return -1;
        }
    }
    return 0;
}

/* A generator: the warm-up, the start barrier, the measured run. */
static void fleet_worker(team *t, int id, void *p)
{
    fleet *f = p;
    fgen *g = &f->gen[id];
    g->t = t;
    long warm = W7_WARMUP_TOTAL / f->nconns;
    if (warm < W7_WARMUP_MIN)
        warm = W7_WARMUP_MIN;
    int rc = gen_cycles(g, warm, 0);
    team_ready(t);
    if (rc == 0 && !team_stopped(t))
        gen_cycles(g, 0, t->start_ns + f->secs_ns);
    team_end(t);
}

/* ---- a run ------------------------------------------------------------------- */

/* Connect c: to dlockd when d is set, else to node 1 (AUTH and SELECT as every admin
 * connection of the bench); then the socket goes non-blocking, for the generator. */
static int conn_open(bench_ctx *ctx, const fleet *f, const bench_dlockd *d, fconn *c, int id)
{
    c->id = id;
    c->fd = -1;
    if (d != NULL) {
        struct timeval tv = {.tv_sec = 10};
        c->rc = redisConnectWithTimeout("127.0.0.1", d->port, tv);
        if (c->rc == NULL || c->rc->err) {
            bench_fail(ctx, "%s: connection %d to dlockd: %s", f->label, id,
                       c->rc ? c->rc->errstr : "out of memory");
            return -1;
        }
    } else if ((c->rc = server_connect(&ctx->servers->s[0])) == NULL) {
        bench_fail(ctx, "%s: connection %d to node 1 failed (above)", f->label, id);
        return -1;
    }
    c->fd = c->rc->fd;
    int fl = fcntl(c->fd, F_GETFL);
    if (fl < 0 || fcntl(c->fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        bench_fail(ctx, "%s: fcntl O_NONBLOCK: %s", f->label, strerror(errno));
        return -1;
    }
    if ((c->rd = redisReaderCreate()) == NULL) {
        bench_fail(ctx, "%s: out of memory", f->label);
        return -1;
    }
    c->rng = ((uint64_t)now_ns() ^ (uint64_t)(id + 1) * UINT64_C(0x9E3779B97F4A7C15)) | 1;
    return 0;
}

/* fleet_run's work: connect everyone, warm up, measure; dlockd's status read with the
 * connections still open; close. */
static int fleet_side(bench_ctx *ctx, fleet *f, const bench_dlockd *d, fleet_result *res)
{
    int rc = -1, n = f->nconns;
    for (int k = 0; k < W7_GENERATORS; k++)
        f->gen[k] = (fgen){.f = f, .ep = -1};
    f->conns = bench_calloc(ctx, f->label, (size_t)n, sizeof *f->conns);
    if (f->conns == NULL)
        return -1;
    for (int i = 0; i < n; i++)
        f->conns[i].fd = -1;
    for (int i = 0; i < n; i++)
        if (conn_open(ctx, f, d, &f->conns[i], i) != 0)
            goto out;
    for (int k = 0; k < W7_GENERATORS; k++) {
        fgen *g = &f->gen[k];
        g->c = f->conns + k * n / W7_GENERATORS;
        g->n = (k + 1) * n / W7_GENERATORS - k * n / W7_GENERATORS;
        if ((g->ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
            bench_fail(ctx, "%s: epoll_create1: %s", f->label, strerror(errno));
            goto out;
        }
        for (int i = 0; i < g->n; i++) {
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &g->c[i]};
            if (epoll_ctl(g->ep, EPOLL_CTL_ADD, g->c[i].fd, &ev) != 0) {
                bench_fail(ctx, "%s: epoll_ctl: %s", f->label, strerror(errno));
                goto out;
            }
        }
    }
    team t;
    if (team_run(&t, f->label, W7_GENERATORS, 0, fleet_worker, f, NULL, NULL) != 0) {
        bench_fail(ctx, "%s", t.err);
        goto out;
    }
    res->rss_kb = res->threads = -1;
    if (d != NULL && dlockd_status(d, &res->rss_kb, &res->threads) != 0) {
        bench_fail(ctx, "%s: cannot read /proc/%d/status", f->label, (int)d->pid);
        goto out;
    }
    size_t total = 0;
    for (int k = 0; k < W7_GENERATORS; k++)
        total += f->gen[k].nlat;
    if (total == 0) {
        bench_fail(ctx, "%s: no cycle finished in %.0f s", f->label, (double)f->secs_ns / 1e9);
        goto out;
    }
    int64_t *all = bench_calloc(ctx, f->label, total, sizeof *all);
    if (all == NULL)
        goto out;
    size_t at = 0;
    for (int k = 0; k < W7_GENERATORS; k++) {
        memcpy(all + at, f->gen[k].lat, f->gen[k].nlat * sizeof *all);
        at += f->gen[k].nlat;
    }
    samples_sort(all, total);
    res->per_s = (double)total / ((double)f->secs_ns / 1e9);
    res->p50_us = (double)percentile_sorted(all, total, 50) / 1000;
    res->p99_us = (double)percentile_sorted(all, total, 99) / 1000;
    free(all);
    rc = 0;
out:
    for (int k = 0; k < W7_GENERATORS; k++) {
        if (f->gen[k].ep >= 0)
            close(f->gen[k].ep);
        free(f->gen[k].lat);
    }
    for (int i = 0; i < n; i++) {
        redisFreeCommand(f->conns[i].out);
        if (f->conns[i].rd != NULL)
            redisReaderFree(f->conns[i].rd);
        redisFree(f->conns[i].rc); /* closes the socket */
    }
    free(f->conns);
    return rc;
}

int fleet_run(bench_ctx *ctx, const fleet_spec *spec, fleet_result *res)
{
    fleet f = {.recipe = spec->d == NULL,
               .nconns = spec->nconns,
               .sha = spec->sha,
               .secs_ns = spec->secs_ns};
    snprintf(f.label, sizeof f.label, "%s", spec->label);
    snprintf(f.tag, sizeof f.tag, "%s", spec->tag);
    return fleet_side(ctx, &f, spec->d, res);
}
