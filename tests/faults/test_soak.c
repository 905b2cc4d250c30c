/*
 * test_soak.c: the composed soak of the fault suite (docs/testing.md): every fault kind
 * the suite has, started at random and overlapping, against 4 worker processes that
 * take one lock on 3 servers (Redlock), judged at the end by every checker of
 * history.h. `make soak` runs it for DLOCK_SOAK_SECONDS (600 by default); CI runs 120
 * s. The seed is printed first (INFO line); DLOCK_TEST_SEED repeats a run's choices.
 * The fault timeline is printed last, after the verdict, so that a log cut after its
 * first lines still says what failed.
 *
 * The servers, each open to its own kinds of fault:
 *   node 0  a master with a replica behind a Sentinel (redis-sentinel://): failovers;
 *   node 1  a plain server with AOF always, behind a fault relay, on a clock of its own
 *           (libfaketime): restarts that keep its data, partitions, delays, dropped
 *           replies, clock skew, memory pressure, pauses, SCRIPT FLUSH;
 *   node 2  the same without persistence: restarts that forget everything.
 * The workers (ttl 800 ms, waiting forever, 20 ms of work between the register's read
 * and its fenced write, two of them renewing) run with restart-aware voting STRICT and
 * a max lease of 1 s: a restarted or failed-over node is a new server, whose grants do
 * not count until it has been up longer than any lease it could have forgotten. Their
 * own clocks run fast or slow (the test build's clock hook), and they are paused and
 * killed in their sections.
 *
 * Every fault stays within what docs/guarantees.md assumes, so that any violation is a
 * bug: a server's clock is skewed by less than the work between two grants (15 ms); a
 * client's clock runs off by less than the drift factor (0.5 % of 1 %) and never goes
 * back; memory pressure is noeviction's (writes refused, nothing evicted); no new
 * client starts within a lease of a failover (it could not tell the promoted replica
 * from a master that served all along). Faults that go beyond an
 * assumption (a clock jump, eviction) have scenarios of their own that show the hazard.
 *
 * Asserted at the end: 0 safety violations (no fence regression, no granted-interval
 * overlap, a late holder that the servers told it still held counted as holding until
 * then, no stale write accepted), no write
 * refused without reason, lost updates only where a paused holder's late write went
 * first, no lock key left, sections completed under the faults, and at least 8 of the
 * fault kinds overlapping with another at some moment.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"
#include "internal.h" /* the client clock hook */

#include "history.h"
#include "workers.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define WORKERS   4
#define TTL_MS    800
#define MASTER    "soak-master"
#define SKEW_MAX  15   /* ms a server's clock may be off: below the 20 ms of work */
#define DRIFT_PPM 5000 /* a client's clock: half the drift factor */

static dh_server master, replica, sentinel, plain[2];
static fr_relay *relay[2];

/* The fault timeline, what a checker's report is read against: kept, and printed when
 * the test ends, pass or fail. */
static FILE *timeline;
static char *timeline_text;
static size_t timeline_len;

/* The workers' clocks, set by the test, applied by each worker before each acquire: a
 * rate off by at most DRIFT_PPM. The clock stays continuous when the rate changes: what
 * the old rate had added is kept, so no change ever steps it back, which the test clock
 * would hold still until real time caught up: a stopped clock, far beyond the drift
 * factor. (Steps are not mixed in: CLOCK_BOOTTIME never goes back, and jumps ahead
 * only across a suspend, in which the servers' time passes too; fault_client_clock
 * steps it on its own.) */
typedef struct soak_clock {
    atomic_llong rate_ppm;
} soak_clock;
static soak_clock *clk;
static int64_t rate_added_us; /* in the worker: what past rates added */

static void apply_clock(const wk_config *cfg)
{
    (void)cfg;
    int64_t rate = atomic_load(&clk->rate_ppm);
    int64_t old = atomic_load(&dlock__test_hooks.rate_ppm);
    int64_t real = dlock__real_now_us();
    int64_t added = (real - atomic_load(&dlock__test_hooks.rate_base_us)) * old / 1000000;
    if (rate != old) {
        rate_added_us += added;
        /* The store that moves the clock back goes first: the clock holds still for a
         * moment rather than jumping ahead and then holding. */
        if (added > 0) {
            atomic_store(&dlock__test_hooks.rate_base_us, real);
            atomic_store(&dlock__test_hooks.rate_ppm, rate);
        }
        atomic_store(&dlock__test_hooks.offset_us, rate_added_us);
        if (added <= 0) {
            atomic_store(&dlock__test_hooks.rate_base_us, real);
            atomic_store(&dlock__test_hooks.rate_ppm, rate);
        }
    }
}

