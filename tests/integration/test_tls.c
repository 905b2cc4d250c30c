/*
 * test_tls.c: rediss:// against real redis-servers listening with TLS, their
 * certificates made at test time by a CA of the test's own (tests/support/tls.c).
 * Checked: the lock calls and wake-ups over a verified connection, large writes in
 * parts; each refusal of a server that cannot be verified (unknown CA, host name,
 * expired) says which check failed; client certificates; a password; Redlock; session
 * resumption after the server dropped the connection; a forked child's clean-up;
 * deadlines when the server stalls in the handshake or speaks the other protocol;
 * the parameters refused when the client is made. (test_tls_cli: the dlock command.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "internal.h" /* the node's count of resumed sessions */
#include "itest.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Start s with TLS, its certificate dir/CERT.crt; args as dh_server_opts.args. */
static void start_tls(dh_server *s, int n, const char *cert, bool auth_clients,
                      const char *const *args)
{
    char crt[64], key[64];
    snprintf(crt, sizeof crt, "%s.crt", cert);
    snprintf(key, sizeof key, "%s.key", cert);
    dh_server_tls t = {it_tls_file(crt), it_tls_file(key), it_tls_file("ca.crt"), auth_clients};
    dh_server_opts o = {.args = args, .tls = &t};
    assert_int_equal(dh_servers_start_opts(s, n, &o), 0);
}

/* A client with the timing tests' deadlines and tls as its defaults (may be NULL). */
static dlock_client *client(const char *urls, const dlock_tls *tls, it_log *lg)
{
    dlock_config cfg;
    it_config_init(&cfg);
    cfg.tls = tls;
    if (lg != NULL) {
        it_log_init(lg);
        cfg.log = it_log_cb;
        cfg.log_user = lg;
    }
    return it_client_cfg(urls, &cfg);
}

/* A client of urls that trusts the test CA, which signed the servers' certificates. */
static dlock_client *ca_client(const char *urls)
{
    dlock_tls t = {.cacert = it_tls_file("ca.crt")};
    return client(urls, &t, NULL);
}

/* An acquire through c fails with code (ANY_TLS_MISMATCH: a timeout or a protocol
 * error), its message containing each needle (NULL-terminated), within the connect
 * deadline. */
#define ANY_TLS_MISMATCH (-1)
static void expect_failure(dlock_client *c, int code, const char *const *needles)
{
    dlock_config cfg;
    it_config_init(&cfg);
    int64_t bound = (cfg.timeout_ms + cfg.connect_timeout_ms) * dh_slack() + 200 * dh_slack();
    dlock_lock *l = NULL;
    int64_t t0 = dh_now_ms();
    int rc = dlock_acquire(c, "tls-refused", NULL, &l);
    int64_t took = dh_now_ms() - t0;
    printf("INFO %s after %lld ms: %s\n", dlock_errname(rc), (long long)took, dlock_errmsg());
    if (code == ANY_TLS_MISMATCH)
        assert_true(rc == DLOCK_ERR_TIMEOUT || rc == DLOCK_ERR_PROTOCOL);
    else
        assert_int_equal(rc, code);
    assert_null(l);
    for (int i = 0; needles[i] != NULL; i++)
        assert_non_null(strstr(dlock_errmsg(), needles[i]));
    assert_true(took <= bound);
}

static void acquire_release(dlock_client *c, const char *name)
{
    dlock_lock *l = it_acquire(c, name, 5000);
    assert_int_equal(dlock_release(l), DLOCK_OK);
}

static void *resume_later(void *arg)
{
    dh_sleep_ms(300);
    dh_server_resume(arg);
    return NULL;
}

/* ---- verified connections ------------------------------------------------------------ */

