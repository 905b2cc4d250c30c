/*
 * itest.h: helpers shared by the integration tests (on top of the support library): clients
 * with explicit deadlines, looking at the lock keys from outside, capturing the log.
 *
 * Include after <cmocka.h>: the helpers assert.
 */
#ifndef DLOCK_ITEST_H
#define DLOCK_ITEST_H

#include "dlock.h"
#include "relay.h"
#include "support.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* The server of a test file whose tests share one: it_srv_setup (a cmocka setup, for a
 * group or a single test) starts it on a free port and asserts that it came up;
 * it_srv_teardown stops it, paused or not, and removes its directory. */
extern dh_server it_srv;
int it_srv_setup(void **state);
int it_srv_teardown(void **state);

/* A plain server and one that wants a password, shared by the tests of a file:
 * it_srv_auth_setup (a cmocka setup) starts it_srv and it_auth_srv, which requires
 * IT_PASSWORD; it_srv_auth_teardown stops both. */
#define IT_PASSWORD "cli-test-secret"
extern dh_server it_auth_srv;
int it_srv_auth_setup(void **state);
int it_srv_auth_teardown(void **state);

/* Independent servers shared by the tests of a group, one or three of them:
 * it_nodes_setup1 and it_nodes_setup3 (cmocka setups) start them and list their URLs in
 * it_node_urls, it_nodes_teardown stops them, and it_nodes_client makes a client of
 * them all with the timing tests' config (it_config_init). */
#define IT_NODES_MAX 3
extern dh_server it_node[IT_NODES_MAX];
extern char it_node_urls[IT_NODES_MAX * 140];
extern int it_nodes; /* how many run */
int it_nodes_setup1(void **state);
int it_nodes_setup3(void **state);
int it_nodes_teardown(void **state);
dlock_client *it_nodes_client(void);
/* Run a test file's two groups of such tests, `one` on a single server and `three` on
 * three, named PREFIX_1_node and PREFIX_3_nodes; the count of failures. */
#define IT_NODES_GROUPS(prefix, one, three)                                                        \
    (cmocka_run_group_tests_name(prefix "_1_node", one, it_nodes_setup1, it_nodes_teardown) +      \
     cmocka_run_group_tests_name(prefix "_3_nodes", three, it_nodes_setup3, it_nodes_teardown))
/* Wait until name's queue has `want` entries on every one of the it_nodes: a waiter is
 * queued only once its entry is on the servers, which is what the next step of a test
 * relies on. Fails after 3 s (times the slack). */
void it_wait_queued(const char *name, long long want);
/* The same on servers s[0..n). */
void it_wait_queued_on(dh_server *s, int n, const char *name, long long want);
/* A waiter of client w for name, waiting without end with a lease of ttl_ms: its
 * first step taken (refused), and its entry in the queue on servers s[0..n). */
dlock_pending *it_queue_waiter(dlock_client *w, const char *name, int64_t ttl_ms, dh_server *s,
                               int n);

/* Acquisition in steps (itest_pending.c, linked by the tests that use it).
 * it_pending_start: dlock_acquire_start of name on c, waiting up to wait_ms (-1: without
 * end) with a lease of 10 s; asserts success. it_pending_readable: asserts that p's
 * descriptor becomes readable within 2 s (times the slack). it_pending_done: free p,
 * then release l, the lock it gave, asserting DLOCK_OK. */
dlock_pending *it_pending_start(dlock_client *c, const char *name, int64_t wait_ms);
void it_pending_readable(dlock_pending *p);
void it_pending_done(dlock_pending *p, dlock_lock *l);
/* Run check on a client of local locks (file://) in a new directory (it_tmpdir, named
 * after prefix), then free it and remove the directory: a file:// client waits on its
 * own thread, so its calls in steps are refused. */
void it_on_local_client(const char *prefix, void (*check)(dlock_client *local));

/* Servers each behind a fault relay of its own (tests/support/relay.h), shared by the
 * tests of a file: it_relayed_setup (a cmocka setup) starts them and asserts that they
 * came up; it_relayed_urls lists the relays' URLs; it_relayed_teardown stops them. */
#define IT_RELAYED 3
extern dh_server it_relayed_srv[IT_RELAYED];
extern fr_relay *it_relay[IT_RELAYED];
extern char it_relayed_urls[IT_RELAYED * 64];
int it_relayed_setup(void **state);
int it_relayed_teardown(void **state);

/* A directory of local locks shared by the tests of a file (file:// clients, no
 * server): it_local_setup (a cmocka setup) makes it_local_dir (it_tmpdir, named after
 * the test program) and sets it_local_url to "file://" it_local_dir;
 * it_local_teardown removes it. */
