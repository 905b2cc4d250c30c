/*
 * pkgcycles.c: W5/php-raw and W5/php-package (and -predis), W5/py-raw and
 * W5/py-package, W5/node-raw and W5/node-package: what a client package (clients/php,
 * clients/python, clients/node) costs a lock + unlock cycle beside the same two
 * commands sent raw on the same Redis client.
 *
 * One interpreter process (bench/php/cycles.php, bench/python/cycles.py,
 * bench/node/cycles.js) per Redis client: phpredis and predis for PHP, redis-py for
 * Python, ioredis for Node, connected to the bench's dlockd. After a warm-up, it
 * alternates rounds of --php-cycles (--py-cycles, --node-cycles) raw cycles
 * (rawCommand, executeRaw, execute_command or call of LOCK name TTL 30000, then UNLOCK
 * name token) and as many through the package ($dlock->lock(name, ttlMs: 30000),
 * client.acquire(name, ttl=30) or client.acquire(name, {ttl: 30000}), then release()),
 * CYCLE_ROUNDS of each, every cycle on one name. Both kinds send the same commands and
 * wait for the same replies, so their difference is the package's own work in its
 * language.
 *
 * Each kind's figure is its best round (the most cycles per second): other work on the
 * machine can only add time to a round, so the fastest round of each kind is the
 * nearest to what the work itself costs, and alternating the rounds gives both kinds
 * the same chances at a quiet moment. The package's ratio is its best over raw's best,
 * from one process; with --repeat, the median of the rounds' as every figure.
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CYCLE_ROUNDS 5      /* of each kind, alternated */
#define CYCLES_MS    120000 /* for one process's rounds; killed after */
#define CYCLE_WARMUP 100    /* at most, of each kind, not timed (but lang.warmup) */

/* A package's language: where its script and the package are, what the package
 * directory must hold, and how the interpreter is found and runs the script. Each
 * directory is $env, else the source tree's (bench/CMakeLists.txt). */
typedef struct cycles_lang {
    const char *label;         /* "W5/php": W5/php-raw, W5/php-package */
    const char *script;        /* in the scripts' directory */
    const char *dir_env, *dir; /* the scripts' directory */
    const char *pkg_env, *pkg; /* the package's directory */
    const char *need[3];       /* files the package directory must hold, NULL-ended */
    const char *build;         /* how to make them, NULL: nothing to make */
    const char *opts[3];       /* the interpreter's options, NULL-ended */
    long warmup;               /* warm-up cycles of each kind whatever the round's size;
                                  0: a tenth of a round, at most CYCLE_WARMUP */
    /* The interpreter: $exe_env, else exe, a path or a name on the PATH, with what to
     * install when there is none. PHP's comes from run_w5_php, which runs the sale. */
    const char *exe_env, *exe, *install;
} cycles_lang;

/* PHP's notices on stderr, whatever php.ini says: stdout is for the figures. Python's
 * -B: no __pycache__ written into the source tree's package. Python is Debian's, as the
 * package's tests use (clients/python/tests/run). Node's package is TypeScript: the
 * bench runs it as built, with the ioredis it was built with; and V8 compiles a function
 * to machine code only after some hundreds of calls, so its warm-up does not shrink with
 * --quick: a package round before that measures V8's interpreter (0.76 against 0.9 to
 * 1.0 warm, in 200-cycle rounds after 100 and 1000 warm-up cycles). */
static const cycles_lang lang_php = {.label = "W5/php",
                                     .script = "cycles.php",
                                     .opts = {"-d", "display_errors=stderr", NULL},
                                     .dir_env = "DLOCK_BENCH_PHP_DIR",
                                     .dir = DLOCK_BENCH_PHP_DIR,
                                     .pkg_env = "DLOCK_BENCH_PHP_PACKAGE_DIR",
                                     .pkg = DLOCK_BENCH_PHP_PACKAGE_DIR,
                                     .need = {"autoload.php", NULL}};
static const cycles_lang lang_py = {.label = "W5/py",
                                    .script = "cycles.py",
                                    .opts = {"-B", NULL},
                                    .dir_env = "DLOCK_BENCH_PY_DIR",
                                    .dir = DLOCK_BENCH_PY_DIR,
                                    .pkg_env = "DLOCK_BENCH_PY_PACKAGE_DIR",
                                    .pkg = DLOCK_BENCH_PY_PACKAGE_DIR,
                                    .need = {"dlock/__init__.py", NULL},
                                    .exe_env = "DLOCK_PYTHON",
                                    .exe = "/usr/bin/python3",
                                    .install = "Debian: python3 python3-redis"};
