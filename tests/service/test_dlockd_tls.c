/*
 * test_dlockd_tls.c: dlockd's TLS listener (--tls-port) with real clients: redis-cli
 * --tls, redis-py with ssl=True, phpredis over tls://, and an OpenSSL client of this
 * file's own for what those do not send (no certificate, a stranger's certificate,
 * garbage after the handshake, a handshake never made, 10,000 pipelined commands, a
 * client killed while it holds a session lock). Also dlockd itself in front of a TLS
 * redis-server (-s rediss://...). The certificates are the test support's set.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <arpa/inet.h>
#include <hiredis/read.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* dlockd closes a client that has not completed its handshake after this long. */
#define DLOCKD_HANDSHAKE_S 10

static char certs[256];
static dt_daemon d; /* plain and TLS, no client certificates */
static char tls_port[16];

static const char *cert(const char *name, const char *ext)
{
    static char paths[8][320];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof paths[0], "%s/%s.%s", certs, name, ext);
    return p;
}

static int setup(void **state)
{
    assert_int_equal(dh_tls_dir(certs, sizeof certs), 0);
    assert_int_equal(dh_tls_make_set(certs), 0);
    it_srv_setup(state);
    dt_start_tls(&d, it_srv.url, true, "--tls-cert-file", cert("server", "crt"), "--tls-key-file",
                 cert("server", "key"), "--tls-auth-clients", "no", NULL);
    snprintf(tls_port, sizeof tls_port, "%d", d.tls_port);
    return 0;
}

static int teardown(void **state)
{
    /* SIGTERM stops the TLS listener and its clients too: exit 0. */
    assert_int_equal(dt_stop(&d), 0);
    dh_tls_dir_remove(certs);
    return it_srv_teardown(state);
}

/* ---- an OpenSSL client: blocking, the server verified as localhost ------------------ */

typedef struct tc {
    int fd;
    SSL_CTX *ctx;
    SSL *ssl;
    redisReader *rd;
} tc;

static int tcp_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    struct timeval tv = {.tv_sec = 5 * dh_slack()};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

/* Connect and handshake, with the client certificate name (NULL: none). False when the
 * handshake failed (t is closed then). */
static bool tc_open(tc *t, int port, const char *name)
{
    memset(t, 0, sizeof *t);
    t->ctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(t->ctx);
    assert_int_equal(SSL_CTX_load_verify_locations(t->ctx, cert("ca", "crt"), NULL), 1);
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    if (name != NULL) {
        assert_int_equal(SSL_CTX_use_certificate_file(t->ctx, cert(name, "crt"), SSL_FILETYPE_PEM),
                         1);
        assert_int_equal(SSL_CTX_use_PrivateKey_file(t->ctx, cert(name, "key"), SSL_FILETYPE_PEM),
                         1);
    }
    t->fd = tcp_to(port);
    t->ssl = SSL_new(t->ctx);
    SSL_set1_host(t->ssl, "localhost");
    SSL_set_fd(t->ssl, t->fd);
    t->rd = redisReaderCreate();
    bool ok = SSL_connect(t->ssl) == 1;
    ERR_clear_error();
    return ok;
}

static void tc_close(tc *t)
{
    if (t->ssl != NULL)
        SSL_free(t->ssl);
    SSL_CTX_free(t->ctx);
    if (t->fd > 0)
        close(t->fd);
    redisReaderFree(t->rd);
    memset(t, 0, sizeof *t);
}

static bool tc_write(tc *t, const void *p, size_t n)
{
    bool ok = SSL_write(t->ssl, p, (int)n) == (int)n;
    ERR_clear_error();
    return ok;
}

/* Send a command (redisCommand's format); false when it could not be written. */
static bool tc_send(tc *t, const char *fmt, ...)
{
    char *cmd;
    va_list ap;
    va_start(ap, fmt);
    int n = redisvFormatCommand(&cmd, fmt, ap);
    va_end(ap);
    assert_true(n > 0);
    bool ok = tc_write(t, cmd, (size_t)n);
    redisFreeCommand(cmd);
    return ok;
}

