/*
 * test_url.c: server addresses of one host (src/url.c), against the grammar that
 * dlock_client_new's comment in dlock.h gives:
 *
 *   redis://[[user]:password@]host[:port][/db]
 *   rediss://[[user]:password@]host[:port][/db][?cacert=..&cacertdir=..&cert=..&key=..
 *            &sni=..&insecure=0|1]
 *   unix://[:password@]/path/to/socket[?db=N]
 *
 * and lists of servers (any forms; the same server named twice refused). Every refusal
 * is DLOCK_ERR_INVALID with a message naming the bad part; no accepted form may leak
 * its password into the display string used in messages. The addresses of several
 * hosts (redis-sentinel://, redis-cluster://) are in test_url_hosts.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "urltest.h"

/* got is want, or both are NULL. */
static void expect_str(const char *got, const char *want)
{
    if (want == NULL)
        assert_null(got);
    else
        assert_string_equal(got, want);
}

/* A URL the parser accepts, and what it must parse to: a TCP address (host and port),
 * or a unix socket's (path); NULL for a part the URL has not. */
typedef struct addr_want {
    const char *url, *host;
    int port;
    const char *path;
    int db;
    const char *user, *password;
} addr_want;

static void expect_addr(const addr_want *w)
{
    dlock__addr a;
    parse_ok(w->url, &a);
    assert_int_equal(a.is_unix, w->path != NULL);
    expect_str(a.host, w->host);
    if (w->host != NULL)
        assert_int_equal(a.port, w->port);
    expect_str(a.path, w->path);
    assert_int_equal(a.db, w->db);
    expect_str(a.user, w->user);
    expect_str(a.password, w->password);
    dlock__addr_clear(&a);
}

static const addr_want accepted[] = {
    /* Hosts and ports. */
    {"redis://127.0.0.1:6379", "127.0.0.1", 6379, NULL, 0, NULL, NULL},
    {"redis://localhost", "localhost", 6379, NULL, 0, NULL, NULL},
    {"redis://redis-1.example.com:7000", "redis-1.example.com", 7000, NULL, 0, NULL, NULL},
    {"redis://h:1", "h", 1, NULL, 0, NULL, NULL},
    {"redis://h:65535", "h", 65535, NULL, 0, NULL, NULL},
    {"redis://h:06379", "h", 6379, NULL, 0, NULL, NULL},
    /* Databases. */
    {"redis://h/3", "h", 6379, NULL, 3, NULL, NULL},
    {"redis://h:7000/15", "h", 7000, NULL, 15, NULL, NULL},
    {"redis://h/0", "h", 6379, NULL, 0, NULL, NULL},
    {"redis://h:7000/", "h", 7000, NULL, 0, NULL, NULL}, /* empty path: db 0 */
    /* IPv6. */
    {"redis://[::1]", "::1", 6379, NULL, 0, NULL, NULL},
    {"redis://[::1]:7000", "::1", 7000, NULL, 0, NULL, NULL},
    {"redis://[2001:db8::42]:6380/4", "2001:db8::42", 6380, NULL, 4, NULL, NULL},
    {"redis://[::ffff:127.0.0.1]", "::ffff:127.0.0.1", 6379, NULL, 0, NULL, NULL},
    {"redis://:pw@[::1]:7001", "::1", 7001, NULL, 0, NULL, "pw"},
    /* Credentials. */
    {"redis://:secret@h", "h", 6379, NULL, 0, NULL, "secret"},
    {"redis://alice:secret@h:6380/2", "h", 6380, NULL, 2, "alice", "secret"},
    /* A password may hold ':' (only the first one ends the user). */
    {"redis://:a:b@h", "h", 6379, NULL, 0, NULL, "a:b"},
    {"redis://bob:a:b@h", "h", 6379, NULL, 0, "bob", "a:b"},
    /* Percent-encoding. */
    {"redis://al%69ce:p%40ss%2Cw%3Ard@h", "h", 6379, NULL, 0, "alice", "p@ss,w:rd"},
    {"redis://:%2c%2C@h", "h", 6379, NULL, 0, NULL, ",,"}, /* either case of hex */
    {"redis://:%2F%3f%23%25@h", "h", 6379, NULL, 0, NULL, "/?#%"},
    {"redis://u%3Ax:p@h", "h", 6379, NULL, 0, "u:x", "p"}, /* ':' in a user name */
    {"redis://:%c3%a9@h", "h", 6379, NULL, 0, NULL, "\xc3\xa9"},
    /* Unix sockets. */
    {"unix:///tmp/redis.sock", NULL, 0, "/tmp/redis.sock", 0, NULL, NULL},
    {"unix:///tmp/redis.sock?db=2", NULL, 0, "/tmp/redis.sock", 2, NULL, NULL},
    {"unix://:pw@/tmp/redis.sock", NULL, 0, "/tmp/redis.sock", 0, NULL, "pw"},
    {"unix://:pw@/tmp/redis.sock?db=7", NULL, 0, "/tmp/redis.sock", 7, NULL, "pw"},
    {"unix:///var/run/redis/redis-server.sock", NULL, 0, "/var/run/redis/redis-server.sock", 0,
     NULL, NULL},
    {"unix://:a%2Cb@/tmp/redis.sock", NULL, 0, "/tmp/redis.sock", 0, NULL, "a,b"},
};

