/* itest_stock.c: the helpers of test_stock.c and test_stock_reserve.c (itest.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "internal.h" /* dlock__token_valid */
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>

dlock_client *it_stock_client(void)
{
    return it_client(&it_srv, 1000 * dh_slack());
}

long long it_stock_field(dh_server *s, const char *sku, const char *name)
{
    redisReply *r = dh_cmd(s, "HGET dlock:{%s}:stock %s", sku, name);
    assert_non_null(r);
    long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
    freeReplyObject(r);
    return v;
}

long long it_stock_card(dh_server *s, const char *sku, const char *suffix)
{
    return it_int_reply(dh_cmd(s, "ZCARD dlock:{%s}:stock:%s", sku, suffix));
}

void it_stock_show(const char *what, int rc)
{
    if (rc != DLOCK_OK)
        printf("INFO %s -> %s: %s\n", what, dlock_errname(rc), dlock_errmsg());
}

void it_stock_expect(dlock_client *c, const char *sku, int64_t stock, int64_t avail,
                     int64_t reserved, int64_t sold)
{
    dlock_stock_info in;
    int rc = dlock_stock_status(c, sku, &in);
    it_stock_show("status", rc);
    assert_int_equal(rc, DLOCK_OK);
    if (in.stock != stock || in.available != avail || in.reserved != reserved || in.sold != sold)
        fail_msg("%s: stock %lld available %lld reserved %lld sold %lld, want %lld %lld %lld %lld",
                 sku, (long long)in.stock, (long long)in.available, (long long)in.reserved,
                 (long long)in.sold, (long long)stock, (long long)avail, (long long)reserved,
                 (long long)sold);
    assert_int_equal(in.stock, in.sold + in.reserved + in.available);
}

void it_stock_set(dlock_client *c, const char *sku, int64_t qty)
{
    int rc = dlock_stock_set(c, sku, qty, NULL);
    it_stock_show("set", rc);
    assert_int_equal(rc, DLOCK_OK);
}

int it_stock_reserve(dlock_client *c, const char *sku, int64_t qty, int64_t lease_ms,
                     int64_t wait_ms, it_res_id id)
{
    dlock_reserve_opts o = {0};
    o.lease_ms = lease_ms;
    o.wait_ms = wait_ms;
    return dlock_stock_reserve(c, sku, qty, &o, id);
}

void it_stock_reserve_ok(dlock_client *c, const char *sku, int64_t qty, int64_t lease_ms,
                         it_res_id id)
{
    int rc = it_stock_reserve(c, sku, qty, lease_ms, 0, id);
    it_stock_show("reserve", rc);
    assert_int_equal(rc, DLOCK_OK);
    assert_true(dlock__token_valid(id));
}
