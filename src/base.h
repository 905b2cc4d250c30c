/*
 * base.h: the bottom layer of src/ (base in internal.h's map): memory,
 * messages, the clock, tokens, fork detection, addresses and replies. They depend on
 * nothing of the library; everything else does on them.
 */
#ifndef DLOCK_BASE_H
#define DLOCK_BASE_H

#include "dlock.h"

#include "hooks.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

/* ---- alloc.c ---------------------------------------------------------------- */

/* The library's allocations (the test build can make any of them fail). Free with
 * free(). */
void *dlock__malloc(size_t n);
void *dlock__calloc(size_t count, size_t size);
void *dlock__realloc(void *p, size_t n);
char *dlock__strdup(const char *s);
/* The first len bytes of src, cut to fit dst[size] (size >= 1) and NUL-terminated: for
 * texts that go to people (descriptions, reasons), where a cut beats a failure. */
void dlock__copy_text(char *dst, size_t size, const char *src, size_t len);

/* ---- error.c ---------------------------------------------------------------- */

/* The one rule for messages: a function that can fail returns a code and writes why
 * into a dlock__err of its caller's, in every layer (a round's nodes each have theirs,
 * dlock__req.why, which the round's outcome gathers into its caller's); only a public
 * entry point makes it the calling thread's message, once, on its way out
 * (dlock__err_raise, or dlock__raise for a check it makes itself). So no caller saves
 * and restores messages, and a clean-up after a failure writes into its own dlock__err,
 * never over the error that caused it. */
#define DLOCK_ERRMSG_MAX 1024
typedef struct dlock__err {
    char msg[DLOCK_ERRMSG_MAX];
} dlock__err;

