/*
 * url.c: server addresses.
 *
 *   redis://[[user]:password@]host[:port][/db]
 *   rediss://[[user]:password@]host[:port][/db][?param=value&...]   (TLS; the
 *       parameters are cacert, cacertdir, cert, key, sni and insecure, named after
 *       redis-cli's flags; their files are opened by tls.c, not here)
 *   unix://[:password@]/path/to/socket[?db=N]
 *   redis-sentinel://[[user]:password@]host[:port][,host[:port]...][/MASTER_NAME][?...]
 *   rediss-sentinel://...   (the same, over TLS to the Sentinels and the master)
 *       The hosts are Sentinels (port 26379 by default), asked for the master of
 *       MASTER_NAME ("mymaster" when none is given). The user and password are the
 *       master's; the parameters sentinel_user and sentinel_password are the
 *       Sentinels', db=N is the master's database, and rediss-sentinel:// also takes
 *       the TLS parameters. A comma inside the host part lists Sentinels; a comma
 *       followed by a scheme starts the next server.
 *   redis-cluster://[[user]:password@]host[:port][,host[:port]...]
 *   rediss-cluster://...[?param=value&...]   (TLS to every node, the TLS parameters)
 *       The hosts are seeds of one Redis Cluster (port 6379 by default), asked for its
 *       slot map; the whole cluster is one server of the list. It has database 0 only.
 *
 * The parser is pure (no I/O, no globals) so that unit tests and the fuzzer can drive
 * it directly. Every refusal names the part that is wrong, because a user staring at
 * "invalid URL" in a list of five servers has no way to tell which one and why.
 */
#include "base.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>

/* A bounded piece of the input; URLs are parsed without copying until the end. */
typedef struct span {
    const char *p;
    size_t n;
} span;

int dlock__url_bad(dlock__err *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return DLOCK_ERR_INVALID;
}

int dlock__hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decode s into a new NUL-terminated string. *out is NULL on a bad escape
 * (or a decoded NUL byte, which a C string cannot carry) and on allocation failure;
 * the return code tells which. */
static int decode(span s, char **out, const char *what, dlock__err *e)
{
    *out = NULL;
    char *d = dlock__malloc(s.n + 1);
    if (d == NULL)
        return DLOCK_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (s.p[i] != '%') {
            d[k++] = s.p[i];
            continue;
        }
        int hi = i + 2 < s.n ? dlock__hexval(s.p[i + 1]) : -1;
        int lo = i + 2 < s.n ? dlock__hexval(s.p[i + 2]) : -1;
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
            free(d);
            return dlock__url_bad(e, "bad percent-encoding in the %s", what);
        }
        d[k++] = (char)(hi * 16 + lo);
        i += 2;
    }
    d[k] = '\0';
    *out = d;
    return DLOCK_OK;
}

static char *dup_span(span s)
{
    char *d = dlock__malloc(s.n + 1);
    if (d != NULL) {
        memcpy(d, s.p, s.n);
        d[s.n] = '\0';
    }
    return d;
}

/* Parse a decimal number in [lo, hi] from s; -1 when it is not one. */
static long parse_num(span s, long lo, long hi)
{
    if (s.n == 0 || s.n > 10)
        return -1;
    long v = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (!isdigit((unsigned char)s.p[i]))
            return -1;
        v = v * 10 + (s.p[i] - '0');
    }
    return v >= lo && v <= hi ? v : -1;
}

static const char *find(span s, char c)
{
    return s.n ? memchr(s.p, c, s.n) : NULL;
}

static bool span_is(span s, const char *word)
{
    return s.n == strlen(word) && memcmp(s.p, word, s.n) == 0;
}

/* Split off "[user]:password@" from the front of *rest, if there is an '@' before
 * the first '/' (the host part cannot contain one). */
