/*
 * client.c: dlock_client, its configuration, and its free.
 *
 * A client is shared by threads. Each call takes a "connection set" (one connection
 * per node) from the pool (pool.c) for its duration and puts it back after, so calls
 * from different threads run in parallel on different sockets, and a connection is
 * only ever used by one thread at a time without any lock around the I/O. The pool
 * grows to the number of calls that were ever in flight at once, which is bounded by
 * the caller's threads.
 */
#include "internal.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Options structs only grow by taking reserved words, so that a program built against
 * an older header passes a struct of the size this library reads; these sizes are
 * those of LP64 (x86_64, aarch64). */
_Static_assert(sizeof(void *) != 8 || sizeof(dlock_config) == 136,
               "dlock_config changed size: take a reserved word instead");
_Static_assert(sizeof(void *) != 8 || sizeof(dlock_opts) == 96,
               "dlock_opts changed size: take a reserved word instead");
_Static_assert(sizeof(void *) != 8 || sizeof(dlock_holder) == 600,
               "dlock_holder changed size: take a reserved word instead");
_Static_assert(sizeof(void *) != 8 || sizeof(dlock_tls) == 80,
               "dlock_tls changed size: take a reserved word instead");

/* Check cfg and copy its values (or the defaults) into c. */
static int apply_config(dlock_client *c, const dlock_config *cfg, dlock__err *e)
{
    static const dlock_config defaults = {0};
    if (cfg == NULL)
        cfg = &defaults;
    int rc = dlock__check_reserved(cfg->reserved, sizeof cfg->reserved / sizeof *cfg->reserved,
                                   "dlock_config", e);
    if (rc != DLOCK_OK)
        return rc;
    if (cfg->timeout_ms < 0 || cfg->timeout_ms > 3600000)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "timeout_ms must be 0 (default) to 3600000");
    if (cfg->connect_timeout_ms < 0 || cfg->connect_timeout_ms > 3600000)
        return dlock__err_set(e, DLOCK_ERR_INVALID,
                              "connect_timeout_ms must be 0 (default) to 3600000");
    if (!(cfg->drift_factor >= 0 && cfg->drift_factor < 0.5))
        return dlock__err_set(e, DLOCK_ERR_INVALID, "drift_factor must be in [0, 0.5)");
    if (cfg->drift_min_ms < 0 || cfg->drift_min_ms > 60000)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "drift_min_ms must be 0 (default) to 60000");
    const char *prefix = cfg->prefix && cfg->prefix[0] ? cfg->prefix : "dlock:";
    size_t plen = strlen(prefix);
    if (plen > DLOCK_PREFIX_MAX)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "prefix longer than %d bytes",
                              DLOCK_PREFIX_MAX);
    if ((c->prefix = dlock__strdup(prefix)) == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    c->prefix_len = plen;
    if (cfg->password != NULL && cfg->password[0] != '\0' &&
        (c->rules.password = dlock__strdup(cfg->password)) == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    c->rules.timeout_us = (cfg->timeout_ms ? cfg->timeout_ms : 50) * 1000;
    c->rules.connect_timeout_us = (cfg->connect_timeout_ms ? cfg->connect_timeout_ms : 1000) * 1000;
    c->drift_factor = cfg->drift_factor > 0 ? cfg->drift_factor : DLOCK_DRIFT_FACTOR_DEFAULT;
    c->drift_min_us = (cfg->drift_min_ms ? cfg->drift_min_ms : DLOCK_DRIFT_MIN_MS_DEFAULT) * 1000;
    c->rules.strict = cfg->strict != 0;
    if (cfg->fence_mode != DLOCK_FENCE_DEFAULT && cfg->fence_mode != DLOCK_FENCE_STRICT)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "fence_mode %d is not a dlock_fence_mode",
                              cfg->fence_mode);
    c->fence_mode = cfg->fence_mode;
    if (cfg->restart_voting < DLOCK_RESTART_AUTO || cfg->restart_voting > DLOCK_RESTART_STRICT)
        return dlock__err_set(e, DLOCK_ERR_INVALID,
                              "restart_voting %d is not a dlock_restart_voting",
                              cfg->restart_voting);
    c->rules.restart_voting = cfg->restart_voting;
    if (cfg->max_lease_ms < 0 || cfg->max_lease_ms > DLOCK_TTL_MAX_MS)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "max_lease_ms must be 0 (default) to %d",
                              DLOCK_TTL_MAX_MS);
    c->rules.max_lease_ms = cfg->max_lease_ms;
    if (cfg->fence_retention_ms != 0 &&
        (cfg->fence_retention_ms < 1000 || cfg->fence_retention_ms > DLOCK_FENCE_RETENTION_MAX_MS))
        return dlock__err_set(e, DLOCK_ERR_INVALID,
                              "fence_retention_ms must be 0 (default) or 1000 to %lld",
                              (long long)DLOCK_FENCE_RETENTION_MAX_MS);
    snprintf(c->retention, sizeof c->retention, "%lld",
             (long long)(cfg->fence_retention_ms ? cfg->fence_retention_ms
                                                 : DLOCK_FENCE_RETENTION_DEFAULT_MS));
    c->rules.log = cfg->log;
    c->rules.log_user = cfg->log_user;
    const dlock_tls *tls = cfg->tls;
    if (tls != NULL) {
        rc = dlock__check_reserved(tls->reserved, sizeof tls->reserved / sizeof *tls->reserved,
                                   "dlock_tls", e);
        if (rc != DLOCK_OK)
            return rc;
        bool cert = tls->cert != NULL && tls->cert[0] != '\0';
        bool key = tls->key != NULL && tls->key[0] != '\0';
        if (cert != key)
            return dlock__err_set(e, DLOCK_ERR_INVALID, "dlock_tls: %s",
                                  cert ? "cert given without key" : "key given without cert");
        if (tls->insecure != 0 && tls->insecure != 1)
            return dlock__err_set(e, DLOCK_ERR_INVALID, "dlock_tls.insecure must be 0 or 1");
    }
    return DLOCK_OK;
}

