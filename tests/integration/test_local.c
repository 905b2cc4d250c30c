/*
 * test_local.c: local locks (a client made with file:///DIR) between real processes:
 * each worker is a forked child with a client of its own, and no server runs at all.
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

#include <dirent.h>
#include <errno.h>
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------------- */

static dlock_client *client(void)
{
    dlock_client *c = NULL;
    int rc = dlock_client_new(it_local_url, NULL, &c);
    if (rc != DLOCK_OK)
        fail_msg("dlock_client_new(%s): %s (%s)", it_local_url, dlock_errname(rc), dlock_errmsg());
    return c;
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static dlock_lock *take(dlock_client *c, const char *name, int64_t wait_ms)
{
    dlock_opts o = {0};
    o.wait_ms = wait_ms;
    dlock_lock *l = NULL;
    int rc = dlock_acquire(c, name, &o, &l);
    if (rc != DLOCK_OK)
        fail_msg("acquire %s: %s (%s)", name, dlock_errname(rc), dlock_errmsg());
    return l;
}

/* A try (no wait) that must be refused. */
static void expect_busy(dlock_client *c, const char *name, int shared)
{
    dlock_opts o = {0};
    o.shared = shared;
    dlock_lock *l = (dlock_lock *)&l;
    int rc = dlock_acquire(c, name, &o, &l);
    if (rc != DLOCK_ERR_BUSY)
        fail_msg("acquire %s (shared %d): %s, want DLOCK_ERR_BUSY", name, shared,
                 dlock_errname(rc));
    assert_null(l);
}

/* Run fn(arg) in a forked child, which exits with its return value. */
static pid_t child(int (*fn)(void *), void *arg)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(fn(arg));
    return pid;
}

static int wait_exit(pid_t pid)
{
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Write and read whole small messages on pipes between a child and the test. */
static void put(int fd, const void *buf, size_t len)
{
    if (write(fd, buf, len) != (ssize_t)len)
        _exit(90);
}

static bool get(int fd, void *buf, size_t len, int64_t timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, (int)timeout_ms) != 1)
        return false;
    return read(fd, buf, len) == (ssize_t)len;
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
    dlock_client *c = client();
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

typedef struct pipe_arg {
    const char *name;
    int fd;          /* the write end the child reports on */
    int64_t wait_ms; /* waiter */
    int64_t ttl_ms;
    int shared;
    const char *label;
} pipe_arg;

/* A forked child's client, left to the child's exit (which lets go of its locks as a
 * killed process's would); kept here, so that valgrind sees it reachable, not lost. */
static dlock_client *child_client;

/* In a forked child: a client of its own, and the lock that a describes, or NULL. */
static dlock_lock *child_take(const pipe_arg *a)
{
    dlock_client *c;
    dlock_lock *l;
    dlock_opts o = {0};
    o.ttl_ms = a->ttl_ms;
    o.wait_ms = a->wait_ms;
    o.shared = a->shared;
    o.label = a->label;
    if (dlock_client_new(it_local_url, NULL, &c) != DLOCK_OK)
        return NULL;
    child_client = c;
    return dlock_acquire(c, a->name, &o, &l) == DLOCK_OK ? l : NULL;
}

/* Take the name, say so (with the fence), then sleep until killed. */
static int holder_until_killed(void *arg)
{
    pipe_arg *a = arg;
    dlock_lock *l = child_take(a);
    if (l == NULL)
        return 20;
    uint64_t f = dlock_fence(l);
    put(a->fd, &f, sizeof f);
    for (;;)
        pause();
}

