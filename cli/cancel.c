/*
 * cancel.c: cancelling the wait of `dlock acquire` with SIGINT, SIGTERM or SIGHUP.
 *
 * The library installs no signal handlers (a library must not take signals away from
 * the program that uses it) and offers dlock_opts.cancel_fd instead: our handler
 * writes a byte to a pipe whose read end is that descriptor. The two variables below
 * are this program's only mutable globals, because a signal handler can reach
 * nothing else. cancel_pipe_wr is set before the handler is installed; cancel_signo
 * is set by the handler, and read once the wait is over.
 *
 * `dlock run` cancels its wait differently (its signals are read from a signalfd,
 * which is also its cancel_fd: see run.h), because it must go on handling signals
 * after the wait, while CMD runs.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2 */
#endif

#include "cli.h"
#include "escape.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t cancel_pipe_wr = -1;
static volatile sig_atomic_t cancel_signo = 0;

static void on_cancel_signal(int signo)
{
    int saved = errno;
    cancel_signo = signo;
    char byte = 1;
    /* A full pipe already says "cancel"; nothing to do when this write fails. */
    if (write(cancel_pipe_wr, &byte, 1) < 0) {
    }
    errno = saved;
}

int cli_cancel_setup(void)
{
    int fds[2];
    /* Never 0 itself: main() keeps descriptors 0 to 2 open. */
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
        return 0;
    cancel_pipe_wr = fds[1];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_cancel_signal;
    sigemptyset(&sa.sa_mask);
    /* A signal our parent set to be ignored stays ignored: `nohup dlock ...` and
     * background jobs of a non-interactive shell (SIGINT ignored) must not be
     * cancelled by it. */
    static const int signals[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
        struct sigaction old;
        if (sigaction(signals[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(signals[i], &sa, NULL);
    }
    return fds[0];
}

int cli_cancel_signal(void)
{
    return cancel_signo;
}

int cli_canceled(const char *what)
{
    char sn[32];
    int signo = cli_cancel_signal();
    cli_errline("%s: canceled by %s", what,
                signo != 0 ? cli_signal_label(signo, sn, sizeof sn) : "a signal");
    return CLI_EXIT_NOT_ACQUIRED;
}
