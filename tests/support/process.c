/*
 * process.c: child processes: starting one with a clean slate (dh_spawn), reaping it
 * with a grace period, and running a command to completion with its output captured
 * (dh_run).
 *
 * Every child gets PR_SET_PDEATHSIG(SIGKILL), so that a test or a bench that crashes
 * leaves no process behind, and no inherited descriptor but its standard ones: a
 * client connection kept open by a child would hide a disconnect from its server.
 */
#include "support.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define RUN_TIMEOUT_MS 120000

int dh_find_exe(const char *name, const char *envvar, char *out, size_t outlen)
{
    const char *env = envvar ? getenv(envvar) : NULL;
    if (env && *env) {
        snprintf(out, outlen, "%s", env);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    if (strchr(name, '/') != NULL) {
        snprintf(out, outlen, "%s", name);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    /* CTest's or a stripped PATH may lack the sbin directories (ip, iptables) and
     * /usr/bin, where Debian puts redis-server: they are tried after it. */
    const char *path = getenv("PATH");
    char all[2048];
    snprintf(all, sizeof all, "%s:/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin",
             path ? path : "");
    const char *p = all;
    while (*p) {
        size_t n = strcspn(p, ":");
        snprintf(out, outlen, "%.*s/%s", (int)n, p, name);
        if (n > 0 && access(out, X_OK) == 0)
            return 0;
        p += n + (p[n] == ':');
    }
    return -1;
}

/* Close every descriptor from 3 up, in a forked child (only async-signal-safe calls).
 * close_range(2) may be missing from an older kernel; fall back to a loop. */
static void close_from_3(long maxfd)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0)
        return;
#endif
    for (long fd = 3; fd < maxfd; fd++)
        close((int)fd);
}

static long max_fd(void)
{
    long m = sysconf(_SC_OPEN_MAX);
    return (m > 0 && m < 65536) ? m : 65536;
}

/* The first steps of every child: tie its life to ours, clear what it inherited from
 * the parent's signal handling, and give it /dev/null, out and err as its standard
 * descriptors (-1: /dev/null). Only async-signal-safe calls. False on failure. */
static bool child_prepare(pid_t parent, int out, int err)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) /* the parent died before prctl took effect */
        return false;
    const int defaults[] = {SIGPIPE, SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        signal(defaults[i], SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int null = open("/dev/null", O_RDWR);
    if (null < 0)
        return false;
    return dup2(null, 0) >= 0 && dup2(out >= 0 ? out : null, 1) >= 0 &&
           dup2(err >= 0 ? err : null, 2) >= 0;
}

static char **build_env(const char *const env[], char ***owned);
static void free_env(char **envp, char **owned);

pid_t dh_spawn(const char *const argv[], const dh_spawn_opts *o)
{
    /* execv's prototype predates const; it does not modify the strings. */
    union {
        const char *const *in;
        char *const *out;
    } args = {.in = argv};
    dh_spawn_opts none = {.out_fd = -1, .err_fd = -1};
    if (o == NULL)
        o = &none;
    long maxfd = max_fd();
    pid_t parent = getpid();
    /* Made before the fork: the child may only make async-signal-safe calls. */
    char **owned = NULL, **envp = environ;
    if (o->env != NULL && (envp = build_env(o->env, &owned)) == NULL) {
        fprintf(stderr, "dh: out of memory\n");
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* Only async-signal-safe calls from here on: the parent may have threads. */
        if (o->own_group)
            setpgid(0, 0);
        if (!child_prepare(parent, o->out_fd, o->err_fd))
            _exit(127);
        if (o->child_setup != NULL && o->child_setup(o->child_arg) != 0)
            _exit(126);
        close_from_3(maxfd);
        execve(argv[0], args.out, envp);
        _exit(127);
    }
    if (o->env != NULL)
        free_env(envp, owned);
    if (pid < 0) {
        fprintf(stderr, "dh: fork: %s\n", strerror(errno));
        return -1;
    }
    if (o->own_group)
        setpgid(pid, pid); /* here too, so that it holds before the child runs */
    return pid;
}

bool dh_exited(pid_t pid, int *status)
{
    pid_t r = waitpid(pid, status, WNOHANG);
    return r == pid || (r < 0 && errno == ECHILD);
}

bool dh_reap(pid_t pid, int64_t grace_ms, int *status)
{
    int st = 0;
    int64_t deadline = dh_now_ms() + grace_ms;
    bool gone;
    while (!(gone = dh_exited(pid, &st)) && dh_now_ms() < deadline)
        dh_sleep_ms(10);
    if (!gone) {
        /* The group too: a server's BGSAVE child must not outlive it. */
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
    }
    if (status)
        *status = st;
    return gone;
}

/* ---- dh_run ------------------------------------------------------------------ */

/* Length of an environment entry's name ("NAME=..." or "NAME"). */
static size_t env_name_len(const char *e)
{
    return strcspn(e, "=");
}

/* environ with env's changes applied; strings borrowed except the array itself. */
static char **build_env(const char *const env[], char ***owned)
{
    size_t n = 0, m = 0;
    while (environ[n])
        n++;
    while (env && env[m])
        m++;
    char **out = calloc(n + m + 1, sizeof *out);
    char **copies = calloc(m + 1, sizeof *copies);
    if (!out || !copies) {
        free(out);
        free(copies);
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool replaced = false;
        for (size_t j = 0; j < m && !replaced; j++) {
            size_t len = env_name_len(env[j]);
            replaced = strncmp(environ[i], env[j], len) == 0 && environ[i][len] == '=';
        }
        if (!replaced)
            out[k++] = environ[i];
    }
    for (size_t j = 0; j < m; j++) {
        copies[j] = strdup(env[j]);
        if (copies[j] && strchr(copies[j], '='))
            out[k++] = copies[j];
    }
    *owned = copies;
    return out;
}

/* Free what build_env made (either may be NULL). */
static void free_env(char **envp, char **owned)
{
    for (size_t i = 0; owned != NULL && owned[i]; i++)
        free(owned[i]);
    free(owned);
    free(envp);
}

/* Append what fd has to the buffer (truncating), or note EOF. */
static void drain(int *fd, char *buf, size_t cap, size_t *len)
{
    char tmp[4096];
    ssize_t r = read(*fd, tmp, sizeof tmp);
    if (r > 0) {
        if (buf && cap > 0 && *len < cap - 1) {
            size_t take = (size_t)r < cap - 1 - *len ? (size_t)r : cap - 1 - *len;
            memcpy(buf + *len, tmp, take);
            *len += take;
            buf[*len] = '\0';
        }
    } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(*fd);
        *fd = -1;
    }
}

