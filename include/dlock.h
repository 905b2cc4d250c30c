/*
 * dlock.h: distributed locks on Redis (single node and Redlock over N masters).
 *
 * This is the only public header of libdlock and its API reference.
 *
 * Thread-safety, unless a function says otherwise:
 *   - dlock_client: any thread, at any time (it keeps a pool of connections);
 *   - dlock_lock:   one thread at a time;
 *   - the log callback runs on the thread whose call produced the message, or on one
 *     of the client's two background threads: the wake-up thread (started by the
 *     first dlock_acquire that waits) and the renewal thread (started by the first
 *     lock taken with auto_renew); dlock_client_free stops both.
 *
 * Ownership: strings passed in are copied before the call returns. A returned
 * `const char *` is borrowed and its lifetime is stated next to the function.
 *
 * Errors: every fallible call returns DLOCK_OK (0) or a DLOCK_ERR_* code. The
 * code has a fixed message (dlock_strerror) and the calling thread's last
 * failure has a detail (which server, what it said) from dlock_errmsg().
 *
 * Not reentrant: a thread that waits for a name it already holds waits until
 * its own lease ends.
 */
#ifndef DLOCK_H
#define DLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version lives here only; CMakeLists.txt reads it from these lines. */
#define DLOCK_VERSION_MAJOR  0
#define DLOCK_VERSION_MINOR  1
#define DLOCK_VERSION_PATCH  0
#define DLOCK_VERSION_STRING "0.1.0"
/* One number that orders versions: 0x00MMmmpp. */
#define DLOCK_VERSION_HEX                                                                          \
    ((DLOCK_VERSION_MAJOR << 16) | (DLOCK_VERSION_MINOR << 8) | DLOCK_VERSION_PATCH)

#if defined(DLOCK_BUILDING) && defined(__GNUC__)
#define DLOCK_API __attribute__((visibility("default")))
#else
#define DLOCK_API
#endif

/* Limits of the arguments the API accepts; outside them a call is DLOCK_ERR_INVALID. */
#define DLOCK_TTL_MIN_MS                 10         /* shortest lease */
#define DLOCK_TTL_MAX_MS                 2147483647 /* longest lease, 2^31-1 ms (about 24.8 days) */
#define DLOCK_TTL_DEFAULT_MS             30000      /* lease when dlock_opts.ttl_ms is 0 */
#define DLOCK_FENCE_RETENTION_DEFAULT_MS 3600000    /* fence counters kept an hour unused */
#define DLOCK_FENCE_RETENTION_MAX_MS     INT64_C(31536000000) /* a year */
#define DLOCK_NAME_MAX                   4096 /* bytes in a lock name, not counting the NUL */
#define DLOCK_PREFIX_MAX                 256  /* bytes in a key prefix */
#define DLOCK_LABEL_MAX                  256  /* bytes in a holder label */
#define DLOCK_SERVERS_MAX                32   /* servers in one client */
#define DLOCK_TOKEN_LEN                  32   /* a token is 128 random bits in lowercase hex */
#define DLOCK_PERMITS_MAX                2147483647 /* permits of one semaphore */
#define DLOCK_LINGER_MAX_MS              1000       /* dlock_opts.linger_ms */

/*
 * Error codes. The list is append-only: a number is never reused or renumbered.
 * XX(name, number, message) generates the enum, dlock_strerror() and dlock_errname().
 */
#define DLOCK_ERR_MAP(XX)                                                                          \
    XX(OK, 0, "success")                                                                           \
    XX(ERR_BUSY, 1, "lock is held by another owner")                                               \
    XX(ERR_NOQUORUM, 2, "not enough servers answered to reach a quorum")                           \
    XX(ERR_LOST, 3, "lock is no longer held by this owner")                                        \
    XX(ERR_INVALID, 4, "invalid argument")                                                         \
    XX(ERR_IO, 5, "connection to the server failed")                                               \
    XX(ERR_TIMEOUT, 6, "server did not answer in time")                                            \
    XX(ERR_PROTOCOL, 7, "unexpected reply from the server")                                        \
    XX(ERR_AUTH, 8, "authentication or permission refused by the server")                          \
    XX(ERR_NOMEM, 9, "out of memory")                                                              \
    XX(ERR_CLOSED, 10, "client is closed or was inherited across fork()")                          \
    XX(ERR_CANCELED, 11, "wait canceled through cancel_fd")                                        \
    XX(ERR_UNAVAILABLE, 12, "server is temporarily unable to serve (loading, busy, read-only)")    \
    XX(ERR_FENCED, 13, "refused: a write with a newer fence was already accepted")                 \
    XX(ERR_AGAIN, 14, "not finished: step again when the fd is readable or the time is due")       \
    XX(ERR_WOULDBLOCK, 15, "the next step would block: take it with dlock_pending_step")

enum dlock_error {
#define DLOCK_XX_(name, num, msg) DLOCK_##name = num,
    DLOCK_ERR_MAP(DLOCK_XX_)
#undef DLOCK_XX_
};

/* The fixed message of an error code; "unknown error" for a code not in the list.
 * Borrowed, static: valid for the life of the process. Thread-safety: any thread. */
DLOCK_API const char *dlock_strerror(int err);

/* The code's name, e.g. "DLOCK_ERR_BUSY"; "DLOCK_ERR_UNKNOWN" for a code not in the list.
 * Borrowed, static. Thread-safety: any thread. */
DLOCK_API const char *dlock_errname(int err);

/* Detail of the calling thread's last failed dlock call: which server, what it said,
 * or which argument was wrong. Empty string after a success. Borrowed: valid until
 * this thread's next dlock call. Thread-safety: per thread. */
DLOCK_API const char *dlock_errmsg(void);

/* "0.1.0" (DLOCK_VERSION_STRING of the library actually loaded). */
DLOCK_API const char *dlock_version(void);

typedef struct dlock_client dlock_client; /* opaque; safe to share between threads */
typedef struct dlock_lock dlock_lock;     /* opaque; one held lock; one thread at a time */

/* Log levels of dlock_config.log. */
enum dlock_log_level { DLOCK_LOG_ERROR = 0, DLOCK_LOG_WARN = 1, DLOCK_LOG_INFO = 2 };

/* Called for conditions worth a human's attention (a server whose eviction policy
 * can drop lock keys, a server seen to restart, a rediss:// server whose certificate
 * is not verified). `msg` is valid only during the call.
 * It runs on the thread whose dlock call met the condition, or on one of the client's
 * background threads (wake-ups, renewals), and must not call back into the same
 * client. */
typedef void (*dlock_log_fn)(void *user, int level, const char *msg);

/* dlock_config.fence_mode (docs/guarantees.md has the argument for each). */
enum dlock_fence_mode {
    /* N > 1: the fence is the largest value the granting nodes returned; the release
     * raises every node's counter to it, and the server-TIME floor covers a lease
     * that expires unreleased (safe while server clocks differ by less than the
     * shortest lease). No extra round trip. */
    DLOCK_FENCE_DEFAULT = 0,
    /* N > 1: after acquiring, a second, token-checked round raises the counters of a
     * quorum to the fence before dlock_acquire returns. One more round trip; no clock
     * assumption. */
    DLOCK_FENCE_STRICT = 1
};

/* dlock_config.restart_voting: whether a node that restarted (it may have forgotten
 * the locks it granted) may vote before it has been up longer than the longest lease. */
enum dlock_restart_voting {
    DLOCK_RESTART_AUTO = 0,     /* OBSERVED when N > 1, OFF when N = 1 */
    DLOCK_RESTART_OFF = 1,      /* every grant counts */
    DLOCK_RESTART_OBSERVED = 2, /* a node seen to change run_id does not vote until its
                                   uptime exceeds max_lease_ms */
    DLOCK_RESTART_STRICT = 3    /* the same rule for a node on first contact too: safer,
                                   but a fresh deployment waits out one max lease */
};

