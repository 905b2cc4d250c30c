/*
 * dlockd.h: what the files of dlockd share, and the map of them.
 *
 * dlockd speaks RESP2 so that any Redis client is a lock client. One libuv loop thread
 * owns every connection. The steps of a LOCK, a SEM ACQUIRE and an UNLOCK run on the
 * loop when they need not block (the library's nowait steps send a round and take its
 * replies later); every other library call that talks to the lock servers runs on
 * libuv's thread pool. An operation that must wait (a LOCK, a SEM ACQUIRE, a STOCK RESERVE) is
 * parked on the loop (a poll on the library's descriptor and a timer), never on a thread.
 *
 * The core names no lock concept: connections, RESP, jobs, waits, metrics HTTP. The
 * modules (locks, sem, elect, stock, the operators') register their commands and their
 * hooks at a connection's end at the start (main.c), and keep their own state in a
 * connection's slot and their own arguments behind a job's args.
 *
 * The core:
 *   resp.c      the request parser: pure, limits checked at each header (fuzzed)
 *   reply.c     growing buffers and the RESP2 replies written into them
 *   server.c    connections, reading, the write queue, the limits; what a client sent
 *               before its FIN
 *   hooks.c     the modules' hooks at a connection's end (its close, its end while
 *               open) and their slots in it
 *   listen.c    the listeners: TCP, TLS, the unix socket
 *   deadlines.c how long a client may stay unauthenticated (--auth-timeout) or idle
 *               (--timeout-idle)
 *   tls.c       TLS for clients: the server's context, and each TLS connection's
 *               SSL object between the stream and the query and output buffers
 *   commands.c  the command table the modules fill, AUTH (the default user and
 *               admin), the admin gate, and the commands answered on the loop
 *   clients.c   who the clients are: their addresses, the holder description their
 *               locks carry, CLIENT (LIST, KILL, SETNAME, ...)
 *   jobs.c      commands' work on libuv's pool
 *   args.c      reading arguments: integers, names, TTL, WAIT, the lock options
 *   park.c      operations in steps (a dlock_pending): stepped on the loop or the
 *               pool, parked on the loop between steps (descriptors, timers), given
 *               up at a close
 *   metrics.c   the HTTP listener (libmicrohttpd, driven by the loop): GET /metrics in
 *               Prometheus's text format, GET /health; the wait and hold histograms
 *   health.c    the lock servers' health: a thread of its own PINGs them twice a
 *               second; the loop logs each change and answers /health from it
 *   options.c   the command line, the TLS options' checks, the password files
 *   main.c      the modules' registration, signals, the open-files limit, start and
 *               stop
 * The modules:
 *   locks.c     LOCK (the acquisition SEM ACQUIRE and ELECT share), the locks
 *               module's arguments and registration
 *   sessions.c  the session locks of a connection (permits too), and their release
 *               at its end (its hooks)
 *   sem.c       SEM ACQUIRE and SEM RELEASE: semaphore permits as locks
 *   unlock.c    UNLOCK (a release in steps), EXTEND, CHECK, LOCKINFO
 *   operators.c LOCKS (every held name) and BREAK (the user admin's), for operators
 *   elect.c     ELECT (a campaign: a session lock whose holder leads), RESIGN,
 *               PROCLAIM and LEADER
 *   pubsub.c    SUBSCRIBE leader:NAME: one library observer per name, its changes
 *               published to the connections subscribed, as Redis's pub/sub does
 *   stock.c     STOCK: a SKU's stock and its leased reservations
 *   loss.c      a session lock lost or held past MAXHOLD: logged, and its connection
 *               ended (the holder's next command fails)
 *   drain.c     the stop on SIGTERM: nothing new taken, waits ended, the held locks'
 *               UNLOCKs awaited up to --shutdown-timeout
 *
 * Threads: the loop thread touches every structure here; a job's work function (on a
 * pool thread) touches only its own dd_job and the library handles it carries, and a
 * connection has at most one job in flight, and no step on the loop meanwhile, so a
 * handle or a pending is never used by two threads at once. The health thread
 * (health.c) touches only the library client and its own results, which it hands to
 * the loop under a mutex.
 */
#ifndef DLOCKD_H
#define DLOCKD_H

#include "dlock.h"
#include "resp.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* ---- limits ------------------------------------------------------------------------- */

#define DD_MAX_ARGS   1024  /* arguments of one command */
#define DD_MAX_BULK   65536 /* bytes of one argument */
#define DD_MAX_INLINE 65536 /* bytes of one inline command line */
#define DD_QUERY_MAX                                                                               \
    (1 << 20) /* unparsed bytes kept per client: one command must                                  \
                 fit; past it, reading pauses while a command runs */
#define DD_OUT_SOFT                                                                                \
    (1 << 20)                        /* unsent reply bytes past which a client's commands          \
                                        wait (and its reading pauses) until it reads */
