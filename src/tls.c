/*
 * tls.c: TLS on a connection to a rediss:// server, with OpenSSL.
 *
 * conn.c keeps the connection's life (connect, handshake commands, buffers, replies)
 * and hands the socket's bytes to the functions here when the node has a context:
 * after the TCP connect, the TLS handshake, within the same connect deadline (the
 * connection stays CONNECTING until it is done); then every flush and read goes
 * through the TLS session. Everything stays non-blocking and step-wise, so that
 * fanout.c still drives N connections from one poll() loop: each step records the
 * poll event it waits for (conn->read_ev, conn->flush_ev), since TLS may need to
 * write before it can read (a handshake message) or read before it can write.
 *
 * Each node has one SSL_CTX, made by dlock_client_new from the URL's parameters and
 * the client's defaults: the files are read once there, so a missing one is an
 * invalid argument of the call that names it, not an error of every later call. The
 * node keeps the last session the server gave (under its mutex), and a new connection
 * offers it: a reconnect after a server closed the connection resumes the session
 * instead of a full handshake.
 *
 * The socket's bytes go through a BIO of ours rather than OpenSSL's socket BIO, whose
 * write(2) would raise SIGPIPE on a closed peer: the library installs no signal
 * handlers, so every send uses MSG_NOSIGNAL, here too.
 */
#include "transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the socket BIO ------------------------------------------------------------ */

static BIO_METHOD *g_bio_method;
static pthread_once_t g_bio_once = PTHREAD_ONCE_INIT;

static int bio_fd(BIO *b)
{
    return (int)(intptr_t)BIO_get_data(b);
}

