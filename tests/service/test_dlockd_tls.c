/*
 * test_dlockd_tls.c: dlockd's TLS listener (--tls-port) with real clients: redis-cli
 * --tls, redis-py with ssl=True, phpredis over tls://, and the tests' OpenSSL client
 * (dtls.h) for what those do not send (no certificate, a stranger's certificate,
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
#include "dtls.h"
#include "itest.h"

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

/* ---- the Redis clients ------------------------------------------------------------- */

static void test_redis_cli(void **state)
{
    (void)state;
    char cli[512];
    if (dh_find_exe("redis-cli", NULL, cli, sizeof cli) != 0)
        fail_msg("redis-cli is missing: apt-get install redis-tools");
    const char *ca = cert("ca", "crt");
    dt_run r;
    const char *ping[] = {cli, "--tls", "--cacert", ca, "-p", tls_port, "PING", NULL};
    dt_run_ok(&r, ping);
    assert_string_equal(r.out, "PONG\n");
    const char *lock[] = {cli,    "--tls",   "--cacert", ca,      "-p",       tls_port,
                          "LOCK", "tls:cli", "TTL",      "10000", "DETACHED", NULL};
    dt_run_ok(&r, lock);
    char token[64];
    long long fence, validity;
    if (sscanf(r.out, "%63s %lld %lld", token, &fence, &validity) != 3 || strlen(token) != 32)
        fail_msg("LOCK printed '%s'", r.out);
    it_expect_holder(&it_srv, "tls:cli", token);
    const char *unlock[] = {cli,      "--tls",  "--cacert", ca,    "-p",
                            tls_port, "UNLOCK", "tls:cli",  token, NULL};
    dt_run_ok(&r, unlock);
    assert_string_equal(r.out, "1\n");
    /* Without --tls, redis-cli's plain RESP on the TLS port: closed, nothing answered. */
    const char *plain[] = {cli, "-p", tls_port, "PING", NULL};
    r.status = dh_run(plain, NULL, r.out, sizeof r.out, r.err, sizeof r.err);
    assert_null(strstr(r.out, "PONG"));
    assert_true(dt_tls_serves(d.tls_port, certs, NULL));
}

static void test_redis_py(void **state)
{
    (void)state;
    const char *argv[] = {"/usr/bin/python3", dt_client_script("redis_py_tls.py"), tls_port,
                          cert("ca", "crt"), NULL};
    dt_run r;
    dt_run_ok(&r, argv);
    assert_non_null(strstr(r.out, "redis-py tls: all checks passed"));
}

static void test_phpredis(void **state)
{
    (void)state;
    if (access("/usr/bin/php", X_OK) != 0)
        fail_msg("/usr/bin/php is missing: apt-get install php-cli php-redis");
    const char *argv[] = {"/usr/bin/php",
                          dt_client_script("phpredis_tls.php"),
                          tls_port,
                          cert("ca", "crt"),
                          cert("evil", "crt"),
                          NULL};
    dt_run r;
    dt_run_ok(&r, argv);
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
    dt_tls t;
    /* Without a certificate: with TLS 1.3 the client's handshake may end before the
     * server's verdict, which comes as an alert: nothing is ever answered. */
    if (dt_tls_open(&t, y.tls_port, certs, NULL)) {
        redisReply *r = dt_tls_cmd(&t, "PING");
        assert_null(r);
    }
    dt_tls_close(&t);
    if (dt_tls_open(&t, y.tls_port, certs, "stranger"))
        assert_null(dt_tls_cmd(&t, "PING"));
    dt_tls_close(&t);
    assert_true(dt_tls_open(&t, y.tls_port, certs, "client"));
    dt_expect_error(dt_tls_cmd(&t, "PING"), "NOAUTH");
    dt_expect_status(dt_tls_cmd(&t, "AUTH s3cret"), "OK");
    dt_expect_status(dt_tls_cmd(&t, "PING"), "PONG");
    dt_lock l;
    dt_expect_lock(dt_tls_cmd(&t, "LOCK tls:auth TTL 5000"), &l);
    dt_expect_int(dt_tls_cmd(&t, "UNLOCK tls:auth %s", l.token), 1);
    /* SIGTERM with a TLS client connected. */
    assert_int_equal(dt_stop(&y), 0);
    assert_null(dt_tls_reply(&t));
    dt_tls_close(&t);

    /* optional, with the CA as a hashed directory: no certificate is fine, a bad one
     * is not. */
    char cadir[320];
    snprintf(cadir, sizeof cadir, "%s/cadir", certs);
    dt_daemon o;
    dt_start_tls(&o, it_srv.url, true, "--tls-cert-file", cert("server", "crt"), "--tls-key-file",
                 cert("server", "key"), "--tls-ca-cert-dir", cadir, "--tls-auth-clients",
                 "optional", NULL);
    assert_true(dt_tls_serves(o.tls_port, certs, NULL));
    assert_true(dt_tls_serves(o.tls_port, certs, "client"));
    assert_false(dt_tls_serves(o.tls_port, certs, "stranger"));
    assert_int_equal(dt_stop(&o), 0);
}

