/*
 * dtest.h: helpers of the dlockd tests: a real dlockd process (build/dlockd, from
 * $DLOCKD, which CTest sets) in front of real redis-servers, and clients for it:
 * hiredis connections, and raw sockets for what no well-behaved client sends.
 *
 * Include after <cmocka.h>: the helpers assert.
 */
#ifndef DLOCK_DTEST_H
#define DLOCK_DTEST_H

#include "relay.h"
#include "support.h"

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct dt_daemon {
    pid_t pid;            /* 0 once stopped */
    int port;             /* 0: no plain TCP */
    int tls_port;         /* 0: no TLS listener */
    char unixsocket[256]; /* "" unless started with one */
} dt_daemon;

/* Start dlockd for servers (a URL list) on a free port, with the per-server deadline
 * it_timeout_ms() and the extra arguments that follow (up to a NULL). Asserts that it
 * accepts connections within 10 s (times the slack). */
void dt_start(dt_daemon *d, const char *servers, ...);
/* The same with a TLS listener on a second free port (d->tls_port); the extra arguments
 * give its certificate options. plain false: the TLS listener alone (-p 0). */
void dt_start_tls(dt_daemon *d, const char *servers, bool plain, ...);
/* Make the next dt_start's dlockd run (through prlimit(1)) with an open-files limit of n, soft and
 * hard (it cannot raise it then). */
void dt_next_nofile(long n);
/* Make the next dt_start's dlockd log to path (truncated) instead of the test's
 * stderr. */
void dt_next_log(const char *path);
/* A log file's path in $DLOCK_TEST_TMP for this process and what. */
void dt_log_path(char *buf, size_t len, const char *what);
/* True when a line of the file at path contains needle. */
bool dt_log_has(const char *path, const char *needle);
/* SIGTERM, then wait up to 10 s (times the slack) for it to exit; returns its wait
 * status. Safe on a daemon already stopped (returns 0). */
int dt_stop(dt_daemon *d);

/* One run of a client program to its end: its exit status and what it printed. */
typedef struct dt_run {
    int status;
    char out[16384];
    char err[8192];
} dt_run;
/* Run argv (dh_run's form, this environment) to its end; fail the test unless it
 * exits 0, showing what it printed. */
void dt_run_ok(dt_run *r, const char *const argv[]);
/* The client script NAME in $DLOCKD_CLIENTS (tests/service/clients, as CTest sets it);
 * fails the test when the variable is unset. Static storage, rewritten by each call. */
const char *dt_client_script(const char *name);

/* One dlockd in front of the integration tests' server (it_srv), for a test file's
 * group: dt_one_setup starts both, dt_one_teardown stops them (dlockd must exit 0). */
extern dt_daemon dt_one;
int dt_one_setup(void **state);
int dt_one_teardown(void **state);
/* SIGKILL and reap. */
void dt_kill(dt_daemon *d);

/* A dlockd of the test's own in front of n (1 to 3) redis-servers of its own, for a
 * test that stops, kills or pauses them, which it_srv must never be. */
typedef struct dt_fresh {
    dh_server srv[3];
    int n;
    dt_daemon d;
} dt_fresh;
/* Start the servers and dlockd; a connection to it. Asserts. */
redisContext *dt_fresh_start(dt_fresh *f, int n);
/* Stop dlockd (it must exit 0), then the servers. */
void dt_fresh_stop(dt_fresh *f);

/* A dlockd of the test's own whose server, it_srv, is behind a relay (relay.h), so that
 * the test can hold its replies back; its per-server deadline is 5 s, longer than any
 * delay the tests set. */
typedef struct dt_slow {
    fr_relay *relay;
    dt_daemon d;
} dt_slow;
void dt_slow_start(dt_slow *s);
/* Send a command (dt_send's format) on c with the server's replies made 300 ms late,
 * and reset c 50 ms later (SO_LINGER 0): the client is gone, unable to read any reply,
 * before the server's answer reaches dlockd. */
void dt_slow_send_and_close(dt_slow *s, redisContext *c, const char *fmt, ...);
/* Stop dlockd (it must exit 0), then the relay. */
void dt_slow_stop(dt_slow *s);

/* A hiredis connection (5 s timeout times the slack) to d's TCP port. Asserts. */
redisContext *dt_connect(const dt_daemon *d);
/* One command (redisCommand's format); asserts a reply came. Free with freeReplyObject. */
redisReply *dt_cmd(redisContext *c, const char *fmt, ...);
/* Send a command without waiting for its reply (it is read later by dt_reply). */
void dt_send(redisContext *c, const char *fmt, ...);
/* The next reply of c; asserts one came. */
redisReply *dt_reply(redisContext *c);

