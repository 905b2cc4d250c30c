/*
 * fanout.c: one round = one command to each of N nodes, sent at once, replies
 * gathered by one ppoll() loop until each node's deadline.
 *
 * Redlock's safety argument needs the time from the first send to the last reply to
 * be small against the lease, and its availability needs a dead node to cost one
 * timeout, not N. So nodes are never visited one after the other: every command is
 * queued and sent first, then the loop waits on all sockets together. A single node
 * is the case N = 1 of the same loop.
 *
 * A node that misses its deadline counts as failed for the round. Its connection is
 * kept only when the command went out whole on an established connection: the late
 * reply is then counted in conn->skip and discarded by the next round, which is what
 * keeps a slow node's answer from being read as the answer to a later command.
 * Anything less certain (a half-sent command, a connect or handshake in progress)
 * closes the connection.
 */
#include "transport.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Abandoned replies a connection may owe before it is better to reconnect. Closing
 * a connection to a paused server loses nothing it was sent, but what is sent next
 * goes on a new connection, which the server may serve first when it resumes (a
 * clean-up release before the acquire it undoes): so the bound is generous. */
#define SKIP_MAX 16

/* Tell the node's topology that one of its servers failed or timed out (a cluster
 * reads its map again: a failover may have moved the slots). */
static void suspect(const dlock__conn *c)
{
    const dlock__topology *t = c->node->topo;
    if (t->suspect != NULL)
        t->suspect(c->node);
}

void dlock__req_fail(dlock__conn *c, dlock__req *r, int err)
{
    r->err = err;
    r->done = true;
    dlock__conn_close(c);
    suspect(c);
}

/* Send the request's command (or its EVAL retry) on c, after ASKING for a cluster's
 * slot in migration (its reply is discarded as an abandoned command's). */
static int send_cmd(dlock__conn *c, dlock__req *r, const char *cmd, size_t len)
{
    static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
    int rc = DLOCK_OK;
    if (r->asking && (rc = dlock__conn_queue(c, asking, sizeof asking - 1)) == DLOCK_OK)
        c->skip++;
    if (rc == DLOCK_OK)
        rc = dlock__conn_queue(c, cmd, len);
    if (rc != DLOCK_OK) {
        dlock__err_set(&r->why, 0, "%s: out of memory", c->node->addr.display);
        return rc;
    }
    if (c->state == DLOCK_CONN_READY)
        rc = dlock__conn_flush(c, &r->why);
    return rc;
}

/* Take the late replies c owes until it owes fewer than SKIP_MAX, waiting for them
 * until deadline_us; false when they do not come (or the stream is out of step). A
 * burst of commands sent without awaiting their replies (the leaves of a hundred
 * waiters given up at once) piles them up faster than the server answers; closing the
 * connection then would reset it, and the server drops what it had received and not
 * yet run, the leaves among it: a waiter would stay counted until its entry expired. */
static bool drain_owed(dlock__conn *c, int64_t deadline_us)
{
    dlock__err scratch; /* a discarded reply's reason: nobody reads it */
    while (c->skip >= SKIP_MAX) {
        int64_t left = deadline_us - dlock__now_us();
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int n = poll(&p, 1, (int)((left + 999) / 1000));
        if (n < 0 && errno != EINTR)
            return false;
        if (n <= 0)
            continue;
        redisReply *extra = NULL;
        if (dlock__conn_read(c, &scratch) != DLOCK_OK ||
            dlock__conn_next_reply(c, &extra, &scratch) != DLOCK_OK || extra != NULL) {
            freeReplyObject(extra); /* a reply nobody owed: out of step */
            return false;
        }
    }
    return true;
}

/* Send r on c, now or once c's handshake is done: the start of node i's part of the
 * round, and its restart after the topology pointed c elsewhere (a cluster's
 * redirection). */