/* The next reply, or NULL when the connection ended or failed first. */
static redisReply *tc_reply(tc *t)
{
    for (;;) {
        void *r = NULL;
        assert_int_equal(redisReaderGetReply(t->rd, &r), REDIS_OK);
        if (r != NULL)
            return r;
        char buf[16384];
        int n = SSL_read(t->ssl, buf, sizeof buf);
        ERR_clear_error();
        if (n <= 0)
            return NULL;
        redisReaderFeed(t->rd, buf, (size_t)n);
    }
}

static redisReply *tc_cmd(tc *t, const char *fmt, ...)
{
    char *cmd;
    va_list ap;
    va_start(ap, fmt);
    int n = redisvFormatCommand(&cmd, fmt, ap);
    va_end(ap);
    assert_true(n > 0);
    bool ok = tc_write(t, cmd, (size_t)n);
    redisFreeCommand(cmd);
    return ok ? tc_reply(t) : NULL;
}

/* The daemon serves a TLS client (with that certificate) on port. */
static bool tls_serves(int port, const char *name)
{
    tc t;
    bool ok = tc_open(&t, port, name);
    redisReply *r = ok ? tc_cmd(&t, "PING") : NULL;
    ok = r != NULL && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
    if (r != NULL)
        freeReplyObject(r);
    tc_close(&t);
    return ok;
}

/* ---- the Redis clients ------------------------------------------------------------- */

typedef struct run {
    int status;
    char out[8192];
    char err[8192];
} run;

static void run_ok(run *r, const char *const argv[])
{
    r->status = dh_run(argv, NULL, r->out, sizeof r->out, r->err, sizeof r->err);
    if (r->status != 0)
        fail_msg("%s exited %d\nstdout:\n%s\nstderr:\n%s", argv[0], r->status, r->out, r->err);
}

