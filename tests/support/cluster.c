/*
 * cluster.c: a Redis Cluster of masters for the tests, made of server.c's servers.
 *
 * How it is made, and why each step is there:
 *   - every node gets its cluster bus port (cluster-port) chosen here rather than the
 *     default of its port plus 10,000: that one may be taken by another process, and
 *     with TLS the bus follows the TLS port, which server.c does not keep below 55,536;
 *     a node that still does not start (its bus port taken in the meantime) is started
 *     again on another one;
 *   - the slots are split into ranges and each node is given its own distinct config
 *     epoch before the nodes meet, so that no epoch collision has to be resolved by
 *     gossip and a later slot migration wins on every node by its epoch alone;
 *   - start and migrations only return once every node reports cluster_state:ok, knows
 *     every other one, and its CLUSTER SLOTS names for every slot the owner the fixture
 *     recorded, at the address clients are redirected to: a test that follows never
 *     meets a node whose view is still catching up.
 */
#include "support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NODE_ATTEMPTS   3     /* starts of one node, each on a new bus port */
#define SETTLE_MS       10000 /* until every node agrees, times the slack */
#define POLL_MS         50
#define NODE_TIMEOUT_MS 2000 /* cluster-node-timeout, times the slack */
#define KEYS_BATCH      100  /* keys per GETKEYSINSLOT and MIGRATE */
#define MIGRATE_MS      2000 /* MIGRATE's own I/O timeout, times the slack */

/* The port clients and the other nodes reach a node on: with TLS the cluster runs on
 * TLS (tls-cluster), so it is the TLS port. */
static int client_port(const dh_server *s)
{
    return s->tls_port > 0 ? s->tls_port : s->port;
}

static bool valid_node(const dh_cluster *cl, int i)
{
    return i >= 0 && i < cl->n;
}

static bool valid_slot(int slot)
{
    return slot >= 0 && slot < DH_CLUSTER_SLOTS;
}

/* Start node i with the cluster's configuration lines first, then the caller's, on a
 * bus port chosen here. 0, or -1 after printing why. */
static int start_node(dh_cluster *cl, int i, const dh_server_opts *o)
{
    const char *config[DH_CONFIG_MAX + 1];
    char bus_line[32], timeout_line[64];
    int k = 0;
    config[k++] = "cluster-enabled yes";
    /* Relative to the node's own directory (its --dir): one file per node. */
    config[k++] = "cluster-config-file nodes.conf";
    /* Small, so that a test that stops or pauses a node sees it failed soon; times the
     * slack, so that a loaded machine's late pongs do not fail a node that runs. */
    snprintf(timeout_line, sizeof timeout_line, "cluster-node-timeout %lld",
             NODE_TIMEOUT_MS * dh_slack());
    config[k++] = timeout_line;
    config[k++] = bus_line;
    if (o->tls != NULL)
        config[k++] = "tls-cluster yes";
    for (int j = 0; o->config != NULL && o->config[j] != NULL; j++) {
        if (k == DH_CONFIG_MAX) {
            fprintf(stderr,
                    "dh: FATAL: cluster: more than %d config lines with the cluster's own\n",
                    DH_CONFIG_MAX);
            return -1;
        }
        config[k++] = o->config[j];
    }
    config[k] = NULL;
    dh_server_opts opts = *o;
    opts.config = config;

    for (int attempt = 1;; attempt++) {
        /* The other nodes' ports are bound by their servers: never free here. */
        int bus = dh_free_port(o->bind ? o->bind : "127.0.0.1");
        if (bus <= 0) {
            fprintf(stderr, "dh: FATAL: cluster: no free bus port for node %d\n", i);
            return -1;
        }
        snprintf(bus_line, sizeof bus_line, "cluster-port %d", bus);
        if (dh_server_start_opts(&cl->node[i], &opts) == 0) {
            cl->bus_port[i] = bus;
            return 0;
        }
        if (attempt == NODE_ATTEMPTS)
            return -1;
        /* Its bus port may have been taken between our choice and its bind. */
        fprintf(stderr, "dh: cluster: node %d did not start; again on another bus port\n", i);
    }
}

/* dh_cmd's reply that must be +OK; 0 or -1 (printed). */
static int node_ok(dh_cluster *cl, int i, const char *what, redisReply *r)
{
    char msg[160];
    snprintf(msg, sizeof msg, "cluster node %d (%s:%d): %s", i, cl->node[i].host, cl->node[i].port,
             what);
    return dh_reply_status(r, msg);
}

