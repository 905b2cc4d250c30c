/*
 * test_operators.c: what an operator does to locks that are not theirs, against real
 * redis-server processes: dlock_list (and `dlock list`) over one server and over three
 * Redlock servers, with exclusive, shared and semaphore holders and a waiter, a glob,
 * a name a quorum does not hold, 100,000 names within the bound; dlock_break (and
 * `dlock break`): the fence raised, the evicted holder's on_lost called and its fenced
 * write refused once the next holder wrote, the waiter served, the record `dlock
 * status` shows, exit 73 for a name nobody holds; a file:// directory's held names. A
 * Redis Cluster's listing is in
 * test_cluster.c, beside its cluster.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every entry of a listing, into names (comma-separated) and the last entry's copy
 * for the name `want` into *got (held 0: not listed). */
typedef struct seen {
    char names[4096];
    dlock_listed entry;
    dlock_holder holders[DLOCK_LIST_HOLDERS_MAX];
    bool found;
} seen;

static void list(dlock_client *c, const char *pattern, const char *want, seen *s)
{
    memset(s, 0, sizeof *s);
    dlock_lister *it = NULL;
    int rc = dlock_list(c, pattern, &it);
    if (rc != DLOCK_OK)
        fail_msg("dlock_list: %s: %s", dlock_errname(rc), dlock_errmsg());
    const dlock_listed *l;
    while ((rc = dlock_list_next(it, &l)) == DLOCK_OK && l != NULL) {
        size_t at = strlen(s->names);
        snprintf(s->names + at, sizeof s->names - at, "%s%s", at ? "," : "", l->name);
        if (want != NULL && strcmp(l->name, want) == 0) {
            s->found = true;
            s->entry = *l;
            memcpy(s->holders, l->holders, (size_t)l->nlisted * sizeof *l->holders);
        }
    }
    assert_int_equal(rc, DLOCK_OK);
    dlock_list_free(it);
}

/* ---- one server ------------------------------------------------------------------- */

static void test_list_kinds(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, it_timeout_ms());
    dlock_opts o = {.ttl_ms = 30000, .label = "nightly"};
    dlock_lock *ex, *r1, *r2, *p1, *p2;
    assert_int_equal(dlock_acquire(c, "ops:job", &o, &ex), DLOCK_OK);
    dlock_opts sh = {.ttl_ms = 20000, .shared = 1, .label = "reader"};
    assert_int_equal(dlock_acquire(c, "ops:report", &sh, &r1), DLOCK_OK);
    sh.ttl_ms = 10000;
    assert_int_equal(dlock_acquire(c, "ops:report", &sh, &r2), DLOCK_OK);
    dlock_opts so = {.ttl_ms = 15000, .label = "permit"};
    assert_int_equal(dlock_sem_acquire(c, "ops:pool", 5, &so, &p1), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(c, "ops:pool", 5, &so, &p2), DLOCK_OK);
    /* A waiter of another client, queued on the server. */
    dlock_client *w = it_client(&it_srv, it_timeout_ms());
    dlock_pending *p = it_queue_waiter(w, "ops:job", 5000, &it_srv, 1);

    seen s;
    list(c, "ops:*", "ops:job", &s);
    assert_string_equal(s.names, "ops:job,ops:pool,ops:report");
    assert_true(s.found);
    assert_int_equal(s.entry.kind, DLOCK_KIND_EXCLUSIVE);
    assert_int_equal(s.entry.nholders, 1);
    assert_string_equal(s.holders[0].token, dlock_token(ex));
    assert_non_null(strstr(s.holders[0].description, "nightly"));
    assert_true(s.entry.remaining_ms > 20000 && s.entry.remaining_ms <= 30000);
    assert_int_equal(s.entry.fence, dlock_fence(ex));
    assert_int_equal(s.entry.waiters, 1);

    list(c, "ops:re*", "ops:report", &s);
    assert_string_equal(s.names, "ops:report");
    assert_int_equal(s.entry.kind, DLOCK_KIND_SHARED);
    assert_int_equal(s.entry.nholders, 2);
    assert_int_equal(s.entry.nlisted, 2);
    /* The longest lease first. */
    assert_string_equal(s.holders[0].token, dlock_token(r1));
    assert_string_equal(s.holders[1].token, dlock_token(r2));
    assert_true(s.holders[0].remaining_ms > 10000 && s.holders[0].remaining_ms <= 20000);
    assert_true(s.holders[1].remaining_ms > 0 && s.holders[1].remaining_ms <= 10000);
    assert_non_null(strstr(s.holders[1].description, "reader"));

    list(c, "*pool", "ops:pool", &s);
    assert_string_equal(s.names, "ops:pool");
    assert_int_equal(s.entry.kind, DLOCK_KIND_SEMAPHORE);
    assert_int_equal(s.entry.permits, 5);
    assert_int_equal(s.entry.nholders, 2);

    /* Freed names leave the list; a pattern that matches nothing lists nothing. */
    assert_int_equal(dlock_release(r1), DLOCK_OK);
    assert_int_equal(dlock_release(r2), DLOCK_OK);
    list(c, "ops:*", NULL, &s);
    assert_string_equal(s.names, "ops:job,ops:pool");
    list(c, "nothing-like-this-*", NULL, &s);
    assert_string_equal(s.names, "");

    dlock_pending_free(p);
    dlock_client_free(w);
    assert_int_equal(dlock_release(p1), DLOCK_OK);
    assert_int_equal(dlock_release(p2), DLOCK_OK);
    assert_int_equal(dlock_release(ex), DLOCK_OK);
    dlock_client_free(c);
}

