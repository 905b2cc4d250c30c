/*
 * test_server_states.c: scenario 14 of the fault suite (docs/testing.md), real server
 * error states (no relay, except where one makes a transient state exact).
 *
 * Each test starts its own redis-server in the state it needs and asserts the code
 * the library documents for it (with one server):
 *   - -BUSY from a Lua script spinning on another connection: DLOCK_ERR_UNAVAILABLE,
 *     never DLOCK_ERR_BUSY; works once the script ends;
 *   - -LOADING while the server reloads its data set (DEBUG RELOAD with
 *     key-load-delay): DLOCK_ERR_UNAVAILABLE; works once loaded;
 *   - -READONLY from a replica: DLOCK_ERR_UNAVAILABLE;
 *   - CLIENT PAUSE WRITE: the call ends by its deadline with DLOCK_ERR_TIMEOUT, and the
 *     client works (and no key is left) after the pause;
 *   - maxmemory under noeviction: -OOM is DLOCK_ERR_UNAVAILABLE; allkeys-lru and
 *     volatile-ttl: the eviction-policy warning reaches cfg.log (once per node), and
 *     strict mode refuses the node;
 *   - ACL users: without CONFIG (works), without INFO too (works, with a warning that
 *     the policy cannot be checked), with only the commands dlock needs (works),
 *     without EVALSHA (DLOCK_ERR_AUTH), a wrong password (DLOCK_ERR_AUTH);
 *   - a transient error answered to the handshake's INFO must not switch the
 *     eviction-policy check off for good.
 * Liveness bounds are multiplied by dh_slack(); timings are printed as FIG lines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"
#include "relay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static dh_server g_srv, g_replica;
static it_log g_log;

static int teardown(void **state)
{
    (void)state;
    dh_server_stop(&g_replica);
    dh_server_stop(&g_srv);
    memset(&g_replica, 0, sizeof g_replica);
    memset(&g_srv, 0, sizeof g_srv);
    return 0;
}

static int64_t call_bound_ms(void)
{
    return (it_timeout_ms() + 100) * dh_slack();
}

/* A client of url with the test deadlines and the log captured in g_log. */
static dlock_client *client_url(const char *url, int strict)
{
    dlock_config cfg;
    it_config_init(&cfg);
    cfg.strict = strict;
    cfg.log = it_log_cb;
    cfg.log_user = &g_log;
    return it_client_cfg(url, &cfg);
}

static int try_acquire(dlock_client *c, const char *name, dlock_lock **l, int64_t *took)
{
    dlock_opts o = {0};
    o.ttl_ms = 10000;
    int64_t t0 = dh_now_ms();
    int rc = dlock_acquire(c, name, &o, l);
    *took = dh_now_ms() - t0;
    it_show(name, rc);
    return rc;
}

/* Run one admin command, split on spaces, on a fresh connection; assert no error. */
static void admin(dh_server *s, const char *cmd)
{
    const char *argv[32];
    int argc = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", cmd);
    for (char *tok = strtok(buf, " "); tok != NULL && argc < 32; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    redisContext *c = dh_connect(s);
    assert_non_null(c);
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fprintf(stderr, "%s: %s\n", cmd, r->str);
    assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    redisFree(c);
}

/* The server answers PING with an error starting with prefix. */
static bool answers_error(dh_server *s, const char *prefix)
{
    struct timeval tv = {.tv_sec = 0, .tv_usec = 300000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
    bool yes = false;
    if (c != NULL && c->err == 0) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "PING");
        yes = r != NULL && r->type == REDIS_REPLY_ERROR &&
              strncmp(r->str, prefix, strlen(prefix)) == 0;
        freeReplyObject(r);
    }
    redisFree(c);
    return yes;
}

