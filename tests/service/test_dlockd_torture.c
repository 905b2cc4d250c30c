/*
 * test_dlockd_torture: dlockd attacked as a hostile or careless client would attack
 * it, each finding of the attack a test of its own: commands pipelined before a FIN or
 * a close, waits after one, clients that never authenticate or send a half AUTH, idle
 * clients, AUTH and HELLO as redis-server 7 reads them, numbers with spaces in them,
 * session locks below the renewal's floor, a long password, waiters past the
 * open-files limit, and a SIGTERM while the lock server is down. A real dlockd in
 * front of a real redis-server, raw sockets and hiredis.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* A multibulk command of argc arguments (each a C string) into buf; its length. */
static size_t resp(char *buf, size_t len, int argc, ...)
{
    va_list ap;
    va_start(ap, argc);
    size_t n = (size_t)snprintf(buf, len, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++) {
        const char *a = va_arg(ap, const char *);
        n += (size_t)snprintf(buf + n, len - n, "$%zu\r\n%s\r\n", strlen(a), a);
    }
    va_end(ap);
    assert_true(n < len);
    return n;
}

/* Five DETACHED locks (only an UNLOCK releases them) for a pipeline to end. */
static void five_locks(const char *prefix, dt_lock l[5])
{
    redisContext *a = dt_connect(&dt_one);
    for (int i = 0; i < 5; i++)
        dt_expect_lock(dt_cmd(a, "LOCK %s%d TTL 60000 DETACHED", prefix, i), &l[i]);
    redisFree(a);
}

static size_t five_unlocks(char *buf, size_t len, const char *prefix, const dt_lock l[5])
{
    size_t n = 0;
    for (int i = 0; i < 5; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s%d", prefix, i);
        n += resp(buf + n, len - n, 3, "UNLOCK", name, l[i].token);
    }
    return n;
}

/* Five UNLOCKs in one write, then shutdown(SHUT_WR), as `nc -N` does: every one runs
 * and is answered, then dlockd closes. */
static void test_dlockd_fin_pipelined(void **state)
{
    (void)state;
    dt_lock l[5];
    five_locks("fin-half-", l);
    char req[1024], buf[256];
    size_t n = five_unlocks(req, sizeof req, "fin-half-", l);
    int fd = dt_raw(&dt_one);
    dt_raw_write(fd, req, n);
    assert_int_equal(shutdown(fd, SHUT_WR), 0);
    bool closed;
    dt_raw_read_all(fd, buf, sizeof buf, 5000 * dh_slack(), &closed);
    close(fd);
    assert_string_equal(buf, ":1\r\n:1\r\n:1\r\n:1\r\n:1\r\n");
    assert_true(closed);
    for (int i = 0; i < 5; i++) {
        char name[64];
        snprintf(name, sizeof name, "fin-half-%d", i);
        dt_wait_key_gone(name, 1000 * dh_slack());
    }
}

/* The same just before close(): not every reply can be delivered, but every UNLOCK runs. */
static void test_dlockd_close_pipelined(void **state)
{
    (void)state;
    dt_lock l[5];
    five_locks("fin-close-", l);
    char req[1024];
    size_t n = five_unlocks(req, sizeof req, "fin-close-", l);
    int fd = dt_raw(&dt_one);
    dt_raw_write(fd, req, n);
    close(fd);
    for (int i = 0; i < 5; i++) {
        char name[64];
        snprintf(name, sizeof name, "fin-close-%d", i);
        dt_wait_key_gone(name, 2000 * dh_slack());
    }
    redisContext *a = dt_connect(&dt_one);
    dt_wait_info(a, "connected_clients", 1, 2000 * dh_slack());
    redisFree(a);
}

/* A LOCK that must wait, sent before a FIN: nobody is left to serve, so the wait is
 * given up and the connection closed at once (as redis-server frees a blocked client
 * whose peer has gone); the holder is untouched. */
