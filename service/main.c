/*
 * main.c: dlockd's command line, signals, the open-files limit, start and stop.
 *
 *   dlockd [-s URLS] [-p|--port PORT] [--bind ADDR] [--unixsocket PATH]
 *          [--requirepass-file FILE] [--admin-pass-file FILE] [--auth-timeout MS]
 *          [--timeout-idle S]
 *          [--maxclients N] [--prefix P] [--timeout MS] [--max-hold MS]
 *          [--shutdown-timeout MS]
 *          [--tls-port PORT --tls-cert-file FILE --tls-key-file FILE
 *           [--tls-ca-cert-file FILE] [--tls-ca-cert-dir DIR]
 *           [--tls-auth-clients yes|no|optional]]
 *          [--metrics-port PORT [--metrics-bind ADDR]]
 *
 * The lock servers are given as to the dlock command: -s, else $DLOCK_SERVERS, else
 * redis://127.0.0.1:6379, their password from $DLOCK_PASSWORD. The password clients
 * must give comes from a file or $DLOCKD_REQUIREPASS, never from the command line,
 * where ps would show it; so does the password of the user admin (--admin-pass-file),
 * who may also kill clients' connections. Runs in the foreground and logs to stderr;
 * SIGTERM or SIGINT drain it (drain.c: nothing new taken, the held session locks'
 * UNLOCKs awaited up to --shutdown-timeout), then stop it cleanly (what is left
 * released, detached locks kept), exit 0.
 *
 * The TLS options are named and mean what redis-server's do, so that a configuration
 * reads the same: --tls-auth-clients defaults to yes (a client certificate from the
 * CAs is required), and then, as with redis-server, the CAs must be given.
 */
#include "dlockd.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define EXIT_USAGE 64
#define EXIT_FAIL  70

static const char usage_text[] =
    "usage: dlockd [OPTIONS]\n"
    "A lock service that speaks the Redis protocol (RESP2): any Redis client takes\n"
    "locks with LOCK, UNLOCK, EXTEND, CHECK and LOCKINFO, semaphores with SEM,\n"
    "stock with STOCK, and leaders with ELECT, RESIGN, PROCLAIM, LEADER and\n"
    "SUBSCRIBE leader:NAME (docs/service.md).\n"
    "\n"
    "  -s, --servers URLS        lock servers, as for dlock (default $DLOCK_SERVERS,\n"
    "                            else redis://127.0.0.1:6379); their password from\n"
    "                            $DLOCK_PASSWORD when the URLs carry none\n"
    "  -p, --port PORT           TCP port (default 7379; 0: no plain TCP, with\n"
    "                            --unixsocket or --tls-port)\n"
    "      --bind ADDR           TCP address (default 127.0.0.1)\n"
    "      --unixsocket PATH     also listen on a unix socket\n"
    "      --unixsocketperm MODE its permissions, in octal (e.g. 770; default: as the\n"
    "                            umask makes them); connecting needs write permission\n"
    "      --requirepass-file F  clients must AUTH with the first line of F (or set\n"
    "                            $DLOCKD_REQUIREPASS; never on the command line);\n"
    "                            at most 16384 bytes\n"
    "      --admin-pass-file F   enable the user admin, whose password is the first\n"
    "                            line of F (AUTH admin PASSWORD): admin alone may run\n"
    "                            CLIENT KILL and BREAK; at most 16384 bytes\n"
    "      --auth-timeout MS     close a client that has not authenticated MS after\n"
    "                            connecting (default 10000; 0: never)\n"
    "      --timeout-idle S      close a client that sent nothing and got no reply for\n"
    "                            S seconds, releasing its session locks, as\n"
    "                            redis-server's timeout (default 0: never; a client\n"
    "                            waiting for a lock is not idle)\n"
    "      --maxclients N        connections at most (default 10000; lowered to fit the\n"
    "                            open-files limit, 2 descriptors a client)\n"
    "      --prefix P            key prefix on the lock servers (default dlock:)\n"
    "      --timeout MS          per-server deadline of one command to the lock servers\n"
    "                            (default 200); nothing to do with --timeout-idle\n"
    "      --max-hold MS         release a session lock held this long, and close its\n"
    "                            holder's connection, unless its LOCK gives MAXHOLD\n"
    "                            (default 0: never)\n"
    "      --shutdown-timeout MS on SIGTERM, wait this long for the session locks held\n"
    "                            to be UNLOCKed, refusing new ones (default 10000;\n"
    "                            0: release them at once)\n"
    "      --tls-port PORT       also listen with TLS on PORT (same --bind)\n"
    "      --tls-cert-file FILE  the server's certificate (PEM, chain allowed)\n"
    "      --tls-key-file FILE   its private key (PEM, no passphrase)\n"
    "      --tls-ca-cert-file F  CA certificates that client certificates must chain to\n"
    "      --tls-ca-cert-dir DIR the same, a directory by hash (openssl rehash)\n"
    "      --tls-auth-clients X  yes (default): a client certificate is required;\n"
    "                            optional: verified when sent; no: not asked for\n"
    "      --metrics-port PORT   serve Prometheus metrics (GET /metrics) and a health\n"
    "                            check (GET /health) over HTTP on PORT (default: none)\n"
    "      --metrics-bind ADDR   its address, IPv4 or IPv6 (default 127.0.0.1)\n"
    "  -h, --help                this text\n"
    "  -V, --version             the version\n"
    "\n"
    "Exit status: 0 after SIGTERM or SIGINT, 64 usage, 70 could not start.\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "dlockd: %s (see dlockd --help)\n", msg);
    return EXIT_USAGE;
}

