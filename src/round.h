/*
 * round.h: the rounds layer of src/ (internal.h's map): the client's state, its pool
 * of connection sets, and one round of a call on every node with its vote and tally.
 * The client is defined here, the lowest layer that reads it (its nodes, quorum, drift,
 * scripts and pool); the layers above keep their parts behind its opaque pointers
 * (waits, renewals, handles, a file:// directory).
 */
#ifndef DLOCK_ROUND_H
#define DLOCK_ROUND_H

#include "scripts.h"

/* ---- the client (client.c makes and frees it) ------------------------------- */

struct dlock_lock;

struct dlock_client {
    uint32_t magic;
    pid_t pid;         /* the process that created it (for messages and the holder) */
    uint64_t fork_gen; /* dlock__fork_gen() at creation: a forked child gets CLOSED */
    int n;             /* nodes */
    int quorum;
    dlock__node *nodes;
    char *prefix;
    size_t prefix_len;
    dlock__node_rules rules; /* deadlines, password, voting rule, log: the nodes' */
    double drift_factor;
    int64_t drift_min_us;
    int fence_mode;
    char retention[24]; /* fence counters' retention in ms, for the scripts */
    char wake_chan[DLOCK_PREFIX_MAX + 6 + DLOCK_TOKEN_LEN]; /* Pwake:<32 hex>: our wake-ups */
    char holder[300];                                       /* "host:pid" for the lock value */
    dlock__scripts scripts;

    struct dlock__waitsys *wait; /* blocking waits; created on first use (under mu) */
    struct dlock__watchdog *wd;  /* renewals; created on first use (under mu) */
    /* Lingering releases (linger.c): created on first use (under mu), read without it
     * by every blocking acquire, hence atomic. */
    _Atomic(struct dlock__linger *) linger;
    pthread_mutex_t mu; /* guards pool, locks and the creation of wait */
    dlock__connset *pool;
    int sets; /* connection sets in flight in nowait steps (dlock__connset_try_get) */
    /* Connection sets held by the confirmations of locks taken on their grant's message,
     * until the handles' next calls read them (confirm.c): at most DLOCK_CONFIRMS_MAX. */
    _Atomic int confirms;
    /* dlock_client_pipeline's: the connections that nowait steps share (pipe.c), and
     * what they share; NULL: none. */
    dlock__connset *pipe_set;
    dlock__pipes *pipes;
    /* Whether a nowait step can run an attempt: every server reached through an
     * address (no host name to resolve, no Sentinels or slot map to ask), and no
     * second round (strict fences with N > 1). */
    bool nowait_ok;
    struct dlock_lock *locks; /* attached handles, for dlock_client_free */
    /* What its locks are kept in, chosen once by dlock_client_new (internal.h): the
     * calls hand their work to this table. */
    const struct dlock__backend *backend;
    struct dlock__local *local; /* the file backend's directory (local.c); NULL: servers */
    /* Calls that can block, and dlock_client_free ending them (client.c). */
    pthread_mutex_t close_mu; /* guards closing and blocking */
    pthread_cond_t idle;      /* blocking fell to 0 while closing */
    bool closing;             /* dlock_client_free has begun */
    int blocking;             /* blocking calls in progress */
    int close_efd;            /* readable once closing: their sleeps end (-1: none yet;
                                 the first blocking call makes it) */
};

#define DLOCK_CLIENT_MAGIC 0x646c636bU /* "dlck" */

/* ---- pool.c ------------------------------------------------------------------ */

/* A new connection set, its connections closed, outside the pool; NULL when out of
 * memory. */
dlock__connset *dlock__connset_new(struct dlock_client *c);
/* Take a connection set from the pool (or make one); NULL when out of memory. */
dlock__connset *dlock__connset_get(struct dlock_client *c);
void dlock__connset_put(struct dlock_client *c, dlock__connset *s);
/* For a round kept in flight by nowait steps: dlock__connset_get while fewer than
 * DLOCK_NOWAIT_SETS_MAX are; NULL when that many are, or out of memory. Give it back
 * with dlock__connset_land. */
dlock__connset *dlock__connset_try_get(struct dlock_client *c);
void dlock__connset_land(struct dlock_client *c, dlock__connset *s);

/* ---- round.c ---------------------------------------------------------------- */

/* The clock-drift allowance when dlock_config leaves it zero: 1% of the lease plus
 * 2 ms, the figures Redlock's analysis uses. */
#define DLOCK_DRIFT_FACTOR_DEFAULT 0.01
#define DLOCK_DRIFT_MIN_MS_DEFAULT 2

/* Validity left after a round: ttl - elapsed - drift, in microseconds. */
int64_t dlock__validity_us(int64_t ttl_us, int64_t elapsed_us, double drift_factor,
                           int64_t drift_min_us);
/* Validity after a round of start..end for a lease of ttl_us, with c's drift. */
int64_t dlock__round_validity_us(const struct dlock_client *c, int64_t ttl_us, int64_t start_us,
                                 int64_t end_us);

/* One round: a call on every node, awaited, on a connection set from the pool. */
typedef struct dlock__round {
    dlock__connset *set;
    dlock__flight flight;
    int64_t start_us, end_us;
    bool fresh;       /* sent, and no reply looked for since */
    dlock__waker *wk; /* on the client's pipes: told as the replies come (NULL: none) */
    /* Last, so that a round made for c's nodes alone (dlock__round_new) stops after
     * the c->n requests it uses: a request is a kilobyte, and every operation in steps
     * makes a round. */
    dlock__req reqs[DLOCK_SERVERS_MAX];
} dlock__round;

