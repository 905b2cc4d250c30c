/*
 * harness.c: real redis-server processes for the integration tests.
 *
 * How a server is found and kept under control (after hiredis's test.sh, which keeps
 * a PID file and a trap, and Redis's util.tcl find_available_port):
 *   - a free port comes from binding 127.0.0.1:0; another process may take it before
 *     redis-server binds it, so a server that dies with "Address already in use", or a
 *     port that answers with somebody else's process_id, makes us retry on a new port;
 *   - the child gets PR_SET_PDEATHSIG(SIGKILL) and its own process group, and every
 *     running server is in a registry that an atexit hook empties: a test that crashes
 *     or forgets a teardown leaves no server behind.
 */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define START_ATTEMPTS   8    /* new ports tried when the chosen one was taken */
#define READY_TIMEOUT_MS 5000 /* until PING must answer */
#define STOP_GRACE_MS    2000 /* SIGTERM to SIGKILL */
#define CMD_TIMEOUT_MS   2000 /* dh_cmd's connect and command timeout */
#define RUN_TIMEOUT_MS   120000
#define LIVE_MAX         64

/* ---- registry of running servers, for the atexit hook ------------------------ */

/* The one piece of global state: which servers this process started, so that the
 * atexit hook can kill them. Guarded by g_mu; g_owner is the PID that registered the
 * hook, so that a forked test child that calls exit() does not kill its parent's
 * servers. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pid_t g_owner;
static struct {
    pid_t pid;
    char dir[512];
} g_live[LIVE_MAX];

static bool keep_dirs(void)
{
    const char *k = getenv("DLOCK_TEST_KEEP");
    return k && *k && strcmp(k, "0") != 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void rm_tree(const char *dir)
{
    if (dir[0] && !keep_dirs())
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Kill pid's process group (the server and any BGSAVE child) and reap the server. */
static void kill_and_reap(pid_t pid)
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
            kill_and_reap(g_live[i].pid);
            rm_tree(g_live[i].dir);
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

static void live_add(pid_t pid, const char *dir)
{
    pthread_once(&g_once, register_hook);
    pthread_mutex_lock(&g_mu);
    if (g_owner != getpid()) {
        /* A forked test child starting its own servers: the inherited entries are
         * its parent's, not its to kill; the inherited hook now works for it. */
        memset(g_live, 0, sizeof g_live);
        g_owner = getpid();
    }
    for (int i = 0; i < LIVE_MAX; i++) {
        if (g_live[i].pid == 0) {
            g_live[i].pid = pid;
            snprintf(g_live[i].dir, sizeof g_live[i].dir, "%s", dir);
            break;
        }
    }
    pthread_mutex_unlock(&g_mu);
}

static void live_remove(pid_t pid)
{
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < LIVE_MAX; i++)
        if (g_live[i].pid == pid)
            g_live[i].pid = 0;
    pthread_mutex_unlock(&g_mu);
}

/* ---- small helpers ----------------------------------------------------------- */

int64_t dh_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void dh_sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

long long dh_slack(void)
{
    const char *v = getenv("DLOCK_TEST_SLACK");
    if (!v || !*v)
        return 1;
    char *end;
    long long n = strtoll(v, &end, 10);
    return (*end == '\0' && n >= 1) ? n : 1;
}

const char *dh_cli_path(void)
{
    const char *p = getenv("DLOCK_CLI");
    if (!p || !*p) {
        fprintf(stderr, "dh: FATAL: $DLOCK_CLI is not set (CTest sets it to the built dlock "
                        "command; run this test through ctest or set it by hand)\n");
        exit(1);
    }
    return p;
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

/* Print the last bytes of a file, to show why a server did not come up. */
static void print_tail(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "dh:   (no %s)\n", path);
        return;
    }
    char buf[2048];
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0, SEEK_SET);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    fprintf(stderr, "dh: --- tail of %s ---\n%s\ndh: --- end ---\n", path, buf);
}

/* True when the file contains needle (the server log is small). */
static bool file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

/* The value of --requirepass among the extra arguments, or NULL. */
static const char *requirepass(const dh_server *s)
{
    for (int i = 0; i + 1 < DH_EXTRA_MAX && s->extra[i]; i++)
        if (strcmp(s->extra[i], "--requirepass") == 0)
            return s->extra[i + 1];
    return NULL;
}

