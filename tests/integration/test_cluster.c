/*
 * test_cluster.c: redis-cluster:// against a real Redis Cluster of three masters
 * (tests/support/cluster.c), every node with a password and an ACL user of its own for
 * the locks. Checked: names land on the master that owns their slot, all three get
 * some, and the client reaches them all from one seed; contention and waiting by
 * wake-ups across masters; renewal batches of locks in different slots; a slot
 * migrated while a lock in it is held: during the migration the holder's renewals go
 * on (at the source, then through -ASK and ASKING at the target), nobody else takes
 * the name, and after it the holder releases through -MOVED and the next holder's
 * fence is higher; a seed that is not a cluster node, a wrong password, no seed
 * reachable; the doctor's view of a healthy cluster and of one that lost a master;
 * dlock_list over every master (every kind, a waiter), dlock_break at a name's. Over TLS
 * (rediss-cluster://, the cluster bus on TLS too): every master verified, and a wrong CA refused. A
 * failover: a master killed, its replica promoted by the cluster, and a waiting client served by
 * it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PW       "cluster-pw"
#define LOCK_PW  "locker-pw"
#define NMASTERS 3

static dh_cluster cl;
static char seeds[512]; /* the URL with the lock user, seeded at node 1 only */

static int setup(void **state)
{
    (void)state;
    const char *const args[] = {"--requirepass", PW, NULL};
    dh_server_opts o = {.args = args};
    assert_int_equal(dh_cluster_start(&cl, NMASTERS, &o), 0);
    /* The locks' own user on each node: its keys, its channels, and the commands a
     * client sends (the slot map, scripts, pub/sub, INFO). */
    for (int i = 0; i < NMASTERS; i++)
        assert_int_equal(dh_reply_status(dh_cmd(&cl.node[i],
                                                "ACL SETUSER locker on >%s ~dlock:* "
                                                "&* +@all",
                                                LOCK_PW),
                                         "ACL SETUSER"),
                         0);
    char url[256];
    dh_cluster_url(&cl, 1, url, sizeof url);
    /* redis-cluster://HOST:PORT with the user put in */
    snprintf(seeds, sizeof seeds, "redis-cluster://locker:%s@%s", LOCK_PW,
             url + strlen("redis-cluster://"));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    dh_cluster_stop(&cl);
    return 0;
}

static dlock_client *cluster_client(void)
{
    dlock_config cfg;
    it_config_init(&cfg);
    return it_client_cfg(seeds, &cfg);
}

/* The node that owns name's lock key. */
static int owner_of(const char *name)
{
    char key[128];
    it_key(key, sizeof key, name);
    int slot = dh_cluster_keyslot(&cl, key);
    assert_true(slot >= 0);
    return dh_cluster_owner(&cl, slot);
}

static void test_names_over_all_masters(void **state)
{
    (void)state;
    dlock_client *c = cluster_client();
    enum { NAMES = 48 };
    dlock_lock *l[NAMES];
    int per_node[NMASTERS] = {0};
    for (int i = 0; i < NAMES; i++) {
        char name[32];
        snprintf(name, sizeof name, "spread-%d", i);
        l[i] = it_acquire(c, name, 10000);
        int o = owner_of(name);
        per_node[o]++;
        /* On its slot's owner, and nowhere else. */
        char key[128];
        it_key(key, sizeof key, name);
        for (int k = 0; k < NMASTERS; k++)
            if (k != o) {
                redisReply *r = dh_cmd(&cl.node[k], "EXISTS %s", key);
                assert_non_null(r);
                assert_int_equal(r->type, REDIS_REPLY_ERROR); /* MOVED: not its slot */
                freeReplyObject(r);
            }
        it_expect_holder(&cl.node[o], name, dlock_token(l[i]));
    }
    for (int k = 0; k < NMASTERS; k++)
        assert_true(per_node[k] > 0);
    /* dlock_list walks every master: all of them, each with its holder's token, from a
     * client that has no slot map yet too. */
    dlock_client *fresh = cluster_client();
    dlock_lister *it;
    assert_int_equal(dlock_list(fresh, "spread-*", &it), DLOCK_OK);
    const dlock_listed *e;
    int listed = 0;
    while (dlock_list_next(it, &e) == DLOCK_OK && e != NULL) {
        int i = atoi(e->name + strlen("spread-"));
        assert_true(i >= 0 && i < NAMES);
        assert_int_equal(e->kind, DLOCK_KIND_EXCLUSIVE);
        assert_string_equal(e->holders[0].token, dlock_token(l[i]));
        listed++;
    }
    dlock_list_free(it);
    dlock_client_free(fresh);
    assert_int_equal(listed, NAMES);
    /* And a break reaches the name's master. */
    dlock_break_info b;
    assert_int_equal(dlock_break(c, "spread-0", NULL, &b), DLOCK_OK);
    assert_int_equal(b.broken, 1);
    assert_int_equal(dlock_release(l[0]), DLOCK_ERR_LOST);
    l[0] = it_acquire(c, "spread-0", 10000);
    assert_true(dlock_fence(l[0]) > b.fence);
    for (int i = 0; i < NAMES; i++)
        assert_int_equal(dlock_release(l[i]), DLOCK_OK);
    for (int i = 0; i < NAMES; i++) {
        char name[32], key[128];
        snprintf(name, sizeof name, "spread-%d", i);
        it_key(key, sizeof key, name);
        assert_int_equal(it_exists(&cl.node[owner_of(name)], key), 0);
    }
    dlock_client_free(c);
}