/* The TLS context of every rediss:// node, with cfg's defaults: its files are read
 * here, once, so that a missing one is this call's error. */
static int init_tls(dlock_client *c, const dlock_config *cfg, dlock__err *e)
{
    for (int i = 0; i < c->n; i++) {
        if (!c->nodes[i].addr.tls)
            continue;
        dlock__err why;
        int rc = dlock__tls_node_init(&c->nodes[i], cfg ? cfg->tls : NULL, &why);
        if (rc == DLOCK_OK)
            continue;
        if (c->n > 1)
            return dlock__err_set(e, rc, "server %d of %d: %s: %s", i + 1, c->n,
                                  c->nodes[i].addr.display, why.msg);
        return dlock__err_set(e, rc, "%s: %s", c->nodes[i].addr.display, why.msg);
    }
    return DLOCK_OK;
}

/* Whether a nowait step can run an attempt on c's servers (dlock_client.nowait_ok). */
static bool nowait_ok(const dlock_client *c)
{
    if (c->n > 1 && c->fence_mode == DLOCK_FENCE_STRICT)
        return false;
    for (int i = 0; i < c->n; i++) {
        const dlock__addr *a = &c->nodes[i].addr;
        unsigned char ip[sizeof(struct in6_addr)];
        if (a->sentinel || a->cluster)
            return false;
        if (!a->is_unix && inet_pton(AF_INET, a->host, ip) != 1 &&
            inet_pton(AF_INET6, a->host, ip) != 1)
            return false;
    }
    return true;
}

