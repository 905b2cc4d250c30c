/*
 * test_mutex.c: mutual exclusion under contention, the property a lock exists for.
 *
 * Workers repeat: acquire "counter-lock" (blocking), GET counter, SET counter+1 on
 * their own hiredis connection, release. The GET/SET pair is a read-modify-write
 * that loses updates as soon as two workers overlap, so the final counter is exact
 * only if no two critical sections ever ran at once. Within one process an atomic
 * "inside" count also catches an overlap the moment it happens.
 *
 * Three shapes: threads sharing one client, threads with a client each, and forked
 * processes that each create their own client after fork().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS  500
#define LOCK    "counter-lock"
#define COUNTER "counter"

static int64_t mutex_timeout_ms(void)
{
    /* Not a timing test: a generous per-node deadline keeps a loaded 2-core machine
     * from turning into spurious timeouts. */
    return 1000 * dh_slack();
}

static dlock_client *new_client(void)
{
    dlock_config cfg = {0};
    cfg.timeout_ms = mutex_timeout_ms();
    cfg.connect_timeout_ms = 1000 * dh_slack();
    dlock_client *c = NULL;
    return dlock_client_new(it_srv.url, &cfg, &c) == DLOCK_OK ? c : NULL;
}

static void reset_counter(void)
{
    redisReply *r = dh_cmd(&it_srv, "SET %s 0", COUNTER);
    assert_non_null(r);
    freeReplyObject(r);
}

static long long read_counter(void)
{
    redisReply *r = dh_cmd(&it_srv, "GET %s", COUNTER);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    long long v = strtoll(r->str, NULL, 10);
    freeReplyObject(r);
    return v;
}

/* What one worker reports. Workers do not assert (cmocka is not thread-safe, and a
 * forked child must not longjmp into its parent's test); they count and describe. */
struct worker {
    dlock_client *client; /* shared, or NULL to make its own */
    atomic_int *inside;   /* in-process overlap detector, or NULL */
    int done;             /* critical sections completed */
    int overlaps;         /* times another worker was inside at the same time */
    int fail_rc;          /* first failing dlock code, 0 if none */
    char fail_what[256];
    int64_t max_wait_ms;
    uint64_t last_fence;
    int fence_regressions; /* a fence not above this worker's previous one */
};

static void worker_fail(struct worker *w, int rc, const char *what)
{
    if (w->fail_rc == 0) {
        w->fail_rc = rc ? rc : -1;
        snprintf(w->fail_what, sizeof w->fail_what, "%s: %s: %s", what, dlock_errname(rc),
                 dlock_errmsg());
    }
}

static void run_worker(struct worker *w)
{
    dlock_client *c = w->client ? w->client : new_client();
    redisContext *rc_ = dh_connect(&it_srv);
    if (!c || !rc_) {
        worker_fail(w, 0, "setup");
        goto out;
    }
    dlock_opts o = {0};
    o.ttl_ms = 10000;
    o.wait_ms = 30000;
    for (int i = 0; i < ROUNDS; i++) {
        dlock_lock *l = NULL;
        int64_t t0 = dh_now_ms();
        int rc = dlock_acquire(c, LOCK, &o, &l);
        int64_t waited = dh_now_ms() - t0;
        if (waited > w->max_wait_ms)
            w->max_wait_ms = waited;
        if (rc != DLOCK_OK) {
            worker_fail(w, rc, "acquire");
            break;
        }
        if (w->inside && atomic_fetch_add(w->inside, 1) != 0)
            w->overlaps++;
        if (dlock_fence(l) <= w->last_fence)
            w->fence_regressions++;
        w->last_fence = dlock_fence(l);

        redisReply *r = redisCommand(rc_, "GET %s", COUNTER);
        long long v = (r && r->type == REDIS_REPLY_STRING) ? strtoll(r->str, NULL, 10) : -1;
        freeReplyObject(r);
        r = v >= 0 ? redisCommand(rc_, "SET %s %lld", COUNTER, v + 1) : NULL;
        bool ok = r && r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);

        if (w->inside)
            atomic_fetch_sub(w->inside, 1);
        rc = dlock_release(l);
        if (!ok) {
            worker_fail(w, 0, "GET/SET counter");
            break;
        }
        if (rc != DLOCK_OK) {
            worker_fail(w, rc, "release");
            break;
        }
        w->done++;
    }
out:
    if (rc_)
        redisFree(rc_);
    if (!w->client)
        dlock_client_free(c);
}

static void *thread_main(void *arg)
{
    run_worker(arg);
    return NULL;
}