/*
 * TLS defaults for the rediss:// servers of a client (dlock_config.tls): each applies
 * to every rediss:// server whose URL does not give the parameter of the same name
 * (cert and key count as one: a URL with its own cert= uses its own key=). Plain
 * redis:// and unix:// servers ignore them. Zero-initialize; NULL or 0: the default.
 */
typedef struct dlock_tls {
    const char *cacert;    /* PEM file of the CAs to trust; NULL: the system's store */
    const char *cacertdir; /* directory of trusted CA certificates (c_rehash layout) */
    const char *cert;      /* PEM client certificate, for servers that ask for one */
    const char *key;       /* its private key (PEM), required with cert */
    const char *sni;       /* server name sent, and the name its certificate must carry;
                              NULL: the URL's host */
    int insecure;          /* 1: do not verify the servers' certificates (logged) */
    uint64_t reserved[4];  /* must be zero */
} dlock_tls;

/*
 * Client configuration. Zero-initialize it and set what you need: every zero field
 * means its default. Strings are copied by dlock_client_new.
 */
typedef struct dlock_config {
    const char *prefix;         /* key prefix; NULL or "" means "dlock:" */
    const char *password;       /* for servers whose URL carries none; NULL: none */
    int64_t timeout_ms;         /* per-node deadline of one command; 0: 50 ms */
    int64_t connect_timeout_ms; /* added to it when a node must be (re)connected; 0: 1000 ms */
    double drift_factor;        /* clock drift per ms of lease; 0: 0.01 */
    int64_t drift_min_ms;       /* constant drift allowance; 0: 2 ms */
    int strict;                 /* 1: a server whose maxmemory-policy can evict lock keys
                                   makes calls on it fail (DLOCK_ERR_UNAVAILABLE) */
    dlock_log_fn log;           /* NULL: messages are dropped */
    void *log_user;             /* passed to log */
    int fence_mode;             /* enum dlock_fence_mode; 0: DLOCK_FENCE_DEFAULT */
    int restart_voting;         /* enum dlock_restart_voting; 0: DLOCK_RESTART_AUTO */
    int64_t max_lease_ms;       /* longest lease any client takes on these servers, for
                                   restart voting; 0: the longest this client has used */
    int64_t fence_retention_ms; /* how long a name's fence counter outlives its last use;
                                   0: DLOCK_FENCE_RETENTION_DEFAULT_MS; else at least
                                   1000 (fences keep increasing after the counter expires:
                                   each is at least the server's clock in microseconds) */
    union {
        const dlock_tls *tls; /* defaults of rediss:// servers; NULL: none (the
                                 dlock_tls itself is read by dlock_client_new only) */
        uint64_t tls_word_;   /* keeps the struct's layout where pointers are 32-bit */
    };
    uint64_t reserved[4]; /* must be zero */
} dlock_config;

/*
 * Create a client for one or more servers.
 *
 * servers: comma-separated URLs, each
 *     redis://[[user]:password@]host[:port][/db]   (IPv6 host as [::1]; port 6379; db 0)
 *     rediss://[[user]:password@]host[:port][/db][?cacert=FILE&cacertdir=DIR&cert=FILE
 *              &key=FILE&sni=NAME&insecure=1]   (TLS; docs/guide.md, "TLS")
 *     unix://[:password@]/path/to/socket[?db=N]
 *     redis-sentinel://[[user]:password@]host[:port][,host[:port]...][/MASTER_NAME]
 *              [?sentinel_user=U&sentinel_password=P&db=N]
 *              (the hosts are Sentinels, port 26379; the server is the master they
 *              name for MASTER_NAME, "mymaster" by default, asked again on each new
 *              connection, so a failover is followed; user and password are the
 *              master's; rediss-sentinel:// is the same over TLS and takes the TLS
 *              parameters; docs/guide.md, "Sentinel")
 *     redis-cluster://[[user]:password@]host[:port][,host[:port]...]
 *              (the hosts are seeds of one Redis Cluster, port 6379, which is one
 *              server of the list: each call goes to the master of its name's slot,
 *              learned with CLUSTER SLOTS, and -MOVED and -ASK are followed; user and
 *              password are every master's; database 0 only; rediss-cluster:// is the
 *              same over TLS to every node and takes the TLS parameters;
 *              docs/guide.md, "Cluster")
 *   user and password may be percent-encoded (a comma must be written %2C), and so
 *   may TLS parameters (an '@' or '&' in one must be). A bare "user@" is refused as
 *   ambiguous. A rediss:// server's certificate and host name are verified (against
 *   the system's trust store, or cacert/cacertdir) unless insecure=1; the files are
 *   read here, so a missing or unreadable one is DLOCK_ERR_INVALID. A certificate
 *   that fails verification (unknown CA, host name mismatch, expired) makes calls on
 *   that server fail with DLOCK_ERR_AUTH, the check that failed in dlock_errmsg.
 *   With one server, locks live there; with N > 1 they are taken on a quorum of
 *   N/2+1 independent masters (Redlock).
 *   Or, alone, file:///path/to/dir (percent-escapes decoded; no host part): local
 *   locks on this host, in files of that directory, with no server. Every call keeps
 *   its meaning; docs/guide.md ("Local locks") says what a lease, a detach and a fence
 *   are there. The directory must exist and be writable: checked here, creating
 *   nothing (DLOCK_ERR_INVALID names it otherwise).
 * cfg: NULL for defaults.
 * out: receives the client, to be freed with dlock_client_free.
 *
 * No connection is made here: each server is connected on first use, so a client
 * can be created while its servers are down.
 *
 * Returns DLOCK_OK, DLOCK_ERR_INVALID (malformed URL or config, with the bad part
 * in dlock_errmsg) or DLOCK_ERR_NOMEM.
 */
DLOCK_API int dlock_client_new(const char *servers, const dlock_config *cfg, dlock_client **out);

/* Release every lock still attached to the client (best effort, one round), free
 * those handles, close the connections and free the client. NULL is a no-op.
 * Thread-safety: a blocking call that another thread is making on the client
 * (dlock_acquire, dlock_sem_acquire, dlock_stock_reserve, waiting or not) ends with
 * DLOCK_ERR_CLOSED, handing out no lock, and this returns only after it has; so a
 * program can free a client at shutdown while threads wait on it. Any other use of
 * the client, its locks or its dlock_pending operations during or after is the
 * caller's error, as for any freed object. */
DLOCK_API void dlock_client_free(dlock_client *c);

/* Number of servers the client was created with. */
DLOCK_API int dlock_client_nservers(const dlock_client *c);

/*
 * The validity a lease of ttl_ms leaves at best: ttl_ms less the clock-drift
 * allowance of cfg (NULL: the defaults), as if the round that took it cost no time.
 * For callers that plan around a lease before a client exists (dlock run checks its
 * GRACE against it). Negative when ttl_ms is too short to leave any.
 * Thread-safety: any thread.
 */
DLOCK_API int64_t dlock_lease_validity_ms(const dlock_config *cfg, int64_t ttl_ms);

/* Called once, on the client's renewal thread, when an auto-renewed lock is found
 * lost (another owner's token, or no quorum until validity ran out). It may read the
 * handle (dlock_lock_name, dlock_token, dlock_fence, dlock_remaining_ms) and signal
 * the thread that owns it; it must not release, detach or extend it, nor block long
 * (other locks' renewals wait for it). */
typedef void (*dlock_lost_fn)(dlock_lock *l, void *user);

/*
 * How the client's renewal thread keeps up, for a service that must show a renewal
 * falling behind before a lease can end (dlockd's INFO). Times in milliseconds.
 */
