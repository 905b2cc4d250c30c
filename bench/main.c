/*
 * main.c: the order of a run, and the report (options.c reads the command line).
 *
 * A run: decide the CPU placement and pin ourselves; start the servers (or take -s);
 * then, `repeat` times, redis-benchmark SET -c 1 on node 1, W1, W6, redis-benchmark SET
 * -c 8, W2, baseline/wake and W3, W8, W4, W5, and in the first round W7 (those chosen);
 * print the table and then one BENCH line per figure (docs/benchmarks.md explains them),
 * each the median of its rounds, the machine line first. Progress goes to stderr, the
 * figures to stdout.
 *
 * Exit status: 0; 1 when a workload failed or a sanity check did not hold (W3's
 * counter, W5's oversold); 64 usage; 69 servers that could not be started or reached.
 */
#include "bench.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ---- figures ---------------------------------------------------------------- */

#define MAX_FIGS 256
/* Other work above this (in CPUs, averaged over the run) makes the report say that
 * its figures are disturbed: on 2 CPUs, a quarter of one is already felt. */
#define DISTURBED_CPUS 0.25

/* One figure, with its value (and ratio) from every round of the run. */
typedef struct figure {
    char workload[48];
    char metric[32];
    int decimals;
    char vs[48];
    int n;
    double values[BENCH_MAX_ROUNDS];
    double ratios[BENCH_MAX_ROUNDS]; /* < 0: none */
} figure;

/* The run's figures and progress switch: written by the main thread only (workers
 * report through their team), read when printing. */
static struct {
    figure figs[MAX_FIGS];
    int n;
    bool quiet;
} g_report;

void fig(const char *workload, const char *metric, double value, int decimals, double ratio,
         const char *vs)
{
    figure *f = NULL;
    for (int i = 0; i < g_report.n && f == NULL; i++)
        if (strcmp(g_report.figs[i].workload, workload) == 0 &&
            strcmp(g_report.figs[i].metric, metric) == 0)
            f = &g_report.figs[i];
    if (f == NULL) {
        if (g_report.n == MAX_FIGS)
            return;
        f = &g_report.figs[g_report.n++];
        snprintf(f->workload, sizeof f->workload, "%s", workload);
        snprintf(f->metric, sizeof f->metric, "%s", metric);
        f->decimals = decimals;
        snprintf(f->vs, sizeof f->vs, "%s", vs ? vs : "");
    }
    if (f->n == BENCH_MAX_ROUNDS)
        return;
    f->values[f->n] = value;
    f->ratios[f->n] = ratio;
    f->n++;
}