extern char it_local_dir[320];
extern char it_local_url[340];
int it_local_setup(void **state);
int it_local_teardown(void **state);
/* Both: it_srv and the local-lock directory, for a file's tests that use the two. */
int it_srv_local_setup(void **state);
int it_srv_local_teardown(void **state);

/* A case of a table-driven test: f runs with *state pointing at arg, under the name
 * given (cmocka's own macros name a case after its function, which here serves every
 * case). IT_CASE_FIXTURE: the same with a fresh it_srv for the case; IT_CASE_WITH:
 * with a setup and a teardown of the caller's. */
#define IT_CASE_WITH(name, f, setup, teardown, arg)                                                \
    {                                                                                              \
        (name), (f), (setup), (teardown), (arg)                                                    \
    }
#define IT_CASE(name, f, arg)         IT_CASE_WITH(name, f, NULL, NULL, arg)
#define IT_CASE_FIXTURE(name, f, arg) IT_CASE_WITH(name, f, it_srv_setup, it_srv_teardown, arg)

/* Per-node command deadline for tests where timing matters: 100 ms, times the slack
 * (not less: valgrind and TSan slow every call down, and a tighter deadline would
 * fail for the tool, not for the library). */
int64_t it_timeout_ms(void);

/* A client for server s (its url) with timeout_ms and connect_timeout_ms set
 * explicitly; asserts success. */
dlock_client *it_client(dh_server *s, int64_t timeout_ms);

/* A zeroed config with the timeouts of timing-sensitive tests: it_timeout_ms() per
 * node command, one second (times the slack) to connect. */
void it_config_init(dlock_config *cfg);

/* The number of script calls (EVALSHA and EVAL) server s has received: the lock
 * commands clients sent, a proxy for round trips. Not total_commands_processed,
 * which also counts every command a script runs. */
long long it_script_calls(dh_server *s);
/* Calls of one command (lowercase, as INFO commandstats names it) server s has
 * received. */
long long it_cmd_calls(dh_server *s, const char *cmd);

/* Same, with a caller's config (its timeouts are used as given). */
dlock_client *it_client_cfg(const char *servers, const dlock_config *cfg);

/* "dlock:{name}", "dlock:{name}:fence" and "dlock:{name}:queue" (the fixed default key
 * layout). */
void it_key(char *buf, size_t len, const char *name);
void it_fence_key(char *buf, size_t len, const char *name);
void it_queue_key(char *buf, size_t len, const char *name);

/* The value of an integer reply r (from dh_cmd), which is freed; asserts that r is
 * one. */
long long it_int_reply(redisReply *r);

/* Looking at a key from outside, through dh_cmd. */
long long it_pttl(dh_server *s, const char *key); /* -2 missing, -1 no expiry */
long long it_exists(dh_server *s, const char *key);
long long it_connected_clients(dh_server *s); /* INFO clients: connected_clients */
char *it_get(dh_server *s, const char *key);  /* malloc'd copy or NULL when missing */
void it_del(dh_server *s, const char *key);

/* The environment changes (for dh_run) under which the dlock command talks to s
 * alone: DLOCK_SERVERS set to its URL, DLOCK_PASSWORD from the caller's shell removed.
 * Static storage, rewritten by each call. */
const char *const *it_cli_env(const dh_server *s);

/* One run of the dlock command: its exit status and what it printed. */
typedef struct it_run {
    int status;
    char out[8192];
    char err[8192];
} it_run;
/* Run the dlock command to its end under env (dh_run's form): its arguments are those
 * of pre (NULL-terminated; NULL for none), then those of ap up to a NULL. Asserts that
 * it ran. */
void it_cli_va(it_run *r, const char *const env[], const char *const *pre, va_list ap);
/* it_cli_va with the arguments that follow pre, up to a NULL. */
void it_cli(it_run *r, const char *const env[], const char *const *pre, ...);
/* Exit `want`, or fail showing what it printed. */
void it_expect_status(const it_run *r, int want);

/* Assert that lock name's key on s holds token (the first DLOCK_TOKEN_LEN bytes of
 * its value): its holder's lock is untouched. */
void it_expect_holder(dh_server *s, const char *name, const char *token);

/* How many of the servers s[0..n-1] hold lock name with l's token: a Redlock round
 * ends at a quorum, so the others may not have it (yet). */
int it_holding(dh_server *s, int n, const char *name, const dlock_lock *l);

/* dlock_inspect_shared of name into list[0..max-1]: asserts that it succeeds and that
 * exactly `want` shared holders hold it, all of them listed. */
