/*
 * test_shared.c: shared (read) locks and semaphores against real redis-server
 * processes, on one server and on three (Redlock).
 *
 * Asserted exactly: who is admitted (readers overlap, a writer excludes them, a
 * semaphore's peak is exactly K), that a waiting writer is not passed by readers that
 * come after it, fence order, what dlock_inspect reports, error codes and that bad
 * input changes nothing. Asserted with DLOCK_TEST_SLACK: that a dead holder's permit
 * comes back within its lease plus a margin, and that a released permit wakes a
 * waiter long before a timer would. Other timings are FIG lines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* A try (wait_ms 0) or a wait for a shared (shared 1) or exclusive hold of name. */
static int take(dlock_client *c, const char *name, int shared, int64_t ttl_ms, int64_t wait_ms,
                dlock_lock **l)
{
    dlock_opts o = {0};
    o.ttl_ms = ttl_ms;
    o.wait_ms = wait_ms;
    o.shared = shared;
    return dlock_acquire(c, name, &o, l);
}

static int take_permit(dlock_client *c, const char *name, int64_t k, int64_t ttl_ms,
                       int64_t wait_ms, dlock_lock **l)
{
    dlock_opts o = {0};
    o.ttl_ms = ttl_ms;
    o.wait_ms = wait_ms;
    return dlock_sem_acquire(c, name, k, &o, l);
}

/* ---- 1. readers overlap; a writer excludes them and is excluded ------------------- */

static void test_readers_and_writer(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client();
    dlock_lock *r1, *r2, *w = NULL, *r3 = NULL;
    /* Leases of different lengths: the list's order (longest first) is then fixed. */
    assert_int_equal(take(c, "rw", 1, 10000, 0, &r1), DLOCK_OK);
    assert_int_equal(take(c, "rw", 1, 15000, 0, &r2), DLOCK_OK);
    uint64_t f1 = dlock_fence(r1), f2 = dlock_fence(r2);
    assert_true(f2 > f1);
    assert_int_equal(take(c, "rw", 0, 10000, 0, &w), DLOCK_ERR_BUSY);
    assert_null(w);

    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "rw", &h), DLOCK_OK);
    assert_int_equal(h.held, 1);
    assert_int_equal(h.shared, 2);
    assert_string_equal(h.token, "");
    assert_true(h.remaining_ms > 14000 && h.remaining_ms <= 15000); /* the longest */
    assert_int_equal(h.fence, f2);
    dlock_holder list[4];
    it_expect_shared(c, "rw", list, 4, 2);
    /* Longest lease first. */
    assert_string_equal(list[0].token, dlock_token(r2));
    assert_string_equal(list[1].token, dlock_token(r1));
    assert_non_null(strchr(list[0].description, ':')); /* "host:pid" */

    /* Both leases are renewable, checkable, and released one by one. */
    assert_int_equal(dlock_extend(r1, 20000), DLOCK_OK);
    assert_int_equal(dlock_check(r1), DLOCK_OK);
    assert_true(dlock_remaining_ms(r1) > 19000);
    assert_int_equal(dlock_release(r1), DLOCK_OK);
    assert_int_equal(take(c, "rw", 0, 10000, 0, &w), DLOCK_ERR_BUSY);
    assert_int_equal(dlock_release(r2), DLOCK_OK);
    assert_int_equal(take(c, "rw", 0, 10000, 0, &w), DLOCK_OK);
    assert_true(dlock_fence(w) > f2);
    /* A writer excludes readers. */
    assert_int_equal(take(c, "rw", 1, 10000, 0, &r3), DLOCK_ERR_BUSY);
    assert_int_equal(dlock_inspect(c, "rw", &h), DLOCK_OK);
    assert_int_equal(h.shared, 0);
    assert_string_equal(h.token, dlock_token(w));
    assert_int_equal(dlock_release(w), DLOCK_OK);
    /* Nothing is left behind once all are gone. */
    assert_int_equal(it_exists(&it_node[0], "dlock:{rw}"), 0);
    assert_int_equal(it_exists(&it_node[0], "dlock:{rw}:holders"), 0);
    assert_int_equal(it_exists(&it_node[0], "dlock:{rw}:holders:info"), 0);
    dlock_client_free(c);
}

