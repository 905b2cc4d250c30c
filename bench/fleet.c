/*
 * fleet.c: W7, dlockd at fleet scale: many client connections through one dlockd,
 * beside the same clients doing the raw recipe directly on the redis-server that
 * dlockd fronts (node 1), in the same run.
 *
 * For each client count N (1, 16, 64, 256), the recipe, then dlockd, each measured
 * for --w7-seconds (3 s) after a warm-up that is not (the connections made, then a few
 * cycles on each: at least 3, and 200 over all of them):
 *   W7/recipe/cN  N connections to node 1, each cycling SET name token NX PX 10000 and
 *                 EVALSHA of the compare-and-delete script (SCRIPT LOAD once): the lock
 *                 every Redis client writes by hand, one round trip a call.
 *   W7/cN         N connections to dlockd, each cycling LOCK name TTL 10000 (a session
 *                 lock, dlockd's default) and UNLOCK name token. cycles_per_s carries
 *                 the ratio to W7/recipe/cN's; rss_kb and threads are dlockd's (VmRSS
 *                 and Threads of /proc/PID/status) at the end of the run, its N
 *                 connections still open.
 * Then W7/script (fleet_scripts.c): the server's own limit for dlock's scripts.
 * fleet_gen.c drives the connections: from one epoll loop, one request outstanding on
 * each, for the same work per request on both sides.
 *
 * W7 has a dlockd of its own, started as W6's is (daemon.c) but in front of node 1
 * alone, as the recipe is, whatever --nodes says; and its rss_kb and threads are then
 * those of W7's clients, whatever workloads ran before. W7 runs in the first round
 * only (main.c says why).
 */
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#define W7_SPARE_FDS 64 /* descriptors beside the connections: servers, pipes, admin */

static const int w7_counts[] = {1, 16, 64, 256};

/* The recipe's release, as it is usually written (and loaded once with SCRIPT LOAD). */
static const char w7_release_lua[] = "if redis.call(\"get\",KEYS[1]) == ARGV[1] then return "
                                     "redis.call(\"del\",KEYS[1]) else return 0 end";

/* 256 connections need as many descriptors: the soft limit goes up to the hard one
 * when it is lower than that, and a hard limit too low fails here, saying so, rather
 * than as a connection refused halfway. 0, or -1 after bench_fail. */
static int fleet_fds(bench_ctx *ctx, int nconns)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)nconns + W7_SPARE_FDS;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        bench_fail(ctx, "W7: getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
        return -1;
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need)
        return 0;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
        bench_fail(ctx,
                   "W7: %d connections need %llu open files, and the hard limit "
                   "(RLIMIT_NOFILE) is %llu: raise it (ulimit -Hn, LimitNOFILE=)",
                   nconns, (unsigned long long)need, (unsigned long long)rl.rlim_max);
        return -1;
    }
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        bench_fail(ctx, "W7: setrlimit(RLIMIT_NOFILE) to %llu: %s (%d connections need %llu)",
                   (unsigned long long)rl.rlim_max, strerror(errno), nconns,
                   (unsigned long long)need);
        return -1;
    }
    progress("W7: open files limit raised from %llu to %llu", (unsigned long long)was,
             (unsigned long long)rl.rlim_cur);
    return 0;
}

/* The recipe, then dlockd, at n connections, and their figures. */
static int w7_count(bench_ctx *ctx, const bench_dlockd *d, const char *sha, int n)
{
    long long secs = ctx->opt->w7_seconds;
    char label[32], vs[32], tag[64];
    snprintf(vs, sizeof vs, "W7/recipe/c%d", n);
    snprintf(tag, sizeof tag, "%sw7raw:c%d", BENCH_PREFIX, n);
    fleet_spec spec = {.label = vs, .tag = tag, .nconns = n, .sha = sha};
    spec.secs_ns = secs * INT64_C(1000000000);
    progress("%s: %d connection%s to node 1, SET NX PX + EVALSHA, %lld s", vs, n, n > 1 ? "s" : "",
             secs);
    fleet_result raw, svc;
    int rc = fleet_run(ctx, &spec, &raw);
    if (rc == 0) {
        fig(vs, "cycles_per_s", raw.per_s, 0, -1, NULL);
        fig(vs, "p50_us", raw.p50_us, 0, -1, NULL);
        fig(vs, "p99_us", raw.p99_us, 0, -1, NULL);
        progress("%s: %.0f cycles/s, p50 %.0f us, p99 %.0f us", vs, raw.per_s, raw.p50_us,
                 raw.p99_us);
    }
    /* dlockd adds its prefix (the bench's) to the names itself. */
    snprintf(label, sizeof label, "W7/c%d", n);
    snprintf(tag, sizeof tag, "w7:c%d", n);
    spec.label = label;
    spec.d = d;
    progress("%s: %d connection%s to dlockd, LOCK + UNLOCK, %lld s", label, n, n > 1 ? "s" : "",
             secs);
    if (fleet_run(ctx, &spec, &svc) != 0)
        return -1;
    double ratio = rc == 0 && raw.per_s > 0 ? svc.per_s / raw.per_s : -1;
    fig(label, "cycles_per_s", svc.per_s, 0, ratio, vs);
    fig(label, "p50_us", svc.p50_us, 0, -1, NULL);
    fig(label, "p99_us", svc.p99_us, 0, -1, NULL);
    fig(label, "rss_kb", (double)svc.rss_kb, 0, -1, NULL);
    fig(label, "threads", (double)svc.threads, 0, -1, NULL);
    progress("%s: %.0f cycles/s (%.2f of the recipe's), p50 %.0f us, p99 %.0f us; dlockd %ld "
             "KiB, %ld threads",
             label, svc.per_s, ratio, svc.p50_us, svc.p99_us, svc.rss_kb, svc.threads);
    return rc;
}

int run_w7(bench_ctx *ctx)
{
    const bench_opts *o = ctx->opt;
    int most = w7_counts[sizeof w7_counts / sizeof w7_counts[0] - 1];
    if (fleet_fds(ctx, most) != 0)
        return -1;
    redisContext *admin = server_connect(&ctx->servers->s[0]);
    if (admin == NULL) {
        bench_fail(ctx, "W7: cannot connect to node 1");
        return -1;
    }
    char sha[41] = "";
    redisReply *r = server_cmd(admin, "SCRIPT LOAD %s", w7_release_lua);
    if (r != NULL && r->type == REDIS_REPLY_STRING && r->len == 40)
        memcpy(sha, r->str, sizeof sha);
    freeReplyObject(r);
    redisFree(admin);
    if (sha[0] == '\0') {
        bench_fail(ctx, "W7: SCRIPT LOAD of the recipe's release failed");
        return -1;
    }
    bench_dlockd d;
    progress("W7: starting a dlockd in front of node 1");
    if (dlockd_start(&d, ctx->servers, 1, o->dlockd, ctx->place->server_cpu, o->timeout_ms,
                     false) != 0) {
        bench_fail(ctx, "W7: dlockd did not start");
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < sizeof w7_counts / sizeof w7_counts[0]; i++)
        if (w7_count(ctx, &d, sha, w7_counts[i]) != 0)
            rc = -1;
    dlockd_stop(&d);
    if (w7_script_limits(ctx) != 0)
        rc = -1;
    return rc;
}
