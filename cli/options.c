/*
 * options.c: the options of the dlock command line, global and per command, and the
 * one-line usage errors.
 *
 * Options are parsed twice with getopt_long: once for the global options before the
 * command name, once for the command's own, which may stand anywhere among its
 * operands. The global options are accepted in both places.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* getopt_long */
#endif

#include "cli.h"
#include "duration.h"
#include "escape.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    OPT_PREFIX = 256,
    OPT_JSON,
    OPT_SHARED,
    /* TLS for rediss:// servers, named as redis-cli names them */
    OPT_CACERT,
    OPT_CACERTDIR,
    OPT_CERT,
    OPT_KEY,
    OPT_SNI,
    OPT_INSECURE,
    /* run's schedule */
    OPT_MIN_HOLD,
    OPT_ONCE_PER,
    /* elect's and leader's */
    OPT_VALUE,
    OPT_WATCH
};

/* Every long option; each parse refuses those its context does not allow. */
static const struct option long_options[] = {
    {"servers", required_argument, NULL, 's'},
    {"prefix", required_argument, NULL, OPT_PREFIX},
    {"quiet", no_argument, NULL, 'q'},
    {"json", no_argument, NULL, OPT_JSON},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {"ttl", required_argument, NULL, 't'},
    {"wait", required_argument, NULL, 'w'},
    {"label", required_argument, NULL, 'l'},
    {"signal", required_argument, NULL, 'k'},
    {"grace", required_argument, NULL, 'g'},
    {"shared", no_argument, NULL, OPT_SHARED},
    {"permits", required_argument, NULL, 'n'},
    {"reason", required_argument, NULL, 'r'},
    {"fence-key", required_argument, NULL, 'F'},
    {"conflict-exit-code", required_argument, NULL, 'E'},
    {"verbose", no_argument, NULL, 'v'},
    {"min-hold", required_argument, NULL, OPT_MIN_HOLD},
    {"once-per", required_argument, NULL, OPT_ONCE_PER},
    {"value", required_argument, NULL, OPT_VALUE},
    {"watch", no_argument, NULL, OPT_WATCH},
    {"cacert", required_argument, NULL, OPT_CACERT},
    {"cacertdir", required_argument, NULL, OPT_CACERTDIR},
    {"cert", required_argument, NULL, OPT_CERT},
    {"key", required_argument, NULL, OPT_KEY},
    {"sni", required_argument, NULL, OPT_SNI},
    {"insecure", no_argument, NULL, OPT_INSECURE},
    {NULL, 0, NULL, 0},
};

int cli_usage_error(const struct command *cmd, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (cmd != NULL)
        cli_errline("%s: %s (see dlock %s --help)", cmd->name, msg, cmd->name);
    else
        cli_errline("%s (see dlock --help)", msg);
    return CLI_EXIT_USAGE;
}

/* The option getopt_long just complained about, as the user wrote it. */
static const char *bad_option(char **argv, char *buf, size_t buflen)
{
    const char *arg = argv[optind - 1];
    if (optopt == 0 || strncmp(arg, "--", 2) == 0) {
        size_t n = strcspn(arg, "=");
        snprintf(buf, buflen, "%.*s", (int)(n < 64 ? n : 64), arg);
    } else {
        snprintf(buf, buflen, "-%c", optopt);
    }
    return buf;
}

/* Where an option that keeps its value as given keeps it; NULL for the options that
 * check or convert theirs. */
static const char **kept_value(struct cli *cli, struct cmd_opts *o, int c)
{
    const struct {
        int c;
        const char **at;
    } kept[] = {
        {'s', &cli->servers},
        {OPT_PREFIX, &cli->prefix},
        {OPT_CACERT, &cli->tls.cacert},
        {OPT_CACERTDIR, &cli->tls.cacertdir},
        {OPT_CERT, &cli->tls.cert},
        {OPT_KEY, &cli->tls.key},
        {OPT_SNI, &cli->tls.sni},
        {'l', &o->label},
        {'k', &o->signal},
        {'g', &o->grace},
        {'r', &o->reason},
        {'F', &o->fence_key},
        {OPT_VALUE, &o->value},
    };
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        if (kept[i].c == c)
            return kept[i].at;
    return NULL;
}

/* Print a help or version text. A failed write is an error: a script that reads the
 * text must not get half of it with status 0. */
static int text_written(void)
{
    return fflush(stdout) == 0 ? 0 : CLI_EXIT_INTERNAL;
}

