/*
 * doctor_judge.c: what `dlock doctor` makes of the servers' facts: pure code over
 * dlock_server_facts, so that every rule is unit-tested with facts no real server
 * could be made to give here (an old version, skewed clocks).
 *
 *   risk  a way to lose mutual exclusion or the fences' order (or no way to tell: a
 *         server that cannot be asked); any risk makes the exit status 1;
 *   note  something slower or weaker than it could be, which the library covers.
 *
 * Whether persistence is a risk depends on N: with one server, a restart that forgets
 * a held lock hands the name to a second holder; with several, restart voting keeps a
 * restarted server's grants from counting until the longest lease has passed (and the
 * fences' TIME floor keeps them increasing either way).
 */
#include "doctor.h"
#include "duration.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void add(cli_findings *fs, int server, bool risk, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void add(cli_findings *fs, int server, bool risk, const char *kind, const char *fmt, ...)
{
    if (fs->n == CLI_FINDINGS_MAX)
        return;
    cli_finding *f = &fs->f[fs->n++];
    f->server = server;
    f->risk = risk;
    f->kind = kind;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->text, sizeof f->text, fmt, ap);
    va_end(ap);
    fs->risks += risk;
}

/* major * 100 + minor of "7.0.15"; -1 when unknown. */
static int version_of(const char *v)
{
    int major, minor;
    if (sscanf(v, "%d.%d", &major, &minor) != 2 || major < 0 || minor < 0 || minor > 99)
        return -1;
    return major * 100 + minor;
}

static void judge_server(cli_findings *fs, int i, const dlock_server_facts *f, int n)
{
    if (f->tls && !f->tls_verified)
        add(fs, i, true, "tls",
            "TLS without verification (insecure=1): anyone on the path can pose as the "
            "server and grant locks it does not hold. Fix: cacert= (or --cacert) with the "
            "server's CA, and sni= when the certificate names another host");
    if (f->error != DLOCK_OK) {
        add(fs, i, true, "unreachable",
            "cannot be asked: %s (%s); nothing about it can be checked, and %s. Fix: "
            "make it reachable, or drop it from the list",
            dlock_strerror(f->error), f->detail,
            n == 1 ? "every lock call fails while it is down"
                   : "a quorum needs one server fewer to fail");
        return;
    }
    if (f->version[0] == '\0') {
        add(fs, i, false, "info",
            "INFO was refused (an ACL?): its role, eviction policy and persistence cannot "
            "be checked. Fix: allow INFO to the lock user (+info)");
    }
    int v = version_of(f->version);
    if (v >= 0 && v < 302)
        add(fs, i, true, "version",
            "Redis %s cannot write after TIME in a script: every acquire fails. Fix: "
            "Redis 7.0 or later",
            f->version);
    else if (v >= 0 && v < 700)
        add(fs, i, false, "version",
            "Redis %s is older than 7.0 (SET NX GET) and 6.2 (SET GET): acquires take "
            "a slower path of more commands, as safe. Fix: Redis 7.0 or later",
            f->version);
    if (strcmp(f->role, "slave") == 0)
        add(fs, i, true, "replica",
            "a replica: it refuses writes (READONLY), or, if writable, keeps locks its "
            "master never sees. Fix: name the master");
    if (f->cluster == 1 && f->cluster_masters == 0)
        add(fs, i, true, "cluster",
            "a Redis Cluster node: names whose slot another master serves are refused "
            "(MOVED). Fix: name it as a cluster (redis-cluster://host:port), or a "
            "standalone server");
    const char *policy = f->maxmemory_policy;
    if (policy[0] != '\0' && strcmp(policy, "noeviction") != 0) {
        if (f->maxmemory > 0)
            add(fs, i, true, "eviction",
                "maxmemory-policy %s can evict lock keys and fence counters once maxmemory "
                "(%" PRId64 " bytes) is reached: a held lock vanishes and a second holder "
                "takes it. Fix: CONFIG SET maxmemory-policy noeviction (and in redis.conf)",
                policy, f->maxmemory);
        else
            add(fs, i, false, "eviction",
                "maxmemory-policy %s would evict lock keys once a maxmemory is set (none "
                "is now). Fix: maxmemory-policy noeviction",
                policy);
    }
    /* With N > 1, restart voting and the fences' TIME floor carry a restart. */
    bool alone = n == 1;
    const char *carry = "restart voting keeps its grants from counting until the longest "
                        "lease has passed, and fences keep increasing (TIME floor)";
    if (f->aof == 0)
        add(fs, i, alone, "persistence",
            "persistence off (appendonly no): a restart forgets every held lock, %s. Fix: "
            "appendonly yes, appendfsync always",
            alone ? "and a second holder can take one while the first still works "
                    "(fences still increase: a fenced resource refuses the first)"
                  : carry);
    else if (f->aof == 1 && f->appendfsync[0] != '\0' && strcmp(f->appendfsync, "always") != 0)
        add(fs, i, alone, "persistence",
            "appendfsync %s: a crash forgets the locks of its last second or so, %s. Fix: "
            "appendfsync always",
            f->appendfsync, alone ? "and a second holder can take one of them" : carry);
    else if (f->aof == 1 && f->appendfsync[0] == '\0')
        add(fs, i, false, "persistence",
            "appendfsync cannot be read (CONFIG refused): a crash may forget the last "
            "locks unless it is always. Fix: check it with the provider");
}

