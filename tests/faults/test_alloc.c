/*
 * test_alloc.c: scenario 16 of the fault suite (docs/testing.md), allocation failures.
 *
 * Every allocation the library makes goes through src/alloc.c; the test build makes
 * the Nth fail. For N = 1, 2, ... until a run makes no allocation fail, a whole
 * workflow runs: each call must return DLOCK_OK or DLOCK_ERR_NOMEM (or the code a
 * previous NOMEM explains), never crash, and free everything (the ASan build of the
 * suite, in CI, turns a leak into a failure). hiredis's own allocations are not ours
 * and are not injected.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"
#include "internal.h" /* the hooks */

#include <stdio.h>
#include <string.h>

static void inject(long n, bool every)
{
    atomic_store(&dlock__test_hooks.fail_at, 0);
    atomic_store(&dlock__test_hooks.allocs, 0);
    atomic_store(&dlock__test_hooks.fail_every, every);
    atomic_store(&dlock__test_hooks.fail_at, n);
}

static bool allowed(int rc, int also)
{
    bool ok = rc == DLOCK_OK || rc == DLOCK_ERR_NOMEM || rc == also;
    if (!ok)
        printf("INFO unexpected %s: %s (injected at allocation %ld)\n", dlock_errname(rc),
               dlock_errmsg(), atomic_load(&dlock__test_hooks.fail_at));
    return ok;
}

/* A lock's whole life on one client. Returns the number of NOMEMs seen. */
static int workflow(bool threads)
{
    int nomem = 0, rc;
    dlock_config cfg = {0};
    cfg.timeout_ms = 500;
    dlock_client *c = NULL;
    rc = dlock_client_new(it_srv.url, &cfg, &c);
    assert_true(allowed(rc, -1));
    if (rc != DLOCK_OK)
        return 1;
    dlock_opts o = {0};
    o.ttl_ms = 2000;
    o.auto_renew = threads;
    o.wait_ms = threads ? 50 : 0;
    dlock_lock *l = NULL, *other = NULL;
    rc = dlock_acquire(c, "alloc", &o, &l);
    assert_true(allowed(rc, -1));
    nomem += rc == DLOCK_ERR_NOMEM;
    if (rc == DLOCK_OK) {
        /* A second acquire of the held name: BUSY, or NOMEM (the wait's thread). */
        rc = dlock_acquire(c, "alloc", &o, &other);
        assert_true(allowed(rc, DLOCK_ERR_BUSY));
        nomem += rc == DLOCK_ERR_NOMEM;
        rc = dlock_extend(l, 3000);
        assert_true(allowed(rc, -1));
        rc = dlock_check(l);
        assert_true(allowed(rc, -1));
        dlock_holder h;
        rc = dlock_inspect(c, "alloc", &h);
        assert_true(allowed(rc, -1));
        int fd = dlock_lost_fd(l);
        (void)fd;
        rc = dlock_fenced_set(c, "alloc-register", dlock_fence(l), "v", 1);
        assert_true(allowed(rc, -1));
        /* A listing, with a name its keys write in hex (one that begins with '}'),
         * whose decoding allocates. */
        dlock_lock *hexed = NULL;
        rc = dlock_acquire(c, "}alloc", &o, &hexed);
        assert_true(allowed(rc, -1));
        dlock_lister *it = NULL;
        rc = dlock_list(c, "*alloc", &it);
        assert_true(allowed(rc, -1));
        if (rc == DLOCK_OK) {
            const dlock_listed *e;
            int names = 0;
            while (dlock_list_next(it, &e) == DLOCK_OK && e != NULL)
                names++;
            /* Both names (an out-of-memory decoding must fail the listing, not drop one);
             * only "alloc" when "}alloc" could not be taken. */
            assert_int_equal(names, hexed != NULL ? 2 : 1);
        }
        dlock_list_free(it);
        if (hexed != NULL)
            assert_true(allowed(dlock_release(hexed), -1));
        if (threads) {
            rc = dlock_lock_detach(l); /* dlock_client_free releases what is attached */
            dlock_lock *adopted = NULL;
            rc = dlock_lock_adopt(c, "alloc", "0123456789abcdef0123456789abcdef", &adopted);
            assert_true(allowed(rc, -1));
            if (rc == DLOCK_OK)
                dlock_lock_detach(adopted);
        } else {
            rc = dlock_release(l);
            /* A release whose round could not even be formatted leaves the key to
             * its lease; a handle is freed either way. */
            assert_true(allowed(rc, -1));
        }
    }
    dlock_client_free(c);
    return nomem;
}

/* The case's state: whether the workflow runs the wait and renewal threads (a bool). */
static void every_allocation_can_fail(void **state)
{
    bool threads = *(const bool *)*state;
    long n;
    for (n = 1; n < 5000; n++) {
        inject(n, false);
        workflow(threads);
        long made = atomic_load(&dlock__test_hooks.allocs);
        atomic_store(&dlock__test_hooks.fail_at, 0);
        if (made < n)
            break; /* this run had no allocation left to fail: all sites were covered */
        /* Clean the server between runs: a release that failed leaves a lease. */
        redisReply *r = dh_cmd(&it_srv, "FLUSHALL");
        freeReplyObject(r);
    }
    printf("FIG alloc_failure_sites_%s %ld allocations, each failed once\n",
           threads ? "threaded" : "plain", n - 1);
    assert_true(n > 10 && n < 5000);
    /* And all of them failing from the first. */
    inject(1, true);
    workflow(threads);
    inject(0, false);
}

int main(void)
{
    static bool plain = false, threads = true;
    const struct CMUnitTest tests[] = {
        IT_CASE("plain_workflow", every_allocation_can_fail, &plain),
        IT_CASE("with_wait_and_renewal_threads", every_allocation_can_fail, &threads),
    };
    return cmocka_run_group_tests_name("alloc", tests, it_srv_setup, it_srv_teardown);
}
