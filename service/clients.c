/*
 * clients.c: who the clients are, and CLIENT.
 *
 * Each connection keeps its peer's address from its accept ("IP:PORT", or "unix" for
 * the unix socket): the log names it, CLIENT LIST shows it, and every lock the
 * connection takes carries it in its holder description, with who took it (its LABEL,
 * else its CLIENT SETNAME name) and this dlockd's HOST:PID, so that LOCKINFO and
 * `dlock status` tell an operator which client of which dlockd holds a name, and
 * CLIENT LIST and CLIENT KILL find that client's connection.
 *
 * CLIENT answers as redis-server 7 does: SETNAME, GETNAME, SETINFO, ID, INFO, LIST
 * (its fields, where one applies, plus dlockd's locks= and waiting=), and KILL, which
 * only the user admin may run: a killed client's session locks are released and its
 * wait given up, as at any close.
 */
#include "dlockd.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- addresses -------------------------------------------------------------------- */

static void format_addr(const struct sockaddr_storage *sa, char *buf, size_t len)
{
    char ip[64] = "?";
    int port = 0;
    if (sa->ss_family == AF_INET) {
        uv_ip4_name((const struct sockaddr_in *)sa, ip, sizeof ip);
        port = ntohs(((const struct sockaddr_in *)sa)->sin_port);
    } else if (sa->ss_family == AF_INET6) {
        uv_ip6_name((const struct sockaddr_in6 *)sa, ip, sizeof ip);
        port = ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
    }
    /* Brackets around an IPv6 address, as redis-server writes it, so that the port
     * stays the part after the last colon. */
    snprintf(buf, len, strchr(ip, ':') != NULL ? "[%s]:%d" : "%s:%d", ip, port);
}

void dd_client_accepted(dd_conn *c)
{
    struct sockaddr_storage sa;
    int n = sizeof sa;
    if (c->h.stream.type != UV_TCP)
        snprintf(c->addr, sizeof c->addr, "unix");
    else if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&sa, &n) == 0)
        format_addr(&sa, c->addr, sizeof c->addr);
    else
        snprintf(c->addr, sizeof c->addr, "?");
}

/* The address as CLIENT LIST shows it: a unix socket client's as redis-server shows
 * it, the socket's path and port 0. */
static void list_addr(const dd_conn *c, char *buf, size_t len)
{
    if (c->h.stream.type != UV_TCP)
        snprintf(buf, len, "%s:0", dd_srv.unixsocket != NULL ? dd_srv.unixsocket : "");
    else
        snprintf(buf, len, "%s", c->addr);
}

static void list_laddr(dd_conn *c, char *buf, size_t len)
{
    struct sockaddr_storage sa;
    int n = sizeof sa;
    if (c->h.stream.type != UV_TCP)
        list_addr(c, buf, len);
    else if (uv_tcp_getsockname(&c->h.tcp, (struct sockaddr *)&sa, &n) == 0)
        format_addr(&sa, buf, len);
    else
        snprintf(buf, len, "?");
}

/* ---- holder descriptions ---------------------------------------------------------- */

/* This dlockd as the library names its process in lock values, "HOST:PID" (the same
 * gethostname). Made once, on the loop thread. */
static const char *self_id(void)
{
    static char id[300];
    if (id[0] == '\0') {
        char host[256];
        if (gethostname(host, sizeof host) != 0)
            snprintf(host, sizeof host, "unknown");
        host[sizeof host - 1] = '\0';
        snprintf(id, sizeof id, "%s:%ld", host, (long)getpid());
    }
    return id;
}

