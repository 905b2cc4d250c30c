/*
 * partition.c: the harness of the partition scenarios (partition.h): the worker
 * processes and what they record, the phases, the recovery after healing, the checks
 * of every scenario, and the network as cmocka fixtures.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dlock.h"
#include "partition.h"
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

#define WORKERS       4   /* worker w runs in namespace w % PT_CLIENTS */
#define MARGIN_MS     100 /* "no call passes its deadline by more than 100 ms" */
#define TTL_MS        1000
#define SECTION_MS    5
#define RECOVER_MS    5000 /* healing to every worker granted and every node serving */
#define MAX_CALLS     40000
#define MAX_GRANTS    20000
#define READY_TIMEOUT 10000

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

dn_net pt_net;
pt_phase pt_phases[PT_MAX_PHASES];
int pt_nphases;
long long pt_slack;
static shared *g_sh;          /* made anew for each scenario */
static pid_t g_pids[WORKERS]; /* the running workers, 0 when none */

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The longest a call may take: one round plus the margin (partition.h). */
static int64_t bound_us(void)
{
    return (PT_TIMEOUT_MS + PT_CONNECT_MS + MARGIN_MS) * pt_slack * 1000;
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
    o.ttl_ms = TTL_MS * pt_slack;
    dlock_lock *l = NULL;
    int phase0 = atomic_load(&g_sh->phase);
    int64_t t0 = now_us();
    int rc = dlock_acquire(c, name, &o, &l);
    int64_t t1 = now_us();
    record_call(w, OP_ACQUIRE, rc, phase0, t0, t1);
    if (rc != DLOCK_OK) {
        /* For post-mortems: each worker's first refusal of each kind in each phase. */
        static int said[PT_MAX_PHASES][DLOCK_ERR_FENCED + 1];
        if (rc >= 0 && rc <= DLOCK_ERR_FENCED && phase0 < PT_MAX_PHASES && !said[phase0][rc]++)
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
    if (dn_enter_client(&pt_net, w % PT_CLIENTS) != 0) {
        atomic_store(&g_sh->bad_rc[w], 100);
        _exit(2);
    }
    g_sh->fd_start[w] = dh_fd_count();
    dlock_config cfg = {0};
    cfg.timeout_ms = PT_TIMEOUT_MS * pt_slack;
    cfg.connect_timeout_ms = PT_CONNECT_MS * pt_slack;
    dlock_client *c;
    int rc = dlock_client_new(pt_net.urls, &cfg, &c);
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
static void enter_phase(enum pt_phase_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void enter_phase(enum pt_phase_kind kind, const char *fmt, ...)
{
    assert_true(pt_nphases < PT_MAX_PHASES);
    pt_phase *p = &pt_phases[pt_nphases];
    p->kind = kind;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->what, sizeof p->what, fmt, ap);
    va_end(ap);
    atomic_store(&g_sh->phase, pt_nphases++);
}

/* Install faults and start the phase they make. The phase before ends before the
 * first rule changes (as healing does): a call that ended while dn_apply ran would
 * otherwise count as wholly inside it, having met the new network (a BUSY answered
 * by a node the next phase lets through, in a phase that has it dropped). */
void pt_apply(enum pt_phase_kind kind, const char *what)
{
    enter_phase(PH_CHANGING, "changing to: %s", what);
    assert_int_equal(dn_apply(&pt_net), 0);
    enter_phase(kind, "%s", what);
}

/* Is there, from every client namespace, a connection to node i that ran a script in
 * the last second? */
static bool node_serves_all(int i)
{
    redisContext *c = dn_admin_connect(&pt_net, i);
    if (!c)
        return false;
    redisReply *r = redisCommand(c, "CLIENT LIST");
    bool all = r && r->type == REDIS_REPLY_STRING;
    for (int j = 0; all && j < PT_CLIENTS; j++) {
        char needle[32];
        snprintf(needle, sizeof needle, "addr=%s:", pt_net.client_addr[j]);
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
    int64_t limit = healed + RECOVER_MS * pt_slack * 1000;
    while (now_us() < limit) {
        bool all = true;
        for (int w = 0; w < WORKERS && all; w++)
            all = atomic_load(&g_sh->last_ok_us[w]) > healed;
        for (int i = 0; i < PT_NODES && all; i++)
            all = node_serves_all(i);
        if (all)
            return (now_us() - healed) / 1000;
        dh_sleep_ms(50);
    }
    return -1;
}

static int cmp_grant(const void *a, const void *b)
{
    const grant_rec *x = a, *y = b;
    return (x->ok_us > y->ok_us) - (x->ok_us < y->ok_us);
}

/* Check every record; print what is wrong; fill r. */
static void analyze(const char *scenario, pt_report *r)
{
    memset(r, 0, sizeof *r);
    int ncalls = atomic_load(&g_sh->ncalls), ngrants = atomic_load(&g_sh->ngrants);
    assert_true(ncalls <= MAX_CALLS && ngrants <= MAX_GRANTS);
    for (int k = 0; k < ncalls; k++) {
        const call_rec *c = &g_sh->calls[k];
        int64_t d = c->t1_us - c->t0_us;
        if (d > r->max_call_us)
            r->max_call_us = d;
        int64_t excess = d - (PT_TIMEOUT_MS + PT_CONNECT_MS) * pt_slack * 1000;
        if (excess > r->max_excess_us)
            r->max_excess_us = excess;
        if (d > bound_us()) {
            r->late++;
            fprintf(stderr, "LATE: worker %d %s returned %s after %lld ms (bound %lld ms), %s\n",
                    c->worker, c->op == OP_ACQUIRE ? "acquire" : "release", dlock_errname(c->rc),
                    (long long)d / 1000, (long long)bound_us() / 1000, pt_phases[c->phase0].what);
        }
        bool ok_code =
            c->op == OP_ACQUIRE
                ? (c->rc == DLOCK_OK || c->rc == DLOCK_ERR_BUSY || c->rc == DLOCK_ERR_NOQUORUM)
                : (c->rc == DLOCK_OK || c->rc == DLOCK_ERR_LOST || c->rc == DLOCK_ERR_NOQUORUM);
        if (!ok_code) {
            r->bad_codes++;
            fprintf(stderr, "BAD CODE: %s returned %s, %s\n",
                    c->op == OP_ACQUIRE ? "acquire" : "release", dlock_errname(c->rc),
                    pt_phases[c->phase0].what);
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
            r->grants_by_client[p][c->worker % PT_CLIENTS]++;
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
    for (int p = 0; p < pt_nphases; p++)
        printf("  phase %2d %-34s acquires %4ld  granted %4ld (A %ld, B %ld)  busy %4ld  "
               "noquorum %4ld  longest %lld ms\n",
               p, pt_phases[p].what, r->calls[p], r->grants[p], r->grants_by_client[p][0],
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
/* Kill the workers a failed scenario left running (an assertion jumps out of it). */
void pt_kill_workers(void)
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
void pt_run_scenario(const char *scenario, pt_schedule_fn faults, pt_report *r)
{
    pt_kill_workers();
    printf("== %s\n", scenario);
    fflush(stdout);
    int fds_before = dh_fd_count();
    g_sh = mmap(NULL, sizeof *g_sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(g_sh != MAP_FAILED);
    pt_nphases = 0;
    enter_phase(PH_WARM, "warm-up, no fault");

    pid_t *pids = g_pids;
    for (int w = 0; w < WORKERS; w++) {
        pids[w] = fork();
        assert_true(pids[w] >= 0);
        if (pids[w] == 0)
            worker_main(w, scenario);
    }
    int64_t deadline = dh_now_ms() + READY_TIMEOUT * pt_slack;
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
        dn_clear(&pt_net);
        assert_int_equal(dn_apply(&pt_net), 0);
        enter_phase(PH_HEALED, "healed");
        recover_ms = await_recovery();
        dh_sleep_ms(500);
    }

    atomic_store(&g_sh->stop, 1);
    for (int w = 0; w < WORKERS; w++) {
        int status = 0;
        int64_t until = dh_now_ms() + 10000 * pt_slack;
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
void pt_hold(int64_t ms)
{
    dh_sleep_ms(ms * pt_slack);
}

/* The phases of the current scenario of `kind`. */
int pt_phases_of(enum pt_phase_kind kind, int *out, int max)
{
    int n = 0;
    for (int p = 0; p < pt_nphases && n < max; p++)
        if (pt_phases[p].kind == kind)
            out[n++] = p;
    return n;
}

/* The one PH_FAULT phase of the current scenario (asserts there is one). */
int pt_fault_phase(void)
{
    int p[4];
    assert_int_equal(pt_phases_of(PH_FAULT, p, 4), 1);
    return p[0];
}

/* ---- the fixtures ------------------------------------------------------------------ */

int pt_group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    pt_slack = dh_slack();
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (dn_preflight() != 0)
        return -1;
    if (dn_setup(&pt_net, PT_NODES, PT_CLIENTS) != 0)
        return -1;
    printf("network %s: nodes %s, clients A %s and B %s, admin %s\n", pt_net.prefix, pt_net.urls,
           pt_net.client_addr[0], pt_net.client_addr[1], pt_net.admin_addr);
    printf("deadline of a call: timeout %lld ms + connect timeout %lld ms, checked with %lld ms "
           "margin\n",
           (long long)(PT_TIMEOUT_MS * pt_slack), (long long)(PT_CONNECT_MS * pt_slack),
           (long long)(MARGIN_MS * pt_slack));
    return 0;
}

int pt_group_teardown(void **state)
{
    (void)state;
    pt_kill_workers();
    dn_teardown(&pt_net);
    return 0;
}

/* Between scenarios: no fault left, no key left. */
int pt_scenario_setup(void **state)
{
    (void)state;
    dn_clear(&pt_net);
    if (dn_apply(&pt_net) != 0)
        return -1;
    for (int i = 0; i < PT_NODES; i++) {
        redisContext *c = dn_admin_connect(&pt_net, i);
        if (!c)
            return -1;
        redisReply *r = redisCommand(c, "FLUSHALL");
        freeReplyObject(r);
        redisFree(c);
    }
    return 0;
}
