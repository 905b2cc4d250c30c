/*
 * flashsale.c: W5, 1000 items and 50 buyers, four ways.
 *
 * Stock starts at 1000 on node 1; 50 buyers (threads, each with its own connections)
 * buy one item at a time until they find none left. Four ways to keep the stock
 * from being oversold, side by side (the lock way in three forms):
 *   lock    dlock_acquire (wait forever) around GET stock; if > 0, SET stock - 1, then
 *           INCR sold; dlock_release. Three round trips inside the lock, one command
 *           each: the section other lock benchmarks time, so the figures compare;
 *   lock-pipelined  the same with SET and INCR pipelined in one round trip (two in the
 *           lock): how much of lock's sellout is the section's own length;
 *   lock-linger  lock with dlock_opts.linger_ms (W5_LINGER_MS): a buyer's release
 *           lingers, and its next acquire takes the lock back while the buyer at the
 *           head of the queue has waited less than that in all, and less than its
 *           share of it as the head (docs/waiting.md, "Lingering"). It reports
 *           scripts_per_unit (script calls per purchase) instead of retries;
 *   watch   optimistic: WATCH stock + GET stock (one round trip); if > 0, MULTI, DECR
 *           stock, INCR sold, EXEC (one round trip); an aborted EXEC is retried;
 *   script  one EVALSHA of a decrement-if-enough Lua script: atomic on the server;
 *   stock   the library's stock with leased reservations: dlock_stock_reserve of 1
 *           (no wait), then dlock_stock_commit: two script calls per unit, each
 *           returning run-out leases first, through the library's connection pool.
 *           Its sellout_ms carries its ratio to W5/script of the same round.
 * Each reports:
 *   sellout_ms  from the start until the 1000th purchase was confirmed to its buyer;
 *   retries     watch: aborted EXECs. lock: acquire attempts the server refused (its
 *               EVALSHA/EVAL calls, per node, beyond one acquire and one release per
 *               granted lock; waiting without polling makes it small). script: 0;
 *   max_wait_ms lock variants: the longest single dlock_acquire call of any buyer, so
 *               that a bound on one buyer's wait (say 50 ms) can be read off. Calls
 *               that did not wait are short and never the maximum;
 *   buyers_served  lock variants: the buyers that bought at least one item, of the 50.
 *               A way that lets one buyer take the lock back can sell fast while most
 *               buyers wait out the whole sale; this says how many did not;
 *   oversold    purchases confirmed beyond the stock. It must be 0, with exactly 1000
 *               purchases, the final stock 0 and the sold counter at 1000; anything
 *               else fails the run.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum variant { V_LOCK, V_LOCK_PIPELINED, V_LOCK_LINGER, V_WATCH, V_SCRIPT, V_STOCK };
static const char *const variant_names[] = {"lock",  "lock-pipelined", "lock-linger",
                                            "watch", "script",         "stock"};

/* W5/lock-linger's dlock_opts.linger_ms, the longest lingering makes a buyer wait. On
 * one CPU shorter bounds trade the sale's speed away (docs/waiting.md, "Lingering"):
 * 100 ms sells out before every peer. */
#define W5_LINGER_MS 100

static bool is_lock(enum variant v)
{
    return v == V_LOCK || v == V_LOCK_PIPELINED || v == V_LOCK_LINGER;
}

/* KEYS: stock, sold. ARGV: quantity. 1 bought, 0 not enough left. */
static const char decr_if_enough_lua[] = "local s = tonumber(redis.call('GET', KEYS[1]) or '0')\n"
                                         "local q = tonumber(ARGV[1])\n"
                                         "if s >= q then\n"
                                         "  redis.call('DECRBY', KEYS[1], q)\n"
                                         "  redis.call('INCR', KEYS[2])\n"
                                         "  return 1\n"
                                         "end\n"
                                         "return 0\n";

