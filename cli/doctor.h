/*
 * doctor.h: `dlock doctor`'s judgement of the servers' facts (doctor_judge.c: pure
 * code, unit-tested) and the command that asks and prints (doctor.c).
 */
#ifndef DLOCK_CLI_DOCTOR_H
#define DLOCK_CLI_DOCTOR_H

#include "dlock.h"

#include <stdbool.h>
#include <stdint.h>

#define CLI_FINDINGS_MAX   (DLOCK_SERVERS_MAX * 8 + 1)
#define CLI_CLOCK_FRACTION 10 /* clocks apart by more than TTL / this are a risk */

/* One finding: a risk (a way to lose mutual exclusion or the fences' order, or no way
 * to tell) or a note (slower or weaker than it could be, and covered). */
typedef struct cli_finding {
    int server;       /* index, or -1 for the servers together */
    bool risk;        /* else a note */
    const char *kind; /* one word, for JSON: "eviction", "persistence", ... */
    char text[512];   /* what it is, what it risks, and the fix */
} cli_finding;

typedef struct cli_findings {
    cli_finding f[CLI_FINDINGS_MAX];
    int n, risks;
} cli_findings;

/* Judge the facts of n servers (dlock_probe's) for a shortest lease of ttl_ms into
 * *out (which it empties first). */
void cli_doctor_judge(const dlock_server_facts *f, int n, int64_t ttl_ms, cli_findings *out);

#endif /* DLOCK_CLI_DOCTOR_H */