int dlock_client_new(const char *servers, const dlock_config *cfg, dlock_client **out)
{
    dlock__err e;
    if (out == NULL)
        return dlock__err_raise(&e, dlock__err_set(&e, DLOCK_ERR_INVALID, "out is NULL"));
    *out = NULL;
    if (servers == NULL)
        return dlock__err_raise(&e, dlock__err_set(&e, DLOCK_ERR_INVALID, "servers is NULL"));
    dlock_client *c = dlock__calloc(1, sizeof *c);
    if (c == NULL)
        return dlock__err_raise(&e, dlock__err_set(&e, DLOCK_ERR_NOMEM, "out of memory"));
    c->magic = DLOCK_CLIENT_MAGIC;
    c->pid = getpid();
    c->fork_gen = dlock__fork_gen();
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->close_mu, NULL);
    dlock__cond_init(&c->idle);
    c->close_efd = -1; /* made by the first blocking call: a client needs no descriptor */
    char host[256];
    if (gethostname(host, sizeof host) != 0)
        strcpy(host, "unknown");
    host[sizeof host - 1] = '\0';
    snprintf(c->holder, sizeof c->holder, "%s:%ld", host, (long)c->pid);

    int rc = apply_config(c, cfg, &e);
    /* The backend, chosen once: a file: URL's directory, else the servers. */
    c->backend = dlock__local_url(servers) ? &dlock__backend_file : &dlock__backend_redis;
    if (rc == DLOCK_OK && c->backend == &dlock__backend_file) {
        if ((rc = dlock__local_client_new(c, servers, &e)) != DLOCK_OK) {
            dlock_client_free(c);
            return dlock__err_raise(&e, rc);
        }
        *out = c;
        return dlock__err_raise(&e, DLOCK_OK);
    }
    dlock__addr *addrs = NULL;
    if (rc == DLOCK_OK)
        rc = dlock__url_parse_list(servers, DLOCK_SERVERS_MAX, &addrs, &c->n, &e);
    if (rc == DLOCK_OK && (c->nodes = dlock__calloc((size_t)c->n, sizeof *c->nodes)) == NULL)
        rc = dlock__err_set(&e, DLOCK_ERR_NOMEM, "out of memory");
    if (rc == DLOCK_OK) {
        for (int i = 0; i < c->n; i++) {
            c->nodes[i].addr = addrs[i]; /* the node owns the strings now */
            c->nodes[i].index = i;
            c->nodes[i].rules = &c->rules;
            pthread_mutex_init(&c->nodes[i].mu, NULL);
            if (dlock__topo_attach(&c->nodes[i]) != DLOCK_OK)
                rc = dlock__err_set(&e, DLOCK_ERR_NOMEM, "out of memory");
        }
        free(addrs);
        addrs = NULL;
        c->quorum = dlock__quorum(c->n);
        c->nowait_ok = nowait_ok(c);
        if (c->rules.restart_voting == DLOCK_RESTART_AUTO)
            c->rules.restart_voting = c->n > 1 ? DLOCK_RESTART_OBSERVED : DLOCK_RESTART_OFF;
        if (rc == DLOCK_OK)
            rc = init_tls(c, cfg, &e);
    }
    if (rc == DLOCK_OK)
        rc = dlock__scripts_init(&c->scripts, &e);
    /* The channel our wake-ups come on: random, like a token, so that no other client
     * hears them. */
    char id[DLOCK_TOKEN_LEN + 1];
    if (rc == DLOCK_OK && (rc = dlock__token_new(id)) != DLOCK_OK)
        dlock__err_set(&e, rc, "getrandom: %s", strerror(errno));
    if (rc == DLOCK_OK)
        snprintf(c->wake_chan, sizeof c->wake_chan, "%swake:%s", c->prefix, id);
    if (rc != DLOCK_OK) {
        if (addrs != NULL) {
            for (int i = 0; i < c->n; i++)
                dlock__addr_clear(&addrs[i]);
            free(addrs);
            c->n = 0;
        }
        dlock_client_free(c);
        return dlock__err_raise(&e, rc);
    }
    *out = c;
    return dlock__err_raise(&e, DLOCK_OK);
}

/* Make every blocking call on c end (its sleep watches close_efd, which stays
 * readable from now on), and wait until each has returned. A call that begins after
 * this finds closing set and returns at once. */
static void end_blocking_calls(dlock_client *c)
{
    pthread_mutex_lock(&c->close_mu);
    c->closing = true;
    uint64_t one = 1;
    if (c->close_efd >= 0) {
        ssize_t w = write(c->close_efd, &one, sizeof one);
        (void)w; /* an eventfd refuses a write only at 2^64 - 2 */
    }
    while (c->blocking > 0)
        pthread_cond_wait(&c->idle, &c->close_mu);
    pthread_mutex_unlock(&c->close_mu);
}