typedef struct dlock_renewal_stats {
    int64_t locks;         /* locks renewed automatically now */
    int64_t turns;         /* renewal calls made (each renews a batch on every server) */
    int64_t retries;       /* renewals that reached no decision and were tried again */
    int64_t lost;          /* locks the renewal found lost */
    int64_t lag_last_ms;   /* how late the last turn started after its first lock was due */
    int64_t lag_max_ms;    /* the most any turn started late */
    int64_t margin_min_ms; /* the least validity any lock had left when a turn started
                              on it; -1 before the first turn */
    int64_t reserved[5];   /* zero */
} dlock_renewal_stats;

/* The renewal's figures so far (all zero, margin -1, when nothing was ever renewed).
 * DLOCK_ERR_INVALID for a NULL argument. Thread-safety: any thread. */
DLOCK_API int dlock_renewal_stats_get(dlock_client *c, dlock_renewal_stats *out);

/*
 * Options of one acquisition. Zero-initialize: every zero field means its default.
 */
typedef struct dlock_opts {
    int64_t ttl_ms;        /* lease; 0: DLOCK_TTL_DEFAULT_MS; else in [DLOCK_TTL_MIN_MS,
                              DLOCK_TTL_MAX_MS] */
    int64_t wait_ms;       /* 0: try once; > 0: retry until this much time has passed;
                              -1: wait forever */
    int cancel_fd;         /* 0: none (fd 0 cannot be used); else a descriptor that becomes
                              readable to make a waiting acquire return DLOCK_ERR_CANCELED */
    int fair;              /* 1: waiters get the lock in arrival order, across processes and
                              hosts (docs/waiting.md); 0: whoever asks when it is free */
    const char *label;     /* free text stored with the lock for `dlock status`
                              (at most DLOCK_LABEL_MAX bytes); NULL: none */
    int auto_renew;        /* 1: the client's renewal thread extends the lock to ttl_ms
                              every ttl_ms/3 until it is released, detached or lost */
    int shared;            /* 1: a shared (read) holder: it overlaps other shared holders
                              and excludes an exclusive one; 0: exclusive */
    dlock_lost_fn on_lost; /* with auto_renew: called once if the lock is lost */
    void *on_lost_user;    /* passed to on_lost */
    int label_is_holder;   /* 1: the label is the whole holder description, without this
                              process's "host:pid" before it: for a service that takes
                              locks for its own clients and names them (dlockd) */
    int spare;             /* must be zero */
    int64_t linger_ms;     /* 0: dlock_release releases at once. 1 to DLOCK_LINGER_MAX_MS:
                              dlock_release keeps the lock up to linger_ms for this
                              client's next dlock_acquire of the name, which takes it back
                              with its fence (no one held it in between) in at most one
                              round trip, while the queue's head has waited less than
                              linger_ms in all and has been passed over for less than
                              linger_ms divided by the number of waiters since it
                              became the head: lingering brings no wait much past
                              linger_ms (docs/waiting.md, "Lingering"). Exclusive
                              locks of a client of one server, taken by
                              dlock_acquire */
    uint64_t reserved[3];  /* must be zero */
} dlock_opts;

/*
 * Take the lock `name` (1 to DLOCK_NAME_MAX bytes, any bytes but NUL).
 *
 * On DLOCK_OK, *out is a new handle; on any other return *out is set to NULL.
 * Returns DLOCK_ERR_BUSY when another owner holds the name (after waiting up to
 * wait_ms), DLOCK_ERR_CANCELED when cancel_fd became readable, and for an
 * unavailable server the error its failure maps to (with N > 1: DLOCK_ERR_NOQUORUM,
 * each node's reason in dlock_errmsg).
 * Thread-safety: any thread; the new handle belongs to the calling thread.
 */
DLOCK_API int dlock_acquire(dlock_client *c, const char *name, const dlock_opts *opts,
                            dlock_lock **out);

/*
 * Take one of `permits` permits of the semaphore `name` (1 to DLOCK_PERMITS_MAX): the
 * call succeeds while fewer than `permits` holders hold the name. A permit is a lock
 * handle like any other: dlock_release gives it back, dlock_extend renews it, a
 * holder that dies gives it back when its lease runs out, and auto_renew, on_lost,
 * wait_ms, fair waiting and fences work as for dlock_acquire (opts.shared must be 0).
 *
 * A semaphore is a shared lock that admits at most `permits` holders, counted with
 * every other shared holder of the name; an exclusive holder excludes them all. So
 * one permit is an exclusive lock, and with permits 1 this is dlock_acquire. Every
 * caller of a name should pass the same number: each call is admitted by its own.
 *
 * With permits >= 2 the client must have one server: N independent servers cannot
 * bound K >= 2 holders by a quorum (docs/guarantees.md), and such a call returns
 * DLOCK_ERR_INVALID. Thread-safety and errors as for dlock_acquire.
 */
DLOCK_API int dlock_sem_acquire(dlock_client *c, const char *name, int64_t permits,
                                const dlock_opts *opts, dlock_lock **out);

/*
 * Waiting without a thread, for event loops and services (dlockd parks thousands of
 * waiters this way). dlock_acquire waits on its calling thread; the same acquisition,
 * with the same queue, wake-ups and fairness, can be run in steps instead (and so can
 * dlock_sem_acquire and dlock_stock_reserve, through their _start forms):
 *
 *     dlock_pending *p;
 *     dlock_lock *l;
 *     int rc = dlock_acquire_start(c, "job", &opts, &p);         (no I/O)
 *     while (rc == DLOCK_OK &&
 *            (rc = dlock_pending_step(p, &l)) == DLOCK_ERR_AGAIN)
 *         wait until dlock_pending_fd(p) is readable (when it is >= 0), or
 *         until dlock_pending_due_ms(p) milliseconds have passed, whichever is first;
 *     dlock_pending_free(p);
 *
 * A step does a few rounds of network I/O at most, each bounded by the client's
 * timeout, and never sleeps: run it where blocking that long is acceptable (a worker
 * pool). An event loop can take most steps on its own thread instead, with
 * dlock_pending_step_nowait, which never waits for a server: it sends an attempt's
 * round and returns DLOCK_ERR_AGAIN, and a later step takes the replies; the few steps
 * that would block it hands back (DLOCK_ERR_WOULDBLOCK) for dlock_pending_step on a
 * worker. Between steps an acquisition holds no thread, and no connection unless its
 * round is in flight or a server may still run its last attempt (what follows must
 * reach that server after it, on the same connection). Its fd (a wake-up from a
 * release that handed it the lock, or the sockets of a round in flight) may change
 * from step to step: ask again after each one. Calling a step early (a spurious wake)
 * is harmless. A pending is used by one thread at a time; free every pending before
 * its client.
 */
typedef struct dlock_pending dlock_pending;

/* Prepare dlock_acquire(c, name, opts, ...) in steps: the same checks and options
 * (cancel_fd is not watched: free the pending to give up), no I/O. DLOCK_OK and *out,
 * or the error dlock_acquire would return for these arguments (*out NULL). A file://
 * client's acquisitions wait on their thread: DLOCK_ERR_INVALID. */
DLOCK_API int dlock_acquire_start(dlock_client *c, const char *name, const dlock_opts *opts,
                                  dlock_pending **out);

/* The same for dlock_sem_acquire(c, name, permits, opts, ...). */
DLOCK_API int dlock_sem_acquire_start(dlock_client *c, const char *name, int64_t permits,
                                      const dlock_opts *opts, dlock_pending **out);

/* The next step. DLOCK_OK: *out is the lock, as from dlock_acquire (for a stock
 * reservation, out may be NULL and stays NULL: the id is dlock_pending_id's).
 * DLOCK_ERR_AGAIN: not yet (see above). Anything else: the operation failed as its
 * blocking call would (DLOCK_ERR_BUSY when not granted within wait_ms, ...). After a
 * result other than DLOCK_ERR_AGAIN, only dlock_pending_id and dlock_pending_free. */
DLOCK_API int dlock_pending_step(dlock_pending *p, dlock_lock **out);

