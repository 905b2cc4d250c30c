/*
 * test_lock_server.c: a lock on servers that are not plain: one that forgets its scripts
 * between calls (SCRIPT FLUSH), eviction policies (none reported on a default server,
 * allkeys-lru and volatile-ttl reported once, strict mode refusing them and leaving no
 * key behind), and a server reached through a unix-domain socket. The lock's life on a
 * plain server is in test_lock.c.
 *
 * Facts are asserted on what the server holds (EXISTS and PTTL through the support
 * library), not only on what the library says about itself.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <stdio.h>

static void flush(void)
{
    redisReply *r = dh_cmd(&it_srv, "SCRIPT FLUSH");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

static void script_flush_between_operations(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, 500);
    /* Warm up so that the scripts are loaded and then forgotten. */
    dlock_lock *l = it_acquire(c, "sf", 5000);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    flush();
    l = it_acquire(c, "sf", 5000);
    flush();
    assert_int_equal(dlock_extend(l, 6000), DLOCK_OK);
    flush();
    assert_int_equal(dlock_check(l), DLOCK_OK);
    flush();
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "sf", &h), DLOCK_OK);
    assert_int_equal(h.held, 1);
    flush();
    assert_int_equal(dlock_release(l), DLOCK_OK);
    char key[64];
    it_key(key, sizeof key, "sf");
    assert_int_equal(it_exists(&it_srv, key), 0);
    dlock_client_free(c);
}

/* A client of url with a 500 ms timeout whose log messages go to *lg (emptied first). */
static dlock_client *logged_client(const char *url, it_log *lg)
{
    it_log_init(lg);
    dlock_config cfg = {0};
    cfg.timeout_ms = 500;
    cfg.log = it_log_cb;
    cfg.log_user = lg;
    return it_client_cfg(url, &cfg);
}

static void no_eviction_warning_on_default_server(void **state)
{
    (void)state;
    it_log lg;
    dlock_client *c = logged_client(it_srv.url, &lg);
    dlock_lock *l = it_acquire(c, "noev", 1000);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
    assert_int_equal(it_log_count(&lg, DLOCK_LOG_WARN, NULL), 0);
    assert_int_equal(it_log_count(&lg, DLOCK_LOG_ERROR, NULL), 0);
}

/* ---- a server whose eviction policy can drop lock keys ---------------------- */

static dh_server g_lru;

static int setup_lru(void **state)
{
    (void)state;
    const char *const args[] = {"--maxmemory-policy", "allkeys-lru", NULL};
    assert_int_equal(dh_server_start(&g_lru, args), 0);
    return 0;
}

static int teardown_lru(void **state)
{
    (void)state;
    dh_server_stop(&g_lru);
    return 0;
}

static void allkeys_lru_is_reported(void **state)
{
    (void)state;
    it_log lg;
    dlock_client *c = logged_client(g_lru.url, &lg);
    /* No connection before the first call, so nothing to report yet. */
    assert_int_equal(lg.n, 0);
    dlock_lock *l = it_acquire(c, "lru", 1000);
    /* Reported by the first call, which still succeeds (not strict). */
    assert_int_equal(it_log_count(&lg, DLOCK_LOG_WARN, "allkeys-lru"), 1);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    l = it_acquire(c, "lru", 1000);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    /* Once per server, not once per call. */
    assert_int_equal(it_log_count(&lg, DLOCK_LOG_WARN, "allkeys-lru"), 1);
    dlock_client_free(c);
}

static void volatile_policy_is_reported(void **state)
{
    (void)state;
    redisReply *r = dh_cmd(&g_lru, "CONFIG SET maxmemory-policy volatile-ttl");
    assert_non_null(r);
    freeReplyObject(r);
    it_log lg;
    dlock_client *c = logged_client(g_lru.url, &lg);
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "lru", &h), DLOCK_OK);
    assert_int_equal(it_log_count(&lg, DLOCK_LOG_WARN, "volatile-ttl"), 1);
    dlock_client_free(c);
    r = dh_cmd(&g_lru, "CONFIG SET maxmemory-policy allkeys-lru");
    freeReplyObject(r);
}

static void strict_refuses_evicting_server(void **state)
{
    (void)state;
    dlock_config cfg = {0};
    cfg.timeout_ms = 500;
    cfg.strict = 1;
    dlock_client *c = it_client_cfg(g_lru.url, &cfg);
    char key[64];
    it_key(key, sizeof key, "strict");
    /* Every call is refused, not only the one that made the connection, and a refused
     * acquire leaves no lock behind on the server (it would block everyone else for
     * the default 30 s with nobody to release it). */
    for (int i = 0; i < 3; i++) {
        dlock_lock *l = (dlock_lock *)&l;
        int rc = dlock_acquire(c, "strict", NULL, &l);
        it_show("strict acquire on allkeys-lru", rc);
        assert_int_equal(rc, DLOCK_ERR_UNAVAILABLE);
        assert_null(l);
        long long left = it_exists(&g_lru, key);
        if (left)
            printf("INFO refused acquire left %s behind, PTTL %lld\n", key, it_pttl(&g_lru, key));
        assert_int_equal(left, 0);
    }
    dlock_client_free(c);
}

/* ---- a unix-domain socket server -------------------------------------------- */

static dh_server g_unix;
static char g_sockdir[512], g_sock[600];

static int setup_unix(void **state)
{
    (void)state;
    assert_int_equal(it_tmpdir(g_sockdir, sizeof g_sockdir, "sock"), 0);
    snprintf(g_sock, sizeof g_sock, "%s/r.sock", g_sockdir);
    const char *const args[] = {"--unixsocket", g_sock, "--unixsocketperm", "700", NULL};
    assert_int_equal(dh_server_start(&g_unix, args), 0);
    return 0;
}

static int teardown_unix(void **state)
{
    (void)state;
    dh_server_stop(&g_unix);
    it_tmpdir_remove(g_sockdir);
    return 0;
}

static void unix_socket_url(void **state)
{
    (void)state;
    char url[700];
    snprintf(url, sizeof url, "unix://%s", g_sock);
    dlock_config cfg = {0};
    cfg.timeout_ms = 500;
    dlock_client *c = it_client_cfg(url, &cfg);
    dlock_lock *l = it_acquire(c, "ux", 2000);
    char key[64];
    it_key(key, sizeof key, "ux");
    assert_int_equal(it_exists(&g_unix, key), 1); /* same server, through TCP */
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(it_exists(&g_unix, key), 0);
    dlock_client_free(c);
}

int main(void)
{
    /* On it_srv, a server as started by default. */
    const struct CMUnitTest defaults[] = {
        cmocka_unit_test(script_flush_between_operations),
        cmocka_unit_test(no_eviction_warning_on_default_server),
    };
    const struct CMUnitTest eviction[] = {
        cmocka_unit_test(allkeys_lru_is_reported),
        cmocka_unit_test(volatile_policy_is_reported),
        cmocka_unit_test(strict_refuses_evicting_server),
    };
    const struct CMUnitTest unixsock[] = {
        cmocka_unit_test(unix_socket_url),
    };
    int failed =
        cmocka_run_group_tests_name("lock_server", defaults, it_srv_setup, it_srv_teardown);
    failed += cmocka_run_group_tests_name("eviction", eviction, setup_lru, teardown_lru);
    failed += cmocka_run_group_tests_name("unix", unixsock, setup_unix, teardown_unix);
    return failed ? 1 : 0;
}
