/*
 * server.c: real redis-server processes for the tests, the bench and the demo: one
 * server's life (its directory, port and arguments; spawn, wait until it answers,
 * stop, kill, restart, pause). The registry that kills them all when this process
 * ends, a server's own clock and the admin connections are server_registry.c,
 * server_clock.c and server_admin.c (server_internal.h).
 *
 * How a server is found and kept under control (after hiredis's test.sh, which keeps
 * a PID file and a trap, and Redis's util.tcl find_available_port):
 *   - a free port comes from binding the address with port 0; another process may take
 *     it before redis-server binds it, so a server that dies with "Address already in
 *     use", or a port that answers with somebody else's process_id, makes us retry on a
 *     new port;
 *   - the child gets PR_SET_PDEATHSIG(SIGKILL) and its own process group, and every
 *     running server is in a registry that an atexit hook empties: a test that crashes
 *     or forgets a teardown leaves no server behind.
 */
#include "server_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define START_ATTEMPTS   8    /* new ports tried when the chosen one was taken */
#define READY_TIMEOUT_MS 5000 /* until PING must answer */
#define STOP_GRACE_MS    2000 /* SIGTERM to SIGKILL */

/* ---- small helpers ----------------------------------------------------------- */

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

/* A file of the server's directory. */
static void dir_file(const dh_server *s, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", s->dir, name);
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

/* fork/exec redis-server on s->host:s->port in s->dir. */
static int spawn(dh_server *s)
{
    char exe[512], portstr[16], conf[600], logfile[600], outfile[600];
    if (dh_find_exe("redis-server", "DLOCK_REDIS_SERVER", exe, sizeof exe) < 0) {
        fprintf(stderr, "dh: FATAL: redis-server not found (PATH or $DLOCK_REDIS_SERVER); "
                        "install it: apt-get install redis-server\n");
        return -1;
    }
    snprintf(portstr, sizeof portstr, "%d", s->port);
    char tlsport[16];
    snprintf(tlsport, sizeof tlsport, "%d", s->tls_port);
    const char *tls[] = {"--tls-port",         tlsport,
                         "--tls-cert-file",    s->tls_files[0],
                         "--tls-key-file",     s->tls_files[1],
                         "--tls-ca-cert-file", s->tls_files[2],
                         "--tls-auth-clients", s->tls_auth_clients ? "yes" : "no"};
    dir_file(s, "redis.conf", conf, sizeof conf);
    dir_file(s, "redis.log", logfile, sizeof logfile);
    dir_file(s, "stdout.log", outfile, sizeof outfile);

    /* The configuration file must come first; then the fixed arguments; the extra ones
     * come last so that they win. */
    const char *fixed[] = {"--port",      portstr,  "--bind",    s->host,        "--dir",
                           s->dir,        "--save", "",          "--appendonly", "no",
                           "--daemonize", "no",     "--logfile", logfile};
    const char
        *argv[2 + sizeof fixed / sizeof fixed[0] + sizeof tls / sizeof tls[0] + DH_EXTRA_MAX + 1];
    size_t n = 0;
    argv[n++] = exe;
    if (s->has_config)
        argv[n++] = conf;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        argv[n++] = fixed[i];
    for (size_t i = 0; s->tls_port > 0 && i < sizeof tls / sizeof tls[0]; i++)
        argv[n++] = tls[i];
    for (int i = 0; i < DH_EXTRA_MAX && s->extra[i]; i++)
        argv[n++] = s->extra[i];
    argv[n] = NULL;

    int out = open(outfile, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out < 0) {
        fprintf(stderr, "dh: %s: %s\n", outfile, strerror(errno));
        return -1;
    }
    char preload[1100], rcfile[640];
    const char *env[] = {preload, rcfile, "FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1",
                         NULL};
    if (s->faked_clock && dh__clock_env(s, preload, sizeof preload, rcfile, sizeof rcfile) < 0) {
        close(out);
        return -1;
    }
    /* Own process group: signals aimed at the test's group (a CLI test's
     * `kill -- -pgid`) do not reach the server. */
    dh_spawn_opts so = {.out_fd = out,
                        .err_fd = out,
                        .own_group = true,
                        .child_setup = s->child_setup,
                        .child_arg = s->child_arg,
                        .env = s->faked_clock ? env : NULL};
    pid_t pid = dh_spawn(argv, &so);
    close(out);
    if (pid < 0)
        return -1;
    s->pid = pid;
    dh__live_add(pid, s->dir, s->keep_dir);
    return 0;
}

/* The server's PID gone from the registry and from *s, once it has been reaped. */
static void forget(dh_server *s)
{
    dh__live_remove(s->pid);
    s->pid = 0;
}

enum ready { READY_OK, READY_WAIT, READY_FOREIGN };

/* It answers but INFO is refused (ACL arguments we cannot authenticate for, -NOAUTH):
 * our own log decides whether it is our server that is ready. */
static enum ready ready_by_log(const dh_server *s)
{
    char log[600];
    dir_file(s, "redis.log", log, sizeof log);
    return file_contains(log, "Ready to accept connections") ? READY_OK : READY_WAIT;
}

/* One probe of the port: is our server the one answering PING? */
static enum ready probe(dh_server *s)
{
    struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
    redisContext *c = redisConnectWithTimeout(s->host, s->port, tv);
    if (!c || c->err) {
        redisFree(c);
        return READY_WAIT;
    }
    redisSetTimeout(c, tv);
    enum ready res = READY_WAIT;
    const char *pw = dh_server_password(s);
    redisReply *r = pw ? redisCommand(c, "AUTH %s", pw) : NULL;
    freeReplyObject(r);
    r = redisCommand(c, "PING");
    if (r && r->type == REDIS_REPLY_STATUS) {
        /* Make sure it is ours: a server of a parallel test may own this port. */
        redisReply *info = redisCommand(c, "INFO server");
        long pid = dh_info_long(info, "process_id");
        if (pid == s->pid)
            res = READY_OK;
        else if (pid > 0)
            res = READY_FOREIGN;
        else if (info && info->type == REDIS_REPLY_ERROR)
            res = ready_by_log(s);
        freeReplyObject(info);
    } else if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "LOADING", 7) != 0) {
        res = ready_by_log(s);
    }
    freeReplyObject(r);
    redisFree(c);
    return res;
}

