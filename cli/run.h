/*
 * run.h: `dlock run`, holding a lock while a command runs; what its files share.
 *
 *   dlock run [-t TTL] [-w WAIT] [-k SIGNAL] [-g GRACE] [-l LABEL] [-E N] [-v]
 *             [--min-hold D] [--once-per D] NAME -- CMD [ARG...]
 *
 * The job of `dlock run` is one promise: CMD does not run without the lock. The
 * library renews the lease in the background (auto_renew) and says when it finds the
 * lock lost; that is not enough on its own, because "lost" is only known after a
 * renewal failed, and a renewal can fail slowly (a server that stopped answering).
 * So this process also keeps its own deadline, the safe-until time (run_watch.c),
 * and stops CMD when it passes without a confirmed renewal, early enough that CMD is
 * dead before the lease can end on any server.
 *
 * `dlock elect NAME -- CMD` is a run whose lock is a leadership: taken with
 * dlock_elect (announcing --value), CMD gets DLOCK_TERM, and the end is dlock_resign.
 *
 * The shape of a run, and the file for each step:
 *   0. run_check.c: -k and -g are checked against -t before anything reaches a
 *      server (main.c has parsed the command line; the words after "--" are CMD,
 *      never options);
 *   1. run_signals.c: signals we handle are blocked and read from a signalfd, set
 *      up before the library starts any thread (its threads inherit the mask, so no
 *      signal can be delivered to them and kill the process by its default action);
 *      the terminal is handed between us and CMD as a shell would;
 *   2. run_acquire.c: acquire with auto_renew, waiting up to WAIT (the signalfd is
 *      the cancel_fd: a signal ends the wait), with a status line on a terminal;
 *      with --once-per, claim the servers' current slot (run_schedule.c): a slot
 *      that already ran ends the run as a busy lock does (-E's code);
 *   3. run_child.c: fork; the child becomes the leader of its own process group,
 *      takes the terminal if we had it, restores the signal state it inherited, and
 *      execs CMD (an exec failure comes back through a close-on-exec pipe);
 *   4. run_watch.c: poll on the signalfd (signals to forward, SIGCHLD), the lock's
 *      lost eventfd and a CLOCK_BOOTTIME timerfd armed at the safe-until time or at
 *      the SIGKILL deadline;
 *   5. run.c: CMD ends: release, exit with its status (73 if the lock was lost);
 *      with --min-hold, what is left of the hold becomes the lease, the handle is
 *      detached and the lock runs out on the servers (run_schedule.c).
 *
 * Not covered: a dlock that is stopped (SIGSTOP) or frozen cannot stop CMD in time;
 * if dlock itself dies, CMD (its direct child) gets SIGKILL from the kernel
 * (PR_SET_PDEATHSIG), but the rest of its process group is not reached.
 */
#ifndef DLOCK_CLI_RUN_H
#define DLOCK_CLI_RUN_H

#include "cli.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* The options of one `dlock run`, as main.c got them. cli_run_check fills signo,
 * grace_ms and margin_ms. Strings are borrowed from argv. */
struct cli_run_args {
    const char *name;    /* NAME */
    char **cmd;          /* CMD [ARG...], NULL-terminated, cmd[0] != NULL */
    int64_t ttl_ms;      /* -t, already in the lease range */
    int64_t wait_ms;     /* -w: CLI_WAIT_FOREVER, 0 (try once) or a duration */
    const char *label;   /* -l, NULL: none */
    const char *signal;  /* -k as typed, NULL: TERM */
    const char *grace;   /* -g as typed, NULL: TTL/4 */
    bool quiet;          /* -q: no status line while waiting */
    bool shared;         /* --shared */
    int64_t permits;     /* sem run -n K; 0: a lock */
    int conflict_exit;   /* -E: the exit status when busy or the slot already ran */
    bool conflict_quiet; /* -E given: those cases print nothing... */
    bool verbose;        /* ...unless -v */
    int64_t min_hold_ms; /* --min-hold; 0: none */
    int64_t once_per_ms; /* --once-per; 0: none */
    bool elect;          /* dlock elect: campaign (dlock_elect) rather than acquire */
    const char *value;   /* elect --value; NULL: "" */

    int signo;         /* from signal */
    int64_t grace_ms;  /* from grace */
    int64_t margin_ms; /* max(100 ms, TTL/20): see run_watch.c, "The safe-until time" */
};

/* The state of one run, shared by its steps. */
struct runner {
    const struct cli_run_args *a;
    dlock_client *client;
    dlock_lock *lock;
    char what[CLI_WHAT_LEN]; /* "run NAME", for messages (cli_what) */