/* A server whose master a replica may replace (what, the start of the sentence: who
 * fails over): what that may cost a lock. */
static void judge_failover(cli_findings *fs, int i, int n, const char *what)
{
    bool alone = n == 1;
    add(fs, i, alone, "failover",
        "%s can lose a lock granted just before it, and the new master grants the name "
        "again while its holder still works; %s. Fix: %s",
        what,
        alone ? "fences keep increasing, so a fenced resource refuses the first holder"
              : "restart voting keeps the new master's grants from counting until the "
                "longest lease has passed",
        alone ? "fence the resource (dlock_fenced_set), set min-replicas-to-write 1 to narrow "
                "the window, or lock on a quorum of three servers"
              : "nothing more; min-replicas-to-write 1 narrows the window");
}

/* A master behind Sentinels: what a failover may cost, and whether one can happen. */
static void judge_sentinel(cli_findings *fs, int i, const dlock_server_facts *f, int n)
{
    if (f->sentinels == 0)
        return;
    judge_failover(fs, i, n,
                   "a master behind Sentinels: replication is asynchronous, so a failover");
    if (f->sentinels_up < f->sentinels)
        add(fs, i, false, "sentinel",
            "%d of its %d Sentinels answered: with none, the master cannot be found after a "
            "failover or a broken connection, and every lock call on it fails. Fix: make "
            "them reachable, or list the ones that run",
            f->sentinels_up, f->sentinels);
    if (f->sentinel_quorum == 0)
        add(fs, i, false, "sentinel-quorum",
            "its Sentinels cannot fail the master over (%s): if it fails, it stays down and "
            "every lock call on it fails. Fix: at least three Sentinels, a quorum that a "
            "majority of them can reach",
            f->sentinel_detail);
    if (f->error == DLOCK_OK && f->replicas == 0)
        add(fs, i, false, "replicas",
            "the master has no replica connected: a failover has nothing to promote. Fix: "
            "a replica (replicaof) that its Sentinels know");
}

/* A whole Redis Cluster: what a failover in it may cost, and whether it serves all. */
static void judge_cluster(cli_findings *fs, int i, const dlock_server_facts *f, int n)
{
    if (f->cluster_masters == 0)
        return;
    judge_failover(fs, i, n,
                   "a Redis Cluster: replication to its replicas is asynchronous, so the "
                   "failover of a master");
    if (f->cluster_ok == 0)
        add(fs, i, false, "cluster-state",
            "cluster_state is %s: some slots have no master that serves them, and every "
            "lock call on a name in them fails (CLUSTERDOWN). Fix: bring the failed "
            "masters back, or assign their slots (redis-cli --cluster fix)",
            f->cluster_state);
    if (f->cluster_masters_up < f->cluster_masters)
        add(fs, i, false, "cluster-masters",
            "%d of its %d masters answered: names in the silent masters' slots cannot be "
            "locked, and their policies and persistence are not checked. Fix: make them "
            "reachable from here",
            f->cluster_masters_up, f->cluster_masters);
    if (f->cluster_ok < 0)
        add(fs, i, false, "cluster-state",
            "CLUSTER INFO could not be read (an ACL?): whether every slot is served cannot "
            "be checked. Fix: allow CLUSTER INFO to the lock user");
}

/* The servers' clocks, pairwise through their offsets from this host: the default
 * fence mode needs them closer than the shortest lease, and drift makes a margin
 * wise. */
static void judge_clocks(cli_findings *fs, const dlock_server_facts *f, int n, int64_t ttl_ms)
{
    int lo = -1, hi = -1;
    for (int i = 0; i < n; i++) {
        if (f[i].error != DLOCK_OK || f[i].clock_error_us < 0)
            continue;
        if (lo < 0 || f[i].clock_offset_us < f[lo].clock_offset_us)
            lo = i;
        if (hi < 0 || f[i].clock_offset_us > f[hi].clock_offset_us)
            hi = i;
    }
    if (lo < 0 || lo == hi)
        return;
    int64_t apart = f[hi].clock_offset_us - f[lo].clock_offset_us;
    int64_t sure = apart - f[hi].clock_error_us - f[lo].clock_error_us;
    if (sure * CLI_CLOCK_FRACTION <= ttl_ms * 1000)
        return;
    char ttl[32];
    add(fs, -1, true, "clock",
        "the clocks of %s and %s are %.1f ms apart, more than a tenth of the shortest "
        "lease (%s): the fence of a lock taken after its holder crashed can come out "
        "lower than the crashed holder's once they are a lease apart. Fix: NTP (chrony) "
        "on the servers, or the strict fence mode (DLOCK_FENCE_STRICT: no clock "
        "assumption)",
        f[lo].server, f[hi].server, (double)apart / 1000.0,
        cli_format_duration(ttl_ms, ttl, sizeof ttl));
}

void cli_doctor_judge(const dlock_server_facts *f, int n, int64_t ttl_ms, cli_findings *out)
{
    out->n = out->risks = 0;
    for (int i = 0; i < n; i++) {
        judge_server(out, i, &f[i], n);
        judge_sentinel(out, i, &f[i], n);
        judge_cluster(out, i, &f[i], n);
    }
    judge_clocks(out, f, n, ttl_ms);
}
