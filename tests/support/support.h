/*
 * support.h: the test-support library (tests/support), shared by the integration
 * tests, the fault suite, the network-namespace scenarios, dlock-bench and the demo.
 *
 * Its concerns, each in its own file (or files):
 *   server.c   real redis-server processes: start (any address, port and options),
 *              stop, kill, restart, pause and resume; with server_registry.c (none
 *              outlives the process), server_clock.c (a clock of its own) and
 *              server_admin.c (admin connections), server_internal.h;
 *   cluster.c  a Redis Cluster of such servers, all masters: start, who owns a slot,
 *              and a slot's migration in steps that a test can act between;
 *   process.c  child processes: fork/exec with a clean descriptor table (dh_spawn),
 *              reaping with a grace period, and running a command to completion with
 *              its output captured (dh_run);
 *   procfs.c   what /proc says about this process: descriptors, threads, memory;
 *   env.c      the test's environment: clocks, the slack factor, the CLI's path,
 *              removing the directories tests make;
 *   tls.c      certificates for TLS tests: a CA of the test's own and what it signs;
 *   relay.c    the delaying and fault-injecting TCP relay (relay.h), with
 *              relay_pair.c and relay_faults.c (relay_internal.h);
 *   net.c      sockets: sending a whole buffer, a free port.
 *
 * Every server gets its own temporary directory under $DLOCK_TEST_TMP (or /tmp, or
 * the caller's parent directory) and no persistence unless its arguments ask for it.
 * Servers die with the process that started them even when it crashes: the child
 * asks for PR_SET_PDEATHSIG, and an atexit hook kills the survivors.
 *
 * Rules for the code that uses it:
 *   - start servers from the main thread (or a thread that outlives them): the kernel
 *     sends PR_SET_PDEATHSIG when the *thread* that forked the server exits;
 *   - never reap children with waitpid(-1, ...): that could reap a server the library
 *     still has to wait for; wait for your own children by PID;
 *   - a forked test child leaves with _exit() (atexit hooks are skipped in children
 *     anyway: the hook only acts in the process that started the servers).
 *
 * Functions that fail print why to stderr (with the server log's tail when a server
 * would not start) and return -1 or NULL; tests assert on that, so a missing
 * redis-server fails the test loudly instead of skipping it.
 */
#ifndef DLOCK_TEST_SUPPORT_H
#define DLOCK_TEST_SUPPORT_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- redis-server processes (server.c) ------------------------------------------ */

#define DH_EXTRA_MAX  16 /* slots in dh_server.extra, NULL terminator included */
#define DH_CONFIG_MAX 16 /* config lines dh_server_opts.config may hold */

/* Runs in the forked child just before exec (entering a network namespace, pinning
 * to a CPU): only async-signal-safe calls, since the parent may have threads. A
 * non-zero return makes the child exit with status 126 instead of running. */
typedef int (*dh_child_fn)(void *arg);

/* A server that also listens with TLS (PEM files, as redis-server's tls-* options). */
typedef struct dh_server_tls {
    const char *cert, *key; /* the server's certificate and key */
    const char *ca;         /* the CA its clients' certificates must come from */
    bool auth_clients;      /* require a client certificate (--tls-auth-clients yes) */
} dh_server_tls;