/* Names the key layout writes in hex ('}' or '%' first) are listed as they are, and
 * names with glob and control bytes match only as the glob says. */
static void test_list_hostile_names(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, it_timeout_ms());
    const char *names[] = {"}brace", "%percent", "star*name", "tab\tname", "sp ace"};
    dlock_lock *l[5];
    for (int i = 0; i < 5; i++)
        l[i] = it_acquire(c, names[i], 30000);
    seen s;
    list(c, NULL, NULL, &s);
    assert_non_null(strstr(s.names, "}brace"));
    assert_non_null(strstr(s.names, "%percent"));
    list(c, "}*", "}brace", &s);
    assert_string_equal(s.names, "}brace");
    assert_string_equal(s.holders[0].token, dlock_token(l[0]));
    list(c, "star\\*name", NULL, &s);
    assert_string_equal(s.names, "star*name");
    list(c, "tab?name", NULL, &s);
    assert_string_equal(s.names, "tab\tname");
    /* Keys no name of ours is written as are not listed (hex in upper case, hex for a
     * name that needs none, a tag longer than a name, a key of another type), and a
     * lock whose fence another tool spoiled is listed with fence 0. */
    const char *foreign[] = {"SET dlock:{%%7D7D} x",   "SET dlock:{%%61} x",
                             "HSET dlock:{hashy} a b", "SET dlock:{}x} x",
                             "SET dlock:{spoiled} %s", "SET dlock:{spoiled}:fence abc"};
    for (size_t i = 0; i < sizeof foreign / sizeof *foreign; i++) {
        redisReply *r = dh_cmd(&it_srv, foreign[i], "0123456789abcdef0123456789abcdef x:1");
        assert_non_null(r);
        assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
        freeReplyObject(r);
    }
    char *huge = malloc(DLOCK_NAME_MAX + 100);
    memset(huge, 'h', DLOCK_NAME_MAX + 99);
    huge[DLOCK_NAME_MAX + 99] = '\0';
    freeReplyObject(dh_cmd(&it_srv, "SET dlock:{%s} x", huge));
    free(huge);
    list(c, NULL, "spoiled", &s);
    assert_true(s.found);
    assert_int_equal(s.entry.fence, 0);
    assert_null(strstr(s.names, "hashy"));
    assert_null(strstr(s.names, "hhhh"));
    for (const char *p = s.names; *p != '\0'; p += strcspn(p, ",") + (p[strcspn(p, ",")] != 0))
        assert_true(strncmp(p, "}}", 2) != 0 && strncmp(p, "a,", 2) != 0 && strcmp(p, "a") != 0 &&
                    strncmp(p, "}x", 2) != 0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(dlock_release(l[i]), DLOCK_OK);
    freeReplyObject(dh_cmd(&it_srv, "FLUSHALL"));
    /* NULLs and an oversized pattern are refused, never a crash. */
    dlock_lister *it = NULL;
    assert_int_equal(dlock_list(NULL, "*", &it), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_list(c, "*", NULL), DLOCK_ERR_INVALID);
    char *big = malloc(DLOCK_NAME_MAX + 2);
    memset(big, 'x', DLOCK_NAME_MAX + 1);
    big[DLOCK_NAME_MAX + 1] = '\0';
    assert_int_equal(dlock_list(c, big, &it), DLOCK_ERR_INVALID);
    free(big);
    const dlock_listed *e;
    assert_int_equal(dlock_list_next(NULL, &e), DLOCK_ERR_INVALID);
    dlock_list_free(NULL);
    dlock_client_free(c);
}

