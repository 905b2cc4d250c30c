/*
 * test_run.c: `dlock run` against a real redis-server (its manual is docs/dlock.1.md):
 * the lock held through a CMD longer than the lease, and lost (its key deleted, the
 * server paused) with CMD stopped before the lease ends, the kill after GRACE; usage
 * errors; help. What CMD gets (its exit status, environment, descriptors, signals) and
 * runs that do not get the lock: test_run_cmd.c.
 *
 * What is checked exactly: exit codes, what CMD saw (signals, recorded by CMD itself in
 * files), and the lock key on the server before, during and after. Liveness bounds (how
 * soon a loss stops CMD, how soon dlock exits) are multiplied by DLOCK_TEST_SLACK. One
 * ordering is not a liveness bound and is asserted as it is: CMD must be dead before its
 * lease ends on the server.
 *
 * It also checks that the man page (docs/dlock.1 and docs/dlock.1.md) names every
 * command and exit code that `dlock --help` lists.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- the lock from outside ------------------------------------------------------ */

/* The key's absolute expiry in unix ms (server's clock; -2 missing). */
static long long key_expiretime(const char *name)
{
    char key[256];
    it_key(key, sizeof key, name);
    return it_int_reply(dh_cmd(&it_srv, "PEXPIRETIME %s", key));
}

static void wait_for_key(const char *name, int64_t timeout_ms)
{
    int64_t deadline = dh_now_ms() + timeout_ms * dh_slack();
    while (it_lock_exists(&it_srv, name) != 1) {
        if (dh_now_ms() > deadline)
            fail_msg("lock %s was not taken within %lld ms", name, (long long)timeout_ms);
        dh_sleep_ms(5);
    }
}

/* ---- running dlock --------------------------------------------------------------- */

typedef it_run run;

/* Run dlock against it_srv with the arguments that follow to the end. */
#define RUN(r, ...) it_cli((r), it_cli_env(&it_srv), NULL, __VA_ARGS__, (const char *)NULL)

/* Delete lock name's key behind the back of the `dlock run` in b, wait for that run
 * to exit with 73 (the lock was lost), and return how long after the DEL it did. */
static int64_t delete_lock_and_wait(it_bg *b, const char *name)
{
    char key[256];
    it_key(key, sizeof key, name);
    int64_t deleted = dh_now_ms();
    it_del(&it_srv, key);
    int status = it_bg_wait(b, 20000);
    int64_t elapsed = dh_now_ms() - deleted;
    it_bg_expect(b, status, 73);
    return elapsed;
}

/* A pid that CMD wrote to a file is gone (not even a zombie of ours: CMD's children
 * are reparented and reaped by init once CMD is gone). */
static void expect_gone(pid_t pid)
{
    int64_t deadline = dh_now_ms() + 2000 * dh_slack();
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/%d/stat", (int)pid);
    for (;;) {
        char *st = it_slurp(proc);
        /* "pid (comm) S ...": gone, or a zombie nobody has reaped yet. */
        const char *rp = strrchr(st, ')');
        bool alive = rp != NULL && rp[1] == ' ' && rp[2] != 'Z';
        free(st);
        if (!alive)
            return;
        if (dh_now_ms() > deadline)
            fail_msg("process %d outlived dlock run", (int)pid);
        dh_sleep_ms(10);
    }
}

static pid_t read_pid(const char *file)
{
    char *s = it_slurp(file);
    long v = strtol(s, NULL, 10);
    free(s);
    assert_true(v > 1);
    return (pid_t)v;
}

/* ---- holding the lock ---------------------------------------------------------------- */

