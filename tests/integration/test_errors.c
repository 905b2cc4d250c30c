/*
 * test_errors.c: every way a call can fail, each with its exact code: bad arguments,
 * malformed URLs, refused authentication, servers that are down, paused or gone, a
 * reply far larger than any lock reply, a key of the wrong type, and a client used
 * across fork().
 *
 * Liveness bounds (a call on a dead or paused server returns within its deadline)
 * are asserted times DLOCK_TEST_SLACK; the measured times are printed as FIG lines.
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
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

/* A sentinel that a failing call must overwrite with NULL. */
#define SENTINEL(p) ((void *)&(p))

static void null_arguments(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, 500);
    dlock_lock *l = SENTINEL(l);
    dlock_holder h;

    assert_int_equal(dlock_acquire(NULL, "x", NULL, &l), DLOCK_ERR_INVALID);
    assert_null(l);
    assert_true(dlock_errmsg()[0] != '\0');
    l = SENTINEL(l);
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
    l = SENTINEL(l);
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

    dlock_client *out = SENTINEL(out);
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
    dlock_lock *l = SENTINEL(l);
    assert_int_equal(dlock_acquire(c, "", NULL, &l), DLOCK_ERR_INVALID);
    assert_null(l);
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "", &h), DLOCK_ERR_INVALID);

    char *name = malloc(DLOCK_NAME_MAX + 2);
    assert_non_null(name);
    memset(name, 'n', DLOCK_NAME_MAX + 1);
    name[DLOCK_NAME_MAX + 1] = '\0';
    l = SENTINEL(l);
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
        dlock_lock *l = SENTINEL(l);
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
    dlock_lock *l = SENTINEL(l);
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
    dlock_client *out = SENTINEL(out);
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

static void second_release_through_adopted_handle(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, 500);
    dlock_lock *l = it_acquire(c, "dbl", 5000);
    dlock_lock *twin = NULL;
    assert_int_equal(dlock_lock_adopt(c, "dbl", dlock_token(l), &twin), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(dlock_release(twin), DLOCK_ERR_LOST);
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
        dlock_client *c = SENTINEL(c);
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
    dlock_client *c = SENTINEL(c);
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

static void error_names_and_messages(void **state)
{
    (void)state;
    /* Every code of the list, whatever its length: the list is the X-macro. */
#define COUNT_(name, num, msg) +1
    const int ncodes = 0 DLOCK_ERR_MAP(COUNT_);
#undef COUNT_
    assert_true(ncodes >= 14);
    for (int e = 0; e < ncodes; e++) {
        const char *m = dlock_strerror(e), *n = dlock_errname(e);
        assert_non_null(m);
        assert_non_null(n);
        assert_true(m[0] != '\0');
        assert_int_equal(strncmp(n, "DLOCK_", 6), 0);
        assert_null(strstr(m, "unknown"));
        for (int f = 0; f < e; f++) {
            assert_string_not_equal(m, dlock_strerror(f));
            assert_string_not_equal(n, dlock_errname(f));
        }
    }
    assert_string_equal(dlock_errname(DLOCK_OK), "DLOCK_OK");
    assert_string_equal(dlock_errname(DLOCK_ERR_BUSY), "DLOCK_ERR_BUSY");
    const int unknown[] = {999, -1, ncodes};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        assert_non_null(strstr(dlock_strerror(unknown[i]), "unknown"));
        assert_string_equal(dlock_errname(unknown[i]), "DLOCK_ERR_UNKNOWN");
    }
    assert_string_equal(dlock_version(), DLOCK_VERSION_STRING);
}

static void huge_reply_is_refused(void **state)
{
    (void)state;
    size_t len = 1024 * 1024;
    char *big = malloc(len);
    assert_non_null(big);
    memset(big, 'x', len);
    redisReply *r = dh_cmd(&it_srv, "SET %s %b", "dlock:{big}", big, len);
    assert_non_null(r);
    freeReplyObject(r);
    free(big);

    dlock_client *c = it_client(&it_srv, 500);
    dlock_holder h;
    int rc = dlock_inspect(c, "big", &h);
    it_show("inspect of a 1 MiB value", rc);
    assert_int_equal(rc, DLOCK_ERR_PROTOCOL);
    /* The client is still usable, for another name and for this one. */
    dlock_lock *l = it_acquire(c, "not-big", 2000);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    l = SENTINEL(l);
    rc = dlock_acquire(c, "big", NULL, &l);
    it_show("acquire of a name whose key holds 1 MiB", rc);
    assert_int_equal(rc, DLOCK_ERR_BUSY);
    assert_null(l);
    it_del(&it_srv, "dlock:{big}");
    dlock_client_free(c);
}

