/*
 * conn.c: one connection to one node.
 *
 * Everything here is non-blocking and step-wise, because the caller (fanout.c) drives
 * N connections at once from one poll() loop under one deadline: it starts a connect,
 * queues bytes, flushes when the socket is writable, reads when it is readable, and
 * asks for the next reply. hiredis does the protocol (redisReader); sockets, deadlines
 * and buffers are ours, since hiredis 0.14's blocking context cannot wait on N
 * servers at once.
 *
 * A new connection queues a handshake before anything else: AUTH (when there is a
 * password), SELECT (when the db is not 0) and INFO (for the eviction policy and the
 * server's run_id). Its replies are consumed here; the caller only ever sees replies
 * to its own commands. Replies of commands that a caller abandoned (sent, then not
 * awaited or timed out) are counted in `skip` and discarded in order, so a late reply
 * can never be taken for the answer to a later command.
 *
 * Every descriptor is CLOEXEC (dlock run forks and execs) and every send uses
 * MSG_NOSIGNAL (the library installs no signal handlers, and a closed peer must not
 * kill the process with SIGPIPE).
 *
 * A rediss:// node (one with a TLS context) runs the same life with tls.c between
 * the buffers and the socket: the TLS handshake follows the TCP connect within the
 * same connect deadline, and flushes and reads go through the session.
 */
#include "transport.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* Handshake steps, in the order their replies arrive. */
enum { HS_AUTH = 1, HS_SELECT, HS_INFO };

void dlock__conn_init(dlock__conn *c, dlock__node *node)
{
    memset(c, 0, sizeof *c);
    c->node = node;
    c->fd = -1;
    c->state = DLOCK_CONN_CLOSED;
    c->read_ev = POLLIN;
    c->flush_ev = POLLOUT;
}

void dlock__conn_close(dlock__conn *c)
{
    if (c->fd >= 0) {
        /* Commands given up on (an awaited command whose reply is still owed, a
         * command half written, or one pipelined behind an unfinished handshake) may
         * still sit in the kernel's send queue, unacknowledged behind a partition. A
         * plain close() would go on delivering them once the network heals: an
         * acquire given up long ago would then take the lock for a full lease, held by
         * no one. An abortive close (linger 0: reset, send queue dropped) ends them
         * with the connection. Otherwise the close is normal, and delivers what was
         * sent not awaited (a release, the leaving of a queue): a reset would drop
         * those too, and a waiter freed with its client would stay queued. */
        bool abortive = c->risky > 0 || c->outpos < c->outlen || c->handshake > 0;
        if (abortive) {
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            (void)setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        }
        dlock__tls_close(c, !abortive); /* no-op without TLS */
        close(c->fd);
    }
    dlock__tls_close(c, false);
    c->fd = -1;
    c->state = DLOCK_CONN_CLOSED;
    c->read_ev = POLLIN;
    c->flush_ev = POLLOUT;
    if (c->reader != NULL)
        redisReaderFree(c->reader);
    c->reader = NULL;
    c->outlen = c->outpos = 0;
    c->handshake = c->hs_next = 0;
    c->skip = c->risky = 0;
    c->cap.refused = false;
    if (c->ai != NULL)
        freeaddrinfo(c->ai);
    c->ai = c->ai_next = NULL;
}

/* Free what the node's topology keeps beside c (a cluster's parked connections). */
static void topo_conn_free(dlock__conn *c, bool forget)
{
    const dlock__topology *t = c->node->topo;
    if (t->conn_free != NULL)
        t->conn_free(c, forget);
}

void dlock__conn_forget(dlock__conn *c)
{
    /* The socket is the parent's too: it stays open there, and an option set on it
     * here (the abortive close's SO_LINGER) would change how the parent's own close
     * ends the connection, and a TLS close_notify would end the parent's session. Drop
     * this process's descriptor and memory and touch nothing else. */
    dlock__tls_close(c, false);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    topo_conn_free(c, true);
    dlock__conn_free(c);
}

