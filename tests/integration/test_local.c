/*
 * test_local.c: local locks (a client made with file:///DIR) between real processes:
 * each worker is a forked child with a client of its own, and no server runs at all.
 * Mutual exclusion, a killed holder, fences, shared locks and semaphores, waiting.
 * Detached locks, status and the client's end: test_local_detach.c; the URLs refused
 * and the names kept inside the directory: test_local_input.c.
 *
 * Safety is asserted exactly (a counter incremented under the lock ends exact, a
 * semaphore's peak is exactly K, fences only increase). Liveness bounds (how soon a
 * waiter gets a lock whose holder was SIGKILLed, how soon a release wakes a waiter) are
 * multiplied by DLOCK_TEST_SLACK and printed as FIG lines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dlock.h"
#include "itest.h"
#include "support.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------------- */

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Memory shared with forked children. */
static void *shared_map(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    memset(p, 0, len);
    return p;
}

/* ---- mutual exclusion --------------------------------------------------------- */

#define WORKERS    4
#define ITERATIONS 150

typedef struct section {
    _Atomic int inside;
    _Atomic int overlaps;
    char counter_path[600];
} section;

/* One locked section: read the counter file, add one, write it back. */
static void increment(section *s)
{
    if (atomic_fetch_add(&s->inside, 1) != 0)
        atomic_fetch_add(&s->overlaps, 1);
    int fd = open(s->counter_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    char buf[32] = {0};
    ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
    long v = r > 0 ? strtol(buf, NULL, 10) : 0;
    int n = snprintf(buf, sizeof buf, "%ld\n", v + 1);
    if (pwrite(fd, buf, (size_t)n, 0) != n)
        atomic_fetch_add(&s->overlaps, 1000);
    close(fd);
    atomic_fetch_sub(&s->inside, 1);
}

static long read_counter(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f != NULL && fscanf(f, "%ld", &v) != 1)
        v = -1;
    if (f != NULL)
        fclose(f);
    return v;
}

/* A worker's state in the counter tests: its last fence, which must increase too. */
typedef struct counter_arg {
    section *s;
    uint64_t last;
} counter_arg;

static int counter_section(dlock_lock *l, void *arg)
{
    counter_arg *a = arg;
    if (dlock_fence(l) <= a->last)
        return 12;
    a->last = dlock_fence(l);
    increment(a->s);
    return 0;
}

static int counter_worker(void *arg)
{
    counter_arg a = {.s = arg};
    it_rounds r = {.servers = it_local_url,
                   .name = "counter",
                   .rounds = ITERATIONS,
                   .section = counter_section,
                   .arg = &a};
    return it_rounds_run(&r);
}

static void processes_exclude_each_other(void **state)
{
    (void)state;
    section *s = shared_map(sizeof *s);
    snprintf(s->counter_path, sizeof s->counter_path, "%s/counter.txt", it_local_dir);
    int64_t t0 = dh_now_ms();
    it_fork_all(WORKERS, counter_worker, s);
    int64_t took = dh_now_ms() - t0;
    assert_int_equal(atomic_load(&s->overlaps), 0);
    assert_int_equal(read_counter(s->counter_path), WORKERS * ITERATIONS);
    printf("FIG local_sections_per_s %lld /s\n",
           (long long)(WORKERS * ITERATIONS * 1000 / (took > 0 ? took : 1)));
    munmap(s, sizeof *s);
}

typedef struct thread_arg {
    it_rounds r;
    counter_arg a;
    pthread_t th;
    int rc;
} thread_arg;

static void *counter_thread(void *arg)
{
    thread_arg *t = arg;
    t->rc = it_rounds_run(&t->r);
    return NULL;
}

/* Each handle opens the file itself, so threads sharing one client exclude each other. */
static void threads_exclude_each_other(void **state)
{
    (void)state;
    section *s = shared_map(sizeof *s);
    snprintf(s->counter_path, sizeof s->counter_path, "%s/counter-threads.txt", it_local_dir);
    dlock_client *c = it_local_client();
    thread_arg args[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        thread_arg *t = &args[i];
        t->a = (counter_arg){.s = s};
        t->r = (it_rounds){.client = c,
                           .name = "counter-threads",
                           .rounds = ITERATIONS,
                           .section = counter_section,
                           .arg = &t->a};
        assert_int_equal(pthread_create(&t->th, NULL, counter_thread, t), 0);
    }
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(args[i].th, NULL);
        assert_int_equal(args[i].rc, 0);
    }
    assert_int_equal(atomic_load(&s->overlaps), 0);
    assert_int_equal(read_counter(s->counter_path), WORKERS * ITERATIONS);
    dlock_client_free(c);
    munmap(s, sizeof *s);
}

/* ---- a holder killed ---------------------------------------------------------- */