static void test_accepted(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++)
        expect_addr(&accepted[i]);
    /* The display keeps the brackets, or "::1:7000" could not be read back. */
    dlock__addr a;
    parse_ok("redis://[::1]:7000", &a);
    assert_non_null(strstr(a.display, "[::1]:7000"));
    dlock__addr_clear(&a);
}

static void test_tcp_refused(void **state)
{
    (void)state;
    parse_bad("redis://", "host");
    parse_bad("redis://:6379", "host");
    parse_bad("redis://:pw@", "host");
    parse_bad("redis:///0", "host");
    parse_bad("redis://alice@h", "ambiguous"); /* bare user@ */
    parse_bad("redis://@h", "password");
    parse_bad("redis://alice:@h", "password");
    parse_bad("redis://h:0", "port");
    parse_bad("redis://h:65536", "port");
    parse_bad("redis://h:-1", "port");
    parse_bad("redis://h:abc", "port");
    parse_bad("redis://h:", "port");
    parse_bad("redis://h:99999999999", "port");
    parse_bad("redis://h:+80", "port");
    parse_bad("redis://h:80x", "port");
    parse_bad("redis://h/-1", "database");
    parse_bad("redis://h/x", "database");
    parse_bad("redis://h/1.5", "database");
    parse_bad("redis://h/2147483648", "database");
    parse_bad("redis://h/0/", "database");
    parse_bad("redis://h/?db=1", "database");
    parse_bad("redis://h%41", "host");
    parse_bad("redis://h ost", "host");
    parse_bad("redis://[::1", "]");
    parse_bad("redis://[::1]x", "IPv6");
    parse_bad("redis://[::1]:", "port");
    parse_bad("redis://[::g]", "IPv6");
    parse_bad("redis://[]", "host");
    parse_bad("redis://:p%zz@h", "percent");
    parse_bad("redis://:p%2@h", "percent");
    parse_bad("redis://:p%@h", "percent");
    parse_bad("redis://:%00@h", "percent"); /* a NUL cannot be in a C string */
    parse_bad("redis://u%g1:p@h", "percent");
}

static void test_schemes(void **state)
{
    (void)state;
    parse_bad("http://h", "scheme");
    parse_bad("h:6379", "scheme");
    parse_bad("redis:/h", "scheme");
    parse_bad("", "scheme");
    parse_bad(" redis://h", "scheme");
}

