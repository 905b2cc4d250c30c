/*
 * ask.c: one question to several hosts at once, each on a connection of its own that
 * lives for the question only.
 *
 * A redis-sentinel:// node asks its Sentinels for the master's address on each
 * connect, and a redis-cluster:// node asks its seeds and masters for the slot map
 * when it has none or it changed. Both ask several hosts because any of them may be
 * down, and ask them all at once so that a dead one costs no more than the others
 * take to answer. The connections are the transport's own (conn.c, fanout.c), so
 * deadlines, TLS and credentials work as for data connections; their handshake sends
 * no INFO, since the hosts asked hold no locks and get no votes.
 */
#include "transport.h"

#include <stdio.h>
#include <string.h>

_Static_assert(DLOCK_ASK_MAX <= DLOCK_SERVERS_MAX, "fanout.c polls at most DLOCK_SERVERS_MAX");

int dlock__ask_run(dlock__ask *a, const dlock__ask_spec *spec, dlock__err *e)
{
    const dlock__node *from = spec->from;
    const dlock__node_rules *rules = from->rules;
    /* The client's deadlines and log, none of its own credentials, no restart voting. */
    a->rules = (dlock__node_rules){
        .timeout_us = rules->timeout_us,
        .connect_timeout_us = rules->connect_timeout_us,
        .restart_voting = DLOCK_RESTART_OFF,
        .log = rules->log,
        .log_user = rules->log_user,
    };
    a->k = 0;
    int len = redisFormatCommandArgv(&a->cmd, spec->argc, spec->argv, NULL);
    if (len < 0) {
        a->cmd = NULL;
        return dlock__node_err(e, DLOCK_ERR_NOMEM, from, "out of memory");
    }
    int k = spec->k < DLOCK_ASK_MAX ? spec->k : DLOCK_ASK_MAX;
    for (int i = 0; i < k; i++) {
        dlock__node *s = &a->nodes[i];
        memset(s, 0, sizeof *s);
        s->rules = &a->rules;
        s->topo = &dlock__topo_direct; /* a Sentinel, a seed or a master: the host asked */
        s->index = from->index;
        s->query_only = true;
        s->reply_max_elements = spec->reply_max_elements;
        s->reply_max_bytes = spec->reply_max_bytes;
        s->addr.host = spec->hosts[i].host;
        s->addr.port = spec->hosts[i].port;
        s->addr.user = spec->user;
        s->addr.password = spec->password;
        s->addr.tls = from->addr.tls;
        s->addr.insecure = from->addr.insecure;
        bool v6 = strchr(s->addr.host, ':') != NULL;
        snprintf(a->display[i], sizeof a->display[i], "%s %s%.253s%s:%d", spec->what, v6 ? "[" : "",
                 s->addr.host, v6 ? "]" : "", s->addr.port);
        s->addr.display = a->display[i];
        pthread_mutex_init(&s->mu, NULL);
        dlock__conn_init(&a->conns[i], s);
        memset(&a->reqs[i], 0, sizeof a->reqs[i]);
        a->reqs[i].cmd = a->cmd;
        a->reqs[i].cmdlen = (size_t)len;
        a->reqs[i].await = true;
        a->k = i + 1;
        int rc;
        if (from->tls_ctx != NULL &&
            (rc = dlock__tls_node_share(s, from, spec->tls_name, e)) != DLOCK_OK)
            return rc;
    }
    if (spec->good != NULL)
        dlock__fanout_until(a->conns, a->reqs, a->k, spec->good, NULL, spec->need);
    else
        dlock__fanout(a->conns, a->reqs, a->k);
    return DLOCK_OK;
}

void dlock__ask_end(dlock__ask *a)
{
    for (int i = 0; i < a->k; i++) {
        freeReplyObject(a->reqs[i].reply);
        dlock__conn_free(&a->conns[i]);
        dlock__tls_node_free(&a->nodes[i]);
        pthread_mutex_destroy(&a->nodes[i].mu);
    }
    a->k = 0;
    redisFreeCommand(a->cmd);
    a->cmd = NULL;
}
