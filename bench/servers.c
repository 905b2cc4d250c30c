/*
 * servers.c: the redis-server processes a run measures, and connections to them.
 *
 * By default a run starts its own servers through the test-support library
 * (tests/support: 127.0.0.1 only, free ports, retried when another process takes a
 * port first, no persistence), in a mkdtemp() directory of its own, pinned to the
 * placement's server CPU. They must not outlive the run whatever happens to it:
 *   - the child asks for SIGKILL when its parent dies (PR_SET_PDEATHSIG), which covers
 *     a bench killed with SIGKILL or crashing;
 *   - an atexit hook stops them on every exit() path;
 *   - SIGINT, SIGTERM and SIGHUP run a handler that kills them, removes their files
 *     and then dies of the same signal.
 *
 * With -s URLS the run uses the given servers instead: nothing is started or stopped,
 * and the keys the bench wrote (all under BENCH_PREFIX) are deleted at the end.
 */
#include "bench.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The one global: the servers the atexit hook stops. */
static bench_servers *g_stop_at_exit;

/* Every exit() path, including a failure half-way through a start. */
static void at_exit(void)
{
    if (g_stop_at_exit != NULL)
        servers_stop(g_stop_at_exit);
}

/* redis_version of node 1, for the report (the baselines run there too). */
static void fill_version(bench_servers *ss)
{
    snprintf(ss->version, sizeof ss->version, "unknown");
    redisContext *c = server_connect(&ss->s[0]);
    if (c == NULL)
        return;
    redisReply *r = redisCommand(c, "INFO server");
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "redis_version:");
        if (p != NULL)
            snprintf(ss->version, sizeof ss->version, "%.*s", (int)strcspn(p + 14, "\r\n"), p + 14);
    }
    freeReplyObject(r);
    redisFree(c);
}

int servers_start(bench_servers *ss, int n, int cpu)
{
    memset(ss, 0, sizeof *ss);
    ss->own = true;
    ss->cpu = cpu;
    const char *tmp = getenv("TMPDIR");
    snprintf(ss->tmpdir, sizeof ss->tmpdir, "%s/dlock-bench.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(ss->tmpdir) == NULL) {
        fprintf(stderr, "dlock-bench: mkdtemp %s: %s\n", ss->tmpdir, strerror(errno));
        return -1;
    }
    g_stop_at_exit = ss;
    atexit(at_exit);
    dh_servers_die_with_signals(ss->tmpdir);
    dh_server_opts o = {.parent_dir = ss->tmpdir,
                        .keep_dir = getenv("DLOCK_BENCH_KEEP") != NULL,
                        .child_setup = place_child_pin,
                        .child_arg = &ss->cpu};
    if (dh_servers_start_opts(ss->own_servers, n, &o) != 0)
        return -1;
    ss->n = n;
    for (int i = 0; i < n; i++) {
        bench_server *s = &ss->s[i];
        snprintf(s->host, sizeof s->host, "%s", ss->own_servers[i].host);
        s->port = ss->own_servers[i].port;
        s->pid = ss->own_servers[i].pid;
        snprintf(s->url, sizeof s->url, "%s", ss->own_servers[i].url);
    }
    fill_version(ss);
    return 0;
}

/* ---- -s URLS ---------------------------------------------------------------- */

/* Parse redis://[[user]:password@]host[:port][/db] into s. Percent-encoding is not
 * decoded here; the URL goes to dlock_client_new as given, which does decode it. */
static int parse_url(const char *url, size_t len, bench_server *s)
{
    memset(s, 0, sizeof *s);
    snprintf(s->url, sizeof s->url, "%.*s", (int)len, url);
    const char *p = s->url, *end = s->url + strlen(s->url);
    if (strncmp(p, "redis://", 8) != 0) {
        fprintf(stderr, "dlock-bench: -s: only redis:// URLs are supported: %s\n", s->url);
        return -1;
    }
    p += 8;
    const char *at = memchr(p, '@', (size_t)(end - p));
    if (at != NULL) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon == NULL) {
            fprintf(stderr, "dlock-bench: -s: write user:password@ or :password@\n");
            return -1;
        }
        snprintf(s->user, sizeof s->user, "%.*s", (int)(colon - p), p);
        snprintf(s->password, sizeof s->password, "%.*s", (int)(at - colon - 1), colon + 1);
        p = at + 1;
    }
    const char *hend;
    if (*p == '[') {
        hend = memchr(p, ']', (size_t)(end - p));
        if (hend == NULL) {
            fprintf(stderr, "dlock-bench: -s: unclosed [ in %s\n", s->url);
            return -1;
        }
        snprintf(s->host, sizeof s->host, "%.*s", (int)(hend - p - 1), p + 1);
        hend++;
    } else {
        hend = p + strcspn(p, ":/");
        snprintf(s->host, sizeof s->host, "%.*s", (int)(hend - p), p);
    }
    s->port = 6379;
    if (*hend == ':')
        s->port = (int)strtol(hend + 1, NULL, 10);
    const char *slash = strchr(hend, '/');
    if (slash != NULL && slash[1])
        s->db = (int)strtol(slash + 1, NULL, 10);
    if (s->host[0] == '\0' || s->port <= 0 || s->port > 65535) {
        fprintf(stderr, "dlock-bench: -s: bad host or port in %s\n", s->url);
        return -1;
    }
    return 0;
}

