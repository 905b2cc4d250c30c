/*
 * probe.c: dlock_probe, what each lock server says of itself: the facts `dlock doctor`
 * judges (eviction policy, persistence, role, version, clock, and for a master behind
 * Sentinels, whether they can fail it over); and dlock_ping, whether each answers at
 * all, for a health check that runs every second (dlockd's).
 *
 * For a whole Redis Cluster, every master that serves slots is asked INFO and CONFIG
 * too (through ask.c), and the worst answer of each fact stands for the cluster.
 *
 * Three kinds of question, each sent to every server at once through the transport:
 * INFO (its default sections hold the version, role, memory policy, AOF and cluster
 * state), CONFIG GET appendfsync (not in INFO; managed services often refuse CONFIG,
 * and the fact is then unknown rather than an error), and TIME, three times. A server's
 * clock is compared with this host's wall clock at the middle of the quickest of the
 * three round trips: the reply was made within half that trip of the middle, so half
 * the trip bounds the error. The offsets of two servers, each measured that way,
 * differ from their clocks' true difference by at most the sum of the two bounds.
 *
 * A dlockd (this project's lock service) answers INFO as Redis does, and says so with
 * a dlockd_version field. It is a client of lock servers, not one: it runs none of the
 * scripts a lock needs, and its INFO says nothing of the servers that hold the locks.
 * Such a server gets DLOCK_ERR_INVALID, a wrong URL no retry mends, with a detail
 * that starts "a dlockd", dlockd 1 and its dlockd_version in version, and is asked
 * nothing more.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIME_SAMPLES 3

static const char INFO_CMD[] = "*1\r\n$4\r\nINFO\r\n";
static const char FSYNC_CMD[] = "*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$11\r\nappendfsync\r\n";
static const char TIME_CMD[] = "*1\r\n$4\r\nTIME\r\n";
static const char PING_CMD[] = "*1\r\n$4\r\nPING\r\n";

/* Send cmd to every server still answering, and wait for the replies. */
static void ask_all(dlock_client *c, dlock__connset *set, dlock__req *reqs, const char *cmd,
                    size_t len, const dlock_server_facts *out)
{
    for (int i = 0; i < c->n; i++) {
        freeReplyObject(reqs[i].reply);
        memset(&reqs[i], 0, sizeof reqs[i]);
        if (out[i].error == DLOCK_OK) {
            reqs[i].cmd = cmd;
            reqs[i].cmdlen = len;
            reqs[i].await = true;
            reqs[i].harmless_late = true; /* reads: a late reply harms nobody */
        }
    }
    dlock__fanout(set->conns, reqs, c->n);
}

/* The transport's failure to reach server i, kept as its error. */
static bool reached(dlock__req *r, dlock_server_facts *f)
{
    if (r->cmd == NULL)
        return false;
    if (r->err == DLOCK_OK)
        return true;
    f->error = r->err;
    /* The transport's reason starts with the server's URL, which f->server holds. */
    const char *d = r->why.msg;
    size_t len = strlen(f->server);
    if (strncmp(d, f->server, len) == 0 && strncmp(d + len, ": ", 2) == 0)
        d += len + 2;
    snprintf(f->detail, sizeof f->detail, "%.*s", (int)sizeof f->detail - 1, d);
    return false;
}

static int64_t int_field(const redisReply *r, const char *field)
{
    char v[32];
    if (!dlock__info_field(r, field, v, sizeof v))
        return -1;
    char *end;
    long long x = strtoll(v, &end, 10);
    return end == v ? -1 : (int64_t)x;
}

static void take_info(const redisReply *r, dlock_server_facts *f)
{
    /* An error reply (an ACL's NOPERM) leaves the facts unknown. */
    if (r->type != REDIS_REPLY_STRING)
        return;
    dlock__info_field(r, "redis_version", f->version, sizeof f->version);
    dlock__info_field(r, "role", f->role, sizeof f->role);
    dlock__info_field(r, "maxmemory_policy", f->maxmemory_policy, sizeof f->maxmemory_policy);
    f->maxmemory = int_field(r, "maxmemory");
    f->aof = (int)int_field(r, "aof_enabled");
    f->cluster = (int)int_field(r, "cluster_enabled");
    f->uptime_s = int_field(r, "uptime_in_seconds");
    f->replicas = int_field(r, "connected_slaves");
}

/* A dlockd's INFO (see the top): true when it is one, its error then saying so. Its
 * facts stay unknown: its redis_version is there for clients that branch on it, and
 * its role and memory are its own, not those of the servers that hold the locks. */