static void test_holds_while_cmd_runs(void **state)
{
    (void)state;
    /* A 1 s lease held for 6 s: it must be renewed about every 333 ms. */
    it_bg b;
    it_bg_spawn(&b, "hold", "run", "-t", "1s", "run-hold", "--", "sleep", "6", (const char *)NULL);
    wait_for_key("run-hold", 2000);
    /* Checked from when the lock was seen held (CMD runs 6 s from about then), for
     * over three leases; the last check may end late (a busy machine starts a dlock
     * slowly), so CMD outlasts the window by 2.7 s. What proves renewal is a check
     * that found the lock still held more than two leases after it was taken. */
    int64_t held_ms = dh_now_ms(), last_ms = held_ms;
    int checks = 0;
    while (dh_now_ms() - held_ms < 3300) {
        run r;
        RUN(&r, "acquire", "-w", "0", "run-hold");
        it_expect_status(&r, 75);                           /* held by the run, every time */
        long long pttl = it_lock_pttl(&it_srv, "run-hold"); /* renewed to 1 s, never to more: */
        if (pttl <= 0 || pttl > 1000)
            fail_msg("PTTL %lld %lld ms after it was seen held", pttl, dh_now_ms() - held_ms);
        checks++;
        last_ms = dh_now_ms();
        dh_sleep_ms(600);
    }
    assert_true(checks >= 3);
    assert_true(last_ms - held_ms >= 2000);
    int status = it_bg_wait(&b, 6000 + 5000);
    it_bg_expect(&b, status, 0);
    char *err = it_slurp(b.err);
    assert_string_equal(err, ""); /* not a terminal: no status line, no noise */
    free(err);
    assert_true(dh_now_ms() - b.started_ms >= 4000);
    /* Released at the end, not left to expire. */
    assert_int_equal(it_lock_exists(&it_srv, "run-hold"), 0);
    run r;
    RUN(&r, "status", "run-hold");
    it_expect_status(&r, 0);
    assert_non_null(strstr(r.out, "run-hold: free"));
}

/* A run that waited moments for the lock is handed it, and starts CMD on the handoff's
 * message (docs/waiting.md): the validity it watches is its own 30 s lease, which the
 * confirmation proved, not the handoff's, so CMD is not stopped for a renewal that
 * seemed late. */
static void test_runs_when_handed_the_lock(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, it_timeout_ms());
    dlock_lock *l = it_acquire(c, "run-handed", 30000);
    it_bg b;
    it_bg_spawn(&b, "handed", "run", "-w", "10s", "-t", "30s", "run-handed", "--", "sleep", "1",
                (const char *)NULL);
    it_wait_queued_on(&it_srv, 1, "run-handed", 1);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    int status = it_bg_wait(&b, 10000 * dh_slack());
    it_bg_expect(&b, status, 0);
    char *err = it_slurp(b.err);
    assert_string_equal(err, "");
    free(err);
    dlock_client_free(c);
}

/* ---- losing the lock ------------------------------------------------------------------- */

static void test_lost_when_key_deleted(void **state)
{
    (void)state;
    const int64_t ttl = 3000;
    char script[2048];
    snprintf(script, sizeof script,
             "trap 'echo TERM >> %s; exit 143' TERM; sleep 30 & echo $! > %s; echo ready > %s; "
             "wait",
             it_run_file("del.rec"), it_run_file("del.bgpid"), it_run_file("del.ready"));
    it_bg b;
    it_bg_spawn(&b, "del", "run", "-t", "3s", "run-del", "--", "sh", "-c", script,
                (const char *)NULL);
    it_wait_for_file(it_run_file("del.ready"), 5000);
    pid_t bgpid = read_pid(it_run_file("del.bgpid"));

    int64_t elapsed = delete_lock_and_wait(&b, "run-del");
    /* The next renewal (within ttl/3) finds the key gone: lost at once, SIGTERM, and
     * CMD exits on it; well within the next renewal plus one lease. */
    if (elapsed >= (ttl / 3 + ttl) * dh_slack())
        fail_msg("dlock exited %lld ms after the DEL", (long long)elapsed);
    char *rec = it_slurp(it_run_file("del.rec"));
    assert_string_equal(rec, "TERM\n");
    free(rec);
    char *err = it_slurp(b.err);
    it_expect_one_line(err, "lost");
    assert_non_null(strstr(err, "run run-del: "));
    free(err);
    /* CMD's background child went with it (the whole group was signalled). */
    expect_gone(bgpid);
    assert_int_equal(it_lock_exists(&it_srv, "run-del"), 0);
}

