/*
 * fenced_write.c: why a lock needs a fence, and how a resource checks it.
 *
 *   dlock-fenced-write [-s URLS] [-t TTL_MS] [-w WAIT_MS] [-n WRITES] [-p WORK_MS] [-a AS]
 *                      LOCK REGISTER VALUE
 *
 * Take LOCK, then write VALUE into REGISTER (a Redis hash on the same servers) WRITES
 * times (as "VALUE (i/WRITES)" when more than once), working WORK_MS between two writes,
 * then release. Every write goes through
 * dlock_fenced_set with the lock's fence: the register keeps the highest fence it has
 * accepted and refuses a write that carries a lower one.
 *
 * The case it exists for: a holder paused (a GC pause, a swapped-out or SIGSTOPped
 * process, a migrated VM) for longer than its lease. Its lock expires, another process
 * takes it, with a higher fence, and writes. The paused holder resumes in the middle of
 * its work, unaware, and writes: the lock cannot stop it (nothing runs in a paused
 * process, and no check it made before the pause is still true), but the register
 * refuses the write, because it has seen a higher fence. tools/demo.sh plays this with
 * two instances:
 *
 *   dlock-fenced-write -a A -t 300 -n 2 -p 200 report reg "A's report" &  # SIGSTOPped
 *   dlock-fenced-write -a B -w 5000 report reg "B's report"               # mid-work
 *
 * Each step prints one line "AS: ..."; stdout is line-buffered so a script can follow.
 * Exit status: 0 every write accepted and the lock released in time, 3 a write was
 * refused by its fence, 1 any other failure, 2 usage.
 */
#define _POSIX_C_SOURCE 200809L

#include <dlock.h>

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { EXIT_REFUSED = 3 };

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleep ms milliseconds of "work". nanosleep resumes after a signal with the time left. */
static void work(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000}, left;
    while (nanosleep(&ts, &left) != 0 && errno == EINTR)
        ts = left;
}

static void usage(FILE *f)
{
    fputs("usage: dlock-fenced-write [-s URLS] [-t TTL_MS] [-w WAIT_MS] [-n WRITES] [-p WORK_MS]\n"
          "                          [-a AS] LOCK REGISTER VALUE\n"
          "  -s URLS     servers (default $DLOCK_SERVERS, else redis://127.0.0.1:6379)\n"
          "  -t TTL_MS   lease (default 30000)     -w WAIT_MS  wait for the lock (default 0)\n"
          "  -n WRITES   writes to make (default 1) -p WORK_MS  work between writes (default 0)\n"
          "  -a AS       name shown on each line (default the pid)\n",
          f);
}

static long long num(const char *s, long long min, long long max)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max) {
        usage(stderr);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    const char *servers = getenv("DLOCK_SERVERS");
    if (servers == NULL || servers[0] == '\0')
        servers = "redis://127.0.0.1:6379";
    dlock_opts o = {0};
    o.ttl_ms = 30000;
    long long writes = 1, work_ms = 0;
    char as[32];
    snprintf(as, sizeof as, "%ld", (long)getpid());

    int opt;
    while ((opt = getopt(argc, argv, "s:t:w:n:p:a:h")) != -1) {
        switch (opt) {
        case 's':
            servers = optarg;
            break;
        case 't':
            o.ttl_ms = num(optarg, DLOCK_TTL_MIN_MS, DLOCK_TTL_MAX_MS);
            break;
        case 'w':
            o.wait_ms = num(optarg, -1, DLOCK_TTL_MAX_MS);
            break;
        case 'n':
            writes = num(optarg, 1, 1000);
            break;
        case 'p':
            work_ms = num(optarg, 0, 3600000);
            break;
        case 'a':
            snprintf(as, sizeof as, "%s", optarg);
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (argc - optind != 3) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[optind], *reg = argv[optind + 1], *value = argv[optind + 2];
    /* One line per step, flushed at once: a script follows this output as it happens. */
    setvbuf(stdout, NULL, _IOLBF, 0);

    dlock_config cfg = {0};
    cfg.timeout_ms = 200; /* per-server command deadline, explicit */
    dlock_client *c;
    if (dlock_client_new(servers, &cfg, &c) != DLOCK_OK) {
        fprintf(stderr, "%s: %s\n", as, dlock_errmsg());
        return 1;
    }
    int64_t t0 = now_ms();
    dlock_lock *l;
    int rc = dlock_acquire(c, name, &o, &l);
    if (rc != DLOCK_OK) {
        printf("%s: could not take \"%s\": %s (%s)\n", as, name, dlock_errname(rc), dlock_errmsg());
        dlock_client_free(c);
        return 1;
    }
    /* The fence goes with every write: the resource's only way to tell us apart from a
     * newer holder. */
    uint64_t fence = dlock_fence(l);
    printf("%s: took \"%s\" after %lld ms: fence %" PRIu64 ", lease %lld ms\n", as, name,
           (long long)(now_ms() - t0), fence, (long long)o.ttl_ms);

    int status = 0;
    for (long long i = 1; i <= writes && status == 0; i++) {
        char buf[1024];
        const char *v = value;
        if (writes > 1) {
            snprintf(buf, sizeof buf, "%s (%lld/%lld)", value, i, writes);
            v = buf;
        }
        if (i > 1) {
            /* A careful holder checks that its lease outlasts the work it is about to do,
             * and so does this one. What no check can cover is a pause after it. */
            int64_t left = dlock_remaining_ms(l);
            if (left <= work_ms) {
                printf("%s: %lld ms of lease left, not enough for %lld ms of work: stopping\n", as,
                       (long long)left, work_ms);
                status = 1;
                break;
            }
            printf("%s: lease has %lld ms left, enough for %lld ms of work before write %lld\n", as,
                   (long long)left, work_ms, i);
            int64_t w0 = now_ms();
            work(work_ms);
            int64_t took = now_ms() - w0;
            /* CLOCK_MONOTONIC runs on while a process is stopped, so a long gap shows a
             * pause; a real program has no reason to look, and cannot act on it anyway
             * if the pause comes between its last look and its write. */
            if (took > work_ms + 50)
                printf("%s: the work took %lld ms, not %lld (the process was paused); "
                       "writing with fence %" PRIu64 "\n",
                       as, (long long)took, work_ms, fence);
        }
        rc = dlock_fenced_set(c, reg, fence, v, strlen(v));
        if (rc == DLOCK_OK) {
            printf("%s: wrote \"%s\" with fence %" PRIu64 ": accepted\n", as, v, fence);
        } else if (rc == DLOCK_ERR_FENCED) {
            printf("%s: wrote \"%s\" with fence %" PRIu64 ": REFUSED, %s\n", as, v, fence,
                   dlock_errname(rc));
            status = EXIT_REFUSED;
        } else {
            printf("%s: write failed: %s (%s)\n", as, dlock_errname(rc), dlock_errmsg());
            status = 1;
        }
    }

    rc = dlock_release(l);
    if (rc == DLOCK_OK) {
        printf("%s: released \"%s\"\n", as, name);
    } else {
        /* DLOCK_ERR_LOST: the lease ran out while we worked; whatever we did after that
         * moment was not protected by the lock. */
        printf("%s: release: %s (%s)\n", as, dlock_errname(rc), dlock_errmsg());
        if (status == 0)
            status = 1;
    }
    dlock_client_free(c);
    return status;
}
