/*
 * test_dlockd_admin: dlockd for operators. Who holds a lock (LOCKINFO's holder: the
 * client's LABEL or name, its address, the dlockd's host and pid; over TCP, the unix
 * socket, for every holder of a semaphore), who its clients are (CLIENT LIST's fields,
 * locks= and waiting=), CLIENT KILL by the user admin (the victim's session locks
 * released, a waiter served) and refused to anyone else, AUTH admin, CLIENT KILL's
 * bad arguments, LOCKS, and BREAK by the user admin alone. Real dlockd processes in front of a real
 * redis-server; hiredis clients.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define ADMIN_PASS "adm1n pass"

/* The group's dlockd: the user admin, and a unix socket. */
static dt_daemon adm;
static char sock_path[256];

static int setup(void **state)
{
    if (it_srv_setup(state) != 0)
        return -1;
    char pass[256];
    dt_write_pass(pass, sizeof pass, "admin", ADMIN_PASS);
    const char *tmp = getenv("DLOCK_TEST_TMP");
    snprintf(sock_path, sizeof sock_path, "%s/dlockd-%d-admin.sock", tmp != NULL ? tmp : "/tmp",
             (int)getpid());
    dt_start(&adm, it_srv.url, "--admin-pass-file", pass, "--unixsocket", sock_path, NULL);
    unlink(pass);
    return 0;
}

static int teardown(void **state)
{
    assert_int_equal(dt_stop(&adm), 0);
    return it_srv_teardown(state);
}

/* What a lock of a client at addr shows as its holder: "[who ]addr via dlockd HOST:PID",
 * the pid adm's. */
static void expected_holder(char *buf, size_t len, const char *who, const char *addr)
{
    char host[256];
    assert_int_equal(gethostname(host, sizeof host), 0);
    host[sizeof host - 1] = '\0';
    snprintf(buf, len, "%s%s%s via dlockd %s:%d", who != NULL ? who : "", who != NULL ? " " : "",
             addr, host, (int)adm.pid);
}

/* The client's own end of c, "127.0.0.1:PORT", as dlockd sees its peer. */
static void local_addr(redisContext *c, char *buf, size_t len)
{
    struct sockaddr_in sa;
    socklen_t n = sizeof sa;
    assert_int_equal(getsockname(c->fd, (struct sockaddr *)&sa, &n), 0);
    snprintf(buf, len, "127.0.0.1:%d", ntohs(sa.sin_port));
}

/* LOCKINFO's reply for name (freed by the caller) and its holder element. */
static redisReply *lockinfo(redisContext *c, const char *name, redisReply **holder)
{
    redisReply *r = dt_cmd(c, "LOCKINFO %s", name);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_true(r->elements >= 8);
    assert_string_equal(r->element[2]->str, "holder");
    *holder = r->element[3];
    return r;
}

static void expect_holder(redisContext *c, const char *name, const char *want)
{
    redisReply *h, *r = lockinfo(c, name, &h);
    if (h->type != REDIS_REPLY_STRING || strcmp(h->str, want) != 0)
        fail_msg("LOCKINFO %s: holder '%s', want '%s'", name, h->str != NULL ? h->str : "(nil)",
                 want);
    freeReplyObject(r);
}

