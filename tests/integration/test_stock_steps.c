/*
 * test_stock_steps.c: the stock's calls in steps, for event loops, against a real
 * redis-server: a reserve (dlock_stock_reserve_start) whose attempt a nowait step sends
 * and a later one reads, a waiter parked on its wake-up descriptor and served by a
 * cancel; a commit, a cancel and an extension (dlock_stock_*_start) that move the
 * counts as the blocking calls do, with their refusals. The blocking calls:
 * test_stock_reserve.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <poll.h>
#include <string.h>

/* Steps handed back (DLOCK_ERR_WOULDBLOCK) and taken blocking, by step(). */
static int handed_back;

/* One step as an event loop takes it: nowait, or blocking when handed back. */
static int step(dlock_pending *p)
{
    int rc = dlock_pending_step_nowait(p, NULL);
    if (rc != DLOCK_ERR_WOULDBLOCK)
        return rc;
    handed_back++;
    return dlock_pending_step(p, NULL);
}

/* Between steps: a poll of the descriptor (or a sleep) until the due time. */
static void wait_step(dlock_pending *p)
{
    struct pollfd pf = {.fd = dlock_pending_fd(p), .events = POLLIN};
    int64_t due = dlock_pending_due_ms(p);
    poll(&pf, pf.fd >= 0 ? 1 : 0, (int)(due > 1000 ? 1000 : due));
}

/* p run to its end as an event loop would. A first nowait step that sends has no
 * reply yet: its round is in flight. */
static int drive(dlock_pending *p)
{
    int rc = step(p);
    if (rc == DLOCK_ERR_AGAIN && handed_back == 0)
        assert_int_equal(dlock_pending_in_flight(p), 1);
    while (rc == DLOCK_ERR_AGAIN) {
        wait_step(p);
        rc = step(p);
    }
    return rc;
}

/* A reserve in steps: its attempt sent by a nowait step and read by a later one; a
 * waiter that listens (the client's first subscription a blocking step, once), parks
 * on its wake-up descriptor and is served by a cancel. */
static void test_reserve_in_steps(void **state)
{
    (void)state;
    dlock_client *c = it_stock_client();
    it_stock_set(c, "rsteps", 1);
    dlock_pending *p = NULL;
    handed_back = 0;
    assert_int_equal(dlock_stock_reserve_start(c, "rsteps", 1, NULL, &p), DLOCK_OK);
    assert_int_equal(drive(p), DLOCK_OK);
    assert_int_equal(handed_back, 0);
    it_res_id first;
    memcpy(first, dlock_pending_id(p), sizeof first);
    dlock_pending_free(p);
    it_stock_expect(c, "rsteps", 1, 0, 1, 0);
    for (int round = 0; round < 2; round++) {
        dlock_reserve_opts ro = {0};
        ro.wait_ms = 10000 * dh_slack();
        assert_int_equal(dlock_stock_reserve_start(c, "rsteps", 1, &ro, &p), DLOCK_OK);
        int rc = step(p);
        while (rc == DLOCK_ERR_AGAIN && (dlock_pending_in_flight(p) || dlock_pending_fd(p) < 0)) {
            wait_step(p);
            rc = step(p);
        }
        assert_int_equal(rc, DLOCK_ERR_AGAIN); /* parked on its wake-up descriptor */
        dlock_stock_info info;
        assert_int_equal(dlock_stock_status(c, "rsteps", &info), DLOCK_OK);
        assert_int_equal(info.waiters, 1);
        assert_int_equal(dlock_stock_cancel(c, "rsteps", first), DLOCK_OK);
        assert_int_equal(drive(p), DLOCK_OK);
        memcpy(first, dlock_pending_id(p), sizeof first);
        dlock_pending_free(p);
        it_stock_expect(c, "rsteps", 1, 0, 1, 0);
        /* The first waiter's subscription took one blocking step; the client listens
         * from then on, and the next waiter takes none. */
        assert_int_equal(handed_back, 1);
    }
    assert_int_equal(dlock_stock_commit(c, "rsteps", first), DLOCK_OK);
    dlock_client_free(c);
}