static void test_kill_after_grace(void **state)
{
    (void)state;
    /* CMD catches -k USR1, records it, and goes on: SIGKILL must come after GRACE.
     * (Its sleeps die of USR1, which sh would report on stderr: sent elsewhere.) */
    char script[2048];
    snprintf(script, sizeof script,
             "exec 2>/dev/null; trap 'echo USR1 >> %s' USR1; echo $$ > %s; "
             "while :; do sleep 0.05; done",
             it_run_file("grace.rec"), it_run_file("grace.pid"));
    it_bg b;
    it_bg_spawn(&b, "grace", "run", "-t", "2s", "-k", "SIGUSR1", "-g", "400ms", "run-grace", "--",
                "sh", "-c", script, (const char *)NULL);
    it_wait_for_file(it_run_file("grace.pid"), 5000);
    pid_t cmd = read_pid(it_run_file("grace.pid"));
    int64_t elapsed = delete_lock_and_wait(&b, "run-grace");
    assert_true(elapsed >= 400); /* SIGKILL not before GRACE */
    if (elapsed >= (2000 / 3 + 400 + 1000) * dh_slack())
        fail_msg("dlock exited %lld ms after the DEL", (long long)elapsed);
    char *rec = it_slurp(it_run_file("grace.rec"));
    assert_non_null(strstr(rec, "USR1\n"));
    free(rec);
    char *err = it_slurp(b.err);
    it_expect_one_line(err, "SIGUSR1");
    free(err);
    expect_gone(cmd);
}

/* Server time (unix microseconds) at the start of a MONITOR line
 * "1700000000.123456 [0 127.0.0.1:1234] "evalsha" ...". */
static long long monitor_time_us(const char *line)
{
    char *end;
    long long sec = strtoll(line, &end, 10);
    assert_true(*end == '.');
    long long usec = strtoll(end + 1, NULL, 10);
    return sec * 1000000 + usec;
}

static long long realtime_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The server stops answering (SIGSTOP): no renewal can be confirmed, and dlock must
 * have CMD dead before the lease it last renewed ends on the server.
 *
 * How that is measured soundly. The lease's end is set by the last script call (an
 * acquire or a renewal, both EVALSHA, both setting a 2 s lease) that the server
 * executed before it stopped. A MONITOR connection opened beforehand lists every
 * executed command with the server's time (Redis 7.0 stamps a command as it starts,
 * and a script reads its clock after that, so "time + ttl" is not later than the
 * real expiry; we take 1 ms off all the same). Any command stamped before we resume the
 * server ran before the pause: a stopped server runs nothing. So
 *     lease end = last such EVALSHA + ttl,
 * exactly, whatever renewals or retries the library did. CMD ignores SIGTERM (only
 * SIGKILL ends it) and its death is observed through a pidfd (readable when it
 * exits, whoever its parent is), timed on CLOCK_REALTIME, the server's clock on this
 * same machine; observing late only makes the check stricter. The pause comes right
 * after the first renewal (seen as a change of PEXPIRETIME), so the lease that CMD
 * must not outlive is a renewed one. */
static void test_stopped_before_lease_ends_when_server_paused(void **state)
{
    (void)state;
    const long long ttl = 2000;
    redisContext *mon = dh_connect(&it_srv);
    assert_non_null(mon);
    redisReply *ok = redisCommand(mon, "MONITOR");
    assert_non_null(ok);
    freeReplyObject(ok);

    char script[2048];
    snprintf(script, sizeof script, "trap '' TERM; echo $$ > %s; exec sleep 30",
             it_run_file("pause.pid"));
    it_bg b;
    it_bg_spawn(&b, "pause", "run", "-t", "2s", "-g", "500ms", "run-pause", "--", "sh", "-c",
                script, (const char *)NULL);
    it_wait_for_file(it_run_file("pause.pid"), 5000);
    pid_t cmd = read_pid(it_run_file("pause.pid"));
    /* CMD's death is seen through a pidfd; where pidfd_open is missing (valgrind
     * 3.19 does not know it), by kill(cmd, 0) every 2 ms. */
    int pidfd = (int)syscall(SYS_pidfd_open, cmd, 0);
    assert_true(pidfd >= 0 || errno == ENOSYS);

    long long first = key_expiretime("run-pause");
    assert_true(first > 0);
    int64_t deadline = dh_now_ms() + 3000 * dh_slack();
    while (key_expiretime("run-pause") == first) {
        assert_true(dh_now_ms() < deadline);
        dh_sleep_ms(2);
    }
    dh_server_pause(&it_srv);
    int64_t paused = dh_now_ms();

    int n = 0;
    if (pidfd >= 0) {
        struct pollfd p = {.fd = pidfd, .events = POLLIN};
        n = poll(&p, 1, (int)(5000 * dh_slack()));
        close(pidfd);
    } else {
        int64_t until = dh_now_ms() + 5000 * dh_slack();
        while (kill(cmd, 0) == 0 && dh_now_ms() < until)
            dh_sleep_ms(2);
        n = kill(cmd, 0) < 0 && errno == ESRCH;
    }
    long long died = realtime_ms();
    /* dlock exits 73 while the server is still away: nothing may wait on it. */
    int status = it_bg_wait_or_kill(&b, n == 1 ? 6000 : 0);
    int64_t ran = dh_now_ms() - paused;
    long long resumed_us = realtime_ms() * 1000;
    dh_server_resume(&it_srv);
    if (n != 1)
        fail_msg("CMD still runs 5 s after the server stopped answering");
    if (status < 0)
        fail_msg("dlock still runs 6 s after the server stopped answering");

    /* The last script call the server ran before the pause. */
    struct timeval tv = {0, 500000};
    redisSetTimeout(mon, tv);
    long long last_us = 0;
    redisReply *line;
    while (redisGetReply(mon, (void **)&line) == REDIS_OK) {
        assert_int_equal(line->type, REDIS_REPLY_STATUS);
        long long t = monitor_time_us(line->str);
        bool script_call = strcasestr(line->str, "] \"evalsha\"") != NULL ||
                           strcasestr(line->str, "] \"eval\"") != NULL;
        freeReplyObject(line);
        if (t >= resumed_us)
            break;
        if (script_call)
            last_us = t;
    }
    redisFree(mon);
    assert_true(last_us > 0);
    long long lease_end = last_us / 1000 + ttl - 1;
    if (died >= lease_end)
        fail_msg("CMD died at %lld, %lld ms after its lease ended (%lld)", died, died - lease_end,
                 lease_end);
    printf("INFO CMD died %lld ms before its lease ended\n", lease_end - died);

    it_bg_expect(&b, status, 73);
    if (ran >= 6000 * dh_slack())
        fail_msg("dlock took %lld ms after the pause", (long long)ran);
    char *err = it_slurp(b.err);
    it_expect_one_line(err, "no renewal confirmed");
    free(err);
}

