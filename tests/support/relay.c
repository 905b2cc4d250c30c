/*
 * relay.c: the fault relay (relay.h): its thread and its lifetime.
 *
 * One thread per relay runs one ppoll() loop over a listening socket, an eventfd that
 * the setters use to wake it, and two sockets per relayed connection (a "pair": the
 * client's and the one the relay opened to the server). What becomes of the bytes of a
 * pair (parsed into whole commands and replies, faulted, queued) is relay_pair.c; what
 * a test can ask the relay to do is relay_faults.c (relay_internal.h).
 *
 * Queued chunks leave when due and not held; trickle sends one byte of the reply queue
 * per period. All state is under one mutex, which the thread drops only while it
 * sleeps in ppoll(). A setter changes the settings under the mutex, wakes the thread,
 * and waits until the thread has gone once around its loop with the new settings, so
 * that when a setter returns, the fault is in force. Only the relay thread touches the
 * sockets.
 */
#include "relay_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define READ_CHUNK   16384
#define FILLER_CHUNK 65536

int64_t fr__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- reading ------------------------------------------------------------------------ */

/* After a recv or send on p failed: true when a signal interrupted it (try again);
 * else false, with the pair closed unless the socket was only not ready. */
static bool io_interrupted(fr_relay *r, pair *p)
{
    if (errno == EINTR)
        return true;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
        fr__pair_close(r, p, false);
    return false;
}

/* Read what side has. */
static void pump_in(fr_relay *r, pair *p, int side)
{
    char buf[READ_CHUNK];
    for (int rounds = 0; rounds < 8 && !p->closing; rounds++) {
        ssize_t n = recv(p->fd[side], buf, sizeof buf, 0);
        if (n < 0) {
            if (io_interrupted(r, p))
                continue;
            return;
        }
        if (n == 0) {
            p->eof[side] = true;
            /* A client that left needs nothing more; a server that left gets its last
             * bytes to the client first (the pass closes the pair when they are out). */
            if (side == 0 && (p->dead || p->q[0].head == NULL))
                fr__pair_close(r, p, false);
            return;
        }
        if (r->blackhole || p->dead) {
            r->st.dropped_bytes += n;
            p->broken = true;
            continue;
        }
        fr__ingest(r, p, side, buf, (size_t)n);
    }
}

/* ---- writing ------------------------------------------------------------------------ */

/* May queue q (0 up, 1 down) send now? *wake gets the time it may, if later. */
static bool may_send(const fr_relay *r, const pair *p, int d, int64_t now, int64_t *wake)
{
    const chunk *c = p->q[d].head;
    if (c == NULL || r->blackhole || p->dead || (r->hold & (d == 0 ? FR_UP : FR_DOWN)))
        return false;
    int64_t at = c->due_ns;
    if (d == 1 && r->trickle_ns > 0 && p->next_byte_ns > at)
        at = p->next_byte_ns;
    if (at > now) {
        if (at < *wake)
            *wake = at;
        return false;
    }
    return true;
}

/* Send what queue d may send now. */
static void pump_out(fr_relay *r, pair *p, int d, int64_t now)
{
    static const char filler[FILLER_CHUNK] = {0};
    int fd = p->fd[d == 0 ? 1 : 0];
    int64_t ignore = INT64_MAX;
    while (!p->closing && may_send(r, p, d, now, &ignore)) {
        chunk *c = p->q[d].head;
        const char *src;
        size_t want;
        if (c->off < c->len) {
            src = c->data + c->off;
            want = c->len - c->off;
        } else {
            src = filler;
            want = c->filler < FILLER_CHUNK ? (size_t)c->filler : FILLER_CHUNK;
        }
        bool trickling = d == 1 && r->trickle_ns > 0;
        if (trickling && want > 1)
            want = 1;
        if (want > 0) {
            ssize_t n = send(fd, src, want, MSG_NOSIGNAL);
            if (n < 0) {
                if (io_interrupted(r, p))
                    continue;
                return;
            }
            if (d == 0)
                r->st.up_bytes += n;
            else
                r->st.down_bytes += n;
            if (c->off < c->len)
                c->off += (size_t)n;
            else
                c->filler -= (uint64_t)n;
            if (trickling) {
                p->next_byte_ns = now + r->trickle_ns;
                if (c->off < c->len || c->filler > 0)
                    return;
            }
            if ((size_t)n < want)
                return; /* the socket is full: POLLOUT will say when to go on */
        }
        if (c->off < c->len || c->filler > 0)
            continue;
        FIFO_SHIFT(p->q[d].head, p->q[d].tail);
        bool close_now = c->close_after, rst = c->rst;
        free(c);
        if (close_now) {
            fr__pair_close(r, p, rst);
            return;
        }
    }
}

