/*
 * sentinel.c: the master of a redis-sentinel:// node, as its Sentinels name it.
 *
 * Each new connection to such a node first asks all of the URL's Sentinels at once,
 * under the client's deadlines, for the address of the master of the URL's name
 * (SENTINEL get-master-addr-by-name), then connects there (conn.c). The answer most
 * Sentinels give wins, ties going to the URL's order: in a failover some Sentinels
 * still name the old master for a moment, and the handshake's INFO refuses a node
 * that is not a master (node.c, for a topology whose named_master is set), so a stale
 * answer costs one failed connect, never a lock on a replica.
 *
 * A failover is followed because connections are made anew after it: the old master
 * drops its clients when it is demoted, and one that answers -READONLY is closed (the
 * on_error below marks it, and conn.c closes it before the next round), so the next
 * round asks the Sentinels again. Asking on each connect, rather than keeping a
 * subscription to the Sentinels' +switch-master events, costs one round trip per
 * connection, and connections live as long as their servers.
 *
 * All of this is the Sentinel topology (dlock__topo_sentinel, at the end): conn.c and
 * fanout.c reach it only through the node's table.
 *
 * The Sentinels are reached with the transport's own connections (ask.c; TLS for
 * rediss-sentinel://), with the URL's sentinel_user and sentinel_password, never the
 * master's.
 */
#include "transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One Sentinel's answer: the master's host and port, or why there is none. */
static bool answer(const dlock__req *r, char *host, size_t hostlen, int *port)
{
    const redisReply *rep = r->reply;
    if (r->err != DLOCK_OK || rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
        rep->element[0]->type != REDIS_REPLY_STRING ||
        rep->element[1]->type != REDIS_REPLY_STRING || rep->element[0]->len == 0 ||
        rep->element[0]->len >= hostlen)
        return false;
    char *end;
    long p = strtol(rep->element[1]->str, &end, 10);
    if (*end != '\0' || p < 1 || p > 65535)
        return false;
    memcpy(host, rep->element[0]->str, rep->element[0]->len);
    host[rep->element[0]->len] = '\0';
    *port = (int)p;
    return true;
}

/* Why a Sentinel (who: "Sentinel host:port") gave no address, into r->why.msg when the
 * transport has not. */
static void explain(const dlock__addr *a, const char *who, dlock__req *r)
{
    const redisReply *rep = r->reply;
    if (r->err != DLOCK_OK)
        return; /* the transport's reason */
    if (rep->type == REDIS_REPLY_NIL)
        dlock__err_set(&r->why, 0, "%s knows no master named \"%.60s\"", who, a->master_name);
    else if (rep->type == REDIS_REPLY_ERROR)
        dlock__err_set(&r->why, 0, "%s: -%.100s", who, rep->str);
    else
        dlock__err_set(&r->why, 0, "%s: not a master's address", who);
}

/* The error when no Sentinel named a master: the Sentinels' own words, all of them. */
static int no_master(const dlock__node *node, const dlock__req *reqs, dlock__err *e)
{
    const dlock__addr *a = &node->addr;
    int err = DLOCK_ERR_IO, unknown = 0, answered = 0;
    for (int i = 0; i < a->nhosts; i++) {
        answered += reqs[i].err == DLOCK_OK;
        const redisReply *rep = reqs[i].reply;
        if (reqs[i].err == DLOCK_ERR_AUTH ||
            (rep != NULL && rep->type == REDIS_REPLY_ERROR &&
             dlock__server_error_code(rep->str, rep->len) == DLOCK_ERR_AUTH))
            err = DLOCK_ERR_AUTH;
        unknown += rep != NULL && rep->type == REDIS_REPLY_NIL;
    }
    /* Every Sentinel that answered says the name is unknown: a wrong URL, which no
     * retry mends. (One that answered otherwise may be starting up.) */
    if (unknown > 0 && err != DLOCK_ERR_AUTH)
        err = unknown == answered ? DLOCK_ERR_INVALID : DLOCK_ERR_UNAVAILABLE;
    int used = snprintf(e->msg, sizeof e->msg, "%s: no Sentinel named the master:", a->display);
    for (int i = 0; i < a->nhosts && used > 0 && (size_t)used < sizeof e->msg; i++)
        used += snprintf(e->msg + used, sizeof e->msg - (size_t)used, "%s %s", i ? ";" : "",
                         reqs[i].why.msg);
    return err;
}

