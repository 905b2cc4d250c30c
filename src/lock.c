/*
 * lock.c: what is done with a lock once held, besides its release (release.c) and its
 * extension (extend.c): check, and inspect (who holds a name, for `dlock status`).
 *
 * Check and inspect read every node's view with one INSPECT round.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char dlock__not_ours[] =
    "the lock is not held with this token (expired, released or taken by another owner)";

void dlock__lock_lost(dlock_lock *l)
{
    dlock__watchdog_remove(l->client, l, true);
    dlock__lock_mark_lost(l);
}

/* ---- inspect and check ------------------------------------------------------ */

/* What one node holds for a name (from the INSPECT script). */
typedef struct node_view {
    bool ok;
    char value[600]; /* "<token> <description>", truncated; "shared"; "" when free */
    long long pttl;
    uint64_t fence;
    long long mine;  /* the asked-for token's shared lease left in ms; -1: none */
    long long count; /* shared holders */
    char *list;      /* INSPECT's list of shared holders (owned; NULL when none) */
} node_view;

static void parse_view(dlock__tally *t, dlock__req *r, const dlock__conn *conn, node_view *v)
{
    memset(v, 0, sizeof *v);
    if (!dlock__tally_reply(t, r, conn, "inspect", REDIS_REPLY_ARRAY))
        return;
    const redisReply *rep = r->reply;
    static const int types[6] = {REDIS_REPLY_STRING,  REDIS_REPLY_INTEGER, REDIS_REPLY_STRING,
                                 REDIS_REPLY_INTEGER, REDIS_REPLY_INTEGER, REDIS_REPLY_STRING};
    bool shape = rep->elements == 6;
    for (size_t i = 0; shape && i < 6; i++)
        shape = rep->element[i]->type == types[i];
    if (!shape) {
        dlock__err_set(&r->why, 0, "%s: inspect: unexpected reply shape", conn->node->addr.display);
        dlock__tally_failure(t, r, DLOCK_ERR_PROTOCOL);
        return;
    }
    dlock__copy_text(v->value, sizeof v->value, rep->element[0]->str, rep->element[0]->len);
    v->pttl = rep->element[1]->integer;
    v->fence = strtoull(rep->element[2]->str, NULL, 10);
    v->mine = rep->element[3]->integer;
    v->count = rep->element[4]->integer;
    if (rep->element[5]->len > 0 && (v->list = dlock__strdup(rep->element[5]->str)) == NULL) {
        dlock__err_set(&r->why, 0, "%s: inspect: out of memory", conn->node->addr.display);
        dlock__tally_failure(t, r, DLOCK_ERR_NOMEM);
        return;
    }
    v->ok = true;
}

/* Every node's view of a name, and the error a round that could not decide gets. */
typedef struct views {
    node_view node[DLOCK_SERVERS_MAX];
    dlock__tally t;
    int64_t start_us;
    dlock__err undecided; /* the error to return when too few nodes answered */
    int undecided_rc;
} views;

static void views_free(views *v)
{
    for (int i = 0; i < DLOCK_SERVERS_MAX; i++)
        free(v->node[i].list);
}

/* The INSPECT call of a name, with what it borrows for its EVAL form (the keys, the
 * arguments), alive until its round is over. */
typedef struct inspect_call {
    dlock__keys k;
    char most[16];
    const char *args[6];
    size_t lens[6];
    dlock__call call;
} inspect_call;

static void inspect_call_free(inspect_call *ic)
{
    dlock__call_free(&ic->call); /* formatted or zeroed by dlock__call_format */
    free(ic->k.buf);
    ic->k.buf = NULL;
}

/* Format what every node holds for the name (and, when token is not "", what lease
 * that token has as a shared holder). Free ic with inspect_call_free, whatever this
 * returns. */
static int inspect_format(dlock_client *c, const char *name, size_t name_len, const char *token,
                          inspect_call *ic, dlock__err *e)
{
    memset(ic, 0, sizeof *ic);
    int rc = dlock__keys_make(c->prefix, c->prefix_len, name, name_len, &ic->k, e);
    if (rc != DLOCK_OK)
        return rc;
    const dlock__keys *k = &ic->k;
    size_t mlen = (size_t)snprintf(ic->most, sizeof ic->most, "%d", DLOCK_INSPECT_SHARED_MAX);
    const char *args[] = {k->lock, k->fence, k->holders, k->info, token, ic->most};
    const size_t lens[] = {k->lock_len, k->fence_len,  k->holders_len,
                           k->info_len, strlen(token), mlen};
    memcpy(ic->args, args, sizeof args);
    memcpy(ic->lens, lens, sizeof lens);
    return dlock__call_format(&c->scripts, DLOCK_SCRIPT_INSPECT, 4, 6, ic->args, ic->lens,
                              &ic->call, e);
}

