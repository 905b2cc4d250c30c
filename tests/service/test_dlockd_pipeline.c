/*
 * test_dlockd_pipeline: what dlockd keeps while many clients' requests are outstanding
 * at its lock server at once, asserted from outside whatever carries them (a connection
 * each, or a few shared ones that pipeline them): replies that never cross clients, a
 * server SIGSTOPped with 64 LOCKs in flight, clients that close or reset with their
 * LOCK in flight. Real redis-servers and dlockd processes; the clients are raw sockets
 * driven from this thread by poll(2), their replies parsed by hiredis's reader.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"
#include "itest.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* CLIENTS in flight at once on NAMES names, CYCLES LOCKs each; STALLED LOCKs at a
 * paused server; CLOSERS clients gone with their LOCK in flight (twice as many beside
 * BUSY clients that keep the pipeline full). 256 clients and dlockd's two descriptors
 * each (and 224 for its server) fit the usual soft limit of 1024 open files. */
enum { CLIENTS = 256, NAMES = 64, CYCLES = 20, STALLED = 64, CLOSERS = 64, BUSY = 64 };

/* The TTL of the LOCKs a stalled server may run late, times the slack: how long such a
 * name may stay held at worst, short so that the test stays quick, and long enough for
 * one granted just before the stop to outlive it. */
#define STALL_TTL_MS 2000
/* The per-server deadline of the dlockd whose server stalls: dlockd's default, three
 * times the worst lateness measured on a loaded machine (docs/service.md), so that only
 * the stall makes a LOCK late; times the slack. */
#define STALL_DEADLINE_MS 200

/* One client on a raw non-blocking socket: the replies owed to the commands it sent,
 * and for the workload (work_*) where it is in its cycles. */
typedef struct pc {
    int fd, owed;
    redisReader *rd;
    int cycle, name, phase; /* name: the shared name's index, -1 a name of its own */
    bool waits;
    long granted_turn;
    char lname[64], token[DLOCK_TOKEN_LEN + 1];
} pc;

enum { LOCKING, HOLDING, UNLOCKING, DONE };

static void pc_open(pc *c, const dt_daemon *d)
{
    memset(c, 0, sizeof *c);
    c->fd = dt_raw(d);
    assert_int_equal(fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK), 0);
    c->rd = redisReaderCreate();
    assert_non_null(c->rd);
}

/* Send one command (redisCommand's format). A client reads the replies to a command or
 * two before it sends more, so its socket has room: a short write fails as any other. */
static void pc_send(pc *c, const char *fmt, ...)
{
    char *cmd = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = redisvFormatCommand(&cmd, fmt, ap);
    va_end(ap);
    assert_true(n > 0);
    if (dh_send_all(c->fd, cmd, (size_t)n) != 0)
        fail_msg("write to dlockd: %s", strerror(errno));
    redisFreeCommand(cmd);
    c->owed++;
}

