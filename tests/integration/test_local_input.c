/*
 * test_local_input.c: what a file:///DIR client refuses, and where its names go: bad
 * URLs (a missing directory, none at all, a relative path, a host part, a list with a
 * server in it, a plain file, a bad percent-escape, a directory its user cannot write)
 * each refused with the reason and nothing created, a percent-encoded path taken as the
 * directory it decodes to; names of any bytes but NUL, none reaching outside the
 * directory and no two sharing a file; the calls only servers can answer, each refused
 * with its message. No server runs.
 *
 * Asserted exactly: every refusal and its message, the directory's entries, the holders.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dlock.h"
#include "itest.h"
#include "support.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- bad input ---------------------------------------------------------------- */

static void expect_client_refused(const char *servers, const char *needle)
{
    dlock_client *c = (dlock_client *)&c;
    int rc = dlock_client_new(servers, NULL, &c);
    if (rc != DLOCK_ERR_INVALID || strstr(dlock_errmsg(), needle) == NULL)
        fail_msg("%s: %s (%s), want DLOCK_ERR_INVALID with \"%s\"", servers, dlock_errname(rc),
                 dlock_errmsg(), needle);
    assert_null(c);
    printf("INFO %s: %s\n", servers, dlock_errmsg());
}

/* As nobody, in a forked child: the directory (0555, root's) must refuse the client,
 * and really be unwritable for that user (open(O_CREAT) fails), so that the refusal is
 * the library's reading of a real permission, which root would bypass. */
static int unwritable_as_nobody(void *arg)
{
    const char *d = arg;
    if (geteuid() == 0 && setuid(65534) != 0)
        return 80;
    char probe[700], u[700];
    snprintf(probe, sizeof probe, "%s/probe", d);
    int fd = open(probe, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EACCES)
        return 81; /* the setup does not deny writes: the test would prove nothing */
    snprintf(u, sizeof u, "file://%s", d);
    dlock_client *c;
    if (dlock_client_new(u, NULL, &c) != DLOCK_ERR_INVALID)
        return 82;
    if (strstr(dlock_errmsg(), d) == NULL || strstr(dlock_errmsg(), "not writable") == NULL)
        return 83;
    return 0;
}

static void bad_urls_refused(void **state)
{
    (void)state;
    char u[700], missing[600];
    snprintf(missing, sizeof missing, "%s/no-such-dir", it_local_dir);
    snprintf(u, sizeof u, "file://%s", missing);
    expect_client_refused(u, missing);
    assert_int_equal(access(missing, F_OK), -1); /* not created */
    expect_client_refused("file://", "no directory");
    expect_client_refused("file://relative/dir", "relative path");
    expect_client_refused("file://host/var/lock", "host part");
    expect_client_refused("file:/var/lock", "file:///absolute/path");
    snprintf(u, sizeof u, "file://%s,redis://127.0.0.1:6379", it_local_dir);
    expect_client_refused(u, "only server");
    snprintf(u, sizeof u, "redis://127.0.0.1:6379, file://%s", it_local_dir);
    expect_client_refused(u, "only server");
    char plain[600];
    snprintf(plain, sizeof plain, "%s/plain-file", it_local_dir);
    int fd = open(plain, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    close(fd);
    snprintf(u, sizeof u, "file://%s", plain);
    expect_client_refused(u, "Not a directory");
    expect_client_refused("file:///tmp%00x", "percent-escape");

    /* In /tmp, which every user can search (the test directory may not be). */
    char ro[64] = "/tmp/dlock-test-ro.XXXXXX";
    assert_non_null(mkdtemp(ro));
    assert_int_equal(chmod(ro, 0555), 0);
    pid_t pid = it_local_child(unwritable_as_nobody, ro);
    int st = it_local_wait_exit(pid);
    rmdir(ro);
    assert_int_equal(st, 0);

    /* A percent-encoded path is the directory it decodes to. */
    char spaced[600];
    snprintf(spaced, sizeof spaced, "%s/with space", it_local_dir);
    assert_int_equal(mkdir(spaced, 0755), 0);
    snprintf(u, sizeof u, "file://%s/with%%20space", it_local_dir);
    dlock_client *c;
    assert_int_equal(dlock_client_new(u, NULL, &c), DLOCK_OK);
    dlock_release(it_local_take(c, "x", 0));
    char path[700];
    snprintf(path, sizeof path, "%s/x.lock", spaced);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(dlock_fenced_set(c, "k", 1, "v", 1), DLOCK_ERR_INVALID);
    assert_non_null(strstr(dlock_errmsg(), "needs a Redis server"));
    dlock_client_free(c);
}

/* Entries of d, or -1. */
static int count_entries(const char *d)
{
    DIR *dp = opendir(d);
    if (dp == NULL)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dp)) != NULL)
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(dp);
    return n;
}

/* Names are any bytes but NUL: none may reach outside the directory, and no two may
 * share a file (each is held at the same time as all the others). */
