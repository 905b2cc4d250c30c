/*
 * sale.c: a flash sale by buyers that are processes of another language (W5's PHP sale,
 * W5's peers): started, released together, and heard from.
 *
 * The processes are started pinned where the bench's own client threads run. Each
 * connects, warms up, adds the number of buyers it runs to the sale's "ready" counter
 * on node 1 and blocks in BLPOP on its "go" list; once the counter shows every buyer,
 * the bench pushes one element per process, which starts them all at once, and takes
 * the servers' command counts around the sale. At the end each process prints one line
 * per buyer on stdout:
 *   bought N last_sale_ns T retries R max_wait_ns W
 * with T the CLOCK_MONOTONIC time of the buyer's last purchase (php's hrtime, Python's
 * time.monotonic_ns and node's process.hrtime read the clock now_ns reads).
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SALE_READY_MS 30000 /* for every buyer to connect and warm up */
#define SALE_MS       60000 /* for the sale itself; the processes are killed after */
#define SALE_OUT      16384 /* what one process may print: a line per buyer */
#define SALE_ARGS     16    /* a process's arguments, its number included */

typedef struct sale_proc {
    pid_t pid;
    int out; /* read end of its stdout */
    int status;
    bool reaped;
} sale_proc;

/* Wait until the "ready" counter reaches n, failing early when a process has already
 * exited (its interpreter or client library missing, a connection refused). */
static int wait_ready(redisContext *admin, const char *k_ready, sale_proc *p, int nproc, long n,
                      char *why, size_t whylen)
{
    int64_t deadline = now_ns() + (int64_t)SALE_READY_MS * 1000000;
    while (now_ns() < deadline) {
        redisReply *r = server_cmd(admin, "GET %s", k_ready);
        if (r == NULL) {
            snprintf(why, whylen, "GET of the ready counter failed");
            return -1;
        }
        long ready = r->type == REDIS_REPLY_STRING ? strtol(r->str, NULL, 10) : 0;
        freeReplyObject(r);
        if (ready >= n)
            return 0;
        for (int i = 0; i < nproc; i++) {
            if (!p[i].reaped && dh_exited(p[i].pid, &p[i].status)) {
                p[i].reaped = true;
                char st[48];
                describe_status(p[i].status, st, sizeof st);
                snprintf(why, whylen, "process %d exited before the start (%s)", i, st);
                return -1;
            }
        }
        dh_sleep_ms(2);
    }
    snprintf(why, whylen, "the buyers were not ready within %d ms", SALE_READY_MS);
    return -1;
}

/* Push one element per process on the "go" list: out->t0_ns is taken right before. */
static int go(redisContext *admin, const char *k_go, int nproc, sale_result *out)
{
    const char **argv = calloc((size_t)nproc + 2, sizeof *argv);
    if (argv == NULL)
        return -1;
    argv[0] = "RPUSH";
    argv[1] = k_go;
    for (int i = 0; i < nproc; i++)
        argv[2 + i] = "1";
    out->t0_ns = now_ns();
    redisReply *r = redisCommandArgv(admin, nproc + 2, argv, NULL);
    int rc = r != NULL && r->type == REDIS_REPLY_INTEGER ? 0 : -1;
    freeReplyObject(r);
    free(argv);
    return rc;
}

/* Add the lines of one process's output to out. 0, or -1 with why. */
static int add_lines(int i, const char *text, sale_result *out, char *why, size_t whylen)
{
    int lines = 0;
    for (const char *line = text; *line != '\0';) {
        long nb, nr;
        long long last, maxw;
        if (sscanf(line, "bought %ld last_sale_ns %lld retries %ld max_wait_ns %lld", &nb, &last,
                   &nr, &maxw) != 4) {
            snprintf(why, whylen, "process %d: output '%.*s'", i, (int)strcspn(line, "\n"), line);
            return -1;
        }
        out->bought += nb;
        out->served += nb > 0;
        out->retries += nr;
        if (nb > 0 && last > out->last_sale_ns)
            out->last_sale_ns = last;
        if (maxw > out->max_wait_ns)
            out->max_wait_ns = maxw;
        /* A sale before the start signal would mean the clocks differ, and the
         * sellout time would be nonsense. */
        if (nb > 0 && last < out->t0_ns) {
            snprintf(why, whylen, "process %d: a sale before the start (clocks differ)", i);
            return -1;
        }
        lines++;
        line += strcspn(line, "\n");
        line += *line == '\n';
    }
    if (lines == 0) {
        snprintf(why, whylen, "process %d printed nothing", i);
        return -1;
    }
    return 0;
}

