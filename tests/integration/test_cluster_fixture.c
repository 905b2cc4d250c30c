/*
 * test_cluster_fixture.c: the Redis Cluster fixture (tests/support/cluster.c) against
 * real redis-server processes.
 *
 * The cluster tests trust that every slot has the owner the fixture says, that the
 * other nodes redirect there with -MOVED, and that a migration in steps shows clients
 * what a real one does (-ASK while it runs, -MOVED to the new owner after); this file
 * checks those promises first, without a password, with one, and with TLS.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "support.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PASSWORD "cluster-secret"

/* The cluster of the group's tests, three masters without a password. */
static dh_cluster g_cl;

static int cluster_setup(void **state)
{
    (void)state;
    return dh_cluster_start(&g_cl, 3, NULL);
}

static int cluster_teardown(void **state)
{
    (void)state;
    dh_cluster_stop(&g_cl);
    return 0;
}

/* The error a node answers for a key of slot that node `at` owns: "MOVED" or "ASK",
 * the slot, and at's address. */
static void redirect(char *buf, size_t len, const char *kind, dh_cluster *cl, int slot, int at)
{
    snprintf(buf, len, "%s %d %s:%d", kind, slot, cl->node[at].host, cl->node[at].port);
}

/* Expect the reply r (freed here) to be the error want. */
static void error_is(redisReply *r, const char *want)
{
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_string_equal(r->str, want);
    freeReplyObject(r);
}

/* Expect the reply r (freed here) to be the string want. */
static void reply_is(redisReply *r, const char *want)
{
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, want);
    freeReplyObject(r);
}

/* Write "{tag}k" = "v" on its owner and move its slot, in one go, to the node `step`
 * after that owner, which then serves the key. The slot, and the two nodes in *from
 * and *to. */
static int move_tagged_key(dh_cluster *cl, const char *tag, int step, int *from, int *to)
{
    char hashtag[32], key[40];
    snprintf(hashtag, sizeof hashtag, "{%s}", tag);
    snprintf(key, sizeof key, "%sk", hashtag);
    int slot = dh_cluster_keyslot(cl, hashtag);
    *from = dh_cluster_owner(cl, slot);
    *to = (*from + step) % 3;
    assert_int_equal(dh_reply_status(dh_cmd(&cl->node[*from], "SET %s v", key), "SET"), 0);
    assert_int_equal(dh_cluster_migrate_begin(cl, slot, *from, *to), 0);
    assert_int_equal(dh_cluster_migrate_finish(cl, slot, *from, *to), 0);
    reply_is(dh_cmd(&cl->node[*to], "GET %s", key), "v");
    return slot;
}

/* Every slot has an owner, in even ranges, and every node's own CLUSTER SLOTS, read
 * here rather than through the fixture, names that owner at its address. */
