/*
 * test_handoff.c: a release hands the lock to the head of the wait queue.
 *
 * Waiters live in other processes (forked children that make their own client) or in
 * threads with clients of their own, so that every wake-up travels through the
 * server. The handoff to another process and to the releasing client's own waiter, one
 * never announced, dead heads, a Redlock queue that one node lost, and what idle waiters
 * cost; the queue's fair order across processes and its keys that expire:
 * test_handoff_queue.c.
 *
 * Asserted exactly: the lock's value right after a release (the head's queue entry, with
 * the short handoff lease while the head has not confirmed), fences that go up.
 * Asserted with DLOCK_TEST_SLACK: what a dead head costs the next waiter (its handoff
 * lease, one refresh period and a margin), how soon a Redlock waiter gets a lock whose
 * queue one node lost, and the commands idle waiters send. Other timings are FIG lines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "internal.h" /* DLOCK_QUEUE_*, DLOCK_HANDOFF_*, DLOCK_CONFIRMS_MAX */
#include "itest.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The handoff lease of a waiter whose client has the integration tests' per-node
 * timeout (it_config_init), as the library computes it; ttl_ms caps it. */
static int64_t handoff_ms(int64_t ttl_ms)
{
    int64_t h = DLOCK_HANDOFF_TIMEOUTS * it_timeout_ms();
    if (h < DLOCK_HANDOFF_MIN_MS)
        h = DLOCK_HANDOFF_MIN_MS;
    return h < ttl_ms ? h : ttl_ms;
}

/* How long a dead head may keep the next live waiter out: its handoff lease, then at
 * most one refresh period before that waiter sees the lock free, and a margin. */
static int64_t dead_head_bound_ms(int64_t ttl_ms)
{
    return (handoff_ms(ttl_ms) + DLOCK_QUEUE_REFRESH_MS + 500) * dh_slack();
}

/* EVAL calls node 1 has run. The library sends a script call as EVALSHA, and as EVAL
 * only where its reply may come too late to resend it on -NOSCRIPT: the confirmation of
 * a lock taken on its grant's message, and what it sends without awaiting (a waiter's
 * leaving, a failed attempt's give-back). With every script loaded on the node
 * (load_scripts: no -NOSCRIPT to fall back from), each lock started on the grant counts
 * one. */
static long long eval_calls(void)
{
    static const char key[] = "cmdstat_eval:calls=";
    redisReply *r = dh_cmd(&it_node[0], "INFO commandstats");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    const char *at = strstr(r->str, key);
    long long n = at != NULL ? strtoll(at + strlen(key), NULL, 10) : 0;
    freeReplyObject(r);
    return n;
}

static void load_scripts(void)
{
    for (int i = 0; i < DLOCK_SCRIPT_COUNT; i++) {
        redisReply *r = dh_cmd(&it_node[0], "SCRIPT LOAD %s", dlock__script_body(i));
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        freeReplyObject(r);
    }
}

/* ---- waiters in threads of this process, each with a client of its own ------------- */

typedef struct thread_waiter {
    dlock_client *c;
    const char *name;
    int fair;
    int64_t wait_ms, ttl_ms;
    bool keep; /* leave the lock to the main thread instead of releasing it */
    int rc;
    int64_t got_us;
    dlock_lock *l;
    pthread_t t;
} thread_waiter;

static void *thread_wait(void *p)
{
    thread_waiter *a = p;
    dlock_opts o = {0};
    o.ttl_ms = a->ttl_ms;
    o.wait_ms = a->wait_ms;
    o.fair = a->fair;
    a->rc = dlock_acquire(a->c, a->name, &o, &a->l);
    a->got_us = dh_now_us();
    if (a->rc == DLOCK_OK && !a->keep) {
        a->rc = dlock_release(a->l);
        a->l = NULL;
    }
    return NULL;
}

static void thread_start(thread_waiter *a, const char *name, int fair, bool keep)
{
    *a = (thread_waiter){.c = it_nodes_client(),
                         .name = name,
                         .fair = fair,
                         .wait_ms = 20000,
                         .ttl_ms = 5000,
                         .keep = keep};
    assert_int_equal(pthread_create(&a->t, NULL, thread_wait, a), 0);
}

