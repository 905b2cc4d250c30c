/*
 * test_tls_cli.c: the dlock command's TLS options (--cacert, --cacertdir, --cert, --key,
 * --sni, --insecure) against redis-servers with TLS, through the built command
 * ($DLOCK_CLI), with the certificates the test support makes (dh_tls_make_set).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <stdio.h>
#include <string.h>

/* Start s with TLS and the set's server certificate. */
static void start_tls(dh_server *s, bool auth_clients)
{
    dh_server_tls t = {it_tls_file("server.crt"), it_tls_file("server.key"), it_tls_file("ca.crt"),
                       auth_clients};
    dh_server_opts o = {.tls = &t};
    assert_int_equal(dh_server_start_opts(s, &o), 0);
}

static void cli_with_cacert(void **state)
{
    (void)state;
    dh_server s[2];
    start_tls(&s[0], false);
    start_tls(&s[1], true);
    const char *const *env = it_cli_env(&s[0]);
    it_run r;
    it_cli(&r, env, (const char *[]){"--cacert", it_tls_file("ca.crt"), NULL}, "acquire", "-t",
           "10s", "tls-cli", NULL);
    it_expect_status(&r, 0);
    char token[DLOCK_TOKEN_LEN + 1];
    assert_int_equal(sscanf(r.out, "%32s", token), 1);
    it_expect_holder(&s[0], "tls-cli", token);
    /* The flags are accepted after the command too. */
    it_cli(&r, env, NULL, "status", "tls-cli", "--cacert", it_tls_file("ca.crt"), NULL);
    it_expect_status(&r, 0);
    assert_non_null(strstr(r.out, "held by"));
    it_cli(&r, env, NULL, "release", "tls-cli", token, "--cacert", it_tls_file("ca.crt"), NULL);
    it_expect_status(&r, 0);
    /* Without the CA: refused as authentication is (77), the chain named. */
    it_cli(&r, env, NULL, "status", "tls-cli", NULL);
    it_expect_status(&r, 77);
    assert_non_null(strstr(r.err, "chain is not trusted"));
    /* A URL's own parameter wins over the flag. */
    char urls[400];
    snprintf(urls, sizeof urls, "%s?cacert=%s", s[0].url, it_tls_file("evil.crt"));
    it_cli(&r, env, (const char *[]){"-s", urls, "--cacert", it_tls_file("ca.crt"), NULL}, "status",
           "tls-cli", NULL);
    it_expect_status(&r, 77);
    /* --cacertdir, --sni and --insecure. */
    it_cli(&r, env, (const char *[]){"--cacertdir", it_tls_file("cadir"), NULL}, "status",
           "tls-cli", NULL);
    it_expect_status(&r, 0);
    it_cli(&r, env,
           (const char *[]){"--cacert", it_tls_file("ca.crt"), "--sni", "other.test", NULL},
           "status", "tls-cli", NULL);
    it_expect_status(&r, 77);
    assert_non_null(strstr(r.err, "host name mismatch"));
    it_cli(&r, env, (const char *[]){"--insecure", NULL}, "status", "tls-cli", NULL);
    it_expect_status(&r, 0);
    assert_non_null(strstr(r.err, "insecure=1"));
    /* A client certificate, and the usage errors. */
    env = it_cli_env(&s[1]);
    it_cli(&r, env,
           (const char *[]){"--cacert", it_tls_file("ca.crt"), "--cert", it_tls_file("client.crt"),
                            "--key", it_tls_file("client.key"), NULL},
           "status", "tls-cli", NULL);
    it_expect_status(&r, 0);
    it_cli(&r, env, (const char *[]){"--cacert", it_tls_file("ca.crt"), NULL}, "status", "tls-cli",
           NULL);
    it_expect_status(&r, 77);
    it_cli(&r, env, (const char *[]){"--cert", it_tls_file("client.crt"), NULL}, "status", "x",
           NULL);
    it_expect_status(&r, 64);
    assert_non_null(strstr(r.err, "--cert needs --key"));
    it_cli(&r, env, (const char *[]){"--cacert", "/nonexistent.pem", NULL}, "status", "x", NULL);
    it_expect_status(&r, 64);
    assert_non_null(strstr(r.err, "cacert /nonexistent.pem"));
    dh_server_stop(&s[0]);
    dh_server_stop(&s[1]);
}

/* dlock doctor over TLS: verification off is a risk of its own; a CA that does not
 * verify the server leaves it a server that cannot be asked, the chain named. */
static void doctor_over_tls(void **state)
{
    (void)state;
    dh_server s;
    start_tls(&s, false);
    const char *const *env = it_cli_env(&s);
    it_run r;
    it_cli(&r, env, (const char *[]){"--cacert", it_tls_file("ca.crt"), NULL}, "doctor", NULL);
    it_expect_status(&r, 1); /* the launcher's servers run without AOF */
    assert_null(strstr(r.out, "TLS without verification"));
    assert_non_null(strstr(r.out, "appendonly no"));
    it_cli(&r, env, (const char *[]){"--insecure", NULL}, "doctor", NULL);
    it_expect_status(&r, 1);
    assert_non_null(strstr(r.out, "risk: TLS without verification (insecure=1)"));
    it_cli(&r, env, (const char *[]){"--cacert", it_tls_file("evil.crt"), NULL}, "doctor", NULL);
    it_expect_status(&r, 1);
    assert_non_null(strstr(r.out, "cannot be asked"));
    assert_non_null(strstr(r.out, "chain is not trusted"));
    dh_server_stop(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cli_with_cacert),
        cmocka_unit_test(doctor_over_tls),
    };
    return cmocka_run_group_tests_name("tls_cli", tests, it_tls_setup, it_tls_teardown);
}
