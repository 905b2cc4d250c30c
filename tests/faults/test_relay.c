/*
 * test_relay.c: the fault relay itself (relay.h), driven by a plain hiredis client, so
 * that the scenarios built on it can trust what it does: pass-through, per-reply
 * rules that hit exactly the command they name (instead of it, or after it ran),
 * delay, hold, blackhole, reset, refusal, trickle, close after k bytes, the counters,
 * and a clean stop (no descriptor left).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"
#include "relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static dh_server g_srv;
static fr_relay *g_relay;

static int setup(void **state)
{
    (void)state;
    assert_int_equal(dh_server_start(&g_srv, NULL), 0);
    g_relay = fr_start(g_srv.port);
    assert_non_null(g_relay);
    return 0;
}

/* Every test starts from a relay without faults. */
static int clean(void **state)
{
    (void)state;
    fr_pass(g_relay);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fr_stop(g_relay);
    g_relay = NULL;
    dh_server_stop(&g_srv);
    return 0;
}

/* A hiredis connection through the relay, with a timeout of ms on every call. */
static redisContext *through(int64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (long)(ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", fr_port(g_relay), tv);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    redisSetTimeout(c, tv);
    return c;
}

/* Run one command and return its reply (NULL on an I/O error). */
static redisReply *cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    return r;
}

/* A PING that must be answered; the time the answer took, in ms. */
static int64_t ping(redisContext *c)
{
    int64_t t0 = dh_now_ms();
    redisReply *r = cmd(c, "PING");
    int64_t took = dh_now_ms() - t0;
    assert_non_null(r);
    freeReplyObject(r);
    return took;
}

static long long counter(const char *key)
{
    redisReply *r = dh_cmd(&g_srv, "GET %s", key);
    assert_non_null(r);
    long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    return v;
}

static void test_pass_through_and_counters(void **state)
{
    (void)state;
    redisContext *c = through(2000);
    redisReply *r = cmd(c, "SET k %s", "v");
    assert_non_null(r);
    assert_string_equal(r->str, "OK");
    freeReplyObject(r);
    r = cmd(c, "GET k");
    assert_non_null(r);
    assert_string_equal(r->str, "v");
    freeReplyObject(r);
    fr_stats st;
    fr_get_stats(g_relay, &st);
    assert_int_equal(st.accepted, 1);
    assert_int_equal(st.open, 1);
    assert_int_equal(st.commands, 2);
    assert_int_equal(st.replies, 2);
    assert_true(st.up_bytes > 0 && st.down_bytes > 0);
    redisFree(c);
}

/* Three pipelined INCRs; the rule hits only the second. Instead: the server never ran
 * it. After: it ran, and its reply was replaced. */
static void rule_hits_one_reply(enum fr_action how, long long expect_count)
{
    it_del(&g_srv, "n");
    redisContext *c = through(2000);
    fr_replace(g_relay, FR_LOADING, how, 1, "incr");
    redisAppendCommand(c, "SET n 0");
    for (int i = 0; i < 3; i++)
        redisAppendCommand(c, "INCR n");
    void *v;
    assert_int_equal(redisGetReply(c, &v), REDIS_OK); /* SET */
    freeReplyObject(v);
    redisReply *r[3];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(redisGetReply(c, &v), REDIS_OK);
        r[i] = v;
    }
    assert_int_equal(r[0]->type, REDIS_REPLY_ERROR);
    assert_non_null(strstr(r[0]->str, "LOADING"));
    assert_int_equal(r[1]->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r[2]->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r[2]->integer, expect_count);
    for (int i = 0; i < 3; i++)
        freeReplyObject(r[i]);
    assert_int_equal(counter("n"), expect_count);
    fr_stats st;
    fr_get_stats(g_relay, &st);
    assert_int_equal(st.injected, how == FR_REPLACE_INSTEAD ? 1 : 2);
    redisFree(c);
}

static void test_rules_instead_and_after(void **state)
{
    (void)state;
    rule_hits_one_reply(FR_REPLACE_INSTEAD, 2);
    rule_hits_one_reply(FR_REPLACE_AFTER, 3);
    fr_pass(g_relay);
}

