/*
 * node.c: what the client knows of one server beyond its address, learned from the
 * INFO reply that ends every connection's handshake.
 *
 *   - restart-aware voting: a server whose run_id changed has restarted and may have
 *     forgotten locks it granted, so its grants do not count until it has been up
 *     longer than any lease it could have forgotten (docs/guarantees.md);
 *   - eviction: a maxmemory-policy of allkeys-* or volatile-* can evict held lock keys
 *     (and allkeys-* the fence counters): reported once per server through the log
 *     callback, and in strict mode the server is refused;
 *   - INFO refused by an ACL: reported once; locking works without it.
 *
 * It also holds the direct topology (dlock__topo_direct: a redis://, rediss:// or unix
 * socket URL, whose server is the one it names), and the generic side of the
 * topologies' restart voters: whose voter a connection's server has.
 */
#include "transport.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dlock__node_err(dlock__err *e, int err, const dlock__node *node, const char *fmt, ...)
{
    int used = snprintf(e->msg, sizeof e->msg, "%s: ", node->addr.display);
    if (used < 0 || (size_t)used >= sizeof e->msg)
        return err;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg + used, sizeof e->msg - (size_t)used, fmt, ap);
    va_end(ap);
    return err;
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

bool dlock__info_field(const redisReply *r, const char *field, char *out, size_t n)
{
    size_t flen = strlen(field);
    for (const char *p = r->str; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, field, flen) == 0 && p[flen] == ':') {
            const char *v = p + flen + 1;
            size_t len = strcspn(v, "\r\n");
            if (len >= n)
                len = n - 1;
            memcpy(out, v, len);
            out[len] = '\0';
            return true;
        }
    }
    return false;
}

/* ---- the direct topology ---------------------------------------------------------- */

/* A direct URL's server is the host it names (a unix socket needs no host). */
static int direct_resolve(dlock__conn *c, dlock__err *e)
{
    (void)e;
    const dlock__addr *a = &c->node->addr;
    if (!a->is_unix) {
        snprintf(c->host, sizeof c->host, "%s", a->host);
        c->port = a->port;
    }
    return DLOCK_OK;
}

/* One server, always the same: nothing to route, redirect, suspect or park. */
const dlock__topology dlock__topo_direct = {
    .resolve = direct_resolve,
};

/* The voter of the server c is at, as c's topology names it, with the node's mu held. */
static dlock__voter *voter_of(const dlock__conn *c, bool *promoted)
{
    const dlock__topology *t = c->node->topo;
    *promoted = false;
    return t->voter != NULL ? t->voter(c, promoted) : &c->node->voter;
}

bool dlock__conn_votes(const dlock__conn *c, int64_t now)
{
    dlock__node *node = c->node;
    bool promoted;
    pthread_mutex_lock(&node->mu);
    bool v = voter_of(c, &promoted)->votes_from_us <= now;
    pthread_mutex_unlock(&node->mu);
    return v;
}

/* ---- INFO ------------------------------------------------------------------------- */

/* Take what INFO says of the server whose restart voter is v (promoted: one that took
 * over from another after the client first met the node, trusted as a Sentinel's new
 * master is). */
