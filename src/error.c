/*
 * error.c: error codes, their messages, and the per-thread detail of the last failure.
 *
 * The detail lives in thread-local storage, not on the client: a client is shared by
 * threads, and one thread's failure must not overwrite the detail another thread is
 * about to read. Only dlock__err_raise writes it, at the end of a public call
 * (base.h's rule for messages).
 */
#include "base.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char errbuf[DLOCK_ERRMSG_MAX];

/* Append "; " (unless buf is empty) and the formatted text at buf[used]. */
static void vformat_at(char *buf, size_t size, size_t used, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

static void vformat_at(char *buf, size_t size, size_t used, const char *fmt, va_list ap)
{
    if (used + 3 >= size)
        return;
    if (used > 0) {
        memcpy(buf + used, "; ", 3);
        used += 2;
    }
    vsnprintf(buf + used, size - used, fmt, ap);
}

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

int dlock__err_set(dlock__err *e, int code, const char *fmt, ...)
{
    /* A message with nothing to format (a nowait step's "waiting", every step an
     * event loop takes) is copied: printf's machinery costs more than the step. */
    if (strchr(fmt, '%') == NULL) {
        size_t n = strlen(fmt);
        if (n >= sizeof e->msg)
            n = sizeof e->msg - 1;
        memcpy(e->msg, fmt, n);
        e->msg[n] = '\0';
        return code;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return code;
}

void dlock__err_append(dlock__err *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vformat_at(e->msg, sizeof e->msg, strlen(e->msg), fmt, ap);
    va_end(ap);
}

int dlock__err_raise(const dlock__err *e, int code)
{
    if (code == DLOCK_OK)
        errbuf[0] = '\0';
    else
        memcpy(errbuf, e->msg, sizeof errbuf);
    return code;
}
