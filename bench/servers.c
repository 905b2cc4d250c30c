/*
 * servers.c: the redis-server processes a run measures, and connections to them.
 *
 * By default a run starts its own servers (after tests/harness, which follows
 * hiredis's test.sh and Redis's util.tcl find_available_port): 127.0.0.1 only, a free
 * port from binding port 0 (another process may take it before redis-server binds it,
 * so a server that dies or answers with somebody else's process_id is retried on a
 * new port), one directory each under a mkdtemp() directory, no persistence. They must
 * not outlive the run whatever happens to it:
 *   - the child asks for SIGKILL when its parent dies (PR_SET_PDEATHSIG), which covers
 *     a bench killed with SIGKILL or crashing;
 *   - an atexit hook stops them on every exit() path;
 *   - SIGINT, SIGTERM and SIGHUP run a handler that kills them, removes their files
 *     and then dies of the same signal.
 * The handler can only use async-signal-safe calls, so what it needs (PIDs, paths) is
 * prepared before it is installed, in the one piece of global state below.
 *
 * With -s URLS the run uses the given servers instead: nothing is started or stopped,
 * and the keys the bench wrote (all under BENCH_PREFIX) are deleted at the end.
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
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

#define START_ATTEMPTS   8    /* ports tried per server */
#define READY_TIMEOUT_MS 5000 /* until PING must answer */
#define STOP_GRACE_MS    2000 /* SIGTERM to SIGKILL */

/*
 * The one global: what the signal handler and the atexit hook must clean up. Written
 * by the main thread only, before the handlers can see a new entry (pid is written
 * last, and entries are never reused within a run).
 */
static struct {
    bench_servers *ss; /* for the atexit hook */
    volatile sig_atomic_t armed;
    pid_t pid[BENCH_MAX_NODES * START_ATTEMPTS];
    char files[BENCH_MAX_NODES * START_ATTEMPTS][2][600]; /* redis.log, stdout.log */
    char dirs[BENCH_MAX_NODES * START_ATTEMPTS][512];
    int n;
    char tmpdir[512];
} g_clean;

/* Kill every server we started, remove the files we know of, and die of sig. Only
 * async-signal-safe calls. */
static void on_signal(int sig)
{
    if (g_clean.armed) {
        for (int i = 0; i < g_clean.n; i++) {
            if (g_clean.pid[i] <= 0)
                continue;
            kill(g_clean.pid[i], SIGKILL);
            waitpid(g_clean.pid[i], NULL, 0);
            unlink(g_clean.files[i][0]);
            unlink(g_clean.files[i][1]);
            rmdir(g_clean.dirs[i]);
        }
        rmdir(g_clean.tmpdir);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Every exit() path, including a failure half-way through a start. */
static void at_exit(void)
{
    if (g_clean.ss != NULL)
        servers_stop(g_clean.ss);
}

/* Arm the atexit hook and the signal handlers, once, before the first fork. */
static void install_cleanup(bench_servers *ss)
{
    g_clean.ss = ss;
    snprintf(g_clean.tmpdir, sizeof g_clean.tmpdir, "%s", ss->tmpdir);
    atexit(at_exit);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    g_clean.armed = 1;
}

/* Block the cleanup signals while the table of PIDs changes. */
/* Block the cleanup signals while the table of PIDs changes, so that the handler
 * never sees half an entry. */
static void block_signals(sigset_t *old)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, old);
}

static void restore_signals(const sigset_t *old)
{
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* ---- processes -------------------------------------------------------------- */

/* Resolved before fork(): execvp() in the child could allocate. */
int find_exe(const char *name, const char *envvar, char *out, size_t outlen)
{
    const char *env = envvar ? getenv(envvar) : NULL;
    if (env && *env) {
        snprintf(out, outlen, "%s", env);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t n = strcspn(path, ":");
        snprintf(out, outlen, "%.*s/%s", (int)n, path, name);
        if (n > 0 && access(out, X_OK) == 0)
            return 0;
        path += n + (path[n] == ':');
    }
    /* Debian puts both redis tools in /usr/bin, which a stripped PATH may lack. */
    snprintf(out, outlen, "/usr/bin/%s", name);
    return access(out, X_OK) == 0 ? 0 : -1;
}

/* Close every descriptor from 3 up, in a forked child (async-signal-safe only). */
static void close_from_3(long maxfd)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0)
        return;
