/*
 * test_dlockd_locks.c: the lock commands of dlockd against real redis-servers: LOCK's
 * reply and the keys behind it, session locks (renewed while the connection lives,
 * released when it closes), DETACHED leases, UNLOCK and EXTEND, CHECK, LOCKINFO, waiting
 * (served by an UNLOCK, a waiter that leaves), fences, servers down, and dlockd's own
 * SIGTERM and SIGKILL.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_lock_unlock(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one), *b = dt_connect(&dt_one);
    dt_lock l1;
    dt_expect_lock(dt_cmd(a, "LOCK basic"), &l1);
    assert_true(l1.validity_ms <= 30000);
    it_expect_holder(&it_srv, "basic", l1.token);
    char key[256];
    it_key(key, sizeof key, "basic");
    long long pttl = it_pttl(&it_srv, key);
    assert_true(pttl > 25000 && pttl <= 30000);

    dt_expect_nil(dt_cmd(b, "LOCK basic"));
    dt_expect_error(dt_cmd(a, "LOCK basic"), "ERR this connection already holds");
    dt_expect_int(dt_cmd(b, "UNLOCK basic 0123456789abcdef0123456789abcdef"), 0);
    it_expect_holder(&it_srv, "basic", l1.token);
    dt_expect_int(dt_cmd(a, "UNLOCK basic %s", l1.token), 1);
    assert_int_equal(it_exists(&it_srv, key), 0);
    dt_expect_int(dt_cmd(a, "UNLOCK basic %s", l1.token), 0);

    /* Fences increase from holder to holder, whichever connection. */
    dt_lock l2, l3;
    dt_expect_lock(dt_cmd(b, "lock basic ttl 5000"), &l2);
    assert_true(l2.fence > l1.fence);
    assert_true(l2.validity_ms <= 5000);
    /* UNLOCK of another connection's session lock with its token works too. */
    dt_expect_int(dt_cmd(a, "UNLOCK basic %s", l2.token), 1);
    dt_expect_lock(dt_cmd(a, "LOCK basic"), &l3);
    assert_true(l3.fence > l2.fence);
    dt_expect_int(dt_cmd(a, "UNLOCK basic %s", l3.token), 1);

    /* Bad arguments, each with its own message. */
    static const dt_refusal bad[] = {
        {"LOCK x TTL 5", "ERR TTL must be"},
        {"LOCK x TTL abc", "ERR TTL must be"},
        {"LOCK x TTL", "ERR LOCK option TTL needs a value"},
        {"LOCK x WAIT -2", "ERR WAIT must be"},
        {"LOCK x BOGUS", "ERR unknown LOCK option 'BOGUS'"},
        {"LOCK x TTL 100 TTL 200", "ERR LOCK option TTL given twice"},
        {"UNLOCK x shorttoken", "ERR a token is"},
        {"EXTEND x 0123456789abcdef0123456789abcdef 0", "ERR TTL must be"},
    };
    DT_EXPECT_REFUSALS(a, bad);
    char label[300];
    memset(label, 'l', sizeof label - 1);
    label[sizeof label - 1] = '\0';
    dt_expect_error(dt_cmd(a, "LOCK x LABEL %s", label), "ERR LABEL must be");
    dt_expect_error(dt_cmd(a, "LOCK %b", "a\0b", (size_t)3), "ERR lock name must not");
    redisFree(a);
    redisFree(b);
}