/* Feed what has arrived to the reader; false when dlockd closed the connection. */
static bool pc_pump(pc *c)
{
    char buf[16384];
    ssize_t n;
    while ((n = recv(c->fd, buf, sizeof buf, 0)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0)
            assert_int_equal(redisReaderFeed(c->rd, buf, (size_t)n), REDIS_OK);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* Client i's next whole reply, or NULL. A reply to nothing it sent is another
 * client's, or a second answer to one command: either fails. */
static redisReply *pc_reply(pc *c, int i)
{
    redisReply *r = NULL;
    assert_int_equal(redisReaderGetReply(c->rd, (void **)&r), REDIS_OK);
    if (r != NULL && c->owed-- == 0)
        fail_msg("client %d: a reply to nothing it sent (type %d '%s')", i, r->type,
                 r->str ? r->str : "");
    return r;
}

/* Close the socket: with reset, a reset (SO_LINGER 0) rather than a FIN. */
static void pc_close(pc *c, bool reset)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    if (reset)
        assert_int_equal(setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    close(c->fd);
    redisReaderFree(c->rd);
}

/* LOCK PREFIX-i written on c, then c closed: a FIN for even i, a reset for odd i. */
static void lock_and_close(pc *c, const char *prefix, int i)
{
    pc_send(c, "LOCK %s-%d TTL 30000", prefix, i);
    pc_close(c, i % 2 == 1);
}

/* Wait up to timeout_ms for input on the clients that owe replies, and read it. dlockd
 * closing one fails: none has done anything to deserve it. */
static void pump_all(pc *cs, int n, int timeout_ms)
{
    static struct pollfd p[CLIENTS];
    int waiting = 0;
    for (int i = 0; i < n; i++) {
        p[i] = (struct pollfd){.fd = cs[i].owed > 0 ? cs[i].fd : -1, .events = POLLIN};
        waiting += cs[i].owed > 0;
    }
    if (waiting == 0)
        return;
    int rc = poll(p, (nfds_t)n, timeout_ms);
    if (rc < 0 && errno != EINTR)
        fail_msg("poll: %s", strerror(errno));
    for (int i = 0; i < n && rc > 0; i++)
        if (p[i].revents != 0 && !pc_pump(&cs[i]))
            fail_msg("client %d: dlockd closed its connection with %d replies owed", i, cs[i].owed);
}

/* One reply from each of cs[0..n) into r[i], and when it came (ms after t0) into ms[i]
 * (NULL: not kept); fails unless all came within bound_ms of t0. */
static void collect(pc *cs, int n, redisReply **r, int64_t *ms, int64_t t0, int64_t bound_ms)
{
    int got = 0;
    memset(r, 0, (size_t)n * sizeof *r);
    while (got < n) {
        int64_t left = t0 + bound_ms - dh_now_ms();
        if (left <= 0)
            fail_msg("%d of %d clients got no reply within %lld ms", n - got, n,
                     (long long)bound_ms);
        pump_all(cs, n, (int)left);
        for (int i = 0; i < n; i++) {
            if (r[i] != NULL || (r[i] = pc_reply(&cs[i], i)) == NULL)
                continue;
            if (ms != NULL)
                ms[i] = dh_now_ms() - t0;
            got++;
        }
    }
}

/* s holds name's key (suffix "": the lock; ":fence": its fence, which a grant sets). */
static bool has_key(dh_server *s, const char *name, const char *suffix)
{
    char key[256];
    snprintf(key, sizeof key, "dlock:{%s}%s", name, suffix);
    return it_exists(s, key) != 0;
}

/* LOCK name on c (no WAIT) until granted, within bound ms of t0, a nil retried (a late
 * grant may hold it until released or expired; bound 0: the first LOCK must be
 * granted); its token checked on s and the lock released. The time since t0. */
static int64_t relock(redisContext *c, dh_server *s, const char *name, int64_t t0, int64_t bound)
{
    redisReply *r;
    while ((r = dt_cmd(c, "LOCK %s TTL 10000", name))->type == REDIS_REPLY_NIL) {
        freeReplyObject(r);
        if (dh_now_ms() - t0 >= bound)
            fail_msg("%s is not free %lld ms on", name, (long long)bound);
        dh_sleep_ms(20);
    }
    dt_lock l;
    dt_expect_lock(r, &l);
    it_expect_holder(s, name, l.token);
    dt_expect_int(dt_cmd(c, "UNLOCK %s %s", name, l.token), 1);
    return dh_now_ms() - t0;
}

/* Each client LOCKs a name of its own and UNLOCKs it, all at once: dlockd's connections
 * to the server are open and its scripts loaded before a test stops the server. */
static void warm_up(pc *cs, int n, const char *prefix)
{
    redisReply *r[CLIENTS];
    for (int i = 0; i < n; i++)
        pc_send(&cs[i], "LOCK %s-%d TTL 10000", prefix, i);
    collect(cs, n, r, NULL, dh_now_ms(), 10000 * dh_slack());
    for (int i = 0; i < n; i++) {
        dt_lock l;
        dt_expect_lock(r[i], &l);
        pc_send(&cs[i], "UNLOCK %s-%d %s", prefix, i, l.token);
    }
    collect(cs, n, r, NULL, dh_now_ms(), 10000 * dh_slack());
    for (int i = 0; i < n; i++)
        dt_expect_int(r[i], 1);
}

/* dlockd for url with a per-server deadline of deadline_ms. PATIENT (10 s times the
 * slack) where the server does not stall: a reply late for want of a core on a loaded
 * machine is not what those tests look for, and its -UNAVAILABLE, an outcome unknown,
 * may leave a grant to its TTL (docs/service.md, "The per-server deadline"). */
#define PATIENT (10000 * dh_slack())
static void start_with(dt_daemon *d, const char *url, int64_t deadline_ms)
{
    char timeout[32];
    snprintf(timeout, sizeof timeout, "%lld", (long long)deadline_ms);
    dt_start(d, url, "--timeout", timeout, NULL);
}

/* ---- the workload: clients in cycles of LOCK, a hold, UNLOCK and CHECK ---------------- */

typedef struct work {
    const char *prefix;
    pc *c;                        /* n clients, done of them through their cycles */
    int n, done, closers, closed; /* closers: more to open, LOCK on and close meanwhile */
    long turn;                    /* poll turns so far */
    dh_server *srv;               /* the lock server, */
    redisContext *redis;          /* and a connection to it, to read the key a grant set */
    int holder[NAMES];            /* 1 + the client that holds each shared name, 0: none */
    long long fence[NAMES];       /* the last fence granted of each */
    long grants, nils;
} work;

/* Client i's LOCK of its cycle, or its end after the last. Of every four cycles two
 * wait for a shared name (WAIT), one tries one (a grant or nil) and one takes a name of
 * its own (granted at once). Neighbours 4k..4k+3 share a name in a cycle, the next name
 * the cycle after. */
static void work_lock(work *w, int i)
{
    pc *c = &w->c[i];
    if (c->cycle == CYCLES) {
        c->phase = DONE;
        w->done++;
        return;
    }
    int kind = c->cycle % 4;
    c->name = kind == 1 ? -1 : (i / 4 + c->cycle) % NAMES;
    c->waits = kind == 0 || kind == 2;
    if (c->name < 0)
        snprintf(c->lname, sizeof c->lname, "%s-own-%d-%d", w->prefix, i, c->cycle);
    else
        snprintf(c->lname, sizeof c->lname, "%s-%d", w->prefix, c->name);
    pc_send(c, "LOCK %s TTL 10000 WAIT %lld", c->lname, c->waits ? 10000 * dh_slack() : 0);
    c->phase = LOCKING;
}

/* A grant to client i: the server holds the name it asked for with the token it got (a
 * reply meant for another client names another lock or token), nobody else holds that
 * name as far as the clients know, and its fence is above every earlier grant's of the
 * name: grants are read here in the order they were made, since the next can only come
 * after the holder's UNLOCK, which is sent after its grant is read. */
static void work_granted(work *w, int i, redisReply *r)
{
    pc *c = &w->c[i];
    dt_lock l;
    dt_expect_lock(r, &l);
    memcpy(c->token, l.token, sizeof c->token);
    redisReply *v = redisCommand(w->redis, "GET dlock:{%s}", c->lname);
    assert_non_null(v);
    if (v->type != REDIS_REPLY_STRING || v->len < DLOCK_TOKEN_LEN ||
        memcmp(v->str, l.token, DLOCK_TOKEN_LEN) != 0)
        fail_msg("client %d: LOCK %s answered token %s, but the server's key holds '%s'", i,
                 c->lname, l.token, v->str ? v->str : "(nil)");
    freeReplyObject(v);
    int k = c->name;
    if (k >= 0 && (w->holder[k] != 0 || l.fence <= w->fence[k]))
        fail_msg("%s granted to client %d, fence %lld, while client %d holds it (-1: none), "
                 "after fence %lld",
                 c->lname, i, l.fence, w->holder[k] - 1, w->fence[k]);
    if (k >= 0) {
        w->holder[k] = i + 1;
        w->fence[k] = l.fence;
    }
    c->phase = HOLDING;
    c->granted_turn = w->turn;
    w->grants++;
}

/* Client i's reply r: a grant, a nil (only for a try of a shared name: every WAIT is
 * long enough, and nobody else takes a client's own names), or to the UNLOCK, then the
 * CHECK of the same token: 1, then 0 (the pair run or answered out of order gives 1 and
 * 1, or 0 first). After the last reply of a cycle, the next. */
static void work_reply(work *w, int i, redisReply *r)
{
    pc *c = &w->c[i];
    if (c->phase == LOCKING && r->type == REDIS_REPLY_ARRAY) {
        work_granted(w, i, r);
        return;
    }
    long long want = c->owed == 1 ? 1 : 0;
    if (c->phase == LOCKING && (r->type != REDIS_REPLY_NIL || c->waits || c->name < 0))
        fail_msg("client %d: LOCK %s%s answered type %d '%s'", i, c->lname, c->waits ? " WAIT" : "",
                 r->type, r->str ? r->str : "");
    if (c->phase != LOCKING &&
        (c->phase != UNLOCKING || r->type != REDIS_REPLY_INTEGER || r->integer != want))
        fail_msg("client %d: %s %s answered type %d (%lld, '%s'), not :%lld", i,
                 want ? "UNLOCK" : "CHECK after UNLOCK", c->lname, r->type, r->integer,
                 r->str ? r->str : "", want);
    w->nils += c->phase == LOCKING;
    freeReplyObject(r);
    if (c->owed == 0) {
        c->cycle++;
        work_lock(w, i);
    }
}

/* n clients of d, every first LOCK sent before any reply is read, run to their last
 * cycle, and w->closers more opened and closed with a LOCK in flight, four a turn. In a
 * poll turn the replies that came are taken, then the clients granted in an earlier turn
 * UNLOCK: each holds across a poll at least, and any grant of its name that came
 * meanwhile was made while it held. */
static void work_run(work *w, const dt_daemon *d)
{
    w->redis = dh_connect(w->srv);
    assert_non_null(w->redis);
    for (int i = 0; i < w->n; i++)
        pc_open(&w->c[i], d);
    for (int i = 0; i < w->n; i++)
        work_lock(w, i);
    int64_t deadline = dh_now_ms() + 60000 * dh_slack();
    while (w->done < w->n || w->closed < w->closers) {
        for (int k = 0; k < 4 && w->closed < w->closers; k++) {
            pc c;
            pc_open(&c, d);
            lock_and_close(&c, "busy_close", w->closed++);
        }
        if (dh_now_ms() > deadline)
            fail_msg("%d of %d clients still in their cycles after %lld ms", w->n - w->done, w->n,
                     (long long)(60000 * dh_slack()));
        w->turn++;
        pump_all(w->c, w->n, 100);
        redisReply *r;
        for (int i = 0; i < w->n; i++)
            while ((r = pc_reply(&w->c[i], i)) != NULL)
                work_reply(w, i, r);
        for (int i = 0; i < w->n; i++) {
            pc *c = &w->c[i];
            if (c->phase != HOLDING || c->granted_turn == w->turn)
                continue;
            if (c->name >= 0)
                w->holder[c->name] = 0;
            pc_send(c, "UNLOCK %s %s", c->lname, c->token);
            pc_send(c, "CHECK %s %s", c->lname, c->token);
            c->phase = UNLOCKING;
        }
    }
    /* Every shared name is free on the server: each client UNLOCKed what it held. */
    for (int k = 0; k < NAMES; k++) {
        char name[64];
        snprintf(name, sizeof name, "%s-%d", w->prefix, k);
        if (has_key(w->srv, name, ""))
            fail_msg("%s is still held after every client UNLOCKed it", name);
    }
    for (int i = 0; i < w->n; i++)
        pc_close(&w->c[i], false);
    redisFree(w->redis);
}

/* 256 clients in flight at once, 64 names shared by neighbours, 20 cycles each: every
 * reply is its own client's (its token on the server, UNLOCK 1, then CHECK 0), at most
 * one holder of a name at a time, fences rising in grant order, every name free at the
 * end; both waits and nils happen. */
static void test_dlockd_pipeline_replies_never_cross(void **state)
{
    (void)state;
    dt_daemon d;
    start_with(&d, it_srv.url, PATIENT);
    static pc c[CLIENTS];
    work w = {.prefix = "pl", .c = c, .n = CLIENTS, .srv = &it_srv};
    redisContext *mon = dt_connect(&d);
    long waits0 = dt_info(mon, "waits");
    int64_t t0 = dh_now_ms();
    work_run(&w, &d);
    print_message("FIG dlockd_pipeline_%d_clients_%d_cycles_ms %lld ms\n", CLIENTS, CYCLES,
                  (long long)(dh_now_ms() - t0));
    long waits = dt_info(mon, "waits") - waits0;
    print_message("FIG dlockd_pipeline_grants %ld of %d LOCKs\n", w.grants, CLIENTS * CYCLES);
    print_message("FIG dlockd_pipeline_nils %ld of %d LOCKs\n", w.nils, CLIENTS * CYCLES);
    print_message("FIG dlockd_pipeline_waits %ld of %d LOCKs\n", waits, CLIENTS * CYCLES);
    assert_int_equal(w.grants + w.nils, (long)CLIENTS * CYCLES);
    assert_true(waits > 0); /* the clients' mix did what it is for */
    assert_int_equal(dt_info(mon, "session_locks"), 0);
    redisFree(mon);
    assert_int_equal(dt_stop(&d), 0);
}

/* The lock server SIGSTOPped with 64 LOCKs outstanding, stopped before they are sent,
 * then right after. Each is answered -UNAVAILABLE within the per-server deadline (times
 * a few), or after the send granted, nothing else and nothing more; another client is
 * served meanwhile. Once the server is back a new name is granted at once, and each
 * refused LOCK's name, which the server may have run late, is free within its TTL: an
 * outcome unknown is released, or expires (docs/service.md, "The per-server deadline"). */
static void test_dlockd_pipeline_server_stalls(void **state)
{
    (void)state;
    dh_server srv, *s = &srv;
    assert_int_equal(dh_server_start(s, NULL), 0);
    int64_t deadline = STALL_DEADLINE_MS * dh_slack();
    char name[64];
    dt_daemon d;
    start_with(&d, s->url, deadline);
    redisContext *mon = dt_connect(&d);
    static pc c[STALLED];
    static redisReply *r[STALLED];
    static dt_lock l[STALLED];
    int64_t ms[STALLED];
    for (int i = 0; i < STALLED; i++)
        pc_open(&c[i], &d);
    warm_up(c, STALLED, "stall-warm");
    /* One round's deadline, plus the clean-up of a failed one. */
    int64_t bound = 4 * deadline + 200 * dh_slack(), ttl = STALL_TTL_MS * dh_slack();
    for (int after = 0; after < 2; after++) {
        const char *fig = after ? "stopped_after_send" : "stopped_before_send";
        long unavailable0 = dt_info(mon, "errors_unavailable");
        if (!after)
            dh_server_pause(s);
        int64_t t0 = dh_now_ms();
        for (int i = 0; i < STALLED; i++)
            pc_send(&c[i], "LOCK %s-%d TTL %lld", fig, i, (long long)ttl);
        if (after)
            dh_server_pause(s);
        dt_expect_status(dt_cmd(mon, "PING"), "PONG"); /* nothing waits behind them */
        assert_true(dh_now_ms() - t0 < deadline);
        int64_t worst = 0, granted = 0;
        collect(c, STALLED, r, ms, t0, bound);
        for (int i = 0; i < STALLED; i++) {
            l[i].token[0] = '\0';
            if (after && r[i]->type == REDIS_REPLY_ARRAY) {
                dt_expect_lock(r[i], &l[i]); /* answered before the stop */
                granted++;
                continue;
            }
            if (r[i]->type != REDIS_REPLY_ERROR || strncmp(r[i]->str, "UNAVAILABLE ", 12) != 0)
                fail_msg("client %d: LOCK %s-%d to a stalled server answered type %d '%s'", i, fig,
                         i, r[i]->type, r[i]->str ? r[i]->str : "");
            freeReplyObject(r[i]);
            worst = ms[i] > worst ? ms[i] : worst;
        }
        print_message("FIG dlockd_pipeline_%s_unavailable_worst_ms %lld ms (deadline %lld)\n", fig,
                      (long long)worst, (long long)deadline);
        print_message("FIG dlockd_pipeline_%s_granted %lld of %d\n", fig, (long long)granted,
                      STALLED);
        assert_int_equal(dt_info(mon, "errors_unavailable") - unavailable0, STALLED - granted);
        assert_int_equal(dt_info(mon, "session_locks"), granted);
        dh_server_resume(s);
        int64_t resumed = dh_now_ms();
        snprintf(name, sizeof name, "%s-new", fig);
        int64_t first = relock(mon, s, name, resumed, 0);
        print_message("FIG dlockd_pipeline_%s_first_lock_after_ms %lld ms\n", fig,
                      (long long)first);
        assert_true(first < bound);
        /* Nothing more came on the stalled clients' connections: a PING's answer is
         * next. */
        for (int i = 0; i < STALLED; i++)
            pc_send(&c[i], "PING");
        collect(c, STALLED, r, NULL, dh_now_ms(), 5000 * dh_slack());
        for (int i = 0; i < STALLED; i++)
            dt_expect_status(r[i], "PONG");
        int64_t late = 0;
        int ran = 0;
        for (int i = 0; i < STALLED; i++) {
            snprintf(name, sizeof name, "%s-%d", fig, i);
            if (l[i].token[0] != '\0') {
                /* granted before the stop: held by it, with its token, till its UNLOCK */
                it_expect_holder(s, name, l[i].token);
                pc_send(&c[i], "UNLOCK %s %s", name, l[i].token);
                collect(&c[i], 1, r, NULL, dh_now_ms(), 5000 * dh_slack());
                dt_expect_int(r[0], 1);
                continue;
            }
            ran += has_key(s, name, ":fence");
            int64_t t = relock(mon, s, name, resumed, ttl + 1000 * dh_slack());
            late = t > late ? t : late;
        }
        /* Shown, not asserted: a request may also have been dropped with its connection. */
        print_message("FIG dlockd_pipeline_%s_refused_run_late %d of %lld\n", fig, ran,
                      (long long)(STALLED - granted));
        print_message("FIG dlockd_pipeline_%s_refused_free_ms %lld ms (TTL %lld)\n", fig,
                      (long long)late, (long long)ttl);
    }
    for (int i = 0; i < STALLED; i++)
        pc_close(&c[i], false);
    dt_wait_info(mon, "session_locks", 0, 2000 * dh_slack());
    redisFree(mon);
    assert_int_equal(dt_stop(&d), 0);
    dh_server_stop(s);
}

/* After closers 0..n-1 of prefix, from t0: a closer that sent a FIN had its LOCK run
 * (docs/service.md, "A client's FIN"), so granted, and every name, FIN or reset, is
 * free within 2 s (times the slack), and granted to another client's LOCK once dlockd
 * has seen every closer go. The resets' LOCKs that were granted are shown. */
static void expect_closers_free(redisContext *mon, dh_server *s, const char *prefix, int n,
                                int64_t t0)
{
    char name[64];
    int64_t worst = 0, bound = 2000 * dh_slack();
    int rst = 0;
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "%s-%d", prefix, i);
        while ((i % 2 == 0 && !has_key(s, name, ":fence")) || has_key(s, name, "")) {
            if (dh_now_ms() - t0 > bound)
                fail_msg("%s held, or its LOCK before a FIN not run, %lld ms on", name,
                         (long long)bound);
            dh_sleep_ms(5);
        }
        worst = dh_now_ms() - t0;
    }
    /* Until every closer's connection is gone in dlockd, and with it whatever its LOCK
     * was still doing: then nothing holds the names, and nothing will. */
    dt_wait_info(mon, "connected_clients", 1, 2000 * dh_slack());
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "%s-%d", prefix, i);
        rst += i % 2 == 1 && has_key(s, name, ":fence");
        relock(mon, s, name, dh_now_ms(), 0);
    }
    print_message("FIG dlockd_pipeline_%s_names_free_ms %lld ms (TTL 30000)\n", prefix,
                  (long long)worst);
    print_message("FIG dlockd_pipeline_%s_reset_granted %d of %d\n", prefix, rst, n / 2);
    assert_int_equal(dt_info(mon, "session_locks"), 0);
}

