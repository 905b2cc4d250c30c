/*
 * internal.h: what the files of src/ share, and the map of them. Nothing here is
 * installed; the non-static names are dlock__* and libdlock.so's version script
 * exports only the public names (the static library, which the tests link, keeps them
 * all).
 *
 * The map: one concern per file, in layers, the lowest first. A file includes only
 * headers of its own layer or lower ones and calls only functions of those, and
 * `make check-layers` holds every file to that, reading the layer of each from this
 * map (a layer's name opens it in the first column, a file's name stands in the
 * second). Each layer's header includes the one below: base.h, transport.h,
 * scripts.h, round.h, then this file.
 *
 *   base        base.h      memory, messages, the clock, tokens, fork detection,
 *                           addresses, replies (parsing included)
 *               hooks.h     the test build's fault-injection hooks
 *               alloc.c     the library's allocations (the test build can fail them)
 *               error.c     error codes and messages; the one rule for messages
 *               clock.c     the one clock (CLOCK_BOOTTIME) for elapsed time and leases
 *               fork.c      telling a forked child from the process that made a thing
 *               token.c     128-bit tokens and jitter from getrandom(2)
 *               url.c       server addresses
 *               url_list.c  the list of them: where an entry ends (a scheme starts
 *                           one), a server named twice
 *               glob.c      a name against dlock_list's glob, without exponential
 *                           backtracking
 *               reply.c     hiredis's redisReader with our size caps; server errors
 *               hooks.c     the hooks' state (only in the test build's library)
 *   transport   transport.h what a server is and how to talk to N of them at once;
 *                           a node's topology, a table of operations (where a
 *                           connection goes, which server a request goes to, what an
 *                           error reply means) that conn.c and fanout.c call alone
 *               node.c      what a server's INFO says: restart voting, eviction policy;
 *                           the direct topology (the URL's own server)
 *               conn.c      one connection: non-blocking connect, handshake, buffers
 *               tls.c       TLS for rediss:// (OpenSSL): each node's context, the
 *                           handshake, encrypted reads and writes, resumed sessions
 *               fanout.c    one command to N nodes in parallel under one deadline,
 *                           ending early once a caller's predicate (a vote) says so;
 *                           each request's steps on its connection
 *               fanout_pump.c  a round's wait: one ppoll on its sockets to the deadline
 *               pipe.h      what pipe.c and pipe_pump.c share: a pipe's line
 *               pipe.c      a connection per server that many callers' rounds share
 *                           (a pipelining client's nowait steps): commands queued
 *                           together on a line, replies matched in order
 *               pipe_pump.c the pipes' one pump (writes, reads, the wakers told), and
 *                           a round in flight on them
 *               ask.c       one question to several hosts at once, on connections of
 *                           its own (a URL's Sentinels, a cluster's seeds)
 *               sentinel.c  the Sentinel topology: the master a redis-sentinel://
 *                           URL's Sentinels name, asked on each connect (through
 *                           ask.c), -READONLY
 *               cluster.c   the cluster topology: a redis-cluster:// node's key slots,
 *                           slot map, routing each request to its slot's master over
 *                           parked connections, MOVED and ASK, restart voting per
 *                           master
 *               topo.c      each node's topology, chosen once from its URL
 *   scripts     scripts.h   the Lua, script calls, the key layout
 *               keys.c      the key layout: a name's keys, its hash tag
 *               scripts.c   the lock's Lua scripts (taking, releasing, renewing, the
 *                           shared holders, an operator's break)
 *               scripts_queue.c    the wait queue's Lua: join, the handoff (dispatch),
 *                                  a waiter's refresh and confirmation
 *               scripts_records.c  the scripts of the records beside locks: the fenced
 *                                  register, a job's slot, a leader's record
 *               stock_scripts.c    the stock's scripts, their key layout and invariant
 *               scripts_list.c     the listing's page script (dlock_list sends it by EVAL)
 *               script_call.c      a script call: the bodies joined once, their SHA1s,
 *                                  EVALSHA and its EVAL fallback on -NOSCRIPT
 *   rounds      round.h     the client's state, its pool, one round and its vote
 *               pool.c      the client's pool of connection sets
 *               round.c     one round to N nodes and its vote; validity; tallies
 *   calls       internal.h  this file: what the public calls share
 *               list.h      what list.c and list_merge.c share
 *               views.h     what views.c, lock.c and inspect.c share: an INSPECT round
 *               stock.h     what the stock's files share
 *               subscriber.h  the subscriber thread, for its users
 *               handle.c    the dlock_lock handle, argument checks, accessors
 *               acquire_calls.c  dlock_acquire, dlock_sem_acquire and their _start
 *                           forms: the checks of their arguments, then the backend
 *               acquire.c   an acquisition on Redis servers (exclusive, shared, one of K
 *                           permits) as steps of a dlock_pending: when to attempt, queue,
 *                           wait for a handoff or refresh; dlock_acquire sleeps between
 *                           the steps, an event loop can drive them instead
 *               confirm.c   the confirmation of a lock taken on its grant's message:
 *                           our own lease, sent as the section starts, read by the
 *                           handle's next call
 *               attempt.c   one attempt: the request and its call, the vote, undoing
 *                           partial grants, joining, refreshing and leaving a place in
 *                           the queue; when to attempt again (backoff, a lease's end)
 *               pending.c   operations in steps (dlock_pending: an acquisition, a
 *                           release, an extension, a stock reservation), a
 *                           pipelining client's pump, the sleeping loop blocking
 *                           calls run them in, and the round a nowait step keeps in
 *                           flight
 *               release.c   dlock_release, in one call or in steps
 *               linger.c    dlock_opts.linger_ms: a release held back for the client's
 *                           next acquire of the name, taken back in a retake
 *               extend.c    dlock_extend, in one call or in steps
 *               views.c     one INSPECT round (what every node holds for a name), in
 *                           one call or in steps, and the quorum's view of it
 *               lock.c      check, in one call or in steps; a lock found lost
 *               inspect.c   inspect: a name's holder, its shared holders, in one call
 *                           or in steps (dlockd's LOCKINFO)
 *               list.c      dlock_list: every held name, a page of them per round trip
 *                           (SCAN in a script), every master of a cluster
 *               list_merge.c     one name's views merged as a quorum sees them
 *               break.c     an operator's break of a stuck lock, and its record
 *               fence.c     the resource side: fenced writes, dlock_fence_admit
 *               slot.c      a scheduled job's slots (dlock_slot_claim): the servers'
 *                           clock cut into periods, the last one claimed
 *               elect.c     leader election: a leader is the lock's holder, its term
 *                           the fence; its record (value, proclamations), written,
 *                           published and read
 *               observe.c   observers of a leadership (dlock_observe): what they hear
 *                           made into changes in term order, a read when it must be
 *               subscriber.c    the client's subscriber thread: one connection per node,
 *                               subscribed to the wake-up channel and to listeners'
 *                               channels
 *               subscriber_lend.c  the reading of those connections lent to a client's
 *                               only waiter, and taken back
 *               wait.c      the client's wake-ups: waiters (the heir a release of the
 *                           same client hands the lock to, those that wait behind a
 *                           holder of their own client)
 *               watchdog.c  automatic renewal and lost-lock notification
 *               stock.c     counted stock per SKU with leased reservations, on node 0:
 *                           set, add, status, commit, cancel, extend
 *               stock_reserve.c  the reserve, and its wait for units, in steps
 *               probe.c     what each server says of itself (INFO, CONFIG, TIME), for
 *                           dlock doctor; whether each answers PING (dlock_ping)
 *               call.c      a call on a client: its entry checks, and the count of the
 *                           calls that may block, which dlock_client_free ends
 *   backends    local.h     what the file:// files share
 *               local_file.c     the lock file on disk: its name, byte locks, records,
 *                                fence
 *               local_acquire.c  taking a name: one try under the guard; the inotify wait
 *               local.c          file:///DIR clients: every lock call on files of one host,
 *                                the file backend's table (dlock__backend_file)
 *               local_list.c     dlock_list of a directory's held names, and inspect
 *   api         client.c    dlock_client: config, the node list, the backend chosen for
 *                           it, and its free, which ends the blocking calls made on it
 *
 * The calls layer checks each public call's arguments and hands its work to the
 * client's backend (dlock__backend, below): the Redis backend's entries are the calls
 * of this layer on the servers, gathered in client.c; the file backend is the layer
 * above, on the handles, waits and sleeps of the calls layer, and nothing below it
 * names it. client.c, which picks a client's table, sits on top of both.
 *
 * The transport knows nothing above it: a node carries the rules its connections
 * follow (dlock__node_rules: deadlines, password, voting rule, log) and its topology,
 * so node.c, conn.c, tls.c, fanout.c and cluster.c never see the client; a request
 * says itself which reply it answers by resending (script_call.c's -NOSCRIPT rule)
 * and which slot it is for, so fanout.c knows no script; and a round may end early by
 * a predicate its caller passes (a vote), whose meaning the transport does not know.
 */