static void test_extend_and_lockinfo(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one);
    /* A LOCKINFO is an inspect in steps on the loop: no job on the pool. */
    long jobs0 = dt_info(a, "pool_jobs");
    redisReply *r = dt_cmd(a, "LOCKINFO info-name");
    assert_int_equal(dt_info(a, "pool_jobs"), jobs0);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 8);
    assert_string_equal(r->element[0]->str, "state");
    assert_string_equal(r->element[1]->str, "free");
    assert_string_equal(r->element[2]->str, "holder");
    assert_int_equal(r->element[3]->type, REDIS_REPLY_NIL);
    freeReplyObject(r);

    dt_lock l;
    dt_expect_lock(dt_cmd(a, "LOCK info-name TTL 2000 DETACHED LABEL %s", "nightly job"), &l);
    r = dt_cmd(a, "LOCKINFO info-name");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 8);
    assert_string_equal(r->element[1]->str, "held");
    assert_non_null(strstr(r->element[3]->str, "nightly job"));
    assert_string_equal(r->element[4]->str, "remaining_ms");
    assert_true(r->element[5]->integer > 0 && r->element[5]->integer <= 2000);
    assert_string_equal(r->element[6]->str, "fence");
    assert_int_equal(r->element[7]->integer, l.fence);
    freeReplyObject(r);

    char key[256];
    it_key(key, sizeof key, "info-name");
    dt_expect_int(dt_cmd(a, "EXTEND info-name %s 60000", l.token), 1);
    assert_true(it_pttl(&it_srv, key) > 50000);
    dt_expect_int(dt_cmd(a, "EXTEND info-name ffffffffffffffffffffffffffffffff 60000"), 0);
    dt_expect_int(dt_cmd(a, "UNLOCK info-name %s", l.token), 1);
    dt_expect_int(dt_cmd(a, "EXTEND info-name %s 60000", l.token), 0);

    /* A session lock: EXTEND works on its handle (renewal goes on with the new ttl). */
    dt_expect_lock(dt_cmd(a, "LOCK info-session TTL 1000"), &l);
    it_key(key, sizeof key, "info-session");
    dt_expect_int(dt_cmd(a, "EXTEND info-session %s 60000", l.token), 1);
    assert_true(it_pttl(&it_srv, key) > 50000);
    dt_expect_int(dt_cmd(a, "UNLOCK info-session %s", l.token), 1);

    /* Shared holders are counted. */
    redisContext *b = dt_connect(&dt_one);
    dt_lock s1, s2;
    dt_expect_lock(dt_cmd(a, "LOCK info-shared SHARED"), &s1);
    dt_expect_lock(dt_cmd(b, "LOCK info-shared SHARED"), &s2);
    jobs0 = dt_info(a, "pool_jobs");
    r = dt_cmd(a, "LOCKINFO info-shared");
    assert_int_equal(dt_info(a, "pool_jobs"), jobs0);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 10);
    assert_string_equal(r->element[1]->str, "held");
    /* Both holders, from the same round. */
    assert_int_equal(r->element[3]->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->element[3]->elements, 2);
    for (size_t i = 0; i < 2; i++)
        assert_non_null(strstr(r->element[3]->element[i]->str, "dlockd"));
    assert_string_equal(r->element[8]->str, "shared");
    assert_int_equal(r->element[9]->integer, 2);
    freeReplyObject(r);
    /* An exclusive LOCK from a third connection is refused while they hold it. */
    redisContext *c = dt_connect(&dt_one);
    dt_expect_nil(dt_cmd(c, "LOCK info-shared"));
    redisFree(c);
    redisFree(b);
    redisFree(a);
}

/* LOCKINFO's remaining_ms of name. */
static long long remaining_ms(redisContext *c, const char *name)
{
    redisReply *r = dt_cmd(c, "LOCKINFO %s", name);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_true(r->elements >= 6);
    assert_string_equal(r->element[4]->str, "remaining_ms");
    long long ms = r->element[5]->integer;
    freeReplyObject(r);
    return ms;
}

/* CHECK says whether a token holds a name, from any connection, and changes nothing.
 * It is a check in steps on the loop: no job on the pool. */
