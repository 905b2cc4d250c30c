/*
 * test_scale.c: one redis-server under numbers far past the other tests': 100,000
 * distinct names acquired and released, and 2,000 clients holding a lock each at once.
 *
 * Asserted: every call succeeds; every name's lock key is gone after its release; the
 * fence counters, the one thing a used name leaves behind, expire after their
 * retention (20 s here), so that the server's key count and memory come back to where
 * they started; 2,000 clients each hold their own name at the same time, and the
 * server sees at least 2,000 connections. Figures: names/s, the server's memory before,
 * with the counters, and after they expired, and the clients' connect-and-hold time.
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
#include <sys/resource.h>

#define NAMES        100000
#define CLIENTS      2000
#define RETENTION_MS 20000 /* longer than the loop takes, even on a loaded machine */

static long long server_memory(dh_server *s)
{
    redisReply *r = dh_cmd(s, "INFO memory");
    assert_non_null(r);
    long long v = dh_info_long(r, "used_memory");
    freeReplyObject(r);
    return v;
}

static long long server_keys(dh_server *s)
{
    redisReply *r = dh_cmd(s, "DBSIZE");
    assert_non_null(r);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

static dlock_client *client_with_retention(dh_server *s)
{
    dlock_config cfg;
    it_config_init(&cfg);
    cfg.fence_retention_ms = RETENTION_MS;
    return it_client_cfg(s->url, &cfg);
}

static void hundred_thousand_names(void **state)
{
    (void)state;
    dlock_client *c = client_with_retention(&it_srv);
    freeReplyObject(dh_cmd(&it_srv, "FLUSHALL"));
    long long mem0 = server_memory(&it_srv), keys0 = server_keys(&it_srv);
    int64_t t0 = dh_now_ms();
    char name[32];
    for (int i = 0; i < NAMES; i++) {
        snprintf(name, sizeof name, "scale-%d", i);
        dlock_lock *l = NULL;
        int rc = dlock_acquire(c, name, NULL, &l);
        if (rc != DLOCK_OK)
            fail_msg("name %d: acquire: %s (%s)", i, dlock_errname(rc), dlock_errmsg());
        rc = dlock_release(l);
        if (rc != DLOCK_OK)
            fail_msg("name %d: release: %s (%s)", i, dlock_errname(rc), dlock_errmsg());
    }
    int64_t took = dh_now_ms() - t0;
    long long mem1 = server_memory(&it_srv), keys1 = server_keys(&it_srv);
    /* Only the fence counters are left, one per name, until their retention ends: all
     * of them, when the loop took less than the retention (the first counter was
     * written at its start). */
    printf("FIG scale_counters_after_loop %lld count\n", keys1 - keys0);
    assert_true(keys1 - keys0 <= NAMES);
    if (took < RETENTION_MS - 1000)
        assert_int_equal(keys1 - keys0, NAMES);
    else
        printf("INFO the loop took %lld ms, past the %d ms retention: some counters expired "
               "during it\n",
               (long long)took, RETENTION_MS);
    int64_t deadline = dh_now_ms() + (RETENTION_MS + 10000) * dh_slack();
    long long keys2;
    while ((keys2 = server_keys(&it_srv)) > keys0 && dh_now_ms() < deadline)
        dh_sleep_ms(200);
    long long mem2 = server_memory(&it_srv);
    printf("FIG scale_names %d count\n", NAMES);
    printf("FIG scale_names_per_s %.0f names/s\n", NAMES * 1000.0 / (double)(took ? took : 1));
    printf("FIG scale_server_memory_before_kib %lld KiB\n", mem0 / 1024);
    printf("FIG scale_server_memory_with_counters_kib %lld KiB\n", mem1 / 1024);
    printf("FIG scale_server_memory_after_expiry_kib %lld KiB\n", mem2 / 1024);
    printf("FIG scale_keys_left_after_expiry %lld count\n", keys2 - keys0);
    assert_int_equal(keys2, keys0);
    /* The memory the counters held is given back (allocator slack aside). */
    assert_true(mem2 - mem0 < (mem1 - mem0) / 4);
    dlock_client_free(c);
}

static void two_thousand_clients(void **state)
{
    (void)state;
    dlock_client **c = calloc(CLIENTS, sizeof *c);
    dlock_lock **l = calloc(CLIENTS, sizeof *l);
    assert_true(c != NULL && l != NULL);
    int64_t t0 = dh_now_ms();
    char name[32];
    for (int i = 0; i < CLIENTS; i++) {
        c[i] = client_with_retention(&it_srv);
        snprintf(name, sizeof name, "client-%d", i);
        int rc = dlock_acquire(c[i], name, NULL, &l[i]);
        if (rc != DLOCK_OK)
            fail_msg("client %d: acquire: %s (%s)", i, dlock_errname(rc), dlock_errmsg());
    }
    int64_t took = dh_now_ms() - t0;
    long long connected = it_connected_clients(&it_srv);
    /* Every lock held at once, each by its own client. */
    for (int i = 0; i < CLIENTS; i += 97) {
        snprintf(name, sizeof name, "client-%d", i);
        it_expect_holder(&it_srv, name, dlock_token(l[i]));
    }
    for (int i = 0; i < CLIENTS; i++) {
        assert_int_equal(dlock_release(l[i]), DLOCK_OK);
        dlock_client_free(c[i]);
    }
    printf("FIG scale_clients %d count\n", CLIENTS);
    printf("FIG scale_server_connections %lld count\n", connected);
    printf("FIG scale_clients_connect_and_hold_ms %lld ms\n", (long long)took);
    assert_true(connected >= CLIENTS);
    free(c);
    free(l);
}

/* Descriptors for 2,000 clients here, and for their connections in the server, which
 * inherits this limit (redis-server lowers its maxclients to fit its own). */
static int setup(void **state)
{
    struct rlimit rl;
    rlim_t want = CLIENTS * 2 + 256;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    if (rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            return -1;
    }
    if (rl.rlim_cur < want) {
        fprintf(stderr,
                "test_scale: the open-files limit %llu is below the %llu it needs (raise the "
                "hard limit: ulimit -Hn)\n",
                (unsigned long long)rl.rlim_cur, (unsigned long long)want);
        return -1;
    }
    return it_srv_setup(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hundred_thousand_names),
        cmocka_unit_test(two_thousand_clients),
    };
    return cmocka_run_group_tests(tests, setup, it_srv_teardown);
}
