/*
 * itest_cli.c: the helpers of the dlock command's tests, test_cli.c, test_run.c and the
 * files split from them (itest.h): a lock's key seen from outside, a failure's one line
 * on stderr, the "TOKEN FENCE" line, and dlock run in the background.
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the lock from outside --------------------------------------------------------- */

long long it_lock_exists(dh_server *s, const char *name)
{
    char key[256];
    it_key(key, sizeof key, name);
    return it_exists(s, key);
}

long long it_lock_pttl(dh_server *s, const char *name)
{
    char key[256];
    it_key(key, sizeof key, name);
    return it_pttl(s, key);
}

/* ---- what the command printed ------------------------------------------------------ */

/* Lines in s that are not the library's warnings ("dlock: warning: ..."). */
static int error_lines(const char *s)
{
    int n = 0;
    for (const char *p = s; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (strncmp(p, "dlock: warning: ", 16) != 0 || len < 16)
            n++;
        p += len + (nl != NULL);
    }
    return n;
}

void it_expect_failure(const it_run *r, int want, const char *needle, bool strict)
{
    it_expect_status(r, want);
    if (r->out[0] != '\0')
        fail_msg("stdout not empty on failure: %s", r->out);
    size_t len = strlen(r->err);
    if (len == 0 || r->err[len - 1] != '\n')
        fail_msg("stderr is not whole lines: \"%s\"", r->err);
    if (strict && strchr(r->err, '\n') != r->err + len - 1)
        fail_msg("stderr is more than one line: \"%s\"", r->err);
    if (error_lines(r->err) != 1)
        fail_msg("stderr has %d error lines: \"%s\"", error_lines(r->err), r->err);
    /* The error is the last line (warnings, if any, come before it). */
    const char *last = r->err;
    for (const char *p = r->err; p < r->err + len - 1; p++)
        if (*p == '\n')
            last = p + 1;
    if (strncmp(last, "dlock: ", 7) != 0)
        fail_msg("error line does not start with \"dlock: \": %s", last);
    if (needle != NULL && strstr(last, needle) == NULL)
        fail_msg("error line lacks \"%s\": %s", needle, last);
}

void it_expect_one_line(const char *err, const char *needle)
{
    size_t len = strlen(err);
    if (len == 0 || err[len - 1] != '\n' || strchr(err, '\n') != err + len - 1)
        fail_msg("stderr is not one line: \"%s\"", err);
    if (strncmp(err, "dlock: ", 7) != 0)
        fail_msg("stderr does not start with \"dlock: \": %s", err);
    if (needle != NULL && strstr(err, needle) == NULL)
        fail_msg("stderr lacks \"%s\": %s", needle, err);
}

void it_parse_token_line(const char *out, char token[DLOCK_TOKEN_LEN + 1], uint64_t *fence)
{
    size_t i = 0;
    for (; i < DLOCK_TOKEN_LEN; i++)
        if (!((out[i] >= '0' && out[i] <= '9') || (out[i] >= 'a' && out[i] <= 'f')))
            fail_msg("not a token line: \"%s\"", out);
    if (out[i] != ' ' || out[i + 1] < '0' || out[i + 1] > '9')
        fail_msg("not a token line: \"%s\"", out);
    memcpy(token, out, DLOCK_TOKEN_LEN);
    token[DLOCK_TOKEN_LEN] = '\0';
    char *end;
    errno = 0;
    unsigned long long v = strtoull(out + i + 1, &end, 10);
    if (errno != 0 || strcmp(end, "\n") != 0 || v == 0)
        fail_msg("not a token line: \"%s\"", out);
    *fence = v;
}

void it_cli_acquire(const char *name, const char *ttl, char token[DLOCK_TOKEN_LEN + 1],
                    uint64_t *fence)
{
    it_run r;
    it_cli(&r, it_cli_env(&it_srv), NULL, "acquire", "-t", ttl, "-w", "0", name,
           (const char *)NULL);
    it_expect_status(&r, 0);
    assert_string_equal(r.err, "");
    it_parse_token_line(r.out, token, fence);
}

/* ---- dlock run in the background --------------------------------------------------- */

const char *it_run_file(const char *name)
{
    return it_path(it_local_dir, name);
}

void it_wait_for_file(const char *file, int64_t timeout_ms)
{
    int64_t deadline = dh_now_ms() + timeout_ms * dh_slack();
    struct stat st;
    while (stat(file, &st) != 0 || st.st_size == 0) {
        if (dh_now_ms() > deadline)
            fail_msg("%s did not appear within %lld ms", file, (long long)timeout_ms);
        dh_sleep_ms(5);
    }
}

#define ARGS_MAX 40

void it_bg_spawn(it_bg *b, const char *tag, ...)
{
    const char *argv[ARGS_MAX + 2];
    int n = 0;
    argv[n++] = dh_cli_path();
    va_list ap;
    va_start(ap, tag);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL) {
        assert_true(n <= ARGS_MAX);
        argv[n++] = a;
    }
    va_end(ap);
    argv[n] = NULL;
    snprintf(b->out, sizeof b->out, "%s", it_run_file(tag));
    strncat(b->out, ".out", sizeof b->out - strlen(b->out) - 1);
    snprintf(b->err, sizeof b->err, "%s", it_run_file(tag));
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
        setenv("DLOCK_SERVERS", it_srv.url, 1);
        unsetenv("DLOCK_PASSWORD");
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(122);
    }
}

int it_bg_wait_or_kill(it_bg *b, int64_t timeout_ms)
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

int it_bg_wait(it_bg *b, int64_t timeout_ms)
{
    int status = it_bg_wait_or_kill(b, timeout_ms);
    if (status < 0) {
        char *err = it_slurp(b->err);
        fail_msg("dlock did not exit within %lld ms; stderr: %s", (long long)timeout_ms, err);
    }
    return status;
}

void it_bg_expect(it_bg *b, int status, int want)
{
    if (status != want) {
        char *out = it_slurp(b->out), *err = it_slurp(b->err);
        fail_msg("exit %d, want %d\nstdout: %s\nstderr: %s", status, want, out, err);
    }
}
