/*
 * test_scripts.c: the lock scripts' cheap paths, run against redis-server as the
 * library's text (scripts.c) says. TRY is ACQUIRE's plain try with only the arguments
 * it reads: whatever state the name is in, the two must answer and leave the keys
 * alike, or a plain LOCK would differ from a queued one. RELEASE deletes a lock nobody
 * waits for before it builds the queue's helpers, and serves the head it popped when
 * somebody does.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"
#include "scripts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKEN  "0123456789abcdef0123456789abcdef"
#define OTHER  "fedcba9876543210fedcba9876543210"
#define VALUE  TOKEN " host:1"
#define MEMBER "4000 0 9 test:wake" OTHER " waiter:2"

/* Script id's body, as script_call.c joins it (malloc'd). */
static char *body(int id)
{
    size_t len = 1;
    for (const char *const *p = dlock__script_parts(id); *p != NULL; p++)
        len += strlen(*p);
    char *b = calloc(1, len);
    assert_non_null(b);
    for (const char *const *p = dlock__script_parts(id); *p != NULL; p++)
        strcat(b, *p);
    return b;
}

/* EVAL of script id with nkeys keys then the arguments, a NULL-ended list. */
static redisReply *eval(redisContext *rc, int id, int nkeys, ...)
{
    const char *argv[24] = {"EVAL"};
    char *b = body(id), n[8];
    snprintf(n, sizeof n, "%d", nkeys);
    argv[1] = b;
    argv[2] = n;
    int argc = 3;
    va_list ap;
    va_start(ap, nkeys);
    for (const char *a = va_arg(ap, const char *); a != NULL && argc < 24;
         a = va_arg(ap, const char *))
        argv[argc++] = a;
    va_end(ap);
    redisReply *r = redisCommandArgv(rc, argc, argv, NULL);
    free(b);
    assert_non_null(r);
    return r;
}

/* The keys of name as keys.c lays them out, for a client without a prefix. */
typedef struct keys {
    char lock[64], fence[64], queue[64], holders[96], info[96];
} keys;

static void keys_of(keys *k, const char *name)
{
    it_key(k->lock, sizeof k->lock, name);
    it_fence_key(k->fence, sizeof k->fence, name);
    it_queue_key(k->queue, sizeof k->queue, name);
    snprintf(k->holders, sizeof k->holders, "%s:holders", k->lock);
    snprintf(k->info, sizeof k->info, "%s:holders:info", k->lock);
}

/* A state a plain try may find, made on name. */
enum state { FREE, OTHERS, OURS, OURS_FOREVER, SHARED, STATES };

static void make(redisContext *rc, const keys *k, enum state s)
{
    const char *v = s == OTHERS ? OTHER " host:2" : s == SHARED ? "shared" : VALUE;
    if (s == FREE)
        return;
    redisReply *r = s == OURS_FOREVER ? redisCommand(rc, "SET %s %s", k->lock, v)
                                      : redisCommand(rc, "SET %s %s PX 5000", k->lock, v);
    assert_non_null(r);
    freeReplyObject(r);
}

