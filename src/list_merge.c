/*
 * list_merge.c: one name's views, one per server, merged into what dlock_list says of
 * it, as dlock_inspect merges a name's views: the exclusive holder a quorum of servers
 * agrees on, with the quorum-th longest lease; or the shared holders and permits, each
 * listed when a quorum lists its token. With one server, its view as it is.
 */
#include "list.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

int dlock__list_cmp(const void *a, const void *b)
{
    const dlock__list_rec *x = a, *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int d = memcmp(x->name, y->name, n);
    if (d != 0)
        return d;
    if (x->name_len != y->name_len)
        return x->name_len < y->name_len ? -1 : 1;
    return (x->node > y->node) - (x->node < y->node);
}

static int cmp_desc(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x < y) - (x > y);
}

/* The quorum-th largest of the m values in p (a lease of -1, none, counts as the
 * longest): what a quorum agrees on at least; -2 when fewer than a quorum have one. */
static long long quorum_of(const dlock_client *c, long long *p, int m)
{
    int quorum = c->quorum > 0 ? c->quorum : 1; /* a file:// client has one "server" */
    if (m < quorum)
        return -2;
    for (int i = 0; i < m; i++)
        if (p[i] == -1)
            p[i] = LLONG_MAX;
    qsort(p, (size_t)m, sizeof *p, cmp_desc);
    return p[quorum - 1] == LLONG_MAX ? -1 : p[quorum - 1];
}

/* The token of an exclusive holder's value, or its whole value when another tool wrote
 * it: what nodes must agree on. */
/* Whether s (at least DLOCK_TOKEN_LEN bytes) starts with a token: lowercase hex. */
static bool is_token(const char *s)
{
    for (int i = 0; i < DLOCK_TOKEN_LEN; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

static size_t holder_key_len(const dlock__list_rec *r)
{
    bool ours = r->value_len >= DLOCK_TOKEN_LEN &&
                (r->value_len == DLOCK_TOKEN_LEN || r->value[DLOCK_TOKEN_LEN] == ' ') &&
                is_token(r->value);
    return ours ? DLOCK_TOKEN_LEN : r->value_len;
}

static bool is_shared(const dlock__list_rec *r)
{
    return r->value_len == 6 && memcmp(r->value, "shared", 6) == 0;
}

/* The exclusive holder a quorum of g[0..n) agrees on into it->entry; false if none. */
static bool merge_exclusive(dlock_lister *it, const dlock__list_rec *g, int n)
{
    for (int a = 0; a < n; a++) {
        if (is_shared(&g[a]))
            continue;
        size_t klen = holder_key_len(&g[a]);
        long long leases[DLOCK_SERVERS_MAX];
        int m = 0;
        for (int b = 0; b < n && m < DLOCK_SERVERS_MAX; b++)
            if (!is_shared(&g[b]) && holder_key_len(&g[b]) == klen &&
                memcmp(g[b].value, g[a].value, klen) == 0)
                leases[m++] = g[b].pttl;
        long long left = quorum_of(it->c, leases, m);
        if (left == -2)
            continue;
        dlock_holder *h = &it->holders[0];
        memset(h, 0, sizeof *h);
        h->held = 1;
        h->remaining_ms = left;
        const char *desc = g[a].value;
        size_t dlen = g[a].value_len;
        if (klen == DLOCK_TOKEN_LEN) {
            memcpy(h->token, g[a].value, DLOCK_TOKEN_LEN);
            desc += dlen > DLOCK_TOKEN_LEN ? DLOCK_TOKEN_LEN + 1 : DLOCK_TOKEN_LEN;
            dlen -= (size_t)(desc - g[a].value);
        }
        dlock__copy_text(h->description, sizeof h->description, desc, dlen);
        it->entry.kind = DLOCK_KIND_EXCLUSIVE;
        it->entry.remaining_ms = left;
        it->entry.nholders = 1;
        it->entry.nlisted = 1;
        return true;
    }
    return false;
}

/* The shared holders a quorum of g[0..n) agrees on into it->entry; false if none. */
static bool merge_shared(dlock_lister *it, const dlock__list_rec *g, int n)
{
    long long leases[DLOCK_SERVERS_MAX], counts[DLOCK_SERVERS_MAX];
    int m = 0;
    long long limit = 0;
    for (int a = 0; a < n && m < DLOCK_SERVERS_MAX; a++) {
        if (!is_shared(&g[a]))
            continue;
        leases[m] = g[a].pttl;
        counts[m++] = g[a].count;
        if (g[a].limit > limit)
            limit = g[a].limit;
    }
    long long left = quorum_of(it->c, leases, m);
    if (left == -2)
        return false;
    it->entry.remaining_ms = left;
    long long total = quorum_of(it->c, counts, m);
    it->entry.nholders = total > 0 ? total : 0;
    it->entry.kind =
        limit > 0 && limit < DLOCK_PERMITS_MAX ? DLOCK_KIND_SEMAPHORE : DLOCK_KIND_SHARED;
    it->entry.permits = it->entry.kind == DLOCK_KIND_SEMAPHORE ? limit : 0;
    /* Each listed token, with the lease a quorum of the nodes that list it gives it. */
    int k = 0;
    for (int a = 0; a < n && k < LISTED_MAX; a++) {
        const char *p = g[a].listed, *end = p + g[a].listed_len;
        for (int j = 0; j < g[a].nlisted && k < LISTED_MAX; j++) {
            const char *tok, *ms, *desc;
            size_t tlen, mlen, dlen;
            if (!dlock__list_field(&p, end, &tok, &tlen) ||
                !dlock__list_field(&p, end, &ms, &mlen) ||
                !dlock__list_field(&p, end, &desc, &dlen) || tlen != DLOCK_TOKEN_LEN ||
                !is_token(tok))
                break;
            bool seen = false;
            for (int q = 0; q < k && !seen; q++)
                seen = memcmp(it->holders[q].token, tok, DLOCK_TOKEN_LEN) == 0;
            if (seen)
                continue;
            long long l[DLOCK_SERVERS_MAX];
            int ml = 0;
            for (int b = 0; b < n && ml < DLOCK_SERVERS_MAX; b++) {
                const char *pb = g[b].listed, *eb = pb + g[b].listed_len;
                for (int jb = 0; is_shared(&g[b]) && jb < g[b].nlisted && ml < DLOCK_SERVERS_MAX;
                     jb++) {
                    const char *t2, *m2, *d2;
                    size_t t2l, m2l, d2l;
                    if (!dlock__list_field(&pb, eb, &t2, &t2l) ||
                        !dlock__list_field(&pb, eb, &m2, &m2l) ||
                        !dlock__list_field(&pb, eb, &d2, &d2l))
                        break;
                    if (t2l == tlen && memcmp(t2, tok, tlen) == 0)
                        l[ml++] = dlock__list_ll(m2, m2l);
                }
            }
            long long hl = quorum_of(it->c, l, ml);
            if (hl == -2)
                continue;
            dlock_holder *h = &it->holders[k++];
            memset(h, 0, sizeof *h);
            h->held = 1;
            memcpy(h->token, tok, DLOCK_TOKEN_LEN);
            dlock__copy_text(h->description, sizeof h->description, desc, dlen);
            h->remaining_ms = hl;
        }
    }
    it->entry.nlisted = k;
    return true;
}

bool dlock__list_merge(dlock_lister *it, const dlock__list_rec *g, int n)
{
    return merge_exclusive(it, g, n) || merge_shared(it, g, n);
}