/* A free port on 127.0.0.1, or -1. Free only now: the caller copes with a race. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* Find redis-server: $DLOCK_REDIS_SERVER, else the PATH. */
static int find_redis(char *out, size_t outlen)
{
    const char *env = getenv("DLOCK_REDIS_SERVER");
    if (env && *env) {
        snprintf(out, outlen, "%s", env);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin:/usr/sbin";
    while (*path) {
        size_t n = strcspn(path, ":");
        snprintf(out, outlen, "%.*s/redis-server", (int)n, path);
        if (n > 0 && access(out, X_OK) == 0)
            return 0;
        path += n + (path[n] == ':');
    }
    /* Debian puts it in /usr/bin, which a stripped PATH may lack. */
    snprintf(out, outlen, "/usr/bin/redis-server");
    return access(out, X_OK) == 0 ? 0 : -1;
}

static int mkdir_p(const char *dir)
{
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    return (mkdir(tmp, 0755) < 0 && errno != EEXIST) ? -1 : 0;
}

/* ---- one server ---------------------------------------------------------------- */

/* fork/exec redis-server on s->port in s->dir. Everything the child needs is built
 * before fork(): after it, only async-signal-safe calls (the test may have threads). */
static int spawn(dh_server *s)
{
    char exe[512], portstr[16], logfile[600], outfile[600];
    if (find_redis(exe, sizeof exe) < 0) {
        fprintf(stderr, "dh: FATAL: redis-server not found (PATH or $DLOCK_REDIS_SERVER); "
                        "install it: apt-get install redis-server\n");
        return -1;
    }
    snprintf(portstr, sizeof portstr, "%d", s->port);
    snprintf(logfile, sizeof logfile, "%s/redis.log", s->dir);
    snprintf(outfile, sizeof outfile, "%s/stdout.log", s->dir);

    /* Fixed arguments first; the extra ones come last so that they win. */
    const char *fixed[] = {exe,     "--port",      portstr,  "--bind",    "127.0.0.1",
                           "--dir", s->dir,        "--save", "",          "--appendonly",
                           "no",    "--daemonize", "no",     "--logfile", logfile};
    char *argv[sizeof fixed / sizeof fixed[0] + DH_EXTRA_MAX + 1];
    size_t n = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        argv[n++] = strdup(fixed[i]);
    for (int i = 0; i < DH_EXTRA_MAX && s->extra[i]; i++)
        argv[n++] = s->extra[i];
    argv[n] = NULL;
    long maxfd = max_fd();
    pid_t parent = getpid();

    pid_t pid = fork();
    if (pid == 0) {
        /* Own process group: signals aimed at the test's group (a CLI test's
         * `kill -- -pgid`) do not reach the server; PDEATHSIG ties its life to ours. */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) /* the parent died before prctl took effect */
            _exit(127);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int in = open("/dev/null", O_RDONLY);
        int out = open(outfile, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (in < 0 || out < 0)
            _exit(127);
        dup2(in, 0);
        dup2(out, 1);
        dup2(out, 2);
        /* No inherited sockets: a test's client connection kept open by a server child
         * would hide disconnects from the other server. */
        close_from_3(maxfd);
        execv(exe, argv);
        _exit(127);
    }
    int saved = errno;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        free(argv[i]);
    if (pid < 0) {
        fprintf(stderr, "dh: fork: %s\n", strerror(saved));
        return -1;
    }
    setpgid(pid, pid); /* also here, so that it holds before the child runs */
    s->pid = pid;
    live_add(pid, s->dir);
    return 0;
}

/* Reap s->pid if it has exited. True when it is gone. */
static bool exited(dh_server *s, int *status)
{
    pid_t r = waitpid(s->pid, status, WNOHANG);
    return r == s->pid || (r < 0 && errno == ECHILD);
}

/* The process_id field of an INFO reply, or -1. */
static long info_pid(const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_STRING)
        return -1;
    const char *p = strstr(r->str, "process_id:");
    return p ? strtol(p + 11, NULL, 10) : -1;
}

enum ready { READY_OK, READY_WAIT, READY_FOREIGN };

