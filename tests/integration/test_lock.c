/*
 * test_lock.c: the basic life of a lock on one real redis-server: acquire, the keys it
 * writes, expiry, extend, release, fences, inspect/check, detach/adopt, a wait for a
 * release (and one ended by cancel_fd), and what happens when the server forgets its
 * whole data set. A server that forgets its scripts, one that may evict keys, and one
 * behind a unix socket are in test_lock_server.c.
 *
 * Facts are asserted on what the server holds (GET, PTTL, EXISTS through the support library),
 * not only on what the library says about itself.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

/* A token other than tok, still valid (32 lowercase hex). */
static void other_token(const char *tok, char out[DLOCK_TOKEN_LEN + 1])
{
    memcpy(out, tok, DLOCK_TOKEN_LEN + 1);
    out[0] = out[0] == '0' ? '1' : '0';
}

static bool is_token(const char *t)
{
    if (!t || strlen(t) != DLOCK_TOKEN_LEN)
        return false;
    for (int i = 0; i < DLOCK_TOKEN_LEN; i++)
        if (!isxdigit((unsigned char)t[i]) || isupper((unsigned char)t[i]))
            return false;
    return true;
}

/* The server's TIME in microseconds. */
static uint64_t server_time_us(dh_server *s)
{
    redisReply *r = dh_cmd(s, "TIME");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    uint64_t us = strtoull(r->element[0]->str, NULL, 10) * 1000000ULL +
                  strtoull(r->element[1]->str, NULL, 10);
    freeReplyObject(r);
    return us;
}

static void round_trip_and_key_layout(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, 500);
    dlock_opts o = {0};
    o.ttl_ms = 5000;
    o.label = "itest-label";
    dlock_lock *l = NULL;
    assert_int_equal(dlock_acquire(c, "rt", &o, &l), DLOCK_OK);
    assert_non_null(l);
    assert_string_equal(dlock_errmsg(), "");

    const char *tok = dlock_token(l);
    assert_true(is_token(tok));
    assert_string_equal(dlock_lock_name(l), "rt");
    assert_true(dlock_fence(l) > 0);
    int64_t rem = dlock_remaining_ms(l);
    assert_true(rem > 0 && rem <= 5000);

    /* The value is "TOKEN description", the description naming this process. */
    char key[64], fkey[64], pid[32];
    it_key(key, sizeof key, "rt");
    it_fence_key(fkey, sizeof fkey, "rt");
    char *v = it_get(&it_srv, key);
    assert_non_null(v);
    printf("INFO lock value: %s\n", v);
    assert_memory_equal(v, tok, DLOCK_TOKEN_LEN);
    assert_int_equal(v[DLOCK_TOKEN_LEN], ' ');
    assert_true(strlen(v) > DLOCK_TOKEN_LEN + 1);
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    assert_non_null(strstr(v + DLOCK_TOKEN_LEN + 1, pid));
    assert_non_null(strstr(v + DLOCK_TOKEN_LEN + 1, "itest-label"));
    free(v);
    long long pttl = it_pttl(&it_srv, key);
    assert_true(pttl > 0 && pttl <= 5000);
    assert_int_equal(it_exists(&it_srv, fkey), 1);
    char *fv = it_get(&it_srv, fkey);
    printf("INFO fence key value: %s, dlock_fence: %llu\n", fv ? fv : "(nil)",
           (unsigned long long)dlock_fence(l));
    free(fv);

    /* Not reentrant: the same client cannot take it again. */
    dlock_lock *again = (dlock_lock *)&again;
    assert_int_equal(dlock_acquire(c, "rt", NULL, &again), DLOCK_ERR_BUSY);
    assert_null(again);

    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(it_exists(&it_srv, key), 0);
    /* The fence counter outlives the lock: later holders must get more. */
    assert_int_equal(it_exists(&it_srv, fkey), 1);

    /* Free again: a second acquire works. */
    l = it_acquire(c, "rt", 1000);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