/* ---- usage ------------------------------------------------------------------------------ */

static void test_usage_errors(void **state)
{
    (void)state;
    run r;
    RUN(&r, "run", "-t", "1s", "-g", "500ms", "run-use", "--", "true"); /* GRACE >= TTL/2 */
    it_expect_status(&r, 64);
    it_expect_one_line(r.err, "GRACE");
    RUN(&r, "run", "-g", "15s", "run-use", "--", "true"); /* default TTL 30s */
    it_expect_status(&r, 64);
    RUN(&r, "run", "-g", "soon", "run-use", "--", "true");
    it_expect_status(&r, 64);
    it_expect_one_line(r.err, "GRACE");
    RUN(&r, "run", "-t", "100ms", "run-use", "--", "true"); /* no room for a renewal */
    it_expect_status(&r, 64);
    it_expect_one_line(r.err, "too short");
    static const char *const bad_signals[] = {"FOO", "0",     "65",       "SIG",
                                              "-15", "TERM2", "RTMIN+99", ""};
    for (size_t i = 0; i < sizeof bad_signals / sizeof bad_signals[0]; i++) {
        RUN(&r, "run", "-k", bad_signals[i], "run-use", "--", "true");
        it_expect_status(&r, 64);
        it_expect_one_line(r.err, "SIGNAL");
    }
    RUN(&r, "run", "run-use", "true"); /* no "--" */
    it_expect_status(&r, 64);
    it_expect_one_line(r.err, "--");
    RUN(&r, "run", "run-use", "--"); /* no CMD */
    it_expect_status(&r, 64);
    it_expect_one_line(r.err, "CMD");
    RUN(&r, "run", "run-use");
    it_expect_status(&r, 64);
    RUN(&r, "run", "--", "true"); /* no NAME */
    it_expect_status(&r, 64);
    it_expect_one_line(r.err, "NAME");
    RUN(&r, "run", "a", "b", "--", "true");
    it_expect_status(&r, 64);
    RUN(&r, "run", "-k");
    it_expect_status(&r, 64);
    RUN(&r, "run", "--no-such", "run-use", "--", "true");
    it_expect_status(&r, 64);
    /* None of it reached CMD or the server. */
    assert_int_equal(it_lock_exists(&it_srv, "run-use"), 0);
    assert_int_equal(it_lock_exists(&it_srv, "a"), 0);

    /* What is accepted: names in any case, with or without SIG, and numbers. */
    static const char *const good_signals[] = {"TERM", "sigint", "SIGHUP",  "kill",
                                               "USR1", "9",      "RTMIN+1", "rtmax"};
    for (size_t i = 0; i < sizeof good_signals / sizeof good_signals[0]; i++) {
        RUN(&r, "run", "-k", good_signals[i], "-g", "0", "run-use", "--", "true");
        it_expect_status(&r, 0);
    }
}

