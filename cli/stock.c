/*
 * stock.c: `dlock stock SUBCOMMAND`: the stock of a SKU with leased reservations
 * (dlock_stock_* in the library).
 *
 *   dlock stock set SKU QTY                     set the stock (sold included)
 *   dlock stock add SKU QTY                     add (or, negative, take away) units
 *   dlock stock reserve [-t LEASE] [-w WAIT] SKU QTY   print the reservation id
 *   dlock stock commit SKU ID                   sold, for good (repeatable)
 *   dlock stock cancel SKU ID                   units back
 *   dlock stock extend [-t LEASE] SKU ID        lease LEASE from now
 *   dlock stock status [--json] SKU             stock, available, reserved, sold
 *
 * main.c finds these commands in cli_stock_commands, as it finds the lock commands in
 * its own table, and parses their options and operands the same way; the stock's
 * defaults (a lease of 30 s, no wait) are the table's. The help texts are here, beside
 * the table they describe.
 */
#include "cli.h"
#include "duration.h"
#include "escape.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STOCK_EXIT_HELP                                                                            \
    "Exit status: 0 done, 64 usage error or a refused change, 69 server unreachable,\n"            \
    "77 authentication refused (see dlock --help)"

const char cli_stock_help[] =
    "Usage: dlock [OPTIONS] stock SUBCOMMAND [OPTIONS] ARGS...\n"
    "\n"
    "The stock of a SKU, sold through reservations with a lease: a buyer reserves\n"
    "units, then commits them (sold) or cancels them (back in stock); a reservation\n"
    "whose lease runs out gives its units back by itself, so a buyer that crashes\n"
    "never takes them out of the sale, and no unit is sold twice. With several\n"
    "servers (-s), the stock lives on the first.\n"
    "\n"
    "Subcommands:\n"
    "  set SKU QTY              set the stock to QTY units, sold units included\n"
    "  add SKU QTY              add QTY units (negative: take them away; write\n"
    "                           `add SKU -- -5` so that -5 is not read as an option)\n"
    "  reserve [-t LEASE] [-w WAIT] SKU QTY\n"
    "                           reserve QTY units and print the reservation ID\n"
    "  commit SKU ID            the reservation's units are sold\n"
    "  cancel SKU ID            the reservation's units go back to the stock\n"
    "  extend [-t LEASE] SKU ID set the reservation's lease to LEASE from now\n"
    "  status [--json] SKU      stock, available, reserved and sold units\n"
    "\n"
    "dlock stock SUBCOMMAND --help says more. Exit status: 0 done, 64 usage error or a\n"
    "refused change, 69 server unreachable, 70 internal error, 73 the reservation is\n"
    "unknown or its lease ran out, 75 QTY not available within WAIT, 77 authentication\n"
    "refused.\n";

static const char set_help[] =
    "Usage: dlock [OPTIONS] stock set SKU QTY\n"
    "\n"
    "Set the stock of SKU to QTY units (0 to 1000000000000), the units sold and\n"
    "reserved included: QTY - sold - reserved become available. A QTY below sold +\n"
    "reserved is refused (exit 64) and changes nothing. Waiting reserves that the\n"
    "new units serve are woken.\n"
    "\n"
    "  -h, --help   this help\n"
    "\n" STOCK_EXIT_HELP ".\n";

static const char add_help[] =
    "Usage: dlock [OPTIONS] stock add SKU QTY\n"
    "\n"
    "Add QTY units to the stock of SKU; a negative QTY takes units away (write\n"
    "`dlock stock add SKU -- -5`). Taking away more than is available is refused\n"
    "(exit 64) and changes nothing.\n"
    "\n"
    "  -h, --help   this help\n"
    "\n" STOCK_EXIT_HELP ".\n";

static const char reserve_help[] =
    "Usage: dlock [OPTIONS] stock reserve [-t LEASE] [-w WAIT] SKU QTY\n"
    "\n"
    "Reserve QTY units of SKU, all or none, and print the reservation ID (32 hex\n"
    "characters) for commit, cancel and extend. Unless committed or canceled, the\n"
    "units go back to the stock when LEASE runs out.\n"
    "\n"
    "  -t, --ttl LEASE   the reservation's lease (default 30s; 10ms to 2147483647ms)\n"
    "  -w, --wait WAIT   how long to wait for units to be freed (a cancel, a lease\n"
    "                    that runs out, a restock): a duration, 0 to answer at once\n"
    "                    (the default), or forever. Waiters are served in arrival\n"
    "                    order. No wait helps when QTY exceeds the units not yet\n"
    "                    sold: exit 75 at once.\n"
    "  -h, --help        this help\n"
    "\n"
    "Durations: a number with ms, s, m, h or d (1.5s, 2m); a bare number is seconds.\n"
    "SIGINT, SIGTERM or SIGHUP during the wait cancels it (exit 75).\n"
    "Exit status: 0 reserved, 75 QTY not available within WAIT or canceled, 69\n"
    "server unreachable, 77 authentication refused, 64 usage error.\n"
    "\n"
    "Example:\n"
    "  id=$(dlock stock reserve -t 2m sku-42 1) || exit\n"
    "  if pay; then dlock stock commit sku-42 \"$id\"; else dlock stock cancel sku-42 \"$id\"; "
    "fi\n";