#define DD_OUT_HARD        (8 << 20) /* unsent reply bytes past which it is closed */
#define DD_READ_CHUNK      65536     /* bytes read per read callback */
#define DD_LINGER_MS       1000      /* a closing client's input is drained at most this long */
#define DD_NAME_MAX        128       /* CLIENT SETNAME */
#define DD_KEEPALIVE_IDLE  15        /* TCP keepalive: seconds idle before probes, */
#define DD_KEEPALIVE_INTVL 5         /* seconds between probes, */
#define DD_KEEPALIVE_CNT   3         /* unanswered probes before the client is gone */
#define DD_MAXCLIENTS_DEF  10000
#define DD_PORT_DEF        7379
#define DD_POOL_DEF        "8" /* UV_THREADPOOL_SIZE unless the user set it */
#define DD_TLS_HANDSHAKE_MS                                                                        \
    10000 /* a TLS client that has not completed its handshake by then is closed */
/* Before AUTH, a client gets redis-server's limits (its answer to CVE-2021-32675): a
 * command of at most 10 arguments of at most 16 KiB each, so that a connection nobody
 * has authenticated pins at most about 160 KiB, and only until --auth-timeout. */
#define DD_PREAUTH_MAX_ARGS   10
#define DD_PREAUTH_MAX_BULK   16384
#define DD_PREAUTH_MAX_INLINE (DD_PREAUTH_MAX_BULK + 64) /* AUTH default, the password */
#define DD_AUTH_TIMEOUT_DEF   10000                      /* ms an unauthenticated client may stay */
/* How long a drain waits for the session locks' UNLOCKs: a request in progress of a web
 * application ends within seconds, and systemd's default stop timeout is 90 s. */
#define DD_SHUTDOWN_TIMEOUT_DEF 10000
/* The per-server deadline of one command to a lock server. The library's 50 ms gave a
 * spurious -UNAVAILABLE in about 1 of 20,000 LOCKs through dlockd on a 2-core machine
 * at load average 20 (replies were seen 65 ms late); 200 ms is three times the worst
 * lateness seen, and still within the third of the shortest session lease (1000 ms)
 * its renewal has. docs/service.md gives the measurement. */
#define DD_TIMEOUT_DEF 200
/* The shortest lease of a session lock: the renewal must reach the servers within a
 * third of it on a loaded machine (docs/service.md gives the measurement); DETACHED
 * locks keep the library's DLOCK_TTL_MIN_MS. */
#define DD_SESSION_TTL_MIN_MS 1000
/* Descriptors a client can cost: its socket, and the wake-up eventfd of a LOCK, SEM
 * ACQUIRE or STOCK RESERVE that waits. */
#define DD_FDS_PER_CLIENT 2
/* Clients refused past --maxclients that linger (their error written, their input
 * drained for DD_LINGER_MS, so that a reset cannot destroy the error): past this many,
 * a refused client is answered and closed at its accept (a TLS one once its error is
 * written), so that even a flood accepted in one turn costs a bounded number. */
#define DD_REFUSED_LINGER_MAX 32
/* Room for the modules' registrations: each module's state in a connection, their
 * hooks at a connection's end, their commands. */
#define DD_CONN_SLOTS   2
#define DD_HOOKS_MAX    4
#define DD_COMMANDS_MAX 32

/* ---- reply.c ------------------------------------------------------------------------ */

/* A growing byte buffer. Allocation failure aborts: the daemon cannot answer without
 * memory, and a half-written reply would corrupt the stream. */
typedef struct dd_buf {
    char *p;
    size_t len, cap;
} dd_buf;

