/*
 * test_errors.c: every way a call can fail other than bad input (test_errors_input.c),
 * each with its exact code: the codes' names and messages, a lock released through a
 * second handle, a reply far larger than any lock reply, a key of the wrong type, a
 * refused SELECT, a client used across fork(), refused authentication, a server at its
 * maxclients, and servers that are down, paused or gone.
 *
 * Liveness bounds (a call on a dead or paused server returns within its deadline)
 * are asserted times DLOCK_TEST_SLACK; the measured times are printed as FIG lines.
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
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

static void second_release_through_adopted_handle(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, 500);
    dlock_lock *l = it_acquire(c, "dbl", 5000);
    dlock_lock *twin = NULL;
    assert_int_equal(dlock_lock_adopt(c, "dbl", dlock_token(l), &twin), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(dlock_release(twin), DLOCK_ERR_LOST);
    dlock_client_free(c);
}

static void error_names_and_messages(void **state)
{
    (void)state;
    /* Every code of the list, whatever its length: the list is the X-macro. */
#define COUNT_(name, num, msg) +1
    const int ncodes = 0 DLOCK_ERR_MAP(COUNT_);
#undef COUNT_
    assert_true(ncodes >= 14);
    for (int e = 0; e < ncodes; e++) {
        const char *m = dlock_strerror(e), *n = dlock_errname(e);
        assert_non_null(m);
        assert_non_null(n);
        assert_true(m[0] != '\0');
        assert_int_equal(strncmp(n, "DLOCK_", 6), 0);
        assert_null(strstr(m, "unknown"));
        for (int f = 0; f < e; f++) {
            assert_string_not_equal(m, dlock_strerror(f));
            assert_string_not_equal(n, dlock_errname(f));
        }
    }
    assert_string_equal(dlock_errname(DLOCK_OK), "DLOCK_OK");
    assert_string_equal(dlock_errname(DLOCK_ERR_BUSY), "DLOCK_ERR_BUSY");
    const int unknown[] = {999, -1, ncodes};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        assert_non_null(strstr(dlock_strerror(unknown[i]), "unknown"));
        assert_string_equal(dlock_errname(unknown[i]), "DLOCK_ERR_UNKNOWN");
    }
    assert_string_equal(dlock_version(), DLOCK_VERSION_STRING);
}

static void huge_reply_is_refused(void **state)
{
    (void)state;
    size_t len = 1024 * 1024;
    char *big = malloc(len);
    assert_non_null(big);
    memset(big, 'x', len);
    redisReply *r = dh_cmd(&it_srv, "SET %s %b", "dlock:{big}", big, len);
    assert_non_null(r);
    freeReplyObject(r);
    free(big);

    dlock_client *c = it_client(&it_srv, 500);
    dlock_holder h;
    int rc = dlock_inspect(c, "big", &h);
    it_show("inspect of a 1 MiB value", rc);
    assert_int_equal(rc, DLOCK_ERR_PROTOCOL);
    /* The client is still usable, for another name and for this one. */
    dlock_lock *l = it_acquire(c, "not-big", 2000);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    l = IT_SENTINEL(l);
    rc = dlock_acquire(c, "big", NULL, &l);
    it_show("acquire of a name whose key holds 1 MiB", rc);
    assert_int_equal(rc, DLOCK_ERR_BUSY);
    assert_null(l);
    it_del(&it_srv, "dlock:{big}");
    dlock_client_free(c);
}

