/*
 * test_run_cmd.c: what the CMD of `dlock run` gets, against a real redis-server: its
 * exit status passed through (a signal's as 128 + N; its own options left to it), exec
 * failures (127, 126) that leave no lock behind, its environment (DLOCK_NAME,
 * DLOCK_TOKEN, DLOCK_FENCE; a stale DLOCK_TOKEN of dlock's own not passed on), no
 * descriptor of dlock's, SIGTERM, SIGINT and SIGHUP forwarded to it; and runs that do
 * not get the lock (exit 75: busy with -w 0, a bounded wait run out, a wait canceled by
 * SIGTERM), where CMD never runs. The lock held and lost, usage errors and the man page:
 * test_run.c.
 *
 * What is checked exactly: exit codes, what CMD saw (environment, signals, recorded by
 * CMD itself in files), the lock key on the server, the other holder's lock untouched.
 * Bounds on how soon dlock exits are multiplied by DLOCK_TEST_SLACK.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- files --------------------------------------------------------------------- */

static void write_file(const char *file, const char *text, mode_t mode)
{
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(chmod(file, mode), 0);
}

/* ---- running dlock --------------------------------------------------------------- */

typedef it_run run;

/* Run dlock against it_srv with the arguments that follow to the end. */
#define RUN(r, ...) it_cli((r), it_cli_env(&it_srv), NULL, __VA_ARGS__, (const char *)NULL)

/* ---- CMD's status, environment, signals ------------------------------------------------- */

static void test_exit_status_passthrough(void **state)
{
    (void)state;
    run r;
    RUN(&r, "run", "run-st", "--", "sh", "-c", "exit 3");
    it_expect_status(&r, 3);
    assert_string_equal(r.err, "");
    assert_int_equal(it_lock_exists(&it_srv, "run-st"), 0);
    RUN(&r, "run", "run-st", "--", "true");
    it_expect_status(&r, 0);
    RUN(&r, "run", "run-st", "--", "sh", "-c", "kill -TERM $$");
    it_expect_status(&r, 128 + SIGTERM);
    RUN(&r, "run", "run-st", "--", "sh", "-c", "kill -KILL $$");
    it_expect_status(&r, 128 + SIGKILL);
    assert_int_equal(it_lock_exists(&it_srv, "run-st"), 0);
    /* CMD's own options are CMD's, even ones dlock also has. */
    RUN(&r, "run", "run-st", "--", "sh", "-c", "echo \"$*\"", "sh", "-t", "1s", "-h", "--");
    it_expect_status(&r, 0);
    assert_string_equal(r.out, "-t 1s -h --\n");
}

static void test_exec_failures(void **state)
{
    (void)state;
    run r;
    RUN(&r, "run", "run-exec", "--", "dlock-test-no-such-command");
    it_expect_status(&r, 127);
    it_expect_one_line(r.err, "dlock-test-no-such-command");
    RUN(&r, "run", "run-exec", "--", it_run_file("missing/file"));
    it_expect_status(&r, 127);
    it_expect_one_line(r.err, "No such file");

    const char *plainfile = it_run_file("not-executable");
    write_file(plainfile, "#!/bin/sh\nexit 0\n", 0644);
    RUN(&r, "run", "run-exec", "--", plainfile);
    it_expect_status(&r, 126);
    it_expect_one_line(r.err, "Permission denied");
    RUN(&r, "run", "run-exec", "--", it_local_dir); /* a directory */
    it_expect_status(&r, 126);
    it_expect_one_line(r.err, NULL);
    /* Never ran, never left the lock behind. */
    assert_int_equal(it_lock_exists(&it_srv, "run-exec"), 0);
}