static bool parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* A password clients can send: before AUTH an argument is at most
 * DD_PREAUTH_MAX_BULK bytes, so a longer one could never be given; refused here
 * rather than cut. */
static bool password_fits(const char *pass, const char *from)
{
    if (strlen(pass) <= DD_PREAUTH_MAX_BULK)
        return true;
    fprintf(stderr,
            "dlockd: %s: the password is %zu bytes, longer than the %d a client may send "
            "before AUTH\n",
            from, strlen(pass), DD_PREAUTH_MAX_BULK);
    return false;
}

/* The first line of the file, whole, without its newline; option names it in errors. */
static char *read_password_file(const char *path, const char *option)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "dlockd: %s %s: %s\n", option, path, strerror(errno));
        return NULL;
    }
    char *line = NULL;
    size_t cap = 0;
    if (getline(&line, &cap, f) < 0) {
        free(line);
        line = strdup("");
    }
    fclose(f);
    if (line == NULL)
        return NULL;
    line[strcspn(line, "\r\n")] = '\0';
    if (line[0] == '\0') {
        fprintf(stderr, "dlockd: %s %s: empty password\n", option, path);
        free(line);
        return NULL;
    }
    if (!password_fits(line, option)) {
        free(line);
        return NULL;
    }
    return line;
}

/* The TLS options make sense together only: a listener needs its certificate and key,
 * files without a listener are a mistake (TLS would seem to be on), and a client
 * certificate can be verified only against CAs (redis-server refuses to start too). */
static int check_tls_options(void)
{
    bool files = dd_srv.tls_cert || dd_srv.tls_key || dd_srv.tls_ca_file || dd_srv.tls_ca_dir;
    if (dd_srv.tls_port == 0)
        return files ? usage_error("the --tls-* files need --tls-port") : 0;
    if (dd_srv.tls_port == dd_srv.port)
        return usage_error("--tls-port %d is --port too: give another", dd_srv.tls_port);
    if (dd_srv.tls_cert == NULL || dd_srv.tls_key == NULL)
        return usage_error("--tls-port needs --tls-cert-file and --tls-key-file");
    if (dd_srv.tls_auth != DD_TLS_AUTH_NO && dd_srv.tls_ca_file == NULL &&
        dd_srv.tls_ca_dir == NULL)
        return usage_error("--tls-auth-clients %s verifies client certificates: give "
                           "--tls-ca-cert-file or --tls-ca-cert-dir, or --tls-auth-clients no",
                           dd_srv.tls_auth == DD_TLS_AUTH_YES ? "yes (the default)" : "optional");
    return 0;
}