/* A full cycle works and leaves nothing behind. */
static void assert_works(dlock_client *c, dh_server *s, const char *name)
{
    dlock_lock *l = it_acquire(c, name, 5000);
    assert_int_equal(dlock_extend(l, 5000), DLOCK_OK);
    assert_int_equal(dlock_check(l), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    char key[128];
    it_key(key, sizeof key, name);
    assert_int_equal(it_exists(s, key), 0);
}

/* An acquire of name on c must fail, within the call bound, as DLOCK_ERR_UNAVAILABLE
 * with the server's error in the message; its duration is printed as figure fig. */
static void expect_unavailable(dlock_client *c, const char *name, const char *error,
                               const char *fig)
{
    int64_t took;
    dlock_lock *l = NULL;
    int rc = try_acquire(c, name, &l, &took);
    printf("FIG %s %lld ms\n", fig, (long long)took);
    assert_int_equal(rc, DLOCK_ERR_UNAVAILABLE);
    assert_non_null(strstr(dlock_errmsg(), error));
    assert_true(took <= call_bound_ms());
}

/* The start of most cases here: an empty log, a server of the case's own, and a client
 * (not strict) that has taken and released a lock on it once. */
static dlock_client *fresh_server(void)
{
    it_log_init(&g_log);
    assert_int_equal(dh_server_start(&g_srv, NULL), 0);
    dlock_client *c = client_url(g_srv.url, 0);
    assert_works(c, &g_srv, "warm");
    return c;
}

/* ---- -BUSY: a script that spins ------------------------------------------------- */

typedef struct spin {
    dh_server *s;
    int64_t ms;
    int ok;
} spin;

static void *spin_script(void *arg)
{
    spin *sp = arg;
    struct timeval tv = {.tv_sec = 10};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", sp->s->port, tv);
    if (c == NULL || c->err != 0) {
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    char ms[24];
    snprintf(ms, sizeof ms, "%lld", (long long)sp->ms);
    redisReply *r = redisCommand(
        c, "EVAL %s 0 %s",
        "local t = redis.call('TIME')\n"
        "local start = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000\n"
        "while true do\n"
        "  t = redis.call('TIME')\n"
        "  if tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000 - start > tonumber(ARGV[1]) then\n"
        "    return 1\n"
        "  end\n"
        "end\n",
        ms);
    sp->ok = r != NULL && r->type == REDIS_REPLY_INTEGER;
    freeReplyObject(r);
    redisFree(c);
    return NULL;
}

static void test_busy_script_is_unavailable(void **state)
{
    (void)state;
    it_log_init(&g_log);
    const char *args[] = {"--busy-reply-threshold", "100", NULL};
    assert_int_equal(dh_server_start(&g_srv, args), 0);
    dlock_client *c = client_url(g_srv.url, 0);
    assert_works(c, &g_srv, "warm");
    spin sp = {.s = &g_srv, .ms = 1000};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, spin_script, &sp), 0);
    /* -BUSY comes once the script has run past busy-reply-threshold. */
    int64_t until = dh_now_ms() + 900;
    while (!answers_error(&g_srv, "BUSY") && dh_now_ms() < until)
        dh_sleep_ms(10);
    assert_true(answers_error(&g_srv, "BUSY"));
    expect_unavailable(c, "busy", "BUSY", "busy_script_acquire_ms");
    /* A client that connects during it: the handshake's INFO is refused too. */
    dlock_client *fresh = client_url(g_srv.url, 0);
    int64_t took;
    dlock_lock *l = NULL;
    int rc = try_acquire(fresh, "busy", &l, &took);
    printf("FIG busy_script_fresh_acquire_ms %lld ms\n", (long long)took);
    assert_int_equal(rc, DLOCK_ERR_UNAVAILABLE);
    pthread_join(th, NULL);
    assert_true(sp.ok);
    assert_works(c, &g_srv, "after-busy");
    assert_works(fresh, &g_srv, "after-busy");
    dlock_client_free(fresh);
    dlock_client_free(c);
}

/* ---- -LOADING: DEBUG RELOAD of a data set that loads slowly --------------------- */

static void *reload(void *arg)
{
    dh_server *s = arg;
    struct timeval tv = {.tv_sec = 60};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
    if (c != NULL && c->err == 0) {
        redisSetTimeout(c, tv);
        freeReplyObject(redisCommand(c, "DEBUG RELOAD"));
    }
    redisFree(c);
    return NULL;
}

