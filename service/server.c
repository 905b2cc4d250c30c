/*
 * server.c: connections, reading, the write queue and the limits (listen.c accepts them).
 *
 * A connection is a small state machine on the loop: bytes are read into its query
 * buffer, as many whole commands as it holds are run in order, and replies are
 * appended to its output, which one write at a time hands to the kernel. A command
 * that needs the lock servers makes the connection busy: the commands behind it wait
 * in the query buffer until its reply is queued, so replies keep the order of the
 * commands. Reading goes on while a command runs, so that a client that goes away is
 * noticed, but stops while the query buffer is full or the client has not read
 * DD_OUT_SOFT bytes of replies: a client can make dlockd hold only so much for it.
 *
 * A connection of the TLS listener is the same machine with tls.c between its stream
 * and its buffers: reads are decrypted into the query buffer, the output is encrypted
 * as it is handed to a write, and every limit counts the decrypted bytes.
 *
 * A client's FIN (or reset) does not drop what it sent before: the commands already in
 * the query buffer run in order and are answered as long as the socket takes writes
 * (a script's `printf 'UNLOCK ...' | nc -N` relies on it), then the connection closes.
 * Only a wait is given up then, as redis-server frees a blocked client whose peer has
 * gone: nobody is left to be served at its end.
 *
 * Lifetime: a connection is freed when its references are gone: its stream and timer
 * handles (each released by its uv_close callback) and the job in flight, if any.
 */
#include "dlockd.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

dd_server dd_srv;