static void start(dlock__conn *c, dlock__req *r, dlock__waker *wk)
{
    if (c->pipe != NULL) {
        dlock__pipe_send(c, r, wk);
        return;
    }
    if (dlock__conn_stale(c))
        dlock__conn_close(c);
    if (c->state == DLOCK_CONN_CLOSED) {
        int rc = dlock__conn_open(c, &r->why);
        if (rc != DLOCK_OK) {
            dlock__req_fail(c, r, rc);
            return;
        }
    }
    r->held = false;
    if (!r->await) {
        /* Sent, not awaited (the clean-up release of a failed attempt, a waiter
         * leaving its queue): the round waits only until the bytes are written, at
         * most the per-node timeout, and the reply is discarded by a later round.
         * On a connection still in its handshake the command is pipelined behind it:
         * these commands are token-checked, so even run in the wrong database (a
         * refused SELECT) or refused with the handshake, they do no harm, and the
         * server may have run the command we are cleaning up after. */
        if (c->skip >= 2 * SKIP_MAX &&
            (c->state != DLOCK_CONN_READY || !drain_owed(c, r->deadline_us))) {
            dlock__conn_close(c);
            r->done = true;
            return;
        }
        int rc = send_cmd(c, r, r->cmd, r->cmdlen);
        if (rc != DLOCK_OK) {
            dlock__req_fail(c, r, rc);
            return;
        }
        c->skip++;
        r->done = c->state == DLOCK_CONN_READY && c->outpos == c->outlen;
        return;
    }
    if (c->handshake > 0) {
        /* The command waits for the handshake to succeed: pipelined behind a SELECT
         * or an AUTH that fails, it would run in the wrong database or as the wrong
         * user. dlock__req_step() sends it when the last handshake reply is in. A connection
         * still being made may take until its connect deadline. */
        r->held = true;
        if (c->connect_deadline_us > r->deadline_us)
            r->deadline_us = c->connect_deadline_us;
        return;
    }
    int rc = send_cmd(c, r, r->cmd, r->cmdlen);
    if (rc != DLOCK_OK)
        dlock__req_fail(c, r, rc);
}

static void begin(dlock__conn *c, dlock__req *r, int64_t start_us, dlock__waker *wk)
{
    r->reply = NULL;
    r->err = DLOCK_OK;
    r->why.msg[0] = '\0';
    r->retried = false;
    r->done = false;
    r->held = false; /* set again by start() if the command waits for a handshake */
    r->asking = false;
    r->redirects = 0;
    r->start_us = start_us;
    r->deadline_us = start_us + c->node->rules->timeout_us;
    /* The node's topology points c at the server that serves r (a cluster's slot's
     * master) before anything is sent. */
    const dlock__topology *t = c->node->topo;
    int rc;
    if (t->route != NULL && (rc = t->route(c, r, &r->why)) != DLOCK_OK) {
        dlock__req_fail(c, r, rc);
        return;
    }
    start(c, r, wk);
}

/* An awaited command given up whose reply is still to come: when it went out whole on
 * an established connection (with room for one more owed reply), the connection is
 * kept, the late reply counted in c->skip for a later round to discard (and in
 * c->risky, for a command that must not run late); false when the connection cannot be
 * kept so. */
static bool owe_reply(dlock__conn *c, const dlock__req *r)
{
    if (c->state != DLOCK_CONN_READY || c->handshake != 0 || c->outpos != c->outlen ||
        c->skip >= SKIP_MAX)
        return false;
    c->skip++;
    if (!r->harmless_late)
        c->risky = c->skip;
    return true;
}

