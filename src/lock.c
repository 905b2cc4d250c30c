/*
 * lock.c: what is done with a lock once held: extend, release, check, and inspect
 * (who holds a name, for `dlock status`).
 *
 * Extend and release are token-checked scripts (EXTEND, RELEASE in scripts.c) voted
 * on by a quorum: DLOCK_ERR_LOST when so many nodes no longer hold our token that no
 * quorum can. Check and inspect read every node's view with one INSPECT round.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char not_ours[] =
    "the lock is not held with this token (expired, released or taken by another owner)";

/* The handle is lost for good: no more renewals, and say so to every observer. */
static void mark_lost(dlock_lock *l)
{
    dlock__watchdog_remove(l->client, l);
    dlock__lock_mark_lost(l);
}

int dlock_extend(dlock_lock *l, int64_t ttl_ms)
{
    dlock__err e;
    int rc = dlock__lock_enter(l, &e);
    if (rc != DLOCK_OK || (rc = dlock__check_ttl(ttl_ms, "ttl_ms", &e)) != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    if (l->client->local != NULL)
        return dlock__err_raise(&e, dlock__local_extend(l, ttl_ms, &e));
    if (l->lost)
        return dlock__fail(DLOCK_ERR_LOST, "this handle already found the lock lost");
    dlock_client *c = l->client;
    dlock__keys k;
    if ((rc = dlock__keys_make(c->prefix, c->prefix_len, l->name, l->name_len, &k, &e)) != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    char ttl[24];
    int tlen = snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_ms);
    const char *args[] = {k.lock, l->token, ttl};
    const size_t lens[] = {k.lock_len, DLOCK_TOKEN_LEN, (size_t)tlen};
    const dlock__script_args sa = {DLOCK_SCRIPT_EXTEND, 1, 3, args, lens};
    int64_t start;
    /* Before the round: no renewal with the old ttl may land after it. */
    dlock__watchdog_set_ttl(c, l, ttl_ms);
    rc = dlock__round_yes_no(c, &sa, "extend", DLOCK_ERR_LOST, not_ours, &start, &e);
    free(k.buf);
    if (rc == DLOCK_OK) {
        /* The new lease runs from when the round started, at the latest. */
        int64_t now = dlock__now_us();
        int64_t validity = dlock__round_validity_us(c, ttl_ms * 1000, start, now);
        if (validity <= 0)
            return dlock__fail(DLOCK_ERR_TIMEOUT, "extended, but the round used up the new lease");
        l->valid_until_us = now + validity;
    } else if (rc == DLOCK_ERR_LOST) {
        mark_lost(l);
    }
    return dlock__err_raise(&e, rc);
}

int dlock__lock_release(dlock_lock *l, dlock__err *e)
{
    dlock_client *c = l->client;
    if (c->local != NULL)
        return dlock__local_release(l, e);
    dlock__keys k;
    int rc = dlock__keys_make(c->prefix, c->prefix_len, l->name, l->name_len, &k, e);
    if (rc != DLOCK_OK) {
        dlock__lock_free(l);
        return rc;
    }
    /* With N > 1 the release raises every node's fence counter to this lock's fence
     * (the default fence mode, docs/guarantees.md), so a later quorum, which meets at
     * least one of these nodes, hands out a larger fence. With N = 1 the counter is
     * already there. */
    char fence[24] = "0";
    if (c->n > 1)
        snprintf(fence, sizeof fence, "%llu", (unsigned long long)l->fence);
    const char *args[] = {k.lock, k.fence, k.queue, l->token, fence, "", c->retention, "1", "0"};
    const size_t lens[] = {k.lock_len,
                           k.fence_len,
                           k.queue_len,
                           DLOCK_TOKEN_LEN,
                           strlen(fence),
                           0,
                           strlen(c->retention),
                           1,
                           1};
    const dlock__script_args sa = {DLOCK_SCRIPT_RELEASE, 3, 9, args, lens};
    int64_t start;
    bool expired = l->valid_until_us != 0 && dlock__now_us() >= l->valid_until_us;
    rc = dlock__round_yes_no(c, &sa, "release", DLOCK_ERR_LOST, not_ours, &start, e);
    free(k.buf);
    if (rc == DLOCK_OK && expired)
        rc = dlock__err_set(e, DLOCK_ERR_LOST,
                            "released, but the lease had run out before the release: work "
                            "after that was not protected");
    dlock__lock_free(l);
    return rc;
}

int dlock_release(dlock_lock *l)
{
    dlock__err e;
    int rc = dlock__lock_enter(l, &e);
    if (rc != DLOCK_OK) {
        /* "Frees l, whatever it returns": a handle inherited across fork() is freed
         * without touching the servers (the lock is the parent's). */
        if (l != NULL && l->magic == DLOCK_LOCK_MAGIC)
            dlock__lock_free(l);
        return dlock__err_raise(&e, rc);
    }
    return dlock__err_raise(&e, dlock__lock_release(l, &e));
}

/* ---- inspect and check ------------------------------------------------------ */

/* Copy src into dst[size], cutting it short if it does not fit (descriptions are for
 * people; the token is compared on its first DLOCK_TOKEN_LEN bytes only). */
static void copy_truncated(char *dst, size_t size, const char *src)
{
    size_t len = strnlen(src, size - 1);
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* What one node holds for a name (from the INSPECT script). */
typedef struct node_view {
    bool ok;
    char value[600]; /* "<token> <description>", truncated; "" when free */
    long long pttl;
    uint64_t fence;
} node_view;

static void parse_view(dlock__tally *t, dlock__req *r, const dlock__conn *conn, node_view *v)
{
    memset(v, 0, sizeof *v);
    if (!dlock__tally_reply(t, r, conn, "inspect", REDIS_REPLY_ARRAY))
        return;
    const redisReply *rep = r->reply;
    if (rep->elements != 3 || rep->element[0]->type != REDIS_REPLY_STRING ||
        rep->element[1]->type != REDIS_REPLY_INTEGER ||
        rep->element[2]->type != REDIS_REPLY_STRING) {
        snprintf(r->detail, sizeof r->detail, "%s: inspect: unexpected reply shape",
                 conn->node->addr.display);
        dlock__tally_failure(t, r, DLOCK_ERR_PROTOCOL);
        return;
    }
    copy_truncated(v->value, sizeof v->value, rep->element[0]->str);
    v->pttl = rep->element[1]->integer;
    v->fence = strtoull(rep->element[2]->str, NULL, 10);
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

/* Ask every node what it holds for the name; v->node[i].ok tells who answered. */
static int inspect_round(dlock_client *c, const char *name, size_t name_len, views *v,
                         dlock__err *e)
{
    dlock__keys k;
    dlock__call call;
    dlock__round rd;
    int rc = dlock__keys_make(c->prefix, c->prefix_len, name, name_len, &k, e);
    if (rc != DLOCK_OK)
        return rc;
    const char *args[] = {k.lock, k.fence};
    const size_t lens[] = {k.lock_len, k.fence_len};
    /* k.buf lives until the round is over: the call's EVAL form borrows the keys. */
    rc = dlock__call_format(&c->scripts, DLOCK_SCRIPT_INSPECT, 2, 2, args, lens, &call, e);
    if (rc == DLOCK_OK && (rc = dlock__round_begin(c, &rd, e)) == DLOCK_OK) {
        dlock__round_run(c, &rd, &call, NULL, NULL);
        memset(&v->t, 0, sizeof v->t);
        for (int i = 0; i < c->n; i++)
            parse_view(&v->t, &rd.reqs[i], &rd.set->conns[i], &v->node[i]);
        v->start_us = rd.start_us;
        v->undecided_rc = dlock__tally_undecided(c, &v->t, rd.reqs, &v->undecided);
        dlock__round_end(c, &rd);
    }
    dlock__call_free(&call); /* formatted or zeroed by dlock__call_format */
    free(k.buf);
    return rc;
}

static int cmp_desc(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x < y) - (x > y);
}

/* Among the nodes whose value starts with `token`, the lease a quorum still has: the
 * quorum-th largest PTTL. -1 when fewer than a quorum hold it. */
static long long quorum_pttl(const dlock_client *c, const views *v, const char *token)
{
    long long p[DLOCK_SERVERS_MAX];
    int m = 0;
    for (int i = 0; i < c->n; i++)
        if (v->node[i].ok && v->node[i].value[0] != '\0' &&
            strncmp(v->node[i].value, token, DLOCK_TOKEN_LEN) == 0)
            p[m++] = v->node[i].pttl;
    if (m < c->quorum)
        return -1;
    qsort(p, (size_t)m, sizeof *p, cmp_desc);
    return p[c->quorum - 1];
}

int dlock_check(dlock_lock *l)
{
    dlock__err e;
    int rc = dlock__lock_enter(l, &e);
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    if (l->client->local != NULL)
        return dlock__err_raise(&e, dlock__local_check(l, &e));
    if (l->lost)
        return dlock__fail(DLOCK_ERR_LOST, "this handle already found the lock lost");
    dlock_client *c = l->client;
    views v;
    if ((rc = inspect_round(c, l->name, l->name_len, &v, &e)) != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    long long pttl = quorum_pttl(c, &v, l->token);
    if (pttl >= 0) {
        /* The servers' remaining lease, less drift, counted from the round's start.
         * PTTL is the server's word: no lease of ours is longer than DLOCK_TTL_MAX_MS. */
        if (pttl > DLOCK_TTL_MAX_MS)
            pttl = DLOCK_TTL_MAX_MS;
        int64_t validity = dlock__validity_us(pttl * 1000, 0, c->drift_factor, c->drift_min_us);
        l->valid_until_us = v.start_us + (validity > 0 ? validity : 0);
        return dlock__err_raise(&e, DLOCK_OK);
    }
    int answered = c->n - v.t.failed, ours = 0;
    for (int i = 0; i < c->n; i++)
        if (v.node[i].ok && v.node[i].value[0] != '\0' &&
            strncmp(v.node[i].value, l->token, DLOCK_TOKEN_LEN) == 0)
            ours++;
    /* Nodes that answered without our token: if they leave no room for a quorum, the
     * lock is lost; otherwise too few answered to tell. */
    if (answered - ours > c->n - c->quorum) {
        mark_lost(l);
        return dlock__fail(DLOCK_ERR_LOST, "the lock is not held with this token");
    }
    return dlock__err_raise(&v.undecided, v.undecided_rc);
}

int dlock_inspect(dlock_client *c, const char *name, dlock_holder *out)
{
    dlock__err e;
    if (out == NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "out is NULL");
    memset(out, 0, sizeof *out);
    int rc = dlock__client_enter(c, &e);
    if (rc != DLOCK_OK || (rc = dlock__check_name(name, &e)) != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    if (c->local != NULL)
        return dlock__err_raise(&e, dlock__local_inspect(c, name, out, &e));
    views v;
    if ((rc = inspect_round(c, name, strlen(name), &v, &e)) != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    if (c->n - v.t.failed < c->quorum)
        return dlock__err_raise(&v.undecided, v.undecided_rc);
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
        copy_truncated(out->description, sizeof out->description, s);
    }
    return dlock__err_raise(&e, DLOCK_OK);
}

/* Shared holders are built for local clients only so far: on servers this call checks
 * its arguments and refuses. */
int dlock_inspect_shared(dlock_client *c, const char *name, dlock_holder *out, int max, int *n,
                         int64_t *total)
{
    dlock__err e;
    if (n == NULL || total == NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "n or total is NULL");
    *n = 0;
    *total = 0;
    if (max < 0 || (out == NULL && max > 0))
        return dlock__fail(DLOCK_ERR_INVALID, "out is NULL or max is negative");
    int rc = dlock__client_enter(c, &e);
    if (rc != DLOCK_OK || (rc = dlock__check_name(name, &e)) != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    if (c->local != NULL)
        return dlock__err_raise(&e, dlock__local_inspect_shared(c, name, out, max, n, total, &e));
    return dlock__fail(DLOCK_ERR_INVALID,
                       "shared holders on Redis servers are not in this build yet");
}
