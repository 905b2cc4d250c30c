/*
 * options.c: dlockd's command line: the options into dd_srv, the checks that make sense
 * of them together (TLS), and the passwords from their files or the environment.
 *
 * A mistake on the command line is one line on stderr and exit status 64, before
 * anything starts: the lock servers are not contacted and no port is taken.
 */
#include "dlockd.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    return DD_EXIT_USAGE;
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

int dd_options_parse(int argc, char **argv, dd_options *o)
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
    o->servers = servers;
    o->prefix = prefix;
    o->passfile = passfile;
    o->adminfile = adminfile;
    o->timeout_ms = timeout_ms;
    return -1;
}

int dd_options_passwords(dd_options *o)
{
    char *pass = NULL;
    if (o->passfile != NULL) {
        pass = read_password_file(o->passfile, "--requirepass-file");
        if (pass == NULL)
            return DD_EXIT_USAGE;
    } else {
        const char *env = getenv("DLOCKD_REQUIREPASS");
        if (env != NULL && env[0] != '\0' && !password_fits(env, "$DLOCKD_REQUIREPASS"))
            return DD_EXIT_USAGE;
        if (env != NULL && env[0] != '\0' && (pass = strdup(env)) == NULL)
            return DD_EXIT_FAIL;
    }
    dd_srv.requirepass = pass;
    char *adminpass = NULL;
    if (o->adminfile != NULL &&
        (adminpass = read_password_file(o->adminfile, "--admin-pass-file")) == NULL) {
        free(pass);
        return DD_EXIT_USAGE;
    }
    dd_srv.adminpass = adminpass;
    o->pass = pass;
    o->adminpass = adminpass;
    return -1;
}