/* One probe of the port: is our server the one answering PING? */
static enum ready probe(dh_server *s)
{
    struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
    if (!c || c->err) {
        redisFree(c);
        return READY_WAIT;
    }
    redisSetTimeout(c, tv);
    enum ready res = READY_WAIT;
    const char *pw = requirepass(s);
    redisReply *r = pw ? redisCommand(c, "AUTH %s", pw) : NULL;
    freeReplyObject(r);
    r = redisCommand(c, "PING");
    if (r && r->type == REDIS_REPLY_STATUS) {
        /* Make sure it is ours: a server of a parallel test may own this port. */
        redisReply *info = redisCommand(c, "INFO server");
        long pid = info_pid(info);
        if (pid == s->pid)
            res = READY_OK;
        else if (pid > 0)
            res = READY_FOREIGN;
        else if (info && info->type == REDIS_REPLY_ERROR) {
            /* INFO refused (ACL args we cannot authenticate for): trust our own log. */
            char log[600];
            snprintf(log, sizeof log, "%s/redis.log", s->dir);
            if (file_contains(log, "Ready to accept connections"))
                res = READY_OK;
        }
        freeReplyObject(info);
    } else if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "LOADING", 7) != 0) {
        /* -NOAUTH and the like: it answers, but we cannot ask INFO; our log decides. */
        char log[600];
        snprintf(log, sizeof log, "%s/redis.log", s->dir);
        if (file_contains(log, "Ready to accept connections"))
            res = READY_OK;
    }
    freeReplyObject(r);
    redisFree(c);
    return res;
}

/* Wait for the server to answer. 0 ready, 1 port taken by someone else, -1 failed. */
static int wait_ready(dh_server *s)
{
    char log[600];
    snprintf(log, sizeof log, "%s/redis.log", s->dir);
    int64_t deadline = dh_now_ms() + READY_TIMEOUT_MS;
    for (;;) {
        int status = 0;
        if (exited(s, &status)) {
            live_remove(s->pid);
            s->pid = 0;
            if (file_contains(log, "Address already in use"))
                return 1;
            fprintf(stderr, "dh: redis-server on port %d exited during startup (status 0x%x)\n",
                    s->port, status);
            return -1;
        }
        enum ready r = probe(s);
        if (r == READY_OK)
            return 0;
        if (r == READY_FOREIGN) {
            kill_and_reap(s->pid);
            live_remove(s->pid);
            s->pid = 0;
            return 1;
        }
        if (dh_now_ms() > deadline) {
            fprintf(stderr, "dh: redis-server on port %d did not answer PING within %d ms\n",
                    s->port, READY_TIMEOUT_MS);
            kill_and_reap(s->pid);
            live_remove(s->pid);
            s->pid = 0;
            return -1;
        }
        dh_sleep_ms(20);
    }
}

static void fail_start(const dh_server *s)
{
    char path[600];
    fprintf(stderr, "dh: FATAL: could not start redis-server (dir %s)\n", s->dir);
    snprintf(path, sizeof path, "%s/redis.log", s->dir);
    print_tail(path);
    snprintf(path, sizeof path, "%s/stdout.log", s->dir);
    print_tail(path);
}

int dh_server_start(dh_server *s, const char *const *extra_args)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; extra_args && extra_args[i]; i++) {
        if (i >= DH_EXTRA_MAX - 1) {
            fprintf(stderr, "dh: FATAL: more than %d extra redis-server arguments\n",
                    DH_EXTRA_MAX - 1);
            dh_server_stop(s);
            return -1;
        }
        s->extra[i] = strdup(extra_args[i]);
    }

    const char *base = getenv("DLOCK_TEST_TMP");
    if (!base || !*base)
        base = "/tmp";
    if (mkdir_p(base) < 0) {
        fprintf(stderr, "dh: FATAL: cannot create %s: %s\n", base, strerror(errno));
        dh_server_stop(s);
        return -1;
    }
    snprintf(s->dir, sizeof s->dir, "%s/redis-XXXXXX", base);
    if (!mkdtemp(s->dir)) {
        fprintf(stderr, "dh: FATAL: mkdtemp %s: %s\n", s->dir, strerror(errno));
        s->dir[0] = '\0';
        dh_server_stop(s);
        return -1;
    }

    for (int attempt = 0; attempt < START_ATTEMPTS; attempt++) {
        s->port = free_port();
        if (s->port <= 0) {
            fprintf(stderr, "dh: FATAL: no free port on 127.0.0.1: %s\n", strerror(errno));
            break;
        }
        snprintf(s->url, sizeof s->url, "redis://127.0.0.1:%d", s->port);
        if (spawn(s) < 0)
            break;
        int r = wait_ready(s);
        if (r == 0)
            return 0;
        if (r < 0)
            break;
        /* Port raced: start over with a new port and a clean log. */
        char log[600];
        snprintf(log, sizeof log, "%s/redis.log", s->dir);
        unlink(log);
    }
    fail_start(s);
    dh_server_stop(s);
    return -1;
}