/* Take the name, say so (with the fence), then sleep until killed. */
static int holder_until_killed(void *arg)
{
    it_local_pipe_arg *a = arg;
    dlock_lock *l = it_local_child_take(a);
    if (l == NULL)
        return 20;
    uint64_t f = dlock_fence(l);
    it_local_put(a->fd, &f, sizeof f);
    for (;;)
        pause();
}

/* Wait for the name; report when it was granted (CLOCK_MONOTONIC us) and its fence. */
static int waiter(void *arg)
{
    it_local_pipe_arg *a = arg;
    dlock_lock *l = it_local_child_take(a);
    int64_t msg[2] = {now_us(), (int64_t)dlock_fence(l)};
    if (l == NULL)
        return 31;
    it_local_put(a->fd, msg, sizeof msg);
    return dlock_release(l) == DLOCK_OK ? 0 : 32;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

#define ROUNDS 5

/* The kernel drops a dead holder's locks with its descriptors: a waiter gets the name
 * at once, not after the lease (60 s here). */
static void killed_holder_frees_at_once(void **state)
{
    (void)state;
    int64_t took[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        int hp[2], wp[2];
        it_local_pipe_arg ha = {"killed", -1, 0, 60000, 0, NULL};
        uint64_t hf = 0;
        pid_t holder = it_local_child_started(holder_until_killed, &ha, hp, &hf, sizeof hf);
        assert_int_equal(pipe(wp), 0);
        it_local_pipe_arg wa = {"killed", wp[1], 20000, 0, 0, NULL};
        pid_t w = it_local_child(waiter, &wa);
        /* The waiter is waiting by now (else it tries after the kill, which the figure
         * then includes). */
        dh_sleep_ms(100 * dh_slack());
        int64_t t0 = now_us();
        kill(holder, SIGKILL);
        int64_t msg[2];
        assert_true(it_local_get(wp[0], msg, sizeof msg, 10000 * dh_slack()));
        took[r] = msg[0] - t0;
        assert_true((uint64_t)msg[1] > hf);
        assert_int_equal(it_local_wait_exit(holder), 128 + SIGKILL);
        assert_int_equal(it_local_wait_exit(w), 0);
        it_local_close_pipe(hp);
        it_local_close_pipe(wp);
    }
    qsort(took, ROUNDS, sizeof *took, cmp_i64);
    printf("FIG local_takeover_ms %.2f ms (median of %d; max %.2f)\n", took[ROUNDS / 2] / 1000.0,
           ROUNDS, took[ROUNDS - 1] / 1000.0);
    assert_true(took[ROUNDS - 1] < 100000 * dh_slack());
}

/* ---- fences ------------------------------------------------------------------- */

static int take_and_report_fence(void *arg)
{
    it_local_pipe_arg *a = arg;
    dlock_lock *l = it_local_child_take(a);
    if (l == NULL)
        return 40;
    uint64_t f = dlock_fence(l);
    it_local_put(a->fd, &f, sizeof f);
    return 0; /* exits holding it: the kernel lets go */
}

static uint64_t fence_from_new_process(const char *name, int shared)
{
    it_local_pipe_arg a = {name, -1, 0, 0, shared, NULL};
    uint64_t f = 0;
    it_local_child_report(take_and_report_fence, &a, &f, sizeof f);
    return f;
}

/* Fences increase across processes that come and go, kinds of holders, and the
 * removal of the name's file (the wall-clock floor). */
static void fences_increase_across_processes(void **state)
{
    (void)state;
    uint64_t f1 = fence_from_new_process("fences", 0);
    uint64_t f2 = fence_from_new_process("fences", 0);
    uint64_t f3 = fence_from_new_process("fences", 1);
    assert_true(f1 > 0);
    assert_true(f2 > f1);
    assert_true(f3 > f2);
    /* The counter is kept in the file: a burst of acquisitions in one microsecond
     * still gets increasing fences (counter + 1, not only the clock). */
    dlock_client *c = it_local_client();
    uint64_t last = f3;
    for (int i = 0; i < 200; i++) {
        dlock_lock *l = it_local_take(c, "fences", 0);
        assert_true(dlock_fence(l) > last);
        last = dlock_fence(l);
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "fences", &h), DLOCK_OK);
    assert_int_equal(h.held, 0);
    assert_true(h.fence == last);
    char path[700];
    snprintf(path, sizeof path, "%s/fences.lock", it_local_dir);
    assert_int_equal(unlink(path), 0);
    uint64_t f4 = fence_from_new_process("fences", 0);
    printf("INFO fences %llu %llu %llu, %llu after removing the file\n", (unsigned long long)f1,
           (unsigned long long)f2, (unsigned long long)f3, (unsigned long long)f4);
    assert_true(f4 > last);
    dlock_client_free(c);
}

