/*
 * main.c: dlock-bench's options, the order of a run, and the report.
 *
 * A run: decide the CPU placement and pin ourselves; start the servers (or take -s);
 * then, `repeat` times, redis-benchmark SET -c 1 on node 1, W1, W6, redis-benchmark SET
 * -c 8, W2, baseline/wake and W3, W4, W5 (those chosen); print the table and then one BENCH line
 * per figure (docs/benchmarks.md explains them), each the median of its rounds, the machine line
 * first. Progress goes to stderr, the figures to stdout.
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

/* The placement modes by name, as --pin takes them and the BENCH machine line shows
 * them. */
static const char *const pin_names[] = {
    [PIN_SPLIT] = "split", [PIN_SAME] = "same", [PIN_NONE] = "none"};

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
 * figures were first recorded: machine, then c1, W1, W6, c8, W2, wake, W3, W4, W5. */
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
           pin_names[p->mode]);
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

/* ---- options ---------------------------------------------------------------- */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: dlock-bench [options]\n"
            "\n"
            "Runs the workloads W1-W6 on redis-server processes it starts (or on -s\n"
            "servers), beside redis-benchmark SET -c 1 and -c 8 on the same servers under the\n"
            "same CPU placement. Figures go to stdout (a table, then BENCH lines); progress to\n"
            "stderr. With W3, baseline/wake runs just before it: two threads hand a key to\n"
            "each other through DEL + PUBLISH (one EVAL) and SET NX, the raw hand-over that\n"
            "W3's xgap can at best match. W5 sells with lock (GET, SET, INCR: three round\n"
            "trips in the lock), lock-pipelined (SET and INCR in one), watch, script, and\n"
            "stock (the library's reserve + commit, two script calls per unit), then\n"
            "php-recipe and php-dlockd: php-cli buyers with SET NX EX + usleep(1000) + a Lua\n"
            "release, and through dlockd (LOCK WAIT, UNLOCK). W6 is W1 through dlockd (LOCK +\n"
            "UNLOCK over RESP from one hiredis connection), compared with W1 of the same\n"
            "round, which it runs too. W5 and W6 start build/dlockd themselves. TLS is W1\n"
            "over TLS on a redis-server of its own, beside redis-benchmark --tls. CLUSTER is\n"
            "W1 on a Redis Cluster of three masters of its own: directly on the master of\n"
            "one slot, then through a seed on the same names, then on names of all slots.\n"
            "\n"
            "  -w, --workloads LIST    which of W1,W2,W3,W4,W5,W6,TLS,CLUSTER, or all\n"
            "                          (default W1-W6)\n"
            "  -n, --cycles N          W1 cycles (20000)\n"
            "      --w6-cycles N       W6 cycles (as W1's)\n"
            "      --w2-cycles N       W2 cycles per client (5000)\n"
            "      --w2-clients N      W2 clients (8)\n"
            "      --w3-sections N     W3 critical sections per worker (200)\n"
            "      --w3-workers LIST   W3 runs, by number of workers, e.g. 2,8,16 (8)\n"
            "      --w3-fair           also run each W3 with fair (FIFO) waiting: W3/fair\n"
            "      --wake-cycles N     baseline/wake hand-overs, run with W3 (2000)\n"
            "      --w4-nodes LIST     W4 node counts (3,5); the 1-node run is always added\n"
            "      --w4-cycles N       W4 cycles on loopback (2000)\n"
            "      --w4-delay-cycles N W4 cycles through the relays (500)\n"
            "      --delay-ms D        W4 relay delay each way, 0 for none (1)\n"
            "      --w5-stock N        W5 items (1000)\n"
            "      --w5-buyers N       W5 buyers (50)\n"
            "      --php-buyers N      W5/php-* php processes (20); stock as --w5-stock\n"
            "      --php-delay-ms D    also run W5/php-* with the buyers reaching Redis and\n"
            "                          dlockd through relays that delay D ms each way\n"
            "                          (W5/php-*/dDms; dlockd beside Redis); 0: not (0)\n"
            "      --dlockd PATH       the dlockd to run (default $DLOCKD, else the dlockd\n"
            "                          next to dlock-bench)\n"
            "      --nodes N           servers for W1, W2, W3 and the W5 lock ways (1)\n"
            "      --requests N        redis-benchmark -n (50000)\n"
            "      --timeout-ms MS     dlock_config.timeout_ms (1000)\n"
            "      --repeat R          rounds of baselines + workloads; figures are medians (3)\n"
            "  -s, --servers URLS      use these servers (redis://[[user]:pass@]host[:port][/db],\n"
            "                          comma-separated) instead of starting our own\n"
            "      --pin MODE          same: servers, bench and redis-benchmark on one CPU\n"
            "                          (default); split: servers on one CPU, the rest on\n"
            "                          another; none: not pinned\n"
            "      --server-cpu N      the servers' CPU (default: the first allowed CPU)\n"
            "      --client-cpu N      the bench's CPU (same: the servers'; split: the\n"
            "                          second allowed CPU)\n"
            "      --quick             small sizes and one round, for a smoke run (seconds)\n"
            "  -q, --quiet             no progress on stderr\n"
            "  -v, --verbose           also print each workload's server commands (stderr)\n"
            "  -h, --help              this text\n"
            "\n"
            "Exit status: 0; 1 a workload failed or a sanity check did not hold; 64 usage;\n"
            "69 servers could not be started or reached.\n");
}