/* The node missed its deadline. */
void dlock__req_expire(dlock__conn *c, dlock__req *r)
{
    if (c->pipe != NULL) {
        dlock__pipe_expire(c, r);
        return;
    }
    const char *what = c->state == DLOCK_CONN_CONNECTING
                           ? (c->tls_handshaking ? "TLS handshake" : "connect")
                       : c->handshake > 0 ? "handshake reply"
                                          : "reply";
    /* A server without TLS on that port waits for a command's end that a TLS hello
     * never brings: it looks paused, and the message says both. A command that went out
     * may have run although its reply never came: the caller cannot tell, and must not
     * take the failure for a "no". */
    bool sent = c->state != DLOCK_CONN_CONNECTING && c->handshake == 0 && !r->held &&
                c->outpos == c->outlen;
    dlock__err_set(&r->why, 0, "%s: no %s within %lld ms%s%s", c->node->addr.display, what,
                   (long long)((r->deadline_us - r->start_us) / 1000),
                   c->tls_handshaking ? " (paused, or not a TLS port?)" : "",
                   sent ? " (outcome unknown: the command may have been applied)" : "");
    r->err = DLOCK_ERR_TIMEOUT;
    r->done = true;
    if (r->await)
        c->lagging = true;
    suspect(c);
    if (!r->await) {
        dlock__conn_close(c); /* not written in time: the stream may hold half of it */
    } else if (r->held) {
        /* Nothing of ours went out; the connection may go on until its deadline. */
        if (dlock__now_us() >= c->connect_deadline_us)
            dlock__conn_close(c);
    } else if (!owe_reply(c, r)) {
        dlock__conn_close(c);
    }
}

/* Act on poll's report for node i (fanout_pump.c's wait calls it). */
void dlock__req_step(dlock__conn *c, dlock__req *r, short revents)
{
    int rc;
    if (c->state == DLOCK_CONN_CONNECTING) {
        /* The TCP connect reports as writable; a TLS handshake step waits for what
         * it asked for. */
        short want = c->tls_handshaking ? c->read_ev : POLLOUT;
        if (!(revents & (want | POLLERR | POLLHUP)))
            return;
        if ((rc = dlock__conn_on_connect(c, &r->why)) != DLOCK_OK) {
            dlock__req_fail(c, r, rc);
            return;
        }
        if (c->state != DLOCK_CONN_READY)
            return; /* trying the host's next address, or in the TLS handshake */
        revents |= c->flush_ev;
    }
    if ((revents & c->flush_ev) && c->outpos < c->outlen &&
        (rc = dlock__conn_flush(c, &r->why)) != DLOCK_OK) {
        dlock__req_fail(c, r, rc);
        return;
    }
    if (!r->await) {
        r->done = c->outpos == c->outlen; /* written: nothing to wait for */
        return;
    }
    if (!(revents & (c->read_ev | POLLERR | POLLHUP)))
        return;
    DLOCK_PAUSE_POINT(DLOCK_HOOK_BEFORE_READ);
    if ((rc = dlock__conn_read(c, &r->why)) != DLOCK_OK) {
        dlock__req_fail(c, r, rc);
        return;
    }
    for (;;) {
        redisReply *reply;
        rc = dlock__conn_next_reply(c, &reply, &r->why);
        if (rc != DLOCK_OK) {
            dlock__req_fail(c, r, rc);
            return;
        }
        if (r->held && c->handshake == 0) {
            r->held = false;
            if ((rc = send_cmd(c, r, r->cmd, r->cmdlen)) != DLOCK_OK) {
                dlock__req_fail(c, r, rc);
                return;
            }
        }
        if (reply == NULL)
            return;
        const char *cmd = NULL;
        size_t len = 0;
        if ((rc = dlock__req_resend(c, r, &reply, &cmd, &len)) != DLOCK_OK) {
            dlock__req_fail(c, r, rc);
            return;
        }
        if (cmd != NULL) {
            if ((rc = send_cmd(c, r, cmd, len)) != DLOCK_OK) {
                dlock__req_fail(c, r, rc);
                return;
            }
            continue;
        }
        /* An error reply may be the topology's to act on: a cluster's slot that moved,
         * or is moving, sends the request where the reply says, on that master's
         * connection, within this round's deadline; a Sentinel URL's demoted master
         * (-READONLY) is the reply, and its connection is made anew before the next
         * round. */
        const dlock__topology *t = c->node->topo;
        bool resend = false;
        if (t->on_error != NULL && reply->type == REDIS_REPLY_ERROR &&
            ((rc = t->on_error(c, r, reply, &resend)) != DLOCK_OK || resend)) {
            freeReplyObject(reply);
            if (rc != DLOCK_OK) {
                dlock__req_fail(c, r, rc);
                return;
            }
            r->retried = false;
            start(c, r, NULL);
            return;
        }
        r->reply = reply;
        r->done = true;
        return;
    }
}

