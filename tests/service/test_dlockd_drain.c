/*
 * test_dlockd_drain: how a session lock ends without its holder's UNLOCK, and how
 * dlockd stops. A session lock found lost (its lock server paused past the lease, or
 * broken by an operator) closes its holder's connection after an error that says so,
 * and the connection's other session locks are released; MAXHOLD (and --max-hold)
 * releases a lock held too long the same way. SIGTERM drains: the listener closes,
 * new LOCKs and waits get -SHUTDOWN, and no client of another dlockd in front of the
 * same server gets a lock until its holder UNLOCKs it (renewed meanwhile) or
 * --shutdown-timeout passes; a second signal ends the drain at once; one holding
 * nothing exits at once, its threads woken rather than waited out. Real dlockd
 * processes in front of a real redis-server; hiredis clients, and libdlock for the
 * break.
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
#include <string.h>
#include <sys/wait.h>

/* A client's next command fails with -LOST naming why, and then the connection is
 * closed: hiredis sees the end of the stream. */
static void expect_ended(redisContext *c, const char *why)
{
    redisReply *r = redisCommand(c, "PING");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    if (strncmp(r->str, "LOST ", 5) != 0 || strstr(r->str, why) == NULL)
        fail_msg("expected -LOST ... %s, got -%s", why, r->str);
    freeReplyObject(r);
    r = redisCommand(c, "PING");
    if (r != NULL)
        fail_msg("the connection is still open: %s", r->type == REDIS_REPLY_STATUS ? r->str : "");
    assert_true(c->err != 0);
}

static bool held(const char *name)
{
    char key[256];
    it_key(key, sizeof key, name);
    return it_exists(&it_srv, key) != 0;
}

/* Wait for the log at path to have needle, within bound_ms; the time it took. */
static int64_t wait_log(const char *path, const char *needle, int64_t bound_ms)
{
    int64_t t0 = dh_now_ms();
    while (!dt_log_has(path, needle)) {
        if (dh_now_ms() - t0 > bound_ms)
            fail_msg("no '%s' in dlockd's log after %lld ms", needle, (long long)bound_ms);
        dh_sleep_ms(10);
    }
    return dh_now_ms() - t0;
}

/* The lock server paused past the lease: the renewal finds the lock lost, and the
 * holder's connection ends with -LOST; a client without locks is left alone. Then a
 * break by an operator: the same, and the connection's other session lock is released
 * with it (the server answers this time). */
static void test_lost_lock_closes_connection(void **state)
{
    (void)state;
    char log[512];
    dt_log_path(log, sizeof log, "lost");
    dt_next_log(log);
    dt_daemon d;
    dt_start(&d, it_srv.url, NULL);
    redisContext *a = dt_connect(&d), *idle = dt_connect(&d);
    dt_lock l;
    dt_expect_lock(dt_cmd(a, "LOCK lost-paused TTL 1000"), &l);
    dh_server_pause(&it_srv);
    int64_t t0 = dh_now_ms();
    wait_log(log, "session lock 'lost-paused' of client", 3000 * dh_slack());
    dh_server_resume(&it_srv);
    print_message("FIG dlockd_lost_found_after_pause_ms %lld ms (lease 1000 ms)\n",
                  (long long)(dh_now_ms() - t0));
    assert_true(dt_log_has(log, "lost; closing the connection"));
    expect_ended(a, "'lost-paused' was lost");
    dt_expect_status(dt_cmd(idle, "PING"), "PONG");
    assert_int_equal(dt_info(idle, "session_locks_lost"), 1);
    assert_int_equal(dt_info(idle, "errors_lost"), 1);
    redisFree(a);

    redisContext *b = dt_connect(&d);
    dt_lock other;
    dt_expect_lock(dt_cmd(b, "LOCK lost-broken TTL 3000"), &l);
    dt_expect_lock(dt_cmd(b, "LOCK lost-other TTL 30000"), &other);
    dlock_client *op = it_client(&it_srv, 1000);
    dlock_break_info info;
    assert_int_equal(dlock_break(op, "lost-broken", NULL, &info), DLOCK_OK);
    assert_int_equal(info.broken, 1);
    /* Renewed every TTL/3: the renewal finds it gone within a second. */
    int64_t gone = dt_wait_key_gone("lost-other", 3000 * dh_slack());
    print_message("FIG dlockd_broken_lock_other_released_ms %lld ms\n", (long long)gone);
    expect_ended(b, "'lost-broken' was lost");
    dt_expect_status(dt_cmd(idle, "PING"), "PONG");
    assert_int_equal(dt_info(idle, "session_locks"), 0);
    dlock_client_free(op);
    redisFree(b);
    redisFree(idle);
    assert_int_equal(dt_stop(&d), 0);
}