/* ---- accepting ---------------------------------------------------------------------- */

static int connect_upstream(const fr_relay *r)
{
    int fd = socket(r->up_addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    /* A blocking connect to loopback completes at once, even to a stopped server (the
     * kernel accepts into the backlog); a killed one refuses at once. */
    if (connect(fd, (const struct sockaddr *)&r->up_addr, r->up_len) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static void accept_all(fr_relay *r)
{
    for (;;) {
        int cfd = accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0)
            return; /* EAGAIN: no more; anything else: next time */
        r->st.accepted++;
        if (r->refuse) {
            fr__close_fd(&cfd, true);
            r->st.resets++;
            continue;
        }
        int ufd = connect_upstream(r);
        pair *p = ufd >= 0 ? calloc(1, sizeof *p) : NULL;
        if (p != NULL && r->npairs == r->cap) {
            int cap = r->cap ? r->cap * 2 : 16;
            pair **np = realloc(r->pairs, (size_t)cap * sizeof *np);
            if (np == NULL) {
                free(p);
                p = NULL;
            } else {
                r->pairs = np;
                r->cap = cap;
            }
        }
        if (p != NULL && ((p->ps[0].rd = redisReaderCreate()) == NULL ||
                          (p->ps[1].rd = redisReaderCreate()) == NULL)) {
            fr__pair_free(p);
            p = NULL;
        }
        if (p == NULL) {
            /* The server is down (or we are out of memory): the client sees it as
             * down, which it is. */
            fr__close_fd(&cfd, false);
            fr__close_fd(&ufd, false);
            continue;
        }
        tune(cfd);
        tune(ufd);
        p->fd[0] = cfd;
        p->fd[1] = ufd;
        r->pairs[r->npairs++] = p;
        r->st.open = r->npairs;
    }
}

/* ---- the thread --------------------------------------------------------------------- */

/* Free the pairs closed during this pass. */
static void sweep(fr_relay *r)
{
    for (int k = 0; k < r->npairs; k++) {
        if (!r->pairs[k]->closing)
            continue;
        fr__pair_free(r->pairs[k]);
        r->pairs[k--] = r->pairs[--r->npairs];
    }
    r->st.open = r->npairs;
}

/* Carry out what the setters asked for, then tell them it is done. */
static void apply_actions(fr_relay *r)
{
    if (r->reset_all) {
        for (int k = 0; k < r->npairs; k++)
            fr__pair_close(r, r->pairs[k], true);
        r->reset_all = false;
    }
    if (r->healing) {
        for (int k = 0; k < r->npairs; k++) {
            pair *p = r->pairs[k];
            if (!p->broken || p->dead)
                continue;
            if (r->heal == FR_HEAL_DEAD)
                p->dead = true;
            else
                fr__pair_close(r, p, true);
        }
        r->healing = false;
    }
    if (r->gen_done != r->gen_req) {
        r->gen_done = r->gen_req;
        pthread_cond_broadcast(&r->cv);
    }
}

static void *relay_main(void *arg)
{
    fr_relay *r = arg;
    /* Wake-ups on time for delays of a millisecond (the default slack is 50 us). */
    prctl(PR_SET_TIMERSLACK, 1UL);
    struct pollfd *pfd = NULL;
    pair **polled = NULL;
    int pcap = 0;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        apply_actions(r);
        if (r->stop)
            break;
        int64_t now = fr__now_ns(), wake = INT64_MAX;
        for (int k = 0; k < r->npairs; k++) {
            pair *p = r->pairs[k];
            pump_out(r, p, 0, now);
            pump_out(r, p, 1, now);
            /* A side that left ends the pair once what it is owed or sent is out. */
            if (!p->closing && ((p->eof[0] && p->q[0].head == NULL) ||
                                (p->eof[1] && (p->q[1].head == NULL || p->dead))))
                fr__pair_close(r, p, false);
        }
        sweep(r);
        if (2 + 2 * r->npairs > pcap) {
            int cap = (2 + 2 * r->npairs) * 2;
            struct pollfd *np = realloc(pfd, (size_t)cap * sizeof *np);
            pair **npl = np ? realloc(polled, (size_t)cap * sizeof *npl) : NULL;
            if (np != NULL)
                pfd = np;
            if (npl == NULL)
                break; /* out of memory: the relay stops relaying */
            polled = npl;
            pcap = cap;
        }
        int nfds = 0;
        pfd[nfds++] = (struct pollfd){.fd = r->efd, .events = POLLIN};
        pfd[nfds++] = (struct pollfd){.fd = r->lfd, .events = POLLIN};
        for (int k = 0; k < r->npairs; k++) {
            pair *p = r->pairs[k];
            for (int side = 0; side < 2; side++) {
                /* Socket `side` receives queue 1 - side's bytes (q[0] goes to the
                 * server, fd[1]; q[1] to the client, fd[0]). */
                short ev = p->eof[side] ? 0 : POLLIN;
                if (may_send(r, p, side == 0 ? 1 : 0, now, &wake))
                    ev |= POLLOUT;
                polled[nfds] = p;
                pfd[nfds++] = (struct pollfd){.fd = ev ? p->fd[side] : -1, .events = ev};
            }
        }
        struct timespec ts, *tsp = NULL;
        if (wake != INT64_MAX) {
            int64_t w = wake - fr__now_ns();
            if (w < 0)
                w = 0;
            ts.tv_sec = (time_t)(w / 1000000000);
            ts.tv_nsec = (long)(w % 1000000000);
            tsp = &ts;
        }
        pthread_mutex_unlock(&r->mu);
        int ready = ppoll(pfd, (nfds_t)nfds, tsp, NULL);
        pthread_mutex_lock(&r->mu);
        if (ready <= 0)
            continue;
        if (pfd[0].revents & POLLIN) {
            uint64_t v;
            ssize_t got = read(r->efd, &v, sizeof v);
            (void)got; /* EAGAIN only: another pass drained it */
        }
        for (int i = 2; i < nfds; i++) {
            pair *p = polled[i];
            int side = (i - 2) % 2;
            if (pfd[i].revents == 0 || p->closing)
                continue;
            if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR))
                pump_in(r, p, side);
        }
        sweep(r);
        if (pfd[1].revents & POLLIN)
            accept_all(r);
    }
    r->exited = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    free(pfd);
    free(polled);
    return NULL;
}

