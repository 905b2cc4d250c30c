/*
 * run.c: `dlock run`, holding a lock while a command runs.
 *
 * The job of this file is one promise: CMD does not run without the lock. The
 * library renews the lease in the background (auto_renew) and says when it finds the
 * lock lost; that is not enough on its own, because "lost" is only known after a
 * renewal failed, and a renewal can fail slowly (a server that stopped answering).
 * So this process also keeps its own deadline, the safe-until time (below), and
 * stops CMD when it passes without a confirmed renewal, early enough that CMD is
 * dead before the lease can end on any server.
 *
 * The shape of a run:
 *   1. signals we handle are blocked and read from a signalfd, set up before the
 *      library starts any thread (its threads inherit the mask, so no signal can be
 *      delivered to them and kill the process by its default action);
 *   2. acquire with auto_renew, waiting up to WAIT (the signalfd is the cancel_fd:
 *      a signal ends the wait), with a status line on a terminal;
 *   3. fork; the child becomes the leader of its own process group, takes the
 *      terminal if we had it, restores the signal state it inherited, and execs
 *      CMD (an exec failure comes back through a close-on-exec pipe);
 *   4. watch: poll on the signalfd (signals to forward, SIGCHLD), the lock's lost
 *      eventfd and a CLOCK_BOOTTIME timerfd armed at the safe-until time or at the
 *      SIGKILL deadline;
 *   5. CMD ends: release, exit with its status (73 if the lock was lost).
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
 *
 * Not covered: a dlock that is stopped (SIGSTOP) or frozen cannot stop CMD in time;
 * if dlock itself dies, CMD (its direct child) gets SIGKILL from the kernel
 * (PR_SET_PDEATHSIG), but the rest of its process group is not reached.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* execvpe, pipe2, signalfd, timerfd, fmemopen, sigabbrev */
#endif

#include "run.h"

#include "duration.h"
#include "escape.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

/* The exit codes this file returns itself (main.c's table, design.md). */
enum {
    RUN_EXIT_USAGE = 64,
    RUN_EXIT_INTERNAL = 70,
    RUN_EXIT_LOST = 73,
    RUN_EXIT_NOT_ACQUIRED = 75,
    RUN_EXIT_NOEXEC = 126,
    RUN_EXIT_NOTFOUND = 127
};

/* The smallest margin between SIGKILL and the end of the lease (see the top). */
#define MARGIN_MIN_MS 100
/* How often the status line is redrawn while waiting on a terminal. */
#define STATUS_PERIOD_MS 1000

extern char **environ;

/* ---- signals by name ---------------------------------------------------------- */

static const struct signame {
    const char *name;
    int signo;
} signames[] = {
    {"HUP", SIGHUP},       {"INT", SIGINT},       {"QUIT", SIGQUIT}, {"ILL", SIGILL},
    {"TRAP", SIGTRAP},     {"ABRT", SIGABRT},     {"IOT", SIGIOT},   {"BUS", SIGBUS},
    {"FPE", SIGFPE},       {"KILL", SIGKILL},     {"USR1", SIGUSR1}, {"SEGV", SIGSEGV},
    {"USR2", SIGUSR2},     {"PIPE", SIGPIPE},     {"ALRM", SIGALRM}, {"TERM", SIGTERM},
#ifdef SIGSTKFLT
    {"STKFLT", SIGSTKFLT},
#endif
    {"CHLD", SIGCHLD},     {"CONT", SIGCONT},     {"STOP", SIGSTOP}, {"TSTP", SIGTSTP},
    {"TTIN", SIGTTIN},     {"TTOU", SIGTTOU},     {"URG", SIGURG},   {"XCPU", SIGXCPU},
    {"XFSZ", SIGXFSZ},     {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH},
    {"IO", SIGIO},         {"POLL", SIGPOLL},     {"PWR", SIGPWR},   {"SYS", SIGSYS},
};

