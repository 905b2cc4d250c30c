/*
 * test_protocol.c: scenario 13 of the fault suite (docs/testing.md), protocol faults through the
 * fault relay.
 *
 * One real redis-server behind a relay (relay.h); the client talks to the relay. The
 * relay answers the lock scripts' EVALSHA with canned replies (instead of the server,
 * or after the server ran the command), resets or closes connections in the middle of
 * a reply, trickles, and blackholes. What is asserted:
 *   - every canned reply maps to the error the library documents for it (an
 *     unavailable server, a protocol error, ...), for acquire, extend, check and release, and never
 * DLOCK_ERR_BUSY for an unavailable server; each call ends by its deadline, and the client keeps
 *     working afterwards;
 *   - `*2147483647` and `$1000000000...` are refused without a huge allocation (the
 *     process's peak virtual memory stays put);
 *   - -NOSCRIPT is answered by one EVAL, once (counted by the server's commandstats);
 *     a relay that answers -NOSCRIPT twice gives an error, not a loop;
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
#include "relay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TTL_MS                                                                                     \
    10000 /* far longer than the test waits for a key to go: a key that is                         \
             gone in time was released, not expired */

static dh_server g_srv[3];
static fr_relay *g_relay[3];
static dlock_client *g_c; /* through relay 0 only */
static it_log g_log;

static int64_t timeout_ms(void)
{
    return it_timeout_ms();
}

static int64_t connect_ms(void)
{
    return 1000 * dh_slack();
}

/* The bound every call on a warm connection must keep: its deadline plus 100 ms. */
static int64_t call_bound_ms(void)
{
    return (timeout_ms() + 100) * dh_slack();
}

static dlock_client *client_for(const char *urls)
{
    dlock_config cfg = {0};
    cfg.timeout_ms = timeout_ms();
    cfg.connect_timeout_ms = connect_ms();
    cfg.log = it_log_cb;
    cfg.log_user = &g_log;
    return it_client_cfg(urls, &cfg);
}

static int setup_one(void **state)
{
    (void)state;
    it_log_init(&g_log);
    assert_int_equal(dh_server_start(&g_srv[0], NULL), 0);
    g_relay[0] = fr_start(g_srv[0].port);
    assert_non_null(g_relay[0]);
    g_c = client_for(fr_url(g_relay[0]));
    return 0;
}

static int teardown_all(void **state)
{
    (void)state;
    dlock_client_free(g_c);
    g_c = NULL;
    fr_cluster_stop(3, g_srv, g_relay);
    return 0;
}

/* Each test starts with no fault and a warm connection (handshake done), so that a
 * rule on EVALSHA meets the call under test and nothing else. */
static int clean(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++)
        if (g_relay[i] != NULL)
            fr_pass(g_relay[i]);
    dlock_holder h;
    int rc = dlock_inspect(g_c, "warm", &h);
    if (rc != DLOCK_OK)
        rc = dlock_inspect(g_c, "warm", &h); /* a connection left broken by a test */
    assert_int_equal(rc, DLOCK_OK);
    return 0;
}

/* Wait up to 500 ms (times the slack) for key to be gone from server s. Returns how
 * long it took, or -1 if it is still there. */
static int64_t key_gone_ms(dh_server *s, const char *key)
{
    int64_t t0 = dh_now_ms(), until = t0 + 500 * dh_slack();
    do {
        if (it_exists(s, key) == 0)
            return dh_now_ms() - t0;
        dh_sleep_ms(5);
    } while (dh_now_ms() < until);
    return -1;
}

static int acquire(dlock_client *c, const char *name, dlock_lock **l)
{
    dlock_opts o = {0};
    o.ttl_ms = TTL_MS;
    return dlock_acquire(c, name, &o, l);
}

/* The client works: a full cycle, with replies that match their commands (the
 * server holds our token, inspect reports it, release removes it). */