static void wrong_type_key(void **state)
{
    (void)state;
    redisReply *r = dh_cmd(&it_srv, "HSET dlock:{wt} a b");
    assert_non_null(r);
    freeReplyObject(r);
    dlock_client *c = it_client(&it_srv, 500);
    dlock_lock *l = SENTINEL(l);
    int rc = dlock_acquire(c, "wt", NULL, &l);
    it_show("acquire over a hash key", rc);
    /* Not ours and not free: any refusal will do (the acquire script's SET NX meets
     * no -WRONGTYPE, so BUSY is as right as the PROTOCOL error -WRONGTYPE would
     * give). */
    assert_int_not_equal(rc, DLOCK_OK);
    assert_null(l);
    dlock_holder h;
    rc = dlock_inspect(c, "wt", &h);
    it_show("inspect of a hash key", rc);
    assert_int_not_equal(rc, DLOCK_OK);
    r = dh_cmd(&it_srv, "HGET dlock:{wt} a");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "b"); /* untouched */
    freeReplyObject(r);
    l = it_acquire(c, "wt-ok", 1000);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    it_del(&it_srv, "dlock:{wt}");
    dlock_client_free(c);
}

static void refused_select_takes_nothing(void **state)
{
    (void)state;
    /* Database 99 does not exist (16 by default): SELECT is refused, and the acquire
     * must not run in database 0 instead. */
    char url[160];
    snprintf(url, sizeof url, "%s/99", it_srv.url);
    dlock_config cfg = {0};
    cfg.timeout_ms = 500;
    dlock_client *c = it_client_cfg(url, &cfg);
    for (int i = 0; i < 2; i++) {
        dlock_lock *l = SENTINEL(l);
        int rc = dlock_acquire(c, "sel", NULL, &l);
        it_show("acquire with SELECT 99 refused", rc);
        assert_int_not_equal(rc, DLOCK_OK);
        assert_null(l);
        assert_int_equal(it_exists(&it_srv, "dlock:{sel}"), 0);
    }
    dlock_client_free(c);

    /* A database that exists is used, and db 0 stays empty of our key. */
    snprintf(url, sizeof url, "%s/3", it_srv.url);
    c = it_client_cfg(url, &cfg);
    dlock_lock *l = it_acquire(c, "sel", 2000);
    assert_int_equal(it_exists(&it_srv, "dlock:{sel}"), 0);
    redisReply *r;
    redisContext *rc3 = dh_connect(&it_srv);
    assert_non_null(rc3);
    r = redisCommand(rc3, "SELECT 3");
    freeReplyObject(r);
    r = redisCommand(rc3, "EXISTS dlock:{sel}");
    assert_non_null(r);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    redisFree(rc3);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

static void fork_child_gets_closed(void **state)
{
    (void)state;
    dlock_client *c = it_client(&it_srv, 500);
    dlock_lock *held = it_acquire(c, "fork", 10000);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* No cmocka here: report through the exit status. */
        dlock_lock *l = NULL;
        dlock_holder h;
        int bad = 0;
        bad |= (dlock_acquire(c, "fork-child", NULL, &l) != DLOCK_ERR_CLOSED) << 0;
        bad |= (dlock_inspect(c, "fork", &h) != DLOCK_ERR_CLOSED) << 1;
        bad |= (dlock_extend(held, 5000) != DLOCK_ERR_CLOSED) << 2;
        bad |= (dlock_check(held) != DLOCK_ERR_CLOSED) << 3;
        bad |= (dlock_release(held) != DLOCK_ERR_CLOSED) << 4;
        _exit(bad);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    printf("INFO fork child failures bitmask: 0x%x\n", WEXITSTATUS(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* The child touched nothing of ours: the lock is still held, the client works. */
    char key[64];
    it_key(key, sizeof key, "fork");
    assert_int_equal(it_exists(&it_srv, key), 1);
    assert_int_equal(dlock_check(held), DLOCK_OK);
    assert_int_equal(dlock_release(held), DLOCK_OK);
    it_key(key, sizeof key, "fork-child");
    assert_int_equal(it_exists(&it_srv, key), 0);
    dlock_client_free(c);
}

/* ---- authentication ---------------------------------------------------------- */

static dh_server g_auth;

static int setup_auth(void **state)
{
    (void)state;
    const char *const args[] = {"--requirepass", "pw", NULL};
    assert_int_equal(dh_server_start(&g_auth, args), 0);
    redisReply *r = dh_cmd(&g_auth, "ACL SETUSER alice on >alicepw ~* &* +@all");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    /* bob may connect and read INFO, but may not run scripts. */
    r = dh_cmd(&g_auth, "ACL SETUSER bob on >bobpw ~* &* +@all -eval -evalsha -script");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    return 0;
}

static int teardown_auth(void **state)
{
    (void)state;
    dh_server_stop(&g_auth);
    return 0;
}

/* Acquire and release on url (and cfg.password), returning the acquire's code. */
static int try_auth(const char *userpass, const char *cfg_password)
{
    char url[256];
    snprintf(url, sizeof url, "redis://%s127.0.0.1:%d", userpass, g_auth.port);
    dlock_config cfg = {0};
    cfg.timeout_ms = 500;
    cfg.password = cfg_password;
    dlock_client *c = it_client_cfg(url, &cfg);
    dlock_lock *l = SENTINEL(l);
    int rc = dlock_acquire(c, "auth", NULL, &l);
    printf("INFO auth '%s' cfg.password=%s -> %s: %s\n", userpass,
           cfg_password ? cfg_password : "(null)", dlock_errname(rc), dlock_errmsg());
    if (rc == DLOCK_OK)
        assert_int_equal(dlock_release(l), DLOCK_OK);
    else
        assert_null(l);
    dlock_client_free(c);
    return rc;
}

static void auth_codes(void **state)
{
    (void)state;
    assert_int_equal(try_auth("", NULL), DLOCK_ERR_AUTH);          /* none: -NOAUTH */
    assert_int_equal(try_auth(":wrong@", NULL), DLOCK_ERR_AUTH);   /* -WRONGPASS */
    assert_int_equal(try_auth("", "wrong"), DLOCK_ERR_AUTH);       /* through cfg */
    assert_int_equal(try_auth(":pw@", NULL), DLOCK_OK);            /* in the URL */
    assert_int_equal(try_auth("", "pw"), DLOCK_OK);                /* through cfg */
    assert_int_equal(try_auth(":pw@", "wrong"), DLOCK_OK);         /* the URL wins */
    assert_int_equal(try_auth("alice:alicepw@", NULL), DLOCK_OK);  /* ACL user */
    assert_int_equal(try_auth("alice:pw@", NULL), DLOCK_ERR_AUTH); /* wrong for alice */
    assert_int_equal(try_auth("mallory:alicepw@", NULL), DLOCK_ERR_AUTH);
    assert_int_equal(try_auth("bob:bobpw@", NULL), DLOCK_ERR_AUTH); /* -NOPERM on scripts */
    assert_int_equal(try_auth("al%69ce:alicepw@", NULL), DLOCK_OK); /* percent-encoded */
}

/* A server at its maxclients answers a new connection's first command with "-ERR max
 * number of clients reached" and closes it: a server that cannot serve now, not a
 * protocol error and not a refused password (with a password, the refusal answers the
 * AUTH). Once a client leaves, the same client is served. */
static void max_clients_is_unavailable(void **state)
{
    (void)state;
    static const char *const with_pw[] = {"--maxclients", "1", "--requirepass", "mcpw", NULL};
    static const char *const without[] = {"--maxclients", "1", NULL};
    const char *const *args[] = {without, with_pw};
    for (int k = 0; k < 2; k++) {
        dh_server s;
        assert_int_equal(dh_server_start(&s, args[k]), 0);
        redisContext *taken = dh_connect(&s); /* the one slot */
        assert_non_null(taken);
        dlock_config cfg;
        it_config_init(&cfg);
        cfg.password = k == 1 ? "mcpw" : NULL;
        dlock_client *c = it_client_cfg(s.url, &cfg);
        dlock_lock *l = NULL;
        int rc = dlock_acquire(c, "mc", NULL, &l);
        if (rc != DLOCK_ERR_UNAVAILABLE || strstr(dlock_errmsg(), "max number of clients") == NULL)
            fail_msg("%s: %s (%s)", k ? "with a password" : "without", dlock_errname(rc),
                     dlock_errmsg());
        redisFree(taken);
        dh_sleep_ms(50);
        assert_int_equal(dlock_acquire(c, "mc", NULL, &l), DLOCK_OK);
        assert_int_equal(dlock_release(l), DLOCK_OK);
        dlock_client_free(c);
        dh_server_stop(&s);
    }
}

/* ---- servers that are down, paused or gone ---------------------------------- */

static dlock_client *timed_client(int64_t *bound_ms)
{
    dlock_config cfg = {0};
    cfg.timeout_ms = it_timeout_ms();
    cfg.connect_timeout_ms = 200 * dh_slack();
    *bound_ms = (cfg.timeout_ms + cfg.connect_timeout_ms) * dh_slack();
    return it_client_cfg(it_srv.url, &cfg);
}

static void server_down(void **state)
{
    (void)state;
    int64_t bound;
    dlock_client *c = timed_client(&bound);
    dh_server_stop(&it_srv); /* nothing listens on the port any more */
    dlock_lock *l = SENTINEL(l);
    int64_t t0 = dh_now_ms();
    int rc = dlock_acquire(c, "down", NULL, &l);
    int64_t took = dh_now_ms() - t0;
    it_show("acquire on a stopped server", rc);
    printf("FIG down_acquire_ms %lld ms\n", (long long)took);
    assert_true(rc == DLOCK_ERR_IO || rc == DLOCK_ERR_TIMEOUT);
    assert_null(l);
    assert_true(took <= bound);

    /* A waiting acquire on a dead server ends at its deadline with the server's
     * error, never BUSY (nobody refused us). */
    dlock_opts o = {0};
    o.wait_ms = 300;
    t0 = dh_now_ms();
    rc = dlock_acquire(c, "down", &o, &l);
    took = dh_now_ms() - t0;
    it_show("waiting acquire on a stopped server", rc);
    printf("FIG down_wait300_ms %lld ms\n", (long long)took);
    assert_true(rc == DLOCK_ERR_IO || rc == DLOCK_ERR_TIMEOUT);
    assert_true(took <= 300 * dh_slack() + bound);
    dlock_client_free(c);
}

static void server_paused(void **state)
{
    (void)state;
    int64_t bound;
    dlock_client *c = timed_client(&bound);
    /* Connect first, so that the pause hits a command and not the connect. */
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "paused", &h), DLOCK_OK);

    dh_server_pause(&it_srv);
    dlock_opts o = {0};
    o.ttl_ms = 5000;
    dlock_lock *l = SENTINEL(l);
    int64_t t0 = dh_now_ms();
    int rc = dlock_acquire(c, "paused", &o, &l);
    int64_t took = dh_now_ms() - t0;
    it_show("acquire on a paused server", rc);
    printf("FIG paused_acquire_ms %lld ms\n", (long long)took);
    assert_int_equal(rc, DLOCK_ERR_TIMEOUT);
    assert_null(l);
    /* The per-node deadline, plus a margin for the scheduler. */
    assert_true(took <= (it_timeout_ms() + 100) * dh_slack());

    /* Still paused: inspect times out too, and does not wait longer. */
    t0 = dh_now_ms();
    rc = dlock_inspect(c, "other", &h);
    took = dh_now_ms() - t0;
    printf("FIG paused_inspect_ms %lld ms\n", (long long)took);
    assert_true(rc == DLOCK_ERR_TIMEOUT || rc == DLOCK_ERR_IO);
    assert_true(took <= bound + 100 * dh_slack());

    dh_server_resume(&it_srv);
    /* Works again, on a name the timed-out attempt never touched. */
    l = it_acquire(c, "after-pause", 2000);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    /* What became of the timed-out attempt's key: the clean-up release was sent, not
     * awaited, so whether it landed after the acquire is shown, not asserted. */
    dh_sleep_ms(100);
    char key[64];
    it_key(key, sizeof key, "paused");
    printf("INFO after resume, key of the timed-out acquire: exists=%lld pttl=%lld\n",
           it_exists(&it_srv, key), it_pttl(&it_srv, key));
    assert_int_equal(dlock_inspect(c, "paused", &h), DLOCK_OK);
    dlock_client_free(c);
}

static void all_servers_gone(void **state)
{
    (void)state;
    int64_t bound;
    dlock_client *c = timed_client(&bound);
    dlock_lock *l1 = it_acquire(c, "gone1", 10000);
    dlock_lock *l2 = it_acquire(c, "gone2", 10000);
    dlock_lock *l3 = it_acquire(c, "gone3", 10000);
    dh_server_kill(&it_srv);

    int64_t t0 = dh_now_ms();
    int rc = dlock_extend(l1, 5000);
    it_show("extend with the server gone", rc);
    assert_int_not_equal(rc, DLOCK_OK);
    rc = dlock_check(l1);
    it_show("check with the server gone", rc);
    assert_int_not_equal(rc, DLOCK_OK);
    dlock_holder h;
    rc = dlock_inspect(c, "gone1", &h);
    it_show("inspect with the server gone", rc);
    assert_true(rc == DLOCK_ERR_IO || rc == DLOCK_ERR_TIMEOUT);
    dlock_lock *l = SENTINEL(l);
    rc = dlock_acquire(c, "gone4", NULL, &l);
    it_show("acquire with the server gone", rc);
    assert_true(rc == DLOCK_ERR_IO || rc == DLOCK_ERR_TIMEOUT);
    assert_null(l);
    rc = dlock_release(l1);
    it_show("release with the server gone", rc);
    assert_int_not_equal(rc, DLOCK_OK);
    assert_int_not_equal(rc, DLOCK_ERR_INVALID);
    assert_int_equal(dlock_lock_detach(l2), DLOCK_OK);
    printf("FIG gone_six_calls_ms %lld ms\n", (long long)(dh_now_ms() - t0));
    assert_true(dh_now_ms() - t0 <= 6 * bound);
    /* l3 is still attached: freeing the client must not block or crash. */
    (void)l3;
    t0 = dh_now_ms();
    dlock_client_free(c);
    printf("FIG gone_client_free_ms %lld ms\n", (long long)(dh_now_ms() - t0));
    assert_true(dh_now_ms() - t0 <= bound);
}

int main(void)
{
    const struct CMUnitTest args[] = {
        cmocka_unit_test(null_arguments),
        cmocka_unit_test(names),
        cmocka_unit_test(hostile_names_stay_apart),
        cmocka_unit_test(ttls),
        cmocka_unit_test(options_and_config),
        cmocka_unit_test(second_release_through_adopted_handle),
        cmocka_unit_test(malformed_urls),
        cmocka_unit_test(error_names_and_messages),
        cmocka_unit_test(huge_reply_is_refused),
        cmocka_unit_test(wrong_type_key),
        cmocka_unit_test(refused_select_takes_nothing),
        cmocka_unit_test(fork_child_gets_closed),
    };
    const struct CMUnitTest auth[] = {
        cmocka_unit_test(auth_codes),
        cmocka_unit_test(max_clients_is_unavailable),
    };
    /* Each test here gets a fresh server and stops it; the fixture only cleans up. */
    const struct CMUnitTest down[] = {
        cmocka_unit_test_setup_teardown(server_down, it_srv_setup, it_srv_teardown),
        cmocka_unit_test_setup_teardown(server_paused, it_srv_setup, it_srv_teardown),
        cmocka_unit_test_setup_teardown(all_servers_gone, it_srv_setup, it_srv_teardown),
    };
    int failed = cmocka_run_group_tests_name("errors", args, it_srv_setup, it_srv_teardown);
    failed += cmocka_run_group_tests_name("auth", auth, setup_auth, teardown_auth);
    failed += cmocka_run_group_tests_name("down", down, NULL, NULL);
    return failed ? 1 : 0;
}
