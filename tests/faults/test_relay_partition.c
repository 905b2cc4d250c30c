/*
 * test_relay_partition.c: scenario 12 of the fault suite (docs/testing.md), the partitions a relay
 * can make without network namespaces (the netns tier does the rest).
 *
 * Three real servers, each behind a fault relay. Two worker threads, each with its
 * own client and names of its own (no contention: every failure is the network's),
 * take and drop locks in a loop while the main thread breaks one node's path at a
 * time:
 *   1. node 0 blackholed for 2 s (accepted, read, dropped; the connections that lost
 *      bytes stay dead after healing, as behind a firewall that lost its state);
 *   2. node 1 resets every connection, and every new one, for 2 s (reset by peer);
 *   3. node 2 flaps: blackholed and healed every 500 ms for 4 s.
 * Between faults the main thread waits for the connect timeout and a little more, so
 * that the previous fault has ended for every client (a connection that was being
 * made into a blackhole gives up at its connect deadline) and one node at a time is
 * broken, as the client sees it.
 * What is asserted:
 *   - every call (acquire and release) returns within its deadline + 100 ms: the
 *     per-node timeout, plus the connect timeout when a node must be reconnected
 *     (docs/guarantees.md, promise 5), times the slack; and since two nodes always
 *     answer and decide the round, none needs more than the per-node timeout;
 *   - the locks stay available: calls succeed in every phase (a release that could
 *     not reach a quorum leaves keys to expire, which may refuse the next attempts on
 *     the same name for a lease: counted, not asserted);
 *   - after each heal, the node takes part again (its connections recover);
 *   - at the end the process has the descriptors it had before the faults (the
 *     relays' own not counted), and no lock key outlives its ttl.
 * Figures: calls, failures, worst call, calls over the per-node timeout, recovery
 * time per fault.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"
#include "relay.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N       IT_RELAYED
#define WORKERS 2
#define PHASES  4
#define TTL_MS  2000

static atomic_bool g_stop;

static atomic_int g_phase; /* 0 before the faults, then the fault under way (1-3) */
static const char *const g_phase_name[PHASES] = {"baseline", "blackhole", "reset", "flapping"};

typedef struct worker {
    int id;
    pthread_t th;
    dlock_client *c;
    int calls[PHASES], ok[PHASES], failures[PHASES], late, over_timeout;
    int64_t worst_ms;
    char last_failure[256];
} worker;

static int64_t connect_ms(void)
{
    return 1000 * dh_slack();
}

/* A call's deadline + 100 ms: the per-node timeout, plus the connect timeout when a
 * node must be reconnected. */
static int64_t bound_ms(void)
{
    return (it_timeout_ms() + connect_ms() + 100) * dh_slack();
}

static dlock_client *client(void)
{
    dlock_config cfg = {0};
    cfg.timeout_ms = it_timeout_ms();
    cfg.connect_timeout_ms = connect_ms();
    return it_client_cfg(it_relayed_urls, &cfg);
}

/* Time one call; note it if it was late or failed. */
static void account(worker *w, int phase, const char *what, int rc, int64_t took)
{
    w->calls[phase]++;
    if (took > w->worst_ms)
        w->worst_ms = took;
    if (took > (it_timeout_ms() + 100) * dh_slack())
        w->over_timeout++;
    if (took > bound_ms()) {
        w->late++;
        snprintf(w->last_failure, sizeof w->last_failure, "%s took %lld ms: %s (%s)", what,
                 (long long)took, dlock_errname(rc), dlock_errmsg());
    }
    if (rc == DLOCK_OK) {
        w->ok[phase]++;
    } else {
        w->failures[phase]++;
        snprintf(w->last_failure, sizeof w->last_failure, "%s in %s: %s (%s)", what,
                 g_phase_name[phase], dlock_errname(rc), dlock_errmsg());
    }
}

static void *work(void *arg)
{
    worker *w = arg;
    char name[32];
    snprintf(name, sizeof name, "part-%d", w->id);
    dlock_opts o = {0};
    o.ttl_ms = TTL_MS;
    while (!atomic_load(&g_stop)) {
        dlock_lock *l = NULL;
        int phase = atomic_load(&g_phase);
        int64_t t0 = dh_now_ms();
        int rc = dlock_acquire(w->c, name, &o, &l);
        account(w, phase, "acquire", rc, dh_now_ms() - t0);
        if (rc != DLOCK_OK) {
            dh_sleep_ms(5);
            continue;
        }
        t0 = dh_now_ms();
        rc = dlock_release(l);
        account(w, phase, "release", rc, dh_now_ms() - t0);
        dh_sleep_ms(2); /* a loop, not a benchmark: leave the CPU to the servers */
    }
    return NULL;
}

/* Descriptors of the process that are not the relays'. */
static int client_fds(void)
{
    int n = dh_fd_count();
    for (int i = 0; i < N; i++)
        n -= fr_fds(it_relay[i]);
    return n;
}

/* Milliseconds until node i takes part in a lock again (its key is there while
 * held), with calls from probe; -1 if not within 5 s (times the slack). */
static int64_t recovery_ms(dlock_client *probe, int i)
{
    int64_t t0 = dh_now_ms();
    while (dh_now_ms() - t0 < 5000 * dh_slack()) {
        dlock_lock *l = NULL;
        dlock_opts o = {0};
        o.ttl_ms = TTL_MS;
        if (dlock_acquire(probe, "probe", &o, &l) == DLOCK_OK) {
            bool there = it_exists(&it_relayed_srv[i], "dlock:{probe}") == 1;
            dlock_release(l);
            if (there)
                return dh_now_ms() - t0;
        }
        dh_sleep_ms(10);
    }
    return -1;
}