static int parse_userinfo(span *rest, dlock__addr *a, bool allow_user, dlock__err *e)
{
    span head = *rest;
    const char *slash = find(head, '/');
    if (slash != NULL && allow_user)
        head.n = (size_t)(slash - head.p);
    if (!allow_user) {
        /* unix://: the path starts with '/', so credentials are whatever precedes the
         * first "@/" and must start with ':'. */
        if (rest->n == 0 || rest->p[0] != ':')
            return DLOCK_OK;
        const char *at = NULL;
        for (size_t i = 0; i + 1 < rest->n; i++)
            if (rest->p[i] == '@' && rest->p[i + 1] == '/') {
                at = rest->p + i;
                break;
            }
        if (at == NULL)
            return dlock__url_bad(e, "expected \":password@\" before the socket path");
        head.n = (size_t)(at - rest->p) + 1; /* up to and including the '@' */
    }
    const char *at = NULL;
    for (size_t i = head.n; i > 0; i--)
        if (head.p[i - 1] == '@') {
            at = head.p + i - 1;
            break;
        }
    if (at == NULL && slash != NULL && allow_user) {
        /* An '@' after the first '/' (and before any '?'): a password with a '/' in it,
         * cut in two. Say so without echoing any part of the URL, which holds it. */
        span tail = {slash, rest->n - (size_t)(slash - rest->p)};
        const char *q = find(tail, '?');
        if (q != NULL)
            tail.n = (size_t)(q - tail.p);
        if (find(tail, '@') != NULL)
            return dlock__url_bad(
                e, "'@' after the first '/': a '/' in a password must be written %%2F "
                   "(percent-encoded)");
    }
    if (at == NULL)
        return DLOCK_OK;
    span info = {head.p, (size_t)(at - head.p)};
    const char *colon = find(info, ':');
    if (colon == NULL)
        return dlock__url_bad(
            e, "\"user@\" without a password is ambiguous: write \":password@\" for a "
               "password alone, or \"user:password@\"");
    span user = {info.p, (size_t)(colon - info.p)};
    span pass = {colon + 1, info.n - user.n - 1};
    if (pass.n == 0)
        return dlock__url_bad(e, "empty password before '@'");
    int rc;
    if (user.n > 0 && (rc = decode(user, &a->user, "user name", e)) != DLOCK_OK)
        return rc;
    if ((rc = decode(pass, &a->password, "password", e)) != DLOCK_OK)
        return rc;
    rest->p = at + 1;
    rest->n -= info.n + 1;
    return DLOCK_OK;
}

static bool host_char_ok(char c)
{
    return isalnum((unsigned char)c) || c == '.' || c == '-' || c == '_';
}

/* One parameter: "name=value", the value percent-decoded. A rediss:// URL takes the
 * TLS parameters; a Sentinel URL takes the Sentinels' credentials and the database,
 * and the TLS ones too over TLS. */