#ifndef DLOCK_INTERNAL_H
#define DLOCK_INTERNAL_H

#include "dlock.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>
#include <time.h>

#include "round.h"

/* ---- slot.c ------------------------------------------------------------------ */

/* ms since the epoch as "2026-11-28T15:00:00Z" in buf; returns buf. */
const char *dlock__utc_text(int64_t ms, char buf[32]);
/* A claim refused: DLOCK_ERR_BUSY, with a detail naming the claim that refused it
 * (out->last_*; last_at_ms -1: one a server held that the first round did not read). */
int dlock__slot_refused(const dlock_slot *out, dlock__err *e);

/* ---- wait.c ----------------------------------------------------------------- */

/* A waiter refreshes its place every DLOCK_QUEUE_REFRESH_MS (one script of two
 * commands), and the queue key lives DLOCK_QUEUE_TTL_MS past the last refresh: a name
 * whose waiters all died leaves no queue behind. */
#define DLOCK_QUEUE_REFRESH_MS 1000
#define DLOCK_QUEUE_TTL_MS     5000
/* The lease a release hands the head of the queue, which the head then confirms with
 * its own: DLOCK_HANDOFF_TIMEOUTS per-node timeouts, at least DLOCK_HANDOFF_MIN_MS. It
 * bounds what a head that died costs (docs/waiting.md). */
#define DLOCK_HANDOFF_TIMEOUTS 4
#define DLOCK_HANDOFF_MIN_MS   100
/* A lock handed to a waiter by a release of its own client, confirmed by the release's
 * reply (an heir's handoff): on which nodes, the highest of their fences, and the
 * release's round, from whose start the waiter's lease counts. */
typedef struct dlock__handoff {
    uint32_t nodes;
    uint64_t fence;
    int64_t start_us, end_us;
} dlock__handoff;

struct dlock__request;

/* One thread waiting for a name, registered with the client's subscriber thread. */
typedef struct dlock__waiter {
    struct dlock__waiter *next;
    char token[DLOCK_TOKEN_LEN + 1];
    int efd; /* written when a wake-up for token arrives */
    /* The waiter's exclusive acquisition (NULL for any other kind), and its ticket: what
     * a release of the same client needs to make it the heir (dlock__wait_heir). */
    const struct dlock__request *q;
    int64_t ticket;
    /* Guarded by the wait system's mutex, read with dlock__wait_grants: */
    uint32_t grants;        /* nodes whose release handed us the lock */
    uint32_t fenced;        /* those of them whose message carried the grant's fence */
    uint64_t grant_fence;   /* the highest of those fences */
    dlock__handoff handoff; /* what an heir's handoff confirmed */
    /* Waits behind a holder of its own client (one of c's handles, or an heir a release
     * of c handed the lock to), queued on no server. The release that ends that hold
     * queues it as its heir, or wakes it to attempt; an attempt (dlock__wait_grants'
     * clear) queues it on the servers, and clears this. */
    bool behind_own;
} dlock__waiter;

struct dlock__waitsys;