/* "SIGTERM" for messages; "signal 40" for those without a name here. */
static const char *signal_label(int signo, char *buf, size_t len)
{
    for (size_t i = 0; i < sizeof signames / sizeof signames[0]; i++)
        if (signames[i].signo == signo) {
            snprintf(buf, len, "SIG%s", signames[i].name);
            return buf;
        }
    snprintf(buf, len, "signal %d", signo);
    return buf;
}

/* A decimal number of at most 3 digits, the whole of s. -1 if not. */
static int small_number(const char *s)
{
    int v = 0, n = 0;
    for (; s[n] >= '0' && s[n] <= '9'; n++) {
        if (n == 3)
            return -1;
        v = v * 10 + (s[n] - '0');
    }
    return n > 0 && s[n] == '\0' ? v : -1;
}

/* -k: a number (1 to SIGRTMAX), or a name as kill(1) knows it, with or without
 * "SIG", in any case: TERM, sigterm, SIGUSR1, RTMIN+2, RTMAX-1. */
static int parse_signal(const char *s, int *signo)
{
    int n = small_number(s);
    if (n >= 0) {
        if (n < 1 || n > SIGRTMAX)
            return -1;
        *signo = n;
        return 0;
    }
    if (strncasecmp(s, "SIG", 3) == 0)
        s += 3;
    for (size_t i = 0; i < sizeof signames / sizeof signames[0]; i++)
        if (strcasecmp(s, signames[i].name) == 0) {
            *signo = signames[i].signo;
            return 0;
        }
    /* Real-time signals are numbered from either end of their range. */
    int base = strncasecmp(s, "RTMIN", 5) == 0   ? SIGRTMIN
               : strncasecmp(s, "RTMAX", 5) == 0 ? SIGRTMAX
                                                 : 0;
    if (base == 0)
        return -1;
    s += 5;
    int off = 0;
    if (*s != '\0') {
        bool plus = base == SIGRTMIN;
        if (*s != (plus ? '+' : '-') || (off = small_number(s + 1)) < 0)
            return -1;
        off = plus ? off : -off;
    }
    if (base + off < SIGRTMIN || base + off > SIGRTMAX)
        return -1;
    *signo = base + off;
    return 0;
}

/* ---- checking the options ------------------------------------------------------ */

int cli_run_check(struct cli_run_args *a)
{
    char err[256];
    a->signo = SIGTERM;
    if (a->signal != NULL && parse_signal(a->signal, &a->signo) != 0) {
        cli_errline(
            "run: invalid SIGNAL \"%.64s\": expected a name such as TERM, INT, HUP, KILL or "
            "USR1 (SIG optional), or a number from 1 to %d (see dlock run --help)",
            a->signal, SIGRTMAX);
        return RUN_EXIT_USAGE;
    }
    a->grace_ms = a->ttl_ms / 4;
    if (a->grace != NULL && cli_parse_duration(a->grace, &a->grace_ms, err, sizeof err) != 0) {
        cli_errline("run: invalid GRACE \"%.64s\": %s (see dlock run --help)", a->grace, err);
        return RUN_EXIT_USAGE;
    }
    char ttl[32], grace[32], margin[32];
    cli_format_duration(a->ttl_ms, ttl, sizeof ttl);
    /* Renewal runs every TTL/3: SIGNAL must come after the lease was due for renewal
     * at least once, and SIGKILL before it ends. */
    if (a->grace_ms >= (a->ttl_ms + 1) / 2) {
        cli_errline("run: GRACE %s must be shorter than TTL/2 (TTL is %s) (see dlock run --help)",
                    cli_format_duration(a->grace_ms, grace, sizeof grace), ttl);
        return RUN_EXIT_USAGE;
    }
    a->margin_ms = a->ttl_ms / 20 > MARGIN_MIN_MS ? a->ttl_ms / 20 : MARGIN_MIN_MS;
    /* The first renewal is due at TTL/3, and must be confirmed before the safe-until
     * time, which is at most the validity of an acquire (TTL less the library's
     * default drift, 1% + 2 ms) less GRACE less the margin. If that is not later than
     * TTL/3, every run would stop CMD at once: refuse the combination instead. */
    int64_t window = a->ttl_ms - (a->ttl_ms / 100 + 2) - a->grace_ms - a->margin_ms;
    if (window <= (a->ttl_ms + 2) / 3) {
        cli_errline("run: TTL %s is too short for GRACE %s: with a margin of %s, CMD would be "
                    "stopped before the first renewal at TTL/3 (see dlock run --help)",
                    ttl, cli_format_duration(a->grace_ms, grace, sizeof grace),
                    cli_format_duration(a->margin_ms, margin, sizeof margin));
        return RUN_EXIT_USAGE;
    }
    return 0;
}

