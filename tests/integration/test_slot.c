/*
 * test_slot.c: dlock_slot_claim (a scheduled job's slot, claimed once) against real
 * redis-server processes and a file:// directory.
 *
 * What is checked, exactly: the slot a claim gets (a multiple of the period, on the
 * servers' clock: between the slots of TIME read just before and just after the call),
 * the record it writes (slot_ms, at_ms between those two readings, by = "host:pid",
 * PTTL two periods and a minute), that a second claim of the slot or a claim older
 * than the record is refused with who claimed it and writes nothing, that the next
 * slot is claimed again, LOST for a handle whose key is gone, INVALID for each misuse;
 * over three servers: the record on all of them, a claim with one down and its refusal
 * after, NOQUORUM with two down, the median of the clocks (two servers under
 * libfaketime an hour ahead and three hours behind), a record the first round missed
 * (relays); over file://: the lock file's "slot" line next to a fence that still rises,
 * shared holders and permits refused. Claims that must fall in one slot start early in
 * a slot (fresh_slot), so a slot boundary never makes them flaky.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HOUR_MS INT64_C(3600000)

/* This process's "host:pid", as every client here writes it into a record. */
static char g_holder[320];

static void set_holder(void)
{
    char host[256];
    if (gethostname(host, sizeof host) != 0)
        strcpy(host, "unknown");
    host[sizeof host - 1] = '\0';
    snprintf(g_holder, sizeof g_holder, "%s:%ld", host, (long)getpid());
}

/* The clock a claim reads: server s's TIME in ms, or this host's wall clock (NULL, for
 * file:// clients). */
static int64_t clock_ms(dh_server *s)
{
    if (s == NULL) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    }
    redisReply *r = dh_cmd(s, "TIME");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    int64_t ms =
        strtoll(r->element[0]->str, NULL, 10) * 1000 + strtoll(r->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(r);
    return ms;
}

static int64_t slot_of(int64_t ms, int64_t period)
{
    return ms - ms % period;
}

/* The clock, once at least 40% of the current slot is left (times the slack, up to
 * 90%), sleeping into the next slot when less is: claims that must fall in one slot
 * are made soon after. */
static int64_t fresh_slot(dh_server *s, int64_t period)
{
    int64_t need = period * 2 / 5 * dh_slack();
    if (need > period * 9 / 10)
        need = period * 9 / 10;
    int64_t now = clock_ms(s), left = period - now % period;
    if (left >= need)
        return now;
    dh_sleep_ms(left + 5);
    return clock_ms(s);
}

/* Sleep until the clock is in the slot after the one that starts at start. */
static void sleep_past(dh_server *s, int64_t start, int64_t period)
{
    int64_t now;
    while ((now = clock_ms(s)) < start + period)
        dh_sleep_ms(start + period - now + 5);
}

/* A claim that must end with `want`, failing with the detail otherwise. */
#define CLAIM(l, period, out, want) claim_expect((l), (period), (out), (want), __LINE__)
static void claim_expect(dlock_lock *l, int64_t period, dlock_slot *out, int want, int line)
{
    int rc = dlock_slot_claim(l, period, out);
    if (rc != want)
        fail_msg("line %d: dlock_slot_claim(%lld): %s (%s), want %s", line, (long long)period,
                 dlock_errname(rc), dlock_errmsg(), dlock_errname(want));
}

static void expect_errmsg(const char *needle)
{
    if (strstr(dlock_errmsg(), needle) == NULL)
        fail_msg("errmsg \"%s\" lacks \"%s\"", dlock_errmsg(), needle);
}

/* A name's slot record on a server (HGETALL of dlock:{name}:slot): fields 0 when
 * missing. */
typedef struct rec {
    int fields;
    long long slot_ms, at_ms;
    char by[320];
} rec;

static void slot_key(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "dlock:{%s}:slot", name);
}

static void record_of(dh_server *s, const char *name, rec *out)
{
    char key[256];
    slot_key(key, sizeof key, name);
    memset(out, 0, sizeof *out);
    out->slot_ms = out->at_ms = -1;
    redisReply *r = dh_cmd(s, "HGETALL %s", key);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    out->fields = (int)r->elements / 2;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const char *f = r->element[i]->str, *v = r->element[i + 1]->str;
        if (strcmp(f, "slot_ms") == 0)
            out->slot_ms = strtoll(v, NULL, 10);
        else if (strcmp(f, "at_ms") == 0)
            out->at_ms = strtoll(v, NULL, 10);
        else if (strcmp(f, "by") == 0)
            snprintf(out->by, sizeof out->by, "%s", v);
    }
    freeReplyObject(r);
}