/* A shared lease that runs out is not ours: extend and release say LOST, and the
 * lease ran out on the server without any call. */
static void test_shared_lease_runs_out(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client();
    dlock_lock *r, *w;
    assert_int_equal(take(c, "ro", 1, 200, 0, &r), DLOCK_OK);
    dh_sleep_ms(300);
    assert_int_equal(take(c, "ro", 0, 10000, 0, &w), DLOCK_OK);
    assert_int_equal(dlock_extend(r, 1000), DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(r), DLOCK_ERR_LOST);
    it_expect_holder(&it_node[0], "ro", dlock_token(w));
    assert_int_equal(dlock_release(w), DLOCK_OK);
    dlock_client_free(c);
}

/* A shared lock taken with auto_renew outlives its ttl many times over. */
static void test_shared_auto_renew(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client();
    dlock_opts o = {0};
    o.ttl_ms = 300;
    o.shared = 1;
    o.auto_renew = 1;
    dlock_lock *r, *w = NULL;
    assert_int_equal(dlock_acquire(c, "rr", &o, &r), DLOCK_OK);
    dh_sleep_ms(1200);
    assert_int_equal(dlock_check(r), DLOCK_OK);
    assert_int_equal(take(c, "rr", 0, 10000, 0, &w), DLOCK_ERR_BUSY);
    assert_int_equal(dlock_release(r), DLOCK_OK);
    assert_int_equal(take(c, "rr", 0, 10000, 0, &w), DLOCK_OK);
    assert_int_equal(dlock_release(w), DLOCK_OK);
    dlock_client_free(c);
}

/* ---- threads and processes that wait, hold and record --------------------------- */

/* A thread that waits for the name (shared, exclusive, or one of k permits), holds
 * it hold_ms on the board, and releases it. */
typedef struct holder {
    pthread_t th;
    const char *name;
    int shared;
    int64_t k; /* 0: dlock_acquire */
    int64_t hold_ms;
    it_board *b;
    dlock_client *c;
    int rc;
    _Atomic int64_t got_ms; /* dh_now_ms() when it got the lock; 0 before */
} holder;

static void *holder_main(void *arg)
{
    holder *h = arg;
    dlock_lock *l = NULL;
    h->rc = h->k > 0 ? take_permit(h->c, h->name, h->k, 10000, 10000 * dh_slack(), &l)
                     : take(h->c, h->name, h->shared, 10000, 10000 * dh_slack(), &l);
    if (h->rc == DLOCK_OK) {
        h->got_ms = dh_now_ms();
        if (h->b != NULL)
            it_board_enter(h->b);
        dh_sleep_ms(h->hold_ms);
        if (h->b != NULL)
            it_board_leave(h->b);
        dlock_release(l);
    }
    return NULL;
}

static void holder_start(holder *h, const char *name, int shared, int64_t k, int64_t hold_ms,
                         it_board *b)
{
    *h = (holder){.name = name, .shared = shared, .k = k, .hold_ms = hold_ms, .b = b};
    h->c = it_nodes_client();
    assert_int_equal(pthread_create(&h->th, NULL, holder_main, h), 0);
}

static void holder_join(holder *h)
{
    assert_int_equal(pthread_join(h->th, NULL), 0);
    dlock_client_free(h->c);
    assert_int_equal(h->rc, DLOCK_OK);
}

/* ---- 2. a waiting writer is not starved by overlapping readers ------------------- */

/* Readers come and go, each taking its lock before the one before it lets go, so that
 * some reader always holds the name. A writer that waits among them gets the lock as
 * soon as the reader admitted before it leaves: every reader that comes after it is
 * refused until it is done. */
