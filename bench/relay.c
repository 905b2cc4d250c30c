/*
 * relay.c: an emulated network for W4, a TCP relay that delays every byte.
 *
 * On two cores, loopback cannot show whether a Redlock fan-out to 5 nodes is parallel:
 * a round trip is tens of microseconds, mostly CPU, and 5 sequential ones look about
 * like 5 parallel ones competing for the same CPU. A 1 ms delay each way per node
 * makes the difference plain: parallel rounds cost about one delayed round trip,
 * sequential ones N of them.
 *
 * A relay listens on a free 127.0.0.1 port in front of one node. For each accepted
 * connection it opens one to the node, and forwards what it reads in either direction
 * after `delay`: what is read is queued with a due time (read time + delay) and sent
 * when due, so order is preserved and the delay does not depend on how bytes were cut
 * into segments. One thread per relay, one ppoll() loop; the thread asks for a 1 ns
 * timer slack so that its wake-ups are on time (the default slack is 50 us).
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define READ_CHUNK 65536

typedef struct chunk {
    struct chunk *next;
    int64_t due_ns;
    size_t len, off;
    char data[];
} chunk;

/* One relayed connection: fd[0] the client side, fd[1] the node side; q[i] holds the
 * bytes read from fd[i], on their way to fd[1 - i]. */
typedef struct pair {
    int fd[2];
    chunk *head[2], *tail[2];
    bool eof[2];
} pair;

struct relay {
    int lfd;
    int port;
    int stop[2]; /* a pipe: a byte on it ends the thread */
    char host[256];
    int up_port;
    int64_t delay_ns;
    pthread_t th;
    bool started;
    pair *pairs;
    int npairs, cap;
};

/* Close both sockets, drop what is queued, and fill the slot with the last pair
 * (callers iterate so that the moved pair is not skipped). */
static void pair_close(relay *r, int k)
{
    pair *p = &r->pairs[k];
    for (int i = 0; i < 2; i++) {
        close(p->fd[i]);
        while (p->head[i] != NULL) {
            chunk *c = p->head[i];
            p->head[i] = c->next;
            free(c);
        }
    }
    r->pairs[k] = r->pairs[--r->npairs];
}

/* A blocking connect: on loopback it is immediate, and the relay serves one
 * client's connections, which all wait for this one anyway. */
