/*
 * fuzz_reply.c: what a server sends, read by a real connection (src/conn.c and
 * src/reply.c). It is one of the targets of scenario 17 (fuzzing) of the fault
 * suite, in docs/guarantees.md.
 *
 * The input is the server's whole output on one connection. The connection is made by
 * dlock__conn_open to a unix socket the fuzzer listens on (fuzz_server.c), so the code
 * under test is the library's own: the handshake it queues, dlock__conn_read with its
 * cap on buffered bytes, the redisReader with our object functions (array cap, the
 * refusal it reports), dlock__conn_next_reply with the handshake replies (AUTH, SELECT,
 * INFO: run_id, maxmemory_policy) and the server-error mapping. Each input is served
 * three ways:
 *   1. a fresh connection to unix://PATH: the input begins with the INFO reply;
 *   2. a fresh connection to unix://:pw@PATH?db=3: AUTH, SELECT, then INFO replies;
 *   3. an established connection (its INFO reply already read): the input is the
 *      replies to the caller's commands.
 * The bytes go in pieces of 1, 2, 5, 13, 64, 1024 and 16384 bytes in turn, so that
 * replies are cut at every kind of place. If the input ends in the middle of a reply
 * (in the third way, which costs the least), the server goes on with 'x' bytes, as a hostile server
 * streaming "$1000000000" would: the connection must refuse it once DLOCK_REPLY_MAX_BYTES are
 * buffered.
 *
 * What must hold: every reply handed out is well formed (types, NUL-terminated
 * strings, arrays within DLOCK_REPLY_MAX_ELEMENTS, depth within hiredis's 7), every
 * error has a code from the documented set and a detail; never more than the cap is
 * buffered; and nothing leaks (LeakSanitizer, after every input).
 */
#include "fuzz_server.h"
#include "internal.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef NDEBUG
#error "the fuzz targets check with assert(): build them without NDEBUG"
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static dlock_client *g_plain, *g_auth;

/* A well-formed INFO reply, as the established connection (mode 3) first reads. */
static char g_info[256];
static size_t g_info_len;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fs_init();
    static const char body[] = "# Server\r\nrun_id:0123456789abcdef0123456789abcdef01234567\r\n"
                               "uptime_in_seconds:100\r\n";
    g_info_len = (size_t)snprintf(g_info, sizeof g_info, "$%zu\r\n%s\r\n", sizeof body - 1, body);
    dlock_config cfg = {0};
    cfg.timeout_ms = 1000;
    /* No connection is made here (dlock_client_new never connects). */
    if (dlock_client_new(fs_url("", ""), &cfg, &g_plain) != DLOCK_OK ||
        dlock_client_new(fs_url(":pw@", "?db=3"), &cfg, &g_auth) != DLOCK_OK) {
        fprintf(stderr, "fuzz_reply: dlock_client_new: %s\n", dlock_errmsg());
        exit(2);
    }
    return 0;
}

/* A reply the connection handed out must be one a caller can walk safely. */
static void check_reply(const redisReply *r, int depth)
{
    assert(r != NULL);
    assert(depth <= 8);
    switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        assert(r->str != NULL && r->str[r->len] == '\0');
        if (r->type == REDIS_REPLY_ERROR) {
            int code = dlock__server_error_code(r->str, r->len);
            assert(code == DLOCK_ERR_UNAVAILABLE || code == DLOCK_ERR_AUTH ||
                   code == DLOCK_ERR_PROTOCOL);
            bool noscript = r->len >= 8 && memcmp(r->str, "NOSCRIPT", 8) == 0 &&
                            (r->len == 8 || r->str[8] == ' ');
            assert(dlock__is_noscript(r) == noscript);
        }
        break;
    case REDIS_REPLY_ARRAY:
        assert(r->elements <= DLOCK_REPLY_MAX_ELEMENTS);
        assert(r->elements == 0 || r->element != NULL);
        for (size_t i = 0; i < r->elements; i++)
            check_reply(r->element[i], depth + 1);
        break;
    case REDIS_REPLY_INTEGER:
    case REDIS_REPLY_NIL:
        break;
    default:
        assert(!"unknown reply type");
    }
}