static const char commit_help[] =
    "Usage: dlock [OPTIONS] stock commit SKU ID\n"
    "\n"
    "The units of reservation ID are sold, for good. A commit repeated within an hour\n"
    "of the first (say, after a timeout) succeeds again and counts nothing more.\n"
    "\n"
    "  -h, --help   this help\n"
    "\n"
    "Exit status: 0 sold, 73 the reservation is unknown, canceled, or its lease ran out\n"
    "(its units went back to the stock), 69 server unreachable, 64 usage error.\n";

static const char cancel_help[] =
    "Usage: dlock [OPTIONS] stock cancel SKU ID\n"
    "\n"
    "The units of reservation ID go back to the stock, and wake the waiting reserves\n"
    "they serve.\n"
    "\n"
    "  -h, --help   this help\n"
    "\n"
    "Exit status: 0 canceled, 73 the reservation is unknown, committed, already\n"
    "canceled, or its lease ran out, 69 server unreachable, 64 usage error.\n";

static const char extend_help[] =
    "Usage: dlock [OPTIONS] stock extend [-t LEASE] SKU ID\n"
    "\n"
    "Set the lease of reservation ID to LEASE from now (it does not add).\n"
    "\n"
    "  -t, --ttl LEASE   the new lease (default 30s; 10ms to 2147483647ms)\n"
    "  -h, --help        this help\n"
    "\n"
    "Exit status: 0 extended, 73 the reservation is unknown, committed, canceled, or\n"
    "its lease ran out, 69 server unreachable, 64 usage error.\n";

static const char status_help[] =
    "Usage: dlock [OPTIONS] stock status [--json] SKU\n"
    "\n"
    "Print the units of SKU, counted by its server in one step (stock = sold +\n"
    "reserved + available; reservations whose lease ran out count as available):\n"
    "  SKU: stock 10, available 3, reserved 2 (1 reservation), sold 5, 0 waiting\n"
    "\n"
    "  --json       one JSON object instead:\n"
    "               {\"sku\":..., \"stock\":..., \"available\":..., \"reserved\":...,\n"
    "                \"sold\":..., \"reservations\":..., \"waiters\":...}\n"
    "  -h, --help   this help\n"
    "\n"
    "A SKU never set has all counts 0. Exit status: 0 whenever the server answered, 69\n"
    "server unreachable, 64 usage error.\n";

/* Report a failed library call, in the stock's words for the codes whose fixed
 * message speaks of locks, and return its exit code. */
static int stock_fail(const char *what, int err)
{
    char detail[1024];
    snprintf(detail, sizeof detail, "%s", dlock_errmsg());
    const char *reason = err == DLOCK_ERR_BUSY   ? "not enough units available"
                         : err == DLOCK_ERR_LOST ? "no such live reservation"
                                                 : dlock_strerror(err);
    if (detail[0] != '\0')
        cli_errline("%s: %s (%s)", what, reason, detail);
    else
        cli_errline("%s: %s", what, reason);
    return cli_exit_code(err);
}

/* QTY: a whole decimal number, optionally negative, that fits int64_t; the library
 * checks the range. */
static int parse_qty(const struct command *cmd, const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno != 0 || s[0] == ' ' || s[0] == '+')
        return cli_usage_error(cmd, "invalid QTY \"%.64s\": not a whole number", s);
    *out = v;
    return 0;
}

/* What every subcommand does first: read its QTY (args[1]) if it has one, name itself
 * for its messages and open the client. */
static int begin(struct cli *cli, char **args, int64_t *qty, char what[CLI_WHAT_LEN])
{
    int code = qty != NULL ? parse_qty(cli->cmd, args[1], qty) : 0;
    if (code != 0)
        return code;
    cli_what(what, cli->cmd->name, args[0]);
    return cli_client_open(cli);
}

static int run_update(struct cli *cli, char **args, bool add)
{
    int64_t qty = 0; /* set by begin() when it returns 0 */
    char what[CLI_WHAT_LEN];
    int code = begin(cli, args, &qty, what);
    if (code != 0)
        return code;
    int rc = add ? dlock_stock_add(cli->client, args[0], qty, NULL)
                 : dlock_stock_set(cli->client, args[0], qty, NULL);
    return rc == DLOCK_OK ? 0 : stock_fail(what, rc);
}

static int run_set(struct cli *cli, char **args, const struct cmd_opts *o)
{
    (void)o;
    return run_update(cli, args, false);
}

static int run_add(struct cli *cli, char **args, const struct cmd_opts *o)
{
    (void)o;
    return run_update(cli, args, true);
}

