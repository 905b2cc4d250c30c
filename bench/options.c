/*
 * options.c: dlock-bench's command line: the usage text, each option's parsing and
 * range, and the defaults.
 */
#include "bench.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- options ---------------------------------------------------------------- */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: dlock-bench [options]\n"
            "\n"
            "Runs the workloads W1-W6 and W8 on redis-server processes it starts (or on -s\n"
            "servers), beside redis-benchmark SET -c 1 and -c 8 on the same servers under the\n"
            "same CPU placement. Figures go to stdout (a table, then BENCH lines); progress to\n"
            "stderr. With W3, baseline/wake runs just before it: two threads hand a key to\n"
            "each other through DEL + PUBLISH (one EVAL) and SET NX, the raw hand-over that\n"
            "W3's xgap can at best match. W5 sells with lock (GET, SET, INCR: three round\n"
            "trips in the lock), lock-pipelined (SET and INCR in one), lock-linger (lock\n"
            "with linger_ms 100: a buyer takes the lock back), watch, script, and\n"
            "stock (the library's reserve + commit, two script calls per unit), then\n"
            "php-recipe, php-dlockd and php-stock: php-cli buyers with SET NX EX +\n"
            "usleep(1000) + a Lua release, through dlockd (LOCK WAIT, UNLOCK), and through\n"
            "dlockd's STOCK (RESERVE WAIT, COMMIT); and php-raw and php-package:\n"
            "LOCK + UNLOCK from one php process on one connection to dlockd, sent raw and\n"
            "through the PHP package (clients/php), with phpredis and with predis\n"
            "(-predis); py-raw and py-package: the same from one python3 process through\n"
            "redis-py and the Python package (clients/python); node-raw and node-package:\n"
            "from one node process through ioredis and the Node package (clients/node, as\n"
            "its npm run build made it). W6 is W1 through dlockd (LOCK + UNLOCK over RESP\n"
            "from one hiredis connection), compared with W1 of the same round, which it runs\n"
            "too; W6/metrics the same through a dlockd with --metrics-port, against W6;\n"
            "W6/hop is W1 through a process that only passes bytes, the floor of W6's p50. W5\n"
            "and W6 start build/dlockd themselves. TLS is W1 over TLS on a redis-server of\n"
            "its own, beside redis-benchmark --tls. CLUSTER is W1 on a Redis Cluster of three\n"
            "masters of its own: directly on the master of one slot, then through a seed on\n"
            "the same names, then on names of all slots. W7 is dlockd at fleet scale: 1, 16,\n"
            "64 and 256 connections, driven from one epoll loop, cycling LOCK + UNLOCK\n"
            "through a dlockd of its own in front of node 1, each count beside the same\n"
            "connections doing SET NX PX + a compare-and-delete EVALSHA on node 1 (its\n"
            "ratio), then the acquire and release scripts pipelined by redis-benchmark\n"
            "(W7/script). W7 takes about half a minute, so it is not in the default set,\n"
            "and it runs in the first round only.\n"
            "\n");
    /* Two strings: C11 compilers need only take 4095 characters in one. */
    fprintf(out,
            "  -w, --workloads LIST    which of W1,W2,W3,W4,W5,W6,W7,W8,TLS,CLUSTER, or all\n"
            "                          (default W1-W6 and W8: not W7, TLS, CLUSTER)\n"
            "  -n, --cycles N          W1 cycles (20000)\n"
            "      --w6-cycles N       W6 cycles (as W1's)\n"
            "      --w2-cycles N       W2 cycles per client (5000)\n"
            "      --w2-clients N      W2 clients (8)\n"
            "      --w3-sections N     W3 critical sections per worker (200)\n"
            "      --w3-workers LIST   W3 runs, by number of workers, e.g. 2,8,16 (8)\n"
            "      --w3-fair           also run each W3 with fair (FIFO) waiting: W3/fair\n"
            "      --wake-cycles N     baseline/wake hand-overs, run with W3 (2000)\n"
            "      --w8-changes N      W8 proclamations observed (200; a quarter as many\n"
            "                          leader hand-overs)\n"
            "      --w8-idle-ms MS     W8's idle window, with and without observers (10000)\n"
            "      --w7-seconds S      W7: each run's measured time, per client count, for\n"
            "                          dlockd and for the recipe alike (3)\n"
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
            "      --php-cycles N      W5/php-raw and W5/php-package cycles per round, 5\n"
            "                          rounds of each (2000)\n"
            "      --py-cycles N       W5/py-raw and W5/py-package cycles per round, 5\n"
            "                          rounds of each (2000)\n"
            "      --node-cycles N     W5/node-raw and W5/node-package cycles per round, 5\n"
            "                          rounds of each (2000)\n"
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

/* "W1,W3,W8,TLS,CLUSTER" (any case) or "all" into o->run[1..10] (W8 is run[9], W7
 * run[10]). */
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
        else if (strcasecmp(tok, "w8") == 0)
            run[9] = any = true;
        else if (strcasecmp(tok, "w7") == 0)
            run[10] = any = true;
        else if (strcasecmp(tok, "tls") == 0)
            run[7] = any = true;
        else if (strcasecmp(tok, "cluster") == 0)
            run[8] = any = true;
        else if (strcasecmp(tok, "all") == 0)
            for (int w = 1; w <= 10; w++)
                run[w] = any = true;
        else
            return false;
    }
    return any;
}

/* The placement modes by name, as --pin takes them and the BENCH machine line shows
 * them. */
const char *const bench_pin_names[3] = {
    [PIN_SPLIT] = "split", [PIN_SAME] = "same", [PIN_NONE] = "none"};

/* --pin MODE: one of these names. */
static bool parse_pin(const char *s, bench_opts *o)
{
    for (int m = 0; m < (int)(sizeof bench_pin_names / sizeof bench_pin_names[0]); m++)
        if (strcmp(s, bench_pin_names[m]) == 0) {
            o->pin = (enum pin_mode)m;
            return true;
        }
    return false;
}

/* The reference sizes: the sizes of the runs docs/benchmarks.md reports, so that runs
 * on other machines compare with them. */
static void defaults(bench_opts *o)
{
    memset(o, 0, sizeof *o);
    o->run[1] = o->run[2] = o->run[3] = o->run[4] = o->run[5] = o->run[6] = o->run[9] = true;
    o->w8_changes = 200;
    o->w8_idle_ms = 10000;
    o->w7_seconds = 3;
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
    o->php_cycles = 2000;
    o->py_cycles = 2000;
    o->node_cycles = 2000;
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
int bench_parse_args(int argc, char **argv, bench_opts *o)
{
    defaults(o);
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
        {"w8-changes", 0, 1, big, .l = &o->w8_changes},
        {"w8-idle-ms", 0, 100, 3600000, .l = &o->w8_idle_ms},
        {"w7-seconds", 0, 1, 3600, .l = &o->w7_seconds},
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
        {"php-cycles", 0, 1, big, .l = &o->php_cycles},
        {"py-cycles", 0, 1, big, .l = &o->py_cycles},
        {"node-cycles", 0, 1, big, .l = &o->node_cycles},
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
            o->w8_changes = 40;
            o->w8_idle_ms = 1000;
            o->w7_seconds = 1;
            o->w4_cycles = 300;
            o->w4_delay_cycles = 50;
            o->w5_stock = 200;
            o->w6_cycles = 500;
            o->php_cycles = 200;
            o->py_cycles = 200;
            o->node_cycles = 200;
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
