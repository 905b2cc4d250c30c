/*
 * test_local_cli.c: the dlock command with -s file:///DIR (local locks), no server: the
 * same commands and exit codes as on Redis, and what only local locks promise, a
 * `dlock run` killed by SIGKILL frees the name at once.
 *
 * Exit codes and output lines are checked exactly; the few timings are bounds
 * multiplied by DLOCK_TEST_SLACK.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* dlock -s <url> ARGS... (NULL-terminated), with DLOCK_SERVERS and DLOCK_PASSWORD
 * removed from its environment. */
static it_run *dlock(it_run *o, ...)
{
    const char *const pre[] = {"-s", it_local_url, NULL};
    static const char *const env[] = {"DLOCK_SERVERS", "DLOCK_PASSWORD", NULL};
    va_list ap;
    va_start(ap, o);
    it_cli_va(o, env, pre, ap);
    va_end(ap);
    return o;
}

#define DLOCK(o, ...) dlock((o), __VA_ARGS__, (const char *)NULL)

/* Exit `want`; for a failure, nothing on stdout and one line on stderr that starts
 * with "dlock: " and contains needle. */
static void expect(const it_run *o, int want, const char *needle)
{
    if (o->status != want)
        fail_msg("exit %d, want %d\nstdout: %s\nstderr: %s", o->status, want, o->out, o->err);
    if (want == 0 || needle == NULL)
        return;
    const char *nl = strchr(o->err, '\n');
    if (o->out[0] != '\0' || strncmp(o->err, "dlock: ", 7) != 0 || nl == NULL || nl[1] != '\0' ||
        strstr(o->err, needle) == NULL)
        fail_msg("want one line with \"%s\" on stderr only\nstdout: %s\nstderr: %s", needle, o->out,
                 o->err);
}

/* "TOKEN FENCE\n" from `dlock acquire`. */
static uint64_t token_line(const it_run *o, char token[DLOCK_TOKEN_LEN + 1])
{
    unsigned long long fence = 0;
    int end = -1;
    if (sscanf(o->out, "%32[0-9a-f] %llu%n", token, &fence, &end) != 2 || strlen(token) != 32 ||
        strcmp(o->out + end, "\n") != 0 || fence == 0)
        fail_msg("not a \"TOKEN FENCE\" line: \"%s\"", o->out);
    return fence;
}

static void acquire_status_extend_release(void **state)
{
    (void)state;
    it_run o;
    char token[DLOCK_TOKEN_LEN + 1];
    expect(DLOCK(&o, "acquire", "-t", "30s", "-w", "0", "-l", "nightly backup", "job"), 0, NULL);
    uint64_t fence = token_line(&o, token);

    /* Detached: held after the command exited, by it, with its label. */
    expect(DLOCK(&o, "acquire", "-w", "0", "job"), 75, "held by");
    expect(DLOCK(&o, "status", "job"), 0, NULL);
    char want[128];
    snprintf(want, sizeof want, ", fence %" PRIu64 "\n", fence);
    if (strncmp(o.out, "job: held by ", 13) != 0 || strstr(o.out, "nightly backup") == NULL ||
        strstr(o.out, want) == NULL)
        fail_msg("status: %s", o.out);
    expect(DLOCK(&o, "--json", "status", "job"), 0, NULL);
    assert_non_null(strstr(o.out, "{\"name\":\"job\",\"state\":\"held\",\"holder\":\""));
    snprintf(want, sizeof want, ",\"fence\":%" PRIu64, fence);
    assert_non_null(strstr(o.out, want));

    expect(DLOCK(&o, "extend", "-t", "2m", "job", token), 0, NULL);
    expect(DLOCK(&o, "status", "job"), 0, NULL);
    assert_non_null(strstr(o.out, "1m59s left"));
    expect(DLOCK(&o, "release", "job", token), 0, NULL);
    expect(DLOCK(&o, "release", "job", token), 73, "not held with this token");
    expect(DLOCK(&o, "extend", "job", token), 73, "not held with this token");
    expect(DLOCK(&o, "status", "job"), 0, NULL);
    snprintf(want, sizeof want, "job: free (last fence %" PRIu64 ")\n", fence);
    assert_string_equal(o.out, want);
    expect(DLOCK(&o, "acquire", "-w", "0", "job"), 0, NULL);
    assert_true(token_line(&o, token) > fence);
    expect(DLOCK(&o, "release", "job", token), 0, NULL);
}

/* A waiting acquire gets a detached lock when its lease runs out. */
static void acquire_waits_for_lease(void **state)
{
    (void)state;
    it_run o;
    char token[DLOCK_TOKEN_LEN + 1];
    expect(DLOCK(&o, "acquire", "-t", "500ms", "short"), 0, NULL);
    uint64_t fence = token_line(&o, token);
    int64_t t0 = dh_now_ms();
    expect(DLOCK(&o, "acquire", "-w", "10s", "short"), 0, NULL);
    int64_t took = dh_now_ms() - t0;
    assert_true(token_line(&o, token) > fence);
    assert_true(took >= 400 && took < 500 + 500 * dh_slack());
    expect(DLOCK(&o, "release", "short", token), 0, NULL);
}

/* Wait (up to 10 s, times the slack) until name is held, through the library. */
static void wait_held(const char *name)
{
    dlock_client *c;
    assert_int_equal(dlock_client_new(it_local_url, NULL, &c), DLOCK_OK);
    dlock_holder h = {0};
    for (int64_t end = dh_now_ms() + 10000 * dh_slack(); dh_now_ms() < end; dh_sleep_ms(10))
        if (dlock_inspect(c, name, &h) == DLOCK_OK && h.held)
            break;
    dlock_client_free(c);
    assert_int_equal(h.held, 1);
}

