/*
 * reply.c: reply parsing with limits, and what server errors mean.
 *
 * hiredis's redisReader does the RESP parsing. Its default object functions trust
 * the server completely: "*2147483647" makes it calloc 16 GiB, and a huge bulk length
 * makes it buffer without limit. A lock library must survive a broken or hostile
 * peer, so the reader gets our own object functions, which refuse long arrays, and
 * conn.c refuses to feed it past DLOCK_REPLY_MAX_BYTES of unparsed input.
 *
 * The objects are hiredis's own redisReply, allocated with malloc as hiredis 0.14
 * does, so freeReplyObject() frees them.
 */
#include "base.h"

#include <stdlib.h>
#include <string.h>

/* Attach a new reply object to its parent array, if it has one. */
static redisReply *new_reply(const redisReadTask *task, int type)
{
    redisReply *r = dlock__calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->type = type;
    if (task->parent != NULL) {
        redisReply *parent = task->parent->obj;
        parent->element[task->idx] = r;
    }
    return r;
}

static void *create_string(const redisReadTask *task, char *str, size_t len)
{
    char *copy = dlock__malloc(len + 1);
    if (copy == NULL)
        return NULL;
    redisReply *r = new_reply(task, task->type);
    if (r == NULL) {
        free(copy);
        return NULL;
    }
    memcpy(copy, str, len);
    copy[len] = '\0';
    r->str = copy;
    r->len = len;
    return r;
}

static void *create_array(const redisReadTask *task, int elements)
{
    /* The refusal is reported through the reader's privdata, so that conn.c can tell
     * "too large" from a real allocation failure (both make the reader fail). */
    dlock__reader_cap *cap = task->privdata;
    if (elements < 0 || elements > (cap != NULL ? cap->max_elements : DLOCK_REPLY_MAX_ELEMENTS)) {
        if (cap != NULL)
            cap->refused = true;
        return NULL;
    }
    redisReply **el = NULL;
    if (elements > 0 && (el = dlock__calloc((size_t)elements, sizeof *el)) == NULL)
        return NULL;
    redisReply *r = new_reply(task, REDIS_REPLY_ARRAY);
    if (r == NULL) {
        free(el);
        return NULL;
    }
    r->element = el;
    r->elements = (size_t)elements;
    return r;
}

static void *create_integer(const redisReadTask *task, long long value)
{
    redisReply *r = new_reply(task, REDIS_REPLY_INTEGER);
    if (r != NULL)
        r->integer = value;
    return r;
}

static void *create_nil(const redisReadTask *task)
{
    return new_reply(task, REDIS_REPLY_NIL);
}

static void free_object(void *obj)
{
    freeReplyObject(obj);
}

redisReader *dlock__reader_new(void)
{
    /* hiredis takes a non-const pointer but never writes through it; this table is
     * constant in all but type. */
    static redisReplyObjectFunctions fns = {create_string, create_array, create_integer, create_nil,
                                            free_object};
    return redisReaderCreateWithFunctions(&fns);
}

/* Does the error reply start with this word (followed by a space or the end)? */
static bool starts_with_word(const char *str, size_t len, const char *word)
{
    size_t n = strlen(word);
    return len >= n && memcmp(str, word, n) == 0 && (len == n || str[n] == ' ');
}

int dlock__server_error_code(const char *str, size_t len)
{
    /* Errors that say "this node cannot serve right now": the attempt failed on this
     * node, but nobody else holds the lock because of it (never DLOCK_ERR_BUSY). */
    static const char *const unavailable[] = {"BUSY",        "LOADING",  "MASTERDOWN", "TRYAGAIN",
                                              "READONLY",    "OOM",      "MISCONF",    "NOREPLICAS",
                                              "CLUSTERDOWN", "UNBLOCKED"};
    static const char *const auth[] = {"NOAUTH", "WRONGPASS", "NOPERM"};
    for (size_t i = 0; i < sizeof unavailable / sizeof *unavailable; i++)
        if (starts_with_word(str, len, unavailable[i]))
            return DLOCK_ERR_UNAVAILABLE;
    for (size_t i = 0; i < sizeof auth / sizeof *auth; i++)
        if (starts_with_word(str, len, auth[i]))
            return DLOCK_ERR_AUTH;
    /* A server at its maxclients answers a new connection's first command so, and
     * closes it: it cannot serve now, and may once a client leaves. */
    if (starts_with_word(str, len, "ERR") && len > 4 &&
        strstr(str, "max number of clients reached") != NULL)
        return DLOCK_ERR_UNAVAILABLE;
    /* Redis before 6 answers a bad AUTH with a plain -ERR. */
    if (starts_with_word(str, len, "ERR") && len > 4 &&
        (strstr(str, "invalid password") != NULL || strstr(str, "no password is set") != NULL))
        return DLOCK_ERR_AUTH;
    /* WRONGTYPE, MOVED, ASK, CROSSSLOT, ERR ...: we sent something this server does not
     * accept in this state, which retrying will not change. */
    return DLOCK_ERR_PROTOCOL;
}

bool dlock__is_noscript(const redisReply *r)
{
    return r != NULL && r->type == REDIS_REPLY_ERROR && r->str != NULL &&
           starts_with_word(r->str, r->len, "NOSCRIPT");
}