static void lock_calls_over_tls(void **state)
{
    (void)state;
    dh_server s;
    start_tls(&s, 1, "server", false, NULL);
    char url[400];
    snprintf(url, sizeof url, "%s?cacert=%s", s.url, it_tls_file("ca.crt"));
    dlock_client *c = client(url, NULL, NULL);
    dlock_lock *l = it_acquire(c, "tls-basic", 5000);
    it_expect_holder(&s, "tls-basic", dlock_token(l));
    uint64_t fence = dlock_fence(l);
    assert_true(fence > 0);
    assert_int_equal(dlock_extend(l, 20000), DLOCK_OK);
    char key[64];
    it_key(key, sizeof key, "tls-basic");
    assert_true(it_pttl(&s, key) > 10000);
    /* The fenced register, a script of its own over the same connection. */
    assert_int_equal(dlock_fenced_set(c, "tls-res", fence, "v1", 2), DLOCK_OK);
    assert_int_equal(dlock_fenced_set(c, "tls-res", fence - 1, "v0", 2), DLOCK_ERR_FENCED);
    /* A command far larger than the socket takes at once: TLS writes it in parts,
     * each resumed when the socket is writable again. */
    size_t big = 8u << 20;
    char *value = malloc(big);
    assert_non_null(value);
    for (size_t i = 0; i < big; i++)
        value[i] = (char)('a' + i % 26);
    dlock_config cfg = {.timeout_ms = 5000 * dh_slack(), .connect_timeout_ms = 1000 * dh_slack()};
    dlock_client *slow = it_client_cfg(url, &cfg);
    acquire_release(slow, "tls-big"); /* connected */
    /* Paused, the server reads nothing and the socket fills up; it resumes later. */
    dh_server_pause(&s);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, resume_later, &s), 0);
    assert_int_equal(dlock_fenced_set(slow, "tls-big", fence, value, big), DLOCK_OK);
    pthread_join(th, NULL);
    free(value);
    assert_int_equal(it_int_reply(dh_cmd(&s, "HSTRLEN tls-big value")), (long long)big);
    dlock_client_free(slow);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(it_exists(&s, key), 0);
    dlock_client_free(c);

    /* The same with the CA as the client's default, and the host by name. */
    dlock_tls t = {.cacert = it_tls_file("ca.crt")};
    snprintf(url, sizeof url, "rediss://localhost:%d", s.tls_port);
    c = client(url, &t, NULL);
    acquire_release(c, "tls-by-name");
    dlock_client_free(c);
    /* A CA directory in OpenSSL's hashed layout does as well; one without our CA
     * under its hashed name trusts nothing. */
    t.cacert = NULL;
    t.cacertdir = it_tls_file("cadir");
    c = client(s.url, &t, NULL);
    acquire_release(c, "tls-cadir");
    dlock_client_free(c);
    t.cacertdir = it_tls_dir;
    c = client(s.url, &t, NULL);
    expect_failure(c, DLOCK_ERR_AUTH, (const char *[]){"chain", NULL});
    dlock_client_free(c);
    dh_server_stop(&s);
}

static void *release_later(void *arg)
{
    dh_sleep_ms(200);
    assert_int_equal(dlock_release(arg), DLOCK_OK);
    return NULL;
}

/* A waiter is woken by the release, through the client's subscriber connection (TLS
 * too), long before the queue's refresh (DLOCK_QUEUE_REFRESH_MS) would find it free. */
static void wake_up_over_tls(void **state)
{
    (void)state;
    dh_server s;
    start_tls(&s, 1, "server", false, NULL);
    dlock_client *holder = ca_client(s.url), *waiter = ca_client(s.url);
    dlock_opts o = {.ttl_ms = 30000, .wait_ms = 10000};
    dlock_lock *first = NULL, *l = NULL;
    assert_int_equal(dlock_acquire(holder, "tls-wait", &o, &first), DLOCK_OK);
    /* The subscriber thread connects on the first wait: make it ready before. */
    o.wait_ms = 100;
    assert_int_equal(dlock_acquire(waiter, "tls-wait", &o, &l), DLOCK_ERR_BUSY);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, release_later, first), 0);
    o.wait_ms = 10000;
    int64_t t0 = dh_now_ms();
    assert_int_equal(dlock_acquire(waiter, "tls-wait", &o, &l), DLOCK_OK);
    int64_t took = dh_now_ms() - t0;
    pthread_join(th, NULL);
    printf("INFO woken after %lld ms\n", (long long)took);
    assert_true(took < DLOCK_QUEUE_REFRESH_MS - 100);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(holder);
    dlock_client_free(waiter);
    dh_server_stop(&s);
}