/* Join the waiter; its client is freed, its lock (if kept) stays with the caller. */
static void thread_join(thread_waiter *a)
{
    assert_int_equal(pthread_join(a->t, NULL), 0);
}

/* ---- 1. the handoff reaches another process --------------------------------------- */

static void test_handoff_across_processes(void **state)
{
    (void)state;
    const int64_t ttl_b = 5000;
    char key[256];
    it_key(key, sizeof key, "h");
    dlock_client *hc = it_nodes_client();
    load_scripts();
    dlock_lock *a = it_acquire(hc, "h", 10000);
    it_held ha = it_keep(a);
    int rep[2], go[2];
    assert_int_equal(pipe(rep), 0);
    assert_int_equal(pipe(go), 0);
    it_child_waiter w = {.name = "h",
                         .wait_ms = 10000,
                         .ttl_ms = ttl_b,
                         .report_fd = rep[1],
                         .go_fd = go[0],
                         .nclose = 2,
                         .close_fd = {rep[0], go[1]}};
    pid_t b = it_spawn_waiter(&w);
    close(rep[1]);
    close(go[0]);
    it_wait_queued("h", 1);
    char b_value[512];
    assert_int_equal(it_queue_entry(&it_node[0], "h", 0, b_value, sizeof b_value),
                     handoff_ms(ttl_b));

    /* Ask for the lock's value on a connection opened beforehand, so that it is read
     * one round trip after the release returns. */
    redisContext *rc = dh_connect(&it_node[0]);
    assert_non_null(rc);
    long long evals = eval_calls();
    int64_t t0 = dh_now_us();
    assert_int_equal(dlock_release(a), DLOCK_OK);
    char fkey[256];
    it_fence_key(fkey, sizeof fkey, "h");
    redisAppendCommand(rc, "GET %s", key);
    redisAppendCommand(rc, "PTTL %s", key);
    redisAppendCommand(rc, "GET %s", fkey);
    redisReply *get = NULL, *pttl = NULL, *handed = NULL;
    assert_int_equal(redisGetReply(rc, (void **)&get), REDIS_OK);
    assert_int_equal(redisGetReply(rc, (void **)&pttl), REDIS_OK);
    assert_int_equal(redisGetReply(rc, (void **)&handed), REDIS_OK);
    /* B does not release before it is told to: the lock is B's, with the value of its
     * queue entry. Whether B has confirmed it yet is a race (B's wake-up against this
     * GET): the PTTL tells, and the test where B is stopped asserts the handoff lease. */
    assert_int_equal(get->type, REDIS_REPLY_STRING);
    assert_string_equal(get->str, b_value);
    assert_int_equal(pttl->type, REDIS_REPLY_INTEGER);
    assert_true(pttl->integer > 0 && pttl->integer <= ttl_b);
    printf("INFO lock right after the release: PTTL %lld ms (%s)\n", pttl->integer,
           pttl->integer <= handoff_ms(ttl_b) ? "handoff lease, not yet confirmed"
                                              : "already confirmed");
    /* The release handed B the lock with a fence of its own. */
    assert_int_equal(handed->type, REDIS_REPLY_STRING);
    uint64_t handoff_fence = strtoull(handed->str, NULL, 10);
    assert_true(handoff_fence > ha.fence);
    freeReplyObject(get);
    freeReplyObject(pttl);
    freeReplyObject(handed);
    redisFree(rc);

    it_waiter_report r;
    it_read_report(rep[0], &r, 5000 * dh_slack());
    assert_int_equal(r.rc, DLOCK_OK);
    assert_memory_equal(r.token, b_value, DLOCK_TOKEN_LEN);
    assert_memory_not_equal(r.token, ha.token, DLOCK_TOKEN_LEN);
    /* B started its section on the release's message, with its fence, and confirmed
     * with its own lease (one EVAL), which dlock_remaining_ms already counts. */
    assert_int_equal(eval_calls() - evals, 1);
    assert_true(r.fence == handoff_fence);
    assert_true(r.remaining_ms > handoff_ms(ttl_b) && r.remaining_ms <= ttl_b);
    printf("FIG handoff_cross_process_us %lld us\n", (long long)(r.got_us - t0));
    /* B confirmed with its own lease. */
    long long left = it_pttl(&it_node[0], key);
    assert_true(left > handoff_ms(ttl_b) && left <= ttl_b);
    left = it_pttl(&it_node[0], fkey);
    assert_true(left > 3000000 && left <= DLOCK_FENCE_RETENTION_DEFAULT_MS);

    assert_int_equal(write(go[1], "g", 1), 1);
    close(go[1]);
    it_expect_exit(b, 0);
    close(rep[0]);
    assert_int_equal(it_exists(&it_node[0], key), 0);
    dlock_client_free(hc);
}

