/*
 * fleet_scripts.c: W7/script, the ceiling under W7's figures: how many of dlock's own
 * acquire and release scripts node 1 runs per second when nothing else is in the way,
 * as redis-benchmark measures it pipelined (-P 16 -c 16, -n as --requests). Every
 * dlockd cycle costs the server one of each, so no W7/cN cycles_per_s can pass
 *   W7/script/cycle per_s = 1 / (1 / acquire + 1 / release),
 * and how far below it a run stays is what the clients' round trips and dlockd cost.
 *
 * The scripts are the library's own text: the bench compiles src/scripts.c (and the two
 * files its table names) and sends the bodies with SCRIPT LOAD, so a change to a script
 * shows here. Their arguments are those attempt.c and release.c send for an exclusive
 * lock, not queued, on one node: TRY's (the acquire's plain try) keys P{name} and
 * :fence and ARGV value ("<token> <holder>"), ttl 10000 and the fence retention (the
 * default hour); RELEASE's keys P{name}, :fence, :queue, :holders, :holders:info and
 * ARGV token, fence floor 0, no member, the retention, mode 1, ticket 0, no heir.
 *
 * What redis-benchmark cannot do, and what is measured instead. It can vary a command
 * only by __rand_int__, a random number drawn anew at each place in each call (so the
 * :fence key's number is not the name's, which costs the server the same); it cannot
 * name a lock that an earlier call took. So:
 *   acquire  names drawn from 10^8: a free name on all but a few calls in 10,000, which
 *            is the uncontended acquire (SET NX GET, TIME, SET GET of the fence).
 *   release  a release that finds its lock (GET, ZPOPMIN, DEL) needs a lock held with
 *            its token, so 10 x n locks are set first (Lua loops, 100,000 a call),
 *            and the n releases draw their names from those. A name drawn twice is
 *            gone the second time, and that call takes the shorter way (GET, then 0):
 *            about 5 % of them. held_share says exactly how many found their lock (the
 *            names left afterwards tell), and per_s is that mix's rate, a little above
 *            what releases that all found their lock would make.
 */
#include "bench.h"
#include "scripts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCRIPT_PIPELINE   "16"
#define SCRIPT_CLIENTS    "16"
#define SCRIPT_KEYSPACE   "100000000" /* acquire's names: 10^8 */
#define SCRIPT_HELD_TIMES 10          /* release: locks set, per call */
#define SCRIPT_FILL_CHUNK 100000      /* locks set (or counted) per EVAL */
#define SCRIPT_TOKEN      "0123456789abcdef0123456789abcdef"
#define SCRIPT_VALUE      SCRIPT_TOKEN " dlock-bench:1" /* "<token> <host:pid>" */
#define SCRIPT_RETENTION  "3600000"                     /* DLOCK_FENCE_RETENTION_DEFAULT_MS */

/* Set the locks KEYS[1]{i} for i in [ARGV[1], ARGV[2]] to the value ARGV[3] with a
 * lease of ARGV[4] ms (fill), or delete them and count those there (count); i written
 * as __rand_int__ writes it, in 12 digits. */
static const char fill_lua[] =
    "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do\n"
    "  redis.call('SET', KEYS[1] .. string.format('{%012d}', i), ARGV[3], 'PX', ARGV[4])\n"
    "end\n"
    "return 1\n";
static const char count_lua[] = "local n = 0\n"
                                "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do\n"
                                "  n = n + redis.call('UNLINK', KEYS[1] .. "
                                "string.format('{%012d}', i))\n"
                                "end\n"
                                "return n\n";

/* Script id's body, joined from its parts as the library joins it; SCRIPT LOAD on c,
 * its SHA1 into sha. 0, or -1 after bench_fail. */
static int load(bench_ctx *ctx, redisContext *c, int id, const char *what, char sha[41])
{
    size_t len = 0;
    for (const char *const *p = dlock__script_parts(id); *p != NULL; p++)
        len += strlen(*p);
    char *body = bench_calloc(ctx, "W7/script", len + 1, 1);
    if (body == NULL)
        return -1;
    for (const char *const *p = dlock__script_parts(id); *p != NULL; p++)
        strcat(body, *p);
    redisReply *r = server_cmd(c, "SCRIPT LOAD %s", body);
    free(body);
    bool ok = r != NULL && r->type == REDIS_REPLY_STRING && r->len == 40;
    if (ok)
        memcpy(sha, r->str, 41);
    freeReplyObject(r);
    if (!ok)
        bench_fail(ctx, "W7/script: SCRIPT LOAD of the %s script failed", what);
    return ok ? 0 : -1;
}

/* redis-benchmark -P 16 -c 16 -n n -r keyspace EVALSHA sha nkeys <the first nkeys keys
 * of prefix> args... on node 1; its rate into *per_s. 0, or -1 after bench_fail. */