static bool take_dlockd(const redisReply *r, dlock_server_facts *f)
{
    char version[32];
    if (r->type != REDIS_REPLY_STRING ||
        !dlock__info_field(r, "dlockd_version", version, sizeof version))
        return false;
    f->error = DLOCK_ERR_INVALID;
    f->dlockd = 1;
    _Static_assert(sizeof version == sizeof f->version, "a dlockd_version fits version");
    memcpy(f->version, version, sizeof f->version);
    snprintf(f->detail, sizeof f->detail,
             "a dlockd (dlockd_version %s), not a Redis server: it serves LOCK, not the "
             "scripts dlock runs",
             version);
    return true;
}

static void take_fsync(const redisReply *r, dlock_server_facts *f)
{
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING)
        snprintf(f->appendfsync, sizeof f->appendfsync, "%s", r->element[1]->str);
}

/* A cluster's cluster_state (CLUSTER INFO), asked of any master that serves slots (a
 * request without keys is routed so): DLOCK_OK with it in state, or why not. */
static int cluster_state(dlock__node *node, char *state, size_t statelen)
{
    dlock__conn c;
    dlock__conn_init(&c, node);
    dlock__req req = {.await = true};
    req.cmd = "*2\r\n$7\r\nCLUSTER\r\n$4\r\nINFO\r\n";
    req.cmdlen = strlen(req.cmd);
    dlock__fanout(&c, &req, 1);
    int rc = req.err;
    if (rc == DLOCK_OK && (req.reply->type != REDIS_REPLY_STRING ||
                           !dlock__info_field(req.reply, "cluster_state", state, statelen)))
        rc = DLOCK_ERR_PROTOCOL;
    freeReplyObject(req.reply);
    dlock__conn_free(&c);
    return rc;
}

/* How strongly appendfsync makes writes durable, for the worst of several: always 3,
 * not known ("") 2, everysec 1, no 0. Unknown ranks below always: a master that would
 * not say must not pass for one that fsyncs every write; a known weaker setting is
 * worse still, since it is a finding of its own. */
static int fsync_rank(const char *v)
{
    return strcmp(v, "always") == 0     ? 3
           : strcmp(v, "everysec") == 0 ? 1
           : strcmp(v, "no") == 0       ? 0
                                        : 2;
}

/* Fold one master's answer g (to INFO when info, else to CONFIG GET appendfsync) into
 * the cluster's f, keeping the worst of each fact. A fact one master would not give
 * makes the cluster's unknown, unless another master's is known to be worse: an
 * evicting policy beats an unknown one, which beats noeviction; persistence off
 * beats unknown, which beats on. */
static void fold_master(dlock_server_facts *f, const dlock_server_facts *g, bool info)
{
    if (!info) {
        if (fsync_rank(g->appendfsync) < fsync_rank(f->appendfsync))
            memcpy(f->appendfsync, g->appendfsync, sizeof f->appendfsync);
        return;
    }
    bool g_evicts =
        g->maxmemory_policy[0] != '\0' && strcmp(g->maxmemory_policy, "noeviction") != 0;
    bool f_evicts =
        f->maxmemory_policy[0] != '\0' && strcmp(f->maxmemory_policy, "noeviction") != 0;
    /* Of two evicting masters, one with a limit (or none known) evicts sooner. */
    bool sooner = g_evicts && f_evicts && f->maxmemory == 0 && g->maxmemory != 0;
    if ((g_evicts && !f_evicts) || (g->maxmemory_policy[0] == '\0' && !f_evicts) || sooner) {
        memcpy(f->maxmemory_policy, g->maxmemory_policy, sizeof f->maxmemory_policy);
        f->maxmemory = g->maxmemory;
    }
    if (g->aof == 0 || (g->aof < 0 && f->aof == 1))
        f->aof = g->aof;
    if (g->replicas >= 0 && (f->replicas < 0 || g->replicas < f->replicas))
        f->replicas = g->replicas;
    if (g->uptime_s >= 0 && (f->uptime_s < 0 || g->uptime_s < f->uptime_s))
        f->uptime_s = g->uptime_s;
}

/* A cluster's masters, each asked INFO and CONFIG GET appendfsync at once, folded into
 * f: the worst of each fact, so that one master's risk (an evicting policy, persistence
 * off) is not hidden behind the health of the master the client's connection is at. */