/* ---- shared locks and semaphores ---------------------------------------------- */

static dlock_lock *take_shared(dlock_client *c, const char *name)
{
    dlock_opts o = {0};
    o.shared = 1;
    dlock_lock *l = NULL;
    int rc = dlock_acquire(c, name, &o, &l);
    if (rc != DLOCK_OK)
        fail_msg("shared acquire %s: %s (%s)", name, dlock_errname(rc), dlock_errmsg());
    return l;
}

static void shared_holders_overlap_and_exclude(void **state)
{
    (void)state;
    dlock_client *c = it_local_client();
    /* Another process holds it shared; this one joins. */
    int p[2];
    it_local_pipe_arg a = {"rw", -1, 0, 60000, 1, NULL};
    uint64_t f;
    pid_t other = it_local_child_started(holder_until_killed, &a, p, &f, sizeof f);
    dlock_lock *mine = take_shared(c, "rw");
    it_local_expect_busy(c, "rw", 0);
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "rw", &h), DLOCK_OK);
    assert_int_equal(h.held, 1);
    assert_int_equal(h.shared, 2);
    assert_string_equal(h.token, "");
    dlock_holder list[4];
    it_expect_shared(c, "rw", list, 4, 2);
    assert_true(strcmp(list[0].token, dlock_token(mine)) == 0 ||
                strcmp(list[1].token, dlock_token(mine)) == 0);
    /* One shared holder left (the other process dies): an exclusive try still fails. */
    kill(other, SIGKILL);
    assert_int_equal(it_local_wait_exit(other), 128 + SIGKILL);
    it_local_expect_busy(c, "rw", 0);
    assert_int_equal(dlock_release(mine), DLOCK_OK);
    dlock_lock *x = it_local_take(c, "rw", 0);
    it_local_expect_busy(c, "rw", 1);
    assert_int_equal(dlock_inspect(c, "rw", &h), DLOCK_OK);
    assert_int_equal(h.shared, 0);
    assert_string_equal(h.token, dlock_token(x));
    assert_int_equal(dlock_release(x), DLOCK_OK);
    it_local_close_pipe(p);
    dlock_client_free(c);
}

#define SEM_K       3
#define SEM_WORKERS 6
#define SEM_ROUNDS  25

static void semaphore_peak_is_k(void **state)
{
    (void)state;
    it_rounds r = {.servers = it_local_url, .name = "sem", .permits = SEM_K, .rounds = SEM_ROUNDS};
    it_board *board = it_board_procs(SEM_WORKERS, &r, 2);
    printf("INFO semaphore of %d permits, %d processes: peak %d holders\n", SEM_K, SEM_WORKERS,
           atomic_load(&board->peak));
    assert_int_equal(atomic_load(&board->peak), SEM_K);
    it_board_free(board);

    /* K permits counted with every shared holder; an exclusive holder excludes all;
     * one permit is an exclusive lock. */
    dlock_client *c = it_local_client();
    dlock_opts o = {0};
    dlock_lock *a, *b, *d = (dlock_lock *)&d;
    dlock_lock *sh = take_shared(c, "sem2");
    assert_int_equal(dlock_sem_acquire(c, "sem2", 2, &o, &a), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(c, "sem2", 2, &o, &d), DLOCK_ERR_BUSY);
    assert_null(d);
    printf("INFO full semaphore: %s\n", dlock_errmsg());
    assert_int_equal(dlock_release(sh), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(c, "sem2", 2, &o, &b), DLOCK_OK);
    it_local_expect_busy(c, "sem2", 0);
    assert_int_equal(dlock_release(a), DLOCK_OK);
    assert_int_equal(dlock_release(b), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(c, "sem2", 1, &o, &a), DLOCK_OK);
    it_local_expect_busy(c, "sem2", 0);
    it_local_expect_busy(c, "sem2", 1);
    assert_int_equal(dlock_release(a), DLOCK_OK);
    dlock_lock *x = it_local_take(c, "sem2", 0);
    assert_int_equal(dlock_sem_acquire(c, "sem2", 1, &o, &d), DLOCK_ERR_BUSY);
    assert_int_equal(dlock_sem_acquire(c, "sem2", 5, &o, &d), DLOCK_ERR_BUSY);
    assert_int_equal(dlock_release(x), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(c, "sem2", 0, &o, &d), DLOCK_ERR_INVALID);
    o.shared = 1;
    assert_int_equal(dlock_sem_acquire(c, "sem2", 2, &o, &d), DLOCK_ERR_INVALID);
    dlock_client_free(c);
}

/* ---- waiting ------------------------------------------------------------------ */

/* This thread's voluntary context switches: a waiter that polls makes one per sleep. */
static long voluntary_switches(void)
{
    FILE *f = fopen("/proc/thread-self/status", "r");
    char line[256];
    long v = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return v;
}

