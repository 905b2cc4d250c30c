/*
 * clock.c: the one clock of the library.
 *
 * Lease arithmetic (validity = ttl - elapsed - drift) must never be fooled by a
 * wall-clock step, and must count the time a machine spends suspended, because the
 * servers keep counting the lease meanwhile. CLOCK_BOOTTIME is both. Every elapsed
 * time and deadline in src/ goes through dlock__now_us(), so a test build can later
 * put a fault-injecting clock behind this single function.
 */
#include "internal.h"

#include <time.h>

static int64_t boottime_us(void)
{
    struct timespec ts;
    /* CLOCK_BOOTTIME exists since Linux 2.6.39; it cannot fail with a valid pointer. */
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#ifdef DLOCK_TEST_HOOKS
int64_t dlock__real_now_us(void)
{
    return boottime_us();
}

/* The largest time the test clock has reported (test build only). */
static _Atomic int64_t high_water;

/* The test build's clock: the real one, frozen, offset or running at a wrong rate as
 * the fault tests set it (hooks.h). A backward step is held at the last value given
 * out, as CLOCK_BOOTTIME itself guarantees in the shipped build: every elapsed time
 * and validity in src/ relies on a clock that never goes back. */
int64_t dlock__now_us(void)
{
    int64_t t = atomic_load(&dlock__test_hooks.frozen_at_us);
    if (t == 0) {
        int64_t real = boottime_us();
        int64_t ppm = atomic_load(&dlock__test_hooks.rate_ppm);
        int64_t base = atomic_load(&dlock__test_hooks.rate_base_us);
        t = real + atomic_load(&dlock__test_hooks.offset_us) + (real - base) * ppm / 1000000;
    }
    int64_t seen = atomic_load(&high_water);
    while (t > seen && !atomic_compare_exchange_weak(&high_water, &seen, t))
        ;
    return t > seen ? t : seen;
}
#else
int64_t dlock__now_us(void)
{
    return boottime_us();
}
#endif

int64_t dlock__wallclock_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Condition variables cannot wait on CLOCK_BOOTTIME, so the library's timed waits on
 * them (the renewal thread's sleep until the next renewal is due, a waiter's wait for
 * its subscription to be confirmed) use CLOCK_MONOTONIC, never the wall clock, which
 * a step could move. They are short relative waits, not lease arithmetic: a suspend
 * only makes one of them end late, and the code after it reads dlock__now_us(). */

void dlock__cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

void dlock__cond_deadline(struct timespec *ts, int64_t rel_us)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    int64_t ns = ts->tv_nsec + rel_us * 1000;
    ts->tv_sec += (time_t)(ns / 1000000000);
    ts->tv_nsec = (long)(ns % 1000000000);
}
