/*
 * test_dlockd_elect.c: leader election through dlockd (ELECT, PROCLAIM, RESIGN, LEADER,
 * SUBSCRIBE leader:NAME), against a real redis-server and a real dlockd process.
 *
 * What is checked, exactly:
 *   - the commands: LEADER of a name no one leads is nil; ELECT answers [token, term,
 *     validity] as LOCK does (validity within its TTL); LEADER, from another
 *     connection, answers [value, holder, term, remaining_ms] with the elected value,
 *     the holder "CLIENT_ADDR via dlockd HOST:DLOCKD_PID", the ELECT's term and a lease
 *     left within the TTL, and the library's dlock_leader, straight from the
 *     redis-server, reads the same; a second candidate's ELECT WAIT 0 is nil; PROCLAIM
 *     changes the value in the same term, and is 0 from another connection with the
 *     token, with a wrong token or a short one; a second ELECT of the name on the
 *     leading connection is refused; TTL below the session floor, unknown options and
 *     no name are errors; RESIGN is 0 from another connection, 1 from the leader's
 *     (LEADER nil afterwards, and a new ELECT WAIT 0 leads with a larger term), then 0;
 *     an empty VALUE is a value;
 *   - a session leadership fails over on its connection's close: five candidate
 *     processes each ELECT ... TTL 5000 WAIT -1 on a connection of their own; the
 *     leader is SIGKILLed, twice, and another one leads, with a larger term, within
 *     1000 ms (times the slack, and never as late as half the TTL: the close, not the
 *     lease's end); when all are gone no one leads;
 *   - observers through dlockd's pub/sub, four at once on leader:obs: a hiredis
 *     connection here, redis-cli, phpredis (php -r) and redis-py (/usr/bin/python3 -c),
 *     each printing the payloads it gets. Each first hears "0" (no one leads), then
 *     every change, each one waited for before the next: ELECT (a), PROCLAIM (a2), the
 *     leader's connection closed (0), another's ELECT (b), WAIT 0 the moment the "0"
 *     is heard (the lock is free by then), RESIGN (0). Every observer's payloads are
 *     "0" or "TERM VALUE", terms never go back, a, a2 and b come in that order, the
 *     last is "0", and the whole is exactly what happened.
 *     While subscribed, other commands are refused as Redis refuses them, PING answers
 *     ["pong", ""], a channel other than leader:NAME is refused, a SUBSCRIBE to a known
 *     topic hears its state at once, and after UNSUBSCRIBE ([.., .., 0]) commands work.
 * php with phpredis, python3 with redis-py, or redis-cli missing fails the test, never
 * skips it (tools/ensure-deps.sh installs php-redis, python3-redis and redis-tools).
 * FIG lines: failover ms, observers and changes, the slowest change a hiredis observer
 * heard.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define FIVE_TTL_MS 5000
#define MSG_MAX     32 /* payloads an observer may print here: 6 are expected */
#define MSG_LEN     96

/* LEADER's answer. */
typedef struct leader {
    char value[DLOCK_LEADER_VALUE_MAX + 1];
    char holder[600];
    long long term, remaining_ms;
} leader;

/* LEADER name on c: false when nil, else its shape asserted and *out filled. */
static bool get_leader(redisContext *c, const char *name, leader *out)
{
    redisReply *r = dt_cmd(c, "LEADER %s", name);
    if (r->type == REDIS_REPLY_NIL) {
        freeReplyObject(r);
        return false;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 4)
        fail_msg("LEADER %s: expected [value, holder, term, remaining_ms], got type %d '%s'", name,
                 r->type, r->str != NULL ? r->str : "");
    assert_int_equal(r->element[0]->type, REDIS_REPLY_STRING);
    assert_int_equal(r->element[1]->type, REDIS_REPLY_STRING);
    assert_int_equal(r->element[2]->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->element[3]->type, REDIS_REPLY_INTEGER);
    snprintf(out->value, sizeof out->value, "%s", r->element[0]->str);
    snprintf(out->holder, sizeof out->holder, "%s", r->element[1]->str);
    out->term = r->element[2]->integer;
    out->remaining_ms = r->element[3]->integer;
    freeReplyObject(r);
    return true;
}