static int parse_param(span p, dlock__addr *a, dlock__err *e)
{
    const char *eq = find(p, '=');
    span name = {p.p, eq ? (size_t)(eq - p.p) : p.n};
    span value = {eq ? eq + 1 : p.p + p.n, eq ? p.n - name.n - 1 : 0};
    static const char *const names[] = {"cacert",        "cacertdir",        "cert", "key", "sni",
                                        "sentinel_user", "sentinel_password"};
    char **slots[] = {&a->cacert,        &a->cacertdir,        &a->cert, &a->key, &a->sni,
                      &a->sentinel_user, &a->sentinel_password};
    enum { TLS_PARAMS = 5 }; /* the first five names */
    int shown = (int)(name.n > 40 ? 40 : name.n);
    if (a->tls && span_is(name, "insecure")) {
        if (a->insecure >= 0)
            return dlock__url_bad(e, "parameter \"insecure\" given twice");
        if (value.n != 1 || (value.p[0] != '0' && value.p[0] != '1'))
            return dlock__url_bad(e, "insecure= takes 1 (do not verify the server) or 0");
        a->insecure = value.p[0] - '0';
        return DLOCK_OK;
    }
    if (a->sentinel && span_is(name, "db")) {
        long v = parse_num(value, 0, 2147483647);
        if (a->db != 0 || v < 0)
            return dlock__url_bad(e,
                                  "db= takes the master's database, a non-negative number, once");
        a->db = (int)v;
        return DLOCK_OK;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!span_is(name, names[i]))
            continue;
        if (i < TLS_PARAMS ? !a->tls : !a->sentinel)
            break;
        if (*slots[i] != NULL)
            return dlock__url_bad(e, "parameter \"%s\" given twice", names[i]);
        if (value.n == 0)
            return dlock__url_bad(e, "parameter \"%s\" has an empty value", names[i]);
        return decode(value, slots[i], names[i], e);
    }
    if (a->cluster && !a->tls)
        return dlock__url_bad(e,
                              "unknown parameter \"%.*s\" (redis-cluster:// takes none; "
                              "rediss-cluster:// takes cacert, cacertdir, cert, key, sni and "
                              "insecure)",
                              shown, name.p);
    if (!a->sentinel)
        return dlock__url_bad(e,
                              "unknown parameter \"%.*s\" (%s takes cacert, cacertdir, cert, key, "
                              "sni and insecure)",
                              shown, name.p, a->cluster ? "rediss-cluster://" : "rediss://");
    return dlock__url_bad(
        e,
        "unknown parameter \"%.*s\" (%s takes sentinel_user, sentinel_password and "
        "db%s)",
        shown, name.p, a->tls ? "rediss-sentinel://" : "redis-sentinel://",
        a->tls ? ", and cacert, cacertdir, cert, key, sni and insecure" : "");
}

/* The parameters of a URL: "name=value" pairs joined by '&'. */
static int parse_params(span q, dlock__addr *a, dlock__err *e)
{
    while (q.n > 0) {
        const char *amp = find(q, '&');
        span p = {q.p, amp ? (size_t)(amp - q.p) : q.n};
        if (p.n == 0)
            return dlock__url_bad(e, "empty parameter between '&'s");
        int rc = parse_param(p, a, e);
        if (rc != DLOCK_OK)
            return rc;
        q.p += p.n + (amp ? 1 : 0);
        q.n -= p.n + (amp ? 1 : 0);
    }
    /* A certificate is useless without its key, and the reverse. */
    if ((a->cert == NULL) != (a->key == NULL))
        return dlock__url_bad(e, "%s",
                              a->cert ? "cert= given without key=" : "key= given without cert=");
    return DLOCK_OK;
}

/* Parse the parameters after a '?' in *rest, if any, and cut them off it. */
static int take_params(span *rest, dlock__addr *a, dlock__err *e)
{
    const char *q = find(*rest, '?');
    if (q == NULL)
        return DLOCK_OK;
    span query = {q + 1, rest->n - (size_t)(q - rest->p) - 1};
    if (query.n == 0)
        return dlock__url_bad(e, "empty parameter list after '?'");
    rest->n = (size_t)(q - rest->p);
    return parse_params(query, a, e);
}

