/*
 * relay.c: the fault relay (relay.h).
 *
 * One thread per relay runs one ppoll() loop over a listening socket, an eventfd that
 * the setters use to wake it, and two sockets per relayed connection (a "pair": the
 * client's and the one the relay opened to the server).
 *
 * Bytes read from either side are cut into whole messages by a redisReader (commands
 * from the client, replies from the server) before anything is decided about them, so
 * that a fault can hit one command or one reply exactly. Each pair keeps the list of
 * commands whose replies are still owed, in order ("expect"): a forwarded command
 * waits for the server's reply; a command the relay answers itself (a canned reply
 * "instead") is answered when it reaches the head of that list, so that replies stay
 * in the order the client sent its commands.
 *
 * Whole messages then go into a queue per direction, each chunk with the time it is
 * due (read time + delay), and leave when due and not held; trickle sends one byte of
 * the reply queue per period. All state is under one mutex, which the thread drops
 * only while it sleeps in ppoll(). A setter changes the settings under the mutex,
 * wakes the thread, and waits until the thread has gone once around its loop with the
 * new settings, so that when a setter returns, the fault is in force. Only the relay
 * thread touches the sockets.
 */
#include "relay.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define READ_CHUNK   16384
#define FILLER_CHUNK 65536
#define MAX_RULES    16
#define NAME_LEN     32

/* ---- canned replies ------------------------------------------------------------ */

enum { CAN_POISON = 1, CAN_STREAM = 2, CAN_CLOSE = 4 };

/* Each reply's name is its enumerator's; an error reply is "-NAME message\r\n". */
#define CANNED(id, bytes, flags) [FR_##id] = {#id, bytes, flags}
#define ERROR_REPLY(id, message) CANNED(id, "-" #id " " message "\r\n", 0)

