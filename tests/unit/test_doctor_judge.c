/*
 * test_doctor_judge.c: the rules of `dlock doctor` (cli/doctor_judge.c) over facts
 * made by hand, among them those no server here can be made to give: an old Redis,
 * clocks seconds apart. test_doctor runs the command against real servers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "dlock.h"
#include "doctor.h"

#define TTL_MS 30000

static cli_findings fs;

/* A server with nothing to find: Redis 7.0, a master, noeviction, AOF always. */
static dlock_server_facts healthy(int i)
{
    dlock_server_facts f;
    memset(&f, 0, sizeof f);
    snprintf(f.server, sizeof f.server, "redis://10.0.0.%d:6379", i + 1);
    strcpy(f.version, "7.0.15");
    strcpy(f.role, "master");
    strcpy(f.maxmemory_policy, "noeviction");
    strcpy(f.appendfsync, "always");
    f.aof = 1;
    f.cluster = 0;
    f.clock_error_us = 50;
    return f;
}

/* The one finding of kind `kind`, or NULL; a second one fails the test. */
static const cli_finding *find(const char *kind)
{
    const cli_finding *hit = NULL;
    for (int k = 0; k < fs.n; k++) {
        if (strcmp(fs.f[k].kind, kind) != 0)
            continue;
        if (hit != NULL)
            fail_msg("two findings of kind %s", kind);
        hit = &fs.f[k];
    }
    return hit;
}

/* The one finding of kind, which must be there, its text holding needle (NULL: any). */
static const cli_finding *found(const char *kind, const char *needle)
{
    const cli_finding *x = find(kind);
    if (x == NULL)
        fail_msg("no %s finding among %d", kind, fs.n);
    if (needle != NULL && strstr(x->text, needle) == NULL)
        fail_msg("\"%s\" lacks \"%s\"", x->text, needle);
    return x;
}

/* Exactly one finding, of that kind and level, whose text holds each needle. */
static void expect_one(const char *kind, bool risk, const char *needle1, const char *needle2)
{
    if (fs.n != 1)
        fail_msg("%d findings, want 1 (%s); first: %s", fs.n, kind, fs.n ? fs.f[0].text : "-");
    const cli_finding *x = find(kind);
    if (x == NULL)
        fail_msg("no %s finding; found %s: %s", kind, fs.f[0].kind, fs.f[0].text);
    if (x->risk != risk)
        fail_msg("%s is a %s, want a %s: %s", kind, x->risk ? "risk" : "note",
                 risk ? "risk" : "note", x->text);
    assert_int_equal(fs.risks, risk ? 1 : 0);
    if (needle1 != NULL && strstr(x->text, needle1) == NULL)
        fail_msg("\"%s\" lacks \"%s\"", x->text, needle1);
    if (needle2 != NULL && strstr(x->text, needle2) == NULL)
        fail_msg("\"%s\" lacks \"%s\"", x->text, needle2);
}

static void nothing_to_find(void **state)
{
    (void)state;
    dlock_server_facts f[3] = {healthy(0), healthy(1), healthy(2)};
    f[1].clock_offset_us = 900;
    f[2].clock_offset_us = -1200;
    cli_doctor_judge(f, 3, TTL_MS, &fs);
    assert_int_equal(fs.n, 0);
    assert_int_equal(fs.risks, 0);
}

static void unreachable_is_a_risk(void **state)
{
    (void)state;
    dlock_server_facts f = healthy(0);
    f.error = DLOCK_ERR_IO;
    strcpy(f.detail, "connect: Connection refused");
    cli_doctor_judge(&f, 1, TTL_MS, &fs);
    expect_one("unreachable", true, "Connection refused", "every lock call fails");
    assert_non_null(strstr(fs.f[0].text, "Fix: make it reachable"));
}

/* A server that could not be asked gets the fix for why, in the details the library
 * gives: a refused password is mended by the password, a certificate that cannot be
 * verified by its CA (cacert=), neither by making the server reachable. */