static void assert_works(dlock_client *c, dh_server *s, const char *name)
{
    dlock_lock *l = NULL;
    int rc = acquire(c, name, &l);
    if (rc != DLOCK_OK)
        it_show("works?", rc);
    assert_int_equal(rc, DLOCK_OK);
    char key[128];
    it_key(key, sizeof key, name);
    char *v = it_get(s, key);
    assert_non_null(v);
    assert_memory_equal(v, dlock_token(l), DLOCK_TOKEN_LEN);
    free(v);
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, name, &h), DLOCK_OK);
    assert_int_equal(h.held, 1);
    assert_string_equal(h.token, dlock_token(l));
    assert_int_equal(h.fence, dlock_fence(l));
    assert_int_equal(dlock_check(l), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(it_exists(s, key), 0);
}

/* ---- every canned reply maps to its documented error --------------------------- */

static const struct expected {
    fr_canned what;
    int err; /* for every operation; -1: see the test */
} g_map[] = {
    {FR_LOADING, DLOCK_ERR_UNAVAILABLE},
    {FR_BUSY, DLOCK_ERR_UNAVAILABLE},
    {FR_MASTERDOWN, DLOCK_ERR_UNAVAILABLE},
    {FR_TRYAGAIN, DLOCK_ERR_UNAVAILABLE},
    {FR_CLUSTERDOWN, DLOCK_ERR_UNAVAILABLE},
    {FR_READONLY, DLOCK_ERR_UNAVAILABLE},
    {FR_OOM, DLOCK_ERR_UNAVAILABLE},
    {FR_MISCONF, DLOCK_ERR_UNAVAILABLE},
    {FR_NOAUTH, DLOCK_ERR_AUTH},
    {FR_WRONGPASS, DLOCK_ERR_AUTH},
    {FR_NOPERM, DLOCK_ERR_AUTH},
    {FR_WRONGTYPE, DLOCK_ERR_PROTOCOL},
    {FR_MOVED, DLOCK_ERR_PROTOCOL},
    {FR_ASK, DLOCK_ERR_PROTOCOL},
    {FR_CROSSSLOT, DLOCK_ERR_PROTOCOL},
    {FR_ERR, DLOCK_ERR_PROTOCOL},
    {FR_BULK, DLOCK_ERR_PROTOCOL},
    {FR_NIL, DLOCK_ERR_PROTOCOL},
    {FR_STATUS, DLOCK_ERR_PROTOCOL},
    {FR_EMPTY_ARRAY, DLOCK_ERR_PROTOCOL},
    {FR_HUGE_ARRAY, DLOCK_ERR_PROTOCOL},
    {FR_HUGE_BULK, DLOCK_ERR_PROTOCOL},
    {FR_HTTP, DLOCK_ERR_PROTOCOL},
    {FR_NOSCRIPT, DLOCK_OK}, /* retried as EVAL */
    {FR_INTEGER, -1},
    {FR_HUGE_INTEGER, -1},
};

enum op { OP_ACQUIRE, OP_EXTEND, OP_CHECK, OP_RELEASE, OP_COUNT };
static const char *const op_name[OP_COUNT] = {"acquire", "extend", "check", "release"};

/* Arm `what` for the next EVALSHA, run op, and return its code; *took gets the time. */
static int faulted_op(enum op op, fr_canned what, enum fr_action how, const char *name,
                      dlock_lock **held, int64_t *took)
{
    dlock_holder h;
    assert_int_equal(dlock_inspect(g_c, "warm", &h), DLOCK_OK); /* warm, whatever came before */
    fr_replace(g_relay[0], what, how, 1, "EVALSHA");
    int64_t t0 = dh_now_ms();
    int rc;
    dlock_lock *l = NULL;
    switch (op) {
    case OP_ACQUIRE:
        rc = acquire(g_c, name, &l);
        if (rc == DLOCK_OK)
            *held = l;
        else
            assert_null(l);
        break;
    case OP_EXTEND:
        rc = dlock_extend(*held, TTL_MS);
        break;
    case OP_CHECK:
        rc = dlock_check(*held);
        break;
    default:
        rc = dlock_release(*held);
        *held = NULL;
        break;
    }
    *took = dh_now_ms() - t0;
    char what_s[64];
    snprintf(what_s, sizeof what_s, "%s %s %s", op_name[op], fr_canned_name(what),
             how == FR_REPLACE_INSTEAD ? "instead" : "after");
    it_show(what_s, rc);
    fr_clear_rules(g_relay[0]);
    return rc;
}