static int bio_write(BIO *b, const char *buf, int len)
{
    BIO_clear_retry_flags(b);
    ssize_t w;
    do
        w = send(bio_fd(b), buf, (size_t)len, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        BIO_set_retry_write(b);
    return (int)w;
}

static int bio_read(BIO *b, char *buf, int len)
{
    BIO_clear_retry_flags(b);
    ssize_t r;
    do
        r = recv(bio_fd(b), buf, (size_t)len, 0);
    while (r < 0 && errno == EINTR);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        BIO_set_retry_read(b);
    return (int)r;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b;
    (void)num;
    (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0; /* nothing is buffered here */
}

static int bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static void bio_method_init(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "dlock socket");
    if (m != NULL && (!BIO_meth_set_write(m, bio_write) || !BIO_meth_set_read(m, bio_read) ||
                      !BIO_meth_set_ctrl(m, bio_ctrl) || !BIO_meth_set_create(m, bio_create))) {
        BIO_meth_free(m);
        m = NULL;
    }
    g_bio_method = m;
}

/* ---- errors ---------------------------------------------------------------------- */

static bool is_ip(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* The server's certificate failed verification: which check, in words a user can act
 * on. A certificate is authentication, so it maps as a refused AUTH does. */
static int verify_failure(dlock__conn *c, long v, dlock__err *e)
{
    const char *why = X509_verify_cert_error_string(v);
    const char *name = c->node->tls_name ? c->node->tls_name : c->host;
    switch (v) {
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
        return dlock__node_err(e, DLOCK_ERR_AUTH, c->node,
                               "TLS: host name mismatch: the server's certificate is not for "
                               "\"%.60s\" (sni= sets the name to check)",
                               name);
    case X509_V_ERR_CERT_HAS_EXPIRED:
    case X509_V_ERR_CERT_NOT_YET_VALID:
        return dlock__node_err(
            e, DLOCK_ERR_AUTH, c->node, "TLS: the server's certificate has %s (%s)",
            v == X509_V_ERR_CERT_HAS_EXPIRED ? "expired" : "a start date ahead", why);
    default:
        return dlock__node_err(e, DLOCK_ERR_AUTH, c->node,
                               "TLS: the server's certificate chain is not trusted (%s)", why);
    }
}

/* A TLS call failed with SSL_get_error's ssl_err (ret its return value): the reason from
 * the verification result or OpenSSL's error queue. during: "handshake" or "read". */
static int ssl_failure(dlock__conn *c, int ret, int ssl_err, const char *during, dlock__err *e)
{
    int saved = errno;
    long v = SSL_get_verify_result(c->ssl);
    unsigned long err = ERR_peek_last_error();
    ERR_clear_error();
    if (c->tls_handshaking && v != X509_V_OK && !c->node->tls_insecure)
        return verify_failure(c, v, e);
    if (ssl_err == SSL_ERROR_ZERO_RETURN)
        return dlock__node_err(e, DLOCK_ERR_IO, c->node, "connection closed by the server (TLS %s)",
                               during);
    if (ssl_err == SSL_ERROR_SYSCALL && err == 0)
        return dlock__node_err(e, DLOCK_ERR_IO, c->node, "TLS %s: %s", during,
                               ret == 0 || saved == 0 ? "connection closed by the server"
                                                      : strerror(saved));
    int reason = ERR_GET_REASON(err);
    const char *text = ERR_reason_error_string(err);
    if (text == NULL)
        text = "unknown error";
    switch (reason) {
    case SSL_R_UNEXPECTED_EOF_WHILE_READING:
        return dlock__node_err(e, DLOCK_ERR_IO, c->node, "connection closed by the server (TLS %s)",
                               during);
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
    case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
        return dlock__node_err(e, DLOCK_ERR_AUTH, c->node,
                               "TLS: the server refused this client's certificate (%s)", text);
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_UNKNOWN_PROTOCOL:
    case SSL_R_PACKET_LENGTH_TOO_LONG:
        return dlock__node_err(e, DLOCK_ERR_PROTOCOL, c->node,
                               "TLS %s failed: %s (not a TLS port? use redis:// for one)", during,
                               text);
    default:
        return dlock__node_err(e, DLOCK_ERR_PROTOCOL, c->node, "TLS %s failed: %s", during, text);
    }
}

/* ---- the node's context ------------------------------------------------------------ */

/* A new session from the server (after a handshake, or a TLS 1.3 ticket that arrives
 * with the first reply): keep it for the node's next connection. */
static int on_new_session(SSL *ssl, SSL_SESSION *sess)
{
    dlock__node *node = SSL_get_app_data(ssl);
    if (node == NULL || !SSL_SESSION_is_resumable(sess))
        return 0;
    pthread_mutex_lock(&node->mu);
    SSL_SESSION *old = node->tls_session;
    node->tls_session = sess;
    pthread_mutex_unlock(&node->mu);
    if (old != NULL)
        SSL_SESSION_free(old);
    return 1; /* the reference is ours */
}

static int tls_bad(dlock__err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int tls_bad(dlock__err *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    ERR_clear_error();
    return code;
}

/* A file named by a parameter must be there and readable (a directory for cacertdir),
 * checked before OpenSSL reads it, whose own message would not name the parameter. */
static int check_file(const char *param, const char *path, bool dir, dlock__err *e)
{
    struct stat st;
    if (stat(path, &st) != 0 || access(path, R_OK) != 0)
        return tls_bad(e, DLOCK_ERR_INVALID, "%s %s: %s", param, path, strerror(errno));
    if (dir != S_ISDIR(st.st_mode))
        return tls_bad(e, DLOCK_ERR_INVALID, "%s %s: %s", param, path,
                       dir ? "not a directory" : "is a directory");
    return DLOCK_OK;
}

static const char *openssl_reason(void)
{
    const char *s = ERR_reason_error_string(ERR_peek_last_error());
    return s ? s : "unknown error";
}

static const char *pick(const char *own, const char *def)
{
    return own != NULL ? own : def != NULL && def[0] != '\0' ? def : NULL;
}

/* Load what the parameters name into ctx. */
static int load_files(SSL_CTX *ctx, const char *cacert, const char *cadir, const char *cert,
                      const char *key, bool verify, dlock__err *e)
{
    int rc = DLOCK_OK;
    if (cacert != NULL && (rc = check_file("cacert", cacert, false, e)) != DLOCK_OK)
        return rc;
    if (cadir != NULL && (rc = check_file("cacertdir", cadir, true, e)) != DLOCK_OK)
        return rc;
    if (verify && (cacert != NULL || cadir != NULL)) {
        if (SSL_CTX_load_verify_locations(ctx, cacert, cadir) != 1)
            return tls_bad(e, DLOCK_ERR_INVALID, "cacert %s: no CA certificate read (%s)",
                           cacert ? cacert : cadir, openssl_reason());
    } else if (verify && SSL_CTX_set_default_verify_paths(ctx) != 1) {
        return tls_bad(e, DLOCK_ERR_INVALID, "the system's CA store cannot be read (%s)",
                       openssl_reason());
    }
    if (cert == NULL)
        return DLOCK_OK;
    if ((rc = check_file("cert", cert, false, e)) != DLOCK_OK ||
        (rc = check_file("key", key, false, e)) != DLOCK_OK)
        return rc;
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1)
        return tls_bad(e, DLOCK_ERR_INVALID, "cert %s: not a PEM certificate (%s)", cert,
                       openssl_reason());
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH)
            return tls_bad(e, DLOCK_ERR_INVALID, "key %s is not the key of cert %s", key, cert);
        return tls_bad(e, DLOCK_ERR_INVALID, "key %s: not a PEM private key (%s)", key,
                       openssl_reason());
    }
    return DLOCK_OK;
}

