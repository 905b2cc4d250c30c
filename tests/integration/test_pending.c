/*
 * test_pending.c: acquisition in steps (dlock_acquire_start, dlock_pending_step), the
 * form an event loop drives, against a real redis-server.
 *
 * What it must give: the same lock as dlock_acquire (fences, queue order, wake-ups
 * from a release, the deadline), waiters that hold no thread (a thousand of them parked
 * on this one thread, served by poll() alone), and a clean departure for one freed
 * while it waits (the waiter behind it is not held up); the same for a semaphore's
 * permit and a stock reservation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "itest.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* Drive p to its end on this thread the way an event loop would: poll its fd until
 * its due time, step, repeat. Returns the step's final result. */
static int drive(dlock_pending *p, dlock_lock **l)
{
    int rc;
    while ((rc = dlock_pending_step(p, l)) == DLOCK_ERR_AGAIN) {
        struct pollfd pf = {.fd = dlock_pending_fd(p), .events = POLLIN};
        int64_t due = dlock_pending_due_ms(p);
        assert_true(due >= 0);
        poll(&pf, 1, (int)(due > 60000 ? 60000 : due));
    }
    return rc;
}

/* The client of a test, of it_srv with the timing tests' deadline: made into *state
 * before the test, freed after it. */
static int client_setup(void **state)
{
    *state = it_client(&it_srv, it_timeout_ms());
    return 0;
}

static int client_teardown(void **state)
{
    dlock_client_free(*state);
    return 0;
}

#define WITH_CLIENT(f) cmocka_unit_test_setup_teardown(f, client_setup, client_teardown)

static void free_name_in_one_step(void **state)
{
    dlock_client *c = *state;
    dlock_pending *p = it_pending_start(c, "p-free", 0);
    assert_int_equal(dlock_pending_due_ms(p), 0); /* the first step is due at once */
    dlock_lock *l = NULL;
    assert_int_equal(dlock_pending_step(p, &l), DLOCK_OK);
    assert_non_null(l);
    assert_true(dlock_fence(l) > 0);
    assert_true(dlock_remaining_ms(l) > 9000);
    /* Finished: only free is left. */
    dlock_lock *again = NULL;
    assert_int_equal(dlock_pending_step(p, &again), DLOCK_ERR_INVALID);
    assert_null(again);
    assert_int_equal(dlock_pending_fd(p), -1);
    it_pending_done(p, l);
}

static void try_once_on_a_held_name_is_busy(void **state)
{
    dlock_client *c = *state;
    dlock_lock *holder = it_acquire(c, "p-busy", 0);
    dlock_pending *p = it_pending_start(c, "p-busy", 0);
    dlock_lock *l = NULL;
    assert_int_equal(dlock_pending_step(p, &l), DLOCK_ERR_BUSY);
    assert_null(l);
    it_pending_done(p, holder);
}

/* A waiter parks with an fd; the holder's release makes it readable, and the next
 * step confirms the lock it was handed, with a higher fence. */
static void release_wakes_the_parked_waiter(void **state)
{
    dlock_client *c = *state;
    dlock_client *other = it_client(&it_srv, it_timeout_ms());
    dlock_lock *holder = it_acquire(other, "p-wake", 0);
    uint64_t f1 = dlock_fence(holder);
    dlock_pending *p = it_pending_start(c, "p-wake", -1);
    dlock_lock *l = NULL;
    assert_int_equal(dlock_pending_step(p, &l), DLOCK_ERR_AGAIN);
    int fd = dlock_pending_fd(p);
    assert_true(fd >= 0);
    assert_true(dlock_pending_due_ms(p) > 0); /* parked: nothing due now */
    /* Early steps (a spurious wake) change nothing. */
    assert_int_equal(dlock_pending_step(p, &l), DLOCK_ERR_AGAIN);
    assert_null(l);
    int64_t t0 = dh_now_us();
    assert_int_equal(dlock_release(holder), DLOCK_OK);
    it_pending_readable(p);
    assert_int_equal(drive(p, &l), DLOCK_OK);
    printf("FIG pending_handoff_us %lld us\n", (long long)(dh_now_us() - t0));
    assert_true(dlock_fence(l) > f1);
    it_pending_done(p, l);
    dlock_client_free(other);
}

