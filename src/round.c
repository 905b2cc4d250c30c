/*
 * round.c: one round of one script call to all N nodes, and how its answers vote.
 *
 * One code path for every N: a round sends one call to every node at once (fanout.c);
 * the outcome counts yes votes against the quorum N/2+1, and a grant only counts as a
 * lock while validity = ttl - elapsed - drift is positive. With N = 1 the quorum is 1
 * and the same arithmetic applies. Acquire, extend, release, check, inspect, the
 * resource side's fenced write and the renewal batches all run on it.
 *
 * How a round that could not decide becomes an error code: for N = 1, the node's own
 * error (DLOCK_ERR_IO, _TIMEOUT, _AUTH, ...); for N > 1, DLOCK_ERR_NOQUORUM, with every
 * node's reason in the message. A refusal by holders on enough nodes that no quorum
 * was possible is the caller's to name (BUSY for an acquire, LOST for a token check).
 */
#include "round.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

int64_t dlock__validity_us(int64_t ttl_us, int64_t elapsed_us, double drift_factor,
                           int64_t drift_min_us)
{
    /* Drift is rounded up, so validity is never overstated by a fraction. */
    double drift = (double)ttl_us * drift_factor;
    int64_t drift_us = (int64_t)drift;
    if ((double)drift_us < drift)
        drift_us++;
    return ttl_us - elapsed_us - drift_us - drift_min_us;
}

int64_t dlock__round_validity_us(const dlock_client *c, int64_t ttl_us, int64_t start_us,
                                 int64_t end_us)
{
    return dlock__validity_us(ttl_us, end_us - start_us, c->drift_factor, c->drift_min_us);
}

int64_t dlock_lease_validity_ms(const dlock_config *cfg, int64_t ttl_ms)
{
    double factor = cfg && cfg->drift_factor > 0 ? cfg->drift_factor : DLOCK_DRIFT_FACTOR_DEFAULT;
    int64_t min_ms = cfg && cfg->drift_min_ms > 0 ? cfg->drift_min_ms : DLOCK_DRIFT_MIN_MS_DEFAULT;
    int64_t v = dlock__validity_us(ttl_ms * 1000, 0, factor, min_ms * 1000);
    /* Round down: never claim a millisecond that is not all there. */
    return v >= 0 ? v / 1000 : -((-v + 999) / 1000);
}

/* ---- running a round ---------------------------------------------------------- */

dlock__round *dlock__round_new(const dlock_client *c)
{
    dlock__round *rd =
        dlock__malloc(offsetof(dlock__round, reqs) + (size_t)c->n * sizeof rd->reqs[0]);
    if (rd != NULL)
        rd->set = NULL;
    return rd;
}

void dlock__round_reset(const dlock_client *c, dlock__round *rd)
{
    /* The requests of c's nodes only: the rest of the array is never read, and zeroing
     * all DLOCK_SERVERS_MAX of them would cost a call more than its bookkeeping. */
    memset(rd->reqs, 0, (size_t)c->n * sizeof rd->reqs[0]);
    memset(&rd->flight, 0, sizeof rd->flight);
    rd->set = NULL;
    rd->start_us = rd->end_us = 0;
    rd->fresh = false;
    rd->wk = NULL;
}

