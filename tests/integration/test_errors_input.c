/*
 * test_errors_input.c: every bad input a caller can give, each refused with
 * DLOCK_ERR_INVALID before anything is taken, and the inputs at the limits accepted:
 * NULL arguments and handles, names (empty, too long, the longest; odd and hostile
 * bytes, each its own lock with its keys in one Cluster slot), ttls, options and a
 * client's config, malformed and well-formed URLs. The servers' and the process's ways
 * to fail are in test_errors.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void null_arguments(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, 500);
    dlock_lock *l = IT_SENTINEL(l);
    dlock_holder h;

    assert_int_equal(dlock_acquire(NULL, "x", NULL, &l), DLOCK_ERR_INVALID);
    assert_null(l);
    assert_true(dlock_errmsg()[0] != '\0');
    l = IT_SENTINEL(l);
    assert_int_equal(dlock_acquire(c, NULL, NULL, &l), DLOCK_ERR_INVALID);
    assert_null(l);
    assert_int_equal(dlock_acquire(c, "x", NULL, NULL), DLOCK_ERR_INVALID);

    assert_int_equal(dlock_inspect(NULL, "x", &h), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_inspect(c, NULL, &h), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_inspect(c, "x", NULL), DLOCK_ERR_INVALID);

    assert_int_equal(dlock_extend(NULL, 1000), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_release(NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_check(NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_detach(NULL), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_fence(NULL), 0);
    assert_true(dlock_remaining_ms(NULL) <= 0);
    assert_int_equal(dlock_lost_fd(NULL), -1);

    const char *tok = "0123456789abcdef0123456789abcdef";
    l = IT_SENTINEL(l);
    assert_int_equal(dlock_lock_adopt(NULL, "x", tok, &l), DLOCK_ERR_INVALID);
    assert_null(l);
    assert_int_equal(dlock_lock_adopt(c, NULL, tok, &l), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_adopt(c, "x", NULL, &l), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_adopt(c, "x", tok, NULL), DLOCK_ERR_INVALID);
    /* Not a token: too short, too long, not hex, upper case. */
    assert_int_equal(dlock_lock_adopt(c, "x", "abc", &l), DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_adopt(c, "x", "0123456789abcdef0123456789abcdef0", &l),
                     DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_adopt(c, "x", "0123456789abcdef0123456789abcdeg", &l),
                     DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_adopt(c, "x", "0123456789ABCDEF0123456789abcdef", &l),
                     DLOCK_ERR_INVALID);

    dlock_client *out = IT_SENTINEL(out);
    assert_int_equal(dlock_client_new(NULL, NULL, &out), DLOCK_ERR_INVALID);
    assert_null(out);
    assert_int_equal(dlock_client_new(it_srv.url, NULL, NULL), DLOCK_ERR_INVALID);
    dlock_client_free(NULL); /* a no-op */

    /* After all that misuse the client still works, and a success clears errmsg. */
    l = it_acquire(c, "after-misuse", 1000);
    assert_string_equal(dlock_errmsg(), "");
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

static void names(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, 500);
    dlock_lock *l = IT_SENTINEL(l);
    assert_int_equal(dlock_acquire(c, "", NULL, &l), DLOCK_ERR_INVALID);
    assert_null(l);
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "", &h), DLOCK_ERR_INVALID);

    char *name = malloc(DLOCK_NAME_MAX + 2);
    assert_non_null(name);
    memset(name, 'n', DLOCK_NAME_MAX + 1);
    name[DLOCK_NAME_MAX + 1] = '\0';
    l = IT_SENTINEL(l);
    assert_int_equal(dlock_acquire(c, name, NULL, &l), DLOCK_ERR_INVALID);
    assert_null(l);
    assert_int_equal(dlock_inspect(c, name, &h), DLOCK_ERR_INVALID);

    name[DLOCK_NAME_MAX] = '\0'; /* exactly the maximum */
    l = it_acquire(c, name, 2000);
    char *key = malloc(DLOCK_NAME_MAX + 16);
    assert_non_null(key);
    it_key(key, DLOCK_NAME_MAX + 16, name);
    assert_int_equal(it_exists(&it_srv, key), 1);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(it_exists(&it_srv, key), 0);
    free(key);
    free(name);

    /* Names are bytes: spaces, braces and UTF-8 are fine and land in their own key. */
    const char *odd[] = {"with space", "br{ace}s", "\xc3\xa9t\xc3\xa9", "a:b:fence"};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        l = it_acquire(c, odd[i], 2000);
        char k[128];
        it_key(k, sizeof k, odd[i]);
        assert_int_equal(it_exists(&it_srv, k), 1);
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    dlock_client_free(c);
}

