/*
 * list.c: dlock_list, every name held now on the servers, for operators (`dlock list`,
 * dlockd's LOCKS).
 *
 * Each server is walked with SCAN (never KEYS, which would stop a server holding
 * millions of keys for as long as it takes), by one read-only script per page (LIST,
 * scripts_list.c): it scans the lock keys (P{*}, keys.c's layout) and, for each, reads
 * in the same call what `dlock status` shows (the value, the lease, the fence, the
 * queue, the shared holders), so a page costs one round trip whatever its size. A
 * Redis Cluster is walked master by master (SCAN sees only the keys of the node it
 * runs on), each page on a connection of its own (ask.c), as the doctor asks every
 * master.
 *
 * A page's reply is bounded (the transport takes replies of at most
 * DLOCK_REPLY_MAX_BYTES): the script stops adding names once PAGE_BUDGET bytes are
 * written and says how many of the page's keys it took, and the next call scans the
 * same cursor again and skips them. Values and descriptions are cut short in the
 * script, so that one name never outgrows the reply by itself.
 *
 * Every name seen is kept (its page's reply holds its bytes), then sorted by name;
 * with N > 1 servers the views of a name are merged as dlock_inspect merges them: a
 * name is listed when a quorum holds it, with the lease a quorum still gives it.
 * Names are matched against the caller's glob here, after decoding (keys.c writes
 * some names in hex), not by SCAN's MATCH.
 */
#include "list.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGE_COUNT  "200"    /* SCAN's COUNT: keys a page looks at */
#define PAGE_BUDGET "180000" /* bytes a page's reply may reach before it stops */
#define VALUE_MAX   "1024"   /* bytes of a lock's value kept */
#define DESC_MAX    "512"    /* bytes of a shared holder's description kept */
#define LISTED_MAX  DLOCK_LIST_HOLDERS_MAX

/* One "<length>:<bytes>" field at *p (before end): its bytes and length; advances *p.
 * False when malformed. */
bool dlock__list_field(const char **p, const char *end, const char **s, size_t *len)
{
    /* Read within end: a file:// client's records are not NUL-terminated. */
    const char *q = *p;
    size_t n = 0;
    while (q < end && *q >= '0' && *q <= '9' && n <= (size_t)(end - *p))
        n = 10 * n + (size_t)(*q++ - '0');
    if (q == *p || q >= end || *q != ':' || n > (size_t)(end - q - 1))
        return false;
    *s = q + 1;
    *len = n;
    *p = q + 1 + n;
    return true;
}

long long dlock__list_ll(const char *s, size_t len)
{
    char buf[32];
    if (len == 0 || len >= sizeof buf)
        return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *e;
    long long v = strtoll(buf, &e, 10);
    return *e == '\0' ? v : 0;
}

static bool int_field(const char **p, const char *end, long long *v)
{
    const char *s;
    size_t len;
    if (!dlock__list_field(p, end, &s, &len) || len == 0 || len >= 32)
        return false;
    *v = dlock__list_ll(s, len);
    return *v != 0 || (len == 1 && s[0] == '0');
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The name of a lock key "<prefix>{<tag>}", decoded as keys.c encodes it: 1, or 0 for a
 * key of another shape: another prefix's, a tag no name of ours is written as (keys.c's
 * encoding is one-to-one: hex in lowercase, and only for a name that begins with '}' or
 * '%'), a name longer than DLOCK_NAME_MAX; -1 when out of memory. */
static int key_name(const dlock_client *c, const char *key, size_t len, dlock__list_rec *r)
{
    size_t pl = c->prefix_len;
    if (len < pl + 3 || memcmp(key, c->prefix, pl) != 0 || key[pl] != '{' || key[len - 1] != '}')
        return 0;
    const char *tag = key + pl + 1;
    size_t tlen = len - pl - 2;
    if (tag[0] != '%') {
        if (tag[0] == '}' || tlen > DLOCK_NAME_MAX || memchr(tag, '\0', tlen) != NULL)
            return 0;
        r->name = tag;
        r->name_len = tlen;
        return 1;
    }
    size_t n = (tlen - 1) / 2;
    if (tlen < 3 || tlen % 2 == 0 || n > DLOCK_NAME_MAX)
        return 0;
    char *name = dlock__malloc(n + 1);
    if (name == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int hi = hex_digit(tag[1 + 2 * i]), lo = hex_digit(tag[2 + 2 * i]);
        if (hi < 0 || lo < 0 || (hi | lo) == 0) {
            free(name);
            return 0;
        }
        name[i] = (char)(16 * hi + lo);
    }
    name[n] = '\0';
    if (name[0] != '}' && name[0] != '%') {
        free(name);
        return 0;
    }
    r->name = r->owned = name;
    r->name_len = n;
    return 1;
}

