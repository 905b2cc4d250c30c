/*
 * cluster.c: a redis-cluster:// node, one server of the Redlock list that is a whole
 * Redis Cluster.
 *
 * All of a lock's keys share the hash tag {name} (scripts.c), so every script call
 * has one slot and one master answers it: in the vote the cluster is one server, as
 * available as the master of the name's slot, and its failover risks what a Sentinel
 * failover does (asynchronous replication; docs/guarantees.md).
 *
 * The slot map is asked of the seeds and the masters known so far at once (CLUSTER
 * SLOTS, through ask.c) when the client has none, and again before the next request
 * after a redirection said it changed or a master failed or timed out (a failover may
 * have given its slots to a replica). The first complete answer is taken.
 *
 * Routing: a request carries its keys' slot (script_call.c). Before a round sends it
 * (fanout.c, through the route op), the node's connection is pointed at the slot's owner: the
 * connections to the other masters stay parked beside it and are swapped in by value, so a client
 * keeps one connection per master rather than reconnecting per name. A request
 * without keys (the doctor's, the wake-up channel's SUBSCRIBE) takes the master the
 * connection is at: a cluster's pub/sub messages reach every node.
 *
 * Redirections, within the round and its deadline:
 *   -MOVED slot host:port  the slot has a new owner: the map takes it at once (the
 *                          whole map is read again before the next request), and the
 *                          request goes there;
 *   -ASK slot host:port    the slot is being migrated and the keys are at the target:
 *                          the request goes there once, after ASKING;
 * at most DLOCK_CLUSTER_REDIRECTS of them per request. A slot in migration whose keys
 * are partly moved answers -TRYAGAIN, and a cluster that lost a slot's every master
 * -CLUSTERDOWN: both are DLOCK_ERR_UNAVAILABLE (reply.c), a failed attempt that the
 * caller's retries cover, and their words are in the message.
 *
 * Restart voting keeps a voter per master, known by its address: a master whose
 * run_id changed has restarted, and one that appeared in the map after the client
 * first read it (a replica promoted by a failover) is trusted as a Sentinel's new
 * master is, a whole lease after the client first meets it.
 *
 * All of this is the cluster topology (dlock__topo_cluster, at the end): fanout.c and
 * conn.c reach routing, redirections, the voters and the parked connections only
 * through the node's table.
 */
#include "transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MASTERS_MAX 64 /* masters one cluster node keeps track of */
/* Redirections one request follows: a slot moves once, and an ASK may be followed
 * by a MOVED when the migration ends meanwhile. */
#define DLOCK_CLUSTER_REDIRECTS 5
/* A fragmented cluster's CLUSTER SLOTS: a range per element, at most one per slot. */
#define MAP_MAX_ELEMENTS DLOCK_CLUSTER_SLOTS
#define MAP_MAX_BYTES    (8 * 1024 * 1024)

typedef struct master {
    char host[256];
    int port;
    dlock__voter voter;
    bool promoted; /* first seen in a map after the first */
} master;

/* A node's map, guarded by the node's mu. */
struct dlock__cluster {
    unsigned char owner[DLOCK_CLUSTER_SLOTS]; /* index in masters + 1; 0: no owner known */
    int nmasters;
    master masters[MASTERS_MAX];
    bool loaded; /* a map was read */
    bool stale;  /* a redirection changed it: read it again before the next request */
};

/* The connections of a cluster node's other masters, parked beside its connection. */
struct dlock__parked {
    int n;
    int evict; /* the next to close when all are in use */
    dlock__conn conns[MASTERS_MAX];
};

/* ---- slots ---------------------------------------------------------------------- */

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), the checksum Redis
 * Cluster hashes keys with. Every script call takes its keys' slot, with a cluster
 * among the servers or not, so it goes a byte at a time through a table made once
 * (a bit at a time cost W1 a measurable 2 %). */
static uint16_t g_crc_table[256];
static pthread_once_t g_crc_once = PTHREAD_ONCE_INIT;

static void crc_table_init(void)
{
    for (unsigned v = 0; v < 256; v++) {
        uint16_t crc = (uint16_t)(v << 8);
        for (int b = 0; b < 8; b++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
        g_crc_table[v] = crc;
    }
}

static uint16_t crc16(const char *buf, size_t len)
{
    pthread_once(&g_crc_once, crc_table_init);
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++)
        crc = (uint16_t)((crc << 8) ^ g_crc_table[((crc >> 8) ^ (unsigned char)buf[i]) & 0xff]);
    return crc;
}

