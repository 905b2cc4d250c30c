/*
 * stock_sale.c: sell a stock through leased reservations (dlock_stock_*), where a buyer
 * that crashes holding units cannot take them out of the sale.
 *
 *   dlock-stock-sale [-s URLS] [-i SKU] [-b BUYERS] [-w WAIT_MS] [-q]
 *   dlock-stock-sale [-s URLS] [-i SKU] -H UNITS [-L LEASE_MS]
 *
 * The stock of SKU lives on the first server of URLS; set it first (dlock stock set SKU
 * N). The sale: BUYERS processes, each with its own client made after fork(), reserve
 * one unit (waiting up to WAIT_MS for units to be freed), then commit it, until no unit
 * is left unsold. Each commit appends the reservation id to a log opened with O_APPEND
 * (one write of a fixed-size record, so appends never interleave); once every buyer has
 * exited, the parent reads the log back and checks: no unit sold twice, the units
 * committed are the units the server counts as newly sold, the server's sold equals its
 * stock and nothing is left reserved or available. It prints one line
 * "RESULT key=value ..." for scripts (tools/demo.sh reads it).
 *
 * -H UNITS: a buyer that reserves UNITS units for LEASE_MS, prints "HELD ID UNITS",
 * and then waits forever without committing: kill it (SIGKILL) to see its units come
 * back when the lease runs out, and be sold to others.
 *
 * Exit status: 0 every check passed, 1 a check failed or a call failed, 2 usage.
 */
#define _POSIX_C_SOURCE 200809L

#include <dlock.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "example_util.h" /* the plumbing: options, the log */

#define BUYERS_MAX 256