/* ---- 1b. the heir: a waiter of the releasing client itself --------------------------- */

/* Holder A and a waiter B share one client. The release finds B heading the queue, and
 * hands it its own lease and a fence, and tells it through its own reply: no message on
 * any server, and no attempt by B after the release. B's validity counts from the
 * release's start. */
static void test_heir_of_the_same_client(void **state)
{
    (void)state;
    const int64_t ttl_b = 5000;
    dlock_client *hc = it_nodes_client();
    dlock_lock *a = it_acquire(hc, "heir", 10000);
    it_held ha = it_keep(a);
    thread_waiter b = {.c = hc, .name = "heir", .wait_ms = 20000, .ttl_ms = ttl_b, .keep = true};
    assert_int_equal(pthread_create(&b.t, NULL, thread_wait, &b), 0);
    it_wait_queued("heir", 1);
    long long pub[IT_NODES_MAX], scripts[IT_NODES_MAX];
    for (int i = 0; i < it_nodes; i++) {
        pub[i] = it_cmd_calls(&it_node[i], "publish");
        scripts[i] = it_script_calls(&it_node[i]);
    }
    int64_t t0 = dh_now_us();
    assert_int_equal(dlock_release(a), DLOCK_OK);
    thread_join(&b);
    int64_t t1 = dh_now_us();
    assert_int_equal(b.rc, DLOCK_OK);
    printf("FIG heir_handoff_us %lld us\n", (long long)(b.got_us - t0));
    assert_true(dlock_fence(b.l) > ha.fence);
    int64_t left = dlock_remaining_ms(b.l);
    assert_true(left > handoff_ms(ttl_b));
    assert_true(left <= ttl_b - (t1 - t0) / 1000);
    /* With N > 1 the release's round ends at a quorum, and B, the lock its own, leaves
     * the queue of a node whose reply had not come, on another connection: that leaving
     * may run there before the release, which then finds no heir and frees the name.
     * So B's on a quorum, with B's lease, and nobody else's anywhere. */
    int mine = 0;
    for (int i = 0; i < it_nodes; i++) {
        assert_int_equal(it_cmd_calls(&it_node[i], "publish"), pub[i]);
        /* The release, and no attempt of B's (unless B's refresh fell due meanwhile),
         * but perhaps B's leaving of the queue. */
        long long calls = it_script_calls(&it_node[i]) - scripts[i];
        if ((t1 - t0) / 1000 < DLOCK_QUEUE_REFRESH_MS / 2)
            assert_true(calls >= 1 && calls <= (it_nodes == 1 ? 1 : 2));
        char key[256];
        it_key(key, sizeof key, "heir");
        char *v = it_get(&it_node[i], key);
        if (v != NULL) {
            assert_memory_equal(v, dlock_token(b.l), DLOCK_TOKEN_LEN);
            assert_true(it_pttl(&it_node[i], key) > handoff_ms(ttl_b));
            mine++;
        }
        free(v);
    }
    assert_true(mine >= it_nodes / 2 + 1);
    /* The release took B's fence: the counter holds it. */
    char fkey[256];
    it_fence_key(fkey, sizeof fkey, "heir");
    bool found = false;
    for (int i = 0; i < it_nodes; i++) {
        char *f = it_get(&it_node[i], fkey);
        assert_non_null(f);
        assert_true(strtoull(f, NULL, 10) <= dlock_fence(b.l));
        found |= strtoull(f, NULL, 10) == dlock_fence(b.l);
        free(f);
    }
    assert_true(found);
    assert_int_equal(dlock_release(b.l), DLOCK_OK);
    for (int i = 0; i < it_nodes; i++) {
        char key[256];
        it_key(key, sizeof key, "heir");
        assert_int_equal(it_exists(&it_node[i], key), 0);
    }
    dlock_client_free(hc);
}