static void test_tls(void **state)
{
    (void)state;
    dlock__addr a;
    parse_ok("rediss://h:6380", &a);
    assert_true(a.tls);
    assert_int_equal(a.port, 6380);
    assert_int_equal(a.insecure, -1);
    assert_null(a.cacert);
    expect_str(a.display, "rediss://h:6380");
    dlock__addr_clear(&a);
    parse_ok("redis://h", &a);
    assert_false(a.tls);
    dlock__addr_clear(&a);
    parse_ok("rediss://u:p%40ss@h/3?cacert=/etc/ca.pem&cacertdir=/etc/ca&cert=/c%26d.pem"
             "&key=/k.pem&sni=srv.example&insecure=1",
             &a);
    expect_str(a.user, "u");
    expect_str(a.password, "p@ss");
    assert_int_equal(a.db, 3);
    expect_str(a.cacert, "/etc/ca.pem");
    expect_str(a.cacertdir, "/etc/ca");
    expect_str(a.cert, "/c&d.pem");
    expect_str(a.key, "/k.pem");
    expect_str(a.sni, "srv.example");
    assert_int_equal(a.insecure, 1);
    expect_str(a.display, "rediss://u@h:6379/3");
    dlock__addr_clear(&a);
    parse_ok("rediss://[::1]:7000?insecure=0", &a);
    expect_str(a.host, "::1");
    assert_int_equal(a.insecure, 0);
    dlock__addr_clear(&a);

    parse_bad("rediss://h?", "empty parameter list");
    parse_bad("rediss://h?cacert=/a&&sni=x", "empty parameter between");
    parse_bad("rediss://h?verify=1", "unknown parameter \"verify\"");
    parse_bad("rediss://h?cacert", "empty value");
    parse_bad("rediss://h?cacert=/a&cacert=/b", "given twice");
    parse_bad("rediss://h?insecure=2", "insecure=");
    parse_bad("rediss://h?insecure=1&insecure=1", "given twice");
    parse_bad("rediss://h?cert=/c.pem", "cert= given without key=");
    parse_bad("rediss://h?key=/k.pem", "key= given without cert=");
    parse_bad("rediss://h?sni=%zz", "percent-encoding");
    parse_bad("redis://h?cacert=/a", "rediss://");
    parse_bad("rediss://h:x?sni=a", "port");
}

static void test_unix(void **state)
{
    (void)state;
    parse_bad("unix://", "path");
    parse_bad("unix://tmp/redis.sock", "absolute");
    parse_bad("unix:///tmp/s?db=x", "db");
    parse_bad("unix:///tmp/s?db=-1", "db");
    parse_bad("unix:///tmp/s?db=", "db");
    parse_bad("unix:///tmp/s?foo=1", "db=N");
    parse_bad("unix://:pw/tmp/s", "password");

    /* sun_path holds 108 bytes with the NUL: 107 characters is the longest path. */
    char url[256], path[200];
    memset(path, 'a', sizeof path);
    path[0] = '/';
    path[107] = '\0';
    snprintf(url, sizeof url, "unix://%s", path);
    expect_addr(&(addr_want){.url = url, .path = path});
    path[107] = 'a';
    path[108] = '\0';
    snprintf(url, sizeof url, "unix://%s", path);
    parse_bad(url, "longer");
}

/* The parser reads len bytes, not up to the NUL: url_parse_list hands it pieces. */
static void test_length_bounded(void **state)
{
    (void)state;
    const char *s = "redis://h:1,redis://other:2";
    dlock__addr a;
    dlock__err e;
    assert_int_equal(dlock__url_parse(s, strlen("redis://h:1"), &a, &e), DLOCK_OK);
    assert_string_equal(a.host, "h");
    assert_int_equal(a.port, 1);
    dlock__addr_clear(&a);
    assert_int_equal(dlock__url_parse(s, strlen("redis://h"), &a, &e), DLOCK_OK);
    assert_int_equal(a.port, 6379);
    dlock__addr_clear(&a);
    assert_int_equal(dlock__url_parse(s, strlen("redis://h:"), &a, &e), DLOCK_ERR_INVALID);
}

static void test_display(void **state)
{
    (void)state;
    dlock__addr a;
    parse_ok("redis://alice:hunter2@h:7000/3", &a);
    assert_null(strstr(a.display, "hunter2"));
    assert_non_null(strstr(a.display, "h"));
    assert_non_null(strstr(a.display, "7000"));
    dlock__addr_clear(&a);
    parse_ok("unix://:hunter2@/tmp/r.sock?db=1", &a);
    assert_null(strstr(a.display, "hunter2"));
    assert_non_null(strstr(a.display, "/tmp/r.sock"));
    dlock__addr_clear(&a);
}