static void test_loading_is_unavailable(void **state)
{
    (void)state;
    it_log_init(&g_log);
    /* 20,000 keys at 50 us each: a second of -LOADING (Redis 7's key-load-delay; the
     * loading loop answers clients every KiB). */
    const char *args[] = {"--enable-debug-command",
                          "local",
                          "--key-load-delay",
                          "50",
                          "--loading-process-events-interval-bytes",
                          "1024",
                          NULL};
    assert_int_equal(dh_server_start(&g_srv, args), 0);
    admin(&g_srv, "DEBUG POPULATE 20000");
    dlock_client *c = client_url(g_srv.url, 0);
    assert_works(c, &g_srv, "warm");
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, reload, &g_srv), 0);
    int64_t t0 = dh_now_ms();
    while (!answers_error(&g_srv, "LOADING") && dh_now_ms() - t0 < 5000)
        dh_sleep_ms(5);
    bool loading = answers_error(&g_srv, "LOADING");
    printf("FIG loading_seen_after_ms %lld ms\n", (long long)(dh_now_ms() - t0));
    assert_true(loading);
    expect_unavailable(c, "loading", "LOADING", "loading_acquire_ms");
    pthread_join(th, NULL);
    printf("FIG loading_lasted_ms %lld ms\n", (long long)(dh_now_ms() - t0));
    assert_works(c, &g_srv, "after-loading");
    dlock_client_free(c);
}

/* ---- -READONLY: a replica --------------------------------------------------------- */

static void test_replica_is_unavailable(void **state)
{
    (void)state;
    it_log_init(&g_log);
    assert_int_equal(dh_server_start(&g_srv, NULL), 0);
    char port[16];
    snprintf(port, sizeof port, "%d", g_srv.port);
    const char *args[] = {"--replicaof", "127.0.0.1", port, NULL};
    assert_int_equal(dh_server_start(&g_replica, args), 0);
    dlock_client *c = client_url(g_replica.url, 0);
    for (int i = 0; i < 3; i++) {
        int64_t took;
        dlock_lock *l = NULL;
        int rc = try_acquire(c, "replica", &l, &took);
        printf("FIG readonly_acquire_ms %lld ms\n", (long long)took);
        assert_int_equal(rc, DLOCK_ERR_UNAVAILABLE);
        assert_non_null(strstr(dlock_errmsg(), "READONLY"));
    }
    assert_int_equal(it_exists(&g_srv, "dlock:{replica}"), 0);
    dlock_client_free(c);
}

/* ---- CLIENT PAUSE WRITE ------------------------------------------------------------ */

static void test_client_pause_write_times_out(void **state)
{
    (void)state;
    dlock_client *c = fresh_server();
    admin(&g_srv, "CLIENT PAUSE 5000 WRITE");
    int64_t took, worst = 0;
    for (int i = 0; i < 3; i++) {
        dlock_lock *l = NULL;
        int rc = try_acquire(c, "paused", &l, &took);
        worst = took > worst ? took : worst;
        assert_int_equal(rc, DLOCK_ERR_TIMEOUT);
        assert_true(took <= call_bound_ms());
    }
    printf("FIG client_pause_write_acquire_ms %lld ms\n", (long long)worst);
    admin(&g_srv, "CLIENT UNPAUSE");
    /* The paused attempts ran after the pause, each followed by its clean-up. */
    int64_t t0 = dh_now_ms();
    while (it_exists(&g_srv, "dlock:{paused}") != 0 && dh_now_ms() - t0 < 500 * dh_slack())
        dh_sleep_ms(5);
    printf("FIG client_pause_key_gone_ms %lld ms\n", (long long)(dh_now_ms() - t0));
    assert_int_equal(it_exists(&g_srv, "dlock:{paused}"), 0);
    assert_works(c, &g_srv, "after-pause");
    assert_works(c, &g_srv, "paused");
    dlock_client_free(c);
}

/* ---- maxmemory ---------------------------------------------------------------------- */