/* A whole decimal number in [min, max]; anything else (trailing text, overflow) is
 * a usage error rather than a silent default. */
static bool parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* "2,8,16" into v[], each in [min, max]. */
static bool parse_list(const char *s, int min, int max, int *v, int *n)
{
    *n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long x;
        if (*n == BENCH_MAX_LIST || !parse_long(tok, min, max, &x))
            return false;
        v[(*n)++] = (int)x;
    }
    return *n > 0;
}

/* "W1,W3,TLS,CLUSTER" (any case) or "all" into o->run[1..8]. */
static bool parse_workloads(const char *s, bench_opts *o)
{
    bool *run = o->run;
    memset(run, 0, sizeof o->run);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    bool any = false;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if ((tok[0] == 'W' || tok[0] == 'w') && tok[1] >= '1' && tok[1] <= '6' && tok[2] == '\0')
            run[tok[1] - '0'] = any = true;
        else if (strcasecmp(tok, "tls") == 0)
            run[7] = any = true;
        else if (strcasecmp(tok, "cluster") == 0)
            run[8] = any = true;
        else if (strcasecmp(tok, "all") == 0)
            run[1] = run[2] = run[3] = run[4] = run[5] = run[6] = run[7] = run[8] = any = true;
        else
            return false;
    }
    return any;
}

/* --pin MODE: one of these names. */
static bool parse_pin(const char *s, bench_opts *o)
{
    for (int m = 0; m < (int)(sizeof pin_names / sizeof pin_names[0]); m++)
        if (strcmp(s, pin_names[m]) == 0) {
            o->pin = (enum pin_mode)m;
            return true;
        }
    return false;
}

/* The reference sizes: a run with no options is the run whose figures
 * docs/benchmarks.md reports, so that runs on other machines compare with it. */
static void defaults(bench_opts *o)
{
    memset(o, 0, sizeof *o);
    o->run[1] = o->run[2] = o->run[3] = o->run[4] = o->run[5] = o->run[6] = true;
    o->w1_cycles = 20000;
    o->w6_cycles = 0; /* as w1_cycles, once the options are read */
    o->w2_clients = 8;
    o->w2_cycles = 5000;
    o->w3_workers[0] = 8;
    o->w3_nworkers = 1;
    o->w3_sections = 200;
    o->wake_cycles = 2000;
    o->w4_nodes[0] = 3;
    o->w4_nodes[1] = 5;
    o->w4_nnodes = 2;
    o->w4_cycles = 2000;
    o->w4_delay_cycles = 500;
    o->delay_ms = 1;
    o->w5_stock = 1000;
    o->w5_buyers = 50;
    o->php_buyers = 20;
    o->nodes = 1;
    o->requests = 50000;
    o->timeout_ms = 1000;
    o->repeat = 3;
    o->pin = PIN_SAME;
    o->server_cpu = o->client_cpu = -1;
}