/* The next step, for a thread that must not block (an event loop's): it sends what is
 * due and takes what has come, and never waits for a server. The results of
 * dlock_pending_step, and DLOCK_ERR_WOULDBLOCK when the step would have to block: take
 * it with dlock_pending_step on a worker (nothing is lost; after it, either form may
 * step again). Those steps: a client whose servers are found through a host name,
 * Sentinels or a cluster's slot map, or that raises fences in a second round (strict
 * fence mode with N > 1); joining a name's wait queue while the client does not listen
 * for wake-ups yet (a subscription to confirm: once per client, and after a lost
 * connection; a stock reservation that must listen to wait); and, on a client that does not
 * pipeline (dlock_client_pipeline), an attempt that finds DLOCK_NOWAIT_SETS_MAX of the
 * client's connection sets in flight already. */
DLOCK_API int dlock_pending_step_nowait(dlock_pending *p, dlock_lock **out);

/* Rounds that dlock_pending_step_nowait keeps in flight at once, per client: each holds
 * a connection to every server until its replies are in. */
#define DLOCK_NOWAIT_SETS_MAX 64

/* Pipelining, for an event loop that runs many operations of one client at once (a
 * lock service's): from this call on, the rounds of the client's nowait steps share one
 * connection per server, their commands queued one behind the other and sent together
 * by dlock_client_pump, their replies matched to them in order; no connection set is
 * taken per round, and DLOCK_NOWAIT_SETS_MAX no longer applies. *fd becomes readable
 * when the pipes have something for dlock_client_pump. Call it before any nowait step
 * is in flight; again, it gives the same fd. A step in flight on the pipes has
 * dlock_pending_fd -1: it is told by the pump (dlock_pending_notify), or at its due
 * time, when a server that stalls fails every request on its pipe (outcome unknown:
 * DLOCK_ERR_TIMEOUT, or the unavailability error). A blocking step takes its own
 * connections as before. DLOCK_ERR_INVALID for a file:// client, or one whose nowait
 * steps would block (servers found through a host name, Sentinels or a cluster's slot
 * map, or strict fences with N > 1). */
DLOCK_API int dlock_client_pipeline(dlock_client *c, int *fd);

/* Commands on a server's pipe at most: a request that finds this many waits in the
 * client until one is answered, and its per-node deadline starts when it is sent (a
 * burst waits in the client, not in the server's queue, where the last of a long line
 * would miss its deadline and fail the whole line). */
#define DLOCK_PIPELINE_DEPTH 256

/* Send what the pipes have queued (a write per server), take the replies that have
 * come, and call the notify callback of each pending whose step is now due (in this
 * call, on this thread, with no lock of the library held: the callback may step it).
 * Call it when the fd of dlock_client_pipeline is readable. A client without pipes:
 * nothing. Never blocks. */
DLOCK_API void dlock_client_pump(dlock_client *c);

/* Only send what the pipes have queued (no system call when nothing is), and call the
 * notify callbacks that are due. Call it once per loop turn after the steps (libuv: a
 * prepare handle), so that a turn's requests leave in one write per server. */
DLOCK_API void dlock_client_flush(dlock_client *c);

/* Have the pump call fn(arg) when p's round on the pipes has its replies (or failed):
 * step it then. fn NULL: no callback (the step is found at its due time). */
DLOCK_API int dlock_pending_notify(dlock_pending *p, void (*fn)(void *arg), void *arg);

/* 1 while the pending waits only for the replies to a round it sent (a command in
 * progress, to an event loop: not a client blocked on a lock), else 0. */
DLOCK_API int dlock_pending_in_flight(const dlock_pending *p);

/* A descriptor that becomes readable when the next step should run now, or -1. */
DLOCK_API int dlock_pending_fd(const dlock_pending *p);

/* Milliseconds until the next step is due even if the fd stays quiet; 0: now. */
DLOCK_API int64_t dlock_pending_due_ms(const dlock_pending *p);

/* A stock reservation's id (DLOCK_TOKEN_LEN characters) once a step returned
 * DLOCK_OK; else "". Borrowed: valid until dlock_pending_free. */
DLOCK_API const char *dlock_pending_id(const dlock_pending *p);

/* Give up (when the operation has not finished: leave its wait queue, sent and not
 * awaited, so it may write to the servers) and free. A lock a step handed out stays
 * the caller's, as does a reservation. NULL is ignored. */
DLOCK_API void dlock_pending_free(dlock_pending *p);

/* Set the lease to ttl_ms from now (it does not add), if this handle still holds the
 * lock on a quorum. Returns DLOCK_OK, DLOCK_ERR_LOST (another owner or nobody holds
 * it: the handle stays lost), DLOCK_ERR_INVALID (ttl outside the lease range, 0
 * included) or an unavailability error (the lock may still be held). */
DLOCK_API int dlock_extend(dlock_lock *l, int64_t ttl_ms);

/* dlock_extend in steps, for an event loop (see dlock_acquire_start): no I/O yet; the
 * handle stays the caller's and must outlive the pending. Steps with out NULL end with
 * dlock_extend's result. A nowait step hands back (DLOCK_ERR_WOULDBLOCK), besides what
 * it would for an acquisition, an extension whose lock is being renewed at that moment.
 * A file:// client's handle: DLOCK_ERR_INVALID (use dlock_extend). */
DLOCK_API int dlock_extend_start(dlock_lock *l, int64_t ttl_ms, dlock_pending **out);

/* Release the lock and free the handle, whatever it returns. Returns DLOCK_OK when
 * a quorum deleted our token, DLOCK_ERR_LOST when the lease had run out or another
 * owner holds the name (nothing of theirs is touched), or an unavailability error.
 * When the lease had run out by this client's clock but a quorum still held the token
 * (and deleted it), the LOST's detail (dlock_errmsg) begins "released,": the work
 * after validity was unprotected, yet no other client can have taken the lock
 * meanwhile (on the assumptions of docs/guarantees.md).
 * A handle taken with dlock_opts.linger_ms lingers instead, when its lease is still
 * valid and no thread of this client waits for the name: DLOCK_OK at once, with no
 * round trip, and the lock is released linger_ms later (or by dlock_client_free)
 * unless this client's next dlock_acquire of the name takes it back first.
 * NULL is DLOCK_ERR_INVALID. */
DLOCK_API int dlock_release(dlock_lock *l);

/* dlock_release in steps, for an event loop (see dlock_acquire_start): no I/O yet, and
 * the handle belongs to the pending from now on, freed with it whatever happens (also
 * when this call fails). Steps with out NULL end with dlock_release's result. A nowait
 * step hands back (DLOCK_ERR_WOULDBLOCK), besides what it would for an acquisition, a
 * release whose lock is being renewed at that moment. A file:// client's handle:
 * DLOCK_ERR_INVALID (use dlock_release). */
DLOCK_API int dlock_release_start(dlock_lock *l, dlock_pending **out);

/* Free the handle and keep the lock on the servers (another process can release
 * or extend it with dlock_lock_adopt and the token). NULL is DLOCK_ERR_INVALID. */
DLOCK_API int dlock_lock_detach(dlock_lock *l);

/* A handle for a lock taken elsewhere (dlock release/extend NAME TOKEN). No server
 * is asked; the handle's validity is unknown (dlock_remaining_ms says 0) until a
 * dlock_extend or dlock_check succeeds. Fence 0. */
DLOCK_API int dlock_lock_adopt(dlock_client *c, const char *name, const char *token,
                               dlock_lock **out);

/* Ask the servers whether this handle still holds the lock on a quorum: DLOCK_OK,
 * DLOCK_ERR_LOST or an unavailability error. */
DLOCK_API int dlock_check(dlock_lock *l);

/* dlock_check in steps, for an event loop (see dlock_acquire_start): no I/O yet; the
 * handle stays the caller's and must outlive the pending. Steps with out NULL end with
 * dlock_check's result. A nowait step hands back (DLOCK_ERR_WOULDBLOCK), besides what
 * it would for an acquisition, a check that found the lock lost while it was being
 * renewed (its renewal's stop waits for that renewal). A file:// client's handle:
 * DLOCK_ERR_INVALID (use dlock_check). */
