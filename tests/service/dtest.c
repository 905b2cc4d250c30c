/* dtest.c: helpers of the dlockd tests (see dtest.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define ARGS_MAX 40

static const char *daemon_path(void)
{
    const char *p = getenv("DLOCKD");
    if (p == NULL || p[0] == '\0') {
        fprintf(stderr, "dtest: $DLOCKD (the dlockd binary) is not set; run through CTest\n");
        exit(1);
    }
    return p;
}

/* A port nobody listens on now (taken before dlockd takes it? the caller retries). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static int connect_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool unix_accepts(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    assert_true(n < sizeof a.sun_path);
    memcpy(a.sun_path, path, n + 1);
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

static long next_nofile;
static char next_log[512];

void dt_next_log(const char *path)
{
    snprintf(next_log, sizeof next_log, "%s", path);
}

void dt_log_path(char *buf, size_t len, const char *what)
{
    const char *tmp = getenv("DLOCK_TEST_TMP");
    snprintf(buf, len, "%s/dlockd-%d-%s.log", tmp != NULL ? tmp : "/tmp", (int)getpid(), what);
}

bool dt_log_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    char line[2048];
    bool found = false;
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

void dt_next_nofile(long n)
{
    next_nofile = n;
}

/* dt_start, and with tls a TLS listener on a second free port too; without plain,
 * that listener alone ("-p 0"). */
static void start(dt_daemon *d, const char *servers, bool tls, bool plain, va_list ap)
{
    const char *extra[ARGS_MAX];
    int nextra = 0;
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL) {
        assert_true(nextra < ARGS_MAX - 16);
        extra[nextra++] = a;
    }
    memset(d, 0, sizeof *d);
    /* The limit applies to this start only, whether it succeeds or not. */
    char nofile[64] = "";
    if (next_nofile > 0) {
        snprintf(nofile, sizeof nofile, "--nofile=%ld:%ld", next_nofile, next_nofile);
        next_nofile = 0;
        if (access("/usr/bin/prlimit", X_OK) != 0)
            fail_msg("/usr/bin/prlimit is missing (Debian: util-linux)");
    }
    char timeout[32];
    snprintf(timeout, sizeof timeout, "%lld", (long long)(100 * dh_slack()));
    for (int attempt = 0; attempt < 5; attempt++) {
        int port = plain ? free_port() : 0;
        int tls_port = 0;
        while (tls && (tls_port == 0 || tls_port == port))
            tls_port = free_port();
        char portstr[16], tlsportstr[16];
        snprintf(portstr, sizeof portstr, "%d", port);
        snprintf(tlsportstr, sizeof tlsportstr, "%d", tls_port);
        const char *argv[ARGS_MAX];
        int n = 0;
        if (nofile[0] != '\0') {
            /* prlimit(1) sets the limit and execs dlockd in the same process. Not
             * setrlimit in the forked child: under valgrind the child is still
             * valgrind's, which refuses to lower the limit below its own descriptors. */
            argv[n++] = "/usr/bin/prlimit";
            argv[n++] = nofile;
        }
        argv[n++] = daemon_path();
        argv[n++] = "-s";
        argv[n++] = servers;
        argv[n++] = "-p";
        argv[n++] = portstr;
        argv[n++] = "--timeout";
        argv[n++] = timeout;
        argv[n++] = "--shutdown-timeout"; /* no drain unless a test gives its own */
        argv[n++] = "0";
        if (tls) {
            argv[n++] = "--tls-port";
            argv[n++] = tlsportstr;
        }
        for (int i = 0; i < nextra; i++) {
            argv[n++] = extra[i];
            if (strcmp(extra[i], "--unixsocket") == 0 && i + 1 < nextra)
                snprintf(d->unixsocket, sizeof d->unixsocket, "%s", extra[i + 1]);
        }
        argv[n] = NULL;
        /* Its log goes to the test's stderr, which CTest shows when a test fails, or
         * to the file dt_next_log named. */
        dh_spawn_opts o = {.out_fd = -1, .err_fd = STDERR_FILENO};
        if (next_log[0] != '\0') {
            o.err_fd = open(next_log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            assert_true(o.err_fd >= 0);
        }
        pid_t pid = dh_spawn(argv, &o);
        if (o.err_fd != STDERR_FILENO)
            close(o.err_fd);
        assert_true(pid > 0);
        int64_t deadline = dh_now_ms() + 10000 * dh_slack();
        while (dh_now_ms() < deadline) {
            if (dh_exited(pid, NULL))
                break; /* the port was taken meanwhile: try another */
            /* The TLS listener is bound after the plain one: wait for it. */
            int fd = connect_port(tls ? tls_port : port);
            if (fd >= 0 && tls && plain) {
                close(fd);
                fd = connect_port(port);
            }
            if (fd >= 0) {
                close(fd);
                d->pid = pid;
                next_log[0] = '\0';
                d->port = port;
                d->tls_port = tls_port;
                /* The unix socket is bound after the TCP port: wait for it too. */
                while (d->unixsocket[0] != '\0' && !unix_accepts(d->unixsocket)) {
                    if (dh_now_ms() > deadline || dh_exited(pid, NULL))
                        fail_msg("dlockd did not listen on %s", d->unixsocket);
                    dh_sleep_ms(10);
                }
                return;
            }
            dh_sleep_ms(10);
        }
        if (!dh_exited(pid, NULL)) {
            dh_reap(pid, 0, NULL);
            fail_msg("dlockd did not accept connections within %lld ms",
                     (long long)(10000 * dh_slack()));
        }
    }
    fail_msg("dlockd would not start (5 attempts)");
}