/* Whose records these are, for messages. */
static const char *where(const dlock_lister *it, int node)
{
    return it->c->backend->where(it->c, node);
}

const char *dlock__redis_where(const dlock_client *c, int node)
{
    return c->nodes[node].addr.display;
}

int dlock__list_take_page(dlock_lister *it, int node, const char *blob, size_t len, dlock__err *e)
{
    const char *p = blob, *end = blob + len;
    while (p < end) {
        dlock__list_rec r;
        memset(&r, 0, sizeof r);
        r.node = node;
        const char *key, *limit;
        size_t key_len, limit_len;
        long long fence, nlisted;
        if (!dlock__list_field(&p, end, &key, &key_len) ||
            !dlock__list_field(&p, end, &r.value, &r.value_len) || !int_field(&p, end, &r.pttl) ||
            !int_field(&p, end, &fence) || !int_field(&p, end, &r.queue) ||
            !dlock__list_field(&p, end, &limit, &limit_len) || !int_field(&p, end, &r.count) ||
            !int_field(&p, end, &nlisted) || nlisted < 0 || nlisted > LISTED_MAX)
            return dlock__err_set(e, DLOCK_ERR_PROTOCOL, "%s: list: malformed reply",
                                  where(it, node));
        r.fence = fence > 0 ? (uint64_t)fence : 0;
        r.limit = dlock__list_ll(limit, limit_len);
        r.listed = p;
        r.nlisted = (int)nlisted;
        for (long long j = 0; j < 3 * nlisted; j++) {
            const char *s;
            size_t slen;
            if (!dlock__list_field(&p, end, &s, &slen))
                return dlock__err_set(e, DLOCK_ERR_PROTOCOL, "%s: list: malformed reply",
                                      where(it, node));
        }
        r.listed_len = (size_t)(p - r.listed);
        int named = key_name(it->c, key, key_len, &r);
        if (named < 0)
            return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
        if (named == 0)
            continue;
        if (!dlock__glob_match(it->pattern, strlen(it->pattern), r.name, r.name_len)) {
            free(r.owned);
            continue;
        }
        if (it->nrecs == it->cap_recs) {
            size_t cap = it->cap_recs ? 2 * it->cap_recs : 256;
            dlock__list_rec *grown = dlock__realloc(it->recs, cap * sizeof *grown);
            if (grown == NULL) {
                free(r.owned);
                return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
            }
            it->recs = grown;
            it->cap_recs = cap;
        }
        it->recs[it->nrecs++] = r;
    }
    return DLOCK_OK;
}

/* Where the walk of one server (or one master of a cluster) is. */
typedef struct walk {
    char cursor[32];
    long long skip;
    char sig[41];     /* the page's signature while skipping into it */
    unsigned repeats; /* pages in a row at the same cursor */
    bool done;
} walk;

/* Pages in a row at one cursor: a page has at most about PAGE_COUNT keys, one taken a
 * page at least; a server that says more is not making progress. */
#define REPEATS_MAX 65536

/* The EVAL of w's next page: its arguments into argv (PAGE_ARGC), with the numbers
 * written in skip and most. */
#define PAGE_ARGC 13
static void page_argv(const dlock_client *c, const char *match, const walk *w,
                      const char *argv[PAGE_ARGC], char nums[3][24])
{
    snprintf(nums[0], 24, "%lld", w->skip);
    snprintf(nums[1], 24, "%d", LISTED_MAX);
    snprintf(nums[2], 24, "%zu", c->prefix_len + 2 * (size_t)DLOCK_NAME_MAX + 3);
    const char *a[PAGE_ARGC] = {"EVAL",     dlock__list_lua, "0",         w->cursor, match,
                                PAGE_COUNT, nums[0],         PAGE_BUDGET, nums[1],   VALUE_MAX,
                                DESC_MAX,   nums[2],         w->sig};
    memcpy(argv, a, sizeof a);
}