void bench_label(char *out, size_t n, const char *w, int nodes, const char *suffix)
{
    if (nodes > 1)
        snprintf(out, n, "%s/n%d%s", w, nodes, suffix);
    else
        snprintf(out, n, "%s%s", w, suffix);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (the mean of the middle two when n is even); -1 when any
 * entry is negative (a ratio that some round could not compute). */
static double median(const double *v, int n)
{
    double s[BENCH_MAX_ROUNDS];
    for (int i = 0; i < n; i++) {
        if (v[i] < 0)
            return -1;
        s[i] = v[i];
    }
    qsort(s, (size_t)n, sizeof s[0], cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* Progress is on unless -q: the team monitor asks before printing its counters. */
bool progress_on(void)
{
    return !g_report.quiet;
}

/* One line on stderr, prefixed, so that it can be told from the figures on stdout
 * and from the messages of the tools the bench runs. */
void progress(const char *fmt, ...)
{
    if (g_report.quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dlock-bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* A failure is printed even with -q: a run that exits 1 must say why. The run goes
 * on with the other workloads, so one failure does not hide the rest. */
void bench_fail(bench_ctx *ctx, const char *fmt, ...)
{
    ctx->failed = true;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dlock-bench: FAILED: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

void *bench_calloc(bench_ctx *ctx, const char *label, size_t n, size_t size)
{
    void *p = calloc(n > 0 ? n : 1, size);
    if (p == NULL)
        bench_fail(ctx, "%s: out of memory", label);
    return p;
}

/* The library's log callback (it never prints by itself): an evicting
 * maxmemory-policy or a failed reconnect shows here, next to the figures it may
 * explain. */
static void dlock_log(void *user, int level, const char *msg)
{
    (void)user;
    fprintf(stderr, "dlock-bench: dlock %s: %s\n",
            level == DLOCK_LOG_ERROR  ? "error"
            : level == DLOCK_LOG_WARN ? "warning"
                                      : "info",
            msg);
}

/* Every client of the bench: its own key prefix (so that -s servers keep their
 * dlock: keys apart from ours, and the clean-up finds ours), and an explicit
 * timeout: the default is long enough to hide a stalled server behind good figures. */
void bench_dlock_config(const bench_ctx *ctx, dlock_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->prefix = BENCH_PREFIX;
    cfg->timeout_ms = ctx->opt->timeout_ms;
    cfg->log = dlock_log;
}

static void print_value(FILE *out, double v, int decimals)
{
    fprintf(out, "%.*f", decimals, v);
}

/* The table (for people) and the BENCH lines (for scripts), in the order the
 * figures were first recorded: machine, then c1, W1, W6, c8, W2, wake, W3, W8, W4, W5,
 * W7. */
static void print_report(const bench_ctx *ctx, double other_cpus, double steal_cpus)
{
    const placement *p = ctx->place;
    const bench_servers *ss = ctx->servers;
    printf("\ndlock-bench %s (libdlock %s)\n", DLOCK_VERSION_STRING, dlock_version());
    printf("machine:   %d CPUs, %s; load average %.2f at the start; other work used %.2f "
           "CPUs during the run (steal %.2f)\n",
           p->ncpus, p->model, p->load, other_cpus, steal_cpus);
    printf("placement: %s%s\n", p->text, ss->own ? "" : " (servers given with -s: not pinned)");
    printf("servers:   %d x redis-server %s, %s\n", ss->n, ss->version,
           ss->own ? "started by dlock-bench on 127.0.0.1" : "given with -s");
    if (ctx->rtt_us > 0)
        printf("RTT:       %.0f us (redis-benchmark SET -c 1, p50)\n", ctx->rtt_us);
    if (other_cpus > DISTURBED_CPUS) {
        printf("WARNING:   other processes kept %.2f CPUs busy during the run: these figures "
               "are disturbed; rerun on a quiet machine\n",
               other_cpus);
        fprintf(stderr,
                "dlock-bench: WARNING: other processes kept %.2f CPUs busy during the run: "
                "figures are disturbed\n",
                other_cpus);
    }
    if (ctx->opt->repeat > 1)
        printf("rounds:    %d; each figure is the median of its rounds, each ratio the median "
               "of the rounds' ratios\n",
               ctx->opt->repeat);
    printf("\n%-20s %-18s %12s %8s  %s\n", "workload", "metric", "value", "ratio", "ratio to");
    for (int i = 0; i < g_report.n; i++) {
        const figure *f = &g_report.figs[i];
        double ratio = median(f->ratios, f->n);
        char v[32], r[16] = "";
        snprintf(v, sizeof v, "%.*f", f->decimals, median(f->values, f->n));
        if (ratio >= 0)
            snprintf(r, sizeof r, "%.2f", ratio);
        printf("%-20s %-18s %12s %8s  %s\n", f->workload, f->metric, v, r, ratio >= 0 ? f->vs : "");
    }
    printf("\n");
    printf("BENCH machine cpus=%d model=\"%s\" placement=%s", p->ncpus, p->model,
           bench_pin_names[p->mode]);
    if (p->server_cpu >= 0 && ss->own)
        printf(" server_cpu=%d", p->server_cpu);
    if (p->client_cpu >= 0)
        printf(" client_cpu=%d", p->client_cpu);
    printf(" servers=%s redis=%s dlock=%s rounds=%d load=%.2f other_cpus=%.2f steal_cpus=%.2f\n",
           ss->own ? "own" : "given", ss->version, dlock_version(), ctx->opt->repeat, p->load,
           other_cpus, steal_cpus);
    for (int i = 0; i < g_report.n; i++) {
        const figure *f = &g_report.figs[i];
        double ratio = median(f->ratios, f->n);
        printf("BENCH %s %s ", f->workload, f->metric);
        print_value(stdout, median(f->values, f->n), f->decimals);
        if (ratio >= 0)
            printf(" ratio=%.2f", ratio);
        printf("\n");
    }
    fflush(stdout);
}

/* ---- the run ---------------------------------------------------------------- */

/* redis-benchmark SET at -c `clients` on node 1, as figures baseline/c1 or /c8. Each
 * runs right before the workload compared with it (c1 before W1, c8 before W2), so
 * that a ratio's two sides are measured seconds apart. */
static int run_baseline(bench_ctx *ctx, int clients)
{
    const bench_opts *o = ctx->opt;
    const bench_server *s = &ctx->servers->s[0];
    baseline b;
    progress("baseline: redis-benchmark -t set -n %ld -c %d on %s:%d", o->requests, clients,
             s->host, s->port);
    if (baseline_run(s, clients, o->requests, ctx->place->client_cpu, &b) != 0)
        return -1;
    char label[32];
    snprintf(label, sizeof label, "baseline/c%d", clients);
    fig(label, "set_rps", b.rps, 0, -1, NULL);
    if (b.p50_us >= 0)
        fig(label, "p50_us", b.p50_us, 0, -1, NULL);
    if (clients == 1) {
        ctx->rps_c1 = b.rps;
        ctx->rtt_us = b.p50_us > 0 ? b.p50_us : 0;
    } else {
        ctx->rps_c8 = b.rps;
    }
    progress("baseline: SET %.0f rps at -c %d (p50 %.0f us)", b.rps, clients, b.p50_us);
    return 0;
}

/* The order matters: options, placement (pinned before any thread or child exists),
 * CPU counters, servers, rounds, counters again (with the servers still up, to read
 * their CPU time), report, stop. */
int main(int argc, char **argv)
{
    bench_opts o;
    int prc = bench_parse_args(argc, argv, &o);
    if (prc != 0)
        return prc < 0 ? 0 : BENCH_EXIT_USAGE;
    g_report.quiet = o.quiet;

    placement place;
    if (place_init(&place, o.pin, o.server_cpu, o.client_cpu) != 0)
        return BENCH_EXIT_USAGE;
    /* Pin before any thread or child exists: both inherit the mask. */
    if (place_pin_self(place.client_cpu) != 0) {
        fprintf(stderr, "dlock-bench: cannot pin to CPU %d\n", place.client_cpu);
        return BENCH_EXIT_USAGE;
    }
    place.load = place_load();
    progress("placement: %s", place.text);

    int need = o.nodes;
    if (o.run[4])
        for (int i = 0; i < o.w4_nnodes; i++)
            if (o.w4_nodes[i] > need)
                need = o.w4_nodes[i];
    cpu_usage u0, u1;
    cpu_usage_take(&u0, NULL, 0);
    static bench_servers servers; /* static: the atexit hook may see it after main returns */
    if (o.servers != NULL) {
        if (servers_use(&servers, o.servers) != 0)
            return BENCH_EXIT_SERVERS;
        if (servers.n < need) {
            fprintf(stderr,
                    "dlock-bench: -s gave %d servers; this run needs %d (--nodes, "
                    "--w4-nodes)\n",
                    servers.n, need);
            return BENCH_EXIT_USAGE;
        }
    } else {
        progress("starting %d redis-server%s", need, need > 1 ? "s" : "");
        if (servers_start(&servers, need, place.server_cpu) != 0) {
            servers_stop(&servers);
            return BENCH_EXIT_SERVERS;
        }
    }

    /* W5's PHP sale and W6 go through dlockd, one process for the run, in front of
     * the servers W1 uses. */
    static bench_dlockd dlockd, dlockd_metrics;
    if (o.run[5] || o.run[6]) {
        progress("starting dlockd");
        if (dlockd_start(&dlockd, &servers, o.nodes, o.dlockd, place.server_cpu, o.timeout_ms,
                         false) != 0) {
            servers_stop(&servers);
            return BENCH_EXIT_SERVERS;
        }
        progress("dlockd %s on port %d", dlockd.path, dlockd.port);
    }
    /* W6/metrics's, beside it: the same, with its HTTP listener. */
    if (o.run[6] && dlockd_start(&dlockd_metrics, &servers, o.nodes, o.dlockd, place.server_cpu,
                                 o.timeout_ms, true) != 0) {
        dlockd_stop(&dlockd);
        servers_stop(&servers);
        return BENCH_EXIT_SERVERS;
    }

    /* Rounds: the baselines and the workloads, in order, `repeat` times. On a shared or
     * virtual machine a burst of other work can hit any single measurement; a figure
     * that is the median of its rounds does not move with one burst, and the baselines
     * of a round are taken minutes, not hours, from its workloads. */
    bench_ctx ctx = {.opt = &o,
                     .servers = &servers,
                     .place = &place,
                     .dlockd = dlockd.pid > 0 ? &dlockd : NULL,
                     .dlockd_metrics = dlockd_metrics.pid > 0 ? &dlockd_metrics : NULL};
    int (*const runs[6])(bench_ctx *) = {NULL, run_w1, run_w2, run_w3, run_w4, run_w5};
    int status = 0;
    for (ctx.round = 1; ctx.round <= o.repeat && status == 0; ctx.round++) {
        if (o.repeat > 1)
            progress("round %d of %d", ctx.round, o.repeat);
        /* c1, W1, W6, c8, W2, wake, W3, W8, W4, W5, W7: the baselines stand next to what
         * they measure, and W6 next to W1, the denominator of its ratios (so W6 runs W1
         * too). */
        if (run_baseline(&ctx, 1) != 0) {
            status = BENCH_EXIT_SERVERS;
            break;
        }
        if (o.run[1] || o.run[6])
            run_w1(&ctx);
        if (o.run[6])
            run_w6(&ctx);
        if (o.run[7])
            run_w1_tls(&ctx);
        if (o.run[8])
            run_w1_cluster(&ctx);
        if (run_baseline(&ctx, 8) != 0) {
            status = BENCH_EXIT_SERVERS;
            break;
        }
        for (int w = 2; w <= 5; w++) {
            if (w == 3 && o.run[3])
                run_wake(&ctx);
            if (o.run[w])
                runs[w](&ctx);
            if (w == 3 && o.run[9])
                run_w8(&ctx);
        }
        /* W7 measures for a fixed time (half a minute by default) and compares with its
         * own recipe of the same run, not with a baseline: once is enough, and three
         * times would make a W7 run last minutes. */
        if (o.run[10] && ctx.round == 1)
            run_w7(&ctx);
    }
    /* dlockd's CPU time is the run's own, like the servers'. */
    pid_t pids[BENCH_MAX_NODES + 2];
    int npids = 0;
    for (int i = 0; i < servers.n; i++)
        pids[npids++] = servers.s[i].pid;
    if (dlockd.pid > 0)
        pids[npids++] = dlockd.pid;
    if (dlockd_metrics.pid > 0)
        pids[npids++] = dlockd_metrics.pid;
    cpu_usage_take(&u1, pids, npids);
    double other, steal;
    cpu_usage_diff(&u0, &u1, &other, &steal);
    if (status == 0)
        print_report(&ctx, other, steal);
    dlockd_stop(&dlockd);
    dlockd_stop(&dlockd_metrics);
    w1_tls_stop();
    w1_cluster_stop();
    servers_stop(&servers);
    if (status != 0)
        return status;
    if (ctx.failed) {
        fprintf(stderr, "dlock-bench: FAILED (see the messages above)\n");
        return BENCH_EXIT_FAIL;
    }
    return 0;
}