/* ---- the run --------------------------------------------------------------------- */

struct runner {
    const struct cli_run_args *a;
    dlock_client *client;
    dlock_lock *lock;
    char what[DLOCK_NAME_MAX + 16]; /* "run NAME", for messages */

    sigset_t handled;   /* what sigfd reads (blocked in every thread) */
    sigset_t orig_mask; /* the mask we were started with, for CMD */
    int sigfd;
    int timerfd; /* CLOCK_BOOTTIME */
    int lostfd;  /* the lock's eventfd; -1 once it fired (it stays readable) */
    int tty;     /* the controlling terminal while we are in its foreground, else -1 */
    bool status_shown;

    pid_t pid;          /* CMD, also its process group; 0 before the fork */
    bool cmd_held;      /* we stopped CMD (SIGSTOP) and owe it a SIGCONT */
    bool lost;          /* the lock is known lost */
    bool stopping;      /* SIGNAL was sent because of the lock */
    bool killed;        /* SIGKILL was sent */
    int64_t kill_at_ms; /* CLOCK_BOOTTIME ms when SIGKILL is due */
};

static int64_t boot_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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

/* Read every pending signal from sigfd into sigs[] (one flag per number). Returns
 * how many distinct signals were pending. */
static int take_signals(struct runner *r, bool sigs[NSIG])
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

/* Signals we take over for the whole run. A signal our parent set to be ignored
 * stays ignored, for us and for CMD (`nohup dlock run ...`, background jobs of a
 * non-interactive shell); SIGCHLD is always ours, and must not be ignored (then the
 * kernel would reap CMD for us, and its status would be lost). */
