/*
 * acquire.c: an acquisition on Redis servers (the backend that dlock_acquire and its
 * kin in acquire_calls.c go to), one attempt after another until granted, refused for
 * good, or out of time.
 *
 * An attempt is one round of the ACQUIRE script (scripts.c) on every node. Granted on
 * a quorum with validity left, the lock is ours; otherwise every grant, and every
 * node whose outcome is unknown, gets a release that is sent, not awaited, so a failed
 * attempt costs no extra round trip. A caller that may wait joins the name's queue:
 * a release then hands it the lock and wakes it (wait.c), and its next attempt
 * confirms the lock it already holds. Between wake-ups it sleeps until the holder's
 * lease should be over, refreshing its place in the queue meanwhile.
 *
 * All of it is written as steps of a dlock_pending, which keeps what lives from one
 * attempt to the next: dlock_acquire sleeps between the steps on its own thread, an
 * event loop parks a pending on its descriptor and due time and runs the next step
 * on a worker (dlock_acquire_start, dlock_pending_step).
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ---- an acquisition in steps ---------------------------------------------------- */

/* Where an acquisition is between steps. */
enum phase {
    ATTEMPT,    /* attempt at the next step */
    IN_FLIGHT,  /* an attempt's round was sent (nowait): take its replies as they come */
    JOIN,       /* refused, and may wait: join the queue (a step that may block) */
    AWAIT,      /* queued: wait for a handoff, the holder's lease end, or the refresh time */
    REFRESHING, /* queued, its refresh's round sent (nowait): take its replies as they come */
    BACKOFF,    /* not listening for wake-ups: attempt again when due */
    DONE        /* finished: only dlock_pending_free is left */
};

/* One acquisition, dlock_acquire's as well as an event loop's: everything that lives
 * from one attempt to the next, so that between steps it holds no thread, and no
 * connection unless a round is in flight or an attempt's outcome is unknown. */
typedef struct acquisition {
    dlock_pending base; /* fd, due_us, done: what the caller of the steps sees */
    dlock_client *c;
    dlock_lock *l; /* ours until a step hands it out */
    dlock__request q;
    dlock__acquire_args args; /* borrowed by acq */
    dlock__call acq;
    dlock__acquire_args refresh_args; /* borrowed by refresh */
    dlock__call refresh;              /* REFRESHING: the refresh's call */
    dlock__waiter *w;                 /* listening for wake-ups, or NULL */
    dlock__attempt_info info;
    enum phase phase;
    int attempts;
    int64_t ttl_ms;
    int64_t ticket; /* the arrival time: orders fair waiters, the same on every node */
    int64_t deadline_us;
    int64_t outage_since_us;
    int64_t await_at_us;     /* AWAIT: when to refresh or attempt */
    int64_t first_grant_us;  /* AWAIT: when the first node handed us the lock, or 0 */
    int64_t made_us;         /* when it started, before its token was made */
    bool gave_back;          /* an attempt gave back a grant: no start on a message */
    dlock__confirm *confirm; /* taken on a message: its confirmation, for the handle */
    bool auto_renew;
    dlock_lost_fn on_lost;
    void *on_lost_user;
    dlock__err e; /* why the last attempt failed */
    /* The round of a step; a nowait step's attempt is kept in flight here (IN_FLIGHT)
     * until later steps have taken its replies. */
    dlock__step_round sr;
} acquisition;

static int run_step(dlock_pending *base, dlock_lock **out, bool nowait, dlock__err *e);
static void destroy(dlock_pending *base);

/* What a release by the same client needs to make p its heir (dlock__wait_heir): an
 * exclusive acquisition's request; a shared one is served by wake-ups alone. */
static const dlock__request *heir_request(const acquisition *p)
{
    return p->q.limit == 0 ? &p->q : NULL;
}

/* A waiter behind a holder of its own client, queued on no server: it looks again when
 * that holder's lease should end, and at least every refresh period (a handle freed
 * without a release tells nobody), never past its deadline. */
static void behind_own(acquisition *p, int64_t now, int64_t own_until)
{
    int64_t at = now + DLOCK_QUEUE_REFRESH_MS * 1000;
    if (own_until + 1000 < at)
        at = own_until + 1000;
    p->await_at_us = at < p->deadline_us ? at : p->deadline_us;
    p->base.due_us = p->await_at_us;
}

/* Start an acquisition that prepare() accepted: no I/O yet (dlock__backend_redis's
 * acquire_start). */
