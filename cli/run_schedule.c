/*
 * run_schedule.c: what `dlock run` does for scheduled jobs, the cron job that every
 * host of a fleet starts at the same time:
 *
 *   -E N          a busy lock, or a slot that already ran, is the normal outcome on
 *                 all hosts but one: exit N, and say nothing (cron mails whatever a
 *                 job prints) unless -v asks why;
 *   --once-per D  at most one run per slot of D on the servers' clock
 *                 (dlock_slot_claim), whichever host gets the lock first in the slot
 *                 and however late the others come: a run that started counts;
 *   --min-hold D  a job that ends quickly keeps the lock until D after it was taken,
 *                 so that a host whose cron fires late does not run it again. The rest
 *                 of the hold is a plain lease on the servers, not a process: dlock
 *                 exits with CMD's status at once.
 */
#include "run.h"

#include "duration.h"
#include "escape.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int run_conflict(struct runner *r, const char *what)
{
    const struct cli_run_args *a = r->a;
    if (!a->conflict_quiet || a->verbose) {
        char detail[1024];
        snprintf(detail, sizeof detail, "%s", dlock_errmsg());
        if (detail[0] != '\0')
            cli_errline("%s: %s (%s)", r->what, what, detail);
        else
            cli_errline("%s: %s", r->what, what);
    }
    return a->conflict_exit;
}

bool run_claim_slot(struct runner *r, int *code)
{
    const struct cli_run_args *a = r->a;
    if (a->once_per_ms == 0)
        return true;
    dlock_slot s;
    int rc = dlock_slot_claim(r->lock, a->once_per_ms, &s);
    if (rc == DLOCK_ERR_BUSY) {
        *code = run_conflict(r, "this slot already ran");
        return false;
    }
    if (rc != DLOCK_OK) {
        *code = cli_fail_call(r->what, rc);
        return false;
    }
    snprintf(r->slot_var, sizeof r->slot_var, "DLOCK_SLOT=%" PRId64, s.start_ms / 1000);
    if (a->verbose) {
        time_t start = (time_t)(s.start_ms / 1000);
        struct tm tm;
        char utc[32] = "?";
        if (gmtime_r(&start, &tm) != NULL)
            strftime(utc, sizeof utc, "%Y-%m-%dT%H:%M:%SZ", &tm);
        cli_errline("%s: slot %s claimed (%s), running CMD", r->what, utc, r->slot_var);
    }
    return true;
}

/* Say that the rest of --min-hold could not be kept, and why. */
static void hold_failed(struct runner *r, const char *left, int rc)
{
    char detail[1024];
    snprintf(detail, sizeof detail, "%s", dlock_errmsg());
    cli_errline("warning: %s: cannot keep the lock %s more for --min-hold: %s%s%s%s", r->what, left,
                dlock_strerror(rc), detail[0] ? " (" : "", detail, detail[0] ? ")" : "");
}

bool run_hold_rest(struct runner *r)
{
    const struct cli_run_args *a = r->a;
    if (a->min_hold_ms == 0)
        return false;
    int64_t rest = a->min_hold_ms - (run_boot_ms() - r->acquired_ms);
    if (rest < DLOCK_TTL_MIN_MS)
        return false; /* the hold is over: release as usual */
    char left[32];
    cli_format_duration(rest, left, sizeof left);
    int rc = dlock_extend(r->lock, rest);
    /* CMD ran under the lock; only the hold after it failed. A lock found lost is the
     * caller's to report (its release says so), anything else is said here. */
    if (rc != DLOCK_OK) {
        if (rc != DLOCK_ERR_LOST)
            hold_failed(r, left, rc);
        return false;
    }
    rc = dlock_lock_detach(r->lock); /* frees the handle whatever it returns */
    r->lock = NULL;
    if (rc != DLOCK_OK)
        hold_failed(r, left, rc); /* a file:// lock was then released */
    else if (a->verbose)
        cli_errline("%s: CMD ended; the lock stays held %s more (--min-hold)", r->what, left);
    return true;
}
