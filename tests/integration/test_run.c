/*
 * test_run.c: `dlock run` against a real redis-server (its manual is docs/dlock.1.md).
 *
 * What is checked exactly: exit codes, what CMD saw (environment, signals, recorded
 * by CMD itself in files), and the lock key on the server before, during and after.
 * Liveness bounds (how soon a loss stops CMD, how soon dlock exits) are multiplied by
 * DLOCK_TEST_SLACK. One ordering is not a liveness bound and is asserted as it is:
 * CMD must be dead before its lease ends on the server.
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
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static dh_server plain;
static char tmpdir[512]; /* this group's files: CMD's records, dlock's output */

static int group_setup(void **state)
{
    (void)state;
    if (it_tmpdir(tmpdir, sizeof tmpdir, "test_run") != 0)
        return -1;
    return dh_server_start(&plain, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    dh_server_stop(&plain);
    it_tmpdir_remove(tmpdir);
    return 0;
}

/* ---- files --------------------------------------------------------------------- */

/* tmpdir/name (it_path). */
static const char *path(const char *name)
{
    return it_path(tmpdir, name);
}

static void write_file(const char *file, const char *text, mode_t mode)
{
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(chmod(file, mode), 0);
}

/* Wait until file exists and is not empty. */
static void wait_for_file(const char *file, int64_t timeout_ms)
{
    int64_t deadline = dh_now_ms() + timeout_ms * dh_slack();
    struct stat st;
    while (stat(file, &st) != 0 || st.st_size == 0) {
        if (dh_now_ms() > deadline)
            fail_msg("%s did not appear within %lld ms", file, (long long)timeout_ms);
        dh_sleep_ms(5);
    }
}

/* ---- the lock from outside ------------------------------------------------------ */

static long long key_exists(const char *name)
{
    char key[256];
    it_key(key, sizeof key, name);
    return it_exists(&plain, key);
}

static long long key_pttl(const char *name)
{
    char key[256];
    it_key(key, sizeof key, name);
    return it_pttl(&plain, key);
}

/* The key's absolute expiry in unix ms (server's clock; -2 missing). */
static long long key_expiretime(const char *name)
{
    char key[256];
    it_key(key, sizeof key, name);
    return it_int_reply(dh_cmd(&plain, "PEXPIRETIME %s", key));
}

static void wait_for_key(const char *name, int64_t timeout_ms)
{
    int64_t deadline = dh_now_ms() + timeout_ms * dh_slack();
    while (key_exists(name) != 1) {
        if (dh_now_ms() > deadline)
            fail_msg("lock %s was not taken within %lld ms", name, (long long)timeout_ms);
        dh_sleep_ms(5);
    }
}

/* ---- running dlock --------------------------------------------------------------- */

typedef it_run run;

#define ARGS_MAX 40

static const char *const *run_env(void)
{
    return it_cli_env(&plain);
}

/* The dlock command and the arguments of ap up to a NULL, into argv, for spawn(). */
static int collect(const char *argv[], va_list ap)
{
    int n = 0;
    argv[n++] = dh_cli_path();
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL) {
        assert_true(n <= ARGS_MAX);
        argv[n++] = a;
    }
    argv[n] = NULL;
    return n;
}

/* Run dlock with the arguments that follow (NULL-terminated) to the end. */
static void run_sync(run *r, ...)
{
    va_list ap;
    va_start(ap, r);
    it_cli_va(r, run_env(), NULL, ap);
    va_end(ap);
}
#define RUN(r, ...) run_sync((r), __VA_ARGS__, (const char *)NULL)

/* stderr is exactly one line, "dlock: ...", containing needle (NULL: anything). */
static void expect_one_line(const char *err, const char *needle)
{
    size_t len = strlen(err);
    if (len == 0 || err[len - 1] != '\n' || strchr(err, '\n') != err + len - 1)
        fail_msg("stderr is not one line: \"%s\"", err);
    if (strncmp(err, "dlock: ", 7) != 0)
        fail_msg("stderr does not start with \"dlock: \": %s", err);
    if (needle != NULL && strstr(err, needle) == NULL)
        fail_msg("stderr lacks \"%s\": %s", needle, err);
}