static void test_writer_not_starved(void **state)
{
    (void)state;
    dlock_client *rc = it_nodes_client();
    const char *name = "starve";
    dlock_lock *prev;
    assert_int_equal(take(rc, name, 1, 10000, 0, &prev), DLOCK_OK);
    holder w;
    holder_start(&w, name, 0, 0, 50, NULL);
    it_wait_queued(name, 1);
    int64_t queued_ms = dh_now_ms();
    int refused = 0, admitted_while_waiting = 0;
    /* The stream: 20 readers, 20 ms apart. The reader admitted before the writer queued
     * lets go at the first step. */
    for (int i = 0; i < 20; i++) {
        dlock_lock *next = NULL;
        int r = take(rc, name, 1, 10000, 0, &next);
        if (r == DLOCK_OK) {
            if (w.got_ms == 0)
                admitted_while_waiting++;
        } else {
            assert_int_equal(r, DLOCK_ERR_BUSY);
            refused++;
        }
        if (prev != NULL)
            assert_int_equal(dlock_release(prev), DLOCK_OK);
        prev = next;
        dh_sleep_ms(20);
    }
    if (prev != NULL)
        assert_int_equal(dlock_release(prev), DLOCK_OK);
    holder_join(&w);
    printf("FIG writer_not_starved_wait_ms %lld (readers refused %d)\n",
           (long long)(w.got_ms - queued_ms), refused);
    assert_int_equal(admitted_while_waiting, 0);
    assert_true(refused > 0);
    /* The writer got the lock at the first step, not after the stream (400 ms). */
    assert_true(w.got_ms - queued_ms < 200 * dh_slack());
    dlock_client_free(rc);
}

/* Readers that wait behind a writer are all admitted by its release, together, long
 * before the writer's 30 s lease or a waiter's refresh would let them in. */
static void test_readers_woken_together(void **state)
{
    (void)state;
    enum { READERS = 4 };
    dlock_client *c = it_nodes_client();
    dlock_lock *w;
    assert_int_equal(take(c, "wake", 0, 30000, 0, &w), DLOCK_OK);
    it_board *b = it_board_new();
    holder r[READERS];
    for (int i = 0; i < READERS; i++)
        holder_start(&r[i], "wake", 1, 0, 300 * dh_slack(), b);
    it_wait_queued("wake", READERS);
    int64_t t0 = dh_now_ms();
    assert_int_equal(dlock_release(w), DLOCK_OK);
    int64_t slowest = 0;
    for (int i = 0; i < READERS; i++) {
        holder_join(&r[i]);
        if (r[i].got_ms - t0 > slowest)
            slowest = r[i].got_ms - t0;
    }
    printf("FIG readers_woken_slowest_ms %lld (%d readers)\n", (long long)slowest, READERS);
    assert_int_equal(b->peak, READERS);
    assert_true(slowest < 250 * dh_slack());
    it_board_free(b);
    dlock_client_free(c);
}

/* ---- 3. semaphores --------------------------------------------------------------- */

#define SEM_PROCS  12
#define SEM_K      3
#define SEM_ROUNDS 5

/* Twelve processes share three permits: never more than three hold one, and three
 * do at once (the peak is exactly K). */
static void test_sem_peak(void **state)
{
    (void)state;
    dlock_config cfg;
    it_config_init(&cfg);
    it_rounds r = {.servers = it_node_urls,
                   .cfg = &cfg,
                   .name = "sem",
                   .permits = SEM_K,
                   .ttl_ms = 10000,
                   .rounds = SEM_ROUNDS};
    it_board *b = it_board_procs(SEM_PROCS, &r, 20);
    printf("FIG sem_peak %d (K %d, %d processes)\n", b->peak, SEM_K, SEM_PROCS);
    assert_int_equal(b->sections, SEM_PROCS * SEM_ROUNDS);
    assert_int_equal(b->peak, SEM_K);
    dlock_client *c = it_nodes_client();
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "sem", &h), DLOCK_OK);
    assert_int_equal(h.held, 0);
    dlock_client_free(c);
    it_board_free(b);
}

/* A holder killed with SIGKILL gives its permit back when its lease runs out, not
 * before; a waiter gets it then. */