#endif
    for (long fd = 3; fd < maxfd; fd++)
        close((int)fd);
}

pid_t spawn_process(const char *const argv[], int cpu, int out_fd, int err_fd, bool own_group)
{
    /* execv's prototype predates const; it does not modify the strings. */
    union {
        const char *const *in;
        char *const *out;
    } args = {.in = argv};
    long maxfd = sysconf(_SC_OPEN_MAX);
    if (maxfd <= 0 || maxfd > 65536)
        maxfd = 65536;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* Only async-signal-safe calls from here on: the bench has threads. */
        if (own_group)
            setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) /* the parent died before prctl took effect */
            _exit(127);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (place_pin_self(cpu) != 0)
            _exit(126);
        int in = open("/dev/null", O_RDONLY);
        if (in < 0 || dup2(in, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
            _exit(127);
        close_from_3(maxfd);
        execv(argv[0], args.out);
        _exit(127);
    }
    if (pid < 0) {
        fprintf(stderr, "dlock-bench: fork: %s\n", strerror(errno));
        return -1;
    }
    if (own_group)
        setpgid(pid, pid); /* here too, so that it holds before the child runs */
    return pid;
}

/* ---- starting our own servers ----------------------------------------------- */

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

/* Sleep that survives signals (the handler re-raises, so EINTR means another one). */
static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* fork/exec one redis-server on s->port in s->dir, pinned to cpu. */
static int spawn_server(bench_server *s, const char *exe, int cpu)
{
    char port[16], logfile[600], outfile[600];
    snprintf(port, sizeof port, "%d", s->port);
    snprintf(logfile, sizeof logfile, "%s/redis.log", s->dir);
    snprintf(outfile, sizeof outfile, "%s/stdout.log", s->dir);
    int out = open(outfile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        fprintf(stderr, "dlock-bench: %s: %s\n", outfile, strerror(errno));
        return -1;
    }
    const char *argv[] = {
        exe, "--port",       port, "--bind",      "127.0.0.1", "--dir",     s->dir,  "--save",
        "",  "--appendonly", "no", "--daemonize", "no",        "--logfile", logfile, NULL};
    sigset_t old;
    block_signals(&old);
    pid_t pid = spawn_process(argv, cpu, out, out, true);
    if (pid > 0 && g_clean.n < (int)(sizeof g_clean.pid / sizeof g_clean.pid[0])) {
        int i = g_clean.n;
        snprintf(g_clean.files[i][0], sizeof g_clean.files[i][0], "%s", logfile);
        snprintf(g_clean.files[i][1], sizeof g_clean.files[i][1], "%s", outfile);
        snprintf(g_clean.dirs[i], sizeof g_clean.dirs[i], "%s", s->dir);
        g_clean.pid[i] = pid;
        g_clean.n++;
    }
    restore_signals(&old);
    close(out);
    if (pid < 0)
        return -1;
    s->pid = pid;
    return 0;
}

/* Forget pid in the cleanup table (it was reaped). */
/* Forget a reaped PID in the cleanup table: the kernel may give it to someone else,
 * whom the handler must not kill. */
static void forget_pid(pid_t pid)
{
    sigset_t old;
    block_signals(&old);
    for (int i = 0; i < g_clean.n; i++)
        if (g_clean.pid[i] == pid)
            g_clean.pid[i] = 0;
    restore_signals(&old);
}

/* A numeric field ("name:value" at the start of a line) of an INFO reply, or -1. */
static long info_long(const redisReply *r, const char *field)
{
    if (r == NULL || r->type != REDIS_REPLY_STRING)
        return -1;
    size_t flen = strlen(field);
    for (const char *p = r->str; (p = strstr(p, field)) != NULL; p += flen) {
        if ((p == r->str || p[-1] == '\n') && p[flen] == ':')
            return strtol(p + flen + 1, NULL, 10);
    }
    return -1;
}

enum ready { READY_OK, READY_WAIT, READY_FOREIGN };

