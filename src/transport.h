/*
 * transport.h: the transport layer of src/ (internal.h's map): what a server is and
 * how to talk to N of them at once (node.c, conn.c, tls.c, fanout.c, fanout_pump.c,
 * ask.c, sentinel.c, cluster.c, topo.c). It knows nothing of scripts or the client: a node
 * carries the rules its connections follow, and the topology (direct, Sentinel,
 * cluster) that says where they go. A round of requests may end early when a
 * predicate of its caller's says so (dlock__vote_fn, with dlock__quorum's count); what
 * makes a reply a yes is the caller's.
 */
#ifndef DLOCK_TRANSPORT_H
#define DLOCK_TRANSPORT_H

#include "base.h"

#include <poll.h>
#include <stdatomic.h>

/* ---- node.c, conn.c, tls.c, fanout.c, fanout_pump.c -------------------------- */

/* The generic transport (conn.c, fanout.c) never names a kind of server: it asks the
 * node's topology (dlock__topology, below), as Redis's ae.c asks its event backend. */

/* OpenSSL's types, named without its headers (only tls.c and the tests include them). */
struct ssl_st;
struct ssl_ctx_st;
struct ssl_session_st;

/* All that the nodes of one client share, and all that a connection, a fan-out and
 * the INFO facts need of the client: deadlines, the default password, the restart
 * voting rule, the log. Set by dlock_client_new; only max_ttl_used_ms changes later. */
typedef struct dlock__node_rules {
    int64_t timeout_us, connect_timeout_us;
    char *password;                  /* for servers whose URL has none; NULL: none */
    int restart_voting;              /* resolved: never DLOCK_RESTART_AUTO */
    bool strict;                     /* refuse a server whose eviction policy can drop lock keys */
    int64_t max_lease_ms;            /* configured; 0: max_ttl_used_ms */
    _Atomic int64_t max_ttl_used_ms; /* longest ttl the client has used so far */
    dlock_log_fn log;
    void *log_user;
} dlock__node_rules;

/* What restart voting knows of one server (a node, or a master of a cluster node),
 * guarded by its node's mu. */
typedef struct dlock__voter {
    char run_id[41];       /* from INFO on the last handshake ("" before) */
    int64_t votes_from_us; /* dlock__now_us() from which its grants count (0: now) */
} dlock__voter;

struct dlock__cluster;
struct dlock__topology;

/* What the client knows of one server, shared by all its connections. */
typedef struct dlock__node {
    dlock__node_rules *rules; /* the client's */
    dlock__addr addr;
    int index;                  /* position in the server list, for messages */
    pthread_mutex_t mu;         /* guards the fields below */
    dlock__voter voter;         /* restart voting (a cluster node's are its masters') */
    bool policy_reported;       /* the eviction warning was logged for this node */
    bool info_refused_reported; /* the "INFO refused by an ACL" warning was logged */
    bool evicting;              /* its maxmemory-policy can evict lock keys */
    /* rediss:// only (tls.c). ctx is made by dlock_client_new and never changes;
     * session (the last one the server gave, for resumption) is guarded by mu. */
    struct ssl_ctx_st *tls_ctx;
    struct ssl_session_st *tls_session;
    char *tls_name;               /* the name sent as SNI and checked in the certificate */
    bool tls_insecure;            /* verification off (insecure=1) */
    _Atomic uint64_t tls_resumed; /* handshakes that resumed a session (for tests) */
    bool query_only; /* asked one question (a Sentinel, a cluster's seed; ask.c): no INFO */
    /* The largest reply its connections take: 0, DLOCK_REPLY_MAX_ELEMENTS and
     * DLOCK_REPLY_MAX_BYTES; more for a cluster's slot map. */
    int reply_max_elements;
    size_t reply_max_bytes;
    /* How its server is found and reached: direct, Sentinel or cluster; set once when
     * the node is made (dlock__topo_attach, or ask.c), never changed. */
    const struct dlock__topology *topo;
    /* The cluster topology's state (cluster.c): the slot map and the masters' voters;
     * NULL for any other node, which is how the calls above the transport tell a
     * cluster node. */
    struct dlock__cluster *cluster;
} dlock__node;

enum dlock__conn_state { DLOCK_CONN_CLOSED, DLOCK_CONN_CONNECTING, DLOCK_CONN_READY };

