/*
 * run.h: `dlock run`, holding a lock while a command runs (design.md, section 4 "CLI").
 *
 *   dlock run [-t TTL] [-w WAIT] [-k SIGNAL] [-g GRACE] [-l LABEL] NAME -- CMD [ARG...]
 *
 * main.c parses the command line (the words after "--" are CMD, never options) and
 * opens the client; run.c checks what only `run` has (-k, -g, and how they fit the
 * TTL), takes the lock with auto-renewal, runs CMD and watches the lease while it runs.
 */
#ifndef DLOCK_CLI_RUN_H
#define DLOCK_CLI_RUN_H

#include "dlock.h"

#include <stdbool.h>
#include <stdint.h>

/* The options of one `dlock run`, as main.c got them. cli_run_check fills signo,
 * grace_ms and margin_ms. Strings are borrowed from argv. */
struct cli_run_args {
    const char *name;   /* NAME */
    char **cmd;         /* CMD [ARG...], NULL-terminated, cmd[0] != NULL */
    int64_t ttl_ms;     /* -t, already in the lease range */
    int64_t wait_ms;    /* -w: CLI_WAIT_FOREVER, 0 (try once) or a duration */
    const char *label;  /* -l, NULL: none */
    const char *signal; /* -k as typed, NULL: TERM */
    const char *grace;  /* -g as typed, NULL: TTL/4 */
    bool quiet;         /* -q: no status line while waiting */
    /* main.c's reporter for a failed library call: prints "dlock: <what>: <reason>
     * (<detail>)" and returns the exit code of that error (one mapping for every
     * command). */
    int (*fail_call)(const char *what, int err);

    int signo;         /* from signal */
    int64_t grace_ms;  /* from grace */
    int64_t margin_ms; /* max(100 ms, TTL/20): see run.c, "The safe-until time" */
};

/* Check -k and -g against -t, before anything reaches a server. Returns 0, or 64
 * after printing one line that says what is wrong. */
int cli_run_check(struct cli_run_args *a);

/* Take the lock, run CMD, release. Returns dlock's exit status: CMD's (128+n when
 * signal n killed it, 126/127 when it could not be executed), 73 when the lock was
 * lost (or could no longer be shown to be held) while CMD ran, else the code of what
 * failed before CMD started (64, 69, 70, 75, 77). a must have passed cli_run_check. */
int cli_run(dlock_client *client, const struct cli_run_args *a);

#endif /* DLOCK_CLI_RUN_H */
