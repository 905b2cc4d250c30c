/*
 * commands.c: the command table, AUTH, the admin gate, and the commands answered on
 * the loop.
 *
 * The table is filled at the start: each module registers its commands (the locks
 * module LOCK, UNLOCK, EXTEND, CHECK, LOCKINFO; the operators' LOCKS and BREAK; SEM;
 * STOCK; ELECT and its kin), and this file its own. Besides those and CLIENT
 * (clients.c), dlockd answers what Redis clients send on connect or by habit, so that
 * they work unchanged: PING, ECHO, QUIT, AUTH, SELECT 0, HELLO 2, COMMAND (empty:
 * clients fall back to their own tables) and INFO (with loading:0, which ioredis waits
 * for).
 *
 * Users, as redis-server 7's ACL names them: "default", whose password is
 * --requirepass-file's (none: every connection starts authenticated as it), and, with
 * --admin-pass-file, "admin", who may also run the commands that act on other clients'
 * connections and locks (CLIENT KILL, BREAK). Other connections get redis-server's
 * -NOPERM for those.
 */
#include "dlockd.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Compare without an early exit, so that the time taken does not tell a guesser how
 * many leading bytes were right. */
static bool password_ok(const resp_arg *a, const char *want)
{
    size_t n = strlen(want);
    unsigned char diff = (unsigned char)(a->len != n);
    for (size_t i = 0; i < a->len; i++)
        diff |= (unsigned char)(a->p[i] ^ want[i % (n ? n : 1)]);
    return diff == 0;
}

static bool arg_equals(const resp_arg *a, const char *s)
{
    return a->len == strlen(s) && memcmp(a->p, s, a->len) == 0;
}

/* A refused password is counted, and logged at most once a second with the number
 * refused since the last line: a guesser must show, and must not flood the log. */
static void auth_failed(dd_conn *c)
{
    static int64_t last_ms;
    static unsigned long since;
    dd_srv.stats.auth_failures++;
    since++;
    int64_t now = dd_now_ms();
    if (last_ms != 0 && now - last_ms < 1000)
        return;
    dd_log("AUTH refused for client %llu from %s (%lu refused since the last report)",
           (unsigned long long)c->id, c->addr, since);
    last_ms = now;
    since = 0;
}

/* AUTH pass | AUTH user pass, as redis-server 7 takes them: the users are "default"
 * and, with --admin-pass-file, "admin" (names are case-sensitive); without a password
 * set, AUTH pass is an error and AUTH default anything succeeds. A success makes the
 * connection that user's (AUTH default after AUTH admin drops admin); a refusal leaves
 * it as it was. Shared with HELLO. */
static bool authenticate(dd_conn *c, const resp_arg *user, const resp_arg *pass, dd_buf *out)
{
    bool default_user = user == NULL || arg_equals(user, "default");
    bool admin_user = user != NULL && dd_srv.adminpass != NULL && arg_equals(user, "admin");
    if (dd_srv.requirepass == NULL && user == NULL) {
        dd_reply_error(out, "ERR AUTH <password> called without any password configured for "
                            "the default user (this dlockd has no --requirepass-file or "
                            "DLOCKD_REQUIREPASS)");
        return false;
    }
    bool ok = admin_user ? password_ok(pass, dd_srv.adminpass)
                         : default_user && (dd_srv.requirepass == NULL ||
                                            password_ok(pass, dd_srv.requirepass));
    if (!ok) {
        auth_failed(c);
        dd_reply_error(out, "WRONGPASS invalid username-password pair or user is disabled.");
        return false;
    }
    /* Who may kill connections and break locks shows in the log. */
    if (admin_user && !c->admin)
        dd_log("client %llu from %s authenticated as admin", (unsigned long long)c->id, c->addr);
    c->admin = admin_user;
    c->authed = true;
    dd_preauth_remove(c);
    return true;
}

bool dd_need_admin(dd_conn *c, const char *acl_name, dd_buf *out)
{
    if (c->admin)
        return true;
    dd_srv.stats.admin_refused++;
    dd_reply_error(out, "NOPERM this user has no permissions to run the '%s' command", acl_name);
    return false;
}

static void cmd_auth(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    if (argc > 3) {
        dd_reply_error(out, "ERR syntax error");
        return;
    }
    if (authenticate(c, argc == 3 ? &argv[1] : NULL, &argv[argc - 1], out))
        dd_reply_status(out, "OK");
}

static void cmd_ping(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)c;
    if (argc > 2)
        dd_reply_error(out, "ERR wrong number of arguments for 'ping' command");
    else if (argc == 2)
        dd_reply_bulk(out, argv[1].p, argv[1].len);
    else
        dd_reply_status(out, "PONG");
}

static void cmd_echo(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)c;
    (void)argc;
    dd_reply_bulk(out, argv[1].p, argv[1].len);
}