/* Assertions on a reply, which they free (dexpect.c). */
void dt_expect_status(redisReply *r, const char *want);
void dt_expect_int(redisReply *r, long long want);
void dt_expect_nil(redisReply *r);
/* An error reply that starts with prefix ("NOAUTH", "ERR unknown command"). */
void dt_expect_error(redisReply *r, const char *prefix);
/* A command c must be refused, as dt_cmd sends it (a format without arguments), and
 * the start of its error. dt_expect_refusals sends each of list[0..n) in turn and
 * expects its error; DT_EXPECT_REFUSALS does so for a whole array. */
typedef struct dt_refusal {
    const char *cmd;
    const char *error;
} dt_refusal;
void dt_expect_refusals(redisContext *c, const dt_refusal *list, size_t n);
#define DT_EXPECT_REFUSALS(c, list) dt_expect_refusals((c), (list), sizeof(list) / sizeof(list)[0])

/* A LOCK's reply: token, fence, validity. Asserts its shape (a 32-hex token, fence >= 1,
 * validity in (0, ttl]) and frees it. */
typedef struct dt_lock {
    char token[33];
    long long fence;
    long long validity_ms;
} dt_lock;
void dt_expect_lock(redisReply *r, dt_lock *out);

/* Close holder, whose going must serve waiter's pending LOCK or SEM ACQUIRE within
 * bound_ms: the grant into *got, the time it took as "FIG <fig> N ms". */
void dt_expect_close_serves(redisContext *holder, redisContext *waiter, dt_lock *got,
                            const char *fig, int64_t bound_ms);

/* Waiters w[0..n), each of which sent `LOCK <prefix>-<i % names> WAIT ...`, served in
 * turn as the names pass from hand to hand: every one not served[] yet gets its grant,
 * with a fence above the last of its name (last_fence[names], updated), and UNLOCKs it
 * at once, which serves the next; all of them before deadline_ms (dh_now_ms). */
void dt_serve_in_turn(redisContext **w, bool *served, int n, const char *prefix, int names,
                      long long *last_fence, int64_t deadline_ms);

/* A raw TCP socket to d (blocking, CLOEXEC). Asserts. */
int dt_raw(const dt_daemon *d);
/* Write all of p. Asserts. */
void dt_raw_write(int fd, const void *p, size_t n);
/* Read until the peer closes or timeout_ms passes; returns the bytes read into buf
 * (NUL-terminated, truncated to len - 1) and sets *closed when the peer closed. */
size_t dt_raw_read_all(int fd, char *buf, size_t len, int64_t timeout_ms, bool *closed);

/* A pipeline of n commands "CMD i" for i = 0 .. n-1 (ECHO and PING answer i back), in
 * one malloc'd buffer (free it); its length in *len. Asserts. */
char *dt_numbered_pipeline(const char *cmd, int n, size_t *len);

/* A client that sends without ever reading: fill buf with whole ECHO commands; the
 * length they take (len rounded down to a command). */
size_t dt_fill_echoes(char *buf, size_t len);
/* What dlockd must do with such a client, which wrote sent bytes while d's RSS was
 * rss0 KiB before: stop taking them well before 200 MB, and grow by a few MB at most.
 * FIG lines "FIG <fig>_unread_client_...". */
void dt_expect_unread_bounded(const dt_daemon *d, const char *fig, size_t sent, long long rss0);

/* Write req (n bytes) on a new raw connection to d, read the answer into buf (as
 * dt_raw_read_all does) until d closes it or timeout_ms pass, and close it; true when d
 * closed it. */
bool dt_raw_exchange(const dt_daemon *d, const void *req, size_t n, char *buf, size_t len,
                     int64_t timeout_ms);

/* A field of the daemon's INFO ("connected_clients"), or -1. */
long dt_info(redisContext *c, const char *field);
/* Until that field reaches want, within bound_ms; fails naming the field otherwise. */
void dt_wait_info(redisContext *c, const char *field, long want, int64_t bound_ms);
/* A field of LOCKINFO name as an integer ("shared" holders, "remaining_ms", ...); 0
 * when the reply has no such field. */
long long dt_lockinfo(redisContext *c, const char *name, const char *field);
/* Until the lock key of name is gone from it_srv, within bound_ms; the time it took,
 * or fails. */
int64_t dt_wait_key_gone(const char *name, int64_t bound_ms);
/* A --requirepass-file holding pass, its path (under DLOCK_TEST_TMP, named by what)
 * into path; the caller unlinks it. */
void dt_write_pass(char *path, size_t len, const char *what, const char *pass);

/* VmRSS of a process in KiB, or -1. */
long long dt_rss_kib(pid_t pid);
/* Threads of a process, or -1. */
long long dt_threads(pid_t pid);

#endif /* DLOCK_DTEST_H */
