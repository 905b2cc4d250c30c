/*
 * test_wait.c: blocking acquisition without polling.
 *
 * Asserted exactly: exclusive sections, arrival order in fair mode, BUSY at a
 * deadline and never before it, a crashed holder's lock never taken before its lease
 * ends, the number of commands waiters cost. Asserted with DLOCK_TEST_SLACK: the
 * bounds the issue names (a wake-up well before the holder's lease or the refresh
 * period, whichever thread reads it, a deadline kept to within a few ms, takeover
 * within the lease plus a margin). Other timings are FIG lines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "internal.h" /* DLOCK_QUEUE_REFRESH_MS, DLOCK_QUEUE_TTL_MS */
#include "itest.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int wait_acquire(dlock_client *c, const char *name, int64_t ttl_ms, int64_t wait_ms,
                        int fair, dlock_lock **l)
{
    dlock_opts o = {0};
    o.ttl_ms = ttl_ms;
    o.wait_ms = wait_ms;
    o.fair = fair;
    return dlock_acquire(c, name, &o, l);
}

/* ---- exclusive sections: 8 threads in 2 processes ------------------------------ */

#define SECTIONS 50

typedef struct record {
    int64_t enter_us, exit_us;
    int32_t who, pad;
} record;

/* A waiting thread's work: on client c, waits for name with a 5 s lease, each up to
 * wait_ms (fair: in arrival order); what its last wait returned and when. A section
 * worker also logs its sections to fd as id, and counts its failures and its longest
 * wait. */
typedef struct waiter_arg {
    dlock_client *c;
    const char *name;
    int fair, rc;
    int64_t got_us;
    int64_t wait_ms;
    int id, fd, failures;
    int64_t max_wait_us;
} waiter_arg;

static void *section_worker(void *p)
{
    waiter_arg *a = p;
    for (int i = 0; i < SECTIONS; i++) {
        dlock_lock *l;
        int64_t t0 = dh_now_us();
        int rc = wait_acquire(a->c, a->name, 5000, a->wait_ms, a->fair, &l);
        if (rc != DLOCK_OK) {
            a->failures++;
            continue;
        }
        record r = {.enter_us = dh_now_us(), .who = a->id};
        if (r.enter_us - t0 > a->max_wait_us)
            a->max_wait_us = r.enter_us - t0;
        usleep(200);
        r.exit_us = dh_now_us();
        if (write(a->fd, &r, sizeof r) != (ssize_t)sizeof r)
            a->failures++;
        if (dlock_release(l) != DLOCK_OK)
            a->failures++;
    }
    return NULL;
}

/* Four threads sharing one client (one wake-up path), in this process. */
static int run_four(int first_id, const char *path, int64_t *max_wait_us)
{
    dlock_client *c = it_nodes_client();
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    waiter_arg a[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (waiter_arg){
            .c = c, .name = "sections", .wait_ms = 30000, .id = first_id + i, .fd = fd};
        pthread_create(&t[i], NULL, section_worker, &a[i]);
    }
    int failures = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        failures += a[i].failures;
        if (a[i].max_wait_us > *max_wait_us)
            *max_wait_us = a[i].max_wait_us;
    }
    close(fd);
    dlock_client_free(c);
    return failures;
}

static int by_enter(const void *x, const void *y)
{
    const record *a = x, *b = y;
    return (a->enter_us > b->enter_us) - (a->enter_us < b->enter_us);
}

/* The n records of the log at path, in the order their sections were entered. */
static void read_records(const char *path, record *r, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_int_equal(read(fd, r, n * sizeof *r), (ssize_t)(n * sizeof *r));
    close(fd);
    qsort(r, n, sizeof *r, by_enter);
}