/* 100,000 held names (written by a script: acquiring them one by one would measure the
 * acquisitions) listed within 10 s, times the slack. */
static void test_list_100k(void **state)
{
    (void)state;
    enum { N = 100000 };
    long long ok = it_int_reply(
        dh_cmd(&it_srv, "EVAL %s 0 %d",
               "for i = 1, tonumber(ARGV[1]) do\n"
               "  redis.call('SET', 'dlock:{bulk:' .. i .. '}',\n"
               "             string.format('%032x', i) .. ' host:1 bulk', 'PX', 600000)\n"
               "end\n"
               "return 1\n",
               N));
    assert_int_equal(ok, 1);
    dlock_client *c = it_client(&it_srv, it_timeout_ms());
    int64_t t0 = dh_now_ms();
    dlock_lister *it = NULL;
    assert_int_equal(dlock_list(c, "bulk:*", &it), DLOCK_OK);
    const dlock_listed *l;
    long n = 0;
    while (dlock_list_next(it, &l) == DLOCK_OK && l != NULL)
        n++;
    int64_t ms = dh_now_ms() - t0;
    dlock_list_free(it);
    print_message("FIG list_100k_names_ms %lld ms\n", (long long)ms);
    assert_int_equal(n, N);
    assert_true(ms < 10000 * dh_slack());
    ok = it_int_reply(
        dh_cmd(&it_srv, "EVAL %s 0",
               "local c = '0'\n"
               "repeat\n"
               "  local r = redis.call('SCAN', c, 'MATCH', 'dlock:{bulk:*', 'COUNT', 1000)\n"
               "  c = r[1]\n"
               "  if #r[2] > 0 then redis.call('DEL', unpack(r[2])) end\n"
               "until c == '0'\n"
               "return 1\n"));
    assert_int_equal(ok, 1);
    dlock_client_free(c);
}

/* ---- breaking ----------------------------------------------------------------------- */

static atomic_int lost_calls;

static void on_lost(dlock_lock *l, void *user)
{
    (void)l;
    (void)user;
    atomic_fetch_add(&lost_calls, 1);
}

/* A holder that keeps renewing is broken: the fence is raised past its own, its
 * on_lost fires, the waiter is served with a fence past the break's, and once that
 * holder wrote the register, the evicted one's fenced write is refused. */