static void test_check(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one), *b = dt_connect(&dt_one);
    const char *other = "0123456789abcdef0123456789abcdef";
    dt_lock l;
    dt_expect_lock(dt_cmd(a, "LOCK chk"), &l);
    long jobs0 = dt_info(b, "pool_jobs");
    dt_expect_int(dt_cmd(a, "CHECK chk %s", l.token), 1); /* a's session lock, its handle */
    dt_expect_int(dt_cmd(b, "CHECK chk %s", l.token), 1); /* adopted by b */
    dt_expect_int(dt_cmd(b, "CHECK chk %s", other), 0);
    assert_int_equal(dt_info(b, "pool_jobs"), jobs0);
    it_expect_holder(&it_srv, "chk", l.token);
    dt_expect_int(dt_cmd(a, "UNLOCK chk %s", l.token), 1);
    dt_expect_int(dt_cmd(a, "CHECK chk %s", l.token), 0);
    dt_expect_int(dt_cmd(b, "CHECK chk %s", l.token), 0);

    /* Bad arguments, as UNLOCK's: the form of the token, the name, the arity. */
    dt_expect_error(dt_cmd(a, "CHECK chk shorttoken"), "ERR a token is");
    dt_expect_error(dt_cmd(a, "CHECK chk 0123456789ABCDEF0123456789ABCDEF"),
                    "ERR invalid argument");
    dt_expect_error(dt_cmd(a, "CHECK chk 0123456789abcdef0123456789abcdez"),
                    "ERR invalid argument");
    dt_expect_error(dt_cmd(a, "CHECK %b %s", "a\0b", (size_t)3, other), "ERR lock name must not");
    dt_expect_error(dt_cmd(a, "CHECK chk"), "ERR wrong number of arguments for 'check'");
    dt_expect_error(dt_cmd(a, "CHECK chk %s 1000", other), "ERR wrong number of arguments");

    /* A DETACHED lock is held until its TTL runs out, and a CHECK renews nothing. */
    long long ttl = 200 * dh_slack();
    dt_expect_lock(dt_cmd(a, "LOCK chk-det TTL %lld DETACHED", ttl), &l);
    dt_expect_int(dt_cmd(b, "CHECK chk-det %s", l.token), 1);
    dt_wait_key_gone("chk-det", ttl + 500 * dh_slack());
    dt_expect_int(dt_cmd(b, "CHECK chk-det %s", l.token), 0);
    dt_expect_lock(dt_cmd(a, "LOCK chk-lease TTL 30000 DETACHED"), &l);
    dh_sleep_ms(300);
    long long before = remaining_ms(a, "chk-lease");
    dt_expect_int(dt_cmd(a, "CHECK chk-lease %s", l.token), 1);
    dt_expect_int(dt_cmd(b, "CHECK chk-lease %s", l.token), 1);
    long long after = remaining_ms(a, "chk-lease");
    assert_true(after > 0 && after <= before && before < 29800);
    dt_expect_int(dt_cmd(a, "UNLOCK chk-lease %s", l.token), 1);

    /* A semaphore permit, by its token. */
    dt_expect_lock(dt_cmd(a, "SEM ACQUIRE chk-sem 2"), &l);
    dt_expect_int(dt_cmd(a, "CHECK chk-sem %s", l.token), 1);
    dt_expect_int(dt_cmd(b, "CHECK chk-sem %s", l.token), 1);
    dt_expect_int(dt_cmd(b, "CHECK chk-sem %s", other), 0);
    dt_expect_int(dt_cmd(b, "SEM RELEASE chk-sem %s", l.token), 1);
    dt_expect_int(dt_cmd(a, "CHECK chk-sem %s", l.token), 0);

    /* A session lock gone from the servers: CHECK finds it lost, which frees its
     * connection to LOCK the name again. */
    dt_expect_lock(dt_cmd(a, "LOCK chk-lost"), &l);
    char key[256];
    it_key(key, sizeof key, "chk-lost");
    it_del(&it_srv, key);
    dt_expect_int(dt_cmd(a, "CHECK chk-lost %s", l.token), 0);
    dt_lock l2;
    dt_expect_lock(dt_cmd(a, "LOCK chk-lost"), &l2);
    dt_expect_int(dt_cmd(a, "UNLOCK chk-lost %s", l2.token), 1);
    redisFree(a);
    redisFree(b);
}

