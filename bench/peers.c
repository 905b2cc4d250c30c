/*
 * peers.c: W5's peers, the flash sale as users of other lock libraries write it, in the
 * same run as W5/lock and with its unit: 50 buyers (--w5-buyers), stock 1,000
 * (--w5-stock), under the lock GET the stock, SET it one lower and INCR the sold
 * counter, then release.
 *
 *   W5/peer-php-spin    the PHP recipe (SET NX EX, Lua compare-and-delete release),
 *                       usleep(1000) after a refused try: one php process per buyer
 *                       (bench/php/buyer.php's mode peer-spin, phpredis);
 *   W5/peer-php-sleep   the same sleeping 100 ms, as most examples of the recipe do: the
 *                       buyer that releases takes the lock straight back while the
 *                       others sleep, which is fast and unfair (mode peer-sleep);
 *   W5/peer-redis-py    redis-py's Lock with its defaults (a refused try sleeps 0.1 s),
 *                       one python3 process of 50 threads, a client each
 *                       (bench/peers/redis_py.py);
 *   W5/peer-node-redlock  node-redlock 5 on ioredis with its defaults (retry every
 *                       200 ms plus up to 200 ms of jitter), one node process of 50
 *                       buyers, a connection each (bench/peers/redlock.js, its packages
 *                       at the versions bench/peers/package-lock.json pins).
 * Each reports sellout_ms, its ratio to W5/lock's of the same round (above 1: dlock sold
 * out first), max_wait_ms (the longest acquisition of any buyer), buyers_served (those
 * that bought at least one item), cmds_per_unit, and oversold with the same checks as
 * every W5 sale.
 */
#include "bench.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum peer_kind { PEER_PHP, PEER_PYTHON, PEER_NODE };

/* The scripts' directory: $DLOCK_BENCH_PEERS_DIR, else the source tree's bench/peers. */
static const char *peers_dir(void)
{
    const char *env = getenv("DLOCK_BENCH_PEERS_DIR");
    return env != NULL && env[0] != '\0' ? env : DLOCK_BENCH_PEERS_DIR;
}

typedef struct peer {
    const char *name; /* W5/peer-NAME */
    enum peer_kind kind;
    const char *script; /* in the peers' directory; PHP's in php_dir() */
    const char *mode;   /* PHP: buyer.php's mode */
} peer;

static const peer peers[] = {
    {"php-spin", PEER_PHP, "buyer.php", "peer-spin"},
    {"php-sleep", PEER_PHP, "buyer.php", "peer-sleep"},
    {"redis-py", PEER_PYTHON, "redis_py.py", NULL},
    {"node-redlock", PEER_NODE, "redlock.js", NULL},
};

/* Where p's script is. */
static void script_path(const peer *p, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", p->kind == PEER_PHP ? php_dir() : peers_dir(), p->script);
}

/* The interpreters, found once per run: a missing one fails its peers, loudly. */
typedef struct peer_exes {
    char php[PATH_MAX], python[PATH_MAX], node[PATH_MAX];
    bool have_php, have_python, have_node;
} peer_exes;

static void find_exes(peer_exes *x)
{
    x->have_php = dh_find_exe("php", "DLOCK_PHP", x->php, sizeof x->php) == 0;
    x->have_python =
        dh_find_exe("/usr/bin/python3", "DLOCK_PYTHON", x->python, sizeof x->python) == 0;
    x->have_node = dh_find_exe("node", "DLOCK_NODE", x->node, sizeof x->node) == 0;
}

/* Why a peer cannot run here, or NULL. */
static const char *missing(const peer *p, const peer_exes *x, char *why, size_t n)
{
    char path[PATH_MAX];
    script_path(p, path, sizeof path);
    if (access(path, R_OK) != 0) {
        snprintf(why, n, "%.300s: %s (set %s)", path, strerror(errno),
                 p->kind == PEER_PHP ? "$DLOCK_BENCH_PHP_DIR" : "$DLOCK_BENCH_PEERS_DIR");
        return why;
    }
    if (p->kind == PEER_PHP && !x->have_php) {
        snprintf(why, n, "php not found on the PATH nor in $DLOCK_PHP (Debian: php-cli php-redis)");
        return why;
    }
    if (p->kind == PEER_PYTHON && !x->have_python) {
        snprintf(why, n, "%.300s not found (Debian: python3 python3-redis; or $DLOCK_PYTHON)",
                 x->python);
        return why;
    }
    if (p->kind != PEER_NODE)
        return NULL;
    if (!x->have_node) {
        snprintf(why, n, "node not found on the PATH nor in $DLOCK_NODE (Debian: nodejs)");
        return why;
    }
    snprintf(path, sizeof path, "%s/node_modules/redlock/package.json", peers_dir());
    if (access(path, R_OK) == 0)
        return NULL;
    snprintf(why, n, "%.200s is missing: run tools/ensure-deps.sh demo (npm ci in %.200s)", path,
             peers_dir());
    return why;
}