static void deadline_ends_the_wait_with_busy(void **state)
{
    dlock_client *c = *state;
    dlock_lock *holder = it_acquire(c, "p-deadline", 0);
    dlock_pending *p = it_pending_start(c, "p-deadline", 300);
    dlock_lock *l = NULL;
    int64_t t0 = dh_now_us();
    assert_int_equal(drive(p, &l), DLOCK_ERR_BUSY);
    int64_t waited_ms = (dh_now_us() - t0) / 1000;
    printf("FIG pending_deadline_ms %lld ms (wait 300)\n", (long long)waited_ms);
    assert_true(waited_ms >= 300);
    assert_true(waited_ms < 300 + 1000 * dh_slack());
    assert_null(l);
    dlock_pending_free(p);
    /* Gone from the queue: the holder's release leaves the name free. */
    char key[64];
    it_key(key, sizeof key, "p-deadline");
    assert_int_equal(dlock_release(holder), DLOCK_OK);
    assert_int_equal(it_int_reply(dh_cmd(&it_srv, "ZCARD %s:queue", key)), 0);
}

/* A waiter given up between steps leaves the queue: the fair waiter behind it gets the
 * lock at the release, not after a handoff lease nobody confirms. */
static void freed_waiter_does_not_hold_up_the_next(void **state)
{
    dlock_client *c = *state;
    dlock_lock *holder = it_acquire(c, "p-gone", 0);
    dlock_opts o = {0};
    o.wait_ms = -1;
    o.fair = 1;
    dlock_pending *first = NULL, *second = NULL;
    assert_int_equal(dlock_acquire_start(c, "p-gone", &o, &first), DLOCK_OK);
    dlock_lock *l = NULL;
    assert_int_equal(dlock_pending_step(first, &l), DLOCK_ERR_AGAIN);
    assert_int_equal(dlock_acquire_start(c, "p-gone", &o, &second), DLOCK_OK);
    assert_int_equal(dlock_pending_step(second, &l), DLOCK_ERR_AGAIN);
    dlock_pending_free(first); /* the head gives up */
    int64_t t0 = dh_now_us();
    assert_int_equal(dlock_release(holder), DLOCK_OK);
    assert_int_equal(drive(second, &l), DLOCK_OK);
    int64_t took_ms = (dh_now_us() - t0) / 1000;
    printf("FIG pending_after_departure_ms %lld ms\n", (long long)took_ms);
    /* A handoff to the departed head would cost its handoff lease (100 ms at least). */
    assert_true(took_ms < 100);
    it_pending_done(second, l);
}

/* A thousand waiters on ten names, parked on this one thread: poll() over their fds
 * serves every one, in turn, and no thread is started for them. */
#define PARKED 1000
#define NAMES  10
static void thousand_waiters_on_one_thread(void **state)
{
    (void)state;
    /* A waiter's wake-up descriptor each: more than a default limit of 1,024. */
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = rl.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    assert_true(rl.rlim_cur > PARKED + 100);
    dlock_client *c = it_client(&it_srv, 1000 * dh_slack());
    dlock_lock *holders[NAMES];
    char name[NAMES][16];
    for (int i = 0; i < NAMES; i++) {
        snprintf(name[i], sizeof name[i], "p-many-%d", i);
        assert_int_equal(dlock_acquire(c, name[i], NULL, &holders[i]), DLOCK_OK);
    }
    /* The subscriber thread starts with the first wait; count after it. */
    dlock_pending **p = calloc(PARKED, sizeof *p);
    struct pollfd *pf = calloc(PARKED, sizeof *pf);
    assert_non_null(p);
    assert_non_null(pf);
    dlock_lock *l = NULL;
    for (int j = 0; j < PARKED; j++) {
        p[j] = it_pending_start(c, name[j % NAMES], -1);
        assert_int_equal(dlock_pending_step(p[j], &l), DLOCK_ERR_AGAIN);
    }
    int threads = dh_thread_count();
    for (int i = 0; i < NAMES; i++)
        assert_int_equal(dlock_release(holders[i]), DLOCK_OK);
    /* Serve them: each one granted holds its name briefly, then releases it. */
    int served = 0, overlaps = 0, held[NAMES] = {0};
    int64_t t0 = dh_now_us();
    while (served < PARKED && dh_now_us() - t0 < 60000000LL * dh_slack()) {
        int64_t due = 60000;
        for (int j = 0; j < PARKED; j++) {
            pf[j].fd = p[j] ? dlock_pending_fd(p[j]) : -1;
            pf[j].events = POLLIN;
            pf[j].revents = 0;
            if (p[j] && dlock_pending_due_ms(p[j]) < due)
                due = dlock_pending_due_ms(p[j]);
        }
        poll(pf, PARKED, (int)due);
        for (int j = 0; j < PARKED; j++) {
            if (p[j] == NULL || (pf[j].revents == 0 && dlock_pending_due_ms(p[j]) > 0))
                continue;
            int rc = dlock_pending_step(p[j], &l);
            if (rc == DLOCK_ERR_AGAIN)
                continue;
            assert_int_equal(rc, DLOCK_OK);
            int n = j % NAMES;
            overlaps += held[n]++ != 0;
            dlock_pending_free(p[j]);
            p[j] = NULL;
            served++;
            held[n]--;
            assert_int_equal(dlock_release(l), DLOCK_OK);
        }
    }
    printf("FIG pending_1000_waiters_ms %lld ms, threads %d\n",
           (long long)((dh_now_us() - t0) / 1000), threads);
    assert_int_equal(served, PARKED);
    assert_int_equal(overlaps, 0);
    assert_int_equal(dh_thread_count(), threads); /* none was started for them */
    free(p);
    free(pf);
    dlock_client_free(c);
}