static const struct canned {
    const char *name;
    const char *bytes;
    int flags; /* CAN_POISON: the stream is garbage after it (later replies are dropped);
                  CAN_STREAM: 10^9 filler bytes follow; CAN_CLOSE: the relay closes after */
} canned_table[FR_CANNED_COUNT] = {
    ERROR_REPLY(LOADING, "Redis is loading the dataset in memory"),
    ERROR_REPLY(
        BUSY, "Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."),
    ERROR_REPLY(MASTERDOWN,
                "Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
    ERROR_REPLY(TRYAGAIN, "Multiple keys request during rehashing of slot"),
    ERROR_REPLY(CLUSTERDOWN, "The cluster is down"),
    ERROR_REPLY(READONLY, "You can't write against a read only replica."),
    ERROR_REPLY(OOM, "command not allowed when used memory > 'maxmemory'."),
    ERROR_REPLY(
        MISCONF,
        "Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."),
    ERROR_REPLY(NOSCRIPT, "No matching script. Please use EVAL."),
    ERROR_REPLY(NOAUTH, "Authentication required."),
    ERROR_REPLY(WRONGPASS, "invalid username-password pair or user is disabled."),
    ERROR_REPLY(NOPERM, "this user has no permissions to run the 'evalsha' command"),
    ERROR_REPLY(WRONGTYPE, "Operation against a key holding the wrong kind of value"),
    ERROR_REPLY(MOVED, "3999 127.0.0.1:6381"),
    ERROR_REPLY(ASK, "3999 127.0.0.1:6381"),
    ERROR_REPLY(CROSSSLOT, "Keys in request don't hash to the same slot"),
    ERROR_REPLY(ERR, "unknown command 'EVALSHA'"),
    CANNED(INTEGER, ":42\r\n", 0),
    CANNED(BULK, "$5\r\nhello\r\n", 0),
    CANNED(NIL, "$-1\r\n", 0),
    CANNED(STATUS, "+OK\r\n", 0),
    CANNED(EMPTY_ARRAY, "*0\r\n", 0),
    CANNED(HUGE_ARRAY, "*2147483647\r\n", CAN_POISON),
    CANNED(HUGE_BULK, "$1000000000\r\n", CAN_POISON | CAN_STREAM),
    CANNED(HTTP,
           "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: "
           "11\r\nConnection: close\r\n\r\nBad Request",
           CAN_POISON | CAN_CLOSE),
    CANNED(HUGE_INTEGER, ":9007199254740991\r\n", 0),
};

#undef CANNED
#undef ERROR_REPLY

const char *fr_canned_name(fr_canned c)
{
    return c >= 0 && c < FR_CANNED_COUNT ? canned_table[c].name : "?";
}

const char *fr_canned_bytes(fr_canned c, size_t *len)
{
    const char *b = c >= 0 && c < FR_CANNED_COUNT ? canned_table[c].bytes : "";
    *len = strlen(b);
    return b;
}

/* ---- data structures ------------------------------------------------------------ */

typedef struct chunk {
    struct chunk *next;
    int64_t due_ns;
    size_t len, off;
    uint64_t filler;  /* after data: this many filler bytes (FR_HUGE_BULK's stream) */
    bool close_after; /* close the pair once this chunk is out */
    bool rst;         /* ... with a reset */
    char data[];
} chunk;

typedef struct queue {
    chunk *head, *tail;
} queue;

/* The relay's FIFO lists (a queue's chunks, a pair's owed replies) are singly linked
 * with a tail pointer: FIFO_PUSH appends node (its next already NULL) at the tail,
 * FIFO_SHIFT unlinks the head, which must be there. */
#define FIFO_PUSH(head, tail, node)                                                                \
    do {                                                                                           \
        if ((tail) != NULL)                                                                        \
            (tail)->next = (node);                                                                 \
        else                                                                                       \
            (head) = (node);                                                                       \
        (tail) = (node);                                                                           \
    } while (0)
#define FIFO_SHIFT(head, tail)                                                                     \
    do {                                                                                           \
        (head) = (head)->next;                                                                     \
        if ((head) == NULL)                                                                        \
            (tail) = NULL;                                                                         \
    } while (0)

/* One direction's message parser: raw holds the bytes fed to rd that do not belong to
 * a message handed on yet. When rd completes a message, it ends where rd's unread
 * bytes begin, so its length is raw.len - (rd->len - rd->pos). */
typedef struct parser {
    redisReader *rd;
    bool off; /* the peer does not speak RESP (or we gave up): bytes pass as they are */
    char *raw;
    size_t len, cap;
} parser;

/* A command whose reply is still owed to the client. */
typedef struct expect {
    struct expect *next;
    bool canned; /* answered by the relay (FR_REPLACE_INSTEAD) */
    fr_canned what;
    char name[NAME_LEN];
} expect;

typedef struct pair {
    int fd[2];    /* [0] the client's socket, [1] the one to the server; -1 once closed */
    queue q[2];   /* q[0]: bytes for the server; q[1]: bytes for the client */
    parser ps[2]; /* ps[0]: commands from the client; ps[1]: replies from the server */
    expect *exp, *exp_tail;
    bool eof[2];
    bool subscribed;      /* sent a SUBSCRIBE: replies are no longer paired with commands */
    bool broken;          /* lost bytes to a blackhole */
    bool dead;            /* drops everything, for good (FR_HEAL_DEAD) */
    bool poisoned;        /* a canned reply made the stream garbage: later replies dropped */
    bool closing;         /* to be freed at the end of this pass */
    int64_t next_byte_ns; /* trickle: when the next byte may go */
} pair;

typedef struct rule {
    fr_rule r;
    char cmd[NAME_LEN];
} rule;

struct fr_relay {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    bool started, stop, exited;
    int lfd, efd, port;
    struct sockaddr_storage up_addr; /* the server, resolved once by fr_start_to */
    socklen_t up_len;
    char url[64];
    pair **pairs;
    int npairs, cap;
    /* settings */
    int64_t delay_ns[2]; /* [0] up, [1] down */
    int hold;
    bool blackhole;
    int heal;
    int64_t trickle_ns;
    bool refuse;
    rule rules[MAX_RULES];
    int nrules;
    /* actions the thread carries out on its next pass */
    bool reset_all, healing;
    unsigned long gen_req, gen_done;
    fr_stats st;
};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* How a chunk ends its connection, if it does. */
enum { CLOSE_NO = 0, CLOSE_FIN = 1, CLOSE_RST = 2 };

/* ---- queues ----------------------------------------------------------------------- */

static bool q_push(queue *q, const char *data, size_t len, int64_t due, uint64_t filler,
                   int close_after)
{
    chunk *c = malloc(sizeof *c + len);
    if (c == NULL)
        return false;
    c->next = NULL;
    c->due_ns = due;
    c->len = len;
    c->off = 0;
    c->filler = filler;
    c->close_after = close_after != 0;
    c->rst = close_after == CLOSE_RST;
    if (len > 0)
        memcpy(c->data, data, len);
    FIFO_PUSH(q->head, q->tail, c);
    return true;
}

static void q_clear(queue *q)
{
    while (q->head != NULL) {
        chunk *c = q->head;
        q->head = c->next;
        free(c);
    }
    q->tail = NULL;
}

/* ---- pairs ------------------------------------------------------------------------- */

static void close_fd(int *fd, bool rst)
{
    if (*fd < 0)
        return;
    if (rst) {
        /* SO_LINGER with a zero timeout: close() sends RST instead of FIN. */
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(*fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    close(*fd);
    *fd = -1;
}

/* Close a pair's sockets now (the memory goes at the end of the pass). */
static void pair_close(fr_relay *r, pair *p, bool rst)
{
    if (p->closing)
        return;
    if (rst && p->fd[0] >= 0)
        r->st.resets++;
    close_fd(&p->fd[0], rst);
    close_fd(&p->fd[1], false);
    p->closing = true;
}

static void pair_free(pair *p)
{
    for (int i = 0; i < 2; i++) {
        q_clear(&p->q[i]);
        if (p->ps[i].rd != NULL)
            redisReaderFree(p->ps[i].rd);
        free(p->ps[i].raw);
    }
    while (p->exp != NULL) {
        expect *e = p->exp;
        p->exp = e->next;
        free(e);
    }
    free(p);
}

/* Free the pairs closed during this pass. */
static void sweep(fr_relay *r)
{
    for (int k = 0; k < r->npairs; k++) {
        if (!r->pairs[k]->closing)
            continue;
        pair_free(r->pairs[k]);
        r->pairs[k--] = r->pairs[--r->npairs];
    }
    r->st.open = r->npairs;
}

/* ---- rules ------------------------------------------------------------------------- */

static bool name_matches(const char *pattern, const char *name)
{
    if (pattern[0] == '\0')
        return true;
    if (name == NULL)
        return false;
    size_t n = strlen(pattern);
    if (pattern[n - 1] == '*')
        return strncmp(pattern, name, n - 1) == 0;
    return strcmp(pattern, name) == 0;
}

/* The first live rule among those whose action is in `actions` (a bit mask of
 * 1 << action) that matches the command `name` (NULL: an unsolicited reply); spends
 * one of its uses. */
static const rule *match(fr_relay *r, const char *name, unsigned actions)
{
    for (int i = 0; i < r->nrules; i++) {
        rule *ru = &r->rules[i];
        if (!(actions & (1u << ru->r.action)) || ru->r.count == 0 || !name_matches(ru->cmd, name))
            continue;
        if (ru->r.count > 0)
            ru->r.count--;
        return ru;
    }
    return NULL;
}

/* ---- what the relay sends --------------------------------------------------------- */

/* Queue bytes for the client. */
static void emit(fr_relay *r, pair *p, const char *data, size_t len, uint64_t filler,
                 int close_after)
{
    if (!q_push(&p->q[1], data, len, now_ns() + r->delay_ns[1], filler, close_after))
        pair_close(r, p, true);
}

static void emit_canned(fr_relay *r, pair *p, fr_canned what)
{
    const struct canned *c = &canned_table[what];
    r->st.injected++;
    emit(r, p, c->bytes, strlen(c->bytes), (c->flags & CAN_STREAM) ? 1000000000u : 0,
         (c->flags & CAN_CLOSE) ? CLOSE_FIN : CLOSE_NO);
    if (c->flags & CAN_POISON)
        p->poisoned = true;
}

/* Answer the commands at the head of the expect list that the relay answers itself. */
static void drain_canned(fr_relay *r, pair *p)
{
    while (p->exp != NULL && p->exp->canned && !p->closing) {
        expect *e = p->exp;
        FIFO_SHIFT(p->exp, p->exp_tail);
        if (!p->poisoned)
            emit_canned(r, p, e->what);
        free(e);
    }
}

static bool push_expect(pair *p, bool canned, fr_canned what, const char *name)
{
    expect *e = calloc(1, sizeof *e);
    if (e == NULL)
        return false;
    e->canned = canned;
    e->what = what;
    snprintf(e->name, sizeof e->name, "%s", name);
    FIFO_PUSH(p->exp, p->exp_tail, e);
    return true;
}

/* A whole command from the client, raw[0..len). */
static void on_command(fr_relay *r, pair *p, const redisReply *m, const char *raw, size_t len)
{
    char name[NAME_LEN] = "";
    if (m->type == REDIS_REPLY_ARRAY && m->elements > 0 &&
        m->element[0]->type == REDIS_REPLY_STRING) {
        size_t n = m->element[0]->len < NAME_LEN - 1 ? m->element[0]->len : NAME_LEN - 1;
        for (size_t i = 0; i < n; i++)
            name[i] = (char)toupper((unsigned char)m->element[0]->str[i]);
        name[n] = '\0';
    }
    r->st.commands++;
    if (p->subscribed) {
        if (!q_push(&p->q[0], raw, len, now_ns() + r->delay_ns[0], 0, CLOSE_NO))
            pair_close(r, p, true);
        return;
    }
    const rule *ru = match(r, name, (1u << FR_RESET_REQUEST) | (1u << FR_REPLACE_INSTEAD));
    if (ru != NULL && ru->r.action == FR_RESET_REQUEST) {
        pair_close(r, p, true);
        return;
    }
    bool ok;
    if (ru != NULL) {
        ok = push_expect(p, true, ru->r.canned, name);
    } else {
        ok = q_push(&p->q[0], raw, len, now_ns() + r->delay_ns[0], 0, CLOSE_NO) &&
             push_expect(p, false, FR_CANNED_COUNT, name);
    }
    if (!ok) {
        pair_close(r, p, true);
        return;
    }
    if (strcmp(name, "SUBSCRIBE") == 0 || strcmp(name, "PSUBSCRIBE") == 0 ||
        strcmp(name, "SSUBSCRIBE") == 0)
        p->subscribed = true;
    drain_canned(r, p);
}

/* A whole reply from the server, raw[0..len). */
static void on_reply(fr_relay *r, pair *p, const char *raw, size_t len)
{
    r->st.replies++;
    if (p->poisoned)
        return;
    expect *e = NULL;
    if (p->exp != NULL && !p->exp->canned) {
        e = p->exp;
        FIFO_SHIFT(p->exp, p->exp_tail);
    }
    const rule *ru =
        match(r, e != NULL ? e->name : NULL,
              (1u << FR_RESET_REPLY) | (1u << FR_REPLACE_AFTER) | (1u << FR_CLOSE_AFTER));
    free(e);
    size_t k = ru == NULL || ru->r.k < 0 ? 0 : (size_t)ru->r.k;
    if (k > len)
        k = len;
    if (ru == NULL) {
        emit(r, p, raw, len, 0, CLOSE_NO);
    } else if (ru->r.action == FR_RESET_REPLY && k == 0) {
        pair_close(r, p, true);
        return;
    } else if (ru->r.action == FR_RESET_REPLY) {
        emit(r, p, raw, k, 0, CLOSE_RST);
    } else if (ru->r.action == FR_REPLACE_AFTER) {
        emit_canned(r, p, ru->r.canned);
    } else {
        emit(r, p, raw, k, 0, CLOSE_FIN);
    }
    drain_canned(r, p);
}

/* ---- reading ------------------------------------------------------------------------ */

static bool ps_append(parser *ps, const char *b, size_t n)
{
    if (ps->len + n > ps->cap) {
        size_t cap = ps->cap ? ps->cap : 4096;
        while (cap < ps->len + n)
            cap *= 2;
        char *nr = realloc(ps->raw, cap);
        if (nr == NULL)
            return false;
        ps->raw = nr;
        ps->cap = cap;
    }
    memcpy(ps->raw + ps->len, b, n);
    ps->len += n;
    return true;
}

/* Bytes that pass without being understood: forward them as they are. */
static void pass_raw(fr_relay *r, pair *p, int side, const char *b, size_t n)
{
    if (n == 0)
        return;
    if (side == 0) {
        if (!q_push(&p->q[0], b, n, now_ns() + r->delay_ns[0], 0, CLOSE_NO))
            pair_close(r, p, true);
    } else if (!p->poisoned) {
        emit(r, p, b, n, 0, CLOSE_NO);
    }
}

/* Feed bytes read from side (0 client, 1 server) to its parser and act on every
 * message they complete. */
static void ingest(fr_relay *r, pair *p, int side, const char *b, size_t n)
{
    parser *ps = &p->ps[side];
    if (ps->off) {
        pass_raw(r, p, side, b, n);
        return;
    }
    if (redisReaderFeed(ps->rd, b, n) != REDIS_OK || !ps_append(ps, b, n)) {
        pair_close(r, p, true);
        return;
    }
    while (!p->closing) {
        void *obj = NULL;
        if (redisReaderGetReply(ps->rd, &obj) != REDIS_OK) {
            /* Not RESP (an inline command, say): stop parsing this side and let the
             * rest through untouched. */
            ps->off = true;
            pass_raw(r, p, side, ps->raw, ps->len);
            ps->len = 0;
            return;
        }
        if (obj == NULL)
            return;
        size_t unread = ps->rd->len - ps->rd->pos;
        size_t mlen = ps->len - unread;
        if (side == 0)
            on_command(r, p, obj, ps->raw, mlen);
        else
            on_reply(r, p, ps->raw, mlen);
        freeReplyObject(obj);
        memmove(ps->raw, ps->raw + mlen, unread);
        ps->len = unread;
    }
}

/* After a recv or send on p failed: true when a signal interrupted it (try again);
 * else false, with the pair closed unless the socket was only not ready. */
static bool io_interrupted(fr_relay *r, pair *p)
{
    if (errno == EINTR)
        return true;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
        pair_close(r, p, false);
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
                pair_close(r, p, false);
            return;
        }
        if (r->blackhole || p->dead) {
            r->st.dropped_bytes += n;
            p->broken = true;
            continue;
        }
        ingest(r, p, side, buf, (size_t)n);
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
            pair_close(r, p, rst);
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
            close_fd(&cfd, true);
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
            pair_free(p);
            p = NULL;
        }
        if (p == NULL) {
            /* The server is down (or we are out of memory): the client sees it as
             * down, which it is. */
            close_fd(&cfd, false);
            close_fd(&ufd, false);
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

/* Carry out what the setters asked for, then tell them it is done. */
static void apply_actions(fr_relay *r)
{
    if (r->reset_all) {
        for (int k = 0; k < r->npairs; k++)
            pair_close(r, r->pairs[k], true);
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
                pair_close(r, p, true);
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
        int64_t now = now_ns(), wake = INT64_MAX;
        for (int k = 0; k < r->npairs; k++) {
            pair *p = r->pairs[k];
            pump_out(r, p, 0, now);
            pump_out(r, p, 1, now);
            /* A side that left ends the pair once what it is owed or sent is out. */
            if (!p->closing && ((p->eof[0] && p->q[0].head == NULL) ||
                                (p->eof[1] && (p->q[1].head == NULL || p->dead))))
                pair_close(r, p, false);
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
            int64_t w = wake - now_ns();
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

/* Wake the thread and wait until it has gone around its loop once with the current
 * settings. Called with r->mu held; returns with it released. */
static void commit(fr_relay *r)
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
        commit(r);
        pthread_join(r->th, NULL);
    }
    for (int k = 0; k < r->npairs; k++) {
        pair_close(r, r->pairs[k], false);
        pair_free(r->pairs[k]);
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

void fr_pass(fr_relay *r)
{
    pthread_mutex_lock(&r->mu);
    r->delay_ns[0] = r->delay_ns[1] = 0;
    r->hold = 0;
    if (r->blackhole)
        r->healing = true;
    r->blackhole = false;
    r->trickle_ns = 0;
    r->refuse = false;
    r->nrules = 0;
    commit(r);
}

void fr_delay(fr_relay *r, int64_t up_ms, int64_t down_ms)
{
    pthread_mutex_lock(&r->mu);
    r->delay_ns[0] = up_ms * 1000000;
    r->delay_ns[1] = down_ms * 1000000;
    commit(r);
}

void fr_hold(fr_relay *r, int dirs)
{
    pthread_mutex_lock(&r->mu);
    r->hold = dirs & (FR_UP | FR_DOWN);
    commit(r);
}

void fr_release(fr_relay *r)
{
    fr_hold(r, 0);
}

void fr_blackhole(fr_relay *r, bool on, enum fr_heal heal)
{
    pthread_mutex_lock(&r->mu);
    if (r->blackhole && !on)
        r->healing = true;
    r->blackhole = on;
    r->heal = heal;
    commit(r);
}

void fr_trickle(fr_relay *r, int64_t ms_per_byte)
{
    pthread_mutex_lock(&r->mu);
    r->trickle_ns = ms_per_byte * 1000000;
    commit(r);
}

void fr_refuse(fr_relay *r, bool on)
{
    pthread_mutex_lock(&r->mu);
    r->refuse = on;
    commit(r);
}

void fr_reset_now(fr_relay *r)
{
    pthread_mutex_lock(&r->mu);
    r->reset_all = true;
    commit(r);
}

void fr_add_rule(fr_relay *r, const fr_rule *ru)
{
    pthread_mutex_lock(&r->mu);
    /* Spent rules give their places up; the live ones keep their order. */
    int live = 0;
    for (int i = 0; i < r->nrules; i++)
        if (r->rules[i].r.count != 0)
            r->rules[live++] = r->rules[i];
    r->nrules = live;
    if (r->nrules < MAX_RULES) {
        rule *d = &r->rules[r->nrules++];
        d->r = *ru;
        d->r.cmd = NULL;
        size_t i = 0;
        for (const char *s = ru->cmd ? ru->cmd : ""; *s && i < NAME_LEN - 1; s++)
            d->cmd[i++] = (char)toupper((unsigned char)*s);
        d->cmd[i] = '\0';
    } else {
        fprintf(stderr, "relay: more than %d rules; rule ignored\n", MAX_RULES);
    }
    commit(r);
}

void fr_replace(fr_relay *r, fr_canned what, enum fr_action how, int count, const char *cmd)
{
    fr_rule ru = {.action = how, .canned = what, .count = count, .cmd = cmd};
    fr_add_rule(r, &ru);
}

void fr_clear_rules(fr_relay *r)
{
    pthread_mutex_lock(&r->mu);
    r->nrules = 0;
    commit(r);
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