DLOCK_API int dlock_check_start(dlock_lock *l, dlock_pending **out);

/* Fence of this acquisition: strictly greater than that of every earlier successful
 * acquisition of the same name. 0 for NULL or an adopted handle. */
DLOCK_API uint64_t dlock_fence(const dlock_lock *l);

/* Validity left in ms, from this process's clock: <= 0 when expired or known lost. For
 * a lock a waiter took on its handoff's message (docs/waiting.md), the first call reads
 * the reply to its confirmation, waiting for it at most the rest of a per-node timeout
 * (it comes within a round trip of the acquisition's return). */
DLOCK_API int64_t dlock_remaining_ms(const dlock_lock *l);

/* The token (DLOCK_TOKEN_LEN hex characters). Borrowed: valid while l lives. */
DLOCK_API const char *dlock_token(const dlock_lock *l);

/* The lock's name. Borrowed: valid while l lives. */
DLOCK_API const char *dlock_lock_name(const dlock_lock *l);

/* A descriptor (eventfd) that becomes readable once this library finds the lock
 * lost (by the renewal thread, dlock_check or dlock_extend), for event loops (epoll,
 * libuv, libevent). Created on first call, closed with the handle; do not close it
 * yourself. -1 with the reason in dlock_errmsg on failure. */
DLOCK_API int dlock_lost_fd(dlock_lock *l);

/* What the servers say about a name, for `dlock status`. */
typedef struct dlock_holder {
    int held;                        /* 1: a holder owns the name on a quorum */
    char token[DLOCK_TOKEN_LEN + 1]; /* holder's token ("" when free) */
    char description[512];           /* "host:pid label" of the holder, truncated */
    int64_t remaining_ms;            /* lease left on a quorum (0 when free) */
    uint64_t fence;                  /* last fence issued for the name (0: none yet) */
    int64_t shared;                  /* dlock_inspect: shared holders and semaphore
                                        permits on a quorum (then token and
                                        description are "" and held is 1) */
    uint64_t reserved[3];
} dlock_holder;

/* Fill *out for `name`. Returns DLOCK_OK whether the name is held or free. */
DLOCK_API int dlock_inspect(dlock_client *c, const char *name, dlock_holder *out);

/* The shared holders and semaphore permits of `name`, those with the longest lease
 * left first: fills out[0 .. *n) with at most max of them (held 1, token,
 * description, remaining_ms; fence 0), and *total with how many there are on a
 * quorum. At most DLOCK_INSPECT_SHARED_MAX are listed whatever max says. */
#define DLOCK_INSPECT_SHARED_MAX 100
DLOCK_API int dlock_inspect_shared(dlock_client *c, const char *name, dlock_holder *out, int max,
                                   int *n, int64_t *total);

/* dlock_inspect in steps, for an event loop (see dlock_acquire_start), with
 * dlock_inspect_shared's list from the same round: no I/O yet. The step that ends
 * with DLOCK_OK (out NULL) has filled *holder as dlock_inspect does and, when shared
 * is not NULL and the name has shared holders (holder->shared > 0), shared[0 .. *n)
 * as dlock_inspect_shared does with max (*n stays 0 otherwise). holder, shared and n
 * are the caller's and must outlive the pending. A file:// client: DLOCK_ERR_INVALID
 * (use dlock_inspect). */
DLOCK_API int dlock_inspect_start(dlock_client *c, const char *name, dlock_holder *holder,
                                  dlock_holder *shared, int max, int *n, dlock_pending **out);

/*
 * ---- Listing the held locks, for operators ------------------------------------------
 */

/* What holds a listed name. */
#define DLOCK_KIND_EXCLUSIVE 1 /* one holder (dlock_acquire) */
#define DLOCK_KIND_SHARED    2 /* shared holders (DLOCK_SHARED) */
#define DLOCK_KIND_SEMAPHORE 3 /* permits of a semaphore (dlock_sem_acquire) */
/* Holders listed per name (the others are counted in nholders). */
#define DLOCK_LIST_HOLDERS_MAX 16

/* A name held now, as dlock_list_next gives it. */
typedef struct dlock_listed {
    const char *name;            /* borrowed, as all of this: valid until the next
                                    dlock_list_next or dlock_list_free */
    int kind;                    /* DLOCK_KIND_* */
    int nlisted;                 /* holders in holders[] */
    const dlock_holder *holders; /* the exclusive holder, or shared holders and permits
                                    with the longest lease first: held 1, token,
                                    description, remaining_ms */
    int64_t nholders;            /* holders in all */
    int64_t permits;             /* a semaphore's K (DLOCK_KIND_SEMAPHORE); else 0 */
    int64_t remaining_ms;        /* the lease left (the longest shared one); -1: a
                                    value another tool set without a lease */
    uint64_t fence;              /* the last fence issued for the name */
    int64_t waiters;             /* waiters in the name's queue on the servers: a lower
                                    bound, as a process's waiters behind a holder of
                                    its own client wait in that process alone */
    uint64_t reserved[4];
} dlock_listed;

/* Every name whose locks are held now and that matches the glob `pattern` (`*`, `?`,
 * `[...]` and `\` as in fnmatch(3) without flags, matched in linear time; NULL: "*"),
 * in byte order of the names: walks the servers with SCAN (never KEYS), a page of
 * names with their holders per round trip; a Redis Cluster master by master; with
 * N > 1 servers, a name is listed when a quorum holds it, as dlock_inspect says. A
 * name whose holders' leases all ran out is not held. The walk is done here: *out
 * then gives the names with dlock_list_next. Fails (nothing in
 * *out) when fewer than a quorum of servers could be walked. Not a snapshot: a name
 * taken or freed during the walk may or may not be listed. A file:// client lists its
 * directory's lock files (with no waiters counted: local waiters wait in their own
 * processes), except names too long for a file name, which are stored hashed, and
 * shows a semaphore's permits as shared holders (its files do not keep K).
 * Thread-safety: any thread; the lister, one thread at a time. */
typedef struct dlock_lister dlock_lister;
DLOCK_API int dlock_list(dlock_client *c, const char *pattern, dlock_lister **out);
/* The next name into *entry (borrowed: valid until the next call or the free), or
 * NULL after the last. Returns DLOCK_OK, or DLOCK_ERR_INVALID for a NULL. */
DLOCK_API int dlock_list_next(dlock_lister *it, const dlock_listed **entry);
/* Free a lister; NULL is a no-op. */
DLOCK_API void dlock_list_free(dlock_lister *it);

/*
 * ---- Breaking a lock, for operators --------------------------------------------------
 */

/* A break of a name: what dlock_break did, or the last one dlock_break_last finds. */
typedef struct dlock_break_info {
    int broken;        /* 1: the name was broken (dlock_break: by this call) */
    int64_t at_ms;     /* when, in ms since the epoch on the server's clock */
    uint64_t fence;    /* the fence the break raised the name's counter to */
    char holder[1024]; /* whom it evicted: "<token> <description>", or for shared
                          holders and permits "<n> shared: <token> <description>;
                          ...", truncated */
    char by[512];      /* who broke it: the breaker's description */
    char reason[512];  /* why, as given; "" */
    uint64_t reserved[4];
} dlock_break_info;

/* How to break: zero means default. */
typedef struct dlock_break_opts {
    const char *reason;    /* recorded with the break; NULL: none. At most 500 bytes */
    const char *by;        /* who breaks, recorded; NULL: the client's "host:pid" (a service
                              breaking for its own client names that client) */
    const char *fence_key; /* a fenced register (dlock_fenced_set's key) raised to the
                              break's fence, so that the evicted holder's next fenced
                              write to it is refused at once; NULL: none */
    uint64_t reserved[4];
} dlock_break_opts;

