/*
 * test_lifecycle.c: the process parts of scenario 16 of the fault suite (docs/testing.md): the
 * library in a process that runs out of descriptors, that forks while it holds a lock,
 * and that frees its client while renewals run. (Allocation failures, the other part of
 * 16, are in test_alloc.c.)
 *
 *   - fd limit: a worker process with RLIMIT_NOFILE 32 and 3 lock servers opens clients
 *     until descriptors run out: every call fails cleanly (an unavailability error
 *     naming the cause, no crash, no hang), and once the clients are freed its fds and
 *     threads are back to the baseline and locking works again;
 *   - fork after acquire: the child gets DLOCK_ERR_CLOSED from release, extend, check
 *     and acquire, and its dlock_client_free leaves the parent's lock alone: every
 *     server that held the parent's token before the fork holds it after the child
 *     is gone (renewed past its ttl), and the lock releases normally. Also when
 *     another thread of the parent held the client's mutex at the moment of fork();
 *   - the child's dlock_client_free changes nothing of the sockets it shares with the
 *     parent: it drops its descriptors, and never sets an option on them (an abortive
 *     close's SO_LINGER set by the child would turn the parent's later close into a
 *     reset that drops what the parent still had queued);
 *   - free with renewals running: dlock_client_free while the renewal thread is about
 *     to send a batch (held there by the BEFORE_RENEW pause point), 20 times: every
 *     key released on every node, fds and threads back to the baseline, RSS flat.
 *     (Leaks of memory are the ASan build's job: this test runs in make test-asan.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"
#include "internal.h" /* the pause hook, and the client's mutex for the fork case */

#include "history.h"
#include "workers.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static dlock_client *client(void)
{
    dlock_config cfg;
    it_config_init(&cfg);
    return it_client_cfg(wk_urls, &cfg);
}

/* Fork; the child runs fn and leaves with its result, at most limit_s seconds later
 * (SIGALRM otherwise: a hang shows as 128 + SIGALRM). */
static int in_child(int (*fn)(void *), void *arg, unsigned limit_s)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm(limit_s);
        int rc = fn(arg);
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    assert_true(pid > 0);
    return wk_reap(pid, (limit_s + 5) * 1000);
}

/* ---- fd limit ------------------------------------------------------------------- */

#define FD_CLIENTS 12

/* Whether a failure is one a caller can handle: an unavailability error, not a
 * misuse or an internal error. */
static bool clean_error(int rc)
{
    return rc == DLOCK_ERR_IO || rc == DLOCK_ERR_NOQUORUM || rc == DLOCK_ERR_TIMEOUT ||
           rc == DLOCK_ERR_NOMEM || rc == DLOCK_ERR_UNAVAILABLE;
}