typedef struct w5_arg {
    bench_ctx *ctx;
    const char *urls;
    enum variant v;
    long stock;
    char k_stock[64], k_sold[64];
    char sha[41];
    _Atomic long purchases;
    _Atomic long retries;
    _Atomic long granted;        /* lock: acquires that succeeded */
    _Atomic int64_t max_wait_ns; /* lock: the longest dlock_acquire call */
    _Atomic int served;          /* buyers that bought at least one item */
    _Atomic int64_t last_sale_ns;
    char sku[48]; /* stock: the SKU, new for every run */
    stats_window st;
} w5_arg;

/* The purchases of the buyer this thread runs, for buyers_served. */
static _Thread_local long bought_here;

/* A purchase confirmed to its buyer: count it and remember when, for sellout_ms. */
static void note_sale(w5_arg *a, team *t)
{
    int64_t now = now_ns();
    bought_here++;
    atomic_fetch_add(&a->purchases, 1);
    atomic_fetch_add(&t->done, 1);
    int64_t prev = atomic_load(&a->last_sale_ns);
    while (now > prev && !atomic_compare_exchange_weak(&a->last_sale_ns, &prev, now))
        ;
}

/* Lock-free maximum: a CAS loop that gives up once another thread stored more. */
static void note_max(_Atomic int64_t *max, int64_t v)
{
    int64_t prev = atomic_load(max);
    while (v > prev && !atomic_compare_exchange_weak(max, &prev, v))
        ;
}

/* Read n pipelined replies into r[] (NULL on an I/O error). */
static int get_replies(redisContext *c, redisReply **r, int n)
{
    for (int i = 0; i < n; i++)
        r[i] = NULL;
    for (int i = 0; i < n; i++) {
        void *rep;
        if (redisGetReply(c, &rep) != REDIS_OK)
            return -1;
        r[i] = rep;
    }
    return 0;
}

static void free_replies(redisReply **r, int n)
{
    for (int i = 0; i < n; i++)
        freeReplyObject(r[i]);
}

/* A stock or counter value: an integer, a numeric string, or nil (0). -1 otherwise. */
static long long reply_ll(const redisReply *r)
{
    if (r == NULL)
        return -1;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return r->type == REDIS_REPLY_NIL ? 0 : -1;
}

/* SET stock - 1 and INCR sold, in two round trips or (pipelined) one. 0, or -1 on an
 * I/O error or an error reply. */
static int sell_one(w5_arg *a, redisContext *rc, long long s)
{
    redisReply *w[2] = {NULL, NULL};
    int io;
    if (a->v == V_LOCK_PIPELINED) {
        redisAppendCommand(rc, "SET %s %lld", a->k_stock, s - 1);
        redisAppendCommand(rc, "INCR %s", a->k_sold);
        io = get_replies(rc, w, 2);
    } else {
        w[0] = redisCommand(rc, "SET %s %lld", a->k_stock, s - 1);
        if (w[0] != NULL && w[0]->type != REDIS_REPLY_ERROR)
            w[1] = redisCommand(rc, "INCR %s", a->k_sold);
        io = w[1] != NULL ? 0 : -1;
    }
    bool ok = io == 0 && w[0]->type != REDIS_REPLY_ERROR && w[1]->type == REDIS_REPLY_INTEGER;
    free_replies(w, 2);
    return ok ? 0 : -1;
}