static int pipelined(bench_ctx *ctx, const char *what, const char *sha, int nkeys,
                     const char *prefix, long n, const char *keyspace, const char *const *args,
                     double *per_s)
{
    char nreq[32], nk[8], keys[5][128];
    static const char *const suffix[5] = {"", ":fence", ":queue", ":holders", ":holders:info"};
    snprintf(nreq, sizeof nreq, "%ld", n);
    snprintf(nk, sizeof nk, "%d", nkeys);
    const char *argv[40] = {"-P", SCRIPT_PIPELINE, "-c",    SCRIPT_CLIENTS, "-n", nreq,
                            "-r", keyspace,        "--csv", "EVALSHA",      sha,  nk};
    int k = 12;
    for (int i = 0; i < nkeys && i < 5; i++) {
        snprintf(keys[i], sizeof keys[i], "%s{__rand_int__}%s", prefix, suffix[i]);
        argv[k++] = keys[i];
    }
    for (int i = 0; args[i] != NULL && k < 39; i++)
        argv[k++] = args[i];
    argv[k] = NULL;
    char label[48];
    snprintf(label, sizeof label, "W7/script/%s", what);
    progress("%s: redis-benchmark -P %s -c %s -n %ld EVALSHA (%s)", label, SCRIPT_PIPELINE,
             SCRIPT_CLIENTS, n, what);
    baseline b;
    if (baseline_run_args(&ctx->servers->s[0], argv, NULL, label, ctx->place->client_cpu, &b) !=
        0) {
        bench_fail(ctx, "%s: redis-benchmark failed (above)", label);
        return -1;
    }
    *per_s = b.rps;
    return 0;
}

/* Run lua over the locks [0, total) of prefix, SCRIPT_FILL_CHUNK at a time: the sum of
 * its replies, or -1 after bench_fail. */
static long long chunks(bench_ctx *ctx, redisContext *c, const char *lua, const char *prefix,
                        long total)
{
    long long sum = 0;
    for (long at = 0; at < total; at += SCRIPT_FILL_CHUNK) {
        long last = at + SCRIPT_FILL_CHUNK < total ? at + SCRIPT_FILL_CHUNK - 1 : total - 1;
        redisReply *r =
            server_cmd(c, "EVAL %s 1 %s %ld %ld %s %d", lua, prefix, at, last, SCRIPT_VALUE, 60000);
        if (r == NULL || r->type != REDIS_REPLY_INTEGER) {
            freeReplyObject(r);
            bench_fail(ctx, "W7/script/release: setting up (or counting) its locks failed");
            return -1;
        }
        sum += r->integer;
        freeReplyObject(r);
    }
    return sum;
}

/* Delete the keys acquire made (names of its own, SCAN by their prefix): 100,000 of
 * them by default, whose fence counters would stay an hour. */
static void sweep(redisContext *c, const char *match)
{
    char cursor[32] = "0";
    do {
        redisReply *r = redisCommand(c, "SCAN %s MATCH %s COUNT 10000", cursor, match);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            freeReplyObject(r);
            return;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        redisReply *keys = r->element[1];
        if (keys->elements > 0) {
            const char **argv = calloc(keys->elements + 1, sizeof *argv);
            size_t *lens = calloc(keys->elements + 1, sizeof *lens);
            if (argv != NULL && lens != NULL) {
                argv[0] = "UNLINK";
                lens[0] = 6;
                for (size_t i = 0; i < keys->elements; i++) {
                    argv[i + 1] = keys->element[i]->str;
                    lens[i + 1] = keys->element[i]->len;
                }
                freeReplyObject(redisCommandArgv(c, (int)keys->elements + 1, argv, lens));
            }
            free(argv);
            free(lens);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
}

int w7_script_limits(bench_ctx *ctx)
{
    long n = ctx->opt->requests, held = SCRIPT_HELD_TIMES * n;
    redisContext *c = server_connect(&ctx->servers->s[0]);
    if (c == NULL) {
        bench_fail(ctx, "W7/script: cannot connect to node 1");
        return -1;
    }
    int rc = -1;
    char acq[41], rel[41], pa[64], pr[64], match[80], keyspace[32];
    snprintf(pa, sizeof pa, "%sw7s:a:", BENCH_PREFIX);
    snprintf(pr, sizeof pr, "%sw7s:r:", BENCH_PREFIX);
    snprintf(match, sizeof match, "%s*", pa);
    snprintf(keyspace, sizeof keyspace, "%ld", held);
    double a = 0, r = 0;
    if (load(ctx, c, DLOCK_SCRIPT_TRY, "acquire", acq) != 0 ||
        load(ctx, c, DLOCK_SCRIPT_RELEASE, "release", rel) != 0)
        goto out;
    const char *const acq_args[] = {SCRIPT_VALUE, "10000", SCRIPT_RETENTION, NULL};
    int arc = pipelined(ctx, "acquire", acq, 2, pa, n, SCRIPT_KEYSPACE, acq_args, &a);
    sweep(c, match);
    if (arc != 0)
        goto out;
    progress("W7/script/release: setting %ld locks for it to release", held);
    if (chunks(ctx, c, fill_lua, pr, held) < 0)
        goto out;
    const char *const rel_args[] = {SCRIPT_TOKEN, "0", "",  SCRIPT_RETENTION, "1", "0", "",
                                    "",           "",  NULL};
    int rrc = pipelined(ctx, "release", rel, 5, pr, n, keyspace, rel_args, &r);
    /* Every lock a release found is gone: the ones left were never found. */
    long long left = chunks(ctx, c, count_lua, pr, held);
    if (rrc != 0 || left < 0)
        goto out;
    double share = (double)(held - left) / (double)n;
    fig("W7/script/acquire", "per_s", a, 0, -1, NULL);
    fig("W7/script/release", "per_s", r, 0, -1, NULL);
    fig("W7/script/release", "held_share", share, 2, -1, NULL);
    fig("W7/script/cycle", "per_s", 1 / (1 / a + 1 / r), 0, -1, NULL);
    progress("W7/script: acquire %.0f/s, release %.0f/s (%.0f %% found their lock), a cycle's "
             "limit %.0f/s",
             a, r, 100 * share, 1 / (1 / a + 1 / r));
    rc = 0;
out:
    redisFree(c);
    return rc;
}
