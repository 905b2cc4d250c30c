/* dexpect.c: the dlockd tests' assertions on a reply (see dtest.h), each freeing it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtest.h"

#include <string.h>

void dt_expect_status(redisReply *r, const char *want)
{
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, want) != 0)
        fail_msg("expected +%s, got type %d '%s'", want, r->type, r->str ? r->str : "");
    freeReplyObject(r);
}

void dt_expect_int(redisReply *r, long long want)
{
    if (r->type != REDIS_REPLY_INTEGER || r->integer != want)
        fail_msg("expected :%lld, got type %d (%lld, '%s')", want, r->type, r->integer,
                 r->str ? r->str : "");
    freeReplyObject(r);
}

void dt_expect_nil(redisReply *r)
{
    if (r->type != REDIS_REPLY_NIL)
        fail_msg("expected nil, got type %d '%s'", r->type, r->str ? r->str : "");
    freeReplyObject(r);
}

/* dt_expect_error, naming the command (cmd) in its failure when it is not NULL. */
static void expect_error_of(const char *cmd, redisReply *r, const char *prefix)
{
    if (r->type != REDIS_REPLY_ERROR || strncmp(r->str, prefix, strlen(prefix)) != 0)
        fail_msg("%s%sexpected -%s..., got type %d '%s'", cmd ? cmd : "", cmd ? ": " : "", prefix,
                 r->type, r->str ? r->str : "");
    freeReplyObject(r);
}

void dt_expect_error(redisReply *r, const char *prefix)
{
    expect_error_of(NULL, r, prefix);
}

void dt_expect_refusals(redisContext *c, const dt_refusal *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        expect_error_of(list[i].cmd, dt_cmd(c, list[i].cmd), list[i].error);
}

void dt_expect_lock(redisReply *r, dt_lock *out)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3)
        fail_msg("expected a LOCK array, got type %d '%s'", r->type, r->str ? r->str : "");
    assert_int_equal(r->element[0]->type, REDIS_REPLY_STRING);
    assert_int_equal(r->element[0]->len, 32);
    assert_int_equal(strspn(r->element[0]->str, "0123456789abcdef"), 32);
    assert_int_equal(r->element[1]->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->element[2]->type, REDIS_REPLY_INTEGER);
    assert_true(r->element[1]->integer >= 1);
    assert_true(r->element[2]->integer > 0);
    memcpy(out->token, r->element[0]->str, 33);
    out->fence = r->element[1]->integer;
    out->validity_ms = r->element[2]->integer;
    freeReplyObject(r);
}