/* "host[:port]" or "[v6]:port" into a new string and a port. */
static int parse_hostport(span hostport, int default_port, char **host_out, int *port_out,
                          dlock__err *e)
{
    span host, port = {NULL, 0};

    if (hostport.n > 0 && hostport.p[0] == '[') {
        const char *close = find(hostport, ']');
        if (close == NULL)
            return dlock__url_bad(e, "IPv6 address without its closing ']'");
        host.p = hostport.p + 1;
        host.n = (size_t)(close - host.p);
        span after = {close + 1, hostport.n - host.n - 2};
        if (after.n > 0) {
            if (after.p[0] != ':')
                return dlock__url_bad(e, "unexpected text after the IPv6 address");
            port.p = after.p + 1;
            port.n = after.n - 1;
            if (port.n == 0)
                return dlock__url_bad(e, "empty port after ':'");
        }
        for (size_t i = 0; i < host.n; i++)
            if (!isxdigit((unsigned char)host.p[i]) && host.p[i] != ':' && host.p[i] != '.')
                return dlock__url_bad(e, "bad character in the IPv6 address");
    } else {
        const char *colon = find(hostport, ':');
        host.p = hostport.p;
        host.n = colon ? (size_t)(colon - hostport.p) : hostport.n;
        if (colon != NULL) {
            port.p = colon + 1;
            port.n = hostport.n - host.n - 1;
            if (port.n == 0)
                return dlock__url_bad(e, "empty port after ':'");
        }
        for (size_t i = 0; i < host.n; i++)
            if (!host_char_ok(host.p[i]))
                return dlock__url_bad(e, "bad character '%c' in the host name", host.p[i]);
    }
    if (host.n == 0)
        return dlock__url_bad(e, "missing host");
    if (host.n > 253)
        return dlock__url_bad(e, "host name longer than 253 characters");
    *port_out = default_port;
    if (port.p != NULL) {
        long v = parse_num(port, 1, 65535);
        if (v < 0)
            return dlock__url_bad(e, "port \"%.*s\" is not a number from 1 to 65535", (int)port.n,
                                  port.p);
        *port_out = (int)v;
    }
    if ((*host_out = dup_span(host)) == NULL)
        return DLOCK_ERR_NOMEM;
    return DLOCK_OK;
}

static int parse_redis(span rest, dlock__addr *a, dlock__err *e)
{
    int rc = parse_userinfo(&rest, a, true, e);
    if (rc != DLOCK_OK)
        return rc;
    const char *q = find(rest, '?');
    if (q != NULL && !a->tls && find((span){rest.p, (size_t)(q - rest.p)}, '/') == NULL)
        return dlock__url_bad(e, "parameters after '?' are for rediss:// (TLS) URLs only");
    if (a->tls && (rc = take_params(&rest, a, e)) != DLOCK_OK)
        return rc;
    const char *slash = find(rest, '/');
    span hostport = {rest.p, slash ? (size_t)(slash - rest.p) : rest.n};
    span path = {slash ? slash + 1 : rest.p + rest.n, slash ? rest.n - hostport.n - 1 : 0};
    if ((rc = parse_hostport(hostport, 6379, &a->host, &a->port, e)) != DLOCK_OK)
        return rc;
    if (path.n > 0) {
        long v = parse_num(path, 0, 2147483647);
        if (v < 0)
            return dlock__url_bad(e, "database \"%.*s\" is not a non-negative number",
                                  (int)(path.n > 40 ? 40 : path.n), path.p);
        a->db = (int)v;
    }
    return DLOCK_OK;
}

/* The master's name in a Sentinel URL's path: what a Sentinel's configuration calls
 * it ("sentinel monitor NAME ..."), which is one word. */
static int parse_master_name(span path, dlock__addr *a, dlock__err *e)
{
    if (path.n == 0)
        path = (span){"mymaster", 8}; /* the name in Redis's example sentinel.conf */
    int rc = decode(path, &a->master_name, "master name", e);
    if (rc != DLOCK_OK)
        return rc;
    size_t n = strlen(a->master_name);
    if (n > 128)
        return dlock__url_bad(e, "master name longer than 128 bytes");
    for (size_t i = 0; i < n; i++) {
        char ch = a->master_name[i];
        if (isalnum((unsigned char)ch) || strchr("-_.:", ch) != NULL)
            continue;
        char what[40] = "a space or a control character";
        if (isgraph((unsigned char)ch))
            snprintf(what, sizeof what, "'%c'", ch);
        return dlock__url_bad(
            e, "master name with %s: it may hold letters, digits, '-', '_', '.' and ':'", what);
    }
    return DLOCK_OK;
}