int64_t dd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void dd_log(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* One write per line, so that lines of the pool threads (the library's log) and of
     * the loop never interleave. */
    fprintf(stderr, "dlockd[%d]: %s\n", (int)getpid(), line);
}

static size_t unsent(const dd_conn *c)
{
    return c->out.len + c->writing;
}

static void process(dd_conn *c);
static void update_reading(dd_conn *c);
static void client_done(dd_conn *c, bool reset);

/* ---- closing -------------------------------------------------------------------------- */

static void on_handle_closed(uv_handle_t *h)
{
    dd_conn_unref(h->data);
}

void dd_conn_unref(dd_conn *c)
{
    if (--c->refs > 0)
        return;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        dd_srv.conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    dd_buf_free(&c->query);
    dd_buf_free(&c->out);
    dd_tls_free(c);
    free(c->name);
    free(c->end_msg);
    free(c);
    dd_srv.nconns_alloc--;
    if (dd_srv.stopping && dd_srv.nconns_alloc == 0)
        dd_server_stop();
}

void dd_conn_close(dd_conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    dd_srv.nconns--;
    if (c->refused)
        dd_srv.refused_open--;
    dd_preauth_remove(c);
    /* Pending writes are canceled by uv_close: their callbacks run before the close
     * callback, and free their buffers. */
    uv_close((uv_handle_t *)&c->h.stream, on_handle_closed);
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    dd_conn_hooks_closing(c);
    dd_conn_closed_idle(c);
}

/* ---- writing -------------------------------------------------------------------------- */

typedef struct write_req {
    uv_write_t req;
    dd_buf buf;
} write_req;

static void flush(dd_conn *c);

static void on_linger_over(uv_timer_t *t)
{
    dd_conn_close(t->data);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    (void)req;
    (void)status; /* the timer or the client's EOF ends the connection either way */
}

/* The last reply (an error before a close, QUIT's +OK) is written: send a FIN, then read
 * and drop what the client still sends until it closes too, for at most DD_LINGER_MS.
 * Closing at once while its bytes sit unread would make the kernel answer with a reset,
 * which can destroy the error reply before the client has read it. */
static void linger(dd_conn *c)
{
    c->lingering = true;
    c->shutdown.data = c;
    dd_tls_close_notify(c);
    if (uv_shutdown(&c->shutdown, &c->h.stream, on_shutdown) != 0) {
        dd_conn_close(c);
        return;
    }
    uv_timer_start(&c->timer, on_linger_over, DD_LINGER_MS, 0);
    update_reading(c);
}

static void on_written(uv_write_t *req, int status)
{
    write_req *w = (write_req *)req;
    dd_conn *c = req->data;
    c->writing = 0;
    dd_buf_free(&w->buf);
    free(w);
    if (c->closing)
        return;
    if (status < 0) {
        /* The client is gone: what it sent still runs, unanswered. */
        client_done(c, true);
        return;
    }
    if (c->out.len > 0) {
        flush(c);
        return;
    }
    if (c->quit) {
        if (c->busy)
            return; /* its command's reply comes next (the stop after a drain) */
        if (c->refused && dd_srv.refused_open > DD_REFUSED_LINGER_MAX)
            dd_conn_close(c); /* a flood: its descriptors are bounded, not its error */
        else if (!c->lingering)
            linger(c);
        return;
    }
    /* Commands held back while the client was not reading can run now. */
    process(c);
}

static void flush(dd_conn *c)
{
    if (c->out_dead)
        c->out.len = 0;
    if (c->closing || c->writing > 0 || c->out.len == 0 || dd_tls_handshaking(c))
        return;
    if (c->tls == NULL && c->reading && !c->quit) {
        /* Written at once when the socket takes it whole (the common case): no request,
         * no callback, no change to the loop's watch; else queued, which reports errors. */
        uv_buf_t b = uv_buf_init(c->out.p, (unsigned)c->out.len);
        int n = uv_try_write(&c->h.stream, &b, 1);
        if (n > 0 && (size_t)n == c->out.len) {
            c->out.len = 0;
            return;
        }
        if (n > 0) {
            memmove(c->out.p, c->out.p + n, c->out.len - (size_t)n);
            c->out.len -= (size_t)n;
        }
    }
    write_req *w = calloc(1, sizeof *w);
    if (w == NULL) {
        dd_log("out of memory writing to client %llu", (unsigned long long)c->id);
        dd_conn_close(c);
        return;
    }
    c->writing = c->out.len;
    if (c->tls != NULL) {
        if (dd_tls_seal(c, &c->out, &w->buf) != 0) {
            dd_log("client %llu closed: TLS cannot encrypt its replies", (unsigned long long)c->id);
            c->writing = 0;
            dd_buf_free(&w->buf);
            free(w);
            dd_conn_close(c);
            return;
        }
    } else {
        w->buf = c->out;
        memset(&c->out, 0, sizeof c->out);
    }
    w->req.data = c;
    uv_buf_t b = uv_buf_init(w->buf.p, (unsigned)w->buf.len);
    int rc = uv_write(&w->req, &c->h.stream, &b, 1, on_written);
    if (rc < 0) {
        c->writing = 0;
        dd_buf_free(&w->buf);
        free(w);
        dd_conn_close(c);
    }
}

void dd_conn_reply(dd_conn *c, dd_buf *b)
{
    if (c->closing) {
        b->len = 0;
        return;
    }
    dd_count_errors(b->p, b->len);
    c->active_ms = dd_now_ms();
    dd_buf_move(&c->out, b);
    if (unsent(c) > DD_OUT_HARD) {
        /* Replies that pile up this far despite the pause on reading come from a client
         * that does not read them at all: it goes, as Redis's output limit would have
         * it go, rather than growing dlockd's memory. */
        dd_log("client %llu closed: %zu bytes of replies unread", (unsigned long long)c->id,
               unsent(c));
        dd_conn_close(c);
        return;
    }
    flush(c);
}

/* ---- reading and running commands ------------------------------------------------------ */

/* A connection told to quit while a command ran (a drain's end): on_written lingers
 * once its reply is written. With nothing left to write, now: lingering after a reply
 * written at once, closing when the client reset (nothing to linger for). */
static void end_if_quit_done(dd_conn *c)
{
    if (c->closing || !c->quit || c->busy || c->lingering || unsent(c) != 0)
        return;
    if (c->out_dead)
        dd_conn_close(c);
    else
        linger(c);
}

void dd_conn_end(dd_conn *c, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    dd_buf b = {0};
    dd_reply_error(&b, "%s", msg);
    dd_conn_reply(c, &b);
    dd_buf_free(&b);
    c->quit = true;
    c->query.len = 0;
    flush(c);
    update_reading(c);
    /* Nothing to write (the client reset: replies are dropped) brings no on_written to
     * close it. */
    end_if_quit_done(c);
}

static void protocol_error(dd_conn *c, const char *msg)
{
    /* The rest of the stream cannot be trusted to start at a command: close once the
     * error is written, as Redis does. */
    dd_conn_end(c, "ERR Protocol error: %s", msg);
}

/* After the client's FIN: close once every whole command it sent has run and its
 * reply is written (or cannot be). A command cut short by the FIN never completes. */
static void end_if_drained(dd_conn *c)
{
    if (!c->eof || c->closing || c->quit || c->busy || c->processing)
        return;
    bool whole_command_left = c->query.len > 0 && c->query.len >= c->need;
    if (whole_command_left && !c->out_dead && unsent(c) >= DD_OUT_SOFT)
        return; /* on_written runs them once the client has read */
    if (!c->out_dead && unsent(c) > 0)
        return; /* on_written comes back here */
    dd_conn_close(c);
}

static void run_commands(dd_conn *c)
{
    size_t pos = 0;
    while (!c->closing && !c->quit && !c->busy && unsent(c) < DD_OUT_SOFT) {
        size_t avail = c->query.len - pos;
        if (avail == 0 || (pos == 0 && c->query.len < c->need))
            break;
        size_t argc, used;
        const char *err;
        const resp_limits *lim = c->authed ? &dd_srv.limits : &dd_srv.preauth_limits;
        int rc = resp_parse(c->query.p + pos, avail, lim, dd_srv.argv, &argc, &used, &err);
        if (rc == RESP_ERROR) {
            protocol_error(c, err);
            return;
        }
        if (rc == RESP_INCOMPLETE) {
            if (avail >= DD_QUERY_MAX) {
                protocol_error(c, "command longer than the query buffer limit");
                return;
            }
            /* used counts from pos; after the move below it counts from 0. */
            c->need = used;
            break;
        }
        pos += used;
        c->need = 0;
        if (argc > 0) {
            dd_srv.stats.commands_processed++;
            dd_command(c, dd_srv.argv, argc);
        }
    }
    if (pos > 0 && !c->closing) {
        memmove(c->query.p, c->query.p + pos, c->query.len - pos);
        c->query.len -= pos;
    }
    if (!c->closing) {
        flush(c);
        update_reading(c);
    }
}

static void process(dd_conn *c)
{
    /* A command answered while it runs (a LOCK whose step on the loop ended at once)
     * resumes the connection from inside run_commands, whose loop then goes on. */
    if (c->processing)
        return;
    c->processing = true;
    run_commands(c);
    c->processing = false;
    end_if_drained(c);
}

void dd_conn_resume(dd_conn *c)
{
    c->busy = false;
    if (c->closing || c->quit)
        end_if_quit_done(c);
    else if (c->end_msg != NULL)
        dd_conn_end_pending(c); /* a module ended it while the command ran */
    else
        process(c);
}

void dd_conn_wait_starts(dd_conn *c)
{
    /* After the FIN nobody is left to be served at the wait's end. */
    if (c->eof)
        dd_conn_close(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    /* One buffer for every read: a read callback consumes it before the next read, and
     * idle connections then cost no read buffer at all. */
    static char chunk[DD_READ_CHUNK];
    (void)h;
    (void)suggested;
    *buf = uv_buf_init(chunk, sizeof chunk);
}

/* The client's FIN (its close_notify over TLS), or a reset: it is gone, and with it
 * its session, once what it sent before has run. A wait in progress is given up at
 * once, and a lingering close ends here. */
static void client_done(dd_conn *c, bool reset)
{
    if (c->lingering || c->quit || (c->parked_job != NULL && c->parked_job->blocked)) {
        dd_conn_close(c);
        return;
    }
    c->eof = true;
    if (reset)
        c->out_dead = true; /* nothing more can be written */
    update_reading(c);
    process(c);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    dd_conn *c = s->data;
    if (n < 0) {
        if (!c->closing)
            client_done(c, n != UV_EOF);
        return;
    }
    if (n == 0 || c->closing)
        return;
    c->active_ms = dd_now_ms();
    if (c->tls != NULL) {
        /* Read on after a QUIT too: the handshake may still be under way (the
         * --maxclients refusal waits for it), and a lingering close reads the client's
         * close_notify. */
        int rc = dd_tls_feed(c, buf->base, (size_t)n);
        if (rc < 0)
            dd_conn_close(c);
        else if (rc > 0)
            client_done(c, false);
        else
            process(c);
        return;
    }
    if (c->quit)
        return; /* after a QUIT or an error: dropped (see linger) */
    dd_buf_append(&c->query, buf->base, (size_t)n);
    process(c);
}

static void update_reading(dd_conn *c)
{
    bool want = !c->closing && !c->eof &&
                (dd_tls_handshaking(c) ||
                 (c->quit ? c->lingering : c->query.len < DD_QUERY_MAX && unsent(c) < DD_OUT_SOFT));
    if (want == c->reading)
        return;
    if (want) {
        if (uv_read_start(&c->h.stream, on_alloc, on_read) == 0)
            c->reading = true;
    } else {
        uv_read_stop(&c->h.stream);
        c->reading = false;
    }
}

/* ---- accepting ---------------------------------------------------------------------- */

/* A client host that vanishes (powered off, cut off) sends no FIN: without probes its
 * session locks would stay held, renewed, until the kernel gave up on the connection
 * hours later. Probes after DD_KEEPALIVE_IDLE s idle, every DD_KEEPALIVE_INTVL s,
 * DD_KEEPALIVE_CNT unanswered: such a client is gone, and its locks with it, within
 * about half a minute. */
static void keepalive(dd_conn *c)
{
    uv_tcp_keepalive(&c->h.tcp, 1, DD_KEEPALIVE_IDLE);
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&c->h.tcp, &fd) != 0)
        return;
    int intvl = DD_KEEPALIVE_INTVL, cnt = DD_KEEPALIVE_CNT;
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

/* A refused client past the lingering ones: its error written and its descriptor
 * closed now, before libuv accepts the next connection. libuv accepts every connection
 * waiting in the backlog in one go and runs write callbacks only at the loop's next
 * turn, so a burst of refusals closed there would hold a descriptor each until then;
 * past the open-files limit libuv closes what it cannot accept, unanswered and
 * unlogged. A new socket's buffer takes the short error whole. */
static void refuse_now(dd_conn *c)
{
    dd_buf b = {0};
    dd_reply_error(&b, "ERR max number of clients reached");
    dd_count_errors(b.p, b.len);
    uv_buf_t ub = uv_buf_init(b.p, (unsigned)b.len);
    (void)uv_try_write(&c->h.stream, &ub, 1); /* if it fails, the client sees the close */
    dd_buf_free(&b);
    dd_conn_close(c);
}

void dd_on_connection(uv_stream_t *listener, int status)
{
    if (status < 0) {
        /* Out of descriptors, each refused connection reports it: a line a second is
         * enough to tell the operator, and a storm must not flood the log. */
        static int64_t last_ms;
        static bool reported;
        static unsigned long refused;
        refused++;
        if (!reported || dd_now_ms() - last_ms >= 1000) {
            reported = true;
            dd_log("accept: %s (%lu connections refused since the last report)",
                   uv_strerror(status), refused);
            last_ms = dd_now_ms();
            refused = 0;
        }
        return;
    }
    dd_conn *c = calloc(1, sizeof *c);
    if (c == NULL) {
        dd_log("out of memory accepting a client");
        return;
    }
    bool is_pipe = listener == (uv_stream_t *)&dd_srv.pipe;
    int rc =
        is_pipe ? uv_pipe_init(dd_srv.loop, &c->h.pipe, 0) : uv_tcp_init(dd_srv.loop, &c->h.tcp);
    if (rc < 0) {
        free(c);
        dd_log("accept: %s", uv_strerror(rc));
        return;
    }
    uv_timer_init(dd_srv.loop, &c->timer);
    c->h.stream.data = c;
    c->timer.data = c;
    c->refs = 2;
    c->id = ++dd_srv.next_id;
    c->authed = dd_srv.requirepass == NULL;
    c->accepted_ms = c->active_ms = dd_now_ms();
    c->next = dd_srv.conns;
    if (c->next != NULL)
        c->next->prev = c;
    dd_srv.conns = c;
    dd_srv.nconns++;
    dd_srv.nconns_alloc++;
    dd_srv.stats.connections_received++;
    rc = uv_accept(listener, &c->h.stream);
    if (rc < 0) {
        dd_log("accept: %s", uv_strerror(rc));
        dd_conn_close(c);
        return;
    }
    dd_client_accepted(c);
    if (!is_pipe) {
        uv_tcp_nodelay(&c->h.tcp, 1);
        keepalive(c);
    }
    if (listener == (uv_stream_t *)&dd_srv.tls_tcp && dd_tls_accept(c) != 0) {
        dd_log("out of memory accepting a TLS client");
        dd_conn_close(c);
        return;
    }
    if (dd_srv.nconns > dd_srv.maxclients) {
        dd_srv.stats.rejected_connections++;
        c->refused = true;
        dd_srv.refused_open++;
        if (c->tls == NULL && dd_srv.refused_open > DD_REFUSED_LINGER_MAX) {
            refuse_now(c);
            return;
        }
        dd_buf b = {0};
        dd_reply_error(&b, "ERR max number of clients reached");
        dd_conn_reply(c, &b);
        dd_buf_free(&b);
        c->quit = true;
        /* A TLS client reads the refusal once its handshake is done. */
        update_reading(c);
        return;
    }
    dd_preauth_add(c);
    update_reading(c);
}

void dd_server_stop(void)
{
    if (!dd_srv.stopping) {
        dd_srv.stopping = true;
        dd_server_unlisten();
        /* A drain's end closes a connection once its last reply is written (the
         * UNLOCK that ended the drain, say); a stop without one closes at once. */
        for (dd_conn *c = dd_srv.conns; c != NULL; c = c->next) {
            if (!dd_srv.draining || c->closing || (!c->busy && unsent(c) == 0)) {
                dd_conn_close(c);
            } else if (!c->quit) {
                c->quit = true;
                c->query.len = 0;
                update_reading(c);
                dd_conn_hooks_ending(c);
            }
        }
    }
    if (dd_srv.nconns_alloc > 0)
        return; /* called again by the last connection's free */
    /* Nothing is left that needs the loop: the signal watchers and the descriptor
     * watchers go, and uv_run returns. */
    dd_park_shutdown();
    dd_deadlines_stop();
    dd_loss_stop();
    dd_drain_stop();
    dd_metrics_stop();
    dd_health_stop();
    if (!uv_is_closing((uv_handle_t *)&dd_srv.sigterm)) {
        uv_close((uv_handle_t *)&dd_srv.sigterm, NULL);
        uv_close((uv_handle_t *)&dd_srv.sigint, NULL);
    }
}