static void test_holder(void **state)
{
    (void)state;
    char addr[64], want[512];
    /* A name set with CLIENT SETNAME. */
    redisContext *a = dt_connect(&adm);
    local_addr(a, addr, sizeof addr);
    dt_expect_status(dt_cmd(a, "CLIENT SETNAME worker-7"), "OK");
    dt_lock l;
    dt_expect_lock(dt_cmd(a, "LOCK adm:named TTL 10000"), &l);
    expected_holder(want, sizeof want, "worker-7", addr);
    expect_holder(a, "adm:named", want);
    /* A LABEL comes before the name. */
    dt_expect_lock(dt_cmd(a, "LOCK adm:labeled LABEL %s", "nightly job"), &l);
    expected_holder(want, sizeof want, "nightly job", addr);
    expect_holder(a, "adm:labeled", want);
    /* A label too long to fit with the rest is cut; the address and dlockd stay. */
    char label[257];
    memset(label, 'x', 256);
    label[256] = '\0';
    dt_expect_lock(dt_cmd(a, "LOCK adm:long LABEL %s", label), &l);
    redisReply *h, *r = lockinfo(a, "adm:long", &h);
    expected_holder(want, sizeof want, NULL, addr);
    assert_true(h->len <= 256 && h->len > strlen(want) + 1);
    assert_string_equal(h->str + h->len - strlen(want), want);
    assert_int_equal(h->str[0], 'x');
    freeReplyObject(r);
    redisFree(a);

    /* Neither: the address and the dlockd. A DETACHED lock keeps it after its
     * connection is gone. */
    redisContext *b = dt_connect(&adm);
    local_addr(b, addr, sizeof addr);
    dt_expect_lock(dt_cmd(b, "LOCK adm:anon TTL 10000 DETACHED"), &l);
    redisFree(b);
    b = dt_connect(&adm);
    expected_holder(want, sizeof want, NULL, addr);
    expect_holder(b, "adm:anon", want);
    dt_expect_int(dt_cmd(b, "UNLOCK adm:anon %s", l.token), 1);

    /* Over the unix socket: "unix". */
    redisContext *u = redisConnectUnix(sock_path);
    assert_true(u != NULL && u->err == 0);
    dt_expect_lock(dt_cmd(u, "LOCK adm:unix"), &l);
    expected_holder(want, sizeof want, NULL, "unix");
    expect_holder(b, "adm:unix", want);

    /* A semaphore's holders, every one. */
    redisContext *s1 = dt_connect(&adm);
    char addr1[64], want1[512], want2[512];
    local_addr(s1, addr1, sizeof addr1);
    dt_expect_status(dt_cmd(s1, "CLIENT SETNAME sem-one"), "OK");
    dt_expect_lock(dt_cmd(s1, "SEM ACQUIRE adm:sem 3"), &l);
    dt_expect_lock(dt_cmd(u, "SEM ACQUIRE adm:sem 3 LABEL %s", "resizer"), &l);
    expected_holder(want1, sizeof want1, "sem-one", addr1);
    expected_holder(want2, sizeof want2, "resizer", "unix");
    r = lockinfo(b, "adm:sem", &h);
    assert_int_equal(h->type, REDIS_REPLY_ARRAY);
    assert_int_equal(h->elements, 2);
    bool seen1 = false, seen2 = false;
    for (size_t i = 0; i < h->elements; i++) {
        seen1 |= strcmp(h->element[i]->str, want1) == 0;
        seen2 |= strcmp(h->element[i]->str, want2) == 0;
    }
    if (!seen1 || !seen2)
        fail_msg("semaphore holders '%s', '%s'; want '%s' and '%s'", h->element[0]->str,
                 h->element[1]->str, want1, want2);
    assert_string_equal(r->element[8]->str, "shared");
    assert_int_equal(r->element[9]->integer, 2);
    freeReplyObject(r);
    redisFree(s1);
    redisFree(u);
    redisFree(b);
}

/* The CLIENT LIST line of the client named name (" name=NAME "), into line; false when
 * there is none. */
static bool list_line(redisContext *c, const char *name, char *line, size_t len)
{
    redisReply *r = dt_cmd(c, "CLIENT LIST");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    char needle[128];
    snprintf(needle, sizeof needle, " name=%s ", name);
    const char *p = strstr(r->str, needle);
    bool found = p != NULL;
    if (found) {
        while (p > r->str && p[-1] != '\n')
            p--;
        size_t n = strcspn(p, "\n");
        assert_int_equal(p[n], '\n');
        snprintf(line, len, "%.*s", (int)n, p);
    }
    freeReplyObject(r);
    return found;
}

/* A field's value in a CLIENT LIST line ("" when absent). Static storage. */
static const char *field(const char *line, const char *key)
{
    static char v[256];
    char spaced[1100], k[64];
    snprintf(spaced, sizeof spaced, " %s", line);
    snprintf(k, sizeof k, " %s=", key);
    const char *p = strstr(spaced, k);
    v[0] = '\0';
    if (p != NULL)
        snprintf(v, sizeof v, "%.*s", (int)strcspn(p + strlen(k), " "), p + strlen(k));
    return v;
}

static long long client_id(redisContext *c)
{
    redisReply *r = dt_cmd(c, "CLIENT ID");
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long id = r->integer;
    freeReplyObject(r);
    return id;
}

