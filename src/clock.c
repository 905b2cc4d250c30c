/*
 * clock.c: the one clock of the library.
 *
 * Lease arithmetic (validity = ttl - elapsed - drift) must never be fooled by a
 * wall-clock step, and must count the time a machine spends suspended, because the
 * servers keep counting the lease meanwhile. CLOCK_BOOTTIME is both. Every elapsed
 * time and deadline in src/ goes through dlock__now_us(), so the test build puts a
 * fault-injecting clock behind this single function, under the same guard against
 * going back as the shipped one.
 */
#include "base.h"

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

/* The test build's clock source: the real one, frozen, offset or running at a wrong
 * rate as the fault tests set it (hooks.h). A step back is a step back here: holding
 * the clock to never going back is dlock__now_us's work in both builds. */
static int64_t source_us(void)
{
    int64_t t = atomic_load(&dlock__test_hooks.frozen_at_us);
    if (t == 0) {
        int64_t real = boottime_us();
        int64_t ppm = atomic_load(&dlock__test_hooks.rate_ppm);
        int64_t base = atomic_load(&dlock__test_hooks.rate_base_us);
        t = real + atomic_load(&dlock__test_hooks.offset_us) + (real - base) * ppm / 1000000;
    }
    return t;
}
#else
static int64_t source_us(void)
{
    return boottime_us();
}
#endif

/* The largest time given out. CLOCK_BOOTTIME is specified never to go back, but every
 * elapsed time, validity and deadline in src/ would silently grow if it did (a clock
 * source fault, such as virtual machines have shown), so a reading below one already
 * given out gives that one again: the clock holds still until it catches up. That
 * costs one atomic read and, as the clock moves on, one compare-and-swap. */
static _Atomic int64_t high_water;

int64_t dlock__now_us(void)
{
    int64_t t = source_us();
    int64_t seen = atomic_load_explicit(&high_water, memory_order_relaxed);
    while (t > seen && !atomic_compare_exchange_weak_explicit(
                           &high_water, &seen, t, memory_order_relaxed, memory_order_relaxed))
        ;
    return t > seen ? t : seen;
}

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

void dlock__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t now_us, int64_t due_us)
{
    if (due_us == INT64_MAX) {
        pthread_cond_wait(cv, mu);
        return;
    }
    struct timespec ts;
    dlock__cond_deadline(&ts, due_us - now_us);
    pthread_cond_timedwait(cv, mu, &ts);
}