/* A page's reply (r->reply, taken into it->pages) into w and the records. */
static int take_reply(dlock_lister *it, int node, dlock__req *r, walk *w, dlock__err *e)
{
    const char *display = it->c->nodes[node].addr.display;
    if (r->err != DLOCK_OK)
        return dlock__err_set(e, r->err, "%s", r->why.msg);
    redisReply *rep = r->reply;
    if (rep->type == REDIS_REPLY_ERROR)
        return dlock__err_set(e, dlock__server_error_code(rep->str, rep->len), "%s: list: %s",
                              display, rep->str);
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 4 ||
        rep->element[0]->type != REDIS_REPLY_STRING || rep->element[0]->len >= sizeof w->cursor ||
        rep->element[1]->type != REDIS_REPLY_INTEGER || rep->element[1]->integer < 0 ||
        rep->element[2]->type != REDIS_REPLY_STRING ||
        rep->element[3]->type != REDIS_REPLY_STRING || rep->element[3]->len >= sizeof w->sig)
        return dlock__err_set(e, DLOCK_ERR_PROTOCOL, "%s: list: unexpected reply shape", display);
    bool same = strlen(w->cursor) == rep->element[0]->len &&
                memcmp(w->cursor, rep->element[0]->str, rep->element[0]->len) == 0;
    w->repeats = same ? w->repeats + 1 : 0;
    if (w->repeats > REPEATS_MAX)
        return dlock__err_set(e, DLOCK_ERR_PROTOCOL,
                              "%s: list: %u pages in a row at cursor %s: no progress", display,
                              w->repeats, w->cursor);
    if (it->npages == it->cap_pages) {
        size_t cap = it->cap_pages ? 2 * it->cap_pages : 64;
        redisReply **grown = dlock__realloc(it->pages, cap * sizeof *grown);
        if (grown == NULL)
            return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
        it->pages = grown;
        it->cap_pages = cap;
    }
    it->pages[it->npages++] = rep;
    r->reply = NULL;
    memcpy(w->cursor, rep->element[0]->str, rep->element[0]->len + 1);
    w->skip = rep->element[1]->integer;
    memcpy(w->sig, rep->element[3]->str, rep->element[3]->len + 1);
    w->done = strcmp(w->cursor, "0") == 0 && w->skip == 0;
    return dlock__list_take_page(it, node, rep->element[2]->str, rep->element[2]->len, e);
}

/* Read cluster node i's slot map afresh (a listing must not miss a master a failover
 * or a new node made): marked stale, the map is read again when a request is routed. */