static void every_slot_owned(void **state)
{
    (void)state;
    int count[3] = {0};
    for (int s = 0; s < DH_CLUSTER_SLOTS; s++) {
        int o = dh_cluster_owner(&g_cl, s);
        assert_true(o >= 0 && o < 3);
        count[o]++;
    }
    for (int i = 0; i < 3; i++)
        assert_true(count[i] >= DH_CLUSTER_SLOTS / 3 && count[i] <= DH_CLUSTER_SLOTS / 3 + 1);
    assert_int_equal(dh_cluster_owner(&g_cl, -1), -1);
    assert_int_equal(dh_cluster_owner(&g_cl, DH_CLUSTER_SLOTS), -1);

    for (int i = 0; i < 3; i++) {
        assert_int_equal(strlen(g_cl.id[i]), 40);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(g_cl.id[i], g_cl.id[j]);
        redisReply *r = dh_cmd(&g_cl.node[i], "CLUSTER SLOTS");
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        int covered = 0;
        for (size_t e = 0; e < r->elements; e++) {
            const redisReply *range = r->element[e];
            long long first = range->element[0]->integer, last = range->element[1]->integer;
            const redisReply *m = range->element[2];
            int owner = dh_cluster_owner(&g_cl, (int)first);
            assert_true(owner >= 0);
            assert_string_equal(m->element[0]->str, g_cl.node[owner].host);
            assert_int_equal(m->element[1]->integer, g_cl.node[owner].port);
            assert_string_equal(m->element[2]->str, g_cl.id[owner]);
            for (long long s = first; s <= last; s++)
                assert_int_equal(dh_cluster_owner(&g_cl, (int)s), owner);
            covered += (int)(last - first + 1);
        }
        assert_int_equal(covered, DH_CLUSTER_SLOTS);
        freeReplyObject(r);
    }

    char url[256], want[256];
    dh_cluster_url(&g_cl, 1, url, sizeof url);
    snprintf(want, sizeof want, "redis-cluster://127.0.0.1:%d", g_cl.node[1].port);
    assert_string_equal(url, want);
    dh_cluster_url(&g_cl, -1, url, sizeof url);
    snprintf(want, sizeof want, "redis-cluster://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
             g_cl.node[0].port, g_cl.node[1].port, g_cl.node[2].port);
    assert_string_equal(url, want);
    dh_cluster_url(&g_cl, -1, url, 20); /* truncated, still a string */
    assert_int_equal(strlen(url), 19);
}

/* A key is written on its owner; every other node sends the client there. */
static void moved_elsewhere(void **state)
{
    (void)state;
    /* The slot everyone quotes for "foo": the fixture asks the server, not a table. */
    assert_int_equal(dh_cluster_keyslot(&g_cl, "foo"), 12182);
    int slot = dh_cluster_keyslot(&g_cl, "moved-key");
    assert_true(slot >= 0 && slot < DH_CLUSTER_SLOTS);
    int owner = dh_cluster_owner(&g_cl, slot);
    assert_int_equal(dh_reply_status(dh_cmd(&g_cl.node[owner], "SET moved-key v"), "SET"), 0);
    char want[128];
    redirect(want, sizeof want, "MOVED", &g_cl, slot, owner);
    for (int i = 0; i < 3; i++) {
        if (i == owner)
            reply_is(dh_cmd(&g_cl.node[i], "GET moved-key"), "v");
        else
            error_is(dh_cmd(&g_cl.node[i], "SET moved-key w"), want);
    }
    reply_is(dh_cmd(&g_cl.node[owner], "GET moved-key"), "v");
}

/* The slot of "{x}" moves to another node with its keys, step by step, and clients
 * are redirected as in a real migration at every step. */
