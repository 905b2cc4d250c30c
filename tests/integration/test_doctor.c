/*
 * test_doctor.c: `dlock doctor` against real redis-server processes set up the ways
 * it must judge: eviction on, persistence off and on, a replica, a password, an ACL
 * user without INFO, a server down, TLS with a CA that does not sign its certificate;
 * and against a dlockd, which is no lock server. What a script relies on is checked exactly: the
 * exit status (0 nothing threatens safety, 1 a risk, 64 usage), one line per finding
 * naming the server, and JSON that parses. Its rules over facts no server here can
 * give (an old Redis, skewed clocks) are unit-tested in test_doctor_judge.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static dh_server durable, evicting, plain[3], replica, locked, secured;

static int group_setup(void **state)
{
    (void)state;
    static const char *const aof[] = {"--appendonly", "yes", "--appendfsync", "always", NULL};
    static const char *const lru[] = {"--appendonly",
                                      "yes",
                                      "--appendfsync",
                                      "always",
                                      "--maxmemory",
                                      "100mb",
                                      "--maxmemory-policy",
                                      "allkeys-lru",
                                      NULL};
    static const char *const pw[] = {
        "--requirepass", "doctor-secret", "--appendonly", "yes", "--appendfsync", "always", NULL};
    if (dh_server_start(&durable, aof) != 0 || dh_server_start(&evicting, lru) != 0 ||
        dh_servers_start(plain, 3, NULL) != 0 || dh_server_start(&locked, pw) != 0)
        return -1;
    /* TLS with the test set's server certificate, signed by its CA "ca". */
    if (it_tls_setup(state) != 0)
        return -1;
    dh_server_tls t = {it_tls_file("server.crt"), it_tls_file("server.key"), it_tls_file("ca.crt"),
                       false};
    dh_server_opts o = {.args = aof, .tls = &t};
    if (dh_server_start_opts(&secured, &o) != 0)
        return -1;
    char of[64];
    snprintf(of, sizeof of, "%d", durable.port);
    const char *const rep[] = {"--replicaof", durable.host, of, NULL};
    return dh_server_start(&replica, rep);
}

static int group_teardown(void **state)
{
    (void)state;
    dh_server_stop(&durable);
    dh_server_stop(&evicting);
    dh_servers_stop(plain, 3);
    dh_server_stop(&replica);
    dh_server_stop(&locked);
    dh_server_stop(&secured);
    return it_tls_teardown(state);
}

/* Run `dlock doctor ARGS...` (NULL-terminated) against the comma-separated servers,
 * with DLOCK_PASSWORD set to password (NULL: removed). */
static void doctor(it_run *r, const char *servers, const char *password, ...)
{
    static char s_env[1024], p_env[128];
    snprintf(s_env, sizeof s_env, "DLOCK_SERVERS=%s", servers);
    snprintf(p_env, sizeof p_env, "DLOCK_PASSWORD=%s", password ? password : "");
    const char *const env[] = {s_env, password ? p_env : "DLOCK_PASSWORD", NULL};
    static const char *const pre[] = {"doctor", NULL};
    va_list ap;
    va_start(ap, password);
    it_cli_va(r, env, pre, ap);
    va_end(ap);
}

/* Exit `status`; and a line of stdout that holds every needle (up to a NULL). */
static void expect_line(const it_run *r, int status, ...)
{
    if (r->status != status)
        fail_msg("exit %d, want %d\nstdout: %s\nstderr: %s", r->status, status, r->out, r->err);
    va_list ap;
    const char *needles[8];
    int n = 0;
    va_start(ap, status);
    for (const char *s; n < 8 && (s = va_arg(ap, const char *)) != NULL;)
        needles[n++] = s;
    va_end(ap);
    for (const char *line = r->out; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        int k = 0;
        while (k < n && memmem(line, len, needles[k], strlen(needles[k])) != NULL)
            k++;
        if (k == n)
            return;
        line += len + (end != NULL);
    }
    fail_msg("no line of stdout holds all of \"%s\"...:\n%s", needles[0], r->out);
}

