/*
 * bench.h: what the files of dlock-bench share.
 *
 * dlock-bench measures its workloads (W1 uncontended cycles, W2 the same from 8
 * clients, W3 one contended name, W4 Redlock on 1 to 5 nodes, W5 a flash sale, W6 W1
 * through dlockd, W7 dlockd at fleet scale, W8 a leader's changes) against
 * redis-benchmark run on the same servers, under the same CPU placement, in the same
 * run. The parts:
 *   main.c       options, the order of the run, the figures table and BENCH lines
 *   place.c      CPU placement (sched_setaffinity), pinned children, machine
 *                description, peak RSS
 *   servers.c    redis-server processes of our own (started by tests/support) or
 *                -s URLS, admin connections
 *   baseline.c   redis-benchmark runs and their CSV (SET, or a command given)
 *   wake.c       baseline/wake: a key's release, publish, wake-up and take in plain
 *                Redis, beside W3
 *   team.c       worker threads: start barrier, progress on stderr, first error
 *   stats.c      clocks, latency samples, percentiles
 *   cycles.c     W1, W2 and W4 (acquire + release cycles)
 *   contended.c  W3 (one name, blocking waits)
 *   elect.c      W8 (a leader's changes as an observer hears them; idle observers)
 *   flashsale.c  W5 (four ways to sell 1000 items to 50 buyers)
 *   peers.c      W5's peers: the same sale with the PHP recipe, redis-py, node-redlock
 *   sale.c       a sale by processes of another language (the peers', the PHP sale)
 *   daemon.c     dlockd, the lock service, as a process of ours
 *   hop.c        W6/hop's process in the middle that only passes bytes
 *   service.c    W6 (W1 through dlockd, and through the hop)
 *                and W5's PHP sale (php-cli buyers, bench/php/buyer.php) with the
 *                usual PHP recipe and through dlockd
 *   fleet.c      W7 (1 to 256 connections through dlockd, beside the raw recipe
 *                on node 1), its figures
 *   fleet_gen.c  W7's load generator: connections driven by one epoll loop
 *   fleet_scripts.c  W7/script: the acquire and release scripts' pipelined limit
 *                (redis-benchmark -P 16), their text compiled in from src/scripts.c
 *   pkgcycles.c  W5/php-raw and W5/php-package, W5/py-raw and W5/py-package,
 *                W5/node-raw and W5/node-package: lock + unlock cycles from one php
 *                (python, node) process (bench/php/cycles.php, bench/python/cycles.py,
 *                bench/node/cycles.js), raw and through the PHP (Python, Node) package
 * W4's emulated network is the fault suite's relay (tests/support/relay.h), delaying.
 *
 * Everything but the relays and the workers (W7's generator among them) runs on the
 * main thread.
 */
#ifndef DLOCK_BENCH_H
#define DLOCK_BENCH_H

#include "dlock.h"
#include "support.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define BENCH_MAX_NODES    8  /* servers one run uses (W4 needs 5) */
#define BENCH_MAX_LIST     8  /* entries in a list option (--w3-workers 2,8,16) */
#define BENCH_MAX_ROUNDS   15 /* --repeat */
#define BENCH_PREFIX       "dlock-bench:"
#define BENCH_TTL_MS       10000 /* every lease the bench takes */
#define BENCH_STACK_BYTES  (256 * 1024)
#define BENCH_EXIT_FAIL    1  /* a sanity check failed or a call returned an error */
#define BENCH_EXIT_USAGE   64 /* as the dlock command */
#define BENCH_EXIT_SERVERS 69 /* servers could not be started or reached */

/* ---- options (main.c) --------------------------------------------------------- */

enum pin_mode { PIN_SPLIT, PIN_SAME, PIN_NONE };
extern const char *const bench_pin_names[3]; /* by mode, as --pin takes them */

