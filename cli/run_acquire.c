/*
 * run_acquire.c: how `dlock run` takes its lock: with auto-renewal, waiting up to
 * WAIT, cancelled by a signal, and with one status line on a terminal that says who
 * holds the lock and for how long.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fmemopen */
#endif

#include "run.h"

#include "duration.h"
#include "escape.h"

#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* How often the status line is redrawn while waiting on a terminal. */
#define STATUS_PERIOD_MS 1000

void run_status_clear(struct runner *r)
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
            fputs(", held by ", f);
            cli_write_holder(f, &h);
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

/* Read the signals that came during the wait: SIGTSTP stops us (the wait goes on
 * after SIGCONT), SIGCHLD is nobody's, and any other is the user giving up. Returns
 * that signal, or 0. */
static int take_cancel(struct runner *r)
{
    bool sigs[NSIG];
    run_take_signals(r, sigs);
    if (sigs[SIGTSTP])
        run_suspend(r);
    return run_cancelling_signal(sigs);
}

/* Say that signal signo canceled the wait, and exit as for a wait that ran out. */
static int canceled(struct runner *r, int signo)
{
    char sn[32];
    cli_errline("%s: canceled by %s", r->what, cli_signal_label(signo, sn, sizeof sn));
    return CLI_EXIT_NOT_ACQUIRED;
}

/* Take the lock, waiting up to WAIT (still busy then: -E's code, run_schedule.c). A signal (sigfd
 * is the cancel_fd) ends the wait: SIGTSTP stops us and the wait goes on after SIGCONT, SIGCHLD is
 * nobody's, any other cancels. On a terminal the wait is cut into STATUS_PERIOD_MS slices so that
 * the status line can be redrawn; a slice that ends without the lock just starts the next one (a
 * release during the gap is not missed: every slice begins with an attempt). */
int run_acquire(struct runner *r)
{
    const struct cli_run_args *a = r->a;
    dlock_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.ttl_ms = a->ttl_ms;
    opts.label = a->label;
    opts.auto_renew = 1;
    opts.cancel_fd = r->sigfd;
    opts.shared = a->shared;

    bool show = !a->quiet && a->wait_ms != 0 && isatty(STDERR_FILENO);
    int64_t start = run_boot_ms();
    bool first = true;
    for (;;) {
        int64_t left = -1; /* forever */
        if (a->wait_ms != CLI_WAIT_FOREVER) {
            left = a->wait_ms - (run_boot_ms() - start);
            left = left < 0 ? 0 : left;
        }
        int64_t slice = left;
        if (show) /* the first try alone: no status line unless there is a wait */
            slice = first ? 0 : (left < 0 || left > STATUS_PERIOD_MS) ? STATUS_PERIOD_MS : left;
        first = false;
        opts.wait_ms = slice;
        int rc;
        if (a->elect) {
            dlock_elect_opts eo;
            memset(&eo, 0, sizeof eo);
            eo.lock = opts;
            eo.value = a->value;
            rc = dlock_elect(r->client, a->name, &eo, &r->lock);
        } else {
            rc = cli_take(r->client, a->name, &opts, a->permits, &r->lock);
        }
        if (rc == DLOCK_OK)
            break;
        if (rc == DLOCK_ERR_CANCELED) {
            int s = take_cancel(r);
            if (s != 0) {
                run_status_clear(r);
                return canceled(r, s);
            }
            continue;
        }
        if (rc != DLOCK_ERR_BUSY || slice == left) {
            run_status_clear(r);
            return rc == DLOCK_ERR_BUSY
                       ? run_conflict(r, a->elect ? "another candidate leads" : dlock_strerror(rc))
                       : cli_fail_call(r->what, rc);
        }
        if (show)
            status_draw(r, run_boot_ms() - start);
    }
    run_status_clear(r);
    r->acquired_ms = run_boot_ms();

    /* A signal that came as the lock was granted: the user asked to give up, and CMD
     * has not started, so let go (as `dlock acquire` does). */
    int s = take_cancel(r);
    if (s != 0) {
        (a->elect ? dlock_resign : dlock_release)(r->lock);
        r->lock = NULL;
        return canceled(r, s);
    }
    return 0;
}
