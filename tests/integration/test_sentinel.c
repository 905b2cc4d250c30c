/*
 * test_sentinel.c: redis-sentinel:// against a real master, its replica and a real
 * Sentinel (redis-server --sentinel), each with a password of its own: the master's
 * in the URL's user part, the Sentinel's in sentinel_password. Checked: locks go to
 * the master the Sentinel names, past a Sentinel that is down; a name no Sentinel
 * knows, a wrong Sentinel password, a missing master password and no Sentinel at all
 * each fail with their code and the Sentinels' own words; and a forced failover is
 * followed by a client that holds a lock across it (the lock, replicated before the
 * failover, is released on the new master, and fences go on rising). Over TLS
 * (rediss-sentinel://): the Sentinel and the master both verified, sni= applying to
 * the master.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MASTER_PW   "master-pw"
#define SENTINEL_PW "sentinel-pw"

static dh_server master, replica, sentinel;

/* A reply of server s to a command, through a connection that authenticates with pw;
 * the caller frees it. NULL when the connection fails or is closed before the reply: a
 * Sentinel reconfiguring an old master as a replica kills its normal clients (CLIENT
 * KILL TYPE normal), which a test polling that server's role may be one of. */
static redisReply *try_admin(dh_server *s, const char *pw, const char *fmt, ...)
{
    redisContext *ctx = dh_connect(s);
    if (ctx == NULL)
        return NULL;
    redisReply *r = redisCommand(ctx, "AUTH %s", pw);
    if (r != NULL && r->type != REDIS_REPLY_ERROR) {
        freeReplyObject(r);
        va_list ap;
        va_start(ap, fmt);
        r = redisvCommand(ctx, fmt, ap);
        va_end(ap);
    } else {
        freeReplyObject(r);
        r = NULL;
    }
    redisFree(ctx);
    return r;
}

/* r, failing the test when it is NULL. */
static redisReply *reached(redisReply *r)
{
    assert_non_null(r);
    return r;
}

/* try_admin, failing the test when s cannot be reached. */
#define admin(...) reached(try_admin(__VA_ARGS__))

/* The port of the master the Sentinel names now, or 0. */
static int named_master(void)
{
    redisReply *r = admin(&sentinel, SENTINEL_PW, "SENTINEL get-master-addr-by-name mymaster");
    int port = r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? atoi(r->element[1]->str) : 0;
    freeReplyObject(r);
    return port;
}

/* "master" or "slave", as s's ROLE says; false when the connection was killed (a
 * failover in progress), which a caller polls past. */
static bool has_role(dh_server *s, const char *role)
{
    redisReply *r = try_admin(s, MASTER_PW, "ROLE");
    bool yes = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
               strcmp(r->element[0]->str, role) == 0;
    freeReplyObject(r);
    return yes;
}

static int setup(void **state)
{
    (void)state;
    const char *const pw[] = {"--requirepass", MASTER_PW, "--masterauth", MASTER_PW, NULL};
    dh_server_opts mo = {.args = pw};
    assert_int_equal(dh_server_start_opts(&master, &mo), 0);
    char replicaof[128];
    snprintf(replicaof, sizeof replicaof, "replicaof %s %d", master.host, master.port);
    const char *const rconf[] = {replicaof, NULL};
    dh_server_opts ro = {.args = pw, .config = rconf};
    assert_int_equal(dh_server_start_opts(&replica, &ro), 0);
    char monitor[160], authpass[96];
    snprintf(monitor, sizeof monitor, "sentinel monitor mymaster %s %d 1", master.host,
             master.port);
    snprintf(authpass, sizeof authpass, "sentinel auth-pass mymaster %s", MASTER_PW);
    const char *const sconf[] = {monitor, authpass,
                                 "sentinel down-after-milliseconds mymaster 2000",
                                 "sentinel failover-timeout mymaster 20000", NULL};
    const char *const sargs[] = {"--sentinel", "--requirepass", SENTINEL_PW, NULL};
    dh_server_opts so = {.args = sargs, .config = sconf};
    assert_int_equal(dh_server_start_opts(&sentinel, &so), 0);
    /* The Sentinel answers as soon as it has read its configuration; the replica must
     * have caught up before a failover can promote it. */
    int64_t until = dh_now_ms() + 10000 * dh_slack();
    while (named_master() != master.port && dh_now_ms() < until)
        dh_sleep_ms(20);
    assert_int_equal(named_master(), master.port);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    dh_server_stop(&sentinel);
    dh_server_stop(&replica);
    dh_server_stop(&master);
    return 0;
}