static void test_break(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, it_timeout_ms());
    dlock_client *op = it_client(&it_srv, it_timeout_ms());
    atomic_store(&lost_calls, 0);
    dlock_opts o = {.ttl_ms = 3000, .auto_renew = 1, .on_lost = on_lost, .label = "stuck"};
    dlock_lock *old;
    assert_int_equal(dlock_acquire(c, "brk", &o, &old), DLOCK_OK);
    uint64_t f_old = dlock_fence(old);
    assert_int_equal(dlock_fenced_set(c, "brk-register", f_old, "old", 3), DLOCK_OK);
    /* A waiter, queued on the server: a break serves it as a release would. */
    dlock_pending *p = it_queue_waiter(op, "brk", 10000, &it_srv, 1);
    dlock_lock *next = NULL;

    dlock_client *breaker = it_client(&it_srv, it_timeout_ms());
    dlock_break_opts bo = {.reason = "job hung since 02:00"};
    dlock_break_info b;
    assert_int_equal(dlock_break(breaker, "brk", &bo, &b), DLOCK_OK);
    assert_int_equal(b.broken, 1);
    assert_true(b.fence > f_old);
    assert_memory_equal(b.holder, dlock_token(old), DLOCK_TOKEN_LEN);
    assert_non_null(strstr(b.holder, "stuck"));
    assert_string_equal(b.reason, "job hung since 02:00");
    dlock_break_info first = b;

    int64_t deadline = dh_now_ms() + 3000 * dh_slack();
    int rc;
    while ((rc = dlock_pending_step(p, &next)) == DLOCK_ERR_AGAIN && dh_now_ms() < deadline)
        dh_sleep_ms(5);
    assert_int_equal(rc, DLOCK_OK);
    assert_true(dlock_fence(next) > b.fence);
    assert_int_equal(dlock_fenced_set(op, "brk-register", dlock_fence(next), "new", 3), DLOCK_OK);
    assert_int_equal(dlock_fenced_set(c, "brk-register", f_old, "old", 3), DLOCK_ERR_FENCED);
    /* With a fence key, at once: the register raised by the break itself. */
    dlock_lock *again;
    assert_int_equal(dlock_acquire(c, "brk2", &(dlock_opts){.ttl_ms = 10000}, &again), DLOCK_OK);
    assert_int_equal(dlock_fenced_set(c, "brk2-register", dlock_fence(again), "v", 1), DLOCK_OK);
    dlock_break_opts fk = {.fence_key = "brk2-register"};
    assert_int_equal(dlock_break(breaker, "brk2", &fk, &b), DLOCK_OK);
    assert_int_equal(dlock_fenced_set(c, "brk2-register", dlock_fence(again), "w", 1),
                     DLOCK_ERR_FENCED);
    assert_int_equal(dlock_release(again), DLOCK_ERR_LOST);
    /* The renewal finds the lock gone within a third of its lease, and says so. */
    deadline = dh_now_ms() + 3000 * dh_slack();
    while (atomic_load(&lost_calls) == 0 && dh_now_ms() < deadline)
        dh_sleep_ms(10);
    assert_int_equal(atomic_load(&lost_calls), 1);
    assert_int_equal(dlock_check(old), DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(old), DLOCK_ERR_LOST);

    /* The record, as status reads it. */
    dlock_break_info last;
    assert_int_equal(dlock_break_last(op, "brk", &last), DLOCK_OK);
    assert_int_equal(last.broken, 1);
    assert_int_equal(last.fence, first.fence);
    assert_int_equal(last.at_ms, first.at_ms);
    assert_string_equal(last.holder, first.holder);
    assert_string_equal(last.by, first.by);
    assert_string_equal(last.reason, "job hung since 02:00");
    assert_true(it_pttl(&it_srv, "dlock:{brk}:break") > 23 * 3600 * 1000LL);

    /* Not held: nothing done, nothing recorded anew. */
    assert_int_equal(dlock_release(next), DLOCK_OK);
    assert_int_equal(dlock_break(breaker, "brk", NULL, &b), DLOCK_OK);
    assert_int_equal(b.broken, 0);
    assert_int_equal(dlock_break_last(op, "never-broken", &last), DLOCK_OK);
    assert_int_equal(last.broken, 0);
    /* Bad input: a clear error, never a crash. */
    assert_int_equal(dlock_break(breaker, "brk", NULL, NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_break(breaker, "", NULL, &b), DLOCK_ERR_INVALID);
    char why[600];
    memset(why, 'w', sizeof why - 1);
    why[sizeof why - 1] = '\0';
    bo.reason = why;
    assert_int_equal(dlock_break(breaker, "brk", &bo, &b), DLOCK_ERR_INVALID);
    dlock_pending_free(p);
    dlock_client_free(breaker);
    dlock_client_free(op);
    dlock_client_free(c);
}

