/*
 * protocol.c: the fixture of the protocol-fault scenarios (protocol.h): servers behind
 * fault relays, a client through them, and the checks those tests share.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"
#include "protocol.h"

#include <stdlib.h>

dh_server pr_srv[3];
fr_relay *pr_relay[3];
dlock_client *pr_c;
static it_log g_log;

int64_t pr_timeout_ms(void)
{
    return it_timeout_ms();
}

int64_t pr_connect_ms(void)
{
    return 1000 * dh_slack();
}

/* The bound every call on a warm connection must keep: its deadline plus 100 ms. */
int64_t pr_call_bound_ms(void)
{
    return (pr_timeout_ms() + 100) * dh_slack();
}

static dlock_client *client_for(const char *urls)
{
    dlock_config cfg = {0};
    cfg.timeout_ms = pr_timeout_ms();
    cfg.connect_timeout_ms = pr_connect_ms();
    cfg.log = it_log_cb;
    cfg.log_user = &g_log;
    return it_client_cfg(urls, &cfg);
}

int pr_setup_one(void **state)
{
    (void)state;
    it_log_init(&g_log);
    assert_int_equal(dh_server_start(&pr_srv[0], NULL), 0);
    pr_relay[0] = fr_start(pr_srv[0].port);
    assert_non_null(pr_relay[0]);
    pr_c = client_for(fr_url(pr_relay[0]));
    return 0;
}

int pr_setup_three(void **state)
{
    (void)state;
    it_log_init(&g_log);
    char urls[600];
    assert_int_equal(fr_cluster_start(3, pr_srv, pr_relay, urls, sizeof urls), 0);
    pr_c = client_for(urls);
    return 0;
}

int pr_teardown_all(void **state)
{
    (void)state;
    dlock_client_free(pr_c);
    pr_c = NULL;
    fr_cluster_stop(3, pr_srv, pr_relay);
    return 0;
}

/* Each test starts with no fault and a warm connection (handshake done), so that a
 * rule on EVALSHA meets the call under test and nothing else. */
int pr_clean(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++)
        if (pr_relay[i] != NULL)
            fr_pass(pr_relay[i]);
    dlock_holder h;
    int rc = dlock_inspect(pr_c, "warm", &h);
    if (rc != DLOCK_OK)
        rc = dlock_inspect(pr_c, "warm", &h); /* a connection left broken by a test */
    assert_int_equal(rc, DLOCK_OK);
    return 0;
}

/* Wait up to 500 ms (times the slack) for key to be gone from server s. Returns how
 * long it took, or -1 if it is still there. */
int64_t pr_key_gone_ms(dh_server *s, const char *key)
{
    int64_t t0 = dh_now_ms(), until = t0 + 500 * dh_slack();
    do {
        if (it_exists(s, key) == 0)
            return dh_now_ms() - t0;
        dh_sleep_ms(5);
    } while (dh_now_ms() < until);
    return -1;
}

int pr_acquire(dlock_client *c, const char *name, dlock_lock **l)
{
    dlock_opts o = {0};
    o.ttl_ms = PR_TTL_MS;
    return dlock_acquire(c, name, &o, l);
}

/* The client works: a full cycle, with replies that match their commands (the
 * server holds our token, inspect reports it, release removes it). */
void pr_assert_works(dlock_client *c, dh_server *s, const char *name)
{
    dlock_lock *l = NULL;
    int rc = pr_acquire(c, name, &l);
    if (rc != DLOCK_OK)
        it_show("works?", rc);
    assert_int_equal(rc, DLOCK_OK);
    char key[128];
    it_key(key, sizeof key, name);
    char *v = it_get(s, key);
    assert_non_null(v);
    assert_memory_equal(v, dlock_token(l), DLOCK_TOKEN_LEN);
    free(v);
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, name, &h), DLOCK_OK);
    assert_int_equal(h.held, 1);
    assert_string_equal(h.token, dlock_token(l));
    assert_int_equal(h.fence, dlock_fence(l));
    assert_int_equal(dlock_check(l), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(it_exists(s, key), 0);
}