void it_expect_shared(dlock_client *c, const char *name, dlock_holder *list, int max, int want);

/* Acquire with a ttl and no wait; asserts DLOCK_OK and returns the handle. */
dlock_lock *it_acquire(dlock_client *c, const char *name, int64_t ttl_ms);

/* A worker's loop of locked sections, for a thread or a forked child: `rounds` times,
 * wait for name without a deadline (permits 0: the lock itself, dlock_acquire; else one
 * of that many permits, dlock_sem_acquire) with the lease ttl_ms (0: the default), run
 * section holding it, and release. On client, or else on a client of its own for
 * servers and cfg (NULL: the defaults), made first and freed at the end. */
typedef struct it_rounds {
    dlock_client *client;
    const char *servers;
    const dlock_config *cfg;
    const char *name;
    int64_t permits;
    int64_t ttl_ms;
    int rounds;
    int (*section)(dlock_lock *l, void *arg); /* 0, or a status to stop with */
    void *arg;
} it_rounds;
/* 0 when every round went through; else the step that failed (and stopped the loop):
 * IT_ROUNDS_CLIENT, IT_ROUNDS_ACQUIRE, IT_ROUNDS_RELEASE, or what section returned. A
 * child can exit with it. */
#define IT_ROUNDS_CLIENT  1
#define IT_ROUNDS_ACQUIRE 2
#define IT_ROUNDS_RELEASE 3
int it_rounds_run(const it_rounds *r);

/* Run fn(arg) in n forked children, each exiting with what fn returns, and wait for
 * them all: fails unless each exited 0. */
void it_fork_all(int n, int (*fn)(void *arg), void *arg);

/* The holders of one name, counted in memory shared across fork(): how many hold it
 * now, the most that ever did, and the sections completed. it_board_enter and
 * it_board_leave count one holder in and out. */
typedef struct it_board {
    _Atomic int now, peak, sections;
    int64_t hold_ms; /* how long it_board_procs's workers hold */
} it_board;
it_board *it_board_new(void);
void it_board_free(it_board *b);
void it_board_enter(it_board *b);
void it_board_leave(it_board *b);
/* procs forked processes each run the rounds r describes (on a client of their own;
 * r's section and arg are set here), holding the name hold_ms on a new board, which is
 * returned (for the caller to check and free) once every process went through. */
it_board *it_board_procs(int procs, it_rounds *r, int64_t hold_ms);

/* Take name with a lease of ttl_ms and release it, asserting both: c is then connected
 * to every server that answered and the scripts are in their caches, as in steady
 * state (a first EVALSHA is refused with -NOSCRIPT and sent again as EVAL). */
void it_warm_up(dlock_client *c, const char *name, int64_t ttl_ms);

/* Print a code and the thread's detail, for results a test shows but does not assert. */
void it_show(const char *what, int err);

/* The log callback's messages, for dlock_config.log. */
#define IT_LOG_MAX 64
typedef struct it_log {
    pthread_mutex_t mu;
    int n;
    int level[IT_LOG_MAX];
    char msg[IT_LOG_MAX][512];
} it_log;

void it_log_init(it_log *lg);
void it_log_cb(void *user, int level, const char *msg);
/* Messages at `level` containing `needle` (NULL: any). */
int it_log_count(it_log *lg, int level, const char *needle);

/* A new directory of the test's own, "PREFIX.XXXXXX" under $DLOCK_TEST_TMP (or /tmp,
 * made if missing), into dir: 0, or -1 with the reason on stderr. it_tmpdir_remove
 * removes it and what it holds, unless DLOCK_TEST_KEEP is set (to look at what a
 * failed test left): 0, or -1 with the reason on stderr. */
int it_tmpdir(char *dir, size_t len, const char *prefix);
int it_tmpdir_remove(const char *dir);
/* dir/name, in a static ring of eight (a test uses a few at a time). */
const char *it_path(const char *dir, const char *name);
/* A file's text (its first 64 KiB), malloc'd; "" when it is missing. */
char *it_slurp(const char *file);

/* The TLS tests' certificates (dh_tls_make_set), made once per test process in
 * it_tls_dir: it_tls_setup and it_tls_teardown are a cmocka group's setup and
 * teardown, and it_tls_file(NAME) is it_tls_dir/NAME (from a few rotating buffers, so
 * that one call may use several). */
extern char it_tls_dir[512];
int it_tls_setup(void **state);
int it_tls_teardown(void **state);
const char *it_tls_file(const char *name);

#endif /* DLOCK_ITEST_H */
