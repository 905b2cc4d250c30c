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
#include "support.h"
#include "history.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define WK_MAX 8 /* workers at once (the issue: at most 8) */

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

void wk_proc_stats(wk_stats *s);
/* wk_proc_stats once threads have been joined: waits up to 200 ms for the thread count
 * to fall back to before's (a thread just joined may still be counted). */
void wk_proc_stats_after(const wk_stats *before, wk_stats *after);

/* The RSS growth a test tolerates: 2 MiB, or no bound under a sanitizer (ASan keeps
 * freed memory in quarantine, TSan keeps shadow memory). */
long wk_rss_bound_kb(void);

/* ---- small helpers ---------------------------------------------------------------- */

/* The URLs of n harness servers, comma-separated (what dlock_client_new takes), into
 * buf (truncated to len - 1). */
void wk_urls(const dh_server *srv, int n, char *buf, size_t len);

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
