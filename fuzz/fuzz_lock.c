/*
 * fuzz_lock.c: the lock operations against a server that answers anything. It is
 * the target of scenario 17 (fuzzing, in docs/guarantees.md) that starts from the
 * fault relay's canned replies: its corpus holds them as relay-*.
 *
 * The fault relay of scenario 13 replaces a server's replies with canned ones (-LOADING,
 * an integer where a bulk is expected, *2147483647, an HTTP banner, ...). This target
 * generalizes it: the input is the server's whole output, and a client with one node
 * (unix://, the fuzzer's listener) runs the public API over it, in order:
 *     dlock_acquire; when granted: dlock_extend, dlock_check, dlock_release;
 *     then dlock_inspect and dlock_fenced_set; then an operator's dlock_list,
 *     dlock_break and dlock_break_last.
 * The input is what the server sends after each of the library's sends, separated by
 * "|||": after the k-th send (the AFTER_SEND pause point of the test build, which
 * fires once per round, awaited or not) the k-th segment is written to the newest
 * connection. A connection is kept across rounds, as with a real server, so a segment
 * with more replies than were asked for leaves the stream out of step, as it would be.
 * Its write side is shut when the segments run out, or when a segment ends inside a
 * reply. A segment with fewer replies than were asked for is waited out: the per-node
 * timeout is 5 ms, so that such inputs stay cheap (the replies that are there are read
 * at once: they are written before the library polls). The seed corpus holds the
 * relay's canned replies (relay-*) after an INFO reply, and real conversations (grant,
 * refusal, NOSCRIPT then EVAL, a lost lock, a reply split across rounds).
 *
 * Tokens come from getrandom(2), which this target replaces with zeros: the token is
 * then 32 '0's, which the inputs can name (a holder "with our token" in dlock_check).
 *
 * What must hold: every call returns a documented code for what it is (never, say,
 * DLOCK_ERR_BUSY for a server error, nor OK without a fence), handles and holders are
 * well formed, no undefined behaviour however absurd the numbers (a PTTL of 2^63 - 1,
 * a negative fence), and nothing leaks.
 */
#include "fuzz_server.h"
#include "internal.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef NDEBUG
#error "the fuzz targets check with assert(): build them without NDEBUG"
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PEERS_MAX 64
/* A unix socket buffers about 200 KiB; a segment is written in one go. */
#define SERVED_MAX (128 * 1024)
#define SEPARATOR  "|||"

/* The library's getrandom: zeros, so that every token is "000...0" (32 digits). */
ssize_t getrandom(void *buf, size_t len, unsigned int flags)
{
    (void)flags;
    memset(buf, 0, len);
    return (ssize_t)len;
}

static dlock_client *g_cl;
static const uint8_t *g_data; /* what is left of the input */
static size_t g_size;
static int g_peers[PEERS_MAX]; /* accepted connections; the last is the newest */
static int g_npeers;

/* True when buf holds a reply that is not complete: the library would wait for the
 * rest. (Parsed with the library's own capped reader: *2147483647 costs nothing.) */
static bool ends_inside_reply(const uint8_t *buf, size_t len)
{
    redisReader *r = dlock__reader_new();
    assert(r != NULL);
    bool inside = false;
    if (redisReaderFeed(r, (const char *)buf, len) == REDIS_OK) {
        void *reply;
        while (redisReaderGetReply(r, &reply) == REDIS_OK && reply != NULL)
            freeReplyObject(reply);
        inside = r->err == 0 && r->pos < r->len;
    }
    redisReaderFree(r);
    return inside;
}

/* The pause hook, after each round's sends: accept the connections the library just
 * opened, and answer on the newest one with the next segment of the input. */