static long long pttl(redisContext *rc, const char *key)
{
    redisReply *r = redisCommand(rc, "PTTL %s", key);
    assert_true(r != NULL && r->type == REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

static char *get(redisContext *rc, const char *key)
{
    redisReply *r = redisCommand(rc, "GET %s", key);
    assert_non_null(r);
    char *v = r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    freeReplyObject(r);
    return v;
}

static void try_answers_as_acquire(void **state)
{
    (void)state;
    redisContext *rc = dh_connect(&it_srv);
    assert_non_null(rc);
    for (int s = FREE; s < STATES; s++) {
        char na[32], nt[32];
        snprintf(na, sizeof na, "scripts-acq-%d", s);
        snprintf(nt, sizeof nt, "scripts-try-%d", s);
        keys a, t;
        keys_of(&a, na);
        keys_of(&t, nt);
        make(rc, &a, (enum state)s);
        make(rc, &t, (enum state)s);
        redisReply *ra =
            eval(rc, DLOCK_SCRIPT_ACQUIRE, 5, a.lock, a.fence, a.queue, a.holders, a.info, VALUE,
                 "10000", TOKEN, "0", "0", MEMBER, "5000", "3600000", NULL);
        redisReply *rt =
            eval(rc, DLOCK_SCRIPT_TRY, 2, t.lock, t.fence, VALUE, "10000", "3600000", NULL);
        printf("state %d: ACQUIRE %lld, TRY %lld\n", s, ra->integer, rt->integer);
        assert_int_equal(ra->type, REDIS_REPLY_INTEGER);
        assert_int_equal(rt->type, REDIS_REPLY_INTEGER);
        bool granted = s == FREE || s == OURS || s == OURS_FOREVER;
        assert_true(granted ? ra->integer > 0 && rt->integer > 0
                            : ra->integer <= 0 && rt->integer <= 0);
        if (granted) {
            /* A fence from the TIME floor: both within a minute of each other. */
            long long d = ra->integer - rt->integer;
            assert_true(d < 60000000 && d > -60000000);
            assert_true(pttl(rc, a.lock) > 9000 && pttl(rc, t.lock) > 9000);
            assert_true(pttl(rc, a.fence) > 3500000 && pttl(rc, t.fence) > 3500000);
        } else {
            /* Refused with the holder's PTTL (0 for one without): the same within the
             * milliseconds between the two calls. */
            assert_true(llabs(ra->integer - rt->integer) < 1000);
            assert_int_equal(pttl(rc, a.fence), -2);
            assert_int_equal(pttl(rc, t.fence), -2);
        }
        char *va = get(rc, a.lock), *vt = get(rc, t.lock);
        assert_non_null(va);
        assert_string_equal(va, vt);
        free(va);
        free(vt);
        /* A plain try queues nobody. */
        assert_int_equal(pttl(rc, a.queue), -2);
        assert_int_equal(pttl(rc, t.queue), -2);
        freeReplyObject(ra);
        freeReplyObject(rt);
    }
    redisFree(rc);
}

/* RELEASE of our lock: KEYS lock, fence, queue, holders, info; ARGV token, floor 0, no
 * member, retention, mode 1 (release), ticket 0, no heir. */
static redisReply *release(redisContext *rc, const keys *k)
{
    return eval(rc, DLOCK_SCRIPT_RELEASE, 5, k->lock, k->fence, k->queue, k->holders, k->info,
                TOKEN, "0", "", "3600000", "1", "0", "", "", "", NULL);
}

static void release_with_and_without_waiters(void **state)
{
    (void)state;
    redisContext *rc = dh_connect(&it_srv);
    assert_non_null(rc);
    keys k;
    keys_of(&k, "scripts-release");
    /* Nobody waits: the lock goes, and no queue key is made. */
    make(rc, &k, OURS);
    redisReply *r = release(rc, &k);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    assert_int_equal(pttl(rc, k.lock), -2);
    assert_int_equal(pttl(rc, k.queue), -2);
    /* Not ours: 0, and the holder keeps it. */
    make(rc, &k, OTHERS);
    r = release(rc, &k);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    assert_true(pttl(rc, k.lock) > 0);
    freeReplyObject(redisCommand(rc, "DEL %s", k.lock));
    /* Two waiters queued: the first popped is the one served, with its handoff lease,
     * and the second stays queued. */
    make(rc, &k, OURS);
    freeReplyObject(redisCommand(rc, "ZADD %s 1 %s 2 %s", k.queue, MEMBER,
                                 "4000 0 9 test:wake" TOKEN " waiter:3"));
    r = release(rc, &k);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    char *v = get(rc, k.lock);
    assert_non_null(v);
    assert_string_equal(v, OTHER " waiter:2");
    free(v);
    long long p = pttl(rc, k.lock);
    assert_true(p > 3000 && p <= 4000);
    r = redisCommand(rc, "ZRANGE %s 0 -1", k.queue);
    assert_true(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
    assert_non_null(strstr(r->element[0]->str, "waiter:3"));
    freeReplyObject(r);
    redisFree(rc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(try_answers_as_acquire),
        cmocka_unit_test(release_with_and_without_waiters),
    };
    return cmocka_run_group_tests_name("scripts", tests, it_srv_setup, it_srv_teardown);
}