void fr__commit(fr_relay *r)
{
    unsigned long want = ++r->gen_req;
    uint64_t one = 1;
    ssize_t w = write(r->efd, &one, sizeof one);
    (void)w; /* an eventfd only refuses at 2^64 - 2 */
    while (r->gen_done < want && !r->exited)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

/* ---- the public side ---------------------------------------------------------------- */

/* Resolve host:port once, so that accepting a connection never waits for DNS. 0, or
 * -1 after printing why. */
static int resolve_upstream(fr_relay *r, const char *host, int port)
{
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int rc = getaddrinfo(host, service, &hints, &ai);
    if (rc != 0 || ai == NULL || ai->ai_addrlen > sizeof r->up_addr) {
        fprintf(stderr, "relay: %s: %s\n", host, rc != 0 ? gai_strerror(rc) : "no address");
        if (ai != NULL)
            freeaddrinfo(ai);
        return -1;
    }
    memcpy(&r->up_addr, ai->ai_addr, ai->ai_addrlen);
    r->up_len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

fr_relay *fr_start(int upstream_port)
{
    return fr_start_to("127.0.0.1", upstream_port);
}

fr_relay *fr_start_to(const char *host, int port)
{
    fr_relay *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->lfd = r->efd = -1;
    if (resolve_upstream(r, host, port) != 0) {
        fr_stop(r);
        return NULL;
    }
    r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (r->lfd < 0 || r->efd < 0 || bind(r->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(r->lfd, 128) != 0 || getsockname(r->lfd, (struct sockaddr *)&sa, &len) != 0) {
        fprintf(stderr, "relay: listen: %s\n", strerror(errno));
        fr_stop(r);
        return NULL;
    }
    r->port = ntohs(sa.sin_port);
    snprintf(r->url, sizeof r->url, "redis://127.0.0.1:%d", r->port);
    int rc = pthread_create(&r->th, NULL, relay_main, r);
    if (rc != 0) {
        fprintf(stderr, "relay: thread: %s\n", strerror(rc));
        fr_stop(r);
        return NULL;
    }
    r->started = true;
    return r;
}

void fr_stop(fr_relay *r)
{
    if (r == NULL)
        return;
    if (r->started) {
        pthread_mutex_lock(&r->mu);
        r->stop = true;
        fr__commit(r);
        pthread_join(r->th, NULL);
    }
    for (int k = 0; k < r->npairs; k++) {
        fr__pair_close(r, r->pairs[k], false);
        fr__pair_free(r->pairs[k]);
    }
    free(r->pairs);
    if (r->lfd >= 0)
        close(r->lfd);
    if (r->efd >= 0)
        close(r->efd);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

int fr_port(const fr_relay *r)
{
    return r->port;
}

const char *fr_url(const fr_relay *r)
{
    return r->url;
}

void fr_get_stats(fr_relay *r, fr_stats *out)
{
    pthread_mutex_lock(&r->mu);
    *out = r->st;
    pthread_mutex_unlock(&r->mu);
}

int fr_fds(fr_relay *r)
{
    pthread_mutex_lock(&r->mu);
    int n = (r->lfd >= 0) + (r->efd >= 0);
    for (int k = 0; k < r->npairs; k++)
        n += (r->pairs[k]->fd[0] >= 0) + (r->pairs[k]->fd[1] >= 0);
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* ---- helpers ------------------------------------------------------------------------ */

int fr_cluster_start(int n, dh_server *srv, fr_relay **relays, char *urls, size_t size)
{
    size_t used = 0;
    if (size > 0)
        urls[0] = '\0';
    for (int i = 0; i < n; i++) {
        relays[i] = NULL;
        if (dh_server_start(&srv[i], NULL) != 0 || (relays[i] = fr_start(srv[i].port)) == NULL) {
            fprintf(stderr, "fr_cluster_start: node %d of %d did not start\n", i, n);
            fr_cluster_stop(i + 1, srv, relays);
            return -1;
        }
        int w = snprintf(urls + used, size - used, "%s%s", i > 0 ? "," : "", fr_url(relays[i]));
        if (w < 0 || (size_t)w >= size - used) {
            fprintf(stderr, "fr_cluster_start: %zu bytes are too few for %d URLs\n", size, n);
            fr_cluster_stop(i + 1, srv, relays);
            return -1;
        }
        used += (size_t)w;
    }
    return 0;
}

void fr_cluster_stop(int n, dh_server *srv, fr_relay **relays)
{
    for (int i = 0; i < n; i++) {
        fr_stop(relays[i]);
        relays[i] = NULL;
        dh_server_stop(&srv[i]);
    }
}
