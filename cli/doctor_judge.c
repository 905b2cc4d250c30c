/*
 * doctor_judge.c: what `dlock doctor` makes of the servers' facts: pure code over
 * dlock_server_facts, so that every rule is unit-tested with facts no real server
 * could be made to give here (an old version, skewed clocks).
 *
 *   risk  a way to lose mutual exclusion or the fences' order, or a server that
 *         cannot be asked at all, or is no lock server (a dlockd): every lock call on
 *         it fails, and nothing about it can be told; any risk makes the exit status 1;
 *   note  something slower or weaker than it could be, which the library covers; or a
 *         fact the server would not give (INFO or CONFIG refused, a field missing),
 *         which is unknown: said so, with what it hides, and counted apart so that the
 *         summary never passes it as fine. An unknown fact is a note rather than a risk
 *         because managed services hide some on purpose, and a check that fails on
 *         every one of them would be ignored; the fix says how to check it by hand.
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

static void vadd(cli_findings *fs, int server, bool risk, bool unknown, const char *kind,
                 const char *fmt, va_list ap)
{
    if (fs->n == CLI_FINDINGS_MAX)
        return;
    cli_finding *f = &fs->f[fs->n++];
    f->server = server;
    f->risk = risk;
    f->unknown = unknown;
    f->kind = kind;
    vsnprintf(f->text, sizeof f->text, fmt, ap);
    fs->risks += risk;
    fs->unknowns += unknown;
}

static void add(cli_findings *fs, int server, bool risk, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void add(cli_findings *fs, int server, bool risk, const char *kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vadd(fs, server, risk, false, kind, fmt, ap);
    va_end(ap);
}

/* A fact the server would not give: a note whose text says "unknown", what could not
 * be read, what that hides, and how to check it otherwise. */
