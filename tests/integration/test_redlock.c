/*
 * test_redlock.c: locks over N independent masters (3 and 5 real redis-server
 * processes), under node crashes, pauses, restarts and refusals.
 *
 * What is asserted exactly: who gets the lock, error codes, keys left behind, fence
 * order, and the absence of overlapping critical sections. What is asserted with
 * DLOCK_TEST_SLACK: the liveness bounds the issue names (a call returns within its
 * per-node deadline). Other timings are printed as FIG lines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NMAX 5

static dh_server g_srv[NMAX];
static char g_urls[NMAX * 140];

/* Start n servers and build the comma-separated list of their URLs. */
static void start_nodes(int n)
{
    assert_int_equal(dh_servers_start(g_srv, n, NULL), 0);
    dh_server_urls(g_srv, n, g_urls, sizeof g_urls);
}

/* Stops the paused ones too (dh_server_stop resumes a server to stop it) and those a
 * test killed. */
static int teardown_nodes(void **state)
{
    (void)state;
    dh_servers_stop(g_srv, NMAX);
    memset(g_srv, 0, sizeof g_srv);
    return 0;
}

static int setup3(void **state)
{
    (void)state;
    start_nodes(3);
    return 0;
}

static int setup5(void **state)
{
    (void)state;
    start_nodes(5);
    return 0;
}

static dlock_client *client(int restart_voting, int fence_mode, int64_t max_lease_ms)
{
    dlock_config cfg;
    it_config_init(&cfg);
    cfg.restart_voting = restart_voting;
    cfg.fence_mode = fence_mode;
    cfg.max_lease_ms = max_lease_ms;
    return it_client_cfg(g_urls, &cfg);
}

static int try_acquire(dlock_client *c, const char *name, int64_t ttl_ms, dlock_lock **l)
{
    dlock_opts o = {0};
    o.ttl_ms = ttl_ms;
    int rc = dlock_acquire(c, name, &o, l);
    it_show(name, rc);
    return rc;
}

/* Wait up to 500 ms (times the slack) for a key to disappear from node i: the
 * clean-up release of a failed attempt is sent, not awaited. */
static bool key_gone(int i, const char *key)
{
    int64_t until = dh_now_ms() + 500 * dh_slack();
    do {
        if (it_exists(&g_srv[i], key) == 0)
            return true;
        dh_sleep_ms(5);
    } while (dh_now_ms() < until);
    return false;
}

/* ---- availability ------------------------------------------------------------ */