/* Write a record as another claimant would have (no expiry). */
static void plant_record(dh_server *s, const char *name, int64_t slot_ms, int64_t at_ms,
                         const char *by)
{
    char key[256];
    long long n;
    slot_key(key, sizeof key, name);
    assert_int_equal(dh_reply_integer(dh_cmd(s, "HSET %s slot_ms %lld at_ms %lld by %s", key,
                                             (long long)slot_ms, (long long)at_ms, by),
                                      "HSET", &n),
                     0);
}

/* Wait until s holds the record of slot start by this process (a round may return at a
 * quorum, before the last server answered): up to 500 ms times the slack. */
static void wait_record(dh_server *s, const char *name, int64_t start, rec *out)
{
    int64_t until = dh_now_ms() + 500 * dh_slack();
    while (record_of(s, name, out), out->slot_ms != start && dh_now_ms() < until)
        dh_sleep_ms(5);
    assert_int_equal(out->fields, 3);
    assert_int_equal(out->slot_ms, start);
    assert_string_equal(out->by, g_holder);
}

static long long slot_pttl(dh_server *s, const char *name)
{
    char key[256];
    slot_key(key, sizeof key, name);
    return it_pttl(s, key);
}

/* A claim that found no record before it. */
static void expect_first(const dlock_slot *s, int64_t period, int64_t t0, int64_t t1)
{
    assert_int_equal(s->start_ms % period, 0);
    assert_in_range(s->start_ms, slot_of(t0, period), slot_of(t1, period));
    assert_int_equal(s->last_ms, -1);
    assert_int_equal(s->last_at_ms, -1);
    assert_string_equal(s->last_by, "");
}

/* ---- one server ---------------------------------------------------------------- */

/* The first claim is recorded; a second holder's claim of the slot is refused and
 * changes nothing; the next slot is claimed again, after the first. */
static void test_claim_then_busy_then_next(void **state)
{
    (void)state;
    dh_server *srv = &it_node[0];
    const int64_t P = 1000;
    dlock_client *a = it_nodes_client(), *b = it_nodes_client();
    dlock_lock *l = it_acquire(a, "job", 30000);
    dlock_slot s, s2, s3;
    int64_t t0 = fresh_slot(srv, P), c0 = dh_now_us();
    CLAIM(l, P, &s, DLOCK_OK);
    int64_t c1 = dh_now_us(), t1 = clock_ms(srv);
    print_message("FIG claim, one server: %lld us\n", (long long)(c1 - c0));
    expect_first(&s, P, t0, t1);

    rec r, r2;
    record_of(srv, "job", &r);
    assert_int_equal(r.fields, 3);
    assert_int_equal(r.slot_ms, s.start_ms);
    assert_string_equal(r.by, g_holder);
    assert_in_range(r.at_ms, t0, t1);
    long long pttl = slot_pttl(srv, "job");
    assert_in_range(pttl, 2 * P + 1, 2 * P + 60000);
    assert_int_equal(dlock_release(l), DLOCK_OK);

    dlock_lock *m = it_acquire(b, "job", 30000);
    CLAIM(m, P, &s2, DLOCK_ERR_BUSY);
    assert_int_equal(s2.start_ms, s.start_ms);
    assert_int_equal(s2.last_ms, s.start_ms);
    assert_int_equal(s2.last_at_ms, r.at_ms);
    assert_string_equal(s2.last_by, g_holder);
    expect_errmsg("claimed already");
    expect_errmsg(g_holder);
    record_of(srv, "job", &r2);
    assert_memory_equal(&r2, &r, sizeof r);
    assert_true(slot_pttl(srv, "job") <= pttl); /* not renewed either */

    sleep_past(srv, s.start_ms, P);
    CLAIM(m, P, &s3, DLOCK_OK);
    assert_int_equal(s3.start_ms, s.start_ms + P);
    assert_int_equal(s3.last_ms, s.start_ms);
    assert_int_equal(s3.last_at_ms, r.at_ms);
    assert_string_equal(s3.last_by, g_holder);
    record_of(srv, "job", &r2);
    assert_int_equal(r2.slot_ms, s3.start_ms);
    assert_true(r2.at_ms >= s3.start_ms);
    assert_int_equal(dlock_release(m), DLOCK_OK);
    dlock_client_free(a);
    dlock_client_free(b);
}

