/*
 * main.c: the entry point of the dlock command: finds the command, checks its
 * operands and runs it (cli.h says where each part lives).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fcntl, open and optind: -std=c11 alone hides POSIX */
#endif

#include "cli.h"
#include "duration.h"
#include "escape.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One row per command: CLI_COMMAND's fields, then by name what only some have. */
static const struct command commands[] = {
    {CLI_COMMAND("acquire", "t:w:l:", 1, "NAME", cli_cmd_acquire, cli_acquire_help),
     .takes_shared = true},
    {CLI_COMMAND("extend", "t:", 2, "NAME TOKEN", cli_cmd_extend, cli_extend_help)},
    {CLI_COMMAND("release", "", 2, "NAME TOKEN", cli_cmd_release, cli_release_help)},
    {CLI_COMMAND("status", "", 1, "NAME", cli_cmd_status, cli_status_help)},
    {CLI_COMMAND("run", "t:w:l:k:g:E:v", 1, "NAME", cli_cmd_run, cli_run_help), .takes_cmd = true,
     .takes_shared = true},
    {CLI_COMMAND("elect", "t:w:l:k:g:", 1, "NAME", cli_cmd_elect, cli_elect_help),
     .takes_cmd = true, .takes_value = true},
    {CLI_COMMAND("leader", "", 1, "NAME", cli_cmd_leader, cli_leader_help), .takes_watch = true},
    {CLI_COMMAND("doctor", "t:", 0, "", cli_cmd_doctor, cli_doctor_help)},
    {CLI_COMMAND("list", "", 1, "PATTERN", cli_cmd_list, cli_list_help), .optional = 1},
    {CLI_COMMAND("break", "r:F:", 1, "NAME", cli_cmd_break, cli_break_help)},
    {CLI_COMMAND("sem acquire", "n:t:w:l:", 1, "NAME", cli_cmd_sem_acquire, cli_sem_acquire_help)},
    {CLI_COMMAND("sem release", "", 2, "NAME TOKEN", cli_cmd_release, cli_sem_release_help)},
    {CLI_COMMAND("sem run", "n:t:w:l:k:g:E:v", 1, "NAME", cli_cmd_sem_run, cli_sem_run_help),
     .takes_cmd = true},
};

/* Groups of commands, named by two words ("sem acquire", "stock set"), and the help
 * of each group as a whole. */
static const struct group {
    const char *name;
    const char *help;
} groups[] = {{"sem", cli_sem_help}, {"stock", cli_stock_help}};

/* The command of that exact name, in this table or the stock's. */
static const struct command *lookup(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(name, commands[i].name) == 0)
            return &commands[i];
    for (size_t i = 0; i < cli_stock_ncommands; i++)
        if (strcmp(name, cli_stock_commands[i].name) == 0)
            return &cli_stock_commands[i];
    return NULL;
}

/* The command argv[0] (and, for a group, argv[1]) names, and in *words how many words
 * its name took. NULL with the exit code in *code after a usage error, or after the
 * group's --help (0). */
static const struct command *find_command(int argc, char **argv, int *words, int *code)
{
    const struct group *g = NULL;
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++)
        if (strcmp(argv[0], groups[i].name) == 0)
            g = &groups[i];
    const struct command *cmd = NULL;
    if (g == NULL) {
        *words = 1;
        cmd = lookup(argv[0]);
        if (cmd == NULL || strchr(cmd->name, ' ') != NULL) {
            *code = cli_usage_error(NULL, "unknown command \"%.64s\"", argv[0]);
            return NULL;
        }
        return cmd;
    }
    /* Messages about the group itself point to its help. */
    const struct command group = {.name = g->name, .help = g->help};
    if (argc < 2) {
        *code = cli_usage_error(&group, "missing SUBCOMMAND");
        return NULL;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        fputs(g->help, stdout);
        *code = fflush(stdout) == 0 ? 0 : CLI_EXIT_INTERNAL;
        return NULL;
    }
    char name[64];
    snprintf(name, sizeof name, "%s %.40s", g->name, argv[1]);
    *words = 2;
    if ((cmd = lookup(name)) == NULL)
        *code = cli_usage_error(&group, "unknown subcommand \"%.64s\"", argv[1]);
    return cmd;
}