void dt_start(dt_daemon *d, const char *servers, ...)
{
    va_list ap;
    va_start(ap, servers);
    start(d, servers, false, true, ap);
    va_end(ap);
}

void dt_start_tls(dt_daemon *d, const char *servers, bool plain, ...)
{
    va_list ap;
    va_start(ap, plain);
    start(d, servers, true, plain, ap);
    va_end(ap);
}

int dt_stop(dt_daemon *d)
{
    if (d->pid <= 0)
        return 0;
    kill(d->pid, SIGTERM);
    int status = 0;
    bool gone = dh_reap(d->pid, 10000 * dh_slack(), &status);
    d->pid = 0;
    assert_true(gone);
    return status;
}

void dt_kill(dt_daemon *d)
{
    if (d->pid <= 0)
        return;
    kill(d->pid, SIGKILL);
    dh_reap(d->pid, 10000, NULL);
    d->pid = 0;
}

redisContext *dt_connect(const dt_daemon *d)
{
    struct timeval tv = {.tv_sec = 5 * dh_slack()};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", d->port, tv);
    assert_non_null(c);
    if (c->err)
        fail_msg("connecting to dlockd on port %d: %s", d->port, c->errstr);
    assert_int_equal(redisSetTimeout(c, tv), REDIS_OK);
    return c;
}

redisReply *dt_cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (r == NULL)
        fail_msg("no reply to '%s': %s", fmt, c->errstr);
    return r;
}

static void vsend(redisContext *c, const char *fmt, va_list ap)
{
    assert_int_equal(redisvAppendCommand(c, fmt, ap), REDIS_OK);
    int done = 0;
    while (!done)
        assert_int_equal(redisBufferWrite(c, &done), REDIS_OK);
}

void dt_send(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsend(c, fmt, ap);
    va_end(ap);
}

redisReply *dt_reply(redisContext *c)
{
    void *r = NULL;
    if (redisGetReply(c, &r) != REDIS_OK || r == NULL)
        fail_msg("no reply: %s", c->errstr);
    return r;
}

void dt_expect_close_serves(redisContext *holder, redisContext *waiter, dt_lock *got,
                            const char *fig, int64_t bound_ms)
{
    int64_t t0 = dh_now_ms();
    redisFree(holder);
    dt_expect_lock(dt_reply(waiter), got);
    int64_t took = dh_now_ms() - t0;
    print_message("FIG %s %lld ms\n", fig, (long long)took);
    assert_true(took < bound_ms);
}

