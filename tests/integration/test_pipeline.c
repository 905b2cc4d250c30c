/*
 * test_pipeline.c: pipelining (dlock_client_pipeline, dlock_client_pump,
 * dlock_pending_notify), the way a lock service runs many operations of one client at
 * once, against real redis-servers: one, and three.
 *
 * What it must give: every round of a client's nowait steps on one connection per
 * server, whatever the number of rounds in flight, each reply matched to its own
 * request (every lock granted with a token and a fence of its own, every release
 * deleting its own key); the notify callback telling each pending once its round has
 * its replies, and never after it finished; a stalled server failing every request on
 * its pipe at the deadline (outcome unknown, never a grant), the pipe reconnecting
 * after, and whatever ran late expiring with its lease; a pending given up in flight
 * giving back what its round took, on the same connection behind it; and misuse
 * refused.
 *
 * The pendings are driven as an event loop drives them (loop_run): one thread, a poll
 * of the pipeline's descriptor until the earliest due time, a pump after each wake and
 * after each batch of steps, the pendings the callback named (and those due) stepped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "itest.h"
#include "itest_pipe.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rounds in flight at once: fewer than DLOCK_PIPELINE_DEPTH, all on the line together
 * (test_pipeline_depth has a burst beyond it). */
#define MANY 200

/* CMD over the keys of the operations' names (kind 0: the locks, 1: their fence
 * counters), on rc. */
static redisReply *keys_cmd(redisContext *rc, const loop *lp, const char *cmd, int kind)
{
    static char keys[OPS_MAX][96];
    const char *argv[OPS_MAX + 1] = {cmd};
    for (int i = 0; i < lp->n; i++) {
        if (kind == 0)
            it_key(keys[i], sizeof keys[i], lp->ops[i].name);
        else
            it_fence_key(keys[i], sizeof keys[i], lp->ops[i].name);
        argv[i + 1] = keys[i];
    }
    redisReply *r = redisCommandArgv(rc, lp->n + 1, argv, NULL);
    assert_non_null(r);
    return r;
}

/* How many of the operations' keys exist on s (one EXISTS for them all). */
static long long existing(dh_server *s, const loop *lp, int kind)
{
    redisContext *rc = dh_connect(s);
    assert_non_null(rc);
    redisReply *r = keys_cmd(rc, lp, "EXISTS", kind);
    redisFree(rc);
    return it_int_reply(r);
}

/* For each acquisition whose lock key on s holds its own token: 1 more in held[i],
 * and its name's fence counter there into fence[i] when larger (the lock's fence is
 * the largest of those its quorum handed out). The acquisitions were sent in their
 * order on s's one connection, so s ran them in that order: the counters it set do
 * not go back from one to the next. A reply crossed to another request shows as a
 * fence that is not its own name's. */
static void check_server(dh_server *s, const loop *lp, int *held, uint64_t *fence)
{
    redisContext *rc = dh_connect(s);
    assert_non_null(rc);
    redisReply *locks = keys_cmd(rc, lp, "MGET", 0), *fences = keys_cmd(rc, lp, "MGET", 1);
    redisFree(rc);
    assert_int_equal(locks->elements, (size_t)lp->n);
    assert_int_equal(fences->elements, (size_t)lp->n);
    uint64_t prev = 0;
    for (int i = 0; i < lp->n; i++) {
        const redisReply *v = locks->element[i], *f = fences->element[i];
        if (v->type != REDIS_REPLY_STRING || v->len < DLOCK_TOKEN_LEN ||
            memcmp(v->str, dlock_token(lp->ops[i].l), DLOCK_TOKEN_LEN) != 0)
            continue;
        held[i]++;
        assert_int_equal(f->type, REDIS_REPLY_STRING);
        uint64_t n = strtoull(f->str, NULL, 10);
        if (n < prev)
            fail_msg("%s:%d: %s's fence %llu after %llu: not run in the order sent", s->host,
                     s->port, lp->ops[i].name, (unsigned long long)n, (unsigned long long)prev);
        prev = n;
        if (n > fence[i])
            fence[i] = n;
    }
    freeReplyObject(locks);
    freeReplyObject(fences);
}