/* The local port of a hiredis connection: dlockd names the client by it. */
static int local_port(const redisContext *c)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(c->fd, (struct sockaddr *)&a, &len), 0);
    return ntohs(a.sin_port);
}

static void test_elect_commands(void **state)
{
    (void)state;
    redisContext *a = dt_connect(&dt_one), *b = dt_connect(&dt_one);
    leader li;
    assert_false(get_leader(b, "el-cmd", &li));
    dt_lock l;
    dt_expect_lock(dt_cmd(a, "ELECT el-cmd VALUE %s TTL 5000", "10.0.0.1:80"), &l);
    assert_true(l.validity_ms <= 5000);
    assert_true(get_leader(b, "el-cmd", &li));
    assert_string_equal(li.value, "10.0.0.1:80");
    assert_int_equal(li.term, l.fence);
    assert_true(li.remaining_ms > 0 && li.remaining_ms <= 5000);
    /* Who leads, as LOCKINFO says who holds: the client's address and which dlockd. */
    char want[64];
    snprintf(want, sizeof want, "127.0.0.1:%d via dlockd ", local_port(a));
    if (strncmp(li.holder, want, strlen(want)) != 0)
        fail_msg("holder '%s' does not begin with '%s'", li.holder, want);
    snprintf(want, sizeof want, ":%d", (int)dt_one.pid);
    size_t hl = strlen(li.holder), wl = strlen(want);
    if (hl < wl || strcmp(li.holder + hl - wl, want) != 0)
        fail_msg("holder '%s' does not end with dlockd's pid '%s'", li.holder, want);

    /* The servers say the same to the library, which reads them directly. */
    dlock_client *lib = it_client(&it_srv, 2000 * dh_slack());
    dlock_leader_info info;
    assert_int_equal(dlock_leader(lib, "el-cmd", &info), DLOCK_OK);
    assert_int_equal(info.term, (uint64_t)l.fence);
    assert_string_equal(info.value, "10.0.0.1:80");

    dt_expect_nil(dt_cmd(b, "ELECT el-cmd WAIT 0"));
    dt_expect_int(dt_cmd(a, "PROCLAIM el-cmd %s v2", l.token), 1);
    assert_true(get_leader(b, "el-cmd", &li));
    assert_string_equal(li.value, "v2");
    assert_int_equal(li.term, l.fence);
    assert_int_equal(dlock_leader(lib, "el-cmd", &info), DLOCK_OK);
    assert_string_equal(info.value, "v2");
    dlock_client_free(lib);
    /* Only the leader's own connection proclaims, and only with its token. */
    dt_expect_int(dt_cmd(b, "PROCLAIM el-cmd %s v3", l.token), 0);
    dt_expect_int(dt_cmd(a, "PROCLAIM el-cmd ffffffffffffffffffffffffffffffff v3"), 0);
    dt_expect_int(dt_cmd(a, "PROCLAIM el-cmd short v3"), 0);
    assert_true(get_leader(b, "el-cmd", &li));
    assert_string_equal(li.value, "v2");
    /* A campaign of the leader's own connection would wait for itself: refused, in
     * the words of leadership (so is its LOCK of the name). */
    dt_expect_error(dt_cmd(a, "ELECT el-cmd"),
                    "ERR this connection already leads 'el-cmd' (RESIGN");
    dt_expect_error(dt_cmd(a, "LOCK el-cmd"), "ERR this connection already leads 'el-cmd' (RESIGN");

    static const dt_refusal bad[] = {
        {"ELECT el-x TTL 10", "ERR TTL of a leadership must be at least"},
        {"ELECT el-x FOO", "ERR unknown ELECT option 'FOO'"},
        {"ELECT el-x VALUE", "ERR ELECT option VALUE needs a value"},
        {"ELECT el-x TTL 2000 TTL 3000", "ERR ELECT option TTL given twice"},
        {"ELECT", "ERR wrong number of arguments for 'elect'"},
        {"RESIGN el-cmd", "ERR wrong number of arguments for 'resign'"},
    };
    DT_EXPECT_REFUSALS(a, bad);

    dt_expect_int(dt_cmd(b, "RESIGN el-cmd %s", l.token), 0);
    dt_expect_int(dt_cmd(a, "RESIGN el-cmd %s", l.token), 1);
    assert_false(get_leader(b, "el-cmd", &li));
    dt_expect_int(dt_cmd(a, "RESIGN el-cmd %s", l.token), 0);
    dt_lock l2;
    dt_expect_lock(dt_cmd(b, "ELECT el-cmd WAIT 0"), &l2);
    assert_true(l2.fence > l.fence);
    dt_expect_int(dt_cmd(b, "RESIGN el-cmd %s", l2.token), 1);

    dt_expect_lock(dt_cmd(a, "ELECT el-empty VALUE %s", ""), &l);
    assert_true(get_leader(b, "el-empty", &li));
    assert_string_equal(li.value, "");
    assert_int_equal(li.term, l.fence);
    dt_expect_int(dt_cmd(a, "RESIGN el-empty %s", l.token), 1);
    redisFree(a);
    redisFree(b);
}