static void test_dlockd_fin_wait_given_up(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one);
    dt_lock l;
    dt_expect_lock(dt_cmd(a, "LOCK fin-wait"), &l);
    char req[256], buf[256];
    size_t n = resp(req, sizeof req, 6, "LOCK", "fin-wait", "WAIT", "60000", "TTL", "5000");
    int fd = dt_raw(&dt_one);
    dt_raw_write(fd, req, n);
    assert_int_equal(shutdown(fd, SHUT_WR), 0);
    bool closed;
    int64_t t0 = dh_now_ms();
    dt_raw_read_all(fd, buf, sizeof buf, 5000 * dh_slack(), &closed);
    close(fd);
    assert_true(closed);
    assert_string_equal(buf, "");
    print_message("FIG dlockd_fin_wait_closed_ms %lld ms\n", (long long)(dh_now_ms() - t0));
    dt_wait_info(a, "blocked_clients", 0, 1000 * dh_slack());
    it_expect_holder(&it_srv, "fin-wait", l.token);
    dt_expect_int(dt_cmd(a, "UNLOCK fin-wait %s", l.token), 1);
    redisFree(a);
}

/* Before AUTH: redis-server's limits, and a deadline. */
static void test_dlockd_preauth(void **state)
{
    (void)state;
    char pass[512], log[512], buf[512];
    dt_write_pass(pass, sizeof pass, "preauth", "pre auth pass");
    dt_log_path(log, sizeof log, "preauth");
    dt_next_log(log);
    dt_daemon d;
    /* 300 ms, times the slack: the test's own AUTH must come well within it. */
    char timeout[32], told[128];
    snprintf(timeout, sizeof timeout, "%lld", 300 * dh_slack());
    snprintf(told, sizeof told,
             "-ERR authentication timeout: no AUTH within %s ms of connecting\r\n", timeout);
    dt_start(&d, it_srv.url, "--requirepass-file", pass, "--auth-timeout", timeout, NULL);
    unlink(pass);
    /* An AUTH of 17 arguments, or one of 64 KB: refused at the header. */
    static const char many[] = "*17\r\n$4\r\nAUTH\r\n";
    assert_true(dt_raw_exchange(&d, many, sizeof many - 1, buf, sizeof buf, 5000 * dh_slack()));
    assert_string_equal(buf, "-ERR Protocol error: unauthenticated multibulk length\r\n");
    static const char big[] = "*2\r\n$4\r\nAUTH\r\n$65536\r\n";
    assert_true(dt_raw_exchange(&d, big, sizeof big - 1, buf, sizeof buf, 5000 * dh_slack()));
    assert_string_equal(buf, "-ERR Protocol error: unauthenticated bulk length\r\n");
    /* 200 connections that never authenticate are all closed by the deadline, told
     * why, and a real client is served meanwhile and after. */
    enum { SILENT = 200 };
    int fds[SILENT];
    for (int i = 0; i < SILENT; i++)
        fds[i] = dt_raw(&d);
    redisContext *c = dt_connect(&d);
    dt_expect_status(dt_cmd(c, "AUTH %s", "pre auth pass"), "OK");
    bool closed;
    dt_raw_read_all(fds[0], buf, sizeof buf, 5000 * dh_slack(), &closed);
    assert_true(closed);
    assert_string_equal(buf, told);
    for (int i = 1; i < SILENT; i++) {
        dt_raw_read_all(fds[i], buf, sizeof buf, 5000 * dh_slack(), &closed);
        assert_true(closed);
        close(fds[i]);
    }
    close(fds[0]);
    dt_wait_info(c, "connected_clients", 1, 2000 * dh_slack());
    assert_true(dt_info(c, "auth_timeouts") >= SILENT);
    /* The authenticated client outlived every deadline. */
    dt_expect_status(dt_cmd(c, "PING"), "PONG");
    /* After AUTH the full limits apply: 11 arguments are fine. */
    dt_expect_error(dt_cmd(c, "ECHO 1 2 3 4 5 6 7 8 9 10"), "ERR wrong number of arguments");
    redisFree(c);
    assert_int_equal(dt_stop(&d), 0);
}

/* --timeout-idle: an idle client goes, with its session lock; one that waits for a lock
 * is not idle. */
