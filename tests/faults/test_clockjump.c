/*
 * test_clockjump.c: scenario 8 of the fault suite (docs/testing.md), a server whose clock jumps
 * forward while a lock is held, emulated by `PEXPIRE key 1` on that node (the key
 * expires early there, as a jump of the server's clock would make it).
 *
 * Setup: 3 independent masters, the fenced register on a separate server. Holder A
 * takes "j" (ttl 3 s, renewal on) on a bare quorum: nodes 0 and 1 (node 2 refuses
 * writes while A acquires). Fault: node 0's clock "jumps": A's key there expires.
 *
 * What happens, and what is asserted:
 *   - B asks for "j": node 0 (now free) and node 2 grant: B holds it while A's validity
 *     still runs. The double grant is the documented limit of Redlock (it assumes
 *     bounded clock drift): printed, and seen by the history checker as one granted-
 *     interval overlap;
 *   - fences still increase (B's is larger: node 0's counter did not go back), so the
 *     register accepts A's write only until it has seen B's fence, then refuses A;
 *   - A's renewal finds that no quorum holds its token and reports the loss (on_lost)
 *     before A's validity ends, from a renewal round that began after the jump; when
 *     the first such round heard every node, within ttl/3 plus the per-node timeout of
 *     the jump (the bound the fault suite promises, times the slack). The rounds are
 *     recorded through the
 *     test build's BEFORE_RENEW hook: under load a node can miss its timeout, leaving
 *     a round undecided, and the loss then comes a retry (ttl/10) later; the test says
 *     so instead of failing;
 *   - the same jump against a holder granted by all three nodes is absorbed: B is
 *     refused by the other two. (The holder is re-taken until all three nodes hold it:
 *     a first call may leave out a node still connecting.)
 * Figures: the loss's delay after the jump, and the renewal rounds it took.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "hooks.h" /* the BEFORE_RENEW pause point: when each renewal round starts */
#include "integration/itest.h"

#include "history.h"
#include "workers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TTL_MS 3000

static char g_urls[512];

static int setup(void **state)
{
    if (wk_servers_setup(state) < 0)
        return -1;
    dh_server_urls(wk_srv, WK_NODES, g_urls, sizeof g_urls);
    return 0;
}

static void clock_jump(int node, const char *key)
{
    redisReply *r = dh_cmd(&wk_srv[node], "PEXPIRE %s 1", key);
    assert_non_null(r);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    dh_sleep_ms(5);
}

static _Atomic int64_t g_lost_ns;

/* When each renewal round began (the renewal thread's BEFORE_RENEW hook): the loss must
 * come from the first round that starts after the steal, unless that round could not
 * decide (a node missed its timeout); the rounds are printed either way. */
#define MAX_ROUNDS 64
static _Atomic int64_t g_round_ns[MAX_ROUNDS];
static atomic_int g_rounds;

static void on_renew_round(int point)
{
    if (point != DLOCK_HOOK_BEFORE_RENEW)
        return;
    int i = atomic_fetch_add(&g_rounds, 1);
    if (i < MAX_ROUNDS)
        atomic_store(&g_round_ns[i], hist_now_ns());
}

static void on_lost(dlock_lock *l, void *user)
{
    hist_put(user, HIST_LOST, DLOCK_ERR_LOST, 0, l, 0, 0);
    atomic_store(&g_lost_ns, hist_now_ns());
}

