/*
 * test_dlockd_examples.c: the PHP and Python examples (examples/php/, examples/python/)
 * run as a reader would run them, against a real redis-server and dlockd:
 *   - the flash sale: 8 buyer processes at once sell exactly the stock, nothing
 *     oversold, no unit sold twice, fences strictly increasing (the example's own
 *     `report` checks, and this test reads its RESULT line); then the same with one
 *     buyer killed by SIGKILL inside its critical section: the lock passes on at once
 *     (its session ends with its connection) and the others still sell it all;
 *   - the cron job: two runs started together, exactly one does the work; a run killed
 *     mid-job frees the lock at once, and the next run does the work;
 *   - their documented exit 75 (EX_TEMPFAIL) with one line on stderr when dlockd's lock
 *     server is down (dlockd answers -UNAVAILABLE, which phpredis throws as an
 *     exception and redis-py raises) and when dlockd itself refuses the connection.
 * PHP is /usr/bin/php with php-redis, Python is /usr/bin/python3 with python3-redis
 * (not whatever python3 comes first in PATH); a missing one fails the test, never skips
 * it. The examples are in $DLOCK_EXAMPLES, which CTest sets.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BUYERS 8
#define STOCK  200

static dt_daemon d;
static char dlockd_addr[64], redis_addr[64];

/* One language's examples: the interpreter, how to check that its Redis client is
 * there, and the scripts. */
typedef struct lang {
    const char *name;
    const char *interp;
    const char *package; /* what to install when the check fails */
    const char *check[4];
    const char *flash_sale;
    const char *cron_job;
} lang;

static lang php = {
    "php",
    "/usr/bin/php",
    "php-cli php-redis",
    {"/usr/bin/php", "-r", "exit(class_exists('Redis') ? 0 : 1);", NULL},
    "php/flash_sale.php",
    "php/cron_job.php",
};
static lang python = {
    "python",
    "/usr/bin/python3",
    "python3 python3-redis",
    {"/usr/bin/python3", "-c", "import redis", NULL},
    "python/flash_sale.py",
    "python/cron_job.py",
};

static int setup(void **state)
{
    it_srv_setup(state);
    dt_start(&d, it_srv.url, NULL);
    snprintf(dlockd_addr, sizeof dlockd_addr, "127.0.0.1:%d", d.port);
    snprintf(redis_addr, sizeof redis_addr, "127.0.0.1:%d", it_srv.port);
    return 0;
}

static int teardown(void **state)
{
    assert_int_equal(dt_stop(&d), 0);
    return it_srv_teardown(state);
}

static const char *example(const char *rel)
{
    static char path[4][1024];
    static int next;
    const char *dir = getenv("DLOCK_EXAMPLES");
    if (dir == NULL)
        fail_msg("$DLOCK_EXAMPLES is not set; run through CTest");
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", dir, rel);
    return p;
}

static void need(const lang *l)
{
    if (access(l->interp, X_OK) != 0)
        fail_msg("%s is missing: apt-get install %s (tools/ensure-deps.sh does it as root)",
                 l->interp, l->package);
    char err[4096];
    int st = dh_run(l->check, NULL, NULL, 0, err, sizeof err);
    if (st != 0)
        fail_msg("%s has no Redis client: apt-get install %s\n%s", l->interp, l->package, err);
}

/* argv of one run of an example: interpreter, script, the addresses, then the rest (up
 * to a NULL). Static storage, rewritten by each call. */
#define ARGV_MAX 24
static const char **example_argv(const lang *l, const char *script, va_list ap)
{
    static const char *argv[ARGV_MAX];
    int n = 0;
    argv[n++] = l->interp;
    argv[n++] = example(script);
    argv[n++] = "--dlockd";
    argv[n++] = dlockd_addr;
    argv[n++] = "--redis";
    argv[n++] = redis_addr;
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL) {
        assert_true(n < ARGV_MAX - 1);
        argv[n++] = a;
    }
    argv[n] = NULL;
    return argv;
}

/* Run an example to its end. */
static void run_example(dt_run *r, const lang *l, const char *script, ...)
{
    va_list ap;
    va_start(ap, script);
    const char **argv = example_argv(l, script, ap);
    va_end(ap);
    r->status = dh_run(argv, NULL, r->out, sizeof r->out, r->err, sizeof r->err);
}

/* A run in the background, its stdout in a temporary file (unlinked at once). */
typedef struct bg {
    pid_t pid;
    int out_fd;
} bg;

static void start_example(bg *b, const lang *l, const char *script, ...)
{
    char path[] = "/tmp/dlock-examples.XXXXXX";
    b->out_fd = mkstemp(path);
    assert_true(b->out_fd >= 0);
    unlink(path);
    va_list ap;
    va_start(ap, script);
    const char **argv = example_argv(l, script, ap);
    va_end(ap);
    /* Its messages go to the test's stderr, which CTest shows when a test fails. */
    dh_spawn_opts o = {.out_fd = b->out_fd, .err_fd = STDERR_FILENO};
    b->pid = dh_spawn(argv, &o);
    assert_true(b->pid > 0);
}