/* ---- what a bad client does -------------------------------------------------------- */

static void test_plaintext_on_tls_port(void **state)
{
    (void)state;
    dt_daemon p = {.port = d.tls_port};
    const char ping[] = "*1\r\n$4\r\nPING\r\n";
    char buf[512];
    assert_true(dt_raw_exchange(&p, ping, sizeof ping - 1, buf, sizeof buf, 5000 * dh_slack()));
    assert_null(strstr(buf, "PONG"));
    assert_true(dt_tls_serves(d.tls_port, certs, NULL));
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
    assert_true(dt_tls_serves(d.tls_port, certs, NULL));
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
    assert_true(dt_tls_serves(d.tls_port, certs, NULL));
}

static void test_garbage_after_handshake(void **state)
{
    (void)state;
    dt_tls t;
    assert_true(dt_tls_open(&t, d.tls_port, certs, NULL));
    const char bad[] = "*1\r\n$abc\r\n";
    assert_true(dt_tls_write(&t, bad, sizeof bad - 1));
    redisReply *r = dt_tls_reply(&t);
    assert_non_null(r);
    dt_expect_error(r, "ERR Protocol error");
    assert_null(dt_tls_reply(&t)); /* closed after it */
    dt_tls_close(&t);
    assert_true(dt_tls_serves(d.tls_port, certs, NULL));
}

/* n pipelined PINGs with their numbers written at once, then (with close_notify) the
 * client's close_notify, its FIN as far as TLS goes: every one is answered, in order,
 * and after a close_notify the connection is closed. */
static void pipeline(int n, bool close_notify)
{
    dt_tls t;
    assert_true(dt_tls_open(&t, d.tls_port, certs, NULL));
    size_t len;
    char *all = dt_numbered_pipeline("PING", n, &len);
    assert_true(dt_tls_write(&t, all, len));
    free(all);
    if (close_notify)
        assert_true(SSL_shutdown(t.ssl) >= 0);
    for (int i = 0; i < n; i++) {
        redisReply *r = dt_tls_reply(&t);
        if (r == NULL)
            fail_msg("no reply %d of %d%s", i, n, close_notify ? " after the close_notify" : "");
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        if (atoi(r->str) != i)
            fail_msg("reply %d is '%s'", i, r->str);
        freeReplyObject(r);
    }
    if (close_notify)
        assert_null(dt_tls_reply(&t));
    dt_tls_close(&t);
}

static void test_pipeline(void **state)
{
    (void)state;
    pipeline(10000, false);
}

/* Commands written just before the client's close_notify all run and are answered, as
 * on a plain connection. */
static void test_pipeline_then_close_notify(void **state)
{
    (void)state;
    pipeline(100, true);
}