static redisContext *admin_connect(const dt_daemon *d)
{
    redisContext *c = dt_connect(d);
    dt_expect_status(dt_cmd(c, "AUTH admin %s", ADMIN_PASS), "OK");
    return c;
}

static void test_list_and_kill(void **state)
{
    (void)state;
    redisContext *h = dt_connect(&adm), *w = dt_connect(&adm), *o = dt_connect(&adm);
    dt_expect_status(dt_cmd(h, "CLIENT SETNAME list-holder"), "OK");
    dt_expect_status(dt_cmd(w, "CLIENT SETNAME list-waiter"), "OK");
    dt_lock a, b;
    dt_expect_lock(dt_cmd(h, "LOCK adm:list-a TTL 30000"), &a);
    dt_expect_lock(dt_cmd(h, "LOCK adm:list-b TTL 30000"), &b);
    long long hid = client_id(h);
    dt_send(w, "LOCK adm:list-a TTL 30000 WAIT %lld", (long long)(60000 * dh_slack()));

    /* The waiter shows as waiting once its LOCK is parked. */
    char line[1024] = "";
    int64_t t0 = dh_now_ms();
    while (!list_line(o, "list-waiter", line, sizeof line) ||
           strcmp(field(line, "waiting"), "1") != 0) {
        if (dh_now_ms() - t0 > 10000 * dh_slack())
            fail_msg("CLIENT LIST never showed the waiter waiting: '%s'", line);
        dh_sleep_ms(10);
    }
    assert_string_equal(field(line, "locks"), "0");
    assert_string_equal(field(line, "flags"), "b");
    assert_true(list_line(o, "list-holder", line, sizeof line));
    char id[32], addr[64], laddr[64];
    snprintf(id, sizeof id, "%lld", hid);
    local_addr(h, addr, sizeof addr);
    snprintf(laddr, sizeof laddr, "127.0.0.1:%d", adm.port);
    assert_string_equal(field(line, "id"), id);
    assert_string_equal(field(line, "addr"), addr);
    assert_string_equal(field(line, "laddr"), laddr);
    assert_true(atoi(field(line, "fd")) > 0);
    assert_true(atoi(field(line, "age")) >= 0 && field(line, "age")[0] != '\0');
    assert_true(field(line, "idle")[0] != '\0');
    assert_string_equal(field(line, "flags"), "N");
    assert_string_equal(field(line, "db"), "0");
    assert_string_equal(field(line, "user"), "default");
    assert_string_equal(field(line, "locks"), "2");
    assert_string_equal(field(line, "waiting"), "0");
    /* CLIENT INFO is one's own line; CLIENT LIST ID picks. */
    redisReply *r = dt_cmd(h, "CLIENT INFO");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_true(strncmp(r->str, "id=", 3) == 0 && strstr(r->str, " name=list-holder ") != NULL);
    freeReplyObject(r);
    r = dt_cmd(o, "CLIENT LIST ID %lld", hid);
    assert_true(r->type == REDIS_REPLY_STRING && strncmp(r->str, "id=", 3) == 0);
    assert_non_null(strstr(r->str, " name=list-holder "));
    assert_ptr_equal(strchr(r->str, '\n'), r->str + r->len - 1); /* that one alone */
    freeReplyObject(r);

    /* Not admin: refused, and the holder keeps its locks. */
    dt_expect_error(dt_cmd(o, "CLIENT KILL ID %lld", hid),
                    "NOPERM this user has no permissions to run the 'client|kill' command");
    assert_int_equal(dt_info(o, "acl_access_denied_cmd"), 1);
    /* The admin kills it: its session locks are released, the waiter served. */
    redisContext *k = admin_connect(&adm);
    assert_true(list_line(k, "list-holder", line, sizeof line));
    dt_expect_int(dt_cmd(k, "CLIENT KILL ID %lld", hid), 1);
    dt_wait_key_gone("adm:list-b", 10000 * dh_slack());
    dt_lock got;
    dt_expect_lock(dt_reply(w), &got);
    assert_true(got.fence > a.fence);
    assert_null(redisCommand(h, "PING")); /* its connection is closed */
    assert_false(list_line(k, "list-holder", line, sizeof line));
    dt_expect_int(dt_cmd(k, "CLIENT KILL ID %lld", hid), 0);
    /* One's own id is skipped, unless SKIPME no. */
    dt_expect_int(dt_cmd(k, "CLIENT KILL ID %lld", client_id(k)), 0);
    /* The old form, by address. */
    local_addr(w, addr, sizeof addr);
    dt_expect_status(dt_cmd(k, "CLIENT KILL %s", addr), "OK");
    dt_wait_key_gone("adm:list-a", 10000 * dh_slack());
    dt_expect_error(dt_cmd(k, "CLIENT KILL %s", addr), "ERR No such client");
    redisFree(k);
    redisFree(o);
    redisFree(w);
    redisFree(h);
}