int dh_run(const char *const argv[], const char *const env[], char *out, size_t outlen, char *err,
           size_t errlen)
{
    if (out && outlen)
        out[0] = '\0';
    if (err && errlen)
        err[0] = '\0';
    if (!argv || !argv[0])
        return -1;

    /* Copies of argv: execvpe wants char *const[], and a cast would drop const. */
    size_t argc = 0;
    while (argv[argc])
        argc++;
    char **av = calloc(argc + 1, sizeof *av);
    char **owned = NULL;
    char **envp = build_env(env, &owned);
    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    int result = -1;
    if (!av || !envp)
        goto out;
    for (size_t i = 0; i < argc; i++)
        if (!(av[i] = strdup(argv[i])))
            goto out;
    if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
        perror("dh: pipe2");
        goto out;
    }
    long maxfd = max_fd();
    pid_t parent = getpid();

    pid_t pid = fork();
    if (pid < 0) {
        perror("dh: fork");
        goto out;
    }
    if (pid == 0) {
        if (!child_prepare(parent, po[1], pe[1]))
            _exit(127);
        close_from_3(maxfd);
        execvpe(av[0], av, envp);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    po[1] = pe[1] = -1;

    size_t olen = 0, elen = 0;
    int status = 0;
    bool reaped = false;
    int64_t start = dh_now_ms(), reaped_at = 0;
    /* Read until both pipes close. A grandchild (dlock run's CMD) may keep them open
     * after the child exits: stop reading half a second after the child is gone. */
    while (po[0] >= 0 || pe[0] >= 0) {
        struct pollfd pfd[2] = {{.fd = po[0], .events = POLLIN}, {.fd = pe[0], .events = POLLIN}};
        int r = poll(pfd, 2, 50);
        if (r < 0 && errno != EINTR)
            break;
        if (po[0] >= 0 && (pfd[0].revents & (POLLIN | POLLHUP | POLLERR)))
            drain(&po[0], out, outlen, &olen);
        if (pe[0] >= 0 && (pfd[1].revents & (POLLIN | POLLHUP | POLLERR)))
            drain(&pe[0], err, errlen, &elen);
        if (!reaped && waitpid(pid, &status, WNOHANG) == pid) {
            reaped = true;
            reaped_at = dh_now_ms();
        }
        if (reaped && dh_now_ms() - reaped_at > 500)
            break;
        if (!reaped && dh_now_ms() - start > RUN_TIMEOUT_MS) {
            fprintf(stderr, "dh: %s still running after %d ms: killed\n", av[0], RUN_TIMEOUT_MS);
            kill(pid, SIGKILL);
        }
    }
    if (!reaped)
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    if (WIFEXITED(status))
        result = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
        result = 128 + WTERMSIG(status);

out:
    for (int i = 0; i < 2; i++) {
        if (po[i] >= 0)
            close(po[i]);
        if (pe[i] >= 0)
            close(pe[i]);
    }
    if (av)
        for (size_t i = 0; i < argc; i++)
            free(av[i]);
    free(av);
    free_env(envp, owned);
    return result;
}