static void test_canned_replies_map_to_documented_errors(void **state)
{
    (void)state;
    int64_t worst = 0;
    int checked = 0;
    for (size_t i = 0; i < sizeof g_map / sizeof *g_map; i++) {
        const struct expected *e = &g_map[i];
        char name[64], key[128];
        snprintf(name, sizeof name, "map-%s", fr_canned_name(e->what));
        it_key(key, sizeof key, name);
        dlock_lock *l = NULL;
        for (int op = 0; op < OP_COUNT; op++) {
            if (op != OP_ACQUIRE && l != NULL && dlock_remaining_ms(l) <= 0) {
                /* Found lost by the previous fault (":42" is not "1"): start over. */
                dlock_lock_detach(l);
                it_del(&g_srv[0], key);
                l = NULL;
            }
            if (op != OP_ACQUIRE && l == NULL)
                l = it_acquire(g_c, name, TTL_MS);
            int64_t took;
            int rc = faulted_op((enum op)op, e->what, FR_REPLACE_INSTEAD, name, &l, &took);
            if (took > worst)
                worst = took;
            /* Every call ends by its deadline, whatever came back. */
            assert_true(took <= call_bound_ms());
            /* An unavailable server is never "held by another owner". */
            assert_int_not_equal(rc, DLOCK_ERR_BUSY);
            if (e->err >= 0) {
                if (rc != e->err)
                    fprintf(stderr, "%s %s: expected %s, got %s (%s)\n", op_name[op],
                            fr_canned_name(e->what), dlock_errname(e->err), dlock_errname(rc),
                            dlock_errmsg());
                assert_int_equal(rc, e->err);
            } else if (op == OP_CHECK) {
                /* An integer where check expects an array. */
                assert_int_equal(rc, DLOCK_ERR_PROTOCOL);
            } else if (op == OP_ACQUIRE && e->what == FR_INTEGER) {
                /* ":42" is a well-formed answer to the acquire script: a grant with
                 * fence 42. A fence that low harms nobody: a resource that saw any
                 * real fence refuses its holder. */
                assert_int_equal(rc, DLOCK_OK);
                assert_int_equal(dlock_fence(l), 42);
            } else if (op == OP_ACQUIRE) {
                /* A fence in the year 2255 would make a resource refuse every honest
                 * holder after it: no grant. */
                if (rc != DLOCK_ERR_PROTOCOL || strstr(dlock_errmsg(), "a day ahead") == NULL)
                    fail_msg("huge fence: %s (%s)", dlock_errname(rc), dlock_errmsg());
            } else {
                /* Extend and release answer 1 or 0, never another number. */
                assert_int_equal(rc, DLOCK_ERR_PROTOCOL);
            }
            checked++;
            if (op == OP_ACQUIRE && l != NULL &&
                (e->what == FR_INTEGER || e->what == FR_HUGE_INTEGER)) {
                /* The relay answered for the server: nothing is held there. */
                dlock_lock_detach(l);
                l = NULL;
            }
        }
        if (l != NULL)
            dlock_lock_detach(l);
        it_del(&g_srv[0], key);
        /* The client keeps working after each fault. */
        assert_works(g_c, &g_srv[0], "after-map");
    }
    printf("FIG protocol_mapped_calls %d count\n", checked);
    printf("FIG protocol_fault_worst_call_ms %lld ms\n", (long long)worst);
}

/* ---- huge replies ---------------------------------------------------------------- */