/* A semaphore's permit in steps: the third of two parks, and a release serves it. */
static void semaphore_permit_in_steps(void **state)
{
    dlock_client *c = *state;
    dlock_lock *a = NULL, *b = NULL, *l = NULL;
    assert_int_equal(dlock_sem_acquire(c, "p-sem", 2, NULL, &a), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(c, "p-sem", 2, NULL, &b), DLOCK_OK);
    dlock_opts o = {0};
    o.wait_ms = -1;
    dlock_pending *p = NULL;
    assert_int_equal(dlock_sem_acquire_start(c, "p-sem", 2, &o, &p), DLOCK_OK);
    assert_int_equal(dlock_pending_step(p, &l), DLOCK_ERR_AGAIN);
    assert_true(dlock_pending_fd(p) >= 0);
    assert_int_equal(dlock_release(a), DLOCK_OK);
    assert_int_equal(drive(p, &l), DLOCK_OK);
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "p-sem", &h), DLOCK_OK);
    assert_int_equal(h.shared, 2);
    it_pending_done(p, l);
    assert_int_equal(dlock_release(b), DLOCK_OK);
    /* The same checks as dlock_sem_acquire. */
    assert_int_equal(dlock_sem_acquire_start(c, "p-sem", 0, &o, &p), DLOCK_ERR_INVALID);
    assert_null(p);
}

/* The strings given to a _start call are the caller's only until it returns: a step
 * that names the SKU in its error uses the pending's own copy. */
static void start_copies_its_strings(void **state)
{
    dlock_client *c = *state;
    assert_int_equal(dlock_stock_set(c, "p-copied-sku", 0, NULL), DLOCK_OK);
    char *sku = strdup("p-copied-sku");
    assert_non_null(sku);
    dlock_pending *p = NULL;
    assert_int_equal(dlock_stock_reserve_start(c, sku, 1, NULL, &p), DLOCK_OK);
    memset(sku, 'x', strlen(sku));
    free(sku);
    assert_int_equal(dlock_pending_step(p, NULL), DLOCK_ERR_BUSY);
    if (strstr(dlock_errmsg(), "p-copied-sku") == NULL)
        fail_msg("the error does not name the SKU: %s", dlock_errmsg());
    dlock_pending_free(p);
}

/* A stock reservation in steps: it parks while the units are reserved, a cancel serves
 * it, its id commits; one freed while parked leaves no waiter behind. */
