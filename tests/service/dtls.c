/*
 * dtls.c: a TLS client of the dlockd tests (see dtls.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtls.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static int tcp_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    struct timeval tv = {.tv_sec = 5 * dh_slack()};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

static const char *path(const char *dir, const char *name, const char *ext)
{
    static char paths[4][600];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, sizeof paths[0], "%s/%s.%s", dir, name, ext);
    return p;
}

bool dt_tls_open(dt_tls *t, int port, const char *certs, const char *name)
{
    memset(t, 0, sizeof *t);
    t->ctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(t->ctx);
    assert_int_equal(SSL_CTX_load_verify_locations(t->ctx, path(certs, "ca", "crt"), NULL), 1);
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    if (name != NULL) {
        assert_int_equal(
            SSL_CTX_use_certificate_file(t->ctx, path(certs, name, "crt"), SSL_FILETYPE_PEM), 1);
        assert_int_equal(
            SSL_CTX_use_PrivateKey_file(t->ctx, path(certs, name, "key"), SSL_FILETYPE_PEM), 1);
    }
    t->fd = tcp_to(port);
    t->ssl = SSL_new(t->ctx);
    SSL_set1_host(t->ssl, "localhost");
    SSL_set_fd(t->ssl, t->fd);
    t->rd = redisReaderCreate();
    bool ok = SSL_connect(t->ssl) == 1;
    ERR_clear_error();
    return ok;
}

void dt_tls_close(dt_tls *t)
{
    if (t->ssl != NULL)
        SSL_free(t->ssl);
    SSL_CTX_free(t->ctx);
    if (t->fd > 0)
        close(t->fd);
    redisReaderFree(t->rd);
    memset(t, 0, sizeof *t);
}

bool dt_tls_write(dt_tls *t, const void *p, size_t n)
{
    bool ok = SSL_write(t->ssl, p, (int)n) == (int)n;
    ERR_clear_error();
    return ok;
}

/* Format a command (hiredis's format) and write it. */
static bool vsend(dt_tls *t, const char *fmt, va_list ap)
{
    char *cmd;
    int n = redisvFormatCommand(&cmd, fmt, ap);
    assert_true(n > 0);
    bool ok = dt_tls_write(t, cmd, (size_t)n);
    redisFreeCommand(cmd);
    return ok;
}

bool dt_tls_send(dt_tls *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool ok = vsend(t, fmt, ap);
    va_end(ap);
    return ok;
}

redisReply *dt_tls_reply(dt_tls *t)
{
    for (;;) {
        void *r = NULL;
        assert_int_equal(redisReaderGetReply(t->rd, &r), REDIS_OK);
        if (r != NULL)
            return r;
        char buf[16384];
        int n = SSL_read(t->ssl, buf, sizeof buf);
        ERR_clear_error();
        if (n <= 0)
            return NULL;
        redisReaderFeed(t->rd, buf, (size_t)n);
    }
}

redisReply *dt_tls_cmd(dt_tls *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool ok = vsend(t, fmt, ap);
    va_end(ap);
    return ok ? dt_tls_reply(t) : NULL;
}

bool dt_tls_serves(int port, const char *certs, const char *name)
{
    dt_tls t;
    bool ok = dt_tls_open(&t, port, certs, name);
    redisReply *r = ok ? dt_tls_cmd(&t, "PING") : NULL;
    ok = r != NULL && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
    if (r != NULL)
        freeReplyObject(r);
    dt_tls_close(&t);
    return ok;
}
