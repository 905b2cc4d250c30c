/*
 * test_url_hosts.c: server addresses of several hosts (src/url.c), against the grammar
 * that dlock_client_new's comment in dlock.h gives:
 *
 *   redis-sentinel://[[user]:password@]host[:port][,host[:port]...][/MASTER_NAME]
 *            [?sentinel_user=..&sentinel_password=..&db=N]   (rediss-sentinel://: TLS)
 *   redis-cluster://[[user]:password@]host[:port][,host[:port]...]
 *            (database 0 only; rediss-cluster://: TLS, with rediss://'s parameters)
 *
 * alone and in lists of servers; and the Cluster key slot of a key (CRC16, hash tags),
 * by which a call on a cluster finds its master. The forms of one host (redis://,
 * rediss://, unix://) and the rules of a list of servers are in test_url.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "urltest.h"

/* url parsed into *a (the caller clears it) as an address of several hosts: a
 * Sentinel's (sentinel) or a cluster's, over TLS or not, no single host, shown as
 * display. */
static void parse_hosts(const char *url, bool sentinel, bool tls, const char *display,
                        dlock__addr *a)
{
    parse_ok(url, a);
    assert_int_equal(a->sentinel, sentinel);
    assert_int_equal(a->cluster, !sentinel);
    assert_int_equal(a->tls, tls);
    assert_null(a->host);
    assert_string_equal(a->display, display);
}

/* a names one host, 10.0.0.1, at port. */
static void expect_one_host(const dlock__addr *a, int port)
{
    assert_int_equal(a->nhosts, 1);
    assert_string_equal(a->hosts[0].host, "10.0.0.1");
    assert_int_equal(a->hosts[0].port, port);
}

/* url parsed as parse_hosts parses it, over TLS, with the TLS parameters
 * cacert=/ca.pem and sni=redis.internal, and insecure= as given (-1: not given). */
static void expect_tls_hosts(const char *url, bool sentinel, int insecure, const char *display)
{
    dlock__addr a;
    parse_hosts(url, sentinel, true, display, &a);
    assert_string_equal(a.cacert, "/ca.pem");
    assert_string_equal(a.sni, "redis.internal");
    assert_int_equal(a.insecure, insecure);
    dlock__addr_clear(&a);
}

static void test_sentinel(void **state)
{
    (void)state;
    dlock__addr a;
    parse_hosts("redis-sentinel://10.0.0.1", true, false,
                "redis-sentinel://10.0.0.1:26379/mymaster", &a);
    expect_one_host(&a, DLOCK_SENTINEL_PORT);
    assert_string_equal(a.master_name, "mymaster"); /* redis's example configuration */
    dlock__addr_clear(&a);

    /* Several Sentinels, the master's credentials, the Sentinels' own, a database. */
    /* The display names every Sentinel with its port, the master, the user and the
     * database, and neither password; the passwords are checked apart. */
    parse_hosts("redis-sentinel://app:m%40pw@s1:5000,[::1]:5001,s3/orders"
                "?sentinel_user=sen&sentinel_password=spw&db=2",
                true, false, "redis-sentinel://app@s1:5000,[::1]:5001,s3:26379/orders?db=2", &a);
    assert_int_equal(a.nhosts, 3);
    assert_string_equal(a.password, "m@pw");
    assert_string_equal(a.sentinel_user, "sen");
    assert_string_equal(a.sentinel_password, "spw");
    dlock__addr_clear(&a);

    /* Over TLS, with the TLS parameters. */
    expect_tls_hosts("rediss-sentinel://s1/m?cacert=/ca.pem&sni=redis.internal&insecure=0", true, 0,
                     "rediss-sentinel://s1:26379/m");
}

static void test_sentinel_refused(void **state)
{
    (void)state;
    parse_bad("redis-sentinel://", "missing host");
    parse_bad("redis-sentinel://s1,/m", "missing host");
    parse_bad("redis-sentinel://s1:0/m", "port");
    parse_bad("redis-sentinel://s1/has%20space", "master name with a space");
    parse_bad("redis-sentinel://s1/a%3Fb", "master name with '?'");
    parse_bad("redis-sentinel://s1/a/b", "master name with '/'");
    parse_bad("redis-sentinel://s1/m?cacert=/x", "unknown parameter \"cacert\"");
    parse_bad("redis-sentinel://s1/m?db=-1", "db=");
    parse_bad("redis-sentinel://s1/m?db=1&db=2", "db=");
    parse_bad("redis-sentinel://s1/m?sentinel_password=", "empty value");
    parse_bad("redis-sentinel://s1/m?sentinel_password=a&sentinel_password=b", "given twice");
    parse_bad("redis-sentinel://s1/m?", "empty parameter list");
    parse_bad("rediss://h?sentinel_password=x", "unknown parameter");
    parse_bad("redis-sentinels://s1", "scheme");
    parse_bad("redis-sentinel://a,b,c,d,e,f,g,h,i/m", "more than 8 Sentinels");
}