/* dlock started in the background, its stdout and stderr going to files. */
typedef struct bg {
    pid_t pid;
    int64_t started_ms;
    char out[600], err[600];
} bg;

static void spawn(bg *b, const char *tag, ...)
{
    const char *argv[ARGS_MAX + 2];
    va_list ap;
    va_start(ap, tag);
    collect(argv, ap);
    va_end(ap);
    snprintf(b->out, sizeof b->out, "%s", path(tag));
    strncat(b->out, ".out", sizeof b->out - strlen(b->out) - 1);
    snprintf(b->err, sizeof b->err, "%s", path(tag));
    strncat(b->err, ".err", sizeof b->err - strlen(b->err) - 1);
    b->started_ms = dh_now_ms();
    b->pid = fork();
    assert_true(b->pid >= 0);
    if (b->pid == 0) {
        int in = open("/dev/null", O_RDONLY);
        int out = open(b->out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int err = open(b->err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (in < 0 || out < 0 || err < 0)
            _exit(121);
        dup2(in, 0);
        dup2(out, 1);
        dup2(err, 2);
        /* Start from the default dispositions whatever ran the tests: dlock keeps
         * an inherited SIG_IGN (nohup), which would defeat the signal tests. */
        static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE};
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
            signal(sigs[i], SIG_DFL);
        setenv("DLOCK_SERVERS", plain.url, 1);
        unsetenv("DLOCK_PASSWORD");
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(122);
    }
}

/* Wait for b to exit, at most timeout_ms (times the slack). Returns its status as a
 * shell shows it, or -1 after killing it when it did not exit in time. */
static int bg_wait_or_kill(bg *b, int64_t timeout_ms)
{
    int64_t deadline = dh_now_ms() + timeout_ms * dh_slack();
    int st;
    for (;;) {
        pid_t p = waitpid(b->pid, &st, WNOHANG);
        if (p == b->pid)
            break;
        assert_true(p == 0 || errno == EINTR);
        if (dh_now_ms() > deadline) {
            kill(b->pid, SIGKILL);
            waitpid(b->pid, &st, 0);
            return -1;
        }
        dh_sleep_ms(2);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The same, failing the test on a timeout. */
static int bg_wait(bg *b, int64_t timeout_ms)
{
    int status = bg_wait_or_kill(b, timeout_ms);
    if (status < 0) {
        char *err = it_slurp(b->err);
        fail_msg("dlock did not exit within %lld ms; stderr: %s", (long long)timeout_ms, err);
    }
    return status;
}

static void bg_expect(bg *b, int status, int want)
{
    if (status != want) {
        char *out = it_slurp(b->out), *err = it_slurp(b->err);
        fail_msg("exit %d, want %d\nstdout: %s\nstderr: %s", status, want, out, err);
    }
}

/* Delete lock name's key behind the back of the `dlock run` in b, wait for that run
 * to exit with 73 (the lock was lost), and return how long after the DEL it did. */
static int64_t delete_lock_and_wait(bg *b, const char *name)
{
    char key[256];
    it_key(key, sizeof key, name);
    int64_t deleted = dh_now_ms();
    it_del(&plain, key);
    int status = bg_wait(b, 20000);
    int64_t elapsed = dh_now_ms() - deleted;
    bg_expect(b, status, 73);
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
    bg b;
    spawn(&b, "hold", "run", "-t", "1s", "run-hold", "--", "sleep", "6", (const char *)NULL);
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
        it_expect_status(&r, 75);              /* held by the run, every time */
        long long pttl = key_pttl("run-hold"); /* renewed to 1 s, never to more: */
        if (pttl <= 0 || pttl > 1000)
            fail_msg("PTTL %lld %lld ms after it was seen held", pttl, dh_now_ms() - held_ms);
        checks++;
        last_ms = dh_now_ms();
        dh_sleep_ms(600);
    }
    assert_true(checks >= 3);
    assert_true(last_ms - held_ms >= 2000);
    int status = bg_wait(&b, 6000 + 5000);
    bg_expect(&b, status, 0);
    char *err = it_slurp(b.err);
    assert_string_equal(err, ""); /* not a terminal: no status line, no noise */
    free(err);
    assert_true(dh_now_ms() - b.started_ms >= 4000);
    /* Released at the end, not left to expire. */
    assert_int_equal(key_exists("run-hold"), 0);
    run r;
    RUN(&r, "status", "run-hold");
    it_expect_status(&r, 0);
    assert_non_null(strstr(r.out, "run-hold: free"));
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
             path("del.rec"), path("del.bgpid"), path("del.ready"));
    bg b;
    spawn(&b, "del", "run", "-t", "3s", "run-del", "--", "sh", "-c", script, (const char *)NULL);
    wait_for_file(path("del.ready"), 5000);
    pid_t bgpid = read_pid(path("del.bgpid"));

    int64_t elapsed = delete_lock_and_wait(&b, "run-del");
    /* The next renewal (within ttl/3) finds the key gone: lost at once, SIGTERM, and
     * CMD exits on it; well within the next renewal plus one lease. */
    if (elapsed >= (ttl / 3 + ttl) * dh_slack())
        fail_msg("dlock exited %lld ms after the DEL", (long long)elapsed);
    char *rec = it_slurp(path("del.rec"));
    assert_string_equal(rec, "TERM\n");
    free(rec);
    char *err = it_slurp(b.err);
    expect_one_line(err, "lost");
    assert_non_null(strstr(err, "run run-del: "));
    free(err);
    /* CMD's background child went with it (the whole group was signalled). */
    expect_gone(bgpid);
    assert_int_equal(key_exists("run-del"), 0);
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
             path("grace.rec"), path("grace.pid"));
    bg b;
    spawn(&b, "grace", "run", "-t", "2s", "-k", "SIGUSR1", "-g", "400ms", "run-grace", "--", "sh",
          "-c", script, (const char *)NULL);
    wait_for_file(path("grace.pid"), 5000);
    pid_t cmd = read_pid(path("grace.pid"));
    int64_t elapsed = delete_lock_and_wait(&b, "run-grace");
    assert_true(elapsed >= 400); /* SIGKILL not before GRACE */
    if (elapsed >= (2000 / 3 + 400 + 1000) * dh_slack())
        fail_msg("dlock exited %lld ms after the DEL", (long long)elapsed);
    char *rec = it_slurp(path("grace.rec"));
    assert_non_null(strstr(rec, "USR1\n"));
    free(rec);
    char *err = it_slurp(b.err);
    expect_one_line(err, "SIGUSR1");
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
    redisContext *mon = dh_connect(&plain);
    assert_non_null(mon);
    redisReply *ok = redisCommand(mon, "MONITOR");
    assert_non_null(ok);
    freeReplyObject(ok);

    char script[2048];
    snprintf(script, sizeof script, "trap '' TERM; echo $$ > %s; exec sleep 30", path("pause.pid"));
    bg b;
    spawn(&b, "pause", "run", "-t", "2s", "-g", "500ms", "run-pause", "--", "sh", "-c", script,
          (const char *)NULL);
    wait_for_file(path("pause.pid"), 5000);
    pid_t cmd = read_pid(path("pause.pid"));
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
    dh_server_pause(&plain);
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
    int status = bg_wait_or_kill(&b, n == 1 ? 6000 : 0);
    int64_t ran = dh_now_ms() - paused;
    long long resumed_us = realtime_ms() * 1000;
    dh_server_resume(&plain);
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

    bg_expect(&b, status, 73);
    if (ran >= 6000 * dh_slack())
        fail_msg("dlock took %lld ms after the pause", (long long)ran);
    char *err = it_slurp(b.err);
    expect_one_line(err, "no renewal confirmed");
    free(err);
}

