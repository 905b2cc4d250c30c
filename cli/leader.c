/*
 * leader.c: `dlock leader NAME [--json] [--watch]`, who leads a name (an election of
 * `dlock elect` or dlock_elect), once or as it changes.
 *
 * Once: one line (or one JSON object) and status 0, or status 73 when no one leads.
 * With --watch: the state when it starts, then one line per change, as the library's
 * observer hears it (without asking the servers while nothing changes), until SIGINT,
 * SIGTERM or SIGHUP ends it with status 0. Each line is flushed as it is written, for a
 * pipe's reader.
 */
#include "cli.h"
#include "duration.h"
#include "escape.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

/* One leader (or none) as a line of text or a JSON object. The value and holder are
 * others' text: escaped. */
static void print_leader(const char *name, const dlock_leader_info *info, bool json)
{
    if (json) {
        fputs("{\"value\":", stdout);
        if (info->term == 0) {
            fputs("null,\"holder\":null", stdout);
        } else {
            cli_write_json_string(stdout, info->value, strlen(info->value));
            fputs(",\"holder\":", stdout);
            cli_write_json_string(stdout, info->holder, strlen(info->holder));
        }
        printf(",\"term\":%" PRIu64 ",\"remaining_ms\":%" PRId64 "}\n", info->term,
               info->term == 0 ? 0 : info->remaining_ms);
        return;
    }
    cli_write_safe(stdout, name, strlen(name));
    if (info->term == 0) {
        fputs(": no leader\n", stdout);
        return;
    }
    char left[32];
    printf(": term %" PRIu64 ", led by ", info->term);
    cli_write_safe(stdout, info->holder, strlen(info->holder));
    printf(" (%s left)", cli_format_duration(info->remaining_ms, left, sizeof left));
    if (info->value[0] != '\0') {
        fputs(": ", stdout);
        cli_write_safe(stdout, info->value, strlen(info->value));
    }
    fputc('\n', stdout);
}

/* Print each change until a signal; 0, or the code of what failed. */
static int watch(struct cli *cli, const char *name, const char *what)
{
    /* The servers are asked once first, so that a watch that cannot start says so and
     * exits 69, as `dlock leader` does: the observer itself retries a read that fails
     * without end, keeping the last line printed true meanwhile. */
    dlock_leader_info now;
    int rc = dlock_leader(cli->client, name, &now);
    if (rc != DLOCK_OK)
        return cli_fail_call(what, rc);
    int cancel = cli_cancel_setup();
    dlock_observer *o;
    rc = dlock_observe(cli->client, name, NULL, NULL, &o);
    if (rc != DLOCK_OK)
        return cli_fail_call(what, rc);
    int code = 0;
    for (;;) {
        struct pollfd p[2] = {{.fd = dlock_observer_fd(o), .events = POLLIN},
                              {.fd = cancel > 0 ? cancel : -1, .events = POLLIN}};
        if (poll(p, 2, -1) < 0 && errno != EINTR) {
            cli_errline("%s: poll: %s", what, strerror(errno));
            code = CLI_EXIT_INTERNAL;
            break;
        }
        if (p[1].revents != 0)
            break; /* the user's end of the watch */
        dlock_leader_info info;
        while (dlock_observer_next(o, &info) == DLOCK_OK)
            print_leader(name, &info, cli->json);
        if (fflush(stdout) != 0) {
            /* A reader that left ends the watch as a signal would. */
            if (errno != EPIPE) {
                cli_errline("%s: cannot write the output: %s", what, strerror(errno));
                code = CLI_EXIT_INTERNAL;
            }
            break;
        }
    }
    dlock_observer_free(o);
    clearerr(stdout);
    return code;
}

int cli_cmd_leader(struct cli *cli, char **args, const struct cmd_opts *o)
{
    const char *name = args[0];
    char what[CLI_WHAT_LEN];
    int code = cli_begin(cli, name, what);
    if (code != 0)
        return code;
    if (o->watch)
        return watch(cli, name, what);
    dlock_leader_info info;
    int rc = dlock_leader(cli->client, name, &info);
    if (rc != DLOCK_OK)
        return cli_fail_call(what, rc);
    if (info.term == 0) {
        if (!cli->quiet)
            cli_errline("%s: no one leads", what);
        return CLI_EXIT_LOST;
    }
    print_leader(name, &info, cli->json);
    return 0;
}

int cli_cmd_elect(struct cli *cli, char **args, const struct cmd_opts *o)
{
    if (o->min_hold_ms != 0 || o->once_per_ms != 0)
        return cli_usage_error(cli->cmd, "%s is for dlock run, not for a leader",
                               o->min_hold_ms != 0 ? "--min-hold" : "--once-per");
    return cli_cmd_run(cli, args, o);
}