char *dd_holder_label(const dd_conn *c, const char *label)
{
    const char *who = label != NULL && label[0] != '\0' ? label : c->name != NULL ? c->name : "";
    char tail[DLOCK_LABEL_MAX + 1];
    int n = snprintf(tail, sizeof tail, "%s via dlockd %s", c->addr, self_id());
    size_t tail_len = n < 0 ? 0 : (size_t)n >= sizeof tail ? sizeof tail - 1 : (size_t)n;
    /* The address and dlockd say where to look: they stay whole, and a long label is
     * cut to the room left, at a character's start (a label is often UTF-8). */
    size_t room = DLOCK_LABEL_MAX > tail_len + 1 ? DLOCK_LABEL_MAX - tail_len - 1 : 0;
    size_t wlen = strlen(who);
    if (wlen > room) {
        wlen = room;
        while (wlen > 0 && ((unsigned char)who[wlen] & 0xC0) == 0x80)
            wlen--;
    }
    char *s = malloc(wlen + 1 + tail_len + 1);
    if (s == NULL)
        abort();
    size_t at = 0;
    if (wlen > 0) {
        memcpy(s, who, wlen);
        s[wlen] = ' ';
        at = wlen + 1;
    }
    memcpy(s + at, tail, tail_len);
    s[at + tail_len] = '\0';
    return s;
}

/* ---- CLIENT ----------------------------------------------------------------------- */

/* A client name: printable, no spaces (as Redis requires, so that CLIENT LIST's
 * output stays parseable). */
bool dd_client_setname(dd_conn *c, const resp_arg *a, dd_buf *out)
{
    if (a->len > DD_NAME_MAX) {
        dd_reply_error(out, "ERR client name longer than %d bytes", DD_NAME_MAX);
        return false;
    }
    for (size_t i = 0; i < a->len; i++) {
        if (a->p[i] <= ' ' || a->p[i] > '~') {
            dd_reply_error(out, "ERR Client names cannot contain spaces, newlines or special "
                                "characters.");
            return false;
        }
    }
    free(c->name);
    c->name = NULL;
    if (a->len > 0) {
        c->name = strndup(a->p, a->len);
        if (c->name == NULL)
            abort();
    }
    return true;
}

/* Its session locks and permits, those the renewal found lost left out. */
static int locks_held(const dd_conn *c)
{
    int n = 0;
    for (const dd_session *s = dd_conn_sessions(c); s != NULL; s = s->next)
        n += !atomic_load(&s->lost);
    return n;
}

/* One line of CLIENT LIST: redis-server 7's fields that mean something here, then
 * dlockd's own. Two pieces, since dd_buf_printf cuts at 511 bytes and two socket paths
 * and a name can come near that. */
static void client_line(dd_buf *b, dd_conn *c, int64_t now)
{
    char addr[160], laddr[160];
    list_addr(c, addr, sizeof addr);
    list_laddr(c, laddr, sizeof laddr);
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)&c->h.stream, &fd) != 0)
        fd = -1;
    dd_buf_printf(b, "id=%llu addr=%s laddr=%s fd=%d ", (unsigned long long)c->id, addr, laddr,
                  (int)fd);
    dd_buf_printf(b,
                  "name=%s age=%lld idle=%lld flags=%s db=0 qbuf=%zu omem=%zu user=%s "
                  "locks=%d waiting=%d\n",
                  c->name != NULL ? c->name : "", (long long)((now - c->accepted_ms) / 1000),
                  (long long)((now - c->active_ms) / 1000), c->waiting ? "b" : "N", c->query.len,
                  c->out.len + c->writing, c->admin ? "admin" : "default", locks_held(c),
                  c->waiting ? 1 : 0);
}

static bool listed(const dd_conn *c)
{
    return !c->closing && !c->refused;
}

/* CLIENT LIST [TYPE normal] [ID id ...]: in the order they connected, as redis-server
 * lists them. argv[0] is CLIENT. */