/* MAXHOLD: released at its time, however often renewed, and the holder's connection
 * ended; --max-hold is the default, MAXHOLD 0 opts out; DETACHED and bad values are
 * refused. */
static void test_maxhold(void **state)
{
    (void)state;
    char log[512];
    dt_log_path(log, sizeof log, "maxhold");
    dt_next_log(log);
    dt_daemon d;
    dt_start(&d, it_srv.url, "--max-hold", "2500", NULL);
    redisContext *def = dt_connect(&d), *own = dt_connect(&d), *none = dt_connect(&d);
    dt_lock l1, l2, l3;
    int64_t t0 = dh_now_ms();
    dt_expect_lock(dt_cmd(def, "LOCK mh-default TTL 1000"), &l1);
    dt_expect_lock(dt_cmd(own, "LOCK mh-own TTL 1000 MAXHOLD 3500"), &l2);
    dt_expect_lock(dt_cmd(none, "LOCK mh-none TTL 1000 MAXHOLD 0"), &l3);
    /* Renewed past its TTL until MAXHOLD (a lease of 1000 ms, --max-hold 2500). */
    dh_sleep_ms(1200);
    assert_true(held("mh-default"));
    dt_wait_key_gone("mh-default", 2500 + 1000 * dh_slack());
    print_message("FIG dlockd_maxhold_default_released_ms %lld ms (max-hold 2500)\n",
                  (long long)(dh_now_ms() - t0));
    assert_true(dh_now_ms() - t0 >= 2500);
    dt_wait_key_gone("mh-own", 3500 + 1000 * dh_slack());
    assert_true(dh_now_ms() - t0 >= 3500);
    print_message("FIG dlockd_maxhold_released_ms %lld ms (MAXHOLD 3500)\n",
                  (long long)(dh_now_ms() - t0));
    expect_ended(def, "MAXHOLD of 2500 ms");
    expect_ended(own, "MAXHOLD of 3500 ms");
    assert_true(wait_log(log, "held past its MAXHOLD of 3500 ms", 1000) >= 0);
    /* A holder waiting for another lock when its MAXHOLD passes: the wait is ended by
     * the -LOST, and its lock released then, not when the wait would end. */
    redisContext *w = dt_connect(&d);
    dt_lock lw;
    int64_t tw = dh_now_ms();
    dt_expect_lock(dt_cmd(w, "LOCK mh-waiter TTL 1000 MAXHOLD 1000"), &lw);
    dt_send(w, "LOCK mh-none WAIT -1");
    dt_expect_error(dt_reply(w), "LOST session lock 'mh-waiter' was held past its MAXHOLD of 1000");
    print_message("FIG dlockd_maxhold_waiting_holder_told_ms %lld ms (MAXHOLD 1000)\n",
                  (long long)(dh_now_ms() - tw));
    assert_true(dh_now_ms() - tw >= 1000);
    dt_wait_key_gone("mh-waiter", 1000 * dh_slack());
    assert_null(redisCommand(w, "PING"));
    redisFree(w);
    assert_true(held("mh-none"));
    dt_expect_int(dt_cmd(none, "UNLOCK mh-none %s", l3.token), 1);
    static const dt_refusal bad[] = {
        {"LOCK mh-d DETACHED MAXHOLD 10", "ERR MAXHOLD is for session"},
        {"LOCK mh-x MAXHOLD -1", "ERR MAXHOLD must be"},
        {"LOCK mh-x MAXHOLD", "ERR LOCK option MAXHOLD needs a value"},
        {"SEM ACQUIRE mh-s 2 MAXHOLD x", "ERR MAXHOLD must be"},
    };
    DT_EXPECT_REFUSALS(none, bad);
    dt_lock p;
    dt_expect_lock(dt_cmd(none, "SEM ACQUIRE mh-s 2 TTL 1000 MAXHOLD 1000"), &p);
    int64_t sem_gone = dt_wait_key_gone("mh-s", 1000 + 1000 * dh_slack());
    print_message("FIG dlockd_maxhold_permit_released_ms %lld ms (MAXHOLD 1000)\n",
                  (long long)sem_gone);
    expect_ended(none, "MAXHOLD of 1000 ms");
    redisFree(def);
    redisFree(own);
    redisFree(none);
    assert_int_equal(dt_stop(&d), 0);
}