uint16_t dlock__key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open != NULL) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(open + 1, '}', len - from);
        if (close != NULL && close > open + 1)
            return crc16(open + 1, (size_t)(close - open - 1)) % DLOCK_CLUSTER_SLOTS;
    }
    return crc16(key, len) % DLOCK_CLUSTER_SLOTS;
}

/* ---- the map -------------------------------------------------------------------- */

int dlock__cluster_new(dlock__node *node)
{
    node->cluster = dlock__calloc(1, sizeof *node->cluster);
    return node->cluster ? DLOCK_OK : DLOCK_ERR_NOMEM;
}

void dlock__cluster_free(dlock__node *node)
{
    free(node->cluster);
    node->cluster = NULL;
}

/* The index of the master at host:port, added if new (-1 when the table is full).
 * Called with the node's mu held. */
static int master_index(struct dlock__cluster *cl, const char *host, int port)
{
    for (int i = 0; i < cl->nmasters; i++)
        if (cl->masters[i].port == port && strcasecmp(cl->masters[i].host, host) == 0)
            return i;
    if (cl->nmasters == MASTERS_MAX || strlen(host) >= sizeof cl->masters[0].host)
        return -1;
    master *m = &cl->masters[cl->nmasters];
    memset(m, 0, sizeof *m);
    snprintf(m->host, sizeof m->host, "%s", host);
    m->port = port;
    m->promoted = cl->loaded;
    return cl->nmasters++;
}

/* One node's address in a CLUSTER SLOTS range: [host, port, id, ...]. An empty host
 * is the asked node's own ("" when it does not know the address it is reached by). */
static bool range_node(const redisReply *e, const char *asked, char *host, size_t hostlen,
                       int *port)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
        e->element[0]->type != REDIS_REPLY_STRING || e->element[1]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->integer < 1 || e->element[1]->integer > 65535)
        return false;
    const redisReply *name = e->element[0];
    if (strlen(name->str) != name->len)
        return false; /* a NUL inside: no address */
    const char *h = name->len > 0 ? name->str : asked;
    if (strlen(h) >= hostlen || strcmp(h, "?") == 0)
        return false;
    snprintf(host, hostlen, "%s", h);
    *port = (int)e->element[1]->integer;
    return true;
}

/* Whether a CLUSTER SLOTS reply is a map: ranges of [start, end, master, replicas...]. */
static bool slots_reply(const redisReply *rep)
{
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements == 0)
        return false;
    for (size_t k = 0; k < rep->elements; k++) {
        const redisReply *e = rep->element[k];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER || e->element[0]->integer < 0 ||
            e->element[1]->integer >= DLOCK_CLUSTER_SLOTS ||
            e->element[0]->integer > e->element[1]->integer)
            return false;
    }
    return true;
}

/* The same as a vote: whether a node's answer will do. */
static bool is_map(const dlock__req *r, int i, void *arg)
{
    (void)i;
    (void)arg;
    return slots_reply(r->reply);
}

int dlock__cluster_take_map(dlock__node *node, const redisReply *map, const char *asked,
                            dlock__err *e)
{
    struct dlock__cluster *cl = node->cluster;
    if (!slots_reply(map))
        return dlock__node_err(e, DLOCK_ERR_PROTOCOL, node, "not a slot map");
    int rc = DLOCK_OK;
    pthread_mutex_lock(&node->mu);
    memset(cl->owner, 0, sizeof cl->owner);
    for (size_t k = 0; k < map->elements && rc == DLOCK_OK; k++) {
        const redisReply *range = map->element[k];
        char host[256];
        int port, m;
        if (!range_node(range->element[2], asked, host, sizeof host, &port))
            continue; /* a master of unknown address: its slots stay unknown */
        if ((m = master_index(cl, host, port)) < 0) {
            rc = dlock__node_err(e, DLOCK_ERR_PROTOCOL, node, "more than %d masters in the cluster",
                                 MASTERS_MAX);
            break;
        }
        for (long long s = range->element[0]->integer; s <= range->element[1]->integer; s++)
            cl->owner[s] = (unsigned char)(m + 1);
    }
    cl->loaded = true;
    pthread_mutex_unlock(&node->mu);
    return rc;
}

/* Read the map: ask the masters that serve slots (up to half the places) and the seeds
 * at once. */
