/*
 * test_relay_paused.c: scenario 5 of the fault suite (docs/testing.md), SIGSTOP of 1, 2, then 3 of
 * 5 servers under contention, then SIGCONT.
 *
 * Four worker threads, each with its own client, take and drop one contended name in
 * a loop (try once, ttl 10 s) while the main thread pauses servers one after another:
 *   phase 0: all five up          phase 2: nodes 0 and 1 paused
 *   phase 1: node 0 paused        phase 3: nodes 0, 1 and 2 paused (no quorum)
 *   phase 4: all resumed; each worker now uses names of its own.
 * What is asserted (each call is counted in the phase it started and ended in):
 *   - while a quorum lives (phases 0-2), calls succeed: acquire gives OK or BUSY and
 *     nothing else, some acquires succeed in every phase, every successful acquire
 *     and every release returns within the per-node timeout (+100 ms, times the
 *     slack), and no two workers are ever inside the section at once;
 *   - without a quorum (phase 3), acquire gives DLOCK_ERR_NOQUORUM within its
 *     deadline;
 *   - after SIGCONT nothing is out of step: every call works, and the replies match
 *     their commands (the servers hold the token the worker holds, inspect reports
 *     it with the same fence, check says OK, release removes it everywhere);
 *   - no lock key is left once the workers are done.
 * The worst call of each phase is a FIG line; a refused acquire (BUSY) may wait for
 * a paused node that the client was reconnecting to: that is bounded by the connect
 * timeout, and shown, not asserted against the per-node timeout.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODES   5
#define WORKERS 4
#define PHASES  5
#define TTL_MS  10000

static dh_server g_srv[NODES];
static char g_urls[NODES * 64];

static atomic_int g_phase;
static atomic_bool g_stop;
static atomic_int g_inside; /* workers inside the section now */
static atomic_int g_overlaps;

/* What one worker saw in one phase. */
typedef struct phase_stats {
    int calls, ok, busy, noquorum, other;
    int64_t worst_ok_ms, worst_busy_ms, worst_noquorum_ms, worst_release_ms;
    int release_fail, mismatch;
    char last_other[256];
} phase_stats;

typedef struct worker {
    int id;
    pthread_t th;
    dlock_client *c;
    phase_stats st[PHASES];
} worker;

static void note_max(int64_t *m, int64_t v)
{
    if (v > *m)
        *m = v;
}

/* Phase 4: a full cycle on a name of the worker's own, checking every answer
 * against the servers. Returns false on any mismatch. */
static bool checked_cycle(worker *w, int k, phase_stats *st)
{
    char name[64], key[128];
    snprintf(name, sizeof name, "own-%d-%d", w->id, k);
    it_key(key, sizeof key, name);
    dlock_opts o = {0};
    o.ttl_ms = TTL_MS;
    dlock_lock *l = NULL;
    int rc = dlock_acquire(w->c, name, &o, &l);
    st->calls++;
    if (rc != DLOCK_OK) {
        st->other++;
        snprintf(st->last_other, sizeof st->last_other, "acquire %s: %s", dlock_errname(rc),
                 dlock_errmsg());
        return false;
    }
    st->ok++;
    /* Each step's outcome, and the first one that does not match, by name. */
    const char *bad = NULL;
    int holding = 0;
    for (int i = 0; i < NODES; i++) {
        redisReply *r = dh_cmd(&g_srv[i], "GET %s", key);
        if (r != NULL && r->type == REDIS_REPLY_STRING &&
            strncmp(r->str, dlock_token(l), DLOCK_TOKEN_LEN) == 0)
            holding++;
        else if ((r == NULL || r->type != REDIS_REPLY_NIL) && bad == NULL)
            bad = "a server has another value under our name";
        freeReplyObject(r);
    }
    if (bad == NULL && holding < NODES / 2 + 1)
        bad = "fewer than a quorum of servers hold our token";
    dlock_holder h;
    if (bad == NULL && (rc = dlock_inspect(w->c, name, &h)) != DLOCK_OK)
        bad = "inspect failed";
    else if (bad == NULL &&
             (!h.held || strcmp(h.token, dlock_token(l)) != 0 || h.fence != dlock_fence(l)))
        bad = "inspect shows another holder or fence";
    if (bad == NULL && (rc = dlock_check(l)) != DLOCK_OK)
        bad = "check failed";
    /* Released whatever happened above, so that a mismatch leaves no key behind. */
    int rrc = dlock_release(l);
    if (bad == NULL && rrc != DLOCK_OK) {
        rc = rrc;
        bad = "release failed";
    }
    /* A release decided by a quorum does not wait for a node that is still lagging
     * (just resumed, nothing heard from it since): the key is gone on a quorum at
     * once, and on the others once they run the release they were sent, within
     * the per-node deadline. */
    int64_t until = dh_now_ms() + (it_timeout_ms() + 100) * dh_slack();
    for (int round = 0; bad == NULL; round++) {
        int left = 0;
        for (int i = 0; i < NODES; i++) {
            /* dh_cmd, not it_exists: cmocka's asserts belong to the main thread. */
            redisReply *r = dh_cmd(&g_srv[i], "EXISTS %s", key);
            left += r == NULL || r->type != REDIS_REPLY_INTEGER || r->integer != 0;
            freeReplyObject(r);
        }
        if (left == 0)
            break;
        if (round == 0 && left > NODES - (NODES / 2 + 1))
            bad = "the key is left on more than a minority right after the release";
        else if (dh_now_ms() > until)
            bad = "a key is left after the release, past the per-node deadline";
        else
            dh_sleep_ms(5);
    }
    bool good = bad == NULL;
    if (!good) {
        st->mismatch++;
        snprintf(st->last_other, sizeof st->last_other, "cycle on %s: %s (%s: %s)", name, bad,
                 dlock_errname(rc), rc == DLOCK_OK ? "" : dlock_errmsg());
    }
    return good;
}

