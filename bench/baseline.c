/*
 * baseline.c: redis-benchmark on the same server, under the same placement.
 *
 * Every dlock figure is read against what plain Redis does on the same machine in
 * the same run: SET at -c 1 (one connection, one request at a time: the round trip)
 * and at -c 8 (eight connections). W1 is compared with the first (an acquire plus a
 * release is two round trips, so 0.5 is the ceiling), W2 with the second, and the
 * median latency at -c 1 is the run's RTT. W7's script limits (fleet_scripts.c) run
 * it too, on a command of their own, pipelined (baseline_run_args).
 *
 * Redis 7's --csv prints a header line and one row per test:
 *   "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",...
 *   "SET","23529.41","0.032","0.016","0.031","0.047",...
 * Columns are found by name in the header. An older redis-benchmark (before 6.2)
 * prints no header and only "SET","rps": then the rps is the second field and the
 * latencies are unknown.
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CSV_FIELDS        16
#define BASELINE_MAX_ARGS 48 /* after the connection options */

/* Split one CSV line of quoted fields into f[] (modified in place); the count. */
static int split_csv(char *line, char **f, int max)
{
    int n = 0;
    char *p = line;
    while (*p && n < max) {
        if (*p == '"') {
            char *end = strchr(p + 1, '"');
            if (end == NULL)
                break;
            *end = '\0';
            f[n++] = p + 1;
            p = end + 1;
        } else {
            size_t len = strcspn(p, ",\r\n");
            char c = p[len];
            p[len] = '\0';
            f[n++] = p;
            p += len;
            if (c == '\0')
                break;
            *p = c;
        }
        if (*p == ',')
            p++;
        else
            break;
    }
    return n;
}

/* The index of a header column, or -1. */
static int find_col(char **hdr, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(hdr[i], name) == 0)
            return i;
    return -1;
}

/* The row named row ("SET"), or with row NULL the first row after the header (a
 * command given on redis-benchmark's command line is its row's name, written out). */
static int parse_row(const char *text, const char *row, baseline *out)
{
    out->rps = 0;
    out->p50_us = out->p99_us = -1;
    char *copy = strdup(text);
    if (copy == NULL)
        return -1;
    int c_rps = 1, c_p50 = -1, c_p99 = -1, rc = -1;
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *f[CSV_FIELDS];
        int n = split_csv(line, f, CSV_FIELDS);
        if (n < 2)
            continue;
        if (strcmp(f[0], "test") == 0) {
            c_rps = find_col(f, n, "rps");
            c_p50 = find_col(f, n, "p50_latency_ms");
            c_p99 = find_col(f, n, "p99_latency_ms");
            continue;
        }
        if ((row != NULL && strcmp(f[0], row) != 0) || c_rps < 0 || c_rps >= n)
            continue;
        out->rps = strtod(f[c_rps], NULL);
        if (c_p50 >= 0 && c_p50 < n)
            out->p50_us = strtod(f[c_p50], NULL) * 1000.0;
        if (c_p99 >= 0 && c_p99 < n)
            out->p99_us = strtod(f[c_p99], NULL) * 1000.0;
        rc = out->rps > 0 ? 0 : -1;
        break;
    }
    free(copy);
    return rc;
}

int baseline_parse_csv(const char *text, baseline *out)
{
    return parse_row(text, "SET", out);
}

/* Read from both pipes until both close; at most outlen-1 / errlen-1 bytes kept. */
static void drain(int out_fd, char *out, size_t outlen, int err_fd, char *err, size_t errlen)
{
    size_t on = 0, en = 0;
    struct pollfd p[2] = {{.fd = out_fd, .events = POLLIN}, {.fd = err_fd, .events = POLLIN}};
    while (p[0].fd >= 0 || p[1].fd >= 0) {
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || p[i].revents == 0)
                continue;
            char buf[4096];
            ssize_t r = read(p[i].fd, buf, sizeof buf);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                p[i].fd = -1;
                continue;
            }
            char *dst = i == 0 ? out : err;
            size_t *len = i == 0 ? &on : &en;
            size_t cap = i == 0 ? outlen : errlen;
            size_t take = (size_t)r < cap - 1 - *len ? (size_t)r : cap - 1 - *len;
            memcpy(dst + *len, buf, take);
            *len += take;
        }
    }
    out[on] = '\0';
    err[en] = '\0';
}

int baseline_run_args(const bench_server *s, const char *const *args, const char *row,
                      const char *what, int cpu, baseline *out)
{
    char exe[512];
    if (dh_find_exe("redis-benchmark", "DLOCK_REDIS_BENCHMARK", exe, sizeof exe) != 0) {
        fprintf(stderr, "dlock-bench: redis-benchmark not found (PATH or "
                        "$DLOCK_REDIS_BENCHMARK); install it: apt-get install redis-tools\n");
        return -1;
    }
    char port[16], db[16];
    snprintf(port, sizeof port, "%d", s->port);
    snprintf(db, sizeof db, "%d", s->db);
    const char *argv[BASELINE_MAX_ARGS + 16];
    int k = 0;
    argv[k++] = exe;
    argv[k++] = "-h";
    argv[k++] = s->host;
    argv[k++] = "-p";
    argv[k++] = port;
    if (s->user[0]) {
        argv[k++] = "--user";
        argv[k++] = s->user;
    }
    if (s->password[0]) {
        argv[k++] = "-a";
        argv[k++] = s->password;
    }
    if (s->db != 0) {
        argv[k++] = "--dbnum";
        argv[k++] = db;
    }
    if (s->tls_ca[0]) {
        argv[k++] = "--tls";
        argv[k++] = "--cacert";
        argv[k++] = s->tls_ca;
    }
    for (int i = 0; args[i] != NULL; i++) {
        if (i == BASELINE_MAX_ARGS) {
            fprintf(stderr, "dlock-bench: redis-benchmark: more than %d arguments\n",
                    BASELINE_MAX_ARGS);
            return -1;
        }
        argv[k++] = args[i];
    }
    argv[k] = NULL;

    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(pe, O_CLOEXEC) != 0) {
        close(po[0]);
        close(po[1]);
        return -1;
    }
    /* Same process group as us: a ^C stops it too, and we report the interruption. */
    pid_t pid = place_spawn(argv, cpu, po[1], pe[1], false);
    close(po[1]);
    close(pe[1]);
    char text[8192], err[2048];
    if (pid > 0)
        drain(po[0], text, sizeof text, pe[0], err, sizeof err);
    close(po[0]);
    close(pe[0]);
    if (pid < 0)
        return -1;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    /* It exits 1 on an error reply (a -NOSCRIPT, say), after printing it. */
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || parse_row(text, row, out) != 0) {
        fprintf(stderr, "dlock-bench: redis-benchmark %s failed (status %d):\n%s%s\n", what, status,
                text, err);
        return -1;
    }
    return 0;
}

int baseline_run(const bench_server *s, int clients, long requests, int cpu, baseline *out)
{
    char n[32], c[16];
    snprintf(n, sizeof n, "%ld", requests);
    snprintf(c, sizeof c, "%d", clients);
    char what[32];
    snprintf(what, sizeof what, "-t set -c %d", clients);
    const char *const args[] = {"-t", "set", "-n", n, "-c", c, "--csv", NULL};
    return baseline_run_args(s, args, "SET", what, cpu, out);
}