static void test_two_of_five_killed_still_locks(void **state)
{
    (void)state;
    dlock_client *c = client(0, 0, 0);
    it_warm_up(c, "warmup", 5000); /* connect to all five */
    dh_server_kill(&g_srv[0]);
    dh_server_kill(&g_srv[3]);

    dlock_lock *l = it_acquire(c, "two-down", 5000);
    assert_true(dlock_fence(l) > 0);
    assert_true(dlock_remaining_ms(l) > 4000);
    char key[64];
    it_key(key, sizeof key, "two-down");
    for (int i = 0; i < 5; i++)
        if (i != 0 && i != 3)
            assert_true(it_pttl(&g_srv[i], key) > 4000);
    assert_int_equal(dlock_extend(l, 8000), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    for (int i = 0; i < 5; i++)
        if (i != 0 && i != 3)
            assert_int_equal(it_exists(&g_srv[i], key), 0);
    dlock_client_free(c);
}

static void test_three_of_five_down_is_noquorum(void **state)
{
    (void)state;
    /* This client sees three nodes restart below; voting off keeps their grants
     * counting, since this test is about availability, not restarts. */
    dlock_client *c = client(DLOCK_RESTART_OFF, 0, 0);
    it_warm_up(c, "warmup", 5000);
    char key[64];
    it_key(key, sizeof key, "three-down");
    dlock_lock *l;

    /* Killed: connections are refused at once. */
    dh_server_kill(&g_srv[0]);
    dh_server_kill(&g_srv[1]);
    dh_server_kill(&g_srv[2]);
    int64_t t0 = dh_now_ms();
    int rc = try_acquire(c, "three-down", 5000, &l);
    int64_t took = dh_now_ms() - t0;
    printf("FIG noquorum_killed_ms %lld ms\n", (long long)took);
    assert_int_equal(rc, DLOCK_ERR_NOQUORUM);
    assert_null(l);
    assert_non_null(strstr(dlock_errmsg(), "of 5 servers answered, 3 needed"));
    /* Reconnecting to each dead node is bounded by the connect timeout. */
    assert_true(took <= (it_timeout_ms() + 1000) * dh_slack());
    assert_true(key_gone(3, key));
    assert_true(key_gone(4, key));

    /* Paused (the kernel accepts, nobody answers): bounded by the per-node deadline. */
    for (int i = 0; i < 3; i++)
        assert_int_equal(dh_server_restart(&g_srv[i]), 0);
    it_warm_up(c, "warmup", 5000);
    for (int i = 0; i < 3; i++)
        dh_server_pause(&g_srv[i]);
    t0 = dh_now_ms();
    rc = try_acquire(c, "three-down", 5000, &l);
    took = dh_now_ms() - t0;
    printf("FIG noquorum_paused_ms %lld ms\n", (long long)took);
    assert_int_equal(rc, DLOCK_ERR_NOQUORUM);
    assert_true(took <= (it_timeout_ms() + 100) * dh_slack());
    assert_true(key_gone(3, key));
    assert_true(key_gone(4, key));
    for (int i = 0; i < 3; i++)
        dh_server_resume(&g_srv[i]);

    /* After the pause the late replies are discarded, not read as new answers. */
    l = it_acquire(c, "after-pause", 5000);
    assert_int_equal(dlock_check(l), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

static void test_paused_node_costs_one_timeout(void **state)
{
    (void)state;
    dlock_client *c = client(0, 0, 0);
    it_warm_up(c, "warmup", 5000);
    dh_server_pause(&g_srv[2]);
    int64_t t0 = dh_now_ms();
    dlock_lock *l = it_acquire(c, "slow-node", 5000);
    int64_t took = dh_now_ms() - t0;
    printf("FIG acquire_with_paused_node_ms %lld ms\n", (long long)took);
    /* The round waits for the paused node until its deadline, never longer. */
    assert_true(took <= (it_timeout_ms() + 50) * dh_slack());
    t0 = dh_now_ms();
    assert_int_equal(dlock_release(l), DLOCK_OK);
    printf("FIG release_with_paused_node_ms %lld ms\n", (long long)(dh_now_ms() - t0));
    dh_server_resume(&g_srv[2]);
    dlock_client_free(c);
}

/* A node that restarted and then froze: the client must reconnect to it, the kernel
 * accepts the connection, and the handshake never gets an answer. The other two
 * decide the round; the frozen node must not cost the connect timeout. */
static void test_reconnecting_node_does_not_delay(void **state)
{
    (void)state;
    dlock_client *c = client(DLOCK_RESTART_OFF, 0, 0);
    it_warm_up(c, "warmup", 5000);
    assert_int_equal(dh_server_restart(&g_srv[1]), 0);
    dh_server_pause(&g_srv[1]);
    for (int i = 0; i < 3; i++) {
        int64_t t0 = dh_now_ms();
        dlock_lock *l = it_acquire(c, "reconnecting", 5000);
        int64_t took = dh_now_ms() - t0;
        printf("FIG acquire_with_frozen_reconnect_ms %lld ms\n", (long long)took);
        /* Well under the per-node timeout, let alone the 1 s connect timeout. */
        assert_true(took < it_timeout_ms());
        t0 = dh_now_ms();
        assert_int_equal(dlock_release(l), DLOCK_OK);
        assert_true(dh_now_ms() - t0 < it_timeout_ms());
    }
    dh_server_resume(&g_srv[1]);
    /* Once it answers, the same connection finishes its handshake (in a round or two:
     * rounds read it while they last) and the node takes part again. */
    char key[64];
    it_key(key, sizeof key, "reconnecting");
    bool joined = false;
    for (int i = 0; i < 50 && !joined; i++) {
        dlock_lock *l = it_acquire(c, "reconnecting", 5000);
        joined = it_exists(&g_srv[1], key) == 1;
        assert_int_equal(dlock_release(l), DLOCK_OK);
        dh_sleep_ms(10);
    }
    assert_true(joined);
    dlock_client_free(c);
}

/* The CLI takes several servers with no other change: -s a,b,c or
 * $DLOCK_SERVERS, and works with one of three nodes killed. */
static void test_cli_with_three_servers(void **state)
{
    (void)state;
    char out[512], err[512], key[64];
    it_key(key, sizeof key, "cli-redlock");
    const char *acquire[] = {dh_cli_path(), "-s",  g_urls,        "acquire",
                             "-t",          "10s", "cli-redlock", NULL};
    assert_int_equal(dh_run(acquire, NULL, out, sizeof out, err, sizeof err), 0);
    char token[64];
    unsigned long long fence = 0;
    assert_int_equal(sscanf(out, "%63s %llu", token, &fence), 2);
    assert_true(fence > 0);
    /* The acquisition ends once a quorum granted it, and the command exits with it: a
     * node whose grant was still on its way (its connection still being made) may never
     * get the request. Each node either holds it with the lease just granted or does
     * not have it; a quorum holds it. */
    int holding = 0, down = 2;
    for (int i = 0; i < 3; i++) {
        long long pttl = it_pttl(&g_srv[i], key);
        if (pttl != -2 && pttl <= 9000)
            fail_msg("node %d: PTTL %lld, want > 9000 (or not held)", i, pttl);
        holding += pttl > 9000;
        if (pttl == -2)
            down = i;
    }
    assert_true(holding >= 2);
    /* A second holder is refused on the quorum: exit 75. */
    const char *again[] = {dh_cli_path(), "-s", g_urls, "acquire", "-w", "0", "cli-redlock", NULL};
    assert_int_equal(dh_run(again, NULL, out, sizeof out, err, sizeof err), 75);
    /* One node down: status and release still reach a quorum. The node killed is the
     * one that missed the grant, if one did: killing a holder of only two would leave
     * no quorum that holds it. */
    dh_server_kill(&g_srv[down]);
    char env[sizeof g_urls + 16];
    snprintf(env, sizeof env, "DLOCK_SERVERS=%s", g_urls);
    const char *const envs[] = {env, NULL};
    const char *status[] = {dh_cli_path(), "--json", "status", "cli-redlock", NULL};
    assert_int_equal(dh_run(status, envs, out, sizeof out, err, sizeof err), 0);
    assert_non_null(strstr(out, "\"state\":\"held\""));
    const char *release[] = {dh_cli_path(), "release", "cli-redlock", token, NULL};
    assert_int_equal(dh_run(release, envs, out, sizeof out, err, sizeof err), 0);
    for (int i = 0; i < 3; i++)
        if (i != down)
            assert_int_equal(it_exists(&g_srv[i], key), 0);
    assert_int_equal(dh_server_restart(&g_srv[down]), 0);
}

/* ---- restarts ------------------------------------------------------------------ */

/* Make node i refuse writes (-NOREPLICAS), or accept them again. */
static void refuse_writes(int i, bool on)
{
    redisReply *r = dh_cmd(&g_srv[i], "CONFIG SET min-replicas-to-write %s", on ? "1" : "0");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

/* A holds "r" on nodes 0 and 1 (node 2 refuses writes while A acquires; a paused node
 * would not do: it runs the queued acquire when it resumes). Node 0 restarts empty.
 * B, which knew node 0 before, asks all three: node 0 (empty) and node 2 grant, node 1
 * refuses. */
static void test_restart_voting(void **state)
{
    (void)state;
    dlock_client *a = client(DLOCK_RESTART_OFF, 0, 0);
    dlock_client *b = client(DLOCK_RESTART_OBSERVED, 0, 2000);
    dlock_client *off = client(DLOCK_RESTART_OFF, 0, 0);
    it_warm_up(b, "warmup-b", 2000); /* b and off learn every run_id */
    it_warm_up(off, "warmup-off", 2000);

    refuse_writes(2, true);
    dlock_lock *la = it_acquire(a, "r", 10000);
    refuse_writes(2, false);
    assert_int_equal(dh_server_restart(&g_srv[0]), 0);

    /* B learns of the restart first. Found by the acquire itself, it depends on timing:
     * B's new connection to node 0 gets only the per-node timeout once the others are
     * up, and on a loaded machine its handshake can miss that; node 0 then counts as
     * not answering (B is refused all the same, without the restart in the message). */
    dlock_holder h;
    assert_int_equal(dlock_inspect(b, "r", &h), DLOCK_OK);
    /* With restart-aware voting, node 0's fresh grant does not count: B is refused. */
    dlock_lock *lb = NULL;
    assert_int_equal(try_acquire(b, "r", 2000, &lb), DLOCK_ERR_BUSY);
    assert_non_null(strstr(dlock_errmsg(), "restarted"));
    assert_null(lb);

    /* B's grants on nodes 0 and 2 are undone by a release that is sent, not awaited. */
    char key[64];
    it_key(key, sizeof key, "r");
    assert_true(key_gone(0, key));
    assert_true(key_gone(2, key));

    /* Without it, the hazard: a second holder while A's validity still runs. OFF, too,
     * reconnects to node 0 first: an inspect waits for a new connection up to the
     * connect timeout, where a contended acquire gives it only the per-node timeout
     * (on a loaded machine, node 0 then counts as not answering and OFF is refused). */
    assert_int_equal(dlock_inspect(off, "r", &h), DLOCK_OK);
    dlock_lock *loff = NULL;
    assert_int_equal(try_acquire(off, "r", 2000, &loff), DLOCK_OK);
    assert_true(dlock_remaining_ms(la) > 0);
    assert_true(dlock_remaining_ms(loff) > 0);
    printf("INFO hazard shown: two holders of \"r\" at once with restart voting off\n");
    assert_int_equal(dlock_release(loff), DLOCK_OK);

    /* Once node 0 has been up longer than B's max lease (2 s), it votes again: with
     * node 1 paused, B needs nodes 0 and 2. */
    dh_sleep_ms(2200);
    dh_server_pause(&g_srv[1]);
    assert_int_equal(try_acquire(b, "after-wait", 2000, &lb), DLOCK_OK);
    dh_server_resume(&g_srv[1]);
    assert_int_equal(dlock_release(lb), DLOCK_OK);
    dlock_release(la);
    dlock_client_free(a);
    dlock_client_free(b);
    dlock_client_free(off);
}

/* ---- fences -------------------------------------------------------------------- */

/* Strict mode raised a quorum's counters to the fence before acquire returned (a node
 * still reconnecting may sit the round out), and none is above it. */
static void strict_fence_on_a_quorum(void)
{
    dlock_client *c = client(DLOCK_RESTART_OFF, DLOCK_FENCE_STRICT, 0);
    dlock_lock *l = it_acquire(c, "strict", 5000);
    char key[64];
    it_fence_key(key, sizeof key, "strict");
    int at_fence = 0;
    for (int i = 0; i < 3; i++) {
        char *v = it_get(&g_srv[i], key);
        if (v != NULL) {
            assert_true(strtoull(v, NULL, 10) <= dlock_fence(l));
            at_fence += strtoull(v, NULL, 10) == dlock_fence(l);
        }
        free(v);
    }
    assert_true(at_fence >= 2);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

/* Take and drop "f" on different quorums in the fence mode *state: fences must strictly
 * increase. */
static void test_fences(void **state)
{
    const int mode = *(int *)*state;
    dlock_client *c = client(DLOCK_RESTART_OFF, mode, 0);
    uint64_t last = 0;
    dlock_lock *l;
    for (int round = 0; round < 3; round++) {
        for (int down = 0; down < 3; down++) {
            dh_server_pause(&g_srv[down]);
            l = it_acquire(c, "f", 5000);
            dh_server_resume(&g_srv[down]);
            assert_true(dlock_fence(l) > last);
            last = dlock_fence(l);
            assert_int_equal(dlock_release(l), DLOCK_OK);
        }
        /* A node refusing writes (-NOREPLICAS) for a while: a different quorum. */
        refuse_writes(round, true);
        l = it_acquire(c, "f", 5000);
        assert_true(dlock_fence(l) > last);
        last = dlock_fence(l);
        assert_int_equal(dlock_release(l), DLOCK_OK);
        refuse_writes(round, false);
        /* A lease that expires instead of being released (the holder "crashed"):
         * the next quorum differs, and only the TIME floor (default mode) or the
         * confirmed raise (strict mode) keeps the fence above it. */
        dh_server_pause(&g_srv[(round + 1) % 3]);
        l = it_acquire(c, "f", 400 * dh_slack());
        dh_server_resume(&g_srv[(round + 1) % 3]);
        assert_true(dlock_fence(l) > last);
        last = dlock_fence(l);
        dlock_lock_detach(l);
        dh_sleep_ms(450 * dh_slack());
        dh_server_pause(&g_srv[(round + 2) % 3]);
        l = it_acquire(c, "f", 5000);
        dh_server_resume(&g_srv[(round + 2) % 3]);
        assert_true(dlock_fence(l) > last);
        last = dlock_fence(l);
        assert_int_equal(dlock_release(l), DLOCK_OK);
    }
    dlock_client_free(c);
    if (mode == DLOCK_FENCE_STRICT)
        strict_fence_on_a_quorum();
}

/* ---- mutual exclusion under faults --------------------------------------------- */

#define WORKERS  4
#define SECTIONS 100

/* One record per critical section, written with one write() to an O_APPEND file. */
typedef struct section {
    int64_t enter_ns, exit_ns;
    uint64_t fence;
    int32_t worker;
    int32_t outlived; /* the lock's validity had ended by the section's exit */
} section;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int worker(int id, const char *path)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    dlock_config cfg;
    it_config_init(&cfg);
    cfg.max_lease_ms = 2000;
    dlock_client *c = NULL;
    if (fd < 0 || dlock_client_new(g_urls, &cfg, &c) != DLOCK_OK)
        return 2;
    dlock_opts o = {0};
    o.ttl_ms = 2000;
    o.wait_ms = 60000;
    for (int i = 0; i < SECTIONS; i++) {
        dlock_lock *l;
        int rc = dlock_acquire(c, "faulty", &o, &l);
        if (rc != DLOCK_OK) {
            fprintf(stderr, "worker %d: acquire: %s: %s\n", id, dlock_errname(rc), dlock_errmsg());
            return 3;
        }
        section s = {.enter_ns = mono_ns(), .fence = dlock_fence(l), .worker = id};
        usleep(2000); /* long enough for faults to land inside sections */
        s.exit_ns = mono_ns();
        /* The overlap check below holds only for sections within validity: one that
         * outlived it is counted, and there must be none. */
        s.outlived = dlock_remaining_ms(l) <= 0;
        if (write(fd, &s, sizeof s) != (ssize_t)sizeof s)
            return 4;
        rc = dlock_release(l);
        if (rc != DLOCK_OK)
            fprintf(stderr, "worker %d: release: %s: %s\n", id, dlock_errname(rc), dlock_errmsg());
    }
    dlock_client_free(c);
    close(fd);
    return 0;
}

static int by_enter(const void *a, const void *b)
{
    const section *x = a, *y = b;
    return (x->enter_ns > y->enter_ns) - (x->enter_ns < y->enter_ns);
}

static void test_mutual_exclusion_under_faults(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/sections.log", g_srv[0].dir);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    close(fd);
    pid_t pids[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0)
            _exit(worker(i, path));
    }
    /* Faults while they work: node 4 killed and restarted empty, node 3 paused and
     * resumed, in turns, until every worker is done. */
    int done = 0, status[WORKERS] = {0}, faults = 0;
    bool finished[WORKERS] = {false};
    int64_t t0 = dh_now_ms();
    while (done < WORKERS && dh_now_ms() - t0 < 120000) {
        if (faults % 2 == 0) {
            dh_server_kill(&g_srv[4]);
            dh_sleep_ms(80);
            assert_int_equal(dh_server_restart(&g_srv[4]), 0);
        } else {
            dh_server_pause(&g_srv[3]);
            dh_sleep_ms(80);
            dh_server_resume(&g_srv[3]);
        }
        faults++;
        dh_sleep_ms(40);
        for (int i = 0; i < WORKERS; i++)
            if (!finished[i] && waitpid(pids[i], &status[i], WNOHANG) == pids[i]) {
                finished[i] = true;
                done++;
            }
    }
    for (int i = 0; i < WORKERS; i++) {
        if (!finished[i]) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], &status[i], 0);
        }
        assert_true(WIFEXITED(status[i]));
        assert_int_equal(WEXITSTATUS(status[i]), 0);
    }
    printf("FIG faults_injected %d count\n", faults);
    printf("FIG faulty_sections_per_s %.0f sections/s\n",
           WORKERS * SECTIONS * 1000.0 / (double)(dh_now_ms() - t0));

    /* The checker: sections do not overlap, and fences increase in section order. */
    section *s = calloc(WORKERS * SECTIONS, sizeof *s);
    assert_non_null(s);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    ssize_t got = read(fd, s, WORKERS * SECTIONS * sizeof *s);
    close(fd);
    assert_int_equal(got, (ssize_t)(WORKERS * SECTIONS * sizeof *s));
    qsort(s, WORKERS * SECTIONS, sizeof *s, by_enter);
    int overlaps = 0, regressions = 0, outlived = s[0].outlived;
    for (int i = 1; i < WORKERS * SECTIONS; i++) {
        overlaps += s[i].enter_ns < s[i - 1].exit_ns;
        regressions += s[i].fence <= s[i - 1].fence;
        outlived += s[i].outlived;
    }
    printf("FIG section_overlaps %d count\n", overlaps);
    printf("FIG fence_regressions %d count\n", regressions);
    printf("FIG sections_outliving_validity %d count\n", outlived);
    free(s);
    assert_int_equal(overlaps, 0);
    assert_int_equal(regressions, 0);
    assert_int_equal(outlived, 0);
}

