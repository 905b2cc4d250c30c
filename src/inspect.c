/*
 * inspect.c: who holds a name, for `dlock status` and dlockd's LOCKINFO: its exclusive
 * holder, or its shared holders and a semaphore's permits, with the lease a quorum
 * gives them, from the views of one INSPECT round (views.c), in one call or in steps.
 */
#include "views.h"

#include <stdlib.h>
#include <string.h>

/* Enter an inspect call: check the client and the name. */
static int inspect_enter(dlock_client *c, const char *name, dlock__err *e)
{
    int rc = dlock__client_enter(c, e);
    return rc != DLOCK_OK ? rc : dlock__check_name(name, e);
}

/* DLOCK_OK when a quorum answered the round, else the error of a round that could not
 * decide. */
static int decided(const dlock_client *c, const dlock__views *v, dlock__err *e)
{
    if (c->n - v->t.failed < c->quorum) {
        *e = v->undecided;
        return v->undecided_rc;
    }
    return DLOCK_OK;
}

/* Ask every node of name: DLOCK_OK when a quorum answered; free v with
 * dlock__views_free whatever this returns. */
static int inspect_ask(dlock_client *c, const char *name, dlock__views *v, dlock__err *e)
{
    int rc = dlock__views_ask(c, name, strlen(name), "", v, e);
    return rc != DLOCK_OK ? rc : decided(c, v, e);
}

/* How many shared holders a quorum of nodes agrees on, at least. */
static int64_t quorum_count(const dlock_client *c, const dlock__views *v)
{
    long long p[DLOCK_SERVERS_MAX];
    int m = 0;
    for (int i = 0; i < c->n; i++)
        if (v->node[i].ok)
            p[m++] = strcmp(v->node[i].value, "shared") == 0 ? v->node[i].count : 0;
    long long n = dlock__quorum_value(c, p, m);
    return n > 0 ? n : 0;
}

int dlock_inspect(dlock_client *c, const char *name, dlock_holder *out)
{
    dlock__err e;
    if (out == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "out is NULL");
    memset(out, 0, sizeof *out);
    int rc = inspect_enter(c, name, &e);
    return dlock__err_raise(&e, rc != DLOCK_OK ? rc : c->backend->inspect(c, name, out, &e));
}

/* The holder a quorum's views agree on, into *out (zeroed): dlock_inspect's answer. */
static void holder_of(const dlock_client *c, const dlock__views *v, dlock_holder *out)
{
    for (int i = 0; i < c->n; i++) {
        const dlock__view *nv = &v->node[i];
        if (!nv->ok)
            continue;
        if (nv->fence > out->fence)
            out->fence = nv->fence;
        if (out->held || nv->value[0] == '\0')
            continue;
        long long pttl = dlock__quorum_pttl(c, v, nv->value);
        if (pttl < 0)
            continue;
        out->held = 1;
        out->remaining_ms = pttl;
        if (strcmp(nv->value, "shared") == 0) {
            out->shared = quorum_count(c, v);
            continue;
        }
        /* A value written by another tool may not have our "<token> <description>"
         * shape; show it whole as the description then. */
        const char *s = nv->value;
        size_t slen = strlen(s);
        bool ours =
            slen >= DLOCK_TOKEN_LEN && (slen == DLOCK_TOKEN_LEN || s[DLOCK_TOKEN_LEN] == ' ');
        if (ours) {
            memcpy(out->token, s, DLOCK_TOKEN_LEN);
            out->token[DLOCK_TOKEN_LEN] = '\0';
            s += slen > DLOCK_TOKEN_LEN ? DLOCK_TOKEN_LEN + 1 : DLOCK_TOKEN_LEN;
        }
        dlock__copy_text(out->description, sizeof out->description, s, strlen(s));
    }
}

