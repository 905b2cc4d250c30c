/*
 * wake.c: baseline/wake, the release-publish-wake-take hand-over in plain Redis.
 *
 * W3's xgap is a lock changing hands: from the start of one worker's release to the
 * return of the next worker's acquire. Whatever the library does, a waiter that sleeps
 * until it is told the key is free cannot beat the raw mechanism, so the bench
 * measures that mechanism on node 1 in the same round, just before W3:
 *   - a key K and a channel C; two threads, each with a command connection and a
 *     subscriber connection (SUBSCRIBE C, read with blocking hiredis calls);
 *   - the holder has K (SET K v NX PX 10000) and releases it with one EVAL of a
 *     script that DELs K and PUBLISHes on C;
 *   - the other thread, blocked reading its subscriber connection, wakes on the
 *     message and takes K with SET K v NX PX 10000 on its command connection; once
 *     that says OK it is the holder and releases in turn: the two threads ping-pong.
 * Figures (label baseline/wake):
 *   gap_p50_us, gap_p99_us  from just before the holder sends its EVAL to the moment
 *                the waiter has read the OK of its SET NX (the release's start time
 *                travels in the message; both threads read the same CLOCK_MONOTONIC),
 *                over --wake-cycles hand-overs (2000) after 20 left out (the first
 *                EVAL compiles the script); ratio to the RTT. It is roughly the
 *                EVAL's way to the server, the publish, a thread wake-up and one SET
 *                round trip; a W3 xgap near it leaves nothing to gain in the wait.
 * A holder releases only once the other thread has said it is about to block on its
 * subscriber connection (and has read the message of its own last release), so that
 * every gap includes a wake-up, as a parked lock waiter's does, and none includes the
 * waiter's own bookkeeping. Nothing is the library's: no dlock call is made.
 */
#include "bench.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Hand-overs not counted: the script's first EVAL compiles it, and the first wake-ups
 * fault in the threads' stacks. */
#define WAKE_WARMUP 20

/* KEYS: K. ARGV: C, the message. */
static const char release_lua[] = "redis.call('DEL', KEYS[1])\n"
                                  "redis.call('PUBLISH', ARGV[1], ARGV[2])\n"
                                  "return 1\n";

typedef struct wake_arg {
    bench_ctx *ctx;
    char key[64], chan[64];
    long n;              /* hand-overs, the warm-up included */
    int64_t *gaps;       /* [n], ns, each written by the thread that took K */
    _Atomic long parked; /* i + 1 once the taker of hand-over i is about to block */
} wake_arg;

/* Read one published message from sub: its sender, release start and hand-over
 * number (the message is "sender start i"). 0, or -1 on an I/O error, a timeout or
 * anything else. */
static int read_msg(redisContext *sub, int *sender, int64_t *start, long *i)
{
    void *p = NULL;
    if (redisGetReply(sub, &p) != REDIS_OK)
        return -1;
    redisReply *r = p;
    long long s = 0;
    int ok = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
             r->element[0]->type == REDIS_REPLY_STRING &&
             strcmp(r->element[0]->str, "message") == 0 &&
             r->element[2]->type == REDIS_REPLY_STRING &&
             sscanf(r->element[2]->str, "%d %lld %ld", sender, &s, i) == 3;
    freeReplyObject(r);
    *start = (int64_t)s;
    return ok ? 0 : -1;
}

/* Hand-over i, the holder's side: wait for the other thread to park, release, then
 * read our own message so that the next read is the other's release. */
static int give(wake_arg *a, team *t, int id, redisContext *cmd, redisContext *sub, long i)
{
    while (atomic_load(&a->parked) != i + 1) {
        if (team_stopped(t))
            return -1;
        sched_yield(); /* on one CPU, the other thread needs it to get there */
    }
    char msg[64];
    int64_t start = now_ns();
    snprintf(msg, sizeof msg, "%d %lld %ld", id, (long long)start, i);
    redisReply *r = redisCommand(cmd, "EVAL %s 1 %s %s %s", release_lua, a->key, a->chan, msg);
    bool ok = r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    if (!ok) {
        team_error(t, "baseline/wake: release EVAL failed: %s", cmd->err ? cmd->errstr : "reply");
        return -1;
    }
    int sender;
    int64_t sent;
    long seq;
    if (read_msg(sub, &sender, &sent, &seq) != 0 || sender != id || seq != i) {
        team_error(t, "baseline/wake: thread %d did not get its own message %ld", id, i);
        return -1;
    }
    return 0;
}

/* Hand-over i, the waiter's side: park on the subscriber connection, and on the
 * other's message take K. */