static int load_map(dlock__node *node, dlock__err *e)
{
    const dlock__addr *a = &node->addr;
    struct dlock__hostport hosts[DLOCK_ASK_MAX];
    char names[DLOCK_ASK_MAX / 2][256];
    int k = dlock__cluster_masters(node, hosts, names, DLOCK_ASK_MAX / 2);
    if (k > DLOCK_ASK_MAX / 2)
        k = DLOCK_ASK_MAX / 2;
    for (int i = 0; i < a->nhosts && k < DLOCK_ASK_MAX; i++)
        hosts[k++] = a->hosts[i];
    dlock__ask ask;
    dlock__ask_spec spec = {
        .from = node,
        .hosts = hosts,
        .k = k,
        .what = "cluster node",
        .user = a->user,
        .password = dlock__node_password(node),
        .tls_name = node->tls_name,
        .argc = 2,
        .argv = (const char *[]){"CLUSTER", "SLOTS"},
        .good = is_map,
        .need = 1,
        .reply_max_elements = MAP_MAX_ELEMENTS,
        .reply_max_bytes = MAP_MAX_BYTES,
    };
    int rc = dlock__ask_run(&ask, &spec, e);
    int got = -1;
    for (int i = 0; rc == DLOCK_OK && i < ask.k && got < 0; i++)
        if (ask.reqs[i].err == DLOCK_OK && is_map(&ask.reqs[i], i, NULL))
            got = i;
    if (rc == DLOCK_OK && got >= 0) {
        rc = dlock__cluster_take_map(node, ask.reqs[got].reply, hosts[got].host, e);
    } else if (rc == DLOCK_OK) {
        /* Why each node gave no map, in one message; the error the first that
         * answered gave (a refused password, a server without cluster support), else
         * DLOCK_ERR_IO for none reached. */
        rc = DLOCK_ERR_IO;
        int used = snprintf(e->msg, sizeof e->msg, "%s: no slot map from any node:", a->display);
        for (int i = 0; i < ask.k; i++) {
            dlock__req *r = &ask.reqs[i];
            const redisReply *rep = r->reply;
            char why[DLOCK_ERRMSG_MAX] = "";
            if (r->err != DLOCK_OK) {
                snprintf(why, sizeof why, "%s", r->why.msg);
                if (rc == DLOCK_ERR_IO && r->err != DLOCK_ERR_TIMEOUT)
                    rc = r->err; /* a refused password, say */
            } else if (rep->type == REDIS_REPLY_ERROR) {
                bool disabled = strstr(rep->str, "cluster support disabled") != NULL;
                snprintf(why, sizeof why, "%s: -%.100s%s", ask.display[i], rep->str,
                         disabled ? " (not a cluster node: use redis://)" : "");
                int code = dlock__server_error_code(rep->str, rep->len);
                if (rc == DLOCK_ERR_IO)
                    rc = disabled ? DLOCK_ERR_INVALID : code;
            } else {
                snprintf(why, sizeof why, "%s: not a slot map", ask.display[i]);
                if (rc == DLOCK_ERR_IO)
                    rc = DLOCK_ERR_PROTOCOL;
            }
            if (used > 0 && (size_t)used < sizeof e->msg)
                used += snprintf(e->msg + used, sizeof e->msg - (size_t)used, "%s %s", i ? ";" : "",
                                 why);
        }
    }
    dlock__ask_end(&ask);
    return rc;
}

/* Whether master i of the map serves a slot (with the node's mu held). */
static bool serves(const struct dlock__cluster *cl, int i)
{
    return memchr(cl->owner, i + 1, sizeof cl->owner) != NULL;
}

/* Whether c is at (or for) the master at host:port. */
static bool at(const dlock__conn *c, const char *host, int port)
{
    return c->port == port && strcasecmp(c->host, host) == 0;
}

/* The master for slot (-1: the one c is at if it serves a slot, else the first), into
 * host and port; the map read first when there is none, or a redirection changed it. */
static int target(dlock__conn *c, int slot, char *host, int *port, dlock__err *e)
{
    dlock__node *node = c->node;
    struct dlock__cluster *cl = node->cluster;
    pthread_mutex_lock(&node->mu);
    bool load = !cl->loaded || cl->stale;
    cl->stale = false; /* one reading per change: a failed one keeps the map it has */
    pthread_mutex_unlock(&node->mu);
    if (load) {
        int rc = load_map(node, e);
        pthread_mutex_lock(&node->mu);
        bool loaded = cl->loaded;
        pthread_mutex_unlock(&node->mu);
        if (rc != DLOCK_OK && !loaded)
            return rc;
    }
    pthread_mutex_lock(&node->mu);
    int m = -1;
    if (slot >= 0) {
        m = cl->owner[slot] - 1;
    } else {
        /* The master c is at, if it serves a slot; else the first that does. */
        for (int i = 0; i < cl->nmasters && m < 0; i++)
            if (at(c, cl->masters[i].host, cl->masters[i].port) && serves(cl, i))
                m = i;
        for (int s = 0; s < DLOCK_CLUSTER_SLOTS && m < 0; s++)
            m = cl->owner[s] - 1;
    }
    if (m >= 0) {
        snprintf(host, 256, "%s", cl->masters[m].host);
        *port = cl->masters[m].port;
    }
    pthread_mutex_unlock(&node->mu);
    if (m < 0 && slot >= 0)
        return dlock__node_err(e, DLOCK_ERR_UNAVAILABLE, node,
                               "no master serves slot %d (the cluster is down?)", slot);
    if (m < 0)
        return dlock__node_err(e, DLOCK_ERR_UNAVAILABLE, node, "no master in the slot map");
    return DLOCK_OK;
}