/* No part of a password is ever echoed, however malformed the URL around it: each
 * URL below holds the password "Zq/9x@w" in some broken form (raw, with its '/', or
 * cut by other mistakes), and no refusal may show "Zq", "9x" or "w@". A '/' in a
 * password is named as the likely mistake. */
static void test_password_never_echoed(void **state)
{
    (void)state;
    static const char *const urls[] = {
        "redis://:Zq/9x@w@127.0.0.1:6379",
        "redis://u:Zq/9x@w@127.0.0.1:6379/0",
        "redis://:Zq/9x@w@h:99999",
        "redis://:Zq/9x@w@[::1:6379",
        "redis://:Zq/9x@w@",
        "redis://:Zq/9x@w@h:1/db",
        "redis://:Zq/9x@w@h:1?x=1",
        "rediss://:Zq/9x@w@h:1?cacert=/none",
        "unix://:Zq/9x@w@relative",
        "redis://:Zq%2/9x@w@h:1",
        "redis://u:Zq/9x@w@h:1/2/3",
        "redis://:Zq/9x@w@h:0",
        "rediss://u:Zq/9x@w@h:1?insecure=2",
        "redis://Zq/9x@w@h:1",
    };
    for (size_t i = 0; i < sizeof urls / sizeof *urls; i++) {
        dlock__addr a;
        dlock__err e = {""};
        int rc = dlock__url_parse(urls[i], strlen(urls[i]), &a, &e);
        if (rc == DLOCK_OK) {
            dlock__addr_clear(&a);
            continue;
        }
        if (strstr(e.msg, "Zq") || strstr(e.msg, "9x") || strstr(e.msg, "w@"))
            fail_msg("\"%s\": the message shows the password: %s", urls[i], e.msg);
    }
    dlock__err e = {""};
    dlock__addr a;
    assert_int_equal(dlock__url_parse(urls[1], strlen(urls[1]), &a, &e), DLOCK_ERR_INVALID);
    assert_non_null(strstr(e.msg, "%2F"));
}

static void test_addr_clear(void **state)
{
    (void)state;
    dlock__addr a;
    parse_ok("redis://alice:pw@h:7000/3", &a);
    dlock__addr_clear(&a);
    assert_null(a.host);
    assert_null(a.user);
    assert_null(a.password);
    assert_null(a.display);
    dlock__addr_clear(&a); /* twice is harmless */
    dlock__addr_clear(NULL);
}

static void test_list(void **state)
{
    (void)state;
    dlock__addr *addrs =
        list_ok("redis://a:1,redis://b:2,unix:///tmp/c.sock", DLOCK_SERVERS_MAX, 3);
    assert_string_equal(addrs[0].host, "a");
    assert_int_equal(addrs[0].port, 1);
    assert_string_equal(addrs[1].host, "b");
    assert_int_equal(addrs[1].port, 2);
    assert_true(addrs[2].is_unix);
    assert_string_equal(addrs[2].path, "/tmp/c.sock");
    list_free(addrs, 3);

    /* One server; spaces around the commas, as people write lists. */
    list_free(list_ok("redis://a:1", 1, 1), 1);
    addrs = list_ok("redis://a:1, redis://b:2", 4, 2);
    assert_string_equal(addrs[1].host, "b");
    list_free(addrs, 2);

    /* %2C is a comma inside a password, not a separator. */
    addrs = list_ok("redis://:a%2Cb@h1,redis://h2", 4, 2);
    assert_string_equal(addrs[0].password, "a,b");
    assert_string_equal(addrs[1].host, "h2");
    list_free(addrs, 2);
}

static void list_bad(const char *list, int max, const char *why)
{
    dlock__addr *addrs = (dlock__addr *)&addrs; /* garbage that must be replaced */
    int n = -1;
    dlock__err e = {""};
    int rc = dlock__url_parse_list(list, max, &addrs, &n, &e);
    if (rc != DLOCK_ERR_INVALID)
        fail_msg("\"%s\": %s, want DLOCK_ERR_INVALID", list, dlock_errname(rc));
    assert_null(addrs);
    assert_int_equal(n, 0);
    if (strstr(e.msg, why) == NULL)
        fail_msg("\"%s\": message \"%s\" lacks \"%s\"", list, e.msg, why);
}