int sale_run(bench_ctx *ctx, const char *label, const char *const *argv, int nproc, bool numbered,
             long nbuyers, redisContext *admin, const char *k_ready, const char *k_go,
             sale_result *out, char *why, size_t whylen)
{
    memset(out, 0, sizeof *out);
    out->cmds = -1;
    /* Each process's arguments: argv, then its number when numbered. place_spawn is
     * done with them when it returns (the child has its own copy), so one array serves
     * every process. */
    const char *args[SALE_ARGS + 1];
    char number[16];
    int nargs = 0;
    while (argv[nargs] != NULL && nargs < SALE_ARGS - 1) {
        args[nargs] = argv[nargs];
        nargs++;
    }
    args[nargs] = numbered ? number : NULL;
    args[nargs + 1] = NULL;
    sale_proc *p = bench_calloc(ctx, label, (size_t)nproc, sizeof *p);
    char *text = malloc(SALE_OUT);
    if (p == NULL || text == NULL) {
        free(p);
        free(text);
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    int started = 0;
    for (; started < nproc; started++) {
        int fd[2];
        if (pipe2(fd, O_CLOEXEC) != 0) {
            snprintf(why, whylen, "pipe: %s", strerror(errno));
            break;
        }
        snprintf(number, sizeof number, "%d", started);
        /* Their errors go to our stderr as they come. */
        p[started].pid = place_spawn(args, ctx->place->client_cpu, fd[1], STDERR_FILENO, false);
        close(fd[1]);
        p[started].out = fd[0];
        if (p[started].pid < 0) {
            close(fd[0]);
            snprintf(why, whylen, "cannot start %s", args[0]);
            break;
        }
    }
    stats_conns sc = {0};
    bool bad = started < nproc;
    if (!bad && wait_ready(admin, k_ready, p, nproc, nbuyers, why, whylen) != 0)
        bad = true;
    /* The server's command counts over the sale: what a unit costs it. */
    out->have_stats =
        !bad && stats_open(ctx->servers, 1, &sc) == 0 && stats_take(&sc, &out->before) == 0;
    if (!bad && go(admin, k_go, nproc, out) != 0) {
        snprintf(why, whylen, "RPUSH of the start signal failed");
        bad = true;
    }
    /* Every process is waited for (or killed) whatever happened, so none outlives the
     * sale. */
    int64_t deadline_ms = dh_now_ms() + SALE_MS;
    for (int i = 0; i < started; i++) {
        if (!p[i].reaped) {
            int64_t left = deadline_ms - dh_now_ms();
            if (!dh_reap(p[i].pid, bad || left < 0 ? 0 : left, &p[i].status) && !bad) {
                snprintf(why, whylen, "process %d still running after %d ms: killed", i, SALE_MS);
                bad = true;
            }
            p[i].reaped = true;
        }
        read_all(p[i].out, text, SALE_OUT);
        close(p[i].out);
        if (bad)
            continue;
        if (p[i].status != 0) {
            char st[48];
            describe_status(p[i].status, st, sizeof st);
            snprintf(why, whylen, "process %d: %s, output '%.*s'", i, st, (int)strcspn(text, "\n"),
                     text);
            bad = true;
            continue;
        }
        if (add_lines(i, text, out, why, whylen) != 0)
            bad = true;
    }
    out->have_stats = out->have_stats && stats_take(&sc, &out->after) == 0;
    if (out->have_stats)
        out->cmds = stats_commands(&sc, &out->before, &out->after);
    stats_close(&sc);
    free(text);
    free(p);
    return bad ? -1 : 0;
}