/* Shared holders, a semaphore's permits, and a holder with another client's waiter. */
static void test_list_kinds(void **state)
{
    (void)state;
    dlock_client *c = cluster_client(), *w = cluster_client();
    dlock_opts sh = {.ttl_ms = 20000, .shared = 1}, so = {.ttl_ms = 15000};
    dlock_lock *l[5]; /* two shared holders, two permits, the exclusive holder */
    for (int k = 0; k < 2; k++) {
        assert_int_equal(dlock_acquire(c, "kinds-read", &sh, &l[k]), DLOCK_OK);
        assert_int_equal(dlock_sem_acquire(c, "kinds-pool", 3, &so, &l[2 + k]), DLOCK_OK);
    }
    l[4] = it_acquire(c, "kinds-job", 20000);
    dlock_pending *p = it_queue_waiter(w, "kinds-job", 5000, &cl.node[owner_of("kinds-job")], 1);
    dlock_lister *it;
    assert_int_equal(dlock_list(c, "kinds-*", &it), DLOCK_OK);
    const dlock_listed *e;
    int seen = 0;
    while (dlock_list_next(it, &e) == DLOCK_OK && e != NULL) {
        seen++;
        if (strcmp(e->name, "kinds-read") == 0) {
            assert_int_equal(e->kind, DLOCK_KIND_SHARED);
            assert_int_equal(e->nholders, 2);
        } else if (strcmp(e->name, "kinds-pool") == 0) {
            assert_int_equal(e->kind, DLOCK_KIND_SEMAPHORE);
            assert_int_equal(e->permits, 3);
            assert_int_equal(e->nholders, 2);
        } else {
            assert_string_equal(e->name, "kinds-job");
            assert_int_equal(e->kind, DLOCK_KIND_EXCLUSIVE);
            assert_string_equal(e->holders[0].token, dlock_token(l[4]));
            assert_int_equal(e->waiters, 1);
        }
    }
    dlock_list_free(it);
    assert_int_equal(seen, 3);
    dlock_pending_free(p);
    dlock_client_free(w);
    for (int k = 0; k < 5; k++)
        assert_int_equal(dlock_release(l[k]), DLOCK_OK);
    dlock_client_free(c);
}

typedef struct waiter_arg {
    dlock_client *c;
    const char *name;
    int rc;
    uint64_t fence;
} waiter_arg;

static void *waiter(void *p)
{
    waiter_arg *w = p;
    dlock_opts o = {.ttl_ms = 10000, .wait_ms = 10000 * dh_slack()};
    dlock_lock *l = NULL;
    w->rc = dlock_acquire(w->c, w->name, &o, &l);
    if (w->rc == DLOCK_OK) {
        w->fence = dlock_fence(l);
        dlock_release(l);
    }
    return NULL;
}

/* A waiter is woken by the release: the wake-up is published on the name's master and
 * reaches the waiter's subscription wherever it is (a cluster's pub/sub is
 * cluster-wide), well before its backoff would have retried. */