/* The URL of the master through the Sentinel, a Sentinel that is down listed first. */
static void url(char *buf, size_t len, const char *master_pw, const char *name,
                const char *sentinel_pw)
{
    snprintf(buf, len, "redis-sentinel://%s%s%s127.0.0.1:1,%s:%d/%s%s%s", master_pw ? ":" : "",
             master_pw ? master_pw : "", master_pw ? "@" : "", sentinel.host, sentinel.port, name,
             sentinel_pw ? "?sentinel_password=" : "", sentinel_pw ? sentinel_pw : "");
}

static dlock_client *client(const char *master_pw, const char *name, const char *sentinel_pw,
                            it_log *lg)
{
    char u[300];
    url(u, sizeof u, master_pw, name, sentinel_pw);
    dlock_config cfg;
    it_config_init(&cfg);
    if (lg != NULL) {
        it_log_init(lg);
        cfg.log = it_log_cb;
        cfg.log_user = lg;
    }
    return it_client_cfg(u, &cfg);
}

static void test_locks_on_the_named_master(void **state)
{
    (void)state;
    dlock_client *c = client(MASTER_PW, "mymaster", SENTINEL_PW, NULL);
    dlock_lock *l = it_acquire(c, "sent-a", 10000);
    char key[64];
    it_key(key, sizeof key, "sent-a");
    redisReply *r = admin(&master, MASTER_PW, "GET %s", key);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_memory_equal(r->str, dlock_token(l), DLOCK_TOKEN_LEN);
    freeReplyObject(r);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    r = admin(&master, MASTER_PW, "EXISTS %s", key);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    dlock_client_free(c);
}

typedef struct refusal {
    const char *master_pw, *name, *sentinel_pw;
    int code;
    const char *needle;
} refusal;

static const refusal unknown_name = {MASTER_PW, "nosuch", SENTINEL_PW, DLOCK_ERR_INVALID,
                                     "knows no master named \"nosuch\""};
static const refusal wrong_sentinel_pw = {MASTER_PW, "mymaster", "not-it", DLOCK_ERR_AUTH,
                                          "Sentinel 127.0.0.1"};
static const refusal no_sentinel_pw = {MASTER_PW, "mymaster", NULL, DLOCK_ERR_AUTH, "NOAUTH"};
/* The Sentinel's password is the Sentinel's alone: the master still asks for its own. */
static const refusal no_master_pw = {NULL, "mymaster", SENTINEL_PW, DLOCK_ERR_AUTH,
                                     "redis-sentinel://127.0.0.1:1,"};

static void test_refused(void **state)
{
    (void)state;
    const refusal *cases[] = {&unknown_name, &wrong_sentinel_pw, &no_sentinel_pw, &no_master_pw};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const refusal *f = cases[i];
        dlock_client *c = client(f->master_pw, f->name, f->sentinel_pw, NULL);
        dlock_lock *l = NULL;
        int rc = dlock_acquire(c, "sent-refused", NULL, &l);
        printf("INFO %s: %s\n", dlock_errname(rc), dlock_errmsg());
        assert_int_equal(rc, f->code);
        assert_null(l);
        assert_non_null(strstr(dlock_errmsg(), f->needle));
        dlock_client_free(c);
    }
}

