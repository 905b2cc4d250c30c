/*
 * test_cli_errors.c: how the dlock command fails, against real redis-server processes:
 * usage errors (64) that reach no server, one server down and three (69), a wrong or
 * missing password (77, never printed), malformed server lists and rediss://
 * parameters (64), SIGINT ending a wait (75, the holder's lock untouched) and a closed
 * stdout (70, the lock not left held). Its commands that succeed: test_cli.c.
 *
 * Checked exactly: the exit codes, nothing on stdout, every failure being one line on
 * stderr that starts with "dlock: " (after the library's warnings where a password is
 * missing), and what the keys on the server look like afterwards. Timing only orders
 * events (DLOCK_TEST_SLACK scales the few bounds).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- running the command ---------------------------------------------------- */

typedef it_run run;

/* Run the CLI against it_srv (no password from the caller's shell) with the
 * NULL-terminated arguments that follow. */
#define RUN(r, ...) it_cli((r), it_cli_env(&it_srv), NULL, __VA_ARGS__, (const char *)NULL)

#define ARGS_MAX 32

/* ---- usage ------------------------------------------------------------------ */

static void test_usage_errors(void **state)
{
    (void)state;
    run r;
    RUN(&r, "acquire", "-t", "0", "cli-use");
    it_expect_failure(&r, 64, "TTL", true);
    RUN(&r, "acquire", "-t", "5x", "cli-use");
    it_expect_failure(&r, 64, "unit", true);
    RUN(&r, "acquire", "-t", "-1s", "cli-use");
    it_expect_failure(&r, 64, "negative", true);
    RUN(&r, "acquire", "-t", "1.5ms", "cli-use");
    it_expect_failure(&r, 64, "1 ms", true);
    RUN(&r, "acquire", "-t", "5ms", "cli-use");
    it_expect_failure(&r, 64, "10ms", true);
    RUN(&r, "acquire", "-t", "25d", "cli-use");
    it_expect_failure(&r, 64, NULL, true);
    RUN(&r, "acquire", "-w", "soon", "cli-use");
    it_expect_failure(&r, 64, "WAIT", true);
    RUN(&r, "acquire", "-w", "nan", "cli-use");
    it_expect_failure(&r, 64, NULL, true);
    RUN(&r, "acquire", "-t");
    it_expect_failure(&r, 64, "-t", true);
    RUN(&r, "acquire");
    it_expect_failure(&r, 64, "NAME", true);
    RUN(&r, "acquire", "a", "b");
    it_expect_failure(&r, 64, "\"b\"", true);
    RUN(&r, "release", "cli-use");
    it_expect_failure(&r, 64, "TOKEN", true);
    RUN(&r, "release", "-t", "5s", "cli-use", "0123456789abcdef0123456789abcdef");
    it_expect_failure(&r, 64, "-t", true);
    RUN(&r, "release", "cli-use", "not-a-token");
    it_expect_failure(&r, 64, NULL, true);
    RUN(&r, "status");
    it_expect_failure(&r, 64, NULL, true);
    RUN(&r, "frobnicate", "x");
    it_expect_failure(&r, 64, "frobnicate", true);
    RUN(&r, "run", "cli-use", "true"); /* no "--" before the command */
    it_expect_failure(&r, 64, NULL, true);
    RUN(&r, "--no-such-option", "status", "x");
    it_expect_failure(&r, 64, "--no-such-option", true);
    it_cli(&r, it_cli_env(&it_srv), NULL, (const char *)NULL); /* no command at all */
    it_expect_failure(&r, 64, NULL, true);
    RUN(&r, "status", "");
    it_expect_failure(&r, 64, NULL, true);
    /* None of this reached the server. */
    assert_false(it_lock_exists(&it_srv, "cli-use"));
}

/* ---- servers down or refusing ----------------------------------------------- */

static void test_server_down(void **state)
{
    (void)state;
    /* A port that was just ours and is certainly closed now. */
    dh_server gone;
    assert_int_equal(dh_server_start(&gone, NULL), 0);
    dh_server_kill(&gone);
    run r;
    /* Unreachable ends a wait, even the default "forever" one. */
    int64_t start = dh_now_ms();
    RUN(&r, "-s", gone.url, "acquire", "cli-down");
    it_expect_failure(&r, 69, "acquire cli-down: ", true);
    assert_true(dh_now_ms() - start < 10000 * dh_slack());
    RUN(&r, "-s", gone.url, "status", "cli-down");
    it_expect_failure(&r, 69, NULL, true);
    RUN(&r, "-s", gone.url, "release", "cli-down", "0123456789abcdef0123456789abcdef");
    it_expect_failure(&r, 69, NULL, true);
    RUN(&r, "-s", gone.url, "extend", "cli-down", "0123456789abcdef0123456789abcdef");
    it_expect_failure(&r, 69, NULL, true);

    /* Three servers, all down: no quorum, still 69. */
    char list[512];
    snprintf(list, sizeof list, "%s,redis://127.0.0.1:1,redis://127.0.0.1:2", gone.url);
    RUN(&r, "-s", list, "acquire", "-w", "0", "cli-down");
    it_expect_failure(&r, 69, NULL, true);
    dh_server_stop(&gone);
}

