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

/* A client of it_node that listens for wake-ups already: it waited once (for a name
 * another client holds, until its short wait ran out). Only such a client's waiter
 * waits in the client, registered, without asking the servers: a client's first wait
 * of all starts the listening, which may block, so it attempts. */
dlock_client *it_hot_client(void);

/* Acquire with options o; asserts DLOCK_OK and returns the handle. */
dlock_lock *it_acquire_opts(dlock_client *c, const char *name, const dlock_opts *o);
/* The same with a ttl and no wait. */
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

/* Take name for ttl_ms with c (whose servers' first n are srv) so that each of those n
 * holds it, asserted (up to 500 ms times the slack; the others may be down). A round
 * ends at a quorum, and an acquisition given up on a connection still in its handshake
 * closes it rather than run late, so a fresh client's first lock may reach only a
 * quorum; a PING to every server first leaves each of c's connections established, so
 * the acquisition goes out whole to all of them, and what follows on those connections
 * finds it there. */
dlock_lock *it_acquire_on_all(dlock_client *c, const char *name, int64_t ttl_ms, dh_server *srv,
                              int n);

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

/* ---- itest_files.c, and the error tests' sentinel ------------------------------------ */

/* The temporary directories and files above (it_tmpdir, it_tmpdir_remove, it_path,
 * it_slurp) and the directory of local locks (it_local_dir, it_local_url,
 * it_local_setup, it_local_teardown, it_srv_local_*) are defined in itest_files.c, which
 * it_add_tests (tests/integration/CMakeLists.txt) links into every test it defines, and
 * test_no_randomness links too. The local-lock tests' own helpers are itest_local.c's,
 * below. */

/* A pointer value no call returns, for an out-parameter that a failing call must
 * overwrite with NULL: `dlock_lock *l = IT_SENTINEL(l);`. */
#define IT_SENTINEL(p) ((void *)&(p))

/* ---- itest_stock.c: the stock tests' helpers --------------------------------------- */

/* Linked by test_stock.c and the files split from it; on it_srv. it_stock_client: a
 * client of it_srv with a per-node deadline of a second (times the slack).
 * it_stock_field: a field of sku's stock hash ("dlock:{SKU}:stock") on s, -1 when
 * missing; it_stock_card: the size of its set "dlock:{SKU}:stock:SUFFIX".
 * it_stock_show: print a code other than DLOCK_OK, with the detail. it_stock_expect:
 * assert sku's status (stock, available, reserved, sold) and that stock == sold +
 * reserved + available. it_stock_set: set sku's stock, asserting DLOCK_OK.
 * it_stock_reserve: reserve qty with a lease and a wait (dlock_stock_reserve's code, the
 * id in id); it_stock_reserve_ok: the same without a wait, asserting DLOCK_OK and a
 * well-formed id. */
typedef char it_res_id[DLOCK_TOKEN_LEN + 1];
dlock_client *it_stock_client(void);
long long it_stock_field(dh_server *s, const char *sku, const char *name);
long long it_stock_card(dh_server *s, const char *sku, const char *suffix);
void it_stock_show(const char *what, int rc);
void it_stock_expect(dlock_client *c, const char *sku, int64_t stock, int64_t avail,
                     int64_t reserved, int64_t sold);
void it_stock_set(dlock_client *c, const char *sku, int64_t qty);
int it_stock_reserve(dlock_client *c, const char *sku, int64_t qty, int64_t lease_ms,
                     int64_t wait_ms, it_res_id id);
void it_stock_reserve_ok(dlock_client *c, const char *sku, int64_t qty, int64_t lease_ms,
                         it_res_id id);

/* ---- itest_local.c: the local-lock tests' helpers ---------------------------------- */

/* Linked by test_local.c and the files split from it, whose group shares it_local_dir
 * (it_local_setup). it_local_client: a client of it_local_url, asserted.
 * it_local_take: acquire name waiting up to wait_ms, asserting DLOCK_OK.
 * it_local_expect_busy: a try (no wait; shared or not) that must be refused with
 * DLOCK_ERR_BUSY and leave the handle NULL. */
dlock_client *it_local_client(void);
dlock_lock *it_local_take(dlock_client *c, const char *name, int64_t wait_ms);
void it_local_expect_busy(dlock_client *c, const char *name, int shared);
/* Forked children. it_local_child: run fn(arg) in one, which exits with its return
 * value; it_local_wait_exit: its status as a shell shows it (128 + N for signal N).
 * it_local_put and it_local_get: write and read whole small messages on a pipe between a
 * child and the test (a short write exits the child with 90; a read that does not come
 * within timeout_ms is false). */
pid_t it_local_child(int (*fn)(void *), void *arg);
int it_local_wait_exit(pid_t pid);
void it_local_put(int fd, const void *buf, size_t len);
bool it_local_get(int fd, void *buf, size_t len, int64_t timeout_ms);
/* What a child takes, and the pipe it reports on. it_local_child_take, in the child: a
 * client of its own and the lock a describes, or NULL. it_local_child_started: run fn(a)
 * in a child that reports on a new pipe p (a->fd is its write end), and wait for its
 * first report, len bytes into buf. it_local_close_pipe closes both ends.
 * it_local_child_report: the same for a child that reports once and exits 0. */