static int fd_limit_child(void *arg)
{
    (void)arg;
    /* The soft limit only: valgrind refuses to move the hard one. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
        perror("getrlimit");
        return 10;
    }
    rl.rlim_cur = 32;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
        perror("setrlimit");
        return 10;
    }
    dlock_config cfg;
    it_config_init(&cfg);
    /* A warm-up cycle first: one-time state (a sanitizer's helper thread, say) goes
     * into the baseline. */
    dlock_client *warm = NULL;
    dlock_lock *wl = NULL;
    dlock_opts wo = {0};
    wo.ttl_ms = 1000;
    wo.auto_renew = 1;
    if (dlock_client_new(wk_urls, &cfg, &warm) != DLOCK_OK ||
        dlock_acquire(warm, "fdlimit-warmup", &wo, &wl) != DLOCK_OK)
        return 9;
    dlock_release(wl);
    dlock_client_free(warm);
    wk_stats before, after;
    wk_proc_stats(&before);
    dlock_client *c[FD_CLIENTS] = {0};
    dlock_lock *l[FD_CLIENTS] = {0};
    int ok = 0, failed = 0, emfile = 0;
    for (int i = 0; i < FD_CLIENTS; i++) {
        if (dlock_client_new(wk_urls, &cfg, &c[i]) != DLOCK_OK)
            return 11;
        char name[32];
        snprintf(name, sizeof name, "fdlimit-%d", i);
        dlock_opts o = {0};
        o.ttl_ms = 5000;
        o.auto_renew = 1;
        int rc = dlock_acquire(c[i], name, &o, &l[i]);
        if (rc == DLOCK_OK) {
            ok++;
            continue;
        }
        failed++;
        emfile += strstr(dlock_errmsg(), "open files") != NULL ||
                  strstr(dlock_errmsg(), "EMFILE") != NULL;
        printf("INFO fd limit: client %d: %s: %s\n", i, dlock_errname(rc), dlock_errmsg());
        if (!clean_error(rc))
            return 12;
    }
    /* At the limit: a lost fd, a blocking wait (its subscriber needs sockets and an
     * eventfd), an inspect: each works or fails cleanly. */
    int held = -1;
    for (int i = 0; i < FD_CLIENTS && held < 0; i++)
        if (l[i] != NULL)
            held = i;
    if (held < 0)
        return 13;
    int lfd = dlock_lost_fd(l[held]);
    printf("INFO fd limit: dlock_lost_fd -> %d (%s)\n", lfd, lfd < 0 ? dlock_errmsg() : "");
    dlock_opts w = {0};
    w.ttl_ms = 1000;
    w.wait_ms = 200;
    dlock_lock *lw = NULL;
    char held_name[32];
    snprintf(held_name, sizeof held_name, "fdlimit-%d", held);
    int rc = dlock_acquire(c[FD_CLIENTS - 1], held_name, &w, &lw);
    printf("INFO fd limit: blocking wait at the limit -> %s (%s)\n", dlock_errname(rc),
           dlock_errmsg());
    if (rc != DLOCK_ERR_BUSY && !clean_error(rc))
        return 14;
    dlock_holder h;
    rc = dlock_inspect(c[FD_CLIENTS - 1], held_name, &h);
    printf("INFO fd limit: inspect at the limit -> %s\n", dlock_errname(rc));
    if (rc != DLOCK_OK && !clean_error(rc))
        return 15;
    printf("FIG fd_limit_locks_held %d count\n", ok);
    printf("FIG fd_limit_clean_failures %d count\n", failed);
    if (failed == 0 || emfile == 0)
        return 16; /* the limit was never reached, or its cause not named */
    for (int i = FD_CLIENTS - 1; i >= 0; i--)
        dlock_client_free(c[i]); /* releases what each held */
    wk_proc_stats_after(&before, &after);
    printf("INFO fd limit: fds %d -> %d, threads %d -> %d\n", before.fds, after.fds, before.threads,
           after.threads);
    if (after.fds != before.fds || after.threads != before.threads)
        return 17;
    /* With descriptors back, locking works again. */
    dlock_client *again = NULL;
    if (dlock_client_new(wk_urls, &cfg, &again) != DLOCK_OK)
        return 18;
    dlock_lock *la = NULL;
    dlock_opts o = {0};
    o.ttl_ms = 1000;
    if (dlock_acquire(again, "fdlimit-after", &o, &la) != DLOCK_OK || dlock_release(la) != DLOCK_OK)
        return 19;
    dlock_client_free(again);
    return 0;
}

static void test_fd_limit_32(void **state)
{
    (void)state;
    assert_int_equal(in_child(fd_limit_child, NULL, (unsigned)(20 * dh_slack())), 0);
    for (int i = 0; i < FD_CLIENTS; i++) {
        char name[32];
        snprintf(name, sizeof name, "fdlimit-%d", i);
        assert_int_equal(hist_keys_left(wk_srv, WK_NODES, name, 100), 0);
    }
}

/* ---- fork after acquire ---------------------------------------------------------- */

typedef struct fork_ctx {
    dlock_client *c;
    dlock_lock *l;
    bool release_first; /* the child releases its copy before freeing the client */
    const char *name;
} fork_ctx;

static int expect(const char *what, int got, int want)
{
    if (got == want)
        return 0;
    printf("INFO child: %s -> %s, expected %s (%s)\n", what, dlock_errname(got),
           dlock_errname(want), dlock_errmsg());
    return 1;
}

static int forked_child(void *arg)
{
    fork_ctx *x = arg;
    int bad = 0;
    bad += expect("extend", dlock_extend(x->l, 5000), DLOCK_ERR_CLOSED);
    bad += expect("check", dlock_check(x->l), DLOCK_ERR_CLOSED);
    bad += dlock_lost_fd(x->l) != -1;
    dlock_lock *other = NULL;
    bad += expect("acquire", dlock_acquire(x->c, "forked-other", NULL, &other), DLOCK_ERR_CLOSED);
    dlock_holder h;
    bad += expect("inspect", dlock_inspect(x->c, x->name, &h), DLOCK_ERR_CLOSED);
    bad += expect("fenced_set", dlock_fenced_set(x->c, "reg", 1, "x", 1), DLOCK_ERR_CLOSED);
    if (x->release_first)
        bad += expect("release", dlock_release(x->l), DLOCK_ERR_CLOSED); /* frees the copy */
    dlock_client_free(x->c); /* frees the copies; must release nothing of the parent's */
    /* A client of its own works, and sees the parent's lock held. */
    dlock_config cfg = {0};
    cfg.timeout_ms = it_timeout_ms();
    dlock_client *own = NULL;
    if (dlock_client_new(wk_urls, &cfg, &own) != DLOCK_OK)
        return 20;
    bad += expect("own acquire", dlock_acquire(own, x->name, NULL, &other), DLOCK_ERR_BUSY);
    dlock_client_free(own);
    return bad;
}