static void test_no_sentinel_up(void **state)
{
    (void)state;
    dlock_config cfg;
    it_config_init(&cfg);
    dlock_client *c = it_client_cfg("redis-sentinel://127.0.0.1:1,127.0.0.1:2/mymaster", &cfg);
    dlock_lock *l = NULL;
    int64_t t0 = dh_now_ms();
    int rc = dlock_acquire(c, "sent-none", NULL, &l);
    int64_t took = dh_now_ms() - t0;
    printf("INFO %s after %lld ms: %s\n", dlock_errname(rc), (long long)took, dlock_errmsg());
    assert_int_equal(rc, DLOCK_ERR_IO);
    /* Each Sentinel's reason, not only the last one's. */
    assert_non_null(strstr(dlock_errmsg(), "Sentinel 127.0.0.1:1: connect"));
    assert_non_null(strstr(dlock_errmsg(), "Sentinel 127.0.0.1:2: connect"));
    assert_true(took <= (cfg.timeout_ms + cfg.connect_timeout_ms) * dh_slack());
    dlock_client_free(c);
}

/* `dlock doctor` through the Sentinels: the master's facts, the Sentinels' health, and
 * the failover's risk for one server. */
static void test_doctor(void **state)
{
    (void)state;
    char u[300], env_servers[340];
    url(u, sizeof u, MASTER_PW, "mymaster", SENTINEL_PW);
    snprintf(env_servers, sizeof env_servers, "DLOCK_SERVERS=%s", u);
    const char *const env[] = {env_servers, "DLOCK_PASSWORD", NULL};
    it_run r;
    it_cli(&r, env, NULL, "doctor", "--json", (const char *)NULL);
    printf("INFO %s", r.out);
    it_expect_status(&r, 1); /* one master: a failover can lose a lock */
    assert_non_null(strstr(r.out, "\"role\":\"master\""));
    assert_non_null(strstr(r.out, "\"replicas\":1,\"sentinels\":2,\"sentinels_up\":1,"
                                  "\"sentinel_quorum\":1"));
    assert_non_null(strstr(r.out, "\"level\":\"risk\",\"kind\":\"failover\""));
    assert_non_null(strstr(r.out, "\"level\":\"note\",\"kind\":\"sentinel\""));
    assert_null(strstr(r.out, "\"kind\":\"sentinel-quorum\""));
    assert_null(strstr(r.out, "\"kind\":\"replicas\""));
}

/* A client holding a lock across a forced failover: once the Sentinel names the
 * replica and has demoted the old master, the same client takes a new lock on the new
 * master and releases the old one there. */
static void test_failover_followed(void **state)
{
    (void)state;
    it_log lg;
    dlock_client *c = client(MASTER_PW, "mymaster", SENTINEL_PW, &lg);
    dlock_lock *held = it_acquire(c, "sent-held", 60000);
    /* Replicated before the failover: asynchronous replication could lose it
     * otherwise, which is what the fence is for, and not what this test is about. */
    long long acked = 0;
    int64_t until = dh_now_ms() + 10000 * dh_slack();
    while (acked < 1 && dh_now_ms() < until) {
        redisReply *w = admin(&master, MASTER_PW, "WAIT 1 500");
        acked = w->integer;
        freeReplyObject(w);
    }
    assert_int_equal(acked, 1);
    redisReply *r;
    r = admin(&sentinel, SENTINEL_PW, "SENTINEL FAILOVER mymaster");
    assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    int64_t t0 = dh_now_ms();
    until = t0 + 30000 * dh_slack();
    while ((named_master() != replica.port || !has_role(&master, "slave")) && dh_now_ms() < until)
        dh_sleep_ms(50);
    printf("FIG failover_ms %lld\n", (long long)(dh_now_ms() - t0));
    assert_int_equal(named_master(), replica.port);
    assert_true(has_role(&replica, "master"));
    assert_true(has_role(&master, "slave"));

    dlock_opts o = {.ttl_ms = 10000, .wait_ms = 5000 * dh_slack()};
    dlock_lock *after = NULL;
    assert_int_equal(dlock_acquire(c, "sent-after", &o, &after), DLOCK_OK);
    char key[64];
    it_key(key, sizeof key, "sent-after");
    r = admin(&replica, MASTER_PW, "GET %s", key);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_memory_equal(r->str, dlock_token(after), DLOCK_TOKEN_LEN);
    freeReplyObject(r);
    assert_true(dlock_fence(after) > dlock_fence(held));
    assert_int_equal(dlock_release(held), DLOCK_OK);
    assert_int_equal(dlock_release(after), DLOCK_OK);
    /* The new master is a new server (a new run_id): the client says so. */
    assert_true(it_log_count(&lg, DLOCK_LOG_WARN, "has a new master") >= 1);
    dlock_client_free(c);
}