/* A raw socket to the relay (hiredis's own reader must not meet the huge replies:
 * it would calloc 16 GiB for one of them). */
static int raw_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fr_port(g_relay))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    struct timeval tv = {.tv_sec = 2};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* Every canned reply arrives exactly as the table writes it, in place of the reply to
 * the command it was meant for. */
static void test_canned_bytes(void **state)
{
    (void)state;
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    fr_stats st0;
    fr_get_stats(g_relay, &st0);
    for (int k = 0; k < FR_CANNED_COUNT; k++) {
        int fd = raw_connect();
        fr_replace(g_relay, (fr_canned)k, k % 2 ? FR_REPLACE_AFTER : FR_REPLACE_INSTEAD, 1, "PING");
        assert_int_equal(send(fd, ping, sizeof ping - 1, MSG_NOSIGNAL), (ssize_t)(sizeof ping - 1));
        size_t len;
        const char *bytes = fr_canned_bytes((fr_canned)k, &len);
        char buf[256];
        size_t got = 0;
        while (got < len) {
            ssize_t n = recv(fd, buf + got, len - got, 0);
            assert_true(n > 0);
            got += (size_t)n;
        }
        assert_memory_equal(buf, bytes, len);
        if (k == FR_HUGE_BULK) {
            /* The stream follows. */
            assert_int_equal(recv(fd, buf, sizeof buf, MSG_WAITALL), (ssize_t)sizeof buf);
        } else {
            /* Nothing else: the real reply was dropped (or never asked for); after
             * HTTP's answer the connection closes. */
            struct timeval tv = {.tv_usec = 100000};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            ssize_t n = recv(fd, buf, sizeof buf, 0);
            assert_int_equal(n, k == FR_HTTP ? 0 : -1);
        }
        close(fd);
        fr_clear_rules(g_relay);
    }
    fr_stats st;
    fr_get_stats(g_relay, &st);
    assert_int_equal(st.injected - st0.injected, FR_CANNED_COUNT);
}

/* SET key with one direction held (FR_DOWN: the replies, FR_UP: the requests): whether
 * the server has run it 100 ms later, before the release. Its reply comes after. */
static bool ran_while_held(redisContext *c, int dir, const char *key)
{
    fr_hold(g_relay, dir);
    redisAppendCommand(c, "SET %s 1", key);
    assert_int_equal(redisBufferWrite(c, &(int){0}), REDIS_OK);
    dh_sleep_ms(100);
    bool ran = it_exists(&g_srv, key) == 1;
    fr_release(g_relay);
    void *v;
    assert_int_equal(redisGetReply(c, &v), REDIS_OK);
    freeReplyObject(v);
    return ran;
}

static void test_delay_and_hold(void **state)
{
    (void)state;
    redisContext *c = through(3000);
    fr_delay(g_relay, 50, 50);
    int64_t took = ping(c);
    printf("FIG relay_delay_50_each_way_rtt_ms %lld ms\n", (long long)took);
    assert_true(took >= 100);
    fr_delay(g_relay, 0, 0);

    /* Held replies: the command runs at once, the reply waits for the release. */
    assert_true(ran_while_held(c, FR_DOWN, "held"));
    /* Held requests: nothing reaches the server until the release. */
    assert_false(ran_while_held(c, FR_UP, "held2"));
    assert_int_equal(it_exists(&g_srv, "held2"), 1);
    redisFree(c);
}

/* SET key on a new connection with a rule that resets it (FR_RESET_REQUEST or
 * FR_RESET_REPLY): no reply comes; whether the server ran it. */
static bool ran_before_reset(enum fr_action how, const char *key)
{
    fr_rule ru = {.action = how, .count = 1, .cmd = "SET"};
    fr_add_rule(g_relay, &ru);
    redisContext *c = through(1000);
    assert_null(cmd(c, "SET %s 1", key));
    redisFree(c);
    return it_exists(&g_srv, key) == 1;
}