/* A handoff whose word never reaches the waiter: the lock is set to the waiter's value
 * with a whole lease, as a release by its own client does, and nothing is published (so
 * it looks when that release's reply is lost). The waiter's next refresh finds the lock
 * its own, and it confirms it: one refresh period, not the lease. */
static void test_unannounced_handoff_found_by_refresh(void **state)
{
    (void)state;
    char key[256], qkey[256];
    it_key(key, sizeof key, "quiet-heir");
    it_queue_key(qkey, sizeof qkey, "quiet-heir");
    dlock_client *hc = it_nodes_client();
    dlock_lock *a = it_acquire(hc, "quiet-heir", 30000);
    thread_waiter b;
    thread_start(&b, "quiet-heir", 0, true);
    it_wait_queued("quiet-heir", 1);
    char b_value[512];
    it_queue_entry(&it_node[0], "quiet-heir", 0, b_value, sizeof b_value);
    int64_t t0 = dh_now_us();
    for (int i = 0; i < it_nodes; i++) {
        redisReply *r = dh_cmd(&it_node[i], "ZPOPMIN %s", qkey);
        assert_non_null(r);
        freeReplyObject(r);
        r = dh_cmd(&it_node[i], "SET %s %s PX 30000", key, b_value);
        assert_non_null(r);
        freeReplyObject(r);
    }
    thread_join(&b);
    assert_int_equal(b.rc, DLOCK_OK);
    int64_t took_ms = (b.got_us - t0) / 1000;
    int64_t bound_ms = (DLOCK_QUEUE_REFRESH_MS + 500) * dh_slack();
    printf("FIG unannounced_handoff_found_ms %lld ms (bound %lld ms)\n", (long long)took_ms,
           (long long)bound_ms);
    assert_true(took_ms <= bound_ms);
    assert_memory_equal(dlock_token(b.l), b_value, DLOCK_TOKEN_LEN);
    assert_true(dlock_fence(b.l) > dlock_fence(a));
    assert_int_equal(dlock_release(b.l), DLOCK_OK);
    dlock_client_free(b.c);
    dlock_lock_detach(a); /* its key is the waiter's, now released */
    dlock_client_free(hc);
}

/* Waiter c, behind a dead head, must get name: never before the dead head's handoff
 * lease ran out (the server set it after t0), within the bound, with a larger fence
 * than the holder's before it. It then releases and frees its client. */
static void expect_takeover(thread_waiter *c, const char *name, const char *fig, int fair,
                            int64_t t0, int64_t ttl, uint64_t fence_before)
{
    thread_join(c);
    assert_int_equal(c->rc, DLOCK_OK);
    int64_t took_ms = (c->got_us - t0) / 1000;
    printf("FIG %s%s_ms %lld ms (handoff lease %lld ms, bound %lld ms)\n", fig, fair ? "_fair" : "",
           (long long)took_ms, (long long)handoff_ms(ttl), (long long)dead_head_bound_ms(ttl));
    assert_true(took_ms >= handoff_ms(ttl));
    assert_true(took_ms <= dead_head_bound_ms(ttl));
    assert_true(dlock_fence(c->l) > fence_before);
    it_expect_holder(&it_node[0], name, dlock_token(c->l));
    assert_int_equal(dlock_release(c->l), DLOCK_OK);
    dlock_client_free(c->c);
}

/* ---- 2. a head that died while queued --------------------------------------------- */

/* Where both dead-head tests start: holder A of name (client hc) and a waiter B, a
 * forked child asking for a lease of ttl, queued behind it. */
typedef struct dead_head {
    dlock_client *hc;
    dlock_lock *a;
    it_held ha;
    pid_t b;
} dead_head;

static void dead_head_start(dead_head *d, const char *name, int fair, int64_t ttl)
{
    d->hc = it_nodes_client();
    d->a = it_acquire(d->hc, name, 10000);
    d->ha = it_keep(d->a);
    it_child_waiter w = {
        .name = name, .fair = fair, .wait_ms = -1, .ttl_ms = ttl, .report_fd = -1, .go_fd = -1};
    d->b = it_spawn_waiter(&w);
    it_wait_queued(name, 1);
}