int dlock__tls_node_init(dlock__node *node, const dlock_tls *def, dlock__err *e)
{
    const dlock__addr *a = &node->addr;
    static const dlock_tls none = {0};
    if (def == NULL)
        def = &none;
    /* The URL's own parameters win; cert and key go together. */
    const char *cert = a->cert ? a->cert : pick(NULL, def->cert);
    const char *key = a->cert ? a->key : pick(NULL, def->key);
    const char *name = pick(a->sni, def->sni);
    bool insecure = a->insecure >= 0 ? a->insecure == 1 : def->insecure != 0;
    pthread_once(&g_bio_once, bio_method_init);
    if (g_bio_method == NULL)
        return tls_bad(e, DLOCK_ERR_NOMEM, "out of memory");
    /* A Sentinel URL's master has no name until the Sentinels give its address: each
     * connection then checks that (conn->host), unless sni= names it. */
    if ((name != NULL || a->host != NULL) &&
        (node->tls_name = dlock__strdup(name ? name : a->host)) == NULL)
        return tls_bad(e, DLOCK_ERR_NOMEM, "out of memory");
    node->tls_insecure = insecure;
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL)
        return tls_bad(e, DLOCK_ERR_NOMEM, "out of memory making a TLS context");
    node->tls_ctx = ctx;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* A flush sends what the socket takes and comes back for the rest, from a buffer
     * that a command queued meanwhile may have moved (conn.c grows it by realloc). */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, on_new_session);
    SSL_CTX_set_verify(ctx, insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    int rc = load_files(ctx, pick(a->cacert, def->cacert), pick(a->cacertdir, def->cacertdir), cert,
                        key, !insecure, e);
    if (rc != DLOCK_OK)
        return rc;
    if (insecure)
        dlock__rules_log(node->rules, DLOCK_LOG_WARN,
                         "%s: TLS without verification (insecure=1): the server's certificate "
                         "and name are not checked, so anyone on the path can pose as it",
                         a->display);
    return DLOCK_OK;
}

void dlock__tls_node_free(dlock__node *node)
{
    if (node->tls_session != NULL)
        SSL_SESSION_free(node->tls_session);
    if (node->tls_ctx != NULL)
        SSL_CTX_free(node->tls_ctx); /* one reference: the context may be shared */
    free(node->tls_name);
    node->tls_session = NULL;
    node->tls_ctx = NULL;
    node->tls_name = NULL;
}

int dlock__tls_node_share(dlock__node *node, const dlock__node *from, const char *name,
                          dlock__err *e)
{
    if ((node->tls_name = dlock__strdup(name ? name : node->addr.host)) == NULL)
        return dlock__node_err(e, DLOCK_ERR_NOMEM, node, "out of memory");
    SSL_CTX_up_ref(from->tls_ctx);
    node->tls_ctx = from->tls_ctx;
    node->tls_insecure = from->tls_insecure;
    return DLOCK_OK;
}

/* ---- a connection ------------------------------------------------------------------- */

int dlock__tls_start(dlock__conn *c, dlock__err *e)
{
    dlock__node *node = c->node;
    SSL *ssl = SSL_new(node->tls_ctx);
    BIO *bio = ssl ? BIO_new(g_bio_method) : NULL;
    if (bio == NULL) {
        SSL_free(ssl);
        ERR_clear_error();
        return dlock__node_err(e, DLOCK_ERR_NOMEM, node, "out of memory (TLS)");
    }
    BIO_set_data(bio, (void *)(intptr_t)c->fd);
    SSL_set_bio(ssl, bio, bio);
    /* not const: SSL_set_tlsext_host_name casts it to void * */
    char *name = node->tls_name ? node->tls_name : c->host;
    bool ip = is_ip(name);
    int ok = 1;
    if (!ip) /* a server name indication never carries an address */
        ok = SSL_set_tlsext_host_name(ssl, name);
    if (ok && !node->tls_insecure) {
        X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
        X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        ok =
            ip ? X509_VERIFY_PARAM_set1_ip_asc(vp, name) : X509_VERIFY_PARAM_set1_host(vp, name, 0);
    }
    pthread_mutex_lock(&node->mu);
    if (ok && node->tls_session != NULL)
        ok = SSL_set_session(ssl, node->tls_session);
    pthread_mutex_unlock(&node->mu);
    if (!ok) {
        SSL_free(ssl);
        ERR_clear_error();
        return dlock__node_err(e, DLOCK_ERR_NOMEM, node, "out of memory (TLS)");
    }
    SSL_set_app_data(ssl, node); /* where on_new_session keeps the session */
    c->ssl = ssl;
    c->state = DLOCK_CONN_CONNECTING;
    c->tls_handshaking = true;
    return dlock__tls_handshake(c, e);
}