typedef struct dh_server_opts {
    /* Address the server binds and the library connects to; NULL: 127.0.0.1. */
    const char *bind;
    /* A fixed port; 0: a free one on bind (retried when another process takes it
     * first). */
    int port;
    /* More redis-server arguments, NULL-terminated (NULL for none), e.g.
     * {"--requirepass", "pw", NULL}; at most DH_EXTRA_MAX-1. They come last on the
     * command line, so they override the library's own. */
    const char *const *args;
    /* Lines of a configuration file written into the server's directory and read
     * first, NULL-terminated (NULL for none): options that are clearer as a file,
     * such as the TLS, cluster, sentinel or replica settings, e.g.
     * {"replicaof 127.0.0.1 6380", NULL}. At most DH_CONFIG_MAX. */
    const char *const *config;
    /* Where the server's own temporary directory is made; NULL: $DLOCK_TEST_TMP or
     * /tmp. */
    const char *parent_dir;
    /* Keep the directory when the server stops (also when $DLOCK_TEST_KEEP is set). */
    bool keep_dir;
    /* See dh_child_fn; NULL for nothing. */
    dh_child_fn child_setup;
    void *child_arg;
    /* TLS on a second free port (tls_port) besides the plain one, which stays for the
     * admin connections (dh_cmd: hiredis here speaks no TLS); url is then
     * rediss://HOST:TLS_PORT. NULL: no TLS. */
    const dh_server_tls *tls;
    /* The server's wall clock, as libfaketime's FAKETIME says it ("+10s", "-2m" (m is
     * minutes: a few milliseconds are "+0.015s"), "+0
     * x1.05" for a clock 5% fast): the server runs with libfaketime preloaded, reading
     * its clock from a file in its directory on every call, so that dh_server_set_clock
     * can step it while it runs. Only CLOCK_REALTIME is faked (TIME, key expiry), not
     * the monotonic clock its timers use. NULL: the host's clock. */
    const char *clock;
} dh_server_opts;

typedef struct dh_server {
    pid_t pid;              /* 0 when not running (stopped or killed) */
    int port;               /* kept across kill/restart */
    char host[64];          /* the bind address, also used to connect */
    char dir[512];          /* its --dir, removed by dh_server_stop */
    char url[128];          /* "redis://HOST:PORT" (no password), or with TLS
                               "rediss://HOST:TLS_PORT" */
    int tls_port;           /* 0: no TLS; kept across kill/restart */
    char tls_files[3][300]; /* cert, key, CA */
    bool tls_auth_clients;
    bool faked_clock;          /* runs under libfaketime (dh_server_opts.clock) */
    char *extra[DH_EXTRA_MAX]; /* copies of the extra arguments, NULL-terminated */
    bool has_config;           /* dir/redis.conf was written and is read first */
    bool keep_dir;
    dh_child_fn child_setup;
    void *child_arg;
} dh_server;

/* Set the clock of a server started with dh_server_opts.clock (the same forms), at
 * once and for its restarts. 0, or -1 after printing why. */
int dh_server_set_clock(dh_server *s, const char *clock);

/* Start a server on a free 127.0.0.1 port with extra_args (as dh_server_opts.args).
 * *s is overwritten. Returns 0 once the server answers PING (its PID checked through
 * INFO where the library can authenticate), -1 after printing why. */
int dh_server_start(dh_server *s, const char *const *extra_args);
/* The same with every option; o may be NULL (all defaults). */
int dh_server_start_opts(dh_server *s, const dh_server_opts *o);
/* Start s[0..n-1], each with extra_args; 0, or -1 with those started stopped again. */
int dh_servers_start(dh_server *s, int n, const char *const *extra_args);
/* The same with every option. The servers start together and are then waited for
 * one by one, so that their start-up times overlap. */
int dh_servers_start_opts(dh_server *s, int n, const dh_server_opts *o);
/* dh_server_stop on s[0..n-1], the SIGTERMs sent together so that the shutdowns
 * overlap. */
void dh_servers_stop(dh_server *s, int n);
/* The URLs of s[0..n-1], comma-separated (what dlock_client_new takes), into buf
 * (truncated to len - 1). */
void dh_server_urls(const dh_server *s, int n, char *buf, size_t len);

/* SIGTERM, wait up to 2 s, then SIGKILL; remove the directory (unless kept) and free
 * the argument copies. Safe on a killed or already stopped server, and on a zeroed
 * struct. */
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

/* For a signal handler that must not leave servers behind before it re-raises:
 * SIGKILL every server this process started, reap it and remove its directory's
 * files. Only async-signal-safe calls. The library blocks SIGINT, SIGTERM and SIGHUP
 * while it changes its table of servers, so the handler never sees half an entry. */
void dh_servers_kill_all_from_signal(void);
/* For a program (not a test) whose servers must not outlive a ^C or a kill: install
 * handlers for SIGINT, SIGTERM and SIGHUP that kill the servers, remove extra_dir
 * (NULL: none; it must be empty by then, as the servers' own are) and die of the
 * signal. */
void dh_servers_die_with_signals(const char *extra_dir);