static void *work(void *arg)
{
    worker *w = arg;
    dlock_opts o = {0};
    o.ttl_ms = TTL_MS;
    for (int k = 0; !atomic_load(&g_stop); k++) {
        int p0 = atomic_load(&g_phase);
        if (p0 == 4) {
            checked_cycle(w, k, &w->st[4]);
            continue;
        }
        dlock_lock *l = NULL;
        int64_t t0 = dh_now_ms();
        int rc = dlock_acquire(w->c, "contended", &o, &l);
        int64_t took = dh_now_ms() - t0;
        phase_stats *st = atomic_load(&g_phase) == p0 ? &w->st[p0] : NULL;
        if (rc == DLOCK_OK) {
            if (atomic_fetch_add(&g_inside, 1) != 0)
                atomic_fetch_add(&g_overlaps, 1);
            dh_sleep_ms(1);
            atomic_fetch_sub(&g_inside, 1);
            int64_t t1 = dh_now_ms();
            int rrc = dlock_release(l);
            int64_t rtook = dh_now_ms() - t1;
            if (st != NULL && atomic_load(&g_phase) == p0) {
                note_max(&st->worst_release_ms, rtook);
                if (rrc != DLOCK_OK) {
                    st->release_fail++;
                    snprintf(st->last_other, sizeof st->last_other, "release %s: %s",
                             dlock_errname(rrc), dlock_errmsg());
                }
            }
        }
        if (st == NULL)
            continue; /* straddled a phase change */
        st->calls++;
        if (rc == DLOCK_OK) {
            st->ok++;
            note_max(&st->worst_ok_ms, took);
        } else if (rc == DLOCK_ERR_BUSY) {
            st->busy++;
            note_max(&st->worst_busy_ms, took);
        } else if (rc == DLOCK_ERR_NOQUORUM) {
            st->noquorum++;
            note_max(&st->worst_noquorum_ms, took);
        } else {
            st->other++;
            snprintf(st->last_other, sizeof st->last_other, "acquire %s: %s", dlock_errname(rc),
                     dlock_errmsg());
        }
        if (rc != DLOCK_OK)
            dh_sleep_ms(1 + w->id); /* a little backoff between tries */
    }
    return NULL;
}

static int setup(void **state)
{
    (void)state;
    for (int i = 0; i < NODES; i++)
        assert_int_equal(dh_server_start(&g_srv[i], NULL), 0);
    dh_server_urls(g_srv, NODES, g_urls, sizeof g_urls);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    /* A server the test left paused would take dh_server_stop's whole grace period. */
    for (int i = 0; i < NODES; i++)
        dh_server_resume(&g_srv[i]);
    dh_servers_stop(g_srv, NODES);
    return 0;
}

