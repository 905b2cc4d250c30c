/*
 * elect.c: W8, a leader's changes as an observer hears them, and what idle observers
 * cost the servers. It runs right after W3, on node 1, so that its gaps stand beside
 * W3's handoff gap (xgap) and baseline/wake's of the same round.
 *
 * Figures (label W8):
 *   proclaim_p50_us, proclaim_p99_us  from just before a leader calls dlock_proclaim to
 *                the observer's callback with the new value, over --w8-changes changes
 *                (200) after 10 left out; ratio to the RTT. The way is the script's
 *                round trip to the server, its PUBLISH, the client's subscriber thread
 *                and the observer's thread: about 2 RTT and two wake-ups.
 *   failover_p50_us, failover_p99_us  from just before a leader calls dlock_resign to
 *                the observer's callback with the next leader's term, the next
 *                candidate waiting in dlock_elect all along (--w8-changes / 4
 *                hand-overs); ratio to the RTT. It adds the resignation's and the
 *                release's rounds, the handoff to the waiting candidate and its
 *                proclamation: compare it with W3's xgap, the same handoff without the
 *                announcement.
 *   idle_cmds    commands the server processed over --w8-idle-ms (10 s) while one
 *                leader renewed its lease (TTL 3 s, a renewal a second) and ten
 *                observers watched; ratio to the same window with no observer, which
 *                is the leader's renewals alone: 1.00 means the observers asked the
 *                server nothing.
 * The callback records the time and the change; the main thread waits for it on a
 * condition variable, so every change is heard before the next is made.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W8_WARMUP    10
#define W8_OBSERVERS 10

/* What the observer of the measured changes heard last. */
typedef struct heard {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t term;
    char value[32];
    int64_t at_ns;
    long changes;
} heard;

static void on_change(const dlock_leader_info *info, void *user)
{
    heard *h = user;
    int64_t t = now_ns();
    pthread_mutex_lock(&h->mu);
    h->term = info->term;
    snprintf(h->value, sizeof h->value, "%.31s", info->value);
    h->at_ns = t;
    h->changes++;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* Wait (up to 5 s) until the observer heard term (0: any) with value (NULL: any); the
 * time it heard it, or -1. */
static int64_t wait_heard(heard *h, uint64_t term, const char *value)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    pthread_mutex_lock(&h->mu);
    while (!((term == 0 || h->term == term) && (value == NULL || strcmp(h->value, value) == 0)))
        if (pthread_cond_timedwait(&h->cv, &h->mu, &until) != 0)
            break;
    int64_t at = (term == 0 || h->term == term) && (value == NULL || strcmp(h->value, value) == 0)
                     ? h->at_ns
                     : -1;
    pthread_mutex_unlock(&h->mu);
    return at;
}

/* A candidate that takes over when the leader resigns: campaigns on its own thread. */
typedef struct candidate {
    dlock_client *c;
    const char *name;
    dlock_lock *lead;
    int rc;
} candidate;

static void *campaign(void *p)
{
    candidate *k = p;
    dlock_elect_opts o;
    memset(&o, 0, sizeof o);
    o.lock.ttl_ms = BENCH_TTL_MS;
    o.lock.wait_ms = -1;
    o.value = "next";
    k->rc = dlock_elect(k->c, k->name, &o, &k->lead);
    return NULL;
}

static dlock_client *client(bench_ctx *ctx, const char *url)
{
    dlock_config cfg;
    bench_dlock_config(ctx, &cfg);
    dlock_client *c = NULL;
    if (dlock_client_new(url, &cfg, &c) != DLOCK_OK)
        bench_fail(ctx, "W8: dlock_client_new: %s", dlock_errmsg());
    return c;
}

static void gap_figures(bench_ctx *ctx, const char *what, int64_t *gaps, long n)
{
    samples_sort(gaps, (size_t)n);
    char metric[32];
    double rtt = ctx->rtt_us;
    for (int q = 0; q < 2; q++) {
        double us = percentile_sorted(gaps, (size_t)n, q == 0 ? 50 : 99) / 1000.0;
        snprintf(metric, sizeof metric, "%s_p%d_us", what, q == 0 ? 50 : 99);
        fig("W8", metric, us, 0, rtt > 0 ? us / rtt : -1, rtt > 0 ? "RTT" : NULL);
    }
}

/* Commands the server processed over the idle window, the leader renewing. */
static long long idle_commands(bench_ctx *ctx, long ms)
{
    stats_conns sc;
    srv_stats a, b;
    if (stats_open(ctx->servers, 1, &sc) != 0)
        return -1;
    long long n = -1;
    if (stats_take(&sc, &a) == 0) {
        dh_sleep_ms(ms);
        if (stats_take(&sc, &b) == 0)
            n = stats_commands(&sc, &a, &b);
    }
    stats_close(&sc);
    return n;
}

