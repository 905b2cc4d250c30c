/*
 * place.c: where the processes run, and what the machine is.
 *
 * On a 2-core machine, round-trip figures change 3 to 4 times with the CPUs that the
 * client and the server land on (a wake-up on the other CPU, or a context switch on
 * the same one), and the scheduler may move them between runs. So the baseline and
 * every workload run under one placement, chosen up front:
 *   same   redis-server, the bench (all its threads, the relays) and redis-benchmark
 *          all on one CPU (the default). A round trip is two context switches on that
 *          CPU, which costs the same every time;
 *   split  redis-server on one CPU, the rest on another: as on two machines, but on a
 *          virtual machine every round trip wakes the other virtual CPU, whose cost
 *          swings with what the hypervisor is doing (the -c 1 baseline moved between
 *          8,000 and 28,000 SET/s from one run to the next on the 2-core reference
 *          machine, against 26,000 to 28,000 pinned `same`: docs/benchmarks.md);
 *   none   no pinning: the scheduler decides, and figures vary more.
 * Pinning is sched_setaffinity(2): the bench pins its main thread before it creates
 * threads or forks (both inherit the mask), and a redis-server child pins itself
 * before exec.
 */
#include "bench.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

int place_pin_self(int cpu)
{
    if (cpu < 0)
        return 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set);
}

double place_load(void)
{
    double load = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f != NULL) {
        if (fscanf(f, "%lf", &load) != 1)
            load = -1;
        fclose(f);
    }
    return load;
}

long place_peak_rss_kb(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return ru.ru_maxrss; /* KiB on Linux */
}

/* "model name" from /proc/cpuinfo (the first CPU's), or "unknown". */
static void cpu_model(char *out, size_t n)
{
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        const char *v = strchr(line, ':');
        if (v == NULL)
            break;
        v++;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t len = strcspn(v, "\n");
        /* The model goes between double quotes in the BENCH machine line. */
        snprintf(out, n, "%.*s", (int)len, v);
        for (char *p = out; *p; p++)
            if (*p == '"')
                *p = '\'';
        break;
    }
    fclose(f);
}

/* True when cpu is one this process may run on. */
static bool cpu_allowed(int cpu)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return false;
    return cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, &set);
}

/* The n-th CPU this process may run on (0-based), or -1. */
static int nth_allowed(int nth)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return -1;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &set) && nth-- == 0)
            return cpu;
    return -1;
}

int place_init(placement *p, enum pin_mode mode, int server_cpu, int client_cpu)
{
    memset(p, 0, sizeof *p);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    p->ncpus = n > 0 ? (int)n : 1;
    cpu_model(p->model, sizeof p->model);
    p->mode = mode;
    p->server_cpu = p->client_cpu = -1;
    if (mode == PIN_SPLIT && nth_allowed(1) < 0) {
        fprintf(stderr, "dlock-bench: only one CPU available: using --pin same\n");
        p->mode = mode = PIN_SAME;
    }
    if (mode == PIN_SAME) {
        p->server_cpu = server_cpu >= 0 ? server_cpu : nth_allowed(0);
        p->client_cpu = client_cpu >= 0 ? client_cpu : p->server_cpu;
    } else if (mode == PIN_SPLIT) {
        p->server_cpu = server_cpu >= 0 ? server_cpu : nth_allowed(0);
        p->client_cpu = client_cpu >= 0 ? client_cpu : nth_allowed(1);
        if (p->client_cpu == p->server_cpu)
            p->client_cpu = nth_allowed(p->server_cpu == nth_allowed(0) ? 1 : 0);
    }
    if (mode != PIN_NONE && (!cpu_allowed(p->server_cpu) || !cpu_allowed(p->client_cpu))) {
        fprintf(stderr, "dlock-bench: CPU %d is not available to this process\n",
                cpu_allowed(p->server_cpu) ? p->client_cpu : p->server_cpu);
        return -1;
    }
    switch (mode) {
    case PIN_SPLIT:
        snprintf(p->text, sizeof p->text,
                 "split: redis-server on CPU %d; bench, relays and redis-benchmark on CPU %d",
                 p->server_cpu, p->client_cpu);
        break;
    case PIN_SAME:
        snprintf(p->text, sizeof p->text,
                 "same: redis-server, bench, relays and redis-benchmark all on CPU %d",
                 p->server_cpu);
        break;
    case PIN_NONE:
        snprintf(p->text, sizeof p->text, "none: not pinned (the scheduler decides)");
        break;
    }
    return 0;
}

/* utime + stime of a process, in clock ticks; 0 if it cannot be read. */
static long long proc_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name, field 2, is in parentheses and may hold spaces: fields are
     * counted from the last ')'. utime and stime are fields 14 and 15. */
    const char *p = strrchr(buf, ')');
    if (p == NULL)
        return 0;
    unsigned long long ut = 0, st = 0;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return 0;
    return (long long)(ut + st);
}

static double tv_s(struct timeval tv)
{
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

void cpu_usage_take(cpu_usage *u, const pid_t *pids, int npids)
{
    memset(u, 0, sizeof *u);
    u->t_ns = now_ns();
    FILE *f = fopen("/proc/stat", "r");
    if (f != NULL) {
        unsigned long long user, nice, sys, idle, iow, irq, soft, steal;
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &sys, &idle,
                   &iow, &irq, &soft, &steal) == 8) {
            u->busy_ticks = (long long)(user + nice + sys);
            u->steal_ticks = (long long)steal;
        }
        fclose(f);
    }
    struct rusage self, kids;
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &kids);
    u->own_s =
        tv_s(self.ru_utime) + tv_s(self.ru_stime) + tv_s(kids.ru_utime) + tv_s(kids.ru_stime);
    long hz = sysconf(_SC_CLK_TCK);
    for (int i = 0; i < npids; i++)
        if (pids[i] > 0)
            u->own_s += (double)proc_ticks(pids[i]) / (double)(hz > 0 ? hz : 100);
}

void cpu_usage_diff(const cpu_usage *a, const cpu_usage *b, double *other, double *steal)
{
    long hz = sysconf(_SC_CLK_TCK);
    double secs = (double)(b->t_ns - a->t_ns) / 1e9;
    double busy = (double)(b->busy_ticks - a->busy_ticks) / (double)(hz > 0 ? hz : 100);
    double st = (double)(b->steal_ticks - a->steal_ticks) / (double)(hz > 0 ? hz : 100);
    double mine = b->own_s - a->own_s;
    *other = secs > 0 && busy > mine ? (busy - mine) / secs : 0;
    *steal = secs > 0 && st > 0 ? st / secs : 0;
}

int place_child_pin(void *arg)
{
    return place_pin_self(*(const int *)arg);
}

pid_t place_spawn(const char *const argv[], int cpu, int out_fd, int err_fd, bool own_group)
{
    /* The child reads cpu from its copy of this stack frame, made by fork(). */
    dh_spawn_opts o = {.out_fd = out_fd,
                       .err_fd = err_fd,
                       .own_group = own_group,
                       .child_setup = place_child_pin,
                       .child_arg = &cpu};
    return dh_spawn(argv, &o);
}