/* connected_clients and total_connections_received of s, from one INFO (whose own
 * connection both count). */
static void conns_of(dh_server *s, long long *connected, long long *accepted)
{
    redisReply *r = dh_cmd(s, "INFO");
    assert_non_null(r);
    *connected = dh_info_long(r, "connected_clients");
    *accepted = dh_info_long(r, "total_connections_received");
    freeReplyObject(r);
    assert_true(*connected > 0 && *accepted > 0);
}

/* Acquire and release name through the pipes, asserting both: with a server just
 * resumed, its answer also says that what was sent before it on the pipe has run. */
static void through_the_pipe(dlock_client *c, const char *name)
{
    op ops[1];
    loop lp;
    loop_init(&lp, c, ops);
    start_acquisitions(&lp, name, 1, 10000);
    loop_run(&lp, 5000 * dh_slack());
    assert_int_equal(ops[0].rc, DLOCK_OK);
    start_releases(&lp);
    loop_run(&lp, 5000 * dh_slack());
    assert_int_equal(ops[0].rc, DLOCK_OK);
    dlock_pending_free(ops[0].p);
}

/* 200 acquisitions of distinct names started and first-stepped together, then their
 * 200 releases: each server sees one new connection for all of them, each lock is its
 * own (token, fence, key), each release deletes its own key. */
static void many_rounds_one_connection(void **state)
{
    (void)state;
    static op ops[MANY];
    long long conn0[IT_NODES_MAX], acc0[IT_NODES_MAX], conn, acc;
    for (int i = 0; i < it_nodes; i++)
        conns_of(&it_node[i], &conn0[i], &acc0[i]);
    /* Nothing here is about deadlines: a loaded machine (the sanitizers, a parallel
     * run) must not miss one, which would fail the pipe's rounds and reset it. */
    dlock_config cfg;
    it_config_init(&cfg);
    cfg.timeout_ms = 2000 * dh_slack();
    dlock_client *c = it_client_cfg(it_node_urls, &cfg);
    loop lp;
    loop_init(&lp, c, ops);
    start_acquisitions(&lp, "pl-many", MANY, 30000);
    int64_t t0 = dh_now_us();
    /* A new pipe's first rounds wait for its connection and handshake. */
    first_steps(&lp, 0, lp.n, cfg.connect_timeout_ms + cfg.timeout_ms);
    loop_run(&lp, 10000 * dh_slack());
    printf("FIG pipeline_acquire_%d_%d_nodes_us %lld us\n", MANY, it_nodes,
           (long long)(dh_now_us() - t0));
    printf("FIG pipeline_acquire_%d_nodes_again_in_flight %d steps\n", it_nodes,
           lp.again_in_flight);
    /* The pipe's connection, and this INFO's in place of the first one's. */
    for (int i = 0; i < it_nodes; i++) {
        conns_of(&it_node[i], &conn, &acc);
        assert_int_equal(conn - conn0[i], 1);
        assert_int_equal(acc - acc0[i], 2);
    }
    int held[MANY] = {0};
    uint64_t fence[MANY] = {0};
    for (int i = 0; i < it_nodes; i++)
        check_server(&it_node[i], &lp, held, fence);
    for (int i = 0; i < MANY; i++) {
        const op *o = &ops[i];
        if (o->rc != DLOCK_OK)
            fail_msg("%s: %s", o->name, dlock_errname(o->rc));
        assert_non_null(o->l);
        assert_true(dlock_fence(o->l) > 0);
        assert_int_equal(dlock_fence(o->l), fence[i]);
        assert_string_equal(dlock_lock_name(o->l), o->name);
        if (held[i] < it_nodes / 2 + 1)
            fail_msg("%s: its token on %d of %d servers", o->name, held[i], it_nodes);
        /* Once per round on one server; as replies come, with more. */
        assert_true(o->notified >= 1);
        if (it_nodes == 1)
            assert_int_equal(o->notified, 1);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(dlock_token(o->l), dlock_token(ops[j].l));
    }
    /* Every step that waited was told by the pump: none had a descriptor. */
    assert_true(lp.again_in_flight >= MANY);
    assert_int_equal(lp.again_with_fd, 0);
    assert_int_equal(lp.handed_back, 0);
    assert_int_equal(lp.late_notifies, 0);

    start_releases(&lp);
    lp.again_in_flight = 0;
    t0 = dh_now_us();
    first_steps(&lp, 0, lp.n, cfg.timeout_ms);
    loop_run(&lp, 10000 * dh_slack());
    printf("FIG pipeline_release_%d_%d_nodes_us %lld us\n", MANY, it_nodes,
           (long long)(dh_now_us() - t0));
    for (int i = 0; i < MANY; i++) {
        if (ops[i].rc != DLOCK_OK)
            fail_msg("release of %s: %s", ops[i].name, dlock_errname(ops[i].rc));
        assert_true(ops[i].notified >= 1);
        if (it_nodes == 1)
            assert_int_equal(ops[i].notified, 1);
    }
    assert_true(lp.again_in_flight >= MANY);
    assert_int_equal(lp.again_with_fd, 0);
    assert_int_equal(lp.handed_back, 0);
    assert_int_equal(lp.late_notifies, 0);
    /* Still the one connection: besides it, the holders' MGET's and this INFO's. */
    for (int i = 0; i < it_nodes; i++) {
        conns_of(&it_node[i], &conn, &acc);
        assert_int_equal(conn - conn0[i], 1);
        assert_int_equal(acc - acc0[i], 4);
        assert_int_equal(existing(&it_node[i], &lp, 0), 0);
    }
    for (int i = 0; i < MANY; i++)
        dlock_pending_free(ops[i].p);
    dlock_client_free(c);
}