void dh_server_kill(dh_server *s)
{
    if (s->pid > 0) {
        kill_and_reap(s->pid);
        live_remove(s->pid);
        s->pid = 0;
    }
}

int dh_servers_start(dh_server *s, int n, const char *const *extra_args)
{
    for (int i = 0; i < n; i++)
        if (dh_server_start(&s[i], extra_args) != 0) {
            dh_servers_stop(s, i);
            return -1;
        }
    return 0;
}

void dh_servers_stop(dh_server *s, int n)
{
    for (int i = 0; i < n; i++)
        dh_server_stop(&s[i]);
}

void dh_server_stop(dh_server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        kill(s->pid, SIGCONT); /* a paused server would not act on SIGTERM */
        int64_t deadline = dh_now_ms() + STOP_GRACE_MS;
        int status;
        bool gone = false;
        while (!(gone = exited(s, &status)) && dh_now_ms() < deadline)
            dh_sleep_ms(10);
        if (!gone)
            kill_and_reap(s->pid);
        live_remove(s->pid);
        s->pid = 0;
    }
    rm_tree(s->dir);
    s->dir[0] = '\0';
    for (int i = 0; i < DH_EXTRA_MAX; i++) {
        free(s->extra[i]);
        s->extra[i] = NULL;
    }
}

int dh_server_restart(dh_server *s)
{
    dh_server_kill(s);
    /* Keep the old log aside: its "Ready to accept connections" must not be taken
     * for the new process's. */
    char log[600], old[620];
    snprintf(log, sizeof log, "%s/redis.log", s->dir);
    snprintf(old, sizeof old, "%s.prev", log);
    rename(log, old);
    /* Same port: a client must find the server where it was. The port is free now;
     * only another test's bind can take it, so retry a little before giving up. */
    for (int attempt = 0; attempt < START_ATTEMPTS; attempt++) {
        if (spawn(s) < 0)
            return -1;
        int r = wait_ready(s);
        if (r == 0)
            return 0;
        if (r < 0)
            break;
        dh_sleep_ms(100);
    }
    fail_start(s);
    return -1;
}

void dh_server_pause(dh_server *s)
{
    if (s->pid > 0)
        kill(s->pid, SIGSTOP);
}

void dh_server_resume(dh_server *s)
{
    if (s->pid > 0)
        kill(s->pid, SIGCONT);
}

redisContext *dh_connect(dh_server *s)
{
    struct timeval tv = {.tv_sec = CMD_TIMEOUT_MS / 1000, .tv_usec = 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
    if (!c || c->err) {
        fprintf(stderr, "dh: connect to 127.0.0.1:%d: %s\n", s->port,
                c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    const char *pw = requirepass(s);
    if (pw) {
        redisReply *r = redisCommand(c, "AUTH %s", pw);
        bool ok = r && r->type == REDIS_REPLY_STATUS;
        if (!ok)
            fprintf(stderr, "dh: AUTH on 127.0.0.1:%d failed: %s\n", s->port,
                    r ? (r->str ? r->str : "?") : c->errstr);
        freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

redisReply *dh_cmd(dh_server *s, const char *fmt, ...)
{
    redisContext *c = dh_connect(s);
    if (!c)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r)
        fprintf(stderr, "dh: command on 127.0.0.1:%d failed: %s\n", s->port, c->errstr);
    redisFree(c);
    return r;
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
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        int in = open("/dev/null", O_RDONLY);
        if (in < 0)
            _exit(127);
        dup2(in, 0);
        dup2(po[1], 1);
        dup2(pe[1], 2);
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
    if (owned)
        for (size_t i = 0; owned[i]; i++)
            free(owned[i]);
    free(owned);
    free(envp);
    return result;
}
