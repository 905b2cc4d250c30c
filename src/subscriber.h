/*
 * subscriber.h: the client's subscriber thread, what subscriber.c (the thread and
 * its connections), subscriber_lend.c (their reading lent to a waiter), wait.c (the
 * waiters it wakes) and observe.c (the leaders' observers it hears for) share.
 */
#ifndef DLOCK_SUBSCRIBER_H
#define DLOCK_SUBSCRIBER_H

#include "internal.h"

#include <poll.h>

/* Something heard on a listener's channel: a message, or the subscription confirmed
 * by a node (after a connection was made or remade: what was published meanwhile was
 * missed). */
typedef struct dlock__heard {
    struct dlock__heard *next;
    int node;
    bool confirmed; /* a confirmation (no text) rather than a message */
    size_t len;
    char text[]; /* the message, NUL-terminated */
} dlock__heard;

/* A channel someone listens on besides the client's wake-up channel (an observer's). */
typedef struct dlock__listener {
    struct dlock__listener *next;
    char *chan;
    int efd; /* written when something is queued */
    /* Guarded by the subscriber's mutex: */
    uint32_t sent;                 /* nodes whose connection was asked to SUBSCRIBE */
    dlock__heard *first, **last_p; /* what was heard, oldest first */
    bool missed;                   /* something heard could not be queued (memory) */
} dlock__listener;

/* A channel to UNSUBSCRIBE from, its listener gone. */
typedef struct dlock__unsub {
    struct dlock__unsub *next;
    char chan[];
} dlock__unsub;

struct dlock__waitsys {
    pthread_mutex_t mu;       /* everything below, except conns (the reader's own) */
    pthread_cond_t confirmed; /* a subscription was confirmed, or the thread stopped */
    pthread_cond_t answered;  /* the thread answered a request to lend (lend cleared) */
    pthread_t thread;
    bool stop;
    int ctl;  /* eventfd: wakes the reader to stop, or to (un)subscribe listeners */
    int park; /* eventfd: wakes the thread while it has lent the reading out */
    /* Who reads the connections (conns, retry_at_us, backoff_us, connected_once): the
     * thread, or, while lent, a thread that sleeps in a wait of its own (borrowed:
     * one does now; lent and not borrowed: nobody does, and what the servers send
     * waits in the sockets for the next borrower). lend: a sleeper asks for it; recall:
     * the thread must read again (a second waiter, a listener, a step in an event loop,
     * a subscription to confirm), as soon as no borrower reads. */
    bool lent, borrowed, lend, recall;
    dlock__waiter *waiters;
    dlock__listener *listeners;
    dlock__unsub *unsubs;
    uint32_t subscribed;  /* nodes that confirmed the wake-up channel (bit per node) */
    dlock__conn *conns;   /* one subscriber connection per node */
    int64_t *retry_at_us; /* when to reconnect a closed node */
    int64_t *backoff_us;
    bool *connected_once;
};

/* With ws->mu: ask for the thread back from a sleeper it lent the reading to (it reads
 * again once no sleeper does). Nothing when it has not lent it. */
void dlock__waitsys_recall(struct dlock__waitsys *ws);
/* The thread's side of lending, with ws->mu (released meanwhile): answer a sleeper's
 * request for the reading, and while it is lent, sleep until it is asked back or the
 * thread is stopped, and no sleeper reads. */
void dlock__lend_thread(struct dlock__waitsys *ws);
/* One turn of the reader (the thread, or a sleeper it lent the reading to): reconnect
 * the nodes that are due, then wait on the connections, ctl and extra[0..nextra) (their
 * revents set on return) until one is ready or until until_us, and act on what the
 * connections sent. */
void dlock__subscriber_turn(struct dlock_client *c, struct dlock__waitsys *ws, struct pollfd *extra,
                            int nextra, int64_t until_us);
/* A sleep's descriptors, as dlock__sleep_on watches them: fd (-1: none), cancel_fd
 * (0: none) and close_fd (-1: none), each for POLLIN. */
void dlock__sleep_fds(struct pollfd p[3], int fd, int cancel_fd, int close_fd);
/* What those descriptors' revents end a sleep with: DLOCK_ERR_CLOSED, then
 * DLOCK_ERR_CANCELED, else DLOCK_OK (fd readable, or nothing). */
int dlock__sleep_ends(const struct pollfd p[3]);
/* Add one to an eventfd's counter (a full counter means a wake-up is pending). */
void dlock__kick(int fd);
/* Take an eventfd's count (non-blocking: nothing when none is pending). */
void dlock__drain(int fd);
/* The client's subscriber, started on first use (NULL with the error when it cannot
 * be). */
struct dlock__waitsys *dlock__subscriber(struct dlock_client *c, int *rc);
/* The subscriber if the client has one yet, else NULL. */
struct dlock__waitsys *dlock__subscriber_peek(struct dlock_client *c);
/* Listen on chan: everything heard on it is queued in a new listener, whose efd is
 * kicked. The subscription is sent by the thread, and each node's confirmation is
 * queued too. */
int dlock__listen(struct dlock_client *c, const char *chan, dlock__listener **out);
/* What l heard since the last call, oldest first (the caller frees the list), and in
 * *missed whether something heard could not be kept. */
dlock__heard *dlock__listen_take(struct dlock_client *c, dlock__listener *l, bool *missed);
/* Stop listening and free l. */
void dlock__listen_end(struct dlock_client *c, dlock__listener *l);

#endif /* DLOCK_SUBSCRIBER_H */