/* A server of the test's own, and a pipelining client of it with the timing tests'
 * deadline whose pipe is connected, its handshake done and the scripts loaded: what
 * is sent next is written whole, at once. */
static dlock_client *warm_pipe_client(dh_server *s)
{
    assert_int_equal(dh_server_start(s, NULL), 0);
    dlock_client *c = it_client(s, it_timeout_ms());
    through_the_pipe(c, "pl-warm");
    return c;
}

#define STALLED      50
#define STALL_TTL_MS 1000

/* A paused server: the 50 rounds written on its pipe, half of them half a deadline
 * after the others, all fail at the first one's deadline with the timeout (outcome
 * unknown), none granted; the pipe reconnects once the server resumes; what it ran
 * late expires with its lease. */
static void stalled_server_fails_every_request(void **state)
{
    (void)state;
    static op ops[STALLED];
    dh_server srv;
    dlock_client *c = warm_pipe_client(&srv);
    int64_t timeout_ms = it_timeout_ms();
    dh_server_pause(&srv);
    loop lp;
    loop_init(&lp, c, ops);
    start_acquisitions(&lp, "pl-stall", STALLED, STALL_TTL_MS);
    int64_t t0 = dh_now_us();
    first_steps(&lp, 0, STALLED / 2, timeout_ms);
    dh_sleep_ms(timeout_ms / 2); /* not a wait for anything: later rounds, later deadlines */
    int64_t t1 = dh_now_us();
    first_steps(&lp, STALLED / 2, STALLED, timeout_ms);
    loop_run(&lp, 5000 * dh_slack());
    int64_t last_us = 0;
    for (int i = 0; i < STALLED; i++) {
        if (ops[i].rc != DLOCK_ERR_TIMEOUT)
            fail_msg("%s: %s, not DLOCK_ERR_TIMEOUT", ops[i].name, dlock_errname(ops[i].rc));
        assert_null(ops[i].l);
        if (ops[i].end_us > last_us)
            last_us = ops[i].end_us;
        /* Not before the first deadline; the later half before its own. */
        if (ops[i].end_us < t0 + timeout_ms * 1000 || ops[i].end_us >= t1 + timeout_ms * 1000)
            fail_msg("%s failed %lld ms after the first round was sent, the later half %lld "
                     "ms after (timeout %lld ms)",
                     ops[i].name, (long long)(ops[i].end_us - t0) / 1000,
                     (long long)(t1 - t0) / 1000, (long long)timeout_ms);
    }
    printf("FIG pipeline_stall_all_failed_ms %lld ms (timeout %lld ms, the later half sent "
           "after %lld ms)\n",
           (long long)(last_us - t0) / 1000, (long long)timeout_ms, (long long)(t1 - t0) / 1000);
    assert_int_equal(lp.handed_back, 0);
    assert_int_equal(lp.late_notifies, 0);
    for (int i = 0; i < STALLED; i++)
        dlock_pending_free(ops[i].p);

    dh_server_resume(&srv);
    int64_t resumed_ms = dh_now_ms();
    through_the_pipe(c, "pl-stall-after");
    printf("FIG pipeline_stall_late_grants %lld of %d\n", existing(&srv, &lp, 0), STALLED);
    /* A late grant lives a lease from when it ran, after the resume. */
    int64_t until = resumed_ms + (STALL_TTL_MS + 250) * dh_slack();
    long long left;
    while ((left = existing(&srv, &lp, 0)) > 0) {
        if (dh_now_ms() > until)
            fail_msg("%lld stalled names still held %lld ms after the resume", left,
                     (long long)(dh_now_ms() - resumed_ms));
        dh_sleep_ms(10);
    }
    printf("FIG pipeline_stall_names_free_ms %lld ms after the resume\n",
           (long long)(dh_now_ms() - resumed_ms));
    /* And the names are taken again, through the same pipe. */
    start_acquisitions(&lp, "pl-stall", STALLED, 10000);
    first_steps(&lp, 0, lp.n, timeout_ms);
    loop_run(&lp, 5000 * dh_slack());
    for (int i = 0; i < STALLED; i++)
        assert_int_equal(ops[i].rc, DLOCK_OK);
    start_releases(&lp);
    loop_run(&lp, 5000 * dh_slack());
    for (int i = 0; i < STALLED; i++) {
        assert_int_equal(ops[i].rc, DLOCK_OK);
        dlock_pending_free(ops[i].p);
    }
    dlock_client_free(c);
    dh_server_stop(&srv);
}

