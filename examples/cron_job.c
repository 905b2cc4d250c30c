/*
 * cron_job.c: run a job on one machine of a fleet.
 *
 *   dlock-cron-job [-s URLS] [-t TTL_MS] [-d STEP_MS] [-p PERIOD_S] [JOB]
 *
 * Every machine's crontab starts this at the same minute; the lock and the slot decide
 * which one runs JOB (default "nightly-report"), once per PERIOD_S seconds of the
 * servers' clock (default a day; 0: no slot, only "not at the same time"). The others
 * find the lock taken or the slot done and exit 0: that is the normal case, not an
 * error. The job here is a stand-in (three steps of STEP_MS milliseconds); replace
 * job_step() with the real work.
 *
 * What a careful caller does, and this example shows:
 *   - try once (wait_ms = 0): a machine that comes second has nothing to wait for;
 *   - claim the slot (dlock_slot_claim) before the job starts: without it, a machine
 *     whose cron fires after the first one finished would run the job again;
 *   - tell "somebody else has it" (DLOCK_ERR_BUSY) from "cannot reach the servers";
 *   - choose a lease longer than the job, and extend it when the job runs long;
 *   - stop when the lock is gone, and pass the fence to whatever the job writes;
 *   - treat DLOCK_ERR_LOST from the release as "the job was not protected to the end".
 *
 * For shell jobs, `dlock run --once-per 1d -w 0 -E 0 JOB -- ./job.sh` does all of
 * this, renewing the lease in the background and signalling the job if the lock is
 * lost.
 *
 * Exit status: 0 the job ran here, or runs elsewhere; 1 the job failed or lost its
 * lock; 75 (EX_TEMPFAIL) the lock servers could not be reached, so nobody may have run
 * it: worth an alert.
 */
#define _POSIX_C_SOURCE 200809L

#include <dlock.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { EXIT_TEMPFAIL = 75 };

/* One step of the job. It gets the fence so that it can hand it to every resource it
 * writes (see fenced_write.c): a resource that checks it refuses a stale holder. */
