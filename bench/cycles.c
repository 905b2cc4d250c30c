/*
 * cycles.c: W1, W2 and W4, the uncontended workloads.
 *
 * One cycle is dlock_acquire (ttl 10 s, no wait) of a name nobody else uses (the
 * workload, round, client and cycle are in it, so no name is used twice in a run), then
 * dlock_release: two script calls, so two round trips on each node. Its time is taken
 * around both calls with CLOCK_MONOTONIC. Every client first runs a few warm-up cycles
 * that are not counted: the first call connects (the handshake reads INFO) and the
 * first EVALSHA of a script meets -NOSCRIPT and is resent as EVAL; neither is what
 * the figures are about. redis-benchmark has no warm-up, but its connections are made
 * before it starts the clock.
 *
 *   W1  1 client, 20,000 cycles: cycles/s (ratio to SET rps at -c 1), p50, p99.
 *   W2  8 clients on 8 threads, 5,000 cycles each, names of their own: total cycles/s
 *       (ratio to SET rps at -c 8), and the process's peak RSS after it.
 *   W4  W1 on 1, 3 and 5 nodes (Redlock), on loopback and through relays that delay
 *       every byte by D each way; the p50's ratio is to the 1-node p50 under the same
 *       delay, so it shows what the fan-out costs beyond one node's round trip.
 */
#include "bench.h"
#include "relay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARMUP_CYCLES 100

typedef struct cyc_arg {
    const bench_ctx *ctx;
    const char *urls;
    const char *tag; /* name prefix: "w1", "w2", "w4n3d1" */
    long cycles;     /* per client */
    long warmup;
    int64_t permits; /* > 0: semaphore permits (dlock_sem_acquire) */
    int shared;      /* dlock_opts.shared */
    int64_t *lat;    /* [client * cycles + i], nanoseconds */
} cyc_arg;

typedef struct cyc_result {
    long cycles;
    double secs;
    double per_s;
    int64_t p50_ns, p99_ns;
} cyc_result;

/* A lock, or a permit when permits > 0. */
static int take(dlock_client *c, const char *name, const dlock_opts *o, int64_t permits,
                dlock_lock **l)
{
    return permits > 0 ? dlock_sem_acquire(c, name, permits, o, l) : dlock_acquire(c, name, o, l);
}

static void cyc_worker(team *t, int id, void *p)
{
    cyc_arg *a = p;
    dlock_config cfg;
    bench_dlock_config(a->ctx, &cfg);
    dlock_client *c = NULL;
    int rc = dlock_client_new(a->urls, &cfg, &c);
    if (rc != DLOCK_OK)
        team_error(t, "dlock_client_new: %s: %s", dlock_strerror(rc), dlock_errmsg());
    dlock_opts o = {0};
    o.ttl_ms = BENCH_TTL_MS;
    o.shared = a->shared;
    char name[128];
    /* Warm-up: not measured, names of their own. */
    for (long i = 0; i < a->warmup && rc == DLOCK_OK; i++) {
        dlock_lock *l;
        snprintf(name, sizeof name, "%s:r%d:warm:%d:%ld", a->tag, a->ctx->round, id, i);
        if ((rc = take(c, name, &o, a->permits, &l)) == DLOCK_OK)
            rc = dlock_release(l);
        if (rc != DLOCK_OK)
            team_error(t, "warm-up cycle: %s: %s", dlock_strerror(rc), dlock_errmsg());
    }
    team_ready(t);
    int64_t *lat = a->lat + (size_t)id * (size_t)a->cycles;
    for (long i = 0; i < a->cycles && !team_stopped(t); i++) {
        dlock_lock *l;
        snprintf(name, sizeof name, "%s:r%d:%d:%ld", a->tag, a->ctx->round, id, i);
        int64_t t0 = now_ns();
        rc = take(c, name, &o, a->permits, &l);
        if (rc != DLOCK_OK) {
            team_error(t, "acquire %s: %s: %s", name, dlock_strerror(rc), dlock_errmsg());
            break;
        }
        rc = dlock_release(l);
        int64_t t1 = now_ns();
        if (rc != DLOCK_OK) {
            team_error(t, "release %s: %s: %s", name, dlock_strerror(rc), dlock_errmsg());
            break;
        }
        lat[i] = t1 - t0;
        atomic_fetch_add(&t->done, 1);
    }
    team_end(t);
    dlock_client_free(c);
}

