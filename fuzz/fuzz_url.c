/*
 * fuzz_url.c: the server address parser (src/url.c). It is one of the targets of
 * scenario 17 (fuzzing) of the fault suite, in docs/guarantees.md.
 *
 * The input is one URL, as bytes: dlock__url_parse gets it without a terminating NUL,
 * in a buffer of exactly its size, so that AddressSanitizer catches any read past the
 * length it was given. Inputs with a NUL byte inside go only to the list parser: the
 * library's URLs come from C strings (dlock_client_new), so dlock__url_parse never
 * sees one, and it does not refuse one either (a raw NUL in a password would cut it
 * short). What must hold for every input:
 *   - the parser returns DLOCK_OK, DLOCK_ERR_INVALID with a message, or DLOCK_ERR_NOMEM;
 *   - an accepted address is complete: a host (at most 253 bytes, no brackets) and a
 *     port in 1..65535, or an absolute socket path that fits in sun_path, or 1 to 8
 *     Sentinels of such hosts and a master name of letters, digits and "-_.:"; a db
 *     >= 0; a display form without the passwords;
 *   - the display form of an address without a user parses back to the same address;
 *   - the same bytes as a NUL-terminated server list parse (or not) without leaks;
 *   - with an allocation failure injected at one of the parser's allocations (chosen
 *     from the input), the result is DLOCK_ERR_NOMEM and nothing leaks.
 */
#include "internal.h"

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#ifdef NDEBUG
#error "the fuzz targets check with assert(): build them without NDEBUG"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_host(const char *host, int port)
{
    assert(host != NULL);
    size_t hl = strlen(host);
    assert(hl > 0 && hl <= 253);
    assert(strchr(host, '[') == NULL && strchr(host, ']') == NULL);
    assert(port >= 1 && port <= 65535);
}

