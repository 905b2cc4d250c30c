/*
 * hooks.c: what the modules do at a connection's end, and their state in it.
 *
 * The core (server.c, jobs.c, park.c) knows connections, replies, jobs and waits, and
 * nothing of what a module keeps for a connection (the session locks, the channels
 * subscribed to): each module registers its hooks at the start, and takes a slot of
 * every connection's mod[] for its state. The hooks run in the order they were added,
 * at three moments: the close (closing), the close once no job of the connection is in
 * flight (closed: its parked operation is given up first), and an end told to a
 * connection still open (ending: the stop after a drain, an end_msg).
 */
#include "dlockd.h"

#include <stdlib.h>

void dd_conn_hooks_closing(dd_conn *c)
{
    for (int i = 0; i < dd_srv.nhooks; i++)
        if (dd_srv.hooks[i]->closing != NULL)
            dd_srv.hooks[i]->closing(c);
}

void dd_conn_closed_idle(dd_conn *c)
{
    /* A job in flight may be using what a module keeps for the connection, or its
     * pending: its end calls here again once it is over. */
    if (c->jobs > 0)
        return;
    dd_park_give_up(c);
    for (int i = 0; i < dd_srv.nhooks; i++)
        if (dd_srv.hooks[i]->closed != NULL)
            dd_srv.hooks[i]->closed(c);
}

void dd_conn_hooks_ending(dd_conn *c)
{
    for (int i = 0; i < dd_srv.nhooks; i++)
        if (dd_srv.hooks[i]->ending != NULL)
            dd_srv.hooks[i]->ending(c);
}

void dd_conn_hooks_add(const dd_conn_hooks *h)
{
    if (dd_srv.nhooks == DD_HOOKS_MAX)
        abort(); /* DD_HOOKS_MAX is too small for the modules: a bug */
    dd_srv.hooks[dd_srv.nhooks++] = h;
}

int dd_conn_slot_new(void)
{
    if (dd_srv.nslots == DD_CONN_SLOTS)
        abort(); /* DD_CONN_SLOTS is too small for the modules: a bug */
    return dd_srv.nslots++;
}

void dd_conn_end_pending(dd_conn *c)
{
    char *msg = c->end_msg;
    c->end_msg = NULL;
    dd_conn_end(c, "%s", msg);
    if (!c->closing)
        dd_conn_hooks_ending(c); /* now: the close may come a linger later */
    free(msg);
}