static void test_admin_user(void **state)
{
    (void)state;
    /* A wrong password, and names are case-sensitive. */
    redisContext *c = dt_connect(&adm);
    long denied = dt_info(c, "acl_access_denied_auth");
    dt_expect_error(dt_cmd(c, "AUTH admin %s", "wrong"),
                    "WRONGPASS invalid username-password pair or user is disabled.");
    dt_expect_error(dt_cmd(c, "AUTH Admin %s", ADMIN_PASS), "WRONGPASS");
    assert_int_equal(dt_info(c, "acl_access_denied_auth"), denied + 2);
    dt_expect_error(dt_cmd(c, "CLIENT KILL ID 999999"), "NOPERM");
    /* HELLO 2 AUTH admin, then back to default with AUTH default. */
    redisReply *r = dt_cmd(c, "HELLO 2 AUTH admin %s", ADMIN_PASS);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    dt_expect_int(dt_cmd(c, "CLIENT KILL ID 999999"), 0);
    r = dt_cmd(c, "CLIENT INFO");
    assert_non_null(strstr(r->str, " user=admin "));
    freeReplyObject(r);
    dt_expect_status(dt_cmd(c, "AUTH default %s", "anything"), "OK");
    dt_expect_error(dt_cmd(c, "CLIENT KILL ID 999999"), "NOPERM");
    redisFree(c);

    /* Without --admin-pass-file there is no user admin. */
    dt_daemon plain;
    dt_start(&plain, it_srv.url, NULL);
    c = dt_connect(&plain);
    dt_expect_error(dt_cmd(c, "AUTH admin %s", ADMIN_PASS), "WRONGPASS");
    dt_expect_error(dt_cmd(c, "CLIENT KILL ID 1"),
                    "NOPERM this user has no permissions to run the 'client|kill' command");
    redisFree(c);
    assert_int_equal(dt_stop(&plain), 0);

    /* With --requirepass-file too, the admin is authenticated for every command. */
    char pass[256], apass[256];
    dt_write_pass(pass, sizeof pass, "admin-default", "s3cret");
    dt_write_pass(apass, sizeof apass, "admin-both", ADMIN_PASS);
    dt_daemon both;
    dt_start(&both, it_srv.url, "--requirepass-file", pass, "--admin-pass-file", apass, NULL);
    unlink(pass);
    unlink(apass);
    c = dt_connect(&both);
    dt_expect_error(dt_cmd(c, "LOCK adm:both"), "NOAUTH");
    dt_expect_error(dt_cmd(c, "AUTH admin %s", "s3cret"), "WRONGPASS");
    dt_expect_status(dt_cmd(c, "AUTH admin %s", ADMIN_PASS), "OK");
    dt_lock l;
    dt_expect_lock(dt_cmd(c, "LOCK adm:both"), &l);
    dt_expect_int(dt_cmd(c, "UNLOCK adm:both %s", l.token), 1);
    redisFree(c);
    assert_int_equal(dt_stop(&both), 0);

    /* The file is read as --requirepass-file's. */
    const char *missing[] = {getenv("DLOCKD"), "--admin-pass-file", "/nonexistent/admin.pass",
                             NULL};
    char err[512];
    assert_int_equal(dh_run(missing, NULL, NULL, 0, err, sizeof err), 64);
    assert_non_null(strstr(err, "dlockd: --admin-pass-file /nonexistent/admin.pass: "));
    dt_write_pass(apass, sizeof apass, "admin-empty", "");
    const char *empty[] = {getenv("DLOCKD"), "--admin-pass-file", apass, NULL};
    assert_int_equal(dh_run(empty, NULL, NULL, 0, err, sizeof err), 64);
    unlink(apass);
    assert_non_null(strstr(err, "empty password"));
}