/* Stop waiting for node i: the round was decided without it.
 *
 * A command still held behind its connect or handshake was never sent, and the
 * connection is kept: its handshake goes on in later rounds (until its own connect
 * deadline), so a node that is merely slower to connect than the others take to
 * answer is not abandoned for good.
 *
 * A command sent whole to a lagging node is left to the server: its reply is counted
 * in conn->skip and discarded by a later round, exactly as when a node misses its
 * deadline, and a lost attempt's clean-up follows it on the same connection. Waiting
 * for it would gain nothing (the outcome is known) and cost much: a won round would
 * spend its lease's validity, and a lost attempt would hold its partial grants on the
 * other nodes for the per-node timeout, so that contenders meeting them split their
 * votes again, round after round (a livelock seen with one or two of five servers
 * paused and four contenders). A half-written command is still waited for, until
 * written or its deadline passes. */
static void abandon(dlock__conn *c, dlock__req *r)
{
    if (c->pipe != NULL) {
        dlock__pipe_abandon(c, r);
        return;
    }
    if (r->held) {
        dlock__err_set(&r->why, 0, "%s: still connecting when a quorum had decided",
                       c->node->addr.display);
    } else if (owe_reply(c, r)) {
        dlock__err_set(&r->why, 0, "%s: no reply yet when a quorum had decided",
                       c->node->addr.display);
    } else {
        return;
    }
    r->err = DLOCK_ERR_TIMEOUT;
    r->done = true;
}

/* With a vote function: whether the answers so far decide the round: a quorum said
 * yes, or too few nodes are left to make one.
 *
 * A node that is lagging (it missed an earlier deadline and has sent nothing since:
 * paused, hung, partitioned) does not hold up a contended round: once a node has
 * refused (a "no", not an error reply), and a quorum needs a lagging node, the round
 * is lost at once. Otherwise a failed attempt would hold its partial grants while it
 * waits for the lagging node, and the contenders that meet them would split their
 * votes again, round after round.
 * Without a refusal, the lagging node is waited for until its deadline: it may have
 * just resumed (its first bytes clear the mark), and no one is kept waiting by it. */
static bool decided(const dlock__conn *conns, const dlock__req *reqs, int n, dlock__vote_fn vote,
                    void *arg, int quorum)
{
    int yes = 0, no = 0, pending = 0, waited = 0;
    for (int i = 0; i < n; i++) {
        if (reqs[i].cmd == NULL)
            continue;
        if (!reqs[i].done) {
            pending++;
            waited += !conns[i].lagging;
        } else if (reqs[i].err == DLOCK_OK) {
            if (vote(&reqs[i], i, arg))
                yes++;
            else if (reqs[i].reply->type != REDIS_REPLY_ERROR)
                no++; /* a refusal; an error (-NOREPLICAS, -LOADING) is not one */
        }
    }
    if (pending == 0)
        return false;
    return yes >= quorum || yes + pending < quorum || (no > 0 && yes + waited < quorum);
}

int dlock__quorum(int n)
{
    return n / 2 + 1;
}

void dlock__fanout(dlock__conn *conns, dlock__req *reqs, int n)
{
    dlock__fanout_vote(conns, reqs, n, NULL, NULL);
}

void dlock__fanout_vote(dlock__conn *conns, dlock__req *reqs, int n, dlock__vote_fn vote, void *arg)
{
    dlock__fanout_until(conns, reqs, n, vote, arg, dlock__quorum(n));
}