static const cycles_lang lang_node = {
    .label = "W5/node",
    .script = "cycles.js",
    .opts = {NULL},
    .dir_env = "DLOCK_BENCH_NODE_DIR",
    .dir = DLOCK_BENCH_NODE_DIR,
    .pkg_env = "DLOCK_BENCH_NODE_PACKAGE_DIR",
    .pkg = DLOCK_BENCH_NODE_PACKAGE_DIR,
    .need = {"dist/index.js", "node_modules/ioredis/package.json", NULL},
    .build = "cd clients/node && npm ci && npm run build",
    .exe_env = "DLOCK_NODE",
    .exe = "node",
    .install = "Node 18 or later; Debian: nodejs",
    .warmup = 1000};

static const char *env_or(const char *env, const char *dflt)
{
    const char *v = getenv(env);
    return v != NULL && v[0] != '\0' ? v : dflt;
}

/* The script's output: one "round I raw_ns T package_ns U" line per round, in order.
 * 0, or -1 with why. */
static int parse_rounds(const char *out, int64_t raw_ns[], int64_t pkg_ns[], char *why,
                        size_t whylen)
{
    const char *p = out;
    for (int i = 0; i < CYCLE_ROUNDS; i++) {
        int round, used = 0;
        long long raw, pkg;
        if (sscanf(p, "round %d raw_ns %lld package_ns %lld\n%n", &round, &raw, &pkg, &used) != 3 ||
            used == 0 || round != i + 1 || raw <= 0 || pkg <= 0) {
            snprintf(why, whylen, "round %d missing from its output '%.*s'", i + 1,
                     (int)strcspn(p, "\n"), p);
            return -1;
        }
        raw_ns[i] = raw;
        pkg_ns[i] = pkg;
        p += used;
    }
    if (*p != '\0') {
        snprintf(why, whylen, "unexpected output '%.*s'", (int)strcspn(p, "\n"), p);
        return -1;
    }
    return 0;
}

/* The shortest of v[0..CYCLE_ROUNDS) in *best and the longest in *worst. */
static void span(const int64_t v[], int64_t *best, int64_t *worst)
{
    *best = *worst = v[0];
    for (int i = 1; i < CYCLE_ROUNDS; i++) {
        if (v[i] < *best)
            *best = v[i];
        if (v[i] > *worst)
            *worst = v[i];
    }
}

/* One process's rounds: interp running l's script through client ("phpredis",
 * "predis", "redis-py"), cycles per round; its figures are <label>-raw<suffix> and
 * <label>-package<suffix>. 0, or -1 after bench_fail. */
