/*
 * resp.h: the request parser of dlockd. Pure: no I/O, no allocation, no state kept
 * between calls; fuzzed by fuzz/fuzz_resp.c.
 *
 * A client sends commands in one of the two forms Redis accepts:
 *   - multibulk: "*N\r\n" then N arguments, each "$LEN\r\n" LEN bytes "\r\n";
 *   - inline: one line of words separated by spaces or tabs, ended by "\n" or "\r\n"
 *     (for a person at telnet; no quoting).
 * Every size a client declares is checked against the limits when its header is read,
 * before any of the data it announces is awaited, so that a header such as
 * "*2147483647" or "$1073741824" costs nothing but its own bytes.
 */
#ifndef DLOCKD_RESP_H
#define DLOCKD_RESP_H

#include <stddef.h>

typedef struct resp_limits {
    size_t max_args;     /* arguments of one command (and entries of argv) */
    size_t max_bulk;     /* bytes of one multibulk argument */
    size_t max_inline;   /* bytes of one inline command line, its "\n" included */
    int unauthenticated; /* the limits of a client before AUTH: the errors say so, in
                            redis-server's words ("unauthenticated bulk length") */
} resp_limits;

/* One argument: bytes inside the caller's buffer (not NUL-terminated; may hold NULs). */
typedef struct resp_arg {
    const char *p;
    size_t len;
} resp_arg;

enum {
    RESP_ERROR = -1,     /* the input breaks the protocol or a limit: *err says which */
    RESP_INCOMPLETE = 0, /* a command has begun but is not all there */
    RESP_COMMAND = 1     /* one whole command: argv[0 .. *argc) */
};

/*
 * Parse the first command in buf[0 .. len).
 *
 * RESP_COMMAND: argv[0 .. *argc) are its arguments (pointing into buf) and *used is
 * the number of bytes it took. *argc may be 0 (an empty line, "*0" or "*-1"), which
 * the caller skips as Redis does.
 * RESP_INCOMPLETE: *used is the buffer length below which parsing again cannot make
 * progress (more than len), so that a caller fed a byte at a time does not rescan
 * a long command for every byte.
 * RESP_ERROR: *err is a static message for the client ("too many arguments ..."),
 * after which the caller closes the connection: the stream cannot be resynchronized.
 *
 * argv must have room for lim->max_args entries. Thread-safety: any thread.
 */
int resp_parse(const char *buf, size_t len, const resp_limits *lim, resp_arg *argv, size_t *argc,
               size_t *used, const char **err);

#endif /* DLOCKD_RESP_H */