/* A Sentinel or cluster URL up to its path: the userinfo, the parameters, and the
 * comma-separated hosts (Sentinels, or a cluster's seeds) into a->hosts; what follows
 * the host part's '/' in *path. */
static int parse_host_list(span rest, int default_port, const char *what, dlock__addr *a,
                           span *path, dlock__err *e)
{
    int rc = parse_userinfo(&rest, a, true, e);
    if (rc != DLOCK_OK || (rc = take_params(&rest, a, e)) != DLOCK_OK)
        return rc;
    const char *slash = find(rest, '/');
    span hosts = {rest.p, slash ? (size_t)(slash - rest.p) : rest.n};
    *path = (span){slash ? slash + 1 : rest.p + rest.n, slash ? rest.n - hosts.n - 1 : 0};
    for (;;) {
        const char *comma = find(hosts, ',');
        span one = {hosts.p, comma ? (size_t)(comma - hosts.p) : hosts.n};
        /* "s1, s2" as people write lists, like the list of servers. */
        while (one.n > 0 && one.p[0] == ' ') {
            one.p++;
            one.n--;
        }
        while (one.n > 0 && one.p[one.n - 1] == ' ')
            one.n--;
        if (a->nhosts == DLOCK_HOSTS_MAX)
            return dlock__url_bad(e, "more than %d %s", DLOCK_HOSTS_MAX, what);
        struct dlock__hostport *hp = &a->hosts[a->nhosts];
        if ((rc = parse_hostport(one, default_port, &hp->host, &hp->port, e)) != DLOCK_OK)
            return rc;
        a->nhosts++;
        if (comma == NULL)
            return DLOCK_OK;
        hosts.n -= (size_t)(comma + 1 - hosts.p);
        hosts.p = comma + 1;
    }
}

static int parse_sentinel(span rest, dlock__addr *a, dlock__err *e)
{
    span path;
    int rc = parse_host_list(rest, DLOCK_SENTINEL_PORT, "Sentinels", a, &path, e);
    return rc != DLOCK_OK ? rc : parse_master_name(path, a, e);
}

/* A cluster's seeds: any of its nodes, each able to tell the slot map. */
static int parse_cluster(span rest, dlock__addr *a, dlock__err *e)
{
    span path;
    int rc = parse_host_list(rest, 6379, "seeds", a, &path, e);
    if (rc == DLOCK_OK && path.n > 0)
        rc = dlock__url_bad(e, "a Redis Cluster has only database 0: no /db");
    return rc;
}