void dt_serve_in_turn(redisContext **w, bool *served, int n, const char *prefix, int names,
                      long long *last_fence, int64_t deadline_ms)
{
    int done = 0;
    for (int i = 0; i < n; i++)
        done += served[i];
    struct pollfd *p = calloc((size_t)n, sizeof *p);
    assert_non_null(p);
    while (done < n) {
        assert_true(dh_now_ms() < deadline_ms);
        for (int i = 0; i < n; i++)
            p[i] = (struct pollfd){.fd = served[i] ? -1 : w[i]->fd, .events = POLLIN};
        assert_true(poll(p, (nfds_t)n, 1000) >= 0);
        for (int i = 0; i < n; i++) {
            if (!(p[i].revents & POLLIN))
                continue;
            dt_lock l;
            dt_expect_lock(dt_reply(w[i]), &l);
            assert_true(l.fence > last_fence[i % names]);
            last_fence[i % names] = l.fence;
            dt_expect_int(dt_cmd(w[i], "UNLOCK %s-%d %s", prefix, i % names, l.token), 1);
            served[i] = true;
            done++;
        }
    }
    free(p);
}

int dt_raw(const dt_daemon *d)
{
    int fd = connect_port(d->port);
    assert_true(fd >= 0);
    return fd;
}

void dt_raw_write(int fd, const void *p, size_t n)
{
    if (dh_send_all(fd, p, n) < 0)
        fail_msg("write to dlockd: %s", strerror(errno));
}

size_t dt_raw_read_all(int fd, char *buf, size_t len, int64_t timeout_ms, bool *closed)
{
    size_t got = 0;
    *closed = false;
    int64_t deadline = dh_now_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - dh_now_ms();
        if (left <= 0)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = poll(&p, 1, (int)left);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            break;
        char tmp[4096];
        ssize_t n = recv(fd, tmp, sizeof tmp, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            *closed = true; /* EOF, or a reset after the peer closed with data unread */
            break;
        }
        size_t keep = (size_t)n;
        if (keep > len - 1 - got)
            keep = len - 1 - got;
        memcpy(buf + got, tmp, keep);
        got += keep;
    }
    buf[got] = '\0';
    return got;
}

bool dt_raw_exchange(const dt_daemon *d, const void *req, size_t n, char *buf, size_t len,
                     int64_t timeout_ms)
{
    int fd = dt_raw(d);
    dt_raw_write(fd, req, n);
    bool closed;
    dt_raw_read_all(fd, buf, len, timeout_ms, &closed);
    close(fd);
    return closed;
}

long dt_info(redisContext *c, const char *field)
{
    redisReply *r = dt_cmd(c, "INFO");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    long v = dh_info_long(r, field);
    freeReplyObject(r);
    return v;
}

long long dt_lockinfo(redisContext *c, const char *name, const char *field)
{
    redisReply *r = dt_cmd(c, "LOCKINFO %s", name);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    long long v = 0;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (strcmp(r->element[i]->str, field) == 0)
            v = r->element[i + 1]->integer;
    freeReplyObject(r);
    return v;
}

void dt_wait_info(redisContext *c, const char *field, long want, int64_t bound_ms)
{
    int64_t deadline = dh_now_ms() + bound_ms;
    while (dt_info(c, field) != want) {
        if (dh_now_ms() > deadline)
            fail_msg("INFO %s is %ld, not %ld, after %lld ms", field, dt_info(c, field), want,
                     (long long)bound_ms);
        dh_sleep_ms(5);
    }
}

int64_t dt_wait_key_gone(const char *name, int64_t bound_ms)
{
    char key[256];
    it_key(key, sizeof key, name);
    int64_t t0 = dh_now_ms();
    while (it_exists(&it_srv, key)) {
        if (dh_now_ms() - t0 > bound_ms)
            fail_msg("key %s still there after %lld ms", key, (long long)bound_ms);
        dh_sleep_ms(5);
    }
    return dh_now_ms() - t0;
}

void dt_write_pass(char *path, size_t len, const char *what, const char *pass)
{
    const char *tmp = getenv("DLOCK_TEST_TMP");
    snprintf(path, len, "%s/dlockd-%d-%s.pass", tmp != NULL ? tmp : "/tmp", (int)getpid(), what);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", pass);
    fclose(f);
}

