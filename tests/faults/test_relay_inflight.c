/*
 * test_relay_inflight.c: scenario 4 of the fault suite (docs/testing.md), replies held in flight
 * past the ttl.
 *
 * Three real servers, each behind a fault relay. The relays hold the replies (or the
 * whole stream, both ways) or delay them past the lease, on one node or on several.
 * What is asserted:
 *   - dlock_acquire never returns DLOCK_OK when the answers come too late: with held
 *     replies it gives up at the per-node deadline (TIMEOUT for N = 1, NOQUORUM for
 *     N = 3), and when only the late part is delayed past the ttl (the per-node
 *     deadline is longer than the lease) the grants come back with no validity left;
 *   - nothing survives the ttl: no lock key is left on any node ttl + margin after
 *     the attempt (or after the held bytes were let through);
 *   - with a delay that leaves some validity, the validity the client reports never
 *     exceeds the lease the servers still have;
 *   - the client works afterwards: late replies are discarded, not taken for answers,
 *     and a connection whose server closed it behind its late replies (a restart) is
 *     remade before it is used again.
 * Liveness bounds are multiplied by dh_slack(); timings are printed as FIG lines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"
#include "relay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N IT_RELAYED

/* The scenario's summary: attempts under a fault that returned OK, keys left. */
static int g_faulted_attempts, g_faulted_ok, g_keys_left;

static int clean(void **state)
{
    (void)state;
    for (int i = 0; i < N; i++)
        fr_pass(it_relay[i]);
    return 0;
}

/* A client of node 0 alone (n == 1) or of all three, with a per-node deadline. */
static dlock_client *client(int n, int64_t timeout_ms)
{
    dlock_config cfg = {0};
    cfg.timeout_ms = timeout_ms;
    cfg.connect_timeout_ms = 1000 * dh_slack();
    return it_client_cfg(n == 1 ? fr_url(it_relay[0]) : it_relayed_urls, &cfg);
}

/* Connect every node (the faults below are for requests, not handshakes). */
static void warm(dlock_client *c)
{
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "warm", &h), DLOCK_OK);
}

static int try_acquire(dlock_client *c, const char *name, int64_t ttl_ms, dlock_lock **l,
                       int64_t *took)
{
    dlock_opts o = {0};
    o.ttl_ms = ttl_ms;
    int64_t t0 = dh_now_ms();
    int rc = dlock_acquire(c, name, &o, l);
    *took = dh_now_ms() - t0;
    it_show(name, rc);
    return rc;
}

/* Lock keys of `name` on the n first servers. */
static int keys_left(int n, const char *name)
{
    char key[128];
    it_key(key, sizeof key, name);
    int left = 0;
    for (int i = 0; i < n; i++)
        left += (int)it_exists(&it_relayed_srv[i], key);
    return left;
}

/* After a fault is healed, a full cycle works and the answers are ours. */
static void assert_works(dlock_client *c, int n, const char *name)
{
    dlock_lock *l = it_acquire(c, name, 5000);
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, name, &h), DLOCK_OK);
    assert_string_equal(h.token, dlock_token(l));
    assert_int_equal(dlock_check(l), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(keys_left(n, name), 0);
}

/* Replies held on `held` of the client's n nodes for longer than the ttl. */
static void held_replies(int n, int held, int dirs, const char *name)
{
    const int64_t ttl = 300 * dh_slack(), timeout = it_timeout_ms();
    dlock_client *c = client(n, timeout);
    warm(c);
    for (int i = 0; i < held; i++)
        fr_hold(it_relay[i], dirs);
    int64_t t0 = dh_now_ms(), took;
    dlock_lock *l = NULL;
    int rc = try_acquire(c, name, ttl, &l, &took);
    char fig[96];
    snprintf(fig, sizeof fig, "held_n%d_h%d_%s", n, held, dirs == FR_DOWN ? "replies" : "both");
    printf("FIG %s_acquire_ms %lld ms\n", fig, (long long)took);
    g_faulted_attempts++;
    g_faulted_ok += rc == DLOCK_OK;
    assert_int_not_equal(rc, DLOCK_OK);
    assert_null(l);
    assert_int_equal(rc, n == 1 ? DLOCK_ERR_TIMEOUT : DLOCK_ERR_NOQUORUM);
    assert_true(took <= (timeout + 100) * dh_slack());
    /* Hold past the ttl, then let everything through. */
    int64_t rest = ttl + 100 - (dh_now_ms() - t0);
    if (rest > 0)
        dh_sleep_ms(rest);
    int early = keys_left(n, name);
    for (int i = 0; i < held; i++)
        fr_release(it_relay[i]);
    int64_t released = dh_now_ms();
    /* Held requests reach the servers only now (their acquire runs after the ttl),
     * so the bound starts at the release: nothing may outlive a ttl from there. */
    dh_sleep_ms(ttl + 100);
    int left = keys_left(n, name);
    printf("FIG %s_keys_at_ttl %d count\n", fig, early);
    printf("FIG %s_keys_left %d count\n", fig, left);
    g_keys_left += early + left;
    if (left > 0) {
        char key[128];
        it_key(key, sizeof key, name);
        for (int i = 0; i < n; i++)
            fprintf(stderr, "node %d: PTTL %lld ms, %lld ms after the release\n", i,
                    it_pttl(&it_relayed_srv[i], key), (long long)(dh_now_ms() - released));
    }
    assert_int_equal(early, 0);
    assert_int_equal(left, 0);
    assert_works(c, n, "after-held");
    dlock_client_free(c);
}