static int parse_unix(span rest, dlock__addr *a, dlock__err *e)
{
    int rc = parse_userinfo(&rest, a, false, e);
    if (rc != DLOCK_OK)
        return rc;
    if (rest.n == 0)
        return dlock__url_bad(e, "missing socket path");
    if (rest.p[0] != '/')
        return dlock__url_bad(e, "the socket path must be absolute (unix:///path)");
    const char *q = find(rest, '?');
    span path = {rest.p, q ? (size_t)(q - rest.p) : rest.n};
    if (path.n >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return dlock__url_bad(e, "socket path longer than %zu bytes",
                              sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
    if (q != NULL) {
        span query = {q + 1, rest.n - path.n - 1};
        if (query.n < 3 || memcmp(query.p, "db=", 3) != 0)
            return dlock__url_bad(e, "the only query parameter is ?db=N");
        long v = parse_num((span){query.p + 3, query.n - 3}, 0, 2147483647);
        if (v < 0)
            return dlock__url_bad(e, "database in ?db= is not a non-negative number");
        a->db = (int)v;
    }
    if ((a->path = dup_span(path)) == NULL)
        return DLOCK_ERR_NOMEM;
    return DLOCK_OK;
}

/* Append fmt's output to the string in buf (size bytes), cut at its end. */
static void append(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t size, const char *fmt, ...)
{
    size_t used = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
}

/* "host:port", an IPv6 address in brackets. */
static void append_host(char *buf, size_t size, const char *host, int port)
{
    bool v6 = strchr(host, ':') != NULL;
    append(buf, size, "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

/* The URL with the password left out, for messages and dlock_errmsg. */
static int make_display(dlock__addr *a)
{
    /* The longest: eight Sentinels of 253-byte hosts, a user and a master name. */
    char buf[2600];
    if (a->is_unix) {
        snprintf(buf, sizeof buf, "unix://%s", a->path);
    } else {
        snprintf(buf, sizeof buf, "%s%s://%.64s%s", a->tls ? "rediss" : "redis",
                 a->sentinel  ? "-sentinel"
                 : a->cluster ? "-cluster"
                              : "",
                 a->user ? a->user : "", a->user ? "@" : "");
        for (int i = 0; i < a->nhosts; i++) {
            append(buf, sizeof buf, "%s", i ? "," : "");
            append_host(buf, sizeof buf, a->hosts[i].host, a->hosts[i].port);
        }
        if (a->sentinel)
            append(buf, sizeof buf, "/%s", a->master_name);
        else if (!a->cluster)
            append_host(buf, sizeof buf, a->host, a->port);
    }
    if (a->db != 0)
        append(buf, sizeof buf, a->is_unix || a->sentinel ? "?db=%d" : "/%d", a->db);
    a->display = dlock__strdup(buf);
    return a->display ? DLOCK_OK : DLOCK_ERR_NOMEM;
}

int dlock__url_parse(const char *url, size_t len, dlock__addr *out, dlock__err *e)
{
    memset(out, 0, sizeof *out);
    out->insecure = -1;
    static const struct {
        const char *name;
        bool tls, sentinel, is_unix, cluster;
    } schemes[] = {
        {"redis://", false, false, false, false},
        {"rediss://", true, false, false, false},
        {"unix://", false, false, true, false},
        {"redis-sentinel://", false, true, false, false},
        {"rediss-sentinel://", true, true, false, false},
        {"redis-cluster://", false, false, false, true},
        {"rediss-cluster://", true, false, false, true},
    };
    size_t n = dlock__url_scheme_len(url, len);
    int rc = dlock__url_bad(
        e, "unsupported scheme: expected redis://, rediss://, unix://, redis-sentinel://, "
           "rediss-sentinel://, redis-cluster://, rediss-cluster:// or file://");
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        if (n != strlen(schemes[i].name) || memcmp(url, schemes[i].name, n) != 0)
            continue;
        out->tls = schemes[i].tls;
        out->sentinel = schemes[i].sentinel;
        out->is_unix = schemes[i].is_unix;
        out->cluster = schemes[i].cluster;
        span rest = {url + n, len - n};
        rc = out->sentinel  ? parse_sentinel(rest, out, e)
             : out->cluster ? parse_cluster(rest, out, e)
             : out->is_unix ? parse_unix(rest, out, e)
                            : parse_redis(rest, out, e);
        break;
    }
    if (rc == DLOCK_OK)
        rc = make_display(out);
    if (rc != DLOCK_OK) {
        if (rc == DLOCK_ERR_NOMEM)
            dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
        dlock__addr_clear(out);
    }
    return rc;
}

void dlock__addr_clear(dlock__addr *a)
{
    if (a == NULL)
        return;
    free(a->host);
    free(a->path);
    free(a->user);
    if (a->password != NULL) {
        /* Do not leave the password in freed memory. */
        memset(a->password, 0, strlen(a->password));
        free(a->password);
    }
    free(a->display);
    free(a->cacert);
    free(a->cacertdir);
    free(a->cert);
    free(a->key);
    free(a->sni);
    free(a->master_name);
    for (int i = 0; i < a->nhosts; i++)
        free(a->hosts[i].host);
    free(a->sentinel_user);
    if (a->sentinel_password != NULL) {
        memset(a->sentinel_password, 0, strlen(a->sentinel_password));
        free(a->sentinel_password);
    }
    memset(a, 0, sizeof *a);
}