void dlock__conn_free(dlock__conn *c)
{
    topo_conn_free(c, false);
    dlock__conn_close(c);
    free(c->out);
    c->out = NULL;
    c->outcap = 0;
}

int dlock__conn_queue(dlock__conn *c, const char *buf, size_t len)
{
    /* Drop what was already sent before growing: the buffer holds one round. */
    if (c->outpos == c->outlen)
        c->outpos = c->outlen = 0;
    if (c->outlen + len > c->outcap) {
        size_t cap = c->outcap ? c->outcap : 256;
        while (cap < c->outlen + len)
            cap *= 2;
        char *p = dlock__realloc(c->out, cap);
        if (p == NULL)
            return DLOCK_ERR_NOMEM;
        c->out = p;
        c->outcap = cap;
    }
    memcpy(c->out + c->outlen, buf, len);
    c->outlen += len;
    return DLOCK_OK;
}

/* Queue one handshake command, remembering which step it is. */
static int queue_handshake(dlock__conn *c, int step, int argc, const char **argv)
{
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, argc, argv, NULL);
    if (len < 0)
        return DLOCK_ERR_NOMEM;
    int rc = dlock__conn_queue(c, cmd, (size_t)len);
    redisFreeCommand(cmd);
    if (rc == DLOCK_OK)
        c->hs[c->handshake++] = (unsigned char)step;
    return rc;
}

/* The TCP (or unix) connect is done: the connection is ready, or for TLS its
 * handshake starts. */
static int connected(dlock__conn *c, dlock__err *e)
{
    if (c->node->tls_ctx != NULL)
        return dlock__tls_start(c, e);
    c->state = DLOCK_CONN_READY;
    return DLOCK_OK;
}

