/*
 * tls.c: TLS for dlockd's clients, with OpenSSL over the loop's streams.
 *
 * A TLS connection is a plain connection (server.c) whose bytes pass through an SSL
 * object on the loop thread: what libuv reads is written into the SSL's read memory
 * BIO, and what SSL_read then gives is the query stream; replies are given to
 * SSL_write, and what lands in the write memory BIO goes out with uv_write. No socket
 * is handed to OpenSSL and no thread waits on one, so a TLS client costs what a plain
 * one does plus its SSL object. The limits (query buffer, output soft and hard limits)
 * count the decrypted bytes, as on a plain connection.
 *
 * The handshake is bounded: a client that connects and does not complete it within
 * DD_TLS_HANDSHAKE_MS is closed, so that silent connections cannot hold slots (every
 * connection counts against --maxclients from its accept on). Until the handshake is
 * done, replies wait in the output (only the --maxclients refusal can be queued then).
 *
 * Bytes OpenSSL produces by itself (the handshake's, alerts, session tickets, the
 * close_notify of a lingering close) are written at once, each time a call may have
 * produced them; libuv writes a stream's requests in order, so they stay in order with
 * the replies' records.
 */
#include "dlockd.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct dd_tls {
    SSL *ssl;
    BIO *rbio, *wbio; /* owned by ssl */
    bool ready;       /* the handshake is done */
    bool fed;         /* a byte came: first is the first */
    unsigned char first;
};

/* A memory BIO keeps the room it once needed: past this, it is replaced once empty, so
 * that a connection that once sent or got a big pipeline keeps no big buffer. */
#define BIO_KEEP (64 * 1024)

static SSL_CTX *ctx;

/* ---- the context, at start ----------------------------------------------------------- */

/* Why a file could not be used: the system's reason when it cannot be read, else the
 * last of OpenSSL's. */
static bool load_error(const char *opt, const char *path, const char *what)
{
    const char *why;
    if (access(path, R_OK) != 0) {
        why = strerror(errno);
    } else {
        unsigned long e = ERR_peek_last_error();
        why = e != 0 && ERR_reason_error_string(e) != NULL ? ERR_reason_error_string(e) : what;
    }
    fprintf(stderr, "dlockd: %s %s: %s\n", opt, path, why);
    ERR_clear_error();
    return false;
}

/* A key with a passphrase would make OpenSSL ask for it on the terminal of a daemon:
 * it fails to load instead. */
static int no_passphrase(char *buf, int size, int rwflag, void *user)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)user;
    return 0;
}

bool dd_tls_setup(void)
{
    const char *cert = dd_srv.tls_cert, *key = dd_srv.tls_key;
    const char *cafile = dd_srv.tls_ca_file, *cadir = dd_srv.tls_ca_dir;
    ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        fprintf(stderr, "dlockd: TLS: cannot make a context: %s\n",
                ERR_reason_error_string(ERR_get_error()));
        return false;
    }
    /* TLS 1.2 and 1.3, as redis-server's default; no renegotiation, which a client
     * could use to make the server work for nothing. */
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                                 SSL_OP_CIPHER_SERVER_PREFERENCE);
    /* An idle connection keeps no record buffers. */
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1)
        return load_error("--tls-cert-file", cert, "not a PEM certificate");
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
        return load_error("--tls-key-file", key, "not a PEM private key without passphrase");
    if (SSL_CTX_check_private_key(ctx) != 1) {
        fprintf(stderr, "dlockd: --tls-key-file %s: not the key of the certificate in %s\n", key,
                cert);
        return false;
    }
    struct stat st;
    if (cadir != NULL && (stat(cadir, &st) != 0 || !S_ISDIR(st.st_mode))) {
        fprintf(stderr, "dlockd: --tls-ca-cert-dir %s: %s\n", cadir,
                errno != 0 && access(cadir, F_OK) != 0 ? strerror(errno) : "not a directory");
        return false;
    }
    if ((cafile != NULL || cadir != NULL) && SSL_CTX_load_verify_locations(ctx, cafile, cadir) != 1)
        return load_error(cafile ? "--tls-ca-cert-file" : "--tls-ca-cert-dir",
                          cafile ? cafile : cadir, "no CA certificate in it");
    if (cafile != NULL) {
        /* The CAs' names go in the certificate request, so that a client holding several
         * certificates sends one of theirs. */
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(cafile);
        if (names != NULL)
            SSL_CTX_set_client_CA_list(ctx, names);
        ERR_clear_error();
    }
    /* yes: a certificate from the CAs is required; optional: one is verified when the
     * client sends it; no: none is asked for. */
    int mode = dd_srv.tls_auth == DD_TLS_AUTH_NO ? SSL_VERIFY_NONE
               : dd_srv.tls_auth == DD_TLS_AUTH_OPTIONAL
                   ? SSL_VERIFY_PEER
                   : SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(ctx, mode, NULL);
    /* Without a context, a client resuming a session would fail the handshake whenever
     * client certificates are verified. */
    SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"dlockd", 6);
    X509 *x = SSL_CTX_get0_certificate(ctx);
    if (x != NULL && X509_cmp_current_time(X509_get0_notAfter(x)) < 0)
        dd_log("warning: --tls-cert-file %s: the certificate has expired: clients that verify "
               "it will refuse the connection",
               cert);
    return true;
}

