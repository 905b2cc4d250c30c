/*
 * stock.h: what the stock's two files share: one call on the SKU's server (stock.c)
 * and the reserve that waits for units (stock_reserve.c).
 */
#ifndef DLOCK_STOCK_H
#define DLOCK_STOCK_H

#include "internal.h"

#define STOCK_NKEYS 5

/* The keys of one SKU (the layout stock_scripts.c describes), in one allocation. */
typedef struct stock_keys {
    char *buf;
    const char *key[STOCK_NKEYS];
    size_t len[STOCK_NKEYS];
} stock_keys;

/* One stock call: the client, the SKU's keys, a connection set from the pool, and the
 * request for node 0 (the other nodes get none). */
typedef struct stock_op {
    dlock_client *c;
    stock_keys k;
    dlock__connset *set;
    dlock__req req;
} stock_op;

/* The arguments of a stock script: the SKU's keys, then the script's own. They outlive
 * the formatting: the call borrows them for its EVAL form. */
#define STOCK_ARGS_MAX 6
typedef struct stock_args {
    const char *arg[STOCK_NKEYS + STOCK_ARGS_MAX];
    size_t len[STOCK_NKEYS + STOCK_ARGS_MAX];
    int n;
} stock_args;

/* Check the client and the SKU, make the keys. No connection is taken: a call in steps
 * takes one per round, a blocking one takes op->set itself (dlock__stock_op_end gives
 * it back). */
int dlock__stock_op_begin(stock_op *op, dlock_client *c, const char *sku, dlock__err *e);
void dlock__stock_op_end(stock_op *op);
/* A script's arguments: the SKU's keys, then each one added. */
void dlock__stock_args_init(stock_args *a, const stock_op *op);
void dlock__stock_args_add(stock_args *a, const char *s);
/* Run a script on the SKU's server (node 0; the other nodes get no command). DLOCK_OK
 * with the reply in *out (the caller frees it), or the node's own error, with
 * *sent_maybe telling whether the server may have run the script all the same. */
int dlock__stock_run(stock_op *op, enum dlock__script_id id, const stock_args *a, const char *what,
                     int type, redisReply **out, bool *sent_maybe, dlock__err *e);
/* Send a script on the SKU's server, not awaited (a reserve that gives up). */
void dlock__stock_send_only(stock_op *op, enum dlock__script_id id, const stock_args *a);
/* The integers of an array reply, at least n of them, into v[]; false (with why in e
 * and DLOCK_ERR_PROTOCOL) for another shape. */
bool dlock__stock_reply_ints(const stock_op *op, const redisReply *r, const char *what,
                             long long *v, size_t n, size_t *got, dlock__err *e);

#endif /* DLOCK_STOCK_H */
