/*
 * service.c: the workloads through dlockd, the lock service.
 *
 * dlockd is a process of the bench's own (daemon.c), in front of the same
 * redis-server that W1 uses.
 *
 *   W6  W1 through dlockd: one hiredis connection, LOCK name TTL 10000 then UNLOCK
 *       name token per cycle, no pipelining (a cycle is two round trips to dlockd, each
 *       of which makes one to Redis). cycles_per_s carries the ratio to W1's of the
 *       same round; p50_us the ratio to W1's p50, and p50_extra_rtt the difference
 *       from W1's p50 in RTTs (redis-benchmark's p50 at -c 1). The LOCK is a session
 *       lock, dlockd's default (renewed while the connection lives, released when it
 *       closes); W6/detached is the same with DETACHED (a plain lease, as W1's), so the
 *       two show what the session's bookkeeping costs. W6/metrics is W6 through a
 *       second dlockd with --metrics-port, its ratio to W6's of the same round: what
 *       the HTTP listener and its timer cost the lock path (the counters and
 *       histograms are kept either way).
 *   W5/php-recipe, W5/php-dlockd, W5/php-stock  the flash sale in PHP: 20 php-cli
 *       processes (bench/php/buyer.php, phpredis) started together, selling the W5
 *       stock with the usual PHP recipe (SET NX EX, usleep(1000) between tries, a Lua
 *       release) or through dlockd (LOCK WAIT 5000, UNLOCK), the stock read and
 *       decremented on the redis-server either way; or with no lock, through dlockd's
 *       STOCK (RESERVE sku 1 WAIT 5000, COMMIT), its STATUS checked after. The other
 *       two's sellout_ms carries its ratio to php-recipe's of the same round (below 1:
 *       faster); each reports max_wait_ms and buyers_served as W5's peers do. With
 *       --php-delay-ms D the three run again with the buyers reaching Redis and
 *       dlockd through relays that delay D ms each way (.../dDms): buyers across a
 *       network from their servers, dlockd beside Redis.
 *   W5/php-raw, W5/php-package (and -predis)  one php process per Redis client
 *       alternating rounds of LOCK + UNLOCK sent raw and through the PHP package
 *       (clients/php) on one connection to dlockd: what the package adds to a cycle
 *       (pkgcycles.c, run after the direct sale pair).
 */
#include "bench.h"
#include "relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define W6_WARMUP      100
#define PHP_MAX_BUYERS 256

/* ---- W6 ------------------------------------------------------------------------ */

typedef struct w6_arg {
    const bench_ctx *ctx;
    const bench_dlockd *d;
    bool detached;
    long cycles;
    long warmup;
    int64_t *lat; /* [cycle], nanoseconds */
} w6_arg;

