/*
 * views.c: one INSPECT round, what every node holds for a name (its exclusive holder
 * and lease, its fence, its shared holders), in one call or in steps, and the quorum
 * arithmetic on the views it returns. A check (lock.c) and an inspect (inspect.c)
 * read the same round.
 */
#include "views.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void parse_view(dlock__tally *t, dlock__req *r, const dlock__conn *conn, dlock__view *v)
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

void dlock__views_free(dlock__views *v)
{
    for (int i = 0; i < DLOCK_SERVERS_MAX; i++) {
        free(v->node[i].list);
        v->node[i].list = NULL;
    }
}

/* Format the INSPECT call of a name into w (what its EVAL form borrows lives there
 * too, until the round is over). */
static int format(dlock_client *c, dlock__viewing *w, const char *name, size_t name_len,
                  const char *token, dlock__err *e)
{
    int rc = dlock__keys_make(c->prefix, c->prefix_len, name, name_len, &w->k, e);
    if (rc != DLOCK_OK)
        return rc;
    const dlock__keys *k = &w->k;
    size_t mlen = (size_t)snprintf(w->most, sizeof w->most, "%d", DLOCK_INSPECT_SHARED_MAX);
    const char *args[] = {k->lock, k->fence, k->holders, k->info, token, w->most};
    const size_t lens[] = {k->lock_len, k->fence_len,  k->holders_len,
                           k->info_len, strlen(token), mlen};
    memcpy(w->args, args, sizeof args);
    memcpy(w->lens, lens, sizeof lens);
    return dlock__call_format(&c->scripts, DLOCK_SCRIPT_INSPECT, 4, 6, w->args, w->lens, &w->call,
                              e);
}

static void call_free(dlock__viewing *w)
{
    dlock__call_free(&w->call); /* formatted or zeroed by dlock__call_format */
    free(w->k.buf);
    w->k.buf = NULL;
}

/* The views of a finished INSPECT round: v->node[i].ok tells who answered. */
static void parse(dlock_client *c, dlock__round *rd, dlock__views *v)
{
    memset(v->node, 0, sizeof v->node);
    memset(&v->t, 0, sizeof v->t);
    for (int i = 0; i < c->n; i++)
        parse_view(&v->t, &rd->reqs[i], &rd->set->conns[i], &v->node[i]);
    v->start_us = rd->start_us;
    v->undecided_rc = dlock__tally_undecided(c, &v->t, rd->reqs, &v->undecided);
}

int dlock__views_ask(dlock_client *c, const char *name, size_t name_len, const char *token,
                     dlock__views *v, dlock__err *e)
{
    dlock__viewing w;
    dlock__round rd;
    memset(&w, 0, sizeof w);
    memset(v->node, 0, sizeof v->node);
    int rc = format(c, &w, name, name_len, token, e);
    if (rc == DLOCK_OK && (rc = dlock__round_begin(c, &rd, e)) == DLOCK_OK) {
        dlock__round_run(c, &rd, &w.call, NULL, NULL);
        parse(c, &rd, v);
        dlock__round_end(c, &rd);
    }
    call_free(&w);
    return rc;
}

int dlock__viewing_init(dlock_client *c, dlock__viewing *w, dlock_pending *p, const char *name,
                        size_t name_len, const char *token, dlock__err *e)
{
    memset(w, 0, sizeof *w);
    dlock__step_round_init(&w->sr, p);
    return format(c, w, name, name_len, token, e);
}

int dlock__viewing_step(dlock_client *c, dlock__viewing *w, dlock_pending *p, bool nowait,
                        dlock__views *v, dlock__err *e)
{
    int rc = dlock__step_call(c, &w->sr, &w->call, false, p, nowait, e);
    if (rc != DLOCK_OK)
        return rc;
    memset(v->node, 0, sizeof v->node);
    parse(c, w->sr.rd, v);
    dlock__step_round_end(c, &w->sr);
    return DLOCK_OK;
}

void dlock__viewing_free(dlock_client *c, dlock__viewing *w, dlock_pending *p)
{
    /* A round given up in flight was sent: its replies (a read) are left to a later
     * round. */
    if (p->in_flight)
        dlock__flight_drop(&w->sr.rd->flight);
    dlock__step_round_free(c, &w->sr);
    call_free(w);
}

static int cmp_desc(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x < y) - (x > y);
}

long long dlock__quorum_value(const dlock_client *c, long long *p, int m)
{
    if (m < c->quorum)
        return -1;
    qsort(p, (size_t)m, sizeof *p, cmp_desc);
    return p[c->quorum - 1];
}

/* The lock's PTTL when the node's value starts with the token (the exclusive holder,
 * or "shared" for the shared holders as a whole), else its shared lease when INSPECT
 * was asked about it. */
long long dlock__view_lease(const dlock__view *nv, const char *token)
{
    if (!nv->ok)
        return -1;
    if (nv->value[0] != '\0' && strncmp(nv->value, token, DLOCK_TOKEN_LEN) == 0)
        return nv->pttl;
    return nv->mine;
}

long long dlock__quorum_pttl(const dlock_client *c, const dlock__views *v, const char *token)
{
    long long p[DLOCK_SERVERS_MAX];
    int m = 0;
    for (int i = 0; i < c->n; i++)
        if (dlock__view_lease(&v->node[i], token) >= 0)
            p[m++] = dlock__view_lease(&v->node[i], token);
    return dlock__quorum_value(c, p, m);
}