/* One probe: is our server the one answering on its port? */
static enum ready probe(const bench_server *s)
{
    struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
    if (c == NULL || c->err) {
        redisFree(c);
        return READY_WAIT;
    }
    redisSetTimeout(c, tv);
    enum ready res = READY_WAIT;
    redisReply *r = redisCommand(c, "INFO server");
    long pid = info_long(r, "process_id");
    if (pid == s->pid)
        res = READY_OK;
    else if (pid > 0)
        res = READY_FOREIGN;
    freeReplyObject(r);
    redisFree(c);
    return res;
}

/* Print the end of a server's log, to show why it did not start. */
static void print_tail(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    char buf[1024];
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0, SEEK_SET);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    fprintf(stderr, "dlock-bench: --- tail of %s ---\n%s\n", path, buf);
}

/* Kill and reap one server of ours. */
/* Send sig, wait up to grace_ms for the exit, then SIGKILL; reap in every case. */
static void kill_server(bench_server *s, int sig, int grace_ms)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, sig);
    for (int waited = 0;; waited += 10) {
        pid_t r = waitpid(s->pid, NULL, WNOHANG);
        if (r == s->pid || (r < 0 && errno == ECHILD))
            break;
        if (waited >= grace_ms) {
            kill(s->pid, SIGKILL);
            while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
                ;
            break;
        }
        sleep_ms(10);
    }
    forget_pid(s->pid);
    s->pid = 0;
}

/* Wait until s answers as itself. 0 ready; 1 retry on another port; -1 give up. */
static int wait_ready(bench_server *s)
{
    char log[600];
    snprintf(log, sizeof log, "%s/redis.log", s->dir);
    for (int waited = 0; waited < READY_TIMEOUT_MS; waited += 20) {
        enum ready r = probe(s);
        if (r == READY_OK)
            return 0;
        if (r == READY_FOREIGN) {
            kill_server(s, SIGKILL, 0);
            return 1; /* somebody else's server took the port */
        }
        int status;
        pid_t w = waitpid(s->pid, &status, WNOHANG);
        if (w == s->pid) {
            forget_pid(s->pid);
            s->pid = 0;
            FILE *f = fopen(log, "r");
            char line[512];
            bool in_use = false;
            while (f && !in_use && fgets(line, sizeof line, f))
                in_use = strstr(line, "Address already in use") != NULL;
            if (f)
                fclose(f);
            if (in_use)
                return 1;
            fprintf(stderr, "dlock-bench: redis-server on port %d exited (status %d)\n", s->port,
                    status);
            print_tail(log);
            return -1;
        }
        sleep_ms(20);
    }
    fprintf(stderr, "dlock-bench: redis-server on port %d did not answer within %d ms\n", s->port,
            READY_TIMEOUT_MS);
    print_tail(log);
    kill_server(s, SIGKILL, 0);
    return -1;
}

/* redis_version of node 1, for the report (the baselines run there too). */
static void fill_version(bench_servers *ss)
{
    snprintf(ss->version, sizeof ss->version, "unknown");
    redisContext *c = server_connect(&ss->s[0]);
    if (c == NULL)
        return;
    redisReply *r = redisCommand(c, "INFO server");
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "redis_version:");
        if (p != NULL)
            snprintf(ss->version, sizeof ss->version, "%.*s", (int)strcspn(p + 14, "\r\n"), p + 14);
    }
    freeReplyObject(r);
    redisFree(c);
}

