/*
 * run_check.c: the options only `dlock run` has (-k SIGNAL, -g GRACE, --once-per),
 * and whether they fit its TTL and its kind of lock, checked before anything reaches a server so
 * that a run that could never keep its promise is refused with a usage error instead of started.
 */
#include "run.h"

#include "duration.h"
#include "escape.h"

#include <signal.h>

/* The smallest margin between SIGKILL and the end of the lease (run_watch.c says
 * what it covers). */
#define MARGIN_MIN_MS 100

int cli_run_check(struct cli_run_args *a)
{
    char err[256];
    /* A slot is one run: a shared holder or a permit runs beside others. */
    if (a->once_per_ms > 0 && (a->shared || a->permits > 0)) {
        const char *cmd = a->permits > 0 ? "sem run" : "run";
        cli_errline("%s: --once-per needs an exclusive lock (not --shared, not sem run) "
                    "(see dlock %s --help)",
                    cmd, cmd);
        return CLI_EXIT_USAGE;
    }
    a->signo = SIGTERM;
    if (a->signal != NULL && cli_parse_signal(a->signal, &a->signo) != 0) {
        cli_errline(
            "run: invalid SIGNAL \"%.64s\": expected a name such as TERM, INT, HUP, KILL or "
            "USR1 (SIG optional), or a number from 1 to %d (see dlock run --help)",
            a->signal, SIGRTMAX);
        return CLI_EXIT_USAGE;
    }
    a->grace_ms = a->ttl_ms / 4;
    if (a->grace != NULL && cli_parse_duration(a->grace, &a->grace_ms, err, sizeof err) != 0) {
        cli_errline("run: invalid GRACE \"%.64s\": %s (see dlock run --help)", a->grace, err);
        return CLI_EXIT_USAGE;
    }
    char ttl[32], grace[32], margin[32];
    cli_format_duration(a->ttl_ms, ttl, sizeof ttl);
    /* Renewal runs every TTL/3: SIGNAL must come after the lease was due for renewal
     * at least once, and SIGKILL before it ends. */
    if (a->grace_ms >= (a->ttl_ms + 1) / 2) {
        cli_errline("run: GRACE %s must be shorter than TTL/2 (TTL is %s) (see dlock run --help)",
                    cli_format_duration(a->grace_ms, grace, sizeof grace), ttl);
        return CLI_EXIT_USAGE;
    }
    a->margin_ms = a->ttl_ms / 20 > MARGIN_MIN_MS ? a->ttl_ms / 20 : MARGIN_MIN_MS;
    /* The first renewal is due at TTL/3, and must be confirmed before the safe-until
     * time, which is at most the validity of an acquire (TTL less the library's
     * drift allowance, with the default settings this command uses) less GRACE less
     * the margin. If that is not later than TTL/3, every run would stop CMD at once:
     * refuse the combination instead. */
    int64_t window = dlock_lease_validity_ms(NULL, a->ttl_ms) - a->grace_ms - a->margin_ms;
    if (window <= (a->ttl_ms + 2) / 3) {
        cli_errline("run: TTL %s is too short for GRACE %s: with a margin of %s, CMD would be "
                    "stopped before the first renewal at TTL/3 (see dlock run --help)",
                    ttl, cli_format_duration(a->grace_ms, grace, sizeof grace),
                    cli_format_duration(a->margin_ms, margin, sizeof margin));
        return CLI_EXIT_USAGE;
    }
    return 0;
}
