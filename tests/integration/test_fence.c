/*
 * test_fence.c: the resource side of fencing. A holder whose lease ran out while it
 * was paused resumes and writes; the fenced register must refuse it once the next
 * holder has written, and accept writes in fence order otherwise.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *register_field(const char *key, const char *field)
{
    redisReply *r = dh_cmd(&it_srv, "HGET %s %s", key, field);
    assert_non_null(r);
    char *v = r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    freeReplyObject(r);
    return v;
}

static void stale_holder_is_refused(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, it_timeout_ms());
    /* A takes the lock, then "pauses" past its 100 ms lease. */
    dlock_lock *a = it_acquire(c, "res", 100);
    uint64_t fa = dlock_fence(a);
    dh_sleep_ms(150);
    assert_true(dlock_remaining_ms(a) <= 0);
    /* B takes it and writes. */
    dlock_lock *b = it_acquire(c, "res", 5000);
    uint64_t fb = dlock_fence(b);
    assert_true(fb > fa);
    assert_int_equal(dlock_fenced_set(c, "resource", fb, "from B", 6), DLOCK_OK);
    /* A resumes, believes it holds the lock, and writes: refused, nothing changes. */
    assert_int_equal(dlock_fenced_set(c, "resource", fa, "from A", 6), DLOCK_ERR_FENCED);
    assert_non_null(strstr(dlock_errmsg(), "newer fence"));
    char *v = register_field("resource", "value");
    assert_string_equal(v, "from B");
    free(v);
    /* B may write again with the same fence; a later holder's fence wins. */
    assert_int_equal(dlock_fenced_set(c, "resource", fb, "B again", 7), DLOCK_OK);
    assert_int_equal(dlock_release(b), DLOCK_OK);
    assert_int_equal(dlock_release(a), DLOCK_ERR_LOST);
    dlock_lock *d = it_acquire(c, "res", 5000);
    assert_int_equal(dlock_fenced_set(c, "resource", dlock_fence(d), "from D", 6), DLOCK_OK);
    v = register_field("resource", "fence");
    assert_int_equal(strtoull(v, NULL, 10), dlock_fence(d));
    free(v);
    assert_int_equal(dlock_release(d), DLOCK_OK);
    dlock_client_free(c);
}

static void fenced_set_bad_input(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, it_timeout_ms());
    assert_int_equal(dlock_fenced_set(NULL, "k", 1, "v", 1), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_fenced_set(c, NULL, 1, "v", 1), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_fenced_set(c, "", 1, "v", 1), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_fenced_set(c, "k", 0, "v", 1), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_fenced_set(c, "k", 1, NULL, 1), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_fenced_set(c, "k", 1, NULL, 0), DLOCK_OK); /* empty value */
    /* A register key of the wrong type is a protocol error, not a crash or a write. */
    redisReply *r = dh_cmd(&it_srv, "SET wrongtype x");
    freeReplyObject(r);
    assert_int_equal(dlock_fenced_set(c, "wrongtype", 5, "v", 1), DLOCK_ERR_PROTOCOL);
    dlock_client_free(c);
}

/* dlock_fence_admit: many threads offering increasing fences; the highest wins and
 * every refusal is of a fence lower than one already admitted. */
static uint64_t g_highest;

static void *admitter(void *arg)
{
    uint64_t base = (uint64_t)(uintptr_t)arg;
    for (uint64_t i = 0; i < 100000; i++) {
        uint64_t f = i * 4 + base;
        int rc = dlock_fence_admit(&g_highest, f);
        if (rc == DLOCK_ERR_FENCED && __atomic_load_n(&g_highest, __ATOMIC_ACQUIRE) <= f)
            return (void *)1; /* refused without a higher fence admitted: a bug */
    }
    return NULL;
}

static void fence_admit_threads(void **state)
{
    (void)state;
    assert_int_equal(dlock_fence_admit(NULL, 1), DLOCK_ERR_INVALID);
    uint64_t h = 10;
    assert_int_equal(dlock_fence_admit(&h, 9), DLOCK_ERR_FENCED);
    assert_int_equal(h, 10);
    assert_int_equal(dlock_fence_admit(&h, 10), DLOCK_OK);
    assert_int_equal(dlock_fence_admit(&h, 11), DLOCK_OK);
    assert_int_equal(h, 11);
    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, admitter, (void *)i), 0);
    for (int i = 0; i < 4; i++) {
        void *res;
        pthread_join(t[i], &res);
        assert_null(res);
    }
    assert_int_equal(g_highest, 99999 * 4 + 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stale_holder_is_refused),
        cmocka_unit_test(fenced_set_bad_input),
        cmocka_unit_test(fence_admit_threads),
    };
    return cmocka_run_group_tests_name("fence", tests, it_srv_setup, it_srv_teardown);
}