typedef struct it_local_pipe_arg {
    const char *name;
    int fd;          /* the write end the child reports on */
    int64_t wait_ms; /* waiter */
    int64_t ttl_ms;
    int shared;
    const char *label;
} it_local_pipe_arg;
dlock_lock *it_local_child_take(const it_local_pipe_arg *a);
pid_t it_local_child_started(int (*fn)(void *), it_local_pipe_arg *a, int p[2], void *buf,
                             size_t len);
void it_local_close_pipe(int p[2]);
void it_local_child_report(int (*fn)(void *), it_local_pipe_arg *a, void *buf, size_t len);

/* ---- itest_handoff.c: the handoff tests' helpers ---------------------------------- */

/* Linked by test_handoff.c and the files split from it; waiters on it_nodes.
 * it_queue_entry: name's queue entry at rank `rank` on node s, "<handoff ms> <limit>
 * <channel length> <channel><value>" (limit 0: an exclusive waiter): copies the value
 * (what the lock will hold once handed over) into value and returns the handoff lease. */
long long it_queue_entry(dh_server *s, const char *name, int rank, char *value, size_t len);

/* What a child waiter reports through its pipe: one write, below PIPE_BUF, so that the
 * reports of several processes never interleave. */
typedef struct it_waiter_report {
    int32_t idx, rc;
    uint64_t fence;
    int64_t got_us;       /* CLOCK_MONOTONIC, which every process on the host shares */
    int64_t remaining_ms; /* dlock_remaining_ms as the acquire returned */
    char token[DLOCK_TOKEN_LEN + 1];
} it_waiter_report;
/* A waiter in a forked child: its own client of it_node_urls (it_config_init), one
 * blocked acquire, a report, the release; exit status 0 on success. */
typedef struct it_child_waiter {
    const char *name;
    int fair;
    int64_t wait_ms, ttl_ms;
    int report_fd; /* -1: none */
    int go_fd;     /* -1: release at once; else release once a byte (or EOF) arrives */
    int idx;
    int nclose, close_fd[2]; /* this test's descriptors the child has no use for */
} it_child_waiter;
/* Fork a child waiter w. It dies with this process (PR_SET_PDEATHSIG), so a failed
 * assertion here leaves no waiter behind. */
pid_t it_spawn_waiter(const it_child_waiter *w);
/* it_expect_exit: reap pid (waiting up to 5 s times the slack) and assert that it
 * exited with code. it_kill_and_reap: SIGKILL pid, reap it, and assert that it died of
 * that. */
void it_expect_exit(pid_t pid, int code);
void it_kill_and_reap(pid_t pid);
/* Read one report, waiting at most timeout_ms: a child that never reports fails the
 * test instead of hanging it. */
void it_read_report(int fd, it_waiter_report *r, int64_t timeout_ms);

/* What the tests keep of a holder's lock (dlock_release frees the handle). */
typedef struct it_held {
    uint64_t fence;
    char token[DLOCK_TOKEN_LEN + 1];
} it_held;
it_held it_keep(const dlock_lock *l);

/* ---- itest_cli.c: the dlock command's tests' helpers ------------------------------- */

/* Linked by test_cli.c, test_run.c and the files split from them. it_lock_exists and
 * it_lock_pttl: EXISTS and PTTL of lock name's key on s. */
long long it_lock_exists(dh_server *s, const char *name);
long long it_lock_pttl(dh_server *s, const char *name);
/* A failure: exit `want`, nothing on stdout, and exactly one line on stderr besides the
 * library's warnings ("dlock: warning: ..."), the last one, which starts with "dlock: "
 * and contains needle (NULL: anything). With strict, no warning line either. */
void it_expect_failure(const it_run *r, int want, const char *needle, bool strict);
/* stderr err is exactly one line, "dlock: ...", containing needle (NULL: anything). */
void it_expect_one_line(const char *err, const char *needle);
/* Parse "TOKEN FENCE\n": 32 lowercase hex characters, one space, a decimal number, one
 * newline, nothing else. */
void it_parse_token_line(const char *out, char token[DLOCK_TOKEN_LEN + 1], uint64_t *fence);
/* `dlock acquire -t TTL -w 0 NAME` against it_srv: asserts that it succeeded, silently,
 * and returns the token and fence it printed. */
void it_cli_acquire(const char *name, const char *ttl, char token[DLOCK_TOKEN_LEN + 1],
                    uint64_t *fence);

/* dlock started in the background (`dlock run` mostly) against it_srv, its stdout and
 * stderr going to files in it_local_dir: it_run_file(NAME) is it_local_dir/NAME
 * (it_path), it_wait_for_file waits (timeout_ms times the slack) until a file exists
 * and is not empty. it_bg_spawn starts the command with the arguments that follow, up
 * to a NULL, its output into TAG.out and TAG.err, with the default signal dispositions.
 * it_bg_wait_or_kill: its exit status as a shell shows it, or -1 after killing it when
 * it did not exit within timeout_ms (times the slack); it_bg_wait: the same, failing the
 * test on a timeout; it_bg_expect: fail, showing its output, unless status is want. */
typedef struct it_bg {
    pid_t pid;
    int64_t started_ms;
    char out[600], err[600];
} it_bg;
const char *it_run_file(const char *name);
void it_wait_for_file(const char *file, int64_t timeout_ms);
void it_bg_spawn(it_bg *b, const char *tag, ...);
int it_bg_wait_or_kill(it_bg *b, int64_t timeout_ms);
int it_bg_wait(it_bg *b, int64_t timeout_ms);
void it_bg_expect(it_bg *b, int status, int want);

#endif /* DLOCK_ITEST_H */
