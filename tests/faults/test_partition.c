/*
 * test_partition.c: scenario 12 of the fault suite (docs/testing.md), partitions, on a private
 * network of namespaces (netns.h): three redis-server nodes, each in its own namespace,
 * and worker processes in two client namespaces, A and B, two workers in each.
 *
 *   one node dropped        n3 blackholed (iptables DROP) for every client
 *   majority split          n2 and n3 blackholed: no quorum anywhere
 *   overlapping majorities  A cannot reach n3, B cannot reach n1: A sees {n1, n2},
 *                           B sees {n2, n3}; both majorities meet only in n2
 *   tcp resets              n3, then n2 and n3, answer with TCP resets (REJECT)
 *   flapping                every 500 ms a different fault, or none: blackholes, resets,
 *                           the split, the overlap, a node's link down
 *   no ghost grant          commands a client gave up on during a blackhole must not take
 *                           the lock when the network heals (see that test's comment)
 *
 * Every worker loops on one name: acquire (try, ttl 1 s), a short section, release.
 * In its section it writes to a fenced register (dlock_fence_admit on a counter in
 * shared memory) and increments a shared counter by read, sleep, write. Every call and
 * every grant is recorded in shared memory, on CLOCK_MONOTONIC, and checked after:
 *   - no call returns later than its deadline + 100 ms (times DLOCK_TEST_SLACK); the
 *     deadline of a call is one round (these calls never retry: wait_ms is 0), and a
 *     round lasts at most the per-node timeout plus the connect timeout, which a node
 *     that must be reconnected gets on top (conn.c's connect deadline);
 *   - mutual exclusion: the grants [acquired, min(release called, validity end)] of
 *     different acquisitions never overlap;
 *   - fence order: in the order of the grants, fences strictly increase; the fenced
 *     register never rejects a write (no holder writes past its validity); no update is
 *     lost (the counter equals the number of sections);
 *   - every call returns a documented code for its case (acquire: OK, BUSY, NOQUORUM;
 *     release: OK, LOST, NOQUORUM), and availability is what the fault allows: grants
 *     while a majority is reachable, none and only NOQUORUM during the split;
 *   - after healing, connections recover: within a bound, every worker is granted the
 *     lock again and every node serves every client namespace again (CLIENT LIST);
 *   - no descriptor growth: each worker ends with no more descriptors than it had when
 *     all its connections were up, and dlock_client_free leaves none; nor does the test
 *     process (admin connections).
 * Figures: FIG lines per scenario (grants, longest call, recovery time).
 *
 * Needs root, ip and iptables (netns.h): without them the group setup fails with a
 * message saying what is missing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dlock.h"
#include "integration/itest.h" /* IT_CASE_WITH */
#include "netns.h"
#include "support.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NODES          3
#define CLIENTS        2 /* namespaces A (0) and B (1) */
#define WORKERS        4 /* worker w runs in namespace w % CLIENTS */
#define TIMEOUT_MS     100
#define CONNECT_MS     200
#define MARGIN_MS      100 /* "no call passes its deadline by more than 100 ms" */
#define TTL_MS         1000
#define SECTION_MS     5
#define RECOVER_MS     5000 /* healing to every worker granted and every node serving */
#define MAX_CALLS      40000
#define MAX_GRANTS     20000
#define MAX_PHASES     64
#define READY_TIMEOUT  10000
#define FLAP_PERIOD_MS 500

enum op { OP_ACQUIRE = 1, OP_RELEASE = 2 };

typedef struct call_rec {
    int8_t op, rc, worker, pad;
    int16_t phase0, phase1; /* phase when the call started, and when it returned */
    int64_t t0_us, t1_us;
} call_rec;

typedef struct grant_rec {
    int64_t ok_us, end_us;
    uint64_t fence;
    int worker;
} grant_rec;

/* Shared between the test and its workers (MAP_SHARED, made before fork). */
typedef struct shared {
    _Atomic int phase; /* index into the test's phase table */
    _Atomic int stop;
    _Atomic int ready;
    _Atomic int ncalls, ngrants;
    uint64_t highest; /* the fenced register's highest fence (dlock_fence_admit) */
    _Atomic long admitted, rejected, sections;
    long counter; /* read-modify-written in sections only */
    _Atomic int64_t last_ok_us[WORKERS];
    int fd_base[WORKERS], fd_end[WORKERS], fd_start[WORKERS], fd_freed[WORKERS];
    _Atomic int bad_rc[WORKERS]; /* a setup failure in a worker: its code */
    call_rec calls[MAX_CALLS];
    grant_rec grants[MAX_GRANTS];
} shared;