static void expiry_frees_lock(void **state)
{
    (void)state;
    dlock_client *a = it_client(&it_srv, 500), *b = it_client(&it_srv, 500);
    /* Scaled by the slack so that a slow machine (valgrind) does not see the lease
     * run out before the second client's try. */
    int64_t ttl = 100 * dh_slack();
    dlock_lock *la = it_acquire(a, "exp", ttl);
    dlock_lock *lb = NULL;
    assert_int_equal(dlock_acquire(b, "exp", NULL, &lb), DLOCK_ERR_BUSY);
    dh_sleep_ms(2 * ttl);
    char key[64];
    it_key(key, sizeof key, "exp");
    assert_int_equal(it_exists(&it_srv, key), 0);
    assert_true(dlock_remaining_ms(la) <= 0);
    lb = it_acquire(b, "exp", 5000);
    assert_true(dlock_fence(lb) > dlock_fence(la));

    /* The expired holder's release must not delete the new holder's key. */
    assert_int_equal(dlock_release(la), DLOCK_ERR_LOST);
    char *v = it_get(&it_srv, key);
    assert_non_null(v);
    assert_memory_equal(v, dlock_token(lb), DLOCK_TOKEN_LEN);
    free(v);
    assert_true(it_pttl(&it_srv, key) > 0);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_client_free(a);
    dlock_client_free(b);
}

static void wrong_token_cannot_release_or_extend(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, 500);
    dlock_lock *l = it_acquire(c, "wt", 5000);
    char key[64], bad[DLOCK_TOKEN_LEN + 1];
    it_key(key, sizeof key, "wt");
    char *before = it_get(&it_srv, key);
    assert_non_null(before);
    other_token(dlock_token(l), bad);

    /* Two adopted handles, so that release really asks the server (a handle that
     * extend found lost might not). */
    dlock_lock *x = NULL, *y = NULL;
    assert_int_equal(dlock_lock_adopt(c, "wt", bad, &x), DLOCK_OK);
    assert_int_equal(dlock_lock_adopt(c, "wt", bad, &y), DLOCK_OK);
    assert_int_equal(dlock_fence(x), 0);
    assert_int_equal(dlock_extend(x, 60000), DLOCK_ERR_LOST);
    assert_true(it_pttl(&it_srv, key) <= 5000); /* not extended */
    assert_int_equal(dlock_release(y), DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(x), DLOCK_ERR_LOST);

    char *after = it_get(&it_srv, key);
    assert_non_null(after);
    assert_string_equal(before, after);
    assert_true(it_pttl(&it_srv, key) > 0);
    free(before);
    free(after);
    assert_int_equal(dlock_check(l), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

static void extend_keeps_it_alive(void **state)
{
    (void)state;
    dlock_client *a = it_client(&it_srv, 500), *b = it_client(&it_srv, 500);
    long long k = dh_slack();
    dlock_lock *l = it_acquire(a, "ext", 300 * k);
    assert_int_equal(dlock_extend(l, 2000 * k), DLOCK_OK);
    char key[64];
    it_key(key, sizeof key, "ext");
    long long p = it_pttl(&it_srv, key);
    assert_true(p > 300 * k && p <= 2000 * k);
    dh_sleep_ms(600 * k); /* twice the first lease: it would have run out by now */
    p = it_pttl(&it_srv, key);
    printf("INFO PTTL %lld ms after extend(%lld): %lld\n", 600 * k, 2000 * k, p);
    assert_true(p > 0);
    assert_true(dlock_remaining_ms(l) > 0);
    dlock_lock *lb = NULL;
    assert_int_equal(dlock_acquire(b, "ext", NULL, &lb), DLOCK_ERR_BUSY);
    assert_null(lb);

    /* extend sets, it does not add: extend(500) brings a long lease down. */
    assert_int_equal(dlock_extend(l, 500), DLOCK_OK);
    p = it_pttl(&it_srv, key);
    assert_true(p > 0 && p <= 500);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(a);
    dlock_client_free(b);
}

static void fences_strictly_increase(void **state)
{
    (void)state;
    dlock_client *a = it_client(&it_srv, 500), *b = it_client(&it_srv, 500);
    uint64_t last = 0;
    for (int i = 0; i < 20; i++) {
        dlock_client *c = (i % 2) ? a : b;
        bool expire = i % 5 == 4; /* let some leases expire instead of being released */
        dlock_lock *l = it_acquire(c, "fence", expire ? 50 * dh_slack() : 1000);
        uint64_t f = dlock_fence(l);
        assert_true(f > last);
        last = f;
        if (expire) {
            dh_sleep_ms(100 * dh_slack());
            assert_int_equal(dlock_release(l), DLOCK_ERR_LOST);
        } else {
            assert_int_equal(dlock_release(l), DLOCK_OK);
        }
    }
    /* Another name has its own counter, but the same rule. */
    dlock_lock *o = it_acquire(a, "fence-other", 1000);
    assert_true(dlock_fence(o) > 0);
    assert_int_equal(dlock_release(o), DLOCK_OK);
    dlock_client_free(a);
    dlock_client_free(b);
}

static void fence_has_time_floor(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, 500);
    uint64_t t = server_time_us(&it_srv);
    dlock_lock *l = it_acquire(c, "floor", 1000);
    printf("INFO fence %llu, server TIME before %llu us\n", (unsigned long long)dlock_fence(l),
           (unsigned long long)t);
    assert_true(dlock_fence(l) >= t);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

static void inspect_free_and_held(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, 500);
    dlock_holder h;
    memset(&h, 0x5a, sizeof h);
    assert_int_equal(dlock_inspect(c, "insp", &h), DLOCK_OK);
    assert_int_equal(h.held, 0);
    assert_string_equal(h.token, "");
    assert_int_equal(h.remaining_ms, 0);
    assert_int_equal(h.fence, 0);

    dlock_opts o = {0};
    o.ttl_ms = 4000;
    o.label = "inspect-me";
    dlock_lock *l = NULL;
    assert_int_equal(dlock_acquire(c, "insp", &o, &l), DLOCK_OK);
    assert_int_equal(dlock_inspect(c, "insp", &h), DLOCK_OK);
    printf("INFO holder: held=%d token=%s desc='%s' remaining=%lld fence=%llu\n", h.held, h.token,
           h.description, (long long)h.remaining_ms, (unsigned long long)h.fence);
    assert_int_equal(h.held, 1);
    assert_string_equal(h.token, dlock_token(l));
    assert_true(h.remaining_ms > 0 && h.remaining_ms <= 4000);
    assert_int_equal(h.fence, dlock_fence(l));
    assert_non_null(strstr(h.description, "inspect-me"));
    uint64_t f = dlock_fence(l);

    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(dlock_inspect(c, "insp", &h), DLOCK_OK);
    assert_int_equal(h.held, 0);
    assert_string_equal(h.token, "");
    assert_int_equal(h.fence, f); /* the last fence issued stays visible */
    dlock_client_free(c);
}

