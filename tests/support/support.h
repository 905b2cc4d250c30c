/*
 * harness.h: start and control real redis-server processes for the integration tests.
 *
 * Every server listens on 127.0.0.1 only, on a free port, with its own temporary
 * directory under $DLOCK_TEST_TMP (or /tmp) and no persistence unless the extra
 * arguments ask for it. Servers die with the test process even when it crashes
 * (PR_SET_PDEATHSIG in the child, plus an atexit hook that kills the survivors).
 *
 * Rules for the tests that use it:
 *   - start servers from the main thread (or a thread that outlives them): the kernel
 *     sends PR_SET_PDEATHSIG when the *thread* that forked the server exits;
 *   - never reap children with waitpid(-1, ...): that could reap a server the harness
 *     still has to wait for; wait for your own children by PID;
 *   - a forked test child leaves with _exit() (atexit hooks are skipped in children
 *     anyway: the hook only acts in the process that started the servers).
 *
 * Functions that fail print why to stderr (with the server log's tail when a server
 * would not start) and return -1 or NULL; tests assert on that, so a missing
 * redis-server fails the test loudly instead of skipping it.
 */
#ifndef DLOCK_TEST_HARNESS_H
#define DLOCK_TEST_HARNESS_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define DH_EXTRA_MAX 16 /* slots in dh_server.extra, NULL terminator included */

typedef struct dh_server {
    pid_t pid;                 /* 0 when not running (stopped or killed) */
    int port;                  /* 127.0.0.1 port, kept across kill/restart */
    char dir[512];             /* its --dir, removed by dh_server_stop */
    char url[128];             /* "redis://127.0.0.1:PORT" (no password) */
    char *extra[DH_EXTRA_MAX]; /* copies of the extra arguments, NULL-terminated */
} dh_server;

/* Start a server. extra_args: more redis-server arguments, NULL-terminated (NULL for
 * none), e.g. {"--requirepass", "pw", NULL}; at most DH_EXTRA_MAX-1 of them. *s is
 * overwritten. Returns 0 once the server answers PING (its PID checked through INFO
 * where the harness can authenticate), -1 after printing why. */
int dh_server_start(dh_server *s, const char *const *extra_args);
/* Start s[0..n-1], each with extra_args; 0, or -1 with those started stopped again. */
int dh_servers_start(dh_server *s, int n, const char *const *extra_args);
/* dh_server_stop on s[0..n-1]. */
void dh_servers_stop(dh_server *s, int n);

/* SIGTERM, wait up to 2 s, then SIGKILL; remove the directory (kept when
 * $DLOCK_TEST_KEEP is set, for post-mortems) and free the argument copies.
 * Safe on a killed or already stopped server, and on a zeroed struct. */
void dh_server_stop(dh_server *s);

/* SIGKILL (if running) and start again on the same port and directory with the same
 * arguments. Without persistence arguments the data set is empty afterwards. 0 or -1. */
int dh_server_restart(dh_server *s);

/* SIGKILL and reap, keeping the port and directory for a later dh_server_restart. */
void dh_server_kill(dh_server *s);

/* SIGSTOP / SIGCONT: a server that accepts TCP connections (the kernel does) but never
 * answers. */
void dh_server_pause(dh_server *s);
void dh_server_resume(dh_server *s);

/* Run one admin command (hiredis format, %s and %b as in redisCommand) on a fresh
 * connection with a 2 s timeout, authenticated with --requirepass when the server has
 * one. Returns the reply (free with freeReplyObject) or NULL after printing why.
 * Thread-safety: any thread (each call has its own connection). */
redisReply *dh_cmd(dh_server *s, const char *fmt, ...);

/* Connect to the server as dh_cmd does (authenticated), for tests that issue many
 * commands. NULL after printing why. Free with redisFree. */
redisContext *dh_connect(dh_server *s);

/* $DLOCK_TEST_SLACK (a positive integer), default 1: the factor for liveness bounds. */
long long dh_slack(void);

/* Milliseconds on CLOCK_MONOTONIC. */
int64_t dh_now_ms(void);

/* Sleep ms milliseconds (restarted after signals). */
void dh_sleep_ms(int64_t ms);

/* fork/exec argv (PATH searched when argv[0] has no '/'), capture its stdout and stderr
 * into out/err (NUL-terminated, truncated to outlen-1/errlen-1; either may be NULL).
 * env: NULL to inherit the environment, else "NAME=VALUE" entries added to it
 * (replacing NAME), and "NAME" alone to remove NAME. The child gets /dev/null as
 * stdin, no other inherited descriptors, and dies if this process dies. A child still
 * running after 120 s is killed. Returns its exit status, 128+n if signal n killed it
 * (127 when it could not be executed), -1 on a harness error. */
int dh_run(const char *const argv[], const char *const env[], char *out, size_t outlen, char *err,
           size_t errlen);

/* $DLOCK_CLI (CTest sets it to the built dlock command). Exits the test process with
 * a message when it is unset. */
const char *dh_cli_path(void);

#endif /* DLOCK_TEST_HARNESS_H */