void dd_tls_cleanup(void)
{
    SSL_CTX_free(ctx);
    ctx = NULL;
}

/* ---- writing what OpenSSL produced ---------------------------------------------------- */

typedef struct tls_write {
    uv_write_t req;
    dd_buf buf;
} tls_write;

static size_t drain(BIO *b, dd_buf *out)
{
    char chunk[16384];
    int n;
    size_t total = 0;
    while ((n = BIO_read(b, chunk, sizeof chunk)) > 0) {
        dd_buf_append(out, chunk, (size_t)n);
        total += (size_t)n;
    }
    return total;
}

static BIO *new_mem_bio(void)
{
    BIO *b = BIO_new(BIO_s_mem());
    /* An empty memory BIO asks for more rather than reporting the end of the stream. */
    if (b != NULL)
        BIO_set_mem_eof_return(b, -1);
    return b;
}

/* Replace an emptied BIO that grew past BIO_KEEP (kept as it is when out of memory). */
static void shrink(dd_tls *t, bool rbio)
{
    BIO *b = new_mem_bio();
    if (b == NULL)
        return;
    if (rbio) {
        SSL_set0_rbio(t->ssl, b);
        t->rbio = b;
    } else {
        SSL_set0_wbio(t->ssl, b);
        t->wbio = b;
    }
}

static void on_tls_written(uv_write_t *req, int status)
{
    /* A failed write shows on the read side too (an error or EOF), which closes. */
    (void)status;
    tls_write *w = (tls_write *)req;
    dd_buf_free(&w->buf);
    free(w);
}

/* Write what the write BIO holds; -1 when it cannot be. */
static int send_pending(dd_conn *c)
{
    if (c->closing || BIO_ctrl_pending(c->tls->wbio) == 0)
        return 0;
    tls_write *w = calloc(1, sizeof *w);
    if (w == NULL)
        return -1;
    drain(c->tls->wbio, &w->buf);
    w->req.data = c;
    uv_buf_t b = uv_buf_init(w->buf.p, (unsigned)w->buf.len);
    if (uv_write(&w->req, &c->h.stream, &b, 1, on_tls_written) < 0) {
        dd_buf_free(&w->buf);
        free(w);
        return -1;
    }
    return 0;
}

/* ---- one connection ------------------------------------------------------------------ */

/* Failed handshakes are the client's doing, and a port scan or a flood of them must not
 * flood the log: one line a second at most, with the count of those not shown. */
static void log_failure(const dd_conn *c, const char *what)
{
    static int64_t last_ms;
    static bool reported;
    static unsigned long hidden;
    if (reported && dd_now_ms() - last_ms < 1000) {
        hidden++;
        return;
    }
    if (hidden > 0)
        dd_log("client %llu closed: %s (and %lu more TLS failures since the last report)",
               (unsigned long long)c->id, what, hidden);
    else
        dd_log("client %llu closed: %s", (unsigned long long)c->id, what);
    reported = true;
    last_ms = dd_now_ms();
    hidden = 0;
}

static void on_handshake_timeout(uv_timer_t *t)
{
    dd_conn *c = t->data;
    char what[64];
    snprintf(what, sizeof what, "no TLS handshake within %d s", DD_TLS_HANDSHAKE_MS / 1000);
    log_failure(c, what);
    dd_conn_close(c);
}

