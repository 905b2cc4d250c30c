/*
 * sentinel.c: the master of a redis-sentinel:// node, as its Sentinels name it.
 *
 * Each new connection to such a node first asks all of the URL's Sentinels at once,
 * under the client's deadlines, for the address of the master of the URL's name
 * (SENTINEL get-master-addr-by-name), then connects there (conn.c). The answer most
 * Sentinels give wins, ties going to the URL's order: in a failover some Sentinels
 * still name the old master for a moment, and the handshake's INFO refuses a node
 * that is not a master (node.c), so a stale answer costs one failed connect, never a
 * lock on a replica.
 *
 * A failover is followed because connections are made anew after it: the old master
 * drops its clients when it is demoted, and one that answers -READONLY is closed
 * (fanout.c), so the next round asks the Sentinels again. Asking on each connect,
 * rather than keeping a subscription to the Sentinels' +switch-master events, costs
 * one round trip per connection, and connections live as long as their servers.
 *
 * The Sentinels are reached with the transport's own connections (TLS for
 * rediss-sentinel://), with the URL's sentinel_user and sentinel_password, never the
 * master's; their handshake sends no INFO (a Sentinel's has no eviction policy or
 * run_id of a data node).
 */
#include "internal.h"

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

/* Why Sentinel i gave no address, into r->detail when the transport has not. */
static void explain(const dlock__addr *a, dlock__req *r, int i)
{
    const redisReply *rep = r->reply;
    const struct dlock__sentinel_addr *s = &a->sentinels[i];
    if (r->err != DLOCK_OK)
        return; /* the transport's reason */
    if (rep->type == REDIS_REPLY_NIL)
        snprintf(r->detail, sizeof r->detail, "Sentinel %s:%d knows no master named \"%.60s\"",
                 s->host, s->port, a->master_name);
    else if (rep->type == REDIS_REPLY_ERROR)
        snprintf(r->detail, sizeof r->detail, "Sentinel %s:%d: -%.100s", s->host, s->port,
                 rep->str);
    else
        snprintf(r->detail, sizeof r->detail, "Sentinel %s:%d: not a master's address", s->host,
                 s->port);
}

/* The error when no Sentinel named a master: the Sentinels' own words, all of them. */
static int no_master(const dlock__node *node, const dlock__req *reqs, char *detail, size_t n)
{
    const dlock__addr *a = &node->addr;
    int err = DLOCK_ERR_IO, unknown = 0, answered = 0;
    for (int i = 0; i < a->nsentinels; i++) {
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
    int used = snprintf(detail, n, "%s: no Sentinel named the master:", a->display);
    for (int i = 0; i < a->nsentinels && used > 0 && (size_t)used < n; i++)
        used += snprintf(detail + used, n - (size_t)used, "%s %s", i ? ";" : "", reqs[i].detail);
    return err;
}

int dlock__sentinel_master(dlock__node *node, char *host, size_t hostlen, int *port, char *detail,
                           size_t n)
{
    const dlock__addr *a = &node->addr;
    const dlock__node_rules *rules = node->rules;
    int k = a->nsentinels;
    /* The Sentinels' rules: the client's deadlines and log, none of the master's
     * credentials, no restart voting (they hold no locks). */
    dlock__node_rules srules = {
        .timeout_us = rules->timeout_us,
        .connect_timeout_us = rules->connect_timeout_us,
        .restart_voting = DLOCK_RESTART_OFF,
        .log = rules->log,
        .log_user = rules->log_user,
    };
    dlock__node nodes[DLOCK_SENTINELS_MAX];
    dlock__conn conns[DLOCK_SENTINELS_MAX];
    dlock__req reqs[DLOCK_SENTINELS_MAX];
    char display[DLOCK_SENTINELS_MAX][300];
    char *cmd = NULL;
    int len = redisFormatCommand(&cmd, "SENTINEL get-master-addr-by-name %s", a->master_name);
    if (len < 0)
        return dlock__node_detail(detail, n, DLOCK_ERR_NOMEM, node, "out of memory");
    int rc = DLOCK_OK, ready = 0;
    for (int i = 0; i < k; i++) {
        dlock__node *s = &nodes[i];
        memset(s, 0, sizeof *s);
        s->rules = &srules;
        s->index = node->index;
        s->sentinel_query = true;
        s->addr.host = a->sentinels[i].host;
        s->addr.port = a->sentinels[i].port;
        s->addr.user = a->sentinel_user;
        s->addr.password = a->sentinel_password;
        s->addr.tls = a->tls;
        s->addr.insecure = a->insecure;
        snprintf(display[i], sizeof display[i], "Sentinel %s:%d", s->addr.host, s->addr.port);
        s->addr.display = display[i];
        pthread_mutex_init(&s->mu, NULL);
        if (node->tls_ctx != NULL && rc == DLOCK_OK)
            rc = dlock__tls_node_share(s, node, detail, n);
        dlock__conn_init(&conns[i], s);
        memset(&reqs[i], 0, sizeof reqs[i]);
        reqs[i].cmd = cmd;
        reqs[i].cmdlen = (size_t)len;
        reqs[i].await = true;
        ready = i + 1;
    }
    if (rc == DLOCK_OK) {
        dlock__fanout(conns, reqs, k);
        /* The address most of them give. */
        char cand[256];
        int cport = 0, best = 0;
        for (int i = 0; i < k; i++) {
            char h[256];
            int p;
            if (!answer(&reqs[i], h, sizeof h, &p))
                continue;
            int votes = 0;
            for (int j = 0; j < k; j++) {
                char h2[256];
                int p2;
                votes += answer(&reqs[j], h2, sizeof h2, &p2) && p2 == p && strcmp(h2, h) == 0;
            }
            if (votes > best) {
                best = votes;
                snprintf(cand, sizeof cand, "%s", h);
                cport = p;
            }
        }
        if (best > 0 && strlen(cand) < hostlen) {
            snprintf(host, hostlen, "%s", cand);
            *port = cport;
        } else {
            for (int i = 0; i < k; i++)
                explain(a, &reqs[i], i);
            rc = no_master(node, reqs, detail, n);
        }
    }
    for (int i = 0; i < ready; i++) {
        freeReplyObject(reqs[i].reply);
        dlock__conn_free(&conns[i]);
        dlock__tls_node_free(&nodes[i]);
        pthread_mutex_destroy(&nodes[i].mu);
    }
    redisFreeCommand(cmd);
    return rc;
}