/* A record of a later slot (a claimant whose servers' clock was ahead, or a longer
 * period's) refuses the current one, and stays as it was. */
static void test_later_slot_refuses(void **state)
{
    (void)state;
    dh_server *srv = &it_node[0];
    dlock_client *c = it_nodes_client();
    dlock_lock *l = it_acquire(c, "later", 30000);
    int64_t now = clock_ms(srv), later = slot_of(now, HOUR_MS) + 2 * HOUR_MS;
    plant_record(srv, "later", later, now, "elsewhere:42");
    dlock_slot s;
    CLAIM(l, HOUR_MS, &s, DLOCK_ERR_BUSY);
    assert_true(s.start_ms < later);
    assert_int_equal(s.start_ms % HOUR_MS, 0);
    assert_int_equal(s.last_ms, later);
    assert_int_equal(s.last_at_ms, now);
    assert_string_equal(s.last_by, "elsewhere:42");
    expect_errmsg("older than the last one claimed");
    expect_errmsg("elsewhere:42");
    rec r;
    record_of(srv, "later", &r);
    assert_int_equal(r.slot_ms, later);
    assert_string_equal(r.by, "elsewhere:42");
    assert_int_equal(slot_pttl(srv, "later"), -1);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

/* A handle whose lock key is gone claims nothing, and knows it from then on. */
static void test_lost_handle(void **state)
{
    (void)state;
    dh_server *srv = &it_node[0];
    dlock_client *c = it_nodes_client();
    dlock_lock *l = it_acquire(c, "lost", 30000);
    char key[256];
    it_key(key, sizeof key, "lost");
    it_del(srv, key);
    dlock_slot s;
    CLAIM(l, 1000, &s, DLOCK_ERR_LOST);
    slot_key(key, sizeof key, "lost");
    assert_int_equal(it_exists(srv, key), 0);
    CLAIM(l, 1000, &s, DLOCK_ERR_LOST);
    assert_int_equal(dlock_release(l), DLOCK_ERR_LOST);
    assert_int_equal(it_exists(srv, key), 0);
    dlock_client_free(c);
}

/* Misuse is INVALID and writes nothing; the period's bounds are accepted. */
static void test_invalid(void **state)
{
    (void)state;
    dh_server *srv = &it_node[0];
    dlock_client *c = it_nodes_client();
    dlock_slot s;
    assert_int_equal(dlock_slot_claim(NULL, 1000, &s), DLOCK_ERR_INVALID);
    dlock_lock *l = it_acquire(c, "inv", 30000);
    assert_int_equal(dlock_slot_claim(l, 1000, NULL), DLOCK_ERR_INVALID);
    const int64_t bad[] = {DLOCK_SLOT_PERIOD_MIN_MS - 1, DLOCK_SLOT_PERIOD_MAX_MS + 1, 0, -1000,
                           INT64_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&s, 0x5a, sizeof s);
        CLAIM(l, bad[i], &s, DLOCK_ERR_INVALID);
        expect_errmsg("out of range");
        assert_int_equal(s.start_ms, -1);
        assert_int_equal(s.last_ms, -1);
        assert_string_equal(s.last_by, "");
    }
    dlock_opts sh = {.ttl_ms = 30000, .shared = 1};
    dlock_lock *r = NULL, *p = NULL;
    assert_int_equal(dlock_acquire(c, "inv:shared", &sh, &r), DLOCK_OK);
    CLAIM(r, 1000, &s, DLOCK_ERR_INVALID);
    dlock_opts so = {.ttl_ms = 30000};
    assert_int_equal(dlock_sem_acquire(c, "inv:sem", 2, &so, &p), DLOCK_OK);
    CLAIM(p, 1000, &s, DLOCK_ERR_INVALID);
    expect_errmsg("semaphore permit");
    const char *names[] = {"inv", "inv:shared", "inv:sem"};
    char key[256];
    for (int i = 0; i < 3; i++) {
        slot_key(key, sizeof key, names[i]);
        assert_int_equal(it_exists(srv, key), 0);
    }
    assert_int_equal(dlock_release(r), DLOCK_OK);
    assert_int_equal(dlock_release(p), DLOCK_OK);

    /* The longest period, then the shortest: slots of any period compare by start. */
    CLAIM(l, DLOCK_SLOT_PERIOD_MAX_MS, &s, DLOCK_OK);
    int64_t max_start = s.start_ms;
    assert_int_equal(max_start % DLOCK_SLOT_PERIOD_MAX_MS, 0);
    assert_in_range(slot_pttl(srv, "inv"), 2 * DLOCK_SLOT_PERIOD_MAX_MS,
                    2 * DLOCK_SLOT_PERIOD_MAX_MS + 60000);
    CLAIM(l, DLOCK_SLOT_PERIOD_MIN_MS, &s, DLOCK_OK);
    assert_true(s.start_ms > max_start);
    assert_int_equal(s.last_ms, max_start);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

/* ---- three servers --------------------------------------------------------------- */

/* Recorded on all three; with one down a claim still goes through and refuses the
 * slot's next claim; with two down nothing is decided. */
static void test_quorum(void **state)
{
    (void)state;
    const int64_t P = 1000;
    dlock_client *a = it_nodes_client(), *b = it_nodes_client();
    dlock_lock *l = it_acquire_on_all(a, "q", 30000, it_node, 3);
    dlock_slot s;
    rec r;
    int64_t t0 = fresh_slot(&it_node[0], P), c0 = dh_now_us();
    CLAIM(l, P, &s, DLOCK_OK);
    int64_t c1 = dh_now_us();
    expect_first(&s, P, t0, clock_ms(&it_node[0]));
    print_message("FIG claim, three servers: %lld us\n", (long long)(c1 - c0));
    for (int i = 0; i < 3; i++)
        wait_record(&it_node[i], "q", s.start_ms, &r);
    assert_int_equal(dlock_release(l), DLOCK_OK);

    dh_server_kill(&it_node[2]);
    t0 = fresh_slot(&it_node[0], P);
    l = it_acquire_on_all(a, "q:down", 30000, it_node, 2);
    CLAIM(l, P, &s, DLOCK_OK);
    expect_first(&s, P, t0, clock_ms(&it_node[0]));
    rec rs[2];
    for (int i = 0; i < 2; i++)
        wait_record(&it_node[i], "q:down", s.start_ms, &rs[i]);
    assert_int_equal(dlock_release(l), DLOCK_OK);

    dlock_slot s2;
    dlock_lock *m = it_acquire(b, "q:down", 30000);
    CLAIM(m, P, &s2, DLOCK_ERR_BUSY);
    assert_int_equal(s2.start_ms, s.start_ms);
    assert_int_equal(s2.last_ms, s.start_ms);
    /* Each server stamps at_ms with its own TIME; the read reports one of them. */
    assert_true(s2.last_at_ms == rs[0].at_ms || s2.last_at_ms == rs[1].at_ms);
    assert_string_equal(s2.last_by, g_holder);

    dh_server_kill(&it_node[1]);
    CLAIM(m, 60000, &s2, DLOCK_ERR_NOQUORUM);
    record_of(&it_node[0], "q:down", &r);
    assert_memory_equal(&r, &rs[0], sizeof r);
    assert_int_not_equal(dlock_release(m), DLOCK_OK);
    dlock_client_free(a);
    dlock_client_free(b);
    assert_int_equal(dh_server_restart(&it_node[1]), 0);
    assert_int_equal(dh_server_restart(&it_node[2]), 0);
}

/* With clocks an hour ahead and three hours behind beside a true one, the slot is the
 * true one's (the median); with the true one down, the lower of the two that are left,
 * which is older than the record and refused. */
static void test_median_clock(void **state)
{
    (void)state;
    const int64_t P = 60000;
    dh_server s[3];
    memset(s, 0, sizeof s);
    assert_int_equal(dh_server_start(&s[0], NULL), 0);
    dh_server_opts o = {.clock = "+1h"};
    assert_int_equal(dh_server_start_opts(&s[1], &o), 0);
    o.clock = "-3h";
    assert_int_equal(dh_server_start_opts(&s[2], &o), 0);
    char urls[512];
    dh_server_urls(s, 3, urls, sizeof urls);
    dlock_config cfg;
    it_config_init(&cfg);
    dlock_client *c = it_client_cfg(urls, &cfg);

    dlock_lock *l = it_acquire_on_all(c, "median", 30000, s, 3);
    dlock_slot sl;
    rec r;
    int64_t t0 = clock_ms(&s[0]);
    CLAIM(l, P, &sl, DLOCK_OK);
    int64_t t1 = clock_ms(&s[0]);
    expect_first(&sl, P, t0, t1);
    /* The fake clocks are where they should be (to a minute). */
    assert_in_range(clock_ms(&s[1]) - t1, HOUR_MS - P, HOUR_MS + P);
    assert_in_range(t1 - clock_ms(&s[2]), 3 * HOUR_MS - P, 3 * HOUR_MS + P);
    for (int i = 0; i < 3; i++) {
        wait_record(&s[i], "median", sl.start_ms, &r);
        print_message("FIG median: server %d's at_ms is %+lld ms from the true clock\n", i,
                      (long long)(r.at_ms - t1));
    }

    dh_server_kill(&s[0]);
    dlock_slot s2;
    t0 = clock_ms(&s[2]);
    CLAIM(l, P, &s2, DLOCK_ERR_BUSY);
    assert_in_range(s2.start_ms, slot_of(t0, P), slot_of(clock_ms(&s[2]), P));
    assert_int_equal(s2.last_ms, sl.start_ms);
    expect_errmsg("older than the last one claimed");
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
    dh_servers_stop(s, 3);
}

/* ---- three servers behind relays ------------------------------------------------- */
/* A record on one server that the first round did not reach (its read answered with an
 * error by the relay) is a claim the read did not see: that server refuses the second
 * round, and the claim is refused although the other two, a quorum, took it (a slot
 * runs at most once). The next read sees the record. */
static void test_record_missed_by_read(void **state)
{
    (void)state;
    const int64_t P = 60000;
    dlock_config cfg;
    it_config_init(&cfg);
    dlock_client *c = it_client_cfg(it_relayed_urls, &cfg);
    dlock_lock *l = it_acquire_on_all(c, "ghost", 30000, it_relayed_srv, 3);
    int64_t t0 = clock_ms(&it_relayed_srv[0]), later = slot_of(t0, P) + 2 * P;
    plant_record(&it_relayed_srv[2], "ghost", later, t0, "ghost:1");
    fr_replace(it_relay[2], FR_ERR, FR_REPLACE_INSTEAD, 1, "EVAL*");

    dlock_slot s;
    rec r;
    CLAIM(l, P, &s, DLOCK_ERR_BUSY);
    expect_errmsg("first round did not see");
    assert_int_equal(s.start_ms % P, 0);
    assert_int_equal(s.last_ms, s.start_ms);
    assert_int_equal(s.last_at_ms, -1);
    /* The two that took it keep it (at most once); the third keeps its own. */
    for (int i = 0; i < 2; i++)
        wait_record(&it_relayed_srv[i], "ghost", s.start_ms, &r);
    record_of(&it_relayed_srv[2], "ghost", &r);
    assert_int_equal(r.slot_ms, later);
    assert_string_equal(r.by, "ghost:1");

    CLAIM(l, P, &s, DLOCK_ERR_BUSY);
    assert_int_equal(s.last_ms, later);
    assert_string_equal(s.last_by, "ghost:1");
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_client_free(c);
}

/* ---- file:// --------------------------------------------------------------------- */

static dlock_client *local_client(void)
{
    dlock_client *c = NULL;
    int rc = dlock_client_new(it_local_url, NULL, &c);
    if (rc != DLOCK_OK)
        fail_msg("dlock_client_new(%s): %s (%s)", it_local_url, dlock_errname(rc), dlock_errmsg());
    return c;
}

/* The lock file's header (its first 1024 bytes), and its fence and slot lines. */
typedef struct header {
    unsigned long long fence;
    long long slot_ms, at_ms;
    char by[320];
} header;

static void header_of(const char *name, header *h)
{
    char path[512], text[1025];
    snprintf(path, sizeof path, "%s/%s.lock", it_local_dir, name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(text, 1, 1024, f);
    fclose(f);
    text[n] = '\0';
    memset(h, 0, sizeof *h);
    h->slot_ms = h->at_ms = -1;
    assert_int_equal(sscanf(text, "dlock-local 1\nfence %llu\n", &h->fence), 1);
    const char *p = strstr(text, "\nslot ");
    if (p != NULL)
        assert_int_equal(sscanf(p, "\nslot %lld %lld %319s", &h->slot_ms, &h->at_ms, h->by), 3);
}

/* The claim in the lock file's header: refused for another client in the slot, kept
 * across acquisitions whose fence still rises; an adopted handle cannot claim. */
static void test_local(void **state)
{
    (void)state;
    const int64_t P = 1000;
    dlock_client *a = local_client(), *b = local_client();
    dlock_lock *l = it_acquire(a, "job", 30000);
    uint64_t f1 = dlock_fence(l);
    dlock_slot s, s2;
    int64_t t0 = fresh_slot(NULL, P), c0 = dh_now_us();
    CLAIM(l, P, &s, DLOCK_OK);
    int64_t c1 = dh_now_us();
    expect_first(&s, P, t0, clock_ms(NULL));
    print_message("FIG claim, file://: %lld us\n", (long long)(c1 - c0));
    header h, h2;
    header_of("job", &h);
    assert_int_equal(h.fence, f1);
    assert_int_equal(h.slot_ms, s.start_ms);
    assert_in_range(h.at_ms, t0, clock_ms(NULL));
    assert_string_equal(h.by, g_holder);
    assert_int_equal(dlock_release(l), DLOCK_OK);

    dlock_lock *m = it_acquire(b, "job", 30000);
    assert_true(dlock_fence(m) > f1);
    CLAIM(m, P, &s2, DLOCK_ERR_BUSY);
    assert_int_equal(s2.start_ms, s.start_ms);
    assert_int_equal(s2.last_ms, s.start_ms);
    assert_int_equal(s2.last_at_ms, h.at_ms);
    assert_string_equal(s2.last_by, g_holder);
    expect_errmsg("claimed already");
    header_of("job", &h2);
    assert_int_equal(h2.fence, dlock_fence(m));
    assert_int_equal(h2.slot_ms, h.slot_ms);
    assert_int_equal(h2.at_ms, h.at_ms);
    uint64_t f2 = dlock_fence(m);
    assert_int_equal(dlock_release(m), DLOCK_OK);

    l = it_acquire(a, "job", 30000);
    assert_true(dlock_fence(l) > f2);
    header_of("job", &h2);
    assert_int_equal(h2.fence, dlock_fence(l));
    assert_int_equal(h2.slot_ms, h.slot_ms);
    char token[DLOCK_TOKEN_LEN + 1];
    snprintf(token, sizeof token, "%s", dlock_token(l));
    assert_int_equal(dlock_lock_detach(l), DLOCK_OK);
    dlock_lock *x = NULL;
    assert_int_equal(dlock_lock_adopt(b, "job", token, &x), DLOCK_OK);
    CLAIM(x, P, &s2, DLOCK_ERR_INVALID);
    expect_errmsg("adopted");
    assert_int_equal(dlock_release(x), DLOCK_OK);

    /* A shared holder and a permit (a slot of the file, not its gate): refused. */
    dlock_opts o = {.ttl_ms = 30000, .shared = 1};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(
            k ? dlock_sem_acquire(a, "job", 3, &o, &x) : dlock_acquire(a, "job", &o, &x), DLOCK_OK);
        CLAIM(x, P, &s2, DLOCK_ERR_INVALID);
        expect_errmsg("exclusive holder");
        assert_int_equal(dlock_release(x), DLOCK_OK);
        o.shared = 0;
    }
    dlock_client_free(a);
    dlock_client_free(b);
}

int main(void)
{
    set_holder();
    const struct CMUnitTest one[] = {
        cmocka_unit_test(test_claim_then_busy_then_next),
        cmocka_unit_test(test_later_slot_refuses),
        cmocka_unit_test(test_lost_handle),
        cmocka_unit_test(test_invalid),
    };
    const struct CMUnitTest three[] = {
        cmocka_unit_test(test_quorum),
        cmocka_unit_test(test_median_clock),
    };
    const struct CMUnitTest relayed[] = {
        cmocka_unit_test(test_record_missed_by_read),
    };
    const struct CMUnitTest local[] = {
        cmocka_unit_test(test_local),
    };
    return IT_NODES_GROUPS("slot", one, three) +
           cmocka_run_group_tests_name("slot_relayed", relayed, it_relayed_setup,
                                       it_relayed_teardown) +
           cmocka_run_group_tests_name("slot_file", local, it_local_setup, it_local_teardown);
}