static void cmd_quit(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)argv;
    (void)argc;
    dd_reply_status(out, "OK");
    c->quit = true;
}

static void cmd_select(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)c;
    (void)argc;
    /* Locks have no databases; clients that select 0 by habit are fine. */
    if (dd_arg_is(&argv[1], "0"))
        dd_reply_status(out, "OK");
    else
        dd_reply_error(out, "ERR DB index is out of range (dlockd has only database 0)");
}

/* HELLO [protover [AUTH user pass] [SETNAME name]], as redis-server 7 reads it: the
 * version comes first whenever options follow; the options are all read before any
 * takes effect (the last AUTH given is the one tried); the name is set only once the
 * connection is authenticated. */
static void cmd_hello(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    if (argc >= 2) {
        int64_t ver;
        if (!dd_arg_int(&argv[1], INT64_MIN, INT64_MAX, &ver)) {
            dd_reply_error(out, "ERR Protocol version is not an integer or out of range");
            return;
        }
        if (ver != 2) {
            dd_reply_error(out, "NOPROTO unsupported protocol version%s",
                           ver == 3 ? " (dlockd speaks RESP2)" : "");
            return;
        }
    }
    const resp_arg *user = NULL, *pass = NULL, *name = NULL;
    for (size_t i = 2; i < argc; i++) {
        if (dd_arg_is(&argv[i], "AUTH") && i + 2 < argc) {
            user = &argv[i + 1];
            pass = &argv[i + 2];
            i += 2;
        } else if (dd_arg_is(&argv[i], "SETNAME") && i + 1 < argc) {
            name = &argv[++i];
        } else {
            dd_reply_error(out, "ERR Syntax error in HELLO option '%.*s'",
                           (int)(argv[i].len > 64 ? 64 : argv[i].len), argv[i].p);
            return;
        }
    }
    if (user != NULL && !authenticate(c, user, pass, out))
        return;
    if (!c->authed) {
        dd_reply_error(out, "NOAUTH HELLO must be called with the client already authenticated, "
                            "otherwise the HELLO <proto> AUTH <user> <pass> option can be used "
                            "to authenticate the client and select the RESP protocol version at "
                            "the same time");
        return;
    }
    if (name != NULL && !dd_client_setname(c, name, out))
        return;
    dd_reply_array(out, 14);
    dd_reply_cstr(out, "server");
    dd_reply_cstr(out, "dlockd");
    dd_reply_cstr(out, "version");
    dd_reply_cstr(out, dlock_version());
    dd_reply_cstr(out, "proto");
    dd_reply_int(out, 2);
    dd_reply_cstr(out, "id");
    dd_reply_int(out, (long long)c->id);
    dd_reply_cstr(out, "mode");
    dd_reply_cstr(out, "standalone");
    dd_reply_cstr(out, "role");
    dd_reply_cstr(out, "master");
    dd_reply_cstr(out, "modules");
    dd_reply_array(out, 0);
}

static void cmd_command(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)c;
    /* An empty table: clients (redis-cli's hints, command-info caches) take it as "no
     * details known" and go on with their own. */
    if (argc >= 2 && dd_arg_is(&argv[1], "COUNT")) {
        dd_reply_int(out, 0);
    } else if (argc >= 2 && dd_arg_is(&argv[1], "INFO")) {
        dd_reply_array(out, argc - 2);
        for (size_t i = 2; i < argc; i++)
            dd_reply_nil(out);
    } else {
        dd_reply_array(out, 0);
    }
}

/* INFO's errors_NAME and the kind label of dlockd_errors_total (metrics.c): a new kind
 * is its line in the enum and its name here. */
const char *const dd_error_names[DD_E_KINDS] = {"err",      "noauth",   "noquorum", "unavailable",
                                                "protocol", "shutdown", "lost"};

void dd_count_errors(const char *p, size_t n)
{
    /* Every reply in a buffer starts a line; errors are the lines that begin with '-'
     * at a reply's start. Buffers from the loop hold one reply, and the kinds are told
     * apart by their code word. */
    if (n < 2 || p[0] != '-')
        return;
    static const struct {
        const char *prefix;
        int kind;
    } kinds[] = {{"-NOAUTH", DD_E_NOAUTH},           {"-NOQUORUM", DD_E_NOQUORUM},
                 {"-UNAVAILABLE", DD_E_UNAVAILABLE}, {"-ERR Protocol error", DD_E_PROTOCOL},
                 {"-SHUTDOWN", DD_E_SHUTDOWN},       {"-LOST", DD_E_LOST}};
    int kind = DD_E_ERR;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t k = strlen(kinds[i].prefix);
        if (n >= k && memcmp(p, kinds[i].prefix, k) == 0)
            kind = kinds[i].kind;
    }
    dd_srv.stats.errors[kind]++;
}