/* The lock ways: 0 when done, -1 after team_error. */
static int buy_lock(w5_arg *a, team *t, dlock_client *c, redisContext *rc)
{
    dlock_opts o = {0};
    o.ttl_ms = BENCH_TTL_MS;
    o.wait_ms = -1;
    o.linger_ms = a->v == V_LOCK_LINGER ? W5_LINGER_MS : 0;
    while (!team_stopped(t)) {
        dlock_lock *l;
        int64_t t0 = now_ns();
        int err = dlock_acquire(c, "w5:sale", &o, &l);
        note_max(&a->max_wait_ns, now_ns() - t0);
        if (err != DLOCK_OK) {
            team_error(t, "acquire: %s: %s", dlock_strerror(err), dlock_errmsg());
            return -1;
        }
        atomic_fetch_add(&a->granted, 1);
        redisReply *r = redisCommand(rc, "GET %s", a->k_stock);
        long long s = reply_ll(r);
        freeReplyObject(r);
        if (r == NULL || s < 0) {
            dlock_release(l);
            team_error(t, "GET stock failed");
            return -1;
        }
        if (s > 0) {
            if (sell_one(a, rc, s) != 0) {
                dlock_release(l);
                team_error(t, "SET/INCR failed: %s", rc->err ? rc->errstr : "error reply");
                return -1;
            }
            note_sale(a, t);
        }
        if ((err = dlock_release(l)) != DLOCK_OK) {
            team_error(t, "release: %s: %s", dlock_strerror(err), dlock_errmsg());
            return -1;
        }
        if (s == 0)
            return 0;
    }
    return 0;
}

/* The optimistic way. */
static int buy_watch(w5_arg *a, team *t, redisContext *rc)
{
    while (!team_stopped(t)) {
        redisReply *r[4];
        redisAppendCommand(rc, "WATCH %s", a->k_stock);
        redisAppendCommand(rc, "GET %s", a->k_stock);
        if (get_replies(rc, r, 2) != 0) {
            free_replies(r, 2);
            team_error(t, "WATCH/GET failed: %s", rc->errstr);
            return -1;
        }
        long long s = reply_ll(r[1]);
        free_replies(r, 2);
        if (s <= 0) {
            freeReplyObject(redisCommand(rc, "UNWATCH"));
            return s < 0 ? -1 : 0;
        }
        redisAppendCommand(rc, "MULTI");
        redisAppendCommand(rc, "DECR %s", a->k_stock);
        redisAppendCommand(rc, "INCR %s", a->k_sold);
        redisAppendCommand(rc, "EXEC");
        if (get_replies(rc, r, 4) != 0) {
            free_replies(r, 4);
            team_error(t, "MULTI/EXEC failed: %s", rc->errstr);
            return -1;
        }
        bool committed = r[3] != NULL && r[3]->type == REDIS_REPLY_ARRAY;
        bool aborted = r[3] != NULL && r[3]->type == REDIS_REPLY_NIL;
        free_replies(r, 4);
        if (committed)
            note_sale(a, t);
        else if (aborted)
            atomic_fetch_add(&a->retries, 1);
        else {
            team_error(t, "EXEC: unexpected reply");
            return -1;
        }
    }
    return 0;
}

/* The server-side way. */
static int buy_script(w5_arg *a, team *t, redisContext *rc)
{
    while (!team_stopped(t)) {
        redisReply *r = redisCommand(rc, "EVALSHA %s 2 %s %s 1", a->sha, a->k_stock, a->k_sold);
        long long v = r != NULL && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
        freeReplyObject(r);
        if (v < 0) {
            team_error(t, "EVALSHA failed");
            return -1;
        }
        if (v == 0)
            return 0;
        note_sale(a, t);
    }
    return 0;
}

/* The library's stock: reserve one unit, commit it, until none is left to reserve.
 * Nothing is abandoned here, so a refusal means the stock is sold or reserved by
 * buyers who will commit. */
static int buy_stock(w5_arg *a, team *t, dlock_client *c)
{
    dlock_reserve_opts o = {0};
    o.lease_ms = BENCH_TTL_MS;
    while (!team_stopped(t)) {
        char id[DLOCK_TOKEN_LEN + 1];
        int err = dlock_stock_reserve(c, a->sku, 1, &o, id);
        if (err == DLOCK_ERR_BUSY)
            return 0;
        if (err == DLOCK_OK)
            err = dlock_stock_commit(c, a->sku, id);
        if (err != DLOCK_OK) {
            team_error(t, "stock: %s: %s", dlock_strerror(err), dlock_errmsg());
            return -1;
        }
        note_sale(a, t);
    }
    return 0;
}