/* The node index whose CLUSTER MYID is id (len bytes), or -1. */
static int index_of_id(const dh_cluster *cl, const char *id, size_t len)
{
    for (int i = 0; i < cl->n; i++)
        if (len == strlen(cl->id[i]) && memcmp(cl->id[i], id, len) == 0)
            return i;
    return -1;
}

/* Whether node i sees the cluster as the fixture made it: state ok, every node known,
 * every slot served, and CLUSTER SLOTS naming the recorded owner of each slot at its
 * address. When not, why into why. */
static bool node_agrees(dh_cluster *cl, int i, char *why, size_t len)
{
    redisReply *r = dh_cmd(&cl->node[i], "CLUSTER INFO");
    bool ok = r != NULL && r->type == REDIS_REPLY_STRING;
    if (!ok) {
        snprintf(why, len, "node %d: CLUSTER INFO failed%s%s", i, r ? ": " : "",
                 r && r->type == REDIS_REPLY_ERROR ? r->str : "");
    } else if (strstr(r->str, "cluster_state:ok") == NULL) {
        snprintf(why, len, "node %d: cluster_state is not ok", i);
        ok = false;
    } else if (dh_info_long(r, "cluster_known_nodes") != cl->n) {
        snprintf(why, len, "node %d: knows %ld nodes of %d", i,
                 dh_info_long(r, "cluster_known_nodes"), cl->n);
        ok = false;
    } else if (dh_info_long(r, "cluster_slots_ok") != DH_CLUSTER_SLOTS) {
        snprintf(why, len, "node %d: cluster_slots_ok is %ld", i,
                 dh_info_long(r, "cluster_slots_ok"));
        ok = false;
    }
    freeReplyObject(r);
    if (!ok)
        return false;

    r = dh_cmd(&cl->node[i], "CLUSTER SLOTS");
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        snprintf(why, len, "node %d: CLUSTER SLOTS failed", i);
        freeReplyObject(r);
        return false;
    }
    bool seen[DH_CLUSTER_SLOTS] = {false};
    for (size_t e = 0; ok && e < r->elements; e++) {
        const redisReply *range = r->element[e];
        const redisReply *m = range->elements >= 3 ? range->element[2] : NULL;
        if (range->type != REDIS_REPLY_ARRAY || m == NULL || m->type != REDIS_REPLY_ARRAY ||
            m->elements < 3 || m->element[0]->type != REDIS_REPLY_STRING ||
            m->element[2]->type != REDIS_REPLY_STRING) {
            snprintf(why, len, "node %d: CLUSTER SLOTS answers an unexpected shape", i);
            ok = false;
            break;
        }
        long long first = range->element[0]->integer, last = range->element[1]->integer;
        int owner = index_of_id(cl, m->element[2]->str, m->element[2]->len);
        if (owner < 0 || strcmp(m->element[0]->str, cl->node[owner].host) != 0 ||
            m->element[1]->integer != cl->node[owner].port) {
            snprintf(why, len, "node %d: slots %lld-%lld at %s:%lld, not a node of ours yet", i,
                     first, last, m->element[0]->str, m->element[1]->integer);
            ok = false;
            break;
        }
        for (long long s = first; ok && s <= last && valid_slot((int)s); s++) {
            seen[s] = true;
            if (cl->owner[s] != owner) {
                snprintf(why, len, "node %d: slot %lld owned by node %d, not %d", i, s, owner,
                         cl->owner[s]);
                ok = false;
            }
        }
    }
    freeReplyObject(r);
    for (int s = 0; ok && s < DH_CLUSTER_SLOTS; s++) {
        if (!seen[s]) {
            snprintf(why, len, "node %d: slot %d has no owner", i, s);
            ok = false;
        }
    }
    /* A replica has its master's data: a failover would promote a copy. */
    if (ok && cl->replica_of[i] >= 0) {
        r = dh_cmd(&cl->node[i], "INFO replication");
        ok = r != NULL && r->type == REDIS_REPLY_STRING &&
             strstr(r->str, "master_link_status:up") != NULL;
        if (!ok)
            snprintf(why, len, "node %d: not replicating node %d yet", i, cl->replica_of[i]);
        freeReplyObject(r);
    }
    return ok;
}