/* Holder A, a waiter B (a child) queued and SIGKILLed, a waiter C (a thread) queued
 * behind B's dead entry; A releases. The release hands the lock to B, who never
 * confirms: C gets it once B's handoff lease ends. */
static void test_dead_head_queued(void **state)
{
    int fair = *(int *)*state;
    const char *name = fair ? "d-fair" : "d";
    const int64_t ttl = 5000;
    char key[256], qkey[256];
    it_key(key, sizeof key, name);
    it_queue_key(qkey, sizeof qkey, name);
    dead_head d;
    dead_head_start(&d, name, fair, ttl);
    char b_value[512], head[512];
    it_queue_entry(&it_node[0], name, 0, b_value, sizeof b_value);
    it_kill_and_reap(d.b);

    thread_waiter c;
    thread_start(&c, name, fair, true);
    it_wait_queued(name, 2);
    it_queue_entry(&it_node[0], name, 0, head, sizeof head);
    assert_string_equal(head, b_value); /* the dead entry is first in line */

    int64_t t0 = dh_now_us();
    assert_int_equal(dlock_release(d.a), DLOCK_OK);
    expect_takeover(&c, name, "dead_head_queued", fair, t0, ttl, d.ha.fence);

    /* Nothing of the dead waiter stays behind. */
    int64_t until = dh_now_ms() + (DLOCK_QUEUE_TTL_MS + 1000) * dh_slack();
    while (it_exists(&it_node[0], qkey) != 0 && dh_now_ms() < until)
        dh_sleep_ms(50);
    assert_int_equal(it_exists(&it_node[0], qkey), 0);
    assert_int_equal(it_exists(&it_node[0], key), 0);
    dlock_client_free(d.hc);
}

/* ---- 3. a head that dies with the lock handed to it ------------------------------- */

/* B is stopped before the release, so it is handed the lock but cannot confirm it;
 * then it is killed. */
static void test_dead_head_during_handoff(void **state)
{
    int fair = *(int *)*state;
    const char *name = fair ? "s-fair" : "s";
    const int64_t ttl = 5000;
    char key[256];
    it_key(key, sizeof key, name);
    dead_head d;
    dead_head_start(&d, name, fair, ttl);
    thread_waiter c;
    thread_start(&c, name, fair, true);
    it_wait_queued(name, 2);
    char b_value[512];
    assert_int_equal(it_queue_entry(&it_node[0], name, 0, b_value, sizeof b_value),
                     handoff_ms(ttl));
    char pid[32];
    snprintf(pid, sizeof pid, ":%ld", (long)d.b);
    assert_non_null(strstr(b_value, pid)); /* the head is B */

    assert_int_equal(kill(d.b, SIGSTOP), 0);
    int64_t t0 = dh_now_us();
    assert_int_equal(dlock_release(d.a), DLOCK_OK);
    /* The release itself made B the holder, with the handoff lease. */
    char *v = it_get(&it_node[0], key);
    long long pttl = it_pttl(&it_node[0], key);
    assert_non_null(v);
    assert_string_equal(v, b_value);
    free(v);
    assert_true(pttl > 0 && pttl <= handoff_ms(ttl));
    it_kill_and_reap(d.b);

    expect_takeover(&c, name, "dead_head_handoff", fair, t0, ttl, d.ha.fence);
    dlock_client_free(d.hc);
}

/* ---- 4. Redlock: one node lost the queue ------------------------------------------ */