int dlock__redis_inspect(dlock_client *c, const char *name, dlock_holder *out, dlock__err *e)
{
    dlock__views v;
    int rc = inspect_ask(c, name, &v, e);
    if (rc == DLOCK_OK)
        holder_of(c, &v, out);
    dlock__views_free(&v);
    return rc;
}

/* One entry of INSPECT's list, "<token> <ms left> <description length> <description>",
 * at *p; advances *p past it. False at the end or on a malformed entry. */
static bool next_entry(const char **p, dlock_holder *h)
{
    const char *s = *p;
    char *end;
    if (strlen(s) < DLOCK_TOKEN_LEN + 1 || s[DLOCK_TOKEN_LEN] != ' ')
        return false;
    memset(h, 0, sizeof *h);
    memcpy(h->token, s, DLOCK_TOKEN_LEN);
    s += DLOCK_TOKEN_LEN + 1;
    long long ms = strtoll(s, &end, 10);
    if (end == s || *end != ' ')
        return false;
    s = end + 1;
    unsigned long long dlen = strtoull(s, &end, 10);
    if (end == s || *end != ' ' || strnlen(end + 1, dlen) < dlen)
        return false;
    s = end + 1;
    dlock__copy_text(h->description, sizeof h->description, s, (size_t)dlen);
    h->held = 1;
    h->remaining_ms = ms;
    *p = s + dlen;
    return true;
}

/* Add one node's list to the distinct holders in all[0 .. *n), counting in seen[] the
 * nodes that list each and keeping every node's lease in leases[j * N + node]. */
static void merge_list(const dlock_client *c, const dlock__view *nv, dlock_holder *all, int *n,
                       int cap, int *seen, long long *leases)
{
    const char *p = nv->list;
    dlock_holder h;
    while (p != NULL && next_entry(&p, &h)) {
        int j = 0;
        while (j < *n && strcmp(all[j].token, h.token) != 0)
            j++;
        if (j == *n) {
            if (*n == cap)
                return;
            all[(*n)++] = h;
        }
        leases[(size_t)j * (size_t)c->n + (size_t)seen[j]++] = h.remaining_ms;
    }
}

static int cmp_remaining(const void *a, const void *b)
{
    const dlock_holder *x = a, *y = b;
    return (x->remaining_ms < y->remaining_ms) - (x->remaining_ms > y->remaining_ms);
}

int dlock_inspect_shared(dlock_client *c, const char *name, dlock_holder *out, int max, int *n,
                         int64_t *total)
{
    dlock__err e;
    if (n == NULL || total == NULL || (out == NULL && max > 0) || max < 0)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "out, n or total is NULL, or max is negative");
    *n = 0;
    *total = 0;
    int rc = inspect_enter(c, name, &e);
    if (rc == DLOCK_OK)
        rc = c->backend->inspect_shared(c, name, out, max, n, total, &e);
    return dlock__err_raise(&e, rc);
}

/* The shared holders a quorum's views list, the longest lease first, into out[0 .. *n)
 * (at most max), and *total: dlock_inspect_shared's answer. */
static int shared_of(const dlock_client *c, const dlock__views *v, dlock_holder *out, int max,
                     int *n, int64_t *total, dlock__err *e)
{
    /* Each node lists at most DLOCK_INSPECT_SHARED_MAX. */
    size_t cap = (size_t)DLOCK_INSPECT_SHARED_MAX * (size_t)c->n;
    dlock_holder *all = dlock__calloc(cap, sizeof *all);
    int *seen = dlock__calloc(cap, sizeof *seen);
    long long *leases = dlock__calloc(cap * (size_t)c->n, sizeof *leases);
    int rc = DLOCK_OK;
    if (all == NULL || seen == NULL || leases == NULL) {
        rc = dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    } else {
        int m = 0, kept = 0;
        for (int i = 0; i < c->n; i++)
            merge_list(c, &v->node[i], all, &m, (int)cap, seen, leases);
        /* A holder a quorum lists, with the lease a quorum still gives it. */
        for (int j = 0; j < m; j++) {
            long long left = dlock__quorum_value(c, leases + (size_t)j * (size_t)c->n, seen[j]);
            if (left < 0)
                continue;
            all[kept] = all[j];
            all[kept++].remaining_ms = left;
        }
        qsort(all, (size_t)kept, sizeof *all, cmp_remaining);
        for (int j = 0; j < kept && j < max && j < DLOCK_INSPECT_SHARED_MAX; j++)
            out[(*n)++] = all[j];
        *total = quorum_count(c, v);
    }
    free(all);
    free(seen);
    free(leases);
    return rc;
}