int dh_cluster_wait(dh_cluster *cl)
{
    int64_t bound = SETTLE_MS * dh_slack();
    int64_t deadline = dh_now_ms() + bound;
    char why[256] = "";
    for (;;) {
        bool all = true;
        for (int i = 0; all && i < cl->n; i++)
            all = cl->node[i].pid == 0 ||
                  node_agrees(cl, i, why, sizeof why); /* a stopped one: no view */
        if (all)
            return 0;
        if (dh_now_ms() > deadline) {
            fprintf(stderr, "dh: cluster: the nodes did not agree within %lld ms: %s%s\n",
                    (long long)bound, why,
                    cl->node[0].tls_port > 0 ? " (with TLS: do the nodes have a client "
                                               "certificate? see dh_cluster_start)"
                                             : "");
            return -1;
        }
        dh_sleep_ms(POLL_MS);
    }
}

/* Ask each node its ID, give it its slot range and config epoch, and introduce the
 * nodes to each other. 0 or -1 (printed). */
static int form(dh_cluster *cl)
{
    for (int i = 0; i < cl->n; i++) {
        redisReply *r = dh_cmd(&cl->node[i], "CLUSTER MYID");
        if (r == NULL || r->type != REDIS_REPLY_STRING || r->len != 40) {
            fprintf(stderr, "dh: cluster node %d: CLUSTER MYID: %s\n", i,
                    r && r->type == REDIS_REPLY_ERROR ? r->str : "no ID");
            freeReplyObject(r);
            return -1;
        }
        memcpy(cl->id[i], r->str, 40);
        cl->id[i][40] = '\0';
        freeReplyObject(r);
        if (node_ok(cl, i, "CLUSTER SET-CONFIG-EPOCH",
                    dh_cmd(&cl->node[i], "CLUSTER SET-CONFIG-EPOCH %d", i + 1)) < 0)
            return -1;
        if (cl->replica_of[i] >= 0)
            continue;
        int first = i * DH_CLUSTER_SLOTS / cl->masters,
            last = (i + 1) * DH_CLUSTER_SLOTS / cl->masters - 1;
        for (int s = first; s <= last; s++)
            cl->owner[s] = (int8_t)i;
        if (node_ok(cl, i, "CLUSTER ADDSLOTSRANGE",
                    dh_cmd(&cl->node[i], "CLUSTER ADDSLOTSRANGE %d %d", first, last)) < 0)
            return -1;
    }
    /* Every pair meets, rather than all meeting node 0 and learning of each other by
     * gossip: with few nodes a ping's gossip often names only its receiver, and two
     * nodes could take seconds to hear of each other. */
    for (int i = 0; i < cl->n; i++) {
        for (int j = i + 1; j < cl->n; j++) {
            if (node_ok(cl, i, "CLUSTER MEET",
                        dh_cmd(&cl->node[i], "CLUSTER MEET %s %d %d", cl->node[j].host,
                               client_port(&cl->node[j]), cl->bus_port[j])) < 0)
                return -1;
        }
    }
    /* A replica names its master once the handshake has made it known ("Unknown
     * node" until then). */
    for (int i = 0; i < cl->n; i++) {
        if (cl->replica_of[i] < 0)
            continue;
        int64_t deadline = dh_now_ms() + SETTLE_MS * dh_slack();
        for (;;) {
            redisReply *r = dh_cmd(&cl->node[i], "CLUSTER REPLICATE %s", cl->id[cl->replica_of[i]]);
            if ((r != NULL && r->type == REDIS_REPLY_STATUS) || dh_now_ms() > deadline) {
                if (node_ok(cl, i, "CLUSTER REPLICATE", r) < 0)
                    return -1;
                break;
            }
            freeReplyObject(r);
            dh_sleep_ms(POLL_MS);
        }
    }
    return 0;
}

int dh_cluster_start(dh_cluster *cl, int n, const dh_server_opts *o)
{
    return dh_cluster_start_replicas(cl, n, 0, o);
}

int dh_cluster_start_replicas(dh_cluster *cl, int masters, int replicas, const dh_server_opts *o)
{
    memset(cl, 0, sizeof *cl);
    int n = masters + replicas;
    if (masters < 1 || replicas < 0 || replicas > masters || n > DH_CLUSTER_MAX) {
        fprintf(stderr,
                "dh: FATAL: cluster: %d masters and %d replicas; at most %d nodes, a replica "
                "for a master at most\n",
                masters, replicas, DH_CLUSTER_MAX);
        return -1;
    }
    cl->masters = masters;
    for (int i = 0; i < DH_CLUSTER_MAX; i++)
        cl->replica_of[i] = i >= masters && i < n ? i - masters : -1;
    dh_server_opts defaults = {0};
    if (o == NULL)
        o = &defaults;
    if (o->port != 0) {
        fprintf(stderr, "dh: FATAL: cluster: the nodes need ports of their own, not a fixed one\n");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (start_node(cl, i, o) < 0) {
            dh_cluster_stop(cl);
            return -1;
        }
        /* Counted as it starts, so that a failure stops what runs. */
        cl->n = i + 1;
    }
    if (form(cl) < 0 || dh_cluster_wait(cl) < 0) {
        dh_cluster_stop(cl);
        return -1;
    }
    return 0;
}

