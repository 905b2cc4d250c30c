/*
 * subscriber_lend.c: the reading of the subscriber connections lent to a client's
 * only waiter (docs/waiting.md, "The only waiter reads its own wake-up").
 *
 * A wake-up through the subscriber thread costs two thread switches, the thread's and
 * the waiter's. So the thread lends the reading to a client's only waiter while it
 * sleeps in a blocking call (dlock__wait_sleep), when no listener needs the
 * connections read: the sleeper runs the thread's own turn (reconnections included) on
 * the connections, with its descriptors beside them, and its wake-up is one switch.
 * The reading stays lent between waits (a program that takes a lock again and again
 * asks once), nobody reading meanwhile: only a waiter's wake-ups come, and each waiter
 * has a reader. The thread takes it back when anything else needs it
 * (dlock__waitsys_recall: a second waiter, an event loop's, a listener, a subscription
 * to confirm), once no sleeper reads. Exactly one of them reads at a time; the mutex
 * orders the hand-overs.
 */
#include "subscriber.h"

#include <poll.h>

/* With ws->mu: whether a sleeper may read the connections in the thread's stead: it is
 * the only waiter (an event loop's waiter, or a second thread's, needs the thread), no
 * listener needs them read nor channel left unsubscribed, and nothing asked for the
 * thread back. */
static bool may_lend(const struct dlock__waitsys *ws)
{
    return ws->waiters != NULL && ws->waiters->next == NULL && ws->listeners == NULL &&
           ws->unsubs == NULL && !ws->recall && !ws->stop;
}

void dlock__waitsys_recall(struct dlock__waitsys *ws)
{
    if (!ws->lent || ws->recall)
        return;
    ws->recall = true;
    dlock__kick(ws->ctl);  /* a borrower's turn ends */
    dlock__kick(ws->park); /* the thread looks */
}

/* The thread, while it has lent the reading out: it sleeps until asked back, or to stop,
 * and then until no borrower reads. With ws->mu, released meanwhile. */
static void parked(struct dlock__waitsys *ws)
{
    while (ws->lent && (!(ws->recall || ws->stop) || ws->borrowed)) {
        pthread_mutex_unlock(&ws->mu);
        struct pollfd p = {.fd = ws->park, .events = POLLIN};
        if (poll(&p, 1, -1) > 0)
            dlock__drain(ws->park);
        pthread_mutex_lock(&ws->mu);
    }
    ws->lent = ws->recall = false;
}

void dlock__lend_thread(struct dlock__waitsys *ws)
{
    if (ws->lend) {
        ws->lent = may_lend(ws);
        ws->lend = false;
        pthread_cond_broadcast(&ws->answered);
    }
    if (ws->lent)
        parked(ws);
}

/* The sleeper's side of lending: with ws->mu, whether this thread now reads. */
static bool borrow(dlock_client *c, struct dlock__waitsys *ws)
{
    if (!may_lend(ws))
        return false;
    if (!ws->lent) {
        /* Asked once per run of waits: the reading stays lent between them. */
        ws->lend = true;
        dlock__kick(ws->ctl);
        struct timespec until;
        dlock__cond_deadline(&until, c->rules.timeout_us);
        while (ws->lend && !ws->stop)
            if (pthread_cond_timedwait(&ws->answered, &ws->mu, &until) != 0)
                break;
        ws->lend = false;
    }
    if (!ws->lent || ws->borrowed || !may_lend(ws))
        return false;
    ws->borrowed = true;
    return true;
}

/* Whether fd is readable now. */
static bool readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

int dlock__wait_sleep(dlock_client *c, int fd, int64_t until_us, int cancel_fd, int close_fd)
{
    struct dlock__waitsys *ws = dlock__subscriber_peek(c);
    if (ws == NULL)
        return dlock__sleep_on(fd, until_us, cancel_fd, close_fd);
    pthread_mutex_lock(&ws->mu);
    bool reads = borrow(c, ws);
    pthread_mutex_unlock(&ws->mu);
    if (!reads)
        return dlock__sleep_on(fd, until_us, cancel_fd, close_fd);
    int rc = DLOCK_OK;
    bool handed_back = false;
    for (;;) {
        struct pollfd extra[3];
        dlock__sleep_fds(extra, fd, cancel_fd, close_fd);
        dlock__subscriber_turn(c, ws, extra, 3, until_us);
        if ((rc = dlock__sleep_ends(extra)) != DLOCK_OK)
            break;
        /* A wake-up read in this turn was written to fd after the poll looked. */
        if ((extra[0].revents & POLLIN) || readable(fd) || dlock__now_us() >= until_us)
            break;
        pthread_mutex_lock(&ws->mu);
        handed_back = !may_lend(ws);
        pthread_mutex_unlock(&ws->mu);
        if (handed_back)
            break;
    }
    pthread_mutex_lock(&ws->mu);
    ws->borrowed = false;
    if (ws->recall || ws->stop)
        dlock__kick(ws->park);
    pthread_mutex_unlock(&ws->mu);
    /* Asked for the thread back: the rest of the wait is a plain sleep. */
    if (handed_back)
        return dlock__sleep_on(fd, until_us, cancel_fd, close_fd);
    return rc;
}

void dlock__wait_recall(dlock_client *c)
{
    struct dlock__waitsys *ws = dlock__subscriber_peek(c);
    if (ws == NULL)
        return;
    pthread_mutex_lock(&ws->mu);
    dlock__waitsys_recall(ws);
    pthread_mutex_unlock(&ws->mu);
}