int dlock__redis_inspect_shared(dlock_client *c, const char *name, dlock_holder *out, int max,
                                int *n, int64_t *total, dlock__err *e)
{
    dlock__views v;
    int rc = inspect_ask(c, name, &v, e);
    if (rc == DLOCK_OK)
        rc = shared_of(c, &v, out, max, n, total, e);
    dlock__views_free(&v);
    return rc;
}

/* ---- in steps ----------------------------------------------------------------- */

/* An inspect in steps: the round, and where its answer goes (the caller's). */
typedef struct inspecting {
    dlock_pending base;
    dlock_client *c;
    dlock__viewing w;
    dlock_holder *holder;
    dlock_holder *shared;
    int max;
    int *n;
} inspecting;

static int inspect_step(dlock_pending *base, dlock_lock **out, bool nowait, dlock__err *e)
{
    (void)out; /* an inspect hands out no lock */
    inspecting *x = (inspecting *)base;
    dlock__views v;
    int rc = dlock__viewing_step(x->c, &x->w, &x->base, nowait, &v, e);
    if (rc != DLOCK_OK)
        return rc;
    if ((rc = decided(x->c, &v, e)) == DLOCK_OK) {
        holder_of(x->c, &v, x->holder);
        int64_t total = 0;
        if (x->shared != NULL && x->holder->shared > 0)
            rc = shared_of(x->c, &v, x->shared, x->max, x->n, &total, e);
    }
    dlock__views_free(&v);
    return rc;
}

static void inspect_destroy(dlock_pending *base)
{
    inspecting *x = (inspecting *)base;
    dlock__viewing_free(x->c, &x->w, &x->base);
    free(x);
}

/* dlock__backend_redis's inspect_start: the arguments checked, no I/O yet. */
int dlock__redis_inspect_start(dlock_client *c, const char *name, dlock_holder *holder,
                               dlock_holder *shared, int max, int *n, dlock_pending **out,
                               dlock__err *e)
{
    inspecting *x = dlock__pending_new(sizeof *x, inspect_step, inspect_destroy);
    if (x == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    x->base.lockless = true;
    x->c = c;
    x->holder = holder;
    x->shared = shared;
    x->max = max;
    x->n = n;
    int rc = dlock__viewing_init(c, &x->w, &x->base, name, strlen(name), "", e);
    if (rc != DLOCK_OK) {
        inspect_destroy(&x->base);
        return rc;
    }
    x->base.due_us = dlock__now_us();
    *out = &x->base;
    return DLOCK_OK;
}

int dlock_inspect_start(dlock_client *c, const char *name, dlock_holder *holder,
                        dlock_holder *shared, int max, int *n, dlock_pending **out)
{
    dlock__err e;
    if (out != NULL)
        *out = NULL;
    if (out == NULL || holder == NULL || (shared != NULL && n == NULL) ||
        (shared == NULL && max > 0) || max < 0)
        return dlock__raise(&e, DLOCK_ERR_INVALID,
                            "out or holder is NULL, shared without n or max without shared, "
                            "or max is negative");
    memset(holder, 0, sizeof *holder);
    if (n != NULL)
        *n = 0;
    int rc = inspect_enter(c, name, &e);
    if (rc == DLOCK_OK)
        rc = c->backend->inspect_start(c, name, holder, shared, max, n, out, &e);
    return dlock__err_raise(&e, rc);
}