/* Ask "SENTINEL <sub> <master name>" of every Sentinel, with the Sentinels' own
 * credentials; the replies in sr->reqs. Free with dlock__ask_end, whatever this
 * returns. */
static int round_run(const dlock__node *node, const char *sub, dlock__ask *sr, dlock__err *e)
{
    const dlock__addr *a = &node->addr;
    dlock__ask_spec spec = {
        .from = node,
        .hosts = a->hosts,
        .k = a->nhosts,
        .what = "Sentinel",
        .user = a->sentinel_user,
        .password = a->sentinel_password,
        .argc = 3,
        .argv = (const char *[]){"SENTINEL", sub, a->master_name},
    };
    return dlock__ask_run(sr, &spec, e);
}

/* The address of the master that node's Sentinels name now, asked in one round under
 * the node's deadlines. DLOCK_ERR_INVALID when every Sentinel answered that it knows no
 * such master, DLOCK_ERR_AUTH when one refused the credentials, else DLOCK_ERR_IO or
 * DLOCK_ERR_UNAVAILABLE, each Sentinel's reason in e. */
static int master_addr(dlock__node *node, char *host, size_t hostlen, int *port, dlock__err *e)
{
    const dlock__addr *a = &node->addr;
    dlock__ask sr;
    int rc = round_run(node, "get-master-addr-by-name", &sr, e);
    const dlock__req *reqs = sr.reqs;
    int k = sr.k;
    if (rc == DLOCK_OK) {
        /* Each answer once, then the address most of them give. */
        char hosts[DLOCK_HOSTS_MAX][256];
        int ports[DLOCK_HOSTS_MAX], best = -1, best_votes = 0;
        bool named[DLOCK_HOSTS_MAX];
        for (int i = 0; i < k; i++)
            named[i] = answer(&reqs[i], hosts[i], sizeof hosts[i], &ports[i]);
        for (int i = 0; i < k; i++) {
            int votes = 0;
            for (int j = 0; named[i] && j < k; j++)
                votes += named[j] && ports[j] == ports[i] && strcmp(hosts[j], hosts[i]) == 0;
            if (votes > best_votes) {
                best_votes = votes;
                best = i;
            }
        }
        if (best >= 0 && strlen(hosts[best]) < hostlen) {
            snprintf(host, hostlen, "%s", hosts[best]);
            *port = ports[best];
        } else {
            for (int i = 0; i < k; i++)
                explain(a, sr.display[i], &sr.reqs[i]);
            rc = no_master(node, reqs, e);
        }
    }
    dlock__ask_end(&sr);
    return rc;
}

/* Where a connection being opened goes: the master the Sentinels name now. */
static int resolve(dlock__conn *c, dlock__err *e)
{
    return master_addr(c->node, c->host, sizeof c->host, &c->port, e);
}

/* A master that was demoted answers -READONLY: the reply stands, and the connection is
 * made anew before the next round, asking the Sentinels again. */
static int on_error(dlock__conn *c, dlock__req *r, const redisReply *reply, bool *resend)
{
    (void)r;
    *resend = false;
    if (strncmp(reply->str, "READONLY", 8) == 0)
        c->reresolve = true;
    return DLOCK_OK;
}

/* The master is whichever the Sentinels name: no state beyond the connection's host,
 * one voter (the node's), nothing to route. */
const dlock__topology dlock__topo_sentinel = {
    .resolve = resolve,
    .on_error = on_error,
    .named_master = true,
};

int dlock__sentinel_quorum(dlock__node *node, int *up, int *ok, char *words, size_t n)
{
    dlock__ask sr;
    *up = 0;
    *ok = -1;
    words[0] = '\0';
    dlock__err e;
    int rc = round_run(node, "ckquorum", &sr, &e);
    if (rc != DLOCK_OK)
        snprintf(words, n, "%s", e.msg); /* why no Sentinel could say */
    for (int i = 0; rc == DLOCK_OK && i < sr.k; i++) {
        const redisReply *r = sr.reqs[i].reply;
        if (sr.reqs[i].err != DLOCK_OK)
            continue;
        (*up)++;
        bool yes = r->type == REDIS_REPLY_STATUS && strncmp(r->str, "OK", 2) == 0;
        bool no = r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOQUORUM", 8) == 0;
        /* The first Sentinel's verdict, unless a later one says there is none. */
        if ((yes || no) && (*ok != 0)) {
            *ok = yes;
            snprintf(words, n, "%s: %s", sr.display[i], r->str);
        }
    }
    dlock__ask_end(&sr);
    return rc;
}
