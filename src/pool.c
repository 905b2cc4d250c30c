/*
 * pool.c: the client's pool of connection sets. A call takes a set (one connection to
 * each node) for its rounds and gives it back, so connections are reused across calls
 * and threads but never used by two at once; nowait steps keep at most
 * DLOCK_NOWAIT_SETS_MAX sets in flight.
 */
#include "round.h"

dlock__connset *dlock__connset_new(dlock_client *c)
{
    dlock__connset *s = dlock__malloc(sizeof *s + (size_t)c->n * sizeof s->conns[0]);
    if (s == NULL)
        return NULL;
    s->next = NULL;
    s->post = false;
    s->epfd = -1;
    s->nregs = 0;
    for (int i = 0; i < c->n; i++)
        dlock__conn_init(&s->conns[i], &c->nodes[i]);
    return s;
}

dlock__connset *dlock__connset_get(dlock_client *c)
{
    pthread_mutex_lock(&c->mu);
    dlock__connset *s = c->pool;
    if (s != NULL)
        c->pool = s->next;
    pthread_mutex_unlock(&c->mu);
    return s != NULL ? s : dlock__connset_new(c);
}

void dlock__connset_put(dlock_client *c, dlock__connset *s)
{
    s->post = false;
    pthread_mutex_lock(&c->mu);
    s->next = c->pool;
    c->pool = s;
    pthread_mutex_unlock(&c->mu);
}

dlock__connset *dlock__connset_try_get(dlock_client *c)
{
    pthread_mutex_lock(&c->mu);
    bool room = c->sets < DLOCK_NOWAIT_SETS_MAX;
    c->sets += room;
    pthread_mutex_unlock(&c->mu);
    dlock__connset *s = room ? dlock__connset_get(c) : NULL;
    if (room && s == NULL)
        dlock__connset_land(c, NULL);
    return s;
}

void dlock__connset_land(dlock_client *c, dlock__connset *s)
{
    pthread_mutex_lock(&c->mu);
    c->sets--;
    pthread_mutex_unlock(&c->mu);
    if (s != NULL)
        dlock__connset_put(c, s);
}
