/*
 * partition.h: the harness of scenario 12, partitions on a private network of
 * namespaces (netns.h; the scenarios are test_partition.c): three redis-server nodes,
 * each in its own namespace, and worker processes in two client namespaces, A and B,
 * two workers in each.
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
 * A scenario is a time line of phases: the test installs faults and starts the phase
 * they make (pt_apply), holds them (pt_hold), and pt_run_scenario heals the network at
 * the end; the report counts each phase's calls, so that a scenario can say what must
 * hold in each (pt_phases_of). The checks above are cmocka assertions: include this
 * after <cmocka.h>, in a test linked with partition.c and netns.c.
 */
#ifndef DLOCK_FAULTS_PARTITION_H
#define DLOCK_FAULTS_PARTITION_H

#include "netns.h"

#include <stdint.h>

#define PT_NODES      3
#define PT_CLIENTS    2 /* namespaces A (0) and B (1) */
#define PT_TIMEOUT_MS 100
#define PT_CONNECT_MS 200
#define PT_MAX_PHASES 64

/* What the network looked like in one phase. */
/* PH_CHANGING: while dn_apply puts new rules in force, one node after another; a call
 * in it met the network of neither the phase before nor the one after. */
enum pt_phase_kind { PH_WARM, PH_FAULT, PH_NOQUORUM, PH_HEALING, PH_HEALED, PH_CHANGING };

typedef struct pt_phase {
    enum pt_phase_kind kind;
    char what[64];
} pt_phase;

/* What the checks of a scenario found, per phase (only calls wholly inside it) and in
 * all. */
typedef struct pt_report {
    long grants[PT_MAX_PHASES], calls[PT_MAX_PHASES], noquorum[PT_MAX_PHASES], busy[PT_MAX_PHASES];
    int64_t max_us[PT_MAX_PHASES];
    int64_t max_call_us, max_excess_us; /* excess: beyond timeout + connect timeout */
    long late, bad_codes, overlaps, fence_regressions;
    long grants_by_client[PT_MAX_PHASES][PT_CLIENTS];
} pt_report;

/* The network, the phases of the current scenario, and DLOCK_TEST_SLACK. */
extern dn_net pt_net;
extern pt_phase pt_phases[PT_MAX_PHASES];
extern int pt_nphases;
extern long long pt_slack;

/* A scenario's faults, applied by the test while the workers run. */
typedef void (*pt_schedule_fn)(void);

/* Run one scenario: workers up, faults, heal, recovery, checks (asserted), and r
 * filled in for the scenario's own expectations. */
void pt_run_scenario(const char *scenario, pt_schedule_fn faults, pt_report *r);
/* Kill the workers a failed scenario left running (an assertion jumps out of it). */
void pt_kill_workers(void);

/* Install the faults set on pt_net and start the phase they make. */
void pt_apply(enum pt_phase_kind kind, const char *what);
/* Hold the current faults for ms (times the slack). */
void pt_hold(int64_t ms);
/* The phases of the current scenario of `kind`, into out[0..max); their count. */
int pt_phases_of(enum pt_phase_kind kind, int *out, int max);
/* The one PH_FAULT phase of the current scenario (asserts there is one). */
int pt_fault_phase(void);

/* cmocka fixtures: the group's network (pt_group_setup fails, saying why, without
 * root, ip or iptables), and a scenario's clean start: no fault left, no key left. */
int pt_group_setup(void **state);
int pt_group_teardown(void **state);
int pt_scenario_setup(void **state);

#endif /* DLOCK_FAULTS_PARTITION_H */
