/*
 * test_renew.c: automatic renewal and lost-lock notification (the library side; the command's is in
 * test_run.c).
 *
 * Asserted exactly: locks stay held past their ttl while renewed, a stolen lock is
 * reported lost (callback once, fd readable, later calls LOST), renewal batches (script
 * calls counted on the server). With DLOCK_TEST_SLACK: the loss is noticed within
 * ttl/3 plus the timeout after a steal, and before the lease ends when the server is
 * unreachable.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "internal.h"
#include "itest.h"

#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int64_t mono_ms(void)
{
    return dh_now_ms();
}

typedef struct lost_log {
    atomic_int calls;
    _Atomic int64_t at_ms;
    dlock_lock *seen;
} lost_log;

static void on_lost(dlock_lock *l, void *user)
{
    lost_log *lg = user;
    lg->seen = l;
    lg->at_ms = mono_ms();
    atomic_fetch_add(&lg->calls, 1);
    /* What the callback may do: read the handle. */
    assert_true(dlock_remaining_ms(l) <= 0);
    assert_non_null(dlock_lock_name(l));
}

static dlock_lock *renewed(dlock_client *c, const char *name, int64_t ttl_ms, lost_log *lg)
{
    dlock_opts o = {0};
    o.ttl_ms = ttl_ms;
    o.auto_renew = 1;
    o.on_lost = lg ? on_lost : NULL;
    o.on_lost_user = lg;
    dlock_lock *l = NULL;
    int rc = dlock_acquire(c, name, &o, &l);
    if (rc != DLOCK_OK)
        it_show("renewed acquire", rc);
    assert_int_equal(rc, DLOCK_OK);
    return l;
}

static void renewal_keeps_a_lock_past_its_ttl(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, it_timeout_ms()), *other = it_client(&it_srv, 500);
    lost_log lg = {0};
    dlock_lock *l = renewed(c, "long-job", 300, &lg);
    char key[64];
    it_key(key, sizeof key, "long-job");
    for (int i = 0; i < 10; i++) { /* 1.5 s: five leases */
        dh_sleep_ms(150);
        assert_true(dlock_remaining_ms(l) > 0);
        assert_true(it_pttl(&it_srv, key) > 0);
        dlock_lock *x = NULL;
        assert_int_equal(dlock_acquire(other, "long-job", NULL, &x), DLOCK_ERR_BUSY);
    }
    assert_int_equal(atomic_load(&lg.calls), 0);
    /* dlock_extend changes the renewal's ttl too. */
    assert_int_equal(dlock_extend(l, 3000), DLOCK_OK);
    dh_sleep_ms(1100);
    assert_true(it_pttl(&it_srv, key) > 1000);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(it_exists(&it_srv, key), 0);
    dlock_client_free(c);
    dlock_client_free(other);
}

static void steal_is_lost_at_once(void **state)
{
    (void)state;
    const int64_t ttl = 900 * dh_slack();
    dlock_client *c = it_client(&it_srv, it_timeout_ms());
    lost_log lg = {0};
    dlock_lock *l = renewed(c, "stolen", ttl, &lg);
    int fd = dlock_lost_fd(l);
    assert_true(fd >= 0);
    char key[64];
    it_key(key, sizeof key, "stolen");
    redisReply *r =
        dh_cmd(&it_srv, "SET %s %s PX 60000", key, "0123456789abcdef0123456789abcdef thief");
    assert_non_null(r);
    freeReplyObject(r);
    int64_t stolen_at = mono_ms();
    struct pollfd p = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, (int)(5 * ttl * dh_slack())), 1);
    int64_t noticed = mono_ms() - stolen_at;
    printf("FIG steal_noticed_ms %lld ms (ttl %lld)\n", (long long)noticed, (long long)ttl);
    assert_true(noticed <= (ttl / 3 + it_timeout_ms() + 50) * dh_slack());
    /* The fd and the callback are signalled one after the other, in no promised order. */
    for (int i = 0; i < 100 && atomic_load(&lg.calls) == 0; i++)
        dh_sleep_ms(1);
    assert_int_equal(atomic_load(&lg.calls), 1);
    assert_ptr_equal(lg.seen, l);
    assert_true(dlock_remaining_ms(l) <= 0);
    assert_int_equal(dlock_extend(l, 1000), DLOCK_ERR_LOST);
    assert_int_equal(dlock_check(l), DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(l), DLOCK_ERR_LOST);
    /* The thief's key is untouched. */
    char *v = it_get(&it_srv, key);
    assert_non_null(strstr(v, "thief"));
    free(v);
    it_del(&it_srv, key);
    dh_sleep_ms(ttl);
    assert_int_equal(atomic_load(&lg.calls), 1); /* once */
    dlock_client_free(c);
}