static void test_held_replies_one_node(void **state)
{
    (void)state;
    held_replies(1, 1, FR_DOWN, "held-1");
    held_replies(1, 1, FR_DOWN | FR_UP, "stalled-1");
}

/* A stall (both directions held) long enough for the client to try several times and
 * give its connection up: the held attempts reach the server when the path heals,
 * after the client closed. Nothing may outlive a ttl from then on; a key that is
 * there at all after the heal is an attempt that no release followed (FIG). */
static void test_stall_with_retries(void **state)
{
    (void)state;
    const int64_t ttl = 300 * dh_slack();
    dlock_client *c = client(1, it_timeout_ms());
    warm(c);
    fr_hold(it_relay[0], FR_UP | FR_DOWN);
    for (int i = 0; i < 6; i++) {
        int64_t took;
        dlock_lock *l = NULL;
        int rc = try_acquire(c, "stall-retries", ttl, &l, &took);
        g_faulted_attempts++;
        g_faulted_ok += rc == DLOCK_OK;
        assert_int_equal(rc, DLOCK_ERR_TIMEOUT);
        assert_true(took <= (it_timeout_ms() + 1000 * dh_slack() + 100) * dh_slack());
    }
    fr_release(it_relay[0]);
    dh_sleep_ms(50);
    int phantom = keys_left(1, "stall-retries");
    printf("FIG stall_retries_keys_after_heal %d count\n", phantom);
    dh_sleep_ms(ttl + 100);
    int left = keys_left(1, "stall-retries");
    printf("FIG stall_retries_keys_left %d count\n", left);
    g_keys_left += left;
    assert_int_equal(left, 0);
    assert_works(c, 1, "after-stall");
    dlock_client_free(c);
}

static void test_held_replies_three_nodes(void **state)
{
    (void)state;
    held_replies(N, N, FR_DOWN, "held-3of3");
    held_replies(N, 2, FR_DOWN, "held-2of3");
    held_replies(N, N, FR_DOWN | FR_UP, "stalled-3of3");
}

/* Only the late part: the per-node deadline is longer than the lease, and the replies
 * of `late` nodes arrive after the ttl. Grants arrive, with no validity left. */
static void late_replies(int n, int late)
{
    const int64_t ttl = 200 * dh_slack(), timeout = 1000 * dh_slack();
    dlock_client *c = client(n, timeout);
    warm(c);
    for (int i = 0; i < late; i++)
        fr_delay(it_relay[i], 0, ttl + 100);
    char name[64];
    snprintf(name, sizeof name, "late-n%d-%d", n, late);
    int64_t took;
    dlock_lock *l = NULL;
    int rc = try_acquire(c, name, ttl, &l, &took);
    printf("FIG late_n%d_l%d_acquire_ms %lld ms\n", n, late, (long long)took);
    g_faulted_attempts++;
    g_faulted_ok += rc == DLOCK_OK;
    assert_int_not_equal(rc, DLOCK_OK);
    assert_null(l);
    /* Every node granted, too late to be of use: "no validity left". */
    assert_int_equal(rc, DLOCK_ERR_TIMEOUT);
    assert_non_null(strstr(dlock_errmsg(), "no validity left"));
    dh_sleep_ms(ttl + 100);
    int left = keys_left(n, name);
    printf("FIG late_n%d_l%d_keys_left %d count\n", n, late, left);
    g_keys_left += left;
    assert_int_equal(left, 0);
    for (int i = 0; i < late; i++)
        fr_delay(it_relay[i], 0, 0);
    assert_works(c, n, "after-late");
    dlock_client_free(c);
}

static void test_late_replies_leave_no_validity(void **state)
{
    (void)state;
    late_replies(1, 1);
    late_replies(N, N);
    late_replies(N, 2); /* the quorum's second grant is the late one */
}