/* One committed reservation in the log: its id and a newline (33 bytes). */
struct record {
    char id[DLOCK_TOKEN_LEN];
    char nl;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void usage(FILE *f)
{
    fputs("usage: dlock-stock-sale [-s URLS] [-i SKU] [-b BUYERS] [-w WAIT_MS] [-q]\n"
          "       dlock-stock-sale [-s URLS] [-i SKU] -H UNITS [-L LEASE_MS]\n"
          "  -s URLS      servers (default $DLOCK_SERVERS, else redis://127.0.0.1:6379);\n"
          "               the stock lives on the first one\n"
          "  -i SKU       the SKU (default sku-1); set its stock first: dlock stock set\n"
          "  -b BUYERS    buyer processes (default 8)\n"
          "  -w WAIT_MS   how long one reserve waits for units (default 10000)\n"
          "  -H UNITS     reserve UNITS, print \"HELD ID UNITS\", and wait to be killed\n"
          "  -L LEASE_MS  the reservations' lease (default 30000)\n"
          "  -q           print only the RESULT line\n",
          f);
}

static dlock_client *connect_or_die(const char *servers)
{
    dlock_client *c = NULL;
    int rc = dlock_client_new(servers, NULL, &c);
    if (rc != DLOCK_OK) {
        fprintf(stderr, "dlock-stock-sale: %s: %s\n", dlock_strerror(rc), dlock_errmsg());
        exit(1);
    }
    return c;
}

/* -H: reserve and hold until killed. */
static int hold(const char *servers, const char *sku, long long units, long long lease_ms)
{
    dlock_client *c = connect_or_die(servers);
    dlock_reserve_opts o = {0};
    o.lease_ms = lease_ms;
    char id[DLOCK_TOKEN_LEN + 1];
    int rc = dlock_stock_reserve(c, sku, units, &o, id);
    if (rc != DLOCK_OK) {
        fprintf(stderr, "dlock-stock-sale: reserve: %s: %s\n", dlock_strerror(rc), dlock_errmsg());
        return 1;
    }
    printf("HELD %s %lld\n", id, units);
    fflush(stdout);
    for (;;)
        pause(); /* a buyer that never pays: only a kill ends it */
}

/* One buyer process: reserve one unit, commit it, log it, until none is left unsold. */
static int buyer(const char *servers, const char *sku, long long wait_ms, int log_fd)
{
    dlock_client *c = connect_or_die(servers);
    dlock_reserve_opts o = {0};
    o.lease_ms = 10000;
    o.wait_ms = wait_ms;
    int status = 0;
    for (;;) {
        char id[DLOCK_TOKEN_LEN + 1];
        int rc = dlock_stock_reserve(c, sku, 1, &o, id);
        if (rc == DLOCK_ERR_BUSY && strstr(dlock_errmsg(), "unsold") != NULL)
            break; /* sold out: no cancel or expiry can free a unit */
        if (rc == DLOCK_OK)
            rc = dlock_stock_commit(c, sku, id);
        if (rc != DLOCK_OK) {
            fprintf(stderr, "dlock-stock-sale: buyer %d: %s: %s\n", (int)getpid(),
                    dlock_strerror(rc), dlock_errmsg());
            status = 1;
            break;
        }
        struct record r;
        memcpy(r.id, id, DLOCK_TOKEN_LEN);
        r.nl = '\n';
        if (write(log_fd, &r, sizeof r) != (ssize_t)sizeof r) {
            status = 1;
            break;
        }
    }
    dlock_client_free(c);
    return status;
}

static int cmp_records(const void *a, const void *b)
{
    return memcmp(a, b, DLOCK_TOKEN_LEN);
}

int main(int argc, char **argv)
{
    const char *servers = getenv("DLOCK_SERVERS");
    if (servers == NULL || servers[0] == '\0')
        servers = "redis://127.0.0.1:6379";
    const char *sku = "sku-1";
    long long buyers = 8, wait_ms = 10000, held = 0, lease_ms = 30000;
    bool quiet = false;
    int opt;
    while ((opt = getopt(argc, argv, "s:i:b:w:H:L:qh")) != -1) {
        bool ok = true;
        switch (opt) {
        case 's':
            servers = optarg;
            break;
        case 'i':
            sku = optarg;
            break;
        case 'b':
            ok = ex_parse_num(optarg, 1, BUYERS_MAX, &buyers);
            break;
        case 'w':
            ok = ex_parse_num(optarg, -1, INT32_MAX, &wait_ms);
            break;
        case 'H':
            ok = ex_parse_num(optarg, 1, DLOCK_STOCK_QTY_MAX, &held);
            break;
        case 'L':
            ok = ex_parse_num(optarg, DLOCK_TTL_MIN_MS, DLOCK_TTL_MAX_MS, &lease_ms);
            break;
        case 'q':
            quiet = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            ok = false;
        }
        if (!ok) {
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    if (held > 0)
        return hold(servers, sku, held, lease_ms);

    /* The state before the sale, from a client the children never use. */
    dlock_client *c = connect_or_die(servers);
    dlock_stock_info before, after;
    int rc = dlock_stock_status(c, sku, &before);
    if (rc != DLOCK_OK) {
        fprintf(stderr, "dlock-stock-sale: status: %s: %s\n", dlock_strerror(rc), dlock_errmsg());
        return 1;
    }
    int log_fd = ex_log_open("dlock-stock-sale", NULL); /* a temporary file, unlinked */
    if (log_fd < 0)
        return 1;
    if (!quiet)
        printf("selling %lld units of %s (%lld reserved by others) to %lld buyers\n",
               (long long)before.available, sku, (long long)before.reserved, buyers);
    fflush(stdout);
    int64_t t0 = now_ms();
    pid_t pids[BUYERS_MAX];
    for (int i = 0; i < buyers; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            _exit(buyer(servers, sku, wait_ms, log_fd));
        if (pids[i] < 0) {
            perror("dlock-stock-sale: fork");
            return 1;
        }
    }
    int failed = 0;
    for (int i = 0; i < buyers; i++) {
        int st;
        if (waitpid(pids[i], &st, 0) != pids[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed++;
    }
    int64_t elapsed = now_ms() - t0;

    /* Read the log back: every committed id, sorted, to find any sold twice. */
    size_t n;
    struct record *recs = ex_log_read("dlock-stock-sale", log_fd, sizeof *recs, &n);
    if (recs == NULL)
        return 1;
    qsort(recs, n, sizeof *recs, cmp_records);
    size_t twice = 0;
    for (size_t i = 1; i < n; i++)
        twice += memcmp(recs[i - 1].id, recs[i].id, DLOCK_TOKEN_LEN) == 0;
    free(recs);
    close(log_fd);
    rc = dlock_stock_status(c, sku, &after);
    dlock_client_free(c);
    if (rc != DLOCK_OK) {
        fprintf(stderr, "dlock-stock-sale: status: %s: %s\n", dlock_strerror(rc), dlock_errmsg());
        return 1;
    }
    long long oversold = after.sold > after.stock ? after.sold - after.stock : 0;
    bool ok = failed == 0 && twice == 0 && (long long)n == after.sold - before.sold &&
              after.sold == after.stock && after.reserved == 0 && after.available == 0;
    if (!quiet)
        printf("sold %lld of %lld in %lld ms; %zu commits logged, %zu sold twice\n",
               (long long)after.sold, (long long)after.stock, (long long)elapsed, n, twice);
    printf("RESULT sold=%lld stock=%lld commits=%zu sold_twice=%zu oversold=%lld reserved=%lld "
           "available=%lld elapsed_ms=%lld failed_buyers=%d ok=%s\n",
           (long long)after.sold, (long long)after.stock, n, twice, oversold,
           (long long)after.reserved, (long long)after.available, (long long)elapsed, failed,
           ok ? "yes" : "no");
    return ok ? 0 : 1;
}