/* Run `clients` clients of `cycles` cycles each on urls, taking locks (permits 0,
 * shared as given) or semaphore permits. 0, or -1 after bench_fail. */
static int cycles_run_kind(bench_ctx *ctx, const char *label, const char *tag, const char *urls,
                           int clients, long cycles, long warmup, int64_t permits, int shared,
                           cyc_result *res)
{
    cyc_arg a = {.ctx = ctx,
                 .urls = urls,
                 .tag = tag,
                 .cycles = cycles,
                 .warmup = warmup,
                 .permits = permits,
                 .shared = shared};
    size_t total = (size_t)clients * (size_t)cycles;
    a.lat = bench_calloc(ctx, label, total, sizeof *a.lat);
    if (a.lat == NULL)
        return -1;
    progress("%s: %d client%s x %ld cycles on %s", label, clients, clients > 1 ? "s" : "", cycles,
             urls);
    team t;
    int rc = team_run(&t, label, clients, (long)total, cyc_worker, &a, NULL, NULL);
    if (rc != 0) {
        bench_fail(ctx, "%s: %s", label, t.err);
        free(a.lat);
        return -1;
    }
    res->cycles = (long)total;
    res->secs = (double)(t.end_ns - t.start_ns) / 1e9;
    res->per_s = res->secs > 0 ? (double)total / res->secs : 0;
    samples_sort(a.lat, total);
    res->p50_ns = percentile_sorted(a.lat, total, 50);
    res->p99_ns = percentile_sorted(a.lat, total, 99);
    free(a.lat);
    progress("%s: %.0f cycles/s, p50 %.0f us, p99 %.0f us (%.2f s)", label, res->per_s,
             (double)res->p50_ns / 1000, (double)res->p99_ns / 1000, res->secs);
    return 0;
}

/* Run `clients` clients of `cycles` cycles each on urls. 0, or -1 after bench_fail. */
static int cycles_run(bench_ctx *ctx, const char *label, const char *tag, const char *urls,
                      int clients, long cycles, long warmup, cyc_result *res)
{
    return cycles_run_kind(ctx, label, tag, urls, clients, cycles, warmup, 0, 0, res);
}

/* -1 (no ratio printed) when the denominator is unknown. */
static double ratio(double a, double b)
{
    return b > 0 ? a / b : -1;
}

/* W1 and W2: `clients` clients each run `cycles` acquire + release cycles on distinct
 * names of the first --nodes servers; the figures' ratio is to redis-benchmark's SET
 * rate at the same number of clients (rps, named vs). The run's label is returned in
 * label. */
static int uncontended(bench_ctx *ctx, const char *w, const char *tag, int clients, long cycles,
                       double rps, const char *vs, char label[32], double *per_s, double *p50_us)
{
    const bench_opts *o = ctx->opt;
    char urls[BENCH_MAX_NODES * 620];
    servers_urls(ctx->servers, 0, o->nodes, urls, sizeof urls);
    bench_label(label, 32, w, o->nodes, "");
    long warm = cycles / 10 < WARMUP_CYCLES ? cycles / 10 : WARMUP_CYCLES;
    cyc_result r;
    if (cycles_run(ctx, label, tag, urls, clients, cycles, warm, &r) != 0)
        return -1;
    /* The first line of each of W1 and W2 is cycles_per_s: readers of the BENCH lines
     * take it as the workload's headline figure. */
    fig(label, "cycles_per_s", r.per_s, 0, ratio(r.per_s, rps), vs);
    *per_s = r.per_s;
    *p50_us = (double)r.p50_ns / 1000;
    fig(label, "p50_us", *p50_us, 0, -1, NULL);
    fig(label, "p99_us", (double)r.p99_ns / 1000, 0, -1, NULL);
    return 0;
}