/* A candidate process: its own connection, ELECT five VALUE cK ... WAIT -1, then it
 * holds the connection (and, once elected, the leadership) until it is killed. Only
 * hiredis and _exit in the child: it is no test. */
static pid_t candidate(int k)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid > 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    redisContext *c = redisConnect("127.0.0.1", dt_one.port);
    if (c == NULL || c->err)
        _exit(2);
    char value[16];
    snprintf(value, sizeof value, "c%d", k);
    if (redisAppendCommand(c, "ELECT five VALUE %s TTL %d WAIT -1", value, FIVE_TTL_MS) != REDIS_OK)
        _exit(3);
    int done = 0;
    while (!done)
        if (redisBufferWrite(c, &done) != REDIS_OK)
            _exit(4);
    for (;;)
        pause();
}

/* The index K of a leader's value "cK". */
static int index_of(const leader *li, int n)
{
    int k = -1;
    if (sscanf(li->value, "c%d", &k) != 1 || k < 0 || k >= n)
        fail_msg("leader of five has the value '%s', no candidate's", li->value);
    return k;
}

static void test_session_failover_five(void **state)
{
    (void)state;
    enum { N = 5 };
    pid_t pids[N];
    for (int k = 0; k < N; k++)
        pids[k] = candidate(k);
    redisContext *c = dt_connect(&dt_one);
    /* One leads, four wait in their ELECT. */
    dt_wait_info(c, "waiting_locks", N - 1, 10000 * dh_slack());
    leader li;
    assert_true(get_leader(c, "five", &li));
    /* The close is what ends a leadership here: the bound stays far below the lease. */
    int64_t bound = 1000 * dh_slack();
    if (bound > FIVE_TTL_MS / 2)
        bound = FIVE_TTL_MS / 2;
    for (int round = 0; round < 2; round++) {
        int k = index_of(&li, N);
        assert_true(pids[k] > 0);
        long long term = li.term;
        int64_t t0 = dh_now_ms();
        kill(pids[k], SIGKILL);
        leader next;
        while (!get_leader(c, "five", &next) || next.term == term) {
            if (dh_now_ms() - t0 > bound)
                fail_msg("no new leader of five within %lld ms of c%d's SIGKILL", (long long)bound,
                         k);
            dh_sleep_ms(2);
        }
        int64_t took = dh_now_ms() - t0;
        printf("FIG dlockd_elect_failover_ms=%lld ttl_ms=%d\n", (long long)took, FIVE_TTL_MS);
        dh_reap(pids[k], 1000 * dh_slack(), NULL);
        pids[k] = 0;
        assert_true(next.term > term);
        assert_true(pids[index_of(&next, N)] > 0);
        li = next;
    }
    for (int k = 0; k < N; k++)
        if (pids[k] > 0) {
            kill(pids[k], SIGKILL);
            dh_reap(pids[k], 1000 * dh_slack(), NULL);
        }
    /* Their connections closed: no leader, no campaign left. */
    int64_t deadline = dh_now_ms() + 5000 * dh_slack();
    while (get_leader(c, "five", &li)) {
        if (dh_now_ms() > deadline)
            fail_msg("five still led by '%s' after every candidate was killed", li.value);
        dh_sleep_ms(5);
    }
    dt_wait_info(c, "waiting_locks", 0, 5000 * dh_slack());
    redisFree(c);
}