static void refused_on_files(dlock_client *local)
{
    dlock_pending *p = (dlock_pending *)&p;
    assert_int_equal(dlock_stock_commit_start(local, "s", "0123456789abcdef0123456789abcdef", &p),
                     DLOCK_ERR_INVALID);
    assert_null(p);
    assert_non_null(strstr(dlock_errmsg(), "file://"));
}

/* Commit, cancel and extend in steps (dlock_stock_*_start): a nowait step sends, a later
 * one reads; the counts move as the blocking calls move them, and the same refusals. */
static void test_end_in_steps(void **state)
{
    (void)state;
    dlock_client *c = it_stock_client();
    handed_back = 0;
    it_stock_set(c, "steps", 5);
    it_res_id a, b;
    it_stock_reserve_ok(c, "steps", 2, 30000, a);
    it_stock_reserve_ok(c, "steps", 1, 30000, b);
    dlock_pending *p = NULL;
    assert_int_equal(dlock_stock_extend_start(c, "steps", a, 60000, &p), DLOCK_OK);
    assert_int_equal(drive(p), DLOCK_OK);
    dlock_pending_free(p);
    assert_int_equal(dlock_stock_commit_start(c, "steps", a, &p), DLOCK_OK);
    assert_int_equal(drive(p), DLOCK_OK);
    dlock_pending_free(p);
    it_stock_expect(c, "steps", 5, 2, 1, 2);
    /* A blocking step does it whole. */
    assert_int_equal(dlock_stock_cancel_start(c, "steps", b, &p), DLOCK_OK);
    assert_int_equal(dlock_pending_step(p, NULL), DLOCK_OK);
    dlock_pending_free(p);
    it_stock_expect(c, "steps", 5, 3, 0, 2);
    /* Lost as the blocking calls are, with their messages. */
    assert_int_equal(dlock_stock_cancel_start(c, "steps", a, &p), DLOCK_OK);
    assert_int_equal(drive(p), DLOCK_ERR_LOST);
    assert_non_null(strstr(dlock_errmsg(), "committed"));
    dlock_pending_free(p);
    assert_int_equal(dlock_stock_commit_start(c, "steps", b, &p), DLOCK_OK);
    assert_int_equal(drive(p), DLOCK_ERR_LOST);
    assert_non_null(strstr(dlock_errmsg(), "no such reservation"));
    dlock_pending_free(p);
    /* Freed with its call in flight: the server may still run it, as it may a blocking
     * call that timed out; a commit repeated is harmless, and the client goes on. */
    it_res_id d;
    it_stock_reserve_ok(c, "steps", 1, 30000, d);
    assert_int_equal(dlock_stock_commit_start(c, "steps", d, &p), DLOCK_OK);
    assert_int_equal(dlock_pending_step_nowait(p, NULL), DLOCK_ERR_AGAIN);
    dlock_pending_free(p);
    assert_int_equal(dlock_stock_commit(c, "steps", d), DLOCK_OK);
    it_stock_expect(c, "steps", 5, 2, 0, 3);
    /* The checks of the blocking calls, and out. */
    assert_int_equal(dlock_stock_commit_start(c, "steps", a, NULL), DLOCK_ERR_INVALID);
    p = (dlock_pending *)&p;
    assert_int_equal(dlock_stock_commit_start(c, "steps", "zz", &p), DLOCK_ERR_INVALID);
    assert_null(p);
    assert_non_null(strstr(dlock_errmsg(), "reservation id must be"));
    assert_int_equal(dlock_stock_cancel_start(c, "steps", NULL, &p), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_stock_extend_start(c, "steps", a, 0, &p), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errmsg(), "lease_ms"));
    assert_int_equal(dlock_stock_commit_start(c, "", a, &p), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_stock_commit_start(NULL, "steps", a, &p), DLOCK_ERR_INVALID);
    assert_null(p);
    dlock_client_free(c);
    it_on_local_client("dlock-stock-steps", refused_on_files);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_in_steps),
        cmocka_unit_test(test_end_in_steps),
    };
    return cmocka_run_group_tests_name("stock_steps", tests, it_srv_setup, it_srv_teardown);
}