static void test_maxmemory_noeviction_is_unavailable(void **state)
{
    (void)state;
    dlock_client *c = fresh_server();
    admin(&g_srv, "CONFIG SET maxmemory 1");
    expect_unavailable(c, "oom", "OOM", "oom_acquire_ms");
    admin(&g_srv, "CONFIG SET maxmemory 0");
    assert_works(c, &g_srv, "after-oom");
    /* noeviction is the safe policy: no warning. */
    assert_int_equal(it_log_count(&g_log, DLOCK_LOG_WARN, "maxmemory-policy"), 0);
    assert_int_equal(it_log_count(&g_log, DLOCK_LOG_ERROR, "maxmemory-policy"), 0);
    dlock_client_free(c);
}

/* The case's state: the maxmemory-policy, one that evicts lock keys. */
static void eviction_policy_warns(void **state)
{
    const char *policy = *state;
    it_log_init(&g_log);
    assert_int_equal(dh_server_start(&g_srv, NULL), 0);
    char set[96];
    snprintf(set, sizeof set, "CONFIG SET maxmemory-policy %s", policy);
    admin(&g_srv, set);
    admin(&g_srv, "CONFIG SET maxmemory 100mb");
    char needle[64];
    snprintf(needle, sizeof needle, "maxmemory-policy is %s", policy);
    /* Warned once per node, however many connections and calls. */
    dlock_client *c = client_url(g_srv.url, 0);
    for (int i = 0; i < 3; i++)
        assert_works(c, &g_srv, "evicting");
    printf("FIG eviction_warnings_%s %d count\n", policy,
           it_log_count(&g_log, DLOCK_LOG_WARN, needle));
    assert_int_equal(it_log_count(&g_log, DLOCK_LOG_WARN, needle), 1);
    dlock_client_free(c);
    /* Strict mode: the node is refused, with the reason; an error in the log. */
    it_log_init(&g_log);
    c = client_url(g_srv.url, 1);
    int64_t took;
    dlock_lock *l = NULL;
    int rc = try_acquire(c, "evicting", &l, &took);
    assert_int_equal(rc, DLOCK_ERR_UNAVAILABLE);
    assert_non_null(strstr(dlock_errmsg(), policy));
    assert_int_equal(it_log_count(&g_log, DLOCK_LOG_ERROR, needle), 1);
    dlock_client_free(c);
}

/* A transient error answered to the handshake's INFO (-LOADING, -BUSY: the real
 * states above do it to a client that connects at the wrong moment) must not stop
 * the client from checking the policy on its next connection. */
static void test_transient_info_error_keeps_policy_check(void **state)
{
    (void)state;
    it_log_init(&g_log);
    assert_int_equal(dh_server_start(&g_srv, NULL), 0);
    admin(&g_srv, "CONFIG SET maxmemory-policy allkeys-lru");
    fr_relay *r = fr_start(g_srv.port);
    assert_non_null(r);
    fr_replace(r, FR_LOADING, FR_REPLACE_INSTEAD, 1, "INFO");
    dlock_client *c = client_url(fr_url(r), 0);
    assert_works(c, &g_srv, "transient");
    int refused = it_log_count(&g_log, DLOCK_LOG_WARN, "INFO refused");
    /* A new connection, whose INFO is answered. */
    fr_reset_now(r);
    dlock_holder h;
    if (dlock_inspect(c, "transient", &h) != DLOCK_OK)
        assert_int_equal(dlock_inspect(c, "transient", &h), DLOCK_OK);
    assert_works(c, &g_srv, "transient");
    int warned = it_log_count(&g_log, DLOCK_LOG_WARN, "maxmemory-policy is allkeys-lru");
    printf("FIG transient_info_refused_logs %d count\n", refused);
    printf("FIG transient_info_policy_warnings %d count\n", warned);
    dlock_client_free(c);
    fr_stop(r);
    /* A passing -LOADING is not worth a warning (an ACL's -NOPERM is); what matters
     * is that the next connection checks the policy again. */
    assert_int_equal(refused, 0);
    assert_int_equal(warned, 1);
}

/* ---- ACL users and passwords --------------------------------------------------------- */

static void acl_user(const char *name, const char *rules)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ACL SETUSER %s %s", name, rules);
    admin(&g_srv, cmd);
}