static void fork_after_acquire(bool mutex_held, bool release_first)
{
    dlock_client *c = client();
    dlock_opts o = {0};
    o.ttl_ms = 600;
    o.auto_renew = 1;
    dlock_lock *l = NULL;
    /* A name per case: a failed case leaves its lock held until it expires. */
    char name[32];
    snprintf(name, sizeof name, "forked-%d%d", mutex_held, release_first);
    /* Connect to every server first. On a client's first call a server still in its
     * handshake when the others have granted is left out of the round, and the lock
     * then lives on a quorum only: correct, but this test means to watch every copy. */
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, name, &h), DLOCK_OK);
    assert_int_equal(dlock_acquire(c, name, &o, &l), DLOCK_OK);
    char key[64], token[DLOCK_TOKEN_LEN + 1];
    it_key(key, sizeof key, name);
    memcpy(token, dlock_token(l), sizeof token);
    /* Which servers hold the token before the child acts: exactly these must still
     * hold it after (the child must not take it off any of them). */
    bool held_before[WK_NODES];
    int copies = 0;
    for (int i = 0; i < WK_NODES; i++) {
        char *v = it_get(&wk_srv[i], key);
        held_before[i] = v != NULL && memcmp(v, token, DLOCK_TOKEN_LEN) == 0;
        copies += held_before[i];
        free(v);
    }
    assert_true(copies >= 2);
    fork_ctx x = {c, l, release_first, name};
    if (mutex_held) {
        /* Another thread of the parent is inside the client (the renewal thread takes
         * this mutex every round) at the moment of fork(): the child inherits it
         * locked, with no thread to unlock it. */
        pthread_mutex_lock(&c->mu);
    }
    int st = in_child(forked_child, &x, (unsigned)(5 * dh_slack()));
    if (mutex_held)
        pthread_mutex_unlock(&c->mu);
    if (st == 128 + SIGALRM)
        printf("INFO fork%s: the child hung in the library (killed by SIGALRM)\n",
               mutex_held ? " with the client's mutex held" : "");
    assert_int_equal(st, 0);
    /* The parent's lock: intact, renewed past its ttl, released normally. */
    dh_sleep_ms(2 * 600);
    assert_int_equal(dlock_check(l), DLOCK_OK);
    for (int i = 0; i < WK_NODES; i++) {
        if (!held_before[i])
            continue;
        char *v = it_get(&wk_srv[i], key);
        if (v == NULL || memcmp(v, token, DLOCK_TOKEN_LEN) != 0)
            printf("INFO fork: server %d held the token before the fork, not after\n", i);
        assert_non_null(v);
        assert_memory_equal(v, token, DLOCK_TOKEN_LEN);
        free(v);
    }
    assert_int_equal(dlock_release(l), DLOCK_OK);
    assert_int_equal(hist_keys_left(wk_srv, WK_NODES, name, 100), 0);
    dlock_client_free(c);
}

static void test_fork_after_acquire(void **state)
{
    (void)state;
    fork_after_acquire(false, false);
}

/* The child releases its copy of the handle (DLOCK_ERR_CLOSED, and the copy is freed:
 * "dlock_release frees l, whatever it returns"), then frees the client, which frees
 * the copies of the handles still attached. The released copy must not be among them.
 * Only the ASan build sees a use of the freed copy (make test-asan). */
static void test_fork_release_then_free(void **state)
{
    (void)state;
    fork_after_acquire(false, true);
}

static void test_fork_with_client_mutex_held(void **state)
{
    (void)state;
    fork_after_acquire(true, false);
}

/* ---- the child and the sockets it shares ------------------------------------------ */

/* In the child: make every pooled connection look as if it had abandoned a reply,
 * the state in which a close is abortive (SO_LINGER 0), then free the client. Returns
 * how many connections were marked (the parent's pool holds one set of three). */
static int linger_child(void *arg)
{
    dlock_client *c = arg;
    int marked = 0;
    for (dlock__connset *s = c->pool; s != NULL; s = s->next)
        for (int i = 0; i < c->n; i++)
            if (s->conns[i].fd >= 0) {
                s->conns[i].skip = 1;
                marked++;
            }
    dlock_client_free(c);
    return marked == 3 ? 0 : 10 + marked;
}

