/*
 * cli.h: what the files of the dlock command share: its exit codes, the options of
 * one invocation, the table of commands, and the functions one file offers another.
 *
 *   dlock [-s URLS] [--prefix P] [-q] [--json] COMMAND [OPTIONS] ARGS...
 *
 * The command uses only the public header, as any other program would: it is the
 * library's first user, and a private door into src/ would hide what a user of the
 * API cannot do. Scripts branch on its exit codes and read its errors: exactly one
 * line on stderr per failure, "dlock: <what>: <reason> (<detail>)", with untrusted
 * bytes escaped.
 *
 * Where each part lives:
 *   main.c      the entry point: the command table, operands, the final flush
 *   options.c   parsing the options (getopt_long) and usage errors
 *   help.c      the text of --help, for dlock and for each command
 *   commands.c  acquire, extend, release and status
 *   operators.c what an operator does to others' locks: list and break
 *   cancel.c    cancelling the wait of `dlock acquire` by a signal
 *   output.c    exit codes, error lines, the output of status (text and JSON)
 *   signals.c   signals by name (-k) and the names used in messages
 *   run*.c      `dlock run` (see run.h)
 *   stock.c     `dlock stock SUBCOMMAND`: the stock with leased reservations
 *   doctor*.c   `dlock doctor`: what in the servers' setup can break a lock (the
 *               rules in doctor_judge.c, pure code)
 *   duration.c  parsing and printing durations
 *   escape.c    untrusted bytes to a terminal or into JSON
 */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

#include "dlock.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes: the numbers of sysexits.h, so that scripts can tell a usage error from
 * a busy lock from unreachable servers. docs/dlock.1.md lists them for users. */
enum {
    CLI_EXIT_USAGE = 64,        /* bad command line or invalid argument */
    CLI_EXIT_UNAVAILABLE = 69,  /* servers unreachable, no quorum, timeout */
    CLI_EXIT_INTERNAL = 70,     /* out of memory, anything unexpected */
    CLI_EXIT_LOST = 73,         /* the lock is gone or held by another owner */
    CLI_EXIT_PROTOCOL = 76,     /* a server answered what no lock server would */
    CLI_EXIT_NOT_ACQUIRED = 75, /* busy until WAIT ran out, or the wait was canceled */
    CLI_EXIT_AUTH = 77,         /* the servers refused our credentials */
    CLI_EXIT_NOEXEC = 126,      /* run: CMD could not be executed (a shell's convention) */
    CLI_EXIT_NOTFOUND = 127     /* run: CMD not found (likewise) */
};

#define CLI_DEFAULT_SERVERS "redis://127.0.0.1:6379"

/* Global options and the client built from them. */
struct cli {
    const char *servers;
    const char *prefix;
    dlock_tls tls; /* --cacert, --cert, ...: defaults of every rediss:// server */
    bool quiet;
    bool json;
    dlock_client *client;
    const struct command *cmd; /* the command being run, for its messages */
};

/* What a command's options gave. */
struct cmd_opts {
    int64_t ttl_ms;
    int64_t wait_ms;
    const char *label;
    const char *signal;    /* run -k, checked by run_check.c */
    const char *grace;     /* run -g, checked by run_check.c */
    bool shared;           /* --shared: a shared holder */
    int64_t permits;       /* sem -n K; 0: not a semaphore */
    const char *reason;    /* break --reason */
    const char *fence_key; /* break --fence-key */
    int conflict_exit;     /* run -E N: the exit status when busy or the slot ran */
    bool conflict_set;     /* -E was given: those cases are quiet unless -v */
    bool verbose;          /* run -v */
    int64_t min_hold_ms;   /* run --min-hold; 0: none */
    int64_t once_per_ms;   /* run --once-per; 0: none */
    const char *value;     /* elect --value; NULL: "" */
    bool watch;            /* leader --watch */
};

/* One command of the table in main.c. */
struct command {
    const char *name;      /* "acquire", or two words for a command of a group: "sem run" */
    const char *shortopts; /* beyond the common "s:qh" */
    int nargs;             /* exact number of operands */
    const char *operands;  /* for messages: "NAME TOKEN" */
    bool takes_cmd;        /* operands end at "--", CMD [ARG...] follows (run) */
    int (*run)(struct cli *cli, char **args, const struct cmd_opts *o);
    const char *help;
    bool takes_shared;               /* --shared is one of its options */
    int optional;                    /* of its operands, how many last ones may be left out
                                        (then args[i] is NULL) */
    const struct cmd_opts *defaults; /* its options' defaults; NULL: a lock's (TTL 30 s,
                                        WAIT forever) */
    bool takes_value;                /* --value (elect) */
    bool takes_watch;                /* --watch (leader) */
};

/* The fields every command has, in the order a table row gives them: its name, its
 * options beyond the common ones, its operands (how many, and their names), what runs
 * it and its help. */
#define CLI_COMMAND(name_, shortopts_, nargs_, operands_, run_, help_)                             \
    .name = (name_), .shortopts = (shortopts_), .nargs = (nargs_), .operands = (operands_),        \
    .run = (run_), .help = (help_)

/* ---- options.c ---- */

/*
 * Parse the options of argv[0..argc) (argv[0] is skipped: the program or the command
 * name). cmd NULL: the global options, stopping at the command name; else that
 * command's options, anywhere among its operands. Returns -1 to go on (operands from
 * optind), or an exit code (0 after --help or --version).
 */
int cli_parse_options(struct cli *cli, const struct command *cmd, int argc, char **argv,
                      struct cmd_opts *o);

/* One line: "dlock: [COMMAND: ]<message> (see dlock [COMMAND ]--help)". Returns
 * CLI_EXIT_USAGE. */