static void test_sentinel_list(void **state)
{
    (void)state;
    /* A comma in a Sentinel URL's host part lists Sentinels; one followed by a scheme
     * starts the next server, as does any comma after the host part. */
    dlock__addr *addrs = list_ok("redis-sentinel://s1,s2:5000/a,redis://h:1,"
                                 "redis-sentinel://s3, s4,rediss-sentinel://s5/c",
                                 DLOCK_SERVERS_MAX, 4);
    assert_int_equal(addrs[0].nhosts, 2);
    assert_string_equal(addrs[0].master_name, "a");
    assert_string_equal(addrs[1].host, "h");
    assert_int_equal(addrs[2].nhosts, 2);
    assert_string_equal(addrs[2].hosts[1].host, "s4");
    assert_true(addrs[3].tls);
    assert_string_equal(addrs[3].master_name, "c");
    list_free(addrs, 4);
}

static void test_cluster(void **state)
{
    (void)state;
    dlock__addr a;
    parse_hosts("redis-cluster://10.0.0.1", false, false, "redis-cluster://10.0.0.1:6379", &a);
    expect_one_host(&a, 6379);
    dlock__addr_clear(&a);

    /* Several seeds, every master's credentials; a trailing slash is database 0. */
    parse_hosts("redis-cluster://app:p%40w@n1:7000, [::1]:7001,n3/", false, false,
                "redis-cluster://app@n1:7000,[::1]:7001,n3:6379", &a);
    assert_int_equal(a.nhosts, 3);
    assert_string_equal(a.hosts[1].host, "::1");
    assert_int_equal(a.hosts[1].port, 7001);
    assert_int_equal(a.hosts[2].port, 6379);
    assert_string_equal(a.user, "app");
    assert_string_equal(a.password, "p@w");
    dlock__addr_clear(&a);

    expect_tls_hosts("rediss-cluster://n1:7000?cacert=/ca.pem&sni=redis.internal", false, -1,
                     "rediss-cluster://n1:7000");
}

static void test_cluster_refused(void **state)
{
    (void)state;
    parse_bad("redis-cluster://", "missing host");
    parse_bad("redis-cluster://n1,/", "missing host");
    parse_bad("redis-cluster://n1/1", "only database 0");
    parse_bad("redis-cluster://n1/0", "only database 0");
    parse_bad("redis-cluster://n1?cacert=/x", "redis-cluster:// takes none");
    parse_bad("rediss-cluster://n1?sentinel_user=x", "rediss-cluster:// takes cacert");
    parse_bad("redis-cluster://n1:65536", "port");
    parse_bad("redis-cluster://a,b,c,d,e,f,g,h,i", "more than 8 seeds");
    parse_bad("rediss-cluster://n1?cert=/c", "cert= given without key=");
}

static void test_cluster_list(void **state)
{
    (void)state;
    /* Seeds are listed as Sentinels are; a scheme starts the next server. */
    dlock__addr *addrs = list_ok("redis-cluster://n1,n2:7001,redis://h:1,redis-cluster://m1, m2",
                                 DLOCK_SERVERS_MAX, 3);
    assert_int_equal(addrs[0].nhosts, 2);
    assert_string_equal(addrs[1].host, "h");
    assert_int_equal(addrs[2].nhosts, 2);
    assert_string_equal(addrs[2].hosts[1].host, "m2");
    list_free(addrs, 3);
}

/* Slots as CLUSTER KEYSLOT of Redis 7.0 gives them: the whole key, or the part between
 * the first '{' and the '}' after it when that part is not empty. */
static void test_key_slot(void **state)
{
    (void)state;
    static const struct {
        const char *key;
        int slot;
    } cases[] = {
        {"foo", 12182},       {"bar", 5061},       {"{user1000}.following", 3443},
        {"{}x", 10595},       {"a{}b{c}", 7353},   {"{a", 10276},
        {"dlock:{x}", 16287}, {"dlock:{}}", 6249}, {"", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(dlock__key_slot(cases[i].key, strlen(cases[i].key)), cases[i].slot);
    /* A tag is a lock's name: its keys all share a slot. */
    assert_int_equal(dlock__key_slot("dlock:{x}:fence", 15), 16287);
    assert_int_equal(dlock__key_slot("other:{x}:queue", 15), 16287);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* Sentinels. */
        cmocka_unit_test(test_sentinel),
        cmocka_unit_test(test_sentinel_refused),
        cmocka_unit_test(test_sentinel_list),
        /* A cluster. */
        cmocka_unit_test(test_cluster),
        cmocka_unit_test(test_cluster_refused),
        cmocka_unit_test(test_cluster_list),
        cmocka_unit_test(test_key_slot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