static void client_list(resp_arg *argv, size_t argc, dd_buf *out)
{
    size_t ids = 0; /* index of the first id, 0: all */
    for (size_t i = 2; i < argc; i++) {
        if (dd_arg_is(&argv[i], "TYPE") && i + 1 < argc) {
            /* dlockd has normal clients only: any other type lists none. */
            const resp_arg *t = &argv[++i];
            if (!dd_arg_is(t, "normal") && !dd_arg_is(t, "master") && !dd_arg_is(t, "replica") &&
                !dd_arg_is(t, "slave") && !dd_arg_is(t, "pubsub")) {
                dd_reply_error(out, "ERR Unknown client type '%.*s'",
                               (int)(t->len > 64 ? 64 : t->len), t->p);
                return;
            }
            if (!dd_arg_is(t, "normal")) {
                dd_reply_bulk(out, "", 0);
                return;
            }
        } else if (dd_arg_is(&argv[i], "ID") && i + 1 < argc) {
            for (ids = ++i; i < argc; i++) {
                int64_t id;
                if (!dd_arg_int(&argv[i], 1, INT64_MAX, &id)) {
                    dd_reply_error(out, "ERR Invalid client ID '%.*s' (CLIENT LIST ID id ...)",
                                   (int)(argv[i].len > 32 ? 32 : argv[i].len), argv[i].p);
                    return;
                }
            }
        } else {
            dd_reply_error(out, "ERR syntax error (CLIENT LIST [TYPE normal] [ID id ...])");
            return;
        }
    }
    dd_conn *tail = dd_srv.conns;
    while (tail != NULL && tail->next != NULL)
        tail = tail->next;
    int64_t now = dd_now_ms();
    dd_buf b = {0};
    for (dd_conn *k = tail; k != NULL; k = k->prev) {
        if (!listed(k))
            continue;
        bool want = ids == 0;
        for (size_t i = ids; i > 0 && i < argc && !want; i++) {
            int64_t id;
            want = dd_arg_int(&argv[i], 1, INT64_MAX, &id) && (uint64_t)id == k->id;
        }
        if (want)
            client_line(&b, k, now);
    }
    dd_reply_bulk(out, b.p != NULL ? b.p : "", b.len);
    dd_buf_free(&b);
}

/* The close of a client CLIENT KILL picked (by killer, an admin): as any close, it
 * releases the client's session locks and gives its wait up. Killing oneself closes
 * once the reply is written, as redis-server does. */
static void kill_one(dd_conn *killer, dd_conn *k)
{
    if (k == killer) {
        killer->quit = true;
        return;
    }
    int held = locks_held(k);
    dd_log("client %llu from %s%s%s killed by client %llu (CLIENT KILL): its %d session "
           "lock%s released",
           (unsigned long long)k->id, k->addr, k->name != NULL ? " named " : "",
           k->name != NULL ? k->name : "", (unsigned long long)killer->id, held,
           held == 1 ? " is" : "s are");
    dd_conn_close(k);
}

#define KILL_SYNTAX "CLIENT KILL ID id | ADDR ip:port | USER name | SKIPME yes|no ..."