/* --maxclients counts TLS clients, which get the refusal once their handshake is done;
 * a TLS client that never reads is held to the same buffers as a plain one. */
static void test_limits(void **state)
{
    (void)state;
    dt_daemon m;
    dt_start_tls(&m, it_srv.url, false, "--maxclients", "1", "--tls-cert-file",
                 cert("server", "crt"), "--tls-key-file", cert("server", "key"),
                 "--tls-auth-clients", "no", NULL);
    dt_tls a, b;
    /* dt_start's probe may not have been seen closing yet. */
    int64_t deadline = dh_now_ms() + 5000 * dh_slack();
    for (;;) {
        assert_true(dt_tls_open(&a, m.tls_port, certs, NULL));
        redisReply *r = dt_tls_cmd(&a, "PING");
        bool ok = r != NULL && r->type == REDIS_REPLY_STATUS;
        if (r != NULL)
            freeReplyObject(r);
        if (ok)
            break;
        dt_tls_close(&a);
        assert_true(dh_now_ms() < deadline);
        dh_sleep_ms(20);
    }
    assert_true(dt_tls_open(&b, m.tls_port, certs, NULL));
    redisReply *r = dt_tls_reply(&b);
    assert_non_null(r);
    dt_expect_error(r, "ERR max number of clients reached");
    assert_null(dt_tls_reply(&b));
    dt_tls_close(&b);
    dt_tls_close(&a);
    assert_int_equal(dt_stop(&m), 0);

    long long rss0 = dt_rss_kib(d.pid);
    assert_true(dt_tls_open(&a, d.tls_port, certs, NULL));
    int small = 64 * 1024;
    setsockopt(a.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct timeval tv = {.tv_sec = 1};
    setsockopt(a.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    static char chunk[65536];
    size_t n = dt_fill_echoes(chunk, sizeof chunk), sent = 0;
    /* Write until a write stays blocked for a second (dlockd stopped reading), or
     * 200 MB. */
    while (sent < (size_t)200 << 20 && dt_tls_write(&a, chunk, n))
        sent += n;
    dt_expect_unread_bounded(&d, "dlockd_tls", sent, rss0);
    assert_true(dt_tls_serves(d.tls_port, certs, NULL));
    dt_tls_close(&a);
    assert_true(dt_tls_serves(d.tls_port, certs, NULL));
}

/* A session lock taken over TLS goes with its client, killed or closing cleanly: a
 * waiting LOCK of another client gets it. */
static void test_session_lock_killed_client(void **state)
{
    (void)state;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        dt_tls t;
        char ok = 'n';
        if (dt_tls_open(&t, d.tls_port, certs, NULL)) {
            redisReply *r = dt_tls_cmd(&t, "LOCK tls:kill TTL 3000");
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
    dt_tls w;
    assert_true(dt_tls_open(&w, d.tls_port, certs, NULL));
    assert_true(dt_tls_send(&w, "LOCK tls:kill TTL 3000 WAIT 20000"));
    dh_sleep_ms(200);
    int64_t t0 = dh_now_ms();
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    dt_lock l;
    redisReply *r = dt_tls_reply(&w);
    assert_non_null(r);
    dt_expect_lock(r, &l);
    /* Released at the close, not at the lease's end (3 s). */
    assert_true(dh_now_ms() - t0 < 2500 * dh_slack());
    dt_expect_int(dt_tls_cmd(&w, "UNLOCK tls:kill %s", l.token), 1);

    /* The same for a clean close: close_notify, then FIN. */
    dt_tls h;
    assert_true(dt_tls_open(&h, d.tls_port, certs, NULL));
    dt_expect_lock(dt_tls_cmd(&h, "LOCK tls:clean TTL 3000"), &l);
    assert_true(dt_tls_send(&w, "LOCK tls:clean TTL 3000 WAIT 20000"));
    dh_sleep_ms(200);
    t0 = dh_now_ms();
    assert_int_equal(SSL_shutdown(h.ssl), 0); /* sent; the reply is not waited for */
    dt_tls_close(&h);
    r = dt_tls_reply(&w);
    assert_non_null(r);
    dt_expect_lock(r, &l);
    assert_true(dh_now_ms() - t0 < 2500 * dh_slack());
    dt_expect_int(dt_tls_cmd(&w, "UNLOCK tls:clean %s", l.token), 1);
    dt_tls_close(&w);
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
    dt_tls t;
    assert_true(dt_tls_open(&t, r.tls_port, certs, NULL));
    dt_lock l;
    dt_expect_lock(dt_tls_cmd(&t, "LOCK tls:rediss TTL 5000"), &l);
    it_expect_holder(&s, "tls:rediss", l.token);
    dt_expect_int(dt_tls_cmd(&t, "UNLOCK tls:rediss %s", l.token), 1);
    dt_tls_close(&t);
    assert_int_equal(dt_stop(&r), 0);
    dh_server_stop(&s);
}

/* ---- start-up errors ---------------------------------------------------------------- */

/* A start that must fail: dlockd with --tls-port 1 (unless tls_port is false), the
 * certificate and key files given (NULL: not given) and one more option. */
typedef struct start_case {
    int want; /* its exit status: 64 for options that do not go together, 70 for files
                 that cannot be used (the daemon could not start) */
    bool tls_port;
    const char *cert, *key;
    const char *opt, *val; /* NULL: none */
} start_case;

/* It exits want with one line on stderr that starts "dlockd: ". */
static void expect_start_error(const start_case *c)
{
    const char *argv[16] = {getenv("DLOCKD"), "-s", it_srv.url, "-p", "0"};
    int n = 5;
    if (c->tls_port) {
        argv[n++] = "--tls-port";
        argv[n++] = "1";
    }
    if (c->cert) {
        argv[n++] = "--tls-cert-file";
        argv[n++] = c->cert;
    }
    if (c->key) {
        argv[n++] = "--tls-key-file";
        argv[n++] = c->key;
    }
    if (c->opt) {
        argv[n++] = c->opt;
        argv[n++] = c->val;
    }
    argv[n] = NULL;
    char err[1024];
    int st = dh_run(argv, NULL, NULL, 0, err, sizeof err);
    char *nl = strchr(err, '\n');
    if (st != c->want || strncmp(err, "dlockd: ", 8) != 0 || nl == NULL || nl[1] != '\0')
        fail_msg("%s %s: exit %d (want %d), '%s'", argv[n - 2], argv[n - 1], st, c->want, err);
}

static void test_start_errors(void **state)
{
    (void)state;
    const char *crt = cert("server", "crt"), *key = cert("server", "key");
    const start_case cases[] = {
        {64, true, NULL, key, NULL, NULL}, /* no certificate */
        {64, true, crt, key, NULL, NULL},  /* no CA, which client certificates need */
        {64, false, crt, NULL, "--unixsocket", "/nonexistent/s"},          /* no TLS port */
        {64, true, crt, key, "--tls-auth-clients", "maybe"},               /* a bad mode */
        {70, true, "/nonexistent.crt", key, "--tls-auth-clients", "no"},   /* missing */
        {70, true, key, key, "--tls-auth-clients", "no"},                  /* not a certificate */
        {70, true, crt, cert("other", "key"), "--tls-auth-clients", "no"}, /* the wrong key */
        {70, true, crt, key, "--tls-ca-cert-file", key},                   /* not a CA */
        {70, true, crt, key, "--tls-ca-cert-dir", "/nonexistent"},         /* no CA directory */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_start_error(&cases[i]);
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
        cmocka_unit_test(test_pipeline_then_close_notify),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_session_lock_killed_client),
        cmocka_unit_test(test_rediss_servers),
        cmocka_unit_test(test_start_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