#define GIVEN_UP     20
#define GIVEN_UP_TTL 30000

/* Acquisitions written to a paused server and given up in flight: the give-back
 * releases go behind them on the same connection, so once the server resumed and
 * answered what followed, none of the names is held, long before the lease. */
static void given_up_in_flight_gives_back(void **state)
{
    (void)state;
    op ops[GIVEN_UP];
    dh_server srv;
    dlock_client *c = warm_pipe_client(&srv);
    dh_server_pause(&srv);
    loop lp;
    loop_init(&lp, c, ops);
    start_acquisitions(&lp, "pl-gone", GIVEN_UP, GIVEN_UP_TTL);
    first_steps(&lp, 0, lp.n, it_timeout_ms());
    for (int i = 0; i < GIVEN_UP; i++) {
        assert_int_equal(dlock_pending_in_flight(ops[i].p), 1);
        dlock_pending_free(ops[i].p);
        ops[i].done = true; /* a call of its callback from now on is counted late */
    }
    dlock_client_pump(c); /* the give-backs */
    dh_server_resume(&srv);
    int64_t resumed_ms = dh_now_ms();
    through_the_pipe(c, "pl-gone-after");
    long long left;
    while ((left = existing(&srv, &lp, 0)) > 0) {
        if (dh_now_ms() - resumed_ms > 1000 * dh_slack())
            fail_msg("%lld of %d names given up in flight still held %lld ms after the "
                     "resume (lease %d ms)",
                     left, GIVEN_UP, (long long)(dh_now_ms() - resumed_ms), GIVEN_UP_TTL);
        dh_sleep_ms(10);
    }
    printf("FIG pipeline_given_back_ms %lld ms after the resume\n",
           (long long)(dh_now_ms() - resumed_ms));
    /* The acquisitions ran (each raised its name's fence): there was something to give
     * back. */
    assert_int_equal(existing(&srv, &lp, 1), GIVEN_UP);
    assert_int_equal(lp.late_notifies, 0);
    dlock_client_free(c);
    dh_server_stop(&srv);
}