static void test_sem_dead_holder(void **state)
{
    (void)state;
    const int64_t lease = 500;
    dlock_client *c = it_nodes_client();
    dlock_lock *mine;
    assert_int_equal(take_permit(c, "dead", 2, 10000, 0, &mine), DLOCK_OK);
    int p[2];
    assert_int_equal(pipe(p), 0);
    /* The child's lease starts on the server after this: the permit cannot come back
     * before forked_ms + lease. */
    int64_t forked_ms = dh_now_ms();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dlock_config cfg;
        it_config_init(&cfg);
        dlock_client *cc = NULL;
        dlock_lock *l;
        char ok = 0;
        if (dlock_client_new(it_node_urls, &cfg, &cc) == DLOCK_OK &&
            take_permit(cc, "dead", 2, lease, 0, &l) == DLOCK_OK)
            ok = 1;
        if (write(p[1], &ok, 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    char ok = 0;
    assert_int_equal(read(p[0], &ok, 1), 1);
    int64_t granted_ms = dh_now_ms();
    assert_int_equal(ok, 1);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    dlock_lock *l = NULL;
    assert_int_equal(take_permit(c, "dead", 2, 10000, 0, &l), DLOCK_ERR_BUSY);
    assert_int_equal(take_permit(c, "dead", 2, 10000, 5000 * dh_slack(), &l), DLOCK_OK);
    int64_t back_ms = dh_now_ms();
    printf("FIG sem_dead_holder_back_ms %lld (lease %lld)\n", (long long)(back_ms - granted_ms),
           (long long)lease);
    assert_true(back_ms - forked_ms >= lease);
    assert_true(back_ms - granted_ms < (lease + 1500) * dh_slack());
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(dlock_release(mine), DLOCK_OK);
    close(p[0]);
    close(p[1]);
    dlock_client_free(c);
}

/* A permit given back wakes a waiter at once (the holders' leases are 30 s). */
static void test_sem_release_wakes(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client();
    dlock_lock *a, *b;
    assert_int_equal(take_permit(c, "wk", 2, 30000, 0, &a), DLOCK_OK);
    assert_int_equal(take_permit(c, "wk", 2, 30000, 0, &b), DLOCK_OK);
    holder w;
    holder_start(&w, "wk", 0, 2, 0, NULL);
    it_wait_queued("wk", 1);
    int64_t t0 = dh_now_ms();
    assert_int_equal(dlock_release(a), DLOCK_OK);
    holder_join(&w);
    printf("FIG sem_release_wake_ms %lld\n", (long long)(w.got_ms - t0));
    assert_true(w.got_ms - t0 < 250 * dh_slack());
    assert_int_equal(dlock_release(b), DLOCK_OK);
    dlock_client_free(c);
}

/* `dlock sem release NAME TOKEN`: a permit detached by one client is given back by
 * another that knows only the name and the token. */
static void test_sem_adopt_release(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client(), *d = it_nodes_client();
    dlock_lock *l, *a;
    assert_int_equal(take_permit(c, "adopt", 3, 10000, 0, &l), DLOCK_OK);
    char token[DLOCK_TOKEN_LEN + 1];
    strcpy(token, dlock_token(l));
    assert_int_equal(dlock_lock_detach(l), DLOCK_OK);
    assert_int_equal(dlock_lock_adopt(d, "adopt", token, &a), DLOCK_OK);
    assert_int_equal(dlock_extend(a, 5000), DLOCK_OK);
    assert_int_equal(dlock_release(a), DLOCK_OK);
    dlock_holder h;
    assert_int_equal(dlock_inspect(d, "adopt", &h), DLOCK_OK);
    assert_int_equal(h.held, 0);
    assert_int_equal(dlock_lock_adopt(d, "adopt", token, &a), DLOCK_OK);
    assert_int_equal(dlock_release(a), DLOCK_ERR_LOST);
    dlock_client_free(c);
    dlock_client_free(d);
}

static long long dbsize(void)
{
    return it_int_reply(dh_cmd(&it_node[0], "DBSIZE"));
}

/* Bad permits and modes: DLOCK_ERR_INVALID with a reason, and nothing written. */
static void test_bad_input(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client();
    long long before = dbsize();
    dlock_lock *l = (dlock_lock *)1;
    const int64_t bad_k[] = {0, -1, INT64_MIN, (int64_t)DLOCK_PERMITS_MAX + 1, INT64_MAX};
    for (size_t i = 0; i < sizeof bad_k / sizeof *bad_k; i++) {
        l = (dlock_lock *)1;
        assert_int_equal(dlock_sem_acquire(c, "bad", bad_k[i], NULL, &l), DLOCK_ERR_INVALID);
        assert_null(l);
        assert_non_null(strstr(dlock_errmsg(), "permits"));
    }
    dlock_opts o = {0};
    o.shared = 2;
    assert_int_equal(dlock_acquire(c, "bad", &o, &l), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errmsg(), "shared"));
    o.shared = 1;
    assert_int_equal(dlock_sem_acquire(c, "bad", 2, &o, &l), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errmsg(), "shared"));
    assert_int_equal(dlock_sem_acquire(NULL, "bad", 2, NULL, &l), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_sem_acquire(c, "", 2, NULL, &l), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_sem_acquire(c, NULL, 2, NULL, &l), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_sem_acquire(c, "bad", 2, NULL, NULL), DLOCK_ERR_INVALID);
    int n;
    int64_t total;
    dlock_holder h[1];
    assert_int_equal(dlock_inspect_shared(c, "bad", h, -1, &n, &total), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_inspect_shared(c, "bad", NULL, 1, &n, &total), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_inspect_shared(c, "bad", h, 1, NULL, &total), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_inspect_shared(c, "", h, 1, &n, &total), DLOCK_ERR_INVALID);
    assert_int_equal(dbsize(), before);
    dlock_client_free(c);
}