typedef struct bench_opts {
    bool run[11];   /* run[1..6]: which of W1..W6; run[7]: W1 over TLS ("TLS"); run[8]:
                       W1 through a cluster ("CLUSTER"); run[9]: W8; run[10]: W7 */
    long w1_cycles; /* -n */
    long w6_cycles; /* W6 cycles (as W1's by default) */
    int w2_clients; /* 8 */
    long w2_cycles; /* per client, 5000 */
    int w3_workers[BENCH_MAX_LIST];
    int w3_nworkers;  /* entries in w3_workers */
    bool w3_fair;     /* also run each W3 with dlock_opts.fair (W3/fair, W3/wN/fair) */
    long w3_sections; /* per worker, 200 */
    long wake_cycles; /* baseline/wake hand-overs, 2000 */
    long w8_changes;  /* W8 proclamations observed, 200 */
    long w8_idle_ms;  /* W8's idle windows, 10000 */
    long w7_seconds;  /* W7: each run's measured time, per client count and side, 3 */
    int w4_nodes[BENCH_MAX_LIST];
    int w4_nnodes;
    long w4_cycles;       /* loopback, 2000 */
    long w4_delay_cycles; /* through relays, 500 */
    int delay_ms;         /* relay delay each way, 1 */
    long w5_stock;        /* 1000 */
    int w5_buyers;        /* 50 */
    int php_buyers;       /* W5/php-*: php processes, 20 */
    int php_delay_ms;     /* W5/php-*: also through relays of D ms each way (0: not) */
    long php_cycles;      /* W5/php-raw and W5/php-package: cycles per round, 2000 */
    long py_cycles;       /* W5/py-raw and W5/py-package: cycles per round, 2000 */
    long node_cycles;     /* W5/node-raw and W5/node-package: cycles per round, 2000 */
    const char *dlockd;   /* --dlockd PATH, or NULL: $DLOCKD, else next to dlock-bench */
    int nodes;            /* servers for W1, W2, W3 and the W5 lock ways (1) */
    long requests;        /* redis-benchmark -n */
    long timeout_ms;      /* dlock_config.timeout_ms */
    int repeat;           /* rounds (baselines + workloads); figures are their medians */
    const char *servers;  /* -s URLS, or NULL to start our own */
    enum pin_mode pin;
    int server_cpu, client_cpu; /* -1: the mode's default */
    bool quiet, verbose, quick;
} bench_opts;

/* ---- placement (place.c) ------------------------------------------------------ */

typedef struct placement {
    enum pin_mode mode;
    int ncpus;
    int server_cpu; /* -1: not pinned */
    int client_cpu; /* -1: not pinned */
    char model[128];
    char text[160]; /* what the report prints, e.g. "split (redis-server CPU 0, ...)" */
    double load;    /* 1-minute load average when the run started */
} placement;

/* Decide the CPUs for mode and describe the machine. Returns 0, or -1 after printing
 * why (a CPU that does not exist). */
int place_init(placement *p, enum pin_mode mode, int server_cpu, int client_cpu);
/* Pin the calling thread (and what it later creates or forks) to cpu; -1 is a no-op.
 * Async-signal-safe (used in forked children). 0 or -1. */
int place_pin_self(int cpu);
/* The 1-minute load average (/proc/loadavg), -1 if unknown: other work on a 2-core
 * machine moves every figure, so the report shows it. */
double place_load(void);
/* CPU time used on the machine, to tell how much of it was not ours: on a shared
 * 2-core machine other work moves every figure. */
typedef struct cpu_usage {
    int64_t t_ns;
    long long busy_ticks;  /* user + nice + system of all CPUs (/proc/stat) */
    long long steal_ticks; /* taken by the hypervisor */
    double own_s;          /* this process, its reaped children, and the servers in pids */
} cpu_usage;
void cpu_usage_take(cpu_usage *u, const pid_t *pids, int npids);
/* Between a and b, in CPUs (1.0 = one CPU busy all the time): *other, busy time that
 * was not ours; *steal, time the hypervisor gave to other guests. */
void cpu_usage_diff(const cpu_usage *a, const cpu_usage *b, double *other, double *steal);
/* Peak resident set of this process so far, in KiB (getrusage ru_maxrss). */
long place_peak_rss_kb(void);
/* A dh_child_fn (tests/support) that pins a child to the CPU *(const int *)arg before
 * it execs. */
