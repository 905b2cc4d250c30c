/*
 * test_protocol.c: scenario 13 of the fault suite (docs/testing.md), protocol faults through the
 * fault relay: what the server answers.
 *
 * One real redis-server behind a relay (relay.h; the fixture is protocol.h); the client
 * talks to the relay. The relay answers the lock scripts' EVALSHA with canned replies
 * (instead of the server, or after the server ran the command). What is asserted:
 *   - every canned reply maps to the error the library documents for it (an
 *     unavailable server, a protocol error, ...), for acquire, extend, check and release, and never
 * DLOCK_ERR_BUSY for an unavailable server; each call ends by its deadline, and the client keeps
 *     working afterwards;
 *   - `*2147483647` and `$1000000000...` are refused without a huge allocation (the
 *     process's peak virtual memory stays put);
 *   - -NOSCRIPT is answered by one EVAL, once (counted by the server's commandstats);
 *     a relay that answers -NOSCRIPT twice gives an error, not a loop;
 *   - with three servers, a node's error is its reason in the message of a
 *     DLOCK_ERR_NOQUORUM, never the call's code, nor BUSY.
 * Replies lost, cut short, trickled or blackholed are test_protocol_path.c.
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
#include <stdlib.h>
#include <string.h>

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
    assert_int_equal(dlock_inspect(pr_c, "warm", &h), DLOCK_OK); /* warm, whatever came before */
    fr_replace(pr_relay[0], what, how, 1, "EVALSHA");
    int64_t t0 = dh_now_ms();
    int rc;
    dlock_lock *l = NULL;
    switch (op) {
    case OP_ACQUIRE:
        rc = pr_acquire(pr_c, name, &l);
        if (rc == DLOCK_OK)
            *held = l;
        else
            assert_null(l);
        break;
    case OP_EXTEND:
        rc = dlock_extend(*held, PR_TTL_MS);
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
    fr_clear_rules(pr_relay[0]);
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
                it_del(&pr_srv[0], key);
                l = NULL;
            }
            if (op != OP_ACQUIRE && l == NULL)
                l = it_acquire(pr_c, name, PR_TTL_MS);
            int64_t took;
            int rc = faulted_op((enum op)op, e->what, FR_REPLACE_INSTEAD, name, &l, &took);
            if (took > worst)
                worst = took;
            /* Every call ends by its deadline, whatever came back. */
            assert_true(took <= pr_call_bound_ms());
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
        it_del(&pr_srv[0], key);
        /* The client keeps working after each fault. */
        pr_assert_works(pr_c, &pr_srv[0], "after-map");
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
            assert_true(took <= pr_call_bound_ms());
            /* The refusal names the cap, not an allocation failure. */
            assert_non_null(strstr(dlock_errmsg(), "refused"));
            pr_assert_works(pr_c, &pr_srv[0], "after-huge");
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
    dh_server *s = &pr_srv[0];
    /* A real -NOSCRIPT: the server's script cache is flushed. */
    redisReply *r = dh_cmd(s, "SCRIPT FLUSH");
    assert_non_null(r);
    freeReplyObject(r);
    long long sha0 = it_cmd_calls(s, "evalsha"), eval0 = it_cmd_calls(s, "eval");
    dlock_lock *l = it_acquire(pr_c, "noscript", PR_TTL_MS);
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
    l = it_acquire(pr_c, "noscript", PR_TTL_MS);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(it_cmd_calls(s, "evalsha") - sha0, 2);
    assert_int_equal(it_cmd_calls(s, "eval") - eval0, 0);

    /* The relay answers -NOSCRIPT for the server once: one EVAL follows, and only the
     * EVAL reaches the server. */
    sha0 = it_cmd_calls(s, "evalsha");
    eval0 = it_cmd_calls(s, "eval");
    fr_replace(pr_relay[0], FR_NOSCRIPT, FR_REPLACE_INSTEAD, 1, "EVALSHA");
    l = it_acquire(pr_c, "noscript", PR_TTL_MS);
    assert_int_equal(it_cmd_calls(s, "evalsha") - sha0, 0);
    assert_int_equal(it_cmd_calls(s, "eval") - eval0, 1);
    assert_int_equal(dlock_release(l), DLOCK_OK);

    /* -NOSCRIPT to the EVAL too (a broken proxy, or a server that cannot cache):
     * an error after exactly one retry, not a loop. */
    fr_stats st0, st1;
    fr_get_stats(pr_relay[0], &st0);
    sha0 = it_cmd_calls(s, "evalsha");
    eval0 = it_cmd_calls(s, "eval");
    fr_replace(pr_relay[0], FR_NOSCRIPT, FR_REPLACE_INSTEAD, FR_EVERY, "EVAL*");
    int64_t t0 = dh_now_ms();
    l = NULL;
    int rc = pr_acquire(pr_c, "noscript", &l);
    int64_t took = dh_now_ms() - t0;
    it_show("noscript twice", rc);
    dh_sleep_ms(50); /* the clean-up release, not awaited, has gone through the relay */
    fr_get_stats(pr_relay[0], &st1);
    printf("FIG noscript_twice_ms %lld ms\n", (long long)took);
    printf("FIG noscript_twice_relay_answers %ld count\n", st1.injected - st0.injected);
    assert_int_equal(rc, DLOCK_ERR_PROTOCOL);
    assert_null(l);
    assert_non_null(strstr(dlock_errmsg(), "NOSCRIPT"));
    assert_true(took <= pr_call_bound_ms());
    /* EVALSHA, its one EVAL, and the clean-up release's EVAL: three answers. */
    assert_int_equal(st1.injected - st0.injected, 3);
    assert_int_equal(it_cmd_calls(s, "evalsha") - sha0, 0);
    assert_int_equal(it_cmd_calls(s, "eval") - eval0, 0);
    fr_clear_rules(pr_relay[0]);
    pr_assert_works(pr_c, s, "noscript");
}