static void test_redlock_queue_missing_on_one_node(void **state)
{
    (void)state;
    assert_int_equal(it_nodes, 3);
    char key[256], qkey[256];
    it_key(key, sizeof key, "m");
    it_queue_key(qkey, sizeof qkey, "m");
    dlock_client *hc = it_nodes_client();
    /* Steady state: connected, and no -NOSCRIPT round trip in the rounds below. */
    it_warm_up(hc, "m-warm", 1000);
    dlock_lock *a;
    /* The scenario needs A on every node; a quorum is enough for the library, and
     * under load a node can miss its per-node deadline. */
    for (int tries = 0;; tries++) {
        a = it_acquire(hc, "m", 10000);
        if (it_holding(it_node, it_nodes, "m", a) == it_nodes)
            break;
        assert_true(tries < 10);
        assert_int_equal(dlock_release(a), DLOCK_OK);
    }
    it_held ha = it_keep(a);
    thread_waiter b;
    thread_start(&b, "m", 0, true);
    it_wait_queued("m", 1);
    it_del(&it_node[2], qkey);

    int64_t t0 = dh_now_us();
    assert_int_equal(dlock_release(a), DLOCK_OK);
    thread_join(&b);
    assert_int_equal(b.rc, DLOCK_OK);
    int64_t took_us = b.got_us - t0;
    printf("FIG redlock_queue_missing_us %lld us\n", (long long)took_us);
    /* Nodes 1 and 2 hand it over, a quorum: B is woken by the release, not by a timer
     * (the holder's lease had 10 s left, the refresh period is a second). */
    assert_true(took_us <= 500000 * dh_slack());
    assert_true(dlock_fence(b.l) > ha.fence);
    /* Node 3 has the lock free after the release, and B's attempt takes it there: on
     * all three nodes, then. But B, woken by a quorum, may reach node 3 before A's
     * release does; node 3 refuses it, and A's release then frees it. So: B's on a
     * quorum, and nobody else's anywhere (not A's, nor a handoff lease left over). */
    int mine = 0;
    for (int i = 0; i < it_nodes; i++) {
        char *v = it_get(&it_node[i], key);
        long long pttl = it_pttl(&it_node[i], key);
        printf("INFO node %d: lock %s, PTTL %lld\n", i + 1, v ? v : "(none)", pttl);
        if (v != NULL) {
            assert_memory_equal(v, dlock_token(b.l), DLOCK_TOKEN_LEN);
            assert_true(pttl > handoff_ms(5000) && pttl <= 5000);
            mine++;
        }
        free(v);
    }
    printf("FIG redlock_queue_missing_nodes_held %d of %d\n", mine, it_nodes);
    assert_true(mine >= 2);
    assert_int_equal(dlock_release(b.l), DLOCK_OK);
    for (int i = 0; i < it_nodes; i++) {
        assert_int_equal(it_exists(&it_node[i], key), 0);
        assert_int_equal(it_exists(&it_node[i], qkey), 0);
    }
    dlock_client_free(b.c);
    dlock_client_free(hc);
}

/* ---- 5. waiters are quiet ----------------------------------------------------------- */

#define QUIET_WAITERS 8

static long long total_commands(void)
{
    redisReply *r = dh_cmd(&it_node[0], "INFO stats");
    assert_non_null(r);
    long v = dh_info_long(r, "total_commands_processed");
    freeReplyObject(r);
    assert_true(v >= 0);
    return v;
}

/* Eight waiters, each with a client of its own (as if in eight processes), behind a
 * holder with 30 s left: in 2 s each refreshes its place twice (a script of 3
 * commands), 48 commands in all. A waiter polling the lock would send far more. */
static void test_quiet_waiting(void **state)
{
    int fair = *(int *)*state;
    const char *name = fair ? "q-fair" : "q";
    dlock_client *hc = it_nodes_client();
    dlock_lock *a = it_acquire(hc, name, 30000);
    thread_waiter w[QUIET_WAITERS];
    for (int i = 0; i < QUIET_WAITERS; i++)
        thread_start(&w[i], name, fair, false);
    it_wait_queued(name, QUIET_WAITERS);
    /* Past each waiter's first refresh: a server that never ran the refresh script
     * answers its EVALSHA with -NOSCRIPT and gets the script itself, a round trip more
     * than the steady state this counts (so the count does not depend on which test ran
     * before on the server). */
    dh_sleep_ms(1200);
    long long before = total_commands();
    dh_sleep_ms(2000);
    /* The first INFO is counted in one of the two readings: take it off. */
    long long cmds = total_commands() - before - 1;
    printf("FIG quiet_waiting%s_cmds %lld commands (%d waiters, 2 s)\n", fair ? "_fair" : "", cmds,
           QUIET_WAITERS);
    assert_true(cmds <= 64);

    assert_int_equal(dlock_release(a), DLOCK_OK);
    for (int i = 0; i < QUIET_WAITERS; i++) {
        thread_join(&w[i]);
        assert_int_equal(w[i].rc, DLOCK_OK);
        dlock_client_free(w[i].c);
    }
    char key[256], qkey[256];
    it_key(key, sizeof key, name);
    it_queue_key(qkey, sizeof qkey, name);
    assert_int_equal(it_exists(&it_node[0], key), 0);
    assert_int_equal(it_exists(&it_node[0], qkey), 0);
    dlock_client_free(hc);
}