/* One buyer: its own connection to node 1, and for the lock and stock ways its own
 * dlock client (warmed up on a name of its own, or with a status of the SKU), then it
 * buys until none is left. */
static void w5_worker(team *t, int id, void *p)
{
    w5_arg *a = p;
    dlock_client *c = NULL;
    redisContext *rc = server_connect(&a->ctx->servers->s[0]);
    if (rc == NULL)
        team_error(t, "buyer %d: cannot connect to node 1", id);
    if (rc != NULL && a->v == V_STOCK) {
        dlock_config cfg;
        bench_dlock_config(a->ctx, &cfg);
        dlock_stock_info in;
        char rid[DLOCK_TOKEN_LEN + 1];
        int err = dlock_client_new(a->urls, &cfg, &c);
        /* Each of the three scripts once, on a SKU of no stock: the servers cache them
         * before the sale, as the lock ways' warm-up does theirs. */
        if (err == DLOCK_OK && (err = dlock_stock_status(c, a->sku, &in)) == DLOCK_OK &&
            (err = dlock_stock_reserve(c, "w5:warm", 1, NULL, rid)) == DLOCK_ERR_BUSY)
            err = dlock_stock_commit(c, "w5:warm", "00000000000000000000000000000000");
        if (err == DLOCK_ERR_LOST)
            err = DLOCK_OK;
        if (err != DLOCK_OK)
            team_error(t, "buyer %d: %s: %s", id, dlock_strerror(err), dlock_errmsg());
    }
    if (rc != NULL && is_lock(a->v)) {
        dlock_config cfg;
        bench_dlock_config(a->ctx, &cfg);
        int err = dlock_client_new(a->urls, &cfg, &c);
        dlock_lock *l;
        char warm[64];
        snprintf(warm, sizeof warm, "w5:warm:%d", id);
        dlock_opts o = {0};
        o.ttl_ms = BENCH_TTL_MS;
        if (err == DLOCK_OK && (err = dlock_acquire(c, warm, &o, &l)) == DLOCK_OK)
            err = dlock_release(l);
        if (err != DLOCK_OK)
            team_error(t, "buyer %d: %s: %s", id, dlock_strerror(err), dlock_errmsg());
    }
    team_ready(t);
    bought_here = 0;
    if (!team_stopped(t)) {
        if (is_lock(a->v))
            buy_lock(a, t, c, rc);
        else if (a->v == V_WATCH)
            buy_watch(a, t, rc);
        else if (a->v == V_STOCK)
            buy_stock(a, t, c);
        else
            buy_script(a, t, rc);
    }
    if (bought_here > 0)
        atomic_fetch_add(&a->served, 1);
    team_end(t);
    dlock_client_free(c);
    redisFree(rc);
}

/* Reset stock and sold (and load the script). 0, or -1 after printing why. */
static int w5_setup(w5_arg *a, redisContext *admin)
{
    redisReply *r = server_cmd(admin, "SET %s %ld", a->k_stock, a->stock);
    freeReplyObject(r);
    if (r != NULL) {
        r = server_cmd(admin, "SET %s 0", a->k_sold);
        freeReplyObject(r);
    }
    if (r != NULL && a->v == V_SCRIPT) {
        r = server_cmd(admin, "SCRIPT LOAD %s", decr_if_enough_lua);
        if (r != NULL && r->type == REDIS_REPLY_STRING)
            snprintf(a->sha, sizeof a->sha, "%s", r->str);
        freeReplyObject(r);
    }
    return r != NULL ? 0 : -1;
}

/* The stock way's set-up and outcome, through the library: set the stock of the run's
 * SKU (0 on error, after bench_fail), or read stock left and sold back. */