static int count_lines(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

static void healthy_server_is_ok(void **state)
{
    (void)state;
    it_run r;
    doctor(&r, durable.url, NULL, (const char *)NULL);
    expect_line(&r, 0, durable.url, ": ok: Redis ", "master", "noeviction", "AOF always", NULL);
    expect_line(&r, 0, "no risk found (1 server)", NULL);
    assert_int_equal(count_lines(r.out, "risk:"), 0);
}

static void eviction_is_a_risk(void **state)
{
    (void)state;
    it_run r;
    doctor(&r, evicting.url, NULL, (const char *)NULL);
    expect_line(&r, 1, evicting.url, "risk:", "allkeys-lru", "evict", "noeviction", NULL);
    expect_line(&r, 1, "1 risk found", NULL);
}

/* The launcher starts servers without AOF: alone, a restart hands a held lock to a
 * second holder; three of them vote, and restart voting covers it. */
static void persistence_off_depends_on_n(void **state)
{
    (void)state;
    it_run r;
    doctor(&r, plain[0].url, NULL, (const char *)NULL);
    expect_line(&r, 1, plain[0].url, "risk:", "appendonly no", "appendonly yes", NULL);
    char urls[512];
    dh_server_urls(plain, 3, urls, sizeof urls);
    doctor(&r, urls, NULL, (const char *)NULL);
    for (int i = 0; i < 3; i++)
        expect_line(&r, 0, plain[i].url, "note:", "appendonly no", "restart voting", NULL);
    expect_line(&r, 0, "no risk found (3 servers)", NULL);
}

static void replica_is_a_risk(void **state)
{
    (void)state;
    it_run r;
    doctor(&r, replica.url, NULL, (const char *)NULL);
    expect_line(&r, 1, replica.url, "risk:", "replica", "name the master", NULL);
}

/* A server down among reachable ones: its line says it cannot be asked, the others
 * are judged all the same. */
static void unreachable_server(void **state)
{
    (void)state;
    dh_server gone;
    assert_int_equal(dh_server_start(&gone, NULL), 0);
    char url[128];
    snprintf(url, sizeof url, "%s", gone.url);
    dh_server_stop(&gone);
    char urls[512];
    snprintf(urls, sizeof urls, "%s,%s,%s", durable.url, url, evicting.url);
    it_run r;
    doctor(&r, urls, NULL, (const char *)NULL);
    expect_line(&r, 1, url, "risk:", "cannot be asked", NULL);
    expect_line(&r, 1, durable.url, ": ok: ", NULL);
    expect_line(&r, 1, evicting.url, "allkeys-lru", NULL);
    expect_line(&r, 1, "2 risks found", NULL);
}

/* The password reaches the servers as for every command; a wrong one, or none, is a
 * server that cannot be asked, whose fix is the password (in the URL or
 * DLOCK_PASSWORD), not reachability; and the password never shows. */
static void password(void **state)
{
    (void)state;
    it_run r;
    doctor(&r, locked.url, "doctor-secret", (const char *)NULL);
    expect_line(&r, 0, locked.url, ": ok: ", NULL);
    doctor(&r, locked.url, "not-the-secret", (const char *)NULL);
    expect_line(&r, 1, locked.url, "risk:", "cannot be asked", "WRONGPASS",
                "Fix: set its password in the URL (redis://:PASSWORD@HOST:PORT", "DLOCK_PASSWORD",
                NULL);
    assert_null(strstr(r.out, "make it reachable"));
    assert_null(strstr(r.out, "not-the-secret"));
    assert_null(strstr(r.err, "not-the-secret"));
    /* No password at all: NOAUTH, the same fix. */
    doctor(&r, locked.url, NULL, (const char *)NULL);
    expect_line(&r, 1, locked.url, "risk:", "NOAUTH", "redis://:PASSWORD@HOST:PORT",
                "DLOCK_PASSWORD", NULL);
    assert_null(strstr(r.out, "make it reachable"));
}

/* A certificate this host cannot verify (signed by a CA other than the one given):
 * the fix names the CA parameter, cacert=, not reachability; a name its certificate
 * does not hold, sni=. With its CA, the server is judged as any other. */
static void unverified_certificate(void **state)
{
    (void)state;
    it_run r;
    doctor(&r, secured.url, NULL, "--cacert", it_tls_file("evil.crt"), (const char *)NULL);
    expect_line(&r, 1, secured.url, "risk:", "cannot be asked", "chain is not trusted",
                "Fix: give the CA that signed its certificate with cacert=FILE in the URL",
                "rediss://HOST:PORT?cacert=FILE", NULL);
    assert_null(strstr(r.out, "make it reachable"));
    doctor(&r, secured.url, NULL, "--cacert", it_tls_file("ca.crt"), "--sni", "other.test",
           (const char *)NULL);
    expect_line(&r, 1, secured.url, "risk:", "host name mismatch", "Fix: sni=NAME", NULL);
    doctor(&r, secured.url, NULL, "--cacert", it_tls_file("ca.crt"), (const char *)NULL);
    expect_line(&r, 0, secured.url, ": ok: ", "AOF always", NULL);
}

/* A dlockd answers INFO as a Redis 7.0.0 would, but it is a client of lock servers, not
 * one: refused as such (a risk, exit 1), with none of its facts passed as a server's,
 * while the real server listed beside it is judged as ever. */
static void dlockd_is_refused(void **state)
{
    (void)state;
    dt_daemon d;
    dt_start(&d, durable.url, (const char *)NULL);
    char url[64], urls[256];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", d.port);
    it_run r;
    doctor(&r, url, NULL, (const char *)NULL);
    expect_line(&r, 1, url, ": risk: is a dlockd", "not a lock server",
                "Fix: give dlock the Redis servers that dlockd uses", NULL);
    expect_line(&r, 1, "1 risk found", NULL);
    assert_null(strstr(r.out, ": ok:"));
    snprintf(urls, sizeof urls, "%s,%s", durable.url, url);
    doctor(&r, urls, NULL, "--json", (const char *)NULL);
    it_expect_status(&r, 1);
    assert_non_null(strstr(r.out, "\"error\":\"a dlockd (dlockd_version "));
    assert_non_null(strstr(r.out, "\"level\":\"risk\",\"kind\":\"dlockd\""));
    assert_non_null(strstr(r.out, "\"risks\":1,"));
    /* A lock command given dlockd's port fails with 76, a server that answered what no
     * lock server would, not 70 (an internal error), and points to doctor. */
    const char *const env[] = {NULL};
    it_cli(&r, env, NULL, "-s", url, "acquire", "-w", "0", "x", (const char *)NULL);
    it_expect_status(&r, 76);
    assert_non_null(strstr(r.err, "unknown command"));
    assert_non_null(strstr(r.err, "dlock doctor"));
    assert_int_equal(dt_stop(&d), 0);
}

/* An ACL user that may lock but not read INFO or CONFIG: nothing can be judged, which
 * is a note that says so, not a made-up risk, and never an "ok". */
static void info_refused(void **state)
{
    (void)state;
    redisReply *rr = dh_cmd(&locked, "AUTH doctor-secret");
    freeReplyObject(rr);
    rr = dh_cmd(&locked, "ACL SETUSER locker on >locker-pw ~* +@all -info -config");
    assert_non_null(rr);
    assert_int_not_equal(rr->type, REDIS_REPLY_ERROR);
    freeReplyObject(rr);
    char url[160];
    snprintf(url, sizeof url, "redis://locker:locker-pw@%s:%d", locked.host, locked.port);
    it_run r;
    doctor(&r, url, NULL, (const char *)NULL);
    expect_line(&r, 0, "note:", "INFO was refused", "unknown", "+info", NULL);
    expect_line(&r, 0, "no risk found (1 server), 1 check not made: facts unknown", NULL);
    assert_null(strstr(r.out, ": ok:"));
    assert_null(strstr(r.out, "locker-pw"));
}

/* The server's line says it is fine, with its clock want_ms (within 100 ms: an offset is
 * measured over a round trip) from this host's. */
static void expect_clock(const it_run *r, const char *url, double want_ms)
{
    expect_line(r, 0, url, ": ok: ", "clock ", NULL);
    const char *line = strstr(r->out, url);
    const char *clock = line != NULL ? strstr(line, "clock ") : NULL;
    assert_non_null(clock);
    double ms = strtod(clock + 6, NULL);
    if (ms < want_ms - 100 || ms > want_ms + 100)
        fail_msg("%s: clock %.1f ms, not %.0f:\n%s", url, ms, want_ms, r->out);
}

/* Three servers, one of them on a clock of its own (libfaketime): 10 s apart is more
 * than a tenth of a 30 s lease, and less than a tenth of a 5 min one; a step of that
 * clock while it runs is seen by the next doctor. */
static void clocks_apart(void **state)
{
    (void)state;
    dh_server s[3];
    dh_server_opts o = {
        .args = (const char *const[]){"--appendonly", "yes", "--appendfsync", "always", NULL}};
    assert_int_equal(dh_servers_start_opts(s, 2, &o), 0);
    o.clock = "+10s";
    assert_int_equal(dh_server_start_opts(&s[2], &o), 0);
    char urls[512];
    dh_server_urls(s, 3, urls, sizeof urls);
    it_run r;
    doctor(&r, urls, NULL, "-t", "30s", (const char *)NULL);
    expect_line(&r, 1, "servers: risk: the clocks of", s[2].url, " ms apart", NULL);
    /* An offset is measured over a round trip: 10 s to within it (9999.8 ms once under
     * the sanitizers), not to the tenth of a millisecond. */
    const char *risk = strstr(r.out, "the clocks of");
    const char *are = risk != NULL ? strstr(risk, " are ") : NULL;
    assert_non_null(are);
    double apart = strtod(are + 5, NULL);
    if (apart < 9900 || apart > 10100)
        fail_msg("the clocks measured %.1f ms apart, not 10 s:\n%s", apart, r.out);
    doctor(&r, urls, NULL, "-t", "5m", (const char *)NULL);
    expect_line(&r, 0, "no risk found (3 servers)", NULL);
    expect_clock(&r, s[2].url, 10000);
    assert_int_equal(dh_server_set_clock(&s[2], "-20s"), 0);
    doctor(&r, urls, NULL, "-t", "5m", (const char *)NULL);
    expect_clock(&r, s[2].url, -20000);
    dh_servers_stop(s, 3);
}

/* --json: one object that a JSON parser reads, with the findings and their count. */
static void json_output(void **state)
{
    (void)state;
    char urls[512];
    snprintf(urls, sizeof urls, "%s,%s,%s", durable.url, evicting.url, plain[0].url);
    it_run r;
    doctor(&r, urls, NULL, "--json", (const char *)NULL);
    it_expect_status(&r, 1);
    char py[9000];
    snprintf(py, sizeof py,
             "import json,sys\n"
             "d = json.loads(sys.argv[1])\n"
             "assert len(d['servers']) == 3, d\n"
             "assert d['servers'][0]['appendfsync'] == 'always', d\n"
             "assert d['servers'][1]['maxmemory_policy'] == 'allkeys-lru', d\n"
             "kinds = sorted(f['kind'] for f in d['findings'] if f['level'] == 'risk')\n"
             "assert kinds == ['eviction'], kinds\n"
             "assert d['risks'] == 1, d\n");
    const char *const argv[] = {"/usr/bin/python3", "-c", py, r.out, NULL};
    char out[256], err[2048];
    int st = dh_run(argv, NULL, out, sizeof out, err, sizeof err);
    if (st != 0)
        fail_msg("python3 refused the JSON (%d): %s\n%s", st, err, r.out);
}

static void usage_errors(void **state)
{
    (void)state;
    it_run r;
    doctor(&r, durable.url, NULL, "extra", (const char *)NULL);
    it_expect_status(&r, 64);
    doctor(&r, durable.url, NULL, "-t", "0", (const char *)NULL);
    it_expect_status(&r, 64);
    doctor(&r, durable.url, NULL, "-w", "1s", (const char *)NULL);
    it_expect_status(&r, 64);
    char dir[] = "/tmp/dlock-doctor-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char url[64];
    snprintf(url, sizeof url, "file://%s", dir);
    doctor(&r, url, NULL, (const char *)NULL);
    it_expect_status(&r, 64);
    assert_non_null(strstr(r.err, "file://"));
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(healthy_server_is_ok),
        cmocka_unit_test(eviction_is_a_risk),
        cmocka_unit_test(persistence_off_depends_on_n),
        cmocka_unit_test(replica_is_a_risk),
        cmocka_unit_test(unreachable_server),
        cmocka_unit_test(password),
        cmocka_unit_test(unverified_certificate),
        cmocka_unit_test(dlockd_is_refused),
        cmocka_unit_test(info_refused),
        cmocka_unit_test(clocks_apart),
        cmocka_unit_test(json_output),
        cmocka_unit_test(usage_errors),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