static void migrate_in_steps(void **state)
{
    (void)state;
    int slot = dh_cluster_keyslot(&g_cl, "{x}");
    assert_int_equal(slot, dh_cluster_keyslot(&g_cl, "{x}a"));
    int from = dh_cluster_owner(&g_cl, slot), to = (from + 1) % 3, third = (from + 2) % 3;
    dh_server *f = &g_cl.node[from], *t = &g_cl.node[to];
    assert_int_equal(dh_reply_status(dh_cmd(f, "SET {x}a 1"), "SET"), 0);
    assert_int_equal(dh_reply_status(dh_cmd(f, "SET {x}b 2"), "SET"), 0);
    char ask[128], moved_from[128], moved_to[128];
    redirect(ask, sizeof ask, "ASK", &g_cl, slot, to);
    redirect(moved_from, sizeof moved_from, "MOVED", &g_cl, slot, from);
    redirect(moved_to, sizeof moved_to, "MOVED", &g_cl, slot, to);

    assert_int_equal(dh_cluster_migrate_begin(&g_cl, slot, from, to), 0);
    /* Begun: the old owner still serves the keys it has, and sends the client on for
     * those it has not. */
    reply_is(dh_cmd(f, "GET {x}a"), "1");
    error_is(dh_cmd(f, "GET {x}new"), ask);
    error_is(dh_cmd(t, "GET {x}a"), moved_from); /* without ASKING */

    assert_int_equal(dh_cluster_migrate_keys(&g_cl, slot, from, to), 0);
    long long n = -1;
    assert_int_equal(
        dh_reply_integer(dh_cmd(f, "CLUSTER COUNTKEYSINSLOT %d", slot), "COUNTKEYSINSLOT", &n), 0);
    assert_int_equal(n, 0);
    /* Moved: the old owner answers -ASK for them; the new one serves them after ASKING. */
    error_is(dh_cmd(f, "GET {x}a"), ask);
    redisContext *c = dh_connect(t);
    assert_non_null(c);
    assert_int_equal(dh_reply_status(redisCommand(c, "ASKING"), "ASKING"), 0);
    reply_is(redisCommand(c, "GET {x}b"), "2");
    redisFree(c);
    assert_int_equal(dh_cluster_owner(&g_cl, slot), from); /* not yet */

    assert_int_equal(dh_cluster_migrate_finish(&g_cl, slot, from, to), 0);
    assert_int_equal(dh_cluster_owner(&g_cl, slot), to);
    error_is(dh_cmd(f, "GET {x}a"), moved_to);
    error_is(dh_cmd(&g_cl.node[third], "GET {x}a"), moved_to);
    reply_is(dh_cmd(t, "GET {x}a"), "1");
    reply_is(dh_cmd(t, "GET {x}b"), "2");
    assert_int_equal(
        dh_reply_integer(dh_cmd(t, "CLUSTER COUNTKEYSINSLOT %d", slot), "COUNTKEYSINSLOT", &n), 0);
    assert_int_equal(n, 2);

    /* Misuse is refused, not half done: the slot is no longer from's. */
    assert_int_equal(dh_cluster_migrate_begin(&g_cl, slot, from, to), -1);
    assert_int_equal(dh_cluster_migrate_begin(&g_cl, slot, to, to), -1);
}

/* With --requirepass on every node: the fixture forms the cluster, and MIGRATE gives
 * the target the password. Migrated back and forth in one go each way. */
static void with_password(void **state)
{
    (void)state;
    const char *const args[] = {"--requirepass", PASSWORD, "--masterauth", PASSWORD, NULL};
    dh_server_opts o = {.args = args};
    dh_cluster cl;
    assert_int_equal(dh_cluster_start(&cl, 3, &o), 0);

    /* Unauthenticated, a node refuses: the password is really set. */
    redisContext *c = redisConnect(cl.node[0].host, cl.node[0].port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    redisReply *r = redisCommand(c, "CLUSTER INFO");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    assert_int_equal(strncmp(r->str, "NOAUTH", 6), 0);
    freeReplyObject(r);
    redisFree(c);

    int from, to;
    int slot = move_tagged_key(&cl, "pw", 2, &from, &to);
    char want[128];
    redirect(want, sizeof want, "MOVED", &cl, slot, to);
    error_is(dh_cmd(&cl.node[from], "GET {pw}k"), want);

    assert_int_equal(dh_cluster_migrate_begin(&cl, slot, to, from), 0);
    assert_int_equal(dh_cluster_migrate_keys(&cl, slot, to, from), 0);
    assert_int_equal(dh_cluster_migrate_finish(&cl, slot, to, from), 0);
    reply_is(dh_cmd(&cl.node[from], "GET {pw}k"), "v");
    dh_cluster_stop(&cl);
    dh_cluster_stop(&cl); /* twice is harmless */
}

/* Commands over TLS to port on 127.0.0.1 (hiredis here speaks no TLS), trusting
 * ca: the last of the first `lines` lines answered, CRLF removed, into out. 0 or -1. */
static int tls_commands(int port, const char *ca, const char *cmds, int lines, char *out,
                        size_t len)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    BIO *bio = NULL;
    int rc = -1;
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    if (ctx == NULL || SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1)
        goto out;
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    bio = BIO_new_ssl_connect(ctx);
    int n = (int)strlen(cmds);
    if (bio == NULL || BIO_set_conn_hostname(bio, addr) != 1 || BIO_do_handshake(bio) != 1 ||
        BIO_write(bio, cmds, n) != n)
        goto out;
    /* A byte at a time: the lines are short, and nothing past them is read. */
    size_t used = 0;
    for (int seen = 0; seen < lines;) {
        char ch;
        if (BIO_read(bio, &ch, 1) != 1)
            goto out;
        if (ch == '\n') {
            if (++seen < lines)
                used = 0;
        } else if (ch != '\r' && used + 1 < len) {
            out[used++] = ch;
        }
    }
    out[used] = '\0';
    rc = 0;
out:
    if (rc < 0)
        ERR_print_errors_fp(stderr);
    BIO_free_all(bio);
    SSL_CTX_free(ctx);
    return rc;
}