static void take_masters(dlock__node *node, dlock_server_facts *f)
{
    struct dlock__hostport hosts[DLOCK_ASK_MAX];
    char names[DLOCK_ASK_MAX][256];
    f->cluster_masters = dlock__cluster_masters(node, hosts, names, DLOCK_ASK_MAX);
    int k = f->cluster_masters < DLOCK_ASK_MAX ? f->cluster_masters : DLOCK_ASK_MAX;
    if (f->error != DLOCK_OK)
        return;
    static const char *info_argv[] = {"INFO"}, *fsync_argv[] = {"CONFIG", "GET", "appendfsync"};
    for (int q = 0; q < 2; q++) {
        dlock__ask ask;
        dlock__err ignored; /* a master not asked leaves its facts out */
        dlock__ask_spec spec = {.from = node,
                                .hosts = hosts,
                                .k = k,
                                .what = "master",
                                .user = node->addr.user,
                                .password = dlock__node_password(node),
                                .tls_name = node->tls_name,
                                .argc = q == 0 ? 1 : 3,
                                .argv = q == 0 ? info_argv : fsync_argv};
        if (dlock__ask_run(&ask, &spec, &ignored) == DLOCK_OK) {
            for (int i = 0; i < ask.k; i++) {
                if (ask.reqs[i].err != DLOCK_OK)
                    continue;
                dlock_server_facts g;
                memset(&g, 0, sizeof g);
                g.aof = -1;
                g.maxmemory = g.uptime_s = g.replicas = -1;
                if (q == 0) {
                    f->cluster_masters_up++;
                    take_info(ask.reqs[i].reply, &g);
                } else {
                    take_fsync(ask.reqs[i].reply, &g);
                }
                fold_master(f, &g, q == 0);
            }
        }
        dlock__ask_end(&ask);
    }
}

/* TIME's reply in microseconds, or -1. */
static int64_t time_us(const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        return -1;
    int64_t v[2];
    for (int k = 0; k < 2; k++) {
        const redisReply *e = r->element[k];
        char *end;
        if (e->type != REDIS_REPLY_STRING)
            return -1;
        long long x = strtoll(e->str, &end, 10);
        if (end == e->str || *end != '\0' || x < 0 || x > INT64_C(9000000000000))
            return -1;
        v[k] = x;
    }
    return v[0] * 1000000 + v[1];
}

/* Three TIMEs of each server, one server at a time so that each trip is its own. */
static void take_clocks(dlock_client *c, dlock__connset *set, dlock__req *reqs,
                        dlock_server_facts *out)
{
    for (int i = 0; i < c->n; i++) {
        int64_t best_rtt = -1;
        for (int k = 0; k < TIME_SAMPLES && out[i].error == DLOCK_OK; k++) {
            for (int j = 0; j < c->n; j++) {
                freeReplyObject(reqs[j].reply);
                memset(&reqs[j], 0, sizeof reqs[j]);
            }
            reqs[i].cmd = TIME_CMD;
            reqs[i].cmdlen = sizeof TIME_CMD - 1;
            reqs[i].await = true;
            int64_t t0 = dlock__wallclock_us(), m0 = dlock__now_us();
            dlock__fanout(set->conns, reqs, c->n);
            int64_t t1 = dlock__wallclock_us(), rtt = dlock__now_us() - m0;
            if (!reached(&reqs[i], &out[i]))
                break;
            int64_t server = time_us(reqs[i].reply);
            if (server < 0 || (best_rtt >= 0 && rtt >= best_rtt))
                continue;
            best_rtt = rtt;
            out[i].clock_offset_us = server - (t0 + (t1 - t0) / 2);
            out[i].clock_error_us = rtt / 2 + 1;
        }
    }
}

/* What dlock_probe and dlock_ping check before they ask: DLOCK_OK with out[0..c->n)
 * set to "nothing known yet" (each server's URL, its TLS, every fact unknown), and in
 * *set the pooled connections they ask on (dlock__connset_put gives them back): their
 * handshake (TLS, AUTH, SELECT) is what fails when a lock would fail for the same
 * reason. */