/* Every shared holder and permit goes at once. */
static void test_break_shared(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, it_timeout_ms());
    dlock_opts so = {.ttl_ms = 30000, .label = "permit"};
    dlock_lock *p1, *p2;
    assert_int_equal(dlock_sem_acquire(c, "brk-sem", 3, &so, &p1), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(c, "brk-sem", 3, &so, &p2), DLOCK_OK);
    dlock_break_info b;
    assert_int_equal(dlock_break(c, "brk-sem", NULL, &b), DLOCK_OK);
    assert_int_equal(b.broken, 1);
    assert_memory_equal(b.holder, "2 shared: ", 10);
    assert_non_null(strstr(b.holder, dlock_token(p1)));
    assert_non_null(strstr(b.holder, dlock_token(p2)));
    assert_int_equal(it_exists(&it_srv, "dlock:{brk-sem}"), 0);
    assert_int_equal(it_exists(&it_srv, "dlock:{brk-sem}:holders"), 0);
    /* `dlock status` shows the record, each evicted token cut to its start, in text
     * and in JSON: never whole. */
    const char *const *env = it_cli_env(&it_srv);
    it_run r;
    const char *json[] = {NULL, "--json"};
    for (int i = 0; i < 2; i++) {
        if (json[i] != NULL)
            it_cli(&r, env, NULL, json[i], "status", "brk-sem", NULL);
        else
            it_cli(&r, env, NULL, "status", "brk-sem", NULL);
        it_expect_status(&r, 0);
        assert_true(strstr(r.out, "evicting 2 shared: ") != NULL ||
                    strstr(r.out, "\"holder\":\"2 shared: ") != NULL);
        dlock_lock *const permits[] = {p1, p2};
        int shown = 0;
        for (int k = 0; k < 2; k++) {
            char start[16];
            snprintf(start, sizeof start, "%.8s... ", dlock_token(permits[k]));
            shown += strstr(r.out, start) != NULL;
            assert_null(strstr(r.out, dlock_token(permits[k])));
        }
        /* The text names the first of them (the longest lease) and "...", JSON both. */
        assert_int_equal(shown, json[i] != NULL ? 2 : 1);
    }
    assert_int_equal(dlock_release(p1), DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(p2), DLOCK_ERR_LOST);
    /* The name is free for the next three. */
    assert_int_equal(dlock_sem_acquire(c, "brk-sem", 3, &so, &p1), DLOCK_OK);
    assert_int_equal(dlock_release(p1), DLOCK_OK);
    dlock_client_free(c);
}

/* The command line: list as text and JSON, break with a reason, status showing it,
 * 73 for a name nobody holds. */
static void test_cli(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, it_timeout_ms());
    dlock_opts o = {.ttl_ms = 30000, .label = "cli-holder"};
    dlock_lock *l;
    assert_int_equal(dlock_acquire(c, "cli:one", &o, &l), DLOCK_OK);
    const char *const *env = it_cli_env(&it_srv);
    it_run r;
    it_cli(&r, env, NULL, "list", "cli:*", NULL);
    it_expect_status(&r, 0);
    assert_non_null(strstr(r.out, "cli:one  exclusive  "));
    assert_non_null(strstr(r.out, "cli-holder"));
    assert_non_null(strstr(r.out, "waiters 0"));
    it_cli(&r, env, NULL, "--json", "list", NULL);
    it_expect_status(&r, 0);
    assert_non_null(strstr(r.out, "{\"name\":\"cli:one\",\"kind\":\"exclusive\",\"holders\":"
                                  "[{\"holder\":\""));
    assert_non_null(strstr(r.out, "\"waiters\":0}"));
    it_cli(&r, env, NULL, "break", "--reason", "stuck since noon", "cli:one", NULL);
    it_expect_status(&r, 0);
    assert_non_null(strstr(r.out, "broke cli:one: evicted "));
    assert_non_null(strstr(r.out, dlock_token(l)));
    it_cli(&r, env, NULL, "status", "cli:one", NULL);
    it_expect_status(&r, 0);
    assert_non_null(strstr(r.out, "cli:one: free"));
    assert_non_null(strstr(r.out, "last broken at "));
    assert_non_null(strstr(r.out, "(stuck since noon), evicting "));
    char start[32];
    snprintf(start, sizeof start, "(token %.8s...)", dlock_token(l));
    assert_non_null(strstr(r.out, start));
    assert_null(strstr(r.out, dlock_token(l))); /* status never shows a token whole */
    it_cli(&r, env, NULL, "--json", "status", "cli:one", NULL);
    assert_non_null(strstr(r.out, "\"reason\":\"stuck since noon\""));
    assert_null(strstr(r.out, dlock_token(l)));
    it_cli(&r, env, NULL, "break", "cli:one", NULL);
    it_expect_status(&r, 73);
    assert_non_null(strstr(r.err, "not held"));
    it_cli(&r, env, NULL, "list", "a", "b", NULL);
    it_expect_status(&r, 64);
    assert_int_equal(dlock_release(l), DLOCK_ERR_LOST);
    dlock_client_free(c);
}

