/*
 * test_restart.c: scenario 6 of the fault suite (docs/testing.md), a lock server that crashes
 * and restarts at once without persistence: Redlock's own hazard.
 *
 * Setup (every case): 3 independent masters. Holder A takes "r" with a 3 s lease on
 * nodes 0 and 1 only (node 2 refuses writes while A acquires, -NOREPLICAS), and writes
 * the fenced register. Fault: node 0 is SIGKILLed and restarted; it forgets A's key.
 * Then B tries "r": nodes 0 (empty) and 2 grant, node 1 refuses. If B's grants count,
 * A and B both hold "r" (a double grant).
 *
 * Cases, and what is asserted:
 *   mitigations (no double grant, and no fence regression):
 *     - restart-aware voting OBSERVED, B a client that knew node 0 before the restart;
 *     - restart-aware voting STRICT, B a fresh client (first contact after the restart);
 *     - AOF appendfsync always on node 0 (A's key survives the crash), voting off;
 *     - delayed restart: node 0 stays down longer than the lease, voting off;
 *   the hazard (asserted to happen, and printed, so the mitigations above are known to
 *   be tested against a real threat):
 *     - voting OFF, B a known client;
 *     - voting OBSERVED, B a fresh client (it cannot know node 0 restarted).
 * And one case of the voting window itself: a node restarted late in a second reads
 * uptime_in_seconds 1 a few hundred ms later; with a max lease of 1 s its grants must
 * still wait the whole second (they once counted at once).
 * In every case, fences never go back: B's fence is above A's, the register refuses
 * A's write after B's, and A's release leaves B's keys alone. The history checker's
 * granted-interval overlap is the double grant: 1 in the hazard cases, 0 otherwise.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"

#include "history.h"
#include "workers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TTL_MS       3000
#define MAX_LEASE_MS 3000

static char g_urls[512];

enum persistence { NONE, AOF_ALWAYS, DELAYED };

static void start_nodes(enum persistence p)
{
    static const char *const aof[] = {"--appendonly", "yes", "--appendfsync", "always", NULL};
    for (int i = 0; i < 3; i++)
        assert_int_equal(dh_server_start(&wk_srv[i], i == 0 && p == AOF_ALWAYS ? aof : NULL), 0);
    dh_server_urls(wk_srv, 3, g_urls, sizeof g_urls);
    assert_int_equal(dh_server_start(&wk_res, NULL), 0);
}

static dlock_client *client_leasing(const char *urls, int voting, int64_t max_lease_ms)
{
    dlock_config cfg;
    it_config_init(&cfg);
    cfg.restart_voting = voting;
    cfg.max_lease_ms = max_lease_ms;
    return it_client_cfg(urls, &cfg);
}

static dlock_client *client(const char *urls, int voting)
{
    return client_leasing(urls, voting, MAX_LEASE_MS);
}

/* Whether node i holds "r" with the given token. */
static bool holds(int i, const char *token)
{
    char *v = it_get(&wk_srv[i], "dlock:{r}");
    bool yes = v != NULL && strncmp(v, token, DLOCK_TOKEN_LEN) == 0;
    free(v);
    return yes;
}