static int wait_exit(pid_t pid, int64_t bound_ms)
{
    int status = -1;
    if (!dh_reap(pid, bound_ms, &status))
        fail_msg("dlockd %d still running after %lld ms", (int)pid, (long long)bound_ms);
    return status;
}

/* The rolling restart: two dlockd in front of one server, the first drained while a
 * holder is inside its section. Nobody gets the lock through the second until the
 * holder UNLOCKs (its lease, 1000 ms, renewed all the while), the waiter and new LOCKs
 * of the first get -SHUTDOWN, its listener is closed, the UNLOCK is answered, and the
 * first exits 0 as soon as its last session lock is UNLOCKed. */
static void test_drain_waits_for_holders(void **state)
{
    (void)state;
    char log[512];
    dt_log_path(log, sizeof log, "drain");
    dt_next_log(log);
    dt_daemon d1, d2;
    dt_start(&d1, it_srv.url, "--shutdown-timeout", "20000", NULL);
    dt_start(&d2, it_srv.url, NULL);
    redisContext *holder = dt_connect(&d1), *other = dt_connect(&d1), *waiter = dt_connect(&d1);
    redisContext *next = dt_connect(&d2);
    dt_lock l, o;
    dt_expect_lock(dt_cmd(holder, "LOCK dr-section TTL 1000"), &l);
    dt_expect_lock(dt_cmd(other, "LOCK dr-other TTL 1000"), &o);
    dt_send(waiter, "LOCK dr-section WAIT -1");
    dt_wait_info(holder, "blocked_clients", 1, 3000 * dh_slack());

    int64_t t0 = dh_now_ms();
    kill(d1.pid, SIGTERM);
    dt_expect_error(dt_reply(waiter), "SHUTDOWN ");
    print_message("FIG dlockd_drain_waiter_told_ms %lld ms\n", (long long)(dh_now_ms() - t0));
    wait_log(log, "draining: listeners closed", 2000 * dh_slack());
    redisContext *late = redisConnect("127.0.0.1", d1.port);
    assert_non_null(late);
    assert_true(late->err != 0); /* refused: the listener is closed */
    redisFree(late);
    dt_expect_error(dt_cmd(holder, "LOCK dr-new"), "SHUTDOWN ");
    dt_expect_error(dt_cmd(waiter, "SEM ACQUIRE dr-sem 2"), "SHUTDOWN ");
    dt_expect_error(dt_cmd(waiter, "STOCK RESERVE dr-sku 1"), "SHUTDOWN ");
    dt_expect_status(dt_cmd(waiter, "PING"), "PONG");
    /* Twice the lease: renewed, and nobody else's. */
    while (dh_now_ms() - t0 < 2000) {
        dt_expect_nil(dt_cmd(next, "LOCK dr-section WAIT 0"));
        dh_sleep_ms(100);
    }
    dt_expect_int(dt_cmd(holder, "EXTEND dr-section %s 1000", l.token), 1);
    dt_expect_int(dt_cmd(holder, "UNLOCK dr-section %s", l.token), 1);
    dt_lock got;
    dt_expect_lock(dt_cmd(next, "LOCK dr-section WAIT 0"), &got);
    /* One session lock still held: the drain goes on. */
    dh_sleep_ms(200);
    assert_int_equal(kill(d1.pid, 0), 0);
    int64_t t1 = dh_now_ms();
    dt_expect_int(dt_cmd(other, "UNLOCK dr-other %s", o.token), 1);
    int status = wait_exit(d1.pid, 2000 * dh_slack());
    print_message("FIG dlockd_drain_exit_after_last_unlock_ms %lld ms\n",
                  (long long)(dh_now_ms() - t1));
    d1.pid = 0;
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_true(dt_log_has(log, "no session lock held any more"));
    dt_expect_int(dt_cmd(next, "UNLOCK dr-section %s", got.token), 1);
    redisFree(holder);
    redisFree(other);
    redisFree(waiter);
    redisFree(next);
    assert_int_equal(dt_stop(&d2), 0);
}

/* A holder that never UNLOCKs: held until --shutdown-timeout, then released, exit 0;
 * and a second signal ends a drain at once. */