/* Hostile names: any bytes but NUL. Held all at once, each is its own lock; each one's
 * keys (the lock and its fence counter here) share one Cluster slot, a name that
 * begins with '}' included, whose hash tag would otherwise be empty. */
static void hostile_names_stay_apart(void **state)
{
    (void)state;
    static const char *const names[] = {"\r\n", "a\r\nb", "}",         "}x",       "%7d78", "%",
                                        "%25",  "{",      "{}",        "}{",       "x}",    "*",
                                        "a*",   "?",      "[a]",       "\xff\xfe", "\xc3",  " ",
                                        "\t",   "\x01",   "dlock:{x}", "x}:fence"};
    enum { N = sizeof names / sizeof *names };
    static const char *const cluster[] = {"--cluster-enabled", "yes", NULL};
    dh_server slots; /* a Cluster node alone, for CLUSTER KEYSLOT */
    assert_int_equal(dh_server_start(&slots, cluster), 0);
    dlock_client *c = it_client(&it_srv, 500);
    freeReplyObject(dh_cmd(&it_srv, "FLUSHALL"));
    dlock_lock *l[N];
    for (int i = 0; i < N; i++)
        l[i] = it_acquire(c, names[i], 5000);
    for (int i = 0; i < N; i++) {
        dlock_holder h;
        assert_int_equal(dlock_inspect(c, names[i], &h), DLOCK_OK);
        if (!h.held || strcmp(h.token, dlock_token(l[i])) != 0)
            fail_msg("name %d is not held by its own token", i);
    }
    for (int i = 0; i < N; i++) {
        int rc = dlock_release(l[i]);
        if (rc != DLOCK_OK)
            fail_msg("name %d: release: %s (%s)", i, dlock_errname(rc), dlock_errmsg());
    }
    /* Each name's keys, alone on the server: one slot. */
    for (int i = 0; i < N; i++) {
        freeReplyObject(dh_cmd(&it_srv, "FLUSHALL"));
        l[i] = it_acquire(c, names[i], 5000);
        redisReply *keys = dh_cmd(&it_srv, "KEYS *");
        assert_non_null(keys);
        assert_int_equal(keys->elements, 2); /* the lock and its fence counter */
        long long slot[2];
        for (int k = 0; k < 2; k++) {
            slot[k] = it_int_reply(
                dh_cmd(&slots, "CLUSTER KEYSLOT %b", keys->element[k]->str, keys->element[k]->len));
        }
        if (slot[0] != slot[1])
            fail_msg("name %d: keys %s and %s in slots %lld and %lld", i, keys->element[0]->str,
                     keys->element[1]->str, slot[0], slot[1]);
        freeReplyObject(keys);
        assert_int_equal(dlock_release(l[i]), DLOCK_OK);
    }
    dlock_client_free(c);
    dh_server_stop(&slots);
}

