/*
 * team.c: worker threads that start together and report progress.
 *
 * Every workload runs on worker threads (W1's single client too), so the main thread
 * is free to print progress and nothing it does lands inside a measurement. A team
 * has two barriers: `ready` (every worker has connected and warmed up; the main
 * thread then snapshots server statistics) and `go` (the measured interval starts).
 * Threads inherit the bench's CPU placement, and get small stacks: W5 runs 50 of
 * them, and W2's peak RSS is a figure.
 */
#include "bench.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct worker {
    team *t;
    int id;
    team_fn fn;
    void *arg;
} worker;

static void *worker_main(void *p)
{
    worker *w = p;
    w->fn(w->t, w->id, w->arg);
    return NULL;
}

/* Both barriers: the main thread snapshots between them. */
void team_ready(team *t)
{
    pthread_barrier_wait(&t->ready);
    pthread_barrier_wait(&t->go);
}

/* The team ends with its last worker: keep the latest end time. */
void team_end(team *t)
{
    int64_t now = now_ns();
    int64_t prev = atomic_load(&t->end_ns);
    while (now > prev && !atomic_compare_exchange_weak(&t->end_ns, &prev, now))
        ;
}

/* Keep the first error (later ones are usually its consequences). */
void team_error(team *t, const char *fmt, ...)
{
    pthread_mutex_lock(&t->mu);
    if (t->err[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(t->err, sizeof t->err, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&t->mu);
    atomic_store(&t->stop, 1);
}

/* Progress every second: on a terminal one line rewritten in place, otherwise a line
 * every 5 s (a log should not get a line per second). */
static void monitor(team *t, int finished_target, _Atomic int *finished)
{
    bool tty = isatty(2) != 0;
    int64_t last = now_ns();
    int64_t every = (tty ? 1 : 5) * (int64_t)1000000000;
    bool printed = false;
    while (atomic_load(finished) < finished_target) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 50 * 1000000L};
        nanosleep(&ts, NULL);
        int64_t now = now_ns();
        if (!progress_on() || now - last < every)
            continue;
        last = now;
        long done = atomic_load(&t->done);
        double secs = (double)(now - t->start_ns) / 1e9;
        /* A team that runs for a fixed time (W7) has no total: its count alone. */
        char of[32] = "";
        if (t->total > 0)
            snprintf(of, sizeof of, "/%ld", t->total);
        if (tty)
            fprintf(stderr, "\rdlock-bench: %s: %ld%s (%.0f s)   ", t->label, done, of, secs);
        else
            fprintf(stderr, "dlock-bench: %s: %ld%s (%.0f s)\n", t->label, done, of, secs);
        printed = true;
    }
    if (printed && tty)
        fprintf(stderr, "\r%60s\r", "");
}

typedef struct tracked {
    worker w;
    _Atomic int *finished;
} tracked;

/* Count finished workers, so the monitor knows when to stop without joining. */
static void *tracked_main(void *p)
{
    tracked *tw = p;
    worker_main(&tw->w);
    atomic_fetch_add(tw->finished, 1);
    return NULL;
}

int team_run(team *t, const char *label, int n, long total, team_fn fn, void *arg,
             void (*before)(void *), void *before_arg)
{
    memset(t, 0, sizeof *t);
    t->label = label;
    t->n = n;
    t->total = total;
    pthread_mutex_init(&t->mu, NULL);
    pthread_barrier_init(&t->ready, NULL, (unsigned)n + 1);
    pthread_barrier_init(&t->go, NULL, (unsigned)n + 1);
    tracked *ws = calloc((size_t)n, sizeof *ws);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    _Atomic int finished = 0;
    if (ws == NULL || th == NULL) {
        fprintf(stderr, "dlock-bench: out of memory\n");
        exit(BENCH_EXIT_FAIL);
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, BENCH_STACK_BYTES);
    for (int i = 0; i < n; i++) {
        ws[i] = (tracked){.w = {.t = t, .id = i, .fn = fn, .arg = arg}, .finished = &finished};
        int rc = pthread_create(&th[i], &attr, tracked_main, &ws[i]);
        if (rc != 0) {
            /* The barriers count on n threads: without them the run cannot go on. */
            fprintf(stderr, "dlock-bench: pthread_create: %s\n", strerror(rc));
            exit(BENCH_EXIT_FAIL);
        }
    }
    pthread_attr_destroy(&attr);
    pthread_barrier_wait(&t->ready);
    if (before != NULL && !team_stopped(t))
        before(before_arg);
    t->start_ns = now_ns();
    atomic_store(&t->end_ns, t->start_ns);
    pthread_barrier_wait(&t->go);
    monitor(t, n, &finished);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    free(ws);
    free(th);
    pthread_barrier_destroy(&t->ready);
    pthread_barrier_destroy(&t->go);
    pthread_mutex_destroy(&t->mu);
    return t->err[0] ? -1 : 0;
}