static void test_pause_one_two_three_of_five(void **state)
{
    (void)state;
    const int64_t timeout = it_timeout_ms(), connect = 1000 * dh_slack();
    const int64_t phase_ms = 1500 * dh_slack();
    static worker ws[WORKERS];
    memset(ws, 0, sizeof ws);
    atomic_store(&g_phase, 0);
    atomic_store(&g_stop, false);
    atomic_store(&g_overlaps, 0);
    for (int i = 0; i < WORKERS; i++) {
        dlock_config cfg = {0};
        cfg.timeout_ms = timeout;
        cfg.connect_timeout_ms = connect;
        ws[i].id = i;
        ws[i].c = it_client_cfg(g_urls, &cfg);
        dlock_holder h;
        assert_int_equal(dlock_inspect(ws[i].c, "warm", &h), DLOCK_OK);
    }
    for (int i = 0; i < WORKERS; i++)
        assert_int_equal(pthread_create(&ws[i].th, NULL, work, &ws[i]), 0);

    for (int p = 0; p < PHASES; p++) {
        if (p >= 1 && p <= 3)
            dh_server_pause(&g_srv[p - 1]);
        if (p == 4)
            for (int i = 0; i < 3; i++)
                dh_server_resume(&g_srv[i]);
        atomic_store(&g_phase, p);
        dh_sleep_ms(phase_ms);
    }
    atomic_store(&g_stop, true);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(ws[i].th, NULL);

    /* Sum the workers' views per phase. */
    static const char *const pname[PHASES] = {"none", "one", "two", "three", "resumed"};
    int fails = 0;
    for (int p = 0; p < PHASES; p++) {
        phase_stats t = {0};
        for (int i = 0; i < WORKERS; i++) {
            const phase_stats *s = &ws[i].st[p];
            t.calls += s->calls;
            t.ok += s->ok;
            t.busy += s->busy;
            t.noquorum += s->noquorum;
            t.other += s->other;
            t.release_fail += s->release_fail;
            t.mismatch += s->mismatch;
            note_max(&t.worst_ok_ms, s->worst_ok_ms);
            note_max(&t.worst_busy_ms, s->worst_busy_ms);
            note_max(&t.worst_noquorum_ms, s->worst_noquorum_ms);
            note_max(&t.worst_release_ms, s->worst_release_ms);
            if (s->last_other[0] != '\0')
                fprintf(stderr, "phase %s, worker %d: %s\n", pname[p], i, s->last_other);
        }
        printf("FIG paused_%s_calls %d count\n", pname[p], t.calls);
        printf("FIG paused_%s_ok %d count\n", pname[p], t.ok);
        printf("FIG paused_%s_busy %d count\n", pname[p], t.busy);
        printf("FIG paused_%s_noquorum %d count\n", pname[p], t.noquorum);
        printf("FIG paused_%s_other %d count\n", pname[p], t.other + t.mismatch + t.release_fail);
        printf("FIG paused_%s_worst_ok_ms %lld ms\n", pname[p], (long long)t.worst_ok_ms);
        printf("FIG paused_%s_worst_busy_ms %lld ms\n", pname[p], (long long)t.worst_busy_ms);
        printf("FIG paused_%s_worst_noquorum_ms %lld ms\n", pname[p],
               (long long)t.worst_noquorum_ms);
        printf("FIG paused_%s_worst_release_ms %lld ms\n", pname[p], (long long)t.worst_release_ms);
        bool ok;
        if (p <= 2) {
            /* A quorum lives: OK or BUSY only, successes on time. */
            ok = t.ok > 0 && t.noquorum == 0 && t.other == 0 && t.release_fail == 0 &&
                 t.worst_ok_ms <= (timeout + 100) * dh_slack() &&
                 t.worst_release_ms <= (timeout + 100) * dh_slack() &&
                 t.worst_busy_ms <= (timeout + connect + 100) * dh_slack();
        } else if (p == 3) {
            /* No quorum: NOQUORUM, within the deadline (a paused node being
             * reconnected to costs the connect timeout, as documented). */
            ok = t.noquorum > 0 && t.ok == 0 && t.other == 0 &&
                 t.worst_noquorum_ms <= (timeout + connect + 100) * dh_slack();
        } else {
            /* After SIGCONT: everything works and every answer matches. */
            ok = t.calls > 0 && t.ok == t.calls && t.other == 0 && t.mismatch == 0;
        }
        if (!ok) {
            fprintf(stderr, "phase %s: property violated\n", pname[p]);
            fails++;
        }
    }
    printf("FIG paused_section_overlaps %d count\n", atomic_load(&g_overlaps));
    assert_int_equal(atomic_load(&g_overlaps), 0);

    /* Nothing left behind for longer than a lease (the checker 5). The
     * paused nodes run their queued commands on SIGCONT; a clean-up release that had
     * to go on a new connection may be served before the acquire it undoes (the
     * server serves its connections in no promised order), and then that late grant
     * lives out its lease. So: every key left must have a lease, no longer than ours. */
    int left = 0;
    for (int i = 0; i < NODES; i++) {
        long long pttl = it_pttl(&g_srv[i], "dlock:{contended}");
        if (pttl != -2) {
            fprintf(stderr, "node %d still has dlock:{contended}, PTTL %lld ms\n", i, pttl);
            assert_true(pttl > 0 && pttl <= TTL_MS);
            left++;
        }
    }
    printf("FIG paused_keys_left %d count (each expires within its lease)\n", left);
    for (int i = 0; i < WORKERS; i++)
        dlock_client_free(ws[i].c);
    assert_int_equal(fails, 0);
}

