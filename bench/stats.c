/*
 * stats.c: the clock and the percentiles every figure is made of.
 *
 * Percentiles use the nearest-rank definition (the smallest sample with at least p%
 * of the samples at or below it), as redis-benchmark's HdrHistogram reports them up
 * to its bucket width. Samples are nanoseconds in int64_t; a run keeps them all (W1's
 * 20,000 cycles are 160 KiB), so there is no histogram error to explain.
 */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void samples_sort(int64_t *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_i64);
}

int64_t percentile_sorted(const int64_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    /* Nearest rank: ceil(p/100 * n), 1-based. */
    double rank = ceil(p / 100.0 * (double)n);
    size_t i = rank < 1 ? 0 : (size_t)rank - 1;
    return v[i < n ? i : n - 1];
}

int64_t percentile(int64_t *v, size_t n, double p)
{
    samples_sort(v, n);
    return percentile_sorted(v, n, p);
}