int main(void)
{
    static int fence_default = DLOCK_FENCE_DEFAULT, fence_strict = DLOCK_FENCE_STRICT;
    const struct CMUnitTest five[] = {
        cmocka_unit_test_setup_teardown(test_two_of_five_killed_still_locks, setup5,
                                        teardown_nodes),
        cmocka_unit_test_setup_teardown(test_three_of_five_down_is_noquorum, setup5,
                                        teardown_nodes),
        cmocka_unit_test_setup_teardown(test_mutual_exclusion_under_faults, setup5, teardown_nodes),
    };
    const struct CMUnitTest three[] = {
        cmocka_unit_test_setup_teardown(test_paused_node_costs_one_timeout, setup3, teardown_nodes),
        cmocka_unit_test_setup_teardown(test_reconnecting_node_does_not_delay, setup3,
                                        teardown_nodes),
        cmocka_unit_test_setup_teardown(test_cli_with_three_servers, setup3, teardown_nodes),
        cmocka_unit_test_setup_teardown(test_restart_voting, setup3, teardown_nodes),
        IT_CASE_WITH("test_fences_default_mode", test_fences, setup3, teardown_nodes,
                     &fence_default),
        IT_CASE_WITH("test_fences_strict_mode", test_fences, setup3, teardown_nodes, &fence_strict),
    };
    int failed = cmocka_run_group_tests_name("redlock_5_nodes", five, NULL, NULL);
    failed += cmocka_run_group_tests_name("redlock_3_nodes", three, NULL, NULL);
    return failed;
}