static void test_contention_and_wakeup(void **state)
{
    (void)state;
    dlock_client *a = cluster_client(), *b = cluster_client();
    dlock_lock *held = it_acquire(a, "contended", 10000);
    dlock_opts now = {.ttl_ms = 10000};
    dlock_lock *l = NULL;
    assert_int_equal(dlock_acquire(b, "contended", &now, &l), DLOCK_ERR_BUSY);
    waiter_arg w = {.c = b, .name = "contended"};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter, &w), 0);
    it_wait_queued_on(&cl.node[owner_of("contended")], 1, "contended", 1);
    int64_t t0 = dh_now_ms();
    uint64_t first = dlock_fence(held);
    assert_int_equal(dlock_release(held), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, DLOCK_OK);
    assert_true(w.fence > first);
    printf("FIG cluster_handoff_ms %lld\n", (long long)(dh_now_ms() - t0));
    dlock_client_free(a);
    dlock_client_free(b);
}

/* The renewal thread renews locks of many slots: a batch per slot, each on its master
 * (one batch of them all would be refused, CROSSSLOT). */
static void test_renewal_across_slots(void **state)
{
    (void)state;
    dlock_client *c = cluster_client();
    enum { NAMES = 6 };
    dlock_lock *l[NAMES];
    dlock_opts o = {.ttl_ms = 600 * dh_slack(), .auto_renew = 1};
    for (int i = 0; i < NAMES; i++) {
        char name[32];
        snprintf(name, sizeof name, "renewed-%d", i);
        assert_int_equal(dlock_acquire(c, name, &o, &l[i]), DLOCK_OK);
    }
    /* Three leases: held only if renewed. */
    usleep((useconds_t)(3 * o.ttl_ms * 1000));
    for (int i = 0; i < NAMES; i++) {
        char name[32];
        snprintf(name, sizeof name, "renewed-%d", i);
        it_expect_holder(&cl.node[owner_of(name)], name, dlock_token(l[i]));
        assert_int_equal(dlock_release(l[i]), DLOCK_OK);
    }
    dlock_client_free(c);
}

static void on_lost(dlock_lock *l, void *user)
{
    (void)l;
    *(int *)user = 1;
}

/* The remaining lease of key on node s, asked after ASKING: what a slot's importing
 * node answers for keys it has, before the slot is its own. */
static long long asking_pttl(dh_server *s, const char *key)
{
    redisContext *ctx = dh_connect(s);
    assert_non_null(ctx);
    redisReply *r = redisCommand(ctx, "ASKING");
    assert_non_null(r);
    freeReplyObject(r);
    long long ms = it_int_reply(redisCommand(ctx, "PTTL %s", key));
    redisFree(ctx);
    return ms;
}

/* A slot migrated while a lock in it is held, renewed by the client's watchdog. A
 * renewal of an exclusive lock is a call of one key, so it goes on through the whole
 * migration: at the source while the key is there, then after -ASK at the target, with
 * ASKING. A call of several keys (an acquire, an explicit extend) is refused while the
 * slot's keys are split (-TRYAGAIN: DLOCK_ERR_UNAVAILABLE), so nobody else takes the
 * name meanwhile. After it, the source answers -MOVED and the client follows. */