static void test_hostile(void **state)
{
    (void)state;
    redisContext *c = dt_connect(&adm);
    /* Arity comes before the admin check, as with redis-server. */
    dt_expect_error(dt_cmd(c, "CLIENT KILL"),
                    "ERR wrong number of arguments for 'client|kill' command");
    dt_expect_status(dt_cmd(c, "AUTH admin %s", ADMIN_PASS), "OK");
    static const dt_refusal bad[] = {
        {"CLIENT KILL", "ERR wrong number of arguments for 'client|kill' command"},
        {"CLIENT KILL ID abc", "ERR client-id should be greater than 0"},
        {"CLIENT KILL ID -1", "ERR client-id should be greater than 0"},
        {"CLIENT KILL ID 0", "ERR client-id should be greater than 0"},
        {"CLIENT KILL ID 99999999999999999999999", "ERR client-id should be greater than 0"},
        {"CLIENT KILL ID", "ERR syntax error: CLIENT KILL ID needs a value"},
        {"CLIENT KILL ID 5 ADDR", "ERR syntax error: CLIENT KILL ADDR needs a value"},
        {"CLIENT KILL NOSUCH filter", "ERR syntax error: unknown CLIENT KILL filter"},
        {"CLIENT KILL SKIPME maybe", "ERR syntax error: unknown CLIENT KILL filter"},
        {"CLIENT KILL USER nobody", "ERR No such user 'nobody'"},
        {"CLIENT KILL 10.9.8.7:6", "ERR No such client"},
        {"CLIENT LIST ID abc", "ERR Invalid client ID"},
        {"CLIENT LIST TYPE nosuch", "ERR Unknown client type"},
        {"CLIENT LIST bogus", "ERR syntax error"},
        {"CLIENT NOSUCH", "ERR unknown subcommand"},
    };
    DT_EXPECT_REFUSALS(c, bad);
    /* Filters that match nobody kill nobody. */
    dt_expect_int(dt_cmd(c, "CLIENT KILL ADDR 10.9.8.7:6 SKIPME no"), 0);
    dt_expect_int(dt_cmd(c, "CLIENT KILL USER admin ID 999999"), 0);
    /* The admin kills itself: answered, then closed. */
    dt_expect_int(dt_cmd(c, "CLIENT KILL ID %lld SKIPME no", client_id(c)), 1);
    assert_null(redisCommand(c, "PING"));
    redisFree(c);
    /* dlockd is still there. */
    c = dt_connect(&adm);
    dt_expect_status(dt_cmd(c, "PING"), "PONG");
    redisFree(c);
}

/* A LOCKS row's field (a flat field/value array), or NULL. */
static const redisReply *row_field(const redisReply *row, const char *name)
{
    for (size_t i = 0; i + 1 < row->elements; i += 2)
        if (strcmp(row->element[i]->str, name) == 0)
            return row->element[i + 1];
    return NULL;
}

/* LOCKS lists every held name with its holders; BREAK, the user admin's alone, frees
 * one whoever holds it: the holder's UNLOCK finds it gone, a waiter is served with a
 * higher fence, and `dlock status`'s record names the admin. */