int w1_run_on(bench_ctx *ctx, const char *label, const char *tag, const char *urls, double rps,
              const char *vs, double *per_s, double *p50_us)
{
    long cycles = ctx->opt->w1_cycles;
    long warm = cycles / 10 < WARMUP_CYCLES ? cycles / 10 : WARMUP_CYCLES;
    cyc_result r;
    if (cycles_run(ctx, label, tag, urls, 1, cycles, warm, &r) != 0)
        return -1;
    fig(label, "cycles_per_s", r.per_s, 0, ratio(r.per_s, rps), vs);
    fig(label, "p50_us", (double)r.p50_ns / 1000, 0, -1, NULL);
    fig(label, "p99_us", (double)r.p99_ns / 1000, 0, -1, NULL);
    if (per_s != NULL)
        *per_s = r.per_s;
    if (p50_us != NULL)
        *p50_us = (double)r.p50_ns / 1000;
    return 0;
}

/* W1's other kinds, each beside the lock of the same run: a semaphore of one permit
 * (which is the exclusive lock), of three (a shared holder among at most three), and
 * a shared lock. */
static int w1_kinds(bench_ctx *ctx, const char *w1_label, double w1_per_s)
{
    static const struct {
        const char *name;
        int64_t permits;
        int shared;
    } kinds[] = {{"sem1", 1, 0}, {"sem3", 3, 0}, {"shared", 0, 1}};
    const bench_opts *o = ctx->opt;
    char urls[BENCH_MAX_NODES * 620];
    servers_urls(ctx->servers, 0, o->nodes, urls, sizeof urls);
    long warm = o->w1_cycles / 10 < WARMUP_CYCLES ? o->w1_cycles / 10 : WARMUP_CYCLES;
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        /* A semaphore of more than one permit needs one server. */
        if (kinds[i].permits > 1 && o->nodes > 1)
            continue;
        char label[48], tag[16];
        snprintf(label, sizeof label, "%s/%s", w1_label, kinds[i].name);
        snprintf(tag, sizeof tag, "w1%s", kinds[i].name);
        cyc_result r;
        if (cycles_run_kind(ctx, label, tag, urls, 1, o->w1_cycles, warm, kinds[i].permits,
                            kinds[i].shared, &r) != 0)
            return -1;
        fig(label, "cycles_per_s", r.per_s, 0, ratio(r.per_s, w1_per_s), "W1 lock");
        fig(label, "p50_us", (double)r.p50_ns / 1000, 0, -1, NULL);
    }
    return 0;
}

int run_w1(bench_ctx *ctx)
{
    char label[32];
    double per_s = 0, p50 = 0;
    ctx->w1_per_s = ctx->w1_p50_us = 0;
    if (uncontended(ctx, "W1", "w1", 1, ctx->opt->w1_cycles, ctx->rps_c1, "SET rps -c1", label,
                    &per_s, &p50) != 0)
        return -1;
    /* W6 runs next and compares itself with these. */
    ctx->w1_per_s = per_s;
    ctx->w1_p50_us = p50;
    return w1_kinds(ctx, label, per_s);
}

int run_w2(bench_ctx *ctx)
{
    const bench_opts *o = ctx->opt;
    char label[32];
    double per_s, p50;
    if (uncontended(ctx, "W2", "w2", o->w2_clients, o->w2_cycles, ctx->rps_c8, "SET rps -c8", label,
                    &per_s, &p50) != 0)
        return -1;
    /* ru_maxrss is the peak of the process so far: the baselines ran in children
     * (not counted), W1 before this used less, so in the first round it is W2's peak.
     * Later rounds come after W5's 50 buyers, so they do not report it. */
    if (ctx->round == 1)
        fig(label, "peak_rss_kb", (double)place_peak_rss_kb(), 0, -1, NULL);
    return 0;
}