static int connect_upstream(const relay *r)
{
    char port[16];
    snprintf(port, sizeof port, "%d", r->up_port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(r->host, port, &hints, &ai) != 0)
        return -1;
    int fd = -1;
    for (struct addrinfo *a = ai; a != NULL; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

/* No Nagle (a lock command is one small segment that must leave at once), and
 * non-blocking for the poll loop. */
static void tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Accept every pending connection and pair each with a new one to the node. */
static void accept_all(relay *r)
{
    for (;;) {
        int cfd = accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0)
            return; /* EAGAIN: no more; anything else: try again on the next wake-up */
        int ufd = connect_upstream(r);
        if (ufd < 0) {
            close(cfd); /* the client sees the node as down, which it is */
            continue;
        }
        if (r->npairs == r->cap) {
            int cap = r->cap ? r->cap * 2 : 8;
            pair *np = realloc(r->pairs, (size_t)cap * sizeof *np);
            if (np == NULL) {
                close(cfd);
                close(ufd);
                continue;
            }
            r->pairs = np;
            r->cap = cap;
        }
        tune(cfd);
        tune(ufd);
        r->pairs[r->npairs++] = (pair){.fd = {cfd, ufd}};
    }
}

/* Read what fd[i] has into its queue. false when the pair must close. */
static bool pump_in(relay *r, pair *p, int i)
{
    for (;;) {
        chunk *c = malloc(sizeof *c + READ_CHUNK);
        if (c == NULL)
            return false;
        ssize_t n = recv(p->fd[i], c->data, READ_CHUNK, 0);
        if (n <= 0) {
            free(c);
            if (n == 0) {
                p->eof[i] = true;
                return true;
            }
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        }
        c->next = NULL;
        c->due_ns = now_ns() + r->delay_ns;
        c->len = (size_t)n;
        c->off = 0;
        if (p->tail[i] != NULL)
            p->tail[i]->next = c;
        else
            p->head[i] = c;
        p->tail[i] = c;
        if ((size_t)n < READ_CHUNK)
            return true;
    }
}

/* Send the due part of queue i to fd[1 - i]. false when the pair must close. */
static bool pump_out(pair *p, int i, int64_t now)
{
    while (p->head[i] != NULL && p->head[i]->due_ns <= now) {
        chunk *c = p->head[i];
        ssize_t n = send(p->fd[1 - i], c->data + c->off, c->len - c->off, MSG_NOSIGNAL);
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        c->off += (size_t)n;
        if (c->off < c->len)
            return true; /* the socket is full: POLLOUT will tell */
        p->head[i] = c->next;
        if (p->head[i] == NULL)
            p->tail[i] = NULL;
        free(c);
    }
    return true;
}

/* The loop: send what is due, poll until the next due time or a socket event,
 * read what arrived (stamped with its due time), accept new connections. */
static void *relay_main(void *arg)
{
    relay *r = arg;
    prctl(PR_SET_TIMERSLACK, 1UL);
    struct pollfd *pfd = NULL;
    int pcap = 0;
    for (;;) {
        int64_t now = now_ns(), next = INT64_MAX;
        for (int k = 0; k < r->npairs; k++) {
            pair *p = &r->pairs[k];
            bool ok = pump_out(p, 0, now) && pump_out(p, 1, now);
            /* A side that closed ends the pair once what it sent has gone through. */
            if (!ok || (p->eof[0] && p->head[0] == NULL) || (p->eof[1] && p->head[1] == NULL)) {
                pair_close(r, k--);
                continue;
            }
            for (int i = 0; i < 2; i++)
                if (p->head[i] != NULL && p->head[i]->due_ns < next)
                    next = p->head[i]->due_ns;
        }
        int need = 2 + 2 * r->npairs;
        if (need > pcap) {
            struct pollfd *np = realloc(pfd, (size_t)need * 2 * sizeof *np);
            if (np == NULL)
                break;
            pfd = np;
            pcap = need * 2;
        }
        pfd[0] = (struct pollfd){.fd = r->stop[0], .events = POLLIN};
        pfd[1] = (struct pollfd){.fd = r->lfd, .events = POLLIN};
        for (int k = 0; k < r->npairs; k++) {
            pair *p = &r->pairs[k];
            for (int i = 0; i < 2; i++) {
                short ev = p->eof[i] ? 0 : POLLIN;
                /* Wait for room only when what is queued for this socket is due. */
                chunk *out = p->head[1 - i];
                if (out != NULL && out->due_ns <= now)
                    ev |= POLLOUT;
                /* A side at EOF with nothing to receive is not polled: it would
                 * report POLLHUP on every pass until the pair closes. */
                pfd[2 + 2 * k + i] = (struct pollfd){.fd = ev ? p->fd[i] : -1, .events = ev};
            }
        }
        struct timespec ts, *tsp = NULL;
        if (next != INT64_MAX) {
            int64_t wait = next - now_ns();
            if (wait < 0)
                wait = 0;
            ts.tv_sec = (time_t)(wait / 1000000000);
            ts.tv_nsec = (long)(wait % 1000000000);
            tsp = &ts;
        }
        int ready = ppoll(pfd, (nfds_t)need, tsp, NULL);
        if (ready < 0 && errno != EINTR)
            break;
        if (ready <= 0)
            continue;
        if (pfd[0].revents)
            break;
        /* Read before accepting: accept_all may move pairs (realloc). */
        int npairs = r->npairs;
        for (int k = npairs - 1; k >= 0; k--) {
            pair *p = &r->pairs[k];
            bool ok = true;
            for (int i = 0; i < 2 && ok; i++)
                if (pfd[2 + 2 * k + i].revents & (POLLIN | POLLHUP | POLLERR))
                    ok = pump_in(r, p, i);
            if (!ok)
                pair_close(r, k);
        }
        if (pfd[1].revents & POLLIN)
            accept_all(r);
    }
    free(pfd);
    return NULL;
}

relay *relay_start(const char *host, int port, int64_t delay_us)
{
    relay *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->lfd = r->stop[0] = r->stop[1] = -1;
    snprintf(r->host, sizeof r->host, "%s", host);
    r->up_port = port;
    r->delay_ns = delay_us * 1000;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (r->lfd < 0 || bind(r->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(r->lfd, 64) != 0 || getsockname(r->lfd, (struct sockaddr *)&sa, &len) != 0 ||
        pipe2(r->stop, O_CLOEXEC) != 0) {
        fprintf(stderr, "dlock-bench: relay: %s\n", strerror(errno));
        relay_stop(r);
        return NULL;
    }
    r->port = ntohs(sa.sin_port);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, BENCH_STACK_BYTES);
    int rc = pthread_create(&r->th, &attr, relay_main, r);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        fprintf(stderr, "dlock-bench: relay thread: %s\n", strerror(rc));
        relay_stop(r);
        return NULL;
    }
    r->started = true;
    return r;
}

int relay_port(const relay *r)
{
    return r->port;
}

void relay_stop(relay *r)
{
    if (r == NULL)
        return;
    if (r->started) {
        char b = 1;
        ssize_t w = write(r->stop[1], &b, 1);
        (void)w; /* a pipe with room: it cannot fail short of a bug */
        pthread_join(r->th, NULL);
    }
    while (r->npairs > 0)
        pair_close(r, 0);
    free(r->pairs);
    if (r->lfd >= 0)
        close(r->lfd);
    for (int i = 0; i < 2; i++)
        if (r->stop[i] >= 0)
            close(r->stop[i]);
    free(r);
}