static void test_locks_and_break(void **state)
{
    (void)state;
    char addr[64], want[512];
    redisContext *v = dt_connect(&adm), *w = dt_connect(&adm), *a = dt_connect(&adm);
    local_addr(v, addr, sizeof addr);
    dt_lock l, got;
    dt_expect_lock(dt_cmd(v, "LOCK ops:stuck TTL 10000 LABEL %s", "hung job"), &l);
    dt_send(w, "LOCK ops:stuck TTL 10000 WAIT 10000");
    dt_wait_info(a, "blocked_clients", 1, 3000 * dh_slack());

    redisReply *r = dt_cmd(a, "LOCKS ops:*");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 1);
    const redisReply *row = r->element[0];
    assert_string_equal(row_field(row, "name")->str, "ops:stuck");
    assert_string_equal(row_field(row, "kind")->str, "exclusive");
    const redisReply *holders = row_field(row, "holders");
    assert_int_equal(holders->elements, 1);
    expected_holder(want, sizeof want, "hung job", addr);
    assert_string_equal(holders->element[0]->element[1]->str, want);
    assert_int_equal(row_field(row, "fence")->integer, l.fence);
    freeReplyObject(r);
    r = dt_cmd(a, "LOCKS nothing:*");
    assert_int_equal(r->elements, 0);
    freeReplyObject(r);

    dt_expect_error(dt_cmd(v, "BREAK ops:stuck"),
                    "NOPERM this user has no permissions to run the 'break' command");
    dt_expect_status(dt_cmd(a, "AUTH admin %s", ADMIN_PASS), "OK");
    r = dt_cmd(a, "BREAK ops:stuck REASON %s", "stuck since noon");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 10);
    assert_string_equal(r->element[0]->str, "holder");
    assert_memory_equal(r->element[1]->str, l.token, DLOCK_TOKEN_LEN);
    assert_non_null(strstr(r->element[1]->str, want));
    long long fence = r->element[3]->integer;
    assert_true(fence > l.fence);
    assert_non_null(strstr(r->element[7]->str, "admin "));
    assert_string_equal(r->element[9]->str, "stuck since noon");
    freeReplyObject(r);
    dt_expect_lock(dt_reply(w), &got);
    assert_true(got.fence > fence);
    /* The evicted holder is told at once: its connection ends with -LOST. */
    dt_expect_error(dt_cmd(v, "UNLOCK ops:stuck %s", l.token), "LOST session lock 'ops:stuck'");
    assert_null(redisCommand(v, "PING"));
    redisFree(v);
    dt_expect_int(dt_cmd(w, "UNLOCK ops:stuck %s", got.token), 1);
    dt_expect_nil(dt_cmd(a, "BREAK ops:stuck"));

    /* With no waiter of this dlockd to be served (which tells the holder too), the
     * evicted holder is still told at once, before its renewal (a third of its 10 s
     * lease) could find the lock gone: its next command, whatever it is, is answered
     * -LOST, its connection ends, and its other session lock is released with it. */
    redisReply *b;
    dt_lock quiet, other, freed;
    v = dt_connect(&adm);
    dt_expect_lock(dt_cmd(v, "LOCK ops:quiet TTL 10000"), &quiet);
    dt_expect_lock(dt_cmd(v, "LOCK ops:other TTL 10000"), &other);
    b = dt_cmd(a, "BREAK ops:quiet");
    assert_int_equal(b->type, REDIS_REPLY_ARRAY);
    assert_memory_equal(b->element[1]->str, quiet.token, DLOCK_TOKEN_LEN);
    freeReplyObject(b);
    dt_expect_error(dt_cmd(v, "PING"), "LOST session lock 'ops:quiet'");
    assert_null(redisCommand(v, "PING"));
    dt_expect_lock(dt_cmd(a, "LOCK ops:other TTL 10000 WAIT %lld", (long long)(2000 * dh_slack())),
                   &freed);
    assert_true(freed.fence > other.fence);
    dt_expect_int(dt_cmd(a, "UNLOCK ops:other %s", freed.token), 1);

    dt_expect_error(dt_cmd(a, "BREAK ops:stuck REASON"), "ERR syntax error");
    dt_expect_error(dt_cmd(a, "BREAK ops:stuck COLOR red"), "ERR syntax error");
    dt_expect_error(dt_cmd(a, "LOCKS a b"), "ERR syntax error");
    /* A reply its client could not take in is refused, and the client stays. */
    freeReplyObject(dh_cmd(&it_srv, "EVAL %s 0",
                           "for i = 1, 20000 do redis.call('SET', 'dlock:{big:' .. i .. '}', "
                           "string.format('%032x host:1 a holder of a long enough name', i), "
                           "'PX', 60000) end return 1"));
    dt_expect_error(dt_cmd(a, "LOCKS big:*"), "ERR LOCKS: more than ");
    dt_expect_status(dt_cmd(a, "PING"), "PONG");
    freeReplyObject(dh_cmd(&it_srv, "FLUSHALL"));
    redisFree(a);
    redisFree(w);
    redisFree(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_holder),          cmocka_unit_test(test_list_and_kill),
        cmocka_unit_test(test_admin_user),      cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_locks_and_break),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
