/*
 * history.h: the fault suite's history file and its checkers.
 *
 * Every worker process (and the test itself, for the faults it injects) appends
 * fixed-size records to one history file: one write(2) per record, on a descriptor
 * opened with O_APPEND, so that records of concurrent processes never interleave.
 * After the run, the checkers read the file back and judge it.
 *
 * Time. Every timestamp is CLOCK_MONOTONIC, in nanoseconds. The library measures
 * leases on CLOCK_BOOTTIME; a record's validity deadline is CLOCK_MONOTONIC now plus
 * dlock_remaining_ms() at the moment of the record. On one machine that does not
 * suspend, BOOTTIME - MONOTONIC is a constant, so the two agree to within the
 * microseconds between the two clock reads; dlock_remaining_ms() rounds down to the
 * millisecond, so a recorded deadline is at most 1 ms early, never late.
 *
 * What the checkers assert (docs/guarantees.md has the promises):
 *   (1) fences: an acquisition that began after another one returned has a larger
 *       fence, and so does one that returned after another's granted interval (below)
 *       had ended (the real-time order of grants); an accepted resource write never has a fence
 * lower than one accepted before it was sent (a stale write accepted); a rejected write was
 * rejected for a reason (a higher fence was accepted first); (2) granted intervals [ok-acquire,
 * min(release sent, validity deadline)] of different tokens never overlap (asserted where no server
 * fault is injected); (3) believed intervals [ok-acquire, section exit] may overlap under pauses:
 * the number and rate are figures; (4) lost updates: the register's final counter equals the
 * accepted writes (plus at most the writes whose outcome is unknown: a worker killed mid-write);
 *   (5) no lock key is left after its ttl (hist_keys_left, on the servers);
 *   (6) each worker's fds and threads are back to their baseline after it freed its
 *       clients, and its RSS grew by less than a bound (WORKER_END records).
 */
#ifndef DLOCK_FAULTS_HISTORY_H
#define DLOCK_FAULTS_HISTORY_H

#include "dlock.h"
#include "support.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Record types. "start_ns" is when a call was made, "t_ns" when it returned. */
enum hist_type {
    HIST_WORKER_START = 1, /* a worker process began */
    HIST_ACQ_INVOKE,       /* dlock_acquire is about to be called */
    HIST_ACQ_OK,           /* it returned OK: fence, token, deadline */
    HIST_ACQ_FAIL,         /* it returned rc */
    HIST_ENTER,            /* the critical section begins */
    HIST_READ,             /* the register was read: value, aux = its fence */
    HIST_WRITE_INVOKE,     /* a fenced write of value is about to be sent */
    HIST_WRITE_OK,         /* accepted */
    HIST_WRITE_REJECTED,   /* refused: DLOCK_ERR_FENCED */
    HIST_WRITE_FAIL,       /* another error: the outcome is unknown */
    HIST_EXIT,             /* the critical section ends: deadline as seen now */
    HIST_CHECK,            /* dlock_check returned rc */
    HIST_RELEASE,          /* dlock_release returned rc; aux 1: a quorum still held the
                              token, and the lease had run out only by the holder's
                              clock (DLOCK_ERR_LOST, detail "released, ...") */
    HIST_LOST,             /* on_lost ran (on the renewal thread) */
    HIST_FAULT,            /* the test injected a fault: rc = enum hist_fault, aux = target */
    HIST_WORKER_END,       /* resources: fence/value = fds before/after, aux = threads
                              before << 32 | after, start_ns/deadline_ns = RSS kB before/after */
    HIST_NOTE,             /* free use by a test: value/aux as it says */
    HIST_RELEASE_INVOKE    /* dlock_release is about to be called: from here on the lock
                              may be released (a worker killed in the call leaves no
                              HIST_RELEASE) */
};

/* Faults, in HIST_FAULT records (rc). */
enum hist_fault {
    HIST_F_PAUSE = 1,     /* SIGSTOP a worker (aux = pid) */
    HIST_F_RESUME,        /* SIGCONT it */
    HIST_F_KILL,          /* SIGKILL a worker */
    HIST_F_SERVER_KILL,   /* SIGKILL a server (aux = node index) */
    HIST_F_SERVER_START,  /* the server answers again */
    HIST_F_SERVER_PAUSE,  /* SIGSTOP a server */
    HIST_F_SERVER_RESUME, /* SIGCONT it */
    HIST_F_CLOCK_JUMP,    /* PEXPIRE key 1 on a node */
    HIST_F_FAILOVER       /* a replica promoted */
};

/* One record: 80 bytes, written whole by one write(2). */
typedef struct hist_rec {
    int64_t t_ns;        /* CLOCK_MONOTONIC when the event happened (a call returned) */
    int64_t start_ns;    /* when the call was made; t_ns for instant events */
    int64_t deadline_ns; /* validity deadline (ACQ_OK, EXIT); 0: none */
    uint64_t fence;      /* the lock's fence (0: none) */
    uint64_t value;      /* register value read or written */
    uint64_t aux;        /* per type, as enum hist_type says */
    uint8_t token[16];   /* the lock's 128-bit token (zero: none) */
    int32_t type;        /* enum hist_type */
    int32_t worker;      /* worker id; -1: the test itself */
    int32_t pid;
    int32_t rc; /* dlock return code, or enum hist_fault */
} hist_rec;

_Static_assert(sizeof(hist_rec) == 80, "hist_rec is written whole: keep it 80 bytes");

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t hist_now_ns(void);

/* CLOCK_REALTIME - CLOCK_MONOTONIC in nanoseconds: Redis's TIME (and so an N = 1
 * fence, which is the server's TIME in microseconds at the grant) maps to monotonic
 * time by subtracting it. Same machine, same clocks. */