/* What it printed so far. */
static void bg_output(const bg *b, char *buf, size_t len)
{
    ssize_t n = pread(b->out_fd, buf, len - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
}

/* Wait for it to exit (at most 60 s times the slack); its exit status. */
static int bg_wait(bg *b, char *buf, size_t len)
{
    int st = -1;
    bool gone = dh_reap(b->pid, 60000 * dh_slack(), &st);
    bg_output(b, buf, len);
    close(b->out_fd);
    if (!gone)
        fail_msg("an example did not finish within %lld s", (long long)(60 * dh_slack()));
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Wait until its output contains what (10 s times the slack). */
static void bg_expect(const bg *b, const char *what)
{
    char buf[4096];
    int64_t deadline = dh_now_ms() + 10000 * dh_slack();
    for (;;) {
        bg_output(b, buf, sizeof buf);
        if (strstr(buf, what) != NULL)
            return;
        if (dh_now_ms() > deadline || dh_exited(b->pid, NULL))
            fail_msg("expected '%s' from an example, got '%s'", what, buf);
        dh_sleep_ms(5);
    }
}

/* A key=value of a RESULT line, as a number; fails when absent. */
static long long result_field(const char *out, const char *key)
{
    const char *line = strstr(out, "RESULT ");
    if (line == NULL)
        fail_msg("no RESULT line in:\n%s", out);
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(line, pat);
    if (p == NULL)
        fail_msg("no %s in: %s", key, line);
    p += strlen(pat);
    if (strncmp(p, "yes", 3) == 0)
        return 1;
    if (strncmp(p, "no", 2) == 0)
        return 0;
    return strtoll(p, NULL, 10);
}

/* Open a sale in l's example: the item "LANG-what" (into item) with the stock on the
 * shelf, once l's interpreter is known to be there. */
static void open_sale(const lang *l, const char *what, char *item, size_t len)
{
    need(l);
    snprintf(item, len, "%s-%s", l->name, what);
    dt_run r;
    char n[16];
    snprintf(n, sizeof n, "%d", STOCK);
    run_example(&r, l, l->flash_sale, "--item", item, "stock", n, NULL);
    if (r.status != 0)
        fail_msg("stock exited %d: %s", r.status, r.err);
}

/* Wait for every buyer; each must have exited 0, having seen the stock gone. */
static void wait_buyers(bg *b, int n)
{
    for (int i = 0; i < n; i++) {
        char out[4096];
        int st = bg_wait(&b[i], out, sizeof out);
        if (st != 0 || strstr(out, "bought") == NULL)
            fail_msg("buyer %d exited %d: '%s'", i, st, out);
    }
}

/* The sale's own report: every check passed, exactly STOCK sold, and every buyer came to
 * the end (each ends with one section that finds the stock gone). */
static void expect_report(dt_run *r, const lang *l, const char *item, const char *killed_at,
                          int buyers_done)
{
    if (killed_at != NULL)
        run_example(r, l, l->flash_sale, "--item", item, "report", "--killed-at", killed_at, NULL);
    else
        run_example(r, l, l->flash_sale, "--item", item, "report", NULL);
    fputs(r->out, stdout);
    if (r->status != 0)
        fail_msg("report exited %d:\n%s%s", r->status, r->out, r->err);
    assert_int_equal(result_field(r->out, "ok"), 1);
    assert_int_equal(result_field(r->out, "sold"), STOCK);
    assert_int_equal(result_field(r->out, "oversold"), 0);
    assert_int_equal(result_field(r->out, "doubles"), 0);
    assert_int_equal(result_field(r->out, "overlaps"), 0);
    assert_int_equal(result_field(r->out, "fences_increasing"), 1);
    assert_int_equal(result_field(r->out, "sections"), STOCK + buyers_done);
}

static void test_flash_sale(void **state)
{
    const lang *l = *state;
    char item[32];
    open_sale(l, "sale", item, sizeof item);
    bg b[BUYERS];
    int64_t t0 = dh_now_ms();
    for (int i = 0; i < BUYERS; i++)
        start_example(&b[i], l, l->flash_sale, "--item", item, "buy", NULL);
    wait_buyers(b, BUYERS);
    printf("FIG dlockd_%s_flash_sale_ms %lld ms\n", l->name, (long long)(dh_now_ms() - t0));
    dt_run r;
    expect_report(&r, l, item, NULL, BUYERS);
}

/* A buyer killed holding the lock: the others wait for it (they are blocked in LOCK),
 * and the lock passes on when its connection dies, long before its 30 s lease ends. */
static void test_flash_sale_killed_holder(void **state)
{
    const lang *l = *state;
    char item[32];
    open_sale(l, "kill", item, sizeof item);
    bg victim, b[BUYERS - 1];
    start_example(&victim, l, l->flash_sale, "--item", item, "buy", "--stall", NULL);
    bg_expect(&victim, "HOLDING");
    for (int i = 0; i < BUYERS - 1; i++)
        start_example(&b[i], l, l->flash_sale, "--item", item, "buy", NULL);
    /* Every other buyer parks its LOCK behind the victim before it dies. */
    redisContext *c = dt_connect(&d);
    int64_t deadline = dh_now_ms() + 10000 * dh_slack();
    while (dt_info(c, "blocked_clients") < BUYERS - 1) {
        if (dh_now_ms() > deadline)
            fail_msg("the buyers did not all wait for the lock: %ld blocked",
                     dt_info(c, "blocked_clients"));
        dh_sleep_ms(5);
    }
    /* Nothing was sold while it held the lock. */
    dt_run r;
    run_example(&r, l, l->flash_sale, "--item", item, "report", NULL);
    assert_int_equal(result_field(r.out, "sold"), 0);
    /* The wall clock, which the example's microtime()/time_ns() also read. */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char killed_at[32];
    snprintf(killed_at, sizeof killed_at, "%lld",
             (long long)now.tv_sec * 1000000 + now.tv_nsec / 1000);
    assert_int_equal(kill(victim.pid, SIGKILL), 0);
    char out[1024];
    assert_int_equal(bg_wait(&victim, out, sizeof out), 128 + SIGKILL);
    wait_buyers(b, BUYERS - 1);
    expect_report(&r, l, item, killed_at, BUYERS - 1);
    long long after_us = result_field(r.out, "after_kill_us");
    printf("FIG dlockd_%s_lock_passed_after_kill_ms %.1f ms\n", l->name, after_us / 1000.0);
    /* At once: the lease was 30 s. */
    assert_true(after_us >= 0);
    assert_true(after_us < 1000000 * dh_slack());
    redisFree(c);
}

/* LOCKINFO's state for name is "free" (polled, at most 10 s times the slack); the time
 * it took, ms. */
static int64_t wait_free(redisContext *c, const char *name)
{
    int64_t t0 = dh_now_ms(), deadline = t0 + 10000 * dh_slack();
    for (;;) {
        redisReply *r = dt_cmd(c, "LOCKINFO %s", name);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_true(r->elements >= 2);
        bool free = strcmp(r->element[1]->str, "free") == 0;
        freeReplyObject(r);
        if (free)
            return dh_now_ms() - t0;
        if (dh_now_ms() > deadline)
            fail_msg("%s still held %lld ms after its holder was killed", name,
                     (long long)(10000 * dh_slack()));
        dh_sleep_ms(1);
    }
}

/* The steps the job wrote: how many, and they all came from one run (one fence). */
static long long job_steps(const char *key, char *fence_out, size_t len)
{
    redisReply *r = dh_cmd(&it_srv, "LRANGE %s 0 -1", key);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    long long n = (long long)r->elements;
    fence_out[0] = '\0';
    for (size_t i = 0; i < r->elements; i++) {
        const char *s = r->element[i]->str;
        size_t f = strcspn(s, " ");
        if (i == 0)
            snprintf(fence_out, len, "%.*s", (int)f, s);
        else if (strncmp(s, fence_out, f) != 0 || fence_out[f] != '\0')
            fail_msg("steps of two runs in %s: '%s' after fence %s", key, s, fence_out);
    }
    freeReplyObject(r);
    return n;
}

static void test_cron_job(void **state)
{
    const lang *l = *state;
    need(l);
    char job[32], key[64], fence[32];
    snprintf(job, sizeof job, "%s-report", l->name);
    snprintf(key, sizeof key, "%s:steps", job);
    it_del(&it_srv, key);

    /* Two machines' crontabs fire at the same minute. The job lasts long enough (1.5 s
     * times the slack) that the second start, however slow, finds the first running. */
    bg a, b;
    char step_ms[32];
    snprintf(step_ms, sizeof step_ms, "%lld", (long long)(500 * dh_slack()));
    start_example(&a, l, l->cron_job, "--steps", "3", "--step-ms", step_ms, job, NULL);
    start_example(&b, l, l->cron_job, "--steps", "3", "--step-ms", step_ms, job, NULL);
    char out_a[4096], out_b[4096];
    int st_a = bg_wait(&a, out_a, sizeof out_a), st_b = bg_wait(&b, out_b, sizeof out_b);
    if (st_a != 0 || st_b != 0)
        fail_msg("cron runs exited %d and %d:\n%s\n%s", st_a, st_b, out_a, out_b);
    bool ran_a = strstr(out_a, "running here") != NULL,
         ran_b = strstr(out_b, "running here") != NULL;
    if (ran_a == ran_b)
        fail_msg("expected exactly one run to work:\nA: '%s'\nB: '%s'", out_a, out_b);
    /* The other said nothing: finding the job taken is the normal case. */
    assert_string_equal(ran_a ? out_b : out_a, "");
    assert_int_equal(job_steps(key, fence, sizeof fence), 3);

    /* A run killed mid-job frees the lock with its connection; the next run works. */
    it_del(&it_srv, key);
    start_example(&a, l, l->cron_job, "--steps", "100", "--step-ms", "100", job, NULL);
    bg_expect(&a, "step 1 done");
    redisContext *c = dt_connect(&d);
    dt_run r;
    run_example(&r, l, l->cron_job, "--steps", "1", "--step-ms", "0", job, NULL);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, ""); /* still held by the run in progress */
    assert_int_equal(kill(a.pid, SIGKILL), 0);
    assert_int_equal(bg_wait(&a, out_a, sizeof out_a), 128 + SIGKILL);
    int64_t freed_ms = wait_free(c, job);
    printf("FIG dlockd_%s_cron_lock_freed_after_kill_ms %lld ms\n", l->name, (long long)freed_ms);
    redisFree(c);
    long long before = job_steps(key, fence, sizeof fence);
    run_example(&r, l, l->cron_job, "--steps", "1", "--step-ms", "0", job, NULL);
    if (r.status != 0 || strstr(r.out, "running here") == NULL)
        fail_msg("the run after the kill exited %d: '%s' %s", r.status, r.out, r.err);
    char fence2[32];
    redisReply *last = dh_cmd(&it_srv, "LINDEX %s -1", key);
    assert_int_equal(last->type, REDIS_REPLY_STRING);
    snprintf(fence2, sizeof fence2, "%.*s", (int)strcspn(last->str, " "), last->str);
    freeReplyObject(last);
    assert_true(before >= 1);
    /* The new run's fence is larger than the killed run's. */
    assert_true(strtoull(fence2, NULL, 10) > strtoull(fence, NULL, 10));
}

/* One run of script (its other arguments up to a NULL) must exit 75 having said why on
 * one line of stderr, with want in it, and without a stack trace (an uncaught exception
 * exits 255 in PHP, 1 in Python). */
static void expect_tempfail(const lang *l, const char *script, const char *want, ...)
{
    va_list ap;
    va_start(ap, want);
    const char **argv = example_argv(l, script, ap);
    va_end(ap);
    dt_run r;
    r.status = dh_run(argv, NULL, r.out, sizeof r.out, r.err, sizeof r.err);
    const char *nl = strchr(r.err, '\n');
    if (r.status != 75 || strstr(r.err, want) == NULL || nl == NULL || nl[1] != '\0')
        fail_msg("%s %s: expected exit 75 and one line with '%s' on stderr, got exit %d:\n"
                 "stdout: '%s'\nstderr: '%s'",
                 l->name, script, want, r.status, r.out, r.err);
    printf("%s %s: exit 75: %s", l->name, script, r.err);
}

/* dlockd up and its one lock server down: LOCK answers -UNAVAILABLE. Then no dlockd at
 * all. The shop's Redis (it_srv) stays up: the failure is the lock's. */
static void test_tempfail(void **state)
{
    const lang *l = *state;
    need(l);
    dt_fresh f;
    redisFree(dt_fresh_start(&f, 1));
    dh_server_kill(&f.srv[0]);
    /* The examples talk to this dlockd for the two cases: dlockd_addr names it. */
    char saved[sizeof dlockd_addr];
    memcpy(saved, dlockd_addr, sizeof saved);
    snprintf(dlockd_addr, sizeof dlockd_addr, "127.0.0.1:%d", f.d.port);
    expect_tempfail(l, l->flash_sale, "UNAVAILABLE", "buy", NULL);
    expect_tempfail(l, l->cron_job, "UNAVAILABLE", NULL);
    dt_fresh_stop(&f);
    /* Nothing listens there now. */
    expect_tempfail(l, l->flash_sale, "refused", "buy", NULL);
    expect_tempfail(l, l->cron_job, "refused", NULL);
    memcpy(dlockd_addr, saved, sizeof saved);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        IT_CASE("php flash sale", test_flash_sale, &php),
        IT_CASE("php flash sale, holder killed", test_flash_sale_killed_holder, &php),
        IT_CASE("php cron job", test_cron_job, &php),
        IT_CASE("php examples, lock server down", test_tempfail, &php),
        IT_CASE("python flash sale", test_flash_sale, &python),
        IT_CASE("python flash sale, holder killed", test_flash_sale_killed_holder, &python),
        IT_CASE("python cron job", test_cron_job, &python),
        IT_CASE("python examples, lock server down", test_tempfail, &python),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