int place_child_pin(void *arg);
/* dh_spawn (tests/support) with the child pinned to cpu (-1: as we are) and its
 * stdout and stderr on out_fd and err_fd; in a process group of its own when
 * own_group (so a terminal's ^C reaches only us, and we decide how the child ends).
 * Call it from the main thread: PR_SET_PDEATHSIG follows the forking thread. */
pid_t place_spawn(const char *const argv[], int cpu, int out_fd, int err_fd, bool own_group);

/* ---- servers (servers.c) ------------------------------------------------------ */

typedef struct bench_server {
    char host[256];
    int port;
    char tls_ca[600];   /* TLS: the CA file that verifies it (redis-benchmark --tls); "" */
    char user[128];     /* "" for none (AUTH with the password alone) */
    char password[256]; /* "" for none */
    int db;
    char url[600]; /* for dlock_client_new */
    pid_t pid;     /* ours: the redis-server process; 0 for -s servers */
} bench_server;

typedef struct bench_servers {
    int n;
    bench_server s[BENCH_MAX_NODES];
    bool own;                               /* started by us */
    dh_server own_servers[BENCH_MAX_NODES]; /* ours: the processes */
    int cpu;                                /* ours: the CPU they are pinned to, or -1 */
    char tmpdir[400];                       /* ours: parent of the servers' dirs */
    char version[32];                       /* redis_version of node 1 */
} bench_servers;

/* Start n redis-server processes on free 127.0.0.1 ports in a new temporary directory,
 * pinned to cpu (-1: not pinned). They die with this process (PR_SET_PDEATHSIG, an
 * atexit hook and SIGINT/SIGTERM/SIGHUP handlers). 0, or -1 after printing why. */
int servers_start(bench_servers *ss, int n, int cpu);
/* Use the servers of a comma-separated list of redis://[[user]:password@]host[:port][/db].
 * 0, or -1 after printing why. */
int servers_use(bench_servers *ss, const char *urls);
/* Stop our servers and remove their directories; delete the bench's keys from -s
 * servers. Idempotent. */
void servers_stop(bench_servers *ss);
/* "url1,url2,..." of nodes [first, first + n). */
void servers_urls(const bench_servers *ss, int first, int n, char *out, size_t outlen);
/* Add url to the comma-separated list in out (a string of outlen bytes at most); one
 * that does not fit is left out whole. */
void urls_append(char *out, size_t outlen, const char *url);
/* The URL of something on 127.0.0.1:port in front of server s (a relay, the hop):
 * s's credentials and db, that port. */
void servers_url_at(const bench_server *s, int port, char *out, size_t n);
/* A connection to s, authenticated, with its db selected and a 10 s timeout; NULL
 * after printing why. Free with redisFree. */
redisContext *server_connect(const bench_server *s);
/* Run a command (redisCommand format) on c; NULL (after printing why) on an I/O error
 * or an error reply. */
redisReply *server_cmd(redisContext *c, const char *fmt, ...);
/* Server statistics, summed over a set of nodes, from one INFO all per node: commands
 * processed (those that scripts run included) and per-command calls (commandstats). */
#define STATS_MAX_CMDS 64
typedef struct srv_stats {
    long long commands; /* total_commands_processed */
    int ncmd;
    char cmd[STATS_MAX_CMDS][48]; /* "evalsha", "incr", "config|resetstat", ... */
    long long calls[STATS_MAX_CMDS];
} srv_stats;

typedef struct stats_conns {
    int n;
    redisContext *c[BENCH_MAX_NODES];
} stats_conns;

/* Open admin connections to nodes [0, n) (before the first snapshot, so that their
 * AUTH and SELECT are not inside a measured interval). 0, or -1 after printing why. */
int stats_open(const bench_servers *ss, int n, stats_conns *sc);
void stats_close(stats_conns *sc);
/* One snapshot. 0, or -1 after printing why. */
int stats_take(stats_conns *sc, srv_stats *out);
/* The counts over a team's run: the connections, and the snapshot stats_window_start
 * takes once every worker is ready. */
