/*
 * tls.c: certificates for TLS tests, made at test time with OpenSSL's API: a CA of the
 * test's own, and certificates it signs for servers and clients, valid for the names
 * and the dates a test asks for (an expired one needs a validity period wholly in the
 * past, which the openssl command's x509 -req cannot give).
 *
 * Keys are P-256 EC keys: made in microseconds, where RSA keys would cost a test
 * seconds. Files are PEM, as redis-server's tls-* options and the library read them.
 */
#include "support.h"

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(const char *what, const char *path)
{
    fprintf(stderr, "dh: tls: %s%s%s\n", what, path ? " " : "", path ? path : "");
    return -1;
}

/* Add one X509v3 extension, given as the openssl configuration text would. */
static int add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (ext == NULL)
        return -1;
    int ok = X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
    return ok ? 0 : -1;
}

static int write_pem(const char *path, X509 *cert, EVP_PKEY *key)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return fail(strerror(errno), path);
    int ok =
        cert ? PEM_write_X509(f, cert) : PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
    if (fclose(f) != 0 || !ok)
        return fail("cannot write", path);
    return 0;
}

/* Read path's certificate into *cert, or, cert NULL, its key into *key; NULL there when
 * the file cannot be read. */
static void read_pem(const char *path, X509 **cert, EVP_PKEY **key)
{
    FILE *f = fopen(path, "r");
    if (cert)
        *cert = f ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;
    else
        *key = f ? PEM_read_PrivateKey(f, NULL, NULL, NULL) : NULL;
    if (f)
        fclose(f);
}

/* Make dir/name.crt and dir/name.key: a certificate for cn with the key made here,
 * signed by ca_cert/ca_key (NULL: by itself, a CA). */
static int make(const char *dir, const char *name, const char *cn, const dh_tls_cert_opts *o,
                X509 *ca_cert, EVP_PKEY *ca_key)
{
    static long serial = 1;
    char crt[600], keyf[600];
    snprintf(crt, sizeof crt, "%s/%s.crt", dir, name);
    snprintf(keyf, sizeof keyf, "%s/%s.key", dir, name);
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *cert = X509_new();
    int rc = -1;
    if (key == NULL || cert == NULL)
        goto out;
    bool is_ca = ca_cert == NULL;
    X509 *issuer = is_ca ? cert : ca_cert;
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), (long)getpid() * 1000 + serial++);
    /* X509_gmtime_adj takes a signed offset: dates in the past are just negative. */
    X509_gmtime_adj(X509_getm_notBefore(cert), o ? o->not_before_s : -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert), o ? o->not_after_s : 86400);
    X509_set_pubkey(cert, key);
    X509_NAME *subj = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(subj, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(cert, X509_get_subject_name(issuer));
    if (is_ca) {
        if (add_ext(cert, issuer, NID_basic_constraints, "critical,CA:TRUE") < 0 ||
            add_ext(cert, issuer, NID_key_usage, "critical,keyCertSign,cRLSign") < 0 ||
            add_ext(cert, issuer, NID_subject_key_identifier, "hash") < 0)
            goto out;
    } else {
        if (add_ext(cert, issuer, NID_basic_constraints, "critical,CA:FALSE") < 0 ||
            add_ext(cert, issuer, NID_key_usage, "critical,digitalSignature,keyAgreement") < 0 ||
            add_ext(cert, issuer, NID_ext_key_usage, o && o->client ? "clientAuth" : "serverAuth") <
                0 ||
            add_ext(cert, issuer, NID_authority_key_identifier, "keyid") < 0)
            goto out;
        if (o && o->san && add_ext(cert, issuer, NID_subject_alt_name, o->san) < 0)
            goto out;
    }
    if (!X509_sign(cert, is_ca ? key : ca_key, EVP_sha256()))
        goto out;
    if (write_pem(crt, cert, NULL) < 0 || write_pem(keyf, NULL, key) < 0)
        goto out;
    rc = 0;
out:
    if (rc < 0)
        fail("cannot make the certificate", crt);
    X509_free(cert);
    EVP_PKEY_free(key);
    return rc;
}

int dh_tls_make_ca(const char *dir, const char *name)
{
    return make(dir, name, name, NULL, NULL, NULL);
}

int dh_tls_issue(const char *dir, const char *ca, const char *name, const dh_tls_cert_opts *o)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s.crt", dir, ca);
    X509 *ca_cert;
    read_pem(path, &ca_cert, NULL);
    snprintf(path, sizeof path, "%s/%s.key", dir, ca);
    EVP_PKEY *ca_key;
    read_pem(path, NULL, &ca_key);
    int rc = ca_cert && ca_key ? make(dir, name, name, o, ca_cert, ca_key)
                               : fail("cannot read the CA", path);
    X509_free(ca_cert);
    EVP_PKEY_free(ca_key);
    return rc;
}

int dh_tls_make_set(const char *dir)
{
    const long day = 86400;
    dh_tls_cert_opts server = {.san = "DNS:localhost,IP:127.0.0.1", -3600, day, false};
    dh_tls_cert_opts other = {.san = "DNS:other.test", -3600, day, false};
    dh_tls_cert_opts expired = {.san = "DNS:localhost,IP:127.0.0.1", -2 * day, -day, false};
    dh_tls_cert_opts client = {.san = "DNS:client.test", -3600, day, true};
    if (dh_tls_make_ca(dir, "ca") < 0 || dh_tls_make_ca(dir, "evil") < 0 ||
        dh_tls_issue(dir, "ca", "server", &server) < 0 ||
        dh_tls_issue(dir, "ca", "other", &other) < 0 ||
        dh_tls_issue(dir, "ca", "expired", &expired) < 0 ||
        dh_tls_issue(dir, "ca", "client", &client) < 0 ||
        dh_tls_issue(dir, "evil", "stranger", &client) < 0)
        return -1;
    /* The CA again, alone in a directory under its hashed name, as OpenSSL looks a
     * CA up in a directory (what `openssl rehash` makes). */
    char path[600];
    snprintf(path, sizeof path, "%s/cadir", dir);
    if (mkdir(path, 0755) < 0)
        return fail(strerror(errno), path);
    snprintf(path, sizeof path, "%s/ca.crt", dir);
    X509 *ca;
    read_pem(path, &ca, NULL);
    if (ca == NULL)
        return fail("cannot read", path);
    snprintf(path, sizeof path, "%s/cadir/%08lx.0", dir, X509_subject_name_hash(ca));
    int rc = write_pem(path, ca, NULL);
    X509_free(ca);
    return rc;
}

int dh_tls_dir(char *out, size_t len)
{
    const char *base = getenv("DLOCK_TEST_TMP");
    if (!base || !*base)
        base = "/tmp";
    mkdir(base, 0755);
    snprintf(out, len, "%s/tls-XXXXXX", base);
    if (mkdtemp(out) == NULL)
        return fail(strerror(errno), out);
    return 0;
}

void dh_tls_dir_remove(const char *dir)
{
    dh_rm_tree(dir);
}