static void stock_reservation_in_steps(void **state)
{
    dlock_client *c = *state;
    assert_int_equal(dlock_stock_set(c, "p-sku", 1, NULL), DLOCK_OK);
    char first[DLOCK_TOKEN_LEN + 1];
    assert_int_equal(dlock_stock_reserve(c, "p-sku", 1, NULL, first), DLOCK_OK);
    dlock_reserve_opts ro = {0};
    ro.wait_ms = -1;
    dlock_pending *p = NULL;
    assert_int_equal(dlock_stock_reserve_start(c, "p-sku", 1, &ro, &p), DLOCK_OK);
    assert_int_equal(dlock_pending_step(p, NULL), DLOCK_ERR_AGAIN);
    assert_string_equal(dlock_pending_id(p), "");
    assert_true(dlock_pending_fd(p) >= 0);
    assert_int_equal(dlock_stock_cancel(c, "p-sku", first), DLOCK_OK);
    struct pollfd pf = {.fd = dlock_pending_fd(p), .events = POLLIN};
    assert_int_equal(poll(&pf, 1, (int)(2000 * dh_slack())), 1);
    int rc;
    while ((rc = dlock_pending_step(p, NULL)) == DLOCK_ERR_AGAIN)
        poll(&pf, 1, (int)dlock_pending_due_ms(p));
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(strlen(dlock_pending_id(p)), DLOCK_TOKEN_LEN);
    assert_int_equal(dlock_stock_commit(c, "p-sku", dlock_pending_id(p)), DLOCK_OK);
    dlock_pending_free(p);

    /* Sold out now: a waiter that is freed leaves the waiters' queue. */
    assert_int_equal(dlock_stock_add(c, "p-sku", 1, NULL), DLOCK_OK);
    assert_int_equal(dlock_stock_reserve(c, "p-sku", 1, NULL, first), DLOCK_OK);
    assert_int_equal(dlock_stock_reserve_start(c, "p-sku", 1, &ro, &p), DLOCK_OK);
    assert_int_equal(dlock_pending_step(p, NULL), DLOCK_ERR_AGAIN);
    dlock_stock_info info;
    assert_int_equal(dlock_stock_status(c, "p-sku", &info), DLOCK_OK);
    assert_int_equal(info.waiters, 1);
    dlock_pending_free(p);
    int64_t until = dh_now_us() + 1000000LL * dh_slack();
    do
        assert_int_equal(dlock_stock_status(c, "p-sku", &info), DLOCK_OK);
    while (info.waiters != 0 && dh_now_us() < until);
    assert_int_equal(info.waiters, 0);
    /* The same checks as dlock_stock_reserve. */
    assert_int_equal(dlock_stock_reserve_start(c, "p-sku", 0, &ro, &p), DLOCK_ERR_INVALID);
    assert_null(p);
}

static void acquire_start_refused(dlock_client *local)
{
    dlock_pending *p = NULL;
    assert_int_equal(dlock_acquire_start(local, "x", NULL, &p), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errmsg(), "file://"));
}

static void bad_arguments(void **state)
{
    dlock_client *c = *state;
    dlock_pending *p = (dlock_pending *)&p;
    assert_int_equal(dlock_acquire_start(c, "x", NULL, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_acquire_start(NULL, "x", NULL, &p), DLOCK_ERR_INVALID);
    assert_null(p);
    assert_int_equal(dlock_acquire_start(c, "", NULL, &p), DLOCK_ERR_INVALID);
    dlock_opts o = {0};
    o.ttl_ms = -5;
    assert_int_equal(dlock_acquire_start(c, "x", &o, &p), DLOCK_ERR_INVALID);
    assert_null(p);
    dlock_lock *l = (dlock_lock *)&l;
    assert_int_equal(dlock_pending_step(NULL, &l), DLOCK_ERR_INVALID);
    assert_null(l);
    assert_int_equal(dlock_pending_fd(NULL), -1);
    assert_int_equal(dlock_pending_due_ms(NULL), 0);
    dlock_pending_free(NULL);
    /* An unfinished acquisition freed before any step writes nothing and leaks nothing. */
    p = it_pending_start(c, "never-stepped", -1);
    dlock_pending_free(p);

    it_on_local_client("dlock-pending", acquire_start_refused);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        WITH_CLIENT(free_name_in_one_step),
        WITH_CLIENT(try_once_on_a_held_name_is_busy),
        WITH_CLIENT(release_wakes_the_parked_waiter),
        WITH_CLIENT(deadline_ends_the_wait_with_busy),
        WITH_CLIENT(freed_waiter_does_not_hold_up_the_next),
        cmocka_unit_test(thousand_waiters_on_one_thread),
        WITH_CLIENT(semaphore_permit_in_steps),
        WITH_CLIENT(stock_reservation_in_steps),
        WITH_CLIENT(start_copies_its_strings),
        WITH_CLIENT(bad_arguments),
    };
    return cmocka_run_group_tests_name("pending", tests, it_srv_setup, it_srv_teardown);
}