static void test_huge_replies_refused_without_huge_allocation(void **state)
{
    (void)state;
    static const fr_canned huge[] = {FR_HUGE_ARRAY, FR_HUGE_BULK};
    long long before = dh_status_kib("VmSize"), peak0 = dh_status_kib("VmPeak");
    assert_true(before > 0);
    printf("INFO VmSize %lld KiB, VmPeak so far %lld KiB\n", before, peak0);
    for (int how = 0; how < 2; how++) {
        for (size_t i = 0; i < 2; i++) {
            int64_t took;
            dlock_lock *l = NULL;
            char name[64];
            snprintf(name, sizeof name, "huge-%d-%zu", how, i);
            int rc = faulted_op(OP_ACQUIRE, huge[i],
                                how == 0 ? FR_REPLACE_INSTEAD : FR_REPLACE_AFTER, name, &l, &took);
            assert_int_equal(rc, DLOCK_ERR_PROTOCOL);
            assert_true(took <= call_bound_ms());
            /* The refusal names the cap, not an allocation failure. */
            assert_non_null(strstr(dlock_errmsg(), "refused"));
            assert_works(g_c, &g_srv[0], "after-huge");
        }
    }
    long long peak = dh_status_kib("VmPeak");
    long long grown = peak - (peak0 > before ? peak0 : before);
    printf("FIG huge_reply_vm_growth_kib %lld KiB\n", grown > 0 ? grown : 0);
    /* hiredis's default reader would reserve 16 GiB for the array and buffer up to a
     * GB of the bulk; the cap is 256 KiB. */
    assert_true(grown < 128 * 1024);
}

/* ---- NOSCRIPT --------------------------------------------------------------------- */