/* A delay that leaves validity: the client's view never exceeds the servers' lease. */
static void test_validity_never_exceeds_the_servers_lease(void **state)
{
    (void)state;
    const int64_t ttl = 1000 * dh_slack(), delay = 150 * dh_slack();
    dlock_client *c = client(N, 1000 * dh_slack());
    warm(c);
    for (int i = 0; i < N; i++)
        fr_delay(it_relay[i], delay, delay);
    for (int round = 0; round < 3; round++) {
        int64_t took;
        dlock_lock *l = NULL;
        int rc = try_acquire(c, "delayed", ttl, &l, &took);
        assert_int_equal(rc, DLOCK_OK);
        int64_t remaining = dlock_remaining_ms(l);
        long long pttl_min = ttl;
        for (int i = 0; i < N; i++) {
            long long p = it_pttl(&it_relayed_srv[i], "dlock:{delayed}");
            if (p < pttl_min)
                pttl_min = p;
        }
        printf("FIG delayed_validity_ms %lld ms\n", (long long)remaining);
        printf("FIG delayed_server_lease_ms %lld ms\n", pttl_min);
        printf("FIG delayed_round_ms %lld ms\n", (long long)took);
        assert_true(remaining > 0);
        assert_true(remaining <= ttl - took);
        /* The server lease is read after the client's view, through no relay: it can
         * only have shrunk, so this compares the client with an underestimate. */
        assert_true(remaining <= pttl_min);
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    dlock_client_free(c);
}

/* A reply that comes after its round gave up on it, and then the server's close (it
 * restarted): the next call on that connection reconnects. It must not send its command
 * there and fail on the EOF that waited behind the late replies. */
static void test_late_replies_then_restart(void **state)
{
    (void)state;
    dlock_client *c = client(1, it_timeout_ms());
    warm(c);
    fr_delay(it_relay[0], 0, 3 * it_timeout_ms());
    dlock_opts o = {0};
    o.ttl_ms = 10000;
    dlock_lock *l = NULL;
    assert_int_equal(dlock_acquire(c, "late", &o, &l), DLOCK_ERR_TIMEOUT);
    fr_delay(it_relay[0], 0, 0);
    /* The acquire's reply and its clean-up's arrive; then the server goes, and the
     * relay passes its close on after them. */
    dh_sleep_ms(5 * it_timeout_ms());
    dh_server_kill(&it_relayed_srv[0]);
    assert_int_equal(dh_server_restart(&it_relayed_srv[0]), 0);
    dh_sleep_ms(100);
    /* One round, no retry: with the EOF unseen, the round would fail with IO. */
    dlock_holder h;
    int rc = dlock_inspect(c, "late", &h);
    it_show("inspect after the restart", rc);
    assert_int_equal(rc, DLOCK_OK);
    dlock_client_free(c);
}

/* A round decided without a node whose handshake was still going (its replies late)
 * leaves that connection mid-handshake; its replies then arrive, and the server closes
 * (it restarted). The next round must see that close behind the handshake's replies
 * and reconnect, not hold its command behind a handshake that is over and fail on the
 * EOF: here node 2 refuses writes, so the acquire needs node 0. */
static void test_handshake_left_then_restart(void **state)
{
    (void)state;
    /* Restart voting off: node 0's grant after its restart counts, as it would for a
     * restart this client did not see; here the point is the connection. */
    dlock_config cfg = {0};
    cfg.timeout_ms = it_timeout_ms();
    cfg.connect_timeout_ms = 1000 * dh_slack();
    cfg.restart_voting = DLOCK_RESTART_OFF;
    dlock_client *c = it_client_cfg(it_relayed_urls, &cfg);
    fr_delay(it_relay[0], 0, 3 * it_timeout_ms());
    dlock_opts o = {0};
    o.ttl_ms = 10000;
    dlock_lock *l = NULL;
    /* Decided by nodes 1 and 2; node 0's handshake goes on. */
    assert_int_equal(dlock_acquire(c, "hs-left", &o, &l), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    fr_delay(it_relay[0], 0, 0);
    dh_sleep_ms(5 * it_timeout_ms()); /* its replies arrive, unread */
    dh_server_kill(&it_relayed_srv[0]);
    assert_int_equal(dh_server_restart(&it_relayed_srv[0]), 0);
    dh_sleep_ms(100);
    freeReplyObject(dh_cmd(&it_relayed_srv[2], "CONFIG SET min-replicas-to-write 1"));
    int rc = dlock_acquire(c, "hs-after", &o, &l);
    it_show("acquire after the restart, node 2 refusing", rc);
    freeReplyObject(dh_cmd(&it_relayed_srv[2], "CONFIG SET min-replicas-to-write 0"));
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_held_replies_one_node, clean),
        cmocka_unit_test_setup(test_stall_with_retries, clean),
        cmocka_unit_test_setup(test_held_replies_three_nodes, clean),
        cmocka_unit_test_setup(test_late_replies_leave_no_validity, clean),
        cmocka_unit_test_setup(test_validity_never_exceeds_the_servers_lease, clean),
        cmocka_unit_test_setup(test_late_replies_then_restart, clean),
        cmocka_unit_test_setup(test_handshake_left_then_restart, clean),
    };
    int failed =
        cmocka_run_group_tests_name("inflight", tests, it_relayed_setup, it_relayed_teardown);
    printf("FIG inflight_faulted_attempts %d count\n", g_faulted_attempts);
    printf("FIG inflight_faulted_attempts_ok %d count\n", g_faulted_ok);
    printf("FIG inflight_keys_left_after_ttl %d count\n", g_keys_left);
    return failed;
}