static int take_info(dlock__node *node, dlock__voter *v, bool promoted, const redisReply *r,
                     dlock__err *e)
{
    const dlock__node_rules *rules = node->rules;
    bool named = node->topo->named_master;
    if (r->type == REDIS_REPLY_ERROR &&
        starts_with(r->str, "NOAUTH")) /* no password given to a server that needs one */
        return dlock__node_err(e, DLOCK_ERR_AUTH, node, "%.200s", r->str);
    if (r->type == REDIS_REPLY_ERROR &&
        dlock__server_error_code(r->str, r->len) == DLOCK_ERR_UNAVAILABLE &&
        strstr(r->str, "max number of clients") != NULL)
        return dlock__node_err(e, DLOCK_ERR_UNAVAILABLE, node, "%.200s", r->str);
    if (r->type == REDIS_REPLY_ERROR) {
        /* INFO may be denied by an ACL (reported once per node; locking works without
         * it); any other error (-LOADING, -BUSY) is passing: the next connection asks
         * again, so the eviction check is not lost. */
        if (!starts_with(r->str, "NOPERM"))
            return DLOCK_OK;
        pthread_mutex_lock(&node->mu);
        bool first = !node->info_refused_reported;
        node->info_refused_reported = true;
        pthread_mutex_unlock(&node->mu);
        if (first)
            dlock__rules_log(rules, DLOCK_LOG_WARN,
                             "%s: INFO refused (%.100s): cannot check maxmemory-policy",
                             node->addr.display, r->str);
        return DLOCK_OK;
    }
    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS)
        return dlock__node_err(e, DLOCK_ERR_PROTOCOL, node, "INFO: unexpected reply type %d",
                               r->type);
    char policy[64] = "", run_id[41] = "", uptime[24] = "", role[16] = "";
    /* A Sentinel's answer may be a moment old: a demoted master must not take locks
     * that its replication would then overwrite. */
    if (named && dlock__info_field(r, "role", role, sizeof role) && strcmp(role, "master") != 0)
        return dlock__node_err(e, DLOCK_ERR_UNAVAILABLE, node,
                               "the Sentinels named a %s, not a master (a failover going on?)",
                               role);
    dlock__info_field(r, "maxmemory_policy", policy, sizeof policy);
    dlock__info_field(r, "run_id", run_id, sizeof run_id);
    dlock__info_field(r, "uptime_in_seconds", uptime, sizeof uptime);
    bool evicting = strncmp(policy, "allkeys-", 8) == 0 || strncmp(policy, "volatile-", 9) == 0;

    /* Restart-aware voting (docs/guarantees.md): a node whose run_id changed has
     * restarted and may have forgotten locks it granted, so its grants must not count
     * until it has been up longer than any lease it could have forgotten. */
    int64_t now = dlock__now_us();
    int64_t wait_ms =
        dlock__restart_wait_ms(dlock__rules_max_lease_ms(rules), strtoll(uptime, NULL, 10));
    pthread_mutex_lock(&node->mu);
    bool known = v->run_id[0] != '\0';
    bool restarted = known && run_id[0] != '\0' && strcmp(v->run_id, run_id) != 0;
    /* A Sentinel's new master is a replica that was promoted: up for long, yet it may
     * lack the last grants of the old master (replication is asynchronous, and the old
     * master took writes until it was demoted). Its uptime says nothing: a whole lease
     * from now. So for a cluster's master first met after it took over slots. */
    promoted = promoted && !known;
    if ((restarted && named) || promoted)
        wait_ms = dlock__rules_max_lease_ms(rules);
    bool distrust =
        restarted || promoted || (!known && rules->restart_voting == DLOCK_RESTART_STRICT);
    if (rules->restart_voting != DLOCK_RESTART_OFF && distrust && wait_ms > 0)
        v->votes_from_us = now + wait_ms * 1000;
    bool report = evicting && !node->policy_reported;
    node->policy_reported |= evicting;
    node->evicting = evicting;
    if (run_id[0] != '\0')
        memcpy(v->run_id, run_id, sizeof run_id);
    pthread_mutex_unlock(&node->mu);
    if (restarted || promoted)
        dlock__rules_log(rules, DLOCK_LOG_WARN, "%s %s (%s, up %s s)%s", node->addr.display,
                         named || promoted ? "has a new master" : "restarted",
                         promoted ? "it took over slots" : "run_id changed", uptime,
                         rules->restart_voting != DLOCK_RESTART_OFF && wait_ms > 0
                             ? (named || promoted
                                    ? ": its grants do not count for the longest lease"
                                    : ": its grants do not count until it has been up for "
                                      "the longest lease")
                             : "");
    if (report)
        dlock__rules_log(rules, rules->strict ? DLOCK_LOG_ERROR : DLOCK_LOG_WARN,
                         "%s: maxmemory-policy is %s: the server may evict lock keys%s and lose "
                         "locks; use noeviction",
                         node->addr.display, policy, policy[0] == 'a' ? " and fence counters" : "");
    if (evicting && rules->strict)
        return dlock__node_err(e, DLOCK_ERR_UNAVAILABLE, node,
                               "maxmemory-policy %s can evict lock keys (strict mode)", policy);
    return DLOCK_OK;
}

int dlock__conn_on_info(dlock__conn *c, const redisReply *r, dlock__err *e)
{
    dlock__node *node = c->node;
    bool promoted;
    pthread_mutex_lock(&node->mu);
    dlock__voter *v = voter_of(c, &promoted);
    pthread_mutex_unlock(&node->mu);
    /* A topology never drops a voter (a cluster keeps every master it met), so v stays
     * valid without the lock. */
    return take_info(node, v, promoted, r, e);
}

int64_t dlock__restart_wait_ms(int64_t max_lease_ms, long long uptime_s)
{
    /* uptime_in_seconds is the server's clock now less its clock at the start, each
     * read in whole seconds: 1 can be read a moment after the start, so the server has
     * been up for more than uptime_s - 1 seconds and no more can be known. Bounded (a
     * broken server could overflow the product): ten years of uptime is more than any
     * lease to wait out. */
    long long surely_s = uptime_s < 1 ? 0 : uptime_s > 315360000 ? 315360000 : uptime_s - 1;
    return max_lease_ms - surely_s * 1000;
}

char *dlock__node_password(const dlock__node *node)
{
    return node->addr.password ? node->addr.password : node->rules->password;
}

int64_t dlock__rules_max_lease_ms(const dlock__node_rules *r)
{
    if (r->max_lease_ms > 0)
        return r->max_lease_ms;
    return atomic_load_explicit(&r->max_ttl_used_ms, memory_order_relaxed);
}

void dlock__rules_note_ttl(dlock__node_rules *r, int64_t ttl_ms)
{
    int64_t seen = atomic_load_explicit(&r->max_ttl_used_ms, memory_order_relaxed);
    while (ttl_ms > seen &&
           !atomic_compare_exchange_weak_explicit(&r->max_ttl_used_ms, &seen, ttl_ms,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

void dlock__rules_log(const dlock__node_rules *r, int level, const char *fmt, ...)
{
    if (r->log == NULL)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->log(r->log_user, level, msg);
}
