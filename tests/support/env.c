/*
 * env.c: the test's environment: clocks, the slack factor for liveness bounds, where
 * the built dlock command is, and the removal of the directories tests make.
 */
#include "support.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

int64_t dh_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t dh_now_ms(void)
{
    return dh_now_us() / 1000;
}

void dh_sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

long long dh_slack(void)
{
    const char *v = getenv("DLOCK_TEST_SLACK");
    if (!v || !*v)
        return 1;
    char *end;
    long long n = strtoll(v, &end, 10);
    return (*end == '\0' && n >= 1) ? n : 1;
}

const char *dh_cli_path(void)
{
    const char *p = getenv("DLOCK_CLI");
    if (!p || !*p) {
        fprintf(stderr, "dh: FATAL: $DLOCK_CLI is not set (CTest sets it to the built dlock "
                        "command; run this test through ctest or set it by hand)\n");
        exit(1);
    }
    return p;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void dh_rm_tree(const char *dir)
{
    /* Depth first, so that a directory is empty when its turn comes. */
    if (dir && dir[0])
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