int dlock__redis_acquire_start(dlock_client *c, const char *name, const dlock_opts *opts,
                               int64_t ttl_ms, int64_t wait_ms, int64_t limit, dlock_pending **out,
                               dlock__err *e)
{
    acquisition *p = dlock__pending_new(sizeof *p, run_step, destroy);
    if (p == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    p->c = c;
    p->made_us = dlock__now_us();
    dlock__step_round_init(&p->sr, &p->base);
    p->ticket = dlock__wallclock_us();
    p->ttl_ms = ttl_ms;
    p->auto_renew = opts != NULL && opts->auto_renew;
    p->on_lost = opts ? opts->on_lost : NULL;
    p->on_lost_user = opts ? opts->on_lost_user : NULL;
    dlock__rules_note_ttl(&c->rules, ttl_ms);
    int rc = dlock__lock_new(c, name, &p->l, e);
    if (rc == DLOCK_OK && (rc = dlock__token_new(p->l->token)) != DLOCK_OK)
        dlock__err_set(e, rc, "getrandom: %s", strerror(errno));
    if (rc == DLOCK_OK) {
        p->l->shared = limit > 0;
        rc = dlock__request_make(c, name, p->l->name_len, opts, ttl_ms, limit, p->l->token, &p->q,
                                 e);
    }
    /* A client already listening for wake-ups (it waited moments ago) queues with its
     * first attempt: no try and retry when the lock is busy, as it is when a name
     * passes from hand to hand. One that holds the name itself makes no attempt at all:
     * the attempt could only be refused, and its release will queue us. Not a FAIR
     * waiter: its place in the arrival order is its queue entry, made by its first
     * attempt; waiting in the client, it would have none until its holder's release,
     * and later waiters of other clients (another dlockd) would be served first. */
    int64_t own_until = 0;
    if (rc == DLOCK_OK && wait_ms != 0 &&
        dlock__wait_join(c, p->l->token, true, heir_request(p), p->ticket, &p->w) == DLOCK_OK) {
        dlock__request_set_ticket(&p->q, p->ticket);
        if (dlock__release_has_heirs(c) && !p->q.fair)
            own_until = dlock__wait_behind_own(c, p->w, name, p->l->name_len, false);
    }
    if (rc == DLOCK_OK)
        rc = dlock__request_format(c, &p->q, &p->args, &p->acq, e);
    if (rc != DLOCK_OK) {
        /* Nothing was sent: stop listening, leave no queue. */
        if (p->w != NULL)
            dlock__wait_leave(c, p->w);
        p->w = NULL;
        p->phase = DONE;
        destroy(&p->base);
        return rc;
    }
    int64_t now = dlock__now_us();
    /* A wait longer than a century is a wait forever (and must not overflow). */
    p->deadline_us =
        wait_ms < 0 || wait_ms > INT64_C(3153600000000) ? INT64_MAX : now + wait_ms * 1000;
    p->phase = ATTEMPT;
    p->base.due_us = now;
    if (own_until > 0) {
        p->phase = AWAIT;
        p->base.fd = p->w->efd;
        behind_own(p, now, own_until);
    }
    *out = &p->base;
    return DLOCK_OK;
}

/* The end of an acquisition, granted or not: stop listening, and leave the queue. */
static void finish(acquisition *p, dlock__connset *set, int rc)
{
    if (p->w != NULL)
        dlock__wait_leave(p->c, p->w);
    p->w = NULL;
    if (dlock__request_queued(&p->q)) {
        /* Given up: leave the queue everywhere. Granted: the nodes that refused keep
         * our entry, which a release there would hand a lease nobody confirms. */
        bool any = false;
        for (int i = 0; i < p->c->n; i++)
            any |= p->info.refused[i];
        if (rc != DLOCK_OK || any)
            dlock__leave_queue(p->c, set, &p->q.k, p->q.member, p->q.member_len, p->l->token,
                               rc == DLOCK_OK ? p->info.refused : NULL);
    }
    p->phase = DONE;
}

/* A queued waiter between attempts: 1 when it is time to attempt (a release handed it
 * the lock, with N > 1 on a quorum of nodes or one per-node timeout after the first of
 * them; a wake-up of another kind, as when a subscriber connection was remade; the
 * holder's lease end; the deadline). Otherwise the next step is due at p->base.due_us
 * (0); every DLOCK_QUEUE_REFRESH_MS meanwhile, and at the lease end, it refreshes its
 * place first (-1). */
static int await_turn(acquisition *p)
{
    dlock_client *c = p->c;
    int64_t now = dlock__now_us();
    bool woken = dlock__wait_woken(p->w);
    uint32_t grants = dlock__wait_grants(c, p->w, false, NULL);
    if (grants != 0) {
        if (__builtin_popcount(grants) >= c->quorum)
            return 1;
        if (p->first_grant_us == 0)
            p->first_grant_us = now;
        int64_t enough = p->first_grant_us + c->rules.timeout_us;
        if (now >= enough || now >= p->await_at_us)
            return 1;
        p->base.due_us = enough < p->await_at_us ? enough : p->await_at_us;
        return 0;
    }
    if (woken || now >= p->deadline_us)
        return 1;
    if (now < p->base.due_us)
        return 0; /* an early call: nothing happened */
    /* Waiting behind our own client: no server knows of us, so nothing to refresh;
     * attempt once the holder is gone. */
    int64_t own_until = dlock__wait_behind_own(c, p->w, p->l->name, p->l->name_len, true);
    if (own_until != 0) {
        if (own_until < 0)
            return 1;
        behind_own(p, now, own_until);
        return 0;
    }
    /* The lease end or the refresh time: ask before attempting, which costs more. */
    return -1;
}

/* A refresh's replies, in: 1 when it is time to attempt, else 0, due at the lease end
 * or the next refresh. */
static int refreshed(acquisition *p, dlock__round *rd)
{
    dlock_client *c = p->c;
    int64_t busy_ms;
    p->phase = AWAIT;
    if (dlock__queue_refresh_end(c, rd, &p->refresh, &busy_ms))
        return 1;
    p->await_at_us = dlock__retry_at(dlock__now_us(), busy_ms, p->deadline_us);
    p->base.due_us = p->await_at_us;
    if (p->first_grant_us != 0 && p->first_grant_us + c->rules.timeout_us < p->base.due_us)
        p->base.due_us = p->first_grant_us + c->rules.timeout_us;
    return 0;
}

/* Whether a release of our own client handed us the lock with our own lease and a fence,
 * on a quorum of nodes, confirmed by its reply (scripts.c, RELEASE): then it is ours with
 * no attempt, its validity counted from the release's round as an attempt's is from its
 * own. The nodes that did not hand it to us keep our queue entry, which finish() clears
 * as it does after a grant. Otherwise what was handed is a grant like any other, which
 * the next attempt confirms. */
static bool inherit(acquisition *p)
{
    dlock_client *c = p->c;
    dlock__handoff h;
    dlock__wait_grants(c, p->w, false, &h);
    if (__builtin_popcount(h.nodes) < c->quorum)
        return false;
    int64_t validity = dlock__round_validity_us(c, p->ttl_ms * 1000, h.start_us, h.end_us);
    if (validity <= 0 || h.end_us + validity <= dlock__now_us())
        return false;
    memset(&p->info, 0, sizeof p->info);
    for (int i = 0; i < c->n; i++)
        p->info.refused[i] = !(h.nodes & 1u << i);
    p->l->fence = h.fence;
    p->l->valid_until_us = h.end_us + validity;
    return true;
}

/* Whether the releases of other clients that handed us the lock, on a quorum of nodes
 * whose grants count, let the section start on their messages alone, without the
 * confirming attempt's round trip (docs/waiting.md, "Starting on the grant"). Each
 * message carries its grant's fence; a grant is made with the handoff lease, after our
 * token was (p->made_us), so it lasts at least until made_us + handoff, unless we gave
 * it back ourselves: an acquisition whose attempt gave one back (too few nodes, too
 * late) never starts so, since a late message may name what is another's now. The
 * validity is counted from made_us, less the drift allowance; with too little of it (a
 * per-node timeout or less) the attempt confirms as before. Our own lease is asked for
 * by the confirmation (confirm.c), which run_step starts on this step's round once the
 * queue is left. A blocking step's only, on a set of its own: the confirmation keeps
 * the round's set until the handle's next call, which neither the pipes a nowait step
 * shares nor a set counted among the nowait steps' can be held for. Not
 * with strict fences and N > 1, whose fence must be raised on a quorum in a round of
 * its own. */
static bool start_on_grant(acquisition *p, dlock__round *rd)
{
    dlock_client *c = p->c;
    uint64_t fence;
    uint32_t nodes = dlock__wait_fenced(c, p->w, &fence);
    if (nodes == 0 || p->gave_back || p->q.limit != 0 || rd->set == NULL ||
        rd->set == c->pipe_set || p->sr.counted ||
        (c->n > 1 && c->fence_mode == DLOCK_FENCE_STRICT) ||
        fence > (uint64_t)(dlock__wallclock_us() + DLOCK_FENCE_AHEAD_MAX_US))
        return false;
    DLOCK_PAUSE_POINT(DLOCK_HOOK_GRANT_HEARD);
    int64_t now = dlock__now_us();
    int voters = 0;
    for (int i = 0; i < c->n; i++)
        voters += (nodes & 1u << i) && dlock__conn_votes(&rd->set->conns[i], now);
    int64_t validity = dlock__round_validity_us(c, p->q.handoff_ms * 1000, p->made_us, now);
    if (voters < c->quorum || validity <= c->rules.timeout_us ||
        (p->confirm = dlock__confirm_new(c, p->l, p->ttl_ms)) == NULL)
        return false;
    memset(&p->info, 0, sizeof p->info);
    for (int i = 0; i < c->n; i++)
        p->info.refused[i] = !(nodes & 1u << i);
    p->l->fence = fence;
    p->l->valid_until_us = now + validity;
    DLOCK_PAUSE_POINT(DLOCK_HOOK_GRANT_START);
    return true;
}

/* Join the name's queue after a refusal: listen for wake-ups first, then queue the
 * next attempt. A handoff between the refusal and the subscription would otherwise pass
 * unseen. An error when listening cannot start (the backoff still works); hot, also
 * DLOCK_ERR_BUSY when the client is not listening yet (that join waits). */
static int join(acquisition *p, bool hot)
{
    int rc = dlock__wait_join(p->c, p->l->token, hot, heir_request(p), p->ticket, &p->w);
    if (rc != DLOCK_OK)
        return rc;
    if ((rc = dlock__queue_up(p->c, &p->q, p->ticket, &p->args, &p->acq)) == DLOCK_OK)
        return DLOCK_OK;
    dlock__wait_leave(p->c, p->w);
    p->w = NULL;
    return rc;
}

/* The wait after a failed attempt (rc): queued, for a handoff or the holder's lease end;
 * else a backoff. DLOCK_ERR_AGAIN. */
static int schedule(acquisition *p, int rc)
{
    int64_t now = dlock__now_us();
    int64_t busy_ms = p->info.busy_remaining_ms;
    if (p->w != NULL && rc == DLOCK_ERR_BUSY) {
        p->phase = AWAIT;
        p->first_grant_us = 0;
        p->await_at_us = dlock__retry_at(now, busy_ms, p->deadline_us);
        p->base.due_us = p->await_at_us;
    } else {
        p->phase = BACKOFF;
        p->base.due_us = now + dlock__backoff_us(p->attempts++, busy_ms);
        if (p->base.due_us > p->deadline_us)
            p->base.due_us = p->deadline_us;
    }
    return DLOCK_ERR_AGAIN;
}

/* What follows an attempt's result rc: the end of the acquisition (rc itself: granted,
 * or failed for good), a wait (DLOCK_ERR_AGAIN), AGAIN_NOW (another attempt at once,
 * queued), or, for a nowait step that must join the queue and wait for its
 * subscription, DLOCK_ERR_WOULDBLOCK. */
#define AGAIN_NOW (-1)
static int after_attempt(acquisition *p, int rc, bool nowait)
{
    dlock_client *c = p->c;
    if (rc == DLOCK_OK || rc == DLOCK_ERR_NOMEM)
        return rc;
    int64_t now = dlock__now_us();
    /* An error that no retry can fix, on enough nodes that no quorum is possible, ends
     * the call now; so do servers that stay unreachable, even in an endless wait (the
     * CLI's exit 69 even with -w forever). */
    if (dlock__outage_over(&p->outage_since_us, rc, now, c->rules.connect_timeout_us) ||
        (rc != DLOCK_ERR_BUSY && p->info.permanent > c->n - c->quorum) || now >= p->deadline_us)
        return rc;
    if (rc == DLOCK_ERR_BUSY && p->w == NULL) {
        int joined = join(p, nowait);
        if (joined == DLOCK_OK)
            return AGAIN_NOW;
        if (nowait && joined == DLOCK_ERR_BUSY) {
            p->phase = JOIN;
            return DLOCK_ERR_WOULDBLOCK;
        }
    }
    return schedule(p, rc);
}

/* One step: attempts until granted, refused for good, or time to wait (DLOCK_ERR_AGAIN,
 * with p->phase and p->base.due_us saying for what), or, nowait, a step that would block
 * (DLOCK_ERR_WOULDBLOCK). Any other result ends the acquisition, the error's message in
 * p->e. A nowait attempt sends its round and leaves it in flight until the replies are
 * in; a blocking step that finds one in flight waits for them. */
static int step(acquisition *p, dlock__round *rd, bool nowait)
{
    dlock_client *c = p->c;
    int rc;
    switch (p->phase) {
    case IN_FLIGHT:
        if (!dlock__round_wait(rd, nowait))
            return DLOCK_ERR_AGAIN;
        p->phase = ATTEMPT;
        rc = dlock__attempt_end(c, rd, &p->q, p->l, &p->info, &p->e);
        p->gave_back |= p->info.gave_back;
        if ((rc = after_attempt(p, rc, nowait)) != AGAIN_NOW)
            return rc;
        break;
    case JOIN: /* never nowait: run_step hands it back */
        p->phase = ATTEMPT;
        if (join(p, false) != DLOCK_OK)
            return schedule(p, DLOCK_ERR_BUSY);
        break;
    case AWAIT:
        if (inherit(p) || (!nowait && start_on_grant(p, rd)))
            return DLOCK_OK;
        if ((rc = await_turn(p)) == 0)
            return DLOCK_ERR_AGAIN;
        /* The refresh, a round of its own: nowait, its replies come at later steps. */
        if (rc < 0 && dlock__queue_refresh_start(c, rd, &p->q, &p->refresh_args, &p->refresh)) {
            p->phase = REFRESHING;
            if (!dlock__round_wait(rd, nowait) || !refreshed(p, rd))
                return DLOCK_ERR_AGAIN;
        }
        break;
    case REFRESHING:
        if (!dlock__round_wait(rd, nowait) || !refreshed(p, rd))
            return DLOCK_ERR_AGAIN;
        break;
    case BACKOFF:
        if (dlock__now_us() < p->base.due_us)
            return DLOCK_ERR_AGAIN;
        break;
    default:
        break;
    }
    for (;;) {
        if (p->w != NULL)
            dlock__wait_grants(c, p->w, true, NULL); /* this attempt answers those */
        memset(&p->info, 0, sizeof p->info);
        /* nowait: the replies are taken at once if they are in already, else by the
         * next steps. */
        dlock__round_start(c, rd, &p->acq, dlock__vote_grant, NULL);
        if (!dlock__round_wait(rd, nowait)) {
            p->phase = IN_FLIGHT;
            return DLOCK_ERR_AGAIN;
        }
        rc = dlock__attempt_end(c, rd, &p->q, p->l, &p->info, &p->e);
        p->gave_back |= p->info.gave_back;
        if ((rc = after_attempt(p, rc, nowait)) != AGAIN_NOW)
            return rc;
    }
}

/* A step, and on its result the end of the acquisition: the lock handed out in *out
 * (renewed from now on if asked), or the error in *e. A nowait step hands back the
 * steps that would block before it does anything: the joining of a queue, and any
 * attempt on a client whose servers must be looked up first, or with no connection
 * set left for a round in flight. */
static int run_step(dlock_pending *base, dlock_lock **out, bool nowait, dlock__err *e)
{
    acquisition *p = (acquisition *)base;
    dlock_client *c = p->c;
    if (nowait && (!c->nowait_ok || p->phase == JOIN))
        return dlock__pending_would_block(e);
    int rc = dlock__step_round_begin(c, &p->sr, nowait, e);
    if (rc == DLOCK_ERR_WOULDBLOCK)
        return rc;
    dlock__round *rd = p->sr.rd;
    dlock__connset *set = rc == DLOCK_OK ? rd->set : NULL;
    if (rc == DLOCK_OK)
        rc = step(p, rd, nowait);
    p->base.in_flight = p->phase == IN_FLIGHT;
    if (rc == DLOCK_ERR_AGAIN || rc == DLOCK_ERR_WOULDBLOCK) {
        if (p->phase == IN_FLIGHT || p->phase == REFRESHING) {
            p->base.fd = dlock__step_round_fd(&p->sr, &p->base.due_us);
        } else {
            /* An attempt a server may still run keeps its connections: the next
             * attempt, or the leaving of the queue, must reach that server after it. */
            if (!p->info.unknown)
                dlock__step_round_end(c, &p->sr);
            else
                dlock__round_free_replies(c, rd);
            p->base.fd = p->phase == AWAIT ? p->w->efd : -1;
        }
        p->base.wake_c = p->phase == AWAIT ? c : NULL;
        if (rc == DLOCK_ERR_WOULDBLOCK)
            return dlock__pending_would_block(e);
        return dlock__pending_again(e);
    }
    if (rc != DLOCK_OK && set != NULL)
        memcpy(e, &p->e, sizeof *e); /* the attempt's reason */
    /* Held before the waiter leaves: a waiter of the client that comes meanwhile waits
     * behind it (dlock__wait_behind_own) rather than attempt. */
    if (rc == DLOCK_OK)
        dlock__lock_attach(p->l);
    finish(p, set, rc);
    if (p->confirm != NULL) {
        /* After the queue's leaving, sent not awaited on the same set: a connection
         * discards the replies it does not await before it takes one, so those
         * commands must go first. */
        dlock__confirm_start(c, p->confirm, p->sr.rd);
        atomic_store(&p->l->confirm, p->confirm);
        p->confirm = NULL;
        p->sr.rd = NULL;
    }
    dlock__step_round_end(c, &p->sr);
    if (rc != DLOCK_OK)
        return rc;
    dlock_lock *l = p->l;
    p->l = NULL;
    if (p->auto_renew &&
        (rc = dlock__watchdog_add(c, l, p->ttl_ms, p->on_lost, p->on_lost_user, e)) != DLOCK_OK) {
        /* Without renewal the caller would hold a lock that silently expires. */
        dlock__err ignored;
        dlock__lock_release(l, &ignored);
        return rc;
    }
    DLOCK_PAUSE_POINT(DLOCK_HOOK_ACQUIRED);
    *out = l;
    return DLOCK_OK;
}

/* dlock__backend_redis's acquire: the steps, with sleeps between them. */
int dlock__redis_acquire(dlock_client *c, const char *name, const dlock_opts *opts, int64_t ttl_ms,
                         int64_t wait_ms, int64_t limit, dlock_lock **out, dlock__err *e)
{
    dlock_pending *p;
    /* A lock of ours that lingers for the name is taken back, or let go first. */
    int rc = dlock__linger_take(c, name, opts, ttl_ms, limit, out, e);
    if (rc != DLOCK_ERR_AGAIN)
        return rc;
    rc = dlock__redis_acquire_start(c, name, opts, ttl_ms, wait_ms, limit, &p, e);
    if (rc == DLOCK_OK) {
        rc = dlock__pending_run(p, opts ? opts->cancel_fd : 0, c->close_efd, out, e);
        destroy(p);
    }
    if (rc == DLOCK_OK && opts != NULL && opts->linger_ms > 0) {
        (*out)->linger_us = opts->linger_ms * 1000;
        (*out)->held_since_us = dlock__now_us();
    }
    return rc;
}

/* Free an acquisition; one not finished gives up first: it leaves the queue, sent,
 * not awaited. */
static void destroy(dlock_pending *base)
{
    acquisition *p = (acquisition *)base;
    if (p->phase != DONE) {
        /* Giving up writes what it sends on a blocking step's round (the one in flight,
         * if any), or on the pipes behind a piped round, its replies in or not. Without a
         * set, finish() sends nothing. */
        dlock__err ignored;
        bool piped = p->sr.rd != NULL && p->sr.rd->set != NULL && p->sr.rd->set == p->c->pipe_set;
        bool begun = piped || dlock__step_round_begin(p->c, &p->sr, false, &ignored) == DLOCK_OK;
        if (begun && (p->phase == IN_FLIGHT || p->phase == REFRESHING))
            dlock__flight_drop(&p->sr.rd->flight);
        if (begun && p->phase == IN_FLIGHT) /* what it granted or may grant, given back */
            dlock__attempt_undo(p->c, p->sr.rd, &p->q, p->l);
        finish(p, begun ? p->sr.rd->set : NULL, DLOCK_ERR_CANCELED);
    }
    dlock__step_round_free(p->c, &p->sr);
    dlock__confirm_free(p->c, p->confirm);
    if (p->l != NULL)
        dlock__lock_free(p->l);
    dlock__call_free(&p->acq);
    dlock__call_free(&p->refresh);
    free(p->q.k.buf);
    free(p);
}