void dlock__cluster_suspect(dlock__node *node)
{
    pthread_mutex_lock(&node->mu);
    node->cluster->stale = true;
    pthread_mutex_unlock(&node->mu);
}

/* ---- parked connections ------------------------------------------------------------ */

/* Exchange two connections by value; the parked list stays with its place. */
static void swap(dlock__conn *a, dlock__conn *b)
{
    dlock__conn t = *a;
    *a = *b;
    *b = t;
    struct dlock__parked *p = a->parked;
    a->parked = b->parked;
    b->parked = p;
}

/* Point c at host:port: swap in its parked connection, or park c and start afresh. */
static int switch_to(dlock__conn *c, const char *host, int port)
{
    if (at(c, host, port))
        return DLOCK_OK;
    if (c->state == DLOCK_CONN_CLOSED && c->host[0] == '\0') {
        snprintf(c->host, sizeof c->host, "%s", host); /* nothing to park yet */
        c->port = port;
        return DLOCK_OK;
    }
    struct dlock__parked *p = c->parked;
    if (p == NULL && (p = c->parked = dlock__calloc(1, sizeof *p)) == NULL)
        return DLOCK_ERR_NOMEM;
    for (int i = 0; i < p->n; i++) {
        if (at(&p->conns[i], host, port)) {
            swap(c, &p->conns[i]);
            return DLOCK_OK;
        }
    }
    int k;
    if (p->n < MASTERS_MAX) {
        k = p->n++;
        dlock__conn_init(&p->conns[k], c->node);
    } else {
        k = p->evict;
        p->evict = (p->evict + 1) % MASTERS_MAX;
        dlock__conn_close(&p->conns[k]);
    }
    swap(c, &p->conns[k]);
    snprintf(c->host, sizeof c->host, "%s", host);
    c->port = port;
    return DLOCK_OK;
}

/* Free the connections parked beside c (forget: a forked child's copies, as
 * dlock__conn_forget): the topology's conn_free. */
static void parked_free(dlock__conn *c, bool forget)
{
    struct dlock__parked *p = c->parked;
    if (p == NULL)
        return;
    c->parked = NULL;
    for (int i = 0; i < p->n; i++) {
        if (forget)
            dlock__conn_forget(&p->conns[i]);
        else
            dlock__conn_free(&p->conns[i]);
    }
    free(p);
}

/* ---- routing ----------------------------------------------------------------------- */

/* Point c at the master for slot (-1: see target). */
static int point(dlock__conn *c, int slot, dlock__err *e)
{
    char host[256];
    int port = 0;
    int rc = target(c, slot, host, &port, e);
    if (rc == DLOCK_OK && (rc = switch_to(c, host, port)) != DLOCK_OK)
        dlock__node_err(e, rc, c->node, "out of memory");
    return rc;
}

/* Point c at the master that serves the request r: its key's slot's owner, or for a
 * request without a key the master c is at (any master if none). The slot map is read
 * first when the client has none or a redirection changed it. */
static int route(dlock__conn *c, const dlock__req *r, dlock__err *e)
{
    return point(c, r->keyed ? r->slot : -1, e);
}

/* Where a connection being opened goes: the master a request routed it to, or for one
 * opened without a request (the wake-up channel's) the master it is at while that
 * serves slots, else any that does. */
static int resolve(dlock__conn *c, dlock__err *e)
{
    return c->host[0] ? DLOCK_OK : point(c, -1, e);
}