static void refused_on_local(dlock_client *local)
{
    int fd = -2;
    assert_int_equal(dlock_client_pipeline(local, &fd), DLOCK_ERR_INVALID);
    if (strstr(dlock_errmsg(), "file://") == NULL)
        fail_msg("the message does not say why: %s", dlock_errmsg());
    dlock_client_pump(local); /* no pipes: nothing */
}

static void noop(void *arg)
{
    (void)arg;
}

/* Misuse refused with DLOCK_ERR_INVALID and a reason, never a crash. */
static void bad_arguments(void **state)
{
    (void)state;
    int fd = -2, again = -2;
    assert_int_equal(dlock_client_pipeline(NULL, &fd), DLOCK_ERR_INVALID);
    dlock_client *c = it_nodes_client();
    dlock_client_pump(c); /* no pipes yet: nothing */
    assert_int_equal(dlock_client_pipeline(c, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_client_pipeline(c, &fd), DLOCK_OK);
    assert_int_equal(dlock_client_pipeline(c, &again), DLOCK_OK);
    assert_true(fd >= 0);
    assert_int_equal(again, fd);
    assert_int_equal(dlock_pending_notify(NULL, noop, NULL), DLOCK_ERR_INVALID);
    dlock_client_pump(NULL);
    dlock_client_free(c);

    /* Found through a host name: a step would block on the lookup. */
    char url[64];
    snprintf(url, sizeof url, "redis://localhost:%d", it_node[0].port);
    dlock_config cfg;
    it_config_init(&cfg);
    c = it_client_cfg(url, &cfg);
    assert_int_equal(dlock_client_pipeline(c, &fd), DLOCK_ERR_INVALID);
    if (strstr(dlock_errmsg(), "host name") == NULL)
        fail_msg("the message does not say why: %s", dlock_errmsg());
    dlock_client_free(c);

    /* Too late: a nowait step is in flight on connections of its own. */
    c = it_nodes_client();
    dlock_pending *p = it_pending_start(c, "pl-late", 0);
    dlock_lock *l = NULL;
    assert_int_equal(dlock_pending_step_nowait(p, &l), DLOCK_ERR_AGAIN);
    assert_int_equal(dlock_pending_in_flight(p), 1);
    assert_int_equal(dlock_client_pipeline(c, &fd), DLOCK_ERR_INVALID);
    if (strstr(dlock_errmsg(), "before") == NULL)
        fail_msg("the message does not say why: %s", dlock_errmsg());
    int rc;
    while ((rc = dlock_pending_step(p, &l)) == DLOCK_ERR_AGAIN)
        ;
    assert_int_equal(rc, DLOCK_OK);
    it_pending_done(p, l);
    dlock_client_free(c);

    it_on_local_client("dlock-pipeline", refused_on_local);
}

/* Strict fences with N > 1 raise them in a second round, which would block. */
static void strict_fences_refused(void **state)
{
    (void)state;
    dlock_config cfg;
    it_config_init(&cfg);
    cfg.fence_mode = DLOCK_FENCE_STRICT;
    dlock_client *c = it_client_cfg(it_node_urls, &cfg);
    int fd = -2;
    assert_int_equal(dlock_client_pipeline(c, &fd), DLOCK_ERR_INVALID);
    if (strstr(dlock_errmsg(), "strict") == NULL)
        fail_msg("the message does not say why: %s", dlock_errmsg());
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest one[] = {
        cmocka_unit_test(many_rounds_one_connection),
        cmocka_unit_test(stalled_server_fails_every_request),
        cmocka_unit_test(given_up_in_flight_gives_back),
        cmocka_unit_test(bad_arguments),
    };
    const struct CMUnitTest three[] = {
        cmocka_unit_test(many_rounds_one_connection),
        cmocka_unit_test(strict_fences_refused),
    };
    return IT_NODES_GROUPS("pipeline", one, three);
}
