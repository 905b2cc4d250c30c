/*
 * contended.c: W3, one name and blocking waits.
 *
 * 8 workers (threads, a dlock_client and a Redis connection each) run 200 critical
 * sections each on one name, acquiring with wait_ms = -1. Inside, a section INCRs a
 * counter on node 1, which must end at workers x sections. The INCR's reply is also
 * the section's place in the global order, so each section writes its own slot of a
 * shared array with no lock: who held it, when its acquire returned and when its
 * release was called (CLOCK_MONOTONIC, read just before dlock_release). From that
 * array:
 *   switches     sections whose previous section belonged to another worker. A waiter
 *                that sleeps while the releaser re-takes the lock makes few;
 *   switch_share switches / sections: 1 when the lock changes hands every time, near
 *                0 when one worker keeps re-taking it;
 *   xgap         from the START of the release call that ended a section to the
 *                return of the acquire that began the next one, when they are by
 *                different workers (p50, p99; ratio to the RTT): the whole hand-over,
 *                the release's own round trip included, as baseline/wake measures the
 *                raw mechanism. It used to run from the release's return, which left
 *                that round trip out and let the next acquire return "before" the
 *                release (the server deletes the key half a round trip before the
 *                releaser reads its reply), so many gaps counted as 0. Now only a
 *                lease that expired could make a gap negative; it would count as 0;
 *   max_wait_ms  the longest single dlock_acquire call;
 *   cmds_per_section  every command the servers processed during the run (INFO's
 *                total_commands_processed, which counts the commands that scripts run
 *                as well as the scripts), divided by the sections. Polling shows here
 *                as a figure that grows with the number of waiters.
 * With --w3-fair each run is repeated with dlock_opts.fair (waiters served in arrival
 * order): W3/fair, W3/wN/fair. W3/one-client (W3/wN/one-client) runs the same workers
 * on one dlock_client shared by their threads, as one program's threads would: each
 * release then hands the lock to a waiter of its own client, its heir, whose lock the
 * release's reply confirms (no wake-up message, no confirming attempt).
 * Mutual exclusion is also checked in-process: a worker marks itself as the holder
 * after its acquire returns and unmarks before it calls release, so finding the mark
 * taken means two holders at once. Any violation fails the run.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct section {
    int worker;
    int64_t acq_ns; /* dlock_acquire returned */
    int64_t rel_ns; /* just before dlock_release was called */
} section;

typedef struct w3_arg {
    bench_ctx *ctx;
    const char *urls;
    char name[64];
    char counter[64];
    int workers;
    bool fair;            /* dlock_opts.fair */
    dlock_client *shared; /* the client of every worker, or NULL: one each */
    long sections;        /* per worker */
    long total;
    section *secs;
    _Atomic int holder;    /* worker id + 1 while it holds the lock, else 0 */
    _Atomic long overlaps; /* holders found at once */
    _Atomic int64_t max_wait_ns;
    stats_window st;
} w3_arg;

/* Lock-free maximum: a CAS loop that gives up once another thread stored more. */
static void note_max(_Atomic int64_t *max, int64_t v)
{
    int64_t prev = atomic_load(max);
    while (v > prev && !atomic_compare_exchange_weak(max, &prev, v))
        ;
}

/* One worker: its own dlock client (or the shared one) and connection, a warm-up on
 * its own name, then its sections on the shared name. */