static void eight_threads_two_processes(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/sections.log", it_node[0].dir);
    close(open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600));
    long long before = it_script_calls(&it_node[0]);
    int64_t t0 = dh_now_us();
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        int64_t w = 0;
        _exit(run_four(4, path, &w) == 0 ? 0 : 1);
    }
    int64_t max_wait = 0;
    int failures = run_four(0, path, &max_wait);
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    int64_t took = dh_now_us() - t0;
    long long cmds = it_script_calls(&it_node[0]) - before;
    assert_int_equal(failures, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    record r[8 * SECTIONS];
    read_records(path, r, 8 * SECTIONS);
    int per[8] = {0}, overlaps = 0, switches = 0;
    for (int i = 0; i < 8 * SECTIONS; i++) {
        per[r[i].who]++;
        if (i > 0) {
            overlaps += r[i].enter_us < r[i - 1].exit_us;
            switches += r[i].who != r[i - 1].who;
        }
    }
    for (int i = 0; i < 8; i++)
        assert_int_equal(per[i], SECTIONS);
    assert_int_equal(overlaps, 0);
    printf("FIG wait_sections_per_s %.0f sections/s\n", 8 * SECTIONS * 1e6 / (double)took);
    printf("FIG wait_switches %d of %d\n", switches, 8 * SECTIONS - 1);
    printf("FIG wait_max_wait_ms %.1f ms\n", (double)max_wait / 1000);
    printf("FIG wait_cmds_per_section %.2f commands\n", (double)cmds / (8 * SECTIONS));
}

/* ---- a holder that crashes ------------------------------------------------------ */

static void crashed_holder_frees_after_lease(void **state)
{
    (void)state;
    const int64_t ttl = 1000;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        dlock_client *c = NULL;
        dlock_config cfg = {0};
        cfg.timeout_ms = 500;
        dlock_lock *l;
        if (dlock_client_new(it_node_urls, &cfg, &c) != DLOCK_OK ||
            wait_acquire(c, "crash", ttl, 0, 0, &l) != DLOCK_OK)
            _exit(1);
        int64_t got = dh_now_us();
        if (write(pfd[1], &got, sizeof got) != sizeof got)
            _exit(1);
        pause(); /* hold it until killed */
        _exit(0);
    }
    close(pfd[1]);
    int64_t acquired_at;
    assert_int_equal(read(pfd[0], &acquired_at, sizeof acquired_at), sizeof acquired_at);
    close(pfd[0]);
    dlock_client *c = it_nodes_client();
    dlock_lock *l;
    /* The waiter queues up, then the holder dies in its section. */
    dh_sleep_ms(100);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    int rc = wait_acquire(c, "crash", 5000, 10000, 0, &l);
    int64_t got = dh_now_us();
    assert_int_equal(rc, DLOCK_OK);
    int64_t after = (got - acquired_at) / 1000;
    printf("FIG takeover_after_acquire_ms %lld ms (lease %lld ms)\n", (long long)after,
           (long long)ttl);
    /* Never before the lease ends on the server (which set it before the holder's
     * acquire returned, so allow that round trip), and within the lease plus a margin. */
    assert_true(after >= ttl - 20);
    assert_true(after <= (ttl + 250) * dh_slack());
    assert_true(dlock_fence(l) > 0);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

/* ---- deadlines and cancel ------------------------------------------------------- */

static void wait_deadline_is_kept(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client();
    dlock_lock *holder = it_acquire(c, "deadline", 10000), *l = NULL;
    const int64_t waits[] = {50, 300, 1200};
    for (size_t i = 0; i < sizeof waits / sizeof waits[0]; i++) {
        int64_t t0 = dh_now_us();
        int rc = wait_acquire(c, "deadline", 1000, waits[i], 0, &l);
        int64_t took_ms = (dh_now_us() - t0) / 1000;
        printf("FIG wait_%lldms_took %lld ms\n", (long long)waits[i], (long long)took_ms);
        assert_int_equal(rc, DLOCK_ERR_BUSY);
        assert_null(l);
        assert_true(took_ms >= waits[i]);                     /* not before the deadline */
        assert_true(took_ms <= (waits[i] + 20) * dh_slack()); /* a few ms after it */
    }
    /* A waiter that gave up left the queue: nothing of it remains. */
    assert_int_equal(it_int_reply(dh_cmd(&it_node[0], "ZCARD dlock:{deadline}:queue")), 0);
    assert_int_equal(dlock_release(holder), DLOCK_OK);
    dlock_client_free(c);
}

static void *cancel_later(void *p)
{
    dh_sleep_ms(100);
    uint64_t one = 1;
    ssize_t w = write(*(int *)p, &one, sizeof one);
    (void)w;
    return NULL;
}