int servers_start(bench_servers *ss, int n, int cpu)
{
    memset(ss, 0, sizeof *ss);
    ss->own = true;
    char exe[512];
    if (find_exe("redis-server", "DLOCK_REDIS_SERVER", exe, sizeof exe) != 0) {
        fprintf(stderr, "dlock-bench: redis-server not found (PATH or $DLOCK_REDIS_SERVER); "
                        "install it: apt-get install redis-server\n");
        return -1;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(ss->tmpdir, sizeof ss->tmpdir, "%s/dlock-bench.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(ss->tmpdir) == NULL) {
        fprintf(stderr, "dlock-bench: mkdtemp %s: %s\n", ss->tmpdir, strerror(errno));
        return -1;
    }
    install_cleanup(ss);
    /* Start them all, then wait for each: the waits overlap. */
    for (int i = 0; i < n; i++) {
        bench_server *s = &ss->s[i];
        snprintf(s->host, sizeof s->host, "127.0.0.1");
        snprintf(s->dir, sizeof s->dir, "%s/node%d", ss->tmpdir, i + 1);
        if (mkdir(s->dir, 0700) != 0) {
            fprintf(stderr, "dlock-bench: mkdir %s: %s\n", s->dir, strerror(errno));
            return -1;
        }
        ss->n = i + 1;
        if ((s->port = free_port()) < 0 || spawn_server(s, exe, cpu) != 0)
            return -1;
    }
    for (int i = 0; i < n; i++) {
        bench_server *s = &ss->s[i];
        int rc = wait_ready(s);
        for (int attempt = 1; rc == 1 && attempt < START_ATTEMPTS; attempt++) {
            if ((s->port = free_port()) < 0 || spawn_server(s, exe, cpu) != 0)
                return -1;
            rc = wait_ready(s);
        }
        if (rc != 0) {
            if (rc == 1)
                fprintf(stderr, "dlock-bench: no free port after %d attempts\n", START_ATTEMPTS);
            return -1;
        }
        snprintf(s->url, sizeof s->url, "redis://127.0.0.1:%d", s->port);
    }
    fill_version(ss);
    return 0;
}

/* ---- -s URLS ---------------------------------------------------------------- */

/* Parse redis://[[user]:password@]host[:port][/db] into s. Percent-encoding is not
 * decoded here; the URL goes to dlock_client_new as given, which does decode it. */
static int parse_url(const char *url, size_t len, bench_server *s)
{
    memset(s, 0, sizeof *s);
    snprintf(s->url, sizeof s->url, "%.*s", (int)len, url);
    const char *p = s->url, *end = s->url + strlen(s->url);
    if (strncmp(p, "redis://", 8) != 0) {
        fprintf(stderr, "dlock-bench: -s: only redis:// URLs are supported: %s\n", s->url);
        return -1;
    }
    p += 8;
    const char *at = memchr(p, '@', (size_t)(end - p));
    if (at != NULL) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon == NULL) {
            fprintf(stderr, "dlock-bench: -s: write user:password@ or :password@\n");
            return -1;
        }
        snprintf(s->user, sizeof s->user, "%.*s", (int)(colon - p), p);
        snprintf(s->password, sizeof s->password, "%.*s", (int)(at - colon - 1), colon + 1);
        p = at + 1;
    }
    const char *hend;
    if (*p == '[') {
        hend = memchr(p, ']', (size_t)(end - p));
        if (hend == NULL) {
            fprintf(stderr, "dlock-bench: -s: unclosed [ in %s\n", s->url);
            return -1;
        }
        snprintf(s->host, sizeof s->host, "%.*s", (int)(hend - p - 1), p + 1);
        hend++;
    } else {
        hend = p + strcspn(p, ":/");
        snprintf(s->host, sizeof s->host, "%.*s", (int)(hend - p), p);
    }
    s->port = 6379;
    if (*hend == ':')
        s->port = (int)strtol(hend + 1, NULL, 10);
    const char *slash = strchr(hend, '/');
    if (slash != NULL && slash[1])
        s->db = (int)strtol(slash + 1, NULL, 10);
    if (s->host[0] == '\0' || s->port <= 0 || s->port > 65535) {
        fprintf(stderr, "dlock-bench: -s: bad host or port in %s\n", s->url);
        return -1;
    }
    return 0;
}

int servers_use(bench_servers *ss, const char *urls)
{
    memset(ss, 0, sizeof *ss);
    const char *p = urls;
    while (*p) {
        size_t len = strcspn(p, ",");
        if (len > 0) {
            if (ss->n == BENCH_MAX_NODES) {
                fprintf(stderr, "dlock-bench: -s: at most %d servers\n", BENCH_MAX_NODES);
                return -1;
            }
            if (parse_url(p, len, &ss->s[ss->n]) != 0)
                return -1;
            ss->n++;
        }
        p += len + (p[len] == ',');
    }
    if (ss->n == 0) {
        fprintf(stderr, "dlock-bench: -s: no server given\n");
        return -1;
    }
    for (int i = 0; i < ss->n; i++) {
        redisContext *c = server_connect(&ss->s[i]);
        if (c == NULL)
            return -1;
        redisFree(c);
    }
    fill_version(ss);
    g_clean.ss = ss;
    atexit(at_exit);
    return 0;
}