/* The views of a finished INSPECT round: v->node[i].ok tells who answered. */
static void inspect_parse(dlock_client *c, dlock__round *rd, views *v)
{
    memset(v->node, 0, sizeof v->node);
    memset(&v->t, 0, sizeof v->t);
    for (int i = 0; i < c->n; i++)
        parse_view(&v->t, &rd->reqs[i], &rd->set->conns[i], &v->node[i]);
    v->start_us = rd->start_us;
    v->undecided_rc = dlock__tally_undecided(c, &v->t, rd->reqs, &v->undecided);
}

/* Ask every node what it holds for the name (inspect_format's call), in one blocking
 * round. Free v with views_free, whatever this returns. */
static int inspect_round(dlock_client *c, const char *name, size_t name_len, const char *token,
                         views *v, dlock__err *e)
{
    inspect_call ic;
    dlock__round rd;
    memset(v->node, 0, sizeof v->node);
    int rc = inspect_format(c, name, name_len, token, &ic, e);
    if (rc == DLOCK_OK && (rc = dlock__round_begin(c, &rd, e)) == DLOCK_OK) {
        dlock__round_run(c, &rd, &ic.call, NULL, NULL);
        inspect_parse(c, &rd, v);
        dlock__round_end(c, &rd);
    }
    inspect_call_free(&ic);
    return rc;
}

static int cmp_desc(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x < y) - (x > y);
}

/* The quorum-th largest of the m values in p: what a quorum agrees on at least. -1
 * when fewer than a quorum have one. */
static long long quorum_value(const dlock_client *c, long long *p, int m)
{
    if (m < c->quorum)
        return -1;
    qsort(p, (size_t)m, sizeof *p, cmp_desc);
    return p[c->quorum - 1];
}

/* The lease node view nv gives `token`: the lock's PTTL when its value starts with it
 * (the exclusive holder, or "shared" for the shared holders as a whole), else its
 * shared lease when INSPECT was asked about it; -1 when it holds nothing of token's. */
static long long lease_of(const node_view *nv, const char *token)
{
    if (!nv->ok)
        return -1;
    if (nv->value[0] != '\0' && strncmp(nv->value, token, DLOCK_TOKEN_LEN) == 0)
        return nv->pttl;
    return nv->mine;
}

/* Among the nodes that hold something of `token`'s, the lease a quorum still has. -1
 * when fewer than a quorum hold it. */
static long long quorum_pttl(const dlock_client *c, const views *v, const char *token)
{
    long long p[DLOCK_SERVERS_MAX];
    int m = 0;
    for (int i = 0; i < c->n; i++)
        if (lease_of(&v->node[i], token) >= 0)
            p[m++] = lease_of(&v->node[i], token);
    return quorum_value(c, p, m);
}

int dlock_check(dlock_lock *l)
{
    dlock__err e;
    int rc = dlock__lock_enter(l, &e);
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    return dlock__err_raise(&e, l->client->backend->check(l, &e));
}

/* What the views say of l's lock: DLOCK_OK with its validity updated, DLOCK_ERR_LOST
 * (*lost: the caller marks the handle lost), or the error of a round that could not
 * tell. */
static int check_verdict(dlock_lock *l, const views *v, bool *lost, dlock__err *e)
{
    dlock_client *c = l->client;
    long long pttl = quorum_pttl(c, v, l->token);
    int answered = c->n - v->t.failed, ours = 0;
    for (int i = 0; i < c->n; i++)
        ours += lease_of(&v->node[i], l->token) >= 0;
    *lost = false;
    if (pttl >= 0) {
        /* The servers' remaining lease, less drift, counted from the round's start.
         * PTTL is the server's word: no lease of ours is longer than DLOCK_TTL_MAX_MS. */
        if (pttl > DLOCK_TTL_MAX_MS)
            pttl = DLOCK_TTL_MAX_MS;
        int64_t validity = dlock__validity_us(pttl * 1000, 0, c->drift_factor, c->drift_min_us);
        l->valid_until_us = v->start_us + (validity > 0 ? validity : 0);
        return DLOCK_OK;
    }
    /* Nodes that answered without our token: if they leave no room for a quorum, the
     * lock is lost; otherwise too few answered to tell. */
    if (answered - ours > c->n - c->quorum) {
        *lost = true;
        return dlock__err_set(e, DLOCK_ERR_LOST, "the lock is not held with this token");
    }
    *e = v->undecided;
    return v->undecided_rc;
}