static void cancel_fd_stops_a_wait(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client();
    dlock_lock *holder = it_acquire(c, "cancel", 10000), *l = NULL;
    int efd = eventfd(0, EFD_CLOEXEC);
    pthread_t t;
    pthread_create(&t, NULL, cancel_later, &efd);
    dlock_opts o = {0};
    o.wait_ms = -1;
    o.cancel_fd = efd;
    int64_t t0 = dh_now_us();
    int rc = dlock_acquire(c, "cancel", &o, &l);
    int64_t took_ms = (dh_now_us() - t0) / 1000;
    pthread_join(t, NULL);
    close(efd);
    assert_int_equal(rc, DLOCK_ERR_CANCELED);
    assert_null(l);
    assert_true(took_ms >= 100 && took_ms <= 150 * dh_slack());
    assert_int_equal(dlock_release(holder), DLOCK_OK);
    dlock_client_free(c);
}

/* ---- woken by the release, not by a timer --------------------------------------- */

static void *waiter(void *p)
{
    waiter_arg *a = p;
    dlock_lock *l = NULL;
    a->rc = wait_acquire(a->c, a->name, 5000, a->wait_ms, a->fair, &l);
    a->got_us = dh_now_us();
    if (a->rc == DLOCK_OK)
        dlock_release(l);
    return NULL;
}

/* Release holder, then the waiting thread t (a) must get the lock within bound_us
 * (times the slack); the gap is printed as FIG fig. */