/* One case. Returns after asserting; `double_grant` is what the case must show. */
static void restart_case(const char *label, int voting, bool fresh, enum persistence p,
                         bool double_grant)
{
    start_nodes(p);
    char hist[600];
    hist_writer hw[3];
    assert_int_equal(wk_history_new(hist, sizeof hist, "restart", hw, 3), 0);
    hist_writer *ha = &hw[0], *hb = &hw[1], *ht = &hw[2];
    if (voting == DLOCK_RESTART_STRICT) {
        /* STRICT distrusts any node younger than the longest lease, restarted or not:
         * let the healthy nodes age past it first. */
        dh_sleep_ms(MAX_LEASE_MS + 1100);
    }
    dlock_client *a = client(g_urls, DLOCK_RESTART_OFF);
    dlock_client *res = it_client(&wk_res, it_timeout_ms());
    dlock_client *b = NULL;
    if (!fresh) {
        /* B talks to every node before the restart, so it knows their run_ids. */
        b = client(g_urls, voting);
        dlock_lock *w = it_acquire(b, "warmup", 1000);
        assert_int_equal(dlock_release(w), DLOCK_OK);
    }

    dlock_opts o = {0};
    o.ttl_ms = TTL_MS;
    dlock_lock *la = NULL, *lb = NULL;
    assert_int_equal(wk_refuse_writes(&wk_srv[2], true), 0);
    assert_int_equal(wk_acquire_rec(ha, a, "r", &o, &la), DLOCK_OK);
    assert_int_equal(wk_refuse_writes(&wk_srv[2], false), 0);
    assert_true(holds(0, dlock_token(la)) && holds(1, dlock_token(la)));
    assert_int_equal(wk_write_rec(ha, res, "reg", la, 1), DLOCK_OK);

    /* The crash, and the restart. */
    dh_server_kill(&wk_srv[0]);
    hist_fault(ht, HIST_F_SERVER_KILL, 0);
    if (p == DELAYED)
        dh_sleep_ms(TTL_MS + 200); /* down longer than any lease it granted */
    assert_int_equal(dh_server_restart(&wk_srv[0]), 0);
    hist_fault(ht, HIST_F_SERVER_START, 0);
    printf("INFO %s: node 0 restarted; it holds A's key: %s\n", label,
           holds(0, dlock_token(la)) ? "yes" : "no");
    if (fresh)
        b = client(g_urls, voting);

    int rc = wk_acquire_rec(hb, b, "r", &o, &lb);
    it_show(label, rc);
    int64_t a_left = dlock_remaining_ms(la);
    bool both = rc == DLOCK_OK && a_left > 0;
    if (both)
        printf("INFO %s: HAZARD: B granted \"r\" (fence %llu) while A holds it for %lld ms more "
               "(fence %llu): nodes 0 and 2 hold B's token, node 1 A's\n",
               label, (unsigned long long)dlock_fence(lb), (long long)a_left,
               (unsigned long long)dlock_fence(la));
    else
        printf("INFO %s: no double grant (B: %s, A has %lld ms left)\n", label, dlock_errname(rc),
               (long long)a_left);
    assert_int_equal(both, double_grant);

    if (rc == DLOCK_OK) {
        /* Fences never go back, restart or not: the register takes B's write and then
         * refuses A's. */
        assert_true(dlock_fence(lb) > dlock_fence(la));
        assert_int_equal(wk_write_rec(hb, res, "reg", lb, 2), DLOCK_OK);
        assert_int_equal(wk_write_rec(ha, res, "reg", la, 3), DLOCK_ERR_FENCED);
        /* A's release must not touch B's keys. */
        char tb[DLOCK_TOKEN_LEN + 1];
        memcpy(tb, dlock_token(lb), sizeof tb);
        bool had[3];
        for (int i = 0; i < 3; i++)
            had[i] = holds(i, tb);
        int arc = wk_release_rec(ha, la);
        la = NULL;
        printf("INFO %s: A's release -> %s\n", label, dlock_errname(arc));
        assert_int_not_equal(arc, DLOCK_OK);
        for (int i = 0; i < 3; i++)
            assert_int_equal(holds(i, tb), had[i]);
        assert_int_equal(wk_release_rec(hb, lb), DLOCK_OK);
    } else {
        assert_int_equal(rc, DLOCK_ERR_BUSY);
        /* A's release says OK only if a quorum still had A's key: with AOF, node 0 kept
         * it; otherwise only node 1 did, and the release says LOST (no quorum held our
         * token, which is what LOST means for a release), although voting kept B out meanwhile. */
        int nodes_a =
            holds(0, dlock_token(la)) + holds(1, dlock_token(la)) + holds(2, dlock_token(la));
        int arc = wk_release_rec(ha, la);
        printf("INFO %s: A's key was on %d node(s); A's release -> %s\n", label, nodes_a,
               dlock_errname(arc));
        assert_int_equal(arc, nodes_a >= 2 ? DLOCK_OK : DLOCK_ERR_LOST);
        la = NULL;
        /* Once A released, B gets the lock, with a larger fence (the checker asserts). */
        assert_int_equal(wk_acquire_rec(hb, b, "r", &o, &lb), DLOCK_OK);
        assert_int_equal(wk_write_rec(hb, res, "reg", lb, 2), DLOCK_OK);
        assert_int_equal(wk_release_rec(hb, lb), DLOCK_OK);
    }

    hist_report rep;
    char fig[64];
    snprintf(fig, sizeof fig, "restart_%s", label);
    assert_int_equal(wk_judge(hist, NULL, NULL, fig, &rep), 0);
    assert_int_equal(rep.fence_regressions, 0);
    assert_int_equal(rep.stale_accepted, 0);
    assert_int_equal(rep.spurious_rejections, 0);
    assert_int_equal(rep.granted_overlaps, double_grant ? 1 : 0);
    assert_int_equal(hist_keys_left(wk_srv, 3, "r", 200), 0);
    wk_history_close(hw, 3);
    dlock_client_free(a);
    dlock_client_free(b);
    dlock_client_free(res);
}

/* Milliseconds into the current second of the wall clock, which a server's uptime
 * counts in. */
static int64_t wall_ms_in_second(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_nsec / 1000000;
}

static long uptime_s(dh_server *s)
{
    redisReply *r = dh_cmd(s, "INFO server");
    long up = dh_info_long(r, "uptime_in_seconds");
    freeReplyObject(r);
    return up;
}

/* A restarted node's uptime_in_seconds already reads 1 a moment after a start late in
 * a second (its start and its now are each counted in whole seconds). With a max lease
 * of 1 s its grants must still wait a whole second. D, a client of node 1 alone, holds
 * "u" there, so B's attempt has node 0 (just restarted) and node 2 to grant it: B is
 * refused while node 0 has been up less than 1 s, and granted once it has. */