/* Wait for the name; report when it was granted (CLOCK_MONOTONIC us) and its fence. */
static int waiter(void *arg)
{
    pipe_arg *a = arg;
    dlock_lock *l = child_take(a);
    int64_t msg[2] = {now_us(), (int64_t)dlock_fence(l)};
    if (l == NULL)
        return 31;
    put(a->fd, msg, sizeof msg);
    return dlock_release(l) == DLOCK_OK ? 0 : 32;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Run fn(a) in a child that reports on a new pipe p (a->fd is its write end), and wait
 * for its first report, len bytes into buf. */
static pid_t child_started(int (*fn)(void *), pipe_arg *a, int p[2], void *buf, size_t len)
{
    assert_int_equal(pipe(p), 0);
    a->fd = p[1];
    pid_t pid = child(fn, a);
    assert_true(get(p[0], buf, len, 5000 * dh_slack()));
    return pid;
}

static void close_pipe(int p[2])
{
    close(p[0]);
    close(p[1]);
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
        pipe_arg ha = {"killed", -1, 0, 60000, 0, NULL};
        uint64_t hf = 0;
        pid_t holder = child_started(holder_until_killed, &ha, hp, &hf, sizeof hf);
        assert_int_equal(pipe(wp), 0);
        pipe_arg wa = {"killed", wp[1], 20000, 0, 0, NULL};
        pid_t w = child(waiter, &wa);
        /* The waiter is waiting by now (else it tries after the kill, which the figure
         * then includes). */
        dh_sleep_ms(100 * dh_slack());
        int64_t t0 = now_us();
        kill(holder, SIGKILL);
        int64_t msg[2];
        assert_true(get(wp[0], msg, sizeof msg, 10000 * dh_slack()));
        took[r] = msg[0] - t0;
        assert_true((uint64_t)msg[1] > hf);
        assert_int_equal(wait_exit(holder), 128 + SIGKILL);
        assert_int_equal(wait_exit(w), 0);
        close_pipe(hp);
        close_pipe(wp);
    }
    qsort(took, ROUNDS, sizeof *took, cmp_i64);
    printf("FIG local_takeover_ms %.2f ms (median of %d; max %.2f)\n", took[ROUNDS / 2] / 1000.0,
           ROUNDS, took[ROUNDS - 1] / 1000.0);
    assert_true(took[ROUNDS - 1] < 100000 * dh_slack());
}

/* ---- fences ------------------------------------------------------------------- */

/* Run fn(a) in a child that reports len bytes into buf through a->fd, then exits 0. */
static void child_report(int (*fn)(void *), pipe_arg *a, void *buf, size_t len)
{
    int p[2];
    pid_t pid = child_started(fn, a, p, buf, len);
    assert_int_equal(wait_exit(pid), 0);
    close_pipe(p);
}

static int take_and_report_fence(void *arg)
{
    pipe_arg *a = arg;
    dlock_lock *l = child_take(a);
    if (l == NULL)
        return 40;
    uint64_t f = dlock_fence(l);
    put(a->fd, &f, sizeof f);
    return 0; /* exits holding it: the kernel lets go */
}