/* Write "<node's URL>: " and the formatted reason into e; returns err. */
int dlock__node_err(dlock__err *e, int err, const dlock__node *node, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Copy the value of "field:" from an INFO reply (a string) into out, at most n - 1
 * bytes; false when the reply has no such field. */
bool dlock__info_field(const redisReply *r, const char *field, char *out, size_t n);
/* The password node's connections give: its URL's, else the client's (NULL: none). */
char *dlock__node_password(const dlock__node *node);
/* How long from now the grants of a server that restarted (or is new to a strict
 * client) must wait before they count, given the uptime_in_seconds its INFO gave:
 * until it has surely been up for max_lease_ms; 0 or less: they count now. */
int64_t dlock__restart_wait_ms(int64_t max_lease_ms, long long uptime_s);
/* The longest lease restart voting must wait out. */
int64_t dlock__rules_max_lease_ms(const dlock__node_rules *r);
/* Record a ttl the client used. */
void dlock__rules_note_ttl(dlock__node_rules *r, int64_t ttl_ms);
/* Log through the client's callback, if any. */
void dlock__rules_log(const dlock__node_rules *r, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* One connection to one node. Used by one thread at a time (it lives in a connset
 * that a call takes from the client's pool). */
typedef struct dlock__conn {
    dlock__node *node;
    int fd;
    enum dlock__conn_state state;
    redisReader *reader;
    char *out; /* bytes queued for the socket: out[outpos, outlen) */
    size_t outlen, outpos, outcap;
    int handshake;         /* handshake replies still to come (AUTH, SELECT, INFO) */
    unsigned char hs[3];   /* which handshake step each of those replies answers */
    int hs_next;           /* index in hs of the next handshake reply */
    int skip;              /* replies of abandoned commands still to come, to discard */
    int risky;             /* the first `risky` of them include every awaited command given up that
                              must not run late (an acquire): a close then resets the connection; the
                              rest (clean-ups sent not awaited, a release) a close must deliver */
    bool lagging;          /* missed a deadline, and nothing heard since (kept across
                            * reconnects): a round decided by the others does not
                            * wait for it */
    dlock__reader_cap cap; /* what the reader takes, and whether it refused */
    int64_t connect_deadline_us;   /* when a connect or handshake in progress gives up */
    struct addrinfo *ai, *ai_next; /* TCP addresses and the next one to try */
    /* TCP: where it connects, the URL's host and port or, for a Sentinel URL, the
     * master the Sentinels named when it was opened */
    char host[256];
    int port;
    /* The topology asked for a new connection, resolved again (a Sentinel URL's master
     * said -READONLY): dlock__conn_stale says so before the next use. */
    bool reresolve;
    /* A cluster node's connections to its other masters, parked while this one is in
     * use (cluster.c swaps the one a request needs into this place; its conn_free op
     * frees them). NULL otherwise. */
    struct dlock__parked *parked;
    /* TLS (tls.c): the session on the socket, NULL for a plain connection. While the
     * state is CONNECTING, tls_handshaking says the TCP connect is done and the TLS
     * handshake is in progress. read_ev and flush_ev are the poll events a read and a
     * flush wait for: POLLIN and POLLOUT, except when TLS needs the other direction
     * first (a key update to read before a write, a record to send before a read);
     * during the handshake, read_ev is the event its next step waits for. */
    struct ssl_st *ssl;
    bool tls_handshaking;
    short read_ev, flush_ev;
    /* A connection that rounds of many callers share, their commands pipelined and
     * their replies matched in order (pipe.c); NULL for a connection of one caller. */
    struct dlock__pipe *pipe;
} dlock__conn;

void dlock__conn_init(dlock__conn *c, dlock__node *node);
/* Close the socket and forget queued bytes and expected replies. */
void dlock__conn_close(dlock__conn *c);
/* Free everything (closes first). */
void dlock__conn_free(dlock__conn *c);
/* In a forked child: free everything, closing the descriptor without touching the
 * socket it shares with the parent. */
void dlock__conn_forget(dlock__conn *c);
/* Take what a handshake's INFO reply says of the server c is at (restart voting, for
 * the voter its topology names; eviction policy); an error when the node must not be
 * used (a password missing, a Sentinel's master that is not one, or in strict mode an
 * evicting policy), with why in e. (node.c) */
int dlock__conn_on_info(dlock__conn *c, const redisReply *r, dlock__err *e);
/* Whether grants of c's server count at now (restart voting): the voter its topology
 * names (a cluster node's: the master c is at). (node.c) */
bool dlock__conn_votes(const dlock__conn *c, int64_t now);

/* Close any connection and start a new one: non-blocking connect, handshake queued.
 * On failure the connection is closed and e says why. */
int dlock__conn_open(dlock__conn *c, dlock__err *e);
/* The socket of a CONNECTING connection became writable: finish, or try the next
 * address. DLOCK_OK while connected or still connecting. */
int dlock__conn_on_connect(dlock__conn *c, dlock__err *e);
/* Append bytes to the output buffer (sent by dlock__conn_flush). DLOCK_ERR_NOMEM, with
 * no message (the caller says which command). */
int dlock__conn_queue(dlock__conn *c, const char *buf, size_t len);
/* Send what the socket takes without blocking. */
int dlock__conn_flush(dlock__conn *c, dlock__err *e);
/* Hand len bytes read from the server (through TLS or not) to the reader, refusing
 * more than the reply cap. */
int dlock__conn_feed(dlock__conn *c, const char *buf, size_t len, dlock__err *e);
/* Read what the socket has into the reader (refusing more than the reply cap). */
int dlock__conn_read(dlock__conn *c, dlock__err *e);
/* The next complete reply to one of the caller's commands, or *out NULL if none is
 * complete yet. Handshake replies and replies to abandoned commands are consumed. */
int dlock__conn_next_reply(dlock__conn *c, redisReply **out, dlock__err *e);
/* True when an idle connection must be reopened before use (closed by the server,
 * or out of step). */
bool dlock__conn_stale(dlock__conn *c);
/* The poll events the connection waits for now (POLLIN, POLLOUT or both). */
short dlock__conn_events(const dlock__conn *c);
/* True when bytes already read from the socket wait to be taken by dlock__conn_read
 * (TLS decrypts a record whole): read now, without waiting for the socket. */
bool dlock__conn_buffered(const dlock__conn *c);

/* TLS on a connection (tls.c), called by conn.c for a node with tls_ctx. */
/* Make node's SSL_CTX from its address's parameters and the client's defaults (def,
 * may be NULL): DLOCK_ERR_INVALID, with why in err, for a file that cannot be used. */
int dlock__tls_node_init(dlock__node *node, const dlock_tls *def, dlock__err *e);
/* Free the node's context, session and name (the process's own or a forked child's
 * copy: no lock taken). */
void dlock__tls_node_free(dlock__node *node);
/* Give node (a Sentinel or a seed of from's URL) from's TLS context, checking name (NULL:
 * node's own host name); dlock__tls_node_free lets it go. */
int dlock__tls_node_share(dlock__node *node, const dlock__node *from, const char *name,
                          dlock__err *e);
/* The TCP connect is done: start the handshake (state stays CONNECTING). */
int dlock__tls_start(dlock__conn *c, dlock__err *e);
/* Go on with the handshake; READY once it is done. */
int dlock__tls_handshake(dlock__conn *c, dlock__err *e);
int dlock__tls_flush(dlock__conn *c, dlock__err *e);
int dlock__tls_read(dlock__conn *c, dlock__err *e);
/* For dlock__conn_stale: 1 when application bytes are waiting, 0 when the server
 * closed the connection, -1 when nothing is (a TLS record that carries no data, such
 * as a session ticket, is taken on the way). */
int dlock__tls_peek(dlock__conn *c);
/* Free the session on the socket; with notify, tell the server first (close_notify).
 * The descriptor is left to the caller. */
void dlock__tls_close(dlock__conn *c, bool notify);

/* One node's part of a round. */
typedef struct dlock__req {
    const char *cmd; /* RESP bytes to send (not owned); NULL: nothing for this node */
    size_t cmdlen;
    /* A reply the sender answers by sending other bytes, once (a script call whose
     * server lost its script cache is resent as the script itself): resend sets *cmd
     * and *len to the bytes to send, or *cmd to NULL to keep the reply, and returns
     * DLOCK_OK or an error code. NULL: every reply is kept. */
    int (*resend)(void *arg, const redisReply *reply, const char **cmd, size_t *len);
    void *resend_arg;
    bool await; /* false: send and leave the reply to be discarded later */
    /* Run late, after its caller gave up on it, the command harms nobody (a release, a
     * read): its connection is closed normally, not reset (dlock__conn.risky). */
    bool harmless_late;
    /* The slot of the command's keys, for a cluster node (cluster.c); !keyed: any
     * master may answer. */
    bool keyed;
    uint16_t slot;
    /* results */
    redisReply *reply; /* the reply (caller frees with freeReplyObject), or NULL */
    int err;           /* DLOCK_OK when reply is set, else why not */
    dlock__err why;    /* why not (err is not DLOCK_OK), for dlock_errmsg */
    /* private to fanout.c, pipe.c and the topology's ops */
    uint64_t pipe_seq; /* its place in its pipe's line of replies (pipe.c) */
    int64_t start_us, deadline_us;
    bool done, retried, held;
    bool asking;   /* a cluster's -ASK: ASKING goes before each send of the command */
    int redirects; /* -MOVED and -ASK followed */
} dlock__req;

/* ---- a node's topology: node.c (direct), sentinel.c, cluster.c; topo.c chooses --- */

/* What the generic transport (conn.c, fanout.c) asks of the kind of server a node's URL
 * names: where a connection goes, which server a request goes to, what a server's error
 * reply means, whose restart voter a server has. One table per kind, each op's contract
 * below; a node's is chosen once when it is made and never changes, so the transport
 * tests no URL flag. An optional op may be NULL: that kind has nothing to do there.
 * An op given a connection runs on the thread that uses it; every op takes the
 * node's mu itself when it needs it, except voter, which is called with it held. */
typedef struct dlock__topology {
    /* Make and free the node's own state (cluster: the slot map, node->cluster).
     * Optional. node_new fails only with DLOCK_ERR_NOMEM; node_free is called after
     * every connection of the node is freed, also when node_new failed. */
    int (*node_new)(dlock__node *node);
    void (*node_free)(dlock__node *node);
    /* Where the connection c being opened goes: into c->host and c->port (left alone for
     * a unix socket). Direct: the URL's host; sentinel: the master the Sentinels name
     * now (one round to them); cluster: the master c was routed to, else any that
     * serves slots. An error, with why in e, fails the open. Required. */
    int (*resolve)(dlock__conn *c, dlock__err *e);
    /* Point c at the server that serves r, before a round sends r (cluster: its slot's
     * master, the connection to it swapped in from the parked ones). An error, with why
     * in e, fails the node's part of the round. Optional. */
    int (*route)(dlock__conn *c, const dlock__req *r, dlock__err *e);
    /* An error reply to r on c: *resend true when r is to be sent again on c, which now
     * points elsewhere (cluster: -MOVED, -ASK; r->asking for the latter); false when the
     * reply is r's answer, which may ask that c be made anew (c->reresolve: sentinel's
     * -READONLY). An error, with why in r->why, fails the node's part of the round (too
     * many redirections). Optional. */
    int (*on_error)(dlock__conn *c, dlock__req *r, const redisReply *reply, bool *resend);
    /* The restart voter of the server c is at, with the node's mu held, and in *promoted
     * whether that server took over from another after the client first met the node
     * (cluster: a master first seen in a later map). Optional: NULL names the node's
     * own voter, never promoted. */
    dlock__voter *(*voter)(const dlock__conn *c, bool *promoted);
    /* A server of node failed or timed out: where its servers are may have changed
     * (cluster: the map is read again before the next request). Optional. */
    void (*suspect)(dlock__node *node);
    /* c is being freed (forget: in a forked child, as by dlock__conn_forget): free what
     * the topology keeps beside it (cluster: the connections parked beside it).
     * Optional. */
    void (*conn_free)(dlock__conn *c, bool forget);
    /* The server is whichever master others name (sentinel): its INFO must say it is a
     * master, and a changed run_id is a new master, whose grants wait a whole lease. */
    bool named_master;
} dlock__topology;

extern const dlock__topology dlock__topo_direct;   /* redis://, rediss://, unix: node.c */
extern const dlock__topology dlock__topo_sentinel; /* redis-sentinel://: sentinel.c */
extern const dlock__topology dlock__topo_cluster;  /* redis-cluster://: cluster.c */

/* Give node (its address set) the topology its URL names, and make that topology's
 * state: DLOCK_ERR_NOMEM, with no message, when it cannot be made. (topo.c) */
int dlock__topo_attach(dlock__node *node);
/* Free node's topology state (after its connections); a node never attached is fine. */
void dlock__topo_detach(dlock__node *node);

/* Send reqs[i] on conns[i] for every i with a cmd, in parallel, and wait for the
 * awaited replies until each node's deadline: now + timeout (+ connect timeout for a
 * node that must first connect). A node that misses its deadline keeps its socket
 * only if its command was sent whole (its late reply is then discarded by the next
 * round); otherwise its connection is closed. */
void dlock__fanout(dlock__conn *conns, dlock__req *reqs, int n);

/* Whether node i's reply (r->reply, r->err == DLOCK_OK) is a "yes" in a quorum vote. */
typedef bool (*dlock__vote_fn)(const dlock__req *r, int i, void *arg);
/* dlock__fanout for a quorum vote: the round also ends as soon as a quorum said yes or
 * too few nodes are left to make one; the nodes not heard from are abandoned as if
 * timed out. */
void dlock__fanout_vote(dlock__conn *conns, dlock__req *reqs, int n, dlock__vote_fn vote,
                        void *arg);
/* dlock__fanout_vote, the round ending once need nodes said yes (need 1: the first
 * answer that will do, from whichever node gives it first). */
void dlock__fanout_until(dlock__conn *conns, dlock__req *reqs, int n, dlock__vote_fn vote,
                         void *arg, int need);
/* A round in flight, between its sends and its end: dlock__fanout_until starts it,
 * then pumps it (one poll, and what the sockets it reports bring) until it ends; a
 * nowait step of an acquisition starts it, and later ones pump it without waiting. */
typedef struct dlock__flight {
    dlock__conn *conns;
    dlock__req *reqs;
    int n, need;
    dlock__vote_fn vote; /* NULL: every node is waited for */
    void *arg;
    struct dlock__waker *wk; /* on piped connections: told as each reply comes (pipe.c) */
} dlock__flight;
/* Send reqs[i] on conns[i] for every i with a cmd; vote, arg and need as in
 * dlock__fanout_until; wk (NULL: none) as in dlock__pipe_send, for piped connections. */
void dlock__flight_start(dlock__flight *f, dlock__conn *conns, dlock__req *reqs, int n,
                         dlock__vote_fn vote, void *arg, int need, struct dlock__waker *wk);
/* Act on what the sockets say, waiting for it at most wait_us (0: not at all; -1: until
 * the next node's deadline); true once the round has ended. */
bool dlock__flight_pump(dlock__flight *f, int64_t wait_us);
/* Take the replies that have come in already, past their deadline too, without waiting:
 * a round its caller reads only later (confirm.c). Not for piped connections. */
void dlock__flight_take_arrived(dlock__flight *f);
/* Whether the round has ended without looking at any socket: every node answered,
 * failed, or is past its deadline (expired here). */
bool dlock__flight_settled(dlock__flight *f);
/* What the round waits for now: one poll entry per node not yet done (their count is
 * returned), and in *due_us the earliest deadline, or now when bytes wait to be taken. */
int dlock__flight_wants(const dlock__flight *f, struct pollfd *pfd, int64_t *due_us);
/* Give the round up: every node not yet done is left as when a quorum decides without
 * it (its late reply discarded by a later round), or its connection closed. */
void dlock__flight_drop(dlock__flight *f);
/* Send the commands that are not awaited, as far as the sockets take them now, and
 * leave the rest queued on their connections, for the next round on each to finish:
 * nothing waits (an event loop's step). */
void dlock__fanout_post(dlock__conn *conns, dlock__req *reqs, int n);
/* Quorum of n nodes: n/2 + 1. */
int dlock__quorum(int n);
/* Whether r's sender answers *reply on c by sending other bytes, once (a script the
 * server no longer has is sent whole): *cmd and *len are those bytes, *reply freed and
 * NULL, r->retried set; *cmd NULL: keep the reply. An error (out of memory), with why
 * in r->why, frees the reply too. (fanout.c) */
int dlock__req_resend(const dlock__conn *c, dlock__req *r, redisReply **reply, const char **cmd,
                      size_t *len);

/* ---- pipe.c: connections that many callers' rounds share ---------------------------- */

/* Who is told when a request on a pipe is done (its reply in, or failed): fn(arg), from
 * the pipe's pump, on its ready list meanwhile. Owned by the caller of the round. */
typedef struct dlock__waker {
    void (*fn)(void *arg);
    void *arg;
    struct dlock__waker *next, **prev; /* on the ready list (prev NULL: not on it) */
} dlock__waker;

/* What the pipes of one client share: the mutex every use of them takes, and the list
 * of wakers whose requests are done, to be told by the next dlock__pipes_pump. */
typedef struct dlock__pipes {
    pthread_mutex_t mu;
    dlock__waker *ready;
    int epfd; /* the pipes' sockets, for the pump to wait on (-1: none yet) */
    int n;
    struct dlock__conn *conns; /* one per node, each with its pipe */
    int reg_fd[DLOCK_SERVERS_MAX];
    uint32_t reg_ev[DLOCK_SERVERS_MAX];
} dlock__pipes;

/* Give conns[0..n) (initialized, closed) pipes sharing ps: DLOCK_ERR_NOMEM when they
 * cannot be made. Free with dlock__pipes_free (after their connections' last use). */
int dlock__pipes_init(dlock__pipes *ps, dlock__conn *conns, int n);
void dlock__pipes_free(dlock__pipes *ps);
/* The mutex of piped conns, which every use of them holds (nothing for conns of one
 * caller, whose set is never shared). */
void dlock__pipe_lock(const dlock__conn *conns);
void dlock__pipe_unlock(const dlock__conn *conns);
/* fanout.c's steps on a piped connection (its mutex held): start r (queued behind the
 * others, or held until the connection's handshake is done; sent by the next pump),
 * told to wk when done; r missed its deadline (the server stalls: every request on the
 * connection fails, the connection is reset); the caller gave r up (its reply, when it
 * comes, is discarded). */
void dlock__pipe_send(dlock__conn *c, dlock__req *r, dlock__waker *wk);
void dlock__pipe_expire(dlock__conn *c, dlock__req *r);
void dlock__pipe_abandon(dlock__conn *c, dlock__req *r);
/* Send what is queued, take what has come, and give each reply to its request, waiting
 * at most wait_ms (0: not at all) for something to happen; then tell the wakers of the
 * requests that are done (mutex released: a waker may start rounds). */
void dlock__pipes_pump(dlock__pipes *ps, int wait_ms);
/* Only send what is queued (no system call when nothing is), then tell the wakers of
 * the requests that are done. */
void dlock__pipes_flush(dlock__pipes *ps);
/* Take r's waker off the ready list, if it is on it (its owner is going). */
void dlock__pipes_forget(dlock__pipes *ps, dlock__waker *wk);
/* dlock__flight_pump of a round on piped connections (pipe_pump.c): its requests past
 * their deadline expired, those a decided vote need not wait for abandoned; it waits
 * (pumping the pipes, and telling their wakers) only when wait_us is not 0. */
bool dlock__pipe_flight_pump(dlock__flight *f, int64_t wait_us);
/* Once the answers so far decide a vote, the nodes still connecting or lagging are not
 * waited for (fanout.c). */
void dlock__flight_abandon_decided(dlock__flight *f);
/* fanout.c's steps of one request on a plain connection, which fanout_pump.c's wait
 * drives: r failed with err (the connection is closed, its node suspected); r missed
 * its deadline; act on poll's report (revents) for r's connection. */
void dlock__req_fail(dlock__conn *c, dlock__req *r, int err);
void dlock__req_expire(dlock__conn *c, dlock__req *r);
void dlock__req_step(dlock__conn *c, dlock__req *r, short revents);

/* What a Sentinel URL's Sentinels say of the failover they could make (SENTINEL
 * CKQUORUM): *up of them answered; *ok 1 when one says a quorum and a failover's
 * authorization can be reached, 0 when one says not, -1 when none could say; words,
 * that Sentinel's reply. */
int dlock__sentinel_quorum(dlock__node *node, int *up, int *ok, char *words, size_t n);

/* One question to several hosts at once, on connections of their own (ask.c): a URL's
 * Sentinels, a cluster's seeds and masters. */
#define DLOCK_ASK_MAX 16
typedef struct dlock__ask {
    int k;
    dlock__node_rules rules;
    dlock__node nodes[DLOCK_ASK_MAX];
    dlock__conn conns[DLOCK_ASK_MAX];
    dlock__req reqs[DLOCK_ASK_MAX];
    char display[DLOCK_ASK_MAX][300];
    char *cmd;
} dlock__ask;

/* What an ask is: whom (k hosts, at most DLOCK_ASK_MAX; what, the word for one in
 * messages: "Sentinel"), with which credentials (NULL: none), asked what (argv), and
 * when it is done: once need of them gave an answer that good() accepts (NULL: when
 * all answered). The connections follow from's deadlines, log and TLS (name: the name
 * each certificate must carry, NULL: the host's own). */
typedef struct dlock__ask_spec {
    const dlock__node *from;
    const struct dlock__hostport *hosts;
    int k;
    const char *what, *tls_name;
    char *user, *password; /* not const: a node's address owns its own (the ask's do not) */
    int argc;
    const char **argv;
    dlock__vote_fn good;
    int need;
    int reply_max_elements; /* 0: the defaults */
    size_t reply_max_bytes;
} dlock__ask_spec;

/* Ask; the replies in a->reqs[0..a->k), each with its host's display (a->display).
 * An error only when the question could not be asked (out of memory, a TLS context);
 * free with dlock__ask_end whatever this returns. */
int dlock__ask_run(dlock__ask *a, const dlock__ask_spec *spec, dlock__err *e);
void dlock__ask_end(dlock__ask *a);

/* ---- cluster.c ---------------------------------------------------------------------- */

#define DLOCK_CLUSTER_SLOTS 16384
/* The slot of a key: CRC16 of the key, or of its hash tag (the part between the first
 * '{' and the next '}', when not empty), modulo DLOCK_CLUSTER_SLOTS. */
uint16_t dlock__key_slot(const char *key, size_t len);
/* A redis-cluster:// node's map (none yet), and its end: the cluster topology's
 * node_new and node_free. */
int dlock__cluster_new(dlock__node *node);
void dlock__cluster_free(dlock__node *node);
/* A master of node's failed or timed out: its slots may have a new owner (a failover),
 * so the map is read again before the next request (the cluster topology's suspect). */
void dlock__cluster_suspect(dlock__node *node);
/* The parsers of what a cluster says (fuzz_cluster drives them): a -MOVED or -ASK
 * reply's words ("MOVED 3999 10.0.0.2:6381"; an empty host is self's, the replying
 * node's), false for anything else; and a CLUSTER SLOTS reply from the node at asked,
 * taken as node's map (DLOCK_ERR_PROTOCOL for one that is not a map, or that names
 * more masters than a map holds). */
bool dlock__cluster_parse_redirect(const char *str, const char *self, bool *ask, int *slot,
                                   char *host, size_t hostlen, int *port);
int dlock__cluster_take_map(dlock__node *node, const redisReply *map, const char *asked,
                            dlock__err *e);
/* The master that owns slot in node's map: its address, or false when none does. */
bool dlock__cluster_owner(dlock__node *node, int slot, char *host, size_t hostlen, int *port);
/* How many masters serve slots in node's map; the first max of them into hosts, each
 * host's name copied into names[i] (hosts[i].host points there). */
int dlock__cluster_masters(dlock__node *node, struct dlock__hostport *hosts, char (*names)[256],
                           int max);

/* A set of N connections, one per node, that one call uses at a time. */
typedef struct dlock__connset {
    struct dlock__connset *next; /* in the client's free list */
    /* Used by a nowait step: the sends that are not awaited are posted
     * (dlock__fanout_post), never waited for. Cleared when the set goes back to the
     * pool. */
    bool post;
    /* An epoll set of the sockets a round in flight waits on, for a nowait step's caller
     * to wait on one descriptor (dlock__step_round_fd): made when first needed, kept
     * with the set, so that there are never more of them than sets (a round holds its
     * set, and with it this, while in flight). -1: none yet. */
    int epfd;
    int nregs; /* the descriptors in it */
    int regs[DLOCK_SERVERS_MAX];
    dlock__conn conns[];
} dlock__connset;

#endif /* DLOCK_TRANSPORT_H */