/* ---- observers ----------------------------------------------------------------------- */

/* An observer of leader:obs and the payloads it has printed (or, for the hiredis one,
 * received) so far. */
typedef struct observer {
    const char *name;
    pid_t pid;        /* 0: the hiredis connection here */
    char path[512];   /* its stdout */
    bool three_lines; /* redis-cli: each push as its three elements, a line each */
    int n;
    char msg[MSG_MAX][MSG_LEN];
} observer;

/* Spawn argv with its stdout to o->path (its stderr to the test's). */
static void observer_spawn(observer *o, const char *const argv[])
{
    dt_log_path(o->path, sizeof o->path, o->name);
    int fd = open(o->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    dh_spawn_opts so = {.out_fd = fd, .err_fd = STDERR_FILENO};
    o->pid = dh_spawn(argv, &so);
    close(fd);
    assert_true(o->pid > 0);
}

/* Read o's file again: its complete lines, as payloads. */
static void observer_read(observer *o)
{
    FILE *f = fopen(o->path, "r");
    assert_non_null(f);
    char line[MSG_LEN];
    char group[3][MSG_LEN];
    int lines = 0;
    o->n = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n')
            break; /* being written */
        line[len - 1] = '\0';
        if (!o->three_lines) {
            assert_true(o->n < MSG_MAX);
            snprintf(o->msg[o->n++], MSG_LEN, "%s", line);
            continue;
        }
        snprintf(group[lines++ % 3], MSG_LEN, "%s", line);
        if (lines % 3 != 0)
            continue;
        assert_string_equal(group[1], "leader:obs");
        if (strcmp(group[0], "subscribe") == 0) {
            assert_string_equal(group[2], "1");
        } else {
            assert_string_equal(group[0], "message");
            assert_true(o->n < MSG_MAX);
            snprintf(o->msg[o->n++], MSG_LEN, "%s", group[2]);
        }
    }
    fclose(f);
}

/* The next reply or push on c by deadline, or NULL. */
static redisReply *next_push(redisContext *c, int64_t deadline)
{
    for (;;) {
        void *r = NULL;
        assert_int_equal(redisReaderGetReply(c->reader, &r), REDIS_OK);
        if (r != NULL)
            return r;
        int64_t left = deadline - dh_now_ms();
        if (left <= 0)
            return NULL;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (poll(&p, 1, (int)left) > 0 && redisBufferRead(c) != REDIS_OK)
            fail_msg("reading dlockd's pushes: %s", c->errstr);
    }
}

/* The payload of a ["message", "leader:obs", payload] push into out; r freed. */
static void take_message(redisReply *r, char out[MSG_LEN])
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3)
        fail_msg("expected a message push, got type %d '%s'", r->type, r->str ? r->str : "");
    assert_string_equal(r->element[0]->str, "message");
    assert_string_equal(r->element[1]->str, "leader:obs");
    assert_int_equal(r->element[2]->type, REDIS_REPLY_STRING);
    snprintf(out, MSG_LEN, "%s", r->element[2]->str);
    freeReplyObject(r);
}