static void w3_worker(team *t, int id, void *p)
{
    w3_arg *a = p;
    dlock_config cfg;
    bench_dlock_config(a->ctx, &cfg);
    dlock_client *c = NULL;
    redisContext *rc_conn = NULL;
    dlock_opts o = {0};
    o.ttl_ms = BENCH_TTL_MS;
    o.wait_ms = -1;
    o.fair = a->fair;
    int rc = a->shared != NULL ? (c = a->shared, DLOCK_OK) : dlock_client_new(a->urls, &cfg, &c);
    if (rc != DLOCK_OK)
        team_error(t, "dlock_client_new: %s: %s", dlock_strerror(rc), dlock_errmsg());
    else if ((rc_conn = server_connect(&a->ctx->servers->s[0])) == NULL)
        team_error(t, "worker %d: cannot connect to node 1", id);
    if (!team_stopped(t)) {
        /* Warm-up: connect and cache the scripts, on a name of its own. */
        char warm[64];
        dlock_lock *l;
        snprintf(warm, sizeof warm, "w3:warm:%d", id);
        if ((rc = dlock_acquire(c, warm, &o, &l)) == DLOCK_OK)
            rc = dlock_release(l);
        if (rc != DLOCK_OK)
            team_error(t, "warm-up: %s: %s", dlock_strerror(rc), dlock_errmsg());
    }
    team_ready(t);
    for (long i = 0; i < a->sections && !team_stopped(t); i++) {
        dlock_lock *l;
        int64_t t0 = now_ns();
        rc = dlock_acquire(c, a->name, &o, &l);
        int64_t t1 = now_ns();
        if (rc != DLOCK_OK) {
            team_error(t, "acquire: %s: %s", dlock_strerror(rc), dlock_errmsg());
            break;
        }
        int expected = 0;
        if (!atomic_compare_exchange_strong(&a->holder, &expected, id + 1))
            atomic_fetch_add(&a->overlaps, 1);
        note_max(&a->max_wait_ns, t1 - t0);
        redisReply *r = redisCommand(rc_conn, "INCR %s", a->counter);
        long long seq = r != NULL && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
        freeReplyObject(r);
        if (seq < 1 || seq > a->total) {
            team_error(t, "INCR %s gave %lld (expected 1..%ld)", a->counter, seq, a->total);
            dlock_release(l);
            break;
        }
        section *s = &a->secs[seq - 1];
        s->worker = id;
        s->acq_ns = t1;
        expected = id + 1;
        atomic_compare_exchange_strong(&a->holder, &expected, 0);
        s->rel_ns = now_ns();
        rc = dlock_release(l);
        if (rc != DLOCK_OK) {
            team_error(t, "release: %s: %s", dlock_strerror(rc), dlock_errmsg());
            break;
        }
        atomic_fetch_add(&t->done, 1);
    }
    team_end(t);
    redisFree(rc_conn);
    if (a->shared == NULL)
        dlock_client_free(c);
}

/* One W3 run with `workers` workers, fair (FIFO) waiting or not, on a client each or on
 * one they share. */
