/*
 * main.c: the dlock command (design.md, section 4 "CLI").
 *
 *   dlock [-s URLS] [--prefix P] [-q] [--json] COMMAND [OPTIONS] ARGS...
 *
 * It uses only the public header, as any other program would (style.md, rule 3).
 * Scripts branch on its exit codes (the sysexits.h values design.md lists) and
 * read its errors: exactly one line on stderr per failure,
 * "dlock: <what>: <reason> (<detail>)", with untrusted bytes escaped.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* getopt_long, pipe2 */
#endif

#include "dlock.h"
#include "duration.h"
#include "escape.h"
#include "run.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Exit codes: design.md, "Exit codes in full" (the numbers of sysexits.h). */
enum {
    EXIT_USAGE = 64,        /* bad command line or invalid argument */
    EXIT_UNAVAILABLE = 69,  /* servers unreachable, no quorum, timeout */
    EXIT_INTERNAL = 70,     /* protocol error, out of memory, anything unexpected */
    EXIT_LOST = 73,         /* the lock is gone or held by another owner */
    EXIT_NOT_ACQUIRED = 75, /* busy until WAIT ran out, or the wait was canceled */
    EXIT_AUTH = 77          /* the servers refused our credentials */
};

#define DEFAULT_SERVERS "redis://127.0.0.1:6379"

/* ---- output ----------------------------------------------------------------- */

static int exit_code(int err)
{
    switch (err) {
    case DLOCK_OK:
        return 0;
    case DLOCK_ERR_INVALID:
        return EXIT_USAGE;
    case DLOCK_ERR_NOQUORUM:
    case DLOCK_ERR_IO:
    case DLOCK_ERR_TIMEOUT:
    case DLOCK_ERR_UNAVAILABLE:
        return EXIT_UNAVAILABLE;
    case DLOCK_ERR_LOST:
        return EXIT_LOST;
    case DLOCK_ERR_BUSY:
    case DLOCK_ERR_CANCELED:
        return EXIT_NOT_ACQUIRED;
    case DLOCK_ERR_AUTH:
        return EXIT_AUTH;
    default:
        /* PROTOCOL, NOMEM, CLOSED and codes newer than this program. */
        return EXIT_INTERNAL;
    }
}

/* Report a failed library call as "dlock: <what>: <strerror> (<errmsg>)" and return its
 * exit code. The detail is copied first: it is only valid until our next dlock call. */
static int fail_call(const char *what, int err)
{
    char detail[1024];
    snprintf(detail, sizeof detail, "%s", dlock_errmsg());
    if (detail[0] != '\0')
        cli_errline("%s: %s (%s)", what, dlock_strerror(err), detail);
    else
        cli_errline("%s: %s", what, dlock_strerror(err));
    return exit_code(err);
}

/* Library warnings (a server whose eviction policy can drop lock keys, ...) as one
 * line each. Informational messages are dropped: scripts read our stderr. */
static void log_to_stderr(void *user, int level, const char *msg)
{
    (void)user;
    if (level <= DLOCK_LOG_WARN)
        cli_errline("warning: %s", msg);
}

/* ---- commands --------------------------------------------------------------- */

/* Global options and the client built from them. */
struct cli {
    const char *servers;
    const char *prefix;
    bool quiet;
    bool json;
    dlock_client *client;
};

/* What a command's options gave. */
struct cmd_opts {
    int64_t ttl_ms;
    int64_t wait_ms;
    const char *label;
    const char *signal; /* run -k, checked by run.c */
    const char *grace;  /* run -g, checked by run.c */
};

struct command {
    const char *name;
    const char *shortopts; /* beyond the common "s:qh" */
    int nargs;             /* exact number of operands */
    const char *operands;  /* for messages: "NAME TOKEN" */
    bool takes_cmd;        /* operands end at "--", CMD [ARG...] follows (run) */
    int (*run)(struct cli *cli, char **args, const struct cmd_opts *o);
    const char *help;
};