/* What the network looked like in one phase. */
/* PH_CHANGING: while dn_apply puts new rules in force, one node after another; a call
 * in it met the network of neither the phase before nor the one after. */
enum phase_kind { PH_WARM, PH_FAULT, PH_NOQUORUM, PH_HEALING, PH_HEALED, PH_CHANGING };

typedef struct phase {
    enum phase_kind kind;
    char what[64];
} phase;

static dn_net g_net;
static shared *g_sh;
static pid_t g_pids[WORKERS]; /* the running workers, 0 when none */
static phase g_phases[MAX_PHASES];
static int g_nphases;
static long long g_slack;

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The longest a call may take: one round plus the margin (see the top comment). */
static int64_t bound_us(void)
{
    return (TIMEOUT_MS + CONNECT_MS + MARGIN_MS) * g_slack * 1000;
}

/* ---- the workers -------------------------------------------------------------------- */

static void record_call(int w, int op, int rc, int phase0, int64_t t0, int64_t t1)
{
    int k = atomic_fetch_add(&g_sh->ncalls, 1);
    if (k >= MAX_CALLS)
        return;
    g_sh->calls[k] = (call_rec){.op = (int8_t)op,
                                .rc = (int8_t)rc,
                                .worker = (int8_t)w,
                                .phase0 = (int16_t)phase0,
                                .phase1 = (int16_t)atomic_load(&g_sh->phase),
                                .t0_us = t0,
                                .t1_us = t1};
}

/* One acquire, section, release. True when granted. */
static bool cycle(dlock_client *c, const char *name, int w)
{
    dlock_opts o = {0};
    o.ttl_ms = TTL_MS * g_slack;
    dlock_lock *l = NULL;
    int phase0 = atomic_load(&g_sh->phase);
    int64_t t0 = now_us();
    int rc = dlock_acquire(c, name, &o, &l);
    int64_t t1 = now_us();
    record_call(w, OP_ACQUIRE, rc, phase0, t0, t1);
    if (rc != DLOCK_OK) {
        /* For post-mortems: each worker's first refusal of each kind in each phase. */
        static int said[MAX_PHASES][DLOCK_ERR_FENCED + 1];
        if (rc >= 0 && rc <= DLOCK_ERR_FENCED && phase0 < MAX_PHASES && !said[phase0][rc]++)
            fprintf(stderr, "  [worker %d, phase %d] acquire: %s: %s\n", w, phase0,
                    dlock_errname(rc), dlock_errmsg());
        return false;
    }
    int64_t valid_end = t1 + dlock_remaining_ms(l) * 1000;
    atomic_store(&g_sh->last_ok_us[w], t1);
    /* Write only while the lease has room for the whole section. */
    if (valid_end - now_us() > (SECTION_MS + 20) * 1000) {
        if (dlock_fence_admit(&g_sh->highest, dlock_fence(l)) == DLOCK_OK) {
            atomic_fetch_add(&g_sh->admitted, 1);
            long v = g_sh->counter;
            dh_sleep_ms(SECTION_MS);
            g_sh->counter = v + 1;
            atomic_fetch_add(&g_sh->sections, 1);
        } else {
            atomic_fetch_add(&g_sh->rejected, 1);
        }
    }
    int64_t trel = now_us();
    int k = atomic_fetch_add(&g_sh->ngrants, 1);
    if (k < MAX_GRANTS)
        g_sh->grants[k] = (grant_rec){.ok_us = t1,
                                      .end_us = trel < valid_end ? trel : valid_end,
                                      .fence = dlock_fence(l),
                                      .worker = w};
    phase0 = atomic_load(&g_sh->phase);
    rc = dlock_release(l);
    record_call(w, OP_RELEASE, rc, phase0, trel, now_us());
    return true;
}