static const char *script(const char *name)
{
    static char path[1024];
    const char *dir = getenv("DLOCKD_CLIENTS");
    if (dir == NULL)
        fail_msg("$DLOCKD_CLIENTS is not set; run through CTest");
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

static void test_redis_cli(void **state)
{
    (void)state;
    char cli[512];
    if (dh_find_exe("redis-cli", NULL, cli, sizeof cli) != 0)
        fail_msg("redis-cli is missing: apt-get install redis-tools");
    const char *ca = cert("ca", "crt");
    run r;
    const char *ping[] = {cli, "--tls", "--cacert", ca, "-p", tls_port, "PING", NULL};
    run_ok(&r, ping);
    assert_string_equal(r.out, "PONG\n");
    const char *lock[] = {cli,    "--tls",   "--cacert", ca,      "-p",       tls_port,
                          "LOCK", "tls:cli", "TTL",      "10000", "DETACHED", NULL};
    run_ok(&r, lock);
    char token[64];
    long long fence, validity;
    if (sscanf(r.out, "%63s %lld %lld", token, &fence, &validity) != 3 || strlen(token) != 32)
        fail_msg("LOCK printed '%s'", r.out);
    it_expect_holder(&it_srv, "tls:cli", token);
    const char *unlock[] = {cli,      "--tls",  "--cacert", ca,    "-p",
                            tls_port, "UNLOCK", "tls:cli",  token, NULL};
    run_ok(&r, unlock);
    assert_string_equal(r.out, "1\n");
    /* Without --tls, redis-cli's plain RESP on the TLS port: closed, nothing answered. */
    const char *plain[] = {cli, "-p", tls_port, "PING", NULL};
    r.status = dh_run(plain, NULL, r.out, sizeof r.out, r.err, sizeof r.err);
    assert_null(strstr(r.out, "PONG"));
    assert_true(tls_serves(d.tls_port, NULL));
}

static void test_redis_py(void **state)
{
    (void)state;
    const char *argv[] = {"/usr/bin/python3", script("redis_py_tls.py"), tls_port,
                          cert("ca", "crt"), NULL};
    run r;
    run_ok(&r, argv);
    assert_non_null(strstr(r.out, "redis-py tls: all checks passed"));
}

static void test_phpredis(void **state)
{
    (void)state;
    if (access("/usr/bin/php", X_OK) != 0)
        fail_msg("/usr/bin/php is missing: apt-get install php-cli php-redis");
    const char *argv[] = {"/usr/bin/php",    script("phpredis_tls.php"), tls_port,
                          cert("ca", "crt"), cert("evil", "crt"),        NULL};
    run r;
    run_ok(&r, argv);
    assert_non_null(strstr(r.out, "phpredis tls: all checks passed"));
}

/* ---- client certificates, AUTH, TLS alone ------------------------------------------ */

static void test_client_certificates(void **state)
{
    (void)state;
    char pwfile[320];
    snprintf(pwfile, sizeof pwfile, "%s/password", certs);
    FILE *f = fopen(pwfile, "w");
    assert_non_null(f);
    fputs("s3cret\n", f);
    fclose(f);
    /* yes (the default), TLS alone, AUTH required. */
    dt_daemon y;
    dt_start_tls(&y, it_srv.url, false, "--tls-cert-file", cert("server", "crt"), "--tls-key-file",
                 cert("server", "key"), "--tls-ca-cert-file", cert("ca", "crt"),
                 "--requirepass-file", pwfile, NULL);
    tc t;
    /* Without a certificate: with TLS 1.3 the client's handshake may end before the
     * server's verdict, which comes as an alert: nothing is ever answered. */
    if (tc_open(&t, y.tls_port, NULL)) {
        redisReply *r = tc_cmd(&t, "PING");
        assert_null(r);
    }
    tc_close(&t);
    if (tc_open(&t, y.tls_port, "stranger"))
        assert_null(tc_cmd(&t, "PING"));
    tc_close(&t);
    assert_true(tc_open(&t, y.tls_port, "client"));
    dt_expect_error(tc_cmd(&t, "PING"), "NOAUTH");
    dt_expect_status(tc_cmd(&t, "AUTH s3cret"), "OK");
    dt_expect_status(tc_cmd(&t, "PING"), "PONG");
    dt_lock l;
    dt_expect_lock(tc_cmd(&t, "LOCK tls:auth TTL 5000"), &l);
    dt_expect_int(tc_cmd(&t, "UNLOCK tls:auth %s", l.token), 1);
    /* SIGTERM with a TLS client connected. */
    assert_int_equal(dt_stop(&y), 0);
    assert_null(tc_reply(&t));
    tc_close(&t);

    /* optional, with the CA as a hashed directory: no certificate is fine, a bad one
     * is not. */
    char cadir[320];
    snprintf(cadir, sizeof cadir, "%s/cadir", certs);
    dt_daemon o;
    dt_start_tls(&o, it_srv.url, true, "--tls-cert-file", cert("server", "crt"), "--tls-key-file",
                 cert("server", "key"), "--tls-ca-cert-dir", cadir, "--tls-auth-clients",
                 "optional", NULL);
    assert_true(tls_serves(o.tls_port, NULL));
    assert_true(tls_serves(o.tls_port, "client"));
    assert_false(tls_serves(o.tls_port, "stranger"));
    assert_int_equal(dt_stop(&o), 0);
}

/* ---- what a bad client does -------------------------------------------------------- */

static void test_plaintext_on_tls_port(void **state)
{
    (void)state;
    dt_daemon p = {.port = d.tls_port};
    int fd = dt_raw(&p);
    const char ping[] = "*1\r\n$4\r\nPING\r\n";
    dt_raw_write(fd, ping, sizeof ping - 1);
    char buf[512];
    bool closed;
    dt_raw_read_all(fd, buf, sizeof buf, 5000 * dh_slack(), &closed);
    assert_true(closed);
    assert_null(strstr(buf, "PONG"));
    close(fd);
    assert_true(tls_serves(d.tls_port, NULL));
    redisContext *c = dt_connect(&d);
    dt_expect_status(dt_cmd(c, "PING"), "PONG");
    redisFree(c);
}

static void test_handshake_timeout(void **state)
{
    (void)state;
    dt_daemon p = {.port = d.tls_port};
    int64_t t0 = dh_now_ms();
    int silent = dt_raw(&p);
    /* A record header that announces 512 bytes never sent. */
    int partial = dt_raw(&p);
    dt_raw_write(partial, "\x16\x03\x01\x02\x00", 5);
    /* Others are served meanwhile. */
    assert_true(tls_serves(d.tls_port, NULL));
    char buf[64];
    bool closed;
    int64_t bound = (DLOCKD_HANDSHAKE_S + 5) * 1000 * dh_slack();
    dt_raw_read_all(silent, buf, sizeof buf, bound, &closed);
    assert_true(closed);
    int64_t took = dh_now_ms() - t0;
    /* The handshake's time, not an early close. */
    if (took < (DLOCKD_HANDSHAKE_S - 1) * 1000)
        fail_msg("closed after %lld ms, before the handshake timeout", (long long)took);
    dt_raw_read_all(partial, buf, sizeof buf, 5000 * dh_slack(), &closed);
    assert_true(closed);
    close(silent);
    close(partial);
    assert_true(tls_serves(d.tls_port, NULL));
}

static void test_garbage_after_handshake(void **state)
{
    (void)state;
    tc t;
    assert_true(tc_open(&t, d.tls_port, NULL));
    const char bad[] = "*1\r\n$abc\r\n";
    assert_true(tc_write(&t, bad, sizeof bad - 1));
    redisReply *r = tc_reply(&t);
    assert_non_null(r);
    dt_expect_error(r, "ERR Protocol error");
    assert_null(tc_reply(&t)); /* closed after it */
    tc_close(&t);
    assert_true(tls_serves(d.tls_port, NULL));
}

static void test_pipeline(void **state)
{
    (void)state;
    enum { N = 10000 };
    tc t;
    assert_true(tc_open(&t, d.tls_port, NULL));
    size_t cap = (size_t)N * 32, len = 0;
    char *all = malloc(cap);
    assert_non_null(all);
    for (int i = 0; i < N; i++) {
        char num[16];
        int k = snprintf(num, sizeof num, "%d", i);
        len += (size_t)snprintf(all + len, cap - len, "*2\r\n$4\r\nPING\r\n$%d\r\n%s\r\n", k, num);
    }
    assert_true(tc_write(&t, all, len));
    free(all);
    for (int i = 0; i < N; i++) {
        redisReply *r = tc_reply(&t);
        if (r == NULL)
            fail_msg("no reply %d of %d", i, N);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        if (atoi(r->str) != i)
            fail_msg("reply %d is '%s'", i, r->str);
        freeReplyObject(r);
    }
    tc_close(&t);
}

/* A session lock taken over TLS goes with its client, killed: a waiting LOCK of
 * another client gets it. */
static void test_session_lock_killed_client(void **state)
{
    (void)state;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        tc t;
        char ok = 'n';
        if (tc_open(&t, d.tls_port, NULL)) {
            redisReply *r = tc_cmd(&t, "LOCK tls:kill TTL 3000");
            if (r != NULL && r->type == REDIS_REPLY_ARRAY)
                ok = 'y';
        }
        if (write(pfd[1], &ok, 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    close(pfd[1]);
    char ok = 0;
    assert_int_equal(read(pfd[0], &ok, 1), 1);
    close(pfd[0]);
    assert_int_equal(ok, 'y');
    tc w;
    assert_true(tc_open(&w, d.tls_port, NULL));
    assert_true(tc_send(&w, "LOCK tls:kill TTL 3000 WAIT 20000"));
    dh_sleep_ms(200);
    int64_t t0 = dh_now_ms();
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    dt_lock l;
    redisReply *r = tc_reply(&w);
    assert_non_null(r);
    dt_expect_lock(r, &l);
    /* Released at the close, not at the lease's end (3 s). */
    assert_true(dh_now_ms() - t0 < 2500 * dh_slack());
    dt_expect_int(tc_cmd(&w, "UNLOCK tls:kill %s", l.token), 1);
    tc_close(&w);
}

/* ---- dlockd in front of a TLS redis-server ----------------------------------------- */

static void test_rediss_servers(void **state)
{
    (void)state;
    dh_server_tls st = {.cert = cert("server", "crt"),
                        .key = cert("server", "key"),
                        .ca = cert("ca", "crt"),
                        .auth_clients = false};
    dh_server_opts so = {.tls = &st};
    dh_server s;
    assert_int_equal(dh_server_start_opts(&s, &so), 0);
    char url[600];
    snprintf(url, sizeof url, "%s?cacert=%s", s.url, cert("ca", "crt"));
    dt_daemon r;
    dt_start_tls(&r, url, true, "--tls-cert-file", cert("server", "crt"), "--tls-key-file",
                 cert("server", "key"), "--tls-auth-clients", "no", NULL);
    tc t;
    assert_true(tc_open(&t, r.tls_port, NULL));
    dt_lock l;
    dt_expect_lock(tc_cmd(&t, "LOCK tls:rediss TTL 5000"), &l);
    it_expect_holder(&s, "tls:rediss", l.token);
    dt_expect_int(tc_cmd(&t, "UNLOCK tls:rediss %s", l.token), 1);
    tc_close(&t);
    assert_int_equal(dt_stop(&r), 0);
    dh_server_stop(&s);
}

/* ---- start-up errors ---------------------------------------------------------------- */

static void expect_start_error(int want, const char *const *args)
{
    const char *argv[24] = {getenv("DLOCKD"), "-s", it_srv.url, "-p", "0"};
    int n = 5;
    for (; *args != NULL; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    char err[1024];
    int st = dh_run(argv, NULL, NULL, 0, err, sizeof err);
    char *nl = strchr(err, '\n');
    if (st != want || strncmp(err, "dlockd: ", 8) != 0 || nl == NULL || nl[1] != '\0')
        fail_msg("%s %s: exit %d (want %d), '%s'", args[-2], args[-1], st, want, err);
}

static void test_start_errors(void **state)
{
    (void)state;
    const char *crt = cert("server", "crt"), *key = cert("server", "key");
    const char *no_cert[] = {"--tls-port", "1", "--tls-key-file", key, NULL};
    const char *no_ca[] = {"--tls-port", "1", "--tls-cert-file", crt, "--tls-key-file", key, NULL};
    const char *no_port[] = {"--unixsocket", "/nonexistent/s", "--tls-cert-file", crt, NULL};
    const char *bad_auth[] = {
        "--tls-port", "1", "--tls-cert-file", crt, "--tls-key-file", key, "--tls-auth-clients",
        "maybe",      NULL};
    expect_start_error(64, no_cert);
    expect_start_error(64, no_ca);
    expect_start_error(64, no_port);
    expect_start_error(64, bad_auth);
    /* Files that cannot be used: the daemon could not start. */
    const char *missing[] = {"--tls-port",
                             "1",
                             "--tls-cert-file",
                             "/nonexistent.crt",
                             "--tls-key-file",
                             key,
                             "--tls-auth-clients",
                             "no",
                             NULL};
    const char *not_cert[] = {
        "--tls-port", "1", "--tls-cert-file", key, "--tls-key-file", key, "--tls-auth-clients",
        "no",         NULL};
    const char *wrong_key[] = {"--tls-port",
                               "1",
                               "--tls-cert-file",
                               crt,
                               "--tls-key-file",
                               cert("other", "key"),
                               "--tls-auth-clients",
                               "no",
                               NULL};
    const char *bad_ca[] = {
        "--tls-port", "1", "--tls-cert-file", crt, "--tls-key-file", key, "--tls-ca-cert-file",
        key,          NULL};
    const char *no_cadir[] = {
        "--tls-port",   "1", "--tls-cert-file", crt, "--tls-key-file", key, "--tls-ca-cert-dir",
        "/nonexistent", NULL};
    expect_start_error(70, missing);
    expect_start_error(70, not_cert);
    expect_start_error(70, wrong_key);
    expect_start_error(70, bad_ca);
    expect_start_error(70, no_cadir);
}

int main(void)
{
    /* A write to a connection dlockd closed (a refused certificate) must fail, not kill
     * the test. */
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redis_cli),
        cmocka_unit_test(test_redis_py),
        cmocka_unit_test(test_phpredis),
        cmocka_unit_test(test_client_certificates),
        cmocka_unit_test(test_plaintext_on_tls_port),
        cmocka_unit_test(test_handshake_timeout),
        cmocka_unit_test(test_garbage_after_handshake),
        cmocka_unit_test(test_pipeline),
        cmocka_unit_test(test_session_lock_killed_client),
        cmocka_unit_test(test_rediss_servers),
        cmocka_unit_test(test_start_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
