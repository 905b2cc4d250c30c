/*
 * cluster.c: W1 through a Redis Cluster, beside W1 directly on one of its masters.
 *
 * The run starts a cluster of its own: three masters (tests/support/cluster.c), pinned
 * as the other servers are, whether or not -s gave the servers of the other
 * workloads. Each round:
 *   W1/cluster-direct  W1 on redis:// of the master that owns one slot, on names that
 *                      all hash to it (the names "{w1c}:...": their keys' hash tag is
 *                      "{w1c", one slot);
 *   W1/cluster         the same names through redis-cluster:// of a seed that is
 *                      another master: what slot routing costs (cycles_per_s carries
 *                      its ratio to W1/cluster-direct);
 *   W1/cluster-spread  names of every slot through the seed: a client that keeps a
 *                      connection per master and moves between them on each call.
 */
#include "bench.h"

#include <stdio.h>
#include <string.h>

#define MASTERS 3
#define TAG     "{w1c}"

static struct {
    bool started, failed;
    dh_cluster cl;
    int cpu;
    char direct[128], seed[128];
} g_cl;

static int start(bench_ctx *ctx)
{
    g_cl.cpu = ctx->place->server_cpu;
    dh_server_opts o = {.child_setup = place_child_pin, .child_arg = &g_cl.cpu};
    if (dh_cluster_start(&g_cl.cl, MASTERS, &o) != 0)
        return -1;
    g_cl.started = true;
    /* The master of the names' slot, and another as the seed. */
    int slot = dh_cluster_keyslot(&g_cl.cl, "dlock:{" TAG ":0}");
    int m = slot >= 0 ? dh_cluster_owner(&g_cl.cl, slot) : -1;
    if (m < 0)
        return -1;
    snprintf(g_cl.direct, sizeof g_cl.direct, "%s", g_cl.cl.node[m].url);
    dh_cluster_url(&g_cl.cl, (m + 1) % MASTERS, g_cl.seed, sizeof g_cl.seed);
    progress("CLUSTER: %d masters, names of slot %d on %s, seed %s", MASTERS, slot, g_cl.direct,
             g_cl.seed);
    return 0;
}

int run_w1_cluster(bench_ctx *ctx)
{
    if (g_cl.failed)
        return -1;
    if (!g_cl.started && start(ctx) != 0) {
        g_cl.failed = true;
        bench_fail(ctx, "W1/cluster: could not start a Redis Cluster");
        return -1;
    }
    double direct;
    if (w1_run_on(ctx, "W1/cluster-direct", TAG, g_cl.direct, -1, NULL, &direct, NULL) != 0 ||
        w1_run_on(ctx, "W1/cluster", TAG, g_cl.seed, direct, "W1 direct on its master", NULL,
                  NULL) != 0 ||
        w1_run_on(ctx, "W1/cluster-spread", "w1cs", g_cl.seed, direct, "W1 direct on its master",
                  NULL, NULL) != 0)
        return -1;
    return 0;
}

void w1_cluster_stop(void)
{
    if (g_cl.started)
        dh_cluster_stop(&g_cl.cl);
    g_cl.started = false;
}