/* calls= of cmdstat_<cmd> in the server's INFO commandstats (0 when absent). */
static void test_noscript_reloaded_and_retried_once(void **state)
{
    (void)state;
    dh_server *s = &g_srv[0];
    /* A real -NOSCRIPT: the server's script cache is flushed. */
    redisReply *r = dh_cmd(s, "SCRIPT FLUSH");
    assert_non_null(r);
    freeReplyObject(r);
    long long sha0 = it_cmd_calls(s, "evalsha"), eval0 = it_cmd_calls(s, "eval");
    dlock_lock *l = it_acquire(g_c, "noscript", TTL_MS);
    long long sha1 = it_cmd_calls(s, "evalsha"), eval1 = it_cmd_calls(s, "eval");
    printf("FIG noscript_real_evalsha %lld count\n", sha1 - sha0);
    printf("FIG noscript_real_eval %lld count\n", eval1 - eval0);
    assert_int_equal(sha1 - sha0, 1);
    assert_int_equal(eval1 - eval0, 1);
    /* The release script was flushed too: its own EVALSHA, then its own EVAL. */
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(it_cmd_calls(s, "evalsha") - sha1, 1);
    assert_int_equal(it_cmd_calls(s, "eval") - eval1, 1);
    /* Both are cached now: a cycle is two EVALSHAs and no EVAL. */
    sha0 = it_cmd_calls(s, "evalsha");
    eval0 = it_cmd_calls(s, "eval");
    l = it_acquire(g_c, "noscript", TTL_MS);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(it_cmd_calls(s, "evalsha") - sha0, 2);
    assert_int_equal(it_cmd_calls(s, "eval") - eval0, 0);

    /* The relay answers -NOSCRIPT for the server once: one EVAL follows, and only the
     * EVAL reaches the server. */
    sha0 = it_cmd_calls(s, "evalsha");
    eval0 = it_cmd_calls(s, "eval");
    fr_replace(g_relay[0], FR_NOSCRIPT, FR_REPLACE_INSTEAD, 1, "EVALSHA");
    l = it_acquire(g_c, "noscript", TTL_MS);
    assert_int_equal(it_cmd_calls(s, "evalsha") - sha0, 0);
    assert_int_equal(it_cmd_calls(s, "eval") - eval0, 1);
    assert_int_equal(dlock_release(l), DLOCK_OK);

    /* -NOSCRIPT to the EVAL too (a broken proxy, or a server that cannot cache):
     * an error after exactly one retry, not a loop. */
    fr_stats st0, st1;
    fr_get_stats(g_relay[0], &st0);
    sha0 = it_cmd_calls(s, "evalsha");
    eval0 = it_cmd_calls(s, "eval");
    fr_replace(g_relay[0], FR_NOSCRIPT, FR_REPLACE_INSTEAD, FR_EVERY, "EVAL*");
    int64_t t0 = dh_now_ms();
    l = NULL;
    int rc = acquire(g_c, "noscript", &l);
    int64_t took = dh_now_ms() - t0;
    it_show("noscript twice", rc);
    dh_sleep_ms(50); /* the clean-up release, not awaited, has gone through the relay */
    fr_get_stats(g_relay[0], &st1);
    printf("FIG noscript_twice_ms %lld ms\n", (long long)took);
    printf("FIG noscript_twice_relay_answers %ld count\n", st1.injected - st0.injected);
    assert_int_equal(rc, DLOCK_ERR_PROTOCOL);
    assert_null(l);
    assert_non_null(strstr(dlock_errmsg(), "NOSCRIPT"));
    assert_true(took <= call_bound_ms());
    /* EVALSHA, its one EVAL, and the clean-up release's EVAL: three answers. */
    assert_int_equal(st1.injected - st0.injected, 3);
    assert_int_equal(it_cmd_calls(s, "evalsha") - sha0, 0);
    assert_int_equal(it_cmd_calls(s, "eval") - eval0, 0);
    fr_clear_rules(g_relay[0]);
    assert_works(g_c, s, "noscript");
}

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
        assert_int_equal(dlock_inspect(g_c, "warm", &h), DLOCK_OK);
        if (u->hold) {
            fr_hold(g_relay[0], FR_DOWN);
        } else {
            fr_rule ru = u->rule;
            ru.count = 1;
            ru.cmd = "EVALSHA";
            fr_add_rule(g_relay[0], &ru);
        }
        dlock_lock *l = NULL;
        int64_t t0 = dh_now_ms();
        int rc = acquire(g_c, name, &l);
        int64_t took = dh_now_ms() - t0;
        it_show(u->label, rc);
        assert_int_not_equal(rc, DLOCK_OK);
        assert_int_not_equal(rc, DLOCK_ERR_BUSY);
        assert_true(took <= call_bound_ms());
        /* The server did run it (its fence counter moved), so only a release can
         * take the key away before its ttl. */
        char fkey[128];
        it_fence_key(fkey, sizeof fkey, name);
        assert_int_equal(it_exists(&g_srv[0], fkey), 1);
        int64_t gone = key_gone_ms(&g_srv[0], key);
        printf("FIG unknown_outcome_%s_key_gone_ms %lld ms\n", u->label, (long long)gone);
        if (gone < 0) {
            long long pttl = it_pttl(&g_srv[0], key);
            fprintf(stderr,
                    "unknown outcome \"%s\" (%s): the key is still there after 500 ms, "
                    "PTTL %lld ms: no release reached the node\n",
                    u->label, dlock_errname(rc), pttl);
            snprintf(failed + strlen(failed), sizeof failed - strlen(failed), " %s", u->label);
            nfailed++;
            it_del(&g_srv[0], key);
        }
        fr_pass(g_relay[0]);
        assert_works(g_c, &g_srv[0], "after-unknown");
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
        if (g_relay[i] != NULL)
            n -= fr_fds(g_relay[i]);
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
            dlock_lock *l = it_acquire(g_c, "midreply", TTL_MS);
            fr_rule ru = {.action = acts[a], .k = ks[i], .count = 1, .cmd = "EVALSHA"};
            fr_add_rule(g_relay[0], &ru);
            int64_t t0 = dh_now_ms();
            int rc = dlock_release(l); /* the server runs it; the answer breaks */
            int64_t took = dh_now_ms() - t0;
            if (took > worst)
                worst = took;
            it_show(acts[a] == FR_RESET_REPLY ? "release, reset mid-reply"
                                              : "release, closed mid-reply",
                    rc);
            assert_int_equal(rc, DLOCK_ERR_IO);
            assert_true(took <= call_bound_ms());
            assert_int_equal(it_exists(&g_srv[0], "dlock:{midreply}"), 0);
            fr_clear_rules(g_relay[0]);
            assert_works(g_c, &g_srv[0], "after-midreply");
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
    fr_trickle(g_relay[0], 100);
    dlock_lock *l = NULL;
    int64_t t0 = dh_now_ms();
    int rc = acquire(g_c, "trickle", &l);
    int64_t took = dh_now_ms() - t0;
    it_show("trickled acquire", rc);
    printf("FIG trickle_acquire_ms %lld ms\n", (long long)took);
    assert_int_equal(rc, DLOCK_ERR_TIMEOUT);
    assert_true(took <= call_bound_ms());
    /* The outcome was unknown: the clean-up release went up (requests are not
     * trickled) and removed the key. */
    assert_true(key_gone_ms(&g_srv[0], "dlock:{trickle}") >= 0);
    /* Trickling on: calls keep failing on time, never with a wrong answer. Once the
     * client gives the connection up (too many replies owed), the new one's handshake
     * trickles too: that call's deadline includes the connect timeout. */
    int64_t worst = 0;
    for (int i = 0; i < 4; i++) {
        t0 = dh_now_ms();
        rc = acquire(g_c, "trickle", &l);
        took = dh_now_ms() - t0;
        worst = took > worst ? took : worst;
        assert_int_not_equal(rc, DLOCK_OK);
        assert_true(took <= (timeout_ms() + connect_ms() + 100) * dh_slack());
    }
    printf("FIG trickle_worst_call_ms %lld ms\n", (long long)worst);
    fr_trickle(g_relay[0], 0);
    /* Late bytes of abandoned replies are discarded, not taken for new answers. */
    for (int i = 0; i < 3; i++)
        assert_works(g_c, &g_srv[0], "after-trickle");
}

