/*
 * itest_pipe.c: the pipelining tests' event loop (itest_pipe.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "itest.h"
#include "itest_pipe.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>

void loop_init(loop *lp, dlock_client *c, op *ops)
{
    memset(lp, 0, sizeof *lp);
    lp->c = c;
    lp->ops = ops;
    assert_int_equal(dlock_client_pipeline(c, &lp->fd), DLOCK_OK);
    assert_true(lp->fd >= 0);
}

static void on_notify(void *arg)
{
    op *o = arg;
    if (o->done)
        o->lp->late_notifies++;
    o->notified++;
    o->woken = true;
}

static void watch(op *o)
{
    o->done = o->woken = false;
    o->notified = 0;
    assert_int_equal(dlock_pending_notify(o->p, on_notify, o), DLOCK_OK);
}

void start_acquisitions(loop *lp, const char *prefix, int n, int64_t ttl_ms)
{
    assert_true(n <= OPS_MAX);
    lp->n = n;
    dlock_opts o = {0};
    o.ttl_ms = ttl_ms;
    for (int i = 0; i < n; i++) {
        op *a = &lp->ops[i];
        memset(a, 0, sizeof *a);
        a->lp = lp;
        snprintf(a->name, sizeof a->name, "%s-%d", prefix, i);
        assert_int_equal(dlock_acquire_start(lp->c, a->name, &o, &a->p), DLOCK_OK);
        watch(a);
    }
}

void start_releases(loop *lp)
{
    for (int i = 0; i < lp->n; i++) {
        op *o = &lp->ops[i];
        assert_int_equal(o->rc, DLOCK_OK);
        dlock_pending_free(o->p);
        assert_int_equal(dlock_release_start(o->l, &o->p), DLOCK_OK);
        o->l = NULL;
        o->release = true;
        watch(o);
    }
}

void step(loop *lp, op *o)
{
    o->woken = false;
    int rc = dlock_pending_step_nowait(o->p, o->release ? NULL : &o->l);
    if (rc == DLOCK_ERR_WOULDBLOCK) {
        /* Taken as a worker would, so that the loop goes on; the test fails on it. */
        lp->handed_back++;
        rc = dlock_pending_step(o->p, o->release ? NULL : &o->l);
    }
    if (rc == DLOCK_ERR_AGAIN) {
        if (dlock_pending_in_flight(o->p)) {
            lp->again_in_flight++;
            lp->again_with_fd += dlock_pending_fd(o->p) != -1;
        }
        return;
    }
    o->rc = rc;
    o->done = true;
    o->end_us = dh_now_us();
}

void first_steps(loop *lp, int from, int to, int64_t due_max_ms)
{
    for (int i = from; i < to; i++) {
        op *o = &lp->ops[i];
        step(lp, o);
        assert_false(o->done);
        assert_int_equal(dlock_pending_in_flight(o->p), 1);
        assert_int_equal(dlock_pending_fd(o->p), -1);
        int64_t due = dlock_pending_due_ms(o->p);
        if (due > 3600000) {
            lp->unsent++; /* its deadline starts when it is sent */
            continue;
        }
        if (due <= 0 || due > due_max_ms + 1)
            fail_msg("%s: due in %lld ms, not in (0, %lld]", o->name, (long long)due,
                     (long long)due_max_ms);
    }
    dlock_client_pump(lp->c);
}

void loop_run(loop *lp, int64_t limit_ms)
{
    int64_t until = dh_now_ms() + limit_ms;
    for (;;) {
        for (int i = 0; i < lp->n; i++) {
            op *o = &lp->ops[i];
            if (!o->done && (o->woken || dlock_pending_due_ms(o->p) == 0))
                step(lp, o);
        }
        /* What the steps queued leaves now, in one write per server. */
        dlock_client_pump(lp->c);
        int left = 0;
        bool woken = false;
        int64_t wait_ms = 1000;
        for (int i = 0; i < lp->n; i++) {
            const op *o = &lp->ops[i];
            if (o->done)
                continue;
            left++;
            woken |= o->woken;
            int64_t due = dlock_pending_due_ms(o->p);
            if (due < wait_ms)
                wait_ms = due;
        }
        if (left == 0)
            return;
        if (dh_now_ms() > until)
            fail_msg("%d of %d operations not done after %lld ms", left, lp->n,
                     (long long)limit_ms);
        if (woken)
            continue;
        struct pollfd pf = {.fd = lp->fd, .events = POLLIN};
        poll(&pf, 1, (int)wait_ms);
        dlock_client_pump(lp->c);
    }
}