static void worker_main(int w, const char *name)
{
    /* A test that fails half-way leaves no worker running after it exits. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (dn_enter_client(&g_net, w % CLIENTS) != 0) {
        atomic_store(&g_sh->bad_rc[w], 100);
        _exit(2);
    }
    g_sh->fd_start[w] = dh_fd_count();
    dlock_config cfg = {0};
    cfg.timeout_ms = TIMEOUT_MS * g_slack;
    cfg.connect_timeout_ms = CONNECT_MS * g_slack;
    dlock_client *c;
    int rc = dlock_client_new(g_net.urls, &cfg, &c);
    if (rc != DLOCK_OK) {
        atomic_store(&g_sh->bad_rc[w], rc);
        _exit(3);
    }
    unsigned seed = (unsigned)(getpid() * 2654435761u);
    int ok = 0;
    bool ready = false;
    while (!atomic_load(&g_sh->stop)) {
        ok += cycle(c, name, w);
        if (!ready && ok >= 3) {
            /* Every node answered a whole cycle: all connections are up. */
            g_sh->fd_base[w] = dh_fd_count();
            ready = true;
            atomic_fetch_add(&g_sh->ready, 1);
        }
        dh_sleep_ms(5 + rand_r(&seed) % 15);
    }
    g_sh->fd_end[w] = dh_fd_count();
    dlock_client_free(c);
    g_sh->fd_freed[w] = dh_fd_count();
    _exit(0);
}

/* ---- the test's side ------------------------------------------------------------------ */

/* Start a new phase: the faults of `kind` are in force from now on. */
static void enter_phase(enum phase_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void enter_phase(enum phase_kind kind, const char *fmt, ...)
{
    assert_true(g_nphases < MAX_PHASES);
    phase *p = &g_phases[g_nphases];
    p->kind = kind;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->what, sizeof p->what, fmt, ap);
    va_end(ap);
    atomic_store(&g_sh->phase, g_nphases++);
}

/* Install faults and start the phase they make. The phase before ends before the
 * first rule changes (as healing does): a call that ended while dn_apply ran would
 * otherwise count as wholly inside it, having met the new network (a BUSY answered
 * by a node the next phase lets through, in a phase that has it dropped). */
static void apply(enum phase_kind kind, const char *what)
{
    enter_phase(PH_CHANGING, "changing to: %s", what);
    assert_int_equal(dn_apply(&g_net), 0);
    enter_phase(kind, "%s", what);
}

/* Is there, from every client namespace, a connection to node i that ran a script in
 * the last second? */
static bool node_serves_all(int i)
{
    redisContext *c = dn_admin_connect(&g_net, i);
    if (!c)
        return false;
    redisReply *r = redisCommand(c, "CLIENT LIST");
    bool all = r && r->type == REDIS_REPLY_STRING;
    for (int j = 0; all && j < CLIENTS; j++) {
        char needle[32];
        snprintf(needle, sizeof needle, "addr=%s:", g_net.client_addr[j]);
        bool found = false;
        for (const char *line = r->str; line && *line && !found;) {
            const char *eol = strchr(line, '\n');
            size_t len = eol ? (size_t)(eol - line) : strlen(line);
            char buf[1024];
            snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
            found = strstr(buf, needle) && strstr(buf, " idle=0 ") &&
                    (strstr(buf, " cmd=evalsha") || strstr(buf, " cmd=eval "));
            line = eol ? eol + 1 : NULL;
        }
        all = found;
    }
    freeReplyObject(r);
    redisFree(c);
    return all;
}

/* After healing: ms until every worker was granted again and every node serves every
 * client namespace; -1 if not within RECOVER_MS. */
static int64_t await_recovery(void)
{
    int64_t healed = now_us();
    int64_t limit = healed + RECOVER_MS * g_slack * 1000;
    while (now_us() < limit) {
        bool all = true;
        for (int w = 0; w < WORKERS && all; w++)
            all = atomic_load(&g_sh->last_ok_us[w]) > healed;
        for (int i = 0; i < NODES && all; i++)
            all = node_serves_all(i);
        if (all)
            return (now_us() - healed) / 1000;
        dh_sleep_ms(50);
    }
    return -1;
}

typedef struct report {
    long grants[MAX_PHASES], calls[MAX_PHASES], noquorum[MAX_PHASES], busy[MAX_PHASES];
    int64_t max_us[MAX_PHASES];
    int64_t max_call_us, max_excess_us; /* excess: beyond timeout + connect timeout */
    long late, bad_codes, overlaps, fence_regressions;
    long grants_by_client[MAX_PHASES][CLIENTS];
} report;