static void release_reaches(dlock_lock *holder, pthread_t t, waiter_arg *a, const char *fig,
                            int64_t bound_us)
{
    int64_t released = dh_now_us();
    assert_int_equal(dlock_release(holder), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(a->rc, DLOCK_OK);
    int64_t gap = a->got_us - released;
    printf("FIG %s %lld us (%d nodes)\n", fig, (long long)gap, it_nodes);
    assert_true(gap < bound_us * dh_slack());
}

/* A thread of wc waits for name while a holder of hc keeps it for 10 s (waiters
 * refresh every second), and the release must reach it within 100 ms: it was woken by
 * it. */
static void woken_by_release(dlock_client *hc, dlock_client *wc, const char *name, const char *fig)
{
    dlock_lock *holder = it_acquire(hc, name, 10000);
    waiter_arg a = {.c = wc, .name = name, .wait_ms = 20000};
    pthread_t t;
    pthread_create(&t, NULL, waiter, &a);
    dh_sleep_ms(50); /* let it queue up */
    release_reaches(holder, t, &a, fig, 100000);
}

static void release_wakes_a_waiter(void **state)
{
    (void)state;
    dlock_client *holder_c = it_nodes_client(), *wc = it_nodes_client();
    for (int round = 0; round < 5; round++)
        woken_by_release(holder_c, wc, "wake", "release_to_waiter_us");
    dlock_client_free(holder_c);
    dlock_client_free(wc);
}

/* ---- who reads the wake-ups ------------------------------------------------------ */

/* wc's only waiter woken by a release (woken_by_release): it reads the wake-ups
 * itself, and leaves the reading lent to its next wait. */
static void woken_alone(dlock_client *hc, dlock_client *wc, const char *name)
{
    woken_by_release(hc, wc, name, "alone_release_to_waiter_us");
}

/* The subscriber thread lends the reading to a client's only waiter, and must take it
 * back whenever anything else needs it: a second waiting thread, an event loop's
 * waiter, an observer. Each of those is tried on a client whose reading is lent, and
 * must be told at once: nobody reading would leave it to a timer a second or a lease
 * away. */
static void lent_reading_comes_back(void **state)
{
    (void)state;
    dlock_client *hc = it_nodes_client(), *wc = it_nodes_client();
    woken_alone(hc, wc, "lend-a");
    woken_alone(hc, wc, "lend-a"); /* the reading stays lent between waits */

    /* A second thread: two waiters, the first woken and gone, then the second. */
    dlock_lock *h1 = it_acquire(hc, "lend-b1", 10000), *h2 = it_acquire(hc, "lend-b2", 10000);
    waiter_arg a1 = {.c = wc, .name = "lend-b1", .wait_ms = 20000};
    waiter_arg a2 = {.c = wc, .name = "lend-b2", .wait_ms = 20000};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, waiter, &a1);
    dh_sleep_ms(50);
    pthread_create(&t2, NULL, waiter, &a2);
    dh_sleep_ms(50);
    release_reaches(h1, t1, &a1, "first_release_to_waiter_us", 100000);
    release_reaches(h2, t2, &a2, "second_release_to_waiter_us", 100000);

    /* An event loop's waiter: its descriptor becomes readable on the release. */
    woken_alone(hc, wc, "lend-c");
    dlock_lock *holder = it_acquire(hc, "lend-c", 10000), *l = NULL;
    dlock_opts o = {0};
    o.ttl_ms = 5000;
    o.wait_ms = 20000;
    dlock_pending *p = NULL;
    assert_int_equal(dlock_acquire_start(wc, "lend-c", &o, &p), DLOCK_OK);
    int rc;
    while ((rc = dlock_pending_step(p, &l)) == DLOCK_ERR_AGAIN && dlock_pending_in_flight(p)) {
        struct pollfd pf = {.fd = dlock_pending_fd(p), .events = POLLIN};
        assert_int_equal(poll(&pf, 1, 2000), 1);
    }
    assert_int_equal(rc, DLOCK_ERR_AGAIN); /* queued, waiting on its wake-up descriptor */
    assert_int_equal(dlock_release(holder), DLOCK_OK);
    struct pollfd pf = {.fd = dlock_pending_fd(p), .events = POLLIN};
    assert_int_equal(poll(&pf, 1, (int)(2000 * dh_slack())), 1);
    while ((rc = dlock_pending_step(p, &l)) == DLOCK_ERR_AGAIN) {
        pf.fd = dlock_pending_fd(p);
        assert_int_equal(poll(&pf, 1, (int)(2000 * dh_slack())), 1);
    }
    assert_int_equal(rc, DLOCK_OK);
    dlock_pending_free(p);
    assert_int_equal(dlock_release(l), DLOCK_OK);

    /* An observer: it hears a leader's proclamation, which only the thread reads. */
    woken_alone(hc, wc, "lend-d");
    dlock_observer *ob = NULL;
    assert_int_equal(dlock_observe(wc, "lend-e", NULL, NULL, &ob), DLOCK_OK);
    struct pollfd po = {.fd = dlock_observer_fd(ob), .events = POLLIN};
    dlock_leader_info info;
    assert_int_equal(poll(&po, 1, (int)(2000 * dh_slack())), 1); /* no one leads yet */
    assert_int_equal(dlock_observer_next(ob, &info), DLOCK_OK);
    assert_int_equal(info.term, 0);
    dlock_elect_opts eo = {0};
    eo.lock.ttl_ms = 10000;
    eo.value = "here";
    dlock_lock *lead = NULL;
    assert_int_equal(dlock_elect(hc, "lend-e", &eo, &lead), DLOCK_OK);
    assert_int_equal(poll(&po, 1, (int)(2000 * dh_slack())), 1);
    assert_int_equal(dlock_observer_next(ob, &info), DLOCK_OK);
    assert_string_equal(info.value, "here");
    dlock_observer_free(ob);
    assert_int_equal(dlock_resign(lead), DLOCK_OK);
    dlock_client_free(hc);
    dlock_client_free(wc);
}

/* The subscriber connections killed while the reading is lent: once as nobody reads
 * (between waits), once under the sleeper that reads. Its reader remakes them, the
 * waiter attempts once, and the next release still reaches it at once; a release
 * while they were down is made up by that attempt, well before the refresh. */
static void lent_reading_survives_a_kill(void **state)
{
    (void)state;
    dlock_client *hc = it_nodes_client(), *wc = it_nodes_client();
    woken_alone(hc, wc, "lend-k");
    for (int i = 0; i < it_nodes; i++)
        assert_true(it_int_reply(dh_cmd(&it_node[i], "CLIENT KILL TYPE pubsub")) >= 1);
    woken_alone(hc, wc, "lend-k");

    dlock_lock *holder = it_acquire(hc, "lend-k", 10000);
    waiter_arg a = {.c = wc, .name = "lend-k", .wait_ms = 20000};
    pthread_t t;
    pthread_create(&t, NULL, waiter, &a);
    dh_sleep_ms(50);
    for (int i = 0; i < it_nodes; i++)
        assert_true(it_int_reply(dh_cmd(&it_node[i], "CLIENT KILL TYPE pubsub")) >= 1);
    /* The reconnection waits 100 ms; the refresh comes after a second. */
    release_reaches(holder, t, &a, "killed_release_to_waiter_us", 500000);
    dlock_client_free(hc);
    dlock_client_free(wc);
}

