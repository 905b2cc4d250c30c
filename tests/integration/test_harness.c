/*
 * test_harness.c: the harness itself, against real redis-server processes.
 *
 * Every other integration test trusts that dh_server_restart comes back on the same
 * port with an empty data set, that a paused server answers nothing, and that no
 * server outlives its test process; this file checks those promises first.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "support.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* True while pid is a live process: gone or a zombie both count as dead (the
 * container's PID 1 may be slow to reap the orphans it inherits). */
static int alive(pid_t pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')');
    return close_paren && close_paren[1] == ' ' && close_paren[2] != 'Z' && close_paren[2] != 'X';
}

/* Wait up to ms for pid to die. */
static int dies_within(pid_t pid, int64_t ms)
{
    int64_t deadline = dh_now_ms() + ms;
    while (alive(pid)) {
        if (dh_now_ms() > deadline)
            return 0;
        dh_sleep_ms(10);
    }
    return 1;
}

static void assert_ping(dh_server *s)
{
    redisReply *r = dh_cmd(s, "PING");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    assert_string_equal(r->str, "PONG");
    freeReplyObject(r);
}

static void start_ping_stop(void **state)
{
    (void)state;
    dh_server s;
    assert_int_equal(dh_server_start(&s, NULL), 0);
    assert_true(s.pid > 0);
    assert_true(s.port > 0 && s.port < 65536);
    char url[128];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", s.port);
    assert_string_equal(s.url, url);
    struct stat st;
    assert_int_equal(stat(s.dir, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_ping(&s);

    /* The settings the tests rely on: no persistence, loopback only. */
    redisReply *r = dh_cmd(&s, "CONFIG GET save");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    assert_string_equal(r->element[1]->str, "");
    freeReplyObject(r);
    r = dh_cmd(&s, "CONFIG GET bind");
    assert_non_null(r);
    assert_string_equal(r->element[1]->str, "127.0.0.1");
    freeReplyObject(r);

    pid_t pid = s.pid;
    char dir[512];
    snprintf(dir, sizeof dir, "%s", s.dir);
    dh_server_stop(&s);
    assert_int_equal(s.pid, 0);
    assert_int_equal(kill(pid, 0), -1);
    assert_int_equal(errno, ESRCH);
    if (!getenv("DLOCK_TEST_KEEP"))
        assert_int_equal(stat(dir, &st), -1);
    dh_server_stop(&s); /* twice is harmless */
}

static void restart_same_port_empty(void **state)
{
    (void)state;
    dh_server s;
    assert_int_equal(dh_server_start(&s, NULL), 0);
    int port = s.port;
    pid_t pid = s.pid;
    redisReply *r = dh_cmd(&s, "SET k v");
    assert_non_null(r);
    freeReplyObject(r);

    int64_t t0 = dh_now_ms();
    assert_int_equal(dh_server_restart(&s), 0);
    printf("FIG harness_restart_ms %lld ms\n", (long long)(dh_now_ms() - t0));
    assert_int_equal(s.port, port);
    assert_true(s.pid > 0 && s.pid != pid);
    assert_false(alive(pid));
    assert_ping(&s);
    r = dh_cmd(&s, "EXISTS k");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 0); /* no persistence: the restart forgot it */
    freeReplyObject(r);

    /* kill keeps the port for a later restart */
    pid = s.pid;
    dh_server_kill(&s);
    assert_int_equal(s.pid, 0);
    assert_false(alive(pid));
    assert_null(dh_cmd(&s, "PING"));
    assert_int_equal(dh_server_restart(&s), 0);
    assert_int_equal(s.port, port);
    assert_ping(&s);
    dh_server_stop(&s);
}

static void pause_resume(void **state)
{
    (void)state;
    dh_server s;
    assert_int_equal(dh_server_start(&s, NULL), 0);
    redisContext *c = dh_connect(&s);
    assert_non_null(c);
    struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
    redisSetTimeout(c, tv);

    dh_server_pause(&s);
    int64_t t0 = dh_now_ms();
    redisReply *r = redisCommand(c, "PING");
    int64_t took = dh_now_ms() - t0;
    assert_null(r); /* a stopped server answers nothing */
    assert_true(took >= 150);
    redisFree(c);

    dh_server_resume(&s);
    assert_ping(&s);
    dh_server_stop(&s);
}

static void requirepass_and_args(void **state)
{
    (void)state;
    dh_server s;
    const char *const args[] = {"--requirepass", "sekret", "--maxmemory-policy", "allkeys-lru",
                                NULL};
    assert_int_equal(dh_server_start(&s, args), 0);
    assert_string_equal(s.extra[0], "--requirepass");
    assert_null(s.extra[4]);
    assert_ping(&s); /* dh_cmd authenticated */
    redisReply *r = dh_cmd(&s, "CONFIG GET maxmemory-policy");
    assert_non_null(r);
    assert_string_equal(r->element[1]->str, "allkeys-lru");
    freeReplyObject(r);

    /* Unauthenticated, the server refuses: the password is really set. */
    redisContext *c = redisConnect("127.0.0.1", s.port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    r = redisCommand(c, "GET x");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    redisFree(c);

    /* The arguments survive a restart. */
    assert_int_equal(dh_server_restart(&s), 0);
    r = dh_cmd(&s, "CONFIG GET maxmemory-policy");
    assert_non_null(r);
    assert_string_equal(r->element[1]->str, "allkeys-lru");
    freeReplyObject(r);
    dh_server_stop(&s);
}

/* The options beyond arguments: a bind address, configuration lines (written to a
 * file the server reads first, and overridden by the arguments), a parent directory;
 * all kept across a restart. */
static void options_config_and_bind(void **state)
{
    (void)state;
    char parent[600];
    const char *base = getenv("DLOCK_TEST_TMP");
    snprintf(parent, sizeof parent, "%s/opts-%d", base && *base ? base : "/tmp", (int)getpid());
    const char *const config[] = {"maxmemory-policy volatile-ttl", "hz 20", NULL};
    const char *const args[] = {"--hz", "30", NULL};
    dh_server_opts o = {.bind = "127.0.0.1", .config = config, .args = args, .parent_dir = parent};
    dh_server s;
    assert_int_equal(dh_server_start_opts(&s, &o), 0);
    assert_string_equal(s.host, "127.0.0.1");
    assert_int_equal(strncmp(s.dir, parent, strlen(parent)), 0);
    for (int round = 0; round < 2; round++) {
        redisReply *r = dh_cmd(&s, "CONFIG GET maxmemory-policy");
        assert_non_null(r);
        assert_string_equal(r->element[1]->str, "volatile-ttl");
        freeReplyObject(r);
        r = dh_cmd(&s, "CONFIG GET hz");
        assert_non_null(r);
        assert_string_equal(r->element[1]->str, "30"); /* the argument wins */
        freeReplyObject(r);
        if (round == 0)
            assert_int_equal(dh_server_restart(&s), 0);
    }
    char dir[sizeof s.dir];
    snprintf(dir, sizeof dir, "%s", s.dir);
    dh_server_stop(&s);
    /* Removed with the server, and nothing else left there; unless a post-mortem asked
     * for the directories to stay. */
    const char *keep = getenv("DLOCK_TEST_KEEP");
    if (keep == NULL || *keep == '\0' || strcmp(keep, "0") == 0) {
        assert_int_equal(access(dir, F_OK), -1);
        assert_int_equal(rmdir(parent), 0);
    }
}

static void two_servers_distinct(void **state)
{
    (void)state;
    dh_server a, b;
    assert_int_equal(dh_server_start(&a, NULL), 0);
    assert_int_equal(dh_server_start(&b, NULL), 0);
    assert_int_not_equal(a.port, b.port);
    assert_string_not_equal(a.dir, b.dir);
    redisReply *r = dh_cmd(&a, "SET only-a 1");
    freeReplyObject(r);
    r = dh_cmd(&b, "EXISTS only-a");
    assert_non_null(r);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    dh_server_stop(&a);
    dh_server_stop(&b);
}

static void bad_args_fail_loudly(void **state)
{
    (void)state;
    dh_server s;
    printf("INFO the FATAL lines below are expected: this test makes starts fail\n");
    fflush(stdout);
    /* No redis-server: fail (the test fails loudly), never skip. */
    setenv("DLOCK_REDIS_SERVER", "/nonexistent/redis-server", 1);
    assert_int_equal(dh_server_start(&s, NULL), -1);
    unsetenv("DLOCK_REDIS_SERVER");
    assert_int_equal(s.pid, 0);

    /* An argument redis-server refuses: start must fail (not hang, not skip). */
    const char *const args[] = {"--no-such-option", "1", NULL};
    int64_t t0 = dh_now_ms();
    assert_int_equal(dh_server_start(&s, args), -1);
    assert_true(dh_now_ms() - t0 < 6000 * dh_slack());
    assert_int_equal(s.pid, 0);
}

/* A child process that starts a server and then dies without cleaning up (abort:
 * no atexit), or exits (atexit runs): either way its server must not survive. */
static void server_dies_with_test_process(void **state)
{
    (void)state;
    for (int mode = 0; mode < 2; mode++) {
        int pfd[2];
        assert_int_equal(pipe(pfd), 0);
        pid_t child = fork();
        assert_true(child >= 0);
        if (child == 0) {
            close(pfd[0]);
            dh_server s;
            pid_t spid = 0;
            if (dh_server_start(&s, NULL) == 0)
                spid = s.pid;
            if (write(pfd[1], &spid, sizeof spid) != (ssize_t)sizeof spid ||
                write(pfd[1], s.dir, sizeof s.dir) != (ssize_t)sizeof s.dir)
                _exit(2);
            close(pfd[1]);
            if (mode == 0) {
                signal(SIGABRT, SIG_DFL);
                abort(); /* a crash: only PDEATHSIG can clean up */
            }
            exit(0); /* normal exit: the atexit hook kills the server */
        }
        close(pfd[1]);
        pid_t spid = 0;
        char dir[512] = "";
        assert_int_equal(read(pfd[0], &spid, sizeof spid), (ssize_t)sizeof spid);
        assert_int_equal(read(pfd[0], dir, sizeof dir), (ssize_t)sizeof dir);
        close(pfd[0]);
        int status;
        assert_int_equal(waitpid(child, &status, 0), child);
        assert_true(spid > 0);
        assert_true(dies_within(spid, 3000 * dh_slack()));
        /* The crashed child could not remove its directory; tidy up for it. */
        const char *const rm[] = {"rm", "-rf", dir, NULL};
        if (dir[0])
            assert_int_equal(dh_run(rm, NULL, NULL, 0, NULL, 0), 0);
    }
}

static void run_captures(void **state)
{
    (void)state;
    char out[256], err[256];
    const char *const sh[] = {"/bin/sh", "-c", "echo out; echo err >&2; echo \"$DH_X\"; exit 3",
                              NULL};
    const char *const env[] = {"DH_X=hello", NULL};
    assert_int_equal(dh_run(sh, env, out, sizeof out, err, sizeof err), 3);
    assert_string_equal(out, "out\nhello\n");
    assert_string_equal(err, "err\n");

    /* killed by a signal: 128 + n */
    const char *const killed[] = {"/bin/sh", "-c", "kill -9 $$", NULL};
    assert_int_equal(dh_run(killed, NULL, out, sizeof out, NULL, 0), 128 + SIGKILL);

    /* not found: 127, like a shell */
    const char *const missing[] = {"/nonexistent/dh-none", NULL};
    assert_int_equal(dh_run(missing, NULL, NULL, 0, NULL, 0), 127);

    /* truncation keeps a terminated string, and the child still finishes */
    char small[4];
    const char *const big[] = {"/bin/sh", "-c", "yes | head -c 100000", NULL};
    assert_int_equal(dh_run(big, NULL, small, sizeof small, NULL, 0), 0);
    assert_string_equal(small, "y\ny");

    /* an env entry without '=' removes the variable */
    setenv("DH_GONE", "1", 1);
    const char *const show[] = {"/bin/sh", "-c", "echo \"[${DH_GONE-unset}]\"", NULL};
    const char *const unset[] = {"DH_GONE", NULL};
    assert_int_equal(dh_run(show, unset, out, sizeof out, NULL, 0), 0);
    assert_string_equal(out, "[unset]\n");
    unsetenv("DH_GONE");
}

static void slack_and_clock(void **state)
{
    (void)state;
    assert_true(dh_slack() >= 1);
    int64_t t0 = dh_now_ms();
    dh_sleep_ms(50);
    int64_t d = dh_now_ms() - t0;
    assert_true(d >= 50);
    printf("FIG harness_sleep50_ms %lld ms\n", (long long)d);
    assert_non_null(getenv("DLOCK_CLI")); /* CTest passes it to every test */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(start_ping_stop),
        cmocka_unit_test(restart_same_port_empty),
        cmocka_unit_test(pause_resume),
        cmocka_unit_test(requirepass_and_args),
        cmocka_unit_test(options_config_and_bind),
        cmocka_unit_test(two_servers_distinct),
        cmocka_unit_test(bad_args_fail_loudly),
        cmocka_unit_test(server_dies_with_test_process),
        cmocka_unit_test(run_captures),
        cmocka_unit_test(slack_and_clock),
    };
    return cmocka_run_group_tests_name("harness", tests, NULL, NULL);
}