static void wrong_type_key(void **state)
{
    (void)state;
    redisReply *r = dh_cmd(&it_srv, "HSET dlock:{wt} a b");
    assert_non_null(r);
    freeReplyObject(r);
    dlock_client *c = it_client(&it_srv, 500);
    dlock_lock *l = IT_SENTINEL(l);
    int rc = dlock_acquire(c, "wt", NULL, &l);
    it_show("acquire over a hash key", rc);
    /* Not ours and not free: any refusal will do (the acquire script's SET NX meets
     * no -WRONGTYPE, so BUSY is as right as the PROTOCOL error -WRONGTYPE would
     * give). */
    assert_int_not_equal(rc, DLOCK_OK);
    assert_null(l);
    dlock_holder h;
    rc = dlock_inspect(c, "wt", &h);
    it_show("inspect of a hash key", rc);
    assert_int_not_equal(rc, DLOCK_OK);
    r = dh_cmd(&it_srv, "HGET dlock:{wt} a");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "b"); /* untouched */
    freeReplyObject(r);
    l = it_acquire(c, "wt-ok", 1000);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    it_del(&it_srv, "dlock:{wt}");
    dlock_client_free(c);
}

static void refused_select_takes_nothing(void **state)
{
    (void)state;
    /* Database 99 does not exist (16 by default): SELECT is refused, and the acquire
     * must not run in database 0 instead. */
    char url[160];
    snprintf(url, sizeof url, "%s/99", it_srv.url);
    dlock_config cfg = {0};
    cfg.timeout_ms = 500;
    dlock_client *c = it_client_cfg(url, &cfg);
    for (int i = 0; i < 2; i++) {
        dlock_lock *l = IT_SENTINEL(l);
        int rc = dlock_acquire(c, "sel", NULL, &l);
        it_show("acquire with SELECT 99 refused", rc);
        assert_int_not_equal(rc, DLOCK_OK);
        assert_null(l);
        assert_int_equal(it_exists(&it_srv, "dlock:{sel}"), 0);
    }
    dlock_client_free(c);

    /* A database that exists is used, and db 0 stays empty of our key. */
    snprintf(url, sizeof url, "%s/3", it_srv.url);
    c = it_client_cfg(url, &cfg);
    dlock_lock *l = it_acquire(c, "sel", 2000);
    assert_int_equal(it_exists(&it_srv, "dlock:{sel}"), 0);
    redisReply *r;
    redisContext *rc3 = dh_connect(&it_srv);
    assert_non_null(rc3);
    r = redisCommand(rc3, "SELECT 3");
    freeReplyObject(r);
    r = redisCommand(rc3, "EXISTS dlock:{sel}");
    assert_non_null(r);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    redisFree(rc3);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

static void fork_child_gets_closed(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, 500);
    dlock_lock *held = it_acquire(c, "fork", 10000);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* No cmocka here: report through the exit status. */
        dlock_lock *l = NULL;
        dlock_holder h;
        int bad = 0;
        bad |= (dlock_acquire(c, "fork-child", NULL, &l) != DLOCK_ERR_CLOSED) << 0;
        bad |= (dlock_inspect(c, "fork", &h) != DLOCK_ERR_CLOSED) << 1;
        bad |= (dlock_extend(held, 5000) != DLOCK_ERR_CLOSED) << 2;
        bad |= (dlock_check(held) != DLOCK_ERR_CLOSED) << 3;
        bad |= (dlock_release(held) != DLOCK_ERR_CLOSED) << 4;
        _exit(bad);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    printf("INFO fork child failures bitmask: 0x%x\n", WEXITSTATUS(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* The child touched nothing of ours: the lock is still held, the client works. */
    char key[64];
    it_key(key, sizeof key, "fork");
    assert_int_equal(it_exists(&it_srv, key), 1);
    assert_int_equal(dlock_check(held), DLOCK_OK);
    assert_int_equal(dlock_release(held), DLOCK_OK);
    it_key(key, sizeof key, "fork-child");
    assert_int_equal(it_exists(&it_srv, key), 0);
    dlock_client_free(c);
}

/* ---- authentication ---------------------------------------------------------- */

static dh_server g_auth;

static int setup_auth(void **state)
{
    (void)state;
    const char *const args[] = {"--requirepass", "pw", NULL};
    assert_int_equal(dh_server_start(&g_auth, args), 0);
    redisReply *r = dh_cmd(&g_auth, "ACL SETUSER alice on >alicepw ~* &* +@all");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    /* bob may connect and read INFO, but may not run scripts. */
    r = dh_cmd(&g_auth, "ACL SETUSER bob on >bobpw ~* &* +@all -eval -evalsha -script");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    return 0;
}

static int teardown_auth(void **state)
{
    (void)state;
    dh_server_stop(&g_auth);
    return 0;
}

/* Acquire and release on url (and cfg.password), returning the acquire's code. */
static int try_auth(const char *userpass, const char *cfg_password)
{
    char url[256];
    snprintf(url, sizeof url, "redis://%s127.0.0.1:%d", userpass, g_auth.port);
    dlock_config cfg = {0};
    cfg.timeout_ms = 500;
    cfg.password = cfg_password;
    dlock_client *c = it_client_cfg(url, &cfg);
    dlock_lock *l = IT_SENTINEL(l);
    int rc = dlock_acquire(c, "auth", NULL, &l);
    printf("INFO auth '%s' cfg.password=%s -> %s: %s\n", userpass,
           cfg_password ? cfg_password : "(null)", dlock_errname(rc), dlock_errmsg());
    if (rc == DLOCK_OK)
        assert_int_equal(dlock_release(l), DLOCK_OK);
    else
        assert_null(l);
    dlock_client_free(c);
    return rc;
}

static void auth_codes(void **state)
{
    (void)state;
    assert_int_equal(try_auth("", NULL), DLOCK_ERR_AUTH);          /* none: -NOAUTH */
    assert_int_equal(try_auth(":wrong@", NULL), DLOCK_ERR_AUTH);   /* -WRONGPASS */
    assert_int_equal(try_auth("", "wrong"), DLOCK_ERR_AUTH);       /* through cfg */
    assert_int_equal(try_auth(":pw@", NULL), DLOCK_OK);            /* in the URL */
    assert_int_equal(try_auth("", "pw"), DLOCK_OK);                /* through cfg */
    assert_int_equal(try_auth(":pw@", "wrong"), DLOCK_OK);         /* the URL wins */
    assert_int_equal(try_auth("alice:alicepw@", NULL), DLOCK_OK);  /* ACL user */
    assert_int_equal(try_auth("alice:pw@", NULL), DLOCK_ERR_AUTH); /* wrong for alice */
    assert_int_equal(try_auth("mallory:alicepw@", NULL), DLOCK_ERR_AUTH);
    assert_int_equal(try_auth("bob:bobpw@", NULL), DLOCK_ERR_AUTH); /* -NOPERM on scripts */
    assert_int_equal(try_auth("al%69ce:alicepw@", NULL), DLOCK_OK); /* percent-encoded */
}

/* A server at its maxclients answers a new connection's first command with "-ERR max
 * number of clients reached" and closes it: a server that cannot serve now, not a
 * protocol error and not a refused password (with a password, the refusal answers the
 * AUTH). Once a client leaves, the same client is served. */
static void max_clients_is_unavailable(void **state)
{
    (void)state;
    static const char *const with_pw[] = {"--maxclients", "1", "--requirepass", "mcpw", NULL};
    static const char *const without[] = {"--maxclients", "1", NULL};
    const char *const *args[] = {without, with_pw};
    for (int k = 0; k < 2; k++) {
        dh_server s;
        assert_int_equal(dh_server_start(&s, args[k]), 0);
        redisContext *taken = dh_connect(&s); /* the one slot */
        assert_non_null(taken);
        dlock_config cfg;
        it_config_init(&cfg);
        cfg.password = k == 1 ? "mcpw" : NULL;
        dlock_client *c = it_client_cfg(s.url, &cfg);
        dlock_lock *l = NULL;
        int rc = dlock_acquire(c, "mc", NULL, &l);
        if (rc != DLOCK_ERR_UNAVAILABLE || strstr(dlock_errmsg(), "max number of clients") == NULL)
            fail_msg("%s: %s (%s)", k ? "with a password" : "without", dlock_errname(rc),
                     dlock_errmsg());
        redisFree(taken);
        dh_sleep_ms(50);
        assert_int_equal(dlock_acquire(c, "mc", NULL, &l), DLOCK_OK);
        assert_int_equal(dlock_release(l), DLOCK_OK);
        dlock_client_free(c);
        dh_server_stop(&s);
    }
}

/* ---- servers that are down, paused or gone ---------------------------------- */

static dlock_client *timed_client(int64_t *bound_ms)
{
    dlock_config cfg = {0};
    cfg.timeout_ms = it_timeout_ms();
    cfg.connect_timeout_ms = 200 * dh_slack();
    *bound_ms = (cfg.timeout_ms + cfg.connect_timeout_ms) * dh_slack();
    return it_client_cfg(it_srv.url, &cfg);
}

static void server_down(void **state)
{
    (void)state;
    int64_t bound;
    dlock_client *c = timed_client(&bound);
    dh_server_stop(&it_srv); /* nothing listens on the port any more */
    dlock_lock *l = IT_SENTINEL(l);
    int64_t t0 = dh_now_ms();
    int rc = dlock_acquire(c, "down", NULL, &l);
    int64_t took = dh_now_ms() - t0;
    it_show("acquire on a stopped server", rc);
    printf("FIG down_acquire_ms %lld ms\n", (long long)took);
    assert_true(rc == DLOCK_ERR_IO || rc == DLOCK_ERR_TIMEOUT);
    assert_null(l);
    assert_true(took <= bound);

    /* A waiting acquire on a dead server ends at its deadline with the server's
     * error, never BUSY (nobody refused us). */
    dlock_opts o = {0};
    o.wait_ms = 300;
    t0 = dh_now_ms();
    rc = dlock_acquire(c, "down", &o, &l);
    took = dh_now_ms() - t0;
    it_show("waiting acquire on a stopped server", rc);
    printf("FIG down_wait300_ms %lld ms\n", (long long)took);
    assert_true(rc == DLOCK_ERR_IO || rc == DLOCK_ERR_TIMEOUT);
    assert_true(took <= 300 * dh_slack() + bound);
    dlock_client_free(c);
}

static void server_paused(void **state)
{
    (void)state;
    int64_t bound;
    dlock_client *c = timed_client(&bound);
    /* Connect first, so that the pause hits a command and not the connect. */
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "paused", &h), DLOCK_OK);

    dh_server_pause(&it_srv);
    dlock_opts o = {0};
    o.ttl_ms = 5000;
    dlock_lock *l = IT_SENTINEL(l);
    int64_t t0 = dh_now_ms();
    int rc = dlock_acquire(c, "paused", &o, &l);
    int64_t took = dh_now_ms() - t0;
    it_show("acquire on a paused server", rc);
    printf("FIG paused_acquire_ms %lld ms\n", (long long)took);
    assert_int_equal(rc, DLOCK_ERR_TIMEOUT);
    assert_null(l);
    /* The per-node deadline, plus a margin for the scheduler. */
    assert_true(took <= (it_timeout_ms() + 100) * dh_slack());

    /* Still paused: inspect times out too, and does not wait longer. */
    t0 = dh_now_ms();
    rc = dlock_inspect(c, "other", &h);
    took = dh_now_ms() - t0;
    printf("FIG paused_inspect_ms %lld ms\n", (long long)took);
    assert_true(rc == DLOCK_ERR_TIMEOUT || rc == DLOCK_ERR_IO);
    assert_true(took <= bound + 100 * dh_slack());

    dh_server_resume(&it_srv);
    /* Works again, on a name the timed-out attempt never touched. */
    l = it_acquire(c, "after-pause", 2000);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    /* What became of the timed-out attempt's key: the clean-up release was sent, not
     * awaited, so whether it landed after the acquire is shown, not asserted. */
    dh_sleep_ms(100);
    char key[64];
    it_key(key, sizeof key, "paused");
    printf("INFO after resume, key of the timed-out acquire: exists=%lld pttl=%lld\n",
           it_exists(&it_srv, key), it_pttl(&it_srv, key));
    assert_int_equal(dlock_inspect(c, "paused", &h), DLOCK_OK);
    dlock_client_free(c);
}

