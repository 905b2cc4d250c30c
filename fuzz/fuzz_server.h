/*
 * fuzz_server.h: the "server" end of the fuzzers that drive a real connection.
 *
 * A listening unix socket in a private temporary directory: the library connects to it
 * as to any unix:// server (the connect completes at once, into the backlog), and the
 * fuzzer accepts that connection and writes the input as the server's output. No
 * thread and no timing: every byte is written before the library reads it, and the
 * write side is shut afterwards, so an incomplete reply ends in EOF, not a timeout.
 */
#ifndef DLOCK_FUZZ_SERVER_H
#define DLOCK_FUZZ_SERVER_H

#include <stdbool.h>
#include <stddef.h>

/* Create the listener once (exits the process with a message on failure). */
void fs_init(void);

/* "unix://PATH" of the listener, with prefix inserted after "unix://" (e.g.
 * ":pw@") and suffix appended (e.g. "?db=3"). Static storage: valid until the next
 * call. */
const char *fs_url(const char *prefix, const char *suffix);

/* Accept one pending connection: its descriptor (non-blocking), or -1 when none. */
int fs_accept(void);

/* Write all of buf to fd (the data must fit in the socket's buffer: the callers write
 * at most a few hundred KiB before reading). A client that has closed its end (EPIPE,
 * ECONNRESET) takes nothing: false. Exits the process on any other error. */
bool fs_write(int fd, const void *buf, size_t len);

/* Read and discard what the client sent so far. */
void fs_drain(int fd);

#endif /* DLOCK_FUZZ_SERVER_H */