/* Until the hiredis observer o on h has heard its want-th payload, which must be
 * expect; *slowest raised to the time it took. */
static void hiredis_hears(observer *o, redisContext *h, int want, const char *expect,
                          int64_t *slowest)
{
    int64_t t0 = dh_now_ms(), deadline = t0 + 5000 * dh_slack();
    while (o->n < want) {
        redisReply *r = next_push(h, deadline);
        if (r == NULL)
            fail_msg("the hiredis observer heard no '%s' within %lld ms (%d payloads so far)",
                     expect, (long long)(5000 * dh_slack()), o->n);
        assert_true(o->n < MSG_MAX);
        take_message(r, o->msg[o->n++]);
    }
    if (strcmp(o->msg[want - 1], expect) != 0)
        fail_msg("the hiredis observer heard '%s' where '%s' was due", o->msg[want - 1], expect);
    if (dh_now_ms() - t0 > *slowest)
        *slowest = dh_now_ms() - t0;
}

/* Until every spawned observer has printed want payloads, within bound_ms. */
static void observers_hear(observer *obs, int n, int want, int64_t bound_ms)
{
    int64_t deadline = dh_now_ms() + bound_ms;
    for (int i = 0; i < n; i++) {
        if (obs[i].pid == 0)
            continue;
        for (observer_read(&obs[i]); obs[i].n < want; observer_read(&obs[i])) {
            int st;
            if (dh_exited(obs[i].pid, &st)) {
                obs[i].pid = 0;
                fail_msg("observer %s exited (status %d) after %d payloads", obs[i].name, st,
                         obs[i].n);
            }
            if (dh_now_ms() > deadline)
                fail_msg("observer %s printed %d payloads of %d within %lld ms (%s)", obs[i].name,
                         obs[i].n, want, (long long)bound_ms, obs[i].path);
            dh_sleep_ms(5);
        }
    }
}

/* Each payload "0" or "TERM VALUE"; terms never go back; the expected payloads in order
 * and nothing else, "0" last. */
static void check_observer(const observer *o, char expect[][MSG_LEN], int nexpect)
{
    unsigned long long last = 0;
    for (int i = 0; i < o->n; i++) {
        unsigned long long term;
        int used = 0;
        if (strcmp(o->msg[i], "0") != 0 &&
            (sscanf(o->msg[i], "%llu %n", &term, &used) != 1 || used == 0 || term == 0))
            fail_msg("observer %s: payload %d '%s' is neither '0' nor 'TERM VALUE'", o->name, i,
                     o->msg[i]);
        if (strcmp(o->msg[i], "0") == 0)
            continue;
        if (term < last)
            fail_msg("observer %s: term %llu after %llu", o->name, term, last);
        last = term;
    }
    for (int i = 0; i < o->n && i < nexpect; i++)
        if (strcmp(o->msg[i], expect[i]) != 0)
            fail_msg("observer %s: payload %d is '%s', not '%s'", o->name, i, o->msg[i], expect[i]);
    if (o->n != nexpect)
        fail_msg("observer %s printed %d payloads, not %d (last '%s')", o->name, o->n, nexpect,
                 o->n > 0 ? o->msg[o->n - 1] : "");
    assert_string_equal(o->msg[o->n - 1], "0");
}

/* An array reply of two or three bulk strings (and an integer third) as Redis answers
 * SUBSCRIBE, UNSUBSCRIBE and PING in that mode; freed. */
static void expect_push(redisReply *r, const char *kind, const char *second, long long count)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2)
        fail_msg("expected ['%s', ...], got type %d '%s'", kind, r->type, r->str ? r->str : "");
    assert_string_equal(r->element[0]->str, kind);
    assert_int_equal(r->element[1]->type, REDIS_REPLY_STRING);
    assert_string_equal(r->element[1]->str, second);
    if (count >= 0) {
        assert_int_equal(r->elements, 3);
        assert_int_equal(r->element[2]->type, REDIS_REPLY_INTEGER);
        assert_int_equal(r->element[2]->integer, count);
    } else {
        assert_int_equal(r->elements, 2);
    }
    freeReplyObject(r);
}

