/*
 * test_failover.c: scenario 15 of the fault suite (docs/testing.md), a failover to a replica
 * that missed the lock's write: why Redlock asks for independent masters, not a
 * replicated one.
 *
 * Setup: a master M and a replica R (started with --replicaof), whose replication link
 * goes through a small forwarder in this test, so that the test can hold back M's
 * replication stream (drop it) the way a lagging link or a master dying right after a
 * write does. Clients of the "service" point at M before the failover and at R after
 * (what Sentinel or a DNS switch does). The fenced register lives on a third server.
 *
 * Cases:
 *   - the replica missed the write: A takes "f" on M; M's stream to R is held back;
 *     M is killed; R is promoted (REPLICAOF NO ONE); B takes "f" on R: granted while
 *     A's validity runs: the double grant, printed and seen by the history checker.
 *     Fences still increase (R's counter lags, but the TIME floor puts B's fence above
 *     A's), so the register refuses A once it has seen B;
 *   - the control: the same failover after R acknowledged the write (WAIT 1): R has
 *     A's key and refuses B until A's lease ends.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "integration/itest.h"

#include "history.h"
#include "workers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TTL_MS 5000

/* ---- a forwarder for the replication link ----------------------------------------- */

typedef struct fwd {
    int lfd, port, target_port;
    atomic_bool hold; /* drop what the master sends */
    atomic_bool stop;
    atomic_long dropped;
    pthread_t thread;
} fwd;

static int connect_local(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Copy what `from` has to `to` (or drop it). False on EOF or error. */
static bool pump(fwd *f, int from, int to, bool droppable)
{
    char buf[16384];
    ssize_t n = read(from, buf, sizeof buf);
    if (n <= 0)
        return n < 0 && (errno == EINTR || errno == EAGAIN);
    if (droppable && atomic_load(&f->hold)) {
        atomic_fetch_add(&f->dropped, n);
        return true;
    }
    return dh_send_all(to, buf, (size_t)n) == 0;
}

static void *fwd_main(void *arg)
{
    fwd *f = arg;
    while (!atomic_load(&f->stop)) {
        struct pollfd lp = {.fd = f->lfd, .events = POLLIN};
        if (poll(&lp, 1, 50) <= 0)
            continue;
        int c = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        int s = connect_local(f->target_port);
        if (s < 0) {
            close(c); /* the master is down: the replica will try again */
            continue;
        }
        while (!atomic_load(&f->stop)) {
            struct pollfd p[2] = {{.fd = c, .events = POLLIN}, {.fd = s, .events = POLLIN}};
            if (poll(p, 2, 50) < 0 && errno != EINTR)
                break;
            if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && !pump(f, c, s, false))
                break;
            if ((p[1].revents & (POLLIN | POLLHUP | POLLERR)) && !pump(f, s, c, true))
                break;
        }
        close(c);
        close(s);
    }
    return NULL;
}

static int fwd_start(fwd *f, int target_port)
{
    memset(f, 0, sizeof *f);
    f->target_port = target_port;
    f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
        listen(f->lfd, 4) < 0 || getsockname(f->lfd, (struct sockaddr *)&sa, &len) < 0)
        return -1;
    f->port = ntohs(sa.sin_port);
    return pthread_create(&f->thread, NULL, fwd_main, f) == 0 ? 0 : -1;
}

static void fwd_stop(fwd *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->thread, NULL);
    close(f->lfd);
}

/* ---- the scenario ----------------------------------------------------------------- */

static dh_server g_master, g_replica, g_res;
static fwd g_fwd;

/* The master's view: the replica is online (its initial sync is done). The replica's
 * own master_link_status says "up" before the master has even started the sync. */
static bool replica_in_sync(void)
{
    redisReply *r = dh_cmd(&g_master, "INFO replication");
    bool ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "state=online");
    freeReplyObject(r);
    return ok;
}

static int setup(void **state)
{
    (void)state;
    /* No 5 s wait before the diskless initial sync. */
    const char *margs[] = {"--repl-diskless-sync-delay", "0", NULL};
    if (dh_server_start(&g_master, margs) < 0 || dh_server_start(&g_res, NULL) < 0 ||
        fwd_start(&g_fwd, g_master.port) < 0)
        return -1;
    char port[16];
    snprintf(port, sizeof port, "%d", g_fwd.port);
    const char *args[] = {"--replicaof", "127.0.0.1", port, NULL};
    if (dh_server_start(&g_replica, args) < 0)
        return -1;
    int64_t until = dh_now_ms() + 10000 * dh_slack();
    while (!replica_in_sync() && dh_now_ms() < until)
        dh_sleep_ms(20);
    return replica_in_sync() ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    dh_server_stop(&g_replica);
    dh_server_stop(&g_master);
    dh_server_stop(&g_res);
    fwd_stop(&g_fwd);
    return 0;
}

static long long info_field(dh_server *s, const char *field)
{
    redisReply *r = dh_cmd(s, "INFO replication");
    assert_non_null(r);
    const char *p = strstr(r->str, field);
    long long v = p ? strtoll(p + strlen(field), NULL, 10) : -1;
    freeReplyObject(r);
    return v;
}

/* The replica has processed everything the master wrote so far. (WAIT would not do:
 * it waits for the writes of its own connection, and dh_cmd's is a new one.) */