/* A round on the heap for c's nodes: only reqs[0..c->n) exist, so it is never copied
 * or zeroed whole (dlock__round_reset zeroes what a round uses); free with free(). NULL
 * when out of memory. */
dlock__round *dlock__round_new(const struct dlock_client *c);

/* Zero rd (the requests of c's nodes) and take no set. */
void dlock__round_reset(const struct dlock_client *c, dlock__round *rd);
/* Zero rd and take a connection set for it. */
int dlock__round_begin(struct dlock_client *c, dlock__round *rd, dlock__err *e);
/* Send call to every node; with a vote function (given vote_arg, or rd when NULL), the
 * round ends once decided. Sets start_us. */
void dlock__round_start(struct dlock_client *c, dlock__round *rd, dlock__call *call,
                        dlock__vote_fn vote, void *vote_arg);
/* The same on the first node alone (a SKU's server): the others get no command. */
void dlock__round_start_first(dlock__round *rd, dlock__call *call);
/* Take the replies that came, waiting at most wait_us (as dlock__flight_pump); true once
 * the round has ended, with end_us set. */
bool dlock__round_pump(dlock__round *rd, int64_t wait_us);
/* nowait: take the replies that came, without waiting (true once the round has ended);
 * else pump until the round ends (true). */
bool dlock__round_wait(dlock__round *rd, bool nowait);
/* dlock__round_start, then pump until the round ends. */
void dlock__round_run(struct dlock_client *c, dlock__round *rd, dlock__call *call,
                      dlock__vote_fn vote, void *vote_arg);
/* Free the replies of the last run. */
void dlock__round_free_replies(const struct dlock_client *c, dlock__round *rd);
/* Free the replies and give the connection set back (a no-op for a zeroed rd). */
void dlock__round_end(struct dlock_client *c, dlock__round *rd);
/* Send call, not awaited, to the nodes marked in mask (NULL: all), as EVAL: nobody
 * reads the reply, so a -NOSCRIPT would go unnoticed. */
void dlock__round_send(struct dlock_client *c, dlock__connset *set, dlock__call *call,
                       const bool *mask);

/* Votes: an acquire's grant (a positive fence) from a node whose grants count (arg is
 * the round); a token-checked script's 1 (or more: a release's reply may be the fence
 * of the heir it handed the lock to). */
bool dlock__vote_grant(const dlock__req *r, int i, void *arg);
bool dlock__vote_one(const dlock__req *r, int i, void *arg);

/* What the nodes said in one round. */
typedef struct dlock__tally {
    int yes;                   /* granted / deleted / extended / holds our token */
    int no;                    /* refused by a holder / not our token */
    int failed;                /* no usable answer */
    int permanent;             /* failed with an error that retrying cannot fix */
    int last_err;              /* the error of a failed node (N = 1: the node's own) */
    int64_t busy_remaining_ms; /* largest holder PTTL seen in a refusal */
} dlock__tally;

/* Count a node that gave no usable answer (its reason in r->why). */
void dlock__tally_failure(dlock__tally *t, dlock__req *r, int err);
/* True when node r answered with a reply of `type`; an error reply or another type
 * counts as a failure, with its reason in r->why. */
bool dlock__tally_reply(dlock__tally *t, dlock__req *r, const dlock__conn *conn, const char *what,
                        int type);
/* The same for an integer reply, read into *v. */
bool dlock__tally_int(dlock__tally *t, dlock__req *r, const dlock__conn *conn, const char *what,
                      long long *v);
/* The error of a round that could not decide, with every failed node's reason. */
int dlock__tally_undecided(const struct dlock_client *c, const dlock__tally *t,
                           const dlock__req *reqs, dlock__err *e);

/* A script call's arguments, borrowed. */
typedef struct dlock__script_args {
    enum dlock__script_id id;
    int nkeys, nargs;
    const char *const *args;
    const size_t *lens;
} dlock__script_args;

/* One round of a script on every node, run to its end; the replies stay in s->rd for
 * the caller, who ends it with dlock__script_run_end (also after a failure). */
typedef struct dlock__script_round {
    dlock__round rd;
    dlock__call call;
} dlock__script_round;
int dlock__script_run(struct dlock_client *c, const dlock__script_args *sa, dlock__script_round *s,
                      dlock__err *e);
void dlock__script_run_end(struct dlock_client *c, dlock__script_round *s);

/* Run a script that answers 1 (done) or 0 (refused) on every node and decide: DLOCK_OK
 * on a quorum of 1s; no_err with no_msg when so many said 0 that no quorum of 1s is
 * possible; else the unavailability error. *start_us: when the round started. */
int dlock__round_yes_no(struct dlock_client *c, const dlock__script_args *sa, const char *what,
                        int no_err, const char *no_msg, int64_t *start_us, dlock__err *e);
/* dlock__round_yes_no's decision, once the round of such a script has ended; a yes is
 * 1 to yes_max (above 1: a release's reply may be the fence of the heir it handed the
 * lock to), and any other number a protocol error. */
int dlock__round_yes_no_outcome(const struct dlock_client *c, dlock__round *rd, const char *what,
                                int no_err, const char *no_msg, long long yes_max, dlock__err *e);

#endif /* DLOCK_ROUND_H */