/* "host:port", or "[host]:port" for an IPv6 address, appended to want. */
static void put_host(char *want, size_t len, const char *host, int port)
{
    bool v6 = strchr(host, ':') != NULL;
    size_t used = strlen(want);
    snprintf(want + used, len - used, "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

/* A cluster URL: its seeds, database 0, and a display form of exactly those parts. */
static void check_cluster(const dlock__addr *a, char *want, size_t len)
{
    assert(a->host == NULL && a->path == NULL && !a->is_unix && !a->sentinel);
    assert(a->nhosts >= 1 && a->nhosts <= DLOCK_HOSTS_MAX);
    assert(a->db == 0 && a->master_name == NULL);
    snprintf(want, len, "%s-cluster://%.64s%s", a->tls ? "rediss" : "redis", a->user ? a->user : "",
             a->user ? "@" : "");
    for (int i = 0; i < a->nhosts; i++) {
        check_host(a->hosts[i].host, a->hosts[i].port);
        if (i > 0)
            strcat(want, ",");
        put_host(want, len, a->hosts[i].host, a->hosts[i].port);
    }
}

/* A Sentinel URL: its Sentinels, a master name of the allowed characters, and a
 * display form of exactly those parts. */
static void check_sentinel(const dlock__addr *a, char *want, size_t len)
{
    assert(a->host == NULL && a->path == NULL && !a->is_unix && !a->cluster);
    assert(a->nhosts >= 1 && a->nhosts <= DLOCK_HOSTS_MAX);
    assert(a->master_name != NULL);
    size_t nl = strlen(a->master_name);
    assert(nl >= 1 && nl <= 128);
    assert(strspn(a->master_name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                  "0123456789-_.:") == nl);
    const char *secrets[] = {a->sentinel_user, a->sentinel_password};
    for (size_t i = 0; i < 2; i++)
        assert(secrets[i] == NULL || secrets[i][0] != '\0');
    snprintf(want, len, "%s-sentinel://%.64s%s", a->tls ? "rediss" : "redis",
             a->user ? a->user : "", a->user ? "@" : "");
    for (int i = 0; i < a->nhosts; i++) {
        check_host(a->hosts[i].host, a->hosts[i].port);
        if (i > 0)
            strcat(want, ",");
        put_host(want, len, a->hosts[i].host, a->hosts[i].port);
    }
    snprintf(want + strlen(want), len - strlen(want), "/%s", a->master_name);
    if (a->db != 0)
        snprintf(want + strlen(want), len - strlen(want), "?db=%d", a->db);
}

/* Everything an accepted address must be. */
static void check_addr(const dlock__addr *a)
{
    assert(a->display != NULL);
    assert(a->db >= 0);
    char want[2600];
    if (!a->sentinel)
        assert(a->master_name == NULL && a->sentinel_user == NULL && a->sentinel_password == NULL);
    if (!a->sentinel && !a->cluster)
        assert(a->nhosts == 0);
    if (a->sentinel) {
        check_sentinel(a, want, sizeof want);
    } else if (a->cluster) {
        check_cluster(a, want, sizeof want);
    } else if (a->is_unix) {
        assert(a->path != NULL && a->host == NULL);
        assert(a->path[0] == '/');
        assert(strlen(a->path) < sizeof(((struct sockaddr_un *)0)->sun_path));
        assert(a->user == NULL); /* unix:// takes a password alone */
    } else {
        assert(a->path == NULL);
        check_host(a->host, a->port);
    }
    if (a->password != NULL)
        assert(a->password[0] != '\0');
    /* TLS parameters only on rediss://, never empty, cert and key together. */
    if (!a->tls)
        assert(a->cacert == NULL && a->cacertdir == NULL && a->cert == NULL && a->sni == NULL &&
               a->insecure == -1);
    assert((a->cert == NULL) == (a->key == NULL));
    assert(a->insecure >= -1 && a->insecure <= 1);
    const char *params[] = {a->cacert, a->cacertdir, a->cert, a->key, a->sni};
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++)
        assert(params[i] == NULL || params[i][0] != '\0');
    /* The display form is made of the address's parts and nothing else: no password. */
    if (a->is_unix) {
        snprintf(want, sizeof want, "unix://%s", a->path);
    } else if (!a->sentinel && !a->cluster) {
        snprintf(want, sizeof want, "%s://%.64s%s", a->tls ? "rediss" : "redis",
                 a->user ? a->user : "", a->user ? "@" : "");
        put_host(want, sizeof want, a->host, a->port);
    }
    if (a->db != 0 && !a->sentinel)
        snprintf(want + strlen(want), sizeof want - strlen(want), a->is_unix ? "?db=%d" : "/%d",
                 a->db);
    assert(strcmp(a->display, want) == 0);
}

/* An address without a user prints as a URL that means the same address. */
static void check_round_trip(const dlock__addr *a)
{
    if (a->user != NULL)
        return;
    dlock__addr b;
    dlock__err err;
    int rc = dlock__url_parse(a->display, strlen(a->display), &b, &err);
    assert(rc == DLOCK_OK);
    assert(b.is_unix == a->is_unix && b.db == a->db && b.password == NULL && b.tls == a->tls);
    assert(b.sentinel == a->sentinel && b.cluster == a->cluster && b.nhosts == a->nhosts);
    if (a->is_unix) {
        assert(strcmp(a->path, b.path) == 0);
    } else if (a->sentinel || a->cluster) {
        assert(!a->sentinel || strcmp(a->master_name, b.master_name) == 0);
        for (int i = 0; i < a->nhosts; i++)
            assert(strcmp(a->hosts[i].host, b.hosts[i].host) == 0 &&
                   a->hosts[i].port == b.hosts[i].port);
    } else {
        assert(strcmp(a->host, b.host) == 0 && a->port == b.port);
    }
    assert(strcmp(a->display, b.display) == 0);
    dlock__addr_clear(&b);
}

static int parse_once(const char *buf, size_t size)
{
    dlock__addr a;
    dlock__err err;
    err.msg[0] = '\0';
    int rc = dlock__url_parse(buf, size, &a, &err);
    assert(rc == DLOCK_OK || rc == DLOCK_ERR_INVALID || rc == DLOCK_ERR_NOMEM);
    if (rc == DLOCK_OK) {
        check_addr(&a);
        check_round_trip(&a);
        dlock__addr_clear(&a);
    } else {
        /* Every refusal says why; and a failed parse leaves nothing behind. */
        assert(err.msg[0] != '\0');
        assert(a.host == NULL && a.path == NULL && a.user == NULL && a.password == NULL &&
               a.display == NULL && a.cacert == NULL && a.key == NULL && a.sni == NULL &&
               a.master_name == NULL && a.nhosts == 0 && a.sentinel_password == NULL);
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Exactly size bytes, no NUL after them. */
    char *buf = malloc(size ? size : 1);
    assert(buf != NULL);
    memcpy(buf, data, size);

    int rc = memchr(data, '\0', size) == NULL ? parse_once(buf, size) : DLOCK_ERR_INVALID;

    /* The same parse with its k-th allocation failing (k from the input's length and
     * first byte, so that the fuzzer can steer it). The parse is deterministic, so the
     * allocations of a plain run are the ones the failing run makes. */
    if (rc == DLOCK_OK) {
        dlock__addr a;
        dlock__err err;
        atomic_store(&dlock__test_hooks.allocs, 0);
        rc = dlock__url_parse(buf, size, &a, &err);
        long allocs = atomic_load(&dlock__test_hooks.allocs);
        assert(rc == DLOCK_OK && allocs > 0);
        dlock__addr_clear(&a);
        long k = 1 + (long)((size + data[0]) % (size_t)allocs);
        atomic_store(&dlock__test_hooks.allocs, 0);
        atomic_store(&dlock__test_hooks.fail_at, k);
        rc = dlock__url_parse(buf, size, &a, &err);
        atomic_store(&dlock__test_hooks.fail_at, 0);
        assert(rc == DLOCK_ERR_NOMEM);
        assert(a.host == NULL && a.path == NULL && a.user == NULL && a.password == NULL &&
               a.display == NULL);
    }

    /* As a server list: NUL-terminated, split at commas. */
    char *list = malloc(size + 1);
    assert(list != NULL);
    memcpy(list, data, size);
    list[size] = '\0';
    if (strlen(list) == size) {
        dlock__addr *addrs = NULL;
        int n = 0;
        dlock__err err;
        rc = dlock__url_parse_list(list, DLOCK_SERVERS_MAX, &addrs, &n, &err);
        assert(rc == DLOCK_OK || rc == DLOCK_ERR_INVALID);
        if (rc == DLOCK_OK) {
            assert(n >= 1 && n <= DLOCK_SERVERS_MAX);
            for (int i = 0; i < n; i++) {
                check_addr(&addrs[i]);
                dlock__addr_clear(&addrs[i]);
            }
            free(addrs);
        } else {
            assert(addrs == NULL && n == 0);
        }
    }
    free(list);
    free(buf);
    return 0;
}