typedef struct stats_window {
    stats_conns sc;
    srv_stats before;
} stats_window;
/* team_run's `before` hook, for a stats_window: its first snapshot. When that fails, the
 * window is closed (sc.n = 0) and the workload goes on without counts. */
void stats_window_start(void *w);
/* The second snapshot, and the differences printed when verbose. false when there are
 * no counts. The connections stay open (stats_commands counts them); close them after. */
bool stats_window_end(stats_window *w, const char *label, bool verbose, srv_stats *after);
/* Commands the servers processed between two snapshots, less the first snapshot's
 * own INFO on each node (INFO counts itself only once it has run). */
long long stats_commands(const stats_conns *sc, const srv_stats *before, const srv_stats *after);
/* Calls of one command (lowercase, as commandstats names it) between two snapshots. */
long long stats_calls(const srv_stats *before, const srv_stats *after, const char *cmd);
/* Print the per-command differences to stderr, "label: cmd +calls ...". */
void stats_print(const char *label, const srv_stats *before, const srv_stats *after);

/* ---- the hop (hop.c) ---------------------------------------------------------- */

typedef struct bench_hop {
    pid_t pid; /* 0: not running */
    int port;
} bench_hop;

/* A child process on a free 127.0.0.1 port passing bytes to and from host:port, as
 * the bench is pinned. 0, or -1 (nothing started). */
int hop_start(const char *host, int port, bench_hop *out);
void hop_stop(bench_hop *h); /* kill and reap it; a stopped one is left alone */

/* ---- dlockd (daemon.c) ----------------------------------------------------- */

typedef struct bench_dlockd {
    pid_t pid; /* 0: not running */
    int port;
    int metrics_port; /* --metrics-port; 0: none */
    char path[4096];
} bench_dlockd;

/* Start dlockd (path, or NULL: $DLOCKD, else dlockd next to this executable) in front
 * of nodes [0, nodes) of ss, on a free 127.0.0.1 port, pinned to cpu (-1: not
 * pinned), with timeout_ms as its per-server deadline, and with metrics an HTTP
 * listener on another free port (--metrics-port). Returns 0 once it accepts
 * connections, or -1 after printing why. Call it from the main thread (the child dies
 * with the thread that forked it). */
int dlockd_start(bench_dlockd *d, const bench_servers *ss, int nodes, const char *path, int cpu,
                 int64_t timeout_ms, bool metrics);
/* SIGTERM, then SIGKILL after 5 s. Safe on one not started. */
void dlockd_stop(bench_dlockd *d);
/* dlockd's resident set (VmRSS, KiB) and thread count (Threads), from /proc/PID/status.
 * 0, or -1 (both -1) when it is not running or the file does not say. */
int dlockd_status(const bench_dlockd *d, long *rss_kb, long *threads);

/* ---- baseline (baseline.c) ---------------------------------------------------- */

typedef struct baseline {
    double rps;    /* requests per second */
    double p50_us; /* median latency; < 0 when this redis-benchmark does not print it */
    double p99_us;
} baseline;

/* Run redis-benchmark -t set -n requests -c clients --csv against s, pinned to cpu
 * (-1: not pinned). 0, or -1 after printing why. */
int baseline_run(const bench_server *s, int clients, long requests, int cpu, baseline *out);
/* redis-benchmark against s (its address and credentials as baseline_run gives them)
 * with args after them (NULL-terminated, at most 48; "--csv" among them), pinned to cpu:
 * the CSV's row named row, or with row NULL its first row (a command given in args).
 * what names the run in the message of a failure (a non-zero exit: an error reply
 * makes redis-benchmark exit 1). 0, or -1 after printing why. */
int baseline_run_args(const bench_server *s, const char *const *args, const char *row,
                      const char *what, int cpu, baseline *out);
/* Parse redis-benchmark's --csv output (the SET row, columns found by the header).
 * 0, or -1 when there is no SET row with an rps. */
int baseline_parse_csv(const char *text, baseline *out);

/* ---- stats (stats.c) ---------------------------------------------------------- */