static int w5_stock_call(bench_ctx *ctx, w5_arg *a, bool setup, long long *left, long long *sold)
{
    dlock_config cfg;
    bench_dlock_config(ctx, &cfg);
    dlock_client *c = NULL;
    dlock_stock_info in = {0};
    int err = dlock_client_new(a->urls, &cfg, &c);
    if (err == DLOCK_OK)
        err =
            setup ? dlock_stock_set(c, a->sku, a->stock, &in) : dlock_stock_status(c, a->sku, &in);
    if (err != DLOCK_OK)
        bench_fail(ctx, "W5/stock: %s: %s", dlock_strerror(err), dlock_errmsg());
    dlock_client_free(c);
    if (left != NULL) {
        /* Units left: available, and reserved ones that nobody committed. */
        *left = err == DLOCK_OK ? in.available + in.reserved : -1;
        *sold = err == DLOCK_OK ? in.sold : -1;
    }
    return err == DLOCK_OK ? 0 : -1;
}

/* One way of selling: set up, run the buyers, check the outcome on the server.
 * *sellout_ms gets the sellout time; script_ms (0: none) is W5/script's of the same
 * round, for the stock way's ratio. */
static int w5_one(bench_ctx *ctx, enum variant v, const char *urls, redisContext *admin,
                  double script_ms, double *sellout_out)
{
    static int runs; /* the stock way takes a new SKU every run: sold units stay sold */
    const bench_opts *o = ctx->opt;
    char w[32], label[48];
    snprintf(w, sizeof w, "W5/%s", variant_names[v]);
    bench_label(label, sizeof label, w, is_lock(v) ? o->nodes : 1, "");
    w5_arg *a = bench_calloc(ctx, label, 1, sizeof *a);
    if (a == NULL)
        return -1;
    *a = (w5_arg){.ctx = ctx, .urls = urls, .v = v, .stock = o->w5_stock};
    snprintf(a->k_stock, sizeof a->k_stock, "%sw5:stock", BENCH_PREFIX);
    snprintf(a->k_sold, sizeof a->k_sold, "%sw5:sold", BENCH_PREFIX);
    snprintf(a->sku, sizeof a->sku, "w5:stock:%d", ++runs);
    int rc = -1;
    /* The lock's script calls land on the lock's nodes. */
    if (w5_setup(a, admin) != 0 || (v == V_STOCK && w5_stock_call(ctx, a, true, NULL, NULL)) ||
        stats_open(ctx->servers, is_lock(v) ? o->nodes : 1, &a->st.sc)) {
        bench_fail(ctx, "%s: cannot set up the sale", label);
        goto out;
    }
    progress("%s: %d buyers, stock %ld", label, o->w5_buyers, a->stock);
    team t;
    int trc = team_run(&t, label, o->w5_buyers, a->stock, w5_worker, a, stats_window_start, &a->st);
    srv_stats after;
    bool have_stats = stats_window_end(&a->st, label, o->verbose, &after);
    int stat_nodes = a->st.sc.n;
    stats_close(&a->st.sc);
    if (trc != 0) {
        bench_fail(ctx, "%s: %s", label, t.err);
        goto out;
    }
    long long stock_left, sold;
    if (v == V_STOCK) {
        w5_stock_call(ctx, a, false, &stock_left, &sold);
    } else {
        redisReply *r = server_cmd(admin, "GET %s", a->k_stock);
        stock_left = reply_ll(r);
        freeReplyObject(r);
        r = server_cmd(admin, "GET %s", a->k_sold);
        sold = reply_ll(r);
        freeReplyObject(r);
    }

    long purchases = a->purchases;
    long retries = a->retries;
    long long scripts = 0;
    if (is_lock(v) && have_stats) {
        scripts = stats_calls(&a->st.before, &after, "evalsha") +
                  stats_calls(&a->st.before, &after, "eval");
        /* Every attempt is one script call on each of the lock's nodes. */
        retries = (long)(scripts / stat_nodes - 2 * (long long)a->granted);
    }
    double sellout_ms = (double)(a->last_sale_ns - t.start_ns) / 1e6;
    *sellout_out = sellout_ms;
    if (v == V_STOCK) {
        fig(label, "sellout_ms", sellout_ms, 0, script_ms > 0 ? sellout_ms / script_ms : -1,
            "W5/script");
        /* Two per unit, and one refused reserve per buyer at the end. */
        if (have_stats && purchases > 0)
            fig(label, "scripts_per_unit",
                (double)(stats_calls(&a->st.before, &after, "evalsha") +
                         stats_calls(&a->st.before, &after, "eval")) /
                    (double)purchases,
                2, -1, NULL);
    } else {
        fig(label, "sellout_ms", sellout_ms, 0, -1, NULL);
    }
    if (v == V_LOCK_LINGER && have_stats && purchases > 0) {
        /* A retake is one script call or none: retries do not apply. */
        fig(label, "scripts_per_unit", (double)scripts / stat_nodes / (double)purchases, 2, -1,
            NULL);
        retries = 0;
    } else if (v != V_STOCK && (!is_lock(v) || have_stats)) {
        fig(label, "retries", (double)retries, 0, -1, NULL);
    }
    if (is_lock(v)) {
        fig(label, "max_wait_ms", (double)a->max_wait_ns / 1e6, 1, -1, NULL);
        fig(label, "buyers_served", (double)atomic_load(&a->served), 0, -1, NULL);
    }
    rc = w5_outcome(ctx, label, a->stock, purchases, retries, sellout_ms, stock_left, &sold);
out:
    free(a);
    return rc;
}

