/*
 * tls.c: W1 over TLS, beside redis-benchmark --tls on the same server.
 *
 * The run starts one redis-server of its own that listens with TLS (a certificate for
 * 127.0.0.1 signed by a CA made for the run, in a temporary directory), pinned as the
 * other servers are, whether or not -s gave the servers of the other workloads. Each
 * round: redis-benchmark --tls --cacert SET -c 1 on it (baseline/c1-tls), then W1's
 * loop through rediss://...?cacert= (W1/tls), whose cycles_per_s carries its ratio to
 * that SET rate. An acquire plus a release is two round trips, so 0.5 is the ceiling,
 * as for W1 in the clear.
 */
#include "bench.h"

#include <stdio.h>
#include <string.h>

static struct {
    bool started, failed;
    char dir[512];
    dh_server srv;
    bench_server bs; /* what baseline_run needs */
    char url[1200];
    int cpu;
} g_tls;

static int start(bench_ctx *ctx)
{
    if (dh_tls_dir(g_tls.dir, sizeof g_tls.dir) != 0 || dh_tls_make_set(g_tls.dir) != 0)
        return -1;
    char cert[600], key[600], ca[600];
    snprintf(cert, sizeof cert, "%s/server.crt", g_tls.dir);
    snprintf(key, sizeof key, "%s/server.key", g_tls.dir);
    snprintf(ca, sizeof ca, "%s/ca.crt", g_tls.dir);
    g_tls.cpu = ctx->place->server_cpu;
    dh_server_tls t = {cert, key, ca, false};
    dh_server_opts o = {.parent_dir = g_tls.dir,
                        .child_setup = place_child_pin,
                        .child_arg = &g_tls.cpu,
                        .tls = &t};
    if (dh_server_start_opts(&g_tls.srv, &o) != 0)
        return -1;
    g_tls.started = true;
    snprintf(g_tls.bs.host, sizeof g_tls.bs.host, "%s", g_tls.srv.host);
    g_tls.bs.port = g_tls.srv.tls_port;
    snprintf(g_tls.bs.tls_ca, sizeof g_tls.bs.tls_ca, "%s", ca);
    snprintf(g_tls.url, sizeof g_tls.url, "%s?cacert=%s", g_tls.srv.url, ca);
    progress("TLS: redis-server on %s (plain port %d for its admin)", g_tls.srv.url,
             g_tls.srv.port);
    return 0;
}

int run_w1_tls(bench_ctx *ctx)
{
    if (g_tls.failed)
        return -1;
    if (!g_tls.started && start(ctx) != 0) {
        g_tls.failed = true;
        bench_fail(ctx, "W1/tls: could not start a redis-server with TLS");
        return -1;
    }
    baseline b;
    progress("baseline: redis-benchmark --tls -t set -n %ld -c 1 on %s", ctx->opt->requests,
             g_tls.srv.url);
    if (baseline_run(&g_tls.bs, 1, ctx->opt->requests, ctx->place->client_cpu, &b) != 0) {
        bench_fail(ctx, "W1/tls: redis-benchmark --tls failed");
        return -1;
    }
    fig("baseline/c1-tls", "set_rps", b.rps, 0, -1, NULL);
    if (b.p50_us >= 0)
        fig("baseline/c1-tls", "p50_us", b.p50_us, 0, -1, NULL);
    return w1_run_on(ctx, "W1/tls", "w1tls", g_tls.url, b.rps, "SET rps -c1 tls", NULL, NULL);
}

void w1_tls_stop(void)
{
    if (g_tls.started)
        dh_server_stop(&g_tls.srv);
    g_tls.started = false;
    if (g_tls.dir[0] != '\0')
        dh_tls_dir_remove(g_tls.dir);
    g_tls.dir[0] = '\0';
}
