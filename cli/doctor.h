/*
 * doctor.h: `dlock doctor`'s judgement of the servers' facts (doctor_judge.c: pure
 * code, unit-tested) and the command that asks and prints (doctor.c).
 */
#ifndef DLOCK_CLI_DOCTOR_H
#define DLOCK_CLI_DOCTOR_H

#include "dlock.h"

#include <stdbool.h>
#include <stdint.h>

#define CLI_FINDINGS_MAX   (DLOCK_SERVERS_MAX * 12 + 1)
#define CLI_CLOCK_FRACTION 10 /* clocks apart by more than TTL / this are a risk */

/* One finding: a risk (a way to lose mutual exclusion or the fences' order, or a
 * server that cannot be asked or is no lock server) or a note (slower or weaker than it
 * could be, and covered; or a fact the server would not give, which is unknown). */
typedef struct cli_finding {
    int server;       /* index, or -1 for the servers together */
    bool risk;        /* else a note */
    bool unknown;     /* a note of a fact that could not be read: never passed as fine */
    const char *kind; /* one word, for JSON: "eviction", "persistence", ... */
    char text[768];   /* what it is, what it risks, and the fix (a server's detail
                         of up to 255 bytes among them) */
} cli_finding;

typedef struct cli_findings {
    cli_finding f[CLI_FINDINGS_MAX];
    int n, risks;
    int unknowns; /* findings with unknown set */
} cli_findings;

/* Judge the facts of n servers (dlock_probe's) for a shortest lease of ttl_ms into
 * *out (which it empties first). */
void cli_doctor_judge(const dlock_server_facts *f, int n, int64_t ttl_ms, cli_findings *out);

#endif /* DLOCK_CLI_DOCTOR_H */