/* Register a waiter for wake-ups naming token (starting the client's subscriber thread
 * on first use), and give the subscription a moment to be confirmed. A failure has no
 * message: the caller falls back to waiting on timers. With hot, only if a quorum of
 * nodes already confirmed the subscription (DLOCK_ERR_BUSY otherwise): the caller may
 * then queue with its very first attempt. q and ticket: an exclusive acquisition's
 * request (it outlives the waiter) and ticket, which a release of this client may hand
 * the lock to at once; NULL for any other waiter. */
int dlock__wait_join(struct dlock_client *c, const char *token, bool hot,
                     const struct dlock__request *q, int64_t ticket, dlock__waiter **out);
/* The nodes whose release handed w the lock since the last clear (a bit per node), and
 * in *h (NULL: not asked) what an heir's handoff confirmed of it. A clear is an
 * attempt's, which queues w on the servers: it waits behind its own client no more. */
uint32_t dlock__wait_grants(struct dlock_client *c, dlock__waiter *w, bool clear,
                            dlock__handoff *h);
/* Of those nodes, the ones whose message carried the grant's fence, and in *fence the
 * highest of those fences: what a waiter may start its section on (acquire.c). */
uint32_t dlock__wait_fenced(struct dlock_client *c, dlock__waiter *w, uint64_t *fence);
/* The heir of a release of key (a lock key) by c: the first, by ticket, of c's
 * exclusive waiters for key, the one the release would hand the lock to if it heads the
 * queue. Its member, token and lease (as text) are copied out, and its ticket when it
 * waits behind its own client (the release queues it then; "" otherwise); false when c
 * has none, or when out of memory (the waiter is then woken as any other). */
typedef struct dlock__heir {
    char token[DLOCK_TOKEN_LEN + 1];
    char ttl[24];
    char ticket[24];
    size_t member_len;
    char *member; /* malloc'd */
} dlock__heir;
bool dlock__wait_heir(struct dlock_client *c, const char *key, size_t key_len, dlock__heir *out);
/* Whether a thread of c waits for the lock key now (any kind of acquisition). */
bool dlock__wait_any(struct dlock_client *c, const char *key, size_t key_len);
/* A release of key by c ended (or was given up). heir (NULL: none named) was handed the
 * lock on the nodes in h->nodes, and may have been on those in unknown (no reply): note
 * them all in its grants and wake it. Then the waiters of key that wait behind their own
 * client (behind_own): if the heir got the lock from a quorum they wait on behind it,
 * else each is woken to attempt (and so queue on the servers). */
void dlock__wait_released(struct dlock_client *c, const char *key, size_t key_len, const char *heir,
                          const dlock__handoff *h, uint32_t unknown);
/* Whether w, an exclusive waiter for name (its lock key in w->q), may wait behind a
 * holder of its own client without a word to any server: c holds name itself (an
 * attached handle, exclusive, neither lost nor released, its lease running) or a
 * release just handed it to another of c's waiters on a quorum. A handle whose release
 * is in flight still holds it: the release's end tells w (dlock__wait_released).
 * Marks w behind_own, and returns when that holder's lease is known to end (on
 * dlock__now_us); 0 when w may not. With again, only a waiter that waits behind its
 * own client already is looked at, and -1 says that it waited so and may no more (its
 * holder is gone: it must attempt). */
int64_t dlock__wait_behind_own(struct dlock_client *c, dlock__waiter *w, const char *name,
                               size_t name_len, bool again);
/* Sleep until fd (-1: none) is readable, until_us (dlock__now_us), cancel_fd (0:
 * none) is readable (DLOCK_ERR_CANCELED, no message), or close_fd (the client's
 * close_efd; -1: none) is (DLOCK_ERR_CLOSED, no message). Reads nothing. */
int dlock__sleep_on(int fd, int64_t until_us, int cancel_fd, int close_fd);
/* Sleep as dlock__sleep_on does, on fd, a waiter's wake-up descriptor (dlock__waiter's
 * efd) of c: when it is c's only waiter and c has no listener, reading c's subscriber
 * connections itself meanwhile, so that its wake-up takes one thread switch and not two
 * (subscriber.c). */
int dlock__wait_sleep(struct dlock_client *c, int fd, int64_t until_us, int cancel_fd,
                      int close_fd);
/* The subscriber thread reads c's wake-ups again, as soon as no sleeper does: a caller
 * is about to wait on a waiter's descriptor in a loop of its own. */
void dlock__wait_recall(struct dlock_client *c);
/* The message of a sleep's DLOCK_ERR_CANCELED or DLOCK_ERR_CLOSED, set in e. */
int dlock__sleep_ended(dlock__err *e, int rc);
/* Whether a wake-up for w arrived since the last call (it is taken: never blocks). */
bool dlock__wait_woken(dlock__waiter *w);
/* Unregister and free the waiter. */
void dlock__wait_leave(struct dlock_client *c, dlock__waiter *w);
/* Stop the subscriber thread and free the wait system (dlock_client_free). */
void dlock__wait_stop(struct dlock_client *c);
/* In a forked child (where the thread does not exist and its mutex may have been
 * copied locked): free the child's copy of the wait system, touching no lock. */
void dlock__wait_forget(struct dlock_client *c);

/* ---- watchdog.c ------------------------------------------------------------- */

struct dlock__watchdog;
/* Locks renewed by one script call: a Redis runs 256 of them in about a millisecond,
 * far inside any deadline, and 1,000 locks are still only four calls. */
#define DLOCK_RENEW_BATCH_MAX 256

/* Renew l every ttl_ms/3 until it is released, detached or lost (starting the
 * client's renewal thread on first use). */
int dlock__watchdog_add(struct dlock_client *c, struct dlock_lock *l, int64_t ttl_ms,
                        dlock_lost_fn on_lost, void *user, dlock__err *e);
/* Stop renewing l. A renewal round that includes l in flight is waited for (wait), or
 * (!wait) makes this return false, changing nothing. */
bool dlock__watchdog_remove(struct dlock_client *c, struct dlock_lock *l, bool wait);
/* dlock_extend is about to change the lease: renew to the new ttl from now on. A renewal
 * round that includes l (formatted with the old ttl) is waited for, or makes this return
 * false, as in dlock__watchdog_remove. */