/* With TLS: the cluster runs on it, so that a TLS client is redirected to TLS ports
 * (the plain ones, kept for dh_cmd, would refuse its handshake), and MIGRATE moves
 * keys over it. The URL names the TLS ports. */
static void with_tls(void **state)
{
    (void)state;
    char dir[512], cert[600], key[600], ca[600];
    assert_int_equal(dh_tls_dir(dir, sizeof dir), 0);
    assert_int_equal(dh_tls_make_set(dir), 0);
    snprintf(cert, sizeof cert, "%s/server.crt", dir);
    snprintf(key, sizeof key, "%s/server.key", dir);
    snprintf(ca, sizeof ca, "%s/ca.crt", dir);
    dh_server_tls tls = {.cert = cert, .key = key, .ca = ca, .auth_clients = false};
    /* The nodes prove themselves to each other with a client certificate, which the
     * server one (serverAuth only) is not. */
    char client_cert[640], client_key[640];
    snprintf(client_cert, sizeof client_cert, "tls-client-cert-file %s/client.crt", dir);
    snprintf(client_key, sizeof client_key, "tls-client-key-file %s/client.key", dir);
    const char *const config[] = {client_cert, client_key, NULL};
    const char *const args[] = {"--requirepass", PASSWORD, NULL};
    dh_server_opts o = {.tls = &tls, .args = args, .config = config};
    dh_cluster cl;
    assert_int_equal(dh_cluster_start(&cl, 3, &o), 0);

    char url[256], want[256];
    dh_cluster_url(&cl, 2, url, sizeof url);
    snprintf(want, sizeof want, "rediss-cluster://127.0.0.1:%d", cl.node[2].tls_port);
    assert_string_equal(url, want);

    int from, to;
    int slot = move_tagged_key(&cl, "tls", 1, &from, &to);

    /* A TLS client is sent to the new owner's TLS port. */
    char line[256];
    const char *cmds = "AUTH " PASSWORD "\r\nGET {tls}k\r\n";
    assert_int_equal(tls_commands(cl.node[from].tls_port, ca, cmds, 2, line, sizeof line), 0);
    snprintf(want, sizeof want, "-MOVED %d 127.0.0.1:%d", slot, cl.node[to].tls_port);
    assert_string_equal(line, want);
    assert_int_equal(tls_commands(cl.node[to].tls_port, ca, cmds, 2, line, sizeof line), 0);
    assert_string_equal(line, "$1");
    dh_cluster_stop(&cl);
    dh_tls_dir_remove(dir);
}

int main(void)
{
    const struct CMUnitTest three[] = {
        cmocka_unit_test(every_slot_owned),
        cmocka_unit_test(moved_elsewhere),
        cmocka_unit_test(migrate_in_steps),
    };
    const struct CMUnitTest others[] = {
        cmocka_unit_test(with_password),
        cmocka_unit_test(with_tls),
    };
    return cmocka_run_group_tests_name("cluster_3_masters", three, cluster_setup,
                                       cluster_teardown) +
           cmocka_run_group_tests_name("cluster_options", others, NULL, NULL);
}
