/*
 * workers.h: worker processes for the fault suite, the fenced register they update,
 * and a process's resource counts (fds, threads, RSS).
 *
 * A worker is a forked process (so that a test can SIGSTOP it like a GC pause, or
 * SIGKILL it like a crash) that loops: acquire the lock, enter the section, read the
 * register, work, write read + 1 through dlock_fenced_set (the library's fence check),
 * leave, release; every step is a record in the history file (history.h). It makes its
 * own clients after fork(), and frees them before it exits, recording its fds, threads
 * and RSS before and after (checker 6).
 *
 * The register is a hash on a separate resource server (never faulted), in the layout
 * dlock_fenced_set keeps: {value, fence}. The read and the write are two steps, as in a
 * real read-modify-write: overlapping holders can lose updates; the fence makes the
 * register refuse a holder whose fence is below one it already accepted.
 */
#ifndef DLOCK_FAULTS_WORKERS_H
#define DLOCK_FAULTS_WORKERS_H

#include "dlock.h"
#include "history.h"
#include "support.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define WK_MAX 8 /* workers at once: every scenario needs at most 8 */

/* State the workers share with the test (an anonymous MAP_SHARED page). */
typedef struct wk_shared {
    atomic_int in_section[WK_MAX]; /* 1 between ENTER and EXIT */
    atomic_llong enter_ns[WK_MAX]; /* CLOCK_MONOTONIC of the last ENTER */
    atomic_ullong fence[WK_MAX];   /* fence of the section in progress */
    atomic_int pid[WK_MAX];
    atomic_long sections[WK_MAX]; /* sections completed */
} wk_shared;

typedef struct wk_config {
    const char *servers;  /* lock servers, comma-separated URLs */
    const char *resource; /* the register's server URL; NULL: no register */
    const char *reg_key;  /* the register's key */
    const char *name;     /* the lock */
    const char *history;  /* the history file */
    int id;               /* 0 .. WK_MAX-1 */
    int sections;         /* stop after this many (0: until stopped) */
    int64_t ttl_ms;
    int64_t wait_ms;      /* dlock_opts.wait_ms (-1 forever) */
    int64_t linger_ms;    /* dlock_opts.linger_ms (0: none) */
    int auto_renew;       /* renewal on */
    int64_t work_ms;      /* sleep between the read and the write */
    int64_t timeout_ms;   /* dlock_config.timeout_ms */
    int64_t max_lease_ms; /* dlock_config.max_lease_ms */
    int restart_voting;   /* dlock_config.restart_voting */
    int fence_mode;       /* dlock_config.fence_mode */
    int cancel_fd;        /* readable: stop (also the acquire's cancel_fd) */
    wk_shared *shared;    /* NULL: none */
    bool check_when_late; /* dlock_check when the section ended past validity */
    bool verbose;         /* print failed calls to stderr */
    /* Called in the worker before each acquire (NULL: nothing): a scenario's way to
     * change the worker's own state as it runs, such as its clock through the hooks. */
    void (*before_acquire)(const struct wk_config *cfg);
} wk_config;

/* A shared page for up to WK_MAX workers, zeroed. NULL on failure. */
wk_shared *wk_shared_new(void);
void wk_shared_free(wk_shared *sh);

/* The stop switch: a pipe whose read end the workers poll (and pass as cancel_fd),
 * and which the test makes readable, for all of them at once, by writing one byte. */
typedef struct wk_stop {
    int rd, wr;
} wk_stop;
int wk_stop_init(wk_stop *s);
void wk_stop_fire(wk_stop *s);
void wk_stop_close(wk_stop *s);

/* Fork a worker running cfg (copied by fork). Returns its pid, or -1. */
pid_t wk_spawn(const wk_config *cfg);

/* The worker's loop, in the current process; returns its exit status. */
int wk_main(const wk_config *cfg);

/* Wait for a worker up to timeout_ms, then SIGCONT + SIGKILL it. Returns its exit
 * status, 128 + n if signal n killed it, -1 when it was not our child. */
int wk_reap(pid_t pid, int64_t timeout_ms);

/* Spawn n workers from a template (ids 0..n-1) into pids[]. 0, or -1 (fork failed). */
int wk_spawn_all(const wk_config *tmpl, int n, pid_t *pids);
/* Reap them (wk_reap, one shared deadline): how many did not exit with status 0. */
int wk_reap_all(pid_t *pids, int n, int64_t timeout_ms);

/* Load the history, read the register's final counter (res NULL: none), run the
 * checkers into *rep and print them as FIG lines named `fig`. 0, or -1. */
int wk_judge(const char *history, dh_server *res, const char *reg_key, const char *fig,
             hist_report *rep);

/* ---- recorded calls, for tests that act in their own process ---------------------- */

/* dlock_acquire with ACQ_INVOKE and ACQ_OK / ACQ_FAIL records; returns its code. */
int wk_acquire_rec(const hist_writer *hw, dlock_client *c, const char *name, const dlock_opts *o,
                   dlock_lock **out);
/* dlock_fenced_set of `value` with l's fence, with WRITE_INVOKE and its outcome. */
int wk_write_rec(const hist_writer *hw, dlock_client *res, const char *reg_key, const dlock_lock *l,
                 uint64_t value);
/* dlock_release with a RELEASE record (l is freed, whatever it returns). */
int wk_release_rec(const hist_writer *hw, dlock_lock *l);

/* ---- the register ---------------------------------------------------------------- */

/* The register's counter and fence on a resource server (0 when missing); -1 on
 * error. */
int wk_register_read(dh_server *res, const char *key, uint64_t *value, uint64_t *fence);

/* ---- process resources ----------------------------------------------------------- */

