/*
 * run_child.c: starting CMD for `dlock run`: its environment (DLOCK_NAME,
 * DLOCK_TOKEN, DLOCK_FENCE, DLOCK_SLOT), the fork, and what the child does before exec.
 *
 * We have threads (the library's), so the child may only make async-signal-safe
 * calls between fork and exec: everything it needs is prepared before the fork, and
 * an exec failure comes back to us as an errno through a close-on-exec pipe.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* execvpe, pipe2 */
#endif

#include "run.h"

#include "escape.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* CMD's environment: ours, with DLOCK_NAME, DLOCK_TOKEN and DLOCK_FENCE set,
 * DLOCK_SLOT with --once-per and DLOCK_TERM for a leader (never one inherited from an
 * outer run). Built
 * before fork: the child of a threaded process may only call async-signal-safe
 * functions, so it cannot setenv (nor malloc). NULL when out of memory. */
static char **cmd_environ(struct runner *r, char *fence_buf, size_t fence_len)
{
    size_t n = 0;
    while (environ[n] != NULL)
        n++;
    char **env = malloc((n + 6) * sizeof *env);
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
            strncmp(environ[i], "DLOCK_FENCE=", 12) != 0 &&
            strncmp(environ[i], "DLOCK_SLOT=", 11) != 0 &&
            strncmp(environ[i], "DLOCK_TERM=", 11) != 0)
            env[k++] = environ[i];
    /* Before the three below, which cmd_environ_free finds at the end. */
    if (r->slot_var[0] != '\0')
        env[k++] = r->slot_var;
    if (r->a->elect) {
        snprintf(r->term_var, sizeof r->term_var, "DLOCK_TERM=%" PRIu64, dlock_fence(r->lock));
        env[k++] = r->term_var;
    }
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
    /* The last three are ours; the last (the fence) is on the caller's stack. */
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
        _exit(CLI_EXIT_INTERNAL);
    /* main.c ignores SIGPIPE (so that dlock sees EPIPE); CMD gets the default, as
     * from any shell. Our other signals are blocked, not handled: nothing to undo
     * but the mask, which goes back to the one dlock was started with. */
    run_signal_default(SIGPIPE);
    sigprocmask(SIG_SETMASK, &r->orig_mask, NULL);
    /* glibc's execvpe allocates nothing (its PATH buffer is on the stack). */
    execvpe(r->a->cmd[0], r->a->cmd, env);
    int e = errno;
    ssize_t w = write(err_fd, &e, sizeof e);
    (void)w;
    _exit(CLI_EXIT_NOTFOUND);
}

int run_start_cmd(struct runner *r)
{
    char fence_var[48];
    char **env = cmd_environ(r, fence_var, sizeof fence_var);
    int p[2] = {-1, -1};
    if (env == NULL || pipe2(p, O_CLOEXEC) != 0) {
        cli_errline("%s: cannot start CMD: %s", r->what,
                    env == NULL ? "out of memory" : strerror(errno));
        cmd_environ_free(env);
        return CLI_EXIT_INTERNAL;
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
        run_tty_give(r, pid);
    }
    sigprocmask(SIG_SETMASK, &cur, NULL);
    close(p[1]);
    cmd_environ_free(env);
    if (pid < 0) {
        close(p[0]);
        cli_errline("%s: cannot start CMD: fork: %s", r->what, strerror(fork_errno));
        return CLI_EXIT_INTERNAL;
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
    run_tty_give(r, getpgrp());
    r->pid = 0;
    /* A shell's convention: 127 when there is no such file, 126 for anything else
     * that stops it from running (not executable, a directory, bad format). */
    const char *cmd = r->a->cmd[0];
    cli_errline("%s: cannot run \"%s\": %s", r->what, cmd, strerror(e));
    return e == ENOENT ? CLI_EXIT_NOTFOUND : CLI_EXIT_NOEXEC;
}