/* Wait for the server to answer. 0 ready, 1 port taken by someone else, -1 failed. */
static int wait_ready(dh_server *s)
{
    char log[600];
    dir_file(s, "redis.log", log, sizeof log);
    int64_t deadline = dh_now_ms() + READY_TIMEOUT_MS;
    for (;;) {
        int status = 0;
        if (dh_exited(s->pid, &status)) {
            forget(s);
            if (file_contains(log, "Address already in use"))
                return 1;
            fprintf(stderr, "dh: redis-server on %s:%d exited during startup (status 0x%x)\n",
                    s->host, s->port, status);
            return -1;
        }
        enum ready r = probe(s);
        if (r == READY_OK)
            return 0;
        if (r == READY_FOREIGN) {
            dh__kill_and_reap(s->pid);
            forget(s);
            return 1;
        }
        if (dh_now_ms() > deadline) {
            fprintf(stderr, "dh: redis-server on %s:%d did not answer PING within %d ms\n", s->host,
                    s->port, READY_TIMEOUT_MS);
            dh__kill_and_reap(s->pid);
            forget(s);
            return -1;
        }
        dh_sleep_ms(20);
    }
}

static void fail_start(const dh_server *s)
{
    char path[600];
    fprintf(stderr, "dh: FATAL: could not start redis-server (dir %s)\n", s->dir);
    dir_file(s, "redis.log", path, sizeof path);
    print_tail(path);
    dir_file(s, "stdout.log", path, sizeof path);
    print_tail(path);
}

/* Write o->config into s->dir/redis.conf. 0 or -1. */
static int write_config(dh_server *s, const char *const *config)
{
    if (config == NULL || config[0] == NULL)
        return 0;
    char path[600];
    dir_file(s, "redis.conf", path, sizeof path);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "dh: FATAL: %s: %s\n", path, strerror(errno));
        return -1;
    }
    for (int i = 0; config[i]; i++) {
        if (i == DH_CONFIG_MAX) {
            fprintf(stderr, "dh: FATAL: more than %d config lines\n", DH_CONFIG_MAX);
            fclose(f);
            return -1;
        }
        fprintf(f, "%s\n", config[i]);
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "dh: FATAL: %s: %s\n", path, strerror(errno));
        return -1;
    }
    s->has_config = true;
    return 0;
}