static void test_environment(void **state)
{
    (void)state;
    run r;
    /* A stale value in dlock's own environment must not reach CMD. */
    const char *argv[] = {dh_cli_path(),
                          "run",
                          "run-env",
                          "--",
                          "sh",
                          "-c",
                          "printf '%s|%s|%s' \"$DLOCK_NAME\" \"$DLOCK_TOKEN\" \"$DLOCK_FENCE\"",
                          NULL};
    const char *env[] = {it_cli_env(&it_srv)[0], "DLOCK_PASSWORD", "DLOCK_TOKEN=stale", NULL};
    memset(&r, 0, sizeof r);
    r.status = dh_run(argv, env, r.out, sizeof r.out, r.err, sizeof r.err);
    it_expect_status(&r, 0);
    char *bar = strchr(r.out, '|');
    assert_non_null(bar);
    assert_memory_equal(r.out, "run-env|", 8);
    const char *token = bar + 1;
    for (int i = 0; i < DLOCK_TOKEN_LEN; i++)
        if (!((token[i] >= '0' && token[i] <= '9') || (token[i] >= 'a' && token[i] <= 'f')))
            fail_msg("DLOCK_TOKEN is not 32 hex characters: %s", r.out);
    assert_int_equal(token[DLOCK_TOKEN_LEN], '|');
    char *end;
    unsigned long long fence = strtoull(token + DLOCK_TOKEN_LEN + 1, &end, 10);
    assert_true(fence > 0 && *end == '\0');
    /* It is the fence this acquisition got: the name's counter on the server. */
    char fkey[256];
    it_fence_key(fkey, sizeof fkey, "run-env");
    char *counter = it_get(&it_srv, fkey);
    assert_non_null(counter);
    assert_int_equal(strtoull(counter, NULL, 10), fence);
    free(counter);
}

/* CMD inherits no descriptor of dlock's (its connections, its signal and timer
 * descriptors, the renewal's eventfds): the same shell run by dlock run and run
 * directly sees the same descriptors, each pointing at the same kind of file. */
static void test_no_descriptor_leaks_into_cmd(void **state)
{
    (void)state;
    static const char list[] = "cd /proc/$$/fd && for f in *; do printf '%s:%s ' \"$f\" "
                               "\"$(readlink \"$f\" | cut -d: -f1)\"; done";
    const char *direct[] = {"/bin/sh", "-c", list, NULL};
    run plain_run;
    memset(&plain_run, 0, sizeof plain_run);
    plain_run.status = dh_run(direct, it_cli_env(&it_srv), plain_run.out, sizeof plain_run.out,
                              plain_run.err, sizeof plain_run.err);
    it_expect_status(&plain_run, 0);
    run r;
    RUN(&r, "run", "run-fds", "--", "/bin/sh", "-c", list);
    it_expect_status(&r, 0);
    if (strcmp(r.out, plain_run.out) != 0)
        fail_msg("CMD under dlock run sees \"%s\", a plain run \"%s\"", r.out, plain_run.out);
}

static void forwarded(int sig, const char *name, int want_status)
{
    char script[2048], tag[32];
    snprintf(tag, sizeof tag, "sig-%s", name);
    char rec[600], ready[600];
    snprintf(rec, sizeof rec, "%s.rec", it_run_file(tag));
    snprintf(ready, sizeof ready, "%s.ready", it_run_file(tag));
    /* sh runs a trap only between commands: wait on a background sleep (killed by
     * the trap, since a non-interactive shell starts it with SIGINT ignored). */
    snprintf(
        script, sizeof script,
        "trap 'echo %s >> %s; kill $! 2>/dev/null; exit %d' %s; sleep 30 & echo ready > %s; wait",
        name, rec, want_status, name, ready);
    it_bg b;
    it_bg_spawn(&b, tag, "run", "run-sig", "--", "sh", "-c", script, (const char *)NULL);
    it_wait_for_file(ready, 5000);
    assert_int_equal(kill(b.pid, sig), 0);
    int status = it_bg_wait(&b, 5000);
    it_bg_expect(&b, status, want_status);
    char want[32];
    snprintf(want, sizeof want, "%s\n", name);
    char *got = it_slurp(rec);
    assert_string_equal(got, want);
    free(got);
    char *err = it_slurp(b.err);
    assert_string_equal(err, "");
    free(err);
    assert_int_equal(it_lock_exists(&it_srv, "run-sig"), 0);
}

