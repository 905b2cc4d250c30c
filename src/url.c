/*
 * url.c: server addresses.
 *
 *   redis://[[user]:password@]host[:port][/db]
 *   rediss://[[user]:password@]host[:port][/db][?param=value&...]   (TLS; the
 *       parameters are cacert, cacertdir, cert, key, sni and insecure, named after
 *       redis-cli's flags; their files are opened by tls.c, not here)
 *   unix://[:password@]/path/to/socket[?db=N]
 *
 * The parser is pure (no I/O, no globals) so that unit tests and the fuzzer can drive
 * it directly. Every refusal names the part that is wrong, because a user staring at
 * "invalid URL" in a list of five servers has no way to tell which one and why.
 */
#include "internal.h"

#include <ctype.h>
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

static int bad(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int bad(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return DLOCK_ERR_INVALID;
}

static int hexval(char c)
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
static int decode(span s, char **out, const char *what, char *err, size_t errlen)
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
        int hi = i + 2 < s.n ? hexval(s.p[i + 1]) : -1;
        int lo = i + 2 < s.n ? hexval(s.p[i + 2]) : -1;
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
            free(d);
            return bad(err, errlen, "bad percent-encoding in the %s", what);
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

/* Split off "[user]:password@" from the front of *rest, if there is an '@' before
 * the first '/' (the host part cannot contain one). */
static int parse_userinfo(span *rest, dlock__addr *a, bool allow_user, char *err, size_t errlen)
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
            return bad(err, errlen, "expected \":password@\" before the socket path");
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
            return bad(err, errlen,
                       "'@' after the first '/': a '/' in a password must be written %%2F "
                       "(percent-encoded)");
    }
    if (at == NULL)
        return DLOCK_OK;
    span info = {head.p, (size_t)(at - head.p)};
    const char *colon = find(info, ':');
    if (colon == NULL)
        return bad(err, errlen,
                   "\"user@\" without a password is ambiguous: write \":password@\" for a "
                   "password alone, or \"user:password@\"");
    span user = {info.p, (size_t)(colon - info.p)};
    span pass = {colon + 1, info.n - user.n - 1};
    if (pass.n == 0)
        return bad(err, errlen, "empty password before '@'");
    int rc;
    if (user.n > 0 && (rc = decode(user, &a->user, "user name", err, errlen)) != DLOCK_OK)
        return rc;
    if ((rc = decode(pass, &a->password, "password", err, errlen)) != DLOCK_OK)
        return rc;
    rest->p = at + 1;
    rest->n -= info.n + 1;
    return DLOCK_OK;
}

static bool host_char_ok(char c)
{
    return isalnum((unsigned char)c) || c == '.' || c == '-' || c == '_';
}

/* One rediss:// parameter: "name=value", the value percent-decoded. */
static int parse_param(span p, dlock__addr *a, char *err, size_t errlen)
{
    const char *eq = find(p, '=');
    span name = {p.p, eq ? (size_t)(eq - p.p) : p.n};
    span value = {eq ? eq + 1 : p.p + p.n, eq ? p.n - name.n - 1 : 0};
    static const char *const names[] = {"cacert", "cacertdir", "cert", "key", "sni"};
    char **slots[] = {&a->cacert, &a->cacertdir, &a->cert, &a->key, &a->sni};
    int shown = (int)(name.n > 40 ? 40 : name.n);
    if (name.n == 8 && memcmp(name.p, "insecure", 8) == 0) {
        if (a->insecure >= 0)
            return bad(err, errlen, "parameter \"insecure\" given twice");
        if (value.n != 1 || (value.p[0] != '0' && value.p[0] != '1'))
            return bad(err, errlen, "insecure= takes 1 (do not verify the server) or 0");
        a->insecure = value.p[0] - '0';
        return DLOCK_OK;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strlen(names[i]) != name.n || memcmp(names[i], name.p, name.n) != 0)
            continue;
        if (*slots[i] != NULL)
            return bad(err, errlen, "parameter \"%s\" given twice", names[i]);
        if (value.n == 0)
            return bad(err, errlen, "parameter \"%s\" has an empty value", names[i]);
        return decode(value, slots[i], names[i], err, errlen);
    }
    return bad(err, errlen,
               "unknown parameter \"%.*s\" (rediss:// takes cacert, cacertdir, cert, key, sni "
               "and insecure)",
               shown, name.p);
}

/* The parameters of a rediss:// URL: "name=value" pairs joined by '&'. */
static int parse_params(span q, dlock__addr *a, char *err, size_t errlen)
{
    while (q.n > 0) {
        const char *amp = find(q, '&');
        span p = {q.p, amp ? (size_t)(amp - q.p) : q.n};
        if (p.n == 0)
            return bad(err, errlen, "empty parameter between '&'s");
        int rc = parse_param(p, a, err, errlen);
        if (rc != DLOCK_OK)
            return rc;
        q.p += p.n + (amp ? 1 : 0);
        q.n -= p.n + (amp ? 1 : 0);
    }
    /* A certificate is useless without its key, and the reverse. */
    if ((a->cert == NULL) != (a->key == NULL))
        return bad(err, errlen, "%s",
                   a->cert ? "cert= given without key=" : "key= given without cert=");
    return DLOCK_OK;
}