static bool want_section(const resp_arg *sec, const char *name)
{
    return sec == NULL || dd_arg_is(sec, name) || dd_arg_is(sec, "all") ||
           dd_arg_is(sec, "everything") || dd_arg_is(sec, "default");
}

static void cmd_info(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    (void)c;
    const resp_arg *sec = argc >= 2 ? &argv[1] : NULL;
    const dd_stats *st = &dd_srv.stats;
    int64_t up = (dd_now_ms() - dd_srv.started_ms) / 1000;
    dd_buf b = {0};
    if (want_section(sec, "server")) {
        /* redis_version is for clients that branch on it; dlockd's own is below. */
        dd_buf_printf(&b,
                      "# Server\r\nredis_version:7.0.0\r\ndlockd_version:%s\r\n"
                      "redis_mode:standalone\r\nprocess_id:%d\r\ntcp_port:%d\r\n"
                      "uptime_in_seconds:%lld\r\nuptime_in_days:%lld\r\nlock_servers:%d\r\n\r\n",
                      dlock_version(), (int)getpid(), dd_srv.port, (long long)up,
                      (long long)(up / 86400), dd_srv.nservers);
    }
    if (want_section(sec, "clients")) {
        dd_buf_printf(&b,
                      "# Clients\r\nconnected_clients:%d\r\nmaxclients:%d\r\n"
                      "blocked_clients:%d\r\n\r\n",
                      dd_srv.nconns, dd_srv.maxclients, dd_srv.parked);
    }
    if (want_section(sec, "persistence"))
        dd_buf_printf(&b, "# Persistence\r\nloading:0\r\n\r\n");
    if (want_section(sec, "stats")) {
        dd_buf_printf(&b,
                      "# Stats\r\ntotal_connections_received:%llu\r\n"
                      "total_commands_processed:%llu\r\nrejected_connections:%llu\r\n"
                      "acl_access_denied_auth:%llu\r\nacl_access_denied_cmd:%llu\r\n"
                      "auth_timeouts:%llu\r\nidle_timeouts:%llu\r\npool_jobs:%llu\r\n\r\n",
                      (unsigned long long)st->connections_received,
                      (unsigned long long)st->commands_processed,
                      (unsigned long long)st->rejected_connections,
                      (unsigned long long)st->auth_failures, (unsigned long long)st->admin_refused,
                      (unsigned long long)st->auth_timeouts, (unsigned long long)st->idle_timeouts,
                      (unsigned long long)st->pool_jobs);
    }
    if (want_section(sec, "replication"))
        dd_buf_printf(&b, "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\r\n");
    if (want_section(sec, "locks")) {
        /* Permits are session locks too: session_permits counts them apart. */
        dd_buf_printf(&b,
                      "# Locks\r\nsession_locks:%d\r\nsession_permits:%d\r\nwaiting_locks:%d\r\n"
                      "locks_acquired:%llu\r\nlocks_not_acquired:%llu\r\npermits_acquired:%llu\r\n"
                      "permits_not_acquired:%llu\r\nwaits:%llu\r\nsession_locks_lost:%llu\r\n"
                      "session_locks_maxhold:%llu\r\nshutdown_refused:%llu\r\ndraining:%d\r\n\r\n",
                      dd_srv.session_locks, dd_srv.session_permits, dd_srv.parked_locks,
                      (unsigned long long)st->locks_acquired,
                      (unsigned long long)st->locks_not_acquired,
                      (unsigned long long)st->permits_acquired,
                      (unsigned long long)st->permits_not_acquired, (unsigned long long)st->waits,
                      (unsigned long long)atomic_load(&dd_srv.stats.locks_lost),
                      (unsigned long long)st->maxhold_released,
                      (unsigned long long)st->shutdown_refused, dd_srv.draining);
    }
    if (want_section(sec, "renewal")) {
        /* How the renewal of session locks keeps up: a lag that nears the margin comes
         * before a lost lock (docs/service.md). */
        dlock_renewal_stats r;
        if (dlock_renewal_stats_get(dd_srv.client, &r) != DLOCK_OK)
            memset(&r, 0, sizeof r);
        dd_buf_printf(&b,
                      "# Renewal\r\nrenewal_locks:%lld\r\nrenewal_turns:%lld\r\n"
                      "renewal_retries:%lld\r\nrenewal_lag_ms:%lld\r\nrenewal_lag_max_ms:%lld\r\n"
                      "renewal_margin_min_ms:%lld\r\n\r\n",
                      (long long)r.locks, (long long)r.turns, (long long)r.retries,
                      (long long)r.lag_last_ms, (long long)r.lag_max_ms,
                      (long long)r.margin_min_ms);
    }
    if (want_section(sec, "stock")) {
        dd_buf_printf(&b,
                      "# Stock\r\nwaiting_reserves:%d\r\nstock_reserved:%llu\r\n"
                      "stock_not_reserved:%llu\r\nstock_waits:%llu\r\nstock_committed:%llu\r\n"
                      "stock_canceled:%llu\r\n\r\n",
                      dd_srv.parked_reserves, (unsigned long long)st->stock_reserved,
                      (unsigned long long)st->stock_not_reserved,
                      (unsigned long long)st->stock_waits, (unsigned long long)st->stock_committed,
                      (unsigned long long)st->stock_canceled);
    }
    if (want_section(sec, "errors")) {
        dd_buf_printf(&b, "# Errors\r\n");
        for (int k = 0; k < DD_E_KINDS; k++)
            dd_buf_printf(&b, "errors_%s:%llu\r\n", dd_error_names[k],
                          (unsigned long long)st->errors[k]);
        dd_buf_printf(&b, "\r\n");
    }
    if (want_section(sec, "keyspace"))
        dd_buf_printf(&b, "# Keyspace\r\n");
    dd_reply_bulk(out, b.p != NULL ? b.p : "", b.len);
    dd_buf_free(&b);
}

