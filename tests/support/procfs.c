/*
 * procfs.c: what /proc says about this process, for the tests that check that
 * nothing leaks (descriptors, threads, memory).
 */
#include "support.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dh_fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/* The number after "field:" in /proc/self/status, or -1. */
static long long status_field(const char *field)
{
    FILE *f = fopen("/proc/self/status", "re");
    if (f == NULL)
        return -1;
    size_t flen = strlen(field);
    char line[256];
    long long v = -1;
    while (v < 0 && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, field, flen) == 0 && line[flen] == ':')
            v = atoll(line + flen + 1);
    fclose(f);
    return v;
}

int dh_thread_count(void)
{
    return (int)status_field("Threads");
}

long long dh_status_kib(const char *field)
{
    return status_field(field);
}