/* ---- N = 3: the same replies, one and two nodes ----------------------------------- */

/* With N > 1 a failed node's error is its reason in dlock_errmsg(); the call's code
 * is DLOCK_ERR_NOQUORUM when too few answered, never the node's error or BUSY. */
static void test_three_nodes_unavailable_errors(void **state)
{
    (void)state;
    static const fr_canned some[] = {FR_LOADING, FR_BUSY,  FR_READONLY,
                                     FR_NOPERM,  FR_MOVED, FR_HUGE_ARRAY};
    for (size_t i = 0; i < sizeof some / sizeof *some; i++) {
        dlock_holder h;
        assert_int_equal(dlock_inspect(pr_c, "warm", &h), DLOCK_OK);
        /* One node: the other two decide. */
        fr_replace(pr_relay[0], some[i], FR_REPLACE_INSTEAD, 1, "EVALSHA");
        dlock_lock *l = it_acquire(pr_c, "three", PR_TTL_MS);
        assert_int_equal(dlock_release(l), DLOCK_OK);
        fr_clear_rules(pr_relay[0]);
        assert_int_equal(dlock_inspect(pr_c, "warm", &h), DLOCK_OK);
        /* Two nodes: no quorum, each reason named. */
        fr_replace(pr_relay[0], some[i], FR_REPLACE_INSTEAD, 1, "EVALSHA");
        fr_replace(pr_relay[1], some[i], FR_REPLACE_INSTEAD, 1, "EVALSHA");
        l = NULL;
        int64_t t0 = dh_now_ms();
        int rc = pr_acquire(pr_c, "three", &l);
        int64_t took = dh_now_ms() - t0;
        it_show(fr_canned_name(some[i]), rc);
        assert_int_equal(rc, DLOCK_ERR_NOQUORUM);
        assert_true(took <= pr_call_bound_ms());
        if (some[i] != FR_HUGE_ARRAY)
            assert_non_null(strstr(dlock_errmsg(), fr_canned_name(some[i])));
        fr_clear_rules(pr_relay[0]);
        fr_clear_rules(pr_relay[1]);
        /* The grant on node 2 was undone. */
        assert_true(pr_key_gone_ms(&pr_srv[2], "dlock:{three}") >= 0);
    }
}

int main(void)
{
    const struct CMUnitTest one[] = {
        cmocka_unit_test_setup(test_canned_replies_map_to_documented_errors, pr_clean),
        cmocka_unit_test_setup(test_huge_replies_refused_without_huge_allocation, pr_clean),
        cmocka_unit_test_setup(test_noscript_reloaded_and_retried_once, pr_clean),
    };
    const struct CMUnitTest three[] = {
        cmocka_unit_test_setup(test_three_nodes_unavailable_errors, pr_clean),
    };
    int failed =
        cmocka_run_group_tests_name("protocol_one_node", one, pr_setup_one, pr_teardown_all);
    failed +=
        cmocka_run_group_tests_name("protocol_three_nodes", three, pr_setup_three, pr_teardown_all);
    return failed;
}
