/*
 * run_signals.c: the signals and the terminal of `dlock run`: which signals we take
 * over and how we read them (a signalfd, never a handler), stopping ourselves on
 * Ctrl-Z, and handing the terminal between us and CMD as a shell would.
 *
 * Signals are blocked in every thread and read from a signalfd, so that none is
 * delivered to one of the library's threads, and the event loop sees them among its
 * other events instead of in a handler that could run at any point.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* signalfd, CLOCK_BOOTTIME */
#endif

#include "run.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

int64_t run_boot_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int run_take_signals(struct runner *r, bool sigs[NSIG])
{
    memset(sigs, 0, NSIG * sizeof sigs[0]);
    int n = 0;
    struct signalfd_siginfo si[8];
    ssize_t k;
    while ((k = read(r->sigfd, si, sizeof si)) > 0)
        for (size_t i = 0; i < (size_t)k / sizeof si[0]; i++)
            if (si[i].ssi_signo < NSIG && !sigs[si[i].ssi_signo]) {
                sigs[si[i].ssi_signo] = true;
                n++;
            }
    return n;
}

void run_signal_default(int signo)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(signo, &dfl, NULL);
}

/* Signals we take over for the whole run. A signal our parent set to be ignored
 * stays ignored, for us and for CMD (`nohup dlock run ...`, background jobs of a
 * non-interactive shell); SIGCHLD is always ours, and must not be ignored (then the
 * kernel would reap CMD for us, and its status would be lost). */
int run_signals_setup(struct runner *r)
{
    static const int wanted[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP};
    sigemptyset(&r->handled);
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        struct sigaction old;
        if (sigaction(wanted[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaddset(&r->handled, wanted[i]);
    }
    run_signal_default(SIGCHLD);
    sigaddset(&r->handled, SIGCHLD);

    /* SIGTTOU is blocked, not read: once CMD has the terminal we are in a background
     * group, and with `stty tostop` a message of ours (or taking the terminal back)
     * would stop us. Blocked, the write or tcsetpgrp simply proceeds. */
    sigset_t block = r->handled;
    sigaddset(&block, SIGTTOU);
    if (sigprocmask(SIG_BLOCK, &block, &r->orig_mask) != 0)
        return -1;
    r->sigfd = signalfd(-1, &r->handled, SFD_CLOEXEC | SFD_NONBLOCK);
    return r->sigfd >= 0 ? 0 : -1;
}

/* The terminal, if we are in its foreground process group: CMD then gets it (it
 * leads a group of its own, and a background group that reads the terminal is
 * stopped by SIGTTIN). /dev/tty rather than stdin, so that a CMD whose input is
 * redirected can still prompt (ssh, sudo). */
void run_tty_setup(struct runner *r)
{
    r->tty = -1;
    int fd = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return;
    if (tcgetpgrp(fd) == getpgrp())
        r->tty = fd;
    else
        close(fd);
}

/* Give the terminal to CMD's group, or take it back, if it is ours to give: only
 * while our group is (or CMD's group is) in the foreground, so that a run that was
 * put in the background (`bg`) does not grab the terminal from the shell. */
void run_tty_give(struct runner *r, pid_t to)
{
    if (r->tty < 0)
        return;
    pid_t fg = tcgetpgrp(r->tty);
    if (fg == getpgrp() || fg == r->pid)
        tcsetpgrp(r->tty, to);
}

/* Stop ourselves as SIGTSTP's default action would (we read SIGTSTP from sigfd, so
 * the kernel does not). CMD, if it runs, is stopped first: it must not go on while
 * nobody watches the lease, and gets SIGCONT only after the lease was checked. */
void run_suspend(struct runner *r)
{
    if (r->pid > 0) {
        kill(-r->pid, SIGSTOP);
        r->cmd_held = true;
        run_tty_give(r, getpgrp());
    }
    run_status_clear(r);
    raise(SIGSTOP);
}

int run_cancelling_signal(const bool sigs[NSIG])
{
    for (int s = 1; s < NSIG; s++)
        if (sigs[s] && s != SIGTSTP && s != SIGCHLD)
            return s;
    return 0;
}