/* dlock run end to end: a second run -w 0 gets 75 while the first runs, and once the
 * first is SIGKILLed the name is free at once, not after its lease. */
static void run_and_sigkill(void **state)
{
    (void)state;
    const char *argv[] = {dh_cli_path(), "-s", it_local_url, "run", "-t", "1h",
                          "task",        "--", "sleep",      "60",  NULL};
    pid_t first = dh_spawn(argv, NULL);
    assert_true(first > 0);
    wait_held("task");
    it_run o;
    expect(DLOCK(&o, "run", "-w", "0", "task", "--", "true"), 75, "held by");
    kill(first, SIGKILL);
    int st;
    assert_int_equal(waitpid(first, &st, 0), first);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* No wait at all: the kernel dropped the lock with the process. */
    expect(DLOCK(&o, "run", "-w", "0", "task", "--", "sh", "-c", "echo $DLOCK_NAME $DLOCK_FENCE"),
           0, NULL);
    assert_true(strncmp(o.out, "task ", 5) == 0 && strtoull(o.out + 5, NULL, 10) > 0);
}

/* A held local lock does not expire: a run whose CMD outlives its TTL many times over is
 * not stopped (no renewal is needed), and its exit status is CMD's. */
static void run_outlives_its_ttl(void **state)
{
    (void)state;
    it_run o;
    expect(DLOCK(&o, "run", "-t", "1s", "-g", "100ms", "long", "--", "sh", "-c", "sleep 2; exit 7"),
           7, NULL);
    assert_string_equal(o.err, "");
}

/* A waiting run starts as soon as the holder's run ends. */
static void run_waits_for_run(void **state)
{
    (void)state;
    const char *argv[] = {dh_cli_path(), "-s",    it_local_url, "run", "queue",
                          "--",          "sleep", "0.3",        NULL};
    pid_t first = dh_spawn(argv, NULL);
    assert_true(first > 0);
    wait_held("queue");
    int64_t t0 = dh_now_ms();
    it_run o;
    expect(DLOCK(&o, "run", "-w", "10s", "queue", "--", "true"), 0, NULL);
    int64_t took = dh_now_ms() - t0;
    int st;
    assert_int_equal(waitpid(first, &st, 0), first);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    printf("INFO the waiting run started %lld ms after the holder's 300 ms run began\n",
           (long long)took);
    assert_true(took < 300 + 300 * dh_slack());
}

/* Shared locks and semaphores from the command line: dlock sem and --shared. */
static void shared_and_sem_commands(void **state)
{
    (void)state;
    it_run o;
    char t1[DLOCK_TOKEN_LEN + 1], t2[DLOCK_TOKEN_LEN + 1], t3[DLOCK_TOKEN_LEN + 1];
    expect(DLOCK(&o, "sem", "acquire", "-n", "2", "-w", "0", "pool"), 0, NULL);
    token_line(&o, t1);
    expect(DLOCK(&o, "sem", "acquire", "-n", "2", "-w", "0", "pool"), 0, NULL);
    token_line(&o, t2);
    expect(DLOCK(&o, "sem", "acquire", "-n", "2", "-w", "0", "pool"), 75, "permits");
    expect(DLOCK(&o, "acquire", "-w", "0", "pool"), 75, "held by");
    expect(DLOCK(&o, "status", "pool"), 0, NULL);
    assert_true(strncmp(o.out, "pool: held by 2 shared holders", 30) == 0);
    expect(DLOCK(&o, "sem", "release", "pool", t1), 0, NULL);
    expect(DLOCK(&o, "sem", "run", "-n", "2", "-w", "0", "pool", "--", "true"), 0, NULL);
    expect(DLOCK(&o, "sem", "release", "pool", t2), 0, NULL);
    expect(DLOCK(&o, "sem", "release", "pool", t2), 73, "not held with this token");
    expect(DLOCK(&o, "run", "--shared", "-w", "0", "pool", "--", "true"), 0, NULL);
    expect(DLOCK(&o, "acquire", "-w", "0", "pool"), 0, NULL);
    token_line(&o, t3);
    expect(DLOCK(&o, "run", "--shared", "-w", "0", "pool", "--", "true"), 75, "held by");
    expect(DLOCK(&o, "release", "pool", t3), 0, NULL);
}

static void bad_directories(void **state)
{
    (void)state;
    const char *argv[] = {dh_cli_path(), "-s", "file:///nonexistent/dlock-dir",
                          "status",      "x",  NULL};
    it_run o;
    o.status = dh_run(argv, NULL, o.out, sizeof o.out, o.err, sizeof o.err);
    expect(&o, 64, "/nonexistent/dlock-dir");
    argv[2] = "file://host/var/lock";
    o.status = dh_run(argv, NULL, o.out, sizeof o.out, o.err, sizeof o.err);
    expect(&o, 64, "host part");
    /* From the environment too. */
    char env_url[400];
    snprintf(env_url, sizeof env_url, "DLOCK_SERVERS=%s", it_local_url);
    const char *const env[] = {env_url, NULL};
    const char *plain[] = {dh_cli_path(), "status", "never", NULL};
    o.status = dh_run(plain, env, o.out, sizeof o.out, o.err, sizeof o.err);
    expect(&o, 0, NULL);
    assert_string_equal(o.out, "never: free\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(acquire_status_extend_release),
        cmocka_unit_test(acquire_waits_for_lease),
        cmocka_unit_test(run_and_sigkill),
        cmocka_unit_test(run_outlives_its_ttl),
        cmocka_unit_test(run_waits_for_run),
        cmocka_unit_test(shared_and_sem_commands),
        cmocka_unit_test(bad_directories),
    };
    return cmocka_run_group_tests(tests, it_local_setup, it_local_teardown);
}
