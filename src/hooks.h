/*
 * hooks.h: fault-injection hooks for the test suite (tests/faults).
 *
 * Compiled in only when DLOCK_TEST_HOOKS is defined: the `dlock_hooked` static library
 * that the fault tests link. The shipped libdlock.so and libdlock.a have none of this,
 * and the macros below compile to nothing there.
 *
 * dlock__test_hooks is a mutable global of the test build alone: the tests set it from
 * any thread, so every field is atomic. The shipped libraries have two mutable
 * globals, both atomics that any thread may touch: the clock's high-water mark
 * (clock.c) and the fork generation (fork.c); the token pool is per thread (token.c).
 */
#ifndef DLOCK_HOOKS_H
#define DLOCK_HOOKS_H

#include <stdatomic.h>
#include <stdint.h>

/* Where a pause hook is called. */
enum dlock__hook_point {
    DLOCK_HOOK_AFTER_SEND = 1,   /* a round's commands were sent; replies not yet read */
    DLOCK_HOOK_BEFORE_READ = 2,  /* about to read a node's reply */
    DLOCK_HOOK_BEFORE_RENEW = 3, /* the renewal thread is about to send a batch */
    DLOCK_HOOK_ACQUIRED = 4,     /* dlock_acquire decided it holds the lock, before returning */
    DLOCK_HOOK_GRANT_HEARD = 5,  /* a waiter heard its grant's message, before it decides
                                    whether to start on it (acquire.c) */
    DLOCK_HOOK_GRANT_START = 6   /* it starts on it, without confirming first */
};

typedef void (*dlock__pause_fn)(int point);

typedef struct dlock__hooks {
    /* The clock, as dlock__now_us() reports it:
     *   frozen_at_us != 0:  frozen_at_us;
     *   else:               real + offset_us + (real - rate_base_us) * rate_ppm / 1e6.
     * A negative rate_ppm makes the client's clock slow, a positive one fast; a step is
     * a change of offset_us. */
    _Atomic int64_t offset_us;
    _Atomic int64_t rate_ppm;
    _Atomic int64_t rate_base_us;
    _Atomic int64_t frozen_at_us;
    /* Called at each point above (NULL: none); it may sleep, or stop the process. */
    _Atomic(dlock__pause_fn) pause;
    /* Allocation failures: when fail_at > 0, the fail_at-th allocation made by the
     * library from now on fails (the counter is allocs). fail_every makes every
     * allocation from then on fail too. */
    atomic_long allocs;
    atomic_long fail_at;
    atomic_bool fail_every;
} dlock__hooks;

#ifdef DLOCK_TEST_HOOKS
extern dlock__hooks dlock__test_hooks;
/* The real CLOCK_BOOTTIME, for tests that need the truth next to the hooked clock. */
int64_t dlock__real_now_us(void);
#define DLOCK_PAUSE_POINT(point)                                                                   \
    do {                                                                                           \
        dlock__pause_fn fn_ = atomic_load(&dlock__test_hooks.pause);                               \
        if (fn_ != NULL)                                                                           \
            fn_(point);                                                                            \
    } while (0)
#else
#define DLOCK_PAUSE_POINT(point) ((void)0)
#endif

#endif /* DLOCK_HOOKS_H */