static void check_and_lost_fd(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, 500);
    dlock_lock *l = it_acquire(c, "chk", 5000);
    assert_int_equal(dlock_check(l), DLOCK_OK);
    int fd = dlock_lost_fd(l);
    assert_true(fd >= 0);
    assert_int_equal(dlock_lost_fd(l), fd); /* one descriptor per handle */
    struct pollfd p = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 0), 0); /* not lost yet */

    char key[64];
    it_key(key, sizeof key, "chk");
    it_del(&it_srv, key); /* an outsider deletes it */
    assert_int_equal(dlock_check(l), DLOCK_ERR_LOST);
    assert_true(dlock_remaining_ms(l) <= 0);
    assert_int_equal(poll(&p, 1, 0), 1);
    assert_true(p.revents & POLLIN);
    assert_int_equal(dlock_release(l), DLOCK_ERR_LOST);

    /* Loss found by extend (another owner took it) also signals the descriptor. */
    dlock_lock *m = it_acquire(c, "chk", 5000);
    int fd2 = dlock_lost_fd(m);
    assert_true(fd2 >= 0);
    it_del(&it_srv, key);
    dlock_client *o = it_client(&it_srv, 500);
    dlock_lock *n = it_acquire(o, "chk", 5000);
    assert_int_equal(dlock_extend(m, 5000), DLOCK_ERR_LOST);
    struct pollfd p2 = {.fd = fd2, .events = POLLIN};
    assert_int_equal(poll(&p2, 1, 0), 1);
    assert_int_equal(dlock_release(m), DLOCK_ERR_LOST);
    assert_int_equal(dlock_check(n), DLOCK_OK); /* the new owner is untouched */
    assert_int_equal(dlock_release(n), DLOCK_OK);
    dlock_client_free(o);
    dlock_client_free(c);
}