static void unverifiable_servers_are_refused(void **state)
{
    (void)state;
    dh_server s[3];
    start_tls(&s[0], 1, "server", false, NULL);
    start_tls(&s[1], 1, "other", false, NULL);
    start_tls(&s[2], 1, "expired", false, NULL);
    dlock_tls ca = {.cacert = it_tls_file("ca.crt")}, evil = {.cacert = it_tls_file("evil.crt")};

    /* A CA that did not sign it: the chain. */
    dlock_client *c = client(s[0].url, &evil, NULL);
    expect_failure(c, DLOCK_ERR_AUTH, (const char *[]){s[0].url, "chain is not trusted", NULL});
    dlock_client_free(c);
    /* No CA given: the system's store does not know ours either. */
    c = client(s[0].url, NULL, NULL);
    expect_failure(c, DLOCK_ERR_AUTH, (const char *[]){"chain", NULL});
    dlock_client_free(c);

    /* A certificate for another name: refused for 127.0.0.1 ... */
    c = client(s[1].url, &ca, NULL);
    expect_failure(c, DLOCK_ERR_AUTH,
                   (const char *[]){s[1].url, "host name mismatch", "127.0.0.1", NULL});
    dlock_client_free(c);
    /* ... accepted when sni= names it, from the URL or the defaults ... */
    char url[400];
    snprintf(url, sizeof url, "%s?sni=other.test", s[1].url);
    c = client(url, &ca, NULL);
    acquire_release(c, "tls-sni");
    dlock_client_free(c);
    dlock_tls sni = {.cacert = it_tls_file("ca.crt"), .sni = "other.test"};
    c = client(s[1].url, &sni, NULL);
    acquire_release(c, "tls-sni");
    dlock_client_free(c);
    /* ... and with verification off, which the log says once. */
    snprintf(url, sizeof url, "%s?insecure=1", s[1].url);
    it_log lg;
    c = client(url, &ca, &lg);
    acquire_release(c, "tls-insecure");
    acquire_release(c, "tls-insecure");
    assert_int_equal(it_log_count(&lg, DLOCK_LOG_WARN, "insecure=1"), 1);
    dlock_client_free(c);
    /* A URL's insecure=0 wins over the default's 1. */
    dlock_tls lax = {.cacert = it_tls_file("ca.crt"), .insecure = 1};
    snprintf(url, sizeof url, "%s?insecure=0", s[1].url);
    c = client(url, &lax, NULL);
    expect_failure(c, DLOCK_ERR_AUTH, (const char *[]){"host name mismatch", NULL});
    dlock_client_free(c);

    /* Expired. */
    c = client(s[2].url, &ca, NULL);
    expect_failure(c, DLOCK_ERR_AUTH, (const char *[]){s[2].url, "expired", NULL});
    dlock_client_free(c);
    for (int i = 0; i < 3; i++)
        dh_server_stop(&s[i]);
}