/* One option: its long name, its letter (0: a long option alone), and where its value
 * goes, by the one pointer that is set: a whole number in [min, max] into a long (l) or
 * an int (i), a list of them into list with their count in nlist, the string as given
 * (s), true for an option without a value (on), or what parse makes of it. */
typedef struct bench_option {
    const char *name;
    int letter;
    long min, max;
    long *l;
    int *i;
    int *list, *nlist;
    const char **s;
    bool *on;
    bool (*parse)(const char *s, bench_opts *o);
} bench_option;

/* Parse argv into o. Returns -1 to exit 0 (help), 0 to run, 1 on a usage error. */
static int parse_args(int argc, char **argv, bench_opts *o)
{
    const long big = 100000000;
    bool help = false;
    const bench_option opts[] = {
        {"workloads", 'w', .parse = parse_workloads},
        {"cycles", 'n', 1, big, .l = &o->w1_cycles},
        {"w2-cycles", 0, 1, big, .l = &o->w2_cycles},
        {"w2-clients", 0, 1, 256, .i = &o->w2_clients},
        {"w3-sections", 0, 1, big, .l = &o->w3_sections},
        {"w3-workers", 0, 1, 256, .list = o->w3_workers, .nlist = &o->w3_nworkers},
        {"w3-fair", 0, .on = &o->w3_fair},
        {"wake-cycles", 0, 1, big, .l = &o->wake_cycles},
        {"w4-nodes", 0, 1, BENCH_MAX_NODES, .list = o->w4_nodes, .nlist = &o->w4_nnodes},
        {"w4-cycles", 0, 1, big, .l = &o->w4_cycles},
        {"w4-delay-cycles", 0, 1, big, .l = &o->w4_delay_cycles},
        {"delay-ms", 0, 0, 1000, .i = &o->delay_ms},
        {"w5-stock", 0, 1, big, .l = &o->w5_stock},
        {"w5-buyers", 0, 1, 256, .i = &o->w5_buyers},
        {"nodes", 0, 1, BENCH_MAX_NODES, .i = &o->nodes},
        {"requests", 0, 1, big, .l = &o->requests},
        {"timeout-ms", 0, 1, 3600000, .l = &o->timeout_ms},
        {"servers", 's', .s = &o->servers},
        {"pin", 0, .parse = parse_pin},
        {"server-cpu", 0, 0, 1023, .i = &o->server_cpu},
        {"client-cpu", 0, 0, 1023, .i = &o->client_cpu},
        {"quick", 0, .on = &o->quick},
        {"repeat", 0, 1, BENCH_MAX_ROUNDS, .i = &o->repeat},
        {"w6-cycles", 0, 1, big, .l = &o->w6_cycles},
        {"php-buyers", 0, 1, 256, .i = &o->php_buyers},
        {"php-delay-ms", 0, 0, 1000, .i = &o->php_delay_ms},
        {"dlockd", 0, .s = &o->dlockd},
        {"quiet", 'q', .on = &o->quiet},
        {"verbose", 'v', .on = &o->verbose},
        {"help", 'h', .on = &help},
    };
    enum { NOPTS = sizeof opts / sizeof opts[0] };
    /* getopt_long's tables, made from ours: a long option alone is known by 256 + its
     * index. */
    struct option longopts[NOPTS + 1];
    char shortopts[2 * NOPTS + 1], *sp = shortopts;
    for (int k = 0; k < NOPTS; k++) {
        int has_arg = opts[k].on != NULL ? no_argument : required_argument;
        longopts[k] = (struct option){opts[k].name, has_arg, NULL,
                                      opts[k].letter != 0 ? opts[k].letter : 256 + k};
        if (opts[k].letter != 0) {
            *sp++ = (char)opts[k].letter;
            if (has_arg == required_argument)
                *sp++ = ':';
        }
    }
    *sp = '\0';
    longopts[NOPTS] = (struct option){NULL, 0, NULL, 0};

    /* --quick first, so that explicit sizes given with it win wherever they stand. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            o->quick = true;
            o->w1_cycles = 2000;
            o->w2_cycles = 500;
            o->w3_sections = 40;
            o->wake_cycles = 200;
            o->w4_cycles = 300;
            o->w4_delay_cycles = 50;
            o->w5_stock = 200;
            o->w6_cycles = 500;
            o->requests = 10000;
            o->repeat = 1;
        }
    }
    int c;
    while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        const bench_option *b = NULL;
        for (int k = 0; k < NOPTS && b == NULL; k++)
            if (longopts[k].val == c)
                b = &opts[k];
        if (b == NULL) { /* getopt_long said what is wrong */
            usage(stderr);
            return 1;
        }
        bool ok = true;
        if (b->l != NULL) {
            ok = parse_long(optarg, b->min, b->max, b->l);
        } else if (b->i != NULL) {
            long v;
            if ((ok = parse_long(optarg, b->min, b->max, &v)))
                *b->i = (int)v;
        } else if (b->list != NULL) {
            ok = parse_list(optarg, (int)b->min, (int)b->max, b->list, b->nlist);
        } else if (b->s != NULL) {
            *b->s = optarg;
        } else if (b->on != NULL) {
            *b->on = true;
        } else {
            ok = b->parse(optarg, o);
        }
        if (help) {
            usage(stdout);
            return -1;
        }
        if (!ok) {
            fprintf(stderr, "dlock-bench: bad value for --%s: %s (see -h)\n", b->name, optarg);
            return 1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "dlock-bench: unexpected argument: %s (see -h)\n", argv[optind]);
        return 1;
    }
    if (o->w6_cycles == 0)
        o->w6_cycles = o->w1_cycles;
    return 0;
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
    defaults(&o);
    int prc = parse_args(argc, argv, &o);
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
    static bench_dlockd dlockd;
    if (o.run[5] || o.run[6]) {
        progress("starting dlockd");
        if (dlockd_start(&dlockd, &servers, o.nodes, o.dlockd, place.server_cpu, o.timeout_ms) !=
            0) {
            servers_stop(&servers);
            return BENCH_EXIT_SERVERS;
        }
        progress("dlockd %s on port %d", dlockd.path, dlockd.port);
    }

    /* Rounds: the baselines and the workloads, in order, `repeat` times. On a shared or
     * virtual machine a burst of other work can hit any single measurement; a figure
     * that is the median of its rounds does not move with one burst, and the baselines
     * of a round are taken minutes, not hours, from its workloads. */
    bench_ctx ctx = {
        .opt = &o, .servers = &servers, .place = &place, .dlockd = dlockd.pid > 0 ? &dlockd : NULL};
    int (*const runs[6])(bench_ctx *) = {NULL, run_w1, run_w2, run_w3, run_w4, run_w5};
    int status = 0;
    for (ctx.round = 1; ctx.round <= o.repeat && status == 0; ctx.round++) {
        if (o.repeat > 1)
            progress("round %d of %d", ctx.round, o.repeat);
        /* c1, W1, W6, c8, W2, wake, W3, W4, W5: the baselines stand next to what they
         * measure, and W6 next to W1, the denominator of its ratios (so W6 runs W1 too). */
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
        }
    }
    /* dlockd's CPU time is the run's own, like the servers'. */
    pid_t pids[BENCH_MAX_NODES + 1];
    int npids = 0;
    for (int i = 0; i < servers.n; i++)
        pids[npids++] = servers.s[i].pid;
    if (dlockd.pid > 0)
        pids[npids++] = dlockd.pid;
    cpu_usage_take(&u1, pids, npids);
    double other, steal;
    cpu_usage_diff(&u0, &u1, &other, &steal);
    if (status == 0)
        print_report(&ctx, other, steal);
    dlockd_stop(&dlockd);
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
