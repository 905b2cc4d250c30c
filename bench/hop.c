/*
 * hop.c: W6/hop, W1 through a process in the middle that does nothing but pass bytes.
 *
 * W6 compares a client of dlockd with one of the library in RTTs. A service in the
 * middle costs something whatever it does: each request crosses one more process,
 * whose read, write and two wake-ups a client talking to Redis never pays. This hop
 * is that cost alone, measured in the same run: a forked child of the bench (so pinned
 * as the bench is, as dlockd is) that accepts a connection, connects it to the
 * redis-server, and copies whatever one side sends to the other, in one epoll loop
 * with no parsing and no buffering beyond a read. W1 runs through it unchanged: so
 * W6/hop's p50_extra_rtt is the floor of W6's, what two requests through any process
 * in the middle cost, and W6's minus it is what dlockd's own work costs.
 *
 * The child makes system calls only (fork of a threaded process allows nothing
 * else): its table and buffer are made before the fork.
 */
#include "bench.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOP_MAX_FD 1024 /* W1 makes one connection; the table is for fds */
#define HOP_BUF    (64 * 1024)

typedef struct hop_state {
    int listen_fd;
    struct sockaddr_storage up;
    socklen_t up_len;
    int peer[HOP_MAX_FD]; /* fd -> the fd it is copied to, -1 */
    char buf[HOP_BUF];
} hop_state;

static void hop_close_pair(hop_state *h, int ep, int fd)
{
    int other = h->peer[fd];
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
    h->peer[fd] = -1;
    if (other >= 0) {
        epoll_ctl(ep, EPOLL_CTL_DEL, other, NULL);
        close(other);
        h->peer[other] = -1;
    }
}

static void hop_accept(hop_state *h, int ep)
{
    int one = 1;
    int c = accept(h->listen_fd, NULL, NULL);
    if (c < 0)
        return;
    int s = socket(h->up.ss_family, SOCK_STREAM, 0);
    if (s < 0 || c >= HOP_MAX_FD || s >= HOP_MAX_FD ||
        connect(s, (struct sockaddr *)&h->up, h->up_len) != 0) {
        close(c);
        if (s >= 0)
            close(s);
        return;
    }
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    h->peer[c] = s;
    h->peer[s] = c;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = c};
    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
    ev.data.fd = s;
    epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
}

/* The child: forever, until the bench kills it. A write that would block blocks
 * (the sockets are blocking): W1 has one request in flight, so it never does. */
static _Noreturn void hop_loop(hop_state *h)
{
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = h->listen_fd};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, h->listen_fd, &ev) != 0)
        _exit(1);
    for (;;) {
        struct epoll_event evs[16];
        int n = epoll_wait(ep, evs, 16, -1);
        if (n < 0 && errno != EINTR)
            _exit(1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == h->listen_fd) {
                hop_accept(h, ep);
                continue;
            }
            if (h->peer[fd] < 0)
                continue;
            ssize_t got = read(fd, h->buf, sizeof h->buf);
            if (got <= 0) {
                hop_close_pair(h, ep, fd);
                continue;
            }
            for (ssize_t off = 0; off < got;) {
                ssize_t w = write(h->peer[fd], h->buf + off, (size_t)(got - off));
                if (w <= 0) {
                    hop_close_pair(h, ep, fd);
                    break;
                }
                off += w;
            }
        }
    }
}

int hop_start(const char *host, int port, bench_hop *out)
{
    memset(out, 0, sizeof *out);
    hop_state *h = calloc(1, sizeof *h);
    if (h == NULL)
        return -1;
    for (int i = 0; i < HOP_MAX_FD; i++)
        h->peer[i] = -1;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, service, &hints, &ai) != 0 || ai == NULL) {
        free(h);
        errno = EHOSTUNREACH; /* for the caller's message: the name did not resolve */
        return -1;
    }
    memcpy(&h->up, ai->ai_addr, ai->ai_addrlen);
    h->up_len = ai->ai_addrlen;
    freeaddrinfo(ai);

    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    h->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (h->listen_fd < 0 || bind(h->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(h->listen_fd, 16) != 0 ||
        getsockname(h->listen_fd, (struct sockaddr *)&a, &alen) != 0) {
        if (h->listen_fd >= 0)
            close(h->listen_fd);
        free(h);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0)
        hop_loop(h);
    close(h->listen_fd);
    free(h);
    if (pid < 0)
        return -1;
    out->pid = pid;
    out->port = ntohs(a.sin_port);
    return 0;
}

void hop_stop(bench_hop *h)
{
    if (h->pid <= 0)
        return;
    kill(h->pid, SIGKILL);
    while (waitpid(h->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    h->pid = 0;
}