/* Session locks end with their connection; DETACHED ones do not. */
static void test_session_and_detached(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one), *b = dt_connect(&dt_one);
    dt_lock l, dl;
    dt_expect_lock(dt_cmd(a, "LOCK sess"), &l);
    dt_expect_lock(dt_cmd(a, "LOCK det DETACHED TTL 30000"), &dl);
    assert_int_equal(dt_info(b, "session_locks"), 1);
    dt_send(b, "LOCK sess WAIT %lld", (long long)(10000 * dh_slack()));
    dh_sleep_ms(100);
    /* The client goes away holding both. */
    dt_lock l2;
    dt_expect_close_serves(a, b, &l2, "dlockd_session_close_to_waiter_ms", 2000 * dh_slack());
    assert_true(l2.fence > l.fence);
    it_expect_holder(&it_srv, "sess", l2.token);
    /* The detached lock is still held with its token. */
    it_expect_holder(&it_srv, "det", dl.token);
    dt_expect_int(dt_cmd(b, "UNLOCK det %s", dl.token), 1);
    dt_expect_int(dt_cmd(b, "UNLOCK sess %s", l2.token), 1);
    assert_int_equal(dt_info(b, "session_locks"), 0);
    /* A close's release is a release in steps on the loop, as an UNLOCK is: no job on
     * the pool. */
    redisContext *c = dt_connect(&dt_one);
    dt_expect_lock(dt_cmd(c, "LOCK sess-steps"), &l);
    dt_expect_lock(dt_cmd(c, "LOCK sess-steps-shared SHARED"), &l2);
    long jobs0 = dt_info(b, "pool_jobs");
    redisFree(c);
    dt_wait_key_gone("sess-steps", 5000 * dh_slack());
    dt_wait_key_gone("sess-steps-shared", 5000 * dh_slack());
    assert_int_equal(dt_info(b, "session_locks"), 0);
    assert_int_equal(dt_info(b, "pool_jobs"), jobs0);
    redisFree(b);
}

/* dlockd renews a session lock every TTL/3: held well past its TTL. */
static void test_renewal(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one);
    dt_lock l;
    dt_expect_lock(dt_cmd(a, "LOCK renewed TTL 1000"), &l);
    dh_sleep_ms(1500);
    it_expect_holder(&it_srv, "renewed", l.token);
    char key[256];
    it_key(key, sizeof key, "renewed");
    assert_true(it_pttl(&it_srv, key) > 0);
    dt_expect_int(dt_cmd(a, "UNLOCK renewed %s", l.token), 1);
    /* A detached lock is not renewed: gone after its TTL. */
    dt_expect_lock(dt_cmd(a, "LOCK not-renewed TTL 300 DETACHED"), &l);
    dt_wait_key_gone("not-renewed", 300 + 500 * dh_slack());
    redisFree(a);
}

/* A blocked LOCK is served when the holder unlocks, without polling; one that waits
 * too long gets nil. */
static void test_wait(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one), *b = dt_connect(&dt_one);
    dt_lock l, l2;
    dt_expect_lock(dt_cmd(a, "LOCK w"), &l);
    int64_t t0 = dh_now_ms();
    dt_expect_nil(dt_cmd(b, "LOCK w WAIT 300"));
    int64_t waited = dh_now_ms() - t0;
    print_message("FIG dlockd_wait_300_nil_after_ms %lld ms\n", (long long)waited);
    assert_true(waited >= 290 && waited < 300 + 1000 * dh_slack());
    assert_int_equal(dt_info(a, "blocked_clients"), 0);

    int64_t queued_at = dh_now_us();
    long long before_wait = it_script_calls(&it_srv);
    dt_send(b, "LOCK w WAIT -1");
    /* Pipelined behind the blocked LOCK: answered after it, in order. */
    dt_send(b, "ECHO after-the-lock");
    /* Until b is parked in dlockd. */
    int64_t deadline = dh_now_ms() + 5000 * dh_slack();
    while (dt_info(a, "blocked_clients") != 1)
        assert_true(dh_now_ms() < deadline);
    long long published = it_cmd_calls(&it_srv, "publish");
    long long scripts = it_script_calls(&it_srv);
    /* The lock is dlockd's own (a's, in the one client dlockd holds locks in), and its
     * client waited before (the nil above): b waits in dlockd alone, queued on no
     * server until a's release queues it, so its LOCK sent nothing at all. */
    assert_int_equal(scripts, before_wait);
    t0 = dh_now_us();
    dt_expect_int(dt_cmd(a, "UNLOCK w %s", l.token), 1);
    dt_expect_lock(dt_reply(b), &l2);
    int64_t handoff_us = dh_now_us() - t0;
    /* b is the heir of a's release (one client in dlockd holds both): the release
     * hands it the lock with its own lease and fence, and nothing else is sent, not a
     * message, not an attempt (nor a refresh of b's place, due 1 s after it queued,
     * unless this took that long). */
    assert_int_equal(it_cmd_calls(&it_srv, "publish"), published);
    if (dh_now_us() - queued_at < 900000)
        assert_int_equal(it_script_calls(&it_srv) - scripts, 1);
    assert_true(l2.validity_ms > 25000 && l2.validity_ms <= 30000);
    redisReply *r = dt_reply(b);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "after-the-lock");
    freeReplyObject(r);
    print_message("FIG dlockd_wait_handoff_us %lld us\n", (long long)handoff_us);
    assert_true(handoff_us < 1000000 * dh_slack());
    assert_true(l2.fence > l.fence);
    it_expect_holder(&it_srv, "w", l2.token);
    dt_expect_int(dt_cmd(b, "UNLOCK w %s", l2.token), 1);
    redisFree(a);
    redisFree(b);
}

