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

/* The test build's clock: the real one, frozen, offset or running at a wrong rate as
 * the fault tests set it (hooks.h). */
int64_t dlock__now_us(void)
{
    int64_t frozen = atomic_load(&dlock__test_hooks.frozen_at_us);
    if (frozen != 0)
        return frozen;
    int64_t real = boottime_us();
    int64_t ppm = atomic_load(&dlock__test_hooks.rate_ppm);
    int64_t skew = ppm ? (real - atomic_load(&dlock__test_hooks.rate_base_us)) * ppm / 1000000 : 0;
    return real + atomic_load(&dlock__test_hooks.offset_us) + skew;
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
