/*
 * alloc.c: every allocation the library makes goes through here, so that the test
 * build can make the Nth one fail (each allocation site must fail cleanly, with
 * DLOCK_ERR_NOMEM and no leak, and the fault suite proves it site by site). In the shipped
 * libraries these are plain calls. (hiredis's own allocations, formatting commands and parsing
 * replies, are not ours; hiredis 0.14 reports those failures as REDIS_ERR_OOM, which we map to
 * NOMEM.)
 */
#include "base.h"

#include <stdlib.h>
#include <string.h>

#ifdef DLOCK_TEST_HOOKS
/* Should this allocation fail? */
static bool injected_failure(void)
{
    long n = atomic_fetch_add(&dlock__test_hooks.allocs, 1) + 1;
    long at = atomic_load(&dlock__test_hooks.fail_at);
    if (at <= 0)
        return false;
    return n == at || (n > at && atomic_load(&dlock__test_hooks.fail_every));
}
#define FAIL_INJECTED() injected_failure()
#else
#define FAIL_INJECTED() false
#endif

void *dlock__malloc(size_t n)
{
    return FAIL_INJECTED() ? NULL : malloc(n);
}

void *dlock__calloc(size_t count, size_t size)
{
    return FAIL_INJECTED() ? NULL : calloc(count, size);
}

void *dlock__realloc(void *p, size_t n)
{
    return FAIL_INJECTED() ? NULL : realloc(p, n);
}

char *dlock__strdup(const char *s)
{
    return FAIL_INJECTED() ? NULL : strdup(s);
}

void dlock__copy_text(char *dst, size_t size, const char *src, size_t len)
{
    if (len > size - 1)
        len = size - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}