char *dt_numbered_pipeline(const char *cmd, int n, size_t *len)
{
    size_t cap = (size_t)n * (32 + strlen(cmd)), at = 0;
    char *req = malloc(cap);
    assert_non_null(req);
    for (int i = 0; i < n; i++) {
        char num[16];
        int k = snprintf(num, sizeof num, "%d", i);
        at += (size_t)snprintf(req + at, cap - at, "*2\r\n$%zu\r\n%s\r\n$%d\r\n%s\r\n", strlen(cmd),
                               cmd, k, num);
    }
    *len = at;
    return req;
}

size_t dt_fill_echoes(char *buf, size_t len)
{
    static const char echo[] = "*2\r\n$4\r\nECHO\r\n$32\r\n01234567890123456789012345678901\r\n";
    size_t n = len / (sizeof echo - 1) * (sizeof echo - 1);
    for (size_t i = 0; i < n; i += sizeof echo - 1)
        memcpy(buf + i, echo, sizeof echo - 1);
    return n;
}

void dt_expect_unread_bounded(const dt_daemon *d, const char *fig, size_t sent, long long rss0)
{
    long long rss1 = dt_rss_kib(d->pid);
    print_message("FIG %s_unread_client_sent_kib %zu KiB\n", fig, sent / 1024);
    print_message("FIG %s_unread_client_rss_growth_kib %lld KiB\n", fig, rss1 - rss0);
    /* It stopped taking requests well before 200 MB ... */
    assert_true(sent < (size_t)100 << 20);
    /* ... and holds a few MB for it at most (query buffer, replies, read chunk); not
     * asserted when dlockd is built with a sanitizer, whose shadow memory and
     * quarantine make RSS meaningless. */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    assert_true(rss1 - rss0 < 32 * 1024);
#endif
}

/* A "Field: value" line of /proc/PID/status. */
static long long proc_status(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long long v = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            v = strtoll(line + n + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

long long dt_threads(pid_t pid)
{
    return proc_status(pid, "Threads");
}

long long dt_rss_kib(pid_t pid)
{
    return proc_status(pid, "VmRSS");
}

dt_daemon dt_one;

int dt_one_setup(void **state)
{
    if (it_srv_setup(state) != 0)
        return -1;
    dt_start(&dt_one, it_srv.url, NULL);
    return 0;
}

int dt_one_teardown(void **state)
{
    assert_int_equal(dt_stop(&dt_one), 0);
    return it_srv_teardown(state);
}

redisContext *dt_fresh_start(dt_fresh *f, int n)
{
    assert_true(n >= 1 && n <= 3);
    f->n = n;
    assert_int_equal(dh_servers_start(f->srv, n, NULL), 0);
    char urls[512];
    dh_server_urls(f->srv, n, urls, sizeof urls);
    dt_start(&f->d, urls, NULL);
    return dt_connect(&f->d);
}

void dt_fresh_stop(dt_fresh *f)
{
    assert_int_equal(dt_stop(&f->d), 0);
    dh_servers_stop(f->srv, f->n);
}

void dt_slow_start(dt_slow *s)
{
    s->relay = fr_start(it_srv.port);
    assert_non_null(s->relay);
    dt_start(&s->d, fr_url(s->relay), "--timeout", "5000", NULL);
}

void dt_slow_send_and_close(dt_slow *s, redisContext *c, const char *fmt, ...)
{
    fr_delay(s->relay, 0, 300);
    va_list ap;
    va_start(ap, fmt);
    vsend(c, fmt, ap);
    va_end(ap);
    dh_sleep_ms(50);
    /* A reset: after a FIN dlockd would answer, and a grant would be the client's. */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    redisFree(c);
}

void dt_slow_stop(dt_slow *s)
{
    assert_int_equal(dt_stop(&s->d), 0);
    fr_stop(s->relay);
}

void dt_run_ok(dt_run *r, const char *const argv[])
{
    r->status = dh_run(argv, NULL, r->out, sizeof r->out, r->err, sizeof r->err);
    if (r->status != 0)
        fail_msg("%s exited %d\nstdout:\n%s\nstderr:\n%s", argv[0], r->status, r->out, r->err);
}

const char *dt_client_script(const char *name)
{
    static char path[1024];
    const char *dir = getenv("DLOCKD_CLIENTS");
    if (dir == NULL)
        fail_msg("$DLOCKD_CLIENTS is not set; run through CTest");
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}
