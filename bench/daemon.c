/*
 * daemon.c: dlockd, the lock service, as a process of the bench's own.
 *
 * The bench starts build/dlockd itself (the binary next to dlock-bench, or --dlockd
 * PATH), as a real process in front of the same redis-server that W1 uses, pinned as
 * the servers are, on a free 127.0.0.1 port. It is stopped with SIGTERM at the end of
 * the run, and dies with the bench if the bench is killed (PR_SET_PDEATHSIG, as every
 * child of the test-support library).
 */
#include "bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DLOCKD_WAIT_MS 10000 /* for dlockd to accept connections */

/* ---- the dlockd process ------------------------------------------------------- */

/* $DLOCKD (as CTest sets it for the service tests), else dlockd in the directory of
 * this executable: the build puts both in build/. */
static int find_dlockd(const char *given, char *out, size_t n)
{
    const char *env = getenv("DLOCKD");
    if (given == NULL && env != NULL && env[0] != '\0')
        given = env;
    if (given != NULL) {
        snprintf(out, n, "%s", given);
    } else {
        /* Our own path, its last component replaced. */
        if (n < 8)
            return -1;
        ssize_t len = readlink("/proc/self/exe", out, n - 8);
        if (len < 0)
            return -1;
        out[len] = '\0';
        char *slash = strrchr(out, '/');
        memcpy(slash != NULL ? slash + 1 : out, "dlockd", 7);
    }
    return access(out, X_OK) == 0 ? 0 : -1;
}

static bool accepts(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

int dlockd_start(bench_dlockd *d, const bench_servers *ss, int nodes, const char *path, int cpu,
                 int64_t timeout_ms, bool metrics)
{
    memset(d, 0, sizeof *d);
    if (find_dlockd(path, d->path, sizeof d->path) != 0) {
        fprintf(stderr,
                "dlock-bench: dlockd not found or not executable: %s (build it with make, or "
                "give --dlockd PATH)\n",
                d->path[0] ? d->path : "?");
        return -1;
    }
    char urls[BENCH_MAX_NODES * 620], timeout[24], portstr[16], mportstr[16];
    servers_urls(ss, 0, nodes, urls, sizeof urls);
    snprintf(timeout, sizeof timeout, "%lld", (long long)timeout_ms);
    for (int attempt = 0; attempt < 5; attempt++) {
        /* A port nobody listens on now; another process may take it before dlockd
         * binds it, and dlockd then exits and another is tried. */
        int port = dh_free_port("127.0.0.1");
        if (port <= 0)
            break;
        int mport = metrics ? dh_free_port("127.0.0.1") : 0;
        if (metrics && (mport <= 0 || mport == port))
            continue;
        snprintf(portstr, sizeof portstr, "%d", port);
        snprintf(mportstr, sizeof mportstr, "%d", mport);
        /* Its key prefix is the bench's, so that the clean-up after a -s run finds
         * W6's keys too. The URLs go on its command line as they went to
         * redis-benchmark's: these are the bench's own servers, or the user's -s. */
        const char *argv[] = {d->path,      "-s",        urls,    "-p", portstr, "--prefix",
                              BENCH_PREFIX, "--timeout", timeout, NULL, NULL,    NULL};
        if (metrics) {
            argv[9] = "--metrics-port";
            argv[10] = mportstr;
        }
        /* Its log (a line at start and stop, and errors) goes to our stderr. */
        pid_t pid = place_spawn(argv, cpu, -1, STDERR_FILENO, true);
        if (pid < 0)
            return -1;
        int64_t deadline = now_ns() + (int64_t)DLOCKD_WAIT_MS * 1000000;
        while (now_ns() < deadline) {
            int status;
            if (dh_exited(pid, &status))
                break; /* the port was taken meanwhile, or it could not start */
            if (accepts(port)) {
                d->pid = pid;
                d->port = port;
                d->metrics_port = mport;
                return 0;
            }
            dh_sleep_ms(5);
        }
        if (!dh_exited(pid, NULL)) {
            dh_reap(pid, 0, NULL);
            fprintf(stderr, "dlock-bench: dlockd did not accept connections within %d ms\n",
                    DLOCKD_WAIT_MS);
            return -1;
        }
    }
    fprintf(stderr, "dlock-bench: dlockd would not start (see its messages above)\n");
    return -1;
}

void dlockd_stop(bench_dlockd *d)
{
    if (d->pid <= 0)
        return;
    kill(d->pid, SIGTERM);
    int status = 0;
    if (!dh_reap(d->pid, 5000, &status))
        fprintf(stderr, "dlock-bench: dlockd did not stop within 5 s of SIGTERM: killed\n");
    d->pid = 0;
}

/* The kernel's own counts, as `ps` and `top` show them: what an operator would see. */
int dlockd_status(const bench_dlockd *d, long *rss_kb, long *threads)
{
    char path[64], line[256];
    *rss_kb = *threads = -1;
    if (d->pid <= 0)
        return -1;
    snprintf(path, sizeof path, "/proc/%d/status", (int)d->pid);
    FILE *fp = fopen(path, "r");
    if (fp == NULL)
        return -1;
    while (fgets(line, sizeof line, fp) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0)
            *rss_kb = strtol(line + 6, NULL, 10);
        else if (strncmp(line, "Threads:", 8) == 0)
            *threads = strtol(line + 8, NULL, 10);
    }
    fclose(fp);
    return *rss_kb >= 0 && *threads >= 0 ? 0 : -1;
}