static int take(wake_arg *a, team *t, int id, redisContext *cmd, redisContext *sub, long i)
{
    atomic_store(&a->parked, i + 1);
    int sender;
    int64_t start;
    long seq;
    if (read_msg(sub, &sender, &start, &seq) != 0 || sender == id || seq != i) {
        team_error(t, "baseline/wake: thread %d: no release message %ld", id, i);
        return -1;
    }
    redisReply *r = redisCommand(cmd, "SET %s %d NX PX %d", a->key, id, BENCH_TTL_MS);
    int64_t end = now_ns();
    bool ok = r != NULL && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    freeReplyObject(r);
    if (!ok) {
        team_error(t, "baseline/wake: SET NX after release %ld did not take the key", i);
        return -1;
    }
    a->gaps[i] = end - start;
    atomic_fetch_add(&t->done, 1);
    return 0;
}

/* One of the two threads; thread 0 holds K first and gives it up in even hand-overs. */
static void wake_worker(team *t, int id, void *p)
{
    wake_arg *a = p;
    const bench_server *s = &a->ctx->servers->s[0];
    redisContext *cmd = server_connect(s);
    redisContext *sub = cmd != NULL ? server_connect(s) : NULL;
    if (sub == NULL) {
        team_error(t, "baseline/wake: thread %d cannot connect to node 1", id);
    } else {
        redisReply *r = server_cmd(sub, "SUBSCRIBE %s", a->chan);
        bool ok = r != NULL && r->type == REDIS_REPLY_ARRAY;
        freeReplyObject(r);
        if (ok && id == 0) {
            r = server_cmd(cmd, "SET %s %d NX PX %d", a->key, id, BENCH_TTL_MS);
            ok = r != NULL && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
            freeReplyObject(r);
        }
        if (!ok)
            team_error(t, "baseline/wake: thread %d cannot subscribe or take the key", id);
    }
    team_ready(t);
    for (long i = 0; i < a->n && !team_stopped(t); i++) {
        int rc = i % 2 == id ? give(a, t, id, cmd, sub, i) : take(a, t, id, cmd, sub, i);
        if (rc != 0)
            break;
    }
    team_end(t);
    redisFree(sub);
    redisFree(cmd);
}

int run_wake(bench_ctx *ctx)
{
    const char *label = "baseline/wake";
    wake_arg *a = bench_calloc(ctx, label, 1, sizeof *a);
    if (a == NULL)
        return -1;
    a->n = ctx->opt->wake_cycles + WAKE_WARMUP;
    a->gaps = bench_calloc(ctx, label, (size_t)a->n, sizeof *a->gaps);
    if (a->gaps == NULL) {
        free(a);
        return -1;
    }
    a->ctx = ctx;
    snprintf(a->key, sizeof a->key, "%swake:key", BENCH_PREFIX);
    snprintf(a->chan, sizeof a->chan, "%swake:chan", BENCH_PREFIX);
    int rc = -1;
    redisContext *admin = server_connect(&ctx->servers->s[0]);
    redisReply *r = admin != NULL ? server_cmd(admin, "DEL %s", a->key) : NULL;
    freeReplyObject(r);
    if (r == NULL) {
        bench_fail(ctx, "%s: cannot reach node 1", label);
        goto out;
    }
    progress("%s: %ld hand-overs of one key between two threads (DEL + PUBLISH, SET NX)", label,
             ctx->opt->wake_cycles);
    team t;
    if (team_run(&t, label, 2, a->n, wake_worker, a, NULL, NULL) != 0) {
        bench_fail(ctx, "%s: %s", label, t.err);
        goto out;
    }
    /* The last taker still holds K. */
    freeReplyObject(server_cmd(admin, "DEL %s", a->key));
    size_t n = (size_t)ctx->opt->wake_cycles;
    int64_t *g = a->gaps + WAKE_WARMUP;
    samples_sort(g, n);
    double p50 = (double)percentile_sorted(g, n, 50) / 1000;
    double p99 = (double)percentile_sorted(g, n, 99) / 1000;
    double rtt = ctx->rtt_us;
    fig(label, "gap_p50_us", p50, 0, rtt > 0 ? p50 / rtt : -1, "RTT");
    fig(label, "gap_p99_us", p99, 0, rtt > 0 ? p99 / rtt : -1, "RTT");
    progress("%s: gap p50 %.0f us, p99 %.0f us", label, p50, p99);
    rc = 0;
out:
    redisFree(admin);
    free(a->gaps);
    free(a);
    return rc;
}