int dd_tls_accept(dd_conn *c)
{
    dd_tls *t = calloc(1, sizeof *t);
    if (t == NULL)
        return -1;
    t->ssl = SSL_new(ctx);
    t->rbio = new_mem_bio();
    t->wbio = new_mem_bio();
    if (t->ssl == NULL || t->rbio == NULL || t->wbio == NULL) {
        BIO_free(t->rbio);
        BIO_free(t->wbio);
        SSL_free(t->ssl);
        free(t);
        ERR_clear_error();
        return -1;
    }
    SSL_set_bio(t->ssl, t->rbio, t->wbio);
    SSL_set_accept_state(t->ssl);
    c->tls = t;
    uv_timer_start(&c->timer, on_handshake_timeout, DD_TLS_HANDSHAKE_MS, 0);
    return 0;
}

bool dd_tls_handshaking(const dd_conn *c)
{
    return c->tls != NULL && !c->tls->ready;
}

/* An SSL call failed with e: the reason for the log, NULL when there is nothing to
 * say (the client just went). */
static const char *failure(int e)
{
    if (e == SSL_ERROR_ZERO_RETURN)
        return NULL; /* close_notify: the client is done */
    unsigned long err = ERR_peek_last_error();
    const char *why = err != 0 ? ERR_reason_error_string(err) : NULL;
    return why != NULL ? why : e == SSL_ERROR_SYSCALL ? "unexpected end of stream" : "TLS error";
}

int dd_tls_feed(dd_conn *c, const char *p, size_t n)
{
    dd_tls *t = c->tls;
    if (!t->fed && n > 0) {
        t->fed = true;
        t->first = (unsigned char)p[0];
    }
    if (BIO_write(t->rbio, p, (int)n) != (int)n)
        return -1;
    char what[160];
    if (!t->ready) {
        ERR_clear_error();
        int rc = SSL_do_handshake(t->ssl);
        if (rc != 1) {
            int e = SSL_get_error(t->ssl, rc);
            if (e == SSL_ERROR_WANT_READ)
                return send_pending(c);
            /* The alert OpenSSL wrote is not waited for: the close cancels it. A TLS
             * client's first record is a handshake record (type 22). */
            if (t->first != 22)
                snprintf(what, sizeof what, "not TLS (a plain client on the TLS port?)");
            else
                snprintf(what, sizeof what, "TLS handshake failed: %s", failure(e));
            log_failure(c, what);
            ERR_clear_error();
            return -1;
        }
        t->ready = true;
        uv_timer_stop(&c->timer);
    }
    static char chunk[16384]; /* one record; the loop thread only */
    for (;;) {
        ERR_clear_error();
        int r = SSL_read(t->ssl, chunk, sizeof chunk);
        if (r > 0) {
            /* After a QUIT or a protocol error, input is dropped (see server.c's
             * linger). */
            if (!c->quit)
                dd_buf_append(&c->query, chunk, (size_t)r);
            continue;
        }
        int e = SSL_get_error(t->ssl, r);
        if (send_pending(c) != 0)
            return -1;
        if (e == SSL_ERROR_WANT_READ) {
            /* A read of more than a record may have grown the read BIO to BIO_KEEP:
             * the read chunk is that size. */
            if (n > 16384 && BIO_ctrl_pending(t->rbio) == 0)
                shrink(t, true);
            return 0;
        }
        if (e == SSL_ERROR_ZERO_RETURN)
            return 1; /* close_notify: what came before it is in the query buffer */
        const char *why = failure(e);
        if (why != NULL && !c->lingering) {
            snprintf(what, sizeof what, "TLS: %s", why);
            log_failure(c, what);
        }
        ERR_clear_error();
        return -1;
    }
}

int dd_tls_seal(dd_conn *c, dd_buf *plain, dd_buf *wire)
{
    dd_tls *t = c->tls;
    size_t off = 0;
    while (off < plain->len) {
        size_t n = plain->len - off;
        if (n > (1u << 30))
            n = 1u << 30;
        ERR_clear_error();
        /* A memory BIO takes every record, so SSL_write writes all of n or fails. */
        int w = SSL_write(t->ssl, plain->p + off, (int)n);
        if (w <= 0) {
            ERR_clear_error();
            return -1;
        }
        off += (size_t)w;
    }
    dd_buf_free(plain);
    if (drain(t->wbio, wire) > BIO_KEEP)
        shrink(t, false);
    return 0;
}

void dd_tls_close_notify(dd_conn *c)
{
    if (c->tls == NULL || !c->tls->ready)
        return;
    ERR_clear_error();
    SSL_shutdown(c->tls->ssl);
    ERR_clear_error();
    send_pending(c);
}

void dd_tls_free(dd_conn *c)
{
    if (c->tls == NULL)
        return;
    SSL_free(c->tls->ssl); /* and its BIOs */
    free(c->tls);
    c->tls = NULL;
}