static void ttls(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, 500);
    const int64_t bad[] = {-1, INT64_MAX, DLOCK_TTL_MIN_MS - 1, (int64_t)DLOCK_TTL_MAX_MS + 1,
                           INT64_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dlock_opts o = {0};
        o.ttl_ms = bad[i];
        dlock_lock *l = IT_SENTINEL(l);
        assert_int_equal(dlock_acquire(c, "ttl", &o, &l), DLOCK_ERR_INVALID);
        assert_null(l);
        assert_true(dlock_errmsg()[0] != '\0');
    }
    char key[64];
    it_key(key, sizeof key, "ttl");
    assert_int_equal(it_exists(&it_srv, key), 0);

    /* The bounds themselves are accepted. */
    dlock_lock *l = it_acquire(c, "ttl", DLOCK_TTL_MAX_MS);
    long long p = it_pttl(&it_srv, key);
    assert_true(p > (long long)DLOCK_TTL_MAX_MS - 60000);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    l = it_acquire(c, "ttl", DLOCK_TTL_MIN_MS);
    (void)dlock_release(l); /* may have expired already: OK or LOST */

    /* ttl_ms 0 is the 30 s default. */
    l = it_acquire(c, "ttl", 0);
    p = it_pttl(&it_srv, key);
    printf("INFO PTTL with default ttl: %lld\n", p);
    assert_true(p > DLOCK_TTL_DEFAULT_MS - 5000 && p <= DLOCK_TTL_DEFAULT_MS);
    assert_int_equal(dlock_release(l), DLOCK_OK);

    /* NULL opts: the same default. */
    l = NULL;
    assert_int_equal(dlock_acquire(c, "ttl", NULL, &l), DLOCK_OK);
    p = it_pttl(&it_srv, key);
    assert_true(p > DLOCK_TTL_DEFAULT_MS - 5000 && p <= DLOCK_TTL_DEFAULT_MS);

    /* extend with a bad ttl: INVALID, and the lock is untouched and still held. */
    const int64_t bad_ext[] = {0, -1, DLOCK_TTL_MIN_MS - 1, (int64_t)DLOCK_TTL_MAX_MS + 1,
                               INT64_MAX};
    for (size_t i = 0; i < sizeof bad_ext / sizeof bad_ext[0]; i++)
        assert_int_equal(dlock_extend(l, bad_ext[i]), DLOCK_ERR_INVALID);
    p = it_pttl(&it_srv, key);
    assert_true(p > DLOCK_TTL_DEFAULT_MS - 5000);
    assert_int_equal(dlock_check(l), DLOCK_OK);
    assert_true(dlock_remaining_ms(l) > 0);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

static void options_and_config(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, 500);
    dlock_lock *l = IT_SENTINEL(l);
    dlock_opts o = {0};
    o.wait_ms = -2; /* only 0, > 0 and -1 mean something */
    assert_int_equal(dlock_acquire(c, "opt", &o, &l), DLOCK_ERR_INVALID);
    assert_null(l);

    char label[DLOCK_LABEL_MAX + 2];
    memset(label, 'l', sizeof label - 1);
    label[sizeof label - 1] = '\0';
    memset(&o, 0, sizeof o);
    o.label = label;
    assert_int_equal(dlock_acquire(c, "opt", &o, &l), DLOCK_ERR_INVALID);
    label[DLOCK_LABEL_MAX] = '\0';
    o.ttl_ms = 1000;
    assert_int_equal(dlock_acquire(c, "opt", &o, &l), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);

    memset(&o, 0, sizeof o);
    o.reserved[0] = 1;
    int rc = dlock_acquire(c, "opt", &o, &l);
    it_show("acquire with opts.reserved[0] = 1", rc); /* "must be zero": shown only */
    if (rc == DLOCK_OK)
        dlock_release(l);
    dlock_client_free(c);

    dlock_config cfg = {0};
    dlock_client *out = IT_SENTINEL(out);
    cfg.timeout_ms = -1;
    assert_int_equal(dlock_client_new(it_srv.url, &cfg, &out), DLOCK_ERR_INVALID);
    assert_null(out);
    memset(&cfg, 0, sizeof cfg);
    cfg.connect_timeout_ms = -1;
    assert_int_equal(dlock_client_new(it_srv.url, &cfg, &out), DLOCK_ERR_INVALID);

    char prefix[DLOCK_PREFIX_MAX + 2];
    memset(prefix, 'p', sizeof prefix - 1);
    prefix[sizeof prefix - 1] = '\0';
    memset(&cfg, 0, sizeof cfg);
    cfg.prefix = prefix;
    assert_int_equal(dlock_client_new(it_srv.url, &cfg, &out), DLOCK_ERR_INVALID);

    memset(&cfg, 0, sizeof cfg);
    cfg.reserved[0] = 1;
    rc = dlock_client_new(it_srv.url, &cfg, &out);
    it_show("client_new with cfg.reserved[0] = 1", rc);
    if (rc == DLOCK_OK)
        dlock_client_free(out);

    /* A prefix of our own puts the keys elsewhere. */
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 500;
    cfg.prefix = "app:";
    c = it_client_cfg(it_srv.url, &cfg);
    l = it_acquire(c, "pfx", 2000);
    assert_int_equal(it_exists(&it_srv, "app:{pfx}"), 1);
    assert_int_equal(it_exists(&it_srv, "dlock:{pfx}"), 0);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