/* An error from the connection: a documented code, with a detail. */
static void check_error(int rc, const char *detail)
{
    assert(rc == DLOCK_ERR_PROTOCOL || rc == DLOCK_ERR_IO || rc == DLOCK_ERR_AUTH ||
           rc == DLOCK_ERR_INVALID || rc == DLOCK_ERR_UNAVAILABLE || rc == DLOCK_ERR_NOMEM);
    assert(detail[0] != '\0');
}

/* Read what the server sent and take every complete reply. false once the connection
 * failed (the caller, fanout.c, would close it). */
static bool pump(dlock__conn *c, int *replies)
{
    dlock__err detail = {""};
    int rc = dlock__conn_read(c, &detail);
    if (rc != DLOCK_OK) {
        check_error(rc, detail.msg);
        return false;
    }
    assert(c->reader->len - c->reader->pos <= DLOCK_REPLY_MAX_BYTES);
    for (;;) {
        redisReply *r;
        rc = dlock__conn_next_reply(c, &r, &detail);
        if (rc != DLOCK_OK) {
            assert(r == NULL);
            check_error(rc, detail.msg);
            return false;
        }
        if (r == NULL)
            return true;
        /* The caller's replies come only after the handshake's. */
        assert(c->handshake == 0);
        check_reply(r, 0);
        (*replies)++;
        freeReplyObject(r);
    }
}

/* The node's memory of earlier connections (run_id, eviction report) would make one
 * input's outcome depend on the previous ones: forget it. */
static void reset_node(dlock__node *n)
{
    pthread_mutex_lock(&n->mu);
    n->voter.run_id[0] = '\0';
    n->voter.votes_from_us = 0;
    n->policy_reported = false;
    n->evicting = false;
    pthread_mutex_unlock(&n->mu);
}

static void serve(dlock_client *cl, bool established, const uint8_t *data, size_t size)
{
    static const size_t pieces[] = {1, 2, 5, 13, 64, 1024, 16384};
    dlock__conn c;
    dlock__err detail = {""};
    reset_node(&cl->nodes[0]);
    dlock__conn_init(&c, &cl->nodes[0]);
    int rc = dlock__conn_open(&c, &detail);
    assert(rc == DLOCK_OK && c.state == DLOCK_CONN_READY);
    int peer = fs_accept();
    assert(peer >= 0);
    assert(dlock__conn_flush(&c, &detail) == DLOCK_OK && c.outpos == c.outlen);
    fs_drain(peer);

    int replies = 0;
    bool alive = true;
    if (established) {
        bool sent = fs_write(peer, g_info, g_info_len);
        assert(sent);
        alive = pump(&c, &replies);
        assert(alive && replies == 0 && c.handshake == 0);
    }
    size_t off = 0;
    for (int k = 0; alive && off < size; k++) {
        size_t n = pieces[k % (sizeof pieces / sizeof pieces[0])];
        if (n > size - off)
            n = size - off;
        bool sent = fs_write(peer, data + off, n);
        assert(sent); /* the connection is open until the first error */
        off += n;
        alive = pump(&c, &replies);
    }
    /* Stopped in the middle of a reply: the server goes on sending. The stream cannot
     * make a reply out of 'x' forever ('x' is no type byte), and the cap must stop it
     * long before a large bulk is buffered. */
    if (alive && established && c.reader->ridx >= 0) {
        static char filler[65536];
        memset(filler, 'x', sizeof filler);
        size_t sent = 0;
        while (alive) {
            assert(sent <= DLOCK_REPLY_MAX_BYTES + 2 * sizeof filler);
            bool ok = fs_write(peer, filler, sizeof filler);
            assert(ok);
            sent += sizeof filler;
            alive = pump(&c, &replies);
        }
    }
    dlock__conn_free(&c);
    close(peer);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    serve(g_plain, false, data, size);
    serve(g_auth, false, data, size);
    serve(g_plain, true, data, size);
    return 0;
}