/* An ELECT's reply r for what, which must have elected. */
static void elected(redisReply *r, const char *what, dt_lock *l)
{
    if (r->type == REDIS_REPLY_NIL)
        fail_msg("%s answered nil: not elected", what);
    dt_expect_lock(r, l);
}

/* What each observer process needs, checked as test_dlockd_clients checks it. */
static void need(const char *exe, const char *flag, const char *code, const char *package)
{
    if (access(exe, X_OK) != 0)
        fail_msg("%s is missing: apt-get install %s (tools/ensure-deps.sh does it as root)", exe,
                 package);
    char out[1024], err[4096];
    const char *argv[] = {exe, flag, code, NULL};
    if (dh_run(argv, NULL, out, sizeof out, err, sizeof err) != 0)
        fail_msg("%s cannot load its Redis client: apt-get install %s\n%s", exe, package, err);
}

static void test_subscribe_observers(void **state)
{
    (void)state;
    char cli[512], port[16], php_code[512], py_code[512];
    if (dh_find_exe("redis-cli", NULL, cli, sizeof cli) != 0)
        fail_msg("redis-cli is missing: apt-get install redis-tools");
    need("/usr/bin/php", "-r", "exit(class_exists('Redis') ? 0 : 1);", "php-cli php-redis");
    need("/usr/bin/python3", "-c", "import redis", "python3-redis");
    snprintf(port, sizeof port, "%d", dt_one.port);
    /* Each payload a line, flushed: the test reads the files while they run. */
    snprintf(php_code, sizeof php_code,
             "$r = new Redis(); $r->connect('127.0.0.1', %d); "
             "$r->setOption(Redis::OPT_READ_TIMEOUT, -1); "
             "$r->subscribe(['leader:obs'], function($r, $chan, $msg) { echo $msg, \"\\n\"; "
             "flush(); });",
             dt_one.port);
    snprintf(py_code, sizeof py_code,
             "import redis\n"
             "p = redis.Redis(port=%d).pubsub()\n"
             "p.subscribe('leader:obs')\n"
             "for m in p.listen():\n"
             "    if m['type'] == 'message':\n"
             "        print(m['data'].decode(), flush=True)\n",
             dt_one.port);

    enum { NOBS = 4 };
    static observer obs[NOBS];
    memset(obs, 0, sizeof obs);
    observer *ho = &obs[0];
    ho->name = "hiredis";
    redisContext *h = dt_connect(&dt_one);
    expect_push(dt_cmd(h, "SUBSCRIBE leader:obs"), "subscribe", "leader:obs", 1);
    obs[1] = (observer){.name = "elect-redis-cli", .three_lines = true};
    obs[2] = (observer){.name = "elect-phpredis"};
    obs[3] = (observer){.name = "elect-redis-py"};
    const char *cli_argv[] = {cli, "-p", port, "SUBSCRIBE", "leader:obs", NULL};
    const char *php_argv[] = {"/usr/bin/php", "-r", php_code, NULL};
    const char *py_argv[] = {"/usr/bin/python3", "-c", py_code, NULL};
    observer_spawn(&obs[1], cli_argv);
    observer_spawn(&obs[2], php_argv);
    observer_spawn(&obs[3], py_argv);

    /* The state when each subscribed: no one leads. */
    int64_t first = 0, slowest = 0; /* the first report is no change: not in the FIG */
    hiredis_hears(ho, h, 1, "0", &first);
    observers_hear(obs, NOBS, 1, 10000 * dh_slack());

    /* The changes, each heard before the next is made, so that none can be skipped. */
    char expect[6][MSG_LEN];
    redisContext *e1 = dt_connect(&dt_one), *e2 = dt_connect(&dt_one);
    dt_lock l1, l2;
    snprintf(expect[0], MSG_LEN, "0");
    elected(dt_cmd(e1, "ELECT obs VALUE a"), "ELECT obs VALUE a", &l1);
    snprintf(expect[1], MSG_LEN, "%lld a", l1.fence);
    hiredis_hears(ho, h, 2, expect[1], &slowest);
    dt_expect_int(dt_cmd(e1, "PROCLAIM obs %s a2", l1.token), 1);
    snprintf(expect[2], MSG_LEN, "%lld a2", l1.fence);
    hiredis_hears(ho, h, 3, expect[2], &slowest);
    redisFree(e1); /* its leadership resigned: no one leads */
    snprintf(expect[3], MSG_LEN, "0");
    hiredis_hears(ho, h, 4, expect[3], &slowest);
    /* WAIT 0, at once: "no one leads" is published by the script that releases the
     * lock, so whoever hears it finds the lock free. */
    elected(dt_cmd(e2, "ELECT obs VALUE b"), "ELECT obs VALUE b", &l2);
    assert_true(l2.fence > l1.fence);
    snprintf(expect[4], MSG_LEN, "%lld b", l2.fence);
    hiredis_hears(ho, h, 5, expect[4], &slowest);
    dt_expect_int(dt_cmd(e2, "RESIGN obs %s", l2.token), 1);
    snprintf(expect[5], MSG_LEN, "0");
    hiredis_hears(ho, h, 6, expect[5], &slowest);
    redisFree(e2);
    observers_hear(obs, NOBS, 6, 5000 * dh_slack());

    /* The subscribed connection, as Redis treats one. */
    dt_expect_error(dt_cmd(h, "LEADER obs"), "ERR Can't execute 'leader'");
    expect_push(dt_cmd(h, "PING"), "pong", "", -1);
    dt_expect_error(dt_cmd(h, "SUBSCRIBE foo"), "ERR dlockd publishes only leader:NAME channels");
    /* A refused channel among others subscribes to none of them: the count below is 1. */
    dt_expect_error(dt_cmd(h, "SUBSCRIBE leader:other foo"),
                    "ERR dlockd publishes only leader:NAME channels");
    /* The topic knows its state (the others keep it): a new subscription hears it at
     * once, after its confirmation. */
    expect_push(dt_cmd(h, "SUBSCRIBE leader:obs"), "subscribe", "leader:obs", 1);
    redisReply *r = next_push(h, dh_now_ms() + 1000 * dh_slack());
    if (r == NULL)
        fail_msg("a SUBSCRIBE to a known topic heard no state");
    char state_now[MSG_LEN];
    take_message(r, state_now);
    assert_string_equal(state_now, "0");
    expect_push(dt_cmd(h, "UNSUBSCRIBE"), "unsubscribe", "leader:obs", 0);
    leader li;
    assert_false(get_leader(h, "obs", &li));
    dt_expect_status(dt_cmd(h, "PING"), "PONG");
    redisFree(h);

    /* Whatever else they printed meanwhile counts too. */
    for (int i = 1; i < NOBS; i++)
        observer_read(&obs[i]);
    for (int i = 0; i < NOBS; i++)
        check_observer(&obs[i], expect, 6);
    printf("FIG dlockd_elect_observers=%d changes=5 slowest_heard_ms=%lld\n", NOBS,
           (long long)slowest);
    for (int i = 1; i < NOBS; i++) {
        kill(obs[i].pid, SIGTERM);
        dh_reap(obs[i].pid, 5000 * dh_slack(), NULL);
        unlink(obs[i].path);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elect_commands),
        cmocka_unit_test(test_session_failover_five),
        cmocka_unit_test(test_subscribe_observers),
    };
    return cmocka_run_group_tests(tests, dt_one_setup, dt_one_teardown);
}