static void test_migration_with_held_lock(void **state)
{
    (void)state;
    const char *name = "migrating";
    char key[128];
    it_key(key, sizeof key, name);
    int slot = dh_cluster_keyslot(&cl, key);
    int from = dh_cluster_owner(&cl, slot), to = (from + 1) % NMASTERS;
    dlock_client *a = cluster_client(), *b = cluster_client();
    int lost = 0;
    int64_t ttl = 900 * dh_slack();
    dlock_opts renewed = {
        .ttl_ms = ttl, .auto_renew = 1, .on_lost = on_lost, .on_lost_user = &lost};
    dlock_lock *held = NULL;
    assert_int_equal(dlock_acquire(a, name, &renewed, &held), DLOCK_OK);
    uint64_t first = dlock_fence(held);
    dlock_opts now = {.ttl_ms = 10000};
    dlock_lock *l = NULL;
    int rc;

    /* Migrating, the keys still at the source. */
    assert_int_equal(dh_cluster_migrate_begin(&cl, slot, from, to), 0);
    usleep((useconds_t)(2 * ttl * 1000));
    assert_true(it_pttl(&cl.node[from], key) > 0);
    rc = dlock_acquire(b, name, &now, &l);
    assert_true(rc == DLOCK_ERR_BUSY || rc == DLOCK_ERR_UNAVAILABLE);
    assert_int_equal(dlock_extend(held, ttl), DLOCK_ERR_UNAVAILABLE);
    assert_non_null(strstr(dlock_errmsg(), "TRYAGAIN"));

    /* The keys moved, the slot not yet its target's: renewals go there after ASKING
     * (without it the target would send them back, -MOVED). */
    assert_int_equal(dh_cluster_migrate_keys(&cl, slot, from, to), 0);
    long long asking = it_cmd_calls(&cl.node[to], "asking");
    usleep((useconds_t)(2 * ttl * 1000));
    assert_true(it_cmd_calls(&cl.node[to], "asking") > asking);
    assert_true(asking_pttl(&cl.node[to], key) > ttl / 3);
    rc = dlock_acquire(b, name, &now, &l);
    assert_true(rc == DLOCK_ERR_BUSY || rc == DLOCK_ERR_UNAVAILABLE);

    /* The slot is the target's: the source answers -MOVED, and the client follows. */
    assert_int_equal(dh_cluster_migrate_finish(&cl, slot, from, to), 0);
    it_expect_holder(&cl.node[to], name, dlock_token(held));
    assert_int_equal(dlock_extend(held, ttl), DLOCK_OK);
    assert_int_equal(dlock_release(held), DLOCK_OK);
    assert_int_equal(lost, 0);
    assert_int_equal(it_exists(&cl.node[to], key), 0);
    l = it_acquire(b, name, 10000);
    assert_true(dlock_fence(l) > first);
    assert_int_equal(dlock_release(l), DLOCK_OK);

    /* And back, for the tests after this one. */
    assert_int_equal(dh_cluster_migrate_begin(&cl, slot, to, from), 0);
    assert_int_equal(dh_cluster_migrate_finish(&cl, slot, to, from), 0);
    dlock_client_free(a);
    dlock_client_free(b);
}

static void test_refused(void **state)
{
    (void)state;
    dlock_config cfg;
    it_config_init(&cfg);
    dlock_client *c = NULL;
    dlock_lock *l = NULL;
    dlock_opts o = {.ttl_ms = 1000};
    char url[600];

    /* A wrong password: the seeds' own refusal. */
    dh_cluster_url(&cl, 0, url, sizeof url);
    char bad[700];
    snprintf(bad, sizeof bad, "redis-cluster://locker:wrong@%s", url + strlen("redis-cluster://"));
    assert_int_equal(dlock_client_new(bad, &cfg, &c), DLOCK_OK);
    assert_int_equal(dlock_acquire(c, "x", &o, &l), DLOCK_ERR_AUTH);
    assert_non_null(strstr(dlock_errmsg(), "no slot map"));
    dlock_client_free(c);

    /* A standalone server named as a cluster. */
    dh_server plain;
    assert_int_equal(dh_server_start(&plain, NULL), 0);
    snprintf(url, sizeof url, "redis-cluster://%s:%d", plain.host, plain.port);
    assert_int_equal(dlock_client_new(url, &cfg, &c), DLOCK_OK);
    assert_int_equal(dlock_acquire(c, "x", &o, &l), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errmsg(), "use redis://"));
    dlock_client_free(c);

    /* No seed reachable. */
    dh_server_stop(&plain);
    assert_int_equal(dlock_client_new(url, &cfg, &c), DLOCK_OK);
    assert_int_equal(dlock_acquire(c, "x", &o, &l), DLOCK_ERR_IO);
    dlock_client_free(c);
}