/* ---- no busy polling ------------------------------------------------------------ */

static void waiters_do_not_poll(void **state)
{
    (void)state;
    dlock_client *hc = it_nodes_client(), *c1 = it_nodes_client(), *c2 = it_nodes_client();
    dlock_lock *holder = it_acquire(hc, "poll", 10000);
    long long before = it_script_calls(&it_node[0]);
    waiter_arg a[8];
    pthread_t t[8];
    for (int i = 0; i < 8; i++) {
        a[i] = (waiter_arg){.c = i % 2 ? c1 : c2, .name = "poll", .wait_ms = 2000};
        pthread_create(&t[i], NULL, waiter, &a[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].rc, DLOCK_ERR_BUSY);
    }
    long long cmds = it_script_calls(&it_node[0]) - before;
    /* Per waiter: the try, the queued retry, a refresh per second, the last try at the
     * deadline, the leave. A poller retrying every 5 ms would send about 3,200. */
    long long bound = 8 * (4 + 2000 / DLOCK_QUEUE_REFRESH_MS);
    printf("FIG waiting_commands %lld commands (8 waiters, 2 s; bound %lld)\n", cmds, bound);
    assert_true(cmds <= bound);
    assert_int_equal(dlock_release(holder), DLOCK_OK);
    dlock_client_free(hc);
    dlock_client_free(c1);
    dlock_client_free(c2);
}

/* ---- fair mode: arrival order across 2 processes -------------------------------- */

/* Waiter k (k = 0..5) arrives at t0 + k * 40 ms: even ones in this process, odd ones
 * in a child, three threads each sharing their process's client. The lock is held
 * until all have arrived; then each logs (acquired at, k) when it gets the lock. */
#define FAIR_PER_PROC 3

typedef struct fair_arg {
    dlock_client *c;
    int k, fd, rc;
    int64_t at_us;
} fair_arg;

typedef struct fair_group {
    dlock_client *c;
    int fd;
    fair_arg a[FAIR_PER_PROC];
    pthread_t t[FAIR_PER_PROC];
} fair_group;

static void *fair_waiter(void *p)
{
    fair_arg *a = p;
    int64_t now = dh_now_us();
    if (a->at_us > now)
        usleep((useconds_t)(a->at_us - now));
    dlock_lock *l;
    a->rc = wait_acquire(a->c, "fair", 5000, 20000, 1, &l);
    if (a->rc != DLOCK_OK)
        return NULL;
    record r = {.enter_us = dh_now_us(), .who = a->k};
    usleep(2000);
    r.exit_us = dh_now_us();
    if (write(a->fd, &r, sizeof r) != (ssize_t)sizeof r)
        a->rc = -1;
    dlock_release(l);
    return NULL;
}

static int fair_start(fair_group *g, int parity, const char *path, int64_t t0)
{
    dlock_config cfg = {0};
    cfg.timeout_ms = it_timeout_ms();
    g->c = NULL;
    if (dlock_client_new(it_node_urls, &cfg, &g->c) != DLOCK_OK)
        return -1;
    g->fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    for (int i = 0; i < FAIR_PER_PROC; i++) {
        int k = 2 * i + parity;
        g->a[i] = (fair_arg){.c = g->c, .k = k, .fd = g->fd, .at_us = t0 + k * 40000};
        pthread_create(&g->t[i], NULL, fair_waiter, &g->a[i]);
    }
    return 0;
}

static int fair_finish(fair_group *g)
{
    int bad = 0;
    for (int i = 0; i < FAIR_PER_PROC; i++) {
        pthread_join(g->t[i], NULL);
        bad += g->a[i].rc != DLOCK_OK;
    }
    close(g->fd);
    dlock_client_free(g->c);
    return bad;
}

