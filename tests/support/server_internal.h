/*
 * server_internal.h: what the files of the redis-server fixture share, and nothing
 * else includes (support.h has the public side).
 *
 *   server.c           one server's life: its directory, its port, spawning it, waiting
 *                      until it answers, stop, kill, restart, pause;
 *   server_registry.c  the servers this process started, killed when it exits or dies
 *                      of a signal;
 *   server_clock.c     a server on a clock of its own (libfaketime);
 *   server_admin.c     admin connections to a server and the checks of their replies.
 */
#ifndef DLOCK_TEST_SERVER_INTERNAL_H
#define DLOCK_TEST_SERVER_INTERNAL_H

#include "support.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* ---- server_registry.c ----------------------------------------------------------- */

/* Record a running server (its PID, its directory and whether to keep it) for the
 * clean-up at exit and on signals; forget it once it has been reaped. */
void dh__live_add(pid_t pid, const char *dir, bool keep);
void dh__live_remove(pid_t pid);
/* Kill pid's process group (the server and any BGSAVE child) and reap the server. */
void dh__kill_and_reap(pid_t pid);
/* Remove a server's directory, unless it is to be kept (keep, or $DLOCK_TEST_KEEP). */
void dh__remove_dir(const char *dir, bool keep);

/* ---- server_clock.c -------------------------------------------------------------- */

/* The environment entries of a server on its own clock: preload gets LD_PRELOAD (glibc's
 * malloc, then libfaketime), rc FAKETIME_TIMESTAMP_FILE (the file dh_server_set_clock
 * writes). 0, or -1 after printing why. */
int dh__clock_env(const dh_server *s, char *preload, size_t pn, char *rc, size_t rn);

#endif /* DLOCK_TEST_SERVER_INTERNAL_H */
