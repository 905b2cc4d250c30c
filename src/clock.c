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

int64_t dlock__now_us(void)
{
    struct timespec ts;
    /* CLOCK_BOOTTIME exists since Linux 2.6.39; it cannot fail with a valid pointer. */
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t dlock__wallclock_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