static void all_servers_gone(void **state)
{
    (void)state;
    int64_t bound;
    dlock_client *c = timed_client(&bound);
    dlock_lock *l1 = it_acquire(c, "gone1", 10000);
    dlock_lock *l2 = it_acquire(c, "gone2", 10000);
    dlock_lock *l3 = it_acquire(c, "gone3", 10000);
    dh_server_kill(&it_srv);

    int64_t t0 = dh_now_ms();
    int rc = dlock_extend(l1, 5000);
    it_show("extend with the server gone", rc);
    assert_int_not_equal(rc, DLOCK_OK);
    rc = dlock_check(l1);
    it_show("check with the server gone", rc);
    assert_int_not_equal(rc, DLOCK_OK);
    dlock_holder h;
    rc = dlock_inspect(c, "gone1", &h);
    it_show("inspect with the server gone", rc);
    assert_true(rc == DLOCK_ERR_IO || rc == DLOCK_ERR_TIMEOUT);
    dlock_lock *l = IT_SENTINEL(l);
    rc = dlock_acquire(c, "gone4", NULL, &l);
    it_show("acquire with the server gone", rc);
    assert_true(rc == DLOCK_ERR_IO || rc == DLOCK_ERR_TIMEOUT);
    assert_null(l);
    rc = dlock_release(l1);
    it_show("release with the server gone", rc);
    assert_int_not_equal(rc, DLOCK_OK);
    assert_int_not_equal(rc, DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_detach(l2), DLOCK_OK);
    printf("FIG gone_six_calls_ms %lld ms\n", (long long)(dh_now_ms() - t0));
    assert_true(dh_now_ms() - t0 <= 6 * bound);
    /* l3 is still attached: freeing the client must not block or crash. */
    (void)l3;
    t0 = dh_now_ms();
    dlock_client_free(c);
    printf("FIG gone_client_free_ms %lld ms\n", (long long)(dh_now_ms() - t0));
    assert_true(dh_now_ms() - t0 <= bound);
}