static int cmp_grant(const void *a, const void *b)
{
    const grant_rec *x = a, *y = b;
    return (x->ok_us > y->ok_us) - (x->ok_us < y->ok_us);
}

/* Check every record; print what is wrong; fill r. */
static void analyze(const char *scenario, report *r)
{
    memset(r, 0, sizeof *r);
    int ncalls = atomic_load(&g_sh->ncalls), ngrants = atomic_load(&g_sh->ngrants);
    assert_true(ncalls <= MAX_CALLS && ngrants <= MAX_GRANTS);
    for (int k = 0; k < ncalls; k++) {
        const call_rec *c = &g_sh->calls[k];
        int64_t d = c->t1_us - c->t0_us;
        if (d > r->max_call_us)
            r->max_call_us = d;
        int64_t excess = d - (TIMEOUT_MS + CONNECT_MS) * g_slack * 1000;
        if (excess > r->max_excess_us)
            r->max_excess_us = excess;
        if (d > bound_us()) {
            r->late++;
            fprintf(stderr, "LATE: worker %d %s returned %s after %lld ms (bound %lld ms), %s\n",
                    c->worker, c->op == OP_ACQUIRE ? "acquire" : "release", dlock_errname(c->rc),
                    (long long)d / 1000, (long long)bound_us() / 1000, g_phases[c->phase0].what);
        }
        bool ok_code =
            c->op == OP_ACQUIRE
                ? (c->rc == DLOCK_OK || c->rc == DLOCK_ERR_BUSY || c->rc == DLOCK_ERR_NOQUORUM)
                : (c->rc == DLOCK_OK || c->rc == DLOCK_ERR_LOST || c->rc == DLOCK_ERR_NOQUORUM);
        if (!ok_code) {
            r->bad_codes++;
            fprintf(stderr, "BAD CODE: %s returned %s, %s\n",
                    c->op == OP_ACQUIRE ? "acquire" : "release", dlock_errname(c->rc),
                    g_phases[c->phase0].what);
        }
        /* Figures and availability per phase: only calls wholly inside it. */
        if (c->phase0 != c->phase1 || c->op != OP_ACQUIRE)
            continue;
        int p = c->phase0;
        r->calls[p]++;
        if (d > r->max_us[p])
            r->max_us[p] = d;
        if (c->rc == DLOCK_OK) {
            r->grants[p]++;
            r->grants_by_client[p][c->worker % CLIENTS]++;
        }
        r->noquorum[p] += c->rc == DLOCK_ERR_NOQUORUM;
        r->busy[p] += c->rc == DLOCK_ERR_BUSY;
    }
    /* Mutual exclusion and fence order, in the order the grants were made. */
    qsort(g_sh->grants, (size_t)ngrants, sizeof g_sh->grants[0], cmp_grant);
    int64_t end = 0;
    uint64_t fence = 0;
    for (int k = 0; k < ngrants; k++) {
        const grant_rec *g = &g_sh->grants[k];
        if (g->ok_us < end) {
            r->overlaps++;
            fprintf(stderr, "OVERLAP: worker %d granted %lld us before the previous grant ended\n",
                    g->worker, (long long)(end - g->ok_us));
        }
        if (g->fence <= fence) {
            r->fence_regressions++;
            fprintf(stderr, "FENCE ORDER: worker %d got fence %llu after %llu\n", g->worker,
                    (unsigned long long)g->fence, (unsigned long long)fence);
        }
        if (g->end_us > end)
            end = g->end_us;
        if (g->fence > fence)
            fence = g->fence;
    }
    for (int p = 0; p < g_nphases; p++)
        printf("  phase %2d %-34s acquires %4ld  granted %4ld (A %ld, B %ld)  busy %4ld  "
               "noquorum %4ld  longest %lld ms\n",
               p, g_phases[p].what, r->calls[p], r->grants[p], r->grants_by_client[p][0],
               r->grants_by_client[p][1], r->busy[p], r->noquorum[p],
               (long long)r->max_us[p] / 1000);
    printf("FIG netns_%s_calls %d calls\n", scenario, ncalls);
    printf("FIG netns_%s_grants %d grants\n", scenario, ngrants);
    printf("FIG netns_%s_longest_call_ms %lld ms\n", scenario, (long long)r->max_call_us / 1000);
    printf("FIG netns_%s_longest_past_deadline_ms %lld ms\n", scenario,
           (long long)r->max_excess_us / 1000);
    printf("FIG netns_%s_late_calls %ld calls\n", scenario, r->late);
    printf("FIG netns_%s_overlaps %ld overlaps\n", scenario, r->overlaps);
    printf("FIG netns_%s_fence_regressions %ld regressions\n", scenario, r->fence_regressions);
    fflush(stdout);
}