static int fresh_map(dlock_client *c, int i, dlock__err *e)
{
    static const char PING[] = "*1\r\n$4\r\nPING\r\n";
    dlock__cluster_suspect(&c->nodes[i]);
    dlock__connset *set = dlock__connset_get(c);
    if (set == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    dlock__req reqs[DLOCK_SERVERS_MAX];
    memset(reqs, 0, sizeof reqs);
    reqs[i].cmd = PING;
    reqs[i].cmdlen = sizeof PING - 1;
    reqs[i].await = true;
    reqs[i].harmless_late = true;
    dlock__fanout(set->conns, reqs, c->n);
    int rc = reqs[i].err;
    if (rc != DLOCK_OK)
        dlock__err_set(e, rc, "%s", reqs[i].why.msg);
    freeReplyObject(reqs[i].reply);
    dlock__connset_put(c, set);
    return rc;
}

/* Walk every master of cluster node i, each on a connection of its own. */
static int walk_cluster(dlock_lister *it, int i, const char *match, dlock__err *e)
{
    dlock__node *node = &it->c->nodes[i];
    int frc = fresh_map(it->c, i, e);
    if (frc != DLOCK_OK)
        return frc;
    /* Asked one at a time: as many as cluster.c keeps track of. */
    enum { MASTERS = 64 };
    struct dlock__hostport hosts[MASTERS];
    char names[MASTERS][256];
    int k = dlock__cluster_masters(node, hosts, names, MASTERS);
    if (k > MASTERS)
        return dlock__err_set(e, DLOCK_ERR_UNAVAILABLE, "%s: more than %d masters to list",
                              node->addr.display, MASTERS);
    if (k == 0)
        return dlock__err_set(e, DLOCK_ERR_UNAVAILABLE, "%s: no master serves slots yet",
                              node->addr.display);
    int rc = DLOCK_OK;
    for (int m = 0; m < k && rc == DLOCK_OK; m++) {
        walk w = {.cursor = "0"};
        while (rc == DLOCK_OK && !w.done) {
            char nums[3][24];
            const char *argv[PAGE_ARGC];
            page_argv(it->c, match, &w, argv, nums);
            dlock__ask ask;
            dlock__ask_spec spec = {.from = node,
                                    .hosts = &hosts[m],
                                    .k = 1,
                                    .what = "master",
                                    .user = node->addr.user,
                                    .password = dlock__node_password(node),
                                    .tls_name = node->tls_name,
                                    .argc = PAGE_ARGC,
                                    .argv = argv};
            rc = dlock__ask_run(&ask, &spec, e);
            if (rc == DLOCK_OK)
                rc = take_reply(it, i, &ask.reqs[0], &w, e);
            dlock__ask_end(&ask);
        }
    }
    return rc;
}

/* Walk every server that is not a cluster at once, a page of each per round trip, on
 * a connection set from the pool; failed[i] says which could not be walked (the
 * reason in e). */
static int walk_nodes(dlock_lister *it, const char *match, bool *failed, int *last, dlock__err *e)
{
    dlock_client *c = it->c;
    dlock__connset *set = dlock__connset_get(c);
    if (set == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    walk w[DLOCK_SERVERS_MAX];
    char *cmd[DLOCK_SERVERS_MAX];
    dlock__req reqs[DLOCK_SERVERS_MAX];
    for (int i = 0; i < c->n; i++)
        w[i] = (walk){.cursor = "0", .done = c->nodes[i].cluster != NULL};
    int rc = DLOCK_OK;
    for (bool more = true; more && rc == DLOCK_OK;) {
        more = false;
        memset(reqs, 0, sizeof reqs);
        for (int i = 0; i < c->n; i++)
            cmd[i] = NULL;
        for (int i = 0; i < c->n && rc == DLOCK_OK; i++) {
            if (w[i].done || failed[i])
                continue;
            char nums[3][24];
            const char *argv[PAGE_ARGC];
            page_argv(c, match, &w[i], argv, nums);
            int len = redisFormatCommandArgv(&cmd[i], PAGE_ARGC, argv, NULL);
            if (len < 0) {
                cmd[i] = NULL;
                rc = dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
                break;
            }
            reqs[i].cmd = cmd[i];
            reqs[i].cmdlen = (size_t)len;
            reqs[i].await = true;
            reqs[i].harmless_late = true; /* it only reads */
        }
        if (rc == DLOCK_OK)
            dlock__fanout(set->conns, reqs, c->n);
        for (int i = 0; i < c->n; i++) {
            if (cmd[i] == NULL)
                continue;
            redisFreeCommand(cmd[i]);
            if (rc == DLOCK_OK) {
                dlock__err ne;
                int nrc = take_reply(it, i, &reqs[i], &w[i], &ne);
                if (nrc == DLOCK_ERR_NOMEM) {
                    *e = ne;
                    rc = nrc;
                } else if (nrc != DLOCK_OK) {
                    failed[i] = true;
                    *last = nrc;
                    *e = ne;
                }
                more |= !w[i].done && !failed[i];
            }
            freeReplyObject(reqs[i].reply);
        }
    }
    dlock__connset_put(c, set);
    return rc;
}

/* Sort the records by name and server, keeping one per (name, server): SCAN may return
 * a key twice, and a page taken whole again returns its keys again. */
static void sort_unique(dlock_lister *it)
{
    if (it->nrecs < 2)
        return; /* and qsort must not be given recs when it is NULL */
    qsort(it->recs, it->nrecs, sizeof *it->recs, dlock__list_cmp);
    size_t kept = 0;
    for (size_t i = 0; i < it->nrecs; i++) {
        if (kept > 0 && dlock__list_cmp(&it->recs[kept - 1], &it->recs[i]) == 0) {
            free(it->recs[i].owned);
            continue;
        }
        it->recs[kept++] = it->recs[i];
    }
    it->nrecs = kept;
}

int dlock_list(dlock_client *c, const char *pattern, dlock_lister **out)
{
    dlock__err e;
    if (out != NULL)
        *out = NULL;
    int rc = dlock__client_enter(c, &e);
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    if (out == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "out is NULL");
    if (pattern == NULL)
        pattern = "*";
    if (strlen(pattern) > DLOCK_NAME_MAX)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "the pattern is longer than %d bytes",
                            DLOCK_NAME_MAX);
    dlock_lister *it = dlock__calloc(1, sizeof *it);
    if (it == NULL || (it->pattern = dlock__strdup(pattern)) == NULL) {
        free(it);
        return dlock__raise(&e, DLOCK_ERR_NOMEM, "out of memory");
    }
    it->c = c;
    if ((rc = c->backend->list(it, &e)) != DLOCK_OK) {
        dlock_list_free(it);
        return dlock__err_raise(&e, rc);
    }
    sort_unique(it);
    *out = it;
    return dlock__err_raise(&e, DLOCK_OK);
}

/* dlock__backend_redis's list: every node's pages, and every master of a cluster. */
int dlock__redis_list(dlock_lister *it, dlock__err *e)
{
    dlock_client *c = it->c;
    /* SCAN's MATCH: the prefix (its glob characters escaped) and any tag. */
    char *match = dlock__malloc(2 * c->prefix_len + 4);
    if (match == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    size_t ml = 0;
    for (size_t i = 0; i < c->prefix_len; i++) {
        if (strchr("*?[]\\", c->prefix[i]) != NULL)
            match[ml++] = '\\';
        match[ml++] = c->prefix[i];
    }
    memcpy(match + ml, "{*}", 4);
    bool failed[DLOCK_SERVERS_MAX] = {false};
    int last = DLOCK_ERR_NOQUORUM;
    int rc = walk_nodes(it, match, failed, &last, e);
    for (int i = 0; rc == DLOCK_OK && i < c->n; i++) {
        if (c->nodes[i].cluster == NULL || failed[i])
            continue;
        dlock__err ne;
        int nrc = walk_cluster(it, i, match, &ne);
        if (nrc == DLOCK_ERR_NOMEM) {
            *e = ne;
            rc = nrc;
        } else if (nrc != DLOCK_OK) {
            failed[i] = true;
            last = nrc;
            *e = ne;
        }
    }
    free(match);
    int nfailed = 0;
    for (int i = 0; i < c->n; i++)
        nfailed += failed[i];
    /* The error of the last server that failed stands for the list when too few are
     * left for a quorum (with one server, its own). */
    if (rc == DLOCK_OK && c->n - nfailed < c->quorum)
        rc = c->n == 1 ? last : DLOCK_ERR_NOQUORUM;
    return rc;
}

int dlock_list_next(dlock_lister *it, const dlock_listed **entry)
{
    dlock__err e;
    if (entry == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "entry is NULL");
    *entry = NULL;
    if (it == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "the lister is NULL");
    while (it->at < it->nrecs) {
        size_t a = it->at, b = a + 1;
        while (b < it->nrecs && it->recs[b].name_len == it->recs[a].name_len &&
               memcmp(it->recs[b].name, it->recs[a].name, it->recs[a].name_len) == 0)
            b++;
        it->at = b;
        const dlock__list_rec *g = &it->recs[a];
        int n = (int)(b - a);
        memset(&it->entry, 0, sizeof it->entry);
        if (!dlock__list_merge(it, g, n))
            continue; /* no quorum holds it */
        memcpy(it->name, g->name, g->name_len);
        it->name[g->name_len] = '\0';
        it->entry.name = it->name;
        it->entry.holders = it->holders;
        for (int i = 0; i < n; i++) {
            if (g[i].fence > it->entry.fence)
                it->entry.fence = g[i].fence;
            if (g[i].queue > it->entry.waiters)
                it->entry.waiters = g[i].queue;
        }
        *entry = &it->entry;
        return DLOCK_OK;
    }
    return DLOCK_OK;
}

void dlock_list_free(dlock_lister *it)
{
    if (it == NULL)
        return;
    for (size_t i = 0; i < it->nrecs; i++)
        free(it->recs[i].owned);
    for (size_t i = 0; i < it->npages; i++)
        freeReplyObject(it->pages[i]);
    free(it->pages);
    free(it->blob);
    free(it->recs);
    free(it->pattern);
    free(it);
}