static uint64_t fence_from_new_process(const char *name, int shared)
{
    pipe_arg a = {name, -1, 0, 0, shared, NULL};
    uint64_t f = 0;
    child_report(take_and_report_fence, &a, &f, sizeof f);
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
    dlock_client *c = client();
    uint64_t last = f3;
    for (int i = 0; i < 200; i++) {
        dlock_lock *l = take(c, "fences", 0);
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
    dlock_client *c = client();
    /* Another process holds it shared; this one joins. */
    int p[2];
    pipe_arg a = {"rw", -1, 0, 60000, 1, NULL};
    uint64_t f;
    pid_t other = child_started(holder_until_killed, &a, p, &f, sizeof f);
    dlock_lock *mine = take_shared(c, "rw");
    expect_busy(c, "rw", 0);
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
    assert_int_equal(wait_exit(other), 128 + SIGKILL);
    expect_busy(c, "rw", 0);
    assert_int_equal(dlock_release(mine), DLOCK_OK);
    dlock_lock *x = take(c, "rw", 0);
    expect_busy(c, "rw", 1);
    assert_int_equal(dlock_inspect(c, "rw", &h), DLOCK_OK);
    assert_int_equal(h.shared, 0);
    assert_string_equal(h.token, dlock_token(x));
    assert_int_equal(dlock_release(x), DLOCK_OK);
    close_pipe(p);
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
    dlock_client *c = client();
    dlock_opts o = {0};
    dlock_lock *a, *b, *d = (dlock_lock *)&d;
    dlock_lock *sh = take_shared(c, "sem2");
    assert_int_equal(dlock_sem_acquire(c, "sem2", 2, &o, &a), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(c, "sem2", 2, &o, &d), DLOCK_ERR_BUSY);
    assert_null(d);
    printf("INFO full semaphore: %s\n", dlock_errmsg());
    assert_int_equal(dlock_release(sh), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(c, "sem2", 2, &o, &b), DLOCK_OK);
    expect_busy(c, "sem2", 0);
    assert_int_equal(dlock_release(a), DLOCK_OK);
    assert_int_equal(dlock_release(b), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(c, "sem2", 1, &o, &a), DLOCK_OK);
    expect_busy(c, "sem2", 0);
    expect_busy(c, "sem2", 1);
    assert_int_equal(dlock_release(a), DLOCK_OK);
    dlock_lock *x = take(c, "sem2", 0);
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
    pipe_arg *a = arg;
    dlock_lock *l = child_take(a);
    if (l == NULL)
        return 60;
    int64_t t = now_us();
    put(a->fd, &t, sizeof t);
    dh_sleep_ms(a->ttl_ms);
    if (dlock_release(l) != DLOCK_OK)
        return 61;
    t = now_us();
    put(a->fd, &t, sizeof t);
    return 0;
}

/* A release wakes the waiter (within a few ms), which did not poll meanwhile: a
 * 400 ms wait costs a handful of context switches, where polling every few ms would
 * cost a hundred. */
static void release_wakes_waiter(void **state)
{
    (void)state;
    dlock_client *c = client();
    int p[2];
    pipe_arg a = {"wake", -1, 0, 400, 0, NULL};
    int64_t t;
    pid_t holder = child_started(hold_then_release, &a, p, &t, sizeof t);
    long before = voluntary_switches();
    dlock_lock *l = take(c, "wake", 10000 * dh_slack());
    int64_t got = now_us();
    long switches = voluntary_switches() - before;
    int64_t released;
    assert_true(get(p[0], &released, sizeof released, 5000 * dh_slack()));
    assert_int_equal(wait_exit(holder), 0);
    printf("FIG local_wake_ms %.2f ms (release to the waiter's grant)\n",
           (got - released) / 1000.0);
    printf("FIG local_wait_switches %ld (voluntary context switches in a 400 ms wait)\n", switches);
    assert_true(got - released < 20000 * dh_slack());
    assert_true(switches >= 0 && switches < 20);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    close_pipe(p);
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
    dlock_client *c = client();
    dlock_lock *held = take(c, "cancel", 0);
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

/* ---- detach, adopt, status ---------------------------------------------------- */

typedef struct detached {
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t fence;
} detached;

static int acquire_and_detach(void *arg)
{
    pipe_arg *a = arg;
    dlock_lock *l = child_take(a);
    if (l == NULL)
        return 70;
    detached d;
    memset(&d, 0, sizeof d); /* the padding goes down the pipe too */
    memcpy(d.token, dlock_token(l), sizeof d.token);
    d.fence = dlock_fence(l);
    if (dlock_lock_detach(l) != DLOCK_OK)
        return 71;
    put(a->fd, &d, sizeof d);
    return 0;
}

static detached detach_in_child(const char *name, int64_t ttl_ms)
{
    pipe_arg a = {name, -1, 0, ttl_ms, 0, "nightly backup"};
    detached d;
    child_report(acquire_and_detach, &a, &d, sizeof d);
    return d;
}

/* `dlock acquire` then `dlock release` in other processes: the lock outlives the
 * process that took it, for its lease, and a release by token ends it. */
static void detach_adopt_release_across_processes(void **state)
{
    (void)state;
    dlock_client *c = client();
    detached d = detach_in_child("detached", 60000);
    expect_busy(c, "detached", 0);
    expect_busy(c, "detached", 1);
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "detached", &h), DLOCK_OK);
    assert_int_equal(h.held, 1);
    assert_string_equal(h.token, d.token);
    assert_true(h.remaining_ms > 50000 && h.remaining_ms <= 60000);
    assert_int_equal(h.fence, d.fence);
    assert_non_null(strstr(h.description, "nightly backup"));

    dlock_lock *x;
    assert_int_equal(dlock_lock_adopt(c, "detached", d.token, &x), DLOCK_OK);
    assert_int_equal(dlock_remaining_ms(x), 0); /* unknown until asked */
    assert_int_equal(dlock_check(x), DLOCK_OK);
    assert_true(dlock_remaining_ms(x) > 50000);
    assert_int_equal(dlock_extend(x, 5000), DLOCK_OK);
    assert_true(dlock_remaining_ms(x) <= 5000);
    assert_int_equal(dlock_inspect(c, "detached", &h), DLOCK_OK);
    assert_true(h.remaining_ms > 4000 && h.remaining_ms <= 5000);
    assert_int_equal(dlock_lock_detach(x), DLOCK_OK); /* still held: detach frees the handle */
    expect_busy(c, "detached", 0);

    /* A wrong token touches nothing. */
    char bad[DLOCK_TOKEN_LEN + 1];
    memcpy(bad, d.token, sizeof bad);
    bad[0] = bad[0] == '0' ? '1' : '0';
    assert_int_equal(dlock_lock_adopt(c, "detached", bad, &x), DLOCK_OK);
    assert_int_equal(dlock_release(x), DLOCK_ERR_LOST);
    expect_busy(c, "detached", 0);

    assert_int_equal(dlock_lock_adopt(c, "detached", d.token, &x), DLOCK_OK);
    assert_int_equal(dlock_release(x), DLOCK_OK);
    dlock_lock *l = take(c, "detached", 0);
    assert_true(dlock_fence(l) > d.fence);
    assert_int_equal(dlock_lock_adopt(c, "detached", d.token, &x), DLOCK_OK);
    assert_int_equal(dlock_release(x), DLOCK_ERR_LOST); /* released already */

    /* A live process's lock cannot be released from elsewhere, only by it. */
    assert_int_equal(dlock_lock_adopt(c, "detached", dlock_token(l), &x), DLOCK_OK);
    assert_int_equal(dlock_check(x), DLOCK_OK);
    assert_int_equal(dlock_release(x), DLOCK_ERR_INVALID);
    printf("INFO release by token of a live holder: %s\n", dlock_errmsg());
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

/* A detached lock whose lease runs out frees the name then: a waiter gets it at the
 * lease's end (a timer, since nothing is closed then). */
static void detached_lease_runs_out(void **state)
{
    (void)state;
    dlock_client *c = client();
    int64_t ttl = 300;
    int64_t t0 = dh_now_ms();
    detached d = detach_in_child("lease", ttl);
    dlock_lock *l = take(c, "lease", 5000 * dh_slack());
    int64_t took = dh_now_ms() - t0;
    printf("INFO a detached %lld ms lease let a waiter in after %lld ms\n", (long long)ttl,
           (long long)took);
    assert_true(took >= ttl - 20);
    assert_true(took < ttl + 200 * dh_slack());
    assert_true(dlock_fence(l) > d.fence);
    dlock_lock *x;
    assert_int_equal(dlock_lock_adopt(c, "lease", d.token, &x), DLOCK_OK);
    assert_int_equal(dlock_extend(x, 1000), DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(x), DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

static void status_and_lease_meaning(void **state)
{
    (void)state;
    dlock_client *c = client();
    char path[700];
    snprintf(path, sizeof path, "%s/never-held.lock", it_local_dir);
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "never-held", &h), DLOCK_OK);
    assert_int_equal(h.held, 0);
    assert_int_equal(h.fence, 0);
    assert_int_equal(access(path, F_OK), -1); /* looking creates nothing */

    dlock_opts o = {0};
    o.ttl_ms = 50;
    o.label = "status label";
    o.auto_renew = 1; /* nothing to renew locally: accepted */
    dlock_lock *l;
    assert_int_equal(dlock_acquire(c, "status", &o, &l), DLOCK_OK);
    assert_int_equal(dlock_inspect(c, "status", &h), DLOCK_OK);
    assert_int_equal(h.held, 1);
    assert_string_equal(h.token, dlock_token(l));
    assert_int_equal(h.fence, dlock_fence(l));
    char pid[32];
    snprintf(pid, sizeof pid, ":%d status label", (int)getpid());
    assert_non_null(strstr(h.description, pid));
    assert_int_equal(h.remaining_ms, 50);
    /* A held local lock does not expire: long past its 50 ms lease it is still held,
     * and its lease is what remaining_ms reports. */
    dh_sleep_ms(150);
    assert_int_equal(dlock_remaining_ms(l), 50);
    expect_busy(c, "status", 0);
    assert_int_equal(dlock_check(l), DLOCK_OK);
    assert_int_equal(dlock_extend(l, 20000), DLOCK_OK);
    assert_int_equal(dlock_remaining_ms(l), 20000);
    assert_int_equal(dlock_inspect(c, "status", &h), DLOCK_OK);
    assert_int_equal(h.remaining_ms, 20000);
    assert_int_equal(dlock_extend(l, 0), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_client_nservers(c), 1);

    /* The file removed under the holder: check says lost, and so does the lost fd. */
    int lfd = dlock_lost_fd(l);
    assert_true(lfd >= 0);
    snprintf(path, sizeof path, "%s/status.lock", it_local_dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(dlock_check(l), DLOCK_ERR_LOST);
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 0), 1);
    assert_true(dlock_remaining_ms(l) <= 0);
    assert_int_equal(dlock_release(l), DLOCK_ERR_LOST);
    dlock_client_free(c);
}