static void library_log(void *user, int level, const char *msg)
{
    (void)user;
    dd_log("%s: %s",
           level == DLOCK_LOG_ERROR  ? "error"
           : level == DLOCK_LOG_WARN ? "warning"
                                     : "info",
           msg);
}

static void on_signal(uv_signal_t *h, int signum)
{
    (void)h;
    if (dd_srv.draining && !dd_srv.stopping) {
        /* A second signal: the drain ends now, and the stop releases what is left. */
        dd_log("%s again: ending the drain", strsignal(signum));
        dd_drain_end("a second signal");
        return;
    }
    if (dd_srv.stopping) {
        /* A signal during the stop: the person wants out now; leases end by themselves.
         * Those still held are the open connections' and those whose release is under
         * way. */
        dd_log("%s again: exiting without releasing %d session locks (released %llu so "
               "far); they end with their leases",
               strsignal(signum), dd_srv.session_locks + atomic_load(&dd_srv.releasing),
               dd_released_since_mark());
        _exit(1);
    }
    dd_log("%s: stopping: %d clients, %d session locks held", strsignal(signum), dd_srv.nconns,
           dd_srv.session_locks);
    dd_release_mark();
    if (!dd_drain_start())
        dd_server_stop();
}

/* As many descriptors as allowed, and --maxclients lowered to what they allow, as
 * redis-server does: a client can cost DD_FDS_PER_CLIENT (its socket, and a waiting
 * operation's wake-up), and the lock servers' connection sets need some of their own
 * (the pool's threads, the steps in flight, renewal, wake-ups and the health checks:
 * a socket a lock server each, and the epoll set a step in flight waits on), and so do
 * the refused clients that linger (DD_REFUSED_LINGER_MAX) and the HTTP listener
 * (DD_METRICS_FDS, bounded by its connection limit). Without that, clients past the
 * limit would take the descriptors the lock servers need, and every call would fail.
 * False when the limit leaves room for no client at all. */
static bool fit_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return true;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            dd_log("cannot raise the open-files limit to %llu: %s", (unsigned long long)want,
                   strerror(errno));
    }
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur == RLIM_INFINITY)
        return true;
    long long reserve = 32 + DD_REFUSED_LINGER_MAX +
                        ((long long)dd_srv.nservers + 1) * (DLOCK_NOWAIT_SETS_MAX + 16) +
                        (dd_srv.metrics_port > 0 ? DD_METRICS_FDS : 0);
    long long fit = ((long long)rl.rlim_cur - reserve) / DD_FDS_PER_CLIENT;
    if (fit < 1) {
        dd_log("the open-files limit %llu leaves no descriptor for clients (%lld are kept for "
               "the lock servers' connections): raise it (ulimit -n, LimitNOFILE=)",
               (unsigned long long)rl.rlim_cur, reserve);
        return false;
    }
    if (fit < dd_srv.maxclients) {
        dd_log("maxclients lowered from %d to %lld to fit the open-files limit %llu (%d "
               "descriptors a client, %lld for the lock servers)",
               dd_srv.maxclients, fit, (unsigned long long)rl.rlim_cur, DD_FDS_PER_CLIENT, reserve);
        dd_srv.maxclients = (int)fit;
    }
    return true;
}

/* --tls-auth-clients: redis-server's words for it. */
static int parse_tls_auth(const char *arg)
{
    static const char *const words[] = {
        [DD_TLS_AUTH_YES] = "yes", [DD_TLS_AUTH_OPTIONAL] = "optional", [DD_TLS_AUTH_NO] = "no"};
    for (int i = 0; i < (int)(sizeof words / sizeof words[0]); i++)
        if (strcmp(arg, words[i]) == 0)
            return i;
    return -1;
}

/* An octal file mode of permission bits alone (redis-server's unixsocketperm): 0 to
 * 0777, digits only; -1 for anything else. */
static int parse_mode(const char *s)
{
    if (*s == '\0' || strlen(s) > 4)
        return -1;
    int mode = 0;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '7')
            return -1;
        mode = mode * 8 + (*s - '0');
    }
    return mode <= 0777 ? mode : -1;
}

