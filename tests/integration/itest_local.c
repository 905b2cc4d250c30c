/*
 * itest_local.c: the helpers of the local-lock tests, test_local.c and the files split
 * from it (itest.h): clients of it_local_url, and forked children that take a lock and
 * report on a pipe.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

dlock_client *it_local_client(void)
{
    dlock_client *c = NULL;
    int rc = dlock_client_new(it_local_url, NULL, &c);
    if (rc != DLOCK_OK)
        fail_msg("dlock_client_new(%s): %s (%s)", it_local_url, dlock_errname(rc), dlock_errmsg());
    return c;
}

dlock_lock *it_local_take(dlock_client *c, const char *name, int64_t wait_ms)
{
    dlock_opts o = {0};
    o.wait_ms = wait_ms;
    return it_acquire_opts(c, name, &o);
}

void it_local_expect_busy(dlock_client *c, const char *name, int shared)
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

pid_t it_local_child(int (*fn)(void *), void *arg)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(fn(arg));
    return pid;
}

int it_local_wait_exit(pid_t pid)
{
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void it_local_put(int fd, const void *buf, size_t len)
{
    if (write(fd, buf, len) != (ssize_t)len)
        _exit(90);
}

bool it_local_get(int fd, void *buf, size_t len, int64_t timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, (int)timeout_ms) != 1)
        return false;
    return read(fd, buf, len) == (ssize_t)len;
}

/* A forked child's client, left to the child's exit (which lets go of its locks as a
 * killed process's would); kept here, so that valgrind sees it reachable, not lost. */
static dlock_client *child_client;

dlock_lock *it_local_child_take(const it_local_pipe_arg *a)
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

pid_t it_local_child_started(int (*fn)(void *), it_local_pipe_arg *a, int p[2], void *buf,
                             size_t len)
{
    assert_int_equal(pipe(p), 0);
    a->fd = p[1];
    pid_t pid = it_local_child(fn, a);
    assert_true(it_local_get(p[0], buf, len, 5000 * dh_slack()));
    return pid;
}

void it_local_close_pipe(int p[2])
{
    close(p[0]);
    close(p[1]);
}

void it_local_child_report(int (*fn)(void *), it_local_pipe_arg *a, void *buf, size_t len)
{
    int p[2];
    pid_t pid = it_local_child_started(fn, a, p, buf, len);
    assert_int_equal(it_local_wait_exit(pid), 0);
    it_local_close_pipe(p);
}