static void serve_pending(int point)
{
    if (point != DLOCK_HOOK_AFTER_SEND)
        return;
    int fd;
    while ((fd = fs_accept()) >= 0) {
        assert(g_npeers < PEERS_MAX);
        if (g_npeers > 0)
            shutdown(g_peers[g_npeers - 1], SHUT_WR); /* the library has left it */
        g_peers[g_npeers++] = fd;
    }
    if (g_npeers == 0)
        return;
    int peer = g_peers[g_npeers - 1];
    if (g_data == NULL) {
        shutdown(peer, SHUT_WR);
        return;
    }
    const uint8_t *sep = memmem(g_data, g_size, SEPARATOR, sizeof SEPARATOR - 1);
    size_t n = sep ? (size_t)(sep - g_data) : g_size;
    size_t w = n < SERVED_MAX ? n : SERVED_MAX;
    fs_write(peer, g_data, w); /* lost if the library closed it: as from a real server */
    bool last = sep == NULL;
    if (last || ends_inside_reply(g_data, w))
        shutdown(peer, SHUT_WR);
    if (last) {
        g_data = NULL;
        g_size = 0;
    } else {
        g_data += n + sizeof SEPARATOR - 1;
        g_size -= n + sizeof SEPARATOR - 1;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fs_init();
    dlock_config cfg = {0};
    cfg.timeout_ms = 5;
    cfg.connect_timeout_ms = 5;
    if (dlock_client_new(fs_url("", ""), &cfg, &g_cl) != DLOCK_OK) {
        fprintf(stderr, "fuzz_lock: dlock_client_new: %s\n", dlock_errmsg());
        exit(2);
    }
    atomic_store(&dlock__test_hooks.pause, serve_pending);
    return 0;
}

/* The codes a call can return when the server is broken, besides the call's own. */
static bool unavailability(int rc)
{
    return rc == DLOCK_ERR_IO || rc == DLOCK_ERR_TIMEOUT || rc == DLOCK_ERR_PROTOCOL ||
           rc == DLOCK_ERR_AUTH || rc == DLOCK_ERR_UNAVAILABLE || rc == DLOCK_ERR_NOMEM;
}

static void check_failure(int rc)
{
    assert(unavailability(rc));
    assert(dlock_errmsg()[0] != '\0');
}

static void check_holder(const dlock_holder *h)
{
    assert(h->held == 0 || h->held == 1);
    assert(memchr(h->token, '\0', sizeof h->token) != NULL);
    assert(memchr(h->description, '\0', sizeof h->description) != NULL);
    size_t tl = strlen(h->token);
    assert(tl == 0 || tl == DLOCK_TOKEN_LEN);
    if (!h->held)
        assert(tl == 0 && h->remaining_ms == 0);
}

static void check_break(const dlock_break_info *b)
{
    assert(b->broken == 0 || b->broken == 1);
    assert(memchr(b->holder, '\0', sizeof b->holder) != NULL);
    assert(memchr(b->by, '\0', sizeof b->by) != NULL);
    assert(memchr(b->reason, '\0', sizeof b->reason) != NULL);
}

/* An operator's calls: a listing (a page per send until the cursor says the walk is
 * over, each page's records parsed and merged), a break and the record it leaves. */
static void run_operators(void)
{
    dlock_lister *it = (dlock_lister *)(uintptr_t)1; /* must be overwritten */
    int rc = dlock_list(g_cl, "*", &it);
    if (rc == DLOCK_OK) {
        const dlock_listed *e;
        while ((rc = dlock_list_next(it, &e)) == DLOCK_OK && e != NULL) {
            assert(e->name != NULL && e->name[0] != '\0');
            assert(e->kind >= DLOCK_KIND_EXCLUSIVE && e->kind <= DLOCK_KIND_SEMAPHORE);
            assert(e->nlisted >= 0 && e->nlisted <= DLOCK_LIST_HOLDERS_MAX);
            assert(e->nholders >= 0 && e->waiters >= 0);
            for (int i = 0; i < e->nlisted; i++)
                check_holder(&e->holders[i]);
        }
        assert(rc == DLOCK_OK);
        dlock_list_free(it);
    } else {
        assert(it == NULL);
        check_failure(rc);
    }
    dlock_break_info b;
    rc = dlock_break(g_cl, "fz", NULL, &b);
    if (rc == DLOCK_OK)
        check_break(&b);
    else
        check_failure(rc);
    rc = dlock_break_last(g_cl, "fz", &b);
    if (rc == DLOCK_OK)
        check_break(&b);
    else
        check_failure(rc);
}

static void run_ops(void)
{
    dlock_opts o = {0};
    o.ttl_ms = 10000;
    dlock_lock *l = (dlock_lock *)(uintptr_t)1; /* must be overwritten */
    int rc = dlock_acquire(g_cl, "fz", &o, &l);
    if (rc == DLOCK_OK) {
        assert(l != NULL && dlock_fence(l) > 0);
        assert(strlen(dlock_token(l)) == DLOCK_TOKEN_LEN);
        int64_t left = dlock_remaining_ms(l);
        assert(left <= 10000);
        rc = dlock_extend(l, 5000);
        assert(rc == DLOCK_OK || rc == DLOCK_ERR_LOST || unavailability(rc));
        if (rc == DLOCK_OK)
            assert(dlock_remaining_ms(l) <= 5000);
        rc = dlock_check(l);
        assert(rc == DLOCK_OK || rc == DLOCK_ERR_LOST || unavailability(rc));
        if (rc == DLOCK_ERR_LOST)
            assert(dlock_remaining_ms(l) <= 0);
        rc = dlock_release(l);
        assert(rc == DLOCK_OK || rc == DLOCK_ERR_LOST || unavailability(rc));
    } else {
        assert(l == NULL);
        if (rc != DLOCK_ERR_BUSY)
            check_failure(rc);
    }

    dlock_holder h;
    rc = dlock_inspect(g_cl, "fz", &h);
    if (rc == DLOCK_OK)
        check_holder(&h);
    else
        check_failure(rc);

    rc = dlock_fenced_set(g_cl, "fz-register", 7, "v", 1);
    assert(rc == DLOCK_OK || rc == DLOCK_ERR_FENCED || unavailability(rc));
    run_operators();
}

/* Forget everything one input left: connections, the node's run_id and reports. */
static void reset(void)
{
    for (dlock__connset *s = g_cl->pool; s != NULL; s = s->next)
        for (int i = 0; i < g_cl->n; i++)
            dlock__conn_close(&s->conns[i]);
    for (int i = 0; i < g_npeers; i++)
        close(g_peers[i]);
    g_npeers = 0;
    while ((g_peers[0] = fs_accept()) >= 0)
        close(g_peers[0]);
    dlock__node *n = &g_cl->nodes[0];
    n->voter.run_id[0] = '\0';
    n->voter.votes_from_us = 0;
    n->policy_reported = false;
    n->evicting = false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    g_data = data;
    g_size = size;
    run_ops();
    reset();
    return 0;
}