int run_w8(bench_ctx *ctx)
{
    const bench_opts *o = ctx->opt;
    const char *url = ctx->servers->s[0].url;
    static const char name[] = "w8:leader";
    heard h = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    long n = o->w8_changes, handoffs = o->w8_changes / 4 > 0 ? o->w8_changes / 4 : 1;
    int64_t *gaps = bench_calloc(ctx, "W8", (size_t)(n > handoffs ? n : handoffs), sizeof *gaps);
    dlock_client *lc = client(ctx, url), *oc = client(ctx, url), *kc = client(ctx, url);
    dlock_observer *obs = NULL;
    int rc = -1;
    if (gaps == NULL || lc == NULL || oc == NULL || kc == NULL)
        goto out;
    if (dlock_observe(oc, name, on_change, &h, &obs) != DLOCK_OK) {
        bench_fail(ctx, "W8: dlock_observe: %s", dlock_errmsg());
        goto out;
    }
    progress("W8: %ld proclamations, %ld hand-overs, observed", n, handoffs);
    dlock_elect_opts eo;
    memset(&eo, 0, sizeof eo);
    eo.lock.ttl_ms = BENCH_TTL_MS;
    eo.lock.wait_ms = 5000;
    eo.value = "v0";
    dlock_lock *lead = NULL;
    if (dlock_elect(lc, name, &eo, &lead) != DLOCK_OK ||
        wait_heard(&h, dlock_fence(lead), "v0") < 0) {
        bench_fail(ctx, "W8: the first election was not heard: %s", dlock_errmsg());
        goto out;
    }
    /* Proclamations. */
    long kept = 0;
    for (long i = 0; i < n + W8_WARMUP; i++) {
        char v[32];
        snprintf(v, sizeof v, "v%ld", i + 1);
        int64_t t0 = now_ns();
        int64_t t1 = dlock_proclaim(lead, v) == DLOCK_OK ? wait_heard(&h, 0, v) : -1;
        if (t1 < 0) {
            bench_fail(ctx, "W8: proclamation %ld not heard: %s", i, dlock_errmsg());
            goto out;
        }
        if (i >= W8_WARMUP)
            gaps[kept++] = t1 - t0;
    }
    gap_figures(ctx, "proclaim", gaps, kept);

    /* Hand-overs: a candidate waits; the leader resigns; the candidate becomes the
     * leader, and the one that resigned campaigns next. */
    dlock_client *clients[2] = {lc, kc};
    int cur = 0;
    for (long i = 0; i < handoffs; i++) {
        candidate k = {.c = clients[1 - cur], .name = name};
        pthread_t th;
        if (pthread_create(&th, NULL, campaign, &k) != 0) {
            bench_fail(ctx, "W8: cannot start a candidate");
            goto out;
        }
        dh_sleep_ms(2); /* queued behind the leader (its first attempt is refused) */
        int64_t t0 = now_ns();
        dlock_resign(lead);
        lead = NULL;
        pthread_join(th, NULL);
        int64_t t1 = k.rc == DLOCK_OK ? wait_heard(&h, dlock_fence(k.lead), "next") : -1;
        if (t1 < 0) {
            bench_fail(ctx, "W8: hand-over %ld not heard: %s", i, dlock_errname(k.rc));
            goto out;
        }
        gaps[i] = t1 - t0;
        lead = k.lead;
        cur = 1 - cur;
    }
    gap_figures(ctx, "failover", gaps, handoffs);

    /* Idle: the leader renews (TTL 3 s), first unobserved but for the measuring
     * observer's client, then with ten more observers. */
    dlock_resign(lead);
    lead = NULL;
    eo.lock.ttl_ms = 3000;
    if (dlock_elect(lc, name, &eo, &lead) != DLOCK_OK) {
        bench_fail(ctx, "W8: idle leader: %s", dlock_errmsg());
        goto out;
    }
    dlock_observer_free(obs);
    obs = NULL;
    dh_sleep_ms(200);
    long long alone = idle_commands(ctx, o->w8_idle_ms);
    dlock_observer *more[W8_OBSERVERS] = {0};
    for (int i = 0; i < W8_OBSERVERS; i++)
        dlock_observe(oc, name, NULL, NULL, &more[i]);
    dh_sleep_ms(200); /* their first reads */
    long long watched = idle_commands(ctx, o->w8_idle_ms);
    for (int i = 0; i < W8_OBSERVERS; i++)
        dlock_observer_free(more[i]);
    if (alone > 0 && watched >= 0)
        fig("W8", "idle_cmds", (double)watched, 0, (double)watched / (double)alone, "no observer");
    progress("W8: idle %lld commands with %d observers, %lld without", watched, W8_OBSERVERS,
             alone);
    rc = 0;
out:
    if (lead != NULL)
        dlock_resign(lead);
    dlock_observer_free(obs);
    dlock_client_free(lc);
    dlock_client_free(oc);
    dlock_client_free(kc);
    free(gaps);
    return rc;
}
