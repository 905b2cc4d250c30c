/*
 * main.c: dlockd's start and stop: the modules' registration, the lock servers' client,
 * signals, the open-files limit, the loop. The command line is options.c's.
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
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

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
    long long servers = ((long long)dd_srv.nservers + 1) * (DLOCK_NOWAIT_SETS_MAX + 16);
    int metrics = dd_srv.metrics_port > 0 ? DD_METRICS_FDS : 0;
    int own = 32 + DD_REFUSED_LINGER_MAX; /* listeners, loop, log; refused clients */
    long long reserve = servers + metrics + own;
    long long fit = ((long long)rl.rlim_cur - reserve) / DD_FDS_PER_CLIENT;
    /* Each part named: a total called the lock servers' would be false whenever
     * --metrics-port or dlockd's own descriptors are in it, and would send an operator
     * sizing the limit to the wrong place. */
    char metrics_part[48] = "";
    if (metrics > 0)
        snprintf(metrics_part, sizeof metrics_part, ", %d for --metrics-port", metrics);
    char kept[160];
    snprintf(kept, sizeof kept,
             "%lld kept: %lld for the lock servers%s, %d for listeners, loop and refused clients",
             reserve, servers, metrics_part, own);
    if (fit < 1) {
        dd_log("the open-files limit %llu leaves no descriptor for clients (%s): raise it "
               "(ulimit -n, LimitNOFILE=)",
               (unsigned long long)rl.rlim_cur, kept);
        return false;
    }
    if (fit < dd_srv.maxclients) {
        dd_log("maxclients lowered from %d to %lld to fit the open-files limit %llu (%d "
               "descriptors a client; %s)",
               dd_srv.maxclients, fit, (unsigned long long)rl.rlim_cur, DD_FDS_PER_CLIENT, kept);
        dd_srv.maxclients = (int)fit;
    }
    return true;
}

/* The modules' commands and hooks. The table is searched in this order (LOCK first),
 * and the hooks at a connection's end run in it: a closing connection leaves its
 * channels before its session locks are released. */
static void register_modules(void)
{
    dd_locks_register();
    dd_operators_register();
    dd_sem_register();
    dd_stock_register();
    dd_commands_register();
    dd_elect_register();
}

/* The library's client of the lock servers: -s, else $DLOCK_SERVERS, else the local
 * one; their password from $DLOCK_PASSWORD. -1 when made, else the exit status. */
static int client_start(const dd_options *o)
{
    const char *servers = o->servers;
    if (servers == NULL) {
        servers = getenv("DLOCK_SERVERS");
        if (servers == NULL || servers[0] == '\0')
            servers = "redis://127.0.0.1:6379";
    }
    dlock_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.prefix = o->prefix;
    cfg.timeout_ms = o->timeout_ms;
    const char *password = getenv("DLOCK_PASSWORD");
    if (password != NULL && password[0] != '\0')
        cfg.password = password;
    cfg.log = library_log;
    /* The list is not echoed: its URLs may carry passwords; the detail names the bad
     * part without them. */
    int rc = dlock_client_new(servers, &cfg, &dd_srv.client);
    if (rc != DLOCK_OK) {
        fprintf(stderr, "dlockd: servers: %s (%s)\n", dlock_strerror(rc), dlock_errmsg());
        return DD_EXIT_USAGE;
    }
    dd_srv.nservers = dlock_client_nservers(dd_srv.client);
    return -1;
}

/* What the start made, undone: at the stop, or when the start fails. */
static void cleanup(dd_options *o)
{
    dd_tls_cleanup();
    /* Every connection's session locks were released by now; nothing else is attached
     * to the client (detached locks have no handle here). */
    dlock_client_free(dd_srv.client);
    free(o->pass);
    free(o->adminpass);
}

static void signals_start(uv_loop_t *loop)
{
    uv_signal_init(loop, &dd_srv.sigterm);
    uv_signal_init(loop, &dd_srv.sigint);
    uv_signal_start(&dd_srv.sigterm, on_signal, SIGTERM);
    uv_signal_start(&dd_srv.sigint, on_signal, SIGINT);
}

/* The line that says dlockd is up, and where. */
static void log_listening(const dd_options *o)
{
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
           o->pass != NULL ? "; AUTH required" : "",
           o->adminpass != NULL ? "; user admin enabled" : "");
}

/* The loop, from its start to its end (the stop after a signal); false when the
 * listeners (or the health checks, the HTTP listener) could not start. */
static bool serve(const dd_options *o)
{
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
    signals_start(&loop);
    dd_deadlines_start();
    dd_park_start();
    dd_loss_start();
    /* The health checks start before the listeners, so that a lock server down at the
     * start is in the log before the first client comes. */
    bool ok = dd_health_start() == 0 && dd_metrics_start() == 0 && dd_server_listen() == 0;
    if (ok)
        log_listening(o);
    else
        dd_server_stop();
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return ok;
}

int main(int argc, char **argv)
{
    dd_options o;
    memset(&o, 0, sizeof o);
    int rc = dd_options_parse(argc, argv, &o);
    if (rc < 0)
        rc = dd_options_passwords(&o);
    if (rc >= 0)
        return rc;
    register_modules();
    if ((rc = client_start(&o)) >= 0)
        return rc;
    if (dd_srv.tls_port > 0 && !dd_tls_setup()) {
        cleanup(&o);
        return DD_EXIT_FAIL;
    }
    /* Every blocking library call runs on libuv's pool; 8 threads keep the whole
     * process (loop, pool, the library's wake-up and renewal threads) under 16. The
     * pool reads this at its first use, in serve. */
    setenv("UV_THREADPOOL_SIZE", DD_POOL_DEF, 0);
    /* A write to a client that has gone must fail with EPIPE, not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);
    if (!fit_nofile() || !serve(&o)) {
        cleanup(&o);
        return DD_EXIT_FAIL;
    }
    cleanup(&o);
    /* The pool's threads end here, before OpenSSL's exit handler runs: each frees the
     * per-thread state that rediss:// lock servers gave it (error queue, random
     * generators) as it ends, which after that handler it could not. */
    uv_library_shutdown();
    dd_release_report();
    dd_log("stopped");
    return 0;
}