bool dlock__watchdog_set_ttl(struct dlock_client *c, struct dlock_lock *l, int64_t ttl_ms,
                             bool wait);
/* Stop the renewal thread and free it (dlock_client_free). */
void dlock__watchdog_stop(struct dlock_client *c);
/* In a forked child: free the child's copy of the watchdog, touching no lock. */
void dlock__watchdog_forget(struct dlock_client *c);

/* ---- client.c ---------------------------------------------------------------- */

/* True in a process other than the one that created c (a forked child). */
bool dlock__client_forked(const struct dlock_client *c);
/* Check c and the process on entry to a call. */
int dlock__client_enter(struct dlock_client *c, dlock__err *e);
/* A call that can block for long (a waiting acquire or reserve) is counted from
 * begin to end, so that dlock_client_free, which makes its sleeps end with
 * DLOCK_ERR_CLOSED (they also watch c->close_efd), frees nothing before it returned.
 * begin: DLOCK_ERR_CLOSED when the client is being freed. end: rc as it was, but when
 * the client is being freed, a lock the call got (*got) is released and rc becomes
 * DLOCK_ERR_CLOSED, so that no handle outlives the client. */
int dlock__client_block_begin(struct dlock_client *c, dlock__err *e);
int dlock__client_block_end(struct dlock_client *c, int rc, struct dlock_lock **got, dlock__err *e);

/* ---- handle.c --------------------------------------------------------------- */

#define DLOCK_LOCK_MAGIC 0x646c6c6bU /* "dllk" */

struct dlock_lock {
    uint32_t magic;
    struct dlock_client *client;
    struct dlock_lock *prev, *next; /* in client->locks */
    char *name;
    size_t name_len;
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t fence;
    /* Written by the renewal thread too, hence atomic. */
    _Atomic int64_t valid_until_us; /* on dlock__now_us(); 0: unknown (adopted) */
    _Atomic bool lost;
    bool shared;       /* a shared holder or a semaphore permit (renewed with its holders keys) */
    bool leading;      /* an elected leader's (renewed with its record, elect.c); set before
                          the watchdog knows the handle */
    int64_t proclaims; /* a leader's: its proclamations so far (the seq of the last) */
    bool adopted;      /* made by dlock_lock_adopt: its lock may be a leader's */
    bool attached;     /* on client->locks */
    bool released;     /* guarded by client->mu: its release ended and told the client's
                          waiters so, so none waits behind it (dlock__wait_behind_own) */
    int lost_fd;       /* guarded by client->mu; -1 until dlock_lost_fd */
    /* Renewal (watchdog.c), guarded by the watchdog's mutex. */
    bool renewing;          /* registered with the watchdog */
    bool in_batch;          /* in a renewal round now: the handle must not be freed */
    dlock__keys renew_keys; /* the name's keys, for the renewal batch (NULL buf: none) */
    int64_t ttl_ms, next_renew_us;
    dlock_lost_fn on_lost;
    void *on_lost_user;
    int wd_pos; /* its index in the renewal's heap; -1: not in it (a new handle's 0 is
                   never read: the heap is used only while renewing) */
    /* A lock taken on its grant's message: the round of its confirmation, read by the
     * next call on the handle (confirm.c); NULL: none. Atomic: whoever reads it takes
     * it, the owner's call or dlock_remaining_ms in a lost-lock callback. */
    _Atomic(struct dlock__confirm *) confirm;
    /* Lingering (linger.c): linger_us from dlock_opts.linger_ms (0: none); while on the
     * client's linger list (guarded by its mutex), next on it and when it is released;
     * fresh_until_us, until when the queue's head, by the last retake's reply, may
     * still be passed over (0: unknown); held_since_us, when the hold began (its
     * dlock_acquire returned; a retake goes on with it). */
    int64_t linger_us, linger_until_us, fresh_until_us, held_since_us;
    struct dlock_lock *linger_next;
    void *hold; /* what a backend other than Redis keeps of the lock, which only it reads
                   (the file backend's: the file's descriptor and record); NULL: none, and
                   for a handle adopted */
};

/* The confirmation of a lock taken on its grant's message (confirm.c): an EXTEND to
 * our own lease, made for l (NULL when out of memory: the lock is then confirmed by an
 * attempt, as before), started on the acquisition's round (which it keeps), and
 * settled by the next call on the handle: its reply read (waiting for it unless
 * nowait: false when it is not in yet), the validity moved on to what it proves, the
 * round given back. Freed unread, it is given up. NULL also when the client holds
 * DLOCK_CONFIRMS_MAX already. */
typedef struct dlock__confirm dlock__confirm;
/* The most a client holds at once: each keeps a connection set (a connection to every
 * server) until its handle's next call, so a program holding many locks so taken would
 * hold as many sets; beyond this, a waiter confirms first. */
#define DLOCK_CONFIRMS_MAX 16
dlock__confirm *dlock__confirm_new(struct dlock_client *c, const dlock_lock *l, int64_t ttl_ms);
void dlock__confirm_start(struct dlock_client *c, dlock__confirm *cf, dlock__round *rd);
bool dlock__confirm_settle(dlock_lock *l, bool nowait);
/* dlock__backend_redis's remaining_ms: the validity, once a confirmation in flight is
 * settled (waiting for its reply at most the rest of its per-node timeout). */
int64_t dlock__redis_remaining_ms(const dlock_lock *l);
void dlock__confirm_free(struct dlock_client *c, dlock__confirm *cf);

/* Argument checks shared by the lock calls. */
int dlock__check_name(const char *name, dlock__err *e);
/* The same for a name of another kind (what: "sku"), said so in the message. */
int dlock__check_key_name(const char *name, const char *what, dlock__err *e);
/* wait_ms (-1, 0 or more) and cancel_fd (0: none, else a descriptor) of a call that
 * may wait. */