static void fair_order_across_processes(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/fair.log", it_node[0].dir);
    close(open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600));
    dlock_client *hc = it_nodes_client();
    dlock_lock *holder = it_acquire(hc, "fair", 10000);
    int64_t t0 = dh_now_us() + 100000;
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        fair_group g;
        _exit(fair_start(&g, 1, path, t0) == 0 && fair_finish(&g) == 0 ? 0 : 1);
    }
    fair_group g;
    assert_int_equal(fair_start(&g, 0, path, t0), 0);
    /* Release once all six have arrived and queued. */
    int64_t all_in = t0 + 2 * FAIR_PER_PROC * 40000 + 100000;
    usleep((useconds_t)(all_in - dh_now_us()));
    assert_int_equal(dlock_release(holder), DLOCK_OK);
    assert_int_equal(fair_finish(&g), 0);
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    record r[2 * FAIR_PER_PROC];
    read_records(path, r, 2 * FAIR_PER_PROC);
    for (int i = 0; i < 2 * FAIR_PER_PROC; i++) {
        printf("INFO fair: section %d went to waiter %d\n", i, r[i].who);
        if (i > 0) {
            assert_true(r[i].enter_us >= r[i - 1].exit_us);
            printf("FIG fair_handoff_us %lld us\n", (long long)(r[i].enter_us - r[i - 1].exit_us));
        }
    }
    for (int i = 0; i < 2 * FAIR_PER_PROC; i++)
        assert_int_equal(r[i].who, i);
    dlock_client_free(hc);
}

/* A waiter that dies in a fair queue blocks the others for a bounded time only. */
static void fair_dead_waiter_is_skipped(void **state)
{
    (void)state;
    dlock_client *hc = it_nodes_client();
    dlock_lock *holder = it_acquire(hc, "fairdead", 10000);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        dlock_config cfg = {0};
        cfg.timeout_ms = 500;
        dlock_client *c = NULL;
        dlock_lock *l;
        if (dlock_client_new(it_node_urls, &cfg, &c) == DLOCK_OK)
            wait_acquire(c, "fairdead", 5000, -1, 1, &l); /* queues, then is killed */
        _exit(0);
    }
    dh_sleep_ms(200); /* the child is first in line */
    dlock_client *c = it_nodes_client();
    waiter_arg a = {.c = c, .name = "fairdead", .fair = 1, .wait_ms = 20000};
    pthread_t t;
    pthread_create(&t, NULL, waiter, &a);
    dh_sleep_ms(100);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    int64_t released = dh_now_us();
    assert_int_equal(dlock_release(holder), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(a.rc, DLOCK_OK);
    int64_t blocked_ms = (a.got_us - released) / 1000;
    printf("FIG fair_dead_waiter_blocked_ms %lld ms\n", (long long)blocked_ms);
    /* The dead entry lives DLOCK_QUEUE_TTL_MS past its last attempt at most, and the
     * live waiter retries at least every DLOCK_QUEUE_REFRESH_MS. */
    assert_true(blocked_ms <= (DLOCK_QUEUE_TTL_MS + DLOCK_QUEUE_REFRESH_MS + 200) * dh_slack());
    dlock_client_free(hc);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest one[] = {
        cmocka_unit_test(eight_threads_two_processes),
        cmocka_unit_test(crashed_holder_frees_after_lease),
        cmocka_unit_test(wait_deadline_is_kept),
        cmocka_unit_test(cancel_fd_stops_a_wait),
        cmocka_unit_test(release_wakes_a_waiter),
        cmocka_unit_test(lent_reading_comes_back),
        cmocka_unit_test(lent_reading_survives_a_kill),
        cmocka_unit_test(waiters_do_not_poll),
        cmocka_unit_test(fair_order_across_processes),
        cmocka_unit_test(fair_dead_waiter_is_skipped),
    };
    const struct CMUnitTest three[] = {
        cmocka_unit_test(release_wakes_a_waiter),
        cmocka_unit_test(lent_reading_comes_back),
        cmocka_unit_test(lent_reading_survives_a_kill),
        cmocka_unit_test(eight_threads_two_processes),
        cmocka_unit_test(fair_order_across_processes),
    };
    return IT_NODES_GROUPS("wait", one, three);
}