static void names_stay_inside(void **state)
{
    (void)state;
    char nd[600];
    snprintf(nd, sizeof nd, "%s/names", it_local_dir);
    assert_int_equal(mkdir(nd, 0755), 0);
    char u[700];
    snprintf(u, sizeof u, "file://%s", nd);
    dlock_client *c;
    assert_int_equal(dlock_client_new(u, NULL, &c), DLOCK_OK);
    static char long_a[DLOCK_NAME_MAX + 1], long_b[DLOCK_NAME_MAX + 1], slashes[DLOCK_NAME_MAX + 1];
    memset(long_a, 'a', DLOCK_NAME_MAX);
    memcpy(long_b, long_a, sizeof long_b);
    long_b[DLOCK_NAME_MAX - 1] = 'b'; /* differs in its last byte only */
    memset(slashes, '/', DLOCK_NAME_MAX);
    const char *names[] = {"..",     ".",    "../escape", "a/b",         "/etc/passwd", "%2E%2E",
                           "%2F",    "x~y",  "x.lock",    "x",           "\xff\x01\n",  " ",
                           long_a,   long_b, slashes,     "a%2Fb",       "A",           "a",
                           "a.lock", "-",    "_",         "\xe2\x82\xac"};
    enum { N = sizeof names / sizeof names[0] };
    int parent_before = count_entries(it_local_dir);
    dlock_lock *held[N];
    for (int i = 0; i < N; i++)
        held[i] = it_local_take(c, names[i], 0);
    assert_int_equal(count_entries(nd), N);
    assert_int_equal(count_entries(it_local_dir), parent_before);
    DIR *dp = opendir(nd);
    struct dirent *de;
    while ((de = readdir(dp)) != NULL) {
        assert_true(strlen(de->d_name) < 255);
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            assert_int_equal(de->d_type, DT_REG);
    }
    closedir(dp);
    for (int i = 0; i < N; i++) {
        dlock_holder h;
        assert_int_equal(dlock_inspect(c, names[i], &h), DLOCK_OK);
        assert_string_equal(h.token, dlock_token(held[i]));
        assert_int_equal(dlock_release(held[i]), DLOCK_OK);
    }
    dlock_client_free(c);
}

/* ---- what only servers do ------------------------------------------------------ */

/* rc must be DLOCK_ERR_INVALID with exactly msg. */
static void expect_refusal(const char *call, int rc, const char *msg)
{
    if (rc != DLOCK_ERR_INVALID || strcmp(dlock_errmsg(), msg) != 0)
        fail_msg("%s: %s (%s), want DLOCK_ERR_INVALID with \"%s\"", call, dlock_errname(rc),
                 dlock_errmsg(), msg);
}

/* Each call a file:// client cannot make is refused with its own message, before the
 * checks of its later arguments (fenced_set's key, probe's n); the calls in steps refuse
 * too, a release's freeing its handle. dlock_break_last answers "no record". */
static void server_calls_refused(void **state)
{
    (void)state;
    dlock_client *c = it_local_client();
    assert_int_equal(dlock_client_nservers(c), 1);
    expect_refusal("fenced_set", dlock_fenced_set(c, NULL, 0, NULL, 0),
                   "dlock_fenced_set needs a Redis server: a file:// client keeps no register "
                   "(check fences in the resource with dlock_fence_admit)");
    dlock_server_facts facts;
    expect_refusal("probe", dlock_probe(c, &facts, 0), "a file:// client has no server to ask");
    expect_refusal("ping", dlock_ping(c, &facts, 0), "a file:// client has no server to ask");
    dlock_stock_info si;
    expect_refusal("stock_set", dlock_stock_set(c, "sku", 1, &si),
                   "the stock needs a Redis server: a file:// client has none");
    const char *no_election = "leader election needs Redis servers, not a file:// directory";
    dlock_lock *lead = NULL;
    expect_refusal("elect", dlock_elect(c, "e", NULL, &lead), no_election);
    assert_null(lead);
    dlock_leader_info li;
    expect_refusal("leader", dlock_leader(c, "e", &li), no_election);
    dlock_observer *o = NULL;
    expect_refusal("observe", dlock_observe(c, "e", NULL, NULL, &o), no_election);
    assert_null(o);
    dlock_break_info bi;
    expect_refusal("break", dlock_break(c, "b", NULL, &bi),
                   "a file:// lock cannot be broken from another process: its holder keeps it "
                   "until it exits (the kernel then frees it)");
    memset(&bi, 0xff, sizeof bi);
    assert_int_equal(dlock_break_last(c, "b", &bi), DLOCK_OK);
    assert_int_equal(bi.broken, 0);
    dlock_pending *p = (dlock_pending *)&p;
    expect_refusal("acquire_start", dlock_acquire_start(c, "s", NULL, &p),
                   "a file:// client waits on its calling thread: use dlock_acquire");
    assert_null(p);
    dlock_lock *l = it_local_take(c, "s", 0);
    expect_refusal("release_start", dlock_release_start(l, &p),
                   "a file:// client releases on its calling thread: use dlock_release");
    /* The refused release freed the handle, and with it the lock. */
    dlock_release(it_local_take(c, "s", 0));
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_urls_refused),
        cmocka_unit_test(names_stay_inside),
        cmocka_unit_test(server_calls_refused),
    };
    return cmocka_run_group_tests(tests, it_local_setup, it_local_teardown);
}
