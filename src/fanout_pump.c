/*
 * fanout_pump.c: a round in flight waits for its replies (fanout.c sends them). One
 * ppoll() on every socket the round still waits for, until the earliest deadline; each
 * socket's step (fanout.c) takes what came. A round on the pipes (dlockd's shared
 * connections) is pumped by pipe_pump.c instead: here it only adds its deadlines.
 */
#include "transport.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>

/* The nodes the round still waits for, as poll entries (idx: their node), and in
 * *next the earliest of their deadlines (now when TLS holds bytes already read). */
static int wanted(const dlock__flight *f, int64_t now, struct pollfd *pfd, int *idx, int64_t *next)
{
    int nfds = 0;
    *next = INT64_MAX;
    for (int i = 0; i < f->n; i++) {
        const dlock__req *r = &f->reqs[i];
        if (r->done)
            continue;
        if (f->conns[i].pipe != NULL) {
            /* The pipes' pump takes its replies: its deadline is all it adds. */
            if (r->deadline_us < *next)
                *next = r->deadline_us;
            continue;
        }
        pfd[nfds] =
            (struct pollfd){.fd = f->conns[i].fd, .events = dlock__conn_events(&f->conns[i])};
        idx[nfds++] = i;
        if (r->deadline_us < *next)
            *next = r->deadline_us;
        /* Bytes TLS already decrypted do not make the socket readable: take them
         * now rather than wait. */
        if (dlock__conn_buffered(&f->conns[i]))
            *next = now;
    }
    return nfds;
}

int dlock__flight_wants(const dlock__flight *f, struct pollfd *pfd, int64_t *due_us)
{
    int idx[DLOCK_SERVERS_MAX];
    dlock__pipe_lock(f->conns);
    int n = wanted(f, dlock__now_us(), pfd, idx, due_us);
    dlock__pipe_unlock(f->conns);
    return n;
}

/* One wait of at most wait_us (-1: until the next deadline) on the sockets f waits for,
 * and the steps they are ready for; the requests past their deadline expire first,
 * unless late_ok (then what came in is taken, however late). True once every request
 * is done. */
static bool pump(dlock__flight *f, int64_t wait_us, bool late_ok)
{
    struct pollfd pfd[DLOCK_SERVERS_MAX];
    int idx[DLOCK_SERVERS_MAX];
    dlock__conn *conns = f->conns;
    dlock__req *reqs = f->reqs;
    int64_t now = dlock__now_us(), next;
    for (int i = 0; i < f->n && !late_ok; i++)
        if (!reqs[i].done && now >= reqs[i].deadline_us)
            dlock__req_expire(&conns[i], &reqs[i]);
    int nfds = wanted(f, now, pfd, idx, &next);
    if (nfds == 0)
        return true;
    int64_t wait = next > now ? next - now : 0;
    if (wait_us >= 0 && wait_us < wait)
        wait = wait_us;
    struct timespec ts = {(time_t)(wait / 1000000), (long)(wait % 1000000) * 1000};
    /* A look without waiting at one plain socket that only reads (an event loop's step,
     * when its poll said the socket is readable) is the read itself: a recv that finds
     * nothing costs what the poll would have, and one that finds the reply saves it. */
    bool look = wait == 0 && nfds == 1 && pfd[0].events == POLLIN &&
                conns[idx[0]].state == DLOCK_CONN_READY && conns[idx[0]].ssl == NULL;
    if (look)
        pfd[0].revents = POLLIN;
    int ready = look ? 1 : ppoll(pfd, (nfds_t)nfds, &ts, NULL);
    if (ready < 0) {
        if (errno == EINTR)
            return false;
        /* poll itself failed (ENOMEM): nothing can be waited for. */
        for (int k = 0; k < nfds; k++) {
            dlock__req *r = &reqs[idx[k]];
            dlock__err_set(&r->why, 0, "poll: %s", strerror(errno));
            dlock__req_fail(&conns[idx[k]], r, DLOCK_ERR_IO);
        }
        return true;
    }
    for (int k = 0; k < nfds; k++) {
        if (dlock__conn_buffered(&conns[idx[k]]))
            pfd[k].revents |= conns[idx[k]].read_ev;
        if (pfd[k].revents != 0)
            dlock__req_step(&conns[idx[k]], &reqs[idx[k]], pfd[k].revents);
    }
    dlock__flight_abandon_decided(f);
    for (int i = 0; i < f->n; i++)
        if (!reqs[i].done)
            return false;
    return true;
}

bool dlock__flight_pump(dlock__flight *f, int64_t wait_us)
{
    if (f->conns[0].pipe != NULL)
        return dlock__pipe_flight_pump(f, wait_us);
    return pump(f, wait_us, false);
}

void dlock__flight_take_arrived(dlock__flight *f)
{
    if (f->conns[0].pipe == NULL)
        pump(f, 0, true);
}

bool dlock__flight_settled(dlock__flight *f)
{
    if (f->conns[0].pipe != NULL)
        return dlock__pipe_flight_pump(f, 0);
    int64_t now = dlock__now_us();
    bool over = true;
    for (int i = 0; i < f->n; i++) {
        if (!f->reqs[i].done && now >= f->reqs[i].deadline_us)
            dlock__req_expire(&f->conns[i], &f->reqs[i]);
        over &= f->reqs[i].done;
    }
    return over;
}