static void client_certificate(void **state)
{
    (void)state;
    dh_server s;
    start_tls(&s, 1, "server", true, NULL);
    dlock_tls t = {.cacert = it_tls_file("ca.crt")};
    dlock_client *c = client(s.url, &t, NULL);
    expect_failure(c, DLOCK_ERR_AUTH, (const char *[]){s.url, "certificate", NULL});
    dlock_client_free(c);
    /* One from a CA the server does not trust. */
    t.cert = it_tls_file("stranger.crt");
    t.key = it_tls_file("stranger.key");
    c = client(s.url, &t, NULL);
    expect_failure(c, DLOCK_ERR_AUTH, (const char *[]){"certificate", NULL});
    dlock_client_free(c);
    /* Ours, as defaults and in the URL. */
    t.cert = it_tls_file("client.crt");
    t.key = it_tls_file("client.key");
    c = client(s.url, &t, NULL);
    acquire_release(c, "tls-client-cert");
    dlock_client_free(c);
    char url[800];
    snprintf(url, sizeof url, "%s?cacert=%s&cert=%s&key=%s", s.url, it_tls_file("ca.crt"),
             it_tls_file("client.crt"), it_tls_file("client.key"));
    c = client(url, NULL, NULL);
    acquire_release(c, "tls-client-cert");
    dlock_client_free(c);
    dh_server_stop(&s);
}

static void password_over_tls(void **state)
{
    (void)state;
    dh_server s;
    start_tls(&s, 1, "server", false, (const char *[]){"--requirepass", "s3cret", NULL});
    char url[400];
    snprintf(url, sizeof url, "rediss://:s3cret@127.0.0.1:%d/2", s.tls_port);
    dlock_client *c = ca_client(url);
    dlock_lock *l = it_acquire(c, "tls-pw", 5000);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
    snprintf(url, sizeof url, "rediss://:wrong@127.0.0.1:%d", s.tls_port);
    c = ca_client(url);
    expect_failure(c, DLOCK_ERR_AUTH, (const char *[]){"AUTH refused", NULL});
    dlock_client_free(c);
    dh_server_stop(&s);
}