static int run_reserve(struct cli *cli, char **args, const struct cmd_opts *o)
{
    int64_t qty = 0; /* set by begin() when it returns 0 */
    char what[CLI_WHAT_LEN];
    int code = begin(cli, args, &qty, what);
    if (code != 0)
        return code;
    dlock_reserve_opts opts = {.lease_ms = o->ttl_ms,
                               .wait_ms = o->wait_ms,
                               .cancel_fd = o->wait_ms != 0 ? cli_cancel_setup() : 0};
    char id[DLOCK_TOKEN_LEN + 1];
    int rc = dlock_stock_reserve(cli->client, args[0], qty, &opts, id);
    if (rc == DLOCK_OK && cli_cancel_signal() != 0) {
        /* The signal came as the units were granted: nobody has the id yet. */
        dlock_stock_cancel(cli->client, args[0], id);
        rc = DLOCK_ERR_CANCELED;
    }
    if (rc == DLOCK_ERR_CANCELED)
        return cli_canceled(what);
    if (rc != DLOCK_OK)
        return stock_fail(what, rc);
    printf("%s\n", id);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        /* Nobody will ever see the id: give the units back now, not at the lease end. */
        int saved = errno;
        dlock_stock_cancel(cli->client, args[0], id);
        cli_errline("%s: cannot print the reservation id: %s; it was canceled", what,
                    strerror(saved));
        return CLI_EXIT_INTERNAL;
    }
    return 0;
}

enum end_kind { END_COMMIT, END_CANCEL, END_EXTEND };

static int run_end(struct cli *cli, char **args, const struct cmd_opts *o, enum end_kind kind)
{
    char what[CLI_WHAT_LEN];
    int code = begin(cli, args, NULL, what);
    if (code != 0)
        return code;
    int rc = kind == END_COMMIT   ? dlock_stock_commit(cli->client, args[0], args[1])
             : kind == END_CANCEL ? dlock_stock_cancel(cli->client, args[0], args[1])
                                  : dlock_stock_extend(cli->client, args[0], args[1], o->ttl_ms);
    return rc == DLOCK_OK ? 0 : stock_fail(what, rc);
}

static int run_commit(struct cli *cli, char **args, const struct cmd_opts *o)
{
    return run_end(cli, args, o, END_COMMIT);
}

static int run_cancel(struct cli *cli, char **args, const struct cmd_opts *o)
{
    return run_end(cli, args, o, END_CANCEL);
}

static int run_extend(struct cli *cli, char **args, const struct cmd_opts *o)
{
    return run_end(cli, args, o, END_EXTEND);
}

static int run_status(struct cli *cli, char **args, const struct cmd_opts *o)
{
    (void)o;
    const char *sku = args[0];
    char what[CLI_WHAT_LEN];
    int code = begin(cli, args, NULL, what);
    if (code != 0)
        return code;
    dlock_stock_info in;
    int rc = dlock_stock_status(cli->client, sku, &in);
    if (rc != DLOCK_OK)
        return stock_fail(what, rc);
    if (cli->json) {
        fputs("{\"sku\":", stdout);
        cli_write_json_string(stdout, sku, strlen(sku));
        printf(",\"stock\":%lld,\"available\":%lld,\"reserved\":%lld,\"sold\":%lld,"
               "\"reservations\":%lld,\"waiters\":%lld}\n",
               (long long)in.stock, (long long)in.available, (long long)in.reserved,
               (long long)in.sold, (long long)in.reservations, (long long)in.waiters);
    } else {
        cli_write_safe(stdout, sku, strlen(sku));
        printf(": stock %lld, available %lld, reserved %lld (%lld reservation%s), sold %lld, "
               "%lld waiting\n",
               (long long)in.stock, (long long)in.available, (long long)in.reserved,
               (long long)in.reservations, in.reservations == 1 ? "" : "s", (long long)in.sold,
               (long long)in.waiters);
    }
    return 0;
}

/* A reservation's lease defaults to 30 s, and a reserve answers at once unless told to
 * wait (a buyer in a sale does not queue by default; a lock does). */
static const struct cmd_opts stock_defaults = {.ttl_ms = DLOCK_STOCK_LEASE_DEFAULT_MS,
                                               .wait_ms = 0};

/* A subcommand of `dlock stock`: CLI_COMMAND's fields, and the stock's defaults. */
#define STOCK_COMMAND(...) CLI_COMMAND(__VA_ARGS__), .defaults = &stock_defaults

/* The commands of the group `dlock stock`, found by main.c. */
const struct command cli_stock_commands[] = {
    {STOCK_COMMAND("stock set", "", 2, "SKU QTY", run_set, set_help)},
    {STOCK_COMMAND("stock add", "", 2, "SKU QTY", run_add, add_help)},
    {STOCK_COMMAND("stock reserve", "t:w:", 2, "SKU QTY", run_reserve, reserve_help)},
    {STOCK_COMMAND("stock commit", "", 2, "SKU ID", run_commit, commit_help)},
    {STOCK_COMMAND("stock cancel", "", 2, "SKU ID", run_cancel, cancel_help)},
    {STOCK_COMMAND("stock extend", "t:", 2, "SKU ID", run_extend, extend_help)},
    {STOCK_COMMAND("stock status", "", 1, "SKU", run_status, status_help)},
};

const size_t cli_stock_ncommands = sizeof cli_stock_commands / sizeof *cli_stock_commands;