/* Last: it stops a master. */
static void test_doctor(void **state)
{
    (void)state;
    dlock_client *c = cluster_client();
    dlock_server_facts f;
    assert_int_equal(dlock_probe(c, &f, 1), DLOCK_OK);
    assert_int_equal(f.error, DLOCK_OK);
    assert_int_equal(f.cluster, 1);
    assert_int_equal(f.cluster_masters, NMASTERS);
    assert_int_equal(f.cluster_masters_up, NMASTERS);
    assert_int_equal(f.cluster_ok, 1);
    assert_string_equal(f.cluster_state, "ok");
    assert_string_equal(f.maxmemory_policy, "noeviction");
    assert_int_equal(f.aof, 0);

    /* Every master is asked: one that can evict is the cluster's risk, whichever
     * master the client's connection is at. */
    for (int k = 0; k < NMASTERS; k++) {
        assert_int_equal(
            dh_reply_status(dh_cmd(&cl.node[k], "CONFIG SET maxmemory-policy %s", "allkeys-lru"),
                            "CONFIG SET"),
            0);
        assert_int_equal(dlock_probe(c, &f, 1), DLOCK_OK);
        assert_string_equal(f.maxmemory_policy, "allkeys-lru");
        assert_int_equal(
            dh_reply_status(dh_cmd(&cl.node[k], "CONFIG SET maxmemory-policy %s", "noeviction"),
                            "CONFIG SET"),
            0);
    }

    /* A master down: once the others see it failed, the cluster says so, and a name
     * on a live master is refused too (full coverage is required by default). */
    dh_server_kill(&cl.node[2]);
    int64_t until = dh_now_ms() + 15000 * dh_slack();
    do {
        usleep(100 * 1000);
        assert_int_equal(dlock_probe(c, &f, 1), DLOCK_OK);
    } while (f.cluster_ok != 0 && dh_now_ms() < until);
    assert_int_equal(f.cluster_ok, 0);
    assert_string_equal(f.cluster_state, "fail");
    assert_int_equal(f.cluster_masters_up, NMASTERS - 1);
    dlock_lock *l = NULL;
    dlock_opts o = {.ttl_ms = 1000};
    char name[32];
    for (int i = 0;; i++) {
        snprintf(name, sizeof name, "down-%d", i);
        if (owner_of(name) == 0)
            break;
    }
    assert_int_equal(dlock_acquire(c, name, &o, &l), DLOCK_ERR_UNAVAILABLE);
    assert_non_null(strstr(dlock_errmsg(), "CLUSTERDOWN"));
    dlock_client_free(c);
}

/* ---- over TLS ----------------------------------------------------------------- */

static dh_cluster tls_cl;
static char tls_dir[512];

/* Three masters that speak TLS only to their clients and each other (the bus too),
 * each with the set's server certificate (localhost and 127.0.0.1) and the client
 * certificate the others ask of it. */
static int tls_setup(void **state)
{
    (void)state;
    assert_int_equal(dh_tls_dir(tls_dir, sizeof tls_dir), 0);
    assert_int_equal(dh_tls_make_set(tls_dir), 0);
    char cert[600], key[600], ca[600], ccert[640], ckey[640];
    snprintf(cert, sizeof cert, "%s/server.crt", tls_dir);
    snprintf(key, sizeof key, "%s/server.key", tls_dir);
    snprintf(ca, sizeof ca, "%s/ca.crt", tls_dir);
    snprintf(ccert, sizeof ccert, "tls-client-cert-file %s/client.crt", tls_dir);
    snprintf(ckey, sizeof ckey, "tls-client-key-file %s/client.key", tls_dir);
    dh_server_tls t = {cert, key, ca, false};
    const char *const config[] = {ccert, ckey, NULL};
    dh_server_opts o = {.tls = &t, .config = config};
    assert_int_equal(dh_cluster_start(&tls_cl, NMASTERS, &o), 0);
    return 0;
}

static int tls_teardown(void **state)
{
    (void)state;
    dh_cluster_stop(&tls_cl);
    dh_tls_dir_remove(tls_dir);
    return 0;
}

/* Every master is verified against the address the cluster announces for it (here
 * 127.0.0.1, in the server certificate), and names reach all of them; a CA that did
 * not sign them refuses the seed before any map is read. */