static void redlock_over_tls(void **state)
{
    (void)state;
    dh_server s[3];
    start_tls(s, 3, "server", false, NULL);
    char urls[600];
    dh_server_urls(s, 3, urls, sizeof urls);
    dlock_client *c = ca_client(urls);
    assert_int_equal(dlock_client_nservers(c), 3);
    dlock_lock *l = it_acquire(c, "tls-redlock", 5000);
    /* A quorum holds it: any one node's handshake may still have been going on when the
     * other two granted it (under load, as in ThreadSanitizer runs beside other tests),
     * and then that node never got the request. */
    assert_true(it_holding(s, 3, "tls-redlock", l) >= 2);
    /* One node gone, one whose loss leaves a quorum that holds it: the quorum still
     * holds. */
    int gone = 2;
    for (int i = 0; i < 3; i++)
        if (!it_holding(&s[i], 1, "tls-redlock", l))
            gone = i;
    dh_server_kill(&s[gone]);
    int rc = dlock_extend(l, 5000);
    if (rc != DLOCK_OK)
        fail_msg("extend with node %d gone: %s: %s", gone + 1, dlock_errname(rc), dlock_errmsg());
    assert_int_equal(dlock_release(l), DLOCK_OK);
    /* The renewal thread's rounds go over TLS too: a short lease outlives itself. */
    dlock_opts o = {.ttl_ms = 300 * dh_slack(), .auto_renew = 1};
    assert_int_equal(dlock_acquire(c, "tls-renewed", &o, &l), DLOCK_OK);
    dh_sleep_ms(3 * o.ttl_ms);
    assert_int_equal(dlock_check(l), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
    dh_servers_stop(s, 3);
}

/* ---- reconnects, stalls and the wrong protocol ---------------------------------------- */

static void session_resumed_on_reconnect(void **state)
{
    (void)state;
    dh_server s;
    start_tls(&s, 1, "server", false, NULL);
    dlock_client *c = ca_client(s.url);
    acquire_release(c, "tls-resume");
    assert_int_equal(atomic_load(&c->nodes[0].tls_resumed), 0);
    for (int round = 1; round <= 3; round++) {
        /* The server drops every client connection; the next call reconnects. */
        assert_true(it_int_reply(dh_cmd(&s, "CLIENT KILL TYPE normal")) >= 1);
        acquire_release(c, "tls-resume");
        printf("INFO after kill %d: %llu resumed\n", round,
               (unsigned long long)atomic_load(&c->nodes[0].tls_resumed));
        assert_int_equal(atomic_load(&c->nodes[0].tls_resumed), round);
    }
    dlock_client_free(c);
    dh_server_stop(&s);
}

static long total_connections(dh_server *s)
{
    redisReply *r = dh_cmd(s, "INFO stats");
    long n = dh_info_long(r, "total_connections_received");
    freeReplyObject(r);
    assert_true(n > 0);
    return n;
}

/* A forked child that frees its copy of the client must not end the parent's TLS
 * session: a close_notify on the shared socket would make the server close it. */
static void fork_child_leaves_the_session(void **state)
{
    (void)state;
    dh_server s;
    start_tls(&s, 1, "server", false, NULL);
    dlock_client *c = ca_client(s.url);
    /* A wait starts the subscriber thread: its connection is shared with a child too. */
    dlock_lock *held = it_acquire(c, "tls-fork", 5000), *l = NULL;
    dlock_opts o = {.wait_ms = 100};
    assert_int_equal(dlock_acquire(c, "tls-fork", &o, &l), DLOCK_ERR_BUSY);
    assert_int_equal(dlock_release(held), DLOCK_OK);
    long long clients = it_connected_clients(&s);
    assert_true(clients >= 3); /* the pool's, the subscriber's, the admin's */
    /* The child's verdict comes through a pipe, not its exit status: under valgrind
     * that also counts as lost the per-thread memory OpenSSL keeps for the parent's
     * subscriber thread, a thread the child does not have. */
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char rc = (char)dlock_acquire(c, "tls-fork", NULL, &l); /* not this process's */
        dlock_client_free(c);
        _exit(write(p[1], &rc, 1) == 1 ? 0 : 1);
    }
    close(p[1]);
    char rc = -1;
    assert_int_equal(read(p[0], &rc, 1), 1);
    close(p[0]);
    assert_int_equal(rc, DLOCK_ERR_CLOSED);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    dh_sleep_ms(50);
    assert_int_equal(it_connected_clients(&s), clients);
    /* The parent's next call uses the same connection: the server counts only the
     * admin connections of this test's own commands. */
    long before = total_connections(&s);
    acquire_release(c, "tls-fork");
    assert_int_equal(total_connections(&s), before + 1);
    dlock_client_free(c);
    dh_server_stop(&s);
}

static void paused_in_handshake(void **state)
{
    (void)state;
    dh_server s;
    start_tls(&s, 1, "server", false, NULL);
    dlock_client *c = ca_client(s.url);
    /* The kernel completes the TCP connect; the TLS handshake gets no answer. */
    dh_server_pause(&s);
    expect_failure(c, DLOCK_ERR_TIMEOUT, (const char *[]){s.url, "TLS handshake", NULL});
    dh_server_resume(&s);
    acquire_release(c, "tls-after-pause");
    /* Paused again with an idle, established connection: a command times out. */
    dh_server_pause(&s);
    expect_failure(c, DLOCK_ERR_TIMEOUT, (const char *[]){"no reply", NULL});
    dh_server_resume(&s);
    acquire_release(c, "tls-after-pause");
    dlock_client_free(c);
    dh_server_stop(&s);
}

static void wrong_protocol(void **state)
{
    (void)state;
    dh_server plain, tls;
    assert_int_equal(dh_server_start(&plain, NULL), 0);
    start_tls(&tls, 1, "server", false, NULL);
    char url[400];
    /* TLS to a server without: it waits for the end of a line the hello may not
     * hold (a timeout), or answers it with an error that is not TLS. */
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", plain.port);
    dlock_tls t = {.cacert = it_tls_file("ca.crt")};
    dlock_client *c = client(url, &t, NULL);
    for (int i = 0; i < 2; i++)
        expect_failure(c, ANY_TLS_MISMATCH, (const char *[]){url, "not a TLS port", NULL});
    dlock_client_free(c);
    /* Plain text to a TLS port: dropped before any reply, and said so. */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", tls.tls_port);
    c = client(url, NULL, NULL);
    expect_failure(c, DLOCK_ERR_IO, (const char *[]){url, "rediss://", NULL});
    dlock_client_free(c);
    dh_server_stop(&plain);
    dh_server_stop(&tls);
}