static void test_fork_child_leaves_parent_sockets(void **state)
{
    (void)state;
    /* No renewal: the pool then holds exactly the set the acquire used. */
    dlock_client *c = client();
    dlock_lock *l = NULL;
    dlock_holder h;
    assert_int_equal(dlock_inspect(c, "forked-sockets", &h), DLOCK_OK);
    assert_int_equal(dlock_acquire(c, "forked-sockets", NULL, &l), DLOCK_OK);
    assert_int_equal(in_child(linger_child, c, (unsigned)(5 * dh_slack())), 0);
    for (dlock__connset *s = c->pool; s != NULL; s = s->next)
        for (int i = 0; i < c->n; i++) {
            struct linger lg = {0};
            socklen_t len = sizeof lg;
            assert_true(s->conns[i].fd >= 0);
            assert_int_equal(getsockopt(s->conns[i].fd, SOL_SOCKET, SO_LINGER, &lg, &len), 0);
            if (lg.l_onoff)
                printf("INFO fork: the child set SO_LINGER on the parent's socket to server %d\n",
                       i);
            assert_int_equal(lg.l_onoff, 0);
        }
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

/* ---- free with renewals running --------------------------------------------------- */

#define RENEW_LOCKS 20
#define CYCLES      20

static atomic_int g_in_renew;

/* The renewal thread is about to send a batch: say so, and stay a moment, so that
 * dlock_client_free lands in the middle of a round. */
static void hold_renewal(int point)
{
    if (point != DLOCK_HOOK_BEFORE_RENEW)
        return;
    atomic_store(&g_in_renew, 1);
    dh_sleep_ms(20);
}

static void renew_cycle(bool hooked)
{
    dlock_client *c = client();
    dlock_opts o = {0};
    o.ttl_ms = 90; /* renewed every 30 ms */
    o.auto_renew = 1;
    for (int i = 0; i < RENEW_LOCKS; i++) {
        char name[32];
        snprintf(name, sizeof name, "renewing-%d", i);
        dlock_lock *l = NULL;
        assert_int_equal(dlock_acquire(c, name, &o, &l), DLOCK_OK);
    }
    if (hooked) {
        atomic_store(&g_in_renew, 0);
        atomic_store(&dlock__test_hooks.pause, hold_renewal);
        int64_t until = dh_now_ms() + 2000 * dh_slack();
        while (!atomic_load(&g_in_renew) && dh_now_ms() < until)
            dh_sleep_ms(1);
        assert_true(atomic_load(&g_in_renew));
    } else {
        dh_sleep_ms(wk_rand(0, 60));
    }
    dlock_client_free(c); /* waits for the round, then releases all 20 */
    atomic_store(&dlock__test_hooks.pause, NULL);
    for (int i = 0; i < RENEW_LOCKS; i++) {
        char name[32];
        snprintf(name, sizeof name, "renewing-%d", i);
        assert_int_equal(hist_keys_left(wk_srv, WK_NODES, name, 0), 0);
    }
}

static void test_free_with_renewals_running(void **state)
{
    (void)state;
    renew_cycle(true); /* warm-up: one-time allocations go into the baseline */
    wk_stats before, after;
    wk_proc_stats(&before);
    for (int i = 0; i < CYCLES; i++)
        renew_cycle(i % 2 == 0);
    wk_proc_stats_after(&before, &after);
    printf("INFO free with renewals: fds %d -> %d, threads %d -> %d, RSS %ld -> %ld kB\n",
           before.fds, after.fds, before.threads, after.threads, before.rss_kb, after.rss_kb);
    printf("FIG free_with_renewals_rss_growth_kb %ld kB\n", after.rss_kb - before.rss_kb);
    assert_int_equal(after.fds, before.fds);
    assert_int_equal(after.threads, before.threads);
    assert_true(after.rss_kb - before.rss_kb < wk_rss_bound_kb());
}

int main(void)
{
    wk_seed("fault_lifecycle");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fd_limit_32),
        cmocka_unit_test(test_fork_after_acquire),
        cmocka_unit_test(test_fork_release_then_free),
        cmocka_unit_test(test_free_with_renewals_running),
        cmocka_unit_test(test_fork_with_client_mutex_held),
        cmocka_unit_test(test_fork_child_leaves_parent_sockets),
    };
    return cmocka_run_group_tests_name("fault_lifecycle", tests, wk_nodes_setup, wk_nodes_teardown);
}