/* ---- CMD's status, environment, signals ------------------------------------------------- */

static void test_exit_status_passthrough(void **state)
{
    (void)state;
    run r;
    RUN(&r, "run", "run-st", "--", "sh", "-c", "exit 3");
    it_expect_status(&r, 3);
    assert_string_equal(r.err, "");
    assert_int_equal(key_exists("run-st"), 0);
    RUN(&r, "run", "run-st", "--", "true");
    it_expect_status(&r, 0);
    RUN(&r, "run", "run-st", "--", "sh", "-c", "kill -TERM $$");
    it_expect_status(&r, 128 + SIGTERM);
    RUN(&r, "run", "run-st", "--", "sh", "-c", "kill -KILL $$");
    it_expect_status(&r, 128 + SIGKILL);
    assert_int_equal(key_exists("run-st"), 0);
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
    expect_one_line(r.err, "dlock-test-no-such-command");
    RUN(&r, "run", "run-exec", "--", path("missing/file"));
    it_expect_status(&r, 127);
    expect_one_line(r.err, "No such file");

    const char *plainfile = path("not-executable");
    write_file(plainfile, "#!/bin/sh\nexit 0\n", 0644);
    RUN(&r, "run", "run-exec", "--", plainfile);
    it_expect_status(&r, 126);
    expect_one_line(r.err, "Permission denied");
    RUN(&r, "run", "run-exec", "--", tmpdir); /* a directory */
    it_expect_status(&r, 126);
    expect_one_line(r.err, NULL);
    /* Never ran, never left the lock behind. */
    assert_int_equal(key_exists("run-exec"), 0);
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
    const char *env[] = {run_env()[0], "DLOCK_PASSWORD", "DLOCK_TOKEN=stale", NULL};
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
    char *counter = it_get(&plain, fkey);
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
    plain_run.status = dh_run(direct, run_env(), plain_run.out, sizeof plain_run.out, plain_run.err,
                              sizeof plain_run.err);
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
    snprintf(rec, sizeof rec, "%s.rec", path(tag));
    snprintf(ready, sizeof ready, "%s.ready", path(tag));
    /* sh runs a trap only between commands: wait on a background sleep (killed by
     * the trap, since a non-interactive shell starts it with SIGINT ignored). */
    snprintf(
        script, sizeof script,
        "trap 'echo %s >> %s; kill $! 2>/dev/null; exit %d' %s; sleep 30 & echo ready > %s; wait",
        name, rec, want_status, name, ready);
    bg b;
    spawn(&b, tag, "run", "run-sig", "--", "sh", "-c", script, (const char *)NULL);
    wait_for_file(ready, 5000);
    assert_int_equal(kill(b.pid, sig), 0);
    int status = bg_wait(&b, 5000);
    bg_expect(&b, status, want_status);
    char want[32];
    snprintf(want, sizeof want, "%s\n", name);
    char *got = it_slurp(rec);
    assert_string_equal(got, want);
    free(got);
    char *err = it_slurp(b.err);
    assert_string_equal(err, "");
    free(err);
    assert_int_equal(key_exists("run-sig"), 0);
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
    RUN(&r, "run", "-w", "0", "run-busy", "--", "touch", path("busy.ran"));
    it_expect_status(&r, 75);
    assert_true(dh_now_ms() - start < 3000 * dh_slack());
    expect_one_line(r.err, "held by another owner");
    assert_int_equal(access(path("busy.ran"), F_OK), -1); /* CMD never ran */

    /* A bounded wait runs out the same way, not before WAIT. */
    start = dh_now_ms();
    RUN(&r, "run", "-w", "300ms", "run-busy", "--", "touch", path("busy.ran"));
    it_expect_status(&r, 75);
    assert_true(dh_now_ms() - start >= 300);
    assert_int_equal(access(path("busy.ran"), F_OK), -1);

    /* The holder's lock is untouched. */
    it_expect_holder(&plain, "run-busy", token);
    RUN(&r, "release", "run-busy", token);
    it_expect_status(&r, 0);
}