/* One peer's sale. 0, or -1 after bench_fail. */
static int peer_sale(bench_ctx *ctx, const peer *p, const peer_exes *x, redisContext *admin,
                     double lock_ms)
{
    const bench_opts *o = ctx->opt;
    const bench_server *s = &ctx->servers->s[0];
    char label[48], why[512] = "";
    snprintf(label, sizeof label, "W5/peer-%s", p->name);
    if (missing(p, x, why, sizeof why) != NULL) {
        bench_fail(ctx, "%s: %s", label, why);
        return -1;
    }
    char script[PATH_MAX], prefix[96], port[16], db[16], buyers[16];
    script_path(p, script, sizeof script);
    snprintf(prefix, sizeof prefix, "%sw5peer:r%d:%s:", BENCH_PREFIX, ctx->round, p->name);
    snprintf(port, sizeof port, "%d", s->port);
    snprintf(db, sizeof db, "%d", s->db);
    snprintf(buyers, sizeof buyers, "%d", o->w5_buyers);
    char k_stock[128], k_sold[128], k_ready[128], k_go[128];
    snprintf(k_stock, sizeof k_stock, "%sstock", prefix);
    snprintf(k_sold, sizeof k_sold, "%ssold", prefix);
    snprintf(k_ready, sizeof k_ready, "%sready", prefix);
    snprintf(k_go, sizeof k_go, "%sgo", prefix);
    redisReply *r = server_cmd(admin, "SET %s %ld", k_stock, o->w5_stock);
    freeReplyObject(r);
    if (r != NULL)
        freeReplyObject(r = server_cmd(admin, "DEL %s %s %s", k_sold, k_ready, k_go));
    if (r == NULL) {
        bench_fail(ctx, "%s: cannot set up the sale", label);
        return -1;
    }

    /* PHP: a process per buyer, its number (ID) last; Python and Node: one process of
     * them all. */
    int nproc = p->kind == PEER_PHP ? o->w5_buyers : 1;
    const char *php[] = {x->php, script, p->mode, s->host, port, s->password,
                         db,     "0",    prefix,  "-",     NULL};
    const char *py[] = {x->python,   "-B", script, s->host, port,
                        s->password, db,   prefix, buyers,  NULL};
    const char *node[] = {x->node, script, s->host, port, s->password, db, prefix, buyers, NULL};
    const char *const *argv = p->kind == PEER_PHP ? php : p->kind == PEER_PYTHON ? py : node;
    progress("%s: %d buyers in %d processes, stock %ld", label, o->w5_buyers, nproc, o->w5_stock);
    sale_result res;
    if (sale_run(ctx, label, argv, nproc, p->kind == PEER_PHP, o->w5_buyers, admin, k_ready, k_go,
                 &res, why, sizeof why) != 0) {
        bench_fail(ctx, "%s: %s", label, why);
        return -1;
    }
    if (res.have_stats && o->verbose)
        stats_print(label, &res.before, &res.after);
    r = server_cmd(admin, "GET %s", k_stock);
    long long left = r != NULL && r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
    freeReplyObject(r);
    r = server_cmd(admin, "GET %s", k_sold);
    long long sold = r != NULL && r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
    freeReplyObject(r);
    double sellout_ms = (double)(res.last_sale_ns - res.t0_ns) / 1e6;
    fig(label, "sellout_ms", sellout_ms, 0, lock_ms > 0 ? sellout_ms / lock_ms : -1, "W5/lock");
    if (p->kind == PEER_PHP)
        fig(label, "retries", (double)res.retries, 0, -1, NULL);
    fig(label, "max_wait_ms", (double)res.max_wait_ns / 1e6, 1, -1, NULL);
    fig(label, "buyers_served", (double)res.served, 0, -1, NULL);
    if (res.have_stats && res.bought > 0)
        fig(label, "cmds_per_unit", (double)res.cmds / (double)res.bought, 1, -1, NULL);
    return w5_outcome(ctx, label, o->w5_stock, res.bought, res.retries, sellout_ms, left, &sold);
}

int run_w5_peers(bench_ctx *ctx, double lock_ms)
{
    redisContext *admin = server_connect(&ctx->servers->s[0]);
    if (admin == NULL) {
        bench_fail(ctx, "W5/peer: cannot connect to node 1");
        return -1;
    }
    peer_exes x;
    find_exes(&x);
    int rc = 0;
    for (size_t i = 0; i < sizeof peers / sizeof *peers; i++)
        if (peer_sale(ctx, &peers[i], &x, admin, lock_ms) != 0)
            rc = -1;
    redisFree(admin);
    return rc;
}