/* Hold for hold_ms, release, and report when the release returned. */
static int hold_then_release(void *arg)
{
    it_local_pipe_arg *a = arg;
    dlock_lock *l = it_local_child_take(a);
    if (l == NULL)
        return 60;
    int64_t t = now_us();
    it_local_put(a->fd, &t, sizeof t);
    dh_sleep_ms(a->ttl_ms);
    if (dlock_release(l) != DLOCK_OK)
        return 61;
    t = now_us();
    it_local_put(a->fd, &t, sizeof t);
    return 0;
}

/* A release wakes the waiter, which did not poll meanwhile: a 400 ms wait costs a
 * handful of context switches, where polling every few ms would cost a hundred. The
 * wake is the holder's close, which the kernel reports before it drops the close's
 * locks: a try that meets them still held is repeated after 1, 2, 4 and 8 ms
 * (local_acquire.c), so a holder descheduled in between (a loaded machine, a sanitizer
 * build) delays the grant by up to those 15 ms and its own wait for a CPU. The bound
 * tells that from the next chance a waiter that missed its wake-up has, the safety
 * retry a second later. (A CI run under ASan, two tests at once on two CPUs, once
 * took 25 ms.) */
static void release_wakes_waiter(void **state)
{
    (void)state;
    dlock_client *c = it_local_client();
    int p[2];
    it_local_pipe_arg a = {"wake", -1, 0, 400, 0, NULL};
    int64_t t;
    pid_t holder = it_local_child_started(hold_then_release, &a, p, &t, sizeof t);
    long before = voluntary_switches();
    dlock_lock *l = it_local_take(c, "wake", 10000 * dh_slack());
    int64_t got = now_us();
    long switches = voluntary_switches() - before;
    int64_t released;
    assert_true(it_local_get(p[0], &released, sizeof released, 5000 * dh_slack()));
    assert_int_equal(it_local_wait_exit(holder), 0);
    printf("FIG local_wake_ms %.2f ms (release to the waiter's grant)\n",
           (got - released) / 1000.0);
    printf("FIG local_wait_switches %ld (voluntary context switches in a 400 ms wait)\n", switches);
    assert_true(got - released < 200000 * dh_slack());
    assert_true(switches >= 0 && switches < 20);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    it_local_close_pipe(p);
    dlock_client_free(c);
}

typedef struct canceler {
    int efd;
    int64_t after_ms;
} canceler;

static void *cancel_later(void *arg)
{
    canceler *k = arg;
    dh_sleep_ms(k->after_ms);
    uint64_t one = 1;
    if (write(k->efd, &one, sizeof one) != sizeof one)
        abort();
    return NULL;
}

static void cancel_fd_ends_wait(void **state)
{
    (void)state;
    dlock_client *c = it_local_client();
    dlock_lock *held = it_local_take(c, "cancel", 0);
    canceler k = {eventfd(0, EFD_CLOEXEC), 100};
    assert_true(k.efd > 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, cancel_later, &k), 0);
    dlock_opts o = {0};
    o.wait_ms = -1;
    o.cancel_fd = k.efd;
    dlock_lock *l = (dlock_lock *)&l;
    int64_t t0 = dh_now_ms();
    assert_int_equal(dlock_acquire(c, "cancel", &o, &l), DLOCK_ERR_CANCELED);
    int64_t took = dh_now_ms() - t0;
    pthread_join(th, NULL);
    assert_null(l);
    assert_non_null(strstr(dlock_errmsg(), "cancel_fd"));
    assert_true(took >= 90 && took < 100 + 200 * dh_slack());
    /* A wait with a deadline ends with BUSY, saying who holds the name. */
    o.cancel_fd = 0;
    o.wait_ms = 150;
    t0 = dh_now_ms();
    assert_int_equal(dlock_acquire(c, "cancel", &o, &l), DLOCK_ERR_BUSY);
    took = dh_now_ms() - t0;
    assert_true(took >= 145 && took < 150 + 200 * dh_slack());
    assert_non_null(strstr(dlock_errmsg(), "held by"));
    assert_int_equal(dlock_release(held), DLOCK_OK);
    close(k.efd);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(processes_exclude_each_other),
        cmocka_unit_test(threads_exclude_each_other),
        cmocka_unit_test(killed_holder_frees_at_once),
        cmocka_unit_test(fences_increase_across_processes),
        cmocka_unit_test(shared_holders_overlap_and_exclude),
        cmocka_unit_test(semaphore_peak_is_k),
        cmocka_unit_test(release_wakes_waiter),
        cmocka_unit_test(cancel_fd_ends_wait),
    };
    return cmocka_run_group_tests(tests, it_local_setup, it_local_teardown);
}