static void detach_adopt_release(void **state)
{
    (void)state;
    dlock_client *a = it_client(&it_srv, 500), *b = it_client(&it_srv, 500);
    dlock_lock *l = it_acquire(a, "det", 5000);
    char tok[DLOCK_TOKEN_LEN + 1];
    memcpy(tok, dlock_token(l), sizeof tok);
    assert_int_equal(dlock_lock_detach(l), DLOCK_OK);
    char key[64];
    it_key(key, sizeof key, "det");
    assert_int_equal(it_exists(&it_srv, key), 1);
    /* Freeing the client must not release a detached lock. */
    dlock_client_free(a);
    assert_int_equal(it_exists(&it_srv, key), 1);

    dlock_lock *m = NULL;
    assert_int_equal(dlock_lock_adopt(b, "det", tok, &m), DLOCK_OK);
    assert_string_equal(dlock_token(m), tok);
    assert_int_equal(dlock_fence(m), 0);
    assert_true(dlock_remaining_ms(m) <= 0); /* unknown until asked */
    assert_int_equal(dlock_check(m), DLOCK_OK);
    assert_int_equal(dlock_extend(m, 3000), DLOCK_OK);
    assert_true(dlock_remaining_ms(m) > 0);
    assert_int_equal(dlock_release(m), DLOCK_OK);
    assert_int_equal(it_exists(&it_srv, key), 0);
    dlock_client_free(b);
}

static void client_free_releases_attached(void **state)
{
    (void)state;
    dlock_client *a = it_client(&it_srv, 500);
    (void)it_acquire(a, "cf1", 5000);
    (void)it_acquire(a, "cf2", 5000);
    dlock_client_free(a);
    char k1[64], k2[64];
    it_key(k1, sizeof k1, "cf1");
    it_key(k2, sizeof k2, "cf2");
    /* The release is sent without waiting for replies: give it a moment to land. */
    int64_t deadline = dh_now_ms() + 1000 * dh_slack();
    while ((it_exists(&it_srv, k1) || it_exists(&it_srv, k2)) && dh_now_ms() < deadline)
        dh_sleep_ms(10);
    assert_int_equal(it_exists(&it_srv, k1), 0);
    assert_int_equal(it_exists(&it_srv, k2), 0);
}

static void server_restart_between_operations(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, 500);
    dlock_lock *l = it_acquire(c, "rs", 5000);
    uint64_t f1 = dlock_fence(l);
    assert_int_equal(dlock_release(l), DLOCK_OK);

    /* The client's pooled connection is now dead; the next call must reconnect by
     * itself and succeed. */
    assert_int_equal(dh_server_restart(&it_srv), 0);
    dlock_lock *m = NULL;
    dlock_opts o = {0};
    o.ttl_ms = 5000;
    int rc = dlock_acquire(c, "rs", &o, &m);
    if (rc != DLOCK_OK)
        it_show("acquire after restart", rc);
    assert_int_equal(rc, DLOCK_OK);
    uint64_t f2 = dlock_fence(m);
    printf("INFO fence before restart %llu, after %llu\n", (unsigned long long)f1,
           (unsigned long long)f2);
    /* No persistence: the counter was forgotten; the TIME floor keeps fences rising. */
    assert_true(f2 > f1);

    /* A lock held across a restart is gone: release says LOST, not an I/O error. */
    assert_int_equal(dh_server_restart(&it_srv), 0);
    rc = dlock_release(m);
    if (rc != DLOCK_ERR_LOST)
        it_show("release after restart", rc);
    assert_int_equal(rc, DLOCK_ERR_LOST);

    /* Idle connection, restart, inspect: also fine. */
    assert_int_equal(dh_server_restart(&it_srv), 0);
    dlock_holder h;
    rc = dlock_inspect(c, "rs", &h);
    if (rc != DLOCK_OK)
        it_show("inspect after restart", rc);
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(h.held, 0);
    dlock_client_free(c);
}

/* Blocking acquisition: a waiter gets the lock once the holder releases it. */
struct releaser {
    dlock_lock *l;
    int64_t after_ms;
    int rc;
};

static void *release_later(void *arg)
{
    struct releaser *r = arg;
    dh_sleep_ms(r->after_ms);
    r->rc = dlock_release(r->l);
    return NULL;
}