int dlock__check_wait(int64_t wait_ms, int cancel_fd, dlock__err *e);
int dlock__check_ttl(int64_t ttl_ms, const char *what, dlock__err *e);
/* An options struct's reserved words (what: its type's name) are all zero. */
int dlock__check_reserved(const uint64_t *w, size_t n, const char *what, dlock__err *e);
/* A lease (0: def_ms) and a wait with its cancel_fd, checked; the values in the outs. */
int dlock__check_lease_wait(int64_t lease_ms, int64_t def_ms, const char *what, int64_t wait_ms,
                            int cancel_fd, int64_t *lease_out, int64_t *wait_out, dlock__err *e);
/* Check a handle and its client on entry to a call. */
int dlock__lock_enter(struct dlock_lock *l, dlock__err *e);
/* A new handle for name (not yet on the client's list). */
int dlock__lock_new(struct dlock_client *c, const char *name, struct dlock_lock **out,
                    dlock__err *e);
/* Put l on its client's list, so that dlock_client_free releases it. */
void dlock__lock_attach(struct dlock_lock *l);
/* ---- linger.c ----------------------------------------------------------------- */

/* dlock_release of a handle taken with linger_ms: true when it lingers now (the release
 * returns DLOCK_OK), false when it must be released now (its lease ran out, it is lost,
 * a thread of the client waits for the name). */
bool dlock__linger_put(struct dlock_lock *l);
/* First in a blocking acquisition (acquire.c): a handle of c's that lingers for name is
 * taken back (DLOCK_OK, *out) when the acquisition lingers too (an exclusive one, limit
 * 0), in at most one round trip, or else released. DLOCK_ERR_AGAIN: nothing was taken
 * back, acquire. */
int dlock__linger_take(struct dlock_client *c, const char *name, const dlock_opts *opts,
                       int64_t ttl_ms, int64_t limit, struct dlock_lock **out, dlock__err *e);
/* dlock_client_free: the thread stopped; the lingering handles stay on the client's
 * list, to be released with the others. In a forked child: _forget. */
void dlock__linger_stop(struct dlock_client *c);
void dlock__linger_forget(struct dlock_client *c);
/* release.c's retake of lingering l (a client of one server): the lock kept with a
 * lease of ttl_ms while the queue's head has been passed over for less than pass_us
 * (true: l is the caller's, its validity and fresh_until_us set), else released (false:
 * l is freed). */
bool dlock__redis_retake(struct dlock_lock *l, int64_t ttl_ms, int64_t pass_us);

/* Free a handle, taking it off the renewal thread and its client's list first. */
void dlock__lock_free(struct dlock_lock *l);
/* The handle is lost: say so to dlock_remaining_ms, the lost fd and later calls. */
void dlock__lock_mark_lost(struct dlock_lock *l);
/* lock.c: the same, found by a call on the servers (it is lost for good): off the
 * renewal thread too. */
void dlock__lock_lost(struct dlock_lock *l);

/* ---- elect.c, observe.c ------------------------------------------------------ */

/* Who leads a name, as one read says, with what an observer matches messages by. */
typedef struct dlock__leader {
    dlock_leader_info info;          /* term 0: no one leads */
    uint64_t seq;                    /* the proclamation's number in the term */
    char token[DLOCK_TOKEN_LEN + 1]; /* the leader's token ("" when none) */
} dlock__leader;
/* Read who leads the name of keys k: a token that a quorum's locks and records agree
 * on. DLOCK_OK with out->info.term 0 when none, else the unavailability error. */
int dlock__leader_read(struct dlock_client *c, const dlock__keys *k, dlock__leader *out,
                       dlock__err *e);
/* On entry to an election call: the client, out (what: its name in the message) not
 * NULL, the name (NULL: not checked), and Redis servers (not file://). */
int dlock__election_enter(struct dlock_client *c, const char *name, const void *out,
                          const char *what, dlock__err *e);
/* A leader's value (NULL: "") is at most DLOCK_LEADER_VALUE_MAX bytes. */
int dlock__check_value(const char *value, dlock__err *e);
/* info->holder from a lock's value ("<token> <holder>", len bytes). */
void dlock__leader_holder(dlock_leader_info *info, const char *v, size_t len);

/* ---- pending.c -------------------------------------------------------------- */

/* An operation in steps, the public dlock_pending: an acquisition (acquire.c), a
 * release (release.c) or a stock reservation (stock_reserve.c), each a struct that
 * begins with this one. */
struct dlock_pending {
    /* The next step: DLOCK_OK (done: the lock in *out, or the reservation's id in
     * id), DLOCK_ERR_AGAIN (fd and due_us say when to step again), or the error that
     * ends it, its message in *e. With nowait, it never waits for a server, and
     * answers DLOCK_ERR_WOULDBLOCK for a step that would. */
    int (*step)(struct dlock_pending *p, dlock_lock **out, bool nowait, dlock__err *e);
    /* Free it; an operation not finished gives up first (leaves its queue). */
    void (*destroy)(struct dlock_pending *p);
    int fd; /* readable: step now; -1: none */
    /* fd is a waiter's wake-up descriptor of this client (NULL: it is not): a blocking
     * run sleeps on it with dlock__wait_sleep, and a step that returns to an event
     * loop calls dlock__wait_recall. */
    struct dlock_client *wake_c;
    int64_t due_us; /* step then, even if fd stays quiet (dlock__now_us) */
    bool done;      /* a step returned something other than DLOCK_ERR_AGAIN or _WOULDBLOCK */
    bool in_flight; /* fd is the sockets of a round in flight */
    bool lockless;  /* its result is no lock (a reservation's id, a release): out may be NULL */
    char id[DLOCK_TOKEN_LEN + 1]; /* the reservation's id once granted, else "" */
    dlock__waker wk; /* dlock_pending_notify's: told when a piped round's reply comes */
};

/* A zeroed operation of size bytes (its struct, which begins with a dlock_pending) with
 * its step and clean-up set and no descriptor yet; NULL when out of memory. */
void *dlock__pending_new(size_t size,
                         int (*step)(dlock_pending *, dlock_lock **, bool, dlock__err *),
                         void (*destroy)(dlock_pending *));
/* A step's DLOCK_ERR_AGAIN, with its message. */
int dlock__pending_again(dlock__err *e);
/* A nowait step's DLOCK_ERR_WOULDBLOCK, with its message. */
int dlock__pending_would_block(dlock__err *e);
/* The round of a step (pending.c): a blocking step's, given back when the step ends,
 * or a nowait step's, kept in flight across steps until its replies are in, its
 * connection set counted in the client's sets in flight. */