static bool is_filter(const resp_arg *a)
{
    static const char *const words[] = {"ID", "ADDR", "LADDR", "USER", "SKIPME", "TYPE", "MAXAGE"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (dd_arg_is(a, words[i]))
            return true;
    return false;
}

/* CLIENT KILL ip:port (the old form: +OK, or an error when no client has that
 * address), or CLIENT KILL filter value ... (how many were killed; the caller is
 * skipped unless SKIPME no). argv[0] is CLIENT. */
static void client_kill(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    if (argc < 3) {
        dd_reply_error(out, "ERR wrong number of arguments for 'client|kill' command");
        return;
    }
    if (!dd_need_admin(c, "client|kill", out))
        return;
    int64_t id = 0;
    const resp_arg *addr = NULL;
    int user = -1; /* 1: admin connections, 0: the others, -1: any */
    bool skipme = argc > 3;
    if (argc == 3 && is_filter(&argv[2])) {
        /* A filter without its value, never an address. */
        dd_reply_error(out, "ERR syntax error: CLIENT KILL %.*s needs a value (" KILL_SYNTAX ")",
                       (int)argv[2].len, argv[2].p);
        return;
    }
    if (argc == 3)
        addr = &argv[2];
    for (size_t i = 2; argc > 3 && i < argc; i += 2) {
        const resp_arg *f = &argv[i];
        int shown = (int)(f->len > 32 ? 32 : f->len);
        if (i + 1 >= argc) {
            dd_reply_error(out,
                           "ERR syntax error: CLIENT KILL %.*s needs a value (" KILL_SYNTAX ")",
                           shown, f->p);
            return;
        }
        const resp_arg *v = &argv[i + 1];
        if (dd_arg_is(f, "ID")) {
            if (!dd_arg_int(v, 1, INT64_MAX, &id)) {
                dd_reply_error(out, "ERR client-id should be greater than 0 (CLIENT KILL ID id: "
                                    "an id of CLIENT LIST)");
                return;
            }
        } else if (dd_arg_is(f, "ADDR")) {
            addr = v;
        } else if (dd_arg_is(f, "USER")) {
            bool is_default = v->len == 7 && memcmp(v->p, "default", 7) == 0;
            bool is_admin =
                dd_srv.adminpass != NULL && v->len == 5 && memcmp(v->p, "admin", 5) == 0;
            if (!is_default && !is_admin) {
                dd_reply_error(out, "ERR No such user '%.*s'", (int)(v->len > 64 ? 64 : v->len),
                               v->p);
                return;
            }
            user = is_admin;
        } else if (dd_arg_is(f, "SKIPME") && (dd_arg_is(v, "yes") || dd_arg_is(v, "no"))) {
            skipme = dd_arg_is(v, "yes");
        } else {
            dd_reply_error(out,
                           "ERR syntax error: unknown CLIENT KILL filter or value '%.*s' "
                           "(" KILL_SYNTAX ")",
                           shown, f->p);
            return;
        }
    }
    int killed = 0;
    for (dd_conn *k = dd_srv.conns; k != NULL; k = k->next) {
        if (!listed(k) || (skipme && k == c) || (id != 0 && k->id != (uint64_t)id))
            continue;
        if (addr != NULL) {
            char a[160];
            list_addr(k, a, sizeof a);
            if (addr->len != strlen(a) || memcmp(addr->p, a, addr->len) != 0)
                continue;
        }
        if (user >= 0 && (user == 1) != k->admin)
            continue;
        kill_one(c, k);
        killed++;
    }
    if (argc > 3)
        dd_reply_int(out, killed);
    else if (killed > 0)
        dd_reply_status(out, "OK");
    else
        dd_reply_error(out, "ERR No such client (CLIENT KILL ip:port takes an addr of CLIENT "
                            "LIST)");
}

void dd_cmd_client(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    if (dd_arg_is(&argv[1], "SETNAME") && argc == 3) {
        if (dd_client_setname(c, &argv[2], out))
            dd_reply_status(out, "OK");
    } else if (dd_arg_is(&argv[1], "GETNAME") && argc == 2) {
        if (c->name != NULL)
            dd_reply_cstr(out, c->name);
        else
            dd_reply_nil(out);
    } else if (dd_arg_is(&argv[1], "SETINFO") && argc == 4) {
        /* lib-name and lib-ver are for CLIENT LIST on Redis; there is nothing to keep. */
        dd_reply_status(out, "OK");
    } else if (dd_arg_is(&argv[1], "ID") && argc == 2) {
        dd_reply_int(out, (long long)c->id);
    } else if (dd_arg_is(&argv[1], "INFO") && argc == 2) {
        dd_buf b = {0};
        client_line(&b, c, dd_now_ms());
        dd_reply_bulk(out, b.p, b.len);
        dd_buf_free(&b);
    } else if (dd_arg_is(&argv[1], "LIST")) {
        client_list(argv, argc, out);
    } else if (dd_arg_is(&argv[1], "KILL")) {
        client_kill(c, argv, argc, out);
    } else {
        dd_reply_error(out,
                       "ERR unknown subcommand or wrong number of arguments for "
                       "'CLIENT %.*s'",
                       (int)(argv[1].len > 64 ? 64 : argv[1].len), argv[1].p);
    }
}