static void test_signals_forwarded(void **state)
{
    (void)state;
    forwarded(SIGTERM, "TERM", 143);
    forwarded(SIGINT, "INT", 130);
    forwarded(SIGHUP, "HUP", 129);
}

/* Take lock name for 30 s with `dlock acquire`, as another owner would, and keep its
 * token (what the command prints) in token. */
static void hold_for_30s(run *r, const char *name, char token[DLOCK_TOKEN_LEN + 1])
{
    RUN(r, "acquire", "-t", "30s", "-w", "0", name);
    it_expect_status(r, 0);
    memcpy(token, r->out, DLOCK_TOKEN_LEN);
    token[DLOCK_TOKEN_LEN] = '\0';
}

static void test_busy_try_once(void **state)
{
    (void)state;
    run r;
    char token[DLOCK_TOKEN_LEN + 1];
    hold_for_30s(&r, "run-busy", token);

    int64_t start = dh_now_ms();
    RUN(&r, "run", "-w", "0", "run-busy", "--", "touch", it_run_file("busy.ran"));
    it_expect_status(&r, 75);
    assert_true(dh_now_ms() - start < 3000 * dh_slack());
    it_expect_one_line(r.err, "held by another owner");
    assert_int_equal(access(it_run_file("busy.ran"), F_OK), -1); /* CMD never ran */

    /* A bounded wait runs out the same way, not before WAIT. */
    start = dh_now_ms();
    RUN(&r, "run", "-w", "300ms", "run-busy", "--", "touch", it_run_file("busy.ran"));
    it_expect_status(&r, 75);
    assert_true(dh_now_ms() - start >= 300);
    assert_int_equal(access(it_run_file("busy.ran"), F_OK), -1);

    /* The holder's lock is untouched. */
    it_expect_holder(&it_srv, "run-busy", token);
    RUN(&r, "release", "run-busy", token);
    it_expect_status(&r, 0);
}

static void test_signal_cancels_wait(void **state)
{
    (void)state;
    run r;
    char token[DLOCK_TOKEN_LEN + 1];
    hold_for_30s(&r, "run-cancel", token);

    long long before = it_connected_clients(&it_srv);
    it_bg b;
    it_bg_spawn(&b, "cancel", "run", "-w", "60s", "run-cancel", "--", "touch",
                it_run_file("cancel.ran"), (const char *)NULL);
    /* Once it is connected it has set up its signals (before its first attempt); a
     * signal before that would kill it by the default action (exit 143, not 75). */
    int64_t deadline = dh_now_ms() + 10000 * dh_slack();
    while (it_connected_clients(&it_srv) <= before) {
        assert_true(dh_now_ms() < deadline);
        dh_sleep_ms(10);
    }
    dh_sleep_ms(50);
    assert_int_equal(kill(b.pid, SIGTERM), 0);
    int status = it_bg_wait(&b, 5000);
    it_bg_expect(&b, status, 75);
    char *err = it_slurp(b.err);
    it_expect_one_line(err, "canceled by SIGTERM");
    free(err);
    assert_int_equal(access(it_run_file("cancel.ran"), F_OK), -1);
    RUN(&r, "release", "run-cancel", token);
    it_expect_status(&r, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_status_passthrough),
        cmocka_unit_test(test_exec_failures),
        cmocka_unit_test(test_environment),
        cmocka_unit_test(test_no_descriptor_leaks_into_cmd),
        cmocka_unit_test(test_signals_forwarded),
        cmocka_unit_test(test_busy_try_once),
        cmocka_unit_test(test_signal_cancels_wait),
    };
    return cmocka_run_group_tests(tests, it_srv_local_setup, it_srv_local_teardown);
}