void dd_buf_append(dd_buf *b, const void *p, size_t n);
void dd_buf_free(dd_buf *b);
/* Append printf's output, cut at 511 bytes (a line of INFO, a reply's header). */
void dd_buf_printf(dd_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append b's bytes to dst and empty b. */
void dd_buf_move(dd_buf *dst, dd_buf *b);

void dd_reply_status(dd_buf *b, const char *s); /* "+s" */
/* "-CODE message": the message is printf-formatted; CR and LF become spaces. */
void dd_reply_error(dd_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dd_reply_int(dd_buf *b, long long v);              /* ":v" */
void dd_reply_bulk(dd_buf *b, const void *p, size_t n); /* "$n" bytes */
void dd_reply_cstr(dd_buf *b, const char *s);           /* a bulk of a C string */
void dd_reply_nil(dd_buf *b);                           /* "$-1" */
void dd_reply_array(dd_buf *b, size_t n);               /* "*n", n elements follow */
/* A library failure as an error reply: -NOQUORUM, -UNAVAILABLE or -ERR, with the code's
 * message and the calling thread's dlock_errmsg() (so call it on the failing thread). */
void dd_reply_dlock_error(dd_buf *b, int rc);
/* A call on a token (UNLOCK, EXTEND, CHECK, a reservation's, RESIGN, PROCLAIM): 1 for
 * DLOCK_OK, 0 for DLOCK_ERR_LOST (lost, expired, another's), else dd_reply_dlock_error. */
void dd_reply_held(dd_buf *b, int rc);
/* Whether a failure's detail says dlockd ran out of descriptors (EMFILE, ENFILE): not
 * the servers' failure. Logged with what failed, once a second at most (any thread). */
bool dd_out_of_descriptors(const char *what, const char *detail);
/* The kind of error a reply starts with, for INFO's counters. */
enum {
    DD_E_ERR,
    DD_E_NOAUTH,
    DD_E_NOQUORUM,
    DD_E_UNAVAILABLE,
    DD_E_PROTOCOL,
    DD_E_SHUTDOWN, /* refused or given up by a draining dlockd */
    DD_E_LOST,     /* a session lock lost: the connection ends with it */
    DD_E_KINDS
};

/* ---- the daemon --------------------------------------------------------------------- */

struct dd_conn;
struct dd_session;
typedef struct dd_tls dd_tls;

/* --tls-auth-clients: client certificates required, verified when given, not asked. */
enum { DD_TLS_AUTH_YES, DD_TLS_AUTH_OPTIONAL, DD_TLS_AUTH_NO };

typedef struct dd_stats {
    uint64_t connections_received;
    uint64_t commands_processed;
    uint64_t rejected_connections;
    uint64_t locks_acquired;
    uint64_t locks_not_acquired;   /* LOCK answered nil */
    uint64_t permits_acquired;     /* SEM ACQUIRE */
    uint64_t permits_not_acquired; /* SEM ACQUIRE answered nil */
    uint64_t waits;                /* LOCKs and SEM ACQUIREs that had to wait (parked at
                                      least once) */
    uint64_t stock_reserved;       /* STOCK RESERVE granted */
    uint64_t stock_not_reserved;   /* STOCK RESERVE answered nil */
    uint64_t stock_waits;          /* STOCK RESERVEs that had to wait */
    uint64_t stock_committed;      /* STOCK COMMIT answered 1 */
    uint64_t stock_canceled;       /* STOCK CANCEL answered 1 */
    uint64_t errors[DD_E_KINDS];
    uint64_t auth_failures;       /* AUTH and HELLO AUTH refused (acl_access_denied_auth) */
    uint64_t admin_refused;       /* admin commands refused with -NOPERM
                                     (acl_access_denied_cmd) */
    uint64_t auth_timeouts;       /* connections closed by --auth-timeout */
    uint64_t idle_timeouts;       /* connections closed by --timeout-idle */
    uint64_t pool_jobs;           /* operations handed to the thread pool (dd_job_queue) */
    atomic_ullong released;       /* session locks released at their connection's close */
    atomic_ullong release_failed; /* of those, the releases the servers did not confirm */
    atomic_ullong locks_lost;     /* session locks the renewal found lost (renewal thread) */
    uint64_t maxhold_released;    /* session locks released for being held past MAXHOLD */
    uint64_t shutdown_refused;    /* LOCKs, SEM ACQUIREs and STOCK RESERVEs refused, or
                                     their waits ended, by a draining dlockd */
} dd_stats;

typedef void (*dd_cmd_fn)(struct dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out);

/* A command a module registers (dd_commands_add). */
typedef struct dd_command_def {
    const char *name; /* lowercase; matched without regard to case */
    int arity;        /* exact argument count with the name; -N: at least N */
    bool noauth;      /* allowed before AUTH */
    bool admin;       /* only for the user admin (a subcommand asks dd_need_admin itself) */
    bool subscribed;  /* allowed on a subscribed connection (SUBSCRIBE, PING, ...) */
    dd_cmd_fn fn;
} dd_command_def;

/* What a module does at a connection's end (dd_conn_hooks_add); any may be NULL. The
 * hooks run in the order they were added. */
typedef struct dd_conn_hooks {
    /* The connection closes (a job of it may still be in flight). */
    void (*closing)(struct dd_conn *c);
    /* The connection is closed, no job of it is in flight and its parked operation is
     * given up: at its close, and again each time a job it had in flight ends after
     * that. It may run more than once: what it does, it does once. */
    void (*closed)(struct dd_conn *c);
    /* The connection is told to end while still open (the stop after a drain, an
     * end_msg): what the module holds for it may go now, not at the close, which can
     * come a linger later. */
    void (*ending)(struct dd_conn *c);
} dd_conn_hooks;

typedef struct dd_server {
    uv_loop_t *loop;
    dlock_client *client;
    int nservers;
    /* options */
    const char *bind;
    int port;
    const char *unixsocket;
    int unixsocketperm;          /* the socket file's mode; -1: as the umask makes it */
    int maxclients;              /* as given, or lowered to fit the open-files limit */
    const char *requirepass;     /* NULL: no AUTH needed */
    const char *adminpass;       /* the user admin's password; NULL: no user admin */
    int64_t auth_timeout_ms;     /* an unauthenticated client is closed after it; 0: never */
    int64_t idle_timeout_s;      /* a client idle this long is closed; 0: never */
    int64_t max_hold_ms;         /* --max-hold: a session lock's MAXHOLD unless its LOCK
                                    gives one; 0: none */
    int64_t shutdown_timeout_ms; /* --shutdown-timeout: how long a drain waits for the
                                    session locks' UNLOCKs; 0: no drain */
    int tls_port;                /* 0: no TLS listener */
    const char *tls_cert, *tls_key;
    const char *tls_ca_file, *tls_ca_dir; /* client certificates' CAs; NULL: none */
    int tls_auth;                         /* DD_TLS_AUTH_* */
    int metrics_port;                     /* --metrics-port; 0: no HTTP listener */
    const char *metrics_bind;             /* --metrics-bind; NULL: 127.0.0.1 */
    /* listeners (any may be unused) */
    uv_tcp_t tcp, tls_tcp;
    uv_pipe_t pipe;
    bool tcp_on, tls_on, pipe_on;
    uv_signal_t sigterm, sigint;
    bool stopping;
    bool draining; /* a signal came: nothing new is taken, held locks are awaited */
    /* connections */
    struct dd_conn *conns;
    int nconns;       /* open (not closing) */
    int nconns_alloc; /* allocated, closing ones included */
    uint64_t next_id;
    int refused_open;     /* connections refused past --maxclients still open */
    int session_locks;    /* held by open connections, permits included */
    atomic_int releasing; /* session locks handed to a release not yet done */
    int session_permits;  /* of them, semaphore permits */
    int parked;           /* operations waiting on the loop (blocked_clients) */
    int parked_locks;     /* of them, LOCKs and SEM ACQUIREs */
    int parked_reserves;  /* and STOCK RESERVEs */
    int64_t started_ms;
    dd_stats stats;
    /* the parser's argument table, used on the loop thread only */
    resp_arg argv[DD_MAX_ARGS];
    resp_limits limits, preauth_limits;
    /* deadlines.c: the clients not yet authenticated, oldest first (they all get the
     * same deadline), and the timer of the first one's; the idle sweep's timer */
    struct dd_conn *preauth_head, *preauth_tail;
    uv_timer_t auth_timer, idle_timer;
    bool timers_on;
    /* park.c: descriptor watchers by fd; the lock servers' pipes (their descriptor, and
     * the pump before each poll), when the client pipelines */
    struct dd_watch **watch;
    int nwatch;
    bool piped;
    uv_poll_t pipe_poll;
    uv_prepare_t pipe_prepare;
    /* the modules' registrations (server.c, commands.c), made at the start */
    const dd_conn_hooks *hooks[DD_HOOKS_MAX];
    int nhooks;
    int nslots;
    const dd_command_def *commands[DD_COMMANDS_MAX];
    int ncommands;
} dd_server;

extern dd_server dd_srv;

typedef struct dd_conn {
    union {
        uv_stream_t stream;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    } h;
    uv_timer_t timer; /* a parked operation's due time */
    uint64_t id;
    int refs;        /* the two handles, and a job in flight */
    dd_buf query;    /* bytes read and not yet parsed */
    size_t need;     /* parse again once query.len reaches it */
    dd_buf out;      /* replies not yet handed to a write */
    size_t writing;  /* bytes in the write in flight (one at a time) */
    bool busy;       /* a command is on the pool or parked: later ones wait */
    bool processing; /* its commands are being run (server.c's loop over them) */
    int jobs;        /* jobs on the pool: one for a command; after a close, an operation
                        given up and the session locks released may run together */
    bool reading;
    bool closing;           /* closed or closing: nothing more is read or answered */
    bool quit;              /* close once the replies are written (QUIT, protocol error) */
    bool lingering;         /* quit: replies written, FIN sent, draining until EOF */
    uv_shutdown_t shutdown; /* the FIN of a lingering close */
    bool authed;
    bool admin;    /* authenticated as the user admin (AUTH admin PASSWORD) */
    bool waiting;  /* an operation that had to wait is not answered yet (CLIENT LIST) */
    bool refused;  /* past --maxclients: told so, then closed */
    bool eof;      /* the client sent its FIN (or reset): what it sent before is run,
                      then the connection closes; nothing more is read */
    bool out_dead; /* a write failed: replies are dropped, the commands still run */
    char *end_msg; /* a session lock ended (loss.c): the error the connection ends with
                      once the command in flight is answered; NULL: none */
    int64_t accepted_ms, active_ms; /* when accepted; when it last sent or was answered */
    struct dd_conn *preauth_prev, *preauth_next; /* on dd_srv's pre-AUTH list */
    bool on_preauth;
    dd_tls *tls;               /* accepted on the TLS listener; NULL: plain */
    char *name;                /* CLIENT SETNAME; NULL: none */
    char addr[64];             /* the peer, "IP:PORT" ("[IP6]:PORT"), or "unix" */
    void *mod[DD_CONN_SLOTS];  /* each module's state for it (dd_conn_slot_new) */
    struct dd_job *parked_job; /* its operation parked on the loop, or NULL */
    struct dd_watch *watch;    /* the watcher it is parked on, or NULL */
    struct dd_conn *watch_next;
    struct dd_sub *subs; /* its channels (SUBSCRIBE): in that mode while not NULL */
    int nsubs;
    struct dd_conn *prev, *next;
} dd_conn;

/* A session lock or permit: held while its connection is open, renewed by the library.
 * A connection may hold several permits of one name, so a session is known by its name
 * and token. */
typedef struct dd_session {
    struct dd_session *next;
    dlock_lock *lock;
    char *name;
    size_t name_len; /* a connection's sessions are looked up by name on each LOCK */
    char token[DLOCK_TOKEN_LEN + 1];
    bool permit;     /* taken by SEM ACQUIRE */
    bool leader;     /* taken by ELECT: its end is a resignation (dlock_resign) */
    bool shared;     /* one of the name's shared holders (LOCK SHARED, a permit of K >= 2);
                        else it holds the name exclusively (LOCK, a permit of K = 1) */
    atomic_int lost; /* set by the renewal thread's on_lost */
    /* uv_hrtime() when it joined its connection: its hold's start (metrics.c) */
    uint64_t granted_ns;
    bool ended; /* lost or past MAXHOLD, and its connection told to end (loss.c) */
    int64_t maxhold_ms, maxhold_at_ms; /* MAXHOLD, and when it passes; 0: none */
} dd_session;

struct dd_steps;

/* A command's work on the pool, or an operation in steps (park.c). What the core
 * knows of it; the command's own arguments are its module's struct, behind args. */
typedef struct dd_job {
    uv_work_t req;
    dd_conn *conn;
    void (*work)(struct dd_job *j); /* on a pool thread */
    void (*done)(struct dd_job *j); /* on the loop, then the job is freed */
    dd_buf reply;
    void *args;                    /* the command's arguments (dd_job_args), or NULL */
    void (*args_free)(void *args); /* frees them with the job; NULL: plain free */
    /* On the pool, before the next step of its pending: what a module must do first
     * (the locks module: lost session locks of the name released before it is taken
     * again). A step is never taken on the loop while it is set; it is cleared once
     * run. NULL: nothing. */
    void (*before_step)(struct dd_job *j);
    bool waited;                  /* parked at least once (INFO's waits) */
    bool blocked;                 /* parked waiting (blocked_clients), not for a round's
                                     replies */
    dlock_pending *pending;       /* an operation in steps, in progress */
    const struct dd_steps *steps; /* what its results mean */
    int rc;
    uint64_t arrived_ns; /* uv_hrtime() when the command came (the wait histogram) */
} dd_job;

/* ---- server.c ----------------------------------------------------------------------- */

/* Stop listening and close every connection (after a drain, each once its last reply
 * is written); the loop ends once they are gone. */
void dd_server_stop(void);
/* A listener's new connection (listen.c opens the listeners). */
void dd_on_connection(uv_stream_t *listener, int status);

/* ---- listen.c, hooks.c -------------------------------------------------------------- */

int dd_server_listen(void);
/* Stop listening (a drain's start); the connections stay. */
void dd_server_unlisten(void);
/* Append a reply (moving b's bytes) and write it when possible. */
void dd_conn_reply(dd_conn *c, dd_buf *b);
/* The command in flight has been answered: take the next ones. */
void dd_conn_resume(dd_conn *c);
void dd_conn_close(dd_conn *c);
/* Answer the error (printf-formatted) and close once it is written (a protocol error,
 * an AUTH deadline). */
void dd_conn_end(dd_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An operation of c starts to wait (parked for the lock, not for a round's replies):
 * after the client's FIN that gives it up, closing c. */
void dd_conn_wait_starts(dd_conn *c);
/* One reference less (a job done, a handle closed); frees c at zero. */
void dd_conn_unref(dd_conn *c);
/* A module's hooks at a connection's end (h is kept: static storage). At the start. */
void dd_conn_hooks_add(const dd_conn_hooks *h);
/* A module's slot in every connection's mod[], for its state there; at the start. */
int dd_conn_slot_new(void);
/* c closes: the modules' closing hooks (a job of it may be in flight). */
void dd_conn_hooks_closing(dd_conn *c);
/* c is told to end while still open: the modules' ending hooks. */
void dd_conn_hooks_ending(dd_conn *c);
/* c is closed: once no job of it is in flight, its parked operation is given up and
 * the modules' closed hooks run (each job's end on a closed connection calls it). */
void dd_conn_closed_idle(dd_conn *c);
/* The command in flight of a connection with an end_msg is answered: end it now with
 * that error, and let the modules' ending hooks give up what it holds. */
void dd_conn_end_pending(dd_conn *c);
void dd_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int64_t dd_now_ms(void);

/* ---- deadlines.c ---------------------------------------------------------------------- */

/* Start the timers (--auth-timeout, --timeout-idle) once the loop exists. */
void dd_deadlines_start(void);
void dd_deadlines_stop(void);
/* A new connection that must AUTH: on the list, its deadline armed. */
void dd_preauth_add(dd_conn *c);
/* Authenticated or closing: off the list. */
void dd_preauth_remove(dd_conn *c);

/* ---- tls.c -------------------------------------------------------------------------- */

/* The server's TLS context from the dd_srv.tls_* options; false after a one-line error
 * on stderr (a file that cannot be read, a key not of the certificate). */
bool dd_tls_setup(void);
void dd_tls_cleanup(void);
/* A connection accepted on the TLS listener: its SSL object, and the handshake's
 * deadline on its timer. -1: out of memory. */
int dd_tls_accept(dd_conn *c);
/* True until the handshake is done: nothing can be written, and input is needed even
 * after a quit. */
bool dd_tls_handshaking(const dd_conn *c);
/* Bytes read from the client: the handshake goes on, and what they decrypt to is
 * appended to c->query (dropped once c->quit). 1: the client's close_notify came (its
 * FIN, as far as TLS goes); -1: the connection must close (a failed handshake, bad
 * records). */
int dd_tls_feed(dd_conn *c, const char *p, size_t n);
/* The replies of plain (emptied) as records appended to wire; -1 on failure. */
int dd_tls_seal(dd_conn *c, dd_buf *plain, dd_buf *wire);
/* A lingering close: the close_notify alert goes before the FIN. */
void dd_tls_close_notify(dd_conn *c);
void dd_tls_free(dd_conn *c); /* at the connection's free; plain: nothing */

/* ---- commands.c --------------------------------------------------------------------- */

/* Add a module's commands to the table (defs is kept: static storage); at the start. */
void dd_commands_add(const dd_command_def *defs, size_t n);
/* The commands answered here (PING, AUTH, INFO, ...), at the start. */
void dd_commands_register(void);
/* Run one parsed command; it may leave c busy (answered later). */
void dd_command(dd_conn *c, resp_arg *argv, size_t argc);
/* The error kind of a reply, counted when it is written. */
void dd_count_errors(const char *p, size_t n);
/* Each kind's name (INFO's errors_NAME, the metrics' kind label). */
extern const char *const dd_error_names[DD_E_KINDS];

/* Whether c may run an admin command (the ACL name in the error: "client|kill",
 * "break"); false with -NOPERM in out, counted, when it is not authenticated as
 * admin. */
bool dd_need_admin(dd_conn *c, const char *acl_name, dd_buf *out);

/* ---- clients.c ---------------------------------------------------------------------- */

/* A connection just accepted: its address, for the log, CLIENT LIST and the holder
 * descriptions of its locks. */
void dd_client_accepted(dd_conn *c);
void dd_cmd_client(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out);
/* CLIENT SETNAME's check and effect (HELLO SETNAME too); false with the error in out. */
bool dd_client_setname(dd_conn *c, const resp_arg *a, dd_buf *out);
/* The holder description a lock of c is taken with (the library stores it as it is,
 * label_is_holder): who took it (label, else the client's name, else nothing), its
 * address and this dlockd, "worker-7 127.0.0.1:51234 via dlockd web1:4242", at most
 * DLOCK_LABEL_MAX bytes (label cut to fit). malloc'd; aborts without memory. */
char *dd_holder_label(const dd_conn *c, const char *label);

/* ---- jobs.c ------------------------------------------------------------------------- */

dd_job *dd_job_new(dd_conn *c);
/* The job's arguments: size bytes zeroed, freed with the job by args_free (NULL: by
 * free). Returns them; aborts without memory. */
void *dd_job_args(dd_job *j, size_t size, void (*args_free)(void *args));
/* Queue j->work on the pool for c (c is busy until j->done ran). */
void dd_job_queue(dd_job *j);
/* The job's reply to its connection, then the connection's next commands. */
void dd_job_answer(dd_job *j);
void dd_job_free(dd_job *j);

/* ---- args.c ------------------------------------------------------------------------- */

/* Argument checks; those given `out` write the -ERR reply on failure. */
bool dd_arg_is(const resp_arg *a, const char *word); /* case-insensitive */
/* A name or label for the library: 1 to max bytes, no NUL; a malloc'd copy or NULL. */
char *dd_arg_dup(const resp_arg *a, const char *what, size_t max, dd_buf *out);
/* A leader's value: at most DLOCK_LEADER_VALUE_MAX bytes, empty allowed, no NUL. */
char *dd_arg_value(const resp_arg *a, dd_buf *out);
bool dd_arg_int(const resp_arg *a, int64_t lo, int64_t hi, int64_t *v);
bool dd_arg_ttl(const resp_arg *a, int64_t *ttl, dd_buf *out);
/* WAIT's value: -1 (forever) or 0 to DLOCK_TTL_MAX_MS. */
bool dd_arg_wait(const resp_arg *a, int64_t *wait, dd_buf *out);

/* ---- the locks module: locks.c, sessions.c, sem.c, unlock.c, elect.c ---------------- */

/* The arguments of the commands on a lock (LOCK, SEM, ELECT, UNLOCK, EXTEND, CHECK,
 * LOCKINFO, RESIGN, PROCLAIM, LEADER), each command using its own. */
typedef struct dd_lock_args {
    char *name;      /* the lock's name, copied from the command's argument */
    bool name_taken; /* the session took name over (it frees it) */
    char *label;     /* LOCK's LABEL, then the holder description made from it */
    char *value;     /* ELECT's VALUE, PROCLAIM's value */
    char token[DLOCK_TOKEN_LEN + 1];
    int64_t ttl_ms, wait_ms;
    int64_t permits;    /* SEM ACQUIRE: K; 0 for LOCK */
    int64_t maxhold_ms; /* LOCK's and SEM ACQUIRE's MAXHOLD (else --max-hold); 0: none */
    bool maxhold_given; /* MAXHOLD was among the options */
    bool detached, fair, shared;
    bool elect;          /* ELECT: a campaign (its VALUE in value) */
    dd_session *sess;    /* the session lock it works on */
    dlock_lock *adopted; /* EXTEND: the handle borrowed for a lock of no session here */
    dd_session *release; /* lost session locks of the name, released before it is taken
                            again */
} dd_lock_args;

/* The module's commands and hooks, at the start. */
void dd_locks_register(void);
/* A job for a command on a lock, its arguments zeroed in *a. */
dd_job *dd_lock_job(dd_conn *c, dd_lock_args **a);
void dd_cmd_lock(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out);
/* The options of LOCK, SEM ACQUIRE (a->permits set: no SHARED) and ELECT (a->elect:
 * TTL, WAIT, VALUE, LABEL, FAIR) from argv[first] on, into a; cmd names the command in
 * errors (args.c). */
bool dd_lock_options(resp_arg *argv, size_t argc, size_t first, const char *cmd, dd_lock_args *a,
                     dd_buf *out);
/* Start the acquisition of the job's name (a permit of K = permits when set) and run it
 * to its reply; false with the error in out (j stays the caller's to free). */
bool dd_lock_start(dd_conn *c, dd_job *j, dd_buf *out);

/* sessions.c: the connection's slot and hooks, at the start. */
void dd_sessions_register(void);
/* The connection's session locks (permits and leaderships too), newest first. */
dd_session *dd_conn_sessions(const dd_conn *c);
/* A session just granted joins its connection. */
void dd_session_link(dd_conn *c, dd_session *s);
/* The connection's session lock of that name held with that token, or NULL. */
dd_session *dd_session_find(dd_conn *c, const char *name, size_t len, const char *token);
/* The sessions of a name the renewal found lost, off the connection's list (each
 * counted in dd_srv.releasing): dd_sessions_release them before the name is taken. */
dd_session *dd_sessions_take_lost(dd_conn *c, const char *name);
/* What the connection holds of a name as session locks, those found lost left out. */
typedef struct dd_held {
    int exclusive; /* LOCKs, permits of K = 1 */
    int shared;    /* LOCK SHAREDs, permits of K >= 2 */
    int permits;   /* permits of any K */
    int leads;     /* leaderships (ELECT), counted in exclusive too */
} dd_held;
/* True, with the error in out, when what the connection holds of name would make a
 * LOCK (permits 0) or a SEM ACQUIRE of K permits wait for the connection itself. */
bool dd_would_wait_for_itself(dd_conn *c, const resp_arg *name, int64_t permits, dd_buf *out);
void dd_session_unlink(dd_conn *c, dd_session *s);
void dd_session_free(dd_session *s); /* NULL: nothing */
/* On the pool: release each session of the list and free it (each counted in
 * dd_srv.releasing when it was taken off its connection). */
void dd_sessions_release(dd_session *list);
/* Mark the stop's start; then log how many session locks it released, and how many
 * could not be, and why; and the releases since the mark. */
void dd_release_mark(void);
void dd_release_report(void);
unsigned long long dd_released_since_mark(void);

/* ---- loss.c ------------------------------------------------------------------------- */

void dd_loss_start(void);
void dd_loss_stop(void);
/* Any thread: a session lock was found lost (its flag set); the loop ends its
 * connection. */
void dd_loss_notify(void);
/* On the loop: a BREAK evicted `evicted` (dlock_break_info.holder, which names each
 * evicted holder by its token): this dlockd's session locks among them end their
 * connections as lost ones do, at once. */
void dd_loss_broken(const char *evicted);
/* A session lock just granted to its connection: released, and the connection ended,
 * maxhold_ms from now (0: never). */
void dd_maxhold_start(dd_session *s, int64_t maxhold_ms);

/* ---- drain.c ------------------------------------------------------------------------ */

/* The first SIGTERM or SIGINT: stop listening, refuse what would take a lock, end the
 * waits, and stop once every session lock is UNLOCKed or --shutdown-timeout passes.
 * False when there is nothing to drain (stop at once). */
bool dd_drain_start(void);
/* The drain is over (why: for the log): the stop. */
void dd_drain_end(const char *why);
/* In a draining dlockd, a command that would take a lock is refused: true with
 * -SHUTDOWN in out. */
bool dd_drain_refuses(dd_buf *out);
void dd_reply_shutdown(dd_buf *out); /* that -SHUTDOWN, counted */
/* A session lock left its connection: the drain may be over. */
void dd_drain_check(void);
void dd_drain_stop(void);

/* ---- sem.c -------------------------------------------------------------------------- */

void dd_sem_register(void);

/* ---- unlock.c ----------------------------------------------------------------------- */

void dd_cmd_unlock(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out);
/* UNLOCK's work for name and token (SEM RELEASE too); what names the name in errors. */
void dd_unlock(dd_conn *c, const resp_arg *name, const resp_arg *token, const char *what,
               dd_buf *out);
void dd_cmd_extend(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out);
/* CHECK name token: 1 when the token holds the name on a quorum, 0 when not; read-only. */
void dd_cmd_check(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out);
void dd_cmd_lockinfo(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out);

/* ---- elect.c, pubsub.c ------------------------------------------------------------- */

/* ELECT, RESIGN, PROCLAIM, LEADER, SUBSCRIBE and UNSUBSCRIBE, and the hook that takes a
 * closing connection off its channels; at the start. */
void dd_elect_register(void);
void dd_cmd_subscribe(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out);
void dd_cmd_unsubscribe(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out);
/* A subscribed connection's PING: ["pong", ARG or ""], as Redis answers in that mode. */
void dd_pubsub_ping(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out);
/* A closing connection leaves its channels (a name's last subscriber frees its observer). */
void dd_pubsub_conn_closed(dd_conn *c);

/* ---- operators.c -------------------------------------------------------------------- */

void dd_operators_register(void);

/* ---- stock.c ------------------------------------------------------------------------ */

void dd_stock_register(void);

/* ---- park.c ------------------------------------------------------------------------- */

/* What an operation in steps does with its end. */
typedef struct dd_steps {
    /* Where the step that ended it ran (the loop or the pool; j->rc is not
     * DLOCK_ERR_AGAIN; l is the lock a step handed out, or NULL): the reply, and what
     * must outlive the pending. No blocking call. */
    void (*finish)(dd_job *j, dlock_lock *l);
    /* On the loop, before the reply goes: counters, the connection's sessions. */
    void (*settle)(dd_job *j);
    /* On the pool, when the connection closed and the step succeeded: undo what it
     * took for nobody. */
    void (*undo)(dd_job *j);
    /* On the loop, just before the job is freed: what settle did not keep. */
    void (*drop)(dd_job *j);
    int *parked;     /* dd_srv's count of these parked now; NULL: they never wait (a
                        release: parked only for its round's replies) */
    uint64_t *waits; /* dd_stats's count of these that had to wait */
} dd_steps;

/* Run j->pending to its end: steps on the loop when they need not block, else on the
 * pool, parked on the loop between them until its descriptor is readable or its due
 * time comes, then j->steps' reply. */
void dd_step(dd_job *j);
/* c closes: give its parked operation up (on the pool). */
void dd_park_give_up(dd_conn *c);
/* c's wait for a lock is given up (on the pool), and answered -SHUTDOWN (a drain), or
 * with c->end_msg, the connection ended by it (a session lock lost: loss.c). */
void dd_park_refuse(dd_conn *c);
void dd_park_shutdown(void);
/* Pipeline the requests of every client to the lock servers (dlock_client_pipeline),
 * pumped on the loop; when the servers cannot be (found through a host name, Sentinels
 * or a cluster), each round takes connections of its own, as before. */
void dd_park_start(void);

/* ---- options.c, main.c --------------------------------------------------------------- */

#define DD_EXIT_USAGE 64 /* a mistake on the command line */
#define DD_EXIT_FAIL  70 /* could not start */

/* What the command line gives besides the options it sets in dd_srv. */
typedef struct dd_options {
    const char *servers, *prefix; /* -s, --prefix; NULL: not given */
    const char *passfile;         /* --requirepass-file */
    const char *adminfile;        /* --admin-pass-file */
    long timeout_ms;              /* --timeout */
    char *pass, *adminpass;       /* the passwords read (dd_srv's), to free at the end */
} dd_options;

/* The command line into dd_srv and o: -1 to go on, else the exit status (0 after
 * --help or --version, DD_EXIT_USAGE after a line on stderr). */
int dd_options_parse(int argc, char **argv, dd_options *o);
/* The passwords (--requirepass-file or $DLOCKD_REQUIREPASS; --admin-pass-file) into
 * dd_srv and o: -1 to go on, else the exit status. */
int dd_options_passwords(dd_options *o);

/* ---- metrics.c ---------------------------------------------------------------------- */

/* Descriptors the HTTP listener may hold: its socket, libmicrohttpd's epoll set and at
 * most 16 connections. */
#define DD_METRICS_FDS 18
/* With --metrics-port, listen (served on the loop); 0, or -1 after a log line. */
int dd_metrics_start(void);
void dd_metrics_stop(void);
/* On the loop: a LOCK's or SEM ACQUIRE's grant (its wait, from j->arrived_ns); a session
 * lock joining (d > 0) or leaving (d < 0) its connection (its hold). */
void dd_metrics_granted(const dd_job *j);
void dd_metrics_session(dd_session *s, int d);

/* ---- health.c ----------------------------------------------------------------------- */

/* The thread that PINGs the lock servers twice a second, each change logged; 0 or -1.
 * Its connections are among the 16 a server that fit_nofile keeps for threads. */
int dd_health_start(void);
void dd_health_stop(void); /* the check in flight is awaited */
/* On the loop: /health's body into b, and its status (200 or 503). */
unsigned dd_health_report(dd_buf *b);
/* On the loop: the dlockd_server_up and dlockd_quorum_up families into b. */
void dd_health_metrics(dd_buf *b);

#endif /* DLOCKD_H */