static void test_list_refused(void **state)
{
    (void)state;
    list_bad("", 4, "empty");
    list_bad(",", 4, "empty");
    list_bad("redis://a,", 4, "server 2 of 2");
    list_bad("redis://a,,redis://b", 4, "server 2 of 3");
    list_bad("redis://a,redis://b:0,redis://c", 4, "server 2 of 3: port");
    list_bad("redis://a,rediss://b?x=1", 4, "server 2 of 2: unknown parameter");
    list_bad("redis://a,redis://b,redis://c", 2, "at most 2");
}

/* One server twice would vote twice: a list that names it twice is refused (why: what
 * the message says), whatever else differs; a list of other servers is accepted (n of
 * them). */
static void test_list_same_server(void **state)
{
    (void)state;
    static const struct {
        const char *list;
        const char *why;
        int n;
    } cases[] = {
        {"redis://a,redis://b,redis://a", "servers 1 and 3 are the same server", 0},
        {"redis://:pw@a:7000/1,redis://A:7000/2", "servers 1 and 2 are the same", 0},
        {"redis://a:6379,rediss://a", "the same server", 0},
        {"unix:///s.sock,unix://:pw@/s.sock?db=1", "the same server", 0},
        /* Another port, path or host is another server. */
        {"redis://a:1,redis://a:2,redis://b:1,unix:///x", NULL, 4},
        /* The same master through a shared Sentinel is one server; other masters, or the
         * same name at other Sentinels, are not. */
        {"redis-sentinel://s1,s2/a,redis-sentinel://s3,s2/a", "the same server", 0},
        {"redis-sentinel://s1/a,redis-sentinel://s1/b,redis-sentinel://s2/a", NULL, 3},
        /* A seed in common is one cluster, named twice; a plain URL to a seed is another
         * server (it would be refused by the doctor, not here). */
        {"redis-cluster://n1,n2,redis-cluster://n3,N2", "the same server", 0},
        {"redis-cluster://n1:7000,redis://n1:7000", NULL, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].why != NULL)
            list_bad(cases[i].list, 4, cases[i].why);
        else
            list_free(list_ok(cases[i].list, 4, cases[i].n), cases[i].n);
    }
}

static void test_list_max(void **state)
{
    (void)state;
    /* DLOCK_SERVERS_MAX servers are accepted, one more is refused. */
    char list[64 * (DLOCK_SERVERS_MAX + 1)];
    size_t len = 0;
    for (int i = 0; i < DLOCK_SERVERS_MAX; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%sredis://h%d:%d", i ? "," : "", i,
                                7000 + i);
    dlock__addr *addrs = NULL;
    int n = 0;
    dlock__err e = {""};
    assert_int_equal(dlock__url_parse_list(list, DLOCK_SERVERS_MAX, &addrs, &n, &e), DLOCK_OK);
    assert_int_equal(n, DLOCK_SERVERS_MAX);
    assert_int_equal(addrs[DLOCK_SERVERS_MAX - 1].port, 7000 + DLOCK_SERVERS_MAX - 1);
    for (int i = 0; i < n; i++)
        dlock__addr_clear(&addrs[i]);
    free(addrs);
    snprintf(list + len, sizeof list - len, ",redis://one-more");
    list_bad(list, DLOCK_SERVERS_MAX, "at most");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* One address. */
        cmocka_unit_test(test_accepted),
        cmocka_unit_test(test_tcp_refused),
        cmocka_unit_test(test_schemes),
        cmocka_unit_test(test_tls),
        cmocka_unit_test(test_unix),
        cmocka_unit_test(test_length_bounded),
        cmocka_unit_test(test_display),
        cmocka_unit_test(test_password_never_echoed),
        cmocka_unit_test(test_addr_clear),
        /* Lists of servers. */
        cmocka_unit_test(test_list),
        cmocka_unit_test(test_list_refused),
        cmocka_unit_test(test_list_same_server),
        cmocka_unit_test(test_list_max),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
