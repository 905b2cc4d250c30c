/*
 * doctor.c: `dlock doctor`, what in the servers' setup can break a lock, and the fix:
 * it asks every server for its facts (dlock_probe), has doctor_judge.c judge them, and
 * prints one line per finding, or one JSON object.
 */
#include "doctor.h"
#include "cli.h"
#include "escape.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char cli_doctor_help[] =
    "Usage: dlock [OPTIONS] doctor [-t TTL] [--json]\n"
    "\n"
    "Check each server for what can break a lock, one line per finding, each with what\n"
    "it risks and the fix:\n"
    "  - a maxmemory-policy that can evict lock keys (every policy but noeviction);\n"
    "  - persistence off, or appendfsync not always (a restart forgets held locks);\n"
    "  - a replica, or a Redis Cluster node, named as a lock server;\n"
    "  - a dlockd named as a lock server (it is a client of lock servers: give dlock\n"
    "    the Redis servers it uses);\n"
    "  - clocks of the servers apart by more than a tenth of TTL;\n"
    "  - a Redis older than 7.0 (slower acquires), or too old to run the scripts;\n"
    "  - TLS with verification off (insecure=1);\n"
    "  - for a master behind Sentinels (redis-sentinel://): what a failover can lose,\n"
    "    Sentinels that do not answer or cannot authorize a failover, no replica;\n"
    "  - a server that cannot be asked, with the fix for why: a refused password (set\n"
    "    it in the URL or DLOCK_PASSWORD), a certificate that cannot be verified\n"
    "    (cacert=FILE in the URL), a server that cannot be reached.\n"
    "A fact a server would not give (INFO or CONFIG refused, a field missing) is a note\n"
    "that says \"unknown\", never passed as fine; the last line counts them.\n"
    "\n"
    "  -t, --ttl TTL   the shortest lease you use (default 30s): the clock check's scale\n"
    "      --json      one JSON object: the servers' facts and the findings\n"
    "\n"
    "Exit status: 0 when no risk was found (notes only, unknown facts among them), 1\n"
    "when a risk was found (a server that cannot be asked, or a dlockd, is one), 64\n"
    "usage error.\n";

/* s, or "unknown" for a fact the server did not give. */
static const char *known(const char *s)
{
    return s[0] != '\0' ? s : "unknown";
}

static void print_text(const cli_findings *fs, const dlock_server_facts *f, int n)
{
    for (int i = 0; i < n; i++) {
        bool any = false;
        for (int k = 0; k < fs->n; k++) {
            if (fs->f[k].server != i)
                continue;
            any = true;
            cli_write_safe(stdout, f[i].server, strlen(f[i].server));
            printf(": %s: ", fs->f[k].risk ? "risk" : "note");
            cli_write_safe(stdout, fs->f[k].text, strlen(fs->f[k].text));
            putchar('\n');
        }
        if (any)
            continue;
        /* The judge notes every fact it could not read, so a server without findings
         * has them all; "unknown" still stands in for an empty one (the clock of a
         * server alone, which nothing is compared with), rather than a blank. */
        cli_write_safe(stdout, f[i].server, strlen(f[i].server));
        printf(": ok: Redis ");
        const char *v = known(f[i].version);
        cli_write_safe(stdout, v, strlen(v));
        printf(", %s, %s, AOF %s, ", known(f[i].role), known(f[i].maxmemory_policy),
               f[i].aof == 0  ? "off"
               : f[i].aof < 0 ? "unknown"
                              : (f[i].appendfsync[0] ? f[i].appendfsync : "on"));
        if (f[i].clock_error_us < 0)
            printf("clock unknown\n");
        else
            printf("clock %+.1f ms from this host's\n", (double)f[i].clock_offset_us / 1000.0);
    }
    for (int k = 0; k < fs->n; k++) {
        if (fs->f[k].server >= 0)
            continue;
        printf("servers: %s: ", fs->f[k].risk ? "risk" : "note");
        cli_write_safe(stdout, fs->f[k].text, strlen(fs->f[k].text));
        putchar('\n');
    }
    if (fs->risks == 0)
        printf("no risk found (%d server%s)", n, n == 1 ? "" : "s");
    else
        printf("%d risk%s found", fs->risks, fs->risks == 1 ? "" : "s");
    /* A clean bill is never given over facts that could not be read. */
    if (fs->unknowns > 0)
        printf(", %d check%s not made: facts unknown (see the notes)", fs->unknowns,
               fs->unknowns == 1 ? "" : "s");
    putchar('\n');
}