int servers_use(bench_servers *ss, const char *urls)
{
    memset(ss, 0, sizeof *ss);
    const char *p = urls;
    while (*p) {
        size_t len = strcspn(p, ",");
        if (len > 0) {
            if (ss->n == BENCH_MAX_NODES) {
                fprintf(stderr, "dlock-bench: -s: at most %d servers\n", BENCH_MAX_NODES);
                return -1;
            }
            if (parse_url(p, len, &ss->s[ss->n]) != 0)
                return -1;
            ss->n++;
        }
        p += len + (p[len] == ',');
    }
    if (ss->n == 0) {
        fprintf(stderr, "dlock-bench: -s: no server given\n");
        return -1;
    }
    for (int i = 0; i < ss->n; i++) {
        redisContext *c = server_connect(&ss->s[i]);
        if (c == NULL)
            return -1;
        redisFree(c);
    }
    fill_version(ss);
    g_stop_at_exit = ss;
    atexit(at_exit);
    return 0;
}

/* Delete every key under BENCH_PREFIX from a server we do not own. */
static void delete_bench_keys(const bench_server *s)
{
    redisContext *c = server_connect(s);
    if (c == NULL)
        return;
    char cursor[32] = "0";
    long deleted = 0;
    do {
        redisReply *r = redisCommand(c, "SCAN %s MATCH %s* COUNT 1000", cursor, BENCH_PREFIX);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            freeReplyObject(r);
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements; i++)
            redisAppendCommand(c, "UNLINK %b", keys->element[i]->str, keys->element[i]->len);
        for (size_t i = 0; i < keys->elements; i++) {
            void *rep;
            if (redisGetReply(c, &rep) != REDIS_OK)
                break;
            freeReplyObject(rep);
            deleted++;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    if (deleted > 0)
        progress("deleted %ld bench keys from %s:%d", deleted, s->host, s->port);
    redisFree(c);
}

/* Ours: SIGTERM, then SIGKILL after the grace period; their files and directories
 * removed unless $DLOCK_BENCH_KEEP is set (for reading a server's log). Given: our
 * keys deleted. */
void servers_stop(bench_servers *ss)
{
    if (!ss->own) {
        for (int i = 0; i < ss->n; i++)
            delete_bench_keys(&ss->s[i]);
        /* redis-benchmark's own key (the baselines run on node 1). */
        redisContext *c = ss->n > 0 ? server_connect(&ss->s[0]) : NULL;
        if (c != NULL)
            freeReplyObject(redisCommand(c, "UNLINK key:__rand_int__"));
        redisFree(c);
        ss->n = 0;
        return;
    }
    dh_servers_stop(ss->own_servers, ss->n);
    if (ss->tmpdir[0] && getenv("DLOCK_BENCH_KEEP") == NULL)
        rmdir(ss->tmpdir);
    ss->n = 0;
    ss->tmpdir[0] = '\0';
}

void urls_append(char *out, size_t outlen, const char *url)
{
    size_t pos = strlen(out);
    int w = snprintf(out + pos, outlen - pos, "%s%s", pos > 0 ? "," : "", url);
    if (w < 0 || (size_t)w >= outlen - pos)
        out[pos] = '\0';
}

void servers_urls(const bench_servers *ss, int first, int n, char *out, size_t outlen)
{
    out[0] = '\0';
    for (int i = first; i < first + n && i < ss->n; i++)
        urls_append(out, outlen, ss->s[i].url);
}

void servers_url_at(const bench_server *s, int port, char *out, size_t n)
{
    char auth[400] = "", db[16] = "";
    if (s->password[0])
        snprintf(auth, sizeof auth, "%s:%s@", s->user, s->password);
    if (s->db != 0)
        snprintf(db, sizeof db, "/%d", s->db);
    snprintf(out, n, "redis://%s127.0.0.1:%d%s", auth, port, db);
}

/* ---- admin connections ------------------------------------------------------ */

/* Admin commands fail loudly: an error reply is printed and treated like an I/O
 * error, since the bench never sends a command that may legitimately fail. */
redisReply *server_cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (r == NULL) {
        fprintf(stderr, "dlock-bench: redis: %s\n", c->errstr);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "dlock-bench: redis: -%s\n", r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* hiredis 0.14 has no redisOptions: AUTH and SELECT are sent by hand. The PING
 * without a password makes sure it is a Redis server before the run relies on it. */
redisContext *server_connect(const bench_server *s)
{
    struct timeval tv = {.tv_sec = 10, .tv_usec = 0};
    redisContext *c = redisConnectWithTimeout(s->host, s->port, tv);
    if (c == NULL || c->err) {
        fprintf(stderr, "dlock-bench: connect %s:%d: %s\n", s->host, s->port,
                c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    redisReply *r = NULL;
    if (s->password[0] && s->user[0])
        r = server_cmd(c, "AUTH %s %s", s->user, s->password);
    else if (s->password[0])
        r = server_cmd(c, "AUTH %s", s->password);
    else
        r = server_cmd(c, "PING");
    if (r != NULL && s->db != 0) {
        freeReplyObject(r);
        r = server_cmd(c, "SELECT %d", s->db);
    }
    if (r == NULL) {
        redisFree(c);
        return NULL;
    }
    freeReplyObject(r);
    return c;
}

/* ---- statistics snapshots --------------------------------------------------- */

/* The connections stay open across both snapshots: a new connection's AUTH or
 * SELECT between them would count as a workload command. */
int stats_open(const bench_servers *ss, int n, stats_conns *sc)
{
    memset(sc, 0, sizeof *sc);
    for (int i = 0; i < n && i < ss->n; i++) {
        if ((sc->c[i] = server_connect(&ss->s[i])) == NULL) {
            stats_close(sc);
            return -1;
        }
        sc->n = i + 1;
    }
    return 0;
}

void stats_close(stats_conns *sc)
{
    for (int i = 0; i < sc->n; i++)
        redisFree(sc->c[i]);
    sc->n = 0;
}

/* Add the cmdstat_NAME:calls=N lines of an INFO reply to out. */
static void add_cmdstats(srv_stats *out, const char *info)
{
    for (const char *p = info; (p = strstr(p, "\ncmdstat_")) != NULL;) {
        p += 9;
        size_t len = strcspn(p, ":");
        const char *calls = strstr(p, ":calls=");
        if (calls == NULL || len >= sizeof out->cmd[0])
            continue;
        long long v = strtoll(calls + 7, NULL, 10);
        int k;
        for (k = 0; k < out->ncmd; k++)
            if (strncmp(out->cmd[k], p, len) == 0 && out->cmd[k][len] == '\0')
                break;
        if (k == out->ncmd) {
            if (out->ncmd == STATS_MAX_CMDS)
                continue;
            snprintf(out->cmd[k], sizeof out->cmd[k], "%.*s", (int)len, p);
            out->calls[k] = 0;
            out->ncmd++;
        }
        out->calls[k] += v;
    }
}

/* INFO all carries both total_commands_processed and commandstats, so a snapshot is
 * one command per node, which stats_commands() subtracts. */
int stats_take(stats_conns *sc, srv_stats *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < sc->n; i++) {
        redisReply *r = server_cmd(sc->c[i], "INFO all");
        long v = dh_info_long(r, "total_commands_processed");
        if (v < 0) {
            freeReplyObject(r);
            fprintf(stderr, "dlock-bench: no total_commands_processed in INFO\n");
            return -1;
        }
        out->commands += v;
        add_cmdstats(out, r->str);
        freeReplyObject(r);
    }
    return 0;
}

void stats_window_start(void *w)
{
    stats_window *sw = w;
    if (stats_take(&sw->sc, &sw->before) != 0)
        stats_close(&sw->sc);
}

bool stats_window_end(stats_window *w, const char *label, bool verbose, srv_stats *after)
{
    if (w->sc.n == 0 || stats_take(&w->sc, after) != 0)
        return false;
    if (verbose)
        stats_print(label, &w->before, after);
    return true;
}

long long stats_commands(const stats_conns *sc, const srv_stats *before, const srv_stats *after)
{
    return after->commands - before->commands - sc->n;
}

static long long calls_of(const srv_stats *s, const char *cmd)
{
    for (int k = 0; k < s->ncmd; k++)
        if (strcmp(s->cmd[k], cmd) == 0)
            return s->calls[k];
    return 0;
}

long long stats_calls(const srv_stats *before, const srv_stats *after, const char *cmd)
{
    return calls_of(after, cmd) - calls_of(before, cmd);
}

void stats_print(const char *label, const srv_stats *before, const srv_stats *after)
{
    fprintf(stderr, "dlock-bench: %s: server commands:", label);
    for (int k = 0; k < after->ncmd; k++) {
        long long d = after->calls[k] - calls_of(before, after->cmd[k]);
        if (d > 0 && strcmp(after->cmd[k], "info") != 0)
            fprintf(stderr, " %s %lld", after->cmd[k], d);
    }
    fprintf(stderr, "\n");
}