static int begin(dlock_client *c, dlock_server_facts *out, int n, dlock__connset **set)
{
    dlock__err e;
    int rc = dlock__client_enter(c, &e);
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    if (out == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "out is NULL");
    if ((rc = c->backend->gate(c, DLOCK_GATE_PROBE, &e)) != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    if (n < c->n)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "out holds %d facts, the client has %d servers",
                            n, c->n);
    for (int i = 0; i < c->n; i++) {
        dlock_server_facts *f = &out[i];
        memset(f, 0, sizeof *f);
        snprintf(f->server, sizeof f->server, "%s", c->nodes[i].addr.display);
        f->tls = c->nodes[i].tls_ctx != NULL;
        f->tls_verified = f->tls && !c->nodes[i].tls_insecure;
        f->cluster = f->aof = -1;
        f->maxmemory = f->uptime_s = f->clock_error_us = f->replicas = -1;
        f->sentinels = c->nodes[i].addr.sentinel ? c->nodes[i].addr.nhosts : 0;
        f->sentinel_quorum = -1;
        f->cluster_ok = -1;
    }
    *set = dlock__connset_get(c);
    if (*set == NULL)
        return dlock__raise(&e, DLOCK_ERR_NOMEM, "out of memory");
    return DLOCK_OK;
}

/* begin, then the first question (cmd, len) to every server, its answers in reqs. */
static int first_ask(dlock_client *c, dlock_server_facts *out, int n, const char *cmd, size_t len,
                     dlock__req *reqs, dlock__connset **set)
{
    int rc = begin(c, out, n, set);
    if (rc != DLOCK_OK)
        return rc;
    memset(reqs, 0, (size_t)c->n * sizeof reqs[0]);
    ask_all(c, *set, reqs, cmd, len, out);
    return DLOCK_OK;
}

int dlock_probe(dlock_client *c, dlock_server_facts *out, int n)
{
    dlock__connset *set;
    dlock__req reqs[DLOCK_SERVERS_MAX];
    int rc = first_ask(c, out, n, INFO_CMD, sizeof INFO_CMD - 1, reqs, &set);
    if (rc != DLOCK_OK)
        return rc;
    for (int i = 0; i < c->n; i++)
        if (reached(&reqs[i], &out[i]) && !take_dlockd(reqs[i].reply, &out[i]))
            take_info(reqs[i].reply, &out[i]);
    ask_all(c, set, reqs, FSYNC_CMD, sizeof FSYNC_CMD - 1, out);
    for (int i = 0; i < c->n; i++)
        if (reached(&reqs[i], &out[i]))
            take_fsync(reqs[i].reply, &out[i]);
    take_clocks(c, set, reqs, out);
    /* Asked whether or not the master answered: its Sentinels are what a failover
     * needs, and what finds a new master when it is down. */
    for (int i = 0; i < c->n; i++)
        if (out[i].sentinels > 0)
            dlock__sentinel_quorum(&c->nodes[i], &out[i].sentinels_up, &out[i].sentinel_quorum,
                                   out[i].sentinel_detail, sizeof out[i].sentinel_detail);
    /* A cluster: how many masters its map has, and whether it says it serves every
     * slot. */
    for (int i = 0; i < c->n; i++) {
        dlock_server_facts *f = &out[i];
        if (c->nodes[i].cluster == NULL)
            continue;
        if (cluster_state(&c->nodes[i], f->cluster_state, sizeof f->cluster_state) == DLOCK_OK)
            f->cluster_ok = strcmp(f->cluster_state, "ok") == 0;
        take_masters(&c->nodes[i], f);
    }

    for (int i = 0; i < c->n; i++)
        freeReplyObject(reqs[i].reply);
    dlock__connset_put(c, set);
    return DLOCK_OK;
}

/* A PING's answer: PONG, else why the server is not well. */
static void take_pong(const redisReply *r, dlock_server_facts *f)
{
    if (r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0)
        return;
    if (r->type == REDIS_REPLY_ERROR) {
        /* -LOADING, -MASTERDOWN: the server cannot serve now; -NOAUTH: it wants a
         * password the URL does not give. */
        f->error = dlock__server_error_code(r->str, r->len);
        snprintf(f->detail, sizeof f->detail, "PING answered: %.200s", r->str);
        return;
    }
    f->error = DLOCK_ERR_PROTOCOL;
    snprintf(f->detail, sizeof f->detail, "PING answered a reply of type %d, not PONG", r->type);
}

int dlock_ping(dlock_client *c, dlock_server_facts *out, int n)
{
    dlock__connset *set;
    dlock__req reqs[DLOCK_SERVERS_MAX];
    int rc = first_ask(c, out, n, PING_CMD, sizeof PING_CMD - 1, reqs, &set);
    if (rc != DLOCK_OK)
        return rc;
    for (int i = 0; i < c->n; i++) {
        if (reached(&reqs[i], &out[i]))
            take_pong(reqs[i].reply, &out[i]);
        freeReplyObject(reqs[i].reply);
    }
    dlock__connset_put(c, set);
    return DLOCK_OK;
}