/* A waiter that disconnects leaves the queue: the next one is served at the release,
 * also in FIFO mode, where a dead head would otherwise hold the line. */
static void test_waiter_leaves(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one), *b = dt_connect(&dt_one), *c = dt_connect(&dt_one);
    dt_lock l, l3;
    dt_expect_lock(dt_cmd(a, "LOCK q FAIR"), &l);
    dt_send(b, "LOCK q WAIT 30000 FAIR");
    int64_t deadline = dh_now_ms() + 5000 * dh_slack();
    while (dt_info(a, "blocked_clients") != 1)
        assert_true(dh_now_ms() < deadline);
    dt_send(c, "LOCK q WAIT 30000 FAIR");
    while (dt_info(a, "blocked_clients") != 2)
        assert_true(dh_now_ms() < deadline);
    redisFree(b); /* the first waiter goes */
    while (dt_info(a, "blocked_clients") != 1)
        assert_true(dh_now_ms() < deadline);
    int64_t t0 = dh_now_ms();
    dt_expect_int(dt_cmd(a, "UNLOCK q %s", l.token), 1);
    dt_expect_lock(dt_reply(c), &l3);
    int64_t took = dh_now_ms() - t0;
    print_message("FIG dlockd_waiter_left_next_served_ms %lld ms\n", (long long)took);
    assert_true(took < 1000 * dh_slack());
    dt_expect_int(dt_cmd(c, "UNLOCK q %s", l3.token), 1);
    redisFree(a);
    redisFree(c);
}

/* Many clients parked at once on a few names: no thread each (the whole process stays
 * within 16 threads), and every one is served as the names pass from hand to hand. */
static void test_many_waiters(void **state)
{
    (void)state;
    enum { NAMES = 10, WAITERS = 300 };
    redisContext *holder = dt_connect(&dt_one);
    dt_lock held[NAMES];
    for (int i = 0; i < NAMES; i++)
        dt_expect_lock(dt_cmd(holder, "LOCK many-%d", i), &held[i]);
    static redisContext *w[WAITERS];
    static bool served[WAITERS];
    for (int i = 0; i < WAITERS; i++) {
        w[i] = dt_connect(&dt_one);
        served[i] = false;
        dt_send(w[i], "LOCK many-%d WAIT 60000", i % NAMES);
    }
    int64_t deadline = dh_now_ms() + 20000 * dh_slack();
    while (dt_info(holder, "blocked_clients") != WAITERS)
        assert_true(dh_now_ms() < deadline);
    long long threads = dt_threads(dt_one.pid);
    print_message("FIG dlockd_threads_with_%d_waiters %lld threads\n", WAITERS, threads);
    assert_true(threads > 0 && threads <= 16);
    int64_t t0 = dh_now_ms();
    for (int i = 0; i < NAMES; i++)
        dt_expect_int(dt_cmd(holder, "UNLOCK many-%d %s", i, held[i].token), 1);
    /* Each waiter served unlocks at once, which serves the next of its name. */
    long long last_fence[NAMES] = {0};
    dt_serve_in_turn(w, served, WAITERS, "many", NAMES, last_fence, deadline);
    print_message("FIG dlockd_%d_waiters_served_ms %lld ms\n", WAITERS,
                  (long long)(dh_now_ms() - t0));
    assert_int_equal(dt_info(holder, "blocked_clients"), 0);
    for (int i = 0; i < WAITERS; i++)
        redisFree(w[i]);
    redisFree(holder);
}