/* Free `name` whoever holds it (the exclusive holder, or every shared holder and
 * semaphore permit), for an operator facing a stuck lock. The name's fence counter is
 * raised past every fence handed out, so that a resource that admits fences refuses
 * the evicted holder once it has seen this fence (out->fence) or any later one; the
 * break is recorded beside the name's keys for a day (dlock_break_last, `dlock status`),
 * opts->fence_key's register (if given) is raised to that fence before this returns
 * (if that fails, the break stands: out says what it did, and the raise's error is
 * returned),
 * and the name's waiters are served as a release serves them. The evicted holder's
 * next extend, check, renewal or release finds the lock lost (DLOCK_ERR_LOST, its
 * on_lost called). Returns DLOCK_OK with out->broken 1 and what it evicted, or
 * out->broken 0 when nothing held the name; with N > 1 servers it breaks the name on
 * every server that answers and needs a quorum of answers (else the unavailability
 * error: servers that answered were broken). opts may be NULL. The strings are copied.
 * Thread-safety: any thread. */
DLOCK_API int dlock_break(dlock_client *c, const char *name, const dlock_break_opts *opts,
                          dlock_break_info *out);

/* The last break of `name` within a day, into *out (out->broken 0: none). */
DLOCK_API int dlock_break_last(dlock_client *c, const char *name, dlock_break_info *out);

/* What a lock server says of itself (dlock_probe), for `dlock doctor` and for
 * monitoring. A fact the server did not give (an ACL refused INFO or CONFIG, a managed
 * service renamed the command) is "" or -1. */
typedef struct dlock_server_facts {
    char server[256];          /* its URL without the password */
    int error;                 /* DLOCK_OK, or why it could not be asked at all (then
                                  the facts below are unknown) */
    char detail[256];          /* the error's detail (without the URL); "" */
    char version[32];          /* redis_version */
    char role[16];             /* "master" or "slave" */
    int cluster;               /* cluster_enabled: 1 or 0 */
    int64_t maxmemory;         /* bytes; 0: no limit */
    char maxmemory_policy[32]; /* "noeviction", "allkeys-lru", ... */
    int aof;                   /* aof_enabled: 1 or 0 */
    char appendfsync[16];      /* "always", "everysec" or "no" (CONFIG GET) */
    int64_t uptime_s;          /* uptime_in_seconds */
    int64_t clock_offset_us;   /* the server's TIME less this host's wall clock, at the
                                  middle of the quickest of three round trips */
    int64_t clock_error_us;    /* half that round trip: the offset is exact within it */
    int tls;                   /* 1: rediss://, 0: plain */
    int tls_verified;          /* 1: its certificate and name were verified; 0: insecure=1
                                  (or plain) */
    int64_t replicas;          /* connected_slaves: replicas a failover could promote */
    /* A master behind Sentinels (redis-sentinel://); sentinels is 0 for other servers. */
    int sentinels;             /* Sentinels its URL lists */
    int sentinels_up;          /* of those, how many answered */
    int sentinel_quorum;       /* SENTINEL CKQUORUM: 1, a failover can be authorized; 0,
                                  a Sentinel says it cannot; -1, none could say */
    char sentinel_detail[160]; /* that Sentinel's words */
    /* A whole Redis Cluster (redis-cluster://); cluster_masters is 0 for other
     * servers. The facts above are then the worst of its masters': an eviction policy
     * or persistence off on any of them, the weakest appendfsync, the fewest replicas,
     * the shortest uptime (the clock and version are those of one master). */
    int cluster_masters;    /* masters that serve slots in its slot map */
    int cluster_ok;         /* CLUSTER INFO's cluster_state: 1 "ok", 0 not, -1 unknown */
    char cluster_state[16]; /* its words ("ok", "fail") */
    int cluster_masters_up; /* of cluster_masters, how many answered INFO */
    int dlockd;             /* 1: a dlockd answered (its INFO has dlockd_version, here in
                               version): a client of lock servers, not one; error is then
                               DLOCK_ERR_INVALID and the other facts unknown */
    uint64_t spare[3];      /* zero; room for more facts */
} dlock_server_facts;

/* Ask each server of c, all at once, what it says of its version, role, memory policy,
 * persistence and clock: out[i] for server i, out holding n >= dlock_client_nservers(c)
 * elements. Each server's own failure is in out[i].error and .detail; the call returns
 * DLOCK_OK once every server was asked, DLOCK_ERR_INVALID for a NULL, n too small or a
 * file:// client (it has no server), DLOCK_ERR_NOMEM, DLOCK_ERR_CLOSED. Thread-safety:
 * any thread. */
DLOCK_API int dlock_probe(dlock_client *c, dlock_server_facts *out, int n);

/* Ask each server of c, all at once, PING: out[i].server, .error and .detail as
 * dlock_probe fills them; the other facts unknown as dlock_probe leaves a fact it could
 * not get. The question goes over the client's own pooled connections, so a refused
 * password, a certificate that cannot be verified or a refused connection is
 * out[i].error with its detail; a PING answered with an error reply (-LOADING,
 * -NOAUTH) is the code of that reply. For a health check: one round trip, no INFO.
 * Returns DLOCK_OK once every server was asked, DLOCK_ERR_INVALID for a NULL, n too
 * small or a file:// client (it has no server), DLOCK_ERR_NOMEM, DLOCK_ERR_CLOSED.
 * Thread-safety: any thread. */
DLOCK_API int dlock_ping(dlock_client *c, dlock_server_facts *out, int n);

/*
 * The resource side of fencing. A lock can end while its holder still works (a long
 * pause); only the resource can then refuse the stale holder, by accepting a write
 * only if its fence is not lower than the highest fence it has accepted.
 */

/* A fenced register kept in Redis: set the hash `key` (taken literally, no prefix) to
 * {value, fence} if `fence` is not lower than the fence it holds, in one atomic script
 * on each of the client's servers (with N > 1, on a quorum). Equal fences are
 * accepted: one holder may write several times. Returns DLOCK_OK when written,
 * DLOCK_ERR_FENCED when a higher fence was already accepted (the caller's lock is
 * stale; nothing was written), DLOCK_ERR_INVALID for a NULL or empty key, fence 0 or
 * a value over 512 MiB, else an unavailability error. The value is copied. */
DLOCK_API int dlock_fenced_set(dlock_client *c, const char *key, uint64_t fence, const void *value,
                               size_t value_len);

/* For a resource that keeps its own state: if fence >= *highest, raise *highest to
 * fence and return DLOCK_OK, else return DLOCK_ERR_FENCED and leave it. Atomic:
 * threads may share one `highest`. Does not touch dlock_errmsg(). */
DLOCK_API int dlock_fence_admit(uint64_t *highest, uint64_t fence);

/*
 * ---- Scheduled jobs: once per slot ------------------------------------------------
 *
 * A job that many hosts start on one schedule (cron on a fleet) should run once per
 * scheduled time: not once per host, one after the other as each gets the lock, and
 * not again on a host whose cron fires late. Time is cut into slots of period_ms
 * counted from the Unix epoch on the servers' clock (Redis TIME; for a file:// client,
 * this host's wall clock), so every host counts the same slots whatever its own clock
 * says. The holder of a lock claims the slot the servers are in now: the first claim
 * of a slot is recorded beside the name's keys, and a later claim of that slot, or of
 * an earlier one, is refused. A claim is recorded before the call returns, so a run
 * that fails or is killed still counts.
 */
#define DLOCK_SLOT_PERIOD_MIN_MS 1000                 /* a second */
#define DLOCK_SLOT_PERIOD_MAX_MS INT64_C(31622400000) /* 366 days */

/* A claim: the slot the servers are in, and the last claim recorded before it. */
typedef struct dlock_slot {
    int64_t start_ms;   /* the current slot's start, ms since the epoch (servers' clock) */
    int64_t last_ms;    /* the start of the last slot claimed for the name before this
                           call; -1: none recorded */
    int64_t last_at_ms; /* when that claim was made (servers' clock); -1: none, or
                           not known (a server refused in the second round) */
    char last_by[512];  /* who made it: the claimant's "host:pid", truncated; "" */
    uint64_t reserved[4];
} dlock_slot;