int main(int argc, char **argv)
{
    const char *servers = NULL, *passfile = NULL, *prefix = NULL, *tls_auth = NULL,
               *requirepass = NULL, *sockperm = NULL, *adminfile = NULL;
    long port = DD_PORT_DEF, maxclients = DD_MAXCLIENTS_DEF, timeout_ms = DD_TIMEOUT_DEF,
         tls_port = 0, auth_timeout = DD_AUTH_TIMEOUT_DEF, idle_timeout = 0, max_hold = 0,
         shutdown_timeout = DD_SHUTDOWN_TIMEOUT_DEF;
    dd_srv.bind = "127.0.0.1";
    dd_srv.unixsocketperm = -1;
    long metrics_port = 0;
    /* Every option that takes a value: where it goes, and a number's range. */
    const struct {
        const char *name;
        int letter; /* its short form, or 0 */
        const char **str;
        long *num;
        long lo, hi;
        const char *range;
    } opts[] = {
        {"servers", 's', &servers, NULL, 0, 0, NULL},
        {"port", 'p', NULL, &port, 0, 65535, "0 to 65535"},
        {"bind", 0, &dd_srv.bind, NULL, 0, 0, NULL},
        {"unixsocket", 0, &dd_srv.unixsocket, NULL, 0, 0, NULL},
        {"unixsocketperm", 0, &sockperm, NULL, 0, 0, NULL},
        {"requirepass-file", 0, &passfile, NULL, 0, 0, NULL},
        {"requirepass", 0, &requirepass, NULL, 0, 0, NULL},
        {"admin-pass-file", 0, &adminfile, NULL, 0, 0, NULL},
        {"maxclients", 0, NULL, &maxclients, 1, 1000000, "1 to 1000000"},
        {"auth-timeout", 0, NULL, &auth_timeout, 0, 86400000, "0 to 86400000 ms"},
        {"timeout-idle", 0, NULL, &idle_timeout, 0, 31536000, "0 to 31536000 s"},
        {"prefix", 0, &prefix, NULL, 0, 0, NULL},
        {"timeout", 0, NULL, &timeout_ms, 1, 3600000, "1 to 3600000 ms"},
        {"max-hold", 0, NULL, &max_hold, 0, DLOCK_TTL_MAX_MS, "0 to 2147483647 ms"},
        {"shutdown-timeout", 0, NULL, &shutdown_timeout, 0, 86400000, "0 to 86400000 ms"},
        {"tls-port", 0, NULL, &tls_port, 0, 65535, "0 to 65535"},
        {"tls-cert-file", 0, &dd_srv.tls_cert, NULL, 0, 0, NULL},
        {"tls-key-file", 0, &dd_srv.tls_key, NULL, 0, 0, NULL},
        {"tls-ca-cert-file", 0, &dd_srv.tls_ca_file, NULL, 0, 0, NULL},
        {"tls-ca-cert-dir", 0, &dd_srv.tls_ca_dir, NULL, 0, 0, NULL},
        {"tls-auth-clients", 0, &tls_auth, NULL, 0, 0, NULL},
        {"metrics-port", 0, NULL, &metrics_port, 1, 65535, "1 to 65535"},
        {"metrics-bind", 0, &dd_srv.metrics_bind, NULL, 0, 0, NULL},
    };
    enum { NOPTS = sizeof opts / sizeof opts[0], FIRST = 256 };
    struct option longopts[NOPTS + 3];
    for (int i = 0; i < NOPTS; i++)
        longopts[i] = (struct option){opts[i].name, required_argument, NULL,
                                      opts[i].letter ? opts[i].letter : FIRST + i};
    longopts[NOPTS] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[NOPTS + 1] = (struct option){"version", no_argument, NULL, 'V'};
    longopts[NOPTS + 2] = (struct option){NULL, 0, NULL, 0};
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, ":s:p:hV", longopts, NULL)) != -1) {
        if (opt == 'h') {
            fputs(usage_text, stdout);
            return 0;
        }
        if (opt == 'V') {
            printf("dlockd %s\n", dlock_version());
            return 0;
        }
        if (opt == ':')
            return usage_error("option %s needs a value", argv[optind - 1]);
        int i = 0;
        while (i < NOPTS && (opts[i].letter ? opts[i].letter : FIRST + i) != opt)
            i++;
        if (i == NOPTS)
            return usage_error("unknown option '%s'", argv[optind - 1]);
        if (opts[i].str != NULL)
            *opts[i].str = optarg;
        else if (!parse_int(optarg, opts[i].lo, opts[i].hi, opts[i].num))
            return usage_error("bad --%s '%s' (%s)", opts[i].name, optarg, opts[i].range);
    }
    if (requirepass != NULL)
        return usage_error("--requirepass is not taken on the command line, where ps "
                           "shows it: use --requirepass-file FILE or $DLOCKD_REQUIREPASS");
    if (tls_auth != NULL && (dd_srv.tls_auth = parse_tls_auth(tls_auth)) < 0)
        return usage_error("bad --tls-auth-clients '%s' (yes, no or optional)", tls_auth);
    if (sockperm != NULL && (dd_srv.unixsocketperm = parse_mode(sockperm)) < 0)
        return usage_error("bad --unixsocketperm '%s' (octal, 0 to 777)", sockperm);
    if (sockperm != NULL && dd_srv.unixsocket == NULL)
        return usage_error("--unixsocketperm without --unixsocket");
    dd_srv.port = (int)port;
    dd_srv.maxclients = (int)maxclients;
    dd_srv.auth_timeout_ms = auth_timeout;
    dd_srv.idle_timeout_s = idle_timeout;
    dd_srv.max_hold_ms = max_hold;
    dd_srv.shutdown_timeout_ms = shutdown_timeout;
    dd_srv.tls_port = (int)tls_port;
    dd_srv.metrics_port = (int)metrics_port;
    if (dd_srv.metrics_bind != NULL && dd_srv.metrics_port == 0)
        return usage_error("--metrics-bind without --metrics-port");
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (dd_srv.port == 0 && dd_srv.unixsocket == NULL && dd_srv.tls_port == 0)
        return usage_error("--port 0 turns TCP off: give --unixsocket or --tls-port then");
    int rc = check_tls_options();
    if (rc != 0)
        return rc;

    char *pass = NULL;
    if (passfile != NULL) {
        pass = read_password_file(passfile, "--requirepass-file");
        if (pass == NULL)
            return EXIT_USAGE;
    } else {
        const char *env = getenv("DLOCKD_REQUIREPASS");
        if (env != NULL && env[0] != '\0' && !password_fits(env, "$DLOCKD_REQUIREPASS"))
            return EXIT_USAGE;
        if (env != NULL && env[0] != '\0' && (pass = strdup(env)) == NULL)
            return EXIT_FAIL;
    }
    dd_srv.requirepass = pass;
    char *adminpass = NULL;
    if (adminfile != NULL &&
        (adminpass = read_password_file(adminfile, "--admin-pass-file")) == NULL) {
        free(pass);
        return EXIT_USAGE;
    }
    dd_srv.adminpass = adminpass;

    if (servers == NULL) {
        servers = getenv("DLOCK_SERVERS");
        if (servers == NULL || servers[0] == '\0')
            servers = "redis://127.0.0.1:6379";
    }
    dlock_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.prefix = prefix;
    cfg.timeout_ms = timeout_ms;
    const char *password = getenv("DLOCK_PASSWORD");
    if (password != NULL && password[0] != '\0')
        cfg.password = password;
    cfg.log = library_log;
    /* The list is not echoed: its URLs may carry passwords; the detail names the bad
     * part without them. */
    rc = dlock_client_new(servers, &cfg, &dd_srv.client);
    if (rc != DLOCK_OK) {
        fprintf(stderr, "dlockd: servers: %s (%s)\n", dlock_strerror(rc), dlock_errmsg());
        return EXIT_USAGE;
    }
    dd_srv.nservers = dlock_client_nservers(dd_srv.client);
    if (dd_srv.tls_port > 0 && !dd_tls_setup()) {
        dd_tls_cleanup();
        dlock_client_free(dd_srv.client);
        free(pass);
        free(adminpass);
        return EXIT_FAIL;
    }

    /* Every blocking library call runs on libuv's pool; 8 threads keep the whole
     * process (loop, pool, the library's wake-up and renewal threads) under 16. The
     * pool reads this at its first use, below. */
    setenv("UV_THREADPOOL_SIZE", DD_POOL_DEF, 0);
    /* A write to a client that has gone must fail with EPIPE, not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);
    if (!fit_nofile()) {
        dd_tls_cleanup();
        dlock_client_free(dd_srv.client);
        free(pass);
        free(adminpass);
        return EXIT_FAIL;
    }

    dd_srv.limits.max_args = DD_MAX_ARGS;
    dd_srv.limits.max_bulk = DD_MAX_BULK;
    dd_srv.limits.max_inline = DD_MAX_INLINE;
    dd_srv.preauth_limits.max_args = DD_PREAUTH_MAX_ARGS;
    dd_srv.preauth_limits.max_bulk = DD_PREAUTH_MAX_BULK;
    dd_srv.preauth_limits.max_inline = DD_PREAUTH_MAX_INLINE;
    dd_srv.preauth_limits.unauthenticated = 1;
    static uv_loop_t loop;
    uv_loop_init(&loop);
    dd_srv.loop = &loop;
    dd_srv.started_ms = dd_now_ms();
    uv_signal_init(&loop, &dd_srv.sigterm);
    uv_signal_init(&loop, &dd_srv.sigint);
    uv_signal_start(&dd_srv.sigterm, on_signal, SIGTERM);
    uv_signal_start(&dd_srv.sigint, on_signal, SIGINT);
    dd_deadlines_start();
    dd_loss_start();
    /* The health checks start before the listeners, so that a lock server down at the
     * start is in the log before the first client comes. */
    if (dd_health_start() != 0 || dd_metrics_start() != 0 || dd_server_listen() != 0) {
        dd_server_stop();
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        dd_tls_cleanup();
        dlock_client_free(dd_srv.client);
        free(pass);
        free(adminpass);
        return EXIT_FAIL;
    }
    char where[PATH_MAX + 64] = "";
    if (dd_srv.port > 0)
        snprintf(where, sizeof where, "%s:%d", dd_srv.bind, dd_srv.port);
    if (dd_srv.tls_port > 0)
        snprintf(where + strlen(where), sizeof where - strlen(where), "%s%s:%d with TLS%s",
                 where[0] ? " and " : "", dd_srv.bind, dd_srv.tls_port,
                 dd_srv.tls_auth == DD_TLS_AUTH_YES        ? " (client certificates required)"
                 : dd_srv.tls_auth == DD_TLS_AUTH_OPTIONAL ? " (client certificates optional)"
                                                           : "");
    if (dd_srv.unixsocket != NULL)
        snprintf(where + strlen(where), sizeof where - strlen(where), "%s%s",
                 where[0] ? " and " : "", dd_srv.unixsocket);
    dd_log("dlockd %s listening on %s; %d lock server%s; maxclients %d%s%s", dlock_version(), where,
           dd_srv.nservers, dd_srv.nservers > 1 ? "s" : "", dd_srv.maxclients,
           pass != NULL ? "; AUTH required" : "", adminpass != NULL ? "; user admin enabled" : "");

    uv_run(&loop, UV_RUN_DEFAULT);

    uv_loop_close(&loop);
    dd_tls_cleanup();
    /* Every connection's session locks were released by now; nothing else is attached
     * to the client (detached locks have no handle here). */
    dlock_client_free(dd_srv.client);
    free(pass);
    free(adminpass);
    /* The pool's threads end here, before OpenSSL's exit handler runs: each frees the
     * per-thread state that rediss:// lock servers gave it (error queue, random
     * generators) as it ends, which after that handler it could not. */
    uv_library_shutdown();
    dd_release_report();
    dd_log("stopped");
    return 0;
}