/* Start a non-blocking connect to c->ai_next (TCP) or the socket path (unix). */
static int start_connect(dlock__conn *c, dlock__err *e)
{
    const dlock__addr *a = &c->node->addr;
    for (;;) {
        int family, rc;
        struct sockaddr_un sun;
        const struct sockaddr *sa;
        socklen_t salen;
        if (a->is_unix) {
            memset(&sun, 0, sizeof sun);
            sun.sun_family = AF_UNIX;
            memcpy(sun.sun_path, a->path, strlen(a->path) + 1);
            family = AF_UNIX;
            sa = (const struct sockaddr *)&sun;
            salen = sizeof sun;
        } else {
            if (c->ai_next == NULL)
                return DLOCK_ERR_IO; /* e was set by the last failure */
            family = c->ai_next->ai_family;
            sa = c->ai_next->ai_addr;
            salen = c->ai_next->ai_addrlen;
            c->ai_next = c->ai_next->ai_next;
        }
        int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return dlock__node_err(e, DLOCK_ERR_IO, c->node, "socket: %s", strerror(errno));
        if (family != AF_UNIX) {
            /* Lock commands are small and latency-bound: never wait for Nagle. */
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        c->fd = fd;
        do
            rc = connect(fd, sa, salen);
        while (rc < 0 && errno == EINTR);
        if (rc == 0)
            return connected(c, e);
        if (errno == EINPROGRESS) {
            c->state = DLOCK_CONN_CONNECTING;
            return DLOCK_OK;
        }
        dlock__node_err(e, DLOCK_ERR_IO, c->node, "connect: %s", strerror(errno));
        close(fd);
        c->fd = -1;
        if (a->is_unix)
            return DLOCK_ERR_IO;
    }
}

int dlock__conn_open(dlock__conn *c, dlock__err *e)
{
    const dlock__addr *a = &c->node->addr;
    dlock__conn_close(c);
    if ((c->reader = dlock__reader_new()) == NULL)
        return dlock__node_err(e, DLOCK_ERR_NOMEM, c->node, "out of memory");
    c->cap.max_elements =
        c->node->reply_max_elements ? c->node->reply_max_elements : DLOCK_REPLY_MAX_ELEMENTS;
    c->reresolve = false;
    /* Where it goes is the topology's: the URL's host, the master the Sentinels name,
     * or a cluster's master. */
    int rc = c->node->topo->resolve(c, e);
    if (rc != DLOCK_OK) {
        dlock__conn_close(c);
        return rc;
    }
    if (!a->is_unix) {
        /* Name resolution is the one step not bounded by our deadline (getaddrinfo
         * blocks); numeric addresses, the common case for lock servers, do not touch
         * the resolver. */
        struct addrinfo hints = {0};
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_NUMERICSERV;
        char port[8];
        snprintf(port, sizeof port, "%d", c->port);
        int gai = getaddrinfo(c->host, port, &hints, &c->ai);
        if (gai != 0) {
            c->ai = NULL;
            dlock__conn_close(c);
            return dlock__node_err(e, DLOCK_ERR_IO, c->node, "cannot resolve host: %s",
                                   gai_strerror(gai));
        }
        c->ai_next = c->ai;
    }
    const dlock__node_rules *rules = c->node->rules;
    c->connect_deadline_us = dlock__now_us() + rules->connect_timeout_us + rules->timeout_us;
    rc = start_connect(c, e);
    if (rc == DLOCK_OK) {
        const char *pass = dlock__node_password(c->node);
        if (pass != NULL && a->user != NULL)
            rc = queue_handshake(c, HS_AUTH, 3, (const char *[]){"AUTH", a->user, pass});
        else if (pass != NULL)
            rc = queue_handshake(c, HS_AUTH, 2, (const char *[]){"AUTH", pass});
        if (rc == DLOCK_OK && a->db != 0) {
            char db[16];
            snprintf(db, sizeof db, "%d", a->db);
            rc = queue_handshake(c, HS_SELECT, 2, (const char *[]){"SELECT", db});
        }
        if (rc == DLOCK_OK && !c->node->query_only)
            rc = queue_handshake(c, HS_INFO, 1, (const char *[]){"INFO"});
        if (rc != DLOCK_OK)
            dlock__node_err(e, rc, c->node, "out of memory");
    }
    if (rc != DLOCK_OK)
        dlock__conn_close(c);
    return rc;
}

int dlock__conn_on_connect(dlock__conn *c, dlock__err *e)
{
    if (c->tls_handshaking)
        return dlock__tls_handshake(c, e);
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err == 0)
        return connected(c, e);
    dlock__node_err(e, DLOCK_ERR_IO, c->node, "connect: %s", strerror(err));
    close(c->fd);
    c->fd = -1;
    /* Try the host's next address (say 127.0.0.1 after ::1); the queued handshake
     * and command stay queued for it. */
    int rc = c->node->addr.is_unix ? DLOCK_ERR_IO : start_connect(c, e);
    if (rc != DLOCK_OK)
        c->state = DLOCK_CONN_CLOSED;
    return rc;
}

/* A send or recv that returned -1: DLOCK_ERR_AGAIN to retry it (EINTR), DLOCK_OK when
 * the socket has no more room or bytes for now, or the error. */
static int sock_failed(dlock__conn *c, const char *op, const char *hint, dlock__err *e)
{
    if (errno == EINTR)
        return DLOCK_ERR_AGAIN;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return DLOCK_OK;
    return dlock__node_err(e, DLOCK_ERR_IO, c->node, "%s: %s%s", op, strerror(errno), hint);
}

int dlock__conn_flush(dlock__conn *c, dlock__err *e)
{
    if (c->ssl != NULL)
        return dlock__tls_flush(c, e);
    while (c->outpos < c->outlen) {
        ssize_t w = send(c->fd, c->out + c->outpos, c->outlen - c->outpos, MSG_NOSIGNAL);
        int rc = w < 0 ? sock_failed(c, "send", "", e) : DLOCK_ERR_AGAIN;
        if (rc != DLOCK_ERR_AGAIN)
            return rc;
        if (w > 0)
            c->outpos += (size_t)w;
    }
    return DLOCK_OK;
}