static void json_str(const char *s)
{
    cli_write_json_string(stdout, s, strlen(s));
}

static void print_json(const cli_findings *fs, const dlock_server_facts *f, int n)
{
    fputs("{\"servers\":[", stdout);
    for (int i = 0; i < n; i++) {
        fputs(i ? ",{\"server\":" : "{\"server\":", stdout);
        json_str(f[i].server);
        printf(",\"error\":");
        if (f[i].error == DLOCK_OK)
            fputs("null", stdout);
        else
            json_str(f[i].detail);
        fputs(",\"version\":", stdout);
        json_str(f[i].version);
        fputs(",\"role\":", stdout);
        json_str(f[i].role);
        fputs(",\"maxmemory_policy\":", stdout);
        json_str(f[i].maxmemory_policy);
        fputs(",\"appendfsync\":", stdout);
        json_str(f[i].appendfsync);
        printf(",\"maxmemory\":%" PRId64 ",\"aof\":%d,\"cluster\":%d,\"clock_offset_us\":%" PRId64
               ",\"clock_error_us\":%" PRId64 ",\"tls\":%s,\"tls_verified\":%s",
               f[i].maxmemory, f[i].aof, f[i].cluster, f[i].clock_offset_us, f[i].clock_error_us,
               f[i].tls ? "true" : "false", f[i].tls_verified ? "true" : "false");
        printf(",\"replicas\":%" PRId64, f[i].replicas);
        if (f[i].cluster_masters > 0) {
            printf(",\"cluster_masters\":%d,\"cluster_masters_up\":%d,\"cluster_ok\":%d,"
                   "\"cluster_state\":",
                   f[i].cluster_masters, f[i].cluster_masters_up, f[i].cluster_ok);
            json_str(f[i].cluster_state);
        }
        if (f[i].sentinels > 0) {
            printf(",\"sentinels\":%d,\"sentinels_up\":%d,\"sentinel_quorum\":%d,"
                   "\"sentinel_detail\":",
                   f[i].sentinels, f[i].sentinels_up, f[i].sentinel_quorum);
            json_str(f[i].sentinel_detail);
        }
        putchar('}');
    }
    fputs("],\"findings\":[", stdout);
    for (int k = 0; k < fs->n; k++) {
        const cli_finding *x = &fs->f[k];
        fputs(k ? ",{\"server\":" : "{\"server\":", stdout);
        if (x->server >= 0)
            json_str(f[x->server].server);
        else
            fputs("null", stdout);
        printf(",\"level\":\"%s\",\"kind\":\"%s\",\"unknown\":%s,\"text\":",
               x->risk ? "risk" : "note", x->kind, x->unknown ? "true" : "false");
        json_str(x->text);
        putchar('}');
    }
    printf("],\"risks\":%d,\"unknown\":%d}\n", fs->risks, fs->unknowns);
}

int cli_cmd_doctor(struct cli *cli, char **args, const struct cmd_opts *o)
{
    (void)args;
    int code = cli_client_open(cli);
    if (code != 0)
        return code;
    int n = dlock_client_nservers(cli->client);
    dlock_server_facts *f = calloc((size_t)n, sizeof *f);
    cli_findings *fs = calloc(1, sizeof *fs);
    if (f == NULL || fs == NULL) {
        free(f);
        free(fs);
        return cli_fail_call("doctor", DLOCK_ERR_NOMEM);
    }
    int rc = dlock_probe(cli->client, f, n);
    if (rc != DLOCK_OK) {
        free(f);
        free(fs);
        return cli_fail_call("doctor", rc);
    }
    cli_doctor_judge(f, n, o->ttl_ms, fs);
    if (cli->json)
        print_json(fs, f, n);
    else
        print_text(fs, f, n);
    code = fs->risks > 0 ? 1 : 0;
    free(f);
    free(fs);
    if (fflush(stdout) != 0)
        return CLI_EXIT_INTERNAL;
    return code;
}