/*
 * Why phase 2 above makes little or no progress, in isolation. Three of the five
 * servers, node 2 paused; the client has given up its connection to node 2 (too many
 * replies owed) and is reconnecting: the kernel accepts, the handshake is never
 * answered. Another owner holds the name on node 0. The client's attempt is granted
 * by node 1, refused by node 0, and node 2 could still decide it; the round waits for
 * node 2 until the connect deadline (timeout + connect timeout), holding its grant on
 * node 1 all that time, and every other contender meets that partial grant. With
 * several contenders this repeats: split votes that each block the name for the
 * connect deadline. The property asserted is the one the issue states: while a
 * quorum lives, an attempt is decided within the per-node timeout.
 */
static void test_split_vote_waits_for_a_reconnecting_node(void **state)
{
    (void)state;
    const int64_t timeout = it_timeout_ms(), connect = 1000 * dh_slack();
    char urls[3 * sizeof g_srv[0].url + 3];
    snprintf(urls, sizeof urls, "%s,%s,%s", g_srv[0].url, g_srv[1].url, g_srv[2].url);
    dlock_config cfg = {0};
    cfg.timeout_ms = timeout;
    cfg.connect_timeout_ms = connect;
    dlock_client *c = it_client_cfg(urls, &cfg);
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "warm", &h), DLOCK_OK);
    dh_server_pause(&g_srv[2]);
    /* Each cycle leaves two replies owed by node 2 (acquire, release); after a few
     * the client closes that connection and opens a new one, which the paused
     * server's kernel accepts and nobody answers. */
    for (int i = 0; i < 4; i++) {
        dlock_lock *l = it_acquire(c, "free", TTL_MS);
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    redisReply *r = dh_cmd(&g_srv[0], "SET dlock:{split} %s PX 10000",
                           "0123456789abcdef0123456789abcdef other:1");
    assert_non_null(r);
    freeReplyObject(r);
    dlock_opts o = {0};
    o.ttl_ms = TTL_MS;
    dlock_lock *l = NULL;
    int64_t t0 = dh_now_ms();
    int rc = dlock_acquire(c, "split", &o, &l);
    int64_t took = dh_now_ms() - t0;
    it_show("split vote", rc);
    printf("FIG split_vote_partial_grant_held_ms %lld ms\n", (long long)took);
    dh_server_resume(&g_srv[2]);
    it_del(&g_srv[0], "dlock:{split}");
    dlock_client_free(c);
    assert_int_equal(rc, DLOCK_ERR_BUSY);
    assert_true(took <= (timeout + 100) * dh_slack());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pause_one_two_three_of_five),
        cmocka_unit_test(test_split_vote_waits_for_a_reconnecting_node),
    };
    return cmocka_run_group_tests_name("paused_nodes", tests, setup, teardown);
}