void dh_cluster_stop(dh_cluster *cl)
{
    dh_servers_stop(cl->node, cl->n);
    cl->n = 0;
}

int dh_cluster_failed_over(dh_cluster *cl, int master, int replica)
{
    if (master < 0 || master >= cl->n || replica < 0 || replica >= cl->n ||
        cl->replica_of[replica] != master) {
        fprintf(stderr, "dh: cluster: node %d is not a replica of node %d\n", replica, master);
        return -1;
    }
    for (int s = 0; s < DH_CLUSTER_SLOTS; s++)
        if (cl->owner[s] == master)
            cl->owner[s] = (int8_t)replica;
    cl->replica_of[replica] = -1;
    cl->replica_of[master] = replica; /* if it comes back, it comes back as a replica */
    return dh_cluster_wait(cl);
}

int dh_cluster_owner(const dh_cluster *cl, int slot)
{
    return valid_slot(slot) && cl->n > 0 ? cl->owner[slot] : -1;
}

int dh_cluster_keyslot(dh_cluster *cl, const char *key)
{
    long long slot;
    if (cl->n < 1 || dh_reply_integer(dh_cmd(&cl->node[0], "CLUSTER KEYSLOT %s", key),
                                      "CLUSTER KEYSLOT", &slot) < 0)
        return -1;
    return (int)slot;
}

/* The arguments of a migration: nodes of the cluster, distinct, the slot valid and
 * recorded as from's. 0 or -1 (printed). */
static int check_move(const dh_cluster *cl, int slot, int from, int to)
{
    if (!valid_node(cl, from) || !valid_node(cl, to) || from == to || !valid_slot(slot)) {
        fprintf(stderr, "dh: cluster: cannot move slot %d from node %d to node %d (%d nodes)\n",
                slot, from, to, cl->n);
        return -1;
    }
    if (cl->owner[slot] != from) {
        fprintf(stderr, "dh: cluster: slot %d is node %d's, not node %d's\n", slot, cl->owner[slot],
                from);
        return -1;
    }
    return 0;
}

int dh_cluster_migrate_begin(dh_cluster *cl, int slot, int from, int to)
{
    if (check_move(cl, slot, from, to) < 0)
        return -1;
    /* The importing side first: once from is migrating it sends clients on to `to`,
     * which must then accept them (after ASKING). */
    if (node_ok(cl, to, "CLUSTER SETSLOT IMPORTING",
                dh_cmd(&cl->node[to], "CLUSTER SETSLOT %d IMPORTING %s", slot, cl->id[from])) < 0)
        return -1;
    return node_ok(cl, from, "CLUSTER SETSLOT MIGRATING",
                   dh_cmd(&cl->node[from], "CLUSTER SETSLOT %d MIGRATING %s", slot, cl->id[to]));
}

/* One MIGRATE of the keys of a GETKEYSINSLOT reply keys from c (node from) to node to.
 * 0 or -1 (printed). */
static int migrate_batch(dh_cluster *cl, redisContext *c, int to, const redisReply *keys)
{
    const dh_server *t = &cl->node[to];
    const char *pw = dh_server_password(t);
    char port[16], timeout[32];
    snprintf(port, sizeof port, "%d", client_port(t));
    snprintf(timeout, sizeof timeout, "%lld", MIGRATE_MS * dh_slack());
    size_t argc = 0, cap = 9 + keys->elements;
    const char **argv = malloc(cap * sizeof *argv);
    size_t *lens = malloc(cap * sizeof *lens);
    if (argv == NULL || lens == NULL) {
        free(argv);
        free(lens);
        fprintf(stderr, "dh: cluster: out of memory\n");
        return -1;
    }
    const char *head[] = {"MIGRATE", t->host, port, "", "0", timeout};
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++) {
        argv[argc] = head[i];
        lens[argc++] = strlen(head[i]);
    }
    if (pw != NULL) {
        argv[argc] = "AUTH";
        lens[argc++] = 4;
        argv[argc] = pw;
        lens[argc++] = strlen(pw);
    }
    argv[argc] = "KEYS";
    lens[argc++] = 4;
    for (size_t i = 0; i < keys->elements; i++) {
        argv[argc] = keys->element[i]->str;
        lens[argc++] = keys->element[i]->len;
    }
    redisReply *r = redisCommandArgv(c, (int)argc, argv, lens);
    free(argv);
    free(lens);
    /* +NOKEY: every key of the batch expired meanwhile, which is as good as moved. */
    int rc = r != NULL && r->type == REDIS_REPLY_STATUS ? 0 : -1;
    if (rc < 0)
        fprintf(stderr, "dh: cluster: MIGRATE to node %d: %s\n", to,
                r == NULL                      ? c->errstr
                : r->type == REDIS_REPLY_ERROR ? r->str
                                               : "unexpected reply");
    freeReplyObject(r);
    return rc;
}