static void test_jump_on_bare_quorum(void **state)
{
    (void)state;
    char hist[600];
    hist_writer hw[3];
    assert_int_equal(wk_history_new(hist, sizeof hist, "clockjump", hw, 3), 0);
    hist_writer *ha = &hw[0], *hb = &hw[1], *ht = &hw[2];
    dlock_config cfg;
    it_config_init(&cfg);
    dlock_client *a = it_client_cfg(g_urls, &cfg);
    dlock_client *b = it_client_cfg(g_urls, &cfg);
    dlock_client *res = it_client(&wk_res, it_timeout_ms());

    dlock_opts o = {0};
    o.ttl_ms = TTL_MS;
    o.auto_renew = 1;
    o.on_lost = on_lost;
    o.on_lost_user = ha;
    dlock_lock *la = NULL, *lb = NULL;
    atomic_store(&g_rounds, 0);
    atomic_store(&dlock__test_hooks.pause, on_renew_round);
    assert_int_equal(wk_refuse_writes(&wk_srv[2], true), 0);
    assert_int_equal(wk_acquire_rec(ha, a, "j", &o, &la), DLOCK_OK);
    int64_t t_acq = hist_now_ns();
    assert_int_equal(wk_refuse_writes(&wk_srv[2], false), 0);
    assert_int_equal(wk_write_rec(ha, res, "reg-j", la, 1), DLOCK_OK);

    int64_t t_jump = hist_now_ns();
    clock_jump(0, "dlock:{j}");
    hist_fault(ht, HIST_F_CLOCK_JUMP, 0);
    dlock_opts ob = {0};
    ob.ttl_ms = TTL_MS;
    int rc = wk_acquire_rec(hb, b, "j", &ob, &lb);
    int64_t t_grant = hist_now_ns();
    it_show("B after the jump", rc);
    assert_int_equal(rc, DLOCK_OK);
    int64_t a_left = dlock_remaining_ms(la);
    printf("INFO clockjump: HAZARD: B granted \"j\" (fence %llu) while A's validity has %lld ms "
           "left (fence %llu): a clock jump on one node of a bare quorum\n",
           (unsigned long long)dlock_fence(lb), (long long)a_left,
           (unsigned long long)dlock_fence(la));
    assert_true(a_left > 0);
    assert_true(dlock_fence(lb) > dlock_fence(la));

    /* The register has not seen B's fence yet: A's write still goes in. Once B wrote,
     * A is refused. */
    int first = wk_write_rec(ha, res, "reg-j", la, 2);
    assert_int_equal(wk_write_rec(hb, res, "reg-j", lb, 3), DLOCK_OK);
    int second = wk_write_rec(ha, res, "reg-j", la, 4);
    printf("INFO clockjump: A's write before B's: %s; B's: DLOCK_OK; A's after B's: %s\n",
           dlock_errname(first), dlock_errname(second));
    assert_int_equal(first, DLOCK_OK);
    assert_int_equal(second, DLOCK_ERR_FENCED);

    /* From the jump on, A's renewal hears "not ours" from two nodes (node 0 forgot A's
     * key, node 2 never had it): no quorum can hold A's token, so the first renewal
     * round after the jump reports the loss. The suite's bound: lost within ttl/3 plus
     * the timeout after a steal. That bound assumes the round hears every node: a node that misses
     * its per-node timeout (a loaded machine) leaves the round undecided (yes 1, no 1),
     * and the watchdog tries again ttl/10 later, keeping only the promise that the loss
     * is known before A's validity ends, which is what the library documents. The rounds are
     * recorded to tell the two apart. Wait past the bound, so that a late report is measured and
     * shown. */
    int64_t bound_ns = (TTL_MS / 3 + it_timeout_ms()) * dh_slack() * 1000000;
    int64_t a_valid_until = t_grant + a_left * 1000000;
    while (atomic_load(&g_lost_ns) == 0 && hist_now_ns() < a_valid_until)
        dh_sleep_ms(5);
    int64_t lost_ns = atomic_load(&g_lost_ns);
    atomic_store(&dlock__test_hooks.pause, NULL);
    int rounds = atomic_load(&g_rounds), after = 0;
    for (int i = 0; i < rounds && i < MAX_ROUNDS; i++) {
        int64_t at = atomic_load(&g_round_ns[i]);
        printf("INFO clockjump: renewal round %d began %+.1f ms after the jump\n", i + 1,
               (double)(at - t_jump) / 1e6);
        after += at > t_jump && (lost_ns == 0 || at < lost_ns);
    }
    printf("INFO clockjump: A acquired %.1f ms before the jump, B granted %.1f ms after it\n",
           (double)(t_jump - t_acq) / 1e6, (double)(t_grant - t_jump) / 1e6);
    assert_true(lost_ns != 0);
    assert_true(lost_ns < a_valid_until);
    printf("FIG clockjump_loss_reported_after_jump_ms %.1f ms\n", (double)(lost_ns - t_jump) / 1e6);
    printf("FIG clockjump_renewal_rounds_to_loss %d count\n", after);
    assert_true(after >= 1); /* a renewal round found it, after the jump */
    if (after == 1)
        assert_true(lost_ns - t_jump <= bound_ns);
    else
        printf("INFO clockjump: the first %d round(s) after the jump could not decide (a node "
               "missed its %lld ms timeout): the ttl/3 bound does not apply; lost %.1f ms "
               "before A's validity ended\n",
               after - 1, (long long)it_timeout_ms(), (double)(a_valid_until - lost_ns) / 1e6);
    assert_true(dlock_remaining_ms(la) <= 0);
    assert_int_equal(dlock_check(la), DLOCK_ERR_LOST);
    assert_int_equal(wk_release_rec(ha, la), DLOCK_ERR_LOST);
    assert_int_equal(wk_release_rec(hb, lb), DLOCK_OK);

    hist_report rep;
    assert_int_equal(wk_judge(hist, NULL, NULL, "clockjump", &rep), 0);
    assert_int_equal(rep.granted_overlaps, 1); /* the documented double grant */
    assert_int_equal(rep.fence_regressions, 0);
    assert_int_equal(rep.stale_accepted, 0);
    assert_int_equal(rep.stale_rejected, 1);
    assert_int_equal(rep.lost_callbacks, 1);
    assert_int_equal(hist_keys_left(wk_srv, 3, "j", 200), 0);
    wk_history_close(hw, 3);
    dlock_client_free(a);
    dlock_client_free(b);
    dlock_client_free(res);
}