static int signals_setup(struct runner *r)
{
    static const int wanted[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP};
    sigemptyset(&r->handled);
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        struct sigaction old;
        if (sigaction(wanted[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaddset(&r->handled, wanted[i]);
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGCHLD, &dfl, NULL);
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
static void tty_setup(struct runner *r)
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
static void tty_give(struct runner *r, pid_t to)
{
    if (r->tty < 0)
        return;
    pid_t fg = tcgetpgrp(r->tty);
    if (fg == getpgrp() || fg == r->pid)
        tcsetpgrp(r->tty, to);
}

/* ---- waiting for the lock ----------------------------------------------------- */

static void status_clear(struct runner *r)
{
    if (r->status_shown) {
        fputs("\r\033[K", stderr);
        r->status_shown = false;
    }
}

/* Redraw the one status line: what we wait for, who holds it, for how long. It is
 * cut to the terminal's width, since a line that wraps could not be redrawn in place
 * with '\r'. The holder description is another process's text: escaped. */
static void status_draw(struct runner *r, int64_t waited_ms)
{
    char line[1024], held[64], waited[32];
    FILE *f = fmemopen(line, sizeof line, "w");
    if (f == NULL)
        return;
    const char *name = r->a->name;
    /* The time waited first: when the line is cut, the description's end goes. */
    if (waited_ms < 60000)
        fprintf(f, "dlock: waiting %llds for ", (long long)(waited_ms / 1000));
    else
        fprintf(f, "dlock: waiting %s for ", cli_format_duration(waited_ms, waited, sizeof waited));
    cli_write_safe(f, name, strlen(name));
    dlock_holder h;
    if (dlock_inspect(r->client, name, &h) == DLOCK_OK) {
        if (h.held) {
            size_t dl = strnlen(h.description, sizeof h.description);
            fputs(", held by ", f);
            if (dl > 0)
                cli_write_safe(f, h.description, dl);
            else
                fputs("an unknown holder", f);
            if (h.remaining_ms >= 0)
                fprintf(f, " for %s more", cli_format_duration(h.remaining_ms, held, sizeof held));
        } else {
            fputs(", free now", f);
        }
    }
    long pos = ftell(f);
    fclose(f);
    size_t len = pos < 0 ? 0 : (size_t)pos < sizeof line ? (size_t)pos : sizeof line - 1;
    line[len] = '\0';

    struct winsize ws;
    size_t cols = 80;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1)
        cols = ws.ws_col;
    /* Count characters, not bytes (the line is printable ASCII and valid UTF-8 by
     * now); one column each is close enough for a status line. */
    size_t chars = 0, i = 0;
    for (; i < len; i++)
        if (((unsigned char)line[i] & 0xc0u) != 0x80u && ++chars == cols)
            break;
    line[i] = '\0';
    fprintf(stderr, "\r%s\033[K", line);
    r->status_shown = true;
}

/* Stop ourselves as SIGTSTP's default action would (we read SIGTSTP from sigfd, so
 * the kernel does not). CMD, if it runs, is stopped first: it must not go on while
 * nobody watches the lease, and gets SIGCONT only after the lease was checked. */
static void suspend_self(struct runner *r)
{
    if (r->pid > 0) {
        kill(-r->pid, SIGSTOP);
        r->cmd_held = true;
        tty_give(r, getpgrp());
    }
    status_clear(r);
    raise(SIGSTOP);
}

/* Take the lock, waiting up to WAIT. A signal (sigfd is the cancel_fd) ends the wait:
 * SIGTSTP stops us and the wait goes on after SIGCONT, SIGCHLD is nobody's, any other
 * cancels. On a terminal the wait is cut into STATUS_PERIOD_MS slices so that the
 * status line can be redrawn; a slice that ends without the lock just starts the next
 * one (a release during the gap is not missed: every slice begins with an attempt). */
static int acquire_lock(struct runner *r)
{
    const struct cli_run_args *a = r->a;
    dlock_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.ttl_ms = a->ttl_ms;
    opts.label = a->label;
    opts.auto_renew = 1;
    opts.cancel_fd = r->sigfd;

    bool show = !a->quiet && a->wait_ms != 0 && isatty(STDERR_FILENO);
    int64_t start = boot_ms();
    bool first = true;
    for (;;) {
        int64_t left = -1; /* forever */
        if (a->wait_ms != CLI_WAIT_FOREVER) {
            left = a->wait_ms - (boot_ms() - start);
            left = left < 0 ? 0 : left;
        }
        int64_t slice = left;
        if (show) /* the first try alone: no status line unless there is a wait */
            slice = first ? 0 : (left < 0 || left > STATUS_PERIOD_MS) ? STATUS_PERIOD_MS : left;
        first = false;
        opts.wait_ms = slice;
        int rc = dlock_acquire(r->client, a->name, &opts, &r->lock);
        if (rc == DLOCK_OK)
            break;
        if (rc == DLOCK_ERR_CANCELED) {
            bool sigs[NSIG];
            take_signals(r, sigs);
            if (sigs[SIGTSTP])
                suspend_self(r);
            for (int s = 1; s < NSIG; s++)
                if (sigs[s] && s != SIGTSTP && s != SIGCHLD) {
                    char sn[32];
                    status_clear(r);
                    cli_errline("%s: canceled by %s", r->what, signal_label(s, sn, sizeof sn));
                    return RUN_EXIT_NOT_ACQUIRED;
                }
            continue;
        }
        if (rc != DLOCK_ERR_BUSY || slice == left) {
            status_clear(r);
            return a->fail_call(r->what, rc);
        }
        if (show)
            status_draw(r, boot_ms() - start);
    }
    status_clear(r);

    /* A signal that came as the lock was granted: the user asked to give up, and CMD
     * has not started, so let go (as `dlock acquire` does). */
    bool sigs[NSIG];
    if (take_signals(r, sigs) > 0) {
        if (sigs[SIGTSTP])
            suspend_self(r);
        for (int s = 1; s < NSIG; s++)
            if (sigs[s] && s != SIGTSTP && s != SIGCHLD) {
                char sn[32];
                dlock_release(r->lock);
                r->lock = NULL;
                cli_errline("%s: canceled by %s", r->what, signal_label(s, sn, sizeof sn));
                return RUN_EXIT_NOT_ACQUIRED;
            }
    }
    return 0;
}

/* ---- starting CMD ----------------------------------------------------------------- */

/* CMD's environment: ours, with DLOCK_NAME, DLOCK_TOKEN and DLOCK_FENCE set. Built
 * before fork: the child of a threaded process may only call async-signal-safe
 * functions, so it cannot setenv (nor malloc). NULL when out of memory. */
static char **cmd_environ(struct runner *r, char *fence_buf, size_t fence_len)
{
    size_t n = 0;
    while (environ[n] != NULL)
        n++;
    char **env = malloc((n + 4) * sizeof *env);
    size_t name_len = strlen(r->a->name);
    char *name_var = malloc(name_len + sizeof "DLOCK_NAME=");
    char *token_var = malloc(DLOCK_TOKEN_LEN + sizeof "DLOCK_TOKEN=");
    if (env == NULL || name_var == NULL || token_var == NULL) {
        free(env);
        free(name_var);
        free(token_var);
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "DLOCK_NAME=", 11) != 0 &&
            strncmp(environ[i], "DLOCK_TOKEN=", 12) != 0 &&
            strncmp(environ[i], "DLOCK_FENCE=", 12) != 0)
            env[k++] = environ[i];
    memcpy(name_var, "DLOCK_NAME=", 11);
    memcpy(name_var + 11, r->a->name, name_len + 1);
    snprintf(token_var, DLOCK_TOKEN_LEN + sizeof "DLOCK_TOKEN=", "DLOCK_TOKEN=%s",
             dlock_token(r->lock));
    snprintf(fence_buf, fence_len, "DLOCK_FENCE=%" PRIu64, dlock_fence(r->lock));
    env[k++] = name_var;
    env[k++] = token_var;
    env[k++] = fence_buf;
    env[k] = NULL;
    return env;
}

static void cmd_environ_free(char **env)
{
    if (env == NULL)
        return;
    size_t k = 0;
    while (env[k] != NULL)
        k++;
    /* The last three are ours; the third from the end is on the caller's stack. */
    free(env[k - 3]);
    free(env[k - 2]);
    free(env);
}

/* In the child, between fork and exec: only async-signal-safe calls (we have
 * threads). Every signal is blocked here (the parent blocked them all around fork),
 * so nothing runs before exec but this. */
static void child_exec(struct runner *r, char **env, int err_fd, pid_t parent)
    __attribute__((noreturn));
static void child_exec(struct runner *r, char **env, int err_fd, pid_t parent)
{
    setpgid(0, 0);
    if (r->tty >= 0)
        tcsetpgrp(r->tty, getpid());
    /* If dlock dies (SIGKILL, the OOM killer), nobody would stop CMD when the lease
     * runs out: the kernel kills it then. Checked after, in case we were too late. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(RUN_EXIT_INTERNAL);
    /* main.c ignores SIGPIPE (so that dlock sees EPIPE); CMD gets the default, as
     * from any shell. Our other signals are blocked, not handled: nothing to undo
     * but the mask, which goes back to the one dlock was started with. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGPIPE, &dfl, NULL);
    sigprocmask(SIG_SETMASK, &r->orig_mask, NULL);
    /* glibc's execvpe allocates nothing (its PATH buffer is on the stack). */
    execvpe(r->a->cmd[0], r->a->cmd, env);
    int e = errno;
    ssize_t w = write(err_fd, &e, sizeof e);
    (void)w;
    _exit(RUN_EXIT_NOTFOUND);
}

/* Fork and exec CMD. Returns 0 with r->pid set, or an exit code after reporting (the
 * lock is still held either way; the caller releases it). */
static int start_cmd(struct runner *r)
{
    char fence_var[48];
    char **env = cmd_environ(r, fence_var, sizeof fence_var);
    int p[2] = {-1, -1};
    if (env == NULL || pipe2(p, O_CLOEXEC) != 0) {
        cli_errline("%s: cannot start CMD: %s", r->what,
                    env == NULL ? "out of memory" : strerror(errno));
        cmd_environ_free(env);
        return RUN_EXIT_INTERNAL;
    }
    sigset_t all, cur;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &cur);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        child_exec(r, env, p[1], parent);
    int fork_errno = errno;
    if (pid > 0) {
        /* Both sides set the group (and the terminal), so that neither order of
         * running after fork leaves a window where a signal to -pid finds no group. */
        setpgid(pid, pid);
        r->pid = pid;
        tty_give(r, pid);
    }
    sigprocmask(SIG_SETMASK, &cur, NULL);
    close(p[1]);
    cmd_environ_free(env);
    if (pid < 0) {
        close(p[0]);
        cli_errline("%s: cannot start CMD: fork: %s", r->what, strerror(fork_errno));
        return RUN_EXIT_INTERNAL;
    }

    /* EOF: exec succeeded (the pipe closed on exec). An int: exec failed, errno. */
    int e = 0;
    ssize_t k;
    while ((k = read(p[0], &e, sizeof e)) < 0 && errno == EINTR) {
    }
    close(p[0]);
    if (k != (ssize_t)sizeof e)
        return 0;

    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    tty_give(r, getpgrp());
    r->pid = 0;
    /* A shell's convention: 127 when there is no such file, 126 for anything else
     * that stops it from running (not executable, a directory, bad format). */
    const char *cmd = r->a->cmd[0];
    cli_errline("%s: cannot run \"%s\": %s", r->what, cmd, strerror(e));
    return e == ENOENT ? RUN_EXIT_NOTFOUND : RUN_EXIT_NOEXEC;
}