typedef struct dlock__step_round {
    dlock__round *rd; /* made by the first begin (NULL: none yet); rd->set NULL: no set */
    bool counted;     /* rd.set came from dlock__connset_try_get */
    dlock__waker *wk; /* its pending's, told when a piped round's replies come */
    bool sent;        /* the step's round was started (its owner clears it to send again) */
} dlock__step_round;
/* sr of the pending p (its waker). */
void dlock__step_round_init(dlock__step_round *sr, dlock_pending *p);
/* A round for this step in sr->rd, unless one is in flight already: a nowait step's
 * goes on the client's pipes when it has them (dlock_client_pipeline), else takes a
 * counted set (DLOCK_ERR_WOULDBLOCK when none is left), and posts what it sends
 * unawaited. A blocking step's round goes on a set of its own, unless a piped one is in
 * flight (it waits for that one's replies by pumping the pipes). */
int dlock__step_round_begin(struct dlock_client *c, dlock__step_round *sr, bool nowait,
                            dlock__err *e);
/* While the round is in flight: the descriptor to wait on (the one socket when that is
 * all it waits for, to read; else the epoll set of the round's connection set), and in *due_us the
 * next deadline; -1 when the set cannot be made (*due_us is then soon, so that the steps poll). */
int dlock__step_round_fd(dlock__step_round *sr, int64_t *due_us);
/* The wait of an operation of one round (a release, an extension, a check): true once
 * its replies are in; false while it is in flight, p then parked on the round
 * (p->in_flight, p->fd and p->due_us set). A nowait step posts what it writes. */
bool dlock__step_round_over(struct dlock_client *c, dlock__step_round *sr, dlock_pending *p,
                            bool nowait);
/* An operation of one call without a vote (a check, an inspect, a stock call), its
 * round in steps: sent by the first step (sr->sent), on every node or, with first_only,
 * on the first alone (a SKU's server); DLOCK_OK once its replies are in (read them in
 * sr->rd, then dlock__step_round_end), else dlock__pending_again or a step's error. */
int dlock__step_call(struct dlock_client *c, dlock__step_round *sr, dlock__call *call,
                     bool first_only, dlock_pending *p, bool nowait, dlock__err *e);
/* The round is over: its replies freed, its set given back. */
void dlock__step_round_end(struct dlock_client *c, dlock__step_round *sr);
/* dlock__step_round_end, and the round freed. */
void dlock__step_round_free(struct dlock_client *c, dlock__step_round *sr);

/* The blocking form: step, sleeping between steps on fd and due_us, until the result
 * (DLOCK_ERR_CANCELED when cancel_fd, 0 for none, became readable; DLOCK_ERR_CLOSED
 * when close_fd did: the client is being freed). The caller frees. */
int dlock__pending_run(dlock_pending *p, int cancel_fd, int close_fd, dlock_lock **out,
                       dlock__err *e);

/* ---- attempt.c -------------------------------------------------------------- */

/* What one dlock_acquire asks the servers for, the same in every attempt: the name's
 * keys, the lease, the mode, and the queue entry "<handoff ms> <limit> <channel
 * length> <channel><value>" (scripts.c), whose value (from value_at on) is "<token>
 * <host:pid>[ <label>]", what `dlock status` shows. */
typedef struct dlock__request {
    dlock__keys k;
    int64_t ttl_ms;
    int64_t handoff_ms; /* the lease a release hands the waiter, before it confirms */
    int64_t limit;      /* 0: exclusive; else a shared holder among at most limit */
    char limit_text[24];
    char ttl[24];
    char ticket[24]; /* "0" until the caller queues */
    char qttl[24];   /* DLOCK_QUEUE_TTL_MS, for the scripts */
    bool fair;
    size_t value_at; /* the value's offset in member */
    size_t member_len;
    char member[64 + sizeof((dlock_client *)0)->wake_chan + DLOCK_TOKEN_LEN +
                sizeof((dlock_client *)0)->holder + DLOCK_LABEL_MAX];
} dlock__request;

/* The highest fence a grant may carry, beyond this host's wall clock: a day. Fences are
 * the servers' TIME in microseconds plus at most one per grant, so only a server whose
 * clock is a day ahead, or one that lies, answers more; and a resource that accepted
 * such a fence would refuse every honest holder after it, for as long as the clocks
 * took to catch up. So it is no grant. (A fence too low harms nobody: the resource
 * refuses its holder.) */
#define DLOCK_FENCE_AHEAD_MAX_US INT64_C(86400000000)

/* What an attempt learned besides its outcome. */
typedef struct dlock__attempt_info {
    int permanent;                   /* nodes that failed with an error no retry can fix */
    int64_t busy_remaining_ms;       /* the longest holder lease seen in a refusal */
    bool refused[DLOCK_SERVERS_MAX]; /* the nodes that refused */
    /* A node may run the attempt later (sent, no reply): what follows it there, a queue's
     * leaving among them, must go on the same connections to reach it after. */
    bool unknown;
    /* It gave back what it was granted (or may have been): that lock may be another's
     * now, so a wake-up for it is no grant to start on (acquire.c). */
    bool gave_back;
} dlock__attempt_info;

/* The arguments of an acquire call. They outlive the formatting: the call borrows them
 * for its EVAL form, formatted only if a server answers -NOSCRIPT. */
typedef struct dlock__acquire_args {
    const char *args[13];
    size_t lens[13];
} dlock__acquire_args;

/* Fill q for one acquire call: keys, lease, and the queue entry that carries the
 * lock's value and the lease a handoff gives it before it confirms. */
int dlock__request_make(struct dlock_client *c, const char *name, size_t name_len,
                        const dlock_opts *opts, int64_t ttl_ms, int64_t limit, const char *token,
                        dlock__request *q, dlock__err *e);