/* A client that goes while its LOCK's round is in flight (the replies held up 300 ms):
 * what the round took for it is given back once it is gone, not left to its TTL; and
 * one that goes in the middle of a command leaves nothing behind. */
static void test_disconnect_mid_command(void **state)
{
    (void)state;
    dt_slow slow;
    dt_slow_start(&slow);
    redisContext *a = dt_connect(&slow.d);
    /* dlockd's connection to the server is made (else the LOCK would wait for its
     * handshake, and a close before that takes nothing). */
    freeReplyObject(dt_cmd(a, "LOCKINFO mid"));
    dt_slow_send_and_close(&slow, a, "LOCK mid TTL 30000");
    char key[256];
    it_fence_key(key, sizeof key, "mid"); /* raised by a grant, kept after its release */
    int64_t deadline = dh_now_ms() + 5000 * dh_slack();
    while (!it_exists(&it_srv, key))
        assert_true(dh_now_ms() < deadline);                   /* the grant happened ... */
    int64_t gone = dt_wait_key_gone("mid", 3000 * dh_slack()); /* ... and was undone */
    print_message("FIG dlockd_grant_after_close_released_ms %lld ms\n", (long long)gone);
    fr_pass(slow.relay);
    a = dt_connect(&slow.d);
    assert_int_equal(dt_info(a, "session_locks"), 0);
    redisFree(a);
    dt_slow_stop(&slow);

    int fd = dt_raw(&dt_one);
    static const char half[] = "*3\r\n$4\r\nLOCK\r\n$4\r\nhalf\r\n$";
    dt_raw_write(fd, half, sizeof half - 1);
    close(fd);
    redisContext *b = dt_connect(&dt_one);
    dt_lock l;
    dt_expect_lock(dt_cmd(b, "LOCK half"), &l);
    dt_expect_int(dt_cmd(b, "UNLOCK half %s", l.token), 1);
    redisFree(b);
}

/* Two dlockd processes in front of the same server serve the same locks. */
static void test_two_daemons(void **state)
{
    (void)state;
    dt_daemon d2;
    dt_start(&d2, it_srv.url, NULL);
    redisContext *a = dt_connect(&dt_one), *b = dt_connect(&d2);
    dt_lock l;
    dt_expect_lock(dt_cmd(a, "LOCK shared-name"), &l);
    dt_expect_nil(dt_cmd(b, "LOCK shared-name"));
    dt_expect_int(dt_cmd(b, "UNLOCK shared-name %s", l.token), 1);
    dt_expect_lock(dt_cmd(b, "LOCK shared-name"), &l);
    redisFree(a);
    redisFree(b);
    assert_int_equal(dt_stop(&d2), 0);
    assert_int_equal(it_exists(&it_srv, "dlock:{shared-name}"), 0);
}

/* A lock server down: LOCK answers -UNAVAILABLE within the deadline and dlockd goes on
 * serving, another client's commands too while the LOCK waits for the paused server
 * (its round is in flight on the loop, which it must not hold); with three servers and
 * two down, -NOQUORUM. */