static void wait_for_release(void **state)
{
    (void)state;
    dlock_client *a = it_client(&it_srv, 500), *b = it_client(&it_srv, 500);
    struct releaser rel = {.l = it_acquire(a, "wait", 10000), .after_ms = 200};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, release_later, &rel), 0);
    dlock_opts o = {0};
    o.ttl_ms = 5000;
    o.wait_ms = 5000;
    dlock_lock *l = NULL;
    int64_t t0 = dh_now_ms();
    assert_int_equal(dlock_acquire(b, "wait", &o, &l), DLOCK_OK);
    int64_t took = dh_now_ms() - t0;
    pthread_join(th, NULL);
    assert_int_equal(rel.rc, DLOCK_OK);
    printf("FIG wait_after_release_ms %lld ms\n", (long long)(took - 200));
    assert_true(took >= 190); /* it cannot have had it while the holder held it */
    assert_int_equal(dlock_release(l), DLOCK_OK);

    /* A wait that runs out while the holder holds says BUSY, not before its time. */
    dlock_lock *h = it_acquire(a, "wait", 10000);
    o.wait_ms = 300;
    t0 = dh_now_ms();
    assert_int_equal(dlock_acquire(b, "wait", &o, &l), DLOCK_ERR_BUSY);
    took = dh_now_ms() - t0;
    printf("FIG wait_300_busy_ms %lld ms\n", (long long)took);
    assert_true(took >= 290);
    assert_null(l);

    /* A lease that expires (no release, so no notification) also ends the wait. */
    assert_int_equal(dlock_extend(h, 300), DLOCK_OK);
    o.wait_ms = 5000;
    t0 = dh_now_ms();
    assert_int_equal(dlock_acquire(b, "wait", &o, &l), DLOCK_OK);
    printf("FIG wait_after_expiry_ms %lld ms\n", (long long)(dh_now_ms() - t0));
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_ERR_LOST);
    dlock_client_free(a);
    dlock_client_free(b);
}

static void *cancel_later(void *arg)
{
    int fd = *(int *)arg;
    dh_sleep_ms(200);
    uint64_t one = 1;
    if (write(fd, &one, sizeof one) != (ssize_t)sizeof one)
        perror("eventfd write");
    return NULL;
}

static void cancel_fd_ends_wait(void **state)
{
    (void)state;
    dlock_client *a = it_client(&it_srv, 500), *b = it_client(&it_srv, 500);
    dlock_lock *h = it_acquire(a, "cancel", 10000);
    int efd = eventfd(0, EFD_CLOEXEC);
    assert_true(efd > 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, cancel_later, &efd), 0);
    dlock_opts o = {0};
    o.wait_ms = -1;
    o.cancel_fd = efd;
    dlock_lock *l = (dlock_lock *)&l;
    int64_t t0 = dh_now_ms();
    assert_int_equal(dlock_acquire(b, "cancel", &o, &l), DLOCK_ERR_CANCELED);
    printf("FIG cancel_latency_ms %lld ms\n", (long long)(dh_now_ms() - t0 - 200));
    assert_null(l);
    pthread_join(th, NULL);
    close(efd);
    assert_int_equal(dlock_check(h), DLOCK_OK);
    assert_int_equal(dlock_release(h), DLOCK_OK);
    dlock_client_free(a);
    dlock_client_free(b);
}

int main(void)
{
    const struct CMUnitTest basics[] = {
        cmocka_unit_test(round_trip_and_key_layout),
        cmocka_unit_test(expiry_frees_lock),
        cmocka_unit_test(wrong_token_cannot_release_or_extend),
        cmocka_unit_test(extend_keeps_it_alive),
        cmocka_unit_test(fences_strictly_increase),
        cmocka_unit_test(fence_has_time_floor),
        cmocka_unit_test(inspect_free_and_held),
        cmocka_unit_test(check_and_lost_fd),
        cmocka_unit_test(detach_adopt_release),
        cmocka_unit_test(client_free_releases_attached),
        cmocka_unit_test(wait_for_release),
        cmocka_unit_test(cancel_fd_ends_wait),
        cmocka_unit_test(server_restart_between_operations),
    };
    return cmocka_run_group_tests_name("lock", basics, it_srv_setup, it_srv_teardown) ? 1 : 0;
}