/* Delete every key under BENCH_PREFIX from a server we do not own. */
static void delete_bench_keys(const bench_server *s)
{
    redisContext *c = server_connect(s);
    if (c == NULL)
        return;
    char cursor[32] = "0";
    long deleted = 0;
    do {
        redisReply *r = redisCommand(c, "SCAN %s MATCH %s* COUNT 1000", cursor, BENCH_PREFIX);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            freeReplyObject(r);
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements; i++)
            redisAppendCommand(c, "UNLINK %b", keys->element[i]->str, keys->element[i]->len);
        for (size_t i = 0; i < keys->elements; i++) {
            void *rep;
            if (redisGetReply(c, &rep) != REDIS_OK)
                break;
            freeReplyObject(rep);
            deleted++;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    if (deleted > 0)
        progress("deleted %ld bench keys from %s:%d", deleted, s->host, s->port);
    redisFree(c);
}

/* Ours: SIGTERM, then SIGKILL after the grace period; their files and directories
 * removed unless $DLOCK_BENCH_KEEP is set (for reading a server's log). Given: our
 * keys deleted. */
void servers_stop(bench_servers *ss)
{
    if (!ss->own) {
        for (int i = 0; i < ss->n; i++)
            delete_bench_keys(&ss->s[i]);
        /* redis-benchmark's own key (the baselines run on node 1). */
        redisContext *c = ss->n > 0 ? server_connect(&ss->s[0]) : NULL;
        if (c != NULL)
            freeReplyObject(redisCommand(c, "UNLINK key:__rand_int__"));
        redisFree(c);
        ss->n = 0;
        return;
    }
    /* SIGTERM them all first, so their shutdowns overlap. */
    for (int i = 0; i < ss->n; i++)
        if (ss->s[i].pid > 0)
            kill(ss->s[i].pid, SIGTERM);
    for (int i = 0; i < ss->n; i++) {
        kill_server(&ss->s[i], SIGTERM, STOP_GRACE_MS);
        if (ss->s[i].dir[0] && getenv("DLOCK_BENCH_KEEP") == NULL) {
            char path[600];
            snprintf(path, sizeof path, "%s/redis.log", ss->s[i].dir);
            unlink(path);
            snprintf(path, sizeof path, "%s/stdout.log", ss->s[i].dir);
            unlink(path);
            rmdir(ss->s[i].dir);
        }
    }
    if (ss->tmpdir[0] && getenv("DLOCK_BENCH_KEEP") == NULL)
        rmdir(ss->tmpdir);
    ss->n = 0;
    ss->tmpdir[0] = '\0';
}

void servers_urls(const bench_servers *ss, int first, int n, char *out, size_t outlen)
{
    size_t pos = 0;
    out[0] = '\0';
    for (int i = first; i < first + n && i < ss->n; i++) {
        int w = snprintf(out + pos, outlen - pos, "%s%s", i > first ? "," : "", ss->s[i].url);
        if (w < 0 || (size_t)w >= outlen - pos)
            break;
        pos += (size_t)w;
    }
}

/* ---- admin connections ------------------------------------------------------ */

/* Admin commands fail loudly: an error reply is printed and treated like an I/O
 * error, since the bench never sends a command that may legitimately fail. */
redisReply *server_cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (r == NULL) {
        fprintf(stderr, "dlock-bench: redis: %s\n", c->errstr);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "dlock-bench: redis: -%s\n", r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* hiredis 0.14 has no redisOptions: AUTH and SELECT are sent by hand. The PING
 * without a password makes sure it is a Redis server before the run relies on it. */
redisContext *server_connect(const bench_server *s)
{
    struct timeval tv = {.tv_sec = 10, .tv_usec = 0};
    redisContext *c = redisConnectWithTimeout(s->host, s->port, tv);
    if (c == NULL || c->err) {
        fprintf(stderr, "dlock-bench: connect %s:%d: %s\n", s->host, s->port,
                c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    redisReply *r = NULL;
    if (s->password[0] && s->user[0])
        r = server_cmd(c, "AUTH %s %s", s->user, s->password);
    else if (s->password[0])
        r = server_cmd(c, "AUTH %s", s->password);
    else
        r = server_cmd(c, "PING");
    if (r != NULL && s->db != 0) {
        freeReplyObject(r);
        r = server_cmd(c, "SELECT %d", s->db);
    }
    if (r == NULL) {
        redisFree(c);
        return NULL;
    }
    freeReplyObject(r);
    return c;
}

/* ---- statistics snapshots --------------------------------------------------- */

/* The connections stay open across both snapshots: a new connection's AUTH or
 * SELECT between them would count as a workload command. */
int stats_open(const bench_servers *ss, int n, stats_conns *sc)
{
    memset(sc, 0, sizeof *sc);
    for (int i = 0; i < n && i < ss->n; i++) {
        if ((sc->c[i] = server_connect(&ss->s[i])) == NULL) {
            stats_close(sc);
            return -1;
        }
        sc->n = i + 1;
    }
    return 0;
}

void stats_close(stats_conns *sc)
{
    for (int i = 0; i < sc->n; i++)
        redisFree(sc->c[i]);
    sc->n = 0;
}

/* Add the cmdstat_NAME:calls=N lines of an INFO reply to out. */
static void add_cmdstats(srv_stats *out, const char *info)
{
    for (const char *p = info; (p = strstr(p, "\ncmdstat_")) != NULL;) {
        p += 9;
        size_t len = strcspn(p, ":");
        const char *calls = strstr(p, ":calls=");
        if (calls == NULL || len >= sizeof out->cmd[0])
            continue;
        long long v = strtoll(calls + 7, NULL, 10);
        int k;
        for (k = 0; k < out->ncmd; k++)
            if (strncmp(out->cmd[k], p, len) == 0 && out->cmd[k][len] == '\0')
                break;
        if (k == out->ncmd) {
            if (out->ncmd == STATS_MAX_CMDS)
                continue;
            snprintf(out->cmd[k], sizeof out->cmd[k], "%.*s", (int)len, p);
            out->calls[k] = 0;
            out->ncmd++;
        }
        out->calls[k] += v;
    }
}

/* INFO all carries both total_commands_processed and commandstats, so a snapshot is
 * one command per node, which stats_commands() subtracts. */
int stats_take(stats_conns *sc, srv_stats *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < sc->n; i++) {
        redisReply *r = server_cmd(sc->c[i], "INFO all");
        long v = info_long(r, "total_commands_processed");
        if (v < 0) {
            freeReplyObject(r);
            fprintf(stderr, "dlock-bench: no total_commands_processed in INFO\n");
            return -1;
        }
        out->commands += v;
        add_cmdstats(out, r->str);
        freeReplyObject(r);
    }
    return 0;
}

long long stats_commands(const stats_conns *sc, const srv_stats *before, const srv_stats *after)
{
    return after->commands - before->commands - sc->n;
}

static long long calls_of(const srv_stats *s, const char *cmd)
{
    for (int k = 0; k < s->ncmd; k++)
        if (strcmp(s->cmd[k], cmd) == 0)
            return s->calls[k];
    return 0;
}

long long stats_calls(const srv_stats *before, const srv_stats *after, const char *cmd)
{
    return calls_of(after, cmd) - calls_of(before, cmd);
}

void stats_print(const char *label, const srv_stats *before, const srv_stats *after)
{
    fprintf(stderr, "dlock-bench: %s: server commands:", label);
    for (int k = 0; k < after->ncmd; k++) {
        long long d = after->calls[k] - calls_of(before, after->cmd[k]);
        if (d > 0 && strcmp(after->cmd[k], "info") != 0)
            fprintf(stderr, " %s %lld", after->cmd[k], d);
    }
    fprintf(stderr, "\n");
}