static int cycles_one(bench_ctx *ctx, const cycles_lang *l, const char *interp, const char *client,
                      const char *suffix, long cycles)
{
    long warmup = cycles / 10 < CYCLE_WARMUP ? cycles / 10 : CYCLE_WARMUP;
    if (l->warmup > 0)
        warmup = l->warmup;
    char raw_label[48], label[48], script[PATH_MAX], name[64], port[16], rounds[16], n[24], w[24];
    snprintf(raw_label, sizeof raw_label, "%s-raw%s", l->label, suffix);
    snprintf(label, sizeof label, "%s-package%s", l->label, suffix);
    snprintf(script, sizeof script, "%s/%s", env_or(l->dir_env, l->dir), l->script);
    /* The round in the name, as everywhere in the bench, so no run meets another's. */
    snprintf(name, sizeof name, "w5cycles:r%d:%s", ctx->round, client);
    snprintf(rounds, sizeof rounds, "%d", CYCLE_ROUNDS);
    snprintf(n, sizeof n, "%ld", cycles);
    snprintf(w, sizeof w, "%ld", warmup);
    if (access(script, R_OK) != 0) {
        bench_fail(ctx, "%s: %s: %s (set $%s)", label, script, strerror(errno), l->dir_env);
        return -1;
    }
    /* A package not built fails here with how to build it, not in the script. */
    const char *pkg = env_or(l->pkg_env, l->pkg);
    for (int i = 0; l->need[i] != NULL; i++) {
        char f[PATH_MAX];
        snprintf(f, sizeof f, "%s/%s", pkg, l->need[i]);
        if (access(f, R_OK) != 0) {
            bench_fail(ctx, "%s: %s: %s (%s%sor set $%s)", label, f, strerror(errno),
                       l->build != NULL ? l->build : "", l->build != NULL ? "; " : "", l->pkg_env);
            return -1;
        }
    }
    if (ctx->dlockd == NULL || ctx->dlockd->pid <= 0) {
        bench_fail(ctx, "%s: dlockd is not running", label);
        return -1;
    }
    snprintf(port, sizeof port, "%d", ctx->dlockd->port);
    const char *argv[16];
    int a = 0;
    argv[a++] = interp;
    for (int i = 0; l->opts[i] != NULL; i++)
        argv[a++] = l->opts[i];
    const char *args[] = {script, client, port, pkg, name, rounds, n, w};
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++)
        argv[a++] = args[i];
    argv[a] = NULL;
    progress("%s: %s, %d rounds of raw and of package cycles alternated, %ld each, one "
             "process, connected to dlockd (port %d)",
             label, client, CYCLE_ROUNDS, cycles, ctx->dlockd->port);
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        bench_fail(ctx, "%s: pipe: %s", label, strerror(errno));
        return -1;
    }
    /* Pinned where the PHP buyers and the bench's own clients run; its errors go to
     * our stderr as they come. */
    pid_t pid = place_spawn(argv, ctx->place->client_cpu, p[1], STDERR_FILENO, false);
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        bench_fail(ctx, "%s: cannot start %s", label, interp);
        return -1;
    }
    /* A few lines: the pipe holds them until the process has been reaped. */
    int st = 0;
    bool done = dh_reap(pid, CYCLES_MS, &st);
    char out[1024], why[320] = "";
    read_all(p[0], out, sizeof out);
    close(p[0]);
    int64_t raw_ns[CYCLE_ROUNDS], pkg_ns[CYCLE_ROUNDS];
    if (!done) {
        snprintf(why, sizeof why, "still running after %d ms: killed", CYCLES_MS);
    } else if (st != 0) {
        char s[48];
        describe_status(st, s, sizeof s);
        snprintf(why, sizeof why, "%s: %s (its message above)", l->script, s);
    } else {
        parse_rounds(out, raw_ns, pkg_ns, why, sizeof why);
    }
    if (why[0] != '\0') {
        bench_fail(ctx, "%s: %s", label, why);
        return -1;
    }
    int64_t raw_best, raw_worst, pkg_best, pkg_worst;
    span(raw_ns, &raw_best, &raw_worst);
    span(pkg_ns, &pkg_best, &pkg_worst);
    double raw_per_s = (double)cycles * 1e9 / (double)raw_best;
    double pkg_per_s = (double)cycles * 1e9 / (double)pkg_best;
    fig(raw_label, "cycles_per_s", raw_per_s, 0, -1, NULL);
    fig(label, "cycles_per_s", pkg_per_s, 0, pkg_per_s / raw_per_s, raw_label);
    progress("%s: raw %.0f cycles/s (rounds %.0f to %.0f), package %.0f (%.0f to %.0f): "
             "ratio %.2f",
             label, raw_per_s, (double)cycles * 1e9 / (double)raw_worst, raw_per_s, pkg_per_s,
             (double)cycles * 1e9 / (double)pkg_worst, pkg_per_s, pkg_per_s / raw_per_s);
    return 0;
}

int run_w5_php_cycles(bench_ctx *ctx, const char *php)
{
    long cycles = ctx->opt->php_cycles;
    int rc = cycles_one(ctx, &lang_php, php, "phpredis", "", cycles);
    if (cycles_one(ctx, &lang_php, php, "predis", "-predis", cycles) != 0)
        rc = -1;
    return rc;
}

/* The cycles of l, with its interpreter. No interpreter is a failure, not a skip: the
 * figures this run promises would be missing. */
static int run_lang(bench_ctx *ctx, const cycles_lang *l, const char *client, long cycles)
{
    char exe[PATH_MAX];
    if (dh_find_exe(l->exe, l->exe_env, exe, sizeof exe) != 0) {
        bench_fail(ctx, "%s: %s not found or not executable (%s; or set $%s)", l->label,
                   env_or(l->exe_env, l->exe), l->install, l->exe_env);
        return -1;
    }
    return cycles_one(ctx, l, exe, client, "", cycles);
}

int run_w5_py_cycles(bench_ctx *ctx)
{
    return run_lang(ctx, &lang_py, "redis-py", ctx->opt->py_cycles);
}

int run_w5_node_cycles(bench_ctx *ctx)
{
    return run_lang(ctx, &lang_node, "ioredis", ctx->opt->node_cycles);
}
