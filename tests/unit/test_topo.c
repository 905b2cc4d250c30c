/*
 * test_topo.c: each node's topology table (src/topo.c, transport.h's dlock__topology),
 * chosen once from its URL: the direct one for a server of its own (redis://, rediss://,
 * unix://), the Sentinel one for redis-sentinel://, the cluster one for
 * redis-cluster://; the state each makes and frees; and the contract every table keeps
 * (resolve set; the optional ops only where that kind acts). Pure code: nothing here
 * connects; what each op does on a live server is test_sentinel's and test_cluster's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "internal.h"

#include <string.h>

/* A node for url, its topology attached, as dlock_client_new makes one. */
static void node_for(dlock__node *node, dlock__node_rules *rules, const char *url)
{
    dlock__err e;
    memset(node, 0, sizeof *node);
    assert_int_equal(dlock__url_parse(url, strlen(url), &node->addr, &e), DLOCK_OK);
    node->rules = rules;
    pthread_mutex_init(&node->mu, NULL);
    assert_int_equal(dlock__topo_attach(node), DLOCK_OK);
}

static void node_end(dlock__node *node)
{
    dlock__topo_detach(node);
    dlock__addr_clear(&node->addr);
    pthread_mutex_destroy(&node->mu);
}

static void test_choice(void **state)
{
    (void)state;
    static const struct {
        const char *url;
        const dlock__topology *want;
    } cases[] = {
        {"redis://127.0.0.1:6379", &dlock__topo_direct},
        {"rediss://lock.example:6380", &dlock__topo_direct},
        {"unix:///run/redis.sock", &dlock__topo_direct},
        {"redis-sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster", &dlock__topo_sentinel},
        {"redis-cluster://10.0.0.1:7000,10.0.0.2:7000", &dlock__topo_cluster},
    };
    dlock__node_rules rules = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dlock__node node;
        node_for(&node, &rules, cases[i].url);
        assert_ptr_equal(node.topo, cases[i].want);
        /* Only a cluster node has state of its own, the slot map that the calls
         * above the transport tell a cluster node by. */
        assert_int_equal(node.cluster != NULL, cases[i].want == &dlock__topo_cluster);
        node_end(&node);
        assert_null(node.cluster);
    }
}

static void test_contract(void **state)
{
    (void)state;
    const dlock__topology *all[] = {&dlock__topo_direct, &dlock__topo_sentinel,
                                    &dlock__topo_cluster};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        assert_non_null(all[i]->resolve);
        /* A kind's state is made and freed by the same table. */
        assert_int_equal(all[i]->node_new == NULL, all[i]->node_free == NULL);
    }
    /* One server, always the same: nothing but where it is. */
    const dlock__topology *d = &dlock__topo_direct;
    assert_true(d->node_new == NULL && d->route == NULL && d->on_error == NULL &&
                d->voter == NULL && d->suspect == NULL && d->conn_free == NULL && !d->named_master);
    /* A Sentinel's master: asked for, followed after -READONLY, trusted as named. */
    const dlock__topology *s = &dlock__topo_sentinel;
    assert_true(s->on_error != NULL && s->named_master && s->route == NULL && s->voter == NULL &&
                s->conn_free == NULL);
    /* A cluster: every op. */
    const dlock__topology *c = &dlock__topo_cluster;
    assert_true(c->node_new != NULL && c->route != NULL && c->on_error != NULL &&
                c->voter != NULL && c->suspect != NULL && c->conn_free != NULL && !c->named_master);
}

/* The direct topology sends a connection to the URL's own host; a unix socket needs
 * none. */
static void test_direct_resolve(void **state)
{
    (void)state;
    dlock__node_rules rules = {0};
    dlock__node node;
    dlock__conn c;
    dlock__err e;
    node_for(&node, &rules, "redis://lock.example:6390");
    dlock__conn_init(&c, &node);
    assert_int_equal(node.topo->resolve(&c, &e), DLOCK_OK);
    assert_string_equal(c.host, "lock.example");
    assert_int_equal(c.port, 6390);
    dlock__conn_free(&c);
    node_end(&node);

    node_for(&node, &rules, "unix:///run/redis.sock");
    dlock__conn_init(&c, &node);
    assert_int_equal(node.topo->resolve(&c, &e), DLOCK_OK);
    assert_string_equal(c.host, "");
    dlock__conn_free(&c);
    node_end(&node);
}

/* A node never attached (a client whose making failed early) detaches as a no-op. */
static void test_detach_unattached(void **state)
{
    (void)state;
    dlock__node node;
    memset(&node, 0, sizeof node);
    dlock__topo_detach(&node);
    assert_null(node.topo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choice),
        cmocka_unit_test(test_contract),
        cmocka_unit_test(test_direct_resolve),
        cmocka_unit_test(test_detach_unattached),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