/* Calls until the client works again through relay 0 after a blackhole ends. */
static int recover(void)
{
    for (int calls = 1; calls <= 50; calls++) {
        dlock_lock *l = NULL;
        int64_t t0 = dh_now_ms();
        int rc = acquire(g_c, "bh-recover", &l);
        /* A connection to be replaced may cost the connect deadline, no more. */
        assert_true(dh_now_ms() - t0 <= (timeout_ms() + connect_ms() + 100) * dh_slack());
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
    fr_blackhole(g_relay[0], true, heal);
    int64_t worst = 0;
    for (int i = 0; i < 5; i++) {
        dlock_lock *l = NULL;
        int64_t t0 = dh_now_ms();
        int rc = acquire(g_c, "bh", &l);
        int64_t took = dh_now_ms() - t0;
        if (took > worst)
            worst = took;
        assert_int_not_equal(rc, DLOCK_OK);
        /* On the open connection: its deadline. Once the client gives it up, a new
         * connection (accepted, never answered): the connect deadline. */
        assert_true(took <= (timeout_ms() + connect_ms() + 100) * dh_slack());
        if (i == 0) {
            it_show("blackholed acquire", rc);
            assert_int_equal(rc, DLOCK_ERR_TIMEOUT);
            assert_true(took <= call_bound_ms());
        }
    }
    printf("FIG blackhole_%s_worst_call_ms %lld ms\n", mode, (long long)worst);
    fr_blackhole(g_relay[0], false, heal);
    int calls = recover();
    printf("FIG blackhole_%s_recovery_calls %d count\n", mode, calls);
    assert_true(calls > 0);
    for (int i = 0; i < 3; i++)
        assert_works(g_c, &g_srv[0], "after-blackhole");
    int fds1 = settled_fds();
    printf("FIG blackhole_%s_fd_growth %d count\n", mode, fds1 - fds0);
    assert_int_equal(fds1, fds0);
    assert_int_equal(it_exists(&g_srv[0], "dlock:{bh}"), 0);
}

static void test_blackhole_ends_by_deadline_and_recovers(void **state)
{
    (void)state;
    blackhole_round(FR_HEAL_RESET);
    blackhole_round(FR_HEAL_DEAD);
}

/* ---- N = 3: the same replies, one and two nodes ----------------------------------- */

static int setup_three(void **state)
{
    (void)state;
    it_log_init(&g_log);
    char urls[600];
    assert_int_equal(fr_cluster_start(3, g_srv, g_relay, urls, sizeof urls), 0);
    g_c = client_for(urls);
    return 0;
}

/* With N > 1 a failed node's error is its reason in dlock_errmsg(); the call's code
 * is DLOCK_ERR_NOQUORUM when too few answered, never the node's error or BUSY. */
static void test_three_nodes_unavailable_errors(void **state)
{
    (void)state;
    static const fr_canned some[] = {FR_LOADING, FR_BUSY,  FR_READONLY,
                                     FR_NOPERM,  FR_MOVED, FR_HUGE_ARRAY};
    for (size_t i = 0; i < sizeof some / sizeof *some; i++) {
        dlock_holder h;
        assert_int_equal(dlock_inspect(g_c, "warm", &h), DLOCK_OK);
        /* One node: the other two decide. */
        fr_replace(g_relay[0], some[i], FR_REPLACE_INSTEAD, 1, "EVALSHA");
        dlock_lock *l = it_acquire(g_c, "three", TTL_MS);
        assert_int_equal(dlock_release(l), DLOCK_OK);
        fr_clear_rules(g_relay[0]);
        assert_int_equal(dlock_inspect(g_c, "warm", &h), DLOCK_OK);
        /* Two nodes: no quorum, each reason named. */
        fr_replace(g_relay[0], some[i], FR_REPLACE_INSTEAD, 1, "EVALSHA");
        fr_replace(g_relay[1], some[i], FR_REPLACE_INSTEAD, 1, "EVALSHA");
        l = NULL;
        int64_t t0 = dh_now_ms();
        int rc = acquire(g_c, "three", &l);
        int64_t took = dh_now_ms() - t0;
        it_show(fr_canned_name(some[i]), rc);
        assert_int_equal(rc, DLOCK_ERR_NOQUORUM);
        assert_true(took <= call_bound_ms());
        if (some[i] != FR_HUGE_ARRAY)
            assert_non_null(strstr(dlock_errmsg(), fr_canned_name(some[i])));
        fr_clear_rules(g_relay[0]);
        fr_clear_rules(g_relay[1]);
        /* The grant on node 2 was undone. */
        assert_true(key_gone_ms(&g_srv[2], "dlock:{three}") >= 0);
    }
}

int main(void)
{
    const struct CMUnitTest one[] = {
        cmocka_unit_test_setup(test_canned_replies_map_to_documented_errors, clean),
        cmocka_unit_test_setup(test_huge_replies_refused_without_huge_allocation, clean),
        cmocka_unit_test_setup(test_noscript_reloaded_and_retried_once, clean),
        cmocka_unit_test_setup(test_unknown_outcome_is_released, clean),
        cmocka_unit_test_setup(test_reset_and_close_mid_reply, clean),
        cmocka_unit_test_setup(test_trickle_ends_by_deadline, clean),
        cmocka_unit_test_setup(test_blackhole_ends_by_deadline_and_recovers, clean),
    };
    const struct CMUnitTest three[] = {
        cmocka_unit_test_setup(test_three_nodes_unavailable_errors, clean),
    };
    int failed = cmocka_run_group_tests_name("protocol_one_node", one, setup_one, teardown_all);
    failed += cmocka_run_group_tests_name("protocol_three_nodes", three, setup_three, teardown_all);
    return failed;
}