static void test_dlockd_idle(void **state)
{
    (void)state;
    dt_daemon d;
    dt_start(&d, it_srv.url, "--timeout-idle", "2", NULL);
    redisContext *holder = dt_connect(&d), *waiter = dt_connect(&d), *busy = dt_connect(&d);
    dt_lock l;
    dt_expect_lock(dt_cmd(holder, "LOCK idle-held"), &l);
    dt_expect_lock(dt_cmd(busy, "LOCK idle-other"), &l);
    dt_send(waiter, "LOCK idle-other WAIT 60000");
    int64_t t0 = dh_now_ms();
    /* busy pings every 300 ms: never idle. */
    while (dh_now_ms() - t0 < 4000) {
        dt_expect_status(dt_cmd(busy, "PING"), "PONG");
        dh_sleep_ms(300);
    }
    dt_wait_key_gone("idle-held", 2000 * dh_slack());
    print_message("FIG dlockd_idle_closed_ms %lld ms (timeout-idle 2 s)\n",
                  (long long)(dh_now_ms() - t0));
    assert_int_equal(dt_info(busy, "blocked_clients"), 1);
    assert_true(dt_info(busy, "idle_timeouts") >= 1);
    dt_expect_int(dt_cmd(busy, "UNLOCK idle-other %s", l.token), 1);
    dt_lock got;
    dt_expect_lock(dt_reply(waiter), &got);
    redisFree(holder);
    redisFree(waiter);
    redisFree(busy);
    assert_int_equal(dt_stop(&d), 0);
}

/* AUTH and HELLO as redis-server 7 answers them; refused AUTHs counted and logged. */
static void test_dlockd_auth_like_redis(void **state)
{
    (void)state;
    char pass[512], log[512];
    dt_write_pass(pass, sizeof pass, "auth", "good");
    dt_log_path(log, sizeof log, "auth");
    dt_next_log(log);
    dt_daemon d;
    dt_start(&d, it_srv.url, "--requirepass-file", pass, NULL);
    unlink(pass);
    redisContext *c = dt_connect(&d);
    dt_expect_error(dt_cmd(c, "AUTH DEFAULT good"), "WRONGPASS");
    dt_expect_error(dt_cmd(c, "HELLO AUTH default good"),
                    "ERR Protocol version is not an integer or out of range");
    dt_expect_error(dt_cmd(c, "HELLO 2 AUTH default good AUTH default bad"), "WRONGPASS");
    dt_expect_error(dt_cmd(c, "PING"), "NOAUTH");
    dt_expect_error(dt_cmd(c, "HELLO 2 SETNAME early"), "NOAUTH HELLO must be called");
    dt_expect_error(dt_cmd(c, "HELLO 2 AUTH default good SETNAME n x"),
                    "ERR Syntax error in HELLO option 'x'");
    dt_expect_error(dt_cmd(c, "PING"), "NOAUTH");
    redisReply *r = dt_cmd(c, "HELLO 2 AUTH default bad AUTH default good SETNAME named");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    freeReplyObject(r);
    redisReply *name = dt_cmd(c, "CLIENT GETNAME");
    assert_string_equal(name->str, "named");
    freeReplyObject(name);
    /* An authenticated connection stays so after a refused AUTH, as in redis-server. */
    dt_expect_error(dt_cmd(c, "AUTH bad"), "WRONGPASS");
    dt_expect_status(dt_cmd(c, "PING"), "PONG");
    assert_int_equal(dt_info(c, "acl_access_denied_auth"), 3);
    redisFree(c);
    assert_int_equal(dt_stop(&d), 0);
    assert_true(dt_log_has(log, "AUTH refused for client"));
    unlink(log);
}

