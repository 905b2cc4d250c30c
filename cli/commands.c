/*
 * commands.c: the commands that take one step on a lock and exit: acquire, extend,
 * release and status, and sem acquire and release (a permit is a lock handle too). (`dlock run`,
 * which holds a lock while a command runs, is in run.c and the files run.h names.)
 *
 * `dlock acquire` keeps the lock after it exits, so extend and release get a handle
 * for it from NAME and TOKEN (dlock_lock_adopt), and every handle is detached rather
 * than freed when the lock must stay held.
 */
#include "cli.h"
#include "duration.h"
#include "escape.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int cli_client_open(struct cli *cli)
{
    const char *servers = cli->servers;
    if (servers == NULL) {
        servers = getenv("DLOCK_SERVERS");
        if (servers == NULL || servers[0] == '\0')
            servers = CLI_DEFAULT_SERVERS;
    }
    dlock_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.prefix = cli->prefix;
    /* From the environment rather than argv, so that it does not show in ps. */
    const char *password = getenv("DLOCK_PASSWORD");
    if (password != NULL && password[0] != '\0')
        cfg.password = password;
    cfg.log = cli_log_to_stderr;
    /* --cacert and the others apply to every rediss:// server whose URL does not say. */
    const dlock_tls *t = &cli->tls;
    if ((t->cert == NULL) != (t->key == NULL))
        return cli_usage_error(cli->cmd, "%s",
                               t->cert ? "--cert needs --key" : "--key needs --cert");
    if (t->cacert || t->cacertdir || t->cert || t->sni || t->insecure)
        cfg.tls = t;
    /* The list is not echoed in the message: its URLs may carry passwords. The
     * library's detail names the bad server and part without them. */
    int rc = dlock_client_new(servers, &cfg, &cli->client);
    return rc == DLOCK_OK ? 0 : cli_fail_call("servers", rc);
}

void cli_what(char what[CLI_WHAT_LEN], const char *verb, const char *name)
{
    size_t len = strlen(name);
    if (len <= 64) {
        snprintf(what, CLI_WHAT_LEN, "%s %s", verb, name);
        return;
    }
    size_t cut = 48;
    while (cut > 0 && ((unsigned char)name[cut] & 0xC0) == 0x80)
        cut--; /* not inside a UTF-8 character */
    snprintf(what, CLI_WHAT_LEN, "%s %.*s... (a name of %zu bytes)", verb, (int)cut, name, len);
}

int cli_begin(struct cli *cli, const char *name, char what[CLI_WHAT_LEN])
{
    cli_what(what, cli->cmd->name, name);
    return cli_client_open(cli);
}

/* cli_begin, then a handle for NAME TOKEN, taken by an earlier `dlock acquire`. */
static int adopt(struct cli *cli, char **args, char what[CLI_WHAT_LEN], dlock_lock **l)
{
    int code = cli_begin(cli, args[0], what);
    if (code != 0)
        return code;
    int rc = dlock_lock_adopt(cli->client, args[0], args[1], l);
    return rc == DLOCK_OK ? 0 : cli_fail_call(what, rc);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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

int cli_take(dlock_client *c, const char *name, const dlock_opts *opts, int64_t permits,
             dlock_lock **out)
{
    return permits > 0 ? dlock_sem_acquire(c, name, permits, opts, out)
                       : dlock_acquire(c, name, opts, out);
}

int cli_cmd_sem_acquire(struct cli *cli, char **args, const struct cmd_opts *o)
{
    if (o->permits == 0)
        return cli_usage_error(NULL, "sem acquire: missing -n K, the number of permits");
    return cli_cmd_acquire(cli, args, o);
}

int cli_cmd_acquire(struct cli *cli, char **args, const struct cmd_opts *o)
{
    const char *name = args[0];
    char what[CLI_WHAT_LEN];
    int code = cli_begin(cli, name, what);
    if (code != 0)
        return code;

    dlock_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.ttl_ms = o->ttl_ms;
    opts.label = o->label;
    opts.shared = o->shared;
    opts.cancel_fd = cli_cancel_setup();

    dlock_lock *l = NULL;
    int rc;
    if (o->wait_ms != 0 && !cli->quiet && isatty(STDERR_FILENO)) {
        /* Try once first, so that the "waiting" line appears only when there is a
         * wait, then wait for what is left of WAIT. */
        int64_t start = now_ms();
        opts.wait_ms = 0;
        rc = cli_take(cli->client, name, &opts, o->permits, &l);
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
                rc = cli_take(cli->client, name, &opts, o->permits, &l);
            }
        }
    } else {
        opts.wait_ms = o->wait_ms;
        rc = cli_take(cli->client, name, &opts, o->permits, &l);
    }

    if (rc == DLOCK_ERR_CANCELED || (rc != DLOCK_OK && cli_cancel_signal() != 0))
        return cli_canceled(what);
    if (rc != DLOCK_OK)
        return cli_fail_call(what, rc);
    if (cli_cancel_signal() != 0) {
        /* The signal came as the lock was granted: the user asked to give up, and
         * nobody has the token yet, so let go rather than leave it held. */
        dlock_release(l);
        return cli_canceled(what);
    }

    printf("%s %" PRIu64 "\n", dlock_token(l), dlock_fence(l));
    if (fflush(stdout) != 0 || ferror(stdout)) {
        /* Nobody will ever see the token: a lock kept now could only expire. */
        int saved = errno;
        dlock_release(l);
        cli_errline("%s: cannot print the token: %s; the lock was released", what, strerror(saved));
        return CLI_EXIT_INTERNAL;
    }
    rc = dlock_lock_detach(l);
    return rc == DLOCK_OK ? 0 : cli_fail_call(what, rc);
}

int cli_cmd_extend(struct cli *cli, char **args, const struct cmd_opts *o)
{
    char what[CLI_WHAT_LEN];
    dlock_lock *l;
    int code = adopt(cli, args, what, &l);
    if (code != 0)
        return code;
    int rc = dlock_extend(l, o->ttl_ms);
    if (rc != DLOCK_OK)
        code = cli_fail_call(what, rc);
    /* Whatever happened, keep the lock on the servers: detach, never release (and the
     * handle must not stay attached, or dlock_client_free would release it). */
    dlock_lock_detach(l);
    return code;
}

int cli_cmd_release(struct cli *cli, char **args, const struct cmd_opts *o)
{
    (void)o;
    char what[CLI_WHAT_LEN];
    dlock_lock *l;
    int code = adopt(cli, args, what, &l);
    if (code != 0)
        return code;
    int rc = dlock_release(l); /* frees l whatever it returns */
    return rc == DLOCK_OK ? 0 : cli_fail_call(what, rc);
}

int cli_cmd_status(struct cli *cli, char **args, const struct cmd_opts *o)
{
    (void)o;
    const char *name = args[0];
    char what[CLI_WHAT_LEN];
    int code = cli_begin(cli, name, what);
    if (code != 0)
        return code;
    dlock_holder h, shared[DLOCK_INSPECT_SHARED_MAX];
    int n = 0;
    int64_t total = 0;
    int rc = dlock_inspect(cli->client, name, &h);
    if (rc == DLOCK_OK && h.shared > 0)
        rc = dlock_inspect_shared(cli->client, name, shared, DLOCK_INSPECT_SHARED_MAX, &n, &total);
    dlock_break_info b;
    if (rc == DLOCK_OK)
        rc = dlock_break_last(cli->client, name, &b);
    if (rc != DLOCK_OK)
        return cli_fail_call(what, rc);
    cli_print_status(name, &h, shared, n, &b, cli->json);
    return 0;
}