static void test_blackhole_reset_refuse(void **state)
{
    (void)state;
    redisContext *c = through(300);
    fr_blackhole(g_relay, true, FR_HEAL_RESET);
    assert_null(cmd(c, "SET bh 1")); /* timed out */
    assert_int_equal(it_exists(&g_srv, "bh"), 0);
    /* A connection made during the blackhole is accepted and never answered. */
    redisContext *c2 = through(300);
    assert_null(cmd(c2, "PING"));
    fr_blackhole(g_relay, false, FR_HEAL_RESET);
    fr_stats st;
    fr_get_stats(g_relay, &st);
    assert_true(st.dropped_bytes > 0);
    assert_int_equal(st.open, 0); /* both lost bytes: reset on healing */
    redisFree(c);
    redisFree(c2);

    /* Healed: new connections work. A reset ends the open ones with ECONNRESET. */
    c = through(1000);
    ping(c);
    fr_reset_now(g_relay);
    assert_null(cmd(c, "PING"));
    printf("INFO after reset: %s\n", c->errstr);
    redisFree(c);

    /* Refusal: accepted, then reset at once (hiredis may see it while connecting). */
    fr_refuse(g_relay, true);
    struct timeval tv = {.tv_sec = 1};
    c = redisConnectWithTimeout("127.0.0.1", fr_port(g_relay), tv);
    assert_non_null(c);
    if (c->err == 0) {
        redisSetTimeout(c, tv);
        assert_null(cmd(c, "PING"));
    }
    printf("INFO refused: %s\n", c->errstr);
    redisFree(c);
    fr_refuse(g_relay, false);
    c = through(1000);
    ping(c);
    redisFree(c);

    /* Reset on a request (never forwarded) or instead of a reply (the command ran). */
    assert_false(ran_before_reset(FR_RESET_REQUEST, "rq"));
    assert_true(ran_before_reset(FR_RESET_REPLY, "rp"));
    fr_pass(g_relay);
}

static void test_trickle_and_close_after(void **state)
{
    (void)state;
    redisContext *c = through(3000);
    fr_trickle(g_relay, 100);
    int64_t took = ping(c); /* "+PONG\r\n": 7 bytes */
    printf("FIG relay_trickle_7_bytes_ms %lld ms\n", (long long)took);
    assert_true(took >= 550);
    fr_trickle(g_relay, 0);

    /* Close after 3 bytes of the GET's reply: "$5\r" arrives, then EOF. */
    fr_rule ru = {.action = FR_CLOSE_AFTER, .k = 3, .count = 1, .cmd = "GET"};
    fr_add_rule(g_relay, &ru);
    freeReplyObject(cmd(c, "SET ca hello"));
    assert_null(cmd(c, "GET ca"));
    assert_int_equal(c->err, REDIS_ERR_EOF);
    redisFree(c);
    fr_pass(g_relay);
}

/* Stopping closes everything: the descriptors come back to what they were. */
static void test_stop_is_clean(void **state)
{
    (void)state;
    fr_stop(g_relay);
    int before = dh_fd_count();
    g_relay = fr_start(g_srv.port);
    assert_non_null(g_relay);
    redisContext *cs[5];
    for (int i = 0; i < 5; i++) {
        cs[i] = through(1000);
        ping(cs[i]);
    }
    assert_int_equal(fr_fds(g_relay), 2 + 2 * 5);
    fr_hold(g_relay, FR_DOWN | FR_UP);
    for (int i = 0; i < 5; i++)
        redisAppendCommand(cs[i], "PING");
    fr_stop(g_relay);
    for (int i = 0; i < 5; i++)
        redisFree(cs[i]);
    assert_int_equal(dh_fd_count(), before);
    g_relay = fr_start(g_srv.port);
    assert_non_null(g_relay);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_pass_through_and_counters, clean),
        cmocka_unit_test_setup(test_rules_instead_and_after, clean),
        cmocka_unit_test_setup(test_canned_bytes, clean),
        cmocka_unit_test_setup(test_delay_and_hold, clean),
        cmocka_unit_test_setup(test_blackhole_reset_refuse, clean),
        cmocka_unit_test_setup(test_trickle_and_close_after, clean),
        cmocka_unit_test_setup(test_stop_is_clean, clean),
    };
    return cmocka_run_group_tests_name("relay", tests, setup, teardown);
}