/* Run one admin command (hiredis format, %s and %b as in redisCommand) on a fresh
 * connection with a 2 s timeout, authenticated with --requirepass when the server has
 * one. Returns the reply (free with freeReplyObject) or NULL after printing why.
 * Thread-safety: any thread (each call has its own connection). */
redisReply *dh_cmd(dh_server *s, const char *fmt, ...);

/* For the reply of a dh_cmd that must answer a status (+OK): 0, or -1 after printing
 * what came instead after what (the command); NULL (dh_cmd printed why) is -1 too.
 * Frees r. */
int dh_reply_status(redisReply *r, const char *what);
/* The same for one that must answer an integer: 0 with the integer in *out, or -1. */
int dh_reply_integer(redisReply *r, const char *what, long long *out);

/* Connect to the server as dh_cmd does (authenticated), for tests that issue many
 * commands. NULL after printing why. Free with redisFree. */
redisContext *dh_connect(dh_server *s);

/* A numeric field ("name:value" at the start of a line) of an INFO reply, or -1. */
long dh_info_long(const redisReply *r, const char *field);

/* The value of --requirepass among s's extra arguments (what dh_cmd authenticates
 * with, and a cluster's MIGRATE gives the target), or NULL. */
const char *dh_server_password(const dh_server *s);

/* ---- Redis Cluster (cluster.c) -------------------------------------------------- */

#define DH_CLUSTER_MAX   6     /* masters a dh_cluster may have */
#define DH_CLUSTER_SLOTS 16384 /* hash slots of every Redis Cluster */

typedef struct dh_cluster {
    int n;                          /* masters running (0 when stopped) */
    dh_server node[DH_CLUSTER_MAX]; /* each one an ordinary dh_server: dh_cmd, pause,
                                       kill and restart work on it */
    char id[DH_CLUSTER_MAX][41];    /* CLUSTER MYID of each */
    int bus_port[DH_CLUSTER_MAX];   /* each one's cluster bus (cluster-port) */
    int masters;                    /* node[0..masters) were started as masters */
    int replica_of[DH_CLUSTER_MAX]; /* the node each replica copies; -1: a master */
    /* The node index owning each slot, as the fixture assigned it (start, migrations)
     * and every node's CLUSTER SLOTS last confirmed. */
    int8_t owner[DH_CLUSTER_SLOTS];
} dh_cluster;

/* Start n masters (1 to DH_CLUSTER_MAX), each with cluster-enabled, a nodes.conf of
 * its own in its directory, cluster-node-timeout 2000 times the slack (so that a
 * stopped node is seen failed soon) and a cluster bus port chosen here (a node whose
 * bus port was taken before it could bind it is started again on another); slots
 * 0..16383 split in even ranges in node order; joined by CLUSTER MEET. Returns 0 once
 * dh_cluster_wait does, or -1 after printing why, with the servers stopped again. *cl
 * is overwritten.
 * o may be NULL; its options (args such as --requirepass, config lines, TLS) apply to
 * every node and come after the cluster's own settings, so they override them; its
 * port must be 0. A password must be given as --requirepass in args, where dh_cmd and
 * the migrations find it. With TLS the cluster runs on TLS (tls-cluster yes: the bus,
 * MIGRATE and the redirections use the TLS ports), and a node always asks the others
 * for a client certificate, whatever auth_clients says: give the nodes one fit for
 * clientAuth and signed by the CA, as the config lines "tls-client-cert-file PATH"
 * and "tls-client-key-file PATH" (else they offer their server certificate, which the
 * others refuse unless it is fit for clientAuth too, and never meet). */
int dh_cluster_start(dh_cluster *cl, int n, const dh_server_opts *o);
/* The same with a replica for each of the first `replicas` masters: node masters + i
 * copies node i (CLUSTER REPLICATE), and the start waits until each replica's link to
 * its master is up, so that a failover has a copy to promote. */
int dh_cluster_start_replicas(dh_cluster *cl, int masters, int replicas, const dh_server_opts *o);
/* After a test stopped `master` (dh_server_kill): wait until its replica has taken its
 * slots on every running node (the cluster's own failover, within its node timeout
 * and an election), and record it as their owner. 0, or -1 after printing why. */