typedef struct wk_stats {
    int fds;     /* entries in /proc/self/fd (the listing's own fd excluded) */
    int threads; /* Threads: in /proc/self/status */
    long rss_kb; /* VmRSS: */
} wk_stats;

/* This process's fds, threads and RSS, once the thread count has held for 10 ms (a
 * thread just joined may still be counted for a moment). */
void wk_proc_stats(wk_stats *s);
/* wk_proc_stats once threads have been joined: waits up to 200 ms more for the thread
 * count to fall back to before's. */
void wk_proc_stats_after(const wk_stats *before, wk_stats *after);

/* The RSS growth a test tolerates: 2 MiB, or no bound under a sanitizer (ASan keeps
 * freed memory in quarantine, TSan keeps shadow memory). */
long wk_rss_bound_kb(void);

/* ---- a scenario's scaffolding ------------------------------------------------------ */

#define WK_NODES 3 /* lock servers of a scenario file */

/* The lock servers and the resource server (the register's) of a scenario file,
 * shared by its tests: wk_servers_setup and wk_servers_teardown are its cmocka group
 * setup and teardown (the state is unused; -1 when a server did not start). */
extern dh_server wk_srv[WK_NODES], wk_res;
extern char wk_urls[512]; /* the URLs of all of wk_srv */
int wk_servers_setup(void **state);
int wk_servers_teardown(void **state);
/* The same for the lock servers alone, in a file whose tests need no register. */
int wk_nodes_setup(void **state);
int wk_nodes_teardown(void **state);
/* The same for the resource server alone, in a file whose tests start their own lock
 * servers. */
int wk_res_setup(void **state);
int wk_res_teardown(void **state);

/* What every run of a scenario with workers needs: a fresh history in the resource
 * server's directory, a writer for the test's own records (faults), the page the
 * workers share with the test, and the stop switch. */
typedef struct wk_scenario {
    char urls[512]; /* the first n of wk_srv */
    char hist[600]; /* <wk_res.dir>/<name>.hist */
    char name[48];  /* the lock */
    char reg[64];   /* the register's key: "register-<name>" */
    char fig[48];   /* the prefix of the FIG lines */
    hist_writer hw; /* the test's records (worker id -1) */
    wk_shared *sh;
    wk_stop stop;
    wk_config cfg; /* the workers' template: the above filled in, wait_ms -1 (forever) */
} wk_scenario;

/* Create the history and the rest for a run on the first n lock servers. 0, or -1
 * after printing why (what was opened is closed). */
int wk_scenario_open(wk_scenario *sc, int n, const char *name, const char *fig);
/* The same for a scenario run on 1 or 3 servers alike: the lock "<name>-n<n>", the FIG
 * prefix "<fig>_n<n>". */
int wk_scenario_open_n(wk_scenario *sc, int n, const char *name, const char *fig);
/* Close and free what wk_scenario_open made (the history file stays, for a
 * post-mortem with DLOCK_TEST_KEEP). */
void wk_scenario_close(wk_scenario *sc);
/* A worker that died of SIGKILL (reaped already) is replaced, as a supervisor would:
 * its kill recorded in the scenario's history with the fence it last held, its
 * section cleared, and a new worker of the same id spawned from cfg. The new pid, or
 * -1 (fork failed). */
pid_t wk_scenario_replace(wk_scenario *sc, const wk_config *cfg, int id, pid_t dead);
/* wk_judge on the scenario's history and register. */
int wk_scenario_judge(wk_scenario *sc, hist_report *rep);

/* A fresh history <wk_res.dir>/<name>.hist (its path into hist) with n writers: w[i]
 * for client i, the last one (id -1) for the test's own records. 0, or -1 after
 * printing why. */
int wk_history_new(char *hist, size_t len, const char *name, hist_writer *w, int n);
/* Close the n writers of wk_history_new. */
void wk_history_close(hist_writer *w, int n);

/* The checks that hold in every scenario, whatever its faults: no fence went
 * backwards, no two grants overlapped, no stale write was accepted, no write came from
 * nowhere, and no worker leaked a descriptor or a thread. Prints each one that failed
 * and returns how many did (a test asserts 0). */
int wk_safety_violations(const hist_report *rep);

/* The worker (of pids[0..n-1]) in its section now, or -1. */
int wk_in_section(wk_shared *sh, const pid_t *pids, int n);
/* The same, waiting up to within_ms for one to enter its section. */
int wk_wait_in_section(wk_shared *sh, const pid_t *pids, int n, int64_t within_ms);
/* SIGSTOP worker id (process pid, a child of the caller) and wait until it is stopped.
 * Returns 1 when it stopped inside the section it entered with this fence; 0 when that
 * section had ended first (it is let go again with SIGCONT); -1 on an error. */
int wk_stop_in_section(wk_shared *sh, pid_t pid, int id, uint64_t fence);

/* ---- small helpers ---------------------------------------------------------------- */

/* Make server s refuse writes (CONFIG SET min-replicas-to-write 1: every script that
 * writes gets -NOREPLICAS) or accept them again. A node that answers but grants
 * nothing forces a grant by a bare quorum. 0, or -1 after printing why. */
int wk_refuse_writes(dh_server *s, bool on);

/* The pid in a holder description ("host:pid label"), 0 if none. */
pid_t wk_holder_pid(const char *description);

/* A uniformly random integer in [lo, hi] (test randomness, seeded by the test). */
int64_t wk_rand(int64_t lo, int64_t hi);

/* Seed wk_rand from $DLOCK_TEST_SEED or the clock, and print the seed (INFO line) so a
 * failing run can be repeated. */
void wk_seed(const char *test);

#endif /* DLOCK_FAULTS_WORKERS_H */
