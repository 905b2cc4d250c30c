/*
 * fuzz_cluster.c: what a Redis Cluster says to a redis-cluster:// node (src/cluster.c):
 * the words of a -MOVED or -ASK reply, and a CLUSTER SLOTS reply taken as the node's
 * slot map. Both come from servers, so both must take any bytes.
 *
 * The first byte chooses: even, the rest is the text of an error reply (as hiredis
 * gives it: up to the first NUL); odd, the rest is RESP, parsed with the library's
 * own capped reader with the slot map's caps, and each complete reply is taken as the
 * map of a node that already holds one (so a second map replaces the first). What
 * must hold:
 *   - a redirection that parses names a slot in 0..16383, a port in 1..65535 and a
 *     non-empty host shorter than the buffer (the replying node's own for an empty
 *     one), and only "MOVED " or "ASK " texts parse;
 *   - a map is taken or refused (DLOCK_ERR_PROTOCOL) with a message, never half read:
 *     once taken, every slot's owner, if any, has a non-empty host and a valid port,
 *     and a refused one leaves the map as valid as before;
 *   - nothing leaks, nothing is read past the input.
 */
#include "internal.h"

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef NDEBUG
#error "the fuzz targets check with assert(): build them without NDEBUG"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void redirect(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    assert(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    char host[64];
    bool ask;
    int slot = -1, port = -1;
    if (dlock__cluster_parse_redirect(text, "self.example", &ask, &slot, host, sizeof host,
                                      &port)) {
        assert(strncmp(text, ask ? "ASK " : "MOVED ", ask ? 4 : 6) == 0);
        assert(slot >= 0 && slot < DLOCK_CLUSTER_SLOTS);
        assert(port >= 1 && port <= 65535);
        assert(host[0] != '\0' && strlen(host) < sizeof host);
    }
    free(text);
}

/* Every owned slot's master is an address. */
static void check_map(dlock__node *node)
{
    for (int s = 0; s < DLOCK_CLUSTER_SLOTS; s++) {
        char host[256];
        int port;
        if (dlock__cluster_owner(node, s, host, sizeof host, &port))
            assert(host[0] != '\0' && port >= 1 && port <= 65535);
    }
}

static void slot_map(const uint8_t *data, size_t size)
{
    static dlock__node_rules rules;
    static char display[] = "redis-cluster://seed:7000";
    dlock__node node;
    memset(&node, 0, sizeof node);
    node.rules = &rules;
    node.addr.display = display;
    pthread_mutex_init(&node.mu, NULL);
    assert(dlock__cluster_new(&node) == DLOCK_OK);
    redisReader *reader = dlock__reader_new();
    assert(reader != NULL);
    /* The caps load_map's connections have. */
    dlock__reader_cap cap = {.max_elements = DLOCK_CLUSTER_SLOTS};
    reader->privdata = &cap;
    if (redisReaderFeed(reader, (const char *)data, size) == REDIS_OK) {
        for (;;) {
            void *obj = NULL;
            if (redisReaderGetReply(reader, &obj) != REDIS_OK || obj == NULL)
                break;
            dlock__err detail = {""};
            int rc = dlock__cluster_take_map(&node, obj, "seed", &detail);
            assert(rc == DLOCK_OK || (rc == DLOCK_ERR_PROTOCOL && detail.msg[0] != '\0'));
            check_map(&node);
            freeReplyObject(obj);
        }
    }
    redisReaderFree(reader);
    dlock__cluster_free(&node);
    pthread_mutex_destroy(&node.mu);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] % 2 == 0)
        redirect(data + 1, size - 1);
    else
        slot_map(data + 1, size - 1);
    return 0;
}