static void test_auth(void **state)
{
    (void)state;
    char servers[160], right[80], wrong[80];
    snprintf(servers, sizeof servers, "DLOCK_SERVERS=%s", it_auth_srv.url);
    snprintf(right, sizeof right, "DLOCK_PASSWORD=%s", IT_PASSWORD);
    snprintf(wrong, sizeof wrong, "DLOCK_PASSWORD=not-%s", IT_PASSWORD);
    const char *const env_right[] = {servers, right, NULL};
    const char *const env_wrong[] = {servers, wrong, NULL};
    const char *const env_none[] = {servers, "DLOCK_PASSWORD", NULL};

    run r;
    it_cli(&r, env_right, NULL, "acquire", "-w", "0", "cli-auth", (const char *)NULL);
    it_expect_status(&r, 0);
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t fence;
    it_parse_token_line(r.out, token, &fence);
    it_cli(&r, env_right, NULL, "status", "cli-auth", (const char *)NULL);
    it_expect_status(&r, 0);

    it_cli(&r, env_wrong, NULL, "status", "cli-auth", (const char *)NULL);
    it_expect_failure(&r, 77, NULL, true);
    assert_null(strstr(r.err, IT_PASSWORD)); /* the password is never printed */
    it_cli(&r, env_wrong, NULL, "acquire", "cli-auth", (const char *)NULL);
    it_expect_failure(&r, 77, NULL, true);
    it_cli(&r, env_wrong, NULL, "release", "cli-auth", token, (const char *)NULL);
    it_expect_failure(&r, 77, NULL, true);

    /* No password at all: refused too (a warning may precede the error line). */
    it_cli(&r, env_none, NULL, "status", "cli-auth", (const char *)NULL);
    it_expect_failure(&r, 77, NULL, false);

    /* The password in the URL works the same, and a wrong one is not echoed. */
    char url[200];
    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d", IT_PASSWORD, it_auth_srv.port);
    it_cli(&r, env_none, NULL, "-s", url, "status", "cli-auth", (const char *)NULL);
    it_expect_status(&r, 0);
    snprintf(url, sizeof url, "redis://:wrong-%s@127.0.0.1:%d", IT_PASSWORD, it_auth_srv.port);
    it_cli(&r, env_none, NULL, "-s", url, "status", "cli-auth", (const char *)NULL);
    it_expect_failure(&r, 77, NULL, true);
    assert_null(strstr(r.err, IT_PASSWORD));

    it_cli(&r, env_right, NULL, "release", "cli-auth", token, (const char *)NULL);
    it_expect_status(&r, 0);
}

static void test_rediss_refused(void **state)
{
    (void)state;
    run r;
    /* rediss:// parameters are checked before anything connects: a usage error. */
    RUN(&r, "-s", "rediss://127.0.0.1:6380?verify=1", "status", "cli-tls");
    it_expect_failure(&r, 64, "unknown parameter", true);
    const char *const env[] = {"DLOCK_SERVERS=rediss://:pw@127.0.0.1:6380?cacert=/nonexistent",
                               NULL};
    it_cli(&r, env, NULL, "acquire", "cli-tls", (const char *)NULL);
    it_expect_failure(&r, 64, "cacert /nonexistent", true);
    /* Other malformed lists are usage errors too, naming the bad part. */
    RUN(&r, "-s", "redis://127.0.0.1:0", "status", "cli-tls");
    it_expect_failure(&r, 64, "port", true);
    RUN(&r, "-s", "redis://alice@127.0.0.1", "status", "cli-tls");
    it_expect_failure(&r, 64, NULL, true);
}

/* ---- signals and closed output ---------------------------------------------- */

/* Start the CLI with args, DLOCK_SERVERS set to the plain server, stderr into a pipe
 * (*err_fd) and stdout to stdout_fd (-1: /dev/null). */
static pid_t spawn_cli(const char *const args[], int stdout_fd, int *err_fd)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    const char *argv[ARGS_MAX + 2];
    int n = 0;
    argv[n++] = dh_cli_path();
    for (; args[n - 1] != NULL; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(stdout_fd >= 0 ? stdout_fd : null, 1);
        dup2(p[1], 2);
        /* A SIGINT ignored by whoever started the tests would stay ignored (the CLI
         * keeps inherited SIG_IGN, as nohup needs): start from the default. */
        signal(SIGINT, SIG_DFL);
        setenv("DLOCK_SERVERS", it_srv.url, 1);
        unsetenv("DLOCK_PASSWORD");
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    close(p[1]);
    *err_fd = p[0];
    return pid;
}