/* After a heal: let every client's connections to the healed node recover. */
static void settle(void)
{
    dh_sleep_ms(connect_ms() + it_timeout_ms() + 400);
}

static void test_blackhole_reset_flapping(void **state)
{
    (void)state;
    static worker ws[WORKERS];
    memset(ws, 0, sizeof ws);
    atomic_store(&g_stop, false);
    atomic_store(&g_phase, 0);
    dlock_client *probe = client();
    for (int i = 0; i < WORKERS; i++) {
        ws[i].id = i;
        ws[i].c = client();
        dlock_holder h;
        assert_int_equal(dlock_inspect(ws[i].c, "warm", &h), DLOCK_OK);
        /* A client's first acquire makes the one descriptor its blocking calls watch
         * for the client's free: part of the baseline, not growth. */
        assert_int_equal(dlock_release(it_acquire(ws[i].c, "warm", TTL_MS)), DLOCK_OK);
    }
    assert_true(recovery_ms(probe, 0) >= 0);
    dh_sleep_ms(50);
    int fds0 = client_fds();
    for (int i = 0; i < WORKERS; i++)
        assert_int_equal(pthread_create(&ws[i].th, NULL, work, &ws[i]), 0);
    dh_sleep_ms(500);

    /* 1. Blackhole node 0. */
    atomic_store(&g_phase, 1);
    fr_blackhole(it_relay[0], true, FR_HEAL_DEAD);
    dh_sleep_ms(2000);
    fr_blackhole(it_relay[0], false, FR_HEAL_DEAD);
    int64_t rec_blackhole = recovery_ms(probe, 0);
    printf("FIG partition_blackhole_recovery_ms %lld ms\n", (long long)rec_blackhole);
    settle();

    /* 2. Node 1 resets: the open connections now, and every new one for 2 s. */
    atomic_store(&g_phase, 2);
    fr_refuse(it_relay[1], true);
    fr_reset_now(it_relay[1]);
    dh_sleep_ms(2000);
    fr_refuse(it_relay[1], false);
    int64_t rec_reset = recovery_ms(probe, 1);
    printf("FIG partition_reset_recovery_ms %lld ms\n", (long long)rec_reset);
    settle();

    /* 3. Node 2 flaps every 500 ms. */
    atomic_store(&g_phase, 3);
    int flaps = 0;
    for (int64_t t0 = dh_now_ms(); dh_now_ms() - t0 < 4000; flaps++) {
        fr_blackhole(it_relay[2], flaps % 2 == 0, FR_HEAL_DEAD);
        dh_sleep_ms(500);
    }
    fr_blackhole(it_relay[2], false, FR_HEAL_DEAD);
    int64_t rec_flap = recovery_ms(probe, 2);
    printf("FIG partition_flapping_recovery_ms %lld ms\n", (long long)rec_flap);
    printf("FIG partition_flaps %d count\n", flaps);
    settle();

    atomic_store(&g_stop, true);
    int late = 0, over = 0, calls = 0;
    int64_t worst = 0;
    int ok[PHASES] = {0}, failures[PHASES] = {0};
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(ws[i].th, NULL);
        for (int p = 0; p < PHASES; p++) {
            calls += ws[i].calls[p];
            ok[p] += ws[i].ok[p];
            failures[p] += ws[i].failures[p];
        }
        late += ws[i].late;
        over += ws[i].over_timeout;
        worst = ws[i].worst_ms > worst ? ws[i].worst_ms : worst;
        if (ws[i].last_failure[0] != '\0')
            fprintf(stderr, "worker %d, last failure: %s\n", i, ws[i].last_failure);
    }
    printf("FIG partition_calls %d count\n", calls);
    for (int p = 0; p < PHASES; p++) {
        printf("FIG partition_%s_ok %d count\n", g_phase_name[p], ok[p]);
        printf("FIG partition_%s_failed %d count\n", g_phase_name[p], failures[p]);
    }
    printf("FIG partition_late_calls %d count\n", late);
    printf("FIG partition_calls_over_node_timeout %d count\n", over);
    printf("FIG partition_worst_call_ms %lld ms\n", (long long)worst);

    /* Every node takes part again, for every client. */
    for (int w = 0; w < WORKERS; w++) {
        dlock_lock *l = it_acquire(ws[w].c, "final", TTL_MS);
        for (int i = 0; i < N; i++)
            assert_int_equal(it_exists(&it_relayed_srv[i], "dlock:{final}"), 1);
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    dh_sleep_ms(100);
    int fds1 = client_fds();
    printf("FIG partition_fd_growth %d count\n", fds1 - fds0);
    /* Keys of releases that failed expire with their lease. */
    dh_sleep_ms(TTL_MS + 200);
    int left = 0;
    for (int i = 0; i < N; i++) {
        left += (int)it_exists(&it_relayed_srv[i], "dlock:{part-0}");
        left += (int)it_exists(&it_relayed_srv[i], "dlock:{part-1}");
        left += (int)it_exists(&it_relayed_srv[i], "dlock:{probe}");
    }
    printf("FIG partition_keys_left_after_ttl %d count\n", left);
    for (int i = 0; i < WORKERS; i++)
        dlock_client_free(ws[i].c);
    dlock_client_free(probe);

    assert_true(rec_blackhole >= 0);
    assert_true(rec_reset >= 0);
    assert_true(rec_flap >= 0);
    for (int p = 0; p < PHASES; p++)
        assert_true(ok[p] > 0);
    assert_int_equal(late, 0);
    assert_int_equal(over, 0);
    assert_int_equal(fds1, fds0);
    assert_int_equal(left, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blackhole_reset_flapping),
    };
    return cmocka_run_group_tests_name("partition_relay", tests, it_relayed_setup,
                                       it_relayed_teardown);
}