/* dlock_client_free releases what is still attached; a forked child gets CLOSED and
 * cannot let go of its parent's lock. */
static void client_free_and_fork(void **state)
{
    (void)state;
    dlock_client *c = client(), *other = client();
    take(c, "free-a", 0);
    dlock_lock *b = take(c, "free-b", 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dlock_lock *l;
        int bad = dlock_acquire(c, "free-c", NULL, &l) != DLOCK_ERR_CLOSED;
        bad |= (dlock_release(b) != DLOCK_ERR_CLOSED) << 1;
        dlock_client_free(c);
        _exit(bad);
    }
    assert_int_equal(wait_exit(pid), 0);
    expect_busy(other, "free-a", 0);
    expect_busy(other, "free-b", 0);
    dlock_client_free(c);
    dlock_release(take(other, "free-a", 0));
    dlock_release(take(other, "free-b", 0));
    dlock_client_free(other);
}

/* ---- bad input ---------------------------------------------------------------- */

static void expect_client_refused(const char *servers, const char *needle)
{
    dlock_client *c = (dlock_client *)&c;
    int rc = dlock_client_new(servers, NULL, &c);
    if (rc != DLOCK_ERR_INVALID || strstr(dlock_errmsg(), needle) == NULL)
        fail_msg("%s: %s (%s), want DLOCK_ERR_INVALID with \"%s\"", servers, dlock_errname(rc),
                 dlock_errmsg(), needle);
    assert_null(c);
    printf("INFO %s: %s\n", servers, dlock_errmsg());
}