static void test_voting_uptime_in_whole_seconds(void **state)
{
    (void)state;
    start_nodes(NONE);
    enum { LEASE_MS = 1000 };
    dlock_client *d = it_client(&wk_srv[1], it_timeout_ms());
    dlock_opts o = {0};
    o.ttl_ms = 10 * LEASE_MS;
    dlock_lock *ld = NULL;
    assert_int_equal(dlock_acquire(d, "u", &o, &ld), DLOCK_OK);
    dlock_client *b = client_leasing(g_urls, DLOCK_RESTART_OBSERVED, LEASE_MS);
    dlock_lock *w = it_acquire(b, "warmup", LEASE_MS);
    assert_int_equal(dlock_release(w), DLOCK_OK);

    /* Restart node 0 late in a second, so that its uptime reads 1 soon after; again if
     * the machine was too slow for that (the reading must come well within 1 s). */
    int64_t killed = 0, read_one = 0;
    for (int attempt = 0; attempt < 5; attempt++) {
        while (wall_ms_in_second() < 700 || wall_ms_in_second() > 750)
            dh_sleep_ms(5);
        killed = dh_now_ms();
        assert_int_equal(dh_server_restart(&wk_srv[0]), 0);
        while (uptime_s(&wk_srv[0]) < 1 && dh_now_ms() - killed < 3000)
            dh_sleep_ms(2);
        read_one = dh_now_ms();
        if (read_one - killed < LEASE_MS / 2)
            break;
        printf("INFO uptime: node 0 read uptime 1 only %lld ms after its restart began: "
               "again\n",
               (long long)(read_one - killed));
    }
    assert_true(read_one - killed < LEASE_MS / 2);
    printf("FIG restart_uptime_reads_1_after %lld ms\n", (long long)(read_one - killed));

    o.ttl_ms = LEASE_MS;
    dlock_lock *lb = NULL;
    int rc = dlock_acquire(b, "u", &o, &lb);
    int64_t asked = dh_now_ms() - killed;
    it_show("uptime", rc);
    /* The check means something only while node 0 has been up less than the lease. */
    assert_true(asked < LEASE_MS);
    assert_int_equal(rc, DLOCK_ERR_BUSY);
    assert_non_null(strstr(dlock_errmsg(), "not counted"));

    /* Its grants count again a lease after B read that uptime (B knows no better than
     * 1 s less than it read), within the attempt that just ended. */
    dh_sleep_ms(LEASE_MS + 100 - (dh_now_ms() - killed - asked));
    assert_int_equal(dlock_acquire(b, "u", &o, &lb), DLOCK_OK);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    assert_int_equal(dlock_release(ld), DLOCK_OK);
    dlock_client_free(b);
    dlock_client_free(d);
}

/* A case: restart_case's arguments. */
typedef struct restart_params {
    const char *label;
    int voting;
    bool fresh;
    enum persistence p;
    bool double_grant;
} restart_params;

static void test_restart(void **state)
{
    const restart_params *c = *state;
    restart_case(c->label, c->voting, c->fresh, c->p, c->double_grant);
}

int main(void)
{
    static restart_params cases[] = {
        {"observed_known", DLOCK_RESTART_OBSERVED, false, NONE, false},
        {"strict_fresh", DLOCK_RESTART_STRICT, true, NONE, false},
        {"aof_always_voting_off", DLOCK_RESTART_OFF, false, AOF_ALWAYS, false},
        {"delayed_restart_voting_off", DLOCK_RESTART_OFF, false, DELAYED, false},
        {"hazard_voting_off", DLOCK_RESTART_OFF, false, NONE, true},
        {"hazard_observed_fresh", DLOCK_RESTART_OBSERVED, true, NONE, true},
    };
    /* Each case starts its own servers (with its persistence) and stops them. */
    const struct CMUnitTest tests[] = {
        IT_CASE_WITH("test_voting_observed_known_client", test_restart, NULL, wk_servers_teardown,
                     &cases[0]),
        IT_CASE_WITH("test_voting_strict_fresh_client", test_restart, NULL, wk_servers_teardown,
                     &cases[1]),
        IT_CASE_WITH("test_aof_always", test_restart, NULL, wk_servers_teardown, &cases[2]),
        IT_CASE_WITH("test_delayed_restart", test_restart, NULL, wk_servers_teardown, &cases[3]),
        IT_CASE_WITH("test_hazard_voting_off", test_restart, NULL, wk_servers_teardown, &cases[4]),
        IT_CASE_WITH("test_hazard_observed_fresh_client", test_restart, NULL, wk_servers_teardown,
                     &cases[5]),
        IT_CASE_WITH("test_voting_uptime_in_whole_seconds", test_voting_uptime_in_whole_seconds,
                     NULL, wk_servers_teardown, NULL),
    };
    return cmocka_run_group_tests_name("fault_restart", tests, NULL, NULL);
}