/* Numbers as redis-server's string2ll reads them. */
static void test_dlockd_numbers(void **state)
{
    (void)state;
    redisContext *c = dt_connect(&dt_one);
    static const char *const bad[] = {"\t2000", " 2000", "2000\n", "2000 ", "+2000",
                                      "02000",  "-0",    "",       "2e3",   "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        dt_expect_error(dt_cmd(c, "LOCK num TTL %s DETACHED", bad[i]), "ERR TTL must be");
    dt_expect_error(dt_cmd(c, "LOCK num TTL 2000 WAIT -01"), "ERR WAIT must be");
    dt_lock l;
    dt_expect_lock(dt_cmd(c, "LOCK num TTL 2000 WAIT -1"), &l);
    dt_expect_int(dt_cmd(c, "UNLOCK num %s", l.token), 1);
    redisFree(c);
}

/* A session lock's TTL is at least the renewal's floor; DETACHED ones keep 10 ms. */
static void test_dlockd_session_floor(void **state)
{
    (void)state;
    redisContext *c = dt_connect(&dt_one);
    dt_expect_error(dt_cmd(c, "LOCK floor TTL 999"),
                    "ERR TTL of a session lock must be at least 1000 ms");
    dt_expect_error(dt_cmd(c, "SEM ACQUIRE floor-sem 2 TTL 50"),
                    "ERR TTL of a session lock must be at least 1000 ms");
    dt_lock l;
    dt_expect_lock(dt_cmd(c, "LOCK floor-detached TTL 100 DETACHED"), &l);
    dt_expect_lock(dt_cmd(c, "LOCK floor TTL 1000"), &l);
    dt_expect_error(dt_cmd(c, "EXTEND floor %s 500", l.token),
                    "ERR TTL of a session lock must be at least 1000 ms");
    dt_expect_int(dt_cmd(c, "EXTEND floor %s 1000", l.token), 1);
    dt_expect_int(dt_cmd(c, "UNLOCK floor %s", l.token), 1);
    redisFree(c);
}

/* The password file is read whole; one no client could send is refused at start. */
static void test_dlockd_long_password(void **state)
{
    (void)state;
    char pass[512], *pw = malloc(20001);
    assert_non_null(pw);
    for (int i = 0; i < 2000; i++)
        pw[i] = (char)('a' + i % 26);
    pw[2000] = '\0';
    dt_write_pass(pass, sizeof pass, "long", pw);
    dt_daemon d;
    dt_start(&d, it_srv.url, "--requirepass-file", pass, NULL);
    redisContext *c = dt_connect(&d);
    pw[1023] = '\0';
    dt_expect_error(dt_cmd(c, "AUTH %s", pw), "WRONGPASS");
    pw[1023] = 'a' + 1023 % 26;
    dt_expect_status(dt_cmd(c, "AUTH %s", pw), "OK");
    redisFree(c);
    assert_int_equal(dt_stop(&d), 0);

    memset(pw, 'x', 20000);
    pw[20000] = '\0';
    dt_write_pass(pass, sizeof pass, "long", pw);
    dt_run r;
    const char *argv[] = {getenv("DLOCKD"), "-s", it_srv.url, "--requirepass-file", pass, NULL};
    r.status = dh_run(argv, NULL, r.out, sizeof r.out, r.err, sizeof r.err);
    unlink(pass);
    free(pw);
    assert_int_equal(r.status, 64);
    assert_non_null(strstr(r.err, "longer than the 16384 a client may send before AUTH"));
}

/* Descriptors open in process pid, its epoll sets among them in *epolls. */
static int daemon_fds(pid_t pid, int *epolls)
{
    char path[64], link[320], target[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *dir = opendir(path);
    assert_non_null(dir);
    int n = *epolls = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL; n += e->d_name[0] != '.') {
        snprintf(link, sizeof link, "%s/%s", path, e->d_name);
        ssize_t len = readlink(link, target, sizeof target - 1);
        target[len > 0 ? len : 0] = '\0';
        *epolls += strcmp(target, "anon_inode:[eventpoll]") == 0;
    }
    closedir(dir);
    return n;
}

/* 600 descriptors: maxclients is lowered to what they allow (2 a waiter), waiters past
 * it are refused as clients (never -UNAVAILABLE), the holder's UNLOCK serves the first,
 * and dlockd stays below the limit: at it libuv closes what it cannot accept unanswered
 * and unlogged (its spare descriptor makes room), or spins on accept once that is gone. */
static void test_dlockd_descriptors(void **state)
{
    (void)state;
    char log[512];
    dt_log_path(log, sizeof log, "fds");
    dt_next_log(log);
    dt_next_nofile(600);
    dt_daemon d;
    dt_start(&d, it_srv.url, "--maxclients", "1000", NULL);
    assert_true(dt_log_has(log, "maxclients lowered from 1000 to 188"));
    redisContext *holder = dt_connect(&d);
    dt_lock l;
    dt_expect_lock(dt_cmd(holder, "LOCK fds"), &l);
    enum { WAITERS = 300 };
    redisContext **w = calloc(WAITERS, sizeof *w);
    assert_non_null(w);
    int peak = 0, epolls = 0, ep, n;
    for (int i = 0; i < WAITERS; i++) {
        w[i] = dt_connect(&d);
        dt_send(w[i], "LOCK fds WAIT -1 FAIR");
        if (i % 8 == 7 && (n = daemon_fds(d.pid, &ep)) > peak)
            peak = n, epolls = ep;
    }
    /* The waiters never leave (WAIT -1: a slow client's connects may outlast a WAIT):
     * 187 wait, the holder the 188th client. INFO's waits counts refreshing ones too. */
    int64_t deadline = dh_now_ms() + 10000 * dh_slack();
    long waited, refused;
    while ((waited = dt_info(holder, "waits")) +
               (refused = dt_info(holder, "rejected_connections")) <
           WAITERS) {
        if (dh_now_ms() > deadline)
            fail_msg("%ld waited and %ld refused of %d waiters (clients %ld, fds %d, epoll %d)",
                     waited, refused, WAITERS, dt_info(holder, "connected_clients"), peak, epolls);
        dh_sleep_ms(20);
    }
    print_message("FIG dlockd_descriptors_waiters %ld waiting, %ld refused (fds %d, epoll %d)\n",
                  waited, refused, peak, epolls);
    assert_true(peak < 600);
    assert_int_equal(waited, 187);
    assert_int_equal(refused, WAITERS - 187);
    assert_int_equal(dt_info(holder, "errors_unavailable"), 0);
    assert_false(dt_log_has(log, "accept: ")); /* nor any accept that failed */
    dt_expect_int(dt_cmd(holder, "UNLOCK fds %s", l.token), 1);
    assert_int_equal(dt_info(holder, "errors_unavailable"), 0);
    for (int i = 0; i < WAITERS; i++)
        redisFree(w[i]);
    free(w);
    redisFree(holder);
    assert_int_equal(dt_stop(&d), 0);
    unlink(log);
}

/* SIGTERM with the lock server gone: exit 0, and the log says how many session locks
 * could not be released and why. Its counts are the stop's: three clients that held a
 * lock and closed before it are not among them. */
static void test_dlockd_sigterm_counts(void **state)
{
    (void)state;
    char log[512];
    dt_log_path(log, sizeof log, "sigterm");
    dt_fresh f;
    dt_next_log(log);
    redisContext *a = dt_fresh_start(&f, 1);
    for (int i = 0; i < 3; i++) {
        redisContext *e = dt_connect(&f.d);
        dt_lock l;
        dt_expect_lock(dt_cmd(e, "LOCK early-%d", i), &l);
        redisFree(e);
        /* Granted once the close has released it. */
        dt_expect_lock(dt_cmd(a, "LOCK early-%d DETACHED WAIT 10000", i), &l);
        dt_expect_int(dt_cmd(a, "UNLOCK early-%d %s", i, l.token), 1);
    }
    enum { HELD = 20 };
    redisContext *c[HELD];
    for (int i = 0; i < HELD; i++) {
        c[i] = dt_connect(&f.d);
        dt_lock l;
        dt_expect_lock(dt_cmd(c[i], "LOCK term-%d", i), &l);
    }
    dh_server_kill(&f.srv[0]);
    assert_int_equal(dt_stop(&f.d), 0);
    assert_true(dt_log_has(log, "20 session locks held"));
    assert_true(dt_log_has(log, "released 0 session locks at their clients' close; 20 could "
                                "not be released"));
    for (int i = 0; i < HELD; i++)
        redisFree(c[i]);
    redisFree(a);
    dh_server_stop(&f.srv[0]);
    unlink(log);
}

/* A second SIGTERM while the releases hang on a paused lock server: dlockd exits at
 * once (status 1) and says how many session locks it leaves to their leases, counting
 * those whose release was under way (it used to say 0). */
static void test_dlockd_second_sigterm(void **state)
{
    (void)state;
    char log[512];
    dt_log_path(log, sizeof log, "sigterm2");
    dt_fresh f = {.n = 1};
    dt_next_log(log);
    assert_int_equal(dh_servers_start(f.srv, 1, NULL), 0);
    char url[128];
    dh_server_urls(f.srv, 1, url, sizeof url);
    /* A per-server deadline that outlasts the 200 ms before the second signal: the
     * releases, all on the lock server's pipe at once, are still under way then. */
    dt_start(&f.d, url, "--timeout", "3000", NULL);
    redisContext *a = dt_connect(&f.d);
    enum { HELD = 100 };
    redisContext *c[HELD];
    for (int i = 0; i < HELD; i++) {
        c[i] = dt_connect(&f.d);
        dt_lock l;
        dt_expect_lock(dt_cmd(c[i], "LOCK term2-%d", i), &l);
    }
    dh_server_pause(&f.srv[0]);
    kill(f.d.pid, SIGTERM);
    dh_sleep_ms(200);
    kill(f.d.pid, SIGTERM);
    int status = 0;
    assert_true(dh_reap(f.d.pid, 5000 * dh_slack(), &status));
    f.d.pid = 0;
    dh_server_resume(&f.srv[0]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    /* Every release waits out the per-server deadline on the paused server: all 100
     * are under way after 200 ms. */
    FILE *fl = fopen(log, "r");
    assert_non_null(fl);
    char line[1024];
    long left = -1;
    while (fgets(line, sizeof line, fl) != NULL) {
        const char *p = strstr(line, "again: exiting without releasing ");
        if (p != NULL)
            left = strtol(p + strlen("again: exiting without releasing "), NULL, 10);
    }
    fclose(fl);
    print_message("FIG dlockd_second_sigterm_left %ld of %d\n", left, HELD);
    assert_int_equal(left, HELD);
    for (int i = 0; i < HELD; i++)
        redisFree(c[i]);
    redisFree(a);
    dh_server_stop(&f.srv[0]);
    unlink(log);
}

/* FAIR waiters spread over two dlockds in front of one server are served in arrival
 * order: each is queued on the server when it arrives, the waiters of the holder's own
 * dlockd too (they used to wait in that dlockd alone, reaching the queue only after
 * the other dlockd's later waiters). */
static void test_dlockd_fair_two_daemons(void **state)
{
    (void)state;
    enum { WAITERS = 8 };
    dt_daemon b;
    dt_start(&b, it_srv.url, NULL);
    redisContext *holder = dt_connect(&dt_one), *w[WAITERS];
    dt_lock l;
    dt_expect_lock(dt_cmd(holder, "LOCK fair2 TTL 5000"), &l);
    char queue[256];
    it_queue_key(queue, sizeof queue, "fair2");
    for (int i = 0; i < WAITERS; i++) {
        w[i] = dt_connect(i % 2 == 0 ? &dt_one : &b);
        dt_send(w[i], "LOCK fair2 TTL 5000 WAIT 30000 FAIR");
        /* Arrived: queued on the server before the next one comes. */
        int64_t deadline = dh_now_ms() + 3000 * dh_slack();
        while (it_int_reply(dh_cmd(&it_srv, "ZCARD %s", queue)) != i + 1) {
            if (dh_now_ms() > deadline)
                fail_msg("waiter %d (dlockd %s) is not queued on the server", i,
                         i % 2 == 0 ? "A, the holder's" : "B");
            dh_sleep_ms(5);
        }
    }
    dt_expect_int(dt_cmd(holder, "UNLOCK fair2 %s", l.token), 1);
    for (int i = 0; i < WAITERS; i++) {
        /* The next in arrival order gets it; another would hold it and keep this one
         * waiting past the read timeout. */
        struct timeval tv = {(long)(5 * dh_slack()), 0};
        redisSetTimeout(w[i], tv);
        redisReply *r = NULL;
        if (redisGetReply(w[i], (void **)&r) != REDIS_OK || r == NULL)
            fail_msg("waiter %d was not served next", i);
        dt_expect_lock(r, &l);
        dt_expect_int(dt_cmd(w[i], "UNLOCK fair2 %s", l.token), 1);
    }
    for (int i = 0; i < WAITERS; i++)
        redisFree(w[i]);
    redisFree(holder);
    assert_int_equal(dt_stop(&b), 0);
}

/* 100 RESERVEs wait; 50 of their connections are reset: STOCK STATUS counts 50 waiters
 * at once. The 50 leaves go out back to back on one of dlockd's connections to the
 * server; before, once 32 replies were owed the connection was closed, the kernel reset
 * it, and the server dropped the leaves it had not run yet. */
static void test_dlockd_stock_reset_waiters(void **state)
{
    (void)state;
    enum { WAITERS = 100, RESET = 50 };
    redisContext *a = dt_connect(&dt_one), *w[WAITERS];
    /* One unit, reserved: the waiters wait for a cancel that could free it. */
    freeReplyObject(dt_cmd(a, "STOCK SET reset-sku 1"));
    redisReply *id = dt_cmd(a, "STOCK RESERVE reset-sku 1 TTL 60000");
    assert_int_equal(id->type, REDIS_REPLY_STRING);
    for (int i = 0; i < WAITERS; i++) {
        w[i] = dt_connect(&dt_one);
        dt_send(w[i], "STOCK RESERVE reset-sku 1 WAIT 60000");
    }
    dt_wait_info(a, "waiting_reserves", WAITERS, 5000 * dh_slack());
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    for (int i = 0; i < RESET; i++) {
        setsockopt(w[i]->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        redisFree(w[i]);
    }
    dt_wait_info(a, "waiting_reserves", WAITERS - RESET, 5000 * dh_slack());
    int64_t t0 = dh_now_ms(), deadline = t0 + 1000 * dh_slack();
    long long waiters = -1;
    for (;;) {
        redisReply *r = dt_cmd(a, "STOCK STATUS reset-sku");
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, 12);
        assert_string_equal(r->element[10]->str, "waiters");
        waiters = r->element[11]->integer;
        freeReplyObject(r);
        if (waiters == WAITERS - RESET)
            break;
        if (dh_now_ms() > deadline)
            fail_msg("STOCK STATUS counts %lld waiters, not %d", waiters, WAITERS - RESET);
        dh_sleep_ms(10);
    }
    print_message("FIG dlockd_stock_reset_waiters_gone_ms %lld ms\n",
                  (long long)(dh_now_ms() - t0));
    for (int i = RESET; i < WAITERS; i++)
        redisFree(w[i]);
    dt_wait_info(a, "waiting_reserves", 0, 5000 * dh_slack());
    dt_expect_int(dt_cmd(a, "STOCK CANCEL reset-sku %s", id->str), 1);
    freeReplyObject(id);
    redisFree(a);
}

/* DLOCKD_TORTURE_ONLY: the scenarios whose names match (cmocka's filter), to run one. */
int main(void)
{
    if (getenv("DLOCKD_TORTURE_ONLY") != NULL)
        cmocka_set_test_filter(getenv("DLOCKD_TORTURE_ONLY"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dlockd_fin_pipelined),
        cmocka_unit_test(test_dlockd_close_pipelined),
        cmocka_unit_test(test_dlockd_fin_wait_given_up),
        cmocka_unit_test(test_dlockd_preauth),
        cmocka_unit_test(test_dlockd_idle),
        cmocka_unit_test(test_dlockd_auth_like_redis),
        cmocka_unit_test(test_dlockd_numbers),
        cmocka_unit_test(test_dlockd_session_floor),
        cmocka_unit_test(test_dlockd_long_password),
        cmocka_unit_test(test_dlockd_descriptors),
        cmocka_unit_test(test_dlockd_sigterm_counts),
        cmocka_unit_test(test_dlockd_second_sigterm),
        cmocka_unit_test(test_dlockd_fair_two_daemons),
        cmocka_unit_test(test_dlockd_stock_reset_waiters),
    };
    return cmocka_run_group_tests(tests, dt_one_setup, dt_one_teardown);
}