/* W4 for one delay (0: loopback): 1 node first (the ratio's denominator), then each
 * of --w4-nodes. */
static int w4_delay(bench_ctx *ctx, int delay_ms, int maxn)
{
    const bench_opts *o = ctx->opt;
    fr_relay *relays[BENCH_MAX_NODES] = {0};
    char urls[BENCH_MAX_NODES * 620];
    char one[BENCH_MAX_NODES][620];
    int rc = 0;
    for (int i = 0; i < maxn; i++) {
        const bench_server *s = &ctx->servers->s[i];
        if (delay_ms == 0) {
            snprintf(one[i], sizeof one[i], "%s", s->url);
            continue;
        }
        relays[i] = fr_start_to(s->host, s->port);
        if (relays[i] == NULL) {
            bench_fail(ctx, "W4: relay for %s:%d did not start", s->host, s->port);
            rc = -1;
            goto out;
        }
        fr_delay(relays[i], delay_ms, delay_ms);
        servers_url_at(s, fr_port(relays[i]), one[i], sizeof one[i]);
    }
    char suffix[16] = "";
    if (delay_ms > 0)
        snprintf(suffix, sizeof suffix, "/d%dms", delay_ms);
    long cycles = delay_ms > 0 ? o->w4_delay_cycles : o->w4_cycles;
    long warm = delay_ms > 0 ? 10 : (cycles / 10 < WARMUP_CYCLES ? cycles / 10 : WARMUP_CYCLES);

    int counts[BENCH_MAX_LIST + 1];
    int ncounts = 0;
    counts[ncounts++] = 1;
    for (int i = 0; i < o->w4_nnodes; i++)
        if (o->w4_nodes[i] != 1)
            counts[ncounts++] = o->w4_nodes[i];
    double p50_one = 0;
    for (int k = 0; k < ncounts; k++) {
        int n = counts[k];
        urls[0] = '\0';
        for (int i = 0; i < n; i++)
            urls_append(urls, sizeof urls, one[i]);
        char label[48], tag[32];
        snprintf(label, sizeof label, "W4/n%d%s", n, suffix);
        snprintf(tag, sizeof tag, "w4n%dd%d", n, delay_ms);
        cyc_result r;
        if (cycles_run(ctx, label, tag, urls, 1, cycles, warm, &r) != 0) {
            rc = -1;
            break;
        }
        double p50 = (double)r.p50_ns / 1000;
        if (n == 1)
            p50_one = p50;
        fig(label, "cycles_per_s", r.per_s, 0, -1, NULL);
        char vs[48];
        snprintf(vs, sizeof vs, "W4/n1%s p50", suffix);
        fig(label, "p50_us", p50, 0, n == 1 ? -1 : ratio(p50, p50_one), n == 1 ? NULL : vs);
        fig(label, "p99_us", (double)r.p99_ns / 1000, 0, -1, NULL);
    }
out:
    for (int i = 0; i < maxn; i++)
        fr_stop(relays[i]);
    return rc;
}

int run_w4(bench_ctx *ctx)
{
    const bench_opts *o = ctx->opt;
    int maxn = 1;
    for (int i = 0; i < o->w4_nnodes; i++)
        if (o->w4_nodes[i] > maxn)
            maxn = o->w4_nodes[i];
    if (maxn > ctx->servers->n) {
        bench_fail(ctx, "W4: needs %d servers, have %d", maxn, ctx->servers->n);
        return -1;
    }
    int rc = w4_delay(ctx, 0, maxn);
    if (o->delay_ms > 0 && w4_delay(ctx, o->delay_ms, maxn) != 0)
        rc = -1;
    return rc;
}