/* The lock server paused while 64 clients (accepted before) write a LOCK (TTL 30000)
 * and close, half with a FIN, half with a reset; resumed once dlockd has read every
 * LOCK. Its deadline is far past the pause, so each LOCK is answered by the server, not
 * given up as outcome unknown: every name is free again within a second or two, well
 * before the 30 s TTL. */
static void test_dlockd_pipeline_close_while_paused(void **state)
{
    (void)state;
    dh_server s;
    assert_int_equal(dh_server_start(&s, NULL), 0);
    dt_daemon d;
    start_with(&d, s.url, PATIENT);
    redisContext *mon = dt_connect(&d);
    static pc c[CLOSERS];
    for (int i = 0; i < CLOSERS; i++)
        pc_open(&c[i], &d);
    warm_up(c, CLOSERS, "cp-warm");
    long read0 = dt_info(mon, "total_commands_processed");
    dh_server_pause(&s);
    int64_t t0 = dh_now_ms();
    for (int i = 0; i < CLOSERS; i++)
        lock_and_close(&c[i], "paused_close", i);
    /* Until dlockd has read every LOCK: INFO needs no lock server, and counts itself. */
    for (long polls = 1; dt_info(mon, "total_commands_processed") - read0 - polls < CLOSERS;
         polls++) {
        if (dh_now_ms() - t0 > 5000 * dh_slack())
            fail_msg("dlockd did not read the %d LOCKs within %lld ms", CLOSERS,
                     (long long)(5000 * dh_slack()));
        dh_sleep_ms(2);
    }
    print_message("FIG dlockd_pipeline_close_while_paused_pause_ms %lld ms\n",
                  (long long)(dh_now_ms() - t0));
    dh_server_resume(&s);
    expect_closers_free(mon, &s, "paused_close", CLOSERS, dh_now_ms());
    redisFree(mon);
    assert_int_equal(dt_stop(&d), 0);
    dh_server_stop(&s);
}