static int parse_redis(span rest, dlock__addr *a, char *err, size_t errlen)
{
    int rc = parse_userinfo(&rest, a, true, err, errlen);
    if (rc != DLOCK_OK)
        return rc;
    const char *q = find(rest, '?');
    if (q != NULL && !a->tls && find((span){rest.p, (size_t)(q - rest.p)}, '/') == NULL)
        return bad(err, errlen, "parameters after '?' are for rediss:// (TLS) URLs only");
    if (q != NULL && a->tls) {
        span query = {q + 1, rest.n - (size_t)(q - rest.p) - 1};
        if (query.n == 0)
            return bad(err, errlen, "empty parameter list after '?'");
        if ((rc = parse_params(query, a, err, errlen)) != DLOCK_OK)
            return rc;
        rest.n = (size_t)(q - rest.p);
    }
    const char *slash = find(rest, '/');
    span hostport = {rest.p, slash ? (size_t)(slash - rest.p) : rest.n};
    span path = {slash ? slash + 1 : rest.p + rest.n, slash ? rest.n - hostport.n - 1 : 0};
    span host, port = {NULL, 0};

    if (hostport.n > 0 && hostport.p[0] == '[') {
        const char *close = find(hostport, ']');
        if (close == NULL)
            return bad(err, errlen, "IPv6 address without its closing ']'");
        host.p = hostport.p + 1;
        host.n = (size_t)(close - host.p);
        span after = {close + 1, hostport.n - host.n - 2};
        if (after.n > 0) {
            if (after.p[0] != ':')
                return bad(err, errlen, "unexpected text after the IPv6 address");
            port.p = after.p + 1;
            port.n = after.n - 1;
            if (port.n == 0)
                return bad(err, errlen, "empty port after ':'");
        }
        for (size_t i = 0; i < host.n; i++)
            if (!isxdigit((unsigned char)host.p[i]) && host.p[i] != ':' && host.p[i] != '.')
                return bad(err, errlen, "bad character in the IPv6 address");
    } else {
        const char *colon = find(hostport, ':');
        host.p = hostport.p;
        host.n = colon ? (size_t)(colon - hostport.p) : hostport.n;
        if (colon != NULL) {
            port.p = colon + 1;
            port.n = hostport.n - host.n - 1;
            if (port.n == 0)
                return bad(err, errlen, "empty port after ':'");
        }
        for (size_t i = 0; i < host.n; i++)
            if (!host_char_ok(host.p[i]))
                return bad(err, errlen, "bad character '%c' in the host name", host.p[i]);
    }
    if (host.n == 0)
        return bad(err, errlen, "missing host");
    if (host.n > 253)
        return bad(err, errlen, "host name longer than 253 characters");
    a->port = 6379;
    if (port.p != NULL) {
        long v = parse_num(port, 1, 65535);
        if (v < 0)
            return bad(err, errlen, "port \"%.*s\" is not a number from 1 to 65535", (int)port.n,
                       port.p);
        a->port = (int)v;
    }
    if (path.n > 0) {
        long v = parse_num(path, 0, 2147483647);
        if (v < 0)
            return bad(err, errlen, "database \"%.*s\" is not a non-negative number",
                       (int)(path.n > 40 ? 40 : path.n), path.p);
        a->db = (int)v;
    }
    if ((a->host = dup_span(host)) == NULL)
        return DLOCK_ERR_NOMEM;
    return DLOCK_OK;
}