int dlock__conn_feed(dlock__conn *c, const char *buf, size_t len, dlock__err *e)
{
    /* Refuse to buffer past the cap: a reply that large is not a lock reply. */
    size_t buffered = c->reader->len - c->reader->pos;
    size_t max = c->node->reply_max_bytes ? c->node->reply_max_bytes : DLOCK_REPLY_MAX_BYTES;
    if (buffered + len > max)
        return dlock__node_err(e, DLOCK_ERR_PROTOCOL, c->node,
                               "reply larger than %zu bytes refused", max);
    if (redisReaderFeed(c->reader, buf, len) != REDIS_OK)
        return dlock__node_err(e, DLOCK_ERR_NOMEM, c->node, "out of memory reading a reply");
    c->lagging = false; /* the server answers again */
    return DLOCK_OK;
}

int dlock__conn_read(dlock__conn *c, dlock__err *e)
{
    if (c->ssl != NULL)
        return dlock__tls_read(c, e);
    char buf[16384];
    for (;;) {
        ssize_t r = recv(c->fd, buf, sizeof buf, 0);
        /* A TLS port drops a client that does not speak TLS before answering
         * anything: say what it may be. */
        const char *hint = c->handshake > 0 && c->hs_next == 0 && !c->node->addr.is_unix
                               ? " before any reply (a TLS port? use rediss:// for one)"
                               : "";
        if (r < 0) {
            int rc = sock_failed(c, "recv", hint, e);
            if (rc == DLOCK_ERR_AGAIN)
                continue;
            return rc;
        }
        if (r == 0)
            return dlock__node_err(e, DLOCK_ERR_IO, c->node, "connection closed by the server%s",
                                   hint);
        int rc = dlock__conn_feed(c, buf, (size_t)r, e);
        if (rc != DLOCK_OK)
            return rc;
        if ((size_t)r < sizeof buf)
            return DLOCK_OK;
    }
}

/* A handshake reply: AUTH and SELECT must succeed; INFO is informative. */
static int on_handshake(dlock__conn *c, const redisReply *r, dlock__err *e)
{
    int step = c->hs[c->hs_next++];
    c->handshake--;
    if (step == HS_INFO)
        return dlock__conn_on_info(c, r, e);
    if (r->type != REDIS_REPLY_ERROR)
        return DLOCK_OK;
    int err = dlock__server_error_code(r->str, r->len);
    /* A server that cannot serve yet (loading, at its maxclients) refuses the AUTH too:
     * that is no verdict on the password. */
    if (step == HS_AUTH && err != DLOCK_ERR_UNAVAILABLE)
        return dlock__node_err(e, DLOCK_ERR_AUTH, c->node, "AUTH refused: %.200s", r->str);
    if (step == HS_AUTH)
        return dlock__node_err(e, err, c->node, "AUTH: %.200s", r->str);
    /* SELECT: -NOAUTH is a missing password, -LOADING a node not ready; a plain -ERR is
     * a database number the server does not have, which is the URL's fault. */
    return dlock__node_err(e, err == DLOCK_ERR_PROTOCOL ? DLOCK_ERR_INVALID : err, c->node,
                           "SELECT %d refused: %.200s", c->node->addr.db, r->str);
}

