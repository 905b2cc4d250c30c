/*
 * itest_handoff.c: the helpers of the handoff tests, test_handoff.c and the files split
 * from it (itest.h): a name's queue entries, and waiters in forked children that report
 * on a pipe, on it_nodes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

long long it_queue_entry(dh_server *s, const char *name, int rank, char *value, size_t len)
{
    char key[256];
    it_queue_key(key, sizeof key, name);
    redisReply *r = dh_cmd(s, "ZRANGE %s %d %d", key, rank, rank);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 1);
    const char *m = r->element[0]->str;
    long long h = 0, limit = -1, n = 0;
    int at = 0;
    assert_int_equal(sscanf(m, "%lld %lld %lld %n", &h, &limit, &n, &at), 3);
    assert_int_equal(limit, 0);
    assert_true(at > 0 && n > 0 && (size_t)(at + n) < r->element[0]->len);
    snprintf(value, len, "%s", m + at + n);
    freeReplyObject(r);
    return h;
}

/* ---- waiters in child processes --------------------------------------------------- */

/* The body of a waiter in a forked child: its own client (the parent's must not be
 * used after fork), one blocked acquire, a report, the release. Exit status 0 on
 * success. */
static int child_wait(const it_child_waiter *w)
{
    dlock_config cfg;
    it_config_init(&cfg);
    dlock_client *c = NULL;
    if (dlock_client_new(it_node_urls, &cfg, &c) != DLOCK_OK)
        return 2;
    dlock_opts o = {0};
    o.ttl_ms = w->ttl_ms;
    o.wait_ms = w->wait_ms;
    o.fair = w->fair;
    dlock_lock *l = NULL;
    it_waiter_report r = {.idx = w->idx};
    r.rc = dlock_acquire(c, w->name, &o, &l);
    r.got_us = dh_now_us();
    if (r.rc == DLOCK_OK) {
        r.fence = dlock_fence(l);
        r.remaining_ms = dlock_remaining_ms(l);
        memcpy(r.token, dlock_token(l), DLOCK_TOKEN_LEN);
    }
    if (w->report_fd >= 0 && write(w->report_fd, &r, sizeof r) != (ssize_t)sizeof r)
        return 3;
    if (r.rc != DLOCK_OK)
        return 4;
    if (w->go_fd >= 0) {
        char b;
        ssize_t n = read(w->go_fd, &b, 1);
        (void)n; /* a byte or EOF: either way, release */
    }
    int rc = dlock_release(l);
    dlock_client_free(c);
    return rc == DLOCK_OK ? 0 : 5;
}

pid_t it_spawn_waiter(const it_child_waiter *w)
{
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (int i = 0; i < w->nclose; i++)
            close(w->close_fd[i]);
        _exit(child_wait(w));
    }
    return pid;
}

void it_expect_exit(pid_t pid, int code)
{
    int status = 0;
    dh_reap(pid, 5000 * dh_slack(), &status);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), code);
}

void it_kill_and_reap(pid_t pid)
{
    int status = 0;
    assert_int_equal(kill(pid, SIGKILL), 0);
    dh_reap(pid, 2000, &status);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

void it_read_report(int fd, it_waiter_report *r, int64_t timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, (int)timeout_ms), 1);
    assert_int_equal(read(fd, r, sizeof *r), (ssize_t)sizeof *r);
}

it_held it_keep(const dlock_lock *l)
{
    it_held h = {.fence = dlock_fence(l)};
    memcpy(h.token, dlock_token(l), DLOCK_TOKEN_LEN);
    return h;
}