/* As nobody, in a forked child: the directory (0555, root's) must refuse the client,
 * and really be unwritable for that user (open(O_CREAT) fails), so that the refusal is
 * the library's reading of a real permission, which root would bypass. */
static int unwritable_as_nobody(void *arg)
{
    const char *d = arg;
    if (geteuid() == 0 && setuid(65534) != 0)
        return 80;
    char probe[700], u[700];
    snprintf(probe, sizeof probe, "%s/probe", d);
    int fd = open(probe, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EACCES)
        return 81; /* the setup does not deny writes: the test would prove nothing */
    snprintf(u, sizeof u, "file://%s", d);
    dlock_client *c;
    if (dlock_client_new(u, NULL, &c) != DLOCK_ERR_INVALID)
        return 82;
    if (strstr(dlock_errmsg(), d) == NULL || strstr(dlock_errmsg(), "not writable") == NULL)
        return 83;
    return 0;
}

static void bad_urls_refused(void **state)
{
    (void)state;
    char u[700], missing[600];
    snprintf(missing, sizeof missing, "%s/no-such-dir", it_local_dir);
    snprintf(u, sizeof u, "file://%s", missing);
    expect_client_refused(u, missing);
    assert_int_equal(access(missing, F_OK), -1); /* not created */
    expect_client_refused("file://", "no directory");
    expect_client_refused("file://relative/dir", "relative path");
    expect_client_refused("file://host/var/lock", "host part");
    expect_client_refused("file:/var/lock", "file:///absolute/path");
    snprintf(u, sizeof u, "file://%s,redis://127.0.0.1:6379", it_local_dir);
    expect_client_refused(u, "only server");
    snprintf(u, sizeof u, "redis://127.0.0.1:6379, file://%s", it_local_dir);
    expect_client_refused(u, "only server");
    char plain[600];
    snprintf(plain, sizeof plain, "%s/plain-file", it_local_dir);
    int fd = open(plain, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    close(fd);
    snprintf(u, sizeof u, "file://%s", plain);
    expect_client_refused(u, "Not a directory");
    expect_client_refused("file:///tmp%00x", "percent-escape");

    /* In /tmp, which every user can search (the test directory may not be). */
    char ro[64] = "/tmp/dlock-test-ro.XXXXXX";
    assert_non_null(mkdtemp(ro));
    assert_int_equal(chmod(ro, 0555), 0);
    pid_t pid = child(unwritable_as_nobody, ro);
    int st = wait_exit(pid);
    rmdir(ro);
    assert_int_equal(st, 0);

    /* A percent-encoded path is the directory it decodes to. */
    char spaced[600];
    snprintf(spaced, sizeof spaced, "%s/with space", it_local_dir);
    assert_int_equal(mkdir(spaced, 0755), 0);
    snprintf(u, sizeof u, "file://%s/with%%20space", it_local_dir);
    dlock_client *c;
    assert_int_equal(dlock_client_new(u, NULL, &c), DLOCK_OK);
    dlock_release(take(c, "x", 0));
    char path[700];
    snprintf(path, sizeof path, "%s/x.lock", spaced);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(dlock_fenced_set(c, "k", 1, "v", 1), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errmsg(), "needs a Redis server"));
    dlock_client_free(c);
}