static int wait_status(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        assert_int_equal(errno, EINTR);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void read_all(int fd, char *buf, size_t len)
{
    size_t n = 0;
    ssize_t k;
    while (n + 1 < len && (k = read(fd, buf + n, len - n - 1)) != 0) {
        if (k < 0) {
            assert_int_equal(errno, EINTR);
            continue;
        }
        n += (size_t)k;
    }
    buf[n] = '\0';
    close(fd);
}

static void test_sigint_cancels_wait(void **state)
{
    (void)state;
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t fence;
    it_cli_acquire("cli-sig", "60s", token, &fence);

    long long before = it_connected_clients(&it_srv);
    /* A long wait rather than forever, so that a broken cancel fails the test (by its
     * message and timing below) instead of hanging it. */
    static const char *const args[] = {"acquire", "-w", "120s", "cli-sig", NULL};
    int err_fd;
    pid_t pid = spawn_cli(args, -1, &err_fd);
    /* Once the waiter is connected it is past installing its handler (it connects on
     * its first attempt): only then is SIGINT a cancellation and not a plain kill. */
    int64_t deadline = dh_now_ms() + 10000 * dh_slack();
    while (it_connected_clients(&it_srv) <= before) {
        assert_true(dh_now_ms() < deadline);
        dh_sleep_ms(10);
    }
    dh_sleep_ms(100);
    int64_t sent = dh_now_ms();
    assert_int_equal(kill(pid, SIGINT), 0);
    int status = wait_status(pid);
    char err[2048];
    read_all(err_fd, err, sizeof err);
    if (status != 75)
        fail_msg("exit %d, want 75; stderr: %s", status, err);
    assert_true(dh_now_ms() - sent < 5000 * dh_slack());
    assert_non_null(strstr(err, "canceled"));
    assert_int_equal(strncmp(err, "dlock: ", 7), 0);
    assert_true(strchr(err, '\n') == err + strlen(err) - 1);

    /* The holder's lock is untouched. */
    it_expect_holder(&it_srv, "cli-sig", token);
    run r;
    RUN(&r, "release", "cli-sig", token);
    it_expect_status(&r, 0);
}

/* A server that goes away during an endless wait ends it too, with 69, about the
 * connect timeout after its going, as one that was gone before the wait does: the
 * queued waiter's refreshes, which are all it sends while the holder keeps its lease,
 * meet the outage as its attempts do. It waited on before. */
static void test_server_gone_while_waiting(void **state)
{
    (void)state;
    dh_server s;
    assert_int_equal(dh_server_start(&s, NULL), 0);
    run r;
    RUN(&r, "-s", s.url, "acquire", "-t", "60s", "cli-gone");
    it_expect_status(&r, 0);
    long long before = it_connected_clients(&s);
    const char *const args[] = {"-s", s.url, "acquire", "cli-gone", NULL}; /* WAIT: forever */
    int err_fd;
    pid_t pid = spawn_cli(args, -1, &err_fd);
    int64_t deadline = dh_now_ms() + 10000 * dh_slack();
    while (it_connected_clients(&s) <= before) {
        assert_true(dh_now_ms() < deadline);
        dh_sleep_ms(10);
    }
    dh_sleep_ms(200); /* queued, and waiting */
    int64_t gone = dh_now_ms();
    dh_server_kill(&s);
    int st = 0;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (dh_now_ms() - gone > 10000 * dh_slack()) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fail_msg("still waiting %d ms after its only server went away",
                     (int)(dh_now_ms() - gone));
        }
        dh_sleep_ms(10);
    }
    char err[2048];
    read_all(err_fd, err, sizeof err);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 69)
        fail_msg("status %d, want exit 69; stderr: %s", st, err);
    assert_non_null(strstr(err, "acquire cli-gone: "));
    dh_server_stop(&s);
}

static void test_closed_stdout_releases(void **state)
{
    (void)state;
    /* A pipe with no reader: printing the token fails with EPIPE. The token would be
     * lost, so the command must not leave the lock held. */
    int p[2];
    assert_int_equal(pipe(p), 0);
    close(p[0]);
    static const char *const args[] = {"acquire", "-w", "0", "cli-epipe", NULL};
    int err_fd;
    pid_t pid = spawn_cli(args, p[1], &err_fd);
    close(p[1]);
    int status = wait_status(pid);
    char err[2048];
    read_all(err_fd, err, sizeof err);
    if (status != 70)
        fail_msg("exit %d, want 70; stderr: %s", status, err);
    assert_true(strchr(err, '\n') == err + strlen(err) - 1);
    assert_false(it_lock_exists(&it_srv, "cli-epipe"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_server_down),
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_rediss_refused),
        cmocka_unit_test(test_sigint_cancels_wait),
        cmocka_unit_test(test_server_gone_while_waiting),
        cmocka_unit_test(test_closed_stdout_releases),
    };
    return cmocka_run_group_tests(tests, it_srv_auth_setup, it_srv_auth_teardown);
}
