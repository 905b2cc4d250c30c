/*
 * url_list.c: a list of server addresses, as dlock_client_new takes it: where one
 * entry ends (at a comma, unless it lists a Sentinel URL's Sentinels or a cluster
 * URL's seeds: a scheme after it tells), and the refusal of one server named twice,
 * which would vote twice. Each entry is parsed by url.c.
 */
#include "base.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

size_t dlock__url_scheme_len(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.'))
        i++;
    return i > 0 && isalpha((unsigned char)s[0]) && n - i >= 3 && memcmp(s + i, "://", 3) == 0
               ? i + 3
               : 0;
}

/* Whether a and b name the same server: the same address, the master of the same
 * name as one of the same Sentinels sees it, or a cluster with a seed in common. */
static bool same_server(const dlock__addr *a, const dlock__addr *b)
{
    if (a->is_unix != b->is_unix || a->sentinel != b->sentinel || a->cluster != b->cluster)
        return false;
    if (a->is_unix)
        return strcmp(a->path, b->path) == 0;
    if (!a->sentinel && !a->cluster)
        return a->port == b->port && strcasecmp(a->host, b->host) == 0;
    if (a->sentinel && strcmp(a->master_name, b->master_name) != 0)
        return false;
    for (int i = 0; i < a->nhosts; i++)
        for (int j = 0; j < b->nhosts; j++)
            if (a->hosts[i].port == b->hosts[j].port &&
                strcasecmp(a->hosts[i].host, b->hosts[j].host) == 0)
                return true;
    return false;
}

/* The comma that ends the list's entry at p, or its terminating NUL. Commas separate
 * servers, except in a Sentinel or cluster URL's host part, where they separate its
 * Sentinels or seeds unless a scheme follows. */
static const char *entry_end(const char *p)
{
    while (*p == ' ')
        p++;
    size_t n = dlock__url_scheme_len(p, strlen(p));
    bool host_list = (n >= 12 && memcmp(p + n - 12, "-sentinel://", 12) == 0) ||
                     (n >= 11 && memcmp(p + n - 11, "-cluster://", 11) == 0);
    for (const char *q = p + n; *q != '\0'; q++) {
        if (*q == '/' || *q == '?')
            host_list = false;
        if (*q != ',')
            continue;
        const char *next = q + 1;
        while (*next == ' ')
            next++;
        if (!host_list || dlock__url_scheme_len(next, strlen(next)) > 0)
            return q;
    }
    return p + strlen(p);
}

int dlock__url_parse_list(const char *list, int max, dlock__addr **out, int *n, dlock__err *e)
{
    *out = NULL;
    *n = 0;
    int count = 1;
    for (const char *p = list; *(p = entry_end(p)) != '\0'; p++)
        count++;
    if (count > max)
        return dlock__url_bad(e, "%d servers given, at most %d are supported", count, max);
    dlock__addr *addrs = dlock__calloc((size_t)count, sizeof *addrs);
    if (addrs == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    const char *p = list;
    for (int i = 0; i < count; i++) {
        const char *end = entry_end(p);
        /* Allow "a, b" as people write lists, but nothing else around a URL. */
        while (p < end && *p == ' ')
            p++;
        size_t len = (size_t)(end - p);
        while (len > 0 && p[len - 1] == ' ')
            len--;
        dlock__err sub;
        int rc = len == 0 ? dlock__url_bad(&sub, "empty address")
                          : dlock__url_parse(p, len, &addrs[i], &sub);
        if (rc != DLOCK_OK) {
            if (count > 1)
                dlock__err_set(e, rc, "server %d of %d: %s", i + 1, count, sub.msg);
            else
                dlock__err_set(e, rc, "%s", sub.msg);
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
            const dlock__addr *b = &addrs[j];
            if (!same_server(&addrs[i], b))
                continue;
            int rc =
                dlock__url_bad(e,
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
