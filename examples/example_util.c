/*
 * example_util.c: the examples' plumbing (example_util.h): numbers and the first server
 * from the command line, the log of records, the worker processes, percentiles.
 */
#define _POSIX_C_SOURCE 200809L

#include "example_util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

bool ex_parse_num(const char *s, long long min, long long max, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

/* The number in p[0..n) (not NUL-terminated) in [min, max] into *out. */
static bool parse_part(const char *p, size_t n, long long min, long long max, long long *out)
{
    char num[16];
    if (n >= sizeof num)
        return false;
    memcpy(num, p, n);
    num[n] = '\0';
    return ex_parse_num(num, min, max, out);
}

bool ex_first_server(const char *prog, const char *servers, char *host, size_t host_len, int *port,
                     int *db)
{
    size_t len = strcspn(servers, ",");
    if (strncmp(servers, "redis://", 8) != 0 || memchr(servers, '@', len) != NULL) {
        fprintf(stderr,
                "%s: the first server must be redis://host[:port][/db] "
                "(no credentials, no unix socket) in this example\n",
                prog);
        return false;
    }
    const char *p = servers + 8, *end = servers + len;
    const char *h = p, *h_end;
    if (*p == '[') {
        h = p + 1;
        h_end = memchr(h, ']', (size_t)(end - h));
        if (h_end == NULL)
            return false;
        p = h_end + 1;
    } else {
        h_end = p;
        while (h_end < end && *h_end != ':' && *h_end != '/')
            h_end++;
        p = h_end;
    }
    size_t hlen = (size_t)(h_end - h);
    if (hlen == 0 || hlen >= host_len)
        return false;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port = 6379;
    *db = 0;
    long long v;
    if (p < end && *p == ':') {
        size_t n = strcspn(p + 1, "/,");
        if (n == 0 || !parse_part(p + 1, n, 1, 65535, &v))
            return false;
        *port = (int)v;
        p += 1 + n;
    }
    if (p < end && *p == '/' && p + 1 < end) {
        if (!parse_part(p + 1, (size_t)(end - p - 1), 0, 1 << 20, &v))
            return false;
        *db = (int)v;
    }
    return true;
}

int ex_log_open(const char *prog, const char *path)
{
    int fd;
    if (path != NULL) {
        fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    } else {
        char tmp[256];
        snprintf(tmp, sizeof tmp, "/tmp/%s.XXXXXX", prog);
        fd = mkstemp(tmp);
        if (fd >= 0) {
            unlink(tmp);
            if (fcntl(fd, F_SETFL, O_APPEND) != 0) {
                int e = errno;
                close(fd);
                errno = e;
                fd = -1;
            }
        }
    }
    if (fd < 0)
        fprintf(stderr, "%s: log: %s\n", prog, strerror(errno));
    return fd;
}

void *ex_log_read(const char *prog, int fd, size_t rec_size, size_t *n)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size % (off_t)rec_size != 0) {
        fprintf(stderr, "%s: the log is damaged\n", prog);
        return NULL;
    }
    *n = (size_t)st.st_size / rec_size;
    void *recs = malloc(*n ? *n * rec_size : 1);
    if (recs == NULL) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return NULL;
    }
    if (pread(fd, recs, *n * rec_size, 0) != (ssize_t)(*n * rec_size)) {
        fprintf(stderr, "%s: reading the log: %s\n", prog, strerror(errno));
        free(recs);
        return NULL;
    }
    return recs;
}

int ex_fork_workers(const char *prog, int n, int (*work)(int i, void *arg), void *arg, int *failed)
{
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    if (pids == NULL) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return -1;
    }
    fflush(NULL);
    /* The signals are blocked and taken by sigwaitinfo(), so no handler is needed; each
     * worker restores the caller's mask right after fork(). They stay blocked in the
     * caller afterwards. */
    sigset_t sigs, old_mask;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGCHLD);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigprocmask(SIG_BLOCK, &sigs, &old_mask);
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        if (pids[i] < 0) {
            fprintf(stderr, "%s: fork: %s\n", prog, strerror(errno));
            free(pids);
            return -1;
        }
        if (pids[i] == 0) {
            sigprocmask(SIG_SETMASK, &old_mask, NULL);
            _exit(work(i, arg));
        }
    }
    int running = n, stop_sig = 0;
    *failed = 0;
    while (running > 0) {
        int sig = sigwaitinfo(&sigs, NULL);
        if (sig == SIGINT || sig == SIGTERM) {
            stop_sig = sig;
            for (int i = 0; i < n; i++)
                if (pids[i] > 0)
                    kill(pids[i], SIGTERM);
            continue;
        }
        /* SIGCHLD (several exits may make one signal) or EINTR: reap what has ended. */
        pid_t pid;
        int st;
        while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
            for (int i = 0; i < n; i++) {
                if (pids[i] != pid)
                    continue;
                pids[i] = 0;
                running--;
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                    (*failed)++;
            }
        }
    }
    free(pids);
    return stop_sig;
}

int64_t ex_percentile(const int64_t *v, size_t n, int q)
{
    if (n == 0)
        return 0;
    size_t rank = (n * (size_t)q + 99) / 100;
    return v[rank > 0 ? rank - 1 : 0];
}
