/*
 * error.c: error codes, their messages, and the per-thread detail of the last failure.
 *
 * The detail lives in thread-local storage, not on the client: a client is shared by
 * threads, and one thread's failure must not overwrite the detail another thread is
 * about to read (style.md, rule 9). Mutable state outside the handles is this buffer
 * and token.c's pool of random bytes, both per thread by construction, and client.c's
 * fork generation (written only in a forked child's atfork handler).
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char errbuf[1024];

const char *dlock_strerror(int err)
{
    /* A switch over the X-macro list: a code added to DLOCK_ERR_MAP is covered here
     * without touching this function. */
    switch (err) {
#define DLOCK_XX_(name, num, msg)                                                                  \
    case DLOCK_##name:                                                                             \
        return msg;
        DLOCK_ERR_MAP(DLOCK_XX_)
#undef DLOCK_XX_
    }
    return "unknown error";
}

const char *dlock_errname(int err)
{
    switch (err) {
#define DLOCK_XX_(name, num, msg)                                                                  \
    case DLOCK_##name:                                                                             \
        return "DLOCK_" #name;
        DLOCK_ERR_MAP(DLOCK_XX_)
#undef DLOCK_XX_
    }
    return "DLOCK_ERR_UNKNOWN";
}

const char *dlock_errmsg(void)
{
    return errbuf;
}

const char *dlock_version(void)
{
    return DLOCK_VERSION_STRING;
}

void dlock__clear_error(void)
{
    errbuf[0] = '\0';
}

int dlock__fail(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
    return err;
}

void dlock__append_error(const char *fmt, ...)
{
    size_t used = strlen(errbuf);
    if (used + 3 >= sizeof errbuf)
        return;
    if (used > 0) {
        memcpy(errbuf + used, "; ", 3);
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf + used, sizeof errbuf - used, fmt, ap);
    va_end(ap);
}
