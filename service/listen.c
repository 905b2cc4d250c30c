/*
 * listen.c: the listeners (TCP, TLS on its own port, a unix socket), opened at the
 * start and closed at a drain's start or at the stop; server.c serves what they
 * accept.
 */
#include "dlockd.h"

#include <errno.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

/* The socket file this dlockd made: at the stop it removes that one only. A dlockd
 * started on the same path during this one's drain (a restart on one host) made a new
 * file there, which must stay. */
static dev_t sock_dev;
static ino_t sock_ino;

static int listen_tcp(uv_tcp_t *h, bool *on, int port, const char *what)
{
    struct sockaddr_storage addr;
    if (uv_ip4_addr(dd_srv.bind, port, (struct sockaddr_in *)&addr) != 0 &&
        uv_ip6_addr(dd_srv.bind, port, (struct sockaddr_in6 *)&addr) != 0) {
        dd_log("--bind %s: not an IPv4 or IPv6 address", dd_srv.bind);
        return -1;
    }
    uv_tcp_init(dd_srv.loop, h);
    *on = true;
    int rc = uv_tcp_bind(h, (struct sockaddr *)&addr, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)h, 511, dd_on_connection);
    if (rc < 0) {
        dd_log("cannot listen%s on %s:%d: %s", what, dd_srv.bind, port, uv_strerror(rc));
        return -1;
    }
    return 0;
}

int dd_server_listen(void)
{
    int rc;
    if (dd_srv.port > 0 && listen_tcp(&dd_srv.tcp, &dd_srv.tcp_on, dd_srv.port, "") != 0)
        return -1;
    if (dd_srv.tls_port > 0 &&
        listen_tcp(&dd_srv.tls_tcp, &dd_srv.tls_on, dd_srv.tls_port, " with TLS") != 0)
        return -1;
    if (dd_srv.unixsocket != NULL) {
        uv_pipe_init(dd_srv.loop, &dd_srv.pipe, 0);
        dd_srv.pipe_on = true;
        /* A socket file left by an earlier run would make bind fail. */
        unlink(dd_srv.unixsocket);
        rc = uv_pipe_bind(&dd_srv.pipe, dd_srv.unixsocket);
        /* Before listening, so that no client connects while the mode is the umask's. */
        if (rc == 0 && dd_srv.unixsocketperm >= 0 &&
            chmod(dd_srv.unixsocket, (mode_t)dd_srv.unixsocketperm) != 0)
            rc = -errno;
        struct stat st;
        if (rc == 0 && stat(dd_srv.unixsocket, &st) == 0) {
            sock_dev = st.st_dev;
            sock_ino = st.st_ino;
        }
        if (rc == 0)
            rc = uv_listen((uv_stream_t *)&dd_srv.pipe, 511, dd_on_connection);
        if (rc < 0) {
            dd_log("cannot listen on %s: %s", dd_srv.unixsocket, uv_strerror(rc));
            return -1;
        }
    }
    return 0;
}

static void on_listener_closed(uv_handle_t *h)
{
    (void)h;
}

void dd_server_unlisten(void)
{
    if (dd_srv.tcp_on)
        uv_close((uv_handle_t *)&dd_srv.tcp, on_listener_closed);
    if (dd_srv.tls_on)
        uv_close((uv_handle_t *)&dd_srv.tls_tcp, on_listener_closed);
    if (dd_srv.pipe_on) {
        uv_close((uv_handle_t *)&dd_srv.pipe, on_listener_closed);
        struct stat st;
        if (stat(dd_srv.unixsocket, &st) == 0 && st.st_dev == sock_dev && st.st_ino == sock_ino)
            unlink(dd_srv.unixsocket);
    }
    dd_srv.tcp_on = dd_srv.tls_on = dd_srv.pipe_on = false;
}