/* Whether q carries a ticket: false for a plain try, and for a request never made. */
bool dlock__request_queued(const dlock__request *q);
/* From now on q's attempts carry the ticket (they queue). */
void dlock__request_set_ticket(dlock__request *q, int64_t ticket);
/* Format the acquire call, a plain try or a queued attempt as q's ticket says. */
int dlock__request_format(struct dlock_client *c, const dlock__request *q, dlock__acquire_args *a,
                          dlock__call *out, dlock__err *e);
/* An attempt, once its round (the acquire call, voted on with dlock__vote_grant) has
 * ended: DLOCK_OK with l's fence and validity set, or the attempt's error, with what it
 * learned in *info; a failed attempt gives back what it was granted. */
int dlock__attempt_end(struct dlock_client *c, dlock__round *rd, const dlock__request *q,
                       struct dlock_lock *l, dlock__attempt_info *info, dlock__err *e);
/* An attempt given up while its round was in flight (dropped): a give-back to every
 * node it was sent to, whatever they answered. */
void dlock__attempt_undo(struct dlock_client *c, dlock__round *rd, const dlock__request *q,
                         const struct dlock_lock *l);
/* Join the queue: from now on the attempts (*acq) carry the ticket. */
int dlock__queue_up(struct dlock_client *c, dlock__request *q, int64_t ticket,
                    dlock__acquire_args *a, dlock__call *acq);
/* A queued waiter's refresh on every node, a round started on rd (false: not formatted,
 * attempt instead); its end, once the replies are in: true when it should attempt now
 * (the lock is free, or too few servers answered), else the shortest lease left in
 * *busy_ms. call, and a that it borrows, live from the
 * start to the end. */
bool dlock__queue_refresh_start(struct dlock_client *c, dlock__round *rd, const dlock__request *q,
                                dlock__acquire_args *a, dlock__call *call);
bool dlock__queue_refresh_end(struct dlock_client *c, dlock__round *rd, dlock__call *call,
                              int64_t *busy_ms);

/* Between attempts, and leaving the queue. */
/* The pause before the next attempt of a caller that is not listening for wake-ups:
 * exponential backoff with jitter, never past the holder's lease (busy_ms, 0: unknown). */
int64_t dlock__backoff_us(int attempt, int64_t busy_ms);
/* Sleep that pause, never past the deadline; ended early as dlock__sleep_on says. */
int dlock__backoff(int attempt, int64_t busy_ms, int64_t deadline_us, int cancel_fd, int close_fd);
/* The rule that ends a wait on an outage, for a waiting call's attempt that returned
 * rc at now: a refusal (DLOCK_ERR_BUSY) ends an outage; any other error starts one (in
 * *since), and true means the servers stayed unavailable for connect_timeout_us in a
 * row, and the call ends: a wait is for a holder to go away, not for an outage to end. */
bool dlock__outage_over(int64_t *since, int rc, int64_t now, int64_t connect_timeout_us);
/* When a waiter retries if nothing wakes it: the holder's lease end (plus jitter), at
 * most DLOCK_QUEUE_REFRESH_MS from now, and never past deadline. */
int64_t dlock__retry_at(int64_t now, int64_t busy_ms, int64_t deadline);
/* Leave the queue, sent, not awaited: on every node (mask NULL) for a waiter that
 * gives up, passing on a lock handed to it meanwhile; on the nodes marked in mask for
 * a holder still queued on the nodes that refused it, passing nothing on. */
void dlock__leave_queue(struct dlock_client *c, dlock__connset *set, const dlock__keys *k,
                        const char *member, size_t member_len, const char *token, const bool *mask);

/* ---- lock.c, release.c -------------------------------------------------------- */

/* The message of DLOCK_ERR_LOST from a token-checked script that found another token. */
extern const char dlock__not_ours[];
/* Release l (one round), then free it, whatever the outcome. */
int dlock__lock_release(struct dlock_lock *l, dlock__err *e);
/* Whether c's releases hand a lock to a waiter of c's own (the heir) in their round:
 * always, but with strict fences and N > 1, whose fence needs a round of its own. */
bool dlock__release_has_heirs(const struct dlock_client *c);

/* ---- the backends ------------------------------------------------------------ */

struct dlock_lister;

/* The calls a backend may refuse as a whole (dlock__backend.gate). */
enum dlock__gate {
    DLOCK_GATE_FENCED_SET, /* dlock_fenced_set */
    DLOCK_GATE_PROBE,      /* dlock_probe, dlock_ping */
    DLOCK_GATE_STOCK,      /* the stock's calls */
    DLOCK_GATE_ELECT,      /* the election's calls, and dlock_observe */
    DLOCK_GATE_BREAK,      /* dlock_break */
    DLOCK_GATE_BREAK_LAST  /* dlock_break_last */
};

/* What a client's locks are kept in: its backend, chosen once by dlock_client_new from
 * the server list (c->backend) and never changed. Each public call checks its
 * arguments, then hands the work to its client's table, whose code and message it
 * returns as its own (raised there, once). Two tables: dlock__backend_redis, the
 * calls of this layer on the servers, and dlock__backend_file, local*.c's files of one
 * directory (file:///DIR). Every entry is set in both, but for the two whose comment
 * says NULL may do (hold_free, client_free). */