/* ---- help and the man page --------------------------------------------------------------- */

#ifndef DLOCK_SOURCE_DIR
#error "cli.cmake defines DLOCK_SOURCE_DIR"
#endif

/* Both man page files carry an entry: md_want in the Markdown source (md), roff_want
 * in the roff page (roff). */
static void expect_in_man(const char *md, const char *md_want, const char *roff,
                          const char *roff_want)
{
    if (strstr(md, md_want) == NULL)
        fail_msg("docs/dlock.1.md lacks \"%s\"", md_want + 1);
    if (strstr(roff, roff_want) == NULL)
        fail_msg("docs/dlock.1 lacks \"%s\"", roff_want + 1);
}

static void test_help_and_man_page(void **state)
{
    (void)state;
    run r;
    RUN(&r, "run", "--help");
    it_expect_status(&r, 0);
    assert_non_null(strstr(r.out, "Usage: dlock [OPTIONS] run"));
    assert_non_null(strstr(r.out, "GRACE"));
    assert_non_null(strstr(r.out, "max(100ms, TTL/20)"));
    RUN(&r, "--help");
    it_expect_status(&r, 0);
    assert_non_null(strstr(r.out, "\n  run "));

    /* Every command and exit code the help lists is in both man page files. */
    char *md = it_slurp(DLOCK_SOURCE_DIR "/docs/dlock.1.md");
    char *roff = it_slurp(DLOCK_SOURCE_DIR "/docs/dlock.1");
    assert_true(strlen(md) > 1000 && strlen(roff) > 1000);
    int commands = 0, codes = 0;
    const char *p = strstr(r.out, "\nCommands:\n");
    assert_non_null(p);
    for (p = strchr(p + 1, '\n') + 1; strncmp(p, "  ", 2) == 0; p = strchr(p, '\n') + 1) {
        if (p[2] < 'a' || p[2] > 'z')
            continue; /* a continuation line */
        char cmd[32];
        size_t n = strcspn(p + 2, " \n");
        assert_true(n < sizeof cmd);
        memcpy(cmd, p + 2, n);
        cmd[n] = '\0';
        char md_want[64], roff_want[64];
        snprintf(md_want, sizeof md_want, "\n### %s\n", cmd);
        snprintf(roff_want, sizeof roff_want, "\n.SS %s\n", cmd);
        expect_in_man(md, md_want, roff, roff_want);
        commands++;
    }
    p = strstr(r.out, "\nExit status:\n");
    assert_non_null(p);
    for (p = strchr(p + 1, '\n') + 1; strncmp(p, "  ", 2) == 0; p = strchr(p, '\n') + 1) {
        int code = atoi(p + 2);
        char md_want[32], roff_want[32];
        snprintf(md_want, sizeof md_want, "\n- **%d**", code);
        snprintf(roff_want, sizeof roff_want, "\n.B %d\n", code);
        expect_in_man(md, md_want, roff, roff_want);
        codes++;
    }
    assert_true(commands >= 5 && codes >= 9);
    free(md);
    free(roff);

    /* The roff is well-formed, when groff is there to say so (it is not a build
     * dependency: man-db brings it on most machines). */
    if (access("/usr/bin/groff", X_OK) == 0) {
        const char *argv[] = {
            "/usr/bin/groff", "-man", "-ww", "-z", DLOCK_SOURCE_DIR "/docs/dlock.1", NULL};
        char out[4096], err[4096];
        int st = dh_run(argv, NULL, out, sizeof out, err, sizeof err);
        if (st != 0 || err[0] != '\0')
            fail_msg("groff -man -ww: exit %d: %s", st, err);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_holds_while_cmd_runs),
        cmocka_unit_test(test_runs_when_handed_the_lock),
        cmocka_unit_test(test_lost_when_key_deleted),
        cmocka_unit_test(test_kill_after_grace),
        cmocka_unit_test(test_stopped_before_lease_ends_when_server_paused),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_help_and_man_page),
    };
    return cmocka_run_group_tests(tests, it_srv_local_setup, it_srv_local_teardown);
}