static dlock_client *user_client(const char *user, const char *pass)
{
    char url[256];
    snprintf(url, sizeof url, "redis://%s:%s@127.0.0.1:%d", user, pass, g_srv.port);
    return client_url(url, 0);
}

static void test_acl_users(void **state)
{
    (void)state;
    it_log_init(&g_log);
    assert_int_equal(dh_server_start(&g_srv, NULL), 0);
    acl_user("noconfig", "on >pw-a ~* &* +@all -config");
    acl_user("noinfo", "on >pw-b ~* &* +@all -config -info");
    acl_user("minimal", "on >pw-c resetchannels ~dlock:* &dlock:* -@all +evalsha +eval +time "
                        "+get +set +del +pttl +pexpire +publish +zadd +zrem +zrange +zpopmin "
                        "+subscribe");
    acl_user("noscripts", "on >pw-d ~* &* +@all -evalsha -eval");

    /* Without CONFIG: works, and INFO tells the policy (no warning). */
    dlock_client *c = user_client("noconfig", "pw-a");
    assert_works(c, &g_srv, "acl");
    assert_int_equal(it_log_count(&g_log, DLOCK_LOG_WARN, "INFO refused"), 0);
    dlock_client_free(c);

    /* Without INFO as well: works, with a warning that the policy is unknown. */
    c = user_client("noinfo", "pw-b");
    assert_works(c, &g_srv, "acl");
    printf("FIG acl_noinfo_warnings %d count\n",
           it_log_count(&g_log, DLOCK_LOG_WARN, "INFO refused"));
    assert_int_equal(it_log_count(&g_log, DLOCK_LOG_WARN, "INFO refused"), 1);
    dlock_client_free(c);

    /* Only the script commands and the commands the scripts call, on dlock's keys
     * and channels (scripts run with the caller's permissions): enough, INFO aside. */
    c = user_client("minimal", "pw-c");
    assert_works(c, &g_srv, "acl");
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "acl", &h), DLOCK_OK);
    dlock_client_free(c);

    /* Without the script commands: -NOPERM is an authorization error. */
    c = user_client("noscripts", "pw-d");
    int64_t took;
    dlock_lock *l = NULL;
    int rc = try_acquire(c, "acl", &l, &took);
    assert_int_equal(rc, DLOCK_ERR_AUTH);
    assert_non_null(strstr(dlock_errmsg(), "NOPERM"));
    dlock_client_free(c);

    /* A wrong password: AUTH refused, at once, also for a known user. */
    c = user_client("noconfig", "wrong");
    rc = try_acquire(c, "acl", &l, &took);
    printf("FIG wrong_password_acquire_ms %lld ms\n", (long long)took);
    assert_int_equal(rc, DLOCK_ERR_AUTH);
    assert_true(took <= call_bound_ms());
    dlock_client_free(c);
    c = user_client("nosuchuser", "pw");
    rc = try_acquire(c, "acl", &l, &took);
    assert_int_equal(rc, DLOCK_ERR_AUTH);
    dlock_client_free(c);
}

int main(void)
{
    static char lru[] = "allkeys-lru", ttl[] = "volatile-ttl";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_busy_script_is_unavailable, teardown),
        cmocka_unit_test_teardown(test_loading_is_unavailable, teardown),
        cmocka_unit_test_teardown(test_replica_is_unavailable, teardown),
        cmocka_unit_test_teardown(test_client_pause_write_times_out, teardown),
        cmocka_unit_test_teardown(test_maxmemory_noeviction_is_unavailable, teardown),
        IT_CASE_WITH("test_allkeys_lru_warns", eviction_policy_warns, NULL, teardown, lru),
        IT_CASE_WITH("test_volatile_ttl_warns", eviction_policy_warns, NULL, teardown, ttl),
        cmocka_unit_test_teardown(test_transient_info_error_keeps_policy_check, teardown),
        cmocka_unit_test_teardown(test_acl_users, teardown),
    };
    return cmocka_run_group_tests_name("server_states", tests, NULL, NULL);
}