/* Write the message into e and return code (so `return dlock__err_set(...)`). */
int dlock__err_set(dlock__err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Append "; " and more text (several nodes' reasons in one message). */
void dlock__err_append(dlock__err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Public entry points: make e the thread's message (empty for DLOCK_OK), return code. */
int dlock__err_raise(const dlock__err *e, int code);
/* Public entry points, for a check they make themselves: the message into e, then as
 * dlock__err_raise (so `return dlock__raise(&e, code, fmt, ...)`). */
#define dlock__raise(e, code, ...) dlock__err_raise((e), dlock__err_set((e), (code), __VA_ARGS__))

/* ---- clock.c ---------------------------------------------------------------- */

/* Microseconds on CLOCK_BOOTTIME: monotonic, and it keeps counting through a suspend,
 * as leases do on the servers. Every elapsed time and deadline in src/ uses it. */
int64_t dlock__now_us(void);
/* Microseconds on CLOCK_REALTIME: not for durations, only to order waiters' arrivals
 * across hosts (the fair queue's tickets) and to compare a server's TIME with
 * (dlock_probe). */
int64_t dlock__wallclock_us(void);
/* A condition variable whose timed waits run on CLOCK_MONOTONIC, and the absolute
 * deadline rel_us from now on that clock (condition variables cannot use BOOTTIME). */
void dlock__cond_init(pthread_cond_t *cv);
void dlock__cond_deadline(struct timespec *ts, int64_t rel_us);
/* A wait on cv (made by dlock__cond_init; mu held) until signalled or until due_us on
 * dlock__now_us()'s clock, now_us being that clock now; due_us INT64_MAX: until
 * signalled. A wake-up may be early or spurious: the caller looks again. */
void dlock__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t now_us,
                            int64_t due_us);

/* ---- token.c ---------------------------------------------------------------- */

/* Fill out with DLOCK_TOKEN_LEN lowercase hex characters and a NUL, from getrandom
 * (through a per-thread pool, refilled after a fork). */
int dlock__token_new(char out[DLOCK_TOKEN_LEN + 1]);
/* True when s is DLOCK_TOKEN_LEN lowercase hex characters. */
bool dlock__token_valid(const char *s);
/* A uniform random number in [0, bound) (bound > 0), for jitter. */
uint64_t dlock__random_below(uint64_t bound);

/* ---- fork.c ----------------------------------------------------------------- */

/* How many times this process's ancestry has forked since libdlock first looked: a
 * pthread_atfork child handler counts, so state that records the value can tell, with
 * no system call, that it was inherited by a forked child. (A process made by the raw
 * clone or fork system call, not by fork(3), is not seen; posix_spawn and vfork+exec
 * need not be.) */
uint64_t dlock__fork_gen(void);
/* True in a forked child of the process that recorded gen (dlock__fork_gen) and pid
 * (getpid, compared only if the fork handler could not be registered). */
bool dlock__forked_since(uint64_t gen, pid_t pid);

/* ---- url.c ------------------------------------------------------------------ */

#define DLOCK_HOSTS_MAX     8 /* Sentinels, or a cluster's seeds, in one URL */
#define DLOCK_SENTINEL_PORT 26379

typedef struct dlock__addr {
    bool is_unix;
    char *host;     /* TCP: host name or address, without IPv6 brackets */
    int port;       /* TCP */
    char *path;     /* unix */
    char *user;     /* NULL: none (AUTH with a password alone) */
    char *password; /* NULL: none */
    int db;
    char *display; /* the URL without its password, for messages */
    /* rediss:// (TLS), and its parameters (percent-decoded; NULL: not given, the
     * client's dlock_config.tls or the default applies). */
    bool tls;
    char *cacert, *cacertdir, *cert, *key, *sni;
    int insecure; /* -1: not given; 0 or 1 */
    /* redis-sentinel:// and rediss-sentinel://: the master is whatever the Sentinels
     * name for master_name (host and port above are unused); user and password are
     * the master's, sentinel_user and sentinel_password the Sentinels'. */
    bool sentinel;
    char *master_name;
    char *sentinel_user, *sentinel_password;
    /* redis-cluster:// and rediss-cluster://: hosts are seeds of a Redis Cluster, asked
     * for its slot map (cluster.c); host and port above are unused, and the user and
     * password are every master's. */
    bool cluster;
    /* The Sentinels, or the cluster's seeds. */
    int nhosts;
    struct dlock__hostport {
        char *host;
        int port;
    } hosts[DLOCK_HOSTS_MAX];
} dlock__addr;

/* Parse one URL of len bytes. On error, returns DLOCK_ERR_INVALID and writes a message
 * naming the bad part into e. *out owns its strings: free with dlock__addr_clear. */
int dlock__url_parse(const char *url, size_t len, dlock__addr *out, dlock__err *e);
void dlock__addr_clear(dlock__addr *a);
/* A refused address: the formatted reason in e; returns DLOCK_ERR_INVALID. */
int dlock__url_bad(dlock__err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The length of the "scheme://" that s (n bytes) starts with, or 0 (url_list.c). */
size_t dlock__url_scheme_len(const char *s, size_t n);
/* The value of a hexadecimal digit, or -1 (percent-escapes here, in local.c names). */
int dlock__hexval(char c);
/* Parse a comma-separated list into a new array of *n addresses (at most max);
 * url_list.c. */
int dlock__url_parse_list(const char *list, int max, dlock__addr **out, int *n, dlock__err *e);

/* ---- glob.c ----------------------------------------------------------------- */

/* Whether str (slen bytes) matches the glob pat (plen bytes): '*', '?', "[set]" with
 * ranges and '!' or '^', '\' quoting; in at most of the order of plen x slen steps. */
bool dlock__glob_match(const char *pat, size_t plen, const char *str, size_t slen);

/* ---- reply.c ---------------------------------------------------------------- */

/* The largest reply we accept, and the most elements in one array. A lock reply is
 * tens of bytes; INFO is a few KiB. Anything past these is refused, not buffered. */
#define DLOCK_REPLY_MAX_BYTES    (256 * 1024)
#define DLOCK_REPLY_MAX_ELEMENTS 64

/* What one reader takes: arrays of at most max_elements; refused is set when it
 * refused one (both that and an allocation failure make the reader fail). */
typedef struct dlock__reader_cap {
    int max_elements;
    bool refused;
} dlock__reader_cap;

/* A redisReader whose replies are hiredis redisReply objects (freeReplyObject), and
 * that refuses arrays longer than the cap its privdata points at (a dlock__reader_cap,
 * set by the caller before each redisReaderGetReply). NULL when out of memory. */
redisReader *dlock__reader_new(void);

/* What an error reply (-PREFIX message) means: DLOCK_ERR_UNAVAILABLE, _AUTH or
 * _PROTOCOL, by meaning: a node that is busy, loading, read-only or out of memory
 * is unavailable for this attempt (never DLOCK_ERR_BUSY, which means a holder);
 * refused credentials are _AUTH; a reply of the wrong kind is _PROTOCOL. */
int dlock__server_error_code(const char *str, size_t len);
/* True for a -NOSCRIPT reply. */
bool dlock__is_noscript(const redisReply *r);

#endif /* DLOCK_BASE_H */