/* ---- parameters ------------------------------------------------------------------------ */

static void refused(const char *url, const dlock_tls *t, const char *needle)
{
    dlock_config cfg = {0};
    cfg.tls = t;
    dlock_client *c = NULL;
    int rc = dlock_client_new(url, &cfg, &c);
    printf("INFO %s: %s: %s\n", url, dlock_errname(rc), dlock_errmsg());
    assert_int_equal(rc, DLOCK_ERR_INVALID);
    assert_null(c);
    assert_non_null(strstr(dlock_errmsg(), needle));
}

static void bad_parameters(void **state)
{
    (void)state;
    char url[800];
    refused("rediss://127.0.0.1:1?cafile=x", NULL, "unknown parameter \"cafile\"");
    refused("rediss://127.0.0.1:1?cacert=", NULL, "empty value");
    refused("rediss://127.0.0.1:1?insecure=yes", NULL, "insecure=");
    refused("rediss://127.0.0.1:1?sni=a&sni=b", NULL, "given twice");
    refused("rediss://127.0.0.1:1?", NULL, "empty parameter");
    refused("redis://127.0.0.1:1?cacert=/x", NULL, "rediss://");
    refused("rediss://127.0.0.1:1?cacert=/nonexistent/ca.crt", NULL,
            "cacert /nonexistent/ca.crt: No such file or directory");
    refused("rediss://127.0.0.1:1?cacertdir=/nonexistent", NULL, "cacertdir /nonexistent");
    snprintf(url, sizeof url, "rediss://127.0.0.1:1?cert=%s", it_tls_file("client.crt"));
    refused(url, NULL, "cert= given without key=");
    snprintf(url, sizeof url, "rediss://127.0.0.1:1?cert=%s&key=%s", it_tls_file("client.crt"),
             it_tls_file("server.key"));
    refused(url, NULL, "is not the key of cert");
    snprintf(url, sizeof url, "rediss://127.0.0.1:1?cacert=%s", it_tls_file("ca.key"));
    refused(url, NULL, "cacert");
    /* The same through the defaults, and a list that names the bad server. */
    refused("rediss://127.0.0.1:1", &(dlock_tls){.cert = "/x"}, "cert given without key");
    refused("redis://127.0.0.1:1,rediss://127.0.0.1:2", &(dlock_tls){.cacert = "/nope"},
            "server 2 of 2: rediss://127.0.0.1:2: cacert /nope");
    refused("rediss://127.0.0.1:1", &(dlock_tls){.reserved = {1}}, "reserved");
    /* Defaults for TLS leave plain servers alone. */
    dlock_client *c = NULL;
    dlock_config cfg = {0};
    cfg.tls = &(dlock_tls){.cacert = "/nope"};
    assert_int_equal(dlock_client_new("redis://127.0.0.1:1", &cfg, &c), DLOCK_OK);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lock_calls_over_tls),
        cmocka_unit_test(wake_up_over_tls),
        cmocka_unit_test(unverifiable_servers_are_refused),
        cmocka_unit_test(client_certificate),
        cmocka_unit_test(password_over_tls),
        cmocka_unit_test(redlock_over_tls),
        cmocka_unit_test(session_resumed_on_reconnect),
        cmocka_unit_test(fork_child_leaves_the_session),
        cmocka_unit_test(paused_in_handshake),
        cmocka_unit_test(wrong_protocol),
        cmocka_unit_test(bad_parameters),
    };
    return cmocka_run_group_tests_name("tls", tests, it_tls_setup, it_tls_teardown);
}