/* One LOCK + UNLOCK. 0, or -1 with why in err. */
static int w6_cycle(redisContext *c, const char *name, bool detached, char *err, size_t errlen)
{
    redisReply *r = detached ? redisCommand(c, "LOCK %s TTL %d DETACHED", name, BENCH_TTL_MS)
                             : redisCommand(c, "LOCK %s TTL %d", name, BENCH_TTL_MS);
    if (r == NULL) {
        snprintf(err, errlen, "LOCK %s: %s", name, c->errstr);
        return -1;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len >= 64) {
        snprintf(err, errlen, "LOCK %s: unexpected reply (type %d%s%s)", name, r->type,
                 r->type == REDIS_REPLY_ERROR ? ": " : "",
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
        freeReplyObject(r);
        return -1;
    }
    char token[64];
    memcpy(token, r->element[0]->str, r->element[0]->len + 1);
    freeReplyObject(r);
    r = redisCommand(c, "UNLOCK %s %s", name, token);
    if (r == NULL) {
        snprintf(err, errlen, "UNLOCK %s: %s", name, c->errstr);
        return -1;
    }
    bool ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (!ok)
        snprintf(err, errlen, "UNLOCK %s: expected 1, got type %d (%lld%s%s)", name, r->type,
                 r->integer, r->str ? " " : "", r->str ? r->str : "");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

static void w6_worker(team *t, int id, void *p)
{
    w6_arg *a = p;
    char name[128], err[600];
    struct timeval tv = {.tv_sec = 10};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", a->d->port, tv);
    if (c == NULL || c->err) {
        team_error(t, "connect to dlockd: %s", c ? c->errstr : "out of memory");
        redisFree(c);
        c = NULL;
    } else {
        redisSetTimeout(c, tv);
    }
    /* Warm-up, as W1's: not measured, names of their own. */
    for (long i = 0; c != NULL && i < a->warmup && !team_stopped(t); i++) {
        snprintf(name, sizeof name, "w6%s:r%d:warm:%d:%ld", a->detached ? "d" : "", a->ctx->round,
                 id, i);
        if (w6_cycle(c, name, a->detached, err, sizeof err) != 0) {
            team_error(t, "warm-up: %s", err);
            break;
        }
    }
    team_ready(t);
    for (long i = 0; c != NULL && i < a->cycles && !team_stopped(t); i++) {
        snprintf(name, sizeof name, "w6%s:r%d:%d:%ld", a->detached ? "d" : "", a->ctx->round, id,
                 i);
        int64_t t0 = now_ns();
        if (w6_cycle(c, name, a->detached, err, sizeof err) != 0) {
            team_error(t, "%s", err);
            break;
        }
        a->lat[i] = now_ns() - t0;
        atomic_fetch_add(&t->done, 1);
    }
    team_end(t);
    redisFree(c);
}

/* One W6 run through d: session locks, or detached ones. */
static int w6_one(bench_ctx *ctx, const bench_dlockd *d, const char *suffix, bool detached)
{
    const bench_opts *o = ctx->opt;
    char label[32];
    bench_label(label, sizeof label, "W6", o->nodes, suffix);
    if (d == NULL || d->pid <= 0) {
        bench_fail(ctx, "%s: dlockd is not running", label);
        return -1;
    }
    w6_arg a = {.ctx = ctx, .d = d, .detached = detached, .cycles = o->w6_cycles};
    a.warmup = a.cycles / 10 < W6_WARMUP ? a.cycles / 10 : W6_WARMUP;
    a.lat = bench_calloc(ctx, label, (size_t)a.cycles, sizeof *a.lat);
    if (a.lat == NULL)
        return -1;
    progress("%s: 1 client x %ld cycles through dlockd (port %d)", label, a.cycles, d->port);
    team t;
    if (team_run(&t, label, 1, a.cycles, w6_worker, &a, NULL, NULL) != 0) {
        bench_fail(ctx, "%s: %s", label, t.err);
        free(a.lat);
        return -1;
    }
    double secs = (double)(t.end_ns - t.start_ns) / 1e9;
    double per_s = secs > 0 ? (double)a.cycles / secs : 0;
    samples_sort(a.lat, (size_t)a.cycles);
    double p50 = (double)percentile_sorted(a.lat, (size_t)a.cycles, 50) / 1000;
    double p99 = (double)percentile_sorted(a.lat, (size_t)a.cycles, 99) / 1000;
    free(a.lat);
    /* Without W1 in this round there is nothing to compare with (main runs W1 with
     * W6, so this only happens when W1 failed). */
    bool w1 = ctx->w1_per_s > 0 && ctx->w1_p50_us > 0;
    if (d == ctx->dlockd_metrics) {
        /* Against W6 of this round: what --metrics-port costs the lock path. */
        fig(label, "cycles_per_s", per_s, 0, ctx->w6_per_s > 0 ? per_s / ctx->w6_per_s : -1, "W6");
        progress("%s: %.0f cycles/s (%.2f s)", label, per_s, secs);
        return 0;
    }
    if (!detached)
        ctx->w6_per_s = per_s;
    fig(label, "cycles_per_s", per_s, 0, w1 ? per_s / ctx->w1_per_s : -1, "W1");
    fig(label, "p50_us", p50, 0, w1 ? p50 / ctx->w1_p50_us : -1, "W1 p50");
    if (w1 && ctx->rtt_us > 0)
        fig(label, "p50_extra_rtt", (p50 - ctx->w1_p50_us) / ctx->rtt_us, 2, -1, NULL);
    if (ctx->w6_hop_p50_us > 0 && ctx->rtt_us > 0)
        fig(label, "p50_over_hop_rtt", (p50 - ctx->w6_hop_p50_us) / ctx->rtt_us, 2, -1, NULL);
    fig(label, "p99_us", p99, 0, -1, NULL);
    progress("%s: %.0f cycles/s, p50 %.0f us, p99 %.0f us (%.2f s)", label, per_s, p50, p99, secs);
    return 0;
}

/* W6/hop: W1 through one hop per node (hop.c), its figures beside W1's as W6's are.
 * Its p50 is kept for W6's p50_over_hop_rtt. */
static int w6_hop(bench_ctx *ctx)
{
    const bench_opts *o = ctx->opt;
    char label[32], urls[BENCH_MAX_NODES * 620];
    bench_label(label, sizeof label, "W6", o->nodes, "/hop");
    bench_hop hops[BENCH_MAX_NODES] = {0};
    int rc = 0;
    urls[0] = '\0';
    for (int i = 0; i < o->nodes && i < ctx->servers->n; i++) {
        const bench_server *s = &ctx->servers->s[i];
        if (hop_start(s->host, s->port, &hops[i]) != 0) {
            bench_fail(ctx, "%s: the hop to %s:%d did not start: %s", label, s->host, s->port,
                       strerror(errno));
            rc = -1;
            goto out;
        }
        char one[620];
        servers_url_at(s, hops[i].port, one, sizeof one);
        urls_append(urls, sizeof urls, one);
    }
    double per_s = 0, p50 = 0;
    bool w1 = ctx->w1_per_s > 0 && ctx->w1_p50_us > 0;
    progress("%s: W1 through a process that only passes bytes", label);
    if (w1_run_on(ctx, label, "w6hop", urls, w1 ? ctx->w1_per_s : -1, "W1", &per_s, &p50) != 0) {
        rc = -1;
        goto out;
    }
    if (w1 && ctx->rtt_us > 0)
        fig(label, "p50_extra_rtt", (p50 - ctx->w1_p50_us) / ctx->rtt_us, 2, -1, NULL);
    ctx->w6_hop_p50_us = p50;
out:
    for (int i = 0; i < BENCH_MAX_NODES; i++)
        hop_stop(&hops[i]);
    return rc;
}

int run_w6(bench_ctx *ctx)
{
    ctx->w6_per_s = ctx->w6_hop_p50_us = 0;
    int rc = w6_hop(ctx);
    if (w6_one(ctx, ctx->dlockd, "", false) != 0)
        rc = -1;
    if (w6_one(ctx, ctx->dlockd, "/detached", true) != 0)
        rc = -1;
    if (w6_one(ctx, ctx->dlockd_metrics, "/metrics", false) != 0)
        rc = -1;
    return rc;
}

/* ---- the PHP flash sale ------------------------------------------------------- */

/* The directory of buyer.php and cycles.php: $DLOCK_BENCH_PHP_DIR, else the source
 * tree's bench/php (the bench runs from a build tree; it is not installed). */
const char *php_dir(void)
{
    const char *env = getenv("DLOCK_BENCH_PHP_DIR");
    return env != NULL && env[0] != '\0' ? env : DLOCK_BENCH_PHP_DIR;
}

/* "exit status N" or "killed by signal N", from a wait status. */
void describe_status(int st, char *out, size_t n)
{
    if (WIFEXITED(st))
        snprintf(out, n, "exit status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(out, n, "killed by signal %d", WTERMSIG(st));
    else
        snprintf(out, n, "wait status %d", st);
}

/* Everything a php process printed (up to len - 1 bytes), NUL-terminated. */
void read_all(int fd, char *buf, size_t len)
{
    size_t got = 0;
    while (got < len - 1) {
        ssize_t n = read(fd, buf + got, len - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
}

/* Where the buyers reach Redis and dlockd: directly (delay_ms 0), or through a relay in
 * front of each that delays every byte delay_ms each way. */
typedef struct php_route {
    int delay_ms;
    const char *host; /* Redis's, or the relays' */
    int port, dport;  /* Redis's and dlockd's, or their relays' */
    fr_relay *relay[2];
} php_route;

/* A STOCK command sent to the bench's dlockd (NULL when it could not be sent); the
 * reply is the caller's. */
static redisReply *dlockd_stock(bench_ctx *ctx, const char *fmt, const char *sku, long qty)
{
    struct timeval tv = {.tv_sec = 10};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", ctx->dlockd->port, tv);
    redisReply *r = NULL;
    if (c != NULL && !c->err)
        r = redisCommand(c, fmt, sku, qty);
    redisFree(c);
    return r;
}

/* The field of a STOCK STATUS reply (its flat field/value array), or -1. */
static long long stock_field(const redisReply *r, const char *field)
{
    for (size_t i = 0; r != NULL && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
        if (strcmp(r->element[i]->str, field) == 0)
            return r->element[i + 1]->integer;
    return -1;
}

/* One PHP sale: mode "recipe", "dlockd" or "stock". *sellout_ms gets its sellout time;
 * recipe_ms (0: none) is php-recipe's of the same round, for the others' ratio. */
static int php_sale(bench_ctx *ctx, const char *php, const char *mode, const php_route *rt,
                    redisContext *admin, double recipe_ms, double *sellout_ms)
{
    const bench_opts *o = ctx->opt;
    const bench_server *s = &ctx->servers->s[0];
    int n = o->php_buyers;
    char label[48], vs[48], tag[16] = "", script[PATH_MAX], prefix[96], name[64], port[16], db[16],
                            dport[16];
    if (rt->delay_ms > 0)
        snprintf(tag, sizeof tag, "/d%dms", rt->delay_ms);
    snprintf(label, sizeof label, "W5/php-%s%s", mode, tag);
    snprintf(vs, sizeof vs, "W5/php-recipe%s", tag);
    snprintf(script, sizeof script, "%s/buyer.php", php_dir());
    snprintf(prefix, sizeof prefix, "%sw5php:r%d:%s%s:", BENCH_PREFIX, ctx->round, mode, tag);
    bool stock = strcmp(mode, "stock") == 0;
    snprintf(name, sizeof name, "w5php:r%d%s:%s", ctx->round, tag, stock ? "sku" : "sale");
    snprintf(port, sizeof port, "%d", rt->port);
    snprintf(db, sizeof db, "%d", s->db);
    snprintf(dport, sizeof dport, "%d", rt->dport);
    if (access(script, R_OK) != 0) {
        bench_fail(ctx, "%s: %s: %s (set $DLOCK_BENCH_PHP_DIR)", label, script, strerror(errno));
        return -1;
    }
    if (strcmp(mode, "recipe") != 0 && (ctx->dlockd == NULL || ctx->dlockd->pid <= 0)) {
        bench_fail(ctx, "%s: dlockd is not running", label);
        return -1;
    }
    char k_stock[128], k_ready[128], k_go[128];
    snprintf(k_stock, sizeof k_stock, "%sstock", prefix);
    snprintf(k_ready, sizeof k_ready, "%sready", prefix);
    snprintf(k_go, sizeof k_go, "%sgo", prefix);
    /* The units: a counter on the server, or the SKU's stock through dlockd. */
    redisReply *r = stock ? dlockd_stock(ctx, "STOCK SET %s %ld", name, o->w5_stock)
                          : server_cmd(admin, "SET %s %ld", k_stock, o->w5_stock);
    if (r != NULL && r->type == REDIS_REPLY_ERROR) {
        freeReplyObject(r);
        r = NULL;
    }
    freeReplyObject(r);
    if (r != NULL)
        freeReplyObject(r = server_cmd(admin, "DEL %s %s", k_ready, k_go));
    if (r == NULL) {
        bench_fail(ctx, "%s: cannot set up the sale", label);
        return -1;
    }

    /* One buyer per process, its number (ID) the last argument. */
    const char *argv[] = {php, script, mode,   rt->host, port, s->password,
                          db,  dport,  prefix, name,     NULL};
    progress("%s: %d php buyers, stock %ld", label, n, o->w5_stock);
    sale_result res;
    char why[256] = "";
    if (sale_run(ctx, label, argv, n, true, n, admin, k_ready, k_go, &res, why, sizeof why) != 0) {
        bench_fail(ctx, "%s: %s", label, why);
        return -1;
    }
    if (res.have_stats && o->verbose)
        stats_print(label, &res.before, &res.after);
    long long left = -1, sold = -1;
    if (stock) {
        /* What dlockd says is left (available or still reserved) and sold. */
        r = dlockd_stock(ctx, "STOCK STATUS %s", name, 0);
        long long avail = stock_field(r, "available"), held = stock_field(r, "reserved");
        left = avail < 0 || held < 0 ? -1 : avail + held;
        sold = stock_field(r, "sold");
    } else {
        r = server_cmd(admin, "GET %s", k_stock);
        left = r != NULL && r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
    }
    freeReplyObject(r);
    *sellout_ms = (double)(res.last_sale_ns - res.t0_ns) / 1e6;
    fig(label, "sellout_ms", *sellout_ms, 0, recipe_ms > 0 ? *sellout_ms / recipe_ms : -1, vs);
    fig(label, "retries", (double)res.retries, 0, -1, NULL);
    fig(label, "max_wait_ms", (double)res.max_wait_ns / 1e6, 1, -1, NULL);
    fig(label, "buyers_served", (double)res.served, 0, -1, NULL);
    /* Everything the sale made the server do, the start signal's BLPOPs and the
     * buyers' final look at an empty stock included. */
    if (res.have_stats && res.bought > 0)
        fig(label, "cmds_per_unit", (double)res.cmds / (double)res.bought, 1, -1, NULL);
    return w5_outcome(ctx, label, o->w5_stock, res.bought, res.retries, *sellout_ms, left,
                      stock ? &sold : NULL);
}

/* The recipe's sale, then dlockd's with a lock, then with STOCK, the buyers reaching
 * their servers by rt. */
static int php_pair(bench_ctx *ctx, const char *php, const php_route *rt, redisContext *admin)
{
    double recipe_ms = 0, dlockd_ms = 0, stock_ms = 0;
    int rc = php_sale(ctx, php, "recipe", rt, admin, 0, &recipe_ms);
    if (php_sale(ctx, php, "dlockd", rt, admin, rc == 0 ? recipe_ms : 0, &dlockd_ms) != 0)
        rc = -1;
    if (php_sale(ctx, php, "stock", rt, admin, recipe_ms, &stock_ms) != 0)
        rc = -1;
    return rc;
}

int run_w5_php(bench_ctx *ctx)
{
    char php[PATH_MAX];
    /* No php is a failure, not a skip: the figures this run promises would be missing. */
    if (dh_find_exe("php", "DLOCK_PHP", php, sizeof php) != 0) {
        bench_fail(ctx, "W5/php: php not found on the PATH nor in $DLOCK_PHP (Debian: php-cli "
                        "php-redis)");
        return -1;
    }
    redisContext *admin = server_connect(&ctx->servers->s[0]);
    if (admin == NULL) {
        bench_fail(ctx, "W5/php: cannot connect to node 1");
        return -1;
    }
    const bench_server *s = &ctx->servers->s[0];
    php_route direct = {.host = s->host, .port = s->port};
    direct.dport = ctx->dlockd != NULL ? ctx->dlockd->port : 0;
    int rc = php_pair(ctx, php, &direct, admin);
    /* The package's cost per cycle, on the direct route: through a relay its delay
     * would be most of a cycle. */
    if (run_w5_php_cycles(ctx, php) != 0)
        rc = -1;
    int d = ctx->opt->php_delay_ms;
    if (d > 0) {
        php_route net = {.delay_ms = d, .host = "127.0.0.1"};
        net.relay[0] = fr_start_to(s->host, s->port);
        net.relay[1] = fr_start_to("127.0.0.1", direct.dport);
        if (net.relay[0] == NULL || net.relay[1] == NULL) {
            bench_fail(ctx, "W5/php: the relays did not start");
            rc = -1;
        } else {
            for (int i = 0; i < 2; i++)
                fr_delay(net.relay[i], d, d);
            net.port = fr_port(net.relay[0]);
            net.dport = fr_port(net.relay[1]);
            if (php_pair(ctx, php, &net, admin) != 0)
                rc = -1;
        }
        for (int i = 0; i < 2; i++)
            fr_stop(net.relay[i]);
    }
    redisFree(admin);
    return rc;
}