static void test_signal_cancels_wait(void **state)
{
    (void)state;
    run r;
    char token[DLOCK_TOKEN_LEN + 1];
    hold_for_30s(&r, "run-cancel", token);

    long long before = it_connected_clients(&plain);
    bg b;
    spawn(&b, "cancel", "run", "-w", "60s", "run-cancel", "--", "touch", path("cancel.ran"),
          (const char *)NULL);
    /* Once it is connected it has set up its signals (before its first attempt); a
     * signal before that would kill it by the default action (exit 143, not 75). */
    int64_t deadline = dh_now_ms() + 10000 * dh_slack();
    while (it_connected_clients(&plain) <= before) {
        assert_true(dh_now_ms() < deadline);
        dh_sleep_ms(10);
    }
    dh_sleep_ms(50);
    assert_int_equal(kill(b.pid, SIGTERM), 0);
    int status = bg_wait(&b, 5000);
    bg_expect(&b, status, 75);
    char *err = it_slurp(b.err);
    expect_one_line(err, "canceled by SIGTERM");
    free(err);
    assert_int_equal(access(path("cancel.ran"), F_OK), -1);
    RUN(&r, "release", "run-cancel", token);
    it_expect_status(&r, 0);
}

/* ---- usage ------------------------------------------------------------------------------ */