int w5_outcome(bench_ctx *ctx, const char *label, long stock, long purchases, long retries,
               double sellout_ms, long long left, const long long *sold)
{
    long oversold = purchases > stock ? purchases - stock : 0;
    fig(label, "oversold", (double)oversold, 0, -1, NULL);
    char sold_text[32] = "";
    if (sold != NULL)
        snprintf(sold_text, sizeof sold_text, ", sold %lld", *sold);
    progress("%s: sold out in %.0f ms, %ld retries, %ld purchases, stock left %lld%s", label,
             sellout_ms, retries, purchases, left, sold_text);
    if (oversold == 0 && purchases == stock && left == 0 && (sold == NULL || *sold == stock))
        return 0;
    bench_fail(ctx, "%s: %ld purchases of %ld (oversold %ld), stock left %lld%s", label, purchases,
               stock, oversold, left, sold_text);
    return -1;
}

int run_w5(bench_ctx *ctx)
{
    const bench_opts *o = ctx->opt;
    char urls[BENCH_MAX_NODES * 620];
    servers_urls(ctx->servers, 0, o->nodes, urls, sizeof urls);
    redisContext *admin = server_connect(&ctx->servers->s[0]);
    if (admin == NULL) {
        bench_fail(ctx, "W5: cannot connect to node 1");
        return -1;
    }
    int rc = 0;
    double script_ms = 0, lock_ms = 0;
    for (int v = V_LOCK; v <= V_STOCK; v++) {
        double ms = 0;
        if (w5_one(ctx, (enum variant)v, urls, admin, script_ms, &ms) != 0)
            rc = -1;
        else if (v == V_SCRIPT)
            script_ms = ms;
        else if (v == V_LOCK)
            lock_ms = ms;
    }
    redisFree(admin);
    if (run_w5_peers(ctx, lock_ms) != 0)
        rc = -1;
    if (run_w5_php(ctx) != 0)
        rc = -1;
    if (run_w5_py_cycles(ctx) != 0)
        rc = -1;
    if (run_w5_node_cycles(ctx) != 0)
        rc = -1;
    return rc;
}