int dlock__redis_check(dlock_lock *l, dlock__err *e)
{
    if (l->lost)
        return dlock__err_set(e, DLOCK_ERR_LOST, "this handle already found the lock lost");
    views v;
    bool lost = false;
    int rc = inspect_round(l->client, l->name, l->name_len, l->token, &v, e);
    if (rc == DLOCK_OK)
        rc = check_verdict(l, &v, &lost, e);
    views_free(&v);
    if (rc == DLOCK_ERR_LOST && lost)
        dlock__lock_lost(l);
    return rc;
}

/* A check in steps: the handle (the caller's), the call, and the verdict once the
 * replies are in. */
typedef struct checking {
    dlock_pending base;
    dlock_lock *l;
    inspect_call ic;
    dlock__step_round sr;
    bool sent;    /* the round was started */
    bool decided; /* rc and why hold the verdict */
    bool lost;    /* the handle is still to be marked lost */
    int rc;
    dlock__err why;
} checking;

static int check_step(dlock_pending *base, dlock_lock **out, bool nowait, dlock__err *e)
{
    (void)out; /* a check hands out nothing */
    checking *x = (checking *)base;
    dlock_lock *l = x->l;
    dlock_client *c = l->client;
    if (!x->decided) {
        if (!x->sent) {
            if (nowait && !c->nowait_ok)
                return dlock__pending_would_block(e);
            int rc = dlock__step_round_begin(c, &x->sr, nowait, e);
            if (rc != DLOCK_OK)
                return rc;
            dlock__round_start(c, x->sr.rd, &x->ic.call, NULL, NULL);
            x->sent = true;
        }
        if (!dlock__step_round_over(c, &x->sr, &x->base, nowait))
            return dlock__pending_again(e);
        views v;
        inspect_parse(c, x->sr.rd, &v);
        dlock__step_round_end(c, &x->sr);
        x->rc = check_verdict(l, &v, &x->lost, &x->why);
        views_free(&v);
        x->decided = true;
    }
    /* A lock found lost is renewed no more: its renewal stops first, which waits for a
     * renewal of it in flight (a step that would block). */
    if (x->lost) {
        if (!dlock__watchdog_remove(c, l, !nowait)) {
            x->base.fd = -1;
            x->base.due_us = dlock__now_us();
            return dlock__pending_would_block(e);
        }
        dlock__lock_mark_lost(l);
        x->lost = false;
    }
    *e = x->why;
    return x->rc;
}

static void check_destroy(dlock_pending *base)
{
    checking *x = (checking *)base;
    /* A check given up in flight was sent: its replies (a read) are left to a later
     * round. */
    if (x->base.in_flight)
        dlock__flight_drop(&x->sr.rd->flight);
    dlock__step_round_free(x->l->client, &x->sr);
    inspect_call_free(&x->ic);
    free(x);
}