static void malformed_urls(void **state)
{
    (void)state;
    const char *bad[] = {
        "",
        "http://x",
        "redis://",
        "redis://h:0",
        "redis://h:70000",
        "redis://h:-1",
        "redis://h:abc",
        "redis://user@h",
        "redis://[::1",
        "rediss://h?verify=1",
        "rediss://h?cacert=/nonexistent/ca.pem",
        "unix://",
        "redis://h/abc",
        "redis://h/-1",
        "localhost:6379",
        "redis://127.0.0.1:6379,",
        ",redis://127.0.0.1:6379",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dlock_client *c = IT_SENTINEL(c);
        int rc = dlock_client_new(bad[i], NULL, &c);
        printf("INFO url '%s' -> %s: %s\n", bad[i], dlock_errname(rc), dlock_errmsg());
        assert_int_equal(rc, DLOCK_ERR_INVALID);
        assert_null(c);
        assert_true(dlock_errmsg()[0] != '\0');
        if (strncmp(bad[i], "rediss:", 7) == 0) /* the parameter is named */
            assert_true(strstr(dlock_errmsg(), "verify") || strstr(dlock_errmsg(), "cacert"));
    }

    /* More servers than a client takes. */
    char list[40 * (DLOCK_SERVERS_MAX + 1)];
    size_t n = 0;
    for (int i = 0; i <= DLOCK_SERVERS_MAX; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%sredis://127.0.0.1:%d", i ? "," : "",
                              7000 + i);
    dlock_client *c = IT_SENTINEL(c);
    assert_int_equal(dlock_client_new(list, NULL, &c), DLOCK_ERR_INVALID);
    assert_null(c);

    /* Well-formed ones are accepted without connecting (the servers need not exist). */
    const char *good[] = {
        "redis://127.0.0.1",
        "redis://localhost:6380/3",
        "redis://:pw@h:1",
        "redis://alice:pw@h:1",
        "redis://[::1]:6379",
        "redis://a%3Ab:p%2Cw@h",
        "unix:///tmp/x.sock",
        "unix://:pw@/tmp/x.sock?db=2",
        "redis://h1:1,redis://h2:2,redis://h3:3",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        c = NULL;
        int rc = dlock_client_new(good[i], NULL, &c);
        if (rc != DLOCK_OK)
            printf("INFO url '%s' -> %s: %s\n", good[i], dlock_errname(rc), dlock_errmsg());
        assert_int_equal(rc, DLOCK_OK);
        dlock_client_free(c);
    }
}

int main(void)
{
    const struct CMUnitTest input[] = {
        /* The arguments of the calls. */
        cmocka_unit_test(null_arguments),
        cmocka_unit_test(names),
        cmocka_unit_test(hostile_names_stay_apart),
        cmocka_unit_test(ttls),
        cmocka_unit_test(options_and_config),
        /* The servers' URLs. */
        cmocka_unit_test(malformed_urls),
    };
    int failed = cmocka_run_group_tests_name("errors_input", input, it_srv_setup, it_srv_teardown);
    return failed ? 1 : 0;
}
