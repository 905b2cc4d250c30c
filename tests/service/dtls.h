/*
 * dtls.h: a TLS client of the dlockd tests, with OpenSSL: blocking, the server verified
 * as localhost against the CA of the test support's set (dh_tls_make_set), RESP read
 * with hiredis's reader. For what redis-cli, redis-py and phpredis do not send: no
 * certificate or a stranger's, garbage, long pipelines.
 *
 * Include after <cmocka.h>: the helpers assert.
 */
#ifndef DLOCK_DTLS_H
#define DLOCK_DTLS_H

#include "dtest.h"

#include <hiredis/read.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct dt_tls {
    int fd;
    SSL_CTX *ctx;
    SSL *ssl;
    redisReader *rd;
} dt_tls;

/* Connect to 127.0.0.1:port (5 s timeouts times the slack) and handshake, trusting
 * certs/ca.crt, with the client certificate certs/NAME.crt and .key (name NULL: none).
 * False when the handshake failed; close t either way. */
bool dt_tls_open(dt_tls *t, int port, const char *certs, const char *name);
void dt_tls_close(dt_tls *t);
/* Write all of p; false when the connection failed (or a write timed out). */
bool dt_tls_write(dt_tls *t, const void *p, size_t n);
/* Send a command (redisCommand's format); false when it could not be written. */
bool dt_tls_send(dt_tls *t, const char *fmt, ...);
/* The next reply, or NULL when the connection ended or failed first. */
redisReply *dt_tls_reply(dt_tls *t);
/* Send a command and read its reply (NULL as dt_tls_reply). */
redisReply *dt_tls_cmd(dt_tls *t, const char *fmt, ...);
/* A TLS client (with that certificate) is served on port: PING answers PONG. */
bool dt_tls_serves(int port, const char *certs, const char *name);

#endif /* DLOCK_DTLS_H */
