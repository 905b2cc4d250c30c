/*
 * phpcycles.c: W5/php-raw and W5/php-package, what the PHP package (clients/php)
 * costs a lock + unlock cycle beside the same two commands sent raw.
 *
 * One php process (bench/php/cycles.php) per Redis client, phpredis then predis, with
 * one connection to the bench's dlockd. On it, after a warm-up, it alternates rounds
 * of --php-cycles raw cycles (rawCommand or executeRaw of LOCK name TTL 30000, then
 * UNLOCK name token) and as many through the package ($dlock->lock(name, ttlMs:
 * 30000), $lock->release()), PHP_CYCLE_ROUNDS of each, every cycle on one name. Both
 * kinds send the same commands on the same connection and wait for the same replies,
 * so their difference is the package's PHP work.
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

#define PHP_CYCLE_ROUNDS 5      /* of each kind, alternated */
#define PHP_CYCLES_MS    120000 /* for one php process's rounds; killed after */
#define PHP_CYCLE_WARMUP 100    /* at most, of each kind, not timed */

/* The package's directory (its autoload.php): $DLOCK_BENCH_PHP_PACKAGE_DIR, else the
 * source tree's clients/php, as php_dir() finds the scripts. */
static const char *package_dir(void)
{
    const char *env = getenv("DLOCK_BENCH_PHP_PACKAGE_DIR");
    return env != NULL && env[0] != '\0' ? env : DLOCK_BENCH_PHP_PACKAGE_DIR;
}

/* cycles.php's output: one "round I raw_ns T package_ns U" line per round, in order.
 * 0, or -1 with why. */
static int parse_rounds(const char *out, int64_t raw_ns[], int64_t pkg_ns[], char *why,
                        size_t whylen)
{
    const char *p = out;
    for (int i = 0; i < PHP_CYCLE_ROUNDS; i++) {
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

/* The shortest of v[0..PHP_CYCLE_ROUNDS) in *best and the longest in *worst. */
static void span(const int64_t v[], int64_t *best, int64_t *worst)
{
    *best = *worst = v[0];
    for (int i = 1; i < PHP_CYCLE_ROUNDS; i++) {
        if (v[i] < *best)
            *best = v[i];
        if (v[i] > *worst)
            *worst = v[i];
    }
}

/* One php process's rounds through client ("phpredis" or "predis"); its figures are
 * W5/php-raw<suffix> and W5/php-package<suffix>. 0, or -1 after bench_fail. */
static int cycles_one(bench_ctx *ctx, const char *php, const char *client, const char *suffix)
{
    const bench_opts *o = ctx->opt;
    long cycles = o->php_cycles;
    long warmup = cycles / 10 < PHP_CYCLE_WARMUP ? cycles / 10 : PHP_CYCLE_WARMUP;
    char raw_label[48], label[48], script[PATH_MAX], name[64], port[16], rounds[16], n[24], w[24];
    snprintf(raw_label, sizeof raw_label, "W5/php-raw%s", suffix);
    snprintf(label, sizeof label, "W5/php-package%s", suffix);
    snprintf(script, sizeof script, "%s/cycles.php", php_dir());
    /* The round in the name, as everywhere in the bench, so no run meets another's. */
    snprintf(name, sizeof name, "w5cycles:r%d:%s", ctx->round, client);
    snprintf(rounds, sizeof rounds, "%d", PHP_CYCLE_ROUNDS);
    snprintf(n, sizeof n, "%ld", cycles);
    snprintf(w, sizeof w, "%ld", warmup);
    if (access(script, R_OK) != 0) {
        bench_fail(ctx, "%s: %s: %s (set $DLOCK_BENCH_PHP_DIR)", label, script, strerror(errno));
        return -1;
    }
    if (ctx->dlockd == NULL || ctx->dlockd->pid <= 0) {
        bench_fail(ctx, "%s: dlockd is not running", label);
        return -1;
    }
    snprintf(port, sizeof port, "%d", ctx->dlockd->port);
    /* PHP's notices on stderr, whatever php.ini says: stdout is for the figures. */
    const char *argv[] = {
        php, "-d", "display_errors=stderr", script, client, port, package_dir(), name, rounds, n,
        w,   NULL};
    progress("%s: %s, %d rounds of raw and of package cycles alternated, %ld each, one "
             "connection to dlockd (port %d)",
             label, client, PHP_CYCLE_ROUNDS, cycles, ctx->dlockd->port);
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
        bench_fail(ctx, "%s: cannot start %s", label, php);
        return -1;
    }
    /* A few lines: the pipe holds them until the process has been reaped. */
    int st = 0;
    bool done = dh_reap(pid, PHP_CYCLES_MS, &st);
    char out[1024], why[320] = "";
    read_all(p[0], out, sizeof out);
    close(p[0]);
    int64_t raw_ns[PHP_CYCLE_ROUNDS], pkg_ns[PHP_CYCLE_ROUNDS];
    if (!done) {
        snprintf(why, sizeof why, "still running after %d ms: killed", PHP_CYCLES_MS);
    } else if (st != 0) {
        char s[48];
        describe_status(st, s, sizeof s);
        snprintf(why, sizeof why, "cycles.php: %s (its message above)", s);
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
    int rc = cycles_one(ctx, php, "phpredis", "");
    if (cycles_one(ctx, php, "predis", "-predis") != 0)
        rc = -1;
    return rc;
}