static void test_server_down(void **state)
{
    (void)state;
    dt_fresh f1;
    redisContext *a = dt_fresh_start(&f1, 1);
    redisContext *b = dt_connect(&f1.d);
    dh_server *s = &f1.srv[0];
    dt_lock l;
    dt_expect_lock(dt_cmd(a, "LOCK down"), &l);
    dh_server_pause(s);
    int64_t t0 = dh_now_ms();
    dt_send(a, "LOCK down2");
    dh_sleep_ms(10);
    int64_t tb = dh_now_ms();
    dt_expect_status(dt_cmd(b, "PING"), "PONG");
    assert_true(dt_info(b, "connected_clients") >= 2);
    int64_t served_ms = dh_now_ms() - tb;
    print_message("FIG dlockd_served_while_paused_ms %lld ms\n", (long long)served_ms);
    assert_true(served_ms < it_timeout_ms() / 2);
    dt_expect_error(dt_reply(a), "UNAVAILABLE ");
    int64_t took = dh_now_ms() - t0;
    print_message("FIG dlockd_paused_server_unavailable_ms %lld ms\n", (long long)took);
    /* The deadline is --timeout (100 ms times the slack) per round; an attempt is one
     * round, plus the clean-up of a failed one, which is sent, not awaited. */
    assert_true(took < 4 * it_timeout_ms() + 200 * dh_slack());
    dt_expect_status(dt_cmd(a, "PING"), "PONG");
    dh_server_resume(s);
    dh_server_kill(s);
    t0 = dh_now_ms();
    dt_expect_error(dt_cmd(a, "LOCK down3"), "UNAVAILABLE ");
    print_message("FIG dlockd_killed_server_unavailable_ms %lld ms\n",
                  (long long)(dh_now_ms() - t0));
    assert_int_equal(dh_server_restart(s), 0);
    dt_expect_lock(dt_cmd(a, "LOCK down4"), &l);
    assert_int_equal(dt_info(a, "errors_unavailable"), 2);
    redisFree(b);
    redisFree(a);
    dt_fresh_stop(&f1);

    dt_fresh f3;
    a = dt_fresh_start(&f3, 3);
    dt_expect_lock(dt_cmd(a, "LOCK q3"), &l);
    dt_expect_int(dt_cmd(a, "UNLOCK q3 %s", l.token), 1);
    dh_server_kill(&f3.srv[1]);
    dh_server_kill(&f3.srv[2]);
    dt_expect_error(dt_cmd(a, "LOCK q3"), "NOQUORUM ");
    dt_expect_status(dt_cmd(a, "PING"), "PONG");
    assert_int_equal(dt_info(a, "errors_noquorum"), 1);
    redisFree(a);
    dt_fresh_stop(&f3);
}

/* SIGTERM: session locks released, detached ones kept, exit 0. SIGKILL: the session
 * lock expires within its TTL. */
static void test_signals(void **state)
{
    (void)state;
    dt_daemon t;
    dt_start(&t, it_srv.url, NULL);
    redisContext *a = dt_connect(&t), *b = dt_connect(&t);
    dt_lock s, det, w;
    dt_expect_lock(dt_cmd(a, "LOCK term-session"), &s);
    dt_expect_lock(dt_cmd(a, "LOCK term-detached DETACHED"), &det);
    dt_expect_lock(dt_cmd(a, "LOCK term-held"), &w);
    dt_send(b, "LOCK term-held WAIT -1"); /* a parked waiter, given up at the stop */
    int64_t deadline = dh_now_ms() + 5000 * dh_slack();
    while (dt_info(a, "blocked_clients") != 1)
        assert_true(dh_now_ms() < deadline);
    int status = dt_stop(&t);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(it_exists(&it_srv, "dlock:{term-session}"), 0);
    assert_int_equal(it_exists(&it_srv, "dlock:{term-held}"), 0);
    it_expect_holder(&it_srv, "term-detached", det.token);
    it_del(&it_srv, "dlock:{term-detached}");
    redisFree(a);
    redisFree(b);

    dt_start(&t, it_srv.url, NULL);
    a = dt_connect(&t);
    dt_expect_lock(dt_cmd(a, "LOCK killed TTL 1000"), &s);
    dh_sleep_ms(500); /* renewed meanwhile */
    dt_kill(&t);
    int64_t gone = dt_wait_key_gone("killed", 1000 + 200 * dh_slack());
    print_message("FIG dlockd_sigkill_session_expired_after_ms %lld ms\n", (long long)gone);
    redisFree(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lock_unlock),
        cmocka_unit_test(test_extend_and_lockinfo),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_session_and_detached),
        cmocka_unit_test(test_renewal),
        cmocka_unit_test(test_wait),
        cmocka_unit_test(test_waiter_leaves),
        cmocka_unit_test(test_many_waiters),
        cmocka_unit_test(test_disconnect_mid_command),
        cmocka_unit_test(test_two_daemons),
        cmocka_unit_test(test_server_down),
        cmocka_unit_test(test_signals),
    };
    return cmocka_run_group_tests(tests, dt_one_setup, dt_one_teardown);
}
