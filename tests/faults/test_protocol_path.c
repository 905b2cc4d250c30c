/*
 * test_protocol_path.c: scenario 13 of the fault suite (docs/testing.md), protocol faults
 * through the fault relay: replies lost, cut short, trickled or blackholed on their way
 * back (what the server answers is test_protocol.c).
 *
 * One real redis-server behind a relay (relay.h; the fixture is protocol.h); the client
 * talks to the relay. The relay resets or closes connections in the middle of a reply,
 * replaces or holds a reply the server gave, trickles, and blackholes. What is asserted:
 *   - an acquire whose outcome is unknown (the server ran it, the answer was lost or
 *     unusable) is followed by a release on that node: the key is gone at once, not
 *     after the ttl;
 *   - a reset in the middle of a reply, a close after k bytes, a trickle and a
 *     blackhole all end the call by its deadline, connections recover after healing,
 *     and the process's descriptors come back to their count.
 * Figures are printed as FIG lines; liveness bounds are multiplied by dh_slack().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"
#include "protocol.h"

#include <stdio.h>
#include <string.h>

/* ---- unknown outcomes ------------------------------------------------------------- */

/* The server ran the acquire; what reached the client was not a usable answer. */
static const struct unknown {
    const char *label;
    fr_rule rule;
    bool hold; /* hold replies instead of a rule */
} g_unknown[] = {
    {"error_after_run", {.action = FR_REPLACE_AFTER, .canned = FR_LOADING}, false},
    {"wrong_type_after_run", {.action = FR_REPLACE_AFTER, .canned = FR_BULK}, false},
    {"reply_held_past_timeout", {.action = FR_REPLACE_AFTER}, true},
    {"reply_lost_reset", {.action = FR_RESET_REPLY, .k = 0}, false},
    {"reset_mid_reply", {.action = FR_RESET_REPLY, .k = 5}, false},
    {"closed_after_0_bytes", {.action = FR_CLOSE_AFTER, .k = 0}, false},
    {"closed_after_1_byte", {.action = FR_CLOSE_AFTER, .k = 1}, false},
    {"closed_after_all_but_1", {.action = FR_CLOSE_AFTER, .k = 18}, false},
    {"http_after_run", {.action = FR_REPLACE_AFTER, .canned = FR_HTTP}, false},
    {"huge_bulk_after_run", {.action = FR_REPLACE_AFTER, .canned = FR_HUGE_BULK}, false},
};

static void test_unknown_outcome_is_released(void **state)
{
    (void)state;
    char failed[1024] = "";
    int nfailed = 0;
    for (size_t i = 0; i < sizeof g_unknown / sizeof *g_unknown; i++) {
        const struct unknown *u = &g_unknown[i];
        char name[64], key[128];
        snprintf(name, sizeof name, "unknown-%s", u->label);
        it_key(key, sizeof key, name);
        dlock_holder h;
        assert_int_equal(dlock_inspect(pr_c, "warm", &h), DLOCK_OK);
        if (u->hold) {
            fr_hold(pr_relay[0], FR_DOWN);
        } else {
            fr_rule ru = u->rule;
            ru.count = 1;
            ru.cmd = "EVALSHA";
            fr_add_rule(pr_relay[0], &ru);
        }
        dlock_lock *l = NULL;
        int64_t t0 = dh_now_ms();
        int rc = pr_acquire(pr_c, name, &l);
        int64_t took = dh_now_ms() - t0;
        it_show(u->label, rc);
        assert_int_not_equal(rc, DLOCK_OK);
        assert_int_not_equal(rc, DLOCK_ERR_BUSY);
        assert_true(took <= pr_call_bound_ms());
        /* The server did run it (its fence counter moved), so only a release can
         * take the key away before its ttl. */
        char fkey[128];
        it_fence_key(fkey, sizeof fkey, name);
        assert_int_equal(it_exists(&pr_srv[0], fkey), 1);
        int64_t gone = pr_key_gone_ms(&pr_srv[0], key);
        printf("FIG unknown_outcome_%s_key_gone_ms %lld ms\n", u->label, (long long)gone);
        if (gone < 0) {
            long long pttl = it_pttl(&pr_srv[0], key);
            fprintf(stderr,
                    "unknown outcome \"%s\" (%s): the key is still there after 500 ms, "
                    "PTTL %lld ms: no release reached the node\n",
                    u->label, dlock_errname(rc), pttl);
            snprintf(failed + strlen(failed), sizeof failed - strlen(failed), " %s", u->label);
            nfailed++;
            it_del(&pr_srv[0], key);
        }
        fr_pass(pr_relay[0]);
        pr_assert_works(pr_c, &pr_srv[0], "after-unknown");
    }
    printf("FIG unknown_outcome_keys_left %d count\n", nfailed);
    if (nfailed > 0)
        fprintf(stderr, "keys left until their ttl by:%s\n", failed);
    assert_int_equal(nfailed, 0);
}