/* ---- watching CMD and the lease ----------------------------------------------------- */

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
                    signal_label(a->signo, sn, sizeof sn),
                    cli_format_duration(a->grace_ms, grace, sizeof grace));
    }
    kill(-r->pid, a->signo);
    /* A stopped process keeps SIGNAL pending; SIGCONT lets it act on it (and undoes
     * our own SIGSTOP, if we held CMD). SIGKILL needs no help. */
    if (a->signo != SIGKILL && a->signo != SIGCONT && a->signo != SIGSTOP)
        kill(-r->pid, SIGCONT);
    r->cmd_held = false;
    r->kill_at_ms = boot_ms() + a->grace_ms;
    if (a->signo == SIGKILL) {
        r->killed = true;
        r->kill_at_ms = 0;
    }
}

/* Whether the lock's eventfd says lost (it stays readable once it fired). */
static bool lost_fd_ready(struct runner *r)
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
        suspend_self(r);
    else if (sig == SIGTSTP)
        r->cmd_held = true; /* continued on the next turn */
}

/* Watch until CMD's process (the group leader) has exited. It is left a zombie
 * (WNOWAIT) so that its pid, which is also the group's id, cannot be reused while we
 * may still signal the group. Fills *si with how it ended. */
static void watch(struct runner *r, siginfo_t *si)
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
            si->si_status = RUN_EXIT_INTERNAL;
            break;
        }
        if (r->tty >= 0)
            check_stopped(r);

        int64_t now = boot_ms(), due = 0;
        if (!r->stopping) {
            int64_t left = dlock_remaining_ms(r->lock);
            if (lost_fd_ready(r) || left <= 0) {
                start_stopping(r, "lock lost (a renewal found another owner, or reached no "
                                  "quorum before the lease ran out)");
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
                    tty_give(r, r->pid);
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
            take_signals(r, sigs);
            for (int s = 1; s < NSIG; s++)
                if (sigs[s] && s != SIGCHLD && s != SIGTSTP)
                    kill(-r->pid, s); /* a zombie leader keeps the group: harmless */
            if (sigs[SIGTSTP] && !r->stopping)
                suspend_self(r);
        }
    }
}