static void unreachable_is_lost_before_the_lease_ends(void **state)
{
    (void)state;
    /* The lease must leave room for several per-node timeouts (100 ms * slack). */
    const int64_t ttl = 900 * dh_slack();
    dlock_client *c = it_client(&it_srv, it_timeout_ms());
    lost_log lg = {0};
    dlock_lock *l = renewed(c, "paused", ttl, &lg);
    dh_sleep_ms(50);
    /* The last renewal the server saw is at most now; its lease ends ttl later. */
    int64_t paused_at = mono_ms();
    dh_server_pause(&it_srv);
    while (atomic_load(&lg.calls) == 0 && mono_ms() - paused_at < 5 * ttl * dh_slack())
        dh_sleep_ms(5);
    int64_t lost_after = lg.at_ms - paused_at;
    dh_server_resume(&it_srv);
    printf("FIG unreachable_lost_after_ms %lld ms (ttl %lld)\n", (long long)lost_after,
           (long long)ttl);
    assert_int_equal(atomic_load(&lg.calls), 1);
    assert_true(lost_after < ttl); /* before any competitor can be granted it */
    assert_true(dlock_remaining_ms(l) <= 0);
    dlock_release(l);
    dlock_client_free(c);
}

static void short_blip_is_not_a_loss(void **state)
{
    (void)state;
    const int64_t ttl = 1500 * dh_slack();
    dlock_client *c = it_client(&it_srv, it_timeout_ms());
    lost_log lg = {0};
    dlock_lock *l = renewed(c, "blip", ttl, &lg);
    for (int i = 0; i < 3; i++) {
        dh_sleep_ms(200);
        dh_server_pause(&it_srv);
        dh_sleep_ms(150); /* longer than the per-node timeout, shorter than the lease */
        dh_server_resume(&it_srv);
    }
    dh_sleep_ms(ttl);
    assert_int_equal(atomic_load(&lg.calls), 0);
    assert_true(dlock_remaining_ms(l) > 0);
    assert_int_equal(dlock_check(l), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

#define MANY 1000

/* The lock keys of the "many-N" names on the server. */
static long long count_many(void)
{
    return it_int_reply(
        dh_cmd(&it_srv, "EVAL %s 0", "return #redis.call('KEYS', 'dlock:{many-*}')"));
}

static void thousand_locks_batched(void **state)
{
    (void)state;
    const int64_t ttl = 1500;
    dlock_client *c = it_client(&it_srv, 1000 * dh_slack());
    dlock_lock **l = calloc(MANY, sizeof *l);
    assert_non_null(l);
    int64_t t0 = mono_ms();
    for (int i = 0; i < MANY; i++) {
        char name[32];
        snprintf(name, sizeof name, "many-%d", i);
        l[i] = renewed(c, name, ttl, NULL);
    }
    int64_t spread = mono_ms() - t0;
    printf("FIG acquire_1000_ms %lld ms\n", (long long)spread);
    long long before = it_script_calls(&it_srv);
    dh_sleep_ms(3 * ttl); /* three leases */
    long long calls = it_script_calls(&it_srv) - before;
    int alive = 0;
    for (int i = 0; i < MANY; i++)
        alive += dlock_remaining_ms(l[i]) > 0;
    long long keys = count_many();
    /* Renewals run every ttl/3: 9 periods in 3 leases. Batched, that is a few calls
     * per period (a call renews at most DLOCK_RENEW_BATCH_MAX locks); one call per lock
     * would be 9,000. Locks due within ttl/12 of each other share calls, so locks whose
     * acquisition took longer (a slow machine, valgrind) fall into a few groups: the
     * bound allows the calls of every lock, plus one per group, each period. */
    long long periods = 3 * 3;
    long long groups = 2 + spread / (ttl / 12);
    if (groups < 3)
        groups = 3;
    long long per_period = (MANY + DLOCK_RENEW_BATCH_MAX - 1) / DLOCK_RENEW_BATCH_MAX + groups;
    printf("FIG renewal_calls_1000_locks %lld calls in %lld periods\n", calls, periods);
    assert_int_equal(alive, MANY);
    assert_int_equal(keys, MANY);
    assert_true(calls <= per_period * (periods + 1));
    /* Freeing the client releases them all. */
    dlock_client_free(c);
    assert_int_equal(count_many(), 0);
    free(l);
}

static void bad_renewal_options(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, it_timeout_ms());
    dlock_opts o = {0};
    o.on_lost = on_lost; /* without auto_renew: refused, never called */
    dlock_lock *l = NULL;
    assert_int_equal(dlock_acquire(c, "bad", &o, &l), DLOCK_ERR_INVALID);
    assert_null(l);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(renewal_keeps_a_lock_past_its_ttl),
        cmocka_unit_test(steal_is_lost_at_once),
        cmocka_unit_test(unreachable_is_lost_before_the_lease_ends),
        cmocka_unit_test(short_blip_is_not_a_loss),
        cmocka_unit_test(thousand_locks_batched),
        cmocka_unit_test(bad_renewal_options),
    };
    return cmocka_run_group_tests_name("renew", tests, it_srv_setup, it_srv_teardown);
}
