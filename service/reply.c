/*
 * reply.c: growing buffers and RESP2 replies.
 *
 * Replies are built into a dd_buf: on the loop for the commands answered at once, on a
 * pool thread for a job (whose failure detail, dlock_errmsg(), belongs to that thread),
 * and moved into the connection's output in order.
 */
#include "dlockd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dd_buf_append(dd_buf *b, const void *p, size_t n)
{
    if (n == 0)
        return;
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (q == NULL) {
            fprintf(stderr, "dlockd: out of memory (%zu bytes for a reply)\n", cap);
            abort();
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

void dd_buf_free(dd_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

void dd_buf_move(dd_buf *dst, dd_buf *b)
{
    if (dst->len == 0 && dst->cap < b->cap) {
        /* Take the bytes without copying them. */
        free(dst->p);
        *dst = *b;
        memset(b, 0, sizeof *b);
        return;
    }
    dd_buf_append(dst, b->p, b->len);
    b->len = 0;
}

/* Append at most max - 1 bytes of vprintf's output. */
static void buf_vprintf(dd_buf *b, size_t max, const char *fmt, va_list ap)
{
    char line[1536];
    if (max > sizeof line)
        max = sizeof line;
    int n = vsnprintf(line, max, fmt, ap);
    if (n > 0)
        dd_buf_append(b, line, (size_t)n < max ? (size_t)n : max - 1);
}

void dd_buf_printf(dd_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    buf_vprintf(b, 512, fmt, ap);
    va_end(ap);
}

void dd_reply_status(dd_buf *b, const char *s)
{
    dd_buf_append(b, "+", 1);
    dd_buf_append(b, s, strlen(s));
    dd_buf_append(b, "\r\n", 2);
}

void dd_reply_error(dd_buf *b, const char *fmt, ...)
{
    dd_buf_append(b, "-", 1);
    size_t start = b->len;
    va_list ap;
    va_start(ap, fmt);
    buf_vprintf(b, 1536, fmt, ap);
    va_end(ap);
    /* An error reply is one line: a CR or LF inside (a server's message, a client's
     * argument echoed back) would end it early and desynchronize the client. */
    for (size_t i = start; i < b->len; i++)
        if (b->p[i] == '\r' || b->p[i] == '\n')
            b->p[i] = ' ';
    dd_buf_append(b, "\r\n", 2);
}

/* Append "<prefix><v>\r\n": every reply's headers and integers, written without
 * printf, which cost a lock service under load more than the rest of a reply. */
static void line(dd_buf *b, char prefix, long long v)
{
    char buf[32];
    char *p = buf + sizeof buf;
    *--p = '\n';
    *--p = '\r';
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do
        *--p = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    if (v < 0)
        *--p = '-';
    *--p = prefix;
    dd_buf_append(b, p, (size_t)(buf + sizeof buf - p));
}

void dd_reply_int(dd_buf *b, long long v)
{
    line(b, ':', v);
}

void dd_reply_bulk(dd_buf *b, const void *p, size_t n)
{
    line(b, '$', (long long)n);
    dd_buf_append(b, p, n);
    dd_buf_append(b, "\r\n", 2);
}

void dd_reply_cstr(dd_buf *b, const char *s)
{
    dd_reply_bulk(b, s, strlen(s));
}

void dd_reply_nil(dd_buf *b)
{
    dd_buf_append(b, "$-1\r\n", 5);
}

void dd_reply_array(dd_buf *b, size_t n)
{
    line(b, '*', (long long)n);
}

bool dd_out_of_descriptors(const char *what, const char *detail)
{
    if (strstr(detail, strerror(EMFILE)) == NULL && strstr(detail, strerror(ENFILE)) == NULL)
        return false;
    static atomic_llong last_ms;
    long long now = (long long)dd_now_ms(), last = atomic_load(&last_ms);
    if (now - last >= 1000 && atomic_compare_exchange_strong(&last_ms, &last, now))
        dd_log("out of descriptors: %s failed (%s); raise the open-files limit or lower "
               "--maxclients",
               what, detail);
    return true;
}

void dd_reply_dlock_error(dd_buf *b, int rc)
{
    const char *detail = dlock_errmsg();
    const char *sep = detail[0] != '\0' ? ": " : "";
    if (rc != DLOCK_OK && dd_out_of_descriptors("a command", detail)) {
        dd_reply_error(b, "ERR too many open files in dlockd (%s)", detail);
        return;
    }
    switch (rc) {
    case DLOCK_ERR_NOQUORUM:
        dd_reply_error(b, "NOQUORUM %s%s%s", dlock_strerror(rc), sep, detail);
        break;
    case DLOCK_ERR_IO:
    case DLOCK_ERR_TIMEOUT:
    case DLOCK_ERR_UNAVAILABLE:
    case DLOCK_ERR_AUTH:
    case DLOCK_ERR_PROTOCOL:
    case DLOCK_ERR_CLOSED:
        /* The lock servers failed this call (with N = 1, its own failure; with N > 1
         * the library answers NOQUORUM instead): nothing the client did wrong. */
        dd_reply_error(b, "UNAVAILABLE %s%s%s", dlock_strerror(rc), sep, detail);
        break;
    default:
        dd_reply_error(b, "ERR %s%s%s", dlock_strerror(rc), sep, detail);
        break;
    }
}

void dd_reply_held(dd_buf *b, int rc)
{
    if (rc == DLOCK_OK)
        dd_reply_int(b, 1);
    else if (rc == DLOCK_ERR_LOST)
        dd_reply_int(b, 0);
    else
        dd_reply_dlock_error(b, rc);
}