bool dlock__cluster_parse_redirect(const char *str, const char *self, bool *ask, int *slot,
                                   char *host, size_t hostlen, int *port)
{
    *ask = strncmp(str, "ASK ", 4) == 0;
    if (!*ask && strncmp(str, "MOVED ", 6) != 0)
        return false;
    const char *p = str + (*ask ? 4 : 6);
    char *end;
    long s = strtol(p, &end, 10);
    if (end == p || *end != ' ' || s < 0 || s >= DLOCK_CLUSTER_SLOTS)
        return false;
    const char *addr = end + 1, *colon = strrchr(addr, ':');
    if (colon == NULL || (size_t)(colon - addr) >= hostlen)
        return false;
    long pt = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end != '\0' || pt < 1 || pt > 65535)
        return false;
    if (colon == addr && strlen(self) >= hostlen)
        return false;
    if (colon == addr)
        snprintf(host, hostlen, "%s", self);
    else
        snprintf(host, hostlen, "%.*s", (int)(colon - addr), addr);
    *slot = (int)s;
    *port = (int)pt;
    return true;
}

/* An error reply of c's: when it is -MOVED or -ASK, c now points at the master that it
 * names and r is to be sent again there (*moved); an error, with why in r->why, after
 * too many redirections. */
static int redirect(dlock__conn *c, dlock__req *r, const redisReply *reply, bool *moved)
{
    char host[256];
    int slot, port;
    bool ask;
    *moved = false;
    if (!dlock__cluster_parse_redirect(reply->str, c->host, &ask, &slot, host, sizeof host, &port))
        return DLOCK_OK;
    if (r->redirects++ == DLOCK_CLUSTER_REDIRECTS)
        return dlock__node_err(&r->why, DLOCK_ERR_UNAVAILABLE, c->node,
                               "%d redirections in one request, the last -%.100s (slots "
                               "moving?)",
                               DLOCK_CLUSTER_REDIRECTS, reply->str);
    dlock__node *node = c->node;
    struct dlock__cluster *cl = node->cluster;
    if (!ask) {
        /* The new owner now, the rest of the map before the next request. */
        pthread_mutex_lock(&node->mu);
        int m = master_index(cl, host, port);
        if (m >= 0)
            cl->owner[slot] = (unsigned char)(m + 1);
        cl->stale = true;
        pthread_mutex_unlock(&node->mu);
    }
    r->asking = ask;
    *moved = true;
    if (switch_to(c, host, port) != DLOCK_OK)
        return dlock__node_err(&r->why, DLOCK_ERR_NOMEM, node, "out of memory");
    return DLOCK_OK;
}

bool dlock__cluster_owner(dlock__node *node, int slot, char *host, size_t hostlen, int *port)
{
    pthread_mutex_lock(&node->mu);
    int m = node->cluster->owner[slot] - 1;
    if (m >= 0) {
        snprintf(host, hostlen, "%s", node->cluster->masters[m].host);
        *port = node->cluster->masters[m].port;
    }
    pthread_mutex_unlock(&node->mu);
    return m >= 0;
}

/* ---- voting ------------------------------------------------------------------------ */

/* The voter of the master c is at (NULL when the map has no such master), with the
 * node's mu held. */
static master *master_at(const dlock__conn *c)
{
    struct dlock__cluster *cl = c->node->cluster;
    for (int i = 0; i < cl->nmasters; i++)
        if (at(c, cl->masters[i].host, cl->masters[i].port))
            return &cl->masters[i];
    return NULL;
}

/* The voter of the master c is at (the node's own before the map names it), with the
 * node's mu held. Masters are never dropped from the table, so it stays valid. */
static dlock__voter *voter(const dlock__conn *c, bool *promoted)
{
    master *m = master_at(c);
    *promoted = m != NULL && m->promoted;
    return m != NULL ? &m->voter : &c->node->voter;
}

/* ---- the masters, for the doctor and the map ---------------------------------------- */

int dlock__cluster_masters(dlock__node *node, struct dlock__hostport *hosts, char (*names)[256],
                           int max)
{
    struct dlock__cluster *cl = node->cluster;
    int k = 0;
    pthread_mutex_lock(&node->mu);
    for (int i = 0; i < cl->nmasters; i++) {
        if (!serves(cl, i))
            continue;
        if (k < max) {
            snprintf(names[k], sizeof names[k], "%s", cl->masters[i].host);
            hosts[k] = (struct dlock__hostport){names[k], cl->masters[i].port};
        }
        k++;
    }
    pthread_mutex_unlock(&node->mu);
    return k;
}

/* ---- the table ----------------------------------------------------------------------- */

const dlock__topology dlock__topo_cluster = {
    .node_new = dlock__cluster_new,
    .node_free = dlock__cluster_free,
    .resolve = resolve,
    .route = route,
    .on_error = redirect,
    .voter = voter,
    .suspect = dlock__cluster_suspect,
    .conn_free = parked_free,
};