/* ---- a broken path: reset, close after k, trickle, blackhole ------------------------ */

/* The process's descriptors, not counting the relays'. */
static int client_fds(void)
{
    int n = dh_fd_count();
    for (int i = 0; i < 3; i++)
        if (pr_relay[i] != NULL)
            n -= fr_fds(pr_relay[i]);
    return n;
}

/* Let the relay notice closed connections, then count. */
static int settled_fds(void)
{
    dh_sleep_ms(50);
    return client_fds();
}

static void test_reset_and_close_mid_reply(void **state)
{
    (void)state;
    int fds0 = settled_fds();
    /* The release's reply is ":1\r\n": every cut short of all four bytes. */
    static const long ks[] = {0, 1, 2, 3};
    static const enum fr_action acts[] = {FR_RESET_REPLY, FR_CLOSE_AFTER};
    int64_t worst = 0;
    for (int a = 0; a < 2; a++) {
        for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
            dlock_lock *l = it_acquire(pr_c, "midreply", PR_TTL_MS);
            fr_rule ru = {.action = acts[a], .k = ks[i], .count = 1, .cmd = "EVALSHA"};
            fr_add_rule(pr_relay[0], &ru);
            int64_t t0 = dh_now_ms();
            int rc = dlock_release(l); /* the server runs it; the answer breaks */
            int64_t took = dh_now_ms() - t0;
            if (took > worst)
                worst = took;
            it_show(acts[a] == FR_RESET_REPLY ? "release, reset mid-reply"
                                              : "release, closed mid-reply",
                    rc);
            assert_int_equal(rc, DLOCK_ERR_IO);
            assert_true(took <= pr_call_bound_ms());
            assert_int_equal(it_exists(&pr_srv[0], "dlock:{midreply}"), 0);
            fr_clear_rules(pr_relay[0]);
            pr_assert_works(pr_c, &pr_srv[0], "after-midreply");
        }
    }
    printf("FIG mid_reply_break_worst_call_ms %lld ms\n", (long long)worst);
    int fds1 = settled_fds();
    printf("FIG mid_reply_fd_growth %d count\n", fds1 - fds0);
    assert_int_equal(fds1, fds0);
}

static void test_trickle_ends_by_deadline(void **state)
{
    (void)state;
    fr_trickle(pr_relay[0], 100);
    dlock_lock *l = NULL;
    int64_t t0 = dh_now_ms();
    int rc = pr_acquire(pr_c, "trickle", &l);
    int64_t took = dh_now_ms() - t0;
    it_show("trickled acquire", rc);
    printf("FIG trickle_acquire_ms %lld ms\n", (long long)took);
    assert_int_equal(rc, DLOCK_ERR_TIMEOUT);
    assert_true(took <= pr_call_bound_ms());
    /* The outcome was unknown: the clean-up release went up (requests are not
     * trickled) and removed the key. */
    assert_true(pr_key_gone_ms(&pr_srv[0], "dlock:{trickle}") >= 0);
    /* Trickling on: calls keep failing on time, never with a wrong answer. Once the
     * client gives the connection up (too many replies owed), the new one's handshake
     * trickles too: that call's deadline includes the connect timeout. */
    int64_t worst = 0;
    for (int i = 0; i < 4; i++) {
        t0 = dh_now_ms();
        rc = pr_acquire(pr_c, "trickle", &l);
        took = dh_now_ms() - t0;
        worst = took > worst ? took : worst;
        assert_int_not_equal(rc, DLOCK_OK);
        assert_true(took <= (pr_timeout_ms() + pr_connect_ms() + 100) * dh_slack());
    }
    printf("FIG trickle_worst_call_ms %lld ms\n", (long long)worst);
    fr_trickle(pr_relay[0], 0);
    /* Late bytes of abandoned replies are discarded, not taken for new answers. */
    for (int i = 0; i < 3; i++)
        pr_assert_works(pr_c, &pr_srv[0], "after-trickle");
}