/* ---- three Redlock servers ------------------------------------------------------------- */

/* A lock held on all three is listed, with a waiter of another client; shared holders
 * too; a name written on one server only (no quorum) is
 * not; a break frees a name on every server. */
static void test_list_redlock(void **state)
{
    (void)state;
    dlock_client *c = it_nodes_client();
    dlock_lock *l = it_acquire(c, "rl:held", 30000);
    /* The round ended at a quorum: the third server may get the lock a little later. */
    int64_t deadline = dh_now_ms() + 3000 * dh_slack();
    while (it_holding(it_node, 3, "rl:held", l) < 3 && dh_now_ms() < deadline)
        dh_sleep_ms(5);
    dlock_client *w = it_nodes_client();
    dlock_pending *p = it_queue_waiter(w, "rl:held", 5000, it_node, 3);
    /* Shared holders; no semaphore of K >= 2, which needs a client of one server. */
    dlock_opts sh = {.ttl_ms = 20000, .shared = 1};
    dlock_lock *r1, *r2;
    assert_int_equal(dlock_acquire(c, "rl:read", &sh, &r1), DLOCK_OK);
    assert_int_equal(dlock_acquire(c, "rl:read", &sh, &r2), DLOCK_OK);
    it_del(&it_node[0], "dlock:{rl:held}"); /* a quorum (2 of 3) still holds it */
    assert_int_equal(dh_reply_status(dh_cmd(&it_node[1], "SET dlock:{rl:one} %s PX 30000",
                                            "0123456789abcdef0123456789abcdef x:1"),
                                     "SET"),
                     0);
    seen s;
    list(c, "rl:*", "rl:held", &s);
    assert_string_equal(s.names, "rl:held,rl:read");
    assert_string_equal(s.holders[0].token, dlock_token(l));
    assert_int_equal(s.entry.waiters, 1);
    list(c, "rl:read", "rl:read", &s);
    assert_int_equal(s.entry.kind, DLOCK_KIND_SHARED);
    assert_int_equal(s.entry.nholders, 2);
    assert_int_equal(dlock_release(r1), DLOCK_OK);
    assert_int_equal(dlock_release(r2), DLOCK_OK);
    /* The waiter leaves first: a break serves waiters as a release does. */
    dlock_pending_free(p);
    dlock_client_free(w);
    it_wait_queued_on(it_node, 3, "rl:held", 0);
    dlock_break_info b;
    assert_int_equal(dlock_break(c, "rl:held", NULL, &b), DLOCK_OK);
    assert_int_equal(b.broken, 1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(it_exists(&it_node[i], "dlock:{rl:held}"), 0);
    list(c, "rl:*", NULL, &s);
    assert_string_equal(s.names, "");
    assert_int_equal(dlock_release(l), DLOCK_ERR_LOST);
    it_del(&it_node[1], "dlock:{rl:one}");
    dlock_client_free(c);
}

/* ---- file:// ------------------------------------------------------------------------- */

/* A directory's held names, from their files: an exclusive holder, shared holders, a
 * semaphore's permits (as shared holders), a name with bytes its file name escapes; a name too long
 * for a file name (its file keeps a hash) is left out; a free name's file is not listed; a break is
 * refused. */
static void test_list_local(void **state)
{
    (void)state;
    dlock_client *c = it_client_cfg(it_local_url, NULL);
    dlock_opts o = {.ttl_ms = 30000, .label = "local job"};
    dlock_lock *ex, *s1, *s2, *odd, *free_one, *long_one;
    assert_int_equal(dlock_acquire(c, "loc:job", &o, &ex), DLOCK_OK);
    dlock_opts sh = {.ttl_ms = 20000, .shared = 1};
    assert_int_equal(dlock_acquire(c, "loc:read", &sh, &s1), DLOCK_OK);
    sh.ttl_ms = 10000;
    assert_int_equal(dlock_acquire(c, "loc:read", &sh, &s2), DLOCK_OK);
    assert_int_equal(dlock_acquire(c, "loc:odd/na me%", &o, &odd), DLOCK_OK);
    dlock_lock *p1, *p2;
    assert_int_equal(dlock_sem_acquire(c, "loc:pool", 4, &o, &p1), DLOCK_OK);
    assert_int_equal(dlock_sem_acquire(c, "loc:pool", 4, &o, &p2), DLOCK_OK);
    assert_int_equal(dlock_acquire(c, "loc:freed", &o, &free_one), DLOCK_OK);
    assert_int_equal(dlock_release(free_one), DLOCK_OK);
    char longname[400];
    memset(longname, 'L', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    memcpy(longname, "loc:", 4);
    assert_int_equal(dlock_acquire(c, longname, &o, &long_one), DLOCK_OK);
    seen s;
    list(c, "loc:*", "loc:job", &s);
    assert_string_equal(s.names, "loc:job,loc:odd/na me%,loc:pool,loc:read");
    assert_int_equal(s.entry.kind, DLOCK_KIND_EXCLUSIVE);
    assert_string_equal(s.holders[0].token, dlock_token(ex));
    assert_non_null(strstr(s.holders[0].description, "local job"));
    assert_true(s.entry.remaining_ms > 20000);
    assert_int_equal(s.entry.fence, dlock_fence(ex));
    list(c, "loc:read", "loc:read", &s);
    assert_int_equal(s.entry.kind, DLOCK_KIND_SHARED);
    assert_int_equal(s.entry.nholders, 2);
    assert_string_equal(s.holders[0].token, dlock_token(s1));
    assert_string_equal(s.holders[1].token, dlock_token(s2));
    /* Its files do not keep K: a semaphore's permits list as shared holders. */
    list(c, "loc:pool", "loc:pool", &s);
    assert_int_equal(s.entry.kind, DLOCK_KIND_SHARED);
    assert_int_equal(s.entry.permits, 0);
    assert_int_equal(s.entry.nholders, 2);
    dlock_break_info b;
    assert_int_equal(dlock_break(c, "loc:job", NULL, &b), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_break_last(c, "loc:job", &b), DLOCK_OK);
    assert_int_equal(b.broken, 0);
    dlock_lock *all[] = {ex, s1, s2, odd, long_one, p1, p2};
    for (int i = 0; i < 7; i++)
        assert_int_equal(dlock_release(all[i]), DLOCK_OK);
    list(c, "loc:*", NULL, &s);
    assert_string_equal(s.names, "");
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest one[] = {
        cmocka_unit_test(test_list_kinds),   cmocka_unit_test(test_list_hostile_names),
        cmocka_unit_test(test_list_100k),    cmocka_unit_test(test_break),
        cmocka_unit_test(test_break_shared), cmocka_unit_test(test_cli),
    };
    const struct CMUnitTest three[] = {cmocka_unit_test(test_list_redlock)};
    const struct CMUnitTest local[] = {cmocka_unit_test(test_list_local)};
    int failed = cmocka_run_group_tests_name("one server", one, it_srv_setup, it_srv_teardown);
    failed +=
        cmocka_run_group_tests_name("three servers", three, it_nodes_setup3, it_nodes_teardown);
    failed += cmocka_run_group_tests_name("file://", local, it_local_setup, it_local_teardown);
    return failed;
}