static void check_workers(const char *shape, struct worker *w, int n, int64_t took_ms)
{
    int64_t max_wait = 0;
    for (int i = 0; i < n; i++) {
        if (w[i].fail_rc)
            printf("worker %d failed: %s\n", i, w[i].fail_what);
        if (w[i].max_wait_ms > max_wait)
            max_wait = w[i].max_wait_ms;
    }
    int total = n * ROUNDS;
    printf("FIG mutex_%s_total_ms %lld ms\n", shape, (long long)took_ms);
    printf("FIG mutex_%s_per_section_us %lld us\n", shape, (long long)(took_ms * 1000 / total));
    printf("FIG mutex_%s_max_wait_ms %lld ms\n", shape, (long long)max_wait);
    for (int i = 0; i < n; i++) {
        assert_int_equal(w[i].fail_rc, 0);
        assert_int_equal(w[i].overlaps, 0);
        assert_int_equal(w[i].fence_regressions, 0);
        assert_int_equal(w[i].done, ROUNDS);
    }
    assert_int_equal(read_counter(), total);
}

static void run_threads(const char *shape, bool shared)
{
    enum { N = 8 };
    reset_counter();
    atomic_int inside = 0;
    struct worker w[N];
    memset(w, 0, sizeof w);
    dlock_client *c = NULL;
    if (shared) {
        c = new_client();
        assert_non_null(c);
    }
    pthread_t th[N];
    int64_t t0 = dh_now_ms();
    for (int i = 0; i < N; i++) {
        w[i].client = c;
        w[i].inside = &inside;
        assert_int_equal(pthread_create(&th[i], NULL, thread_main, &w[i]), 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    int64_t took = dh_now_ms() - t0;
    dlock_client_free(c);
    check_workers(shape, w, N, took);
}

/* The same GET/SET without the lock, to show that the test has teeth: on this
 * machine, how many updates do overlapping workers lose? Shown, not asserted (a
 * race is not guaranteed to happen). */
static void *unlocked_main(void *arg)
{
    (void)arg;
    redisContext *c = dh_connect(&it_srv);
    for (int i = 0; c && i < ROUNDS; i++) {
        redisReply *r = redisCommand(c, "GET %s", COUNTER);
        long long v = (r && r->type == REDIS_REPLY_STRING) ? strtoll(r->str, NULL, 10) : 0;
        freeReplyObject(r);
        freeReplyObject(redisCommand(c, "SET %s %lld", COUNTER, v + 1));
    }
    redisFree(c);
    return NULL;
}

static void show_unlocked_losses(void)
{
    enum { N = 8 };
    reset_counter();
    pthread_t th[N];
    for (int i = 0; i < N; i++)
        assert_int_equal(pthread_create(&th[i], NULL, unlocked_main, NULL), 0);
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    printf("FIG mutex_unlocked_lost_updates %lld updates\n", N * ROUNDS - read_counter());
}

static void threads_shared_client(void **state)
{
    (void)state;
    run_threads("shared", true);
}

static void threads_own_clients(void **state)
{
    (void)state;
    run_threads("threads", false);
    show_unlocked_losses();
}

static void forked_processes(void **state)
{
    (void)state;
    enum { N = 4 };
    reset_counter();
    /* Each child writes its report to a pipe; the parent checks reports, exit
     * statuses and the counter. */
    struct worker w[N];
    pid_t pid[N];
    int pfd[N][2];
    memset(w, 0, sizeof w);
    fflush(stdout);
    int64_t t0 = dh_now_ms();
    for (int i = 0; i < N; i++) {
        assert_int_equal(pipe(pfd[i]), 0);
        pid[i] = fork();
        assert_true(pid[i] >= 0);
        if (pid[i] == 0) {
            close(pfd[i][0]);
            struct worker me = {0};
            run_worker(&me); /* its own client, created after fork */
            ssize_t n = write(pfd[i][1], &me, sizeof me);
            _exit(n == (ssize_t)sizeof me ? 0 : 2);
        }
        close(pfd[i][1]);
    }
    for (int i = 0; i < N; i++) {
        ssize_t got = 0, r;
        while (got < (ssize_t)sizeof w[i] &&
               (r = read(pfd[i][0], (char *)&w[i] + got, sizeof w[i] - (size_t)got)) > 0)
            got += r;
        close(pfd[i][0]);
        int status;
        assert_int_equal(waitpid(pid[i], &status, 0), pid[i]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
        assert_int_equal(got, (ssize_t)sizeof w[i]);
    }
    check_workers("processes", w, N, dh_now_ms() - t0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(threads_shared_client),
        cmocka_unit_test(threads_own_clients),
        cmocka_unit_test(forked_processes),
    };
    return cmocka_run_group_tests_name("mutex", tests, it_srv_setup, it_srv_teardown);
}