int cli_usage_error(const struct command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- help.c ---- */

extern const char cli_main_help[], cli_main_exits[];
extern const char cli_acquire_help[];
extern const char cli_extend_help[];
extern const char cli_release_help[];
extern const char cli_status_help[];
extern const char cli_run_help[];
extern const char cli_sem_help[];
extern const char cli_sem_acquire_help[];
extern const char cli_sem_release_help[];
extern const char cli_sem_run_help[];
extern const char cli_doctor_help[];
extern const char cli_break_help[];
extern const char cli_list_help[];
extern const char cli_elect_help[];
extern const char cli_leader_help[];

/* ---- output.c ---- */

/* The exit code for a library error code. */
int cli_exit_code(int err);

/* Report a failed library call as "dlock: <what>: <strerror> (<errmsg>)" and return
 * its exit code (one mapping for every command). */
int cli_fail_call(const char *what, int err);

/* The library's log callback: warnings as one line each on stderr. */
void cli_log_to_stderr(void *user, int level, const char *msg);

/* Write who holds a lock, escaped: its description, "N shared holders", or "an
 * unknown holder" when it stored none. */
void cli_write_holder(FILE *f, const dlock_holder *h);

/* Print the answer of `dlock status NAME` on stdout, as text or as one JSON object:
 * h from dlock_inspect, its n shared holders from dlock_inspect_shared, and the last
 * break of the name (b->broken 0: none) from dlock_break_last. */
void cli_print_status(const char *name, const dlock_holder *h, const dlock_holder *shared, int n,
                      const dlock_break_info *b, bool json);

/* ---- operators.c ---- */

/* A break of name: as a JSON object (no newline), or as a line of text after indent;
 * with an indent (dlock status: shown to anyone), only the evicted token's start. */
void cli_print_break(const char *name, const dlock_break_info *b, bool json, const char *indent);
int cli_cmd_break(struct cli *cli, char **args, const struct cmd_opts *o);
int cli_cmd_list(struct cli *cli, char **args, const struct cmd_opts *o);
/* leader.c: `dlock leader`, and `dlock elect`'s options before it runs as `dlock run`
 * does (run.c). */
int cli_cmd_leader(struct cli *cli, char **args, const struct cmd_opts *o);
int cli_cmd_elect(struct cli *cli, char **args, const struct cmd_opts *o);

/* ---- commands.c ---- */

/* Make cli->client from the global options and the environment. Returns 0, or an
 * exit code after reporting. */
int cli_client_open(struct cli *cli);
/* Room for "<verb> NAME", the <what> of every message about a command, a long NAME
 * shortened (cli_what). */
#define CLI_WHAT_LEN 128
/* "<verb> NAME" into what, for messages: a NAME of more than 64 bytes shows its start
 * and its length, as one of up to 4096 bytes would push the message's reason out of
 * its line. */
void cli_what(char what[CLI_WHAT_LEN], const char *verb, const char *name);
/* What a command on one name does first: name itself for its messages ("acquire
 * NAME", with the command's own name) and open the client. Returns 0, or an exit code
 * after reporting. */
int cli_begin(struct cli *cli, const char *name, char what[CLI_WHAT_LEN]);

int cli_cmd_acquire(struct cli *cli, char **args, const struct cmd_opts *o);
/* `dlock sem acquire`: acquire with -n K, which it requires. */
int cli_cmd_sem_acquire(struct cli *cli, char **args, const struct cmd_opts *o);
/* A lock, shared or not, or one of o->permits permits (the library call of each). */
int cli_take(dlock_client *c, const char *name, const dlock_opts *opts, int64_t permits,
             dlock_lock **out);
int cli_cmd_extend(struct cli *cli, char **args, const struct cmd_opts *o);
int cli_cmd_release(struct cli *cli, char **args, const struct cmd_opts *o);
int cli_cmd_status(struct cli *cli, char **args, const struct cmd_opts *o);

/* ---- doctor.c ---- */

int cli_cmd_doctor(struct cli *cli, char **args, const struct cmd_opts *o);

/* ---- cancel.c ---- */

/* Make a pipe for dlock_opts.cancel_fd and route SIGINT, SIGTERM and SIGHUP to it.
 * Returns the read end, or 0, the cancel_fd of none (then waits cannot be interrupted
 * cleanly, but still work). A signal our parent set to be ignored stays ignored. */
int cli_cancel_setup(void);

/* The signal that canceled the wait, or 0 if none came. */
int cli_cancel_signal(void);

/* The wait was canceled by a signal: say which, in "<what>: canceled by SIGINT", and
 * return the exit code of a wait that ran out. */
int cli_canceled(const char *what);

/* ---- signals.c ---- */

/* -k: a number (1 to SIGRTMAX), or a name as kill(1) knows it, with or without
 * "SIG", in any case: TERM, sigterm, SIGUSR1, RTMIN+2, RTMAX-1. Returns 0 or -1. */
int cli_parse_signal(const char *s, int *signo);

/* "SIGTERM" for messages; "signal 40" for those without a name. Returns buf. */
const char *cli_signal_label(int signo, char *buf, size_t len);

/* ---- run.c ---- */

/* `dlock run`: args are NAME, "--", CMD [ARG...] (NULL-terminated). */
int cli_cmd_run(struct cli *cli, char **args, const struct cmd_opts *o);
/* `dlock sem run`: run with -n K, which it requires. */
int cli_cmd_sem_run(struct cli *cli, char **args, const struct cmd_opts *o);

/* ---- stock.c ---- */

/* The commands of `dlock stock` ("stock set", ...), and the group's help. */
extern const struct command cli_stock_commands[];
extern const size_t cli_stock_ncommands;
extern const char cli_stock_help[];

#endif /* DLOCK_CLI_H */