typedef struct dlock__backend {
    /* Take name for ttl_ms, waiting up to wait_ms: limit 0 exclusively, else as one of
     * at most limit shared holders (DLOCK_PERMITS_MAX for dlock_opts.shared, K for a
     * semaphore of K >= 2 permits). The blocking form (the call counted by
     * dlock__client_block_begin), and the one in steps (dlock_acquire_start). */
    int (*acquire)(struct dlock_client *c, const char *name, const dlock_opts *opts, int64_t ttl_ms,
                   int64_t wait_ms, int64_t limit, struct dlock_lock **out, dlock__err *e);
    int (*acquire_start)(struct dlock_client *c, const char *name, const dlock_opts *opts,
                         int64_t ttl_ms, int64_t wait_ms, int64_t limit, dlock_pending **out,
                         dlock__err *e);
    /* Release l, then free it, whatever the outcome; in steps, the handle is the
     * operation's from the call on (freed by it, or now when the start fails). */
    int (*release)(struct dlock_lock *l, dlock__err *e);
    int (*release_start)(struct dlock_lock *l, dlock_pending **out, dlock__err *e);
    /* Free l and leave its lock to its lease (dlock_lock_detach). */
    int (*detach)(struct dlock_lock *l, dlock__err *e);
    /* The calls on a handle whose magic was checked (dlock__lock_enter), its arguments
     * too: dlock_extend, dlock_check, dlock_slot_claim (an exclusive holder's; out
     * initialized by the caller). */
    int (*extend)(struct dlock_lock *l, int64_t ttl_ms, dlock__err *e);
    int (*extend_start)(struct dlock_lock *l, int64_t ttl_ms, dlock_pending **out, dlock__err *e);
    int (*check)(struct dlock_lock *l, dlock__err *e);
    int (*check_start)(struct dlock_lock *l, dlock_pending **out, dlock__err *e);
    int (*slot_claim)(struct dlock_lock *l, int64_t period_ms, dlock_slot *out, dlock__err *e);
    /* dlock_remaining_ms of a handle neither lost nor of an unknown lease. */
    int64_t (*remaining_ms)(const struct dlock_lock *l);
    /* Free what the backend keeps for l (l->hold, set), touching nothing shared: a
     * forked child's copy lets go of its own references only (dlock__lock_free). NULL
     * for a backend that keeps nothing there. */
    void (*hold_free)(struct dlock_lock *l);
    /* dlock_inspect and dlock_inspect_shared, on a checked client and name (out zeroed,
     * *n and *total 0). */
    int (*inspect)(struct dlock_client *c, const char *name, dlock_holder *out, dlock__err *e);
    int (*inspect_shared)(struct dlock_client *c, const char *name, dlock_holder *out, int max,
                          int *n, int64_t *total, dlock__err *e);
    /* dlock_inspect_start, on a checked client and name (holder zeroed, *n 0). */
    int (*inspect_start)(struct dlock_client *c, const char *name, dlock_holder *holder,
                         dlock_holder *shared, int max, int *n, dlock_pending **out, dlock__err *e);
    /* dlock_list: the records of every held name into it (it->c and it->pattern set;
     * list.c sorts them after), and whose records the ones of node are, for messages. */
    int (*list)(struct dlock_lister *it, dlock__err *e);
    const char *(*where)(const struct dlock_client *c, int node);
    /* dlock_client_nservers of a client, and the free of what the backend keeps of it
     * (dlock_client_free, after every handle is gone; NULL: nothing of its own). */
    int (*nservers)(const struct dlock_client *c);
    void (*client_free)(struct dlock_client *c);
    /* Whether the backend runs a call that only servers can answer, asked once the
     * call's arguments before it are checked: DLOCK_OK when it does (the call goes on,
     * on the servers), else the code and message of its refusal. DLOCK_ERR_AGAIN, no
     * message, for DLOCK_GATE_BREAK_LAST: no lock of the backend is ever broken, so the
     * call says "no record". */
    int (*gate)(struct dlock_client *c, enum dlock__gate g, dlock__err *e);
} dlock__backend;

/* The two backends: the servers' (client.c gathers the entries below) and the files'
 * of one directory (local.c). */
extern const dlock__backend dlock__backend_redis;
extern const dlock__backend dlock__backend_file;

/* The entries of dlock__backend_redis, each in the file of its call. */
int dlock__redis_acquire(struct dlock_client *c, const char *name, const dlock_opts *opts,
                         int64_t ttl_ms, int64_t wait_ms, int64_t limit, struct dlock_lock **out,
                         dlock__err *e);
int dlock__redis_acquire_start(struct dlock_client *c, const char *name, const dlock_opts *opts,
                               int64_t ttl_ms, int64_t wait_ms, int64_t limit, dlock_pending **out,
                               dlock__err *e);
int dlock__redis_release(struct dlock_lock *l, dlock__err *e);
int dlock__redis_release_start(struct dlock_lock *l, dlock_pending **out, dlock__err *e);
int dlock__redis_detach(struct dlock_lock *l, dlock__err *e);
int dlock__redis_extend(struct dlock_lock *l, int64_t ttl_ms, dlock__err *e);
int dlock__redis_extend_start(struct dlock_lock *l, int64_t ttl_ms, dlock_pending **out,
                              dlock__err *e);
int dlock__redis_check(struct dlock_lock *l, dlock__err *e);
int dlock__redis_check_start(struct dlock_lock *l, dlock_pending **out, dlock__err *e);
int dlock__redis_slot_claim(struct dlock_lock *l, int64_t period_ms, dlock_slot *out,
                            dlock__err *e);
int dlock__redis_inspect(struct dlock_client *c, const char *name, dlock_holder *out,
                         dlock__err *e);
int dlock__redis_inspect_shared(struct dlock_client *c, const char *name, dlock_holder *out,
                                int max, int *n, int64_t *total, dlock__err *e);
int dlock__redis_inspect_start(struct dlock_client *c, const char *name, dlock_holder *holder,
                               dlock_holder *shared, int max, int *n, dlock_pending **out,
                               dlock__err *e);
int dlock__redis_list(struct dlock_lister *it, dlock__err *e);
const char *dlock__redis_where(const struct dlock_client *c, int node);
/* What is left of l's lease on this host's clock (handle.c): rounded down, never a
 * millisecond that is not all there. The Redis entry of remaining_ms. */
int64_t dlock__lock_valid_ms(const struct dlock_lock *l);

/* ---- local.c: the file backend's client ---------------------------------------- */

/* A client for file:///DIR keeps its locks in files of DIR (docs/guide.md, "Local
 * locks"), through dlock__backend_file; local.h, which only the local files include,
 * has the rest. */
struct dlock__local;

/* True when the server list has a file: URL anywhere (it must then be the only one). */
bool dlock__local_url(const char *servers);
/* dlock_client_new for a file: URL, c's config applied: parse it, check the directory
 * (it must exist and be writable; nothing is created), set c->local. On failure e says
 * why, and the caller frees c. */
int dlock__local_client_new(struct dlock_client *c, const char *servers, dlock__err *e);

#endif /* DLOCK_INTERNAL_H */
