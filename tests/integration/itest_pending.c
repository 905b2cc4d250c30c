/* itest_pending.c: the helpers of the tests of acquisition in steps (itest.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "itest.h"

#include <poll.h>
#include <stdio.h>

dlock_pending *it_pending_start(dlock_client *c, const char *name, int64_t wait_ms)
{
    dlock_opts o = {0};
    o.wait_ms = wait_ms;
    o.ttl_ms = 10000;
    dlock_pending *p = NULL;
    int rc = dlock_acquire_start(c, name, &o, &p);
    if (rc != DLOCK_OK)
        it_show("dlock_acquire_start", rc);
    assert_int_equal(rc, DLOCK_OK);
    assert_non_null(p);
    return p;
}

void it_pending_readable(dlock_pending *p)
{
    struct pollfd pf = {.fd = dlock_pending_fd(p), .events = POLLIN};
    assert_int_equal(poll(&pf, 1, (int)(2000 * dh_slack())), 1);
}

void it_pending_done(dlock_pending *p, dlock_lock *l)
{
    dlock_pending_free(p);
    assert_int_equal(dlock_release(l), DLOCK_OK);
}

void it_on_local_client(const char *prefix, void (*check)(dlock_client *local))
{
    char dir[512], url[600];
    assert_int_equal(it_tmpdir(dir, sizeof dir, prefix), 0);
    snprintf(url, sizeof url, "file://%s", dir);
    dlock_client *local = NULL;
    assert_int_equal(dlock_client_new(url, NULL, &local), DLOCK_OK);
    check(local);
    dlock_client_free(local);
    assert_int_equal(it_tmpdir_remove(dir), 0);
}
