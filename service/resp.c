/*
 * resp.c: the request parser (see resp.h).
 *
 * Stateless by design: each call parses from the start of the command. What keeps that
 * cheap is the hint returned with RESP_INCOMPLETE: a caller waits until the buffer holds
 * the bytes the parser said it needs (the rest of a bulk argument, or one more byte of a
 * header line) before calling again, so a command is rescanned once per argument at
 * most, never once per byte of a long argument. Being stateless, the parser cannot
 * disagree with itself between calls, and the fuzz target checks exactly that: any cut
 * of a stream into pieces gives the same commands as the whole.
 */
#include "resp.h"

#include <stdint.h>
#include <string.h>

/* A header line ("*N\r\n", "$LEN\r\n"): a sign, up to 19 digits and the CRLF fit. A
 * client that sends more without a CRLF is not speaking RESP. */
#define HEADER_MAX 32

/* Read a header line at buf[pos] after its type byte: a decimal number (a minus sign
 * allowed when neg_ok) followed by "\r\n". Returns RESP_COMMAND with *value and *next
 * (the offset after the CRLF), RESP_INCOMPLETE with *next the length needed, or
 * RESP_ERROR. */
static int header(const char *buf, size_t len, size_t pos, int neg_ok, long long *value,
                  size_t *next)
{
    size_t i = pos + 1;
    size_t end = len < pos + HEADER_MAX ? len : pos + HEADER_MAX;
    int neg = 0;
    if (neg_ok && i < end && buf[i] == '-') {
        neg = 1;
        i++;
    }
    size_t digits = i;
    long long v = 0;
    /* Every byte is checked as it comes, so that garbage is refused at once rather
     * than when the line has grown past HEADER_MAX. */
    for (; i < end && buf[i] != '\r'; i++) {
        if (buf[i] < '0' || buf[i] > '9')
            return RESP_ERROR;
        /* A value past the limits is refused by the callers long before it could
         * overflow: stop growing it there. */
        if (v < INT64_C(1000000000000000))
            v = v * 10 + (buf[i] - '0');
    }
    if (i + 1 >= len || i == end) {
        if (i == end && end - pos >= HEADER_MAX)
            return RESP_ERROR;
        *next = len + 1;
        return RESP_INCOMPLETE;
    }
    if (i == digits || buf[i + 1] != '\n')
        return RESP_ERROR;
    *value = neg ? -v : v;
    *next = i + 2;
    return RESP_COMMAND;
}

static int multibulk(const char *buf, size_t len, const resp_limits *lim, resp_arg *argv,
                     size_t *argc, size_t *used, const char **err)
{
    long long n;
    size_t pos;
    int rc = header(buf, len, 0, 1, &n, &pos);
    if (rc == RESP_INCOMPLETE) {
        *used = pos;
        return rc;
    }
    if (rc == RESP_ERROR) {
        *err = "invalid multibulk length";
        return rc;
    }
    if (n <= 0) {
        /* "*0" and "*-1" carry no command; Redis ignores them too. */
        *argc = 0;
        *used = pos;
        return RESP_COMMAND;
    }
    if ((unsigned long long)n > lim->max_args) {
        *err = lim->unauthenticated ? "unauthenticated multibulk length"
                                    : "too many arguments in a command";
        return RESP_ERROR;
    }
    for (size_t k = 0; k < (size_t)n; k++) {
        if (pos >= len) {
            *used = pos + 1;
            return RESP_INCOMPLETE;
        }
        if (buf[pos] != '$') {
            *err = "expected '$' before a bulk argument";
            return RESP_ERROR;
        }
        long long blen;
        size_t data;
        rc = header(buf, len, pos, 0, &blen, &data);
        if (rc == RESP_INCOMPLETE) {
            *used = data;
            return rc;
        }
        if (rc == RESP_ERROR) {
            *err = "invalid bulk length";
            return rc;
        }
        if ((unsigned long long)blen > lim->max_bulk) {
            *err = lim->unauthenticated ? "unauthenticated bulk length"
                                        : "bulk argument longer than the limit";
            return RESP_ERROR;
        }
        size_t end = data + (size_t)blen;
        if (len < end + 2) {
            *used = end + 2;
            return RESP_INCOMPLETE;
        }
        if (buf[end] != '\r' || buf[end + 1] != '\n') {
            *err = "bulk argument not followed by CRLF";
            return RESP_ERROR;
        }
        argv[k].p = buf + data;
        argv[k].len = (size_t)blen;
        pos = end + 2;
    }
    *argc = (size_t)n;
    *used = pos;
    return RESP_COMMAND;
}

static int is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r';
}

static int inline_command(const char *buf, size_t len, const resp_limits *lim, resp_arg *argv,
                          size_t *argc, size_t *used, const char **err)
{
    size_t scan = len < lim->max_inline ? len : lim->max_inline;
    const char *nl = memchr(buf, '\n', scan);
    if (nl == NULL) {
        if (len >= lim->max_inline) {
            *err = lim->unauthenticated ? "unauthenticated inline command length"
                                        : "inline command longer than the limit";
            return RESP_ERROR;
        }
        *used = len + 1;
        return RESP_INCOMPLETE;
    }
    size_t stop = (size_t)(nl - buf);
    size_t n = 0;
    size_t i = 0;
    while (i < stop) {
        while (i < stop && is_space(buf[i]))
            i++;
        if (i == stop)
            break;
        size_t start = i;
        while (i < stop && !is_space(buf[i]))
            i++;
        if (n == lim->max_args) {
            *err = lim->unauthenticated ? "unauthenticated multibulk length"
                                        : "too many arguments in a command";
            return RESP_ERROR;
        }
        argv[n].p = buf + start;
        argv[n].len = i - start;
        n++;
    }
    *argc = n;
    *used = stop + 1;
    return RESP_COMMAND;
}

int resp_parse(const char *buf, size_t len, const resp_limits *lim, resp_arg *argv, size_t *argc,
               size_t *used, const char **err)
{
    *argc = 0;
    *used = 0;
    *err = NULL;
    if (len == 0) {
        *used = 1;
        return RESP_INCOMPLETE;
    }
    if (buf[0] == '*')
        return multibulk(buf, len, lim, argv, argc, used, err);
    return inline_command(buf, len, lim, argv, argc, used, err);
}