static int parse_unix(span rest, dlock__addr *a, char *err, size_t errlen)
{
    int rc = parse_userinfo(&rest, a, false, err, errlen);
    if (rc != DLOCK_OK)
        return rc;
    if (rest.n == 0)
        return bad(err, errlen, "missing socket path");
    if (rest.p[0] != '/')
        return bad(err, errlen, "the socket path must be absolute (unix:///path)");
    const char *q = find(rest, '?');
    span path = {rest.p, q ? (size_t)(q - rest.p) : rest.n};
    if (path.n >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return bad(err, errlen, "socket path longer than %zu bytes",
                   sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
    if (q != NULL) {
        span query = {q + 1, rest.n - path.n - 1};
        if (query.n < 3 || memcmp(query.p, "db=", 3) != 0)
            return bad(err, errlen, "the only query parameter is ?db=N");
        long v = parse_num((span){query.p + 3, query.n - 3}, 0, 2147483647);
        if (v < 0)
            return bad(err, errlen, "database in ?db= is not a non-negative number");
        a->db = (int)v;
    }
    if ((a->path = dup_span(path)) == NULL)
        return DLOCK_ERR_NOMEM;
    return DLOCK_OK;
}

/* The URL with the password left out, for messages and dlock_errmsg. */
static int make_display(dlock__addr *a)
{
    char buf[600];
    const char *user = a->user ? a->user : "";
    const char *at = a->user ? "@" : "";
    const char *scheme = a->tls ? "rediss" : "redis";
    if (a->is_unix)
        snprintf(buf, sizeof buf, "unix://%s", a->path);
    else if (strchr(a->host, ':') != NULL)
        snprintf(buf, sizeof buf, "%s://%.64s%s[%s]:%d", scheme, user, at, a->host, a->port);
    else
        snprintf(buf, sizeof buf, "%s://%.64s%s%s:%d", scheme, user, at, a->host, a->port);
    if (a->db != 0) {
        size_t used = strlen(buf);
        snprintf(buf + used, sizeof buf - used, a->is_unix ? "?db=%d" : "/%d", a->db);
    }
    a->display = dlock__strdup(buf);
    return a->display ? DLOCK_OK : DLOCK_ERR_NOMEM;
}

int dlock__url_parse(const char *url, size_t len, dlock__addr *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->insecure = -1;
    span s = {url, len};
    static const char redis[] = "redis://", rediss[] = "rediss://", unix_[] = "unix://";
    int rc;
    if (len >= sizeof rediss - 1 && memcmp(url, rediss, sizeof rediss - 1) == 0) {
        s.p += sizeof rediss - 1;
        s.n -= sizeof rediss - 1;
        out->tls = true;
        rc = parse_redis(s, out, err, errlen);
    } else if (len >= sizeof redis - 1 && memcmp(url, redis, sizeof redis - 1) == 0) {
        s.p += sizeof redis - 1;
        s.n -= sizeof redis - 1;
        rc = parse_redis(s, out, err, errlen);
    } else if (len >= sizeof unix_ - 1 && memcmp(url, unix_, sizeof unix_ - 1) == 0) {
        s.p += sizeof unix_ - 1;
        s.n -= sizeof unix_ - 1;
        out->is_unix = true;
        rc = parse_unix(s, out, err, errlen);
    } else {
        rc = bad(err, errlen,
                 "unsupported scheme: expected redis://, rediss://, unix:// or file://");
    }
    if (rc == DLOCK_OK)
        rc = make_display(out);
    if (rc != DLOCK_OK) {
        if (rc == DLOCK_ERR_NOMEM)
            snprintf(err, errlen, "out of memory");
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
    memset(a, 0, sizeof *a);
}

int dlock__url_parse_list(const char *list, int max, dlock__addr **out, int *n, char *err,
                          size_t errlen)
{
    *out = NULL;
    *n = 0;
    int count = 1;
    for (const char *p = list; *p; p++)
        count += *p == ',';
    if (count > max)
        return bad(err, errlen, "%d servers given, at most %d are supported", count, max);
    dlock__addr *addrs = dlock__calloc((size_t)count, sizeof *addrs);
    if (addrs == NULL)
        return DLOCK_ERR_NOMEM;
    const char *p = list;
    for (int i = 0; i < count; i++) {
        const char *end = strchr(p, ',');
        if (end == NULL)
            end = p + strlen(p);
        /* Allow "a, b" as people write lists, but nothing else around a URL. */
        while (p < end && *p == ' ')
            p++;
        size_t len = (size_t)(end - p);
        while (len > 0 && p[len - 1] == ' ')
            len--;
        char sub[400];
        int rc = len == 0 ? bad(sub, sizeof sub, "empty address")
                          : dlock__url_parse(p, len, &addrs[i], sub, sizeof sub);
        if (rc != DLOCK_OK) {
            if (count > 1)
                snprintf(err, errlen, "server %d of %d: %s", i + 1, count, sub);
            else
                snprintf(err, errlen, "%s", sub);
            for (int j = 0; j < i; j++)
                dlock__addr_clear(&addrs[j]);
            free(addrs);
            return rc;
        }
        p = *end ? end + 1 : end;
    }
    /* The same server twice would vote twice: a quorum of one server's say. (The same
     * server under two names, or two addresses, cannot be told here.) */
    for (int i = 1; i < count; i++) {
        for (int j = 0; j < i; j++) {
            const dlock__addr *a = &addrs[i], *b = &addrs[j];
            bool same = a->is_unix == b->is_unix &&
                        (a->is_unix ? strcmp(a->path, b->path) == 0
                                    : a->port == b->port && strcasecmp(a->host, b->host) == 0);
            if (!same)
                continue;
            int rc = bad(err, errlen,
                         "servers %d and %d are the same server (%s): each must be a server "
                         "of its own, or it votes twice",
                         j + 1, i + 1, b->display);
            for (int k = 0; k < count; k++)
                dlock__addr_clear(&addrs[k]);
            free(addrs);
            return rc;
        }
    }
    *out = addrs;
    *n = count;
    return DLOCK_OK;
}