/* Claim the current slot of period_ms (DLOCK_SLOT_PERIOD_MIN_MS to _MAX_MS) for the
 * exclusive lock l holds. With N > 1 servers the slot is read from the median of the
 * clocks of a quorum that still holds l's token (of an even number, the earlier of the
 * two in the middle), the records of those servers are compared, and the claim is
 * written on a quorum, each write checked against l's token (a server whose record
 * holds the slot already refuses it, however many accept).
 * Returns DLOCK_OK when the slot is l's (recorded; *out says which, and the claim
 * before it), DLOCK_ERR_BUSY when this slot or a later one was claimed already (*out
 * says by whom, when the first round saw it), DLOCK_ERR_LOST when l no longer holds
 * the lock, DLOCK_ERR_INVALID for a NULL, a period out of range, a shared holder or a
 * permit of a semaphore of K >= 2 (on file://, of any K), or a file:// handle that was
 * adopted, else an unavailability error (the claim may then be recorded on some
 * servers: a later claim of the slot on them is refused, so a slot runs at most once,
 * not always once). A record lives two periods and a minute after it is made (in a
 * file:// lock file, until the next claim); it is as durable as the servers' data. */
DLOCK_API int dlock_slot_claim(dlock_lock *l, int64_t period_ms, dlock_slot *out);

/*
 * ---- Leader election ---------------------------------------------------------------
 *
 * One of many candidates leads at a time, and everyone can see who. A leader holds
 * the exclusive lock `name` (the same name space as dlock_acquire's: an operator
 * sees a leader in dlock_list and can depose it with dlock_break) with a lease that
 * the client's renewal thread keeps; its term is the lock's fence, larger than every
 * earlier leader's, so a resource that checks terms (dlock_fenced_set,
 * dlock_fence_admit) refuses a deposed leader that still believes it leads. The
 * leader announces a value (its address, say) beside the lock, changes it with
 * dlock_proclaim and gives up with dlock_resign (or any release of its lock); a leader
 * that dies leads until its lease runs out, and a candidate waiting in dlock_elect
 * then takes over. Observers
 * (dlock_observe) hear every change without asking the servers: the leader's
 * proclamations and renewals are published to them, and an observer reads only when
 * something changed or the leader's lease ran out unrenewed. docs/guide.md has the
 * recipe beside etcd's, Curator's and Kubernetes'. Not for file:// clients
 * (DLOCK_ERR_INVALID).
 */
#define DLOCK_LEADER_VALUE_MAX 1024 /* bytes in a leader's value, not counting the NUL */

/* Options of a campaign. Zero-initialize. */
typedef struct dlock_elect_opts {
    dlock_opts lock;      /* the lock's: ttl_ms, wait_ms (-1: campaign until elected),
                             cancel_fd, fair, label, on_lost and on_lost_user as for
                             dlock_acquire; auto_renew is implied, shared must be 0 */
    const char *value;    /* the value announced on election (NULL: ""): any bytes but
                             NUL, at most DLOCK_LEADER_VALUE_MAX */
    uint64_t reserved[4]; /* must be zero */
} dlock_elect_opts;

/* Who leads `name`, as dlock_leader reads it or an observer hears it. */
typedef struct dlock_leader_info {
    uint64_t term;                          /* the leader's term; 0: no one leads */
    int64_t remaining_ms;                   /* its lease left when read or heard */
    char value[DLOCK_LEADER_VALUE_MAX + 1]; /* what it announced ("" when none) */
    char holder[512];                       /* "host:pid label" of the leader, truncated */
    uint64_t reserved[4];
} dlock_leader_info;

/* Campaign for `name` until this client leads, or wait_ms passes (DLOCK_ERR_BUSY), or
 * cancel_fd becomes readable (DLOCK_ERR_CANCELED); other errors as dlock_acquire's.
 * On DLOCK_OK, *lead is a lock handle (dlock_fence gives the term, dlock_lost_fd and
 * on_lost say when leadership is lost, dlock_release gives it up as dlock_resign does)
 * and value is announced: an observer hears
 * of the new leader once this returns. A candidate that wins the lock but cannot
 * announce its value gives the lock back and returns why. Thread-safety as for
 * dlock_acquire. */
DLOCK_API int dlock_elect(dlock_client *c, const char *name, const dlock_elect_opts *opts,
                          dlock_lock **lead);

/* dlock_elect in steps, for an event loop (see dlock_acquire_start): the campaign's
 * steps are its acquisition's; the last, which announces the value and hands the lock
 * to the renewal thread, blocks (a nowait step answers DLOCK_ERR_WOULDBLOCK for it).
 * The handle a step returns is the leader's, as dlock_elect's. */
DLOCK_API int dlock_elect_start(dlock_client *c, const char *name, const dlock_elect_opts *opts,
                                dlock_pending **out);

/* Announce a new value for the term of lead (a handle of dlock_elect). DLOCK_OK once a
 * quorum recorded it (observers hear it), DLOCK_ERR_LOST when lead no longer leads,
 * DLOCK_ERR_INVALID for a handle that is not a leader's or a value too long, else an
 * unavailability error. */
DLOCK_API int dlock_proclaim(dlock_lock *lead, const char *value);

/* Step down: dlock_release, named for what it does to a leader. The lock goes to the
 * next candidate in the queue, if one waits, and the handle is freed, whatever this
 * returns. Every end of a leader's lock but a lease that runs out (a release, with
 * this handle or its token from anywhere, and an operator's break) deletes its record
 * and tells its observers that no one leads, in the same script. */
DLOCK_API int dlock_resign(dlock_lock *lead);

/* Who leads `name` now, read from the servers: DLOCK_OK with info->term 0 when no one
 * does (the lock is free, or held by a holder that did not announce a value through
 * dlock_elect), else an unavailability error. With N > 1 servers, a leader is one a
 * quorum holds. */
DLOCK_API int dlock_leader(dlock_client *c, const char *name, dlock_leader_info *info);

/* An observer of `name`'s leadership: it hears every change of leader or value, in
 * term order, "no one leads" (term 0) included, beginning with the state when it
 * starts. It asks the servers nothing while nothing changes: changes and renewals are
 * published to it, and it reads once when its subscription is (re)made, when what it
 * heard cannot be understood, and when a leader's lease ran out with no renewal heard. A change
 * that another is announced over before the observer heard it may be skipped; a term is
 * never reported again after a larger one. Each observer has a thread; with fn, fn
 * runs there with each change (it must not free the observer); without fn, changes
 * wait in order for dlock_observer_next, and dlock_observer_fd is readable while one
 * waits. Free every observer before its client. */
typedef struct dlock_observer dlock_observer;
typedef void (*dlock_leader_fn)(const dlock_leader_info *info, void *user);
DLOCK_API int dlock_observe(dlock_client *c, const char *name, dlock_leader_fn fn, void *user,
                            dlock_observer **out);
/* A descriptor readable while a change waits for dlock_observer_next (not with fn). */
DLOCK_API int dlock_observer_fd(const dlock_observer *o);
/* The oldest change not yet taken: DLOCK_OK, or DLOCK_ERR_AGAIN when none waits. */
DLOCK_API int dlock_observer_next(dlock_observer *o, dlock_leader_info *info);
/* Stop the observer and free it; NULL is a no-op. */
DLOCK_API void dlock_observer_free(dlock_observer *o);