static int w3_one(bench_ctx *ctx, int workers, bool fair, bool one_client)
{
    const bench_opts *o = ctx->opt;
    char label[48], urls[BENCH_MAX_NODES * 620];
    char w[16] = "W3";
    if (workers != 8)
        snprintf(w, sizeof w, "W3/w%d", workers);
    bench_label(label, sizeof label, w, o->nodes, one_client ? "/one-client" : fair ? "/fair" : "");
    servers_urls(ctx->servers, 0, o->nodes, urls, sizeof urls);

    w3_arg *a = bench_calloc(ctx, label, 1, sizeof *a);
    if (a == NULL)
        return -1;
    a->ctx = ctx;
    a->urls = urls;
    a->workers = workers;
    a->fair = fair;
    a->sections = o->w3_sections;
    a->total = (long)workers * o->w3_sections;
    const char *kind = one_client ? ":one-client" : fair ? ":fair" : "";
    snprintf(a->name, sizeof a->name, "w3:%d%s", workers, kind);
    snprintf(a->counter, sizeof a->counter, "%sw3:count:%d%s", BENCH_PREFIX, workers, kind);
    a->secs = bench_calloc(ctx, label, (size_t)a->total, sizeof *a->secs);
    int rc = -1;
    if (a->secs == NULL)
        goto out;
    if (one_client) {
        dlock_config cfg;
        bench_dlock_config(ctx, &cfg);
        if (dlock_client_new(urls, &cfg, &a->shared) != DLOCK_OK) {
            bench_fail(ctx, "%s: dlock_client_new: %s", label, dlock_errmsg());
            goto out;
        }
    }
    for (long i = 0; i < a->total; i++)
        a->secs[i].worker = -1;
    /* A fresh counter. */
    redisContext *admin = server_connect(&ctx->servers->s[0]);
    redisReply *r = admin ? server_cmd(admin, "DEL %s", a->counter) : NULL;
    freeReplyObject(r);
    if (r == NULL || stats_open(ctx->servers, o->nodes, &a->st.sc) != 0) {
        bench_fail(ctx, "%s: cannot reach the servers", label);
        redisFree(admin);
        goto out;
    }
    progress("%s: %d workers x %ld sections on one name, blocking wait", label, workers,
             a->sections);
    team t;
    if (team_run(&t, label, workers, a->total, w3_worker, a, stats_window_start, &a->st) != 0) {
        bench_fail(ctx, "%s: %s", label, t.err);
        redisFree(admin);
        stats_close(&a->st.sc);
        goto out;
    }
    srv_stats after;
    bool have_stats = stats_window_end(&a->st, label, o->verbose, &after);
    long long cmds = have_stats ? stats_commands(&a->st.sc, &a->st.before, &after) : -1;
    stats_close(&a->st.sc);

    /* The sanity checks: the counter, every slot written once, one holder at a time. */
    r = server_cmd(admin, "GET %s", a->counter);
    long long final = r != NULL && r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
    freeReplyObject(r);
    redisFree(admin);
    long missing = 0;
    for (long i = 0; i < a->total; i++)
        if (a->secs[i].worker < 0)
            missing++;
    if (final != a->total || missing != 0 || a->overlaps != 0) {
        bench_fail(ctx, "%s: counter %lld (expected %ld), %ld sections missing, %ld overlaps",
                   label, final, a->total, missing, (long)a->overlaps);
        goto out;
    }

    double secs = (double)(t.end_ns - t.start_ns) / 1e9;
    long switches = 0;
    int64_t *gaps = bench_calloc(ctx, label, (size_t)a->total, sizeof *gaps);
    if (gaps == NULL)
        goto out;
    for (long i = 1; i < a->total; i++) {
        if (a->secs[i].worker == a->secs[i - 1].worker)
            continue;
        int64_t g = a->secs[i].acq_ns - a->secs[i - 1].rel_ns;
        gaps[switches++] = g > 0 ? g : 0;
    }
    samples_sort(gaps, (size_t)switches);
    double p50 = (double)percentile_sorted(gaps, (size_t)switches, 50) / 1000;
    double p99 = (double)percentile_sorted(gaps, (size_t)switches, 99) / 1000;
    free(gaps);
    double rtt = ctx->rtt_us;
    fig(label, "sections_per_s", secs > 0 ? (double)a->total / secs : 0, 0, -1, NULL);
    fig(label, "switches", (double)switches, 0, -1, NULL);
    fig(label, "switch_share", (double)switches / (double)a->total, 2, -1, NULL);
    fig(label, "xgap_p50_us", p50, 0, rtt > 0 ? p50 / rtt : -1, "RTT");
    fig(label, "xgap_p99_us", p99, 0, rtt > 0 ? p99 / rtt : -1, "RTT");
    fig(label, "max_wait_ms", (double)a->max_wait_ns / 1e6, 1, -1, NULL);
    if (cmds >= 0)
        fig(label, "cmds_per_section", (double)cmds / (double)a->total, 1, -1, NULL);
    progress("%s: %.0f sections/s, %ld switches, xgap p50 %.0f us, max wait %.1f ms", label,
             (double)a->total / secs, switches, p50, (double)a->max_wait_ns / 1e6);
    rc = 0;
out:
    dlock_client_free(a->shared);
    free(a->secs);
    free(a);
    return rc;
}

int run_w3(bench_ctx *ctx)
{
    int rc = 0;
    for (int i = 0; i < ctx->opt->w3_nworkers; i++) {
        if (w3_one(ctx, ctx->opt->w3_workers[i], false, false) != 0)
            rc = -1;
        if (ctx->opt->w3_fair && w3_one(ctx, ctx->opt->w3_workers[i], true, false) != 0)
            rc = -1;
        if (w3_one(ctx, ctx->opt->w3_workers[i], false, true) != 0)
            rc = -1;
    }
    return rc;
}