void dlock_client_free(dlock_client *c)
{
    if (c == NULL)
        return;
    assert(c->magic == DLOCK_CLIENT_MAGIC);
    if (c->magic != DLOCK_CLIENT_MAGIC)
        return;
    /* Release what is still held. A forked child must not: those locks are its
     * parent's, so it only frees its copies of the handles. */
    bool owner = !dlock__client_forked(c);
    if (owner)
        end_blocking_calls(c);
    if (owner) {
        dlock__watchdog_stop(c); /* no renewal may race the releases below */
        dlock__linger_stop(c);   /* nor a lingering release: they go with the others */
    }
    if (!owner) {
        /* In a forked child, a mutex may have been copied locked: take none. */
        for (dlock_lock *l = c->locks, *next; l != NULL; l = next) {
            next = l->next;
            dlock_lock_detach(l);
        }
        c->locks = NULL;
        dlock__watchdog_forget(c);
        dlock__linger_forget(c);
        dlock__wait_forget(c);
    }
    while (owner) {
        pthread_mutex_lock(&c->mu);
        dlock_lock *l = c->locks;
        pthread_mutex_unlock(&c->mu);
        if (l == NULL)
            break;
        /* Freeing a client is not a failing call: the caller's dlock_errmsg stays. */
        dlock__err ignored;
        dlock__lock_release(l, &ignored);
    }
    if (owner)
        dlock__wait_stop(c);
    if (c->pipe_set != NULL) {
        /* What is queued on the pipes (a give-back, a leaving) goes as far as the
         * sockets take it now. */
        if (owner)
            dlock__pipes_pump(c->pipes, 0);
        for (int i = 0; i < c->n; i++) {
            if (owner)
                dlock__conn_free(&c->pipe_set->conns[i]);
            else
                dlock__conn_forget(&c->pipe_set->conns[i]);
        }
        dlock__pipes_free(c->pipes);
        free(c->pipes);
        free(c->pipe_set);
    }
    while (c->pool != NULL) {
        dlock__connset *s = c->pool;
        c->pool = s->next;
        for (int i = 0; i < c->n; i++) {
            if (owner)
                dlock__conn_free(&s->conns[i]);
            else
                dlock__conn_forget(&s->conns[i]);
        }
        if (s->epfd >= 0)
            close(s->epfd); /* after fork() too: the parent's epoll set stays open */
        free(s);
    }
    for (int i = 0; i < c->n; i++) {
        dlock__tls_node_free(&c->nodes[i]);
        dlock__topo_detach(&c->nodes[i]);
        dlock__addr_clear(&c->nodes[i].addr);
        if (owner)
            pthread_mutex_destroy(&c->nodes[i].mu);
    }
    free(c->nodes);
    if (c->backend->client_free != NULL)
        c->backend->client_free(c);
    free(c->prefix);
    if (c->rules.password != NULL) {
        memset(c->rules.password, 0, strlen(c->rules.password));
        free(c->rules.password);
    }
    if (owner) { /* a copy inherited locked must not be destroyed (undefined) */
        pthread_mutex_destroy(&c->mu);
        pthread_mutex_destroy(&c->close_mu);
        pthread_cond_destroy(&c->idle);
    }
    if (c->close_efd >= 0)
        close(c->close_efd); /* a forked child's copy: the parent's stays open */
    c->magic = 0;
    free(c);
}

int dlock_client_nservers(const dlock_client *c)
{
    return c != NULL && c->magic == DLOCK_CLIENT_MAGIC ? c->backend->nservers(c) : 0;
}

/* ---- the Redis backend --------------------------------------------------------- */

/* dlock__backend_redis's gate: every call runs on the servers. */
static int redis_runs(dlock_client *c, enum dlock__gate g, dlock__err *e)
{
    (void)c, (void)g, (void)e;
    return DLOCK_OK;
}

static int redis_nservers(const dlock_client *c)
{
    return c->n;
}

/* Its entries are the calls of the calls layer (internal.h): what each does on the
 * servers. Nothing of its own to free: dlock_client_free frees the nodes and the pool,
 * which every client has (none, for another backend's). */
const dlock__backend dlock__backend_redis = {
    .acquire = dlock__redis_acquire,
    .acquire_start = dlock__redis_acquire_start,
    .release = dlock__redis_release,
    .release_start = dlock__redis_release_start,
    .detach = dlock__redis_detach,
    .extend = dlock__redis_extend,
    .extend_start = dlock__redis_extend_start,
    .check = dlock__redis_check,
    .check_start = dlock__redis_check_start,
    .slot_claim = dlock__redis_slot_claim,
    .remaining_ms = dlock__redis_remaining_ms,
    .hold_free = NULL,
    .inspect = dlock__redis_inspect,
    .inspect_shared = dlock__redis_inspect_shared,
    .inspect_start = dlock__redis_inspect_start,
    .list = dlock__redis_list,
    .where = dlock__redis_where,
    .nservers = redis_nservers,
    .client_free = NULL,
    .gate = redis_runs,
};
