/*
 * test_local_detach.c: local locks (file:///DIR clients) that outlive the process that
 * took them, and what handles and clients report: a lock detached in one process,
 * adopted, checked, extended and released by token in another (a wrong token touches
 * nothing; a live process's lock is released by it alone), a detached lease that runs
 * out and lets a waiter in, status and what a lease means locally (a held local lock does
 * not expire; its file removed, it is lost), and dlock_client_free and fork. No server
 * runs; the processes are forked children with clients of their own.
 *
 * Asserted exactly: holders, tokens, fences that go up, leases as reported, the codes of
 * every call. Asserted with DLOCK_TEST_SLACK: how soon a waiter gets a name whose
 * detached lease ran out.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dlock.h"
#include "itest.h"
#include "support.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- detach, adopt, status ---------------------------------------------------- */

typedef struct detached {
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t fence;
} detached;

static int acquire_and_detach(void *arg)
{
    it_local_pipe_arg *a = arg;
    dlock_lock *l = it_local_child_take(a);
    if (l == NULL)
        return 70;
    detached d;
    memset(&d, 0, sizeof d); /* the padding goes down the pipe too */
    memcpy(d.token, dlock_token(l), sizeof d.token);
    d.fence = dlock_fence(l);
    if (dlock_lock_detach(l) != DLOCK_OK)
        return 71;
    it_local_put(a->fd, &d, sizeof d);
    return 0;
}

static detached detach_in_child(const char *name, int64_t ttl_ms)
{
    it_local_pipe_arg a = {name, -1, 0, ttl_ms, 0, "nightly backup"};
    detached d;
    it_local_child_report(acquire_and_detach, &a, &d, sizeof d);
    return d;
}

/* `dlock acquire` then `dlock release` in other processes: the lock outlives the
 * process that took it, for its lease, and a release by token ends it. */
static void detach_adopt_release_across_processes(void **state)
{
    (void)state;
    dlock_client *c = it_local_client();
    detached d = detach_in_child("detached", 60000);
    it_local_expect_busy(c, "detached", 0);
    it_local_expect_busy(c, "detached", 1);
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
    it_local_expect_busy(c, "detached", 0);

    /* A wrong token touches nothing. */
    char bad[DLOCK_TOKEN_LEN + 1];
    memcpy(bad, d.token, sizeof bad);
    bad[0] = bad[0] == '0' ? '1' : '0';
    assert_int_equal(dlock_lock_adopt(c, "detached", bad, &x), DLOCK_OK);
    assert_int_equal(dlock_release(x), DLOCK_ERR_LOST);
    it_local_expect_busy(c, "detached", 0);

    assert_int_equal(dlock_lock_adopt(c, "detached", d.token, &x), DLOCK_OK);
    assert_int_equal(dlock_release(x), DLOCK_OK);
    dlock_lock *l = it_local_take(c, "detached", 0);
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
    dlock_client *c = it_local_client();
    int64_t ttl = 300;
    int64_t t0 = dh_now_ms();
    detached d = detach_in_child("lease", ttl);
    dlock_lock *l = it_local_take(c, "lease", 5000 * dh_slack());
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
    dlock_client *c = it_local_client();
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
    it_local_expect_busy(c, "status", 0);
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
    dlock_client *c = it_local_client(), *other = it_local_client();
    it_local_take(c, "free-a", 0);
    dlock_lock *b = it_local_take(c, "free-b", 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dlock_lock *l;
        int bad = dlock_acquire(c, "free-c", NULL, &l) != DLOCK_ERR_CLOSED;
        bad |= (dlock_release(b) != DLOCK_ERR_CLOSED) << 1;
        dlock_client_free(c);
        _exit(bad);
    }
    assert_int_equal(it_local_wait_exit(pid), 0);
    it_local_expect_busy(other, "free-a", 0);
    it_local_expect_busy(other, "free-b", 0);
    dlock_client_free(c);
    dlock_release(it_local_take(other, "free-a", 0));
    dlock_release(it_local_take(other, "free-b", 0));
    dlock_client_free(other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(detach_adopt_release_across_processes),
        cmocka_unit_test(detached_lease_runs_out),
        cmocka_unit_test(status_and_lease_meaning),
        cmocka_unit_test(client_free_and_fork),
    };
    return cmocka_run_group_tests(tests, it_local_setup, it_local_teardown);
}
