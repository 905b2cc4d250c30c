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

static const struct command commands[] = {
    {"acquire", "t:w:l:", 1, "NAME", false, cli_cmd_acquire, cli_acquire_help, true},
    {"extend", "t:", 2, "NAME TOKEN", false, cli_cmd_extend, cli_extend_help, false},
    {"release", "", 2, "NAME TOKEN", false, cli_cmd_release, cli_release_help, false},
    {"status", "", 1, "NAME", false, cli_cmd_status, cli_status_help, false},
    {"run", "t:w:l:k:g:", 1, "NAME", true, cli_cmd_run, cli_run_help, true},
    {"sem acquire", "n:t:w:l:", 1, "NAME", false, cli_cmd_sem_acquire, cli_sem_acquire_help, false},
    {"sem release", "", 2, "NAME TOKEN", false, cli_cmd_release, cli_sem_release_help, false},
    {"sem run", "n:t:w:l:k:g:", 1, "NAME", true, cli_cmd_sem_run, cli_sem_run_help, false},
};

/* The command argv[0] (and, for a group such as "sem", argv[1]) names: NULL after
 * reporting a usage error in *code. *words: how many words its name took. */
static const struct command *find_command(int argc, char **argv, int *words, int *code)
{
    bool group = false;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        const char *name = commands[i].name, *sp = strchr(name, ' ');
        if (sp == NULL) {
            if (strcmp(argv[0], name) == 0) {
                *words = 1;
                return &commands[i];
            }
        } else if (strlen(argv[0]) == (size_t)(sp - name) &&
                   strncmp(argv[0], name, (size_t)(sp - name)) == 0) {
            group = true;
            if (argc > 1 && strcmp(argv[1], sp + 1) == 0) {
                *words = 2;
                return &commands[i];
            }
        }
    }
    if (group && argc > 1)
        *code = cli_usage_error(NULL, "unknown command \"%.64s %.64s\"", argv[0], argv[1]);
    else if (group)
        *code = cli_usage_error(NULL, "missing the command after \"%.64s\"", argv[0]);
    else
        *code = cli_usage_error(NULL, "unknown command \"%.64s\"", argv[0]);
    return NULL;
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

    struct cli cli = {NULL, NULL, false, false, NULL};
    struct cmd_opts o = {DLOCK_TTL_DEFAULT_MS, CLI_WAIT_FOREVER, NULL, NULL, NULL, false, 0};
    int code = cli_parse_options(&cli, NULL, argc, argv, &o);
    if (code != -1)
        return code;
    if (optind >= argc)
        return cli_usage_error(NULL, "no command given");

    int words = 1;
    const struct command *cmd = find_command(argc - optind, argv + optind, &words, &code);
    if (cmd == NULL)
        return code;

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
            return cli_usage_error(cmd,
                                   "missing \"--\" and CMD after NAME (dlock run NAME -- CMD)");
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
    if (nargs < cmd->nargs) {
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