/* What dlockd answers as a Redis server would; the modules register the rest. */
static const dd_command_def commands[] = {
    {"ping", -1, false, false, true, cmd_ping},
    {"echo", 2, false, false, false, cmd_echo},
    {"quit", -1, true, false, true, cmd_quit},
    {"auth", -2, true, false, false, cmd_auth},
    {"hello", -1, true, false, false, cmd_hello},
    {"select", 2, false, false, false, cmd_select},
    {"client", -2, false, false, false, dd_cmd_client},
    {"command", -1, false, false, false, cmd_command},
    {"info", -1, false, false, false, cmd_info},
};

void dd_commands_register(void)
{
    dd_commands_add(commands, sizeof commands / sizeof commands[0]);
}

void dd_commands_add(const dd_command_def *defs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (dd_srv.ncommands == DD_COMMANDS_MAX)
            abort(); /* DD_COMMANDS_MAX is too small for the modules: a bug */
        dd_srv.commands[dd_srv.ncommands++] = &defs[i];
    }
}

/* "-ERR unknown command 'X', with args beginning with: 'a' 'b' ", as Redis words it,
 * so that clients and people recognize it; each piece cut short. */
static void unknown(resp_arg *argv, size_t argc, dd_buf *out)
{
    char args[256] = "";
    size_t used = 0;
    for (size_t i = 1; i < argc && used < 200; i++) {
        int n = snprintf(args + used, sizeof args - used, "'%.*s' ",
                         (int)(argv[i].len > 32 ? 32 : argv[i].len), argv[i].p);
        if (n < 0 || (size_t)n >= sizeof args - used)
            break;
        used += (size_t)n;
    }
    dd_reply_error(out, "ERR unknown command '%.*s', with args beginning with: %s",
                   (int)(argv[0].len > 64 ? 64 : argv[0].len), argv[0].p, args);
}

void dd_command(dd_conn *c, resp_arg *argv, size_t argc)
{
    dd_buf out = {0};
    const dd_command_def *cmd = NULL;
    for (int i = 0; i < dd_srv.ncommands; i++) {
        if (dd_arg_is(&argv[0], dd_srv.commands[i]->name)) {
            cmd = dd_srv.commands[i];
            break;
        }
    }
    if (cmd == NULL) {
        if (!c->authed)
            dd_reply_error(&out, "NOAUTH Authentication required.");
        else
            unknown(argv, argc, &out);
    } else if (!c->authed && !cmd->noauth) {
        dd_reply_error(&out, "NOAUTH Authentication required.");
    } else if ((cmd->arity > 0 && argc != (size_t)cmd->arity) ||
               (cmd->arity < 0 && argc < (size_t)-cmd->arity)) {
        dd_reply_error(&out, "ERR wrong number of arguments for '%s' command", cmd->name);
    } else if (cmd->admin && !dd_need_admin(c, cmd->name, &out)) {
        /* refused: -NOPERM is in out */
    } else if (c->nsubs > 0 && !cmd->subscribed) {
        dd_reply_error(&out,
                       "ERR Can't execute '%s': only SUBSCRIBE / UNSUBSCRIBE / PING / QUIT are "
                       "allowed in this context",
                       cmd->name);
    } else if (c->nsubs > 0 && cmd->fn == cmd_ping) {
        dd_pubsub_ping(c, argv, argc, &out);
    } else {
        cmd->fn(c, argv, argc, &out);
    }
    /* A command answered later (c->busy) has left out empty. */
    if (out.len > 0)
        dd_conn_reply(c, &out);
    dd_buf_free(&out);
}