static long soak_seconds(void)
{
    const char *v = getenv("DLOCK_SOAK_SECONDS");
    long s = v && *v ? strtol(v, NULL, 10) : 600;
    return s > 0 ? s : 600;
}

static redisReply *sentinel_cmd(const char *fmt, const char *arg)
{
    redisContext *c = dh_connect(&sentinel);
    assert_non_null(c);
    redisReply *r = redisCommand(c, fmt, arg);
    redisFree(c);
    return r;
}

/* The master the Sentinel names now: &master or &replica. */
static dh_server *named_master(void)
{
    redisReply *r = sentinel_cmd("SENTINEL get-master-addr-by-name %s", MASTER);
    int port = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? atoi(r->element[1]->str) : 0;
    freeReplyObject(r);
    return port == replica.port ? &replica : &master;
}

static int setup(void **state)
{
    (void)state;
    static const char *const aof[] = {"--appendonly", "yes", "--appendfsync", "always", NULL};
    dh_server_opts o1 = {.args = aof, .clock = "+0"}, o2 = {.clock = "+0"};
    if (dh_server_start(&wk_res, NULL) != 0 || dh_server_start(&master, NULL) != 0 ||
        dh_server_start_opts(&plain[0], &o1) != 0 || dh_server_start_opts(&plain[1], &o2) != 0)
        return -1;
    char of[160];
    snprintf(of, sizeof of, "replicaof %s %d", master.host, master.port);
    const char *const rconf[] = {of, NULL};
    dh_server_opts ro = {.config = rconf};
    if (dh_server_start_opts(&replica, &ro) != 0)
        return -1;
    char monitor[160];
    snprintf(monitor, sizeof monitor, "sentinel monitor %s %s %d 1", MASTER, master.host,
             master.port);
    const char *const sconf[] = {monitor, "sentinel down-after-milliseconds " MASTER " 2000",
                                 "sentinel failover-timeout " MASTER " 20000", NULL};
    const char *const sargs[] = {"--sentinel", NULL};
    dh_server_opts so = {.args = sargs, .config = sconf};
    if (dh_server_start_opts(&sentinel, &so) != 0)
        return -1;
    for (int i = 0; i < 2; i++)
        if ((relay[i] = fr_start(plain[i].port)) == NULL)
            return -1;
    clk = mmap(NULL, sizeof *clk, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (clk == MAP_FAILED)
        return -1;
    memset(clk, 0, sizeof *clk);
    if ((timeline = open_memstream(&timeline_text, &timeline_len)) == NULL)
        return -1;
    /* The ports, which a dh: line about a command names. */
    printf("INFO soak: ports: master %d, replica %d, sentinel %d, node 1 %d, node 2 %d, "
           "register %d\n",
           master.port, replica.port, sentinel.port, plain[0].port, plain[1].port, wk_res.port);
    /* STRICT distrusts nodes younger than the max lease: they age first. */
    dh_sleep_ms(1100);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (timeline != NULL && fclose(timeline) == 0) {
        printf("INFO soak: the fault timeline (ms from the history's start; the node or "
               "worker last):\n%s",
               timeline_text);
        free(timeline_text);
    }
    for (int i = 0; i < 2; i++)
        fr_stop(relay[i]);
    dh_server_stop(&sentinel);
    dh_server_stop(&replica);
    dh_server_stop(&master);
    dh_servers_stop(plain, 2);
    dh_server_stop(&wk_res);
    if (clk != NULL && clk != MAP_FAILED)
        munmap(clk, sizeof *clk);
    return 0;
}

/* ---- the faults --------------------------------------------------------------------- */

enum {
    F_PAUSE,        /* a worker in its section SIGSTOPped for 1.5 x ttl */
    F_KILL,         /* a worker in its section SIGKILLed; a new one takes its place */
    F_RESTART_AOF,  /* node 1 SIGKILLed and restarted with its AOF */
    F_RESTART_NONE, /* node 2 SIGKILLed and restarted empty */
    F_PARTITION,    /* node 1 or 2 cut off at its relay, 0.2 to 1.5 s */
    F_DELAY,        /* node 1 or 2 slowed by 5 to 40 ms each way, 1 to 3 s */
    F_DROP,         /* one lock command's reply dropped, its connection reset */
    F_SERVER_CLOCK, /* node 1 or 2's clock skewed by up to SKEW_MAX ms, 1 to 4 s */
    F_CLIENT_CLOCK, /* the workers' clocks fast or slow, 1 to 3 s */
    F_FAILOVER,     /* node 0's master crashed, its replica promoted (one at a time) */
    F_MEMORY,       /* node 1 or 2 at its maxmemory (noeviction), 0.5 to 2 s */
    F_NODE_PAUSE,   /* node 1 or 2 SIGSTOPped for 50 to 300 ms */
    F_FLUSH,        /* SCRIPT FLUSH on node 1 or 2 */
    F_KINDS
};
static const char *const kind_name[F_KINDS] = {
    "holder_pauses", "holder_kills", "restarts_aof",   "restarts_empty", "partitions",
    "delays",        "drops",        "server_clocks",  "client_clocks",  "failovers",
    "memory_limits", "node_pauses",  "script_flushes",
};

typedef struct soak {
    wk_scenario sc;
    wk_config cfg;
    pid_t pids[WORKERS];
    int64_t until[F_KINDS]; /* a fault in progress ends then (dh_now_ms); 0: none */
    int target[F_KINDS];    /* the node or worker it is on */
    int count[F_KINDS];
    bool overlapped[F_KINDS]; /* began while another kind was in progress */
    int64_t failover_done;    /* when the last failover was seen through, or the start */
    bool failover_restarted;  /* the crashed master was started again */
} soak;

static int64_t t0_ns; /* about the history's first record: the faults' times count from it */

static void say(const char *what, int k, int target)
{
    fprintf(timeline, "INFO fault %.3f ms %s %s %d\n", (double)(hist_now_ns() - t0_ns) / 1e6, what,
            kind_name[k], target);
}

static int active(const soak *s)
{
    int n = 0;
    for (int k = 0; k < F_KINDS; k++)
        n += s->until[k] != 0;
    return n;
}

static void respawn(soak *s, int v)
{
    wk_config w = s->cfg;
    w.id = v;
    w.auto_renew = v < 2;
    s->pids[v] = wk_spawn(&w);
    assert_true(s->pids[v] > 0);
}

/* A paused node answers no command of ours: the faults that send one, to begin or to
 * end, wait for its pause to end (which a command timing out would hold up). */
static bool paused(const soak *s, int node)
{
    return s->until[F_NODE_PAUSE] != 0 && s->target[F_NODE_PAUSE] == node;
}

/* Begin a fault of kind k, or do it when it is instant; false when it cannot be now. */
static bool begin(soak *s, int k)
{
    int node = (int)wk_rand(0, 1);
    int64_t now = dh_now_ms();
    if (paused(s, node) && (k == F_MEMORY || k == F_FLUSH))
        return false;
    const hist_writer *hw = &s->sc.hw;
    int v = wk_in_section(s->sc.sh, s->pids, WORKERS);
    switch (k) {
    case F_PAUSE:
        if (v < 0)
            return false;
        kill(s->pids[v], SIGSTOP);
        hist_fault(hw, HIST_F_PAUSE, (uint64_t)s->pids[v]);
        s->target[k] = v;
        s->until[k] = now + TTL_MS * 3 / 2;
        return true;
    case F_KILL:
        /* A new worker is a new client, which cannot tell a promoted replica from a
         * master that served all along until a lease has passed (docs/guarantees.md,
         * "Sentinel failover"): no new client during a failover or the lease after it. */
        if (v < 0 || s->until[F_PAUSE] != 0 || s->until[F_FAILOVER] != 0 ||
            now - s->failover_done < 2 * TTL_MS)
            return false;
        kill(s->pids[v], SIGKILL);
        hist_fault(hw, HIST_F_KILL, (uint64_t)s->pids[v]);
        wk_reap(s->pids[v], 2000);
        atomic_store(&s->sc.sh->in_section[v], 0);
        respawn(s, v);
        return true;
    case F_RESTART_AOF:
    case F_RESTART_NONE: {
        int i = k == F_RESTART_AOF ? 0 : 1;
        if (paused(s, i))
            return false;
        hist_fault(hw, HIST_F_SERVER_KILL, (uint64_t)(i + 1));
        assert_int_equal(dh_server_restart(&plain[i]), 0);
        hist_fault(hw, HIST_F_SERVER_START, (uint64_t)(i + 1));
        /* A restart ends the memory limit and the skew it had. */
        if (s->target[F_MEMORY] == i)
            s->until[F_MEMORY] = 0;
        return true;
    }
    case F_PARTITION:
        fr_blackhole(relay[node], true, FR_HEAL_RESET);
        s->until[k] = now + wk_rand(200, 1500);
        break;
    case F_DELAY: {
        int64_t d = wk_rand(5, 40);
        fr_delay(relay[node], d, d);
        s->until[k] = now + wk_rand(1000, 3000);
        break;
    }
    case F_DROP: {
        fr_rule rule = {.action = FR_RESET_REPLY, .k = 0, .count = 1, .cmd = "EVAL*"};
        fr_add_rule(relay[node], &rule);
        return true;
    }
    case F_SERVER_CLOCK: {
        /* In seconds: libfaketime reads "ms" as minutes. */
        char skew[24];
        snprintf(skew, sizeof skew, "%+.3fs", (double)wk_rand(-SKEW_MAX, SKEW_MAX) / 1000.0);
        assert_int_equal(dh_server_set_clock(&plain[node], skew), 0);
        s->until[k] = now + wk_rand(1000, 4000);
        break;
    }
    case F_CLIENT_CLOCK:
        atomic_store(&clk->rate_ppm, wk_rand(-DRIFT_PPM, DRIFT_PPM));
        s->until[k] = now + wk_rand(1000, 3000);
        return true;
    case F_FAILOVER: {
        if (now - s->failover_done < 15000)
            return false;
        /* The master crashes, which is what Sentinel is for: the Sentinel promotes the
         * replica once it has been down 2 s, and the crashed one, started again, is
         * made a replica. (A failover of a master that still runs leaves it taking
         * writes until it is demoted, seconds later: docs/guarantees.md.) */
        dh_server *old = named_master();
        s->target[k] = old == &master ? 0 : 1;
        dh_server_kill(old);
        hist_fault(hw, HIST_F_FAILOVER, (uint64_t)s->target[k]);
        s->failover_restarted = false;
        s->until[k] = now + 30000 * dh_slack();
        return true;
    }
    case F_MEMORY: {
        redisReply *r = dh_cmd(&plain[node], "INFO memory");
        long used = dh_info_long(r, "used_memory");
        freeReplyObject(r);
        if (used <= 0)
            return false;
        r = dh_cmd(&plain[node], "CONFIG SET maxmemory %ld", used + 1024);
        freeReplyObject(r);
        s->until[k] = now + wk_rand(500, 2000);
        break;
    }
    case F_NODE_PAUSE:
        dh_server_pause(&plain[node]);
        hist_fault(hw, HIST_F_SERVER_PAUSE, (uint64_t)(node + 1));
        s->until[k] = now + wk_rand(50, 300);
        break;
    default: {
        redisReply *r = dh_cmd(&plain[node], "SCRIPT FLUSH");
        freeReplyObject(r);
        return true;
    }
    }
    s->target[k] = node;
    return true;
}

/* End fault k (in progress). */
static void end(soak *s, int k)
{
    int t = s->target[k];
    say("end", k, t);
    const hist_writer *hw = &s->sc.hw;
    switch (k) {
    case F_PAUSE:
        kill(s->pids[t], SIGCONT);
        hist_fault(hw, HIST_F_RESUME, (uint64_t)s->pids[t]);
        break;
    case F_PARTITION:
        fr_blackhole(relay[t], false, FR_HEAL_RESET);
        break;
    case F_DELAY:
        fr_delay(relay[t], 0, 0);
        break;
    case F_SERVER_CLOCK:
        assert_int_equal(dh_server_set_clock(&plain[t], "+0"), 0);
        break;
    case F_CLIENT_CLOCK:
        atomic_store(&clk->rate_ppm, 0);
        break;
    case F_MEMORY: {
        redisReply *r = dh_cmd(&plain[t], "CONFIG SET maxmemory 0");
        freeReplyObject(r);
        break;
    }
    case F_NODE_PAUSE:
        dh_server_resume(&plain[t]);
        hist_fault(hw, HIST_F_SERVER_RESUME, (uint64_t)(t + 1));
        break;
    default:
        break;
    }
    s->until[k] = 0;
}

/* A failover is over when the Sentinel names the other server and the old master,
 * started again once it did, has become its replica. */
static bool failover_over(soak *s)
{
    dh_server *old = s->target[F_FAILOVER] == 0 ? &master : &replica;
    if (named_master() == old)
        return false;
    if (!s->failover_restarted) {
        assert_int_equal(dh_server_restart(old), 0);
        s->failover_restarted = true;
    }
    redisReply *r = dh_cmd(old, "ROLE");
    bool demoted = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                   strcmp(r->element[0]->str, "slave") == 0;
    freeReplyObject(r);
    return demoted;
}

static void test_soak(void **state)
{
    (void)state;
    long seconds = soak_seconds();
    soak s;
    memset(&s, 0, sizeof s);
    assert_int_equal(wk_scenario_open(&s.sc, WK_NODES, "soak", "soak"), 0);
    char urls[512];
    snprintf(urls, sizeof urls, "redis-sentinel://%s:%d/%s,%s,%s", sentinel.host, sentinel.port,
             MASTER, fr_url(relay[0]), fr_url(relay[1]));
    s.cfg = s.sc.cfg;
    s.cfg.servers = urls;
    s.cfg.ttl_ms = TTL_MS;
    s.cfg.work_ms = 20;
    s.cfg.check_when_late = true;
    s.cfg.restart_voting = DLOCK_RESTART_STRICT;
    s.cfg.max_lease_ms = 1000;
    s.cfg.before_acquire = apply_clock;
    t0_ns = hist_now_ns();
    for (int i = 0; i < WORKERS; i++)
        respawn(&s, i);
    /* The workers' clients are new: no failover until they have all met the master
     * (the first one comes 15 s in). */
    s.failover_done = dh_now_ms();

    int64_t t_end = dh_now_ms() + seconds * 1000, next = 0;
    while (dh_now_ms() < t_end) {
        dh_sleep_ms(20);
        int64_t now = dh_now_ms();
        for (int k = 0; k < F_KINDS; k++) {
            if (s.until[k] == 0)
                continue;
            if (k == F_FAILOVER) {
                assert_true(now < s.until[k]); /* a failover must end */
                if (failover_over(&s)) {
                    say("end", k, s.target[k]);
                    s.until[k] = 0;
                    s.failover_done = now;
                }
            } else if (now >= s.until[k] && !(k == F_MEMORY && paused(&s, s.target[k]))) {
                end(&s, k);
            }
        }
        if (now < next)
            continue;
        next = now + wk_rand(100, 500);
        int k = (int)wk_rand(0, F_KINDS - 1);
        if (s.until[k] != 0)
            continue;
        bool others = active(&s) > 0;
        if (!begin(&s, k))
            continue;
        say("begin", k, s.target[k]);
        s.count[k]++;
        s.overlapped[k] |= others;
    }
    /* A paused node first: the other ends may send it a command. */
    if (s.until[F_NODE_PAUSE] != 0)
        end(&s, F_NODE_PAUSE);
    for (int k = 0; k < F_KINDS; k++)
        if (s.until[k] != 0 && k != F_FAILOVER)
            end(&s, k);
    /* A failover in progress is seen through: the keys are looked for on its master. */
    while (s.until[F_FAILOVER] != 0 && !failover_over(&s)) {
        assert_true(dh_now_ms() < s.until[F_FAILOVER]);
        dh_sleep_ms(50);
    }
    dh_sleep_ms(2 * TTL_MS);
    wk_stop_fire(&s.sc.stop);
    assert_int_equal(wk_reap_all(s.pids, WORKERS, 20000 * dh_slack()), 0);
    printf("INFO soak: %ld s\n", seconds);
    int kinds = 0, mixed = 0;
    for (int k = 0; k < F_KINDS; k++) {
        printf("FIG soak_%s %d count\n", kind_name[k], s.count[k]);
        kinds += s.count[k] > 0;
        mixed += s.overlapped[k];
    }
    printf("FIG soak_fault_kinds %d kinds\n", mixed);

    hist_report rep;
    assert_int_equal(wk_scenario_judge(&s.sc, &rep), 0);
    int violations = wk_safety_violations(&rep);
    printf("FIG soak_violations %d count\n", violations);
    assert_int_equal(violations, 0);
    assert_true(rep.sessions > 0);
    assert_int_equal(rep.spurious_rejections, 0);
    assert_true(rep.lost_updates <= rep.late_accepted);
    /* A late holder may be told it still holds the lock: a slow acquire round leaves
     * its lease on the servers well past its validity. The granted intervals count it
     * held until that answer, so a second holder meanwhile is an overlap above. */
    dh_server *now_master = named_master();
    dh_server lock_servers[3] = {*now_master, plain[0], plain[1]};
    assert_int_equal(hist_keys_left(lock_servers, 3, "soak", 2 * TTL_MS * dh_slack()), 0);
    /* Faults came together: at least 8 kinds began while another was in progress. */
    assert_true(kinds >= 8);
    assert_true(mixed >= 8);
    wk_scenario_close(&s.sc);
}

int main(void)
{
    /* Lines in the order they were written, among the checkers' and cmocka's. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    wk_seed("fault_soak");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_soak),
    };
    return cmocka_run_group_tests_name("fault_soak", tests, setup, teardown);
}