/* Nanoseconds on CLOCK_MONOTONIC. */
int64_t now_ns(void);
/* The p-th percentile (0 < p <= 100, nearest rank) of v[0..n); sorts v. 0 for n = 0. */
int64_t percentile(int64_t *v, size_t n, double p);
/* Sort v[0..n) ascending (then percentile_sorted reads it without sorting again). */
void samples_sort(int64_t *v, size_t n);
int64_t percentile_sorted(const int64_t *v, size_t n, double p);

/* ---- the command line (options.c) ------------------------------------------- */

/* Fill o from the command line (the defaults, then the options). 0: run; -1: done
 * (--help printed, exit 0); 1: a usage error, its message printed. */
int bench_parse_args(int argc, char **argv, bench_opts *o);

/* ---- the run's context and figures (main.c) ---------------------------------- */

typedef struct bench_ctx {
    const bench_opts *opt;
    bench_servers *servers;
    const placement *place;
    double rps_c1, rps_c8; /* redis-benchmark SET rps at -c 1 and -c 8 (0: unknown) */
    double rtt_us;         /* p50 at -c 1 (0: unknown) */
    double w1_per_s;       /* W1's cycles/s and p50 of this round, for W6 (0: unknown) */
    double w1_p50_us;
    double w6_per_s;            /* W6's cycles/s of this round, for W6/metrics (0: unknown) */
    double w6_hop_p50_us;       /* W6/hop's p50 of this round, for W6's (0: unknown) */
    const bench_dlockd *dlockd; /* NULL when no workload of the run needs it */
    const bench_dlockd *dlockd_metrics; /* W6/metrics's, with --metrics-port; or NULL */
    bool failed;                        /* a sanity check failed: exit non-zero */
    int round;                          /* 1..repeat */
} bench_ctx;

/* Record one figure: a row of the table and a BENCH line. ratio < 0 means none; `vs`
 * names the ratio's denominator for the table (NULL with no ratio). decimals: digits
 * after the point in the BENCH line. */
void fig(const char *workload, const char *metric, double value, int decimals, double ratio,
         const char *vs);
/* A figure's workload label: w ("W3/w16"), "/nN" when it ran on N > 1 nodes, then
 * suffix ("/fair", or ""). */