int main(void)
{
    const struct CMUnitTest args[] = {
        cmocka_unit_test(second_release_through_adopted_handle),
        cmocka_unit_test(error_names_and_messages),
        cmocka_unit_test(huge_reply_is_refused),
        cmocka_unit_test(wrong_type_key),
        cmocka_unit_test(refused_select_takes_nothing),
        cmocka_unit_test(fork_child_gets_closed),
    };
    const struct CMUnitTest auth[] = {
        cmocka_unit_test(auth_codes),
        cmocka_unit_test(max_clients_is_unavailable),
    };
    /* Each test here gets a fresh server and stops it; the fixture only cleans up. */
    const struct CMUnitTest down[] = {
        cmocka_unit_test_setup_teardown(server_down, it_srv_setup, it_srv_teardown),
        cmocka_unit_test_setup_teardown(server_paused, it_srv_setup, it_srv_teardown),
        cmocka_unit_test_setup_teardown(all_servers_gone, it_srv_setup, it_srv_teardown),
    };
    int failed = cmocka_run_group_tests_name("errors", args, it_srv_setup, it_srv_teardown);
    failed += cmocka_run_group_tests_name("auth", auth, setup_auth, teardown_auth);
    failed += cmocka_run_group_tests_name("down", down, NULL, NULL);
    return failed ? 1 : 0;
}