/* Entries of d, or -1. */
static int count_entries(const char *d)
{
    DIR *dp = opendir(d);
    if (dp == NULL)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dp)) != NULL)
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(dp);
    return n;
}

/* Names are any bytes but NUL: none may reach outside the directory, and no two may
 * share a file (each is held at the same time as all the others). */
static void names_stay_inside(void **state)
{
    (void)state;
    char nd[600];
    snprintf(nd, sizeof nd, "%s/names", it_local_dir);
    assert_int_equal(mkdir(nd, 0755), 0);
    char u[700];
    snprintf(u, sizeof u, "file://%s", nd);
    dlock_client *c;
    assert_int_equal(dlock_client_new(u, NULL, &c), DLOCK_OK);
    static char long_a[DLOCK_NAME_MAX + 1], long_b[DLOCK_NAME_MAX + 1], slashes[DLOCK_NAME_MAX + 1];
    memset(long_a, 'a', DLOCK_NAME_MAX);
    memcpy(long_b, long_a, sizeof long_b);
    long_b[DLOCK_NAME_MAX - 1] = 'b'; /* differs in its last byte only */
    memset(slashes, '/', DLOCK_NAME_MAX);
    const char *names[] = {"..",     ".",    "../escape", "a/b",         "/etc/passwd", "%2E%2E",
                           "%2F",    "x~y",  "x.lock",    "x",           "\xff\x01\n",  " ",
                           long_a,   long_b, slashes,     "a%2Fb",       "A",           "a",
                           "a.lock", "-",    "_",         "\xe2\x82\xac"};
    enum { N = sizeof names / sizeof names[0] };
    int parent_before = count_entries(it_local_dir);
    dlock_lock *held[N];
    for (int i = 0; i < N; i++)
        held[i] = take(c, names[i], 0);
    assert_int_equal(count_entries(nd), N);
    assert_int_equal(count_entries(it_local_dir), parent_before);
    DIR *dp = opendir(nd);
    struct dirent *de;
    while ((de = readdir(dp)) != NULL) {
        assert_true(strlen(de->d_name) < 255);
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            assert_int_equal(de->d_type, DT_REG);
    }
    closedir(dp);
    for (int i = 0; i < N; i++) {
        dlock_holder h;
        assert_int_equal(dlock_inspect(c, names[i], &h), DLOCK_OK);
        assert_string_equal(h.token, dlock_token(held[i]));
        assert_int_equal(dlock_release(held[i]), DLOCK_OK);
    }
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
        cmocka_unit_test(detach_adopt_release_across_processes),
        cmocka_unit_test(detached_lease_runs_out),
        cmocka_unit_test(status_and_lease_meaning),
        cmocka_unit_test(client_free_and_fork),
        cmocka_unit_test(bad_urls_refused),
        cmocka_unit_test(names_stay_inside),
    };
    return cmocka_run_group_tests(tests, it_local_setup, it_local_teardown);
}