int dlock__conn_next_reply(dlock__conn *c, redisReply **out, dlock__err *e)
{
    *out = NULL;
    for (;;) {
        void *obj = NULL;
        /* Set here, not once: a topology may move connections by value (a cluster
         * node's are parked beside the one in use). Not redisReaderSetPrivdata:
         * hiredis 0.14 casts its result to int, which clang rejects as a pointer
         * truncation. */
        c->reader->privdata = &c->cap;
        if (redisReaderGetReply(c->reader, &obj) != REDIS_OK) {
            if (c->cap.refused)
                return dlock__node_err(e, DLOCK_ERR_PROTOCOL, c->node,
                                       "reply with more than %d elements refused",
                                       c->cap.max_elements);
            if (c->reader->err == REDIS_ERR_OOM)
                return dlock__node_err(e, DLOCK_ERR_NOMEM, c->node,
                                       "out of memory reading a reply");
            return dlock__node_err(e, DLOCK_ERR_PROTOCOL, c->node, "bad reply: %s",
                                   c->reader->errstr);
        }
        if (obj == NULL)
            return DLOCK_OK; /* incomplete: wait for more bytes */
        redisReply *r = obj;
        int rc = DLOCK_OK;
        if (c->handshake > 0) {
            rc = on_handshake(c, r, e);
        } else if (c->skip > 0) {
            c->skip--; /* the late answer to an abandoned command */
            if (c->risky > 0)
                c->risky--;
        } else {
            *out = r;
            return DLOCK_OK;
        }
        freeReplyObject(r);
        if (rc != DLOCK_OK)
            return rc;
    }
}

short dlock__conn_events(const dlock__conn *c)
{
    if (c->state == DLOCK_CONN_CONNECTING)
        return c->tls_handshaking ? c->read_ev : POLLIN | POLLOUT;
    return (short)(c->read_ev | (c->outpos < c->outlen ? c->flush_ev : 0));
}

/* Whether the server sent something: recv's MSG_PEEK, or for TLS whether a record
 * carried data (1), the end (0), or nothing yet (-1, errno EAGAIN). */
static ssize_t peek(dlock__conn *c)
{
    char b;
    if (c->ssl == NULL)
        return recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    int r = dlock__tls_peek(c);
    if (r < 0)
        errno = EAGAIN;
    return r;
}

bool dlock__conn_stale(dlock__conn *c)
{
    /* A connect or handshake left over from an earlier round goes on until its
     * deadline. */
    if (c->state == DLOCK_CONN_CONNECTING)
        return dlock__now_us() >= c->connect_deadline_us;
    if (c->state != DLOCK_CONN_READY)
        return false;
    if (c->reresolve || (c->handshake > 0 && dlock__now_us() >= c->connect_deadline_us))
        return true;
    /* An idle connection that the server closed (a restart, a timeout, CLIENT KILL)
     * shows as EOF or an error; unexpected bytes with no reply owed mean the stream is
     * out of step. Either way, reconnect now rather than fail the caller's command. */
    ssize_t r = peek(c);
    if (r > 0 && (c->skip > 0 || c->handshake > 0)) {
        /* The late replies of abandoned commands, or of a handshake that an earlier
         * round left going (decided without this node): take them now. A server that
         * sent them and then closed (it restarted) shows its EOF only behind them, and
         * a command sent on that connection would fail the caller's round. */
        dlock__err scratch; /* a discarded reply's reason: nobody reads it */
        redisReply *extra = NULL;
        if (dlock__conn_read(c, &scratch) != DLOCK_OK ||
            dlock__conn_next_reply(c, &extra, &scratch) != DLOCK_OK)
            return true;
        c->lagging = false; /* it answers again */
        if (extra != NULL) {
            freeReplyObject(extra); /* a reply nobody owed: out of step */
            return true;
        }
        r = peek(c);
    }
    if (r == 0)
        return true;
    if (r < 0)
        return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    c->lagging = false; /* the late replies it owes are here: it answers again */
    return c->skip == 0 && c->handshake == 0;
}

int dlock__req_resend(const dlock__conn *c, dlock__req *r, redisReply **reply, const char **cmd,
                      size_t *len)
{
    *cmd = NULL;
    if (r->resend == NULL || r->retried)
        return DLOCK_OK;
    int rc = r->resend(r->resend_arg, *reply, cmd, len);
    if (rc == DLOCK_OK && *cmd == NULL)
        return DLOCK_OK;
    freeReplyObject(*reply);
    *reply = NULL;
    if (rc != DLOCK_OK) {
        *cmd = NULL;
        return dlock__node_err(&r->why, rc, c->node, "out of memory");
    }
    r->retried = true;
    return DLOCK_OK;
}