void bench_label(char *out, size_t n, const char *w, int nodes, const char *suffix);
/* Progress and notes to stderr (silenced by -q). */
void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* True when stderr shows progress (not -q). */
bool progress_on(void);
/* A dlock_config for the bench: prefix, timeout, log callback. */
void bench_dlock_config(const bench_ctx *ctx, dlock_config *cfg);
/* Mark the run failed and say why on stderr (always, even with -q). */
void bench_fail(bench_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* calloc for a workload (n = 0 counts as 1): NULL after bench_fail "label: out of
 * memory". */
void *bench_calloc(bench_ctx *ctx, const char *label, size_t n, size_t size);

/* ---- worker teams (team.c) ---------------------------------------------------- */

/*
 * A team runs n copies of fn on their own threads (pinned as the bench is):
 *   1. each worker prepares (connects, warms up) and calls team_ready();
 *   2. the main thread runs `before` (a server statistics snapshot), then releases
 *      everyone at once and takes the start time;
 *   3. workers count finished operations in `done` (progress on stderr);
 *   4. each worker records its end time; the team's elapsed time runs from the start
 *      to the last end.
 * A worker that fails calls team_error(), which makes team_stop() true for all.
 */
typedef struct team team;
typedef void (*team_fn)(team *t, int id, void *arg);

struct team {
    const char *label; /* for progress lines */
    int n;
    long total;              /* operations expected, for progress (0: not known) */
    _Atomic long done;       /* operations finished */
    _Atomic int stop;        /* set on the first error */
    pthread_barrier_t ready; /* n workers + main */
    pthread_barrier_t go;    /* n workers + main */
    int64_t start_ns;        /* written by main before `go` */
    _Atomic int64_t end_ns;  /* the latest worker end */
    pthread_mutex_t mu;      /* guards err */
    char err[512];           /* the first error */
};

/* Run fn(t, id, args) for id in [0, n). before: called by the main thread between the
 * ready and go barriers (NULL for none). Returns 0 when no worker failed, else -1 (the
 * first error in t->err). t->start_ns and t->end_ns hold the measured interval. */
int team_run(team *t, const char *label, int n, long total, team_fn fn, void *arg,
             void (*before)(void *), void *before_arg);
/* Called by every worker exactly once, after its preparation (even if it failed). */
void team_ready(team *t);
/* Called by every worker at its end. */
void team_end(team *t);
/* Record the first error (and stop the others). */
void team_error(team *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline bool team_stopped(team *t)
{
    return t->stop != 0;
}

/* ---- workloads ---------------------------------------------------------------- */

/* W1 and W2 (cycles.c): uncontended acquire + release on distinct names. */
int run_w1(bench_ctx *ctx);
/* W1's loop, one client, on the servers of urls, its names "TAG:..." (a tag "{x}" puts
 * them all in one cluster slot): figures cycles_per_s (its ratio to rps, named vs;
 * rps <= 0: none), p50_us, p99_us under label, the rate in *per_s and the p50 in
 * *p50_us (either may be NULL). 0, or -1 after bench_fail. */
int w1_run_on(bench_ctx *ctx, const char *label, const char *tag, const char *urls, double rps,
              const char *vs, double *per_s, double *p50_us);
/* W1 over TLS (tls.c): a TLS redis-server of its own (certificates made for the run),
 * redis-benchmark --tls SET -c 1 on it, then W1 through rediss://. */
int run_w1_tls(bench_ctx *ctx);
void w1_tls_stop(void);
/* W1 through a Redis Cluster (cluster.c): three masters of its own, W1 directly on the
 * master of one slot, then through a seed on the same names, then on names spread over
 * all masters, each beside the direct run. */
int run_w1_cluster(bench_ctx *ctx);
void w1_cluster_stop(void);
int run_w2(bench_ctx *ctx);
/* W4 (cycles.c): W1 on 1, 3, 5 nodes, on loopback and through delaying relays. */
int run_w4(bench_ctx *ctx);
/* W3 (contended.c): one name, blocking waits, for each --w3-workers count. */
int run_w3(bench_ctx *ctx);
/* baseline/wake (wake.c), run just before W3: two threads hand a key to each other
 * on node 1 through DEL + PUBLISH and SET NX; figures gap_p50_us and gap_p99_us.
 * 0, or -1 after bench_fail. */
int run_wake(bench_ctx *ctx);
/* W8 (elect.c): a leader's proclamations and hand-overs as an observer hears them, and
 * the commands idle observers cost; run right after W3. 0, or -1 after bench_fail. */
int run_w8(bench_ctx *ctx);
/* W5 (flashsale.c): lock, lock-pipelined, watch, script, stock, then the PHP sale and
 * the Python and Node packages' cycles. */
int run_w5(bench_ctx *ctx);
/* The end of a W5 sale: its figure oversold, the progress line, and the checks: every
 * unit of stock bought once, none left, and as many sold (unless sold is NULL: a sale
 * that keeps no such count). 0, or -1 after bench_fail. */
int w5_outcome(bench_ctx *ctx, const char *label, long stock, long purchases, long retries,
               double sellout_ms, long long left, const long long *sold);
/* W5's peers (peers.c): the sale with the PHP recipe spinning and sleeping, redis-py's
 * Lock and node-redlock, each sellout_ms beside lock_ms, W5/lock's of the round (0:
 * none). 0, or -1 after bench_fail. */
int run_w5_peers(bench_ctx *ctx, double lock_ms);
/* A sale by processes (sale.c), all buyers released at once; what they reported. */
typedef struct sale_result {
    long bought, retries;    /* sums over the buyers */
    int served;              /* buyers that bought at least one item */
    int64_t t0_ns;           /* the start signal */
    int64_t last_sale_ns;    /* the last purchase of any buyer */
    int64_t max_wait_ns;     /* the longest acquisition of any buyer */
    bool have_stats;         /* before and after are node 1's counts */
    srv_stats before, after; /* around the sale */
    long long cmds;          /* commands node 1 ran in between; -1: unknown */
} sale_result;
/* Start nproc processes of argv (NULL-ended, at most 15 arguments, argv[0] the
 * executable), each given its number (0 to nproc - 1) as one more argument when
 * numbered, pinned where the bench's clients run; once the counter k_ready on node 1
 * shows nbuyers,
 * push one element per process on k_go and wait for them all (60 s at most: then they
 * are killed), reading "bought N last_sale_ns T retries R max_wait_ns W" lines, one per
 * buyer, from their stdout into *out. 0, or -1 with why (nothing printed). */
int sale_run(bench_ctx *ctx, const char *label, const char *const *argv, int nproc, bool numbered,
             long nbuyers, redisContext *admin, const char *k_ready, const char *k_go,
             sale_result *out, char *why, size_t whylen);
/* W5/php-recipe and W5/php-dlockd (service.c), run at the end of W5, then
 * run_w5_php_cycles. */
int run_w5_php(bench_ctx *ctx);
/* The directory of the bench's PHP scripts: $DLOCK_BENCH_PHP_DIR, else the source
 * tree's bench/php. The string is static or the environment's. */
const char *php_dir(void);
/* "exit status N" or "killed by signal N", from a wait status, into out. */
void describe_status(int st, char *out, size_t n);
/* Read fd to its end, or until len - 1 bytes, into buf, NUL-terminated. */
void read_all(int fd, char *buf, size_t len);
/* W5/php-raw and W5/php-package, then their -predis twins (pkgcycles.c), with the
 * php found by run_w5_php. 0, or -1 after bench_fail. */
int run_w5_php_cycles(bench_ctx *ctx, const char *php);
/* W5/py-raw and W5/py-package (pkgcycles.c), run at the end of W5 with
 * $DLOCK_PYTHON, else /usr/bin/python3. 0, or -1 after bench_fail. */
int run_w5_py_cycles(bench_ctx *ctx);
/* W5/node-raw and W5/node-package (pkgcycles.c), run after them with $DLOCK_NODE, else
 * node on the PATH, and the Node package as built. 0, or -1 after bench_fail. */
int run_w5_node_cycles(bench_ctx *ctx);
/* W7 (fleet.c): 1, 16, 64 and 256 connections through a dlockd of its own in front of
 * node 1, each beside the same connections doing the raw recipe on node 1; then
 * w7_script_limits. Run in the first round only. 0, or -1 after bench_fail. */
int run_w7(bench_ctx *ctx);
/* W7's load generator (fleet_gen.c): nconns connections from one epoll loop, each
 * cycling LOCK name TTL 10000 + UNLOCK name token through d, or with d NULL SET name
 * token NX PX 10000 + EVALSHA sha 1 name token on node 1, for secs_ns after a warm-up,
 * every reply checked; names "<tag>:<connection>:<cycle>". */
typedef struct fleet_spec {
    const char *label; /* "W7/c16": for progress and messages */
    const char *tag;
    int nconns;
    const bench_dlockd *d;
    const char *sha; /* the recipe's compare-and-delete, SCRIPT LOADed on node 1 */
    int64_t secs_ns;
} fleet_spec;
typedef struct fleet_result {
    double per_s, p50_us, p99_us; /* cycles finished in secs_ns; a cycle's latency */
    long rss_kb, threads;         /* d's at the end, its connections still open; or -1 */
} fleet_result;
/* 0, or -1 after bench_fail (a wrong reply among the reasons). */
int fleet_run(bench_ctx *ctx, const fleet_spec *spec, fleet_result *res);
/* W7/script (fleet_scripts.c): the acquire and release scripts run by redis-benchmark
 * -P 16 -c 16 on node 1: figures W7/script/acquire, /release and /cycle per_s. 0, or
 * -1 after bench_fail. */
int w7_script_limits(bench_ctx *ctx);
/* W6 (service.c): W1 through dlockd, right after W1; W6/detached; W6/metrics through
 * the second dlockd, with --metrics-port. */
int run_w6(bench_ctx *ctx);

#endif /* DLOCK_BENCH_H */