static void test_tls(void **state)
{
    (void)state;
    char seed[256], url[1200];
    dh_cluster_url(&tls_cl, 2, seed, sizeof seed);
    assert_non_null(strstr(seed, "rediss-cluster://"));
    snprintf(url, sizeof url, "%s?cacert=%s/ca.crt", seed, tls_dir);
    dlock_config cfg;
    it_config_init(&cfg);
    dlock_client *c = it_client_cfg(url, &cfg);
    enum { NAMES = 24 };
    int per_node[NMASTERS] = {0};
    for (int i = 0; i < NAMES; i++) {
        char name[32], key[128];
        snprintf(name, sizeof name, "tls-%d", i);
        dlock_lock *l = it_acquire(c, name, 10000);
        it_key(key, sizeof key, name);
        int o = dh_cluster_owner(&tls_cl, dh_cluster_keyslot(&tls_cl, key));
        per_node[o]++;
        it_expect_holder(&tls_cl.node[o], name, dlock_token(l));
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    for (int k = 0; k < NMASTERS; k++)
        assert_true(per_node[k] > 0);
    dlock_client_free(c);

    snprintf(url, sizeof url, "%s?cacert=%s/evil.crt", seed, tls_dir);
    c = it_client_cfg(url, &cfg);
    dlock_lock *l = NULL;
    dlock_opts o = {.ttl_ms = 1000};
    assert_int_equal(dlock_acquire(c, "tls-x", &o, &l), DLOCK_ERR_AUTH);
    assert_non_null(strstr(dlock_errmsg(), "certificate"));
    dlock_client_free(c);
}

/* ---- a failover ----------------------------------------------------------------- */

static dh_cluster fo_cl;

/* Three masters, the first with a replica (node 3). */
static int failover_setup(void **state)
{
    (void)state;
    assert_int_equal(dh_cluster_start_replicas(&fo_cl, NMASTERS, 1, NULL), 0);
    return 0;
}

static int failover_teardown(void **state)
{
    (void)state;
    dh_cluster_stop(&fo_cl);
    return 0;
}

/* A master dies and the cluster promotes its replica: a client that asks for a name
 * of its slots gets it from the replica once the promotion is done (its failed calls
 * made it read the map again), and the name's fence, replicated before, goes on
 * rising. */
static void test_failover(void **state)
{
    (void)state;
    char seed[256], name[32], key[128];
    dh_cluster_url(&fo_cl, 1, seed, sizeof seed);
    dlock_config cfg;
    it_config_init(&cfg);
    dlock_client *c = it_client_cfg(seed, &cfg);
    for (int i = 0;; i++) {
        snprintf(name, sizeof name, "failover-%d", i);
        it_key(key, sizeof key, name);
        if (dh_cluster_owner(&fo_cl, dh_cluster_keyslot(&fo_cl, key)) == 0)
            break;
    }
    dlock_lock *l = it_acquire(c, name, 10000);
    uint64_t first = dlock_fence(l);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    /* The fence counter on the replica before the master goes. */
    long long acked = -1;
    assert_int_equal(
        dh_reply_integer(dh_cmd(&fo_cl.node[0], "WAIT 1 %lld", 5000 * dh_slack()), "WAIT", &acked),
        0);
    assert_int_equal(acked, 1);

    /* Until the replica is promoted, a call fails as for any server that is down (a
     * waiting acquire gives up once the outage outlasts the connect timeout); the
     * caller tries again, and the first call after the promotion is served. */
    dh_server_kill(&fo_cl.node[0]);
    int64_t t0 = dh_now_ms(), until = t0 + 60000 * dh_slack();
    dlock_opts o = {.ttl_ms = 10000, .wait_ms = 500};
    int rc;
    while ((rc = dlock_acquire(c, name, &o, &l)) != DLOCK_OK && dh_now_ms() < until) {
        if (rc != DLOCK_ERR_IO && rc != DLOCK_ERR_UNAVAILABLE && rc != DLOCK_ERR_TIMEOUT)
            fail_msg("during the failover: %s: %s", dlock_errname(rc), dlock_errmsg());
        dh_sleep_ms(100);
    }
    if (rc != DLOCK_OK)
        fprintf(stderr, "acquire after the failover: %s\n", dlock_errmsg());
    assert_int_equal(rc, DLOCK_OK);
    printf("FIG cluster_failover_acquire_ms %lld (master killed to lock granted)\n",
           (long long)(dh_now_ms() - t0));
    assert_true(dlock_fence(l) > first);
    assert_int_equal(dh_cluster_failed_over(&fo_cl, 0, 3), 0);
    it_expect_holder(&fo_cl.node[3], name, dlock_token(l));
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest failover_tests[] = {
        cmocka_unit_test(test_failover),
    };
    const struct CMUnitTest tls_tests[] = {
        cmocka_unit_test(test_tls),
    };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_over_all_masters),
        cmocka_unit_test(test_list_kinds),
        cmocka_unit_test(test_contention_and_wakeup),
        cmocka_unit_test(test_renewal_across_slots),
        cmocka_unit_test(test_migration_with_held_lock),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_doctor),
    };
    return cmocka_run_group_tests_name("cluster", tests, setup, teardown) +
           cmocka_run_group_tests_name("cluster_tls", tls_tests, tls_setup, tls_teardown) +
           cmocka_run_group_tests_name("cluster_failover", failover_tests, failover_setup,
                                       failover_teardown);
}