static void test_jump_on_full_grant(void **state)
{
    (void)state;
    dlock_config cfg;
    it_config_init(&cfg);
    dlock_client *a = it_client_cfg(g_urls, &cfg);
    dlock_client *b = it_client_cfg(g_urls, &cfg);
    char key[64];
    it_key(key, sizeof key, "j-all");
    /* A holder granted by all three nodes. A grant by a bare quorum is legitimate: on a
     * client's first call a node still connecting when two have granted is not waited
     * for (fanout.c), and under load a node can miss its timeout. Take it again until
     * every node holds it. */
    dlock_lock *la = NULL;
    for (int attempt = 1; la == NULL; attempt++) {
        assert_true(attempt <= 20);
        la = it_acquire(a, "j-all", TTL_MS);
        int on = 0;
        for (int i = 0; i < 3; i++)
            on += it_pttl(&wk_srv[i], key) > 0;
        if (on < 3) {
            printf("INFO clockjump: attempt %d granted by %d of 3 nodes: again\n", attempt, on);
            assert_int_equal(dlock_release(la), DLOCK_OK);
            la = NULL;
        }
    }
    clock_jump(0, key);
    dlock_lock *lb = NULL;
    dlock_opts o = {0};
    o.ttl_ms = TTL_MS;
    int rc = dlock_acquire(b, "j-all", &o, &lb);
    it_show("B after a jump on one of three holding nodes", rc);
    assert_int_equal(rc, DLOCK_ERR_BUSY);
    assert_int_equal(dlock_check(la), DLOCK_OK);
    assert_int_equal(dlock_release(la), DLOCK_OK);
    dlock_client_free(a);
    dlock_client_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jump_on_bare_quorum),
        cmocka_unit_test(test_jump_on_full_grant),
    };
    return cmocka_run_group_tests_name("fault_clockjump", tests, setup, wk_servers_teardown);
}