/* A check of l in steps, no I/O yet (dlock__backend_redis's check_start). */
int dlock__redis_check_start(dlock_lock *l, dlock_pending **out, dlock__err *e)
{
    if (l->lost)
        return dlock__err_set(e, DLOCK_ERR_LOST, "this handle already found the lock lost");
    checking *x = dlock__pending_new(sizeof *x, check_step, check_destroy);
    if (x == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    x->base.lockless = true;
    x->l = l;
    dlock__step_round_init(&x->sr, &x->base);
    int rc = inspect_format(l->client, l->name, l->name_len, l->token, &x->ic, e);
    if (rc != DLOCK_OK) {
        check_destroy(&x->base);
        return rc;
    }
    x->base.due_us = dlock__now_us();
    *out = &x->base;
    return DLOCK_OK;
}

int dlock_check_start(dlock_lock *l, dlock_pending **out)
{
    dlock__err e;
    if (out != NULL)
        *out = NULL;
    int rc = dlock__lock_enter(l, &e);
    if (rc == DLOCK_OK && out == NULL)
        rc = dlock__err_set(&e, DLOCK_ERR_INVALID, "out is NULL");
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    return dlock__err_raise(&e, l->client->backend->check_start(l, out, &e));
}

/* Enter an inspect call: check the client and the name. */
static int inspect_enter(dlock_client *c, const char *name, dlock__err *e)
{
    int rc = dlock__client_enter(c, e);
    return rc != DLOCK_OK ? rc : dlock__check_name(name, e);
}

/* Ask every node of name: DLOCK_OK when a quorum answered; free v with views_free
 * whatever this returns. */
static int inspect_ask(dlock_client *c, const char *name, views *v, dlock__err *e)
{
    memset(v->node, 0, sizeof v->node);
    int rc = inspect_round(c, name, strlen(name), "", v, e);
    if (rc != DLOCK_OK)
        return rc;
    if (c->n - v->t.failed < c->quorum) {
        *e = v->undecided;
        return v->undecided_rc;
    }
    return DLOCK_OK;
}

/* How many shared holders a quorum of nodes agrees on, at least. */
static int64_t quorum_count(const dlock_client *c, const views *v)
{
    long long p[DLOCK_SERVERS_MAX];
    int m = 0;
    for (int i = 0; i < c->n; i++)
        if (v->node[i].ok)
            p[m++] = strcmp(v->node[i].value, "shared") == 0 ? v->node[i].count : 0;
    long long n = quorum_value(c, p, m);
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

int dlock__redis_inspect(dlock_client *c, const char *name, dlock_holder *out, dlock__err *e)
{
    views v;
    int rc = inspect_ask(c, name, &v, e);
    if (rc != DLOCK_OK) {
        views_free(&v);
        return rc;
    }
    for (int i = 0; i < c->n; i++) {
        const node_view *nv = &v.node[i];
        if (!nv->ok)
            continue;
        if (nv->fence > out->fence)
            out->fence = nv->fence;
        if (out->held || nv->value[0] == '\0')
            continue;
        long long pttl = quorum_pttl(c, &v, nv->value);
        if (pttl < 0)
            continue;
        out->held = 1;
        out->remaining_ms = pttl;
        if (strcmp(nv->value, "shared") == 0) {
            out->shared = quorum_count(c, &v);
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
    views_free(&v);
    return DLOCK_OK;
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
static void merge_list(const dlock_client *c, const node_view *nv, dlock_holder *all, int *n,
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

int dlock__redis_inspect_shared(dlock_client *c, const char *name, dlock_holder *out, int max,
                                int *n, int64_t *total, dlock__err *e)
{
    views v;
    int rc = inspect_ask(c, name, &v, e);
    /* Each node lists at most DLOCK_INSPECT_SHARED_MAX. */
    size_t cap = rc == DLOCK_OK ? (size_t)DLOCK_INSPECT_SHARED_MAX * (size_t)c->n : 0;
    dlock_holder *all = NULL;
    int *seen = NULL;
    long long *leases = NULL;
    if (rc == DLOCK_OK && ((all = dlock__calloc(cap, sizeof *all)) == NULL ||
                           (seen = dlock__calloc(cap, sizeof *seen)) == NULL ||
                           (leases = dlock__calloc(cap * (size_t)c->n, sizeof *leases)) == NULL))
        rc = dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    if (rc == DLOCK_OK) {
        int m = 0, kept = 0;
        for (int i = 0; i < c->n; i++)
            merge_list(c, &v.node[i], all, &m, (int)cap, seen, leases);
        /* A holder a quorum lists, with the lease a quorum still gives it. */
        for (int j = 0; j < m; j++) {
            long long left = quorum_value(c, leases + (size_t)j * (size_t)c->n, seen[j]);
            if (left < 0)
                continue;
            all[kept] = all[j];
            all[kept++].remaining_ms = left;
        }
        qsort(all, (size_t)kept, sizeof *all, cmp_remaining);
        for (int j = 0; j < kept && j < max && j < DLOCK_INSPECT_SHARED_MAX; j++)
            out[(*n)++] = all[j];
        *total = quorum_count(c, &v);
    }
    free(all);
    free(seen);
    free(leases);
    views_free(&v);
    return rc;
}