/* ---- 4. Redlock (three servers) -------------------------------------------------- */

/* Shared and exclusive holders on three servers with one of them down: readers
 * overlap, a writer is refused while they hold, and gets the lock once they leave. */
static void test_redlock_one_down(void **state)
{
    (void)state;
    dh_server_kill(&it_node[2]);
    dlock_client *c = it_nodes_client();
    dlock_lock *r1, *r2, *w = NULL;
    assert_int_equal(take(c, "rl", 1, 10000, 0, &r1), DLOCK_OK);
    assert_int_equal(take(c, "rl", 1, 10000, 0, &r2), DLOCK_OK);
    assert_int_equal(take(c, "rl", 0, 10000, 0, &w), DLOCK_ERR_BUSY);
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "rl", &h), DLOCK_OK);
    assert_int_equal(h.shared, 2);
    assert_int_equal(dlock_check(r1), DLOCK_OK);
    assert_int_equal(dlock_extend(r2, 20000), DLOCK_OK);
    uint64_t f2 = dlock_fence(r2);
    assert_true(f2 > dlock_fence(r1));
    assert_int_equal(dlock_release(r1), DLOCK_OK);
    assert_int_equal(dlock_release(r2), DLOCK_OK);
    assert_int_equal(take(c, "rl", 0, 10000, 0, &w), DLOCK_OK);
    assert_true(dlock_fence(w) > f2);
    dlock_lock *r3 = NULL;
    assert_int_equal(take(c, "rl", 1, 10000, 0, &r3), DLOCK_ERR_BUSY);
    assert_int_equal(dlock_release(w), DLOCK_OK);
    dlock_client_free(c);
    assert_int_equal(dh_server_restart(&it_node[2]), 0);
}

/* Three servers cannot count two permits; one permit is the exclusive lock. */
static void test_redlock_sem(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client();
    dlock_lock *a, *b = NULL;
    assert_int_equal(take_permit(c, "rs", 2, 10000, 0, &a), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errmsg(), "one server"));
    assert_int_equal(take_permit(c, "rs", 1, 10000, 0, &a), DLOCK_OK);
    assert_int_equal(take_permit(c, "rs", 1, 10000, 0, &b), DLOCK_ERR_BUSY);
    assert_int_equal(take(c, "rs", 0, 10000, 0, &b), DLOCK_ERR_BUSY);
    /* Held on a quorum (the round ends once two granted: the third may not have yet). */
    assert_true(it_holding(it_node, 3, "rs", a) >= 2);
    assert_int_equal(dlock_release(a), DLOCK_OK);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest one[] = {
        cmocka_unit_test(test_readers_and_writer),     cmocka_unit_test(test_shared_lease_runs_out),
        cmocka_unit_test(test_shared_auto_renew),      cmocka_unit_test(test_writer_not_starved),
        cmocka_unit_test(test_readers_woken_together), cmocka_unit_test(test_sem_peak),
        cmocka_unit_test(test_sem_dead_holder),        cmocka_unit_test(test_sem_release_wakes),
        cmocka_unit_test(test_sem_adopt_release),      cmocka_unit_test(test_bad_input),
    };
    const struct CMUnitTest three[] = {
        cmocka_unit_test(test_redlock_one_down),
        cmocka_unit_test(test_redlock_sem),
    };
    return IT_NODES_GROUPS("shared", one, three);
}