/* When a file descriptor 0-2 is closed, the next open() would take its number: our
 * pipe or a socket would become "stdout", and the token would be written into it. */
static void ensure_std_fds(void)
{
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) == -1 && errno == EBADF &&
            open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) < 0)
            exit(CLI_EXIT_INTERNAL);
}

int main(int argc, char **argv)
{
    ensure_std_fds();
    /* A closed stdout must surface as EPIPE from fflush (so that acquire can let go of
     * a lock whose token nobody will see), not kill us silently. */
    signal(SIGPIPE, SIG_IGN);

    struct cli cli;
    memset(&cli, 0, sizeof cli);
    struct cmd_opts o = {.ttl_ms = DLOCK_TTL_DEFAULT_MS, .wait_ms = CLI_WAIT_FOREVER};
    int code = cli_parse_options(&cli, NULL, argc, argv, &o);
    if (code != -1)
        return code;
    if (optind >= argc)
        return cli_usage_error(NULL, "no command given");

    int words = 1;
    const struct command *cmd = find_command(argc - optind, argv + optind, &words, &code);
    if (cmd == NULL)
        return code;
    cli.cmd = cmd;
    if (cmd->defaults != NULL)
        o = *cmd->defaults;

    /* The command's arguments, its last name word first (getopt skips argv[0]). */
    int cargc = argc - optind - (words - 1);
    char **cargv = argv + optind + (words - 1);
    /* run: options and NAME end at the first "--"; what follows is CMD, whose
     * options are its own, so getopt never sees it. */
    int dashes = -1;
    if (cmd->takes_cmd)
        for (int i = 1; i < cargc && dashes < 0; i++)
            if (strcmp(cargv[i], "--") == 0)
                dashes = i;
    code = cli_parse_options(&cli, cmd, dashes >= 0 ? dashes : cargc, cargv, &o);
    if (code != -1)
        return code;
    if (cmd->takes_cmd) {
        int nargs = (dashes >= 0 ? dashes : cargc) - optind;
        if (nargs == 0)
            return cli_usage_error(cmd, "missing NAME");
        if (dashes < 0)
            return cli_usage_error(cmd, "missing \"--\" and CMD after NAME (dlock %s NAME -- CMD)",
                                   cmd->name);
        if (nargs > 1)
            return cli_usage_error(cmd, "unexpected argument \"%.64s\" before \"--\"",
                                   cargv[optind + 1]);
        if (dashes + 1 >= cargc)
            return cli_usage_error(cmd, "missing CMD after \"--\"");
        /* getopt moved NAME next to "--": the command gets NAME, "--", CMD... */
        code = cmd->run(&cli, cargv + optind, &o);
        dlock_client_free(cli.client);
        return code;
    }
    int nargs = cargc - optind;
    if (nargs < cmd->nargs - cmd->optional) {
        /* Name the operands still missing: "NAME TOKEN" after none, "TOKEN" after one. */
        const char *missing = cmd->operands;
        for (int i = 0; i < nargs; i++)
            missing = strchr(missing, ' ') + 1;
        return cli_usage_error(cmd, "missing %s", missing);
    }
    if (nargs > cmd->nargs)
        return cli_usage_error(cmd, "unexpected argument \"%.64s\"", cargv[optind + cmd->nargs]);

    code = cmd->run(&cli, cargv + optind, &o);
    /* Releases nothing we mean to keep: acquire and extend detached their handles. */
    dlock_client_free(cli.client);
    if (fflush(stdout) != 0 && code == 0) {
        cli_errline("cannot write the output: %s", strerror(errno));
        code = CLI_EXIT_INTERNAL;
    }
    return code;
}