static void wait_replicated(void)
{
    long long want = info_field(&g_master, "master_repl_offset:");
    int64_t until = dh_now_ms() + 2000 * dh_slack();
    while (info_field(&g_replica, "slave_repl_offset:") < want && dh_now_ms() < until)
        dh_sleep_ms(2);
    assert_true(info_field(&g_replica, "slave_repl_offset:") >= want);
}

static void promote_replica(void)
{
    assert_int_equal(dh_reply_status(dh_cmd(&g_replica, "REPLICAOF NO ONE"), "REPLICAOF"), 0);
}

/* The case's state (a bool): whether the replica missed the lock's write, or acknowledged
 * it, before the failover. */
static void failover(void **state)
{
    bool missed = *(const bool *)*state;
    const char *label = missed ? "failover_missed_write" : "failover_replicated";
    char hist[600];
    snprintf(hist, sizeof hist, "%s/%s.hist", g_res.dir, label);
    assert_int_equal(hist_create(hist), 0);
    hist_writer ha, hb, ht;
    assert_int_equal(hist_open(&ha, hist, 0), 0);
    assert_int_equal(hist_open(&hb, hist, 1), 0);
    assert_int_equal(hist_open(&ht, hist, -1), 0);
    dlock_client *a = it_client(&g_master, it_timeout_ms());
    dlock_client *b = it_client(&g_replica, it_timeout_ms());
    dlock_client *res = it_client(&g_res, it_timeout_ms());
    /* An earlier holder, replicated: the counter R knows of is an old one. */
    dlock_lock *l0 = it_acquire(a, "f", TTL_MS);
    assert_int_equal(dlock_release(l0), DLOCK_OK);
    wait_replicated();

    if (missed)
        atomic_store(&g_fwd.hold, true);
    dlock_opts o = {0};
    o.ttl_ms = TTL_MS;
    dlock_lock *la = NULL, *lb = NULL;
    assert_int_equal(wk_acquire_rec(&ha, a, "f", &o, &la), DLOCK_OK);
    assert_int_equal(wk_write_rec(&ha, res, "reg-f", la, 1), DLOCK_OK);
    if (!missed)
        wait_replicated(); /* the write reached the replica before the failover */
    char key[64];
    it_key(key, sizeof key, "f");
    char *v = it_get(&g_replica, key);
    bool has = v != NULL && strncmp(v, dlock_token(la), DLOCK_TOKEN_LEN) == 0;
    free(v);
    printf("INFO %s: the replica has A's key: %s (%ld bytes of replication dropped)\n", label,
           has ? "yes" : "no", atomic_load(&g_fwd.dropped));
    assert_int_equal(has, !missed);

    /* The master dies; the replica is promoted; the service now points at it. */
    dh_server_kill(&g_master);
    hist_fault(&ht, HIST_F_SERVER_KILL, 0);
    promote_replica();
    hist_fault(&ht, HIST_F_FAILOVER, 1);

    int rc = wk_acquire_rec(&hb, b, "f", &o, &lb);
    it_show(label, rc);
    int64_t a_left = dlock_remaining_ms(la);
    if (missed) {
        assert_int_equal(rc, DLOCK_OK);
        assert_true(a_left > 0);
        printf("INFO %s: HAZARD: B granted \"f\" on the promoted replica (fence %llu) while "
               "A's validity has %lld ms left (fence %llu)\n",
               label, (unsigned long long)dlock_fence(lb), (long long)a_left,
               (unsigned long long)dlock_fence(la));
        /* The replica's counter lagged; the TIME floor still orders the fences. */
        assert_true(dlock_fence(lb) > dlock_fence(la));
        assert_int_equal(wk_write_rec(&hb, res, "reg-f", lb, 2), DLOCK_OK);
        assert_int_equal(wk_write_rec(&ha, res, "reg-f", la, 3), DLOCK_ERR_FENCED);
        assert_int_equal(wk_release_rec(&hb, lb), DLOCK_OK);
    } else {
        assert_int_equal(rc, DLOCK_ERR_BUSY);
        printf("INFO %s: no double grant: the promoted replica refuses B (%s)\n", label,
               dlock_errmsg());
    }
    /* A's master is gone: its release cannot reach it. */
    int arc = wk_release_rec(&ha, la);
    printf("INFO %s: A's release (its master is dead) -> %s\n", label, dlock_errname(arc));
    assert_int_not_equal(arc, DLOCK_OK);

    hist_report rep;
    assert_int_equal(wk_judge(hist, NULL, NULL, label, &rep), 0);
    assert_int_equal(rep.granted_overlaps, missed ? 1 : 0);
    assert_int_equal(rep.fence_regressions, 0);
    assert_int_equal(rep.stale_accepted, 0);
    hist_close(&ha);
    hist_close(&hb);
    hist_close(&ht);
    dlock_client_free(a);
    dlock_client_free(b);
    dlock_client_free(res);
}

int main(void)
{
    static bool missed = true, replicated = false;
    const struct CMUnitTest tests[] = {
        IT_CASE_WITH("test_failover_missed_write", failover, setup, teardown, &missed),
        IT_CASE_WITH("test_failover_replicated_write", failover, setup, teardown, &replicated),
    };
    return cmocka_run_group_tests_name("fault_failover", tests, NULL, NULL);
}