int dh_cluster_failed_over(dh_cluster *cl, int master, int replica);
/* Stop every node (dh_servers_stop) and remove its directory. Safe twice. */
void dh_cluster_stop(dh_cluster *cl);

/* Wait until every node reports cluster_state:ok, knows all n nodes, serves all slots
 * (none failing), and its CLUSTER SLOTS names cl->owner's node for every slot at that
 * node's host and port: what a test may take for granted afterwards. Polled for up to
 * 10 s times the slack; 0, or -1 after printing the last disagreement. */
int dh_cluster_wait(dh_cluster *cl);

/* The index of the node that owns slot (cl->owner), or -1 for no such slot. */
int dh_cluster_owner(const dh_cluster *cl, int slot);
/* The slot of key as node 0's CLUSTER KEYSLOT answers, or -1 after printing why. */
int dh_cluster_keyslot(dh_cluster *cl, const char *key);

/* A slot's migration from node `from` (its owner) to node `to`, in its three steps,
 * so that a test can act between them (a client's view changes at each). Each
 * returns 0, or -1 after printing why.
 *   begin:  SETSLOT IMPORTING on `to`, then SETSLOT MIGRATING on `from`: from now on
 *           `from` answers -ASK for the slot's keys it no longer has;
 *   keys:   MIGRATE every key of the slot from `from` to `to`, in batches (with AUTH
 *           when the nodes have a password); may be called more than once;
 *   finish: the keys step again (keys written meanwhile), then SETSLOT NODE on `to`,
 *           on `from`, then on every other node; cl->owner records `to`; returns once
 *           dh_cluster_wait does. */
int dh_cluster_migrate_begin(dh_cluster *cl, int slot, int from, int to);
int dh_cluster_migrate_keys(dh_cluster *cl, int slot, int from, int to);
int dh_cluster_migrate_finish(dh_cluster *cl, int slot, int from, int to);

/* The URL of node i as a seed, "redis-cluster://HOST:PORT" ("rediss-cluster://" and
 * the TLS port with TLS), without a password; i < 0: every node as a seed,
 * comma-separated. Into buf, truncated to len - 1. */
void dh_cluster_url(const dh_cluster *cl, int i, char *buf, size_t len);

/* ---- child processes (process.c) ------------------------------------------------ */

/* Find an executable: $envvar if set (NULL: none), else name itself when it is a path
 * (one with a '/': /usr/bin/python3, Debian's, whatever python3 the PATH finds first),
 * else name on the PATH, else in /usr/local/sbin, /usr/sbin, /sbin and /usr/bin (a
 * stripped PATH may lack them). 0, or -1 when not found or not executable. */
int dh_find_exe(const char *name, const char *envvar, char *out, size_t outlen);

typedef struct dh_spawn_opts {
    int out_fd, err_fd; /* the child's stdout and stderr; -1: /dev/null */
    bool own_group;     /* a process group of its own, so that signals aimed at ours
                           (a terminal's ^C, a test's kill of its group) miss it */
    dh_child_fn child_setup;
    void *child_arg;
    /* Changes to this process's environment for the child ("NAME=value" sets, "NAME"
     * removes), NULL-terminated; NULL: none. */
    const char *const *env;
} dh_spawn_opts;

/* fork + exec argv[0] (a path) with stdin from /dev/null, no other descriptor
 * inherited, the signal mask cleared and SIGPIPE, SIGINT, SIGTERM and SIGHUP at their
 * defaults, killed if this process dies (PR_SET_PDEATHSIG: call it from a thread that
 * outlives the child). The PID, or -1 after printing why. */
pid_t dh_spawn(const char *const argv[], const dh_spawn_opts *o);

/* Wait up to grace_ms for pid to exit on its own; then SIGKILL its process group and
 * itself and reap it. *status (may be NULL) gets its wait status. True when it left
 * within the grace period. */
bool dh_reap(pid_t pid, int64_t grace_ms, int *status);

/* True when pid has exited; reaps it (status may be NULL). */
bool dh_exited(pid_t pid, int *status);