int dh_cluster_migrate_keys(dh_cluster *cl, int slot, int from, int to)
{
    if (check_move(cl, slot, from, to) < 0)
        return -1;
    redisContext *c = dh_connect(&cl->node[from]);
    if (c == NULL)
        return -1;
    /* Longer than MIGRATE's own timeout, so that a slow target is reported by the
     * node (-IOERR) rather than taken for a node that does not answer. */
    int64_t wait_ms = (MIGRATE_MS + 3000) * dh_slack();
    struct timeval tv = {.tv_sec = wait_ms / 1000, .tv_usec = (wait_ms % 1000) * 1000};
    redisSetTimeout(c, tv);
    /* Bounded: a test that keeps writing keys into the slot would otherwise keep us
     * here. */
    int64_t deadline = dh_now_ms() + SETTLE_MS * dh_slack();
    int rc = -1;
    for (;;) {
        redisReply *keys = redisCommand(c, "CLUSTER GETKEYSINSLOT %d %d", slot, KEYS_BATCH);
        if (keys == NULL || keys->type != REDIS_REPLY_ARRAY) {
            fprintf(stderr, "dh: cluster node %d: CLUSTER GETKEYSINSLOT: %s\n", from,
                    keys == NULL                      ? c->errstr
                    : keys->type == REDIS_REPLY_ERROR ? keys->str
                                                      : "unexpected reply");
            freeReplyObject(keys);
            break;
        }
        bool done = keys->elements == 0;
        int moved = done ? 0 : migrate_batch(cl, c, to, keys);
        freeReplyObject(keys);
        if (done)
            rc = 0;
        if (done || moved < 0)
            break;
        if (dh_now_ms() > deadline) {
            fprintf(stderr, "dh: cluster: slot %d of node %d never emptied\n", slot, from);
            break;
        }
    }
    redisFree(c);
    return rc;
}

/* CLUSTER SETSLOT slot NODE <to's ID> on node i. 0 or -1 (printed). */
static int assign(dh_cluster *cl, int i, int slot, int to)
{
    return node_ok(cl, i, "CLUSTER SETSLOT NODE",
                   dh_cmd(&cl->node[i], "CLUSTER SETSLOT %d NODE %s", slot, cl->id[to]));
}

int dh_cluster_migrate_finish(dh_cluster *cl, int slot, int from, int to)
{
    if (dh_cluster_migrate_keys(cl, slot, from, to) < 0)
        return -1;
    /* The new owner first: it takes the slot with a config epoch above every other
     * node's, so that no node's older claim can win it back through gossip; then the
     * old owner, which stops redirecting with -ASK; then everybody else, at once
     * rather than by gossip. */
    if (assign(cl, to, slot, to) < 0 || assign(cl, from, slot, to) < 0)
        return -1;
    for (int i = 0; i < cl->n; i++)
        if (i != from && i != to && cl->replica_of[i] < 0 && cl->node[i].pid != 0 &&
            assign(cl, i, slot, to) < 0)
            return -1;
    cl->owner[slot] = (int8_t)to;
    return dh_cluster_wait(cl);
}

void dh_cluster_url(const dh_cluster *cl, int i, char *buf, size_t len)
{
    if (len == 0)
        return;
    buf[0] = '\0';
    if (cl->n < 1 || i >= cl->n)
        return;
    int first = i < 0 ? 0 : i, end = i < 0 ? cl->n : i + 1;
    int k = snprintf(buf, len, "%s",
                     cl->node[0].tls_port > 0 ? "rediss-cluster://" : "redis-cluster://");
    size_t used = 0;
    for (int j = first; j < end; j++) {
        if (k < 0 || (size_t)k >= len - used)
            return; /* truncated */
        used += (size_t)k;
        k = snprintf(buf + used, len - used, "%s%s:%d", j > first ? "," : "", cl->node[j].host,
                     client_port(&cl->node[j]));
    }
}