void dlock__flight_start(dlock__flight *f, dlock__conn *conns, dlock__req *reqs, int n,
                         dlock__vote_fn vote, void *arg, int need, dlock__waker *wk)
{
    *f = (dlock__flight){conns, reqs, n, need, vote, arg, wk};
    int64_t start = dlock__now_us();
    dlock__pipe_lock(conns);

    /* Queue and send everything before waiting on anything. */
    int established = 0;
    for (int i = 0; i < n; i++) {
        if (reqs[i].cmd == NULL) {
            reqs[i].done = true;
            reqs[i].reply = NULL;
            reqs[i].err = DLOCK_OK;
            continue;
        }
        begin(&conns[i], &reqs[i], start, wk);
        established += !reqs[i].held && reqs[i].err == DLOCK_OK;
    }
    /* In a vote, a node still connecting gets the per-node timeout like the others
     * once a quorum of connections is up: a split vote must not hold its partial
     * grants for a whole connect timeout. (Its connection goes on in later rounds.)
     * When most connections are new, as on a client's first call, they all get the
     * connect timeout. A lagging node's new connection gets the per-node timeout in
     * any round: it has had its chance, and each round gives it another. */
    for (int i = 0; i < n; i++) {
        int64_t timeout_us = conns[i].node->rules->timeout_us;
        if (reqs[i].held && reqs[i].deadline_us > start + timeout_us &&
            ((vote != NULL && established >= need) || conns[i].lagging))
            reqs[i].deadline_us = start + timeout_us;
    }
    dlock__pipe_unlock(conns);
    DLOCK_PAUSE_POINT(DLOCK_HOOK_AFTER_SEND);
}

/* Once the answers so far decide the round, either way, a node still connecting or a
 * lagging one is not waited for (abandon() says why and what becomes of its reply).
 * The others are: they answer within a round trip, and their replies keep the
 * connections in step, the fences exact and the error precise (BUSY or NOQUORUM). */
void dlock__flight_abandon_decided(dlock__flight *f)
{
    if (f->vote != NULL && decided(f->conns, f->reqs, f->n, f->vote, f->arg, f->need))
        for (int i = 0; i < f->n; i++)
            if (f->reqs[i].cmd != NULL && !f->reqs[i].done &&
                (f->reqs[i].held || f->conns[i].lagging))
                abandon(&f->conns[i], &f->reqs[i]);
}

void dlock__flight_drop(dlock__flight *f)
{
    if (f->conns[0].pipe != NULL) {
        dlock__pipe_lock(f->conns);
        for (int i = 0; i < f->n; i++)
            if (!f->reqs[i].done)
                abandon(&f->conns[i], &f->reqs[i]);
        dlock__pipe_unlock(f->conns);
        return;
    }
    for (int i = 0; i < f->n; i++) {
        dlock__req *r = &f->reqs[i];
        if (r->done)
            continue;
        abandon(&f->conns[i], r);
        if (!r->done) {
            /* Half written: the stream cannot be left to the next round. */
            dlock__conn_close(&f->conns[i]);
            r->err = DLOCK_ERR_TIMEOUT;
            r->done = true;
        }
    }
}

void dlock__fanout_until(dlock__conn *conns, dlock__req *reqs, int n, dlock__vote_fn vote,
                         void *arg, int need)
{
    dlock__flight f;
    dlock__flight_start(&f, conns, reqs, n, vote, arg, need, NULL);
    while (!dlock__flight_pump(&f, -1))
        ;
}

void dlock__fanout_post(dlock__conn *conns, dlock__req *reqs, int n)
{
    int64_t start = dlock__now_us();
    dlock__pipe_lock(conns);
    for (int i = 0; i < n; i++) {
        reqs[i].done = true;
        if (reqs[i].cmd != NULL)
            begin(&conns[i], &reqs[i], start, NULL);
    }
    dlock__pipe_unlock(conns);
}