static void test_usage_errors(void **state)
{
    (void)state;
    run r;
    RUN(&r, "run", "-t", "1s", "-g", "500ms", "run-use", "--", "true"); /* GRACE >= TTL/2 */
    it_expect_status(&r, 64);
    expect_one_line(r.err, "GRACE");
    RUN(&r, "run", "-g", "15s", "run-use", "--", "true"); /* default TTL 30s */
    it_expect_status(&r, 64);
    RUN(&r, "run", "-g", "soon", "run-use", "--", "true");
    it_expect_status(&r, 64);
    expect_one_line(r.err, "GRACE");
    RUN(&r, "run", "-t", "100ms", "run-use", "--", "true"); /* no room for a renewal */
    it_expect_status(&r, 64);
    expect_one_line(r.err, "too short");
    static const char *const bad_signals[] = {"FOO", "0",     "65",       "SIG",
                                              "-15", "TERM2", "RTMIN+99", ""};
    for (size_t i = 0; i < sizeof bad_signals / sizeof bad_signals[0]; i++) {
        RUN(&r, "run", "-k", bad_signals[i], "run-use", "--", "true");
        it_expect_status(&r, 64);
        expect_one_line(r.err, "SIGNAL");
    }
    RUN(&r, "run", "run-use", "true"); /* no "--" */
    it_expect_status(&r, 64);
    expect_one_line(r.err, "--");
    RUN(&r, "run", "run-use", "--"); /* no CMD */
    it_expect_status(&r, 64);
    expect_one_line(r.err, "CMD");
    RUN(&r, "run", "run-use");
    it_expect_status(&r, 64);
    RUN(&r, "run", "--", "true"); /* no NAME */
    it_expect_status(&r, 64);
    expect_one_line(r.err, "NAME");
    RUN(&r, "run", "a", "b", "--", "true");
    it_expect_status(&r, 64);
    RUN(&r, "run", "-k");
    it_expect_status(&r, 64);
    RUN(&r, "run", "--no-such", "run-use", "--", "true");
    it_expect_status(&r, 64);
    /* None of it reached CMD or the server. */
    assert_int_equal(key_exists("run-use"), 0);
    assert_int_equal(key_exists("a"), 0);

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
        cmocka_unit_test(test_lost_when_key_deleted),
        cmocka_unit_test(test_kill_after_grace),
        cmocka_unit_test(test_stopped_before_lease_ends_when_server_paused),
        cmocka_unit_test(test_exit_status_passthrough),
        cmocka_unit_test(test_exec_failures),
        cmocka_unit_test(test_environment),
        cmocka_unit_test(test_no_descriptor_leaks_into_cmd),
        cmocka_unit_test(test_signals_forwarded),
        cmocka_unit_test(test_busy_try_once),
        cmocka_unit_test(test_signal_cancels_wait),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_help_and_man_page),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
