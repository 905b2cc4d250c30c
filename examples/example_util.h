/*
 * example_util.h: what the example programs share that is not their lesson: numbers
 * from the command line, the first server of a URL list for hiredis, a log of
 * fixed-size records appended by several processes, worker processes that stop
 * together, and percentiles for a report. PROG, where a function takes it, begins its
 * messages on stderr.
 */
#ifndef DLOCK_EXAMPLE_UTIL_H
#define DLOCK_EXAMPLE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* s as a decimal number in [min, max] into *out; false (and *out untouched) when it is
 * not one. */
bool ex_parse_num(const char *s, long long min, long long max, long long *out);

/* The first server of servers (a comma-separated URL list), for hiredis: its host into
 * host (host_len bytes at most, with the NUL), its port (default 6379) and database
 * (default 0). Only the plain form redis://host[:port][/db] is read (IPv6 as [::1]); a
 * URL with credentials or a unix:// socket is refused with a message, to keep the
 * examples short. false when the URL is not of that form. */
bool ex_first_server(const char *prog, const char *servers, char *host, size_t host_len, int *port,
                     int *db);

/* A log for records appended by several processes: path (truncated) when given, else a
 * temporary file unlinked at once (the descriptor, inherited across fork(), keeps it
 * alive; nothing is left behind). Opened with O_APPEND, so that each record written
 * with one write(2) lands whole, never interleaved with another. The descriptor, or -1
 * after a message. */
int ex_log_open(const char *prog, const char *path);
/* Every record of the log at fd (rec_size bytes each), malloc'd, their count in *n;
 * NULL after a message when the log cannot be read or is not whole records. */
void *ex_log_read(const char *prog, int fd, size_t rec_size, size_t *n);

/* Run work(i, arg) in n forked processes (i = 0 .. n-1), each exiting with what work
 * returns, and wait for them all. stdio is flushed first (a buffer not empty at fork()
 * would be written once per process). SIGINT or SIGTERM meanwhile (Ctrl-C, or a script
 * ending the run) is passed on to every worker as SIGTERM; each worker starts with the
 * signal mask the caller had, and the caller keeps SIGCHLD, SIGINT and SIGTERM blocked
 * afterwards. 0 once every worker exited, *failed of them with a status other than 0
 * or by a signal; the signal's number when interrupted (every worker stopped); -1
 * after a message when fork() failed (the workers started so far see getppid() change
 * once the caller exits). */
int ex_fork_workers(const char *prog, int n, int (*work)(int i, void *arg), void *arg, int *failed);

/* The q-th percentile (0..100) of sorted v[0..n-1], nearest rank; 0 when n is 0. */
int64_t ex_percentile(const int64_t *v, size_t n, int q);

#endif /* DLOCK_EXAMPLE_UTIL_H */
