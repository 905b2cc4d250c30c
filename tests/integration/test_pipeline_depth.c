/*
 * test_pipeline_depth.c: a pipelining client's burst beyond DLOCK_PIPELINE_DEPTH,
 * against a redis-server of the test's own, which it pauses.
 *
 * What it must give: at most DLOCK_PIPELINE_DEPTH commands on the server's connection;
 * the requests beyond wait in the client with no deadline yet (theirs starts when they
 * are sent) and go as the line drains, each told when sent and again when answered;
 * every one of the burst granted its own lock; and when the server stalls, every
 * request fails, those on the line at their deadline (outcome unknown) and those still
 * waiting with them, none granted, the names free again within their lease.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "itest.h"
#include "itest_pipe.h"

#include <stdlib.h>
#include <string.h>

#define BURST 600

static int cmp_token(const void *a, const void *b)
{
    return memcmp(a, b, DLOCK_TOKEN_LEN);
}

/* A client of s with the pipe's connection made (one acquisition and release through
 * it), so that a burst finds the line, not a handshake. */
static dlock_client *warm(dh_server *s, int64_t timeout_ms)
{
    dlock_client *c = it_client(s, timeout_ms);
    static op one[1];
    loop lp;
    loop_init(&lp, c, one);
    start_acquisitions(&lp, "pd-warm", 1, 10000);
    loop_run(&lp, 5000 * dh_slack());
    assert_int_equal(one[0].rc, DLOCK_OK);
    start_releases(&lp);
    loop_run(&lp, 5000 * dh_slack());
    assert_int_equal(one[0].rc, DLOCK_OK);
    dlock_pending_free(one[0].p);
    return c;
}

/* 600 acquisitions first-stepped together on a paused server: 256 go on the line, 344
 * wait in the client; after the resume every one is granted, a lock of its own, the
 * waiting ones told when sent and when answered; then all released. */
static void a_burst_waits_in_the_client(void **state)
{
    (void)state;
    dh_server srv;
    assert_int_equal(dh_server_start(&srv, NULL), 0);
    /* Generous: a burst on a loaded machine must not miss a deadline here. */
    dlock_client *c = warm(&srv, 2000 * dh_slack());
    static op ops[BURST];
    loop lp;
    loop_init(&lp, c, ops);
    start_acquisitions(&lp, "pd-burst", BURST, 30000);
    dh_server_pause(&srv);
    first_steps(&lp, 0, BURST, 2000 * dh_slack() + 1000);
    assert_int_equal(lp.unsent, BURST - DLOCK_PIPELINE_DEPTH);
    dh_server_resume(&srv);
    loop_run(&lp, 10000 * dh_slack());
    static char tokens[BURST][DLOCK_TOKEN_LEN];
    for (int i = 0; i < BURST; i++) {
        assert_int_equal(ops[i].rc, DLOCK_OK);
        memcpy(tokens[i], dlock_token(ops[i].l), DLOCK_TOKEN_LEN);
        if (i >= DLOCK_PIPELINE_DEPTH && ops[i].notified < 2)
            fail_msg("%s waited for room, and was told %d times", ops[i].name, ops[i].notified);
    }
    qsort(tokens, BURST, sizeof tokens[0], cmp_token);
    for (int i = 1; i < BURST; i++)
        assert_true(memcmp(tokens[i - 1], tokens[i], DLOCK_TOKEN_LEN) != 0);
    assert_int_equal(lp.late_notifies, 0);
    assert_int_equal(lp.handed_back, 0);
    start_releases(&lp);
    loop_run(&lp, 10000 * dh_slack());
    for (int i = 0; i < BURST; i++) {
        assert_int_equal(ops[i].rc, DLOCK_OK);
        dlock_pending_free(ops[i].p);
    }
    dlock_client_free(c);
    dh_server_stop(&srv);
}

/* 300 acquisitions on a server that stays paused: the 256 on the line fail at their
 * deadline, the 44 waiting with them, none granted; after the resume the names are
 * free within their lease. */
static void a_stalled_line_fails_what_waits(void **state)
{
    (void)state;
    enum { N = 300, TTL_MS = 1000 };
    dh_server srv;
    assert_int_equal(dh_server_start(&srv, NULL), 0);
    int64_t timeout_ms = it_timeout_ms();
    dlock_client *c = warm(&srv, timeout_ms);
    static op ops[N];
    loop lp;
    loop_init(&lp, c, ops);
    start_acquisitions(&lp, "pd-stall", N, TTL_MS);
    dh_server_pause(&srv);
    int64_t t0 = dh_now_ms();
    first_steps(&lp, 0, N, timeout_ms + 1000);
    assert_int_equal(lp.unsent, N - DLOCK_PIPELINE_DEPTH);
    loop_run(&lp, (timeout_ms + 2000) * dh_slack());
    printf("FIG pipeline_depth_stall_all_failed_ms %lld ms (timeout %lld ms)\n",
           (long long)(dh_now_ms() - t0), (long long)timeout_ms);
    for (int i = 0; i < N; i++) {
        if (ops[i].rc != DLOCK_ERR_TIMEOUT)
            fail_msg("%s: %s, not DLOCK_ERR_TIMEOUT (%s)", ops[i].name, dlock_errname(ops[i].rc),
                     i < DLOCK_PIPELINE_DEPTH ? "on the line" : "waiting");
        dlock_pending_free(ops[i].p);
    }
    dh_server_resume(&srv);
    /* What the server ran late (the line it had read) expires with its lease. */
    int64_t until = dh_now_ms() + (TTL_MS + 1000) * dh_slack();
    for (int i = 0; i < N; i++) {
        char key[96];
        it_key(key, sizeof key, ops[i].name);
        while (it_exists(&srv, key) != 0)
            assert_true(dh_now_ms() < until);
    }
    dlock_client_free(c);
    dh_server_stop(&srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_burst_waits_in_the_client),
        cmocka_unit_test(a_stalled_line_fails_what_waits),
    };
    return cmocka_run_group_tests(tests, it_srv_setup, it_srv_teardown);
}