int dlock__tls_handshake(dlock__conn *c, dlock__err *e)
{
    ERR_clear_error();
    int r = SSL_connect(c->ssl);
    if (r == 1) {
        c->tls_handshaking = false;
        c->state = DLOCK_CONN_READY;
        c->read_ev = POLLIN;
        c->flush_ev = POLLOUT;
        if (SSL_session_reused(c->ssl))
            atomic_fetch_add(&c->node->tls_resumed, 1);
        return DLOCK_OK;
    }
    int ssl_err = SSL_get_error(c->ssl, r);
    if (ssl_err == SSL_ERROR_WANT_READ || ssl_err == SSL_ERROR_WANT_WRITE) {
        c->read_ev = ssl_err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        return DLOCK_OK;
    }
    return ssl_failure(c, r, ssl_err, "handshake", e);
}

int dlock__tls_flush(dlock__conn *c, dlock__err *e)
{
    while (c->outpos < c->outlen) {
        size_t left = c->outlen - c->outpos;
        ERR_clear_error();
        int w = SSL_write(c->ssl, c->out + c->outpos, left > INT_MAX ? INT_MAX : (int)left);
        if (w > 0) {
            c->outpos += (size_t)w;
            continue;
        }
        int ssl_err = SSL_get_error(c->ssl, w);
        if (ssl_err == SSL_ERROR_WANT_WRITE || ssl_err == SSL_ERROR_WANT_READ) {
            /* Retried with the same bytes (and maybe more behind them) once the
             * socket is ready the way TLS asked. */
            c->flush_ev = ssl_err == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN;
            return DLOCK_OK;
        }
        int rc = ssl_failure(c, w, ssl_err, "write", e);
        /* A server that refuses the connection (this client's certificate, under TLS
         * 1.3 only judged after the handshake) sends an alert and closes: a write
         * then fails on the reset, and the alert, already received, says why. */
        char scratch[512];
        int r = SSL_read(c->ssl, scratch, sizeof scratch);
        if (r <= 0 && SSL_get_error(c->ssl, r) == SSL_ERROR_SSL &&
            ERR_GET_LIB(ERR_peek_last_error()) == ERR_LIB_SSL)
            rc = ssl_failure(c, r, SSL_ERROR_SSL, "read", e);
        ERR_clear_error();
        return rc;
    }
    c->flush_ev = POLLOUT;
    return DLOCK_OK;
}

int dlock__tls_read(dlock__conn *c, dlock__err *e)
{
    char buf[16384];
    /* Until TLS has nothing left, decrypted or on the socket: a record is decrypted
     * whole, so bytes may wait in OpenSSL (SSL_pending) while the socket is quiet,
     * and poll() would not report them. */
    for (;;) {
        ERR_clear_error();
        int r = SSL_read(c->ssl, buf, sizeof buf);
        if (r <= 0) {
            int ssl_err = SSL_get_error(c->ssl, r);
            if (ssl_err == SSL_ERROR_WANT_READ || ssl_err == SSL_ERROR_WANT_WRITE) {
                c->read_ev = ssl_err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
                return DLOCK_OK;
            }
            return ssl_failure(c, r, ssl_err, "read", e);
        }
        c->read_ev = POLLIN;
        int rc = dlock__conn_feed(c, buf, (size_t)r, e);
        if (rc != DLOCK_OK)
            return rc;
    }
}

int dlock__tls_peek(dlock__conn *c)
{
    char b;
    ERR_clear_error();
    int r = SSL_peek(c->ssl, &b, 1);
    if (r > 0)
        return 1;
    int ssl_err = SSL_get_error(c->ssl, r);
    ERR_clear_error();
    return ssl_err == SSL_ERROR_WANT_READ || ssl_err == SSL_ERROR_WANT_WRITE ? -1 : 0;
}

bool dlock__conn_buffered(const dlock__conn *c)
{
    return c->ssl != NULL && c->state == DLOCK_CONN_READY && SSL_pending(c->ssl) > 0;
}

void dlock__tls_close(dlock__conn *c, bool notify)
{
    if (c->ssl == NULL)
        return;
    /* close_notify is a courtesy, sent only if the socket takes it at once. */
    if (notify && SSL_is_init_finished(c->ssl)) {
        ERR_clear_error();
        (void)SSL_shutdown(c->ssl);
    }
    SSL_free(c->ssl); /* frees our BIO, which leaves the descriptor alone */
    ERR_clear_error();
    c->ssl = NULL;
    c->tls_handshaking = false;
}