/* 128 clients write a LOCK (TTL 30000) and close, half with a FIN, half with a reset, a
 * few at a time while 64 others keep the pipeline busy with their checked cycles: every
 * FIN's LOCK is granted, and no name stays held. */
static void test_dlockd_pipeline_close_while_busy(void **state)
{
    (void)state;
    dt_daemon d;
    start_with(&d, it_srv.url, PATIENT);
    static pc c[BUSY];
    work w = {.prefix = "pb", .c = c, .n = BUSY, .srv = &it_srv, .closers = 2 * CLOSERS};
    redisContext *mon = dt_connect(&d);
    long accepted = dt_info(mon, "total_connections_received") + BUSY + 2 * CLOSERS;
    work_run(&w, &d);
    /* Every closer accepted: none can come to dlockd after the checks. */
    dt_wait_info(mon, "total_connections_received", accepted, 5000 * dh_slack());
    expect_closers_free(mon, &it_srv, "busy_close", 2 * CLOSERS, dh_now_ms());
    redisFree(mon);
    assert_int_equal(dt_stop(&d), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dlockd_pipeline_replies_never_cross),
        cmocka_unit_test(test_dlockd_pipeline_server_stalls),
        cmocka_unit_test(test_dlockd_pipeline_close_while_paused),
        cmocka_unit_test(test_dlockd_pipeline_close_while_busy),
    };
    return cmocka_run_group_tests(tests, it_srv_setup, it_srv_teardown);
}