/* Calls until the client works again through relay 0 after a blackhole ends. */
static int recover(void)
{
    for (int calls = 1; calls <= 50; calls++) {
        dlock_lock *l = NULL;
        int64_t t0 = dh_now_ms();
        int rc = pr_acquire(pr_c, "bh-recover", &l);
        /* A connection to be replaced may cost the connect deadline, no more. */
        assert_true(dh_now_ms() - t0 <= (pr_timeout_ms() + pr_connect_ms() + 100) * dh_slack());
        if (rc == DLOCK_OK) {
            assert_int_equal(dlock_release(l), DLOCK_OK);
            return calls;
        }
    }
    return -1;
}

static void blackhole_round(enum fr_heal heal)
{
    const char *mode = heal == FR_HEAL_DEAD ? "dead" : "reset";
    int fds0 = settled_fds();
    fr_blackhole(pr_relay[0], true, heal);
    int64_t worst = 0;
    for (int i = 0; i < 5; i++) {
        dlock_lock *l = NULL;
        int64_t t0 = dh_now_ms();
        int rc = pr_acquire(pr_c, "bh", &l);
        int64_t took = dh_now_ms() - t0;
        if (took > worst)
            worst = took;
        assert_int_not_equal(rc, DLOCK_OK);
        /* On the open connection: its deadline. Once the client gives it up, a new
         * connection (accepted, never answered): the connect deadline. */
        assert_true(took <= (pr_timeout_ms() + pr_connect_ms() + 100) * dh_slack());
        if (i == 0) {
            it_show("blackholed acquire", rc);
            assert_int_equal(rc, DLOCK_ERR_TIMEOUT);
            assert_true(took <= pr_call_bound_ms());
        }
    }
    printf("FIG blackhole_%s_worst_call_ms %lld ms\n", mode, (long long)worst);
    fr_blackhole(pr_relay[0], false, heal);
    int calls = recover();
    printf("FIG blackhole_%s_recovery_calls %d count\n", mode, calls);
    assert_true(calls > 0);
    for (int i = 0; i < 3; i++)
        pr_assert_works(pr_c, &pr_srv[0], "after-blackhole");
    int fds1 = settled_fds();
    printf("FIG blackhole_%s_fd_growth %d count\n", mode, fds1 - fds0);
    assert_int_equal(fds1, fds0);
    assert_int_equal(it_exists(&pr_srv[0], "dlock:{bh}"), 0);
}

static void test_blackhole_ends_by_deadline_and_recovers(void **state)
{
    (void)state;
    blackhole_round(FR_HEAL_RESET);
    blackhole_round(FR_HEAL_DEAD);
}

/* The tests here arm a rule for the next EVALSHA and count on the server running it,
 * so the lock scripts must be cached there before the first one (in test_protocol.c
 * the tests before did it): a fresh server answers each script's first EVALSHA with
 * -NOSCRIPT, without running it. */
static int setup_cached(void **state)
{
    pr_setup_one(state);
    pr_assert_works(pr_c, &pr_srv[0], "scripts");
    return 0;
}

int main(void)
{
    const struct CMUnitTest one[] = {
        cmocka_unit_test_setup(test_unknown_outcome_is_released, pr_clean),
        cmocka_unit_test_setup(test_reset_and_close_mid_reply, pr_clean),
        cmocka_unit_test_setup(test_trickle_ends_by_deadline, pr_clean),
        cmocka_unit_test_setup(test_blackhole_ends_by_deadline_and_recovers, pr_clean),
    };
    return cmocka_run_group_tests_name("protocol_path_one_node", one, setup_cached,
                                       pr_teardown_all);
}