/* fork/exec argv (PATH searched when argv[0] has no '/'), capture its stdout and stderr
 * into out/err (NUL-terminated, truncated to outlen-1/errlen-1; either may be NULL).
 * env: NULL to inherit the environment, else "NAME=VALUE" entries added to it
 * (replacing NAME), and "NAME" alone to remove NAME. The child gets /dev/null as
 * stdin, no other inherited descriptors, and dies if this process dies. A child still
 * running after 120 s is killed. Returns its exit status, 128+n if signal n killed it
 * (127 when it could not be executed), -1 on a library error. */
int dh_run(const char *const argv[], const char *const env[], char *out, size_t outlen, char *err,
           size_t errlen);

/* ---- this process, from /proc (procfs.c) ---------------------------------------- */

/* Descriptors open in this process (entries of /proc/self/fd, the listing's own
 * excluded), or -1. */
int dh_fd_count(void);
/* Threads of this process ("Threads:" in /proc/self/status), or -1. */
int dh_thread_count(void);
/* A size field of /proc/self/status in KiB ("VmRSS", "VmSize", "VmPeak"), or -1. */
long long dh_status_kib(const char *field);

/* ---- sockets (net.c) ------------------------------------------------------------ */

/* Send all of buf on the socket fd, retrying after signals, MSG_NOSIGNAL (a peer that
 * closed is EPIPE, not SIGPIPE). 0, or -1 with errno from send(2): on a non-blocking
 * socket, EAGAIN when its buffer is full. */
int dh_send_all(int fd, const void *buf, size_t len);
/* A port free on host (an IPv4 address; another: the loopback) now, bound with port 0
 * and closed again, or -1. Free only now: the caller copes with a race. */
int dh_free_port(const char *host);

/* ---- the environment (env.c) ---------------------------------------------------- */

/* ---- certificates for TLS tests (tls.c) ----------------------------------------- */

typedef struct dh_tls_cert_opts {
    const char *san;   /* subjectAltName, as openssl's config says it:
                          "DNS:localhost,IP:127.0.0.1" */
    long not_before_s; /* validity, in seconds from now (negative: in the past) */
    long not_after_s;
    bool client; /* a client certificate (clientAuth), else a server's (serverAuth) */
} dh_tls_cert_opts;

/* A new temporary directory for certificates under $DLOCK_TEST_TMP (or /tmp) into
 * out; 0 or -1. dh_tls_dir_remove removes it and its files. */
int dh_tls_dir(char *out, size_t len);
void dh_tls_dir_remove(const char *dir);
/* A self-signed CA: dir/NAME.crt and dir/NAME.key. 0, or -1 after printing why. */
int dh_tls_make_ca(const char *dir, const char *name);
/* dir/NAME.crt and dir/NAME.key (subject CN=NAME), signed by the CA dir/CA.crt. */
int dh_tls_issue(const char *dir, const char *ca, const char *name, const dh_tls_cert_opts *o);
/* The set the TLS tests share, in dir (each NAME as dir/NAME.crt and dir/NAME.key):
 * the CAs "ca" and "evil"; signed by ca, "server" (localhost and 127.0.0.1, valid
 * now), "other" (other.test only), "expired" (localhost and 127.0.0.1, for a day that
 * ended yesterday) and the client certificate "client"; signed by evil, the client
 * certificate "stranger"; and dir/cadir, ca alone under its hashed name. 0 or -1. */
int dh_tls_make_set(const char *dir);

/* $DLOCK_TEST_SLACK (a positive integer), default 1: the factor for liveness bounds. */
long long dh_slack(void);

/* Milliseconds on CLOCK_MONOTONIC. */
int64_t dh_now_ms(void);
/* The same in microseconds. */
int64_t dh_now_us(void);

/* Sleep ms milliseconds (restarted after signals). */
void dh_sleep_ms(int64_t ms);

/* Remove dir and everything below it, links not followed; best effort (what cannot
 * be removed stays). Nothing for NULL or "". */
void dh_rm_tree(const char *dir);

/* $DLOCK_CLI (CTest sets it to the built dlock command). Exits the test process with
 * a message when it is unset. */
const char *dh_cli_path(void);

#endif /* DLOCK_TEST_SUPPORT_H */
