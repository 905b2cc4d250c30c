/*
 * run_watch.c: the event loop of `dlock run` while CMD runs: signals to forward, the
 * lock found lost, and the safe-until time, after which CMD is stopped.
 *
 * The safe-until time. dlock_remaining_ms() is the validity the library last
 * confirmed, on CLOCK_BOOTTIME. If CMD gets SIGNAL at
 *     safe-until = end of validity - GRACE - margin,
 * it gets SIGKILL at end of validity - margin: dead before the lease ends, even
 * when it ignores SIGNAL. The margin covers what happens between our deadline and
 * CMD's death (timer and scheduling latency, delivering SIGKILL, a loaded machine):
 * max(100 ms, TTL/20). The timer is a timerfd on CLOCK_BOOTTIME because poll's
 * timeout does not count time spent suspended, while the servers' leases do. Each
 * renewal moves the end of validity, so the deadline is recomputed after every
 * wake-up (a confirmed renewal does not wake us: the old deadline does, and finds a
 * later one).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* timerfd, waitid's WNOWAIT */
#endif

#include "run.h"

#include "duration.h"
#include "escape.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Arm the timerfd at an absolute CLOCK_BOOTTIME time in ms (0: disarm). */
static void timer_at(struct runner *r, int64_t at_ms)
{
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    if (at_ms > 0) {
        its.it_value.tv_sec = (time_t)(at_ms / 1000);
        its.it_value.tv_nsec = (long)(at_ms % 1000) * 1000000;
    }
    /* With TFD_TIMER_ABSTIME, a time already past fires at once: what we want. */
    timerfd_settime(r->timerfd, TFD_TIMER_ABSTIME, &its, NULL);
}

/* The lock is lost, or can no longer be shown to be held before GRACE + margin runs
 * out: SIGNAL to CMD's group, SIGKILL after GRACE. One line says so, now, so that
 * the log shows it before whatever CMD prints while it stops. */
static void start_stopping(struct runner *r, const char *why)
{
    const struct cli_run_args *a = r->a;
    char sn[32], grace[32];
    r->stopping = true;
    if (a->signo == SIGKILL) {
        cli_errline("%s: %s; sending SIGKILL to CMD", r->what, why);
    } else {
        cli_errline("%s: %s; sending %s to CMD, SIGKILL in %s", r->what, why,
                    cli_signal_label(a->signo, sn, sizeof sn),
                    cli_format_duration(a->grace_ms, grace, sizeof grace));
    }
    kill(-r->pid, a->signo);
    /* A stopped process keeps SIGNAL pending; SIGCONT lets it act on it (and undoes
     * our own SIGSTOP, if we held CMD). SIGKILL needs no help. */
    if (a->signo != SIGKILL && a->signo != SIGCONT && a->signo != SIGSTOP)
        kill(-r->pid, SIGCONT);
    r->cmd_held = false;
    r->kill_at_ms = run_boot_ms() + a->grace_ms;
    if (a->signo == SIGKILL) {
        r->killed = true;
        r->kill_at_ms = 0;
    }
}

/* The lock's eventfd stays readable once it fired: it is polled, never read. */
bool run_lost(struct runner *r)
{
    if (r->lostfd < 0)
        return r->lost;
    struct pollfd pf = {.fd = r->lostfd, .events = POLLIN};
    if (poll(&pf, 1, 0) == 1) {
        r->lost = true;
        r->lostfd = -1;
    }
    return r->lost;
}

/* CMD was stopped by the terminal (Ctrl-Z, or reading it from the background):
 * stop ourselves too, so that the shell sees its job stopped and gets the terminal
 * back. With SIGTSTP ignored by whoever started us, we do not stop, so neither does
 * CMD. Other stops (someone's SIGSTOP) are not ours to undo. */
static void check_stopped(struct runner *r)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)r->pid, &si, WSTOPPED | WNOHANG) != 0 || si.si_pid != r->pid)
        return;
    int sig = si.si_status;
    if (sig != SIGTSTP && sig != SIGTTIN && sig != SIGTTOU)
        return;
    if (sigismember(&r->handled, SIGTSTP))
        run_suspend(r);
    else if (sig == SIGTSTP)
        r->cmd_held = true; /* continued on the next turn */
}

/* Watch until CMD's process (the group leader) has exited. It is left a zombie
 * (WNOWAIT) so that its pid, which is also the group's id, cannot be reused while we
 * may still signal the group. Fills *si with how it ended. */
void run_watch(struct runner *r, siginfo_t *si)
{
    const struct cli_run_args *a = r->a;
    for (;;) {
        memset(si, 0, sizeof *si);
        int w = waitid(P_PID, (id_t)r->pid, si, WEXITED | WNOHANG | WNOWAIT);
        if (w == 0 && si->si_pid == r->pid)
            break;
        if (w != 0 && errno == ECHILD) {
            /* Cannot happen (SIGCHLD is not ignored, nobody else waits for it), but
             * if CMD were gone without a status, watching on would never end. */
            si->si_code = CLD_EXITED;
            si->si_status = CLI_EXIT_INTERNAL;
            break;
        }
        if (r->tty >= 0)
            check_stopped(r);

        int64_t now = run_boot_ms(), due = 0;
        if (!r->stopping) {
            int64_t left = dlock_remaining_ms(r->lock);
            if (run_lost(r) || left <= 0) {
                start_stopping(r, a->elect ? "leadership lost (a renewal found another "
                                             "owner, or reached no quorum before the lease "
                                             "ran out)"
                                           : "lock lost (a renewal found another owner, or "
                                             "reached no quorum before the lease ran out)");
            } else if (left - a->grace_ms - a->margin_ms <= 0) {
                /* Not lost yet, but the renewal is late (servers slow or away): stop
                 * CMD now, while SIGKILL can still come before the lease ends. */
                char why[128], l[32];
                snprintf(why, sizeof why, "no renewal confirmed in time (the lease may end in %s)",
                         cli_format_duration(left, l, sizeof l));
                start_stopping(r, why);
            } else {
                due = now + left - a->grace_ms - a->margin_ms;
                if (r->cmd_held) { /* safe again after our stop: let CMD go on */
                    run_tty_give(r, r->pid);
                    kill(-r->pid, SIGCONT);
                    r->cmd_held = false;
                }
            }
        }
        if (r->stopping && !r->killed) {
            if (now >= r->kill_at_ms) {
                kill(-r->pid, SIGKILL);
                r->killed = true;
            } else {
                due = r->kill_at_ms;
            }
        }
        timer_at(r, due);

        struct pollfd p[3] = {{.fd = r->sigfd, .events = POLLIN},
                              {.fd = r->timerfd, .events = POLLIN},
                              {.fd = r->lostfd, .events = POLLIN}};
        if (poll(p, 3, -1) < 0)
            continue; /* EINTR: nothing is handled, but look again */
        if (p[1].revents & POLLIN) {
            uint64_t ticks;
            ssize_t k = read(r->timerfd, &ticks, sizeof ticks);
            (void)k;
        }
        if (p[2].revents & POLLIN) {
            /* Not read: the eventfd is the library's, and stays readable. */
            r->lost = true;
            r->lostfd = -1;
        }
        if (p[0].revents & POLLIN) {
            bool sigs[NSIG];
            run_take_signals(r, sigs);
            for (int s = 1; s < NSIG; s++)
                if (sigs[s] && s != SIGCHLD && s != SIGTSTP)
                    kill(-r->pid, s); /* a zombie leader keeps the group: harmless */
            if (sigs[SIGTSTP] && !r->stopping)
                run_suspend(r);
        }
    }
}
