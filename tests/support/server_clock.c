/*
 * server_clock.c: a redis-server on a clock of its own (dh_server_opts.clock,
 * dh_server_set_clock): libfaketime preloaded into it, reading the fake time from a
 * file in the server's directory on every call, so that a test can step it while the
 * server runs.
 */
#include "server_internal.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* libfaketime, and glibc's malloc to preload before it: Debian's redis-server takes its
 * malloc from jemalloc, whose first allocation reads the clock, which libfaketime is
 * still setting itself up to fake (it allocates while it starts): the two wait on each
 * other and the server never starts. With glibc's malloc first in the search order,
 * jemalloc's is never called. */
static int faketime_libs(char *out, size_t n)
{
    glob_t g;
    const char *lib = getenv("DLOCK_LIBFAKETIME");
    char found[512] = "";
    if (lib != NULL && lib[0] != '\0') {
        snprintf(found, sizeof found, "%s", lib);
    } else if (glob("/usr/lib/*/faketime/libfaketime.so.1", 0, NULL, &g) == 0) {
        snprintf(found, sizeof found, "%s", g.gl_pathv[0]);
        globfree(&g);
    }
    if (found[0] == '\0' || access(found, R_OK) != 0) {
        fprintf(stderr, "dh: FATAL: libfaketime not found (or $DLOCK_LIBFAKETIME); install "
                        "it: apt-get install libfaketime\n");
        return -1;
    }
    /* The malloc library lives in the same multiarch directory as faketime/. */
    char dir[512];
    snprintf(dir, sizeof dir, "%s", found);
    char *slash = strstr(dir, "/faketime/");
    if (slash != NULL)
        *slash = '\0';
    char malloc_lib[600];
    snprintf(malloc_lib, sizeof malloc_lib, "%s/libc_malloc_debug.so.0", dir);
    if (access(malloc_lib, R_OK) != 0) {
        fprintf(stderr, "dh: FATAL: %s not found (glibc 2.34 or later has it)\n", malloc_lib);
        return -1;
    }
    snprintf(out, n, "LD_PRELOAD=%s:%s", malloc_lib, found);
    return 0;
}

/* The file libfaketime reads the server's time from, in its directory. */
static void clock_file(const dh_server *s, char *out, size_t n)
{
    snprintf(out, n, "%s/faketime.rc", s->dir);
}

int dh__clock_env(const dh_server *s, char *preload, size_t pn, char *rc, size_t rn)
{
    if (faketime_libs(preload, pn) < 0)
        return -1;
    char path[600];
    clock_file(s, path, sizeof path);
    snprintf(rc, rn, "FAKETIME_TIMESTAMP_FILE=%s", path);
    return 0;
}

int dh_server_set_clock(dh_server *s, const char *clock)
{
    if (!s->faked_clock) {
        fprintf(stderr, "dh: FATAL: the server was not started with a clock of its own\n");
        return -1;
    }
    /* Written aside and renamed, so that the server never reads half of it. */
    char path[600], tmp[620];
    clock_file(s, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.new", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL || fprintf(f, "%s\n", clock) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "dh: FATAL: %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}