    sigset_t handled;   /* what sigfd reads (blocked in every thread) */
    sigset_t orig_mask; /* the mask we were started with, for CMD */
    int sigfd;
    int timerfd; /* CLOCK_BOOTTIME */
    int lostfd;  /* the lock's eventfd; -1 once it fired (it stays readable) */
    int tty;     /* the controlling terminal while we are in its foreground, else -1 */
    bool status_shown;
    int64_t acquired_ms; /* run_boot_ms() when the lock was granted (for --min-hold) */
    char slot_var[48];   /* "DLOCK_SLOT=<unix s>" once a slot is claimed; "" */
    char term_var[48];   /* "DLOCK_TERM=<term>" of a leader (dlock elect) */

    pid_t pid;          /* CMD, also its process group; 0 before the fork */
    bool cmd_held;      /* we stopped CMD (SIGSTOP) and owe it a SIGCONT */
    bool lost;          /* the lock is known lost */
    bool stopping;      /* SIGNAL was sent because of the lock */
    bool killed;        /* SIGKILL was sent */
    int64_t kill_at_ms; /* CLOCK_BOOTTIME ms when SIGKILL is due */
};

/* ---- run_check.c ---- */

/* Check -k and -g against -t, before anything reaches a server. Returns 0, or 64
 * after printing one line that says what is wrong. */
int cli_run_check(struct cli_run_args *a);

/* ---- run_signals.c ---- */

/* CLOCK_BOOTTIME in ms: the clock of every deadline of a run, since time spent
 * suspended counts for the servers' leases too. */
int64_t run_boot_ms(void);

/* Take over our signals for the whole run (blocked, read from r->sigfd). Returns 0,
 * or -1 with errno set. */
int run_signals_setup(struct runner *r);

/* Give signo its default action back. Async-signal-safe: the child calls it between
 * fork and exec. */
void run_signal_default(int signo);

/* Read every pending signal from sigfd into sigs[] (one flag per number). Returns
 * how many distinct signals were pending. */
int run_take_signals(struct runner *r, bool sigs[NSIG]);

/* The first signal in sigs[] that asks us to give up the wait (any but SIGTSTP,
 * which stops us, and SIGCHLD, which is nobody's before CMD starts), or 0. */
int run_cancelling_signal(const bool sigs[NSIG]);

/* Stop ourselves (and CMD, if it runs) as SIGTSTP's default action would. */
void run_suspend(struct runner *r);

/* Find the terminal, if we are in its foreground process group (r->tty, else -1). */
void run_tty_setup(struct runner *r);

/* Give the terminal to process group `to`, if it is ours to give. */
void run_tty_give(struct runner *r, pid_t to);

/* ---- run_acquire.c ---- */

/* Take the lock, waiting up to WAIT. Returns 0 with r->lock set, or an exit code
 * after reporting. */
int run_acquire(struct runner *r);

/* Erase the status line, if one is shown. */
void run_status_clear(struct runner *r);

/* ---- run_schedule.c ---- */

/* The lock is busy, or this slot already ran (err DLOCK_ERR_BUSY, what dlock_errmsg()
 * says): say so unless -E asked for quiet (and -v did not ask for why); returns -E's
 * code. */
int run_conflict(struct runner *r, const char *what);

/* With --once-per, claim the servers' current slot for the lock just taken. Returns
 * true to go on (r->slot_var set), or false with *code the exit status (the caller
 * releases the lock). */
bool run_claim_slot(struct runner *r, int *code);

/* With --min-hold, after CMD ended within the lease (however it ended, even
 * interrupted: a run that started counts): keep the lock until the hold's end, as a
 * plain lease on the servers. Returns true when the handle is gone (held, or a
 * detach that failed, said here), false to release it (nothing left to hold, or the
 * hold could not be set: said here unless the lock was lost, which the release
 * reports). */
bool run_hold_rest(struct runner *r);

/* ---- run_child.c ---- */

/* Fork and exec CMD. Returns 0 with r->pid set, or an exit code after reporting (the
 * lock is still held either way; the caller releases it). */
int run_start_cmd(struct runner *r);

/* ---- run_watch.c ---- */

/* Watch CMD and the lease until CMD's process has exited; fills *si with how. */
void run_watch(struct runner *r, siginfo_t *si);

/* Whether the lock is known lost (its eventfd fired). */
bool run_lost(struct runner *r);

#endif /* DLOCK_CLI_RUN_H */