int dlock__round_begin(dlock_client *c, dlock__round *rd, dlock__err *e)
{
    dlock__round_reset(c, rd);
    if ((rd->set = dlock__connset_get(c)) == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    return DLOCK_OK;
}

void dlock__round_end(dlock_client *c, dlock__round *rd)
{
    dlock__round_free_replies(c, rd);
    if (rd->set != NULL)
        dlock__connset_put(c, rd->set);
    rd->set = NULL;
}

/* The call sent to the first n nodes, its flight deciding on need of them. */
static void start(dlock__round *rd, dlock__call *call, int n, dlock__vote_fn vote, void *vote_arg,
                  int need)
{
    dlock__call_reqs(call, rd->reqs, n, true);
    rd->start_us = dlock__now_us();
    rd->fresh = true;
    dlock__flight_start(&rd->flight, rd->set->conns, rd->reqs, n, vote, vote_arg ? vote_arg : rd,
                        need, rd->wk);
}

void dlock__round_start(dlock_client *c, dlock__round *rd, dlock__call *call, dlock__vote_fn vote,
                        void *vote_arg)
{
    start(rd, call, c->n, vote, vote_arg, dlock__quorum(c->n));
}

void dlock__round_start_first(dlock__round *rd, dlock__call *call)
{
    start(rd, call, 1, NULL, NULL, 1);
}

bool dlock__round_pump(dlock__round *rd, int64_t wait_us)
{
    if (!dlock__flight_pump(&rd->flight, wait_us))
        return false;
    rd->end_us = dlock__now_us();
    return true;
}

bool dlock__round_wait(dlock__round *rd, bool nowait)
{
    if (nowait && rd->fresh) {
        /* Just sent: no reply can be in yet, so no socket is worth a look. The caller
         * polls the round's descriptor, and its next step reads. */
        rd->fresh = false;
        if (!dlock__flight_settled(&rd->flight))
            return false;
        rd->end_us = dlock__now_us();
        return true;
    }
    rd->fresh = false;
    if (nowait)
        return dlock__round_pump(rd, 0);
    while (!dlock__round_pump(rd, -1))
        ;
    return true;
}

void dlock__round_run(dlock_client *c, dlock__round *rd, dlock__call *call, dlock__vote_fn vote,
                      void *vote_arg)
{
    dlock__round_start(c, rd, call, vote, vote_arg);
    dlock__round_wait(rd, false);
}

void dlock__round_free_replies(const dlock_client *c, dlock__round *rd)
{
    for (int i = 0; i < c->n; i++) {
        freeReplyObject(rd->reqs[i].reply);
        rd->reqs[i].reply = NULL;
    }
}

void dlock__round_send(dlock_client *c, dlock__connset *set, dlock__call *call, const bool *mask)
{
    /* Nobody reads the reply, so a -NOSCRIPT would go unnoticed; a node that just
     * restarted has no scripts cached. So the script itself goes (EVAL), not its SHA. */
    dlock__req reqs[DLOCK_SERVERS_MAX];
    bool any = false;
    if (dlock__call_eval(call) != DLOCK_OK)
        return; /* out of memory: leases expire, queue entries too */
    for (int i = 0; i < c->n; i++) {
        memset(&reqs[i], 0, sizeof reqs[i]);
        if (mask == NULL || mask[i]) {
            reqs[i].cmd = call->eval;
            reqs[i].cmdlen = (size_t)call->eval_len;
            dlock__call_slot(call, &reqs[i]);
            any = true;
        }
    }
    /* A piped set's sends are always posted: its pump writes them. */
    if (any && (set->post || set->conns[0].pipe != NULL))
        dlock__fanout_post(set->conns, reqs, c->n);
    else if (any)
        dlock__fanout(set->conns, reqs, c->n);
}

/* ---- votes ------------------------------------------------------------------- */

bool dlock__vote_grant(const dlock__req *r, int i, void *arg)
{
    const dlock__round *rd = arg;
    return r->reply->type == REDIS_REPLY_INTEGER && r->reply->integer > 0 &&
           dlock__conn_votes(&rd->set->conns[i], dlock__now_us());
}

bool dlock__vote_one(const dlock__req *r, int i, void *arg)
{
    (void)i;
    (void)arg;
    return r->reply->type == REDIS_REPLY_INTEGER && r->reply->integer >= 1;
}

/* ---- tallies ------------------------------------------------------------------ */

static bool is_permanent(int err)
{
    return err == DLOCK_ERR_AUTH || err == DLOCK_ERR_PROTOCOL || err == DLOCK_ERR_INVALID ||
           err == DLOCK_ERR_NOMEM;
}

void dlock__tally_failure(dlock__tally *t, dlock__req *r, int err)
{
    r->err = err;
    t->failed++;
    t->last_err = err;
    if (is_permanent(err))
        t->permanent++;
}

bool dlock__tally_reply(dlock__tally *t, dlock__req *r, const dlock__conn *conn, const char *what,
                        int type)
{
    if (r->err != DLOCK_OK) {
        dlock__tally_failure(t, r, r->err);
        return false;
    }
    const redisReply *rep = r->reply;
    if (rep->type == type)
        return true;
    if (rep->type == REDIS_REPLY_ERROR) {
        dlock__err_set(&r->why, 0, "%s: %s: -%.100s", conn->node->addr.display, what, rep->str);
        dlock__tally_failure(t, r, dlock__server_error_code(rep->str, rep->len));
    } else {
        dlock__err_set(&r->why, 0, "%s: %s: unexpected reply type %d", conn->node->addr.display,
                       what, rep->type);
        dlock__tally_failure(t, r, DLOCK_ERR_PROTOCOL);
    }
    return false;
}

bool dlock__tally_int(dlock__tally *t, dlock__req *r, const dlock__conn *conn, const char *what,
                      long long *v)
{
    if (!dlock__tally_reply(t, r, conn, what, REDIS_REPLY_INTEGER))
        return false;
    *v = r->reply->integer;
    return true;
}

int dlock__tally_undecided(const dlock_client *c, const dlock__tally *t, const dlock__req *reqs,
                           dlock__err *e)
{
    if (c->n == 1)
        return dlock__err_set(e, t->last_err, "%s", reqs[0].why.msg);
    dlock__err_set(e, DLOCK_ERR_NOQUORUM, "%d of %d servers answered, %d needed", c->n - t->failed,
                   c->n, c->quorum);
    for (int i = 0; i < c->n; i++)
        if (reqs[i].err != DLOCK_OK)
            dlock__err_append(e, "%s", reqs[i].why.msg);
    return DLOCK_ERR_NOQUORUM;
}

int dlock__script_run(dlock_client *c, const dlock__script_args *sa, dlock__script_round *s,
                      dlock__err *e)
{
    memset(s, 0, sizeof *s);
    int rc = dlock__call_format(&c->scripts, sa->id, sa->nkeys, sa->nargs, sa->args, sa->lens,
                                &s->call, e);
    if (rc == DLOCK_OK && (rc = dlock__round_begin(c, &s->rd, e)) == DLOCK_OK)
        dlock__round_run(c, &s->rd, &s->call, NULL, NULL);
    return rc;
}

void dlock__script_run_end(dlock_client *c, dlock__script_round *s)
{
    dlock__round_end(c, &s->rd);
    dlock__call_free(&s->call);
}

int dlock__round_yes_no(dlock_client *c, const dlock__script_args *sa, const char *what, int no_err,
                        const char *no_msg, int64_t *start_us, dlock__err *e)
{
    dlock__call call;
    dlock__round rd;
    int rc =
        dlock__call_format(&c->scripts, sa->id, sa->nkeys, sa->nargs, sa->args, sa->lens, &call, e);
    if (rc != DLOCK_OK)
        return rc;
    if ((rc = dlock__round_begin(c, &rd, e)) != DLOCK_OK) {
        dlock__call_free(&call);
        return rc;
    }
    dlock__round_run(c, &rd, &call, dlock__vote_one, NULL);
    *start_us = rd.start_us;
    rc = dlock__round_yes_no_outcome(c, &rd, what, no_err, no_msg, 1, e);
    dlock__round_end(c, &rd);
    dlock__call_free(&call);
    return rc;
}

int dlock__round_yes_no_outcome(const dlock_client *c, dlock__round *rd, const char *what,
                                int no_err, const char *no_msg, long long yes_max, dlock__err *e)
{
    dlock__tally t = {0};
    for (int i = 0; i < c->n; i++) {
        long long v;
        if (!dlock__tally_int(&t, &rd->reqs[i], &rd->set->conns[i], what, &v))
            continue;
        if (v >= 1 && v <= yes_max) {
            t.yes++;
        } else if (v == 0) {
            t.no++;
        } else {
            dlock__err_set(&rd->reqs[i].why, 0, "%s: %s: unexpected reply %lld",
                           rd->set->conns[i].node->addr.display, what, v);
            dlock__tally_failure(&t, &rd->reqs[i], DLOCK_ERR_PROTOCOL);
        }
    }
    if (t.yes >= c->quorum)
        return DLOCK_OK;
    if (t.no > c->n - c->quorum)
        return dlock__err_set(e, no_err, "%s: %s", what, no_msg);
    return dlock__tally_undecided(c, &t, rd->reqs, e);
}