int cli_parse_options(struct cli *cli, const struct command *cmd, int argc, char **argv,
                      struct cmd_opts *o)
{
    char shortopts[32];
    /* '+': stop at the command name, whose options are its own. ':': report a
     * missing value as ':' so that we print the message (opterr = 0). */
    snprintf(shortopts, sizeof shortopts, "%s:s:qh%s", cmd ? "" : "+", cmd ? cmd->shortopts : "V");
    opterr = 0;
    optind = 0; /* glibc: a full reset, needed to parse a second argv */
    int c, index = -1;
    while ((c = getopt_long(argc, argv, shortopts, long_options, &index)) != -1) {
        char optbuf[80];
        /* Long options outside this context are as unknown as short ones. getopt_long
         * accepted them, so name them from the table, not from argv (whose last word
         * may be the option's value). */
        bool allowed =
            c == 's' || c == 'q' || c == 'h' || c == OPT_PREFIX || c == OPT_JSON ||
            (c >= OPT_CACERT && c <= OPT_INSECURE) || c == '?' || c == ':' ||
            (cmd == NULL && c == 'V') || (cmd != NULL && c == OPT_SHARED && cmd->takes_shared) ||
            (cmd != NULL && (c == OPT_MIN_HOLD || c == OPT_ONCE_PER) && cmd->takes_cmd) ||
            (cmd != NULL && c == OPT_VALUE && cmd->takes_value) ||
            (cmd != NULL && c == OPT_WATCH && cmd->takes_watch) ||
            (cmd != NULL && c < 256 && strchr(cmd->shortopts, c) != NULL);
        if (!allowed) {
            if (index >= 0)
                return cli_usage_error(cmd, "unknown option --%s", long_options[index].name);
            return cli_usage_error(cmd, "unknown option -%c", c);
        }
        index = -1;
        const char **value = kept_value(cli, o, c);
        if (value != NULL) {
            *value = optarg;
            continue;
        }
        char err[256];
        switch (c) {
        case 'q':
            cli->quiet = true;
            break;
        case OPT_INSECURE:
            cli->tls.insecure = 1;
            break;
        case OPT_JSON:
            cli->json = true;
            break;
        case 'h':
            if (cmd != NULL) {
                fputs(cmd->help, stdout);
            } else {
                fputs(cli_main_help, stdout);
                fputs(cli_main_exits, stdout);
            }
            return text_written();
        case 'V':
            printf("dlock %s (libdlock %s)\n", DLOCK_VERSION_STRING, dlock_version());
            return text_written();
        case 't':
            if (cli_parse_ttl(optarg, &o->ttl_ms, err, sizeof err) != 0)
                return cli_usage_error(cmd, "invalid TTL \"%.64s\": %s", optarg, err);
            break;
        case 'w':
            if (cli_parse_wait(optarg, &o->wait_ms, err, sizeof err) != 0)
                return cli_usage_error(cmd, "invalid WAIT \"%.64s\": %s", optarg, err);
            break;
        case OPT_SHARED:
            o->shared = true;
            break;
        case 'v':
            o->verbose = true;
            break;
        case OPT_WATCH:
            o->watch = true;
            break;
        case 'E': {
            /* Digits only: strtol would also take " 5" and "+5". */
            size_t len = strspn(optarg, "0123456789");
            long v = len >= 1 && len <= 9 && optarg[len] == '\0' ? strtol(optarg, NULL, 10) : -1;
            if (v < 0 || v > 255)
                return cli_usage_error(cmd, "invalid exit code \"%.64s\": 0 to 255", optarg);
            o->conflict_exit = (int)v;
            o->conflict_set = true;
            break;
        }
        case OPT_MIN_HOLD:
            if (cli_parse_ttl(optarg, &o->min_hold_ms, err, sizeof err) != 0)
                return cli_usage_error(cmd, "invalid --min-hold \"%.64s\": %s", optarg, err);
            break;
        case OPT_ONCE_PER:
            if (cli_parse_duration(optarg, &o->once_per_ms, err, sizeof err) != 0)
                return cli_usage_error(cmd, "invalid --once-per \"%.64s\": %s", optarg, err);
            if (o->once_per_ms % 1000 != 0 || o->once_per_ms < DLOCK_SLOT_PERIOD_MIN_MS ||
                o->once_per_ms > DLOCK_SLOT_PERIOD_MAX_MS)
                return cli_usage_error(cmd,
                                       "invalid --once-per \"%.64s\": a period is whole seconds, "
                                       "from 1s to 366d",
                                       optarg);
            break;
        case 'n': {
            char *end;
            errno = 0;
            long long k = strtoll(optarg, &end, 10);
            if (errno != 0 || end == optarg || *end != '\0' || k < 1 || k > DLOCK_PERMITS_MAX)
                return cli_usage_error(cmd, "invalid K \"%.64s\": permits are 1 to %d", optarg,
                                       DLOCK_PERMITS_MAX);
            o->permits = k;
            break;
        }
        case ':':
            return cli_usage_error(cmd, "option %s needs a value",
                                   bad_option(argv, optbuf, sizeof optbuf));
        default: /* '?' */
            if (optopt != 0 && strncmp(argv[optind - 1], "--", 2) == 0)
                return cli_usage_error(cmd, "option %s takes no value",
                                       bad_option(argv, optbuf, sizeof optbuf));
            return cli_usage_error(cmd, "unknown option %s",
                                   bad_option(argv, optbuf, sizeof optbuf));
        }
    }
    return -1;
}