/* Fill *s from o and make its directory and configuration file; nothing is started.
 * 0, or -1 after printing why. */
static int prepare(dh_server *s, const dh_server_opts *o)
{
    memset(s, 0, sizeof *s);
    snprintf(s->host, sizeof s->host, "%s", o->bind ? o->bind : "127.0.0.1");
    s->port = o->port;
    s->keep_dir = o->keep_dir;
    s->child_setup = o->child_setup;
    s->child_arg = o->child_arg;
    if (o->clock != NULL) {
        s->faked_clock = true;
    }
    if (o->tls != NULL) {
        snprintf(s->tls_files[0], sizeof s->tls_files[0], "%s", o->tls->cert);
        snprintf(s->tls_files[1], sizeof s->tls_files[1], "%s", o->tls->key);
        snprintf(s->tls_files[2], sizeof s->tls_files[2], "%s", o->tls->ca);
        s->tls_auth_clients = o->tls->auth_clients;
    }
    for (int i = 0; o->args && o->args[i]; i++) {
        if (i >= DH_EXTRA_MAX - 1) {
            fprintf(stderr, "dh: FATAL: more than %d extra redis-server arguments\n",
                    DH_EXTRA_MAX - 1);
            return -1;
        }
        s->extra[i] = strdup(o->args[i]);
    }
    const char *base = o->parent_dir;
    if (!base || !*base)
        base = getenv("DLOCK_TEST_TMP");
    if (!base || !*base)
        base = "/tmp";
    if (mkdir_p(base) < 0) {
        fprintf(stderr, "dh: FATAL: cannot create %s: %s\n", base, strerror(errno));
        return -1;
    }
    snprintf(s->dir, sizeof s->dir, "%s/redis-XXXXXX", base);
    if (!mkdtemp(s->dir)) {
        fprintf(stderr, "dh: FATAL: mkdtemp %s: %s\n", s->dir, strerror(errno));
        s->dir[0] = '\0';
        return -1;
    }
    if (s->faked_clock && dh_server_set_clock(s, o->clock) < 0)
        return -1;
    return write_config(s, o->config);
}

/* Whether s runs as a Cluster node (an argument or a configuration line says so). */
static bool cluster_node(const dh_server *s)
{
    for (int i = 0; i + 1 < DH_EXTRA_MAX && s->extra[i] && s->extra[i + 1]; i++)
        if (strcmp(s->extra[i], "--cluster-enabled") == 0 && strcmp(s->extra[i + 1], "yes") == 0)
            return true;
    char path[600], line[256];
    dir_file(s, "redis.conf", path, sizeof path);
    FILE *f = s->has_config ? fopen(path, "r") : NULL;
    bool yes = false;
    while (f != NULL && !yes && fgets(line, sizeof line, f) != NULL)
        yes = strncmp(line, "cluster-enabled yes", 19) == 0;
    if (f != NULL)
        fclose(f);
    return yes;
}

/* A free port; for a Cluster node one whose bus port (10,000 above) exists too, which
 * redis-server checks at start. */
static int pick_port(const dh_server *s)
{
    bool cluster = cluster_node(s);
    for (int i = 0; i < 100; i++) {
        int port = dh_free_port(s->host);
        if (port <= 0 || !cluster || port <= 65535 - 10000)
            return port;
    }
    return -1;
}

/* A free port other than except: nothing holds a port dh_free_port names until a
 * server binds it, so the next call may name the same one again (the kernel hands out
 * the port it just freed). */
static int free_port_but(const char *host, int except)
{
    for (int i = 0; i < 100; i++) {
        int port = dh_free_port(host);
        if (port != except)
            return port;
    }
    return -1;
}