/* ---- the command -------------------------------------------------------------------- */

/* CMD's status as a shell reports it: its exit code, or 128+n for signal n. */
static int cmd_status(const siginfo_t *si)
{
    if (si->si_code == CLD_EXITED)
        return si->si_status & 0xff;
    return 128 + si->si_status;
}

int cli_run(dlock_client *client, const struct cli_run_args *a)
{
    struct runner r;
    memset(&r, 0, sizeof r);
    r.a = a;
    r.client = client;
    r.sigfd = r.timerfd = r.lostfd = r.tty = -1;
    snprintf(r.what, sizeof r.what, "run %s", a->name);

    /* Before the first dlock_acquire: it may start the library's threads, which must
     * inherit the blocked signals. */
    if (signals_setup(&r) != 0 ||
        (r.timerfd = timerfd_create(CLOCK_BOOTTIME, TFD_CLOEXEC | TFD_NONBLOCK)) < 0) {
        cli_errline("%s: cannot set up signals and timers: %s", r.what, strerror(errno));
        return RUN_EXIT_INTERNAL;
    }
    int code = acquire_lock(&r);
    if (code != 0 || r.lock == NULL)
        goto out;
    if ((r.lostfd = dlock_lost_fd(r.lock)) < 0) {
        code = a->fail_call(r.what, DLOCK_ERR_IO);
        goto out_release;
    }
    tty_setup(&r);
    code = start_cmd(&r);
    if (code != 0)
        goto out_release;

    siginfo_t si;
    watch(&r, &si);
    /* Whether the lock held until CMD ended, decided now (before the release, which
     * always ends it). A lease that is past the safe-until time but not over still
     * covered CMD. */
    bool lost = r.stopping || lost_fd_ready(&r) || dlock_remaining_ms(r.lock) <= 0;
    /* After a loss nothing of CMD's group may outlive it: what SIGNAL left running
     * gets SIGKILL now that the leader is gone (the pgid is still reserved by it). */
    if (r.stopping && !r.killed)
        kill(-r.pid, SIGKILL);
    /* The terminal back to us while CMD's group still exists (its zombie leader). */
    tty_give(&r, getpgrp());
    siginfo_t reaped;
    memset(&reaped, 0, sizeof reaped);
    while (waitid(P_PID, (id_t)r.pid, &reaped, WEXITED) != 0 && errno == EINTR) {
    }
    int status = cmd_status(&si);

    int rc = dlock_release(r.lock);
    r.lock = NULL;
    if (r.stopping) {
        code = RUN_EXIT_LOST; /* already said, when it started */
    } else if (lost || rc == DLOCK_ERR_LOST) {
        cli_errline("%s: lock lost while CMD ran (it exited with status %d)", r.what, status);
        code = RUN_EXIT_LOST;
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
    dlock_release(r.lock);
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