/* ---- over TLS ----------------------------------------------------------------------- */

static dh_server tls_master, tls_sentinel;

static int tls_setup(void **state)
{
    if (it_tls_setup(state) != 0)
        return -1;
    dh_server_tls t = {it_tls_file("server.crt"), it_tls_file("server.key"), it_tls_file("ca.crt"),
                       false};
    dh_server_opts mo = {.tls = &t};
    assert_int_equal(dh_server_start_opts(&tls_master, &mo), 0);
    /* The Sentinel watches the master's TLS port, over TLS, and serves on TLS too. */
    char monitor[160];
    snprintf(monitor, sizeof monitor, "sentinel monitor tm %s %d 1", tls_master.host,
             tls_master.tls_port);
    const char *const sconf[] = {monitor, "tls-replication yes", NULL};
    const char *const sargs[] = {"--sentinel", NULL};
    dh_server_opts so = {.args = sargs, .config = sconf, .tls = &t};
    assert_int_equal(dh_server_start_opts(&tls_sentinel, &so), 0);
    return 0;
}

static int tls_teardown(void **state)
{
    dh_server_stop(&tls_sentinel);
    dh_server_stop(&tls_master);
    return it_tls_teardown(state);
}

static dlock_client *tls_client(const char *params)
{
    char u[900];
    snprintf(u, sizeof u, "rediss-sentinel://%s:%d/tm?cacert=%s%s", tls_sentinel.host,
             tls_sentinel.tls_port, it_tls_file("ca.crt"), params);
    dlock_config cfg;
    it_config_init(&cfg);
    /* A new connection's TLS handshake, and the Sentinel's answer after it, must fit in
     * one per-node deadline; under valgrind, beside other tests, the client's side of a
     * handshake alone took most of the 1 s that the timing tests' deadline gives it
     * ("no reply within 1000 ms" in CI). The tests here are about where the locks go,
     * not how fast: three times that. */
    cfg.timeout_ms = 3 * it_timeout_ms();
    return it_client_cfg(u, &cfg);
}

static void test_tls_locks(void **state)
{
    (void)state;
    dlock_client *c = tls_client("");
    dlock_lock *l = it_acquire(c, "sent-tls", 10000);
    char key[64];
    it_key(key, sizeof key, "sent-tls");
    char *v = it_get(&tls_master, key);
    assert_non_null(v);
    assert_memory_equal(v, dlock_token(l), DLOCK_TOKEN_LEN);
    free(v);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

/* sni= names the master: its certificate is checked against that name, while each
 * Sentinel's is checked against the Sentinel's own host. */
static void test_tls_sni_is_the_masters(void **state)
{
    (void)state;
    dlock_client *c = tls_client("&sni=other.test");
    dlock_lock *l = NULL;
    int rc = dlock_acquire(c, "sent-tls-sni", NULL, &l);
    printf("INFO %s: %s\n", dlock_errname(rc), dlock_errmsg());
    assert_int_equal(rc, DLOCK_ERR_AUTH);
    assert_null(l);
    assert_non_null(strstr(dlock_errmsg(), "host name mismatch"));
    assert_non_null(strstr(dlock_errmsg(), "\"other.test\""));
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tls_tests[] = {
        cmocka_unit_test(test_tls_locks),
        cmocka_unit_test(test_tls_sni_is_the_masters),
    };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_locks_on_the_named_master),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_no_sentinel_up),
        cmocka_unit_test(test_doctor),
        /* Last: it moves the master. */
        cmocka_unit_test(test_failover_followed),
    };
    int failed = cmocka_run_group_tests_name("sentinel", tests, setup, teardown);
    return failed + cmocka_run_group_tests_name("sentinel_tls", tls_tests, tls_setup, tls_teardown);
}