static void unknown(cli_findings *fs, int server, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void unknown(cli_findings *fs, int server, const char *kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vadd(fs, server, false, true, kind, fmt, ap);
    va_end(ap);
}

/* major * 100 + minor of "7.0.15"; -1 when unknown. */
static int version_of(const char *v)
{
    int major, minor;
    if (sscanf(v, "%d.%d", &major, &minor) != 2 || major < 0 || minor < 0 || minor > 99)
        return -1;
    return major * 100 + minor;
}

/* The length of a URL's scheme ("rediss" of "rediss://..."), so that a fix is written
 * as the user's own URL would be; 0 when it has none. */
static int scheme_len(const char *url)
{
    const char *p = strstr(url, "://");
    return p != NULL && p - url < 32 ? (int)(p - url) : 0;
}

/* The fix for a server that could not be asked, from why (its error and the detail
 * the library gave): a refused password or an unverified certificate is mended in the
 * URL, not by making the server reachable. */
static void fix_for(const dlock_server_facts *f, char *out, size_t len)
{
    const char *d = f->detail;
    int sl = scheme_len(f->server);
    const char *scheme = sl > 0 ? f->server : "redis";
    if (sl == 0)
        sl = 5;
    /* unix://[:password@]/path: a socket's path where others have a host and port. */
    const char *where = sl == 4 && strncmp(scheme, "unix", 4) == 0 ? "/PATH" : "HOST:PORT";
    if (f->error == DLOCK_ERR_AUTH && strstr(d, "chain is not trusted") != NULL)
        snprintf(out, len,
                 "give the CA that signed its certificate with cacert=FILE in the URL "
                 "(%.*s://HOST:PORT?cacert=FILE), or --cacert FILE; cacertdir=DIR for a "
                 "directory of CAs",
                 sl, scheme);
    else if (f->error == DLOCK_ERR_AUTH && strstr(d, "host name mismatch") != NULL)
        snprintf(out, len,
                 "sni=NAME in the URL (or --sni NAME), NAME a name its certificate holds, or "
                 "name the server by one");
    else if (f->error == DLOCK_ERR_AUTH && strstr(d, "TLS: the server's certificate has") != NULL)
        snprintf(out, len, "a certificate valid now on the server, and a right clock here");
    else if (f->error == DLOCK_ERR_AUTH && strstr(d, "refused this client's certificate") != NULL)
        snprintf(out, len,
                 "a client certificate the server trusts, as cert=FILE&key=FILE in the URL "
                 "(or --cert FILE --key FILE)");
    else if (f->error == DLOCK_ERR_AUTH && strstr(d, "Sentinel") != NULL)
        snprintf(out, len,
                 "the Sentinels' password as sentinel_password=PASSWORD (and "
                 "sentinel_user=USER) in the URL; the master's as %.*s://:PASSWORD@... or "
                 "in DLOCK_PASSWORD",
                 sl, scheme);
    else if (f->error == DLOCK_ERR_AUTH && strstr(d, "NOPERM") != NULL)
        snprintf(out, len,
                 "allow the lock user the command refused (ACL SETUSER USER +COMMAND), or "
                 "name another user");
    else if (f->error == DLOCK_ERR_AUTH)
        snprintf(out, len,
                 "set its password in the URL (%.*s://:PASSWORD@%s, or "
                 "%.*s://USER:PASSWORD@%s for an ACL user) or in DLOCK_PASSWORD (for every "
                 "server whose URL has none)",
                 sl, scheme, where, sl, scheme, where);
    else if (f->error == DLOCK_ERR_PROTOCOL && strstr(d, "not a TLS port") != NULL)
        snprintf(out, len, "redis:// for a port without TLS, rediss:// for its TLS port");
    else if (f->error == DLOCK_ERR_INVALID)
        snprintf(out, len, "correct the URL (the reason says which part is wrong)");
    else
        snprintf(out, len, "make it reachable, or drop it from the list");
}

/* A server that could not be asked: a dlockd (dlock_probe says so), or
 * any other failure, with the fix for its reason. */
static void judge_unasked(cli_findings *fs, int i, const dlock_server_facts *f, int n)
{
    if (f->dlockd) {
        const char *version = f->version;
        add(fs, i, true, "dlockd",
            "is a dlockd (version %s): a client of lock servers, not a lock server. It runs "
            "none of the scripts dlock sends, so every lock call on it fails, and its INFO "
            "says nothing of the servers that hold the locks. Fix: give dlock the Redis "
            "servers that dlockd uses (its -s list), or lock through dlockd with its own "
            "LOCK command",
            version);
        return;
    }
    char fix[300];
    fix_for(f, fix, sizeof fix);
    add(fs, i, true, "unreachable",
        "cannot be asked: %s (%s); nothing about it can be checked, and %s. Fix: %s",
        dlock_strerror(f->error), f->detail,
        n == 1 ? "every lock call fails while it cannot be asked"
               : "a quorum needs one server fewer to fail",
        fix);
}

/* True when INFO gave any of its facts: else one note says it was refused, rather than
 * one per fact. */
static bool info_answered(const dlock_server_facts *f)
{
    return f->version[0] != '\0' || f->role[0] != '\0' || f->maxmemory_policy[0] != '\0' ||
           f->aof >= 0 || f->cluster >= 0;
}

static void judge_version(cli_findings *fs, int i, const dlock_server_facts *f)
{
    int v = version_of(f->version);
    if (v < 0)
        unknown(fs, i, "version",
                "unknown version (%s%s%s): whether it runs the scripts dlock sends cannot be "
                "checked. Fix: Redis 7.0 or later, checked by hand (redis-server --version)",
                f->version[0] ? "INFO's redis_version is \"" : "no redis_version in its INFO",
                f->version, f->version[0] ? "\"" : "");
    else if (v < 302)
        add(fs, i, true, "version",
            "Redis %s cannot write after TIME in a script: every acquire fails. Fix: "
            "Redis 7.0 or later",
            f->version);
    else if (v < 700)
        add(fs, i, false, "version",
            "Redis %s is older than 7.0 (SET NX GET) and 6.2 (SET GET): acquires take "
            "a slower path of more commands, as safe. Fix: Redis 7.0 or later",
            f->version);
}

static void judge_role(cli_findings *fs, int i, const dlock_server_facts *f)
{
    if (strcmp(f->role, "slave") == 0)
        add(fs, i, true, "replica",
            "a replica: it refuses writes (READONLY), or, if writable, keeps locks its "
            "master never sees. Fix: name the master");
    else if (strcmp(f->role, "master") != 0)
        unknown(fs, i, "role",
                "unknown role (%s%s%s): whether it is a replica, which refuses writes or "
                "keeps locks its master never sees, cannot be checked. Fix: check with ROLE "
                "that it is a master",
                f->role[0] ? "INFO's role is \"" : "no role in its INFO", f->role,
                f->role[0] ? "\"" : "");
    if (f->cluster == 1 && f->cluster_masters == 0)
        add(fs, i, true, "cluster",
            "a Redis Cluster node: names whose slot another master serves are refused "
            "(MOVED). Fix: name it as a cluster (redis-cluster://host:port), or a "
            "standalone server");
    else if (f->cluster < 0 && f->cluster_masters == 0)
        unknown(fs, i, "cluster",
                "unknown cluster_enabled (not in its INFO): whether it is a Redis Cluster "
                "node, which refuses names whose slot another master serves (MOVED), cannot "
                "be checked. Fix: check with INFO cluster; name a cluster as "
                "redis-cluster://host:port");
}

static void judge_eviction(cli_findings *fs, int i, const dlock_server_facts *f)
{
    const char *policy = f->maxmemory_policy;
    if (policy[0] == '\0')
        unknown(fs, i, "eviction",
                "unknown maxmemory-policy (not in its INFO): whether it can evict lock keys "
                "and fence counters, so that a held lock vanishes and a second holder takes "
                "it, cannot be checked. Fix: make sure it is noeviction (CONFIG GET "
                "maxmemory-policy, or ask the provider)");
    else if (strcmp(policy, "noeviction") == 0)
        return;
    else if (f->maxmemory > 0)
        add(fs, i, true, "eviction",
            "maxmemory-policy %s can evict lock keys and fence counters once maxmemory "
            "(%" PRId64 " bytes) is reached: a held lock vanishes and a second holder "
            "takes it. Fix: CONFIG SET maxmemory-policy noeviction (and in redis.conf)",
            policy, f->maxmemory);
    else if (f->maxmemory < 0)
        /* The policy is known to evict: only its trigger is unknown, and managed
         * services always set one. */
        add(fs, i, true, "eviction",
            "maxmemory-policy %s can evict lock keys and fence counters once maxmemory is "
            "reached, and maxmemory is unknown (not in its INFO): a held lock can vanish "
            "and a second holder take it. Fix: CONFIG SET maxmemory-policy noeviction (and "
            "in redis.conf)",
            policy);
    else
        add(fs, i, false, "eviction",
            "maxmemory-policy %s would evict lock keys once a maxmemory is set (none "
            "is now). Fix: maxmemory-policy noeviction",
            policy);
}

static void judge_persistence(cli_findings *fs, int i, const dlock_server_facts *f, int n)
{
    /* With N > 1, restart voting and the fences' TIME floor carry a restart. */
    bool alone = n == 1;
    const char *carry = "restart voting keeps its grants from counting until the longest "
                        "lease has passed, and fences keep increasing (TIME floor)";
    if (f->aof < 0)
        unknown(fs, i, "persistence",
                "unknown persistence (aof_enabled not in its INFO): whether a restart "
                "forgets every held lock cannot be checked, %s. Fix: appendonly yes, "
                "appendfsync always, checked by hand (CONFIG GET appendonly, or ask the "
                "provider)",
                alone ? "and alone, one that does lets a second holder take a lock" : carry);
    else if (f->aof == 0)
        add(fs, i, alone, "persistence",
            "persistence off (appendonly no): a restart forgets every held lock, %s. Fix: "
            "appendonly yes, appendfsync always",
            alone ? "and a second holder can take one while the first still works "
                    "(fences still increase: a fenced resource refuses the first)"
                  : carry);
    else if (f->appendfsync[0] == '\0')
        unknown(fs, i, "persistence",
                "unknown appendfsync: it cannot be read (CONFIG refused), and a crash may "
                "forget the last locks unless it is always. Fix: check it with the provider "
                "(CONFIG GET appendfsync)");
    else if (strcmp(f->appendfsync, "always") != 0)
        add(fs, i, alone, "persistence",
            "appendfsync %s: a crash forgets the locks of its last second or so, %s. Fix: "
            "appendfsync always",
            f->appendfsync, alone ? "and a second holder can take one of them" : carry);
}

static void judge_server(cli_findings *fs, int i, const dlock_server_facts *f, int n)
{
    if (f->tls && !f->tls_verified)
        add(fs, i, true, "tls",
            "TLS without verification (insecure=1): anyone on the path can pose as the "
            "server and grant locks it does not hold. Fix: cacert= (or --cacert) with the "
            "server's CA, and sni= when the certificate names another host");
    if (f->error != DLOCK_OK) {
        judge_unasked(fs, i, f, n);
        return;
    }
    if (!info_answered(f)) {
        unknown(fs, i, "info",
                "INFO was refused (an ACL?): its role, eviction policy and persistence are "
                "unknown, and cannot be checked. Fix: allow INFO to the lock user (+info)");
        return;
    }
    judge_version(fs, i, f);
    judge_role(fs, i, f);
    judge_eviction(fs, i, f);
    judge_persistence(fs, i, f, n);
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

/* Only up of the `of` members of a group behind a server answered (members: what they
 * are, "Sentinels"): a note on what the silent ones cost (cost, with its fix). */
static void judge_silent(cli_findings *fs, int i, const char *kind, int up, int of,
                         const char *members, const char *cost)
{
    if (up < of)
        add(fs, i, false, kind, "%d of its %d %s answered: %s", up, of, members, cost);
}

/* A master behind Sentinels: what a failover may cost, and whether one can happen. */
static void judge_sentinel(cli_findings *fs, int i, const dlock_server_facts *f, int n)
{
    if (f->sentinels == 0)
        return;
    judge_failover(fs, i, n,
                   "a master behind Sentinels: replication is asynchronous, so a failover");
    judge_silent(fs, i, "sentinel", f->sentinels_up, f->sentinels, "Sentinels",
                 "with none, the master cannot be found after a failover or a broken "
                 "connection, and every lock call on it fails. Fix: make them reachable, or "
                 "list the ones that run");
    if (f->sentinel_quorum == 0)
        add(fs, i, false, "sentinel-quorum",
            "its Sentinels cannot fail the master over (%s): if it fails, it stays down and "
            "every lock call on it fails. Fix: at least three Sentinels, a quorum that a "
            "majority of them can reach",
            f->sentinel_detail);
    else if (f->sentinel_quorum < 0 && f->sentinels_up > 0)
        unknown(fs, i, "sentinel-quorum",
                "unknown whether its Sentinels can fail the master over (none of the %d that "
                "answered gave a verdict to SENTINEL CKQUORUM): if they cannot and it fails, "
                "it stays down. Fix: allow SENTINEL CKQUORUM to the Sentinels' user, or run "
                "it by hand",
                f->sentinels_up);
    if (f->error == DLOCK_OK && f->replicas == 0)
        add(fs, i, false, "replicas",
            "the master has no replica connected: a failover has nothing to promote. Fix: "
            "a replica (replicaof) that its Sentinels know");
    else if (f->error == DLOCK_OK && f->replicas < 0 && info_answered(f))
        unknown(fs, i, "replicas",
                "unknown replicas (connected_slaves not in its INFO): whether a failover has "
                "a replica to promote cannot be checked. Fix: check with ROLE on the master");
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
    judge_silent(fs, i, "cluster-masters", f->cluster_masters_up, f->cluster_masters, "masters",
                 "names in the silent masters' slots cannot be locked, and their policies and "
                 "persistence are not checked. Fix: make them reachable from here");
    if (f->cluster_ok < 0)
        unknown(fs, i, "cluster-state",
                "unknown cluster_state: CLUSTER INFO could not be read (an ACL?), so whether "
                "every slot is served cannot be checked. Fix: allow CLUSTER INFO to the lock "
                "user");
}

/* The servers' clocks, pairwise through their offsets from this host: the default
 * fence mode needs them closer than the shortest lease, and drift makes a margin
 * wise. */
static void judge_clocks(cli_findings *fs, const dlock_server_facts *f, int n, int64_t ttl_ms)
{
    char ttl[32];
    cli_format_duration(ttl_ms, ttl, sizeof ttl);
    int lo = -1, hi = -1;
    for (int i = 0; i < n; i++) {
        if (f[i].error != DLOCK_OK)
            continue;
        /* One server alone has no other clock to differ from. */
        if (f[i].clock_error_us < 0 && n > 1)
            unknown(fs, i, "clock",
                    "unknown clock (TIME refused, or its reply unreadable): whether it is "
                    "within a tenth of the shortest lease (%s) of the other servers' cannot "
                    "be checked, and the default fence mode assumes it. Fix: allow TIME to "
                    "the lock user, or the strict fence mode (DLOCK_FENCE_STRICT: no clock "
                    "assumption)",
                    ttl);
        if (f[i].clock_error_us < 0)
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
    add(fs, -1, true, "clock",
        "the clocks of %s and %s are %.1f ms apart, more than a tenth of the shortest "
        "lease (%s): the fence of a lock taken after its holder crashed can come out "
        "lower than the crashed holder's once they are a lease apart. Fix: NTP (chrony) "
        "on the servers, or the strict fence mode (DLOCK_FENCE_STRICT: no clock "
        "assumption)",
        f[lo].server, f[hi].server, (double)apart / 1000.0, ttl);
}

void cli_doctor_judge(const dlock_server_facts *f, int n, int64_t ttl_ms, cli_findings *out)
{
    out->n = out->risks = out->unknowns = 0;
    for (int i = 0; i < n; i++) {
        judge_server(out, i, &f[i], n);
        judge_sentinel(out, i, &f[i], n);
        judge_cluster(out, i, &f[i], n);
    }
    judge_clocks(out, f, n, ttl_ms);
}
