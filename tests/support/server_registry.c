/*
 * server_registry.c: the redis-servers this process started (server_internal.h), so
 * that none outlives it: an atexit hook kills those still running, and a signal
 * handler can do the same (dh_servers_kill_all_from_signal,
 * dh_servers_die_with_signals). Each server also gets PR_SET_PDEATHSIG and a process
 * group of its own (server.c), for a test that dies without running either.
 */
#include "server_internal.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define LIVE_MAX 64 /* servers one process may run at once */

/* The files a server's directory may hold, for the signal handler's clean-up, which
 * cannot walk a directory tree. */
static const char *const g_files[] = {"redis.log", "redis.log.prev", "stdout.log", "redis.conf",
                                      "nodes.conf"};

/* ---- registry of running servers, for the atexit hook ------------------------ */

/* The one piece of global state: which servers this process started, so that the
 * atexit hook (and a signal handler, through dh_servers_kill_all_from_signal) can kill
 * them. Guarded by g_mu; g_owner is the PID that registered the hook, so that a forked
 * test child that calls exit() does not kill its parent's servers. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pid_t g_owner;
static struct {
    volatile pid_t pid;
    bool keep;
    char dir[512];
} g_live[LIVE_MAX];

static bool keep_dirs(void)
{
    const char *k = getenv("DLOCK_TEST_KEEP");
    return k && *k && strcmp(k, "0") != 0;
}

void dh__remove_dir(const char *dir, bool keep)
{
    if (!keep && !keep_dirs())
        dh_rm_tree(dir);
}

void dh__kill_and_reap(pid_t pid)
{
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

static void atexit_cleanup(void)
{
    if (getpid() != g_owner)
        return;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < LIVE_MAX; i++) {
        if (g_live[i].pid > 0) {
            dh__kill_and_reap(g_live[i].pid);
            dh__remove_dir(g_live[i].dir, g_live[i].keep);
            g_live[i].pid = 0;
        }
    }
    pthread_mutex_unlock(&g_mu);
}

static void register_hook(void)
{
    g_owner = getpid();
    atexit(atexit_cleanup);
}

/* Lock the registry with the clean-up signals blocked, so that a handler calling
 * dh_servers_kill_all_from_signal never interrupts a change half-way. */
static void live_lock(sigset_t *old)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, old);
    pthread_mutex_lock(&g_mu);
}

static void live_unlock(const sigset_t *old)
{
    pthread_mutex_unlock(&g_mu);
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

void dh__live_add(pid_t pid, const char *dir, bool keep)
{
    pthread_once(&g_once, register_hook);
    sigset_t old;
    live_lock(&old);
    if (g_owner != getpid()) {
        /* A forked test child starting its own servers: the inherited entries are
         * its parent's, not its to kill; the inherited hook now works for it. */
        memset(g_live, 0, sizeof g_live);
        g_owner = getpid();
    }
    for (int i = 0; i < LIVE_MAX; i++) {
        if (g_live[i].pid == 0) {
            snprintf(g_live[i].dir, sizeof g_live[i].dir, "%s", dir);
            g_live[i].keep = keep || keep_dirs();
            g_live[i].pid = pid; /* last: the entry is complete once it has a PID */
            break;
        }
    }
    live_unlock(&old);
}

void dh__live_remove(pid_t pid)
{
    sigset_t old;
    live_lock(&old);
    for (int i = 0; i < LIVE_MAX; i++)
        if (g_live[i].pid == pid)
            g_live[i].pid = 0;
    live_unlock(&old);
}

/* dir + "/" + name into out, with plain loops: snprintf is not async-signal-safe. */
static void join_path(char *out, size_t cap, const char *dir, const char *name)
{
    size_t n = 0;
    for (const char *p = dir; *p && n + 1 < cap; p++)
        out[n++] = *p;
    if (n + 1 < cap)
        out[n++] = '/';
    for (const char *p = name; *p && n + 1 < cap; p++)
        out[n++] = *p;
    out[n] = '\0';
}

void dh_servers_kill_all_from_signal(void)
{
    if (getpid() != g_owner)
        return;
    for (int i = 0; i < LIVE_MAX; i++) {
        pid_t pid = g_live[i].pid;
        if (pid <= 0)
            continue;
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        if (!g_live[i].keep) {
            char path[600];
            for (size_t k = 0; k < sizeof g_files / sizeof g_files[0]; k++) {
                join_path(path, sizeof path, g_live[i].dir, g_files[k]);
                unlink(path);
            }
            rmdir(g_live[i].dir);
        }
        g_live[i].pid = 0;
    }
}

/* The directory the signal handler removes after the servers' own (see
 * dh_servers_die_with_signals); written before the handler is installed. */
static char g_signal_dir[512];

static void on_fatal_signal(int sig)
{
    dh_servers_kill_all_from_signal();
    if (g_signal_dir[0])
        rmdir(g_signal_dir);
    signal(sig, SIG_DFL);
    raise(sig);
}

void dh_servers_die_with_signals(const char *extra_dir)
{
    snprintf(g_signal_dir, sizeof g_signal_dir, "%s", extra_dir ? extra_dir : "");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}