static int client_open(struct cli *cli)
{
    const char *servers = cli->servers;
    if (servers == NULL) {
        servers = getenv("DLOCK_SERVERS");
        if (servers == NULL || servers[0] == '\0')
            servers = DEFAULT_SERVERS;
    }
    dlock_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.prefix = cli->prefix;
    /* From the environment rather than argv, so that it does not show in ps. */
    const char *password = getenv("DLOCK_PASSWORD");
    if (password != NULL && password[0] != '\0')
        cfg.password = password;
    cfg.log = log_to_stderr;
    /* The list is not echoed in the message: its URLs may carry passwords. The
     * library's detail names the bad server and part without them. */
    int rc = dlock_client_new(servers, &cfg, &cli->client);
    return rc == DLOCK_OK ? 0 : fail_call("servers", rc);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Cancelling a wait. The library installs no signal handlers (design.md, "Process
 * hygiene") and offers cancel_fd instead: our handler writes a byte to a pipe whose
 * read end is that descriptor. These two are this program's only mutable globals: a
 * signal handler can reach nothing else. cancel_pipe_wr is set before the handler is
 * installed; cancel_signo is set by the handler, and read once the wait is over. */
static volatile sig_atomic_t cancel_pipe_wr = -1;
static volatile sig_atomic_t cancel_signo = 0;

static void on_cancel_signal(int signo)
{
    int saved = errno;
    cancel_signo = signo;
    char byte = 1;
    /* A full pipe already says "cancel"; nothing to do when this write fails. */
    if (write(cancel_pipe_wr, &byte, 1) < 0) {
    }
    errno = saved;
}

/* Make a pipe for cancel_fd and route SIGINT, SIGTERM and SIGHUP to it. Returns the
 * read end, or -1 (then waits cannot be interrupted cleanly, but still work). A signal
 * our parent set to be ignored stays ignored: `nohup dlock ...` and background jobs of
 * a non-interactive shell (SIGINT ignored) must not be cancelled by it. */
static int cancel_setup(void)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
        return -1;
    cancel_pipe_wr = fds[1];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_cancel_signal;
    sigemptyset(&sa.sa_mask);
    static const int signals[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
        struct sigaction old;
        if (sigaction(signals[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(signals[i], &sa, NULL);
    }
    return fds[0];
}

static const char *signal_name(int signo)
{
    switch (signo) {
    case SIGINT:
        return "SIGINT";
    case SIGTERM:
        return "SIGTERM";
    case SIGHUP:
        return "SIGHUP";
    default:
        return "a signal";
    }
}

/* Tell a person at a terminal why nothing happens. Only on a terminal, so that the
 * stderr of a script holds errors alone. */
static void print_waiting(struct cli *cli, const char *name)
{
    dlock_holder h;
    if (dlock_inspect(cli->client, name, &h) == DLOCK_OK && h.held && h.description[0] != '\0')
        cli_errline("waiting for %s (held by %s)", name, h.description);
    else
        cli_errline("waiting for %s", name);
}

static int cmd_acquire(struct cli *cli, char **args, const struct cmd_opts *o)
{
    const char *name = args[0];
    char what[DLOCK_NAME_MAX + 16];
    snprintf(what, sizeof what, "acquire %s", name);
    int code = client_open(cli);
    if (code != 0)
        return code;

    dlock_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.ttl_ms = o->ttl_ms;
    opts.label = o->label;
    int cancel_fd = cancel_setup();
    opts.cancel_fd = cancel_fd > 0 ? cancel_fd : 0;

    dlock_lock *l = NULL;
    int rc;
    if (o->wait_ms != 0 && !cli->quiet && isatty(STDERR_FILENO)) {
        /* Try once first, so that the "waiting" line appears only when there is a
         * wait, then wait for what is left of WAIT. */
        int64_t start = now_ms();
        opts.wait_ms = 0;
        rc = dlock_acquire(cli->client, name, &opts, &l);
        if (rc == DLOCK_ERR_BUSY) {
            int64_t left = CLI_WAIT_FOREVER;
            if (o->wait_ms != CLI_WAIT_FOREVER) {
                left = o->wait_ms - (now_ms() - start);
                if (left <= 0)
                    left = 0;
            }
            if (left != 0) {
                print_waiting(cli, name);
                opts.wait_ms = left;
                rc = dlock_acquire(cli->client, name, &opts, &l);
            }
        }
    } else {
        opts.wait_ms = o->wait_ms;
        rc = dlock_acquire(cli->client, name, &opts, &l);
    }

    if (rc == DLOCK_ERR_CANCELED || (rc != DLOCK_OK && cancel_signo != 0)) {
        cli_errline("%s: canceled by %s", what, signal_name(cancel_signo));
        return EXIT_NOT_ACQUIRED;
    }
    if (rc != DLOCK_OK)
        return fail_call(what, rc);
    if (cancel_signo != 0) {
        /* The signal came as the lock was granted: the user asked to give up, and
         * nobody has the token yet, so let go rather than leave it held. */
        dlock_release(l);
        cli_errline("%s: canceled by %s", what, signal_name(cancel_signo));
        return EXIT_NOT_ACQUIRED;
    }

    printf("%s %" PRIu64 "\n", dlock_token(l), dlock_fence(l));
    if (fflush(stdout) != 0 || ferror(stdout)) {
        /* Nobody will ever see the token: a lock kept now could only expire. */
        int saved = errno;
        dlock_release(l);
        cli_errline("%s: cannot print the token: %s; the lock was released", what, strerror(saved));
        return EXIT_INTERNAL;
    }
    rc = dlock_lock_detach(l);
    return rc == DLOCK_OK ? 0 : fail_call(what, rc);
}

/* A handle for NAME TOKEN, taken by an earlier `dlock acquire`. */
static int adopt(struct cli *cli, const char *what, char **args, dlock_lock **l)
{
    int code = client_open(cli);
    if (code != 0)
        return code;
    int rc = dlock_lock_adopt(cli->client, args[0], args[1], l);
    return rc == DLOCK_OK ? 0 : fail_call(what, rc);
}

static int cmd_extend(struct cli *cli, char **args, const struct cmd_opts *o)
{
    char what[DLOCK_NAME_MAX + 16];
    snprintf(what, sizeof what, "extend %s", args[0]);
    dlock_lock *l;
    int code = adopt(cli, what, args, &l);
    if (code != 0)
        return code;
    int rc = dlock_extend(l, o->ttl_ms);
    if (rc != DLOCK_OK)
        code = fail_call(what, rc);
    /* Whatever happened, keep the lock on the servers: detach, never release (and the
     * handle must not stay attached, or dlock_client_free would release it). */
    dlock_lock_detach(l);
    return code;
}

static int cmd_release(struct cli *cli, char **args, const struct cmd_opts *o)
{
    (void)o;
    char what[DLOCK_NAME_MAX + 16];
    snprintf(what, sizeof what, "release %s", args[0]);
    dlock_lock *l;
    int code = adopt(cli, what, args, &l);
    if (code != 0)
        return code;
    int rc = dlock_release(l); /* frees l whatever it returns */
    return rc == DLOCK_OK ? 0 : fail_call(what, rc);
}

static int cmd_status(struct cli *cli, char **args, const struct cmd_opts *o)
{
    (void)o;
    const char *name = args[0];
    char what[DLOCK_NAME_MAX + 16];
    snprintf(what, sizeof what, "status %s", name);
    int code = client_open(cli);
    if (code != 0)
        return code;
    dlock_holder h;
    int rc = dlock_inspect(cli->client, name, &h);
    if (rc != DLOCK_OK)
        return fail_call(what, rc);

    size_t desc_len = strnlen(h.description, sizeof h.description);
    if (cli->json) {
        fputs("{\"name\":", stdout);
        cli_write_json_string(stdout, name, strlen(name));
        if (h.held) {
            fputs(",\"state\":\"held\",\"holder\":", stdout);
            cli_write_json_string(stdout, h.description, desc_len);
        } else {
            fputs(",\"state\":\"free\",\"holder\":null", stdout);
        }
        printf(",\"remaining_ms\":%" PRId64 ",\"fence\":%" PRIu64 "}\n",
               h.held ? h.remaining_ms : 0, h.fence);
    } else {
        cli_write_safe(stdout, name, strlen(name));
        if (h.held) {
            fputs(": held by ", stdout);
            if (desc_len > 0)
                cli_write_safe(stdout, h.description, desc_len);
            else
                fputs("an unknown holder", stdout);
            char left[32];
            if (h.remaining_ms >= 0)
                printf(", %s left", cli_format_duration(h.remaining_ms, left, sizeof left));
            else
                fputs(", no expiry", stdout); /* a key someone set without a lease */
            printf(", fence %" PRIu64 "\n", h.fence);
        } else if (h.fence > 0) {
            printf(": free (last fence %" PRIu64 ")\n", h.fence);
        } else {
            fputs(": free\n", stdout);
        }
    }
    return 0;
}

/* run: args are NAME, "--", CMD [ARG...] (NULL-terminated). run.c does the work;
 * its own options are checked before the client is made. */
static int cmd_run(struct cli *cli, char **args, const struct cmd_opts *o)
{
    struct cli_run_args a;
    memset(&a, 0, sizeof a);
    a.name = args[0];
    a.cmd = args + 2;
    a.ttl_ms = o->ttl_ms;
    a.wait_ms = o->wait_ms;
    a.label = o->label;
    a.signal = o->signal;
    a.grace = o->grace;
    a.quiet = cli->quiet;
    a.fail_call = fail_call;
    int code = cli_run_check(&a);
    if (code != 0)
        return code;
    code = client_open(cli);
    if (code != 0)
        return code;
    return cli_run(cli->client, &a);
}

/* ---- help ------------------------------------------------------------------- */

#define DURATIONS_HELP                                                                             \
    "Durations: a number with ms, s, m or h (decimals allowed: 1.5s, 0.5m); a bare\n"              \
    "number is seconds. They are exact to the millisecond: a value finer than that\n"              \
    "(1.0005s, 1.5ms) is refused, never rounded.\n"

static const char main_help[] =
    "Usage: dlock [OPTIONS] COMMAND [COMMAND OPTIONS] ARGS...\n"
    "\n"
    "Distributed locks on Redis: one server, or Redlock over several.\n"
    "\n"
    "Commands:\n"
    "  acquire [-t TTL] [-w WAIT] [-l LABEL] NAME\n"
    "                       take NAME and keep it; print one line \"TOKEN FENCE\"\n"
    "  extend [-t TTL] NAME TOKEN\n"
    "                       set the lease of a held lock to TTL from now\n"
    "  release NAME TOKEN   release a held lock\n"
    "  status NAME          who holds NAME, for how long, and its last fence\n"
    "  run [-t TTL] [-w WAIT] [-k SIGNAL] [-g GRACE] [-l LABEL] NAME -- CMD [ARG...]\n"
    "                       hold NAME while CMD runs, renewing it; exit with CMD's status\n"
    "\n"
    "Options (also accepted after the command):\n"
    "  -s, --servers URLS   comma-separated servers (default $DLOCK_SERVERS, else\n"
    "                       " DEFAULT_SERVERS "), each\n"
    "                         redis://[[user]:password@]host[:port][/db]\n"
    "                         unix://[:password@]/path/to/socket[?db=N]\n"
    "                       with N servers, a lock needs N/2+1 of them (Redlock)\n"
    "      --prefix P       key prefix (default \"dlock:\")\n"
    "  -q, --quiet          no \"waiting for NAME\" line on a terminal\n"
    "      --json           status prints one JSON object\n"
    "  -h, --help           this help; dlock COMMAND --help for one command\n"
    "  -V, --version        versions of this command and of libdlock\n"
    "\n" DURATIONS_HELP "\n"
    "Environment:\n"
    "  DLOCK_SERVERS    servers when -s is not given\n"
    "  DLOCK_PASSWORD   password for servers whose URL has none (it stays out of ps)\n"
    "\n"
    "Exit status:\n"
    "  0   done\n"
    "  64  usage error or invalid argument\n"
    "  69  servers unreachable, no quorum, or timeout\n"
    "  70  internal error\n"
    "  73  lock lost or not held by this TOKEN (run: lost while CMD ran)\n"
    "  75  not acquired within WAIT, or the wait was canceled\n"
    "  77  authentication refused\n"
    "  126 run: CMD could not be executed\n"
    "  127 run: CMD not found\n"
    "Otherwise run exits with CMD's status (128+n if signal n killed it).\n";

static const char acquire_help[] =
    "Usage: dlock [OPTIONS] acquire [-t TTL] [-w WAIT] [-l LABEL] NAME\n"
    "\n"
    "Take the lock NAME and keep it after this command exits. Print one line,\n"
    "\"TOKEN FENCE\": TOKEN is needed to extend or release the lock; FENCE grows with\n"
    "every acquisition of NAME, so the resource it guards can refuse a stale holder.\n"
    "The lease is not renewed: extend it with `dlock extend` before TTL runs out.\n"
    "\n"
    "  -t, --ttl TTL       lease (default 30s; from 10ms to 2147483647ms)\n"
    "  -w, --wait WAIT     how long to wait while another owner holds NAME: a duration,\n"
    "                      0 to try once, or forever (the default)\n"
    "  -l, --label LABEL   text stored with the lock, shown by `dlock status`\n"
    "  -q, --quiet         no \"waiting for NAME\" line on a terminal\n"
    "  -h, --help          this help\n"
    "\n" DURATIONS_HELP "\n"
    "SIGINT, SIGTERM or SIGHUP during the wait cancels it (exit 75).\n"
    "Exit status: 0 acquired, 75 not acquired within WAIT or canceled, 69 servers\n"
    "unreachable, 77 authentication refused, 64 usage error (see dlock --help).\n"
    "\n"
    "Example:\n"
    "  read -r token fence < <(dlock acquire -t 5m -w 10s nightly) || exit\n"
    "  ...\n"
    "  dlock release nightly \"$token\"\n";

static const char extend_help[] =
    "Usage: dlock [OPTIONS] extend [-t TTL] NAME TOKEN\n"
    "\n"
    "Set the lease of the lock NAME, taken by `dlock acquire` with TOKEN, to TTL from\n"
    "now (it does not add to what is left).\n"
    "\n"
    "  -t, --ttl TTL   new lease (default 30s; from 10ms to 2147483647ms)\n"
    "  -h, --help      this help\n"
    "\n" DURATIONS_HELP "\n"
    "Exit status: 0 extended, 73 the lock is gone or held by another owner, 69 servers\n"
    "unreachable (the lock may still be held), 64 usage error (see dlock --help).\n";

static const char release_help[] =
    "Usage: dlock [OPTIONS] release NAME TOKEN\n"
    "\n"
    "Release the lock NAME taken by `dlock acquire` with TOKEN. A lock held by another\n"
    "owner is never touched.\n"
    "\n"
    "  -h, --help   this help\n"
    "\n"
    "Exit status: 0 released, 73 the lease had run out or another owner holds NAME,\n"
    "69 servers unreachable, 64 usage error (see dlock --help).\n";

static const char status_help[] =
    "Usage: dlock [OPTIONS] status [--json] NAME\n"
    "\n"
    "Print who holds NAME, the lease left, and the last fence issued for it:\n"
    "  NAME: held by HOST:PID LABEL, 2.9s left, fence 17\n"
    "  NAME: free (last fence 17)\n"
    "\n"
    "  --json       one JSON object instead:\n"
    "               {\"name\":..., \"state\":\"held\"|\"free\", \"holder\":\"...\"|null,\n"
    "                \"remaining_ms\":..., \"fence\":...}\n"
    "  -h, --help   this help\n"
    "\n"
    "Exit status: 0 whenever the servers answered (held or free), 69 servers\n"
    "unreachable, 64 usage error (see dlock --help).\n";

static const char run_help[] =
    "Usage: dlock [OPTIONS] run [-t TTL] [-w WAIT] [-k SIGNAL] [-g GRACE] [-l LABEL]\n"
    "                           NAME -- CMD [ARG...]\n"
    "\n"
    "Take the lock NAME (waiting up to WAIT), run CMD while holding it, renewing the\n"
    "lease every TTL/3, and release it when CMD ends. CMD's environment has\n"
    "DLOCK_NAME, DLOCK_TOKEN and DLOCK_FENCE; CMD leads its own process group, and\n"
    "SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to dlock are passed\n"
    "on to that group.\n"
    "\n"
    "If the lock is lost (a renewal finds another owner, or reaches no quorum before\n"
    "the lease runs out), CMD's process group gets SIGNAL, then SIGKILL after GRACE,\n"
    "and dlock exits 73. dlock does not wait for the loss to be certain: it keeps a\n"
    "safe-until time, the end of the lease it last had confirmed minus GRACE minus a\n"
    "margin of max(100ms, TTL/20), on CLOCK_BOOTTIME (time suspended counts); when\n"
    "no renewal has been confirmed by then, the same sequence starts, so that CMD is\n"
    "dead before anyone else can obtain the lock.\n"
    "\n"
    "  -t, --ttl TTL        lease, renewed every TTL/3 (default 30s)\n"
    "  -w, --wait WAIT      how long to wait while another owner holds NAME: a\n"
    "                       duration, 0 to try once, or forever (the default)\n"
    "  -k, --signal SIGNAL  sent first when the lock is lost (default TERM): a name\n"
    "                       (TERM, INT, HUP, KILL, USR1, ..., SIG optional) or a number\n"
    "  -g, --grace GRACE    from SIGNAL to SIGKILL (default TTL/4); shorter than TTL/2,\n"
    "                       and TTL - GRACE - margin must exceed TTL/3\n"
    "  -l, --label LABEL    text stored with the lock, shown by `dlock status`\n"
    "  -q, --quiet          no status line while waiting on a terminal\n"
    "  -h, --help           this help\n"
    "\n" DURATIONS_HELP "\n"
    "While it waits on a terminal, one status line says who holds NAME and for how\n"
    "long. Before CMD starts, SIGINT, SIGTERM or SIGHUP cancels the wait (exit 75).\n"
    "Processes that CMD leaves running in the background when it exits normally are\n"
    "not waited for; after a loss, what is left of its process group is killed.\n"
    "\n"
    "Exit status: CMD's (128+n if signal n killed it), 126 CMD could not be\n"
    "executed, 127 CMD not found, 73 the lock was lost while CMD ran, 75 not\n"
    "acquired within WAIT or canceled, 69 servers unreachable, 77 authentication\n"
    "refused, 64 usage error (see dlock --help).\n"
    "\n"
    "Example:\n"
    "  dlock run -t 1m -w 0 nightly-backup -- ./backup.sh --full\n";

static const struct command commands[] = {
    {"acquire", "t:w:l:", 1, "NAME", false, cmd_acquire, acquire_help},
    {"extend", "t:", 2, "NAME TOKEN", false, cmd_extend, extend_help},
    {"release", "", 2, "NAME TOKEN", false, cmd_release, release_help},
    {"status", "", 1, "NAME", false, cmd_status, status_help},
    {"run", "t:w:l:k:g:", 1, "NAME", true, cmd_run, run_help},
};

/* ---- command line ----------------------------------------------------------- */

enum { OPT_PREFIX = 256, OPT_JSON };

/* Every long option; each parse refuses those its context does not allow. */
static const struct option long_options[] = {
    {"servers", required_argument, NULL, 's'}, {"prefix", required_argument, NULL, OPT_PREFIX},
    {"quiet", no_argument, NULL, 'q'},         {"json", no_argument, NULL, OPT_JSON},
    {"help", no_argument, NULL, 'h'},          {"version", no_argument, NULL, 'V'},
    {"ttl", required_argument, NULL, 't'},     {"wait", required_argument, NULL, 'w'},
    {"label", required_argument, NULL, 'l'},   {"signal", required_argument, NULL, 'k'},
    {"grace", required_argument, NULL, 'g'},   {NULL, 0, NULL, 0},
};

static int usage_error(const struct command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* One line: "dlock: [COMMAND: ]<message> (see dlock [COMMAND ]--help)". */
static int usage_error(const struct command *cmd, const char *fmt, ...)
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
    return EXIT_USAGE;
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

/*
 * Parse the options of argv[0..argc) (argv[0] is skipped: the program or the command
 * name). cmd NULL: the global options, stopping at the command name; else that
 * command's options, anywhere among its operands. Returns -1 to go on (operands from
 * optind), or an exit code.
 */
static int parse_options(struct cli *cli, const struct command *cmd, int argc, char **argv,
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
        bool allowed = c == 's' || c == 'q' || c == 'h' || c == OPT_PREFIX || c == OPT_JSON ||
                       c == '?' || c == ':' || (cmd == NULL && c == 'V') ||
                       (cmd != NULL && strchr(cmd->shortopts, c) != NULL);
        if (!allowed) {
            if (index >= 0)
                return usage_error(cmd, "unknown option --%s", long_options[index].name);
            return usage_error(cmd, "unknown option -%c", c);
        }
        index = -1;
        char err[256];
        switch (c) {
        case 's':
            cli->servers = optarg;
            break;
        case OPT_PREFIX:
            cli->prefix = optarg;
            break;
        case 'q':
            cli->quiet = true;
            break;
        case OPT_JSON:
            cli->json = true;
            break;
        case 'h':
            fputs(cmd ? cmd->help : main_help, stdout);
            return fflush(stdout) == 0 ? 0 : EXIT_INTERNAL;
        case 'V':
            printf("dlock %s (libdlock %s)\n", DLOCK_VERSION_STRING, dlock_version());
            return fflush(stdout) == 0 ? 0 : EXIT_INTERNAL;
        case 't':
            if (cli_parse_ttl(optarg, &o->ttl_ms, err, sizeof err) != 0)
                return usage_error(cmd, "invalid TTL \"%.64s\": %s", optarg, err);
            break;
        case 'w':
            if (cli_parse_wait(optarg, &o->wait_ms, err, sizeof err) != 0)
                return usage_error(cmd, "invalid WAIT \"%.64s\": %s", optarg, err);
            break;
        case 'l':
            o->label = optarg;
            break;
        case 'k':
            o->signal = optarg;
            break;
        case 'g':
            o->grace = optarg;
            break;
        case ':':
            return usage_error(cmd, "option %s needs a value",
                               bad_option(argv, optbuf, sizeof optbuf));
        default: /* '?' */
            if (optopt != 0 && strncmp(argv[optind - 1], "--", 2) == 0)
                return usage_error(cmd, "option %s takes no value",
                                   bad_option(argv, optbuf, sizeof optbuf));
            return usage_error(cmd, "unknown option %s", bad_option(argv, optbuf, sizeof optbuf));
        }
    }
    return -1;
}

/* When a file descriptor 0-2 is closed, the next open() would take its number: our
 * pipe or a socket would become "stdout", and the token would be written into it. */
static void ensure_std_fds(void)
{
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) == -1 && errno == EBADF &&
            open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) < 0)
            exit(EXIT_INTERNAL);
}

int main(int argc, char **argv)
{
    ensure_std_fds();
    /* A closed stdout must surface as EPIPE from fflush (so that acquire can let go of
     * a lock whose token nobody will see), not kill us silently. */
    signal(SIGPIPE, SIG_IGN);

    struct cli cli = {NULL, NULL, false, false, NULL};
    struct cmd_opts o = {DLOCK_TTL_DEFAULT_MS, CLI_WAIT_FOREVER, NULL, NULL, NULL};
    int code = parse_options(&cli, NULL, argc, argv, &o);
    if (code != -1)
        return code;
    if (optind >= argc)
        return usage_error(NULL, "no command given");

    const struct command *cmd = NULL;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[optind], commands[i].name) == 0)
            cmd = &commands[i];
    if (cmd == NULL)
        return usage_error(NULL, "unknown command \"%.64s\"", argv[optind]);

    int cargc = argc - optind;
    char **cargv = argv + optind;
    /* run: options and NAME end at the first "--"; what follows is CMD, whose
     * options are its own, so getopt never sees it. */
    int dashes = -1;
    if (cmd->takes_cmd)
        for (int i = 1; i < cargc && dashes < 0; i++)
            if (strcmp(cargv[i], "--") == 0)
                dashes = i;
    code = parse_options(&cli, cmd, dashes >= 0 ? dashes : cargc, cargv, &o);
    if (code != -1)
        return code;
    if (cmd->takes_cmd) {
        int nargs = (dashes >= 0 ? dashes : cargc) - optind;
        if (nargs == 0)
            return usage_error(cmd, "missing NAME");
        if (dashes < 0)
            return usage_error(cmd, "missing \"--\" and CMD after NAME (dlock run NAME -- CMD)");
        if (nargs > 1)
            return usage_error(cmd, "unexpected argument \"%.64s\" before \"--\"",
                               cargv[optind + 1]);
        if (dashes + 1 >= cargc)
            return usage_error(cmd, "missing CMD after \"--\"");
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
        return usage_error(cmd, "missing %s", missing);
    }
    if (nargs > cmd->nargs)
        return usage_error(cmd, "unexpected argument \"%.64s\"", cargv[optind + cmd->nargs]);

    code = cmd->run(&cli, cargv + optind, &o);
    /* Releases nothing we mean to keep: acquire and extend detached their handles. */
    dlock_client_free(cli.client);
    if (fflush(stdout) != 0 && code == 0) {
        cli_errline("cannot write the output: %s", strerror(errno));
        code = EXIT_INTERNAL;
    }
    return code;
}
