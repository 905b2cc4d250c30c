/*
 * fence.c: the resource side of fencing. A lock alone cannot stop a holder that was
 * paused past its lease from acting; the resource it writes to can, by refusing any
 * fence lower than one it already accepted.
 *
 * dlock_fenced_set keeps a value with its fence in Redis (the FENCED_SET script, on a
 * quorum of the client's servers); dlock_fence_admit is the same check for a resource
 * in the caller's own memory. The register's scripts are in scripts_records.c (an
 * operator's break raises a register too: FENCE_RAISE, break.c).
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

int dlock_fenced_set(dlock_client *c, const char *key, uint64_t fence, const void *value,
                     size_t value_len)
{
    dlock__err e;
    int rc = dlock__client_enter(c, &e);
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    if ((rc = c->backend->gate(c, DLOCK_GATE_FENCED_SET, &e)) != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    if (key == NULL || key[0] == '\0')
        return dlock__raise(&e, DLOCK_ERR_INVALID, "key is NULL or empty");
    if (fence == 0)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "fence 0 is not a fence (adopted handle?)");
    if (value == NULL && value_len > 0)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "value is NULL");
    if (value_len > (size_t)512 * 1024 * 1024)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "value larger than 512 MiB");
    char f[24];
    int flen = snprintf(f, sizeof f, "%llu", (unsigned long long)fence);
    const char *args[] = {key, f, value ? value : ""};
    const size_t lens[] = {strlen(key), (size_t)flen, value_len};
    const dlock__script_args sa = {DLOCK_SCRIPT_FENCED_SET, 1, 3, args, lens};
    int64_t start;
    rc = dlock__round_yes_no(c, &sa, "fenced write", DLOCK_ERR_FENCED,
                             "a newer fence was already accepted", &start, &e);
    return dlock__err_raise(&e, rc);
}

int dlock_fence_admit(uint64_t *highest, uint64_t fence)
{
    if (highest == NULL)
        return DLOCK_ERR_INVALID;
    uint64_t seen = __atomic_load_n(highest, __ATOMIC_ACQUIRE);
    do {
        if (fence < seen)
            return DLOCK_ERR_FENCED;
    } while (!__atomic_compare_exchange_n(highest, &seen, fence, false, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE));
    return DLOCK_OK;
}