/* ---- 6. many locks taken on the grant by one client ------------------------------- */

#define MANY_NAMES (DLOCK_CONFIRMS_MAX + 8)

/* A lock taken on its grant's message keeps a connection set for its confirmation
 * until the handle's next call: one client handed many locks at once holds at most
 * DLOCK_CONFIRMS_MAX such sets, and its other waiters confirm first, as before. All
 * get their locks, and every release (which reads a confirmation) is OK. */
static void test_many_taken_on_the_grant(void **state)
{
    (void)state;
    dlock_client *hc = it_nodes_client(), *wc = it_nodes_client();
    dlock_lock *held[MANY_NAMES];
    char names[MANY_NAMES][16];
    thread_waiter w[MANY_NAMES];
    load_scripts();
    for (int i = 0; i < MANY_NAMES; i++) {
        snprintf(names[i], sizeof names[i], "many-%d", i);
        held[i] = it_acquire(hc, names[i], 30000);
    }
    /* Threads of one client, each waiting for its own name. */
    for (int i = 0; i < MANY_NAMES; i++) {
        w[i] = (thread_waiter){
            .c = wc, .name = names[i], .wait_ms = 20000, .ttl_ms = 30000, .keep = true};
        assert_int_equal(pthread_create(&w[i].t, NULL, thread_wait, &w[i]), 0);
        it_wait_queued(names[i], 1);
    }
    long long evals = eval_calls();
    for (int i = 0; i < MANY_NAMES; i++)
        assert_int_equal(dlock_release(held[i]), DLOCK_OK);
    for (int i = 0; i < MANY_NAMES; i++) {
        thread_join(&w[i]);
        assert_int_equal(w[i].rc, DLOCK_OK);
    }
    /* Every one served, so none can take the place a confirmation read frees: each is
     * confirmed one way or the other, its own 30 s lease (which waits for the
     * confirmations' replies, so that the server has run them all by the count). */
    for (int i = 0; i < MANY_NAMES; i++)
        assert_true(dlock_remaining_ms(w[i].l) > handoff_ms(30000));
    long long on_grant = eval_calls() - evals; /* each one's confirmation */
    printf("FIG many_on_grant %lld of %d locks\n", on_grant, MANY_NAMES);
    assert_true(on_grant >= 1 && on_grant <= DLOCK_CONFIRMS_MAX);
    for (int i = 0; i < MANY_NAMES; i++)
        assert_int_equal(dlock_release(w[i].l), DLOCK_OK);
    dlock_client_free(wc);
    dlock_client_free(hc);
}

int main(void)
{
    static int fair = 1, unfair = 0;
    const struct CMUnitTest one[] = {
        cmocka_unit_test(test_handoff_across_processes),
        cmocka_unit_test(test_heir_of_the_same_client),
        cmocka_unit_test(test_unannounced_handoff_found_by_refresh),
        IT_CASE("test_dead_head_queued", test_dead_head_queued, &unfair),
        IT_CASE("test_dead_head_queued_fair", test_dead_head_queued, &fair),
        IT_CASE("test_dead_head_during_handoff", test_dead_head_during_handoff, &unfair),
        IT_CASE("test_dead_head_during_handoff_fair", test_dead_head_during_handoff, &fair),
        IT_CASE("test_quiet_waiting", test_quiet_waiting, &unfair),
        IT_CASE("test_quiet_waiting_fair", test_quiet_waiting, &fair),
        cmocka_unit_test(test_many_taken_on_the_grant),
    };
    const struct CMUnitTest three[] = {
        cmocka_unit_test(test_redlock_queue_missing_on_one_node),
        cmocka_unit_test(test_heir_of_the_same_client),
    };
    return IT_NODES_GROUPS("handoff", one, three);
}