/* A scenario's faults, applied by the test while the workers run. */
typedef void (*schedule_fn)(void);

/* Kill the workers a failed scenario left running (an assertion jumps out of it). */
static void kill_workers(void)
{
    for (int w = 0; w < WORKERS; w++) {
        if (g_pids[w] > 0) {
            kill(g_pids[w], SIGKILL);
            waitpid(g_pids[w], NULL, 0);
            g_pids[w] = 0;
        }
    }
}

/* Run one scenario: workers up, faults, heal, recovery, checks. */
static void run_scenario(const char *scenario, schedule_fn faults, report *r)
{
    kill_workers();
    printf("== %s\n", scenario);
    fflush(stdout);
    int fds_before = dh_fd_count();
    g_sh = mmap(NULL, sizeof *g_sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(g_sh != MAP_FAILED);
    g_nphases = 0;
    enter_phase(PH_WARM, "warm-up, no fault");

    pid_t *pids = g_pids;
    for (int w = 0; w < WORKERS; w++) {
        pids[w] = fork();
        assert_true(pids[w] >= 0);
        if (pids[w] == 0)
            worker_main(w, scenario);
    }
    int64_t deadline = dh_now_ms() + READY_TIMEOUT * g_slack;
    while (atomic_load(&g_sh->ready) < WORKERS && dh_now_ms() < deadline)
        dh_sleep_ms(10);
    bool ready = atomic_load(&g_sh->ready) == WORKERS;
    if (!ready)
        fprintf(stderr, "only %d of %d workers got the lock 3 times without faults\n",
                atomic_load(&g_sh->ready), WORKERS);

    int64_t recover_ms = -1;
    if (ready) {
        faults();
        /* Heal: calls that straddle this point are in no fault phase of their own. */
        enter_phase(PH_HEALING, "healing");
        dn_clear(&g_net);
        assert_int_equal(dn_apply(&g_net), 0);
        enter_phase(PH_HEALED, "healed");
        recover_ms = await_recovery();
        dh_sleep_ms(500);
    }

    atomic_store(&g_sh->stop, 1);
    for (int w = 0; w < WORKERS; w++) {
        int status = 0;
        int64_t until = dh_now_ms() + 10000 * g_slack;
        pid_t got;
        while ((got = waitpid(pids[w], &status, WNOHANG)) == 0 && dh_now_ms() < until)
            dh_sleep_ms(10);
        if (got == 0) {
            fprintf(stderr, "worker %d did not stop: killed\n", w);
            kill(pids[w], SIGKILL);
            waitpid(pids[w], &status, 0);
        }
        pids[w] = 0;
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        assert_int_equal(atomic_load(&g_sh->bad_rc[w]), 0);
    }
    assert_true(ready);

    analyze(scenario, r);
    printf("FIG netns_%s_recover_ms %lld ms\n", scenario, (long long)recover_ms);
    printf("FIG netns_%s_sections %ld sections\n", scenario, atomic_load(&g_sh->sections));
    for (int w = 0; w < WORKERS; w++)
        printf("  worker %d: fds %d at start, %d with all connections up, %d at the end, %d "
               "after dlock_client_free\n",
               w, g_sh->fd_start[w], g_sh->fd_base[w], g_sh->fd_end[w], g_sh->fd_freed[w]);
    fflush(stdout);

    /* The checks that hold in every scenario. */
    assert_int_equal(r->late, 0);
    assert_int_equal(r->bad_codes, 0);
    assert_int_equal(r->overlaps, 0);
    assert_int_equal(r->fence_regressions, 0);
    assert_int_equal(atomic_load(&g_sh->rejected), 0);
    assert_int_equal(g_sh->counter, atomic_load(&g_sh->sections));
    assert_true(recover_ms >= 0);
    for (int w = 0; w < WORKERS; w++) {
        assert_true(g_sh->fd_end[w] <= g_sh->fd_base[w]);
        assert_int_equal(g_sh->fd_freed[w], g_sh->fd_start[w]);
    }
    munmap(g_sh, sizeof *g_sh);
    g_sh = NULL;
    assert_int_equal(dh_fd_count(), fds_before);
}

/* Hold the current faults for ms. */
static void hold(int64_t ms)
{
    dh_sleep_ms(ms * g_slack);
}

/* The phases of the current scenario of `kind`. */
static int phases_of(enum phase_kind kind, int *out, int max)
{
    int n = 0;
    for (int p = 0; p < g_nphases && n < max; p++)
        if (g_phases[p].kind == kind)
            out[n++] = p;
    return n;
}

/* The one PH_FAULT phase of the current scenario (asserts there is one). */
static int fault_phase(void)
{
    int p[4];
    assert_int_equal(phases_of(PH_FAULT, p, 4), 1);
    return p[0];
}

/* With a majority reachable in the fault phase: granted all along; its longest acquire
 * as FIG netns_<fig>_longest_acquire_ms. */
static void expect_granted(const report *r, const char *fig)
{
    int p = fault_phase();
    assert_true(r->grants[p] > 0);
    printf("FIG netns_%s_longest_acquire_ms %lld ms\n", fig, (long long)r->max_us[p] / 1000);
}

/* ---- scenarios -------------------------------------------------------------------------- */

static void faults_one_node(void)
{
    dn_cut_node(&g_net, 2, DN_DROP);
    apply(PH_FAULT, "n3 dropped (blackhole)");
    hold(3000);
}

static void faults_split(void)
{
    dn_cut_node(&g_net, 1, DN_DROP);
    dn_cut_node(&g_net, 2, DN_DROP);
    apply(PH_NOQUORUM, "n2 and n3 dropped (no majority)");
    hold(3000);
}

/* With no majority reachable: no grant, and every refusal is NOQUORUM. */
static void expect_no_quorum(const report *r, const char *scenario)
{
    int p[MAX_PHASES];
    int n = phases_of(PH_NOQUORUM, p, MAX_PHASES);
    assert_true(n > 0);
    for (int k = 0; k < n; k++) {
        assert_true(r->calls[p[k]] > 0);
        assert_int_equal(r->grants[p[k]], 0);
        assert_int_equal(r->noquorum[p[k]], r->calls[p[k]]);
        printf("FIG netns_%s_noquorum_longest_ms %lld ms (%s)\n", scenario,
               (long long)r->max_us[p[k]] / 1000, g_phases[p[k]].what);
    }
}

static void faults_overlap(void)
{
    dn_cut(&g_net, 2, 0, DN_DROP); /* A: n1, n2 */
    dn_cut(&g_net, 0, 1, DN_DROP); /* B: n2, n3 */
    apply(PH_FAULT, "A sees n1+n2, B sees n2+n3");
    hold(3000);
}

static void expect_overlap_safe(const report *r, const char *scenario)
{
    (void)scenario;
    /* Both sides have a majority, and could take turns through n2; but every attempt
     * that wins one node and loses the other keeps its grant until its round ends, and
     * a round that waits on a node still connecting lasts the connect timeout too: under
     * this much contention few attempts win. Shown, not asserted:
     * safety is what must hold here. */
    int p = fault_phase();
    printf("FIG netns_overlapping_majorities_grants_A %ld grants\n", r->grants_by_client[p][0]);
    printf("FIG netns_overlapping_majorities_grants_B %ld grants\n", r->grants_by_client[p][1]);
}

static void faults_resets(void)
{
    dn_cut_node(&g_net, 2, DN_RESET);
    apply(PH_FAULT, "n3 resets");
    hold(1500);
    dn_cut_node(&g_net, 1, DN_RESET);
    apply(PH_NOQUORUM, "n2 and n3 reset (no majority)");
    hold(1500);
}

static void expect_granted_then_no_quorum(const report *r, const char *scenario)
{
    char fig[64];
    snprintf(fig, sizeof fig, "%s_one_node", scenario);
    expect_granted(r, fig);
    expect_no_quorum(r, scenario);
}

/* Every 500 ms a different fault, or none. */
static void faults_flapping(void)
{
    for (int round = 0; round < 2; round++) {
        dn_cut_node(&g_net, 0, DN_DROP);
        apply(PH_FAULT, "flap: n1 dropped");
        hold(FLAP_PERIOD_MS);
        dn_clear(&g_net);
        apply(PH_FAULT, "flap: healed");
        hold(FLAP_PERIOD_MS);
        dn_cut_node(&g_net, 1, DN_RESET);
        apply(PH_FAULT, "flap: n2 resets");
        hold(FLAP_PERIOD_MS);
        dn_clear(&g_net);
        dn_cut_node(&g_net, 1, DN_DROP);
        dn_cut_node(&g_net, 2, DN_DROP);
        apply(PH_NOQUORUM, "flap: n2 and n3 dropped");
        hold(FLAP_PERIOD_MS);
        dn_clear(&g_net);
        dn_cut(&g_net, 2, 0, DN_DROP);
        dn_cut(&g_net, 0, 1, DN_RESET);
        apply(PH_FAULT, "flap: overlapping majorities");
        hold(FLAP_PERIOD_MS);
        dn_clear(&g_net);
        dn_link(&g_net, 2, false);
        apply(PH_FAULT, "flap: n3 link down");
        hold(FLAP_PERIOD_MS);
        dn_clear(&g_net);
        apply(PH_FAULT, "flap: healed");
        hold(FLAP_PERIOD_MS);
    }
}

static void expect_flapping(const report *r, const char *scenario)
{
    (void)scenario;
    /* Short phases: too short to assert availability in each, but not too short for a
     * grant, nor to hold the split's NOQUORUM. */
    int p[MAX_PHASES];
    int n = phases_of(PH_NOQUORUM, p, MAX_PHASES);
    for (int k = 0; k < n; k++) {
        assert_int_equal(r->grants[p[k]], 0);
        assert_int_equal(r->noquorum[p[k]], r->calls[p[k]]);
    }
    long granted = 0;
    n = phases_of(PH_FAULT, p, MAX_PHASES);
    for (int k = 0; k < n; k++)
        granted += r->grants[p[k]];
    assert_true(granted > 0);
}

/* A scenario with workers: its name (that of its FIG lines), its faults, and what must
 * hold after them besides the checks of every scenario, given its report and name. */
typedef struct scenario {
    const char *name;
    schedule_fn faults;
    void (*expect)(const report *r, const char *name);
} scenario;

static void test_scenario(void **state)
{
    const scenario *s = *state;
    report r;
    run_scenario(s->name, s->faults, &r);
    s->expect(&r, s->name);
}

/* With one node dropped a majority is there: the lock is granted all along. */
static scenario one_node = {"one_node_dropped", faults_one_node, expect_granted};
static scenario split = {"majority_split", faults_split, expect_no_quorum};
static scenario overlap = {"overlapping_majorities", faults_overlap, expect_overlap_safe};
static scenario resets = {"tcp_resets", faults_resets, expect_granted_then_no_quorum};
static scenario flapping = {"flapping", faults_flapping, expect_flapping};

/*
 * Commands left in flight by a connection the client gave up on. A blackhole holds the
 * client's acquire in the TCP send queue; the client times out, counts the late reply
 * (conn->skip) and, after SKIP_MAX of them, closes the connection. Closing a socket
 * does not cancel what the kernel still has to send: once the partition heals, the
 * acquire is delivered and runs, and takes the lock for a full ttl on behalf of an
 * attempt that failed long ago, which no release will ever undo (attempt() only undoes
 * on connections still open). The same happens when a client is freed, or its process
 * exits, with commands in flight. Here: one client in A, n2 and n3 blackholed, six
 * failed attempts (NOQUORUM), the client freed; then healed, and no lock key may appear
 * on n2 or n3 in the next 6 s (TCP retransmits a blackholed segment 0.2, 0.6, 1.4, 3
 * and 6.2 s after it was first sent): every attempt failed, so nobody holds the lock.
 */
static void test_no_ghost_grant_after_heal(void **state)
{
    (void)state;
    kill_workers();
    int ready[2], go[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        char b = 'x';
        if (dn_enter_client(&g_net, 0) != 0)
            _exit(2);
        dlock_config cfg = {0};
        cfg.timeout_ms = TIMEOUT_MS * g_slack;
        cfg.connect_timeout_ms = CONNECT_MS * g_slack;
        dlock_client *c;
        dlock_lock *l;
        dlock_opts o = {0};
        o.ttl_ms = 10000 * g_slack;
        if (dlock_client_new(g_net.urls, &cfg, &c) != DLOCK_OK ||
            dlock_acquire(c, "ghost", &o, &l) != DLOCK_OK || dlock_release(l) != DLOCK_OK)
            _exit(3);
        /* All three connections are up; now the blackhole. */
        if (write(ready[1], &b, 1) != 1 || read(go[0], &b, 1) != 1)
            _exit(4);
        for (int k = 0; k < 6; k++) {
            int rc = dlock_acquire(c, "ghost", &o, &l);
            fprintf(stderr, "  ghost: attempt %d: %s: %s\n", k + 1, dlock_errname(rc),
                    dlock_errmsg());
            if (rc != DLOCK_ERR_NOQUORUM)
                _exit(5);
        }
        dlock_client_free(c);
        _exit(0);
    }
    char b;
    assert_int_equal(read(ready[0], &b, 1), 1);
    dn_cut(&g_net, 1, 0, DN_DROP);
    dn_cut(&g_net, 2, 0, DN_DROP);
    assert_int_equal(dn_apply(&g_net), 0);
    assert_int_equal(write(go[1], "g", 1), 1);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    close(ready[0]);
    close(ready[1]);
    close(go[0]);
    close(go[1]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    dn_clear(&g_net);
    assert_int_equal(dn_apply(&g_net), 0);
    int64_t healed = dh_now_ms();
    int ghosts = 0;
    int64_t first = -1;
    while (dh_now_ms() - healed < 6000 && ghosts == 0) {
        for (int i = 1; i < NODES; i++) {
            redisContext *c = dn_admin_connect(&g_net, i);
            assert_non_null(c);
            redisReply *r = redisCommand(c, "PTTL dlock:{ghost}");
            if (r && r->type == REDIS_REPLY_INTEGER && r->integer > 0) {
                ghosts++;
                first = dh_now_ms() - healed;
                fprintf(stderr,
                        "GHOST: n%d holds a lock key %lld ms after healing, lease %lld ms "
                        "left, though every attempt failed\n",
                        i + 1, (long long)first, (long long)r->integer);
            }
            freeReplyObject(r);
            redisFree(c);
        }
        dh_sleep_ms(100);
    }
    printf("FIG netns_ghost_grants %d keys (first %lld ms after healing)\n", ghosts,
           (long long)first);
    assert_int_equal(ghosts, 0);
}

static int group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    g_slack = dh_slack();
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (dn_preflight() != 0)
        return -1;
    if (dn_setup(&g_net, NODES, CLIENTS) != 0)
        return -1;
    printf("network %s: nodes %s, clients A %s and B %s, admin %s\n", g_net.prefix, g_net.urls,
           g_net.client_addr[0], g_net.client_addr[1], g_net.admin_addr);
    printf("deadline of a call: timeout %lld ms + connect timeout %lld ms, checked with %lld ms "
           "margin\n",
           (long long)(TIMEOUT_MS * g_slack), (long long)(CONNECT_MS * g_slack),
           (long long)(MARGIN_MS * g_slack));
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    kill_workers();
    dn_teardown(&g_net);
    return 0;
}

/* Between scenarios: no fault left, no key left. */
static int scenario_setup(void **state)
{
    (void)state;
    dn_clear(&g_net);
    if (dn_apply(&g_net) != 0)
        return -1;
    for (int i = 0; i < NODES; i++) {
        redisContext *c = dn_admin_connect(&g_net, i);
        if (!c)
            return -1;
        redisReply *r = redisCommand(c, "FLUSHALL");
        freeReplyObject(r);
        redisFree(c);
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        IT_CASE_WITH("test_one_node_dropped", test_scenario, scenario_setup, NULL, &one_node),
        IT_CASE_WITH("test_majority_split", test_scenario, scenario_setup, NULL, &split),
        IT_CASE_WITH("test_overlapping_majorities", test_scenario, scenario_setup, NULL, &overlap),
        IT_CASE_WITH("test_tcp_resets", test_scenario, scenario_setup, NULL, &resets),
        IT_CASE_WITH("test_flapping", test_scenario, scenario_setup, NULL, &flapping),
        cmocka_unit_test_setup(test_no_ghost_grant_after_heal, scenario_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