static int job_step(const char *job, int step, uint64_t fence, long step_ms)
{
    printf("%s: step %d with fence %" PRIu64 "\n", job, step, fence);
    struct timespec ts = {step_ms / 1000, (step_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    return 0;
}

int main(int argc, char **argv)
{
    const char *servers = getenv("DLOCK_SERVERS");
    if (servers == NULL || servers[0] == '\0')
        servers = "redis://127.0.0.1:6379";
    long long ttl_ms = 10 * 60 * 1000; /* comfortably longer than the job should take */
    long step_ms = 100;
    long long period_s = 24 * 60 * 60;
    int opt;
    char *end;
    while ((opt = getopt(argc, argv, "s:t:d:p:")) != -1) {
        if (opt == 's')
            servers = optarg;
        else if (opt == 't')
            ttl_ms = strtoll(optarg, NULL, 10);
        else if (opt == 'd')
            step_ms = strtol(optarg, NULL, 10);
        else if (opt == 'p' && (period_s = strtoll(optarg, &end, 10), end == optarg || *end))
            goto usage;
        else if (opt != 'p')
            goto usage;
    }
    if (argc - optind > 1 || step_ms < 0 || ttl_ms < DLOCK_TTL_MIN_MS ||
        ttl_ms > DLOCK_TTL_MAX_MS || period_s < 0 || period_s > DLOCK_SLOT_PERIOD_MAX_MS / 1000)
        goto usage;
    const char *job = optind < argc ? argv[optind] : "nightly-report";

    dlock_config cfg = {0};
    cfg.timeout_ms = 200; /* per-server command deadline */
    dlock_client *c;
    if (dlock_client_new(servers, &cfg, &c) != DLOCK_OK) {
        /* A malformed URL: the detail names the part that is wrong. */
        fprintf(stderr, "%s: %s\n", job, dlock_errmsg());
        return 1;
    }

    dlock_opts o = {0};
    o.ttl_ms = ttl_ms;
    o.wait_ms = 0;    /* try once */
    o.label = "cron"; /* `dlock status JOB` shows host:pid cron */
    dlock_lock *l;
    int rc = dlock_acquire(c, job, &o, &l);
    switch (rc) {
    case DLOCK_OK:
        break;
    case DLOCK_ERR_BUSY:
        printf("%s: running on another machine; nothing to do here\n", job);
        dlock_client_free(c);
        return 0;
    case DLOCK_ERR_NOQUORUM:
    case DLOCK_ERR_IO:
    case DLOCK_ERR_TIMEOUT:
    case DLOCK_ERR_UNAVAILABLE:
        /* Nobody can tell whether another machine runs the job: do not run it. */
        fprintf(stderr, "%s: lock servers unavailable, job not run: %s\n", job, dlock_errmsg());
        dlock_client_free(c);
        return EXIT_TEMPFAIL;
    default:
        fprintf(stderr, "%s: %s: %s\n", job, dlock_strerror(rc), dlock_errmsg());
        dlock_client_free(c);
        return 1;
    }

    /* The slot of the servers' clock, claimed before the job starts: a run that fails
     * still counts, so a failing job is not retried by every other machine in turn. */
    dlock_slot slot;
    rc = period_s > 0 ? dlock_slot_claim(l, period_s * 1000, &slot) : DLOCK_OK;
    if (rc != DLOCK_OK) {
        /* Done already: nothing to do. Lost: no claim, so no run (1, as for a job that
         * lost its lock). Unreachable: nobody knows whether it ran (75). */
        int status = rc == DLOCK_ERR_BUSY ? 0 : rc == DLOCK_ERR_LOST ? 1 : EXIT_TEMPFAIL;
        if (status == 0)
            printf("%s: already ran in this slot (%s); nothing to do here\n", job, dlock_errmsg());
        else
            fprintf(stderr, "%s: cannot claim the slot, job not run: %s: %s\n", job,
                    dlock_strerror(rc), dlock_errmsg());
        dlock_release(l);
        dlock_client_free(c);
        return status;
    }

    uint64_t fence = dlock_fence(l);
    int status = 0;
    bool lost = false;
    for (int step = 1; step <= 3 && status == 0; step++) {
        /* Before each step, make sure the lease outlives it: extend once half of it is
         * gone, or when what is left would not cover the step. DLOCK_ERR_LOST means
         * another machine may be running the job now; after another error the lock is
         * still ours for what is left of the lease. Either way, no step starts unless
         * the lease covers it. */
        int64_t left = dlock_remaining_ms(l);
        rc = left < ttl_ms / 2 || left <= step_ms ? dlock_extend(l, ttl_ms) : DLOCK_OK;
        if (rc == DLOCK_ERR_LOST || dlock_remaining_ms(l) <= step_ms) {
            fprintf(stderr, "%s: stopping before step %d: %s\n", job, step,
                    rc == DLOCK_ERR_LOST ? dlock_errmsg() : "the lease would not cover it");
            lost = rc == DLOCK_ERR_LOST;
            status = 1;
            break;
        }
        status = job_step(job, step, fence, step_ms);
    }

    rc = dlock_release(l); /* frees l whatever it returns */
    if (rc == DLOCK_ERR_LOST && !lost) {
        fprintf(stderr,
                "%s: the lease ran out before the job ended; another machine may "
                "have run it too (use a longer lease)\n",
                job);
        status = 1;
    } else if (rc != DLOCK_OK && rc != DLOCK_ERR_LOST) {
        /* The job is done; the lock could not be released now and will expire by itself
         * when its lease ends. */
        fprintf(stderr, "%s: release: %s (the lease will expire)\n", job, dlock_errmsg());
    }
    dlock_client_free(c);
    return status;

usage:
    fprintf(stderr,
            "usage: dlock-cron-job [-s URLS] [-t TTL_MS] [-d STEP_MS] [-p PERIOD_S] [JOB]\n");
    return 2;
}
