/*
 * run.c: `dlock run`, from the command line to the exit status: checks the options,
 * opens the client, then takes the lock, runs CMD, watches it and releases the lock,
 * each step in the file run.h names for it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* timerfd, CLOCK_BOOTTIME, waitid */
#endif

#include "run.h"

#include "escape.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* CMD's status as a shell reports it: its exit code, or 128+n for signal n. */
static int cmd_status(const siginfo_t *si)
{
    if (si->si_code == CLD_EXITED)
        return si->si_status & 0xff;
    return 128 + si->si_status;
}

/* Take the lock, run CMD, release. Returns dlock's exit status: CMD's (128+n when
 * signal n killed it, 126/127 when it could not be executed), 73 when the lock was
 * lost (or could no longer be shown to be held) while CMD ran, -E's code (75) when the
 * lock was busy or the slot already ran, else the code of what failed before CMD
 * started (64, 69, 70, 75, 77). a must have passed cli_run_check. */
static int run(dlock_client *client, const struct cli_run_args *a)
{
    struct runner r;
    memset(&r, 0, sizeof r);
    r.a = a;
    r.client = client;
    r.sigfd = r.timerfd = r.lostfd = r.tty = -1;
    cli_what(r.what, a->elect ? "elect" : "run", a->name);

    /* Before the first dlock_acquire: it may start the library's threads, which must
     * inherit the blocked signals. */
    if (run_signals_setup(&r) != 0 ||
        (r.timerfd = timerfd_create(CLOCK_BOOTTIME, TFD_CLOEXEC | TFD_NONBLOCK)) < 0) {
        cli_errline("%s: cannot set up signals and timers: %s", r.what, strerror(errno));
        return CLI_EXIT_INTERNAL;
    }
    int code = run_acquire(&r);
    if (code != 0 || r.lock == NULL)
        goto out;
    if (!run_claim_slot(&r, &code))
        goto out_release;
    if ((r.lostfd = dlock_lost_fd(r.lock)) < 0) {
        code = cli_fail_call(r.what, DLOCK_ERR_IO);
        goto out_release;
    }
    run_tty_setup(&r);
    code = run_start_cmd(&r);
    if (code != 0)
        goto out_release;

    siginfo_t si;
    run_watch(&r, &si);
    /* Whether the lock held until CMD ended, decided now (before the release, which
     * always ends it). A lease that is past the safe-until time but not over still
     * covered CMD. */
    bool lost = r.stopping || run_lost(&r) || dlock_remaining_ms(r.lock) <= 0;
    /* After a loss nothing of CMD's group may outlive it: what SIGNAL left running
     * gets SIGKILL now that the leader is gone (the pgid is still reserved by it). */
    if (r.stopping && !r.killed)
        kill(-r.pid, SIGKILL);
    /* The terminal back to us while CMD's group still exists (its zombie leader). */
    run_tty_give(&r, getpgrp());
    siginfo_t reaped;
    memset(&reaped, 0, sizeof reaped);
    while (waitid(P_PID, (id_t)r.pid, &reaped, WEXITED) != 0 && errno == EINTR) {
    }
    int status = cmd_status(&si);
    if (!r.stopping && !lost && run_hold_rest(&r)) {
        code = status;
        goto out;
    }

    int rc = (a->elect ? dlock_resign : dlock_release)(r.lock);
    r.lock = NULL;
    if (r.stopping) {
        code = CLI_EXIT_LOST; /* already said, when it started */
    } else if (lost || rc == DLOCK_ERR_LOST) {
        cli_errline("%s: %s lost while CMD ran (it exited with status %d)", r.what,
                    a->elect ? "leadership" : "lock", status);
        code = CLI_EXIT_LOST;
    } else {
        if (rc != DLOCK_OK) {
            /* CMD ended inside the lease: it ran under the lock. The lease now ends
             * by itself. */
            char detail[512];
            snprintf(detail, sizeof detail, "%s", dlock_errmsg());
            cli_errline("warning: %s: cannot release: %s%s%s%s; the lease runs out by itself",
                        r.what, dlock_strerror(rc), detail[0] ? " (" : "", detail,
                        detail[0] ? ")" : "");
        }
        code = status;
    }
    goto out;

out_release:
    (a->elect ? dlock_resign : dlock_release)(r.lock);
    r.lock = NULL;
out:
    if (r.tty >= 0)
        close(r.tty);
    if (r.timerfd >= 0)
        close(r.timerfd);
    if (r.sigfd >= 0)
        close(r.sigfd);
    return code;
}

int cli_cmd_run(struct cli *cli, char **args, const struct cmd_opts *o)
{
    struct cli_run_args a;
    memset(&a, 0, sizeof a);
    a.name = args[0];
    a.cmd = args + 2;
    a.ttl_ms = o->ttl_ms;
    a.wait_ms = o->wait_ms;
    a.label = o->label;
    a.signal = o->signal;
    a.grace = o->grace;
    a.quiet = cli->quiet;
    a.shared = o->shared;
    a.permits = o->permits;
    a.conflict_exit = o->conflict_set ? o->conflict_exit : CLI_EXIT_NOT_ACQUIRED;
    a.conflict_quiet = o->conflict_set;
    a.verbose = o->verbose;
    a.min_hold_ms = o->min_hold_ms;
    a.once_per_ms = o->once_per_ms;
    a.elect = strcmp(cli->cmd->name, "elect") == 0;
    a.value = o->value;
    /* Its own options are checked before the client is made. */
    int code = cli_run_check(&a);
    if (code != 0)
        return code;
    code = cli_client_open(cli);
    if (code != 0)
        return code;
    return run(cli->client, &a);
}

int cli_cmd_sem_run(struct cli *cli, char **args, const struct cmd_opts *o)
{
    if (o->permits == 0)
        return cli_usage_error(NULL, "sem run: missing -n K, the number of permits");
    return cli_cmd_run(cli, args, o);
}