static void test_drain_timeout_and_second_signal(void **state)
{
    (void)state;
    dt_daemon d;
    dt_start(&d, it_srv.url, "--shutdown-timeout", "2500", NULL);
    redisContext *h = dt_connect(&d);
    dt_lock l;
    dt_expect_lock(dt_cmd(h, "LOCK dr-stuck TTL 1000"), &l);
    int64_t t0 = dh_now_ms();
    kill(d.pid, SIGTERM);
    dh_sleep_ms(1200);
    assert_true(held("dr-stuck"));
    int status = wait_exit(d.pid, 2500 + 2000 * dh_slack());
    int64_t took = dh_now_ms() - t0;
    d.pid = 0;
    print_message("FIG dlockd_drain_timeout_exit_ms %lld ms (shutdown-timeout 2500)\n",
                  (long long)took);
    assert_true(took >= 2500);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_false(held("dr-stuck"));
    redisFree(h);

    dt_start(&d, it_srv.url, "--shutdown-timeout", "60000", NULL);
    h = dt_connect(&d);
    dt_expect_lock(dt_cmd(h, "LOCK dr-twice TTL 1000"), &l);
    kill(d.pid, SIGTERM);
    dh_sleep_ms(300);
    assert_true(held("dr-twice"));
    t0 = dh_now_ms();
    kill(d.pid, SIGTERM);
    status = wait_exit(d.pid, 2000 * dh_slack());
    d.pid = 0;
    print_message("FIG dlockd_drain_second_signal_exit_ms %lld ms\n",
                  (long long)(dh_now_ms() - t0));
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_false(held("dr-twice"));
    redisFree(h);
}

/* The stop begins while a LOCK's round is in flight (the server's replies 300 ms late,
 * nothing held, so the drain ends at once): the grant that comes after is released and
 * answered -SHUTDOWN, never handed out as the other dlockd goes on serving the name. */
static void test_grant_after_drain_undone(void **state)
{
    (void)state;
    fr_relay *relay = fr_start(it_srv.port);
    assert_non_null(relay);
    dt_daemon d;
    dt_start(&d, fr_url(relay), "--timeout", "5000", "--shutdown-timeout", "5000", NULL);
    redisContext *c = dt_connect(&d);
    fr_delay(relay, 0, 300);
    dt_send(c, "LOCK dr-late TTL 10000");
    dh_sleep_ms(50);
    kill(d.pid, SIGTERM);
    dt_expect_error(dt_reply(c), "SHUTDOWN ");
    int status = wait_exit(d.pid, 3000 * dh_slack());
    d.pid = 0;
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_false(held("dr-late"));
    redisFree(c);
    fr_stop(relay);
}

/* A rolling restart waits for each dlockd's exit: one that holds nothing exits at once
 * on SIGTERM, drain included. Every thread the stop joins must be woken by it, never
 * waited out: the health checks sleep half a second between checks, and the library's
 * threads (renewal, wake-ups) as long as their next due time. So the dlockd here has
 * started them all (a lock taken and UNLOCKed, a wait given up) and sits between two
 * health checks, with two idle clients still connected, when the signal comes. */
static void test_idle_exit_prompt(void **state)
{
    (void)state;
    char log[512];
    dt_log_path(log, sizeof log, "idle-exit");
    dt_next_log(log);
    dt_daemon d;
    /* The drain on, as deployed (dt_start turns it off). */
    dt_start(&d, it_srv.url, "--shutdown-timeout", "10000", NULL);
    redisContext *holder = dt_connect(&d), *waiter = dt_connect(&d);
    dt_lock l;
    dt_expect_lock(dt_cmd(holder, "LOCK dr-idle TTL 3000"), &l);
    dt_expect_nil(dt_cmd(waiter, "LOCK dr-idle WAIT 100"));
    dt_expect_int(dt_cmd(holder, "UNLOCK dr-idle %s", l.token), 1);
    dh_sleep_ms(700);
    int64_t t0 = dh_now_ms();
    kill(d.pid, SIGTERM);
    int status = wait_exit(d.pid, 1000 * dh_slack());
    d.pid = 0;
    print_message("FIG dlockd_idle_exit_ms %lld ms\n", (long long)(dh_now_ms() - t0));
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_true(dt_log_has(log, "no session lock held any more"));
    assert_false(held("dr-idle"));
    redisFree(holder);
    redisFree(waiter);
}

int main(void)
{
    /* A write to a connection dlockd closed fails with EPIPE, as in any real client. */
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lost_lock_closes_connection),
        cmocka_unit_test(test_maxhold),
        cmocka_unit_test(test_drain_waits_for_holders),
        cmocka_unit_test(test_drain_timeout_and_second_signal),
        cmocka_unit_test(test_grant_after_drain_undone),
        cmocka_unit_test(test_idle_exit_prompt),
    };
    return cmocka_run_group_tests(tests, it_srv_setup, it_srv_teardown);
}