/* Pick a port (unless fixed) and spawn. 0 or -1. */
static int launch(dh_server *s, int fixed_port)
{
    s->port = fixed_port > 0 ? fixed_port : pick_port(s);
    if (s->port <= 0) {
        fprintf(stderr, "dh: FATAL: no free port on %s: %s\n", s->host, strerror(errno));
        return -1;
    }
    snprintf(s->url, sizeof s->url, "redis://%s:%d", s->host, s->port);
    if (s->tls_files[0][0] != '\0') {
        /* A restart keeps its TLS port as it keeps its plain one. */
        if (fixed_port <= 0 || s->tls_port <= 0)
            s->tls_port = free_port_but(s->host, s->port);
        if (s->tls_port <= 0 || s->tls_port == s->port) {
            fprintf(stderr, "dh: FATAL: no second free port on %s\n", s->host);
            return -1;
        }
        snprintf(s->url, sizeof s->url, "rediss://%s:%d", s->host, s->tls_port);
    }
    return spawn(s);
}

/* Wait for a launched server, launching it again while its port was taken: a free
 * port is picked anew; a fixed one is only taken by somebody else for a moment, so it
 * is tried again a little later. 0, or -1 after printing why. */
static int settle(dh_server *s, int fixed_port)
{
    for (int attempt = 0; attempt < START_ATTEMPTS; attempt++) {
        int r = wait_ready(s);
        if (r == 0)
            return 0;
        if (r < 0)
            break;
        /* A clean log: the old one's lines must not be taken for the new process's. */
        char log[600];
        dir_file(s, "redis.log", log, sizeof log);
        unlink(log);
        if (fixed_port > 0)
            dh_sleep_ms(100);
        if (launch(s, fixed_port) < 0)
            break;
    }
    fail_start(s);
    return -1;
}

int dh_servers_start_opts(dh_server *s, int n, const dh_server_opts *o)
{
    dh_server_opts defaults = {0};
    if (o == NULL)
        o = &defaults;
    /* Start them all, then wait for each: the waits overlap. */
    for (int i = 0; i < n; i++) {
        if (prepare(&s[i], o) < 0 || launch(&s[i], o->port) < 0) {
            dh_servers_stop(s, i + 1);
            return -1;
        }
    }
    for (int i = 0; i < n; i++) {
        if (settle(&s[i], o->port) < 0) {
            dh_servers_stop(s, n);
            return -1;
        }
    }
    return 0;
}

int dh_server_start_opts(dh_server *s, const dh_server_opts *o)
{
    return dh_servers_start_opts(s, 1, o);
}

int dh_server_start(dh_server *s, const char *const *extra_args)
{
    dh_server_opts o = {.args = extra_args};
    return dh_server_start_opts(s, &o);
}

int dh_servers_start(dh_server *s, int n, const char *const *extra_args)
{
    dh_server_opts o = {.args = extra_args};
    return dh_servers_start_opts(s, n, &o);
}

void dh_server_kill(dh_server *s)
{
    if (s->pid > 0) {
        dh__kill_and_reap(s->pid);
        forget(s);
    }
}

/* Ask a server to shut down; a paused one would not act on SIGTERM until resumed. */
static void ask_to_stop(const dh_server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        kill(s->pid, SIGCONT);
    }
}

void dh_server_urls(const dh_server *s, int n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < len; i++) {
        int k = snprintf(buf + used, len - used, "%s%s", i ? "," : "", s[i].url);
        if (k < 0)
            break;
        used += (size_t)k;
    }
}

void dh_servers_stop(dh_server *s, int n)
{
    for (int i = 0; i < n; i++)
        ask_to_stop(&s[i]);
    for (int i = 0; i < n; i++)
        dh_server_stop(&s[i]);
}

void dh_server_stop(dh_server *s)
{
    if (s->pid > 0) {
        ask_to_stop(s);
        dh_reap(s->pid, STOP_GRACE_MS, NULL);
        forget(s);
    }
    dh__remove_dir(s->dir, s->keep_dir);
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
    dir_file(s, "redis.log", log, sizeof log);
    snprintf(old, sizeof old, "%s.prev", log);
    rename(log, old);
    /* Same port: a client must find the server where it was. The port is free now;
     * only another test's bind can take it, so retry a little before giving up. */
    if (launch(s, s->port) < 0)
        return -1;
    return settle(s, s->port);
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