int64_t hist_realtime_offset_ns(void);

/* ---- writing ------------------------------------------------------------------ */

/* One writer per process (or thread): the history's descriptor and who writes. */
typedef struct hist_writer {
    int fd;
    int worker;
} hist_writer;

/* Create (truncate) the history file `path`. 0 or -1 (errno). */
int hist_create(const char *path);
/* Open path for appending (O_APPEND | O_CLOEXEC). 0 or -1. */
int hist_open(hist_writer *w, const char *path, int worker);
void hist_close(hist_writer *w);

/* Append one record: type, rc, the call's start (0: now), and, from the lock if not
 * NULL, its fence, token and deadline (now + dlock_remaining_ms). value and aux as the
 * type says. Thread-safety: any thread (one write(2) per record). */
void hist_put(const hist_writer *w, int type, int rc, int64_t start_ns, const dlock_lock *l,
              uint64_t value, uint64_t aux);
/* Append a record built by the caller; t_ns (when 0), worker and pid are filled in. */
void hist_write(const hist_writer *w, hist_rec *r);
/* A fault injected by the test (rc = enum hist_fault, aux = target). */
void hist_fault(const hist_writer *w, int fault, uint64_t aux);

/* ---- reading and checking ------------------------------------------------------ */

typedef struct hist_log {
    hist_rec *r;
    size_t n;
} hist_log;

/* Read the whole file. 0 or -1 (after printing why). A trailing partial record (a
 * process killed in the middle of a write cannot make one: write(2) of 80 bytes to a
 * regular file is whole) is reported and dropped. */
int hist_load(const char *path, hist_log *out);
void hist_free(hist_log *log);

/* One acquisition, rebuilt from its records. Times are 0 when absent. */
typedef struct hist_session {
    uint8_t token[16];
    int worker;
    uint64_t fence;
    int64_t invoke_ns;    /* dlock_acquire called (the whole call, waiting included) */
    int64_t ok_ns;        /* it returned OK */
    int64_t deadline_ns;  /* the latest validity deadline seen (ACQ_OK, EXIT) */
    int64_t exit_ns;      /* section left */
    int64_t release_ns;   /* dlock_release called (the last time: a lock that lingers is
                             taken back with its token, one session) */
    bool release_invoked; /* a RELEASE_INVOKE record was seen */
    int64_t last_ns;      /* the token's last record */
    int release_rc;       /* -1: no release record */
    bool release_held;    /* a quorum still held the token when the release ran */
    int check_rc;         /* -1: no check */
    int64_t check_ns;     /* dlock_check called */
    bool lost;            /* on_lost ran */
    bool late;            /* the section ended past the validity deadline */
} hist_session;

/* What the checkers found. */
typedef struct hist_report {
    int sessions, acquire_fails;
    /* (1) fences */
    int fence_regressions;   /* acquisitions with a fence not above an earlier one's */
    int stale_accepted;      /* writes accepted below a fence accepted before they were sent */
    int stale_rejected;      /* writes refused by the register */
    int spurious_rejections; /* refused with no higher fence accepted first */
    int late_accepted;       /* accepted writes sent after their lock's validity deadline */
    /* (2) granted intervals */
    int granted_overlaps;
    int64_t granted_overlap_max_ns;
    /* (3) believed intervals */
    int believed_overlaps; /* sections whose [ok, exit] overlaps another token's */
    int64_t believed_overlap_ns;
    int late_sections;        /* sections that ended past their validity deadline */
    int late_check_not_lost;  /* of those, a dlock_check that did not say LOST */
    int late_release_held;    /* of those, a release that found the token still held
                                 on a quorum (held until then, for the overlaps) */
    int valid_release_not_ok; /* sections within validity whose release was not OK */
    int lost_callbacks;
    /* (4) writes and lost updates */
    int writes_accepted, writes_unknown;
    int64_t lost_updates; /* accepted - final counter (> 0: updates lost) */
    int64_t phantom;      /* final - accepted - unknown (> 0: writes from nowhere) */
    int duplicate_values; /* accepted writes of a value already written: lost updates */
    /* (6) resources of the workers */
    int workers_ended;
    int fd_leaks, thread_leaks;
    int64_t rss_growth_max_kb;
} hist_report;

/* Rebuild the sessions (malloc'd array in *out, count returned; -1 out of memory). */
long hist_sessions(const hist_log *log, hist_session **out);

/* Run every checker. final_value: the register's counter at the end (-1: no
 * register, skip (4)). */
void hist_check(const hist_log *log, int64_t final_value, hist_report *rep);

/* Print the report as FIG lines prefixed with `name` (FIG <name>_<what> <v> <unit>),
 * and INFO lines for the first few violations. */
void hist_print(const char *name, const hist_report *rep);

/* Print the records within window_ns of t_ns, for a post-mortem. */
void hist_dump(const hist_log *log, int64_t t_ns, int64_t window_ns);

/* Print every granted-interval overlap (at most max of them), with both sessions. */
void hist_print_overlaps(const hist_log *log, int max);

/* (5) Wait up to within_ms for the lock key of `name` to vanish from each of the n
 * servers (the default prefix "dlock:"); returns how many still have it. */
int hist_keys_left(dh_server *srv, int n, const char *name, int64_t within_ms);

/* Hex token to 16 bytes (zero when not a token). */
void hist_token_bytes(const char *hex, uint8_t out[16]);

/* Percentile p (0..100) of n values (sorted in place). 0 when n is 0. */
int64_t hist_percentile(int64_t *v, size_t n, double p);

#endif /* DLOCK_FAULTS_HISTORY_H */