/*
 * ---- Stock with leased reservations ------------------------------------------------
 *
 * A counted stock per SKU (any name of 1 to DLOCK_NAME_MAX bytes), for flash sales: a
 * buyer reserves units for a lease, then commits them (sold, for good) or cancels them
 * (back in stock). A reservation whose lease runs out gives its units back by itself,
 * so a buyer that crashes cannot take them out of the sale; no unit is ever sold twice.
 * At every instant, on the server: sold + reserved + available == stock, and sold
 * never exceeds stock. Every change is one Lua script on one server: with one server,
 * that one; with N > 1, the first of the list (a quorum cannot give a counter
 * exactly-once semantics; docs/guarantees.md). docs/guide.md has the key layout.
 *
 * The unit counts of one call, and a SKU's stock, are at most DLOCK_STOCK_QTY_MAX.
 * A committed reservation is remembered for DLOCK_STOCK_COMMIT_RETENTION_MS, so that a
 * commit repeated after it succeeded (say, after a client-side timeout) succeeds again.
 *
 * Errors, for every stock call: DLOCK_ERR_INVALID for a bad argument or a refused
 * change (the detail says which and why; nothing is changed), the unavailability
 * error of the SKU's server (DLOCK_ERR_IO, _TIMEOUT, _UNAVAILABLE, _AUTH: its own
 * error, never DLOCK_ERR_NOQUORUM), DLOCK_ERR_NOMEM, DLOCK_ERR_CLOSED; and as each
 * function says. Thread-safety: any thread (the client is shared).
 */
#define DLOCK_STOCK_QTY_MAX             INT64_C(1000000000000) /* 10^12 units */
#define DLOCK_STOCK_LEASE_DEFAULT_MS    30000                  /* when lease_ms is 0 */
#define DLOCK_STOCK_COMMIT_RETENTION_MS 3600000                /* committed ids kept an hour */

/* Options of one reservation. Zero-initialize: every zero field means its default. */
typedef struct dlock_reserve_opts {
    int64_t lease_ms;     /* 0: DLOCK_STOCK_LEASE_DEFAULT_MS; else in [DLOCK_TTL_MIN_MS,
                             DLOCK_TTL_MAX_MS] */
    int64_t wait_ms;      /* 0: answer at once; > 0: wait this long for units to be freed
                             (a cancel, an expiry, a restock); -1: wait forever */
    int cancel_fd;        /* 0: none; else a descriptor that becomes readable to make a
                             waiting reserve return DLOCK_ERR_CANCELED */
    int reserved32;       /* must be zero */
    uint64_t reserved[4]; /* must be zero */
} dlock_reserve_opts;

/* What a SKU's server says of it, all from one script: stock == sold + reserved +
 * available. A SKU never set reads as all zeros. */
typedef struct dlock_stock_info {
    int64_t stock;        /* units set (dlock_stock_set, dlock_stock_add) */
    int64_t available;    /* units a reserve can take now */
    int64_t reserved;     /* units in live reservations (leases not run out) */
    int64_t sold;         /* units in committed reservations */
    int64_t reservations; /* live reservations */
    int64_t waiters;      /* reserves waiting for units */
    uint64_t spare[4];    /* zero; room for more fields */
} dlock_stock_info;

/* Set the stock of sku to qty (0 to DLOCK_STOCK_QTY_MAX) units, sold included: the
 * units available become qty - sold - reserved. A qty below sold + reserved is
 * refused (DLOCK_ERR_INVALID, the counts in the detail). Waiters whose units now fit
 * are woken. out (may be NULL) receives the state after the change. */
DLOCK_API int dlock_stock_set(dlock_client *c, const char *sku, int64_t qty, dlock_stock_info *out);

/* Add delta units (negative: take away; not 0, at most DLOCK_STOCK_QTY_MAX either way)
 * to the stock of sku. Taking away more than is available, or growing the stock past
 * DLOCK_STOCK_QTY_MAX, is refused (DLOCK_ERR_INVALID). out as for dlock_stock_set. */
DLOCK_API int dlock_stock_add(dlock_client *c, const char *sku, int64_t delta,
                              dlock_stock_info *out);

/*
 * Reserve qty units (1 to DLOCK_STOCK_QTY_MAX) of sku, all or none, for a lease. On
 * DLOCK_OK, id receives the reservation id (DLOCK_TOKEN_LEN lowercase hex characters
 * and a NUL), for dlock_stock_commit, _cancel and _extend; on any other return id is
 * "". opts: NULL for the defaults.
 *
 * Waiting (wait_ms != 0) does not poll: the reserve joins the SKU's waiters, and the
 * script that frees units (a cancel, a restock, or any call that finds leases run
 * out) wakes it through the client's wake-up channel; it also retries when the
 * earliest lease ends. Waiters are served in arrival order: units go to the first
 * waiter, and a waiter behind it is served only with what is left after the ones
 * before it (a stream of 1-unit buyers cannot starve a 5-unit one), and a reserve that
 * does not wait gets units only if the waiters would still be served.
 *
 * Returns DLOCK_ERR_BUSY when fewer than qty units were available through the wait
 * (at once, without waiting, when qty exceeds the units not yet sold: no cancel or
 * expiry can free that many), DLOCK_ERR_CANCELED through cancel_fd.
 */
DLOCK_API int dlock_stock_reserve(dlock_client *c, const char *sku, int64_t qty,
                                  const dlock_reserve_opts *opts, char id[DLOCK_TOKEN_LEN + 1]);

/* dlock_stock_reserve in steps, for event loops (see dlock_acquire_start): the same
 * checks, no I/O. Each dlock_pending_step (out may be NULL) ends with DLOCK_OK and the
 * reservation's id in dlock_pending_id, DLOCK_ERR_AGAIN, or dlock_stock_reserve's
 * error. cancel_fd is not watched: free the pending to give up. */
DLOCK_API int dlock_stock_reserve_start(dlock_client *c, const char *sku, int64_t qty,
                                        const dlock_reserve_opts *opts, dlock_pending **out);

/* Commit reservation id: its units are sold, for good. A commit repeated within
 * DLOCK_STOCK_COMMIT_RETENTION_MS of the first succeeds again and counts nothing more.
 * DLOCK_ERR_LOST when id is unknown, canceled, or its lease ran out (its units went
 * back to the stock: sell them again with a new reserve). */
DLOCK_API int dlock_stock_commit(dlock_client *c, const char *sku, const char *id);

/* Cancel reservation id: its units go back to the stock (and wake waiters they fit).
 * DLOCK_ERR_LOST when id is unknown, already canceled, committed, or ran out. */
DLOCK_API int dlock_stock_cancel(dlock_client *c, const char *sku, const char *id);

/* Set the lease of reservation id to lease_ms from now (it does not add), in
 * [DLOCK_TTL_MIN_MS, DLOCK_TTL_MAX_MS]. DLOCK_ERR_LOST when id is unknown, committed,
 * canceled or ran out. */
DLOCK_API int dlock_stock_extend(dlock_client *c, const char *sku, const char *id,
                                 int64_t lease_ms);

/* dlock_stock_commit, dlock_stock_cancel and dlock_stock_extend in steps, for an event
 * loop (see dlock_acquire_start): the same checks, no I/O yet; steps with out NULL end
 * with the blocking call's result. A nowait step sends the call (on the pipes of a
 * pipelining client) and a later one reads its reply. One freed with its call in
 * flight may still be applied by the server, as a blocking call that timed out may:
 * repeat a commit to know (it is idempotent). */
DLOCK_API int dlock_stock_commit_start(dlock_client *c, const char *sku, const char *id,
                                       dlock_pending **out);
DLOCK_API int dlock_stock_cancel_start(dlock_client *c, const char *sku, const char *id,
                                       dlock_pending **out);
DLOCK_API int dlock_stock_extend_start(dlock_client *c, const char *sku, const char *id,
                                       int64_t lease_ms, dlock_pending **out);

/* Fill *out for sku. Reservations whose lease ran out are counted back as available
 * (the script returns them to the stock as it reads, and wakes the waiters they fit). */
DLOCK_API int dlock_stock_status(dlock_client *c, const char *sku, dlock_stock_info *out);

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_H */