static void unasked_fix_follows_the_reason(void **state)
{
    (void)state;
    static const struct {
        const char *server;
        int error;
        const char *detail, *fix1, *fix2;
    } cases[] = {
        {"redis://10.0.0.1:6379", DLOCK_ERR_AUTH,
         "AUTH refused: WRONGPASS invalid username-password pair or user is disabled.",
         "Fix: set its password in the URL (redis://:PASSWORD@HOST:PORT", "DLOCK_PASSWORD"},
        {"redis://10.0.0.1:6379", DLOCK_ERR_AUTH, "NOAUTH Authentication required.",
         "redis://USER:PASSWORD@HOST:PORT for an ACL user", "DLOCK_PASSWORD"},
        /* Redis before 6. */
        {"rediss://10.0.0.1:6380", DLOCK_ERR_AUTH, "AUTH refused: ERR invalid password",
         "rediss://:PASSWORD@HOST:PORT", "DLOCK_PASSWORD"},
        {"rediss://10.0.0.1:6380", DLOCK_ERR_AUTH,
         "TLS: the server's certificate chain is not trusted (unable to get local issuer "
         "certificate)",
         "Fix: give the CA that signed its certificate with cacert=FILE in the URL",
         "rediss://HOST:PORT?cacert=FILE"},
        {"rediss://10.0.0.1:6380", DLOCK_ERR_AUTH,
         "TLS: host name mismatch: the server's certificate is not for \"10.0.0.1\" (sni= "
         "sets the name to check)",
         "Fix: sni=NAME", NULL},
        {"rediss://10.0.0.1:6380", DLOCK_ERR_AUTH,
         "TLS: the server refused this client's certificate (tlsv13 alert certificate "
         "required)",
         "cert=FILE&key=FILE", NULL},
        {"redis-sentinel://s1:26379/m", DLOCK_ERR_AUTH,
         "no Sentinel named the master: Sentinel s1:26379: -WRONGPASS invalid "
         "username-password pair",
         "sentinel_password=PASSWORD", NULL},
        {"redis://10.0.0.1:6379", DLOCK_ERR_TIMEOUT, "no reply within 2000 ms",
         "Fix: make it reachable", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dlock_server_facts f = healthy(0);
        snprintf(f.server, sizeof f.server, "%s", cases[i].server);
        f.error = cases[i].error;
        snprintf(f.detail, sizeof f.detail, "%s", cases[i].detail);
        f.tls = f.tls_verified = strncmp(f.server, "rediss", 6) == 0;
        cli_doctor_judge(&f, 1, TTL_MS, &fs);
        expect_one("unreachable", true, cases[i].fix1, cases[i].fix2);
        if (cases[i].error == DLOCK_ERR_AUTH && strstr(fs.f[0].text, "make it reachable"))
            fail_msg("a refusal told to make the server reachable: %s", fs.f[0].text);
    }
}

/* A dlockd (dlock_probe's dlockd 1) is no lock server: a risk that says what it is and
 * that dlock needs the servers behind it. */
static void dlockd_is_no_lock_server(void **state)
{
    (void)state;
    dlock_server_facts f = healthy(0);
    f.error = DLOCK_ERR_INVALID;
    f.dlockd = 1;
    snprintf(f.version, sizeof f.version, "0.1.0");
    snprintf(f.detail, sizeof f.detail,
             "a dlockd (dlockd_version 0.1.0), not a Redis server: it serves LOCK, not the "
             "scripts dlock runs");
    cli_doctor_judge(&f, 1, TTL_MS, &fs);
    expect_one("dlockd", true,
               "is a dlockd (version 0.1.0): a client of lock servers, not a "
               "lock server",
               "give dlock the Redis servers that dlockd uses");
    /* Among real servers it is one risk of its own; they are judged as ever. */
    dlock_server_facts g[2] = {healthy(0), f};
    cli_doctor_judge(g, 2, TTL_MS, &fs);
    expect_one("dlockd", true, NULL, NULL);
    assert_int_equal(fs.f[0].server, 1);
}

/* Every policy but noeviction can evict lock keys: a risk once maxmemory is set, a
 * note before. The line names the policy and says "evict". */
static void eviction(void **state)
{
    (void)state;
    static const char *const policies[] = {"allkeys-lru",  "allkeys-lfu",  "allkeys-random",
                                           "volatile-lru", "volatile-lfu", "volatile-random",
                                           "volatile-ttl"};
    for (size_t i = 0; i < sizeof policies / sizeof *policies; i++) {
        dlock_server_facts f = healthy(0);
        strcpy(f.maxmemory_policy, policies[i]);
        f.maxmemory = 1 << 20;
        cli_doctor_judge(&f, 1, TTL_MS, &fs);
        expect_one("eviction", true, policies[i], "evict");
        f.maxmemory = 0;
        cli_doctor_judge(&f, 1, TTL_MS, &fs);
        expect_one("eviction", false, policies[i], "evict");
    }
}

/* With one server a restart that forgets a lock makes two holders; with several,
 * restart voting covers it. */
static void persistence_depends_on_n(void **state)
{
    (void)state;
    dlock_server_facts f[3] = {healthy(0), healthy(1), healthy(2)};
    f[0].aof = 0;
    cli_doctor_judge(f, 1, TTL_MS, &fs);
    expect_one("persistence", true, "appendonly no", "second holder");
    cli_doctor_judge(f, 3, TTL_MS, &fs);
    expect_one("persistence", false, "appendonly no", "restart voting");

    f[0].aof = 1;
    strcpy(f[0].appendfsync, "everysec");
    cli_doctor_judge(f, 1, TTL_MS, &fs);
    expect_one("persistence", true, "appendfsync everysec", "second holder");
    cli_doctor_judge(f, 3, TTL_MS, &fs);
    expect_one("persistence", false, "appendfsync everysec", "restart voting");

    /* CONFIG refused: unknown, so a note even alone. */
    f[0].appendfsync[0] = '\0';
    cli_doctor_judge(f, 1, TTL_MS, &fs);
    expect_one("persistence", false, "cannot be read", NULL);
}

static void versions(void **state)
{
    (void)state;
    /* Each version, and what it is worth: nothing (NULL), a note or a risk. */
    static const struct {
        const char *version, *needle1, *needle2;
        bool risk;
    } cases[] = {
        {"7.2.4", NULL, NULL, false},
        {"6.2.14", "6.2.14", "7.0", false},
        {"3.2.0", "3.2.0", NULL, false},
        {"3.0.7", "every acquire fails", NULL, true},
    };
    dlock_server_facts f = healthy(0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        strcpy(f.version, cases[i].version);
        cli_doctor_judge(&f, 1, TTL_MS, &fs);
        if (cases[i].needle1 == NULL)
            assert_int_equal(fs.n, 0);
        else
            expect_one("version", cases[i].risk, cases[i].needle1, cases[i].needle2);
    }
    /* INFO refused: nothing is known, which is worth a note, not a guess. */
    f = healthy(0);
    f.version[0] = f.role[0] = f.maxmemory_policy[0] = '\0';
    f.aof = f.cluster = -1;
    f.maxmemory = -1;
    f.appendfsync[0] = '\0';
    cli_doctor_judge(&f, 1, TTL_MS, &fs);
    expect_one("info", false, "INFO was refused", NULL);
}

static void replica_and_cluster_node(void **state)
{
    (void)state;
    dlock_server_facts f = healthy(0);
    strcpy(f.role, "slave");
    cli_doctor_judge(&f, 1, TTL_MS, &fs);
    expect_one("replica", true, "READONLY", "name the master");
    f = healthy(0);
    f.cluster = 1;
    cli_doctor_judge(&f, 1, TTL_MS, &fs);
    expect_one("cluster", true, "MOVED", NULL);
}

/* TLS with verification off lets anyone on the path grant locks; verified, or plain
 * (a choice of network, not a check skipped), is no finding. */
static void unverified_tls(void **state)
{
    (void)state;
    dlock_server_facts f = healthy(0);
    f.tls = 1;
    cli_doctor_judge(&f, 1, TTL_MS, &fs);
    expect_one("tls", true, "insecure=1", "cacert");
    f.tls_verified = 1;
    cli_doctor_judge(&f, 1, TTL_MS, &fs);
    assert_int_equal(fs.n, 0);
}

/* Clocks: apart by more than a tenth of the lease beyond what the measurement's own
 * error could explain is a risk; within it, nothing. An unreachable server's clock is
 * not counted. */
static void clocks(void **state)
{
    (void)state;
    dlock_server_facts f[3] = {healthy(0), healthy(1), healthy(2)};
    f[1].clock_offset_us = 4000000; /* 4 s apart, a tenth of 30 s is 3 s */
    cli_doctor_judge(f, 3, TTL_MS, &fs);
    expect_one("clock", true, "4000.0 ms apart", "10.0.0.2");
    assert_int_equal(fs.f[0].server, -1);
    /* The same with a 60 s lease: within a tenth. */
    cli_doctor_judge(f, 3, 2 * TTL_MS, &fs);
    assert_int_equal(fs.n, 0);
    /* 3.05 s apart but each offset only known within 100 ms: not surely past 3 s. */
    f[1].clock_offset_us = 3050000;
    f[0].clock_error_us = f[1].clock_error_us = 100000;
    cli_doctor_judge(f, 3, TTL_MS, &fs);
    assert_int_equal(fs.n, 0);
    /* A server that could not be asked: its stale offset is not a clock. */
    f[1].error = DLOCK_ERR_TIMEOUT;
    f[1].clock_offset_us = 9000000;
    cli_doctor_judge(f, 3, TTL_MS, &fs);
    expect_one("unreachable", true, NULL, NULL);
    /* One server alone has no other clock to differ from. */
    f[0].clock_offset_us = 60000000;
    cli_doctor_judge(f, 1, TTL_MS, &fs);
    assert_int_equal(fs.n, 0);
}

/* The finding of an unknown fact: the only one, a note marked unknown whose text says
 * "unknown" and what it hides (needle), never silence and never a pass. */
static void expect_unknown(const char *kind, const char *needle)
{
    expect_one(kind, false, "unknown", needle);
    assert_true(fs.f[0].unknown);
    assert_int_equal(fs.unknowns, 1);
}

/* A healthy server whose fact (named as its field) is unknown: "" or -1, as
 * dlock_probe leaves a fact the server did not give. */
static dlock_server_facts without(const char *fact)
{
    dlock_server_facts f = healthy(0);
    char *text = strcmp(fact, "version") == 0            ? f.version
                 : strcmp(fact, "role") == 0             ? f.role
                 : strcmp(fact, "maxmemory_policy") == 0 ? f.maxmemory_policy
                 : strcmp(fact, "appendfsync") == 0      ? f.appendfsync
                                                         : NULL;
    int *number = strcmp(fact, "cluster") == 0 ? &f.cluster
                  : strcmp(fact, "aof") == 0   ? &f.aof
                                               : NULL;
    if (text != NULL)
        text[0] = '\0';
    else if (number != NULL)
        *number = -1;
    else
        fail_msg("no fact %s", fact);
    return f;
}

/* Every fact the judge reads, made unknown one at a time: each is said to be unknown,
 * with why it matters, and counted so that the summary never calls the server fine. */
static void unknown_facts_never_fine(void **state)
{
    (void)state;
    static const struct {
        const char *fact, *kind, *needle;
    } unknowns[] = {
        {"version", "version", "scripts"}, {"role", "role", "replica"},
        {"cluster", "cluster", "MOVED"},   {"maxmemory_policy", "eviction", "evict lock keys"},
        {"aof", "persistence", "restart"}, {"appendfsync", "persistence", "cannot be read"},
    };
    dlock_server_facts f;
    for (size_t i = 0; i < sizeof unknowns / sizeof unknowns[0]; i++) {
        f = without(unknowns[i].fact);
        cli_doctor_judge(&f, 1, TTL_MS, &fs);
        expect_unknown(unknowns[i].kind, unknowns[i].needle);
    }
    /* A version that is no number is as unknown. */
    f = healthy(0);
    strcpy(f.version, "unstable");
    cli_doctor_judge(&f, 1, TTL_MS, &fs);
    expect_unknown("version", "unstable");
    /* An evicting policy whose maxmemory is unknown is not "none set": a risk. */
    f = healthy(0);
    strcpy(f.maxmemory_policy, "allkeys-lru");
    f.maxmemory = -1;
    cli_doctor_judge(&f, 1, TTL_MS, &fs);
    expect_one("eviction", true, "allkeys-lru", "maxmemory is unknown");

    /* A clock that could not be read among several is unknown; alone, nothing is
     * compared with it. */
    dlock_server_facts g[3] = {healthy(0), healthy(1), healthy(2)};
    g[2].clock_error_us = -1;
    cli_doctor_judge(g, 3, TTL_MS, &fs);
    expect_unknown("clock", "tenth of the shortest lease (30.0s)");
    assert_int_equal(fs.f[0].server, 2);
    cli_doctor_judge(&g[2], 1, TTL_MS, &fs);
    assert_int_equal(fs.n, 0);

    /* INFO refused altogether: one note for all its facts. */
    f = healthy(0);
    f.version[0] = f.role[0] = f.maxmemory_policy[0] = '\0';
    f.aof = f.cluster = -1;
    f.maxmemory = -1;
    cli_doctor_judge(&f, 1, TTL_MS, &fs);
    expect_unknown("info", "INFO was refused");

    /* A whole cluster's state, and a Sentinel master's replicas and quorum, each the
     * first of three servers (so that their failover is a note, not a risk). */
    dlock_server_facts h[3] = {healthy(0), healthy(1), healthy(2)};
    h[0].cluster = 1;
    h[0].cluster_masters = h[0].cluster_masters_up = 3;
    h[0].cluster_ok = -1;
    cli_doctor_judge(h, 3, TTL_MS, &fs);
    assert_int_equal(fs.risks, 0);
    assert_int_equal(fs.unknowns, 1);
    assert_true(found("cluster-state", "unknown cluster_state")->unknown);
    h[0] = healthy(0);
    h[0].sentinels = h[0].sentinels_up = 3;
    h[0].sentinel_quorum = -1;
    h[0].replicas = -1;
    cli_doctor_judge(h, 3, TTL_MS, &fs);
    assert_int_equal(fs.risks, 0);
    assert_int_equal(fs.unknowns, 2);
    assert_true(found("sentinel-quorum", "unknown whether its Sentinels can fail the master over")
                    ->unknown);
    assert_true(found("replicas", "unknown replicas")->unknown);

    /* And a server whose every fact is known is counted with none unknown. */
    f = healthy(0);
    cli_doctor_judge(&f, 1, TTL_MS, &fs);
    assert_int_equal(fs.n, 0);
    assert_int_equal(fs.unknowns, 0);
}

/* A master behind three Sentinels, a replica connected, a failover authorized. */
static dlock_server_facts behind_sentinels(int i)
{
    dlock_server_facts f = healthy(i);
    snprintf(f.server, sizeof f.server, "redis-sentinel://s%d:26379/m", i + 1);
    f.sentinels = f.sentinels_up = 3;
    f.sentinel_quorum = 1;
    f.replicas = 1;
    return f;
}

static void sentinel(void **state)
{
    (void)state;
    /* One master behind Sentinels: a failover can lose a lock, as a restart can. */
    dlock_server_facts f[3] = {behind_sentinels(0), behind_sentinels(1), behind_sentinels(2)};
    cli_doctor_judge(f, 1, TTL_MS, &fs);
    expect_one("failover", true, "asynchronous", "dlock_fenced_set");
    /* Three of them: restart voting covers a failover. */
    cli_doctor_judge(f, 3, TTL_MS, &fs);
    assert_int_equal(fs.n, 3);
    assert_int_equal(fs.risks, 0);
    /* Unhealthy Sentinels are notes: they cost availability, not exclusion. */
    f[0].sentinels_up = 1;
    f[0].sentinel_quorum = 0;
    snprintf(f[0].sentinel_detail, sizeof f[0].sentinel_detail, "NOQUORUM 1 usable Sentinels");
    f[0].replicas = 0;
    cli_doctor_judge(f, 3, TTL_MS, &fs);
    assert_int_equal(fs.risks, 0);
    found("sentinel", "1 of its 3 Sentinels answered");
    found("sentinel-quorum", "NOQUORUM 1 usable");
    assert_false(found("replicas", NULL)->risk);
    /* A plain server says nothing of Sentinels, whatever its replicas. */
    dlock_server_facts plain = healthy(0);
    cli_doctor_judge(&plain, 1, TTL_MS, &fs);
    assert_int_equal(fs.n, 0);
}

/* A whole Redis Cluster of three masters, all answering, every slot served. */
static void whole_cluster(void **state)
{
    (void)state;
    dlock_server_facts f[3] = {healthy(0), healthy(1), healthy(2)};
    snprintf(f[0].server, sizeof f[0].server, "redis-cluster://n1:7000");
    f[0].cluster = 1;
    f[0].cluster_masters = f[0].cluster_masters_up = 3;
    f[0].cluster_ok = 1;
    strcpy(f[0].cluster_state, "ok");
    /* Named as a cluster, a cluster node is no mistake; its failover is a risk alone. */
    cli_doctor_judge(f, 1, TTL_MS, &fs);
    expect_one("failover", true, "Redis Cluster", "dlock_fenced_set");
    /* A master down, slots unserved: notes (availability), not risks. */
    f[0].cluster_masters_up = 2;
    f[0].cluster_ok = 0;
    strcpy(f[0].cluster_state, "fail");
    cli_doctor_judge(f, 3, TTL_MS, &fs);
    assert_int_equal(fs.risks, 0);
    found("cluster-state", "cluster_state is fail");
    found("cluster-masters", "2 of its 3 masters answered");
    assert_null(find("cluster"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nothing_to_find),
        cmocka_unit_test(unreachable_is_a_risk),
        cmocka_unit_test(unasked_fix_follows_the_reason),
        cmocka_unit_test(dlockd_is_no_lock_server),
        cmocka_unit_test(unknown_facts_never_fine),
        cmocka_unit_test(eviction),
        cmocka_unit_test(persistence_depends_on_n),
        cmocka_unit_test(versions),
        cmocka_unit_test(replica_and_cluster_node),
        cmocka_unit_test(unverified_tls),
        cmocka_unit_test(clocks),
        cmocka_unit_test(sentinel),
        cmocka_unit_test(whole_cluster),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
