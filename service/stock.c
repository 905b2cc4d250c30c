/*
 * stock.c: STOCK, named after `dlock stock`: a SKU's stock, sold through reservations
 * with a lease (dlock_stock_* in the library).
 *
 *   STOCK SET sku qty                        the SKU's state after the change
 *   STOCK ADD sku delta                      the same
 *   STOCK RESERVE sku qty [TTL ms] [WAIT ms] the reservation id, or nil
 *   STOCK COMMIT sku id                      1, or 0 when the reservation is lost
 *   STOCK CANCEL sku id                      1 or 0
 *   STOCK EXTEND sku id ttl                  1 or 0
 *   STOCK STATUS sku                         the SKU's state
 *
 * The state is a flat field/value array, as LOCKINFO's: stock, available, reserved,
 * sold, reservations, waiters.
 *
 * A reservation is a lease, not the connection's: it is typically committed from
 * another request, on another connection, once the payment went through, and one
 * nobody commits gives its units back when its lease runs out. So a connection that
 * closes leaves its reservations alone. A RESERVE is a dlock_stock_reserve_start
 * pending, stepped and parked on the loop as a LOCK is (park.c), its attempts on the
 * lock server's pipe; COMMIT, CANCEL and EXTEND are calls in steps
 * (dlock_stock_commit_start ...), as an UNLOCK is; SET, ADD and STATUS run on the pool.
 * A connection that closes while its RESERVE waits gives the wait up, and a reservation
 * granted just as it closed, whose id nobody received, is canceled at once rather than
 * left to hold its units for a lease.
 *
 * Arguments are checked on the loop, so that a bad one changes nothing on the servers;
 * the library's own refusals (a stock set below what is sold and reserved) come back as
 * -ERR with its detail.
 */
#include "dlockd.h"

#include <stdlib.h>
#include <string.h>

/* A STOCK command's arguments. */
typedef struct stock_args {
    char *name;                      /* the SKU */
    char token[DLOCK_TOKEN_LEN + 1]; /* a reservation's id */
    int64_t qty;                     /* units, or SET's stock, or ADD's delta */
    int64_t ttl_ms, wait_ms;         /* a reservation's lease; RESERVE's WAIT */
} stock_args;

static void stock_args_free(void *p)
{
    stock_args *a = p;
    if (a != NULL)
        free(a->name);
    free(a);
}

/* ---- replies ------------------------------------------------------------------------ */

static void reply_info(dd_job *j, int rc, const dlock_stock_info *s)
{
    if (rc != DLOCK_OK) {
        dd_reply_dlock_error(&j->reply, rc);
        return;
    }
    const struct {
        const char *field;
        int64_t value;
    } f[] = {{"stock", s->stock}, {"available", s->available},       {"reserved", s->reserved},
             {"sold", s->sold},   {"reservations", s->reservations}, {"waiters", s->waiters}};
    dd_reply_array(&j->reply, 2 * (sizeof f / sizeof f[0]));
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        dd_reply_cstr(&j->reply, f[i].field);
        dd_reply_int(&j->reply, (long long)f[i].value);
    }
}

/* ---- the calls, on the pool --------------------------------------------------------- */

static void set_work(dd_job *j)
{
    stock_args *a = j->args;
    dlock_stock_info s;
    j->rc = dlock_stock_set(dd_srv.client, a->name, a->qty, &s);
    reply_info(j, j->rc, &s);
}

static void add_work(dd_job *j)
{
    stock_args *a = j->args;
    dlock_stock_info s;
    j->rc = dlock_stock_add(dd_srv.client, a->name, a->qty, &s);
    reply_info(j, j->rc, &s);
}

static void status_work(dd_job *j)
{
    stock_args *a = j->args;
    dlock_stock_info s;
    j->rc = dlock_stock_status(dd_srv.client, a->name, &s);
    reply_info(j, j->rc, &s);
}

static void simple_done(dd_job *j)
{
    dd_job_answer(j);
    dd_job_free(j);
}

/* ---- COMMIT, CANCEL, EXTEND: a call in steps ---------------------------------------- */

static void end_finish(dd_job *j, dlock_lock *l)
{
    (void)l;                         /* the result is the code alone */
    dd_reply_held(&j->reply, j->rc); /* 0: the reservation is lost */
}

static void commit_settle(dd_job *j)
{
    if (j->rc == DLOCK_OK)
        dd_srv.stats.stock_committed++;
}

static void cancel_settle(dd_job *j)
{
    if (j->rc == DLOCK_OK)
        dd_srv.stats.stock_canceled++;
}

static void end_nothing(dd_job *j)
{
    (void)j; /* an EXTEND counts nothing; nothing is undone (the call settles a
                reservation that outlives its connection) */
}

static const dd_steps commit_steps = {
    .finish = end_finish, .settle = commit_settle, .undo = end_nothing};
static const dd_steps cancel_steps = {
    .finish = end_finish, .settle = cancel_settle, .undo = end_nothing};
static const dd_steps extend_steps = {
    .finish = end_finish, .settle = end_nothing, .undo = end_nothing};

/* ---- RESERVE: an operation in steps ------------------------------------------------- */

static void reserve_finish(dd_job *j, dlock_lock *l)
{
    stock_args *a = j->args;
    (void)l; /* a reservation hands out no lock */
    if (j->rc == DLOCK_OK) {
        /* Kept past the pending, which owns the id, for undo. */
        memcpy(a->token, dlock_pending_id(j->pending), DLOCK_TOKEN_LEN + 1);
        dd_reply_cstr(&j->reply, a->token);
    } else if (j->rc == DLOCK_ERR_BUSY) {
        dd_reply_nil(&j->reply);
    } else {
        dd_reply_dlock_error(&j->reply, j->rc);
    }
}

static void reserve_settle(dd_job *j)
{
    if (j->rc == DLOCK_OK)
        dd_srv.stats.stock_reserved++;
    else if (j->rc == DLOCK_ERR_BUSY)
        dd_srv.stats.stock_not_reserved++;
}

/* On the pool: granted as its connection closed; nobody has the id to commit it. */
static void reserve_undo(dd_job *j)
{
    stock_args *a = j->args;
    (void)dlock_stock_cancel(dd_srv.client, a->name, a->token);
}

static const dd_steps reserve_steps = {
    .finish = reserve_finish,
    .settle = reserve_settle,
    .undo = reserve_undo,
    .drop = NULL,
    .parked = &dd_srv.parked_reserves,
    .waits = &dd_srv.stats.stock_waits,
};

/* Options from argv[3] on: TTL ms (the reservation's lease), WAIT ms. */
static bool reserve_options(resp_arg *argv, size_t argc, dd_job *j, dd_buf *out)
{
    stock_args *a = j->args;
    bool ttl = false, wait = false;
    for (size_t i = 4; i < argc; i++) {
        bool is_ttl = dd_arg_is(&argv[i], "TTL");
        if (!is_ttl && !dd_arg_is(&argv[i], "WAIT")) {
            dd_reply_error(out, "ERR unknown STOCK RESERVE option '%.*s' (TTL ms, WAIT ms)",
                           (int)(argv[i].len > 64 ? 64 : argv[i].len), argv[i].p);
            return false;
        }
        const char *opt = is_ttl ? "TTL" : "WAIT";
        if (is_ttl ? ttl : wait) {
            dd_reply_error(out, "ERR STOCK RESERVE option %s given twice", opt);
            return false;
        }
        if (i + 1 >= argc) {
            dd_reply_error(out, "ERR STOCK RESERVE option %s needs a value", opt);
            return false;
        }
        if (is_ttl) {
            ttl = true;
            if (!dd_arg_ttl(&argv[++i], &a->ttl_ms, out))
                return false;
        } else {
            wait = true;
            if (!dd_arg_wait(&argv[++i], &a->wait_ms, out))
                return false;
        }
    }
    return true;
}

static bool reserve_start(dd_job *j, resp_arg *argv, size_t argc, dd_buf *out)
{
    stock_args *a = j->args;
    a->ttl_ms = DLOCK_STOCK_LEASE_DEFAULT_MS;
    if (!reserve_options(argv, argc, j, out) || dd_drain_refuses(out))
        return false;
    dlock_reserve_opts o;
    memset(&o, 0, sizeof o);
    o.lease_ms = a->ttl_ms;
    o.wait_ms = a->wait_ms;
    /* No I/O: the same checks as dlock_stock_reserve, on the loop. */
    int rc = dlock_stock_reserve_start(dd_srv.client, a->name, a->qty, &o, &j->pending);
    if (rc != DLOCK_OK) {
        dd_reply_dlock_error(out, rc);
        return false;
    }
    j->steps = &reserve_steps;
    dd_step(j);
    return true;
}

/* ---- STOCK -------------------------------------------------------------------------- */

enum { SET, ADD, RESERVE, COMMIT, CANCEL, EXTEND, STATUS, NSUBS };

static const struct {
    const char *name;
    size_t min, max; /* arguments, STOCK and the subcommand included */
    const char *syntax;
} subs[NSUBS] = {
    [SET] = {"SET", 4, 4, "STOCK SET sku qty"},
    [ADD] = {"ADD", 4, 4, "STOCK ADD sku delta"},
    [RESERVE] = {"RESERVE", 4, 8, "STOCK RESERVE sku qty [TTL ms] [WAIT ms]"},
    [COMMIT] = {"COMMIT", 4, 4, "STOCK COMMIT sku id"},
    [CANCEL] = {"CANCEL", 4, 4, "STOCK CANCEL sku id"},
    [EXTEND] = {"EXTEND", 5, 5, "STOCK EXTEND sku id ttl"},
    [STATUS] = {"STATUS", 3, 3, "STOCK STATUS sku"},
};

/* A reservation id as the library makes them: DLOCK_TOKEN_LEN lowercase hex digits. */
static bool id_arg(const resp_arg *a, char id[DLOCK_TOKEN_LEN + 1], dd_buf *out)
{
    bool ok = a->len == DLOCK_TOKEN_LEN;
    for (size_t i = 0; ok && i < a->len; i++)
        ok = (a->p[i] >= '0' && a->p[i] <= '9') || (a->p[i] >= 'a' && a->p[i] <= 'f');
    if (!ok) {
        dd_reply_error(out, "ERR a reservation id is %d lowercase hexadecimal characters",
                       DLOCK_TOKEN_LEN);
        return false;
    }
    memcpy(id, a->p, DLOCK_TOKEN_LEN);
    id[DLOCK_TOKEN_LEN] = '\0';
    return true;
}

/* A COMMIT, a CANCEL or an EXTEND: its call in steps (park.c), on the loop unless a
 * step would block; false with the error in out. */
static bool end_start(int sub, dd_job *j, dd_buf *out)
{
    stock_args *a = j->args;
    dlock_client *c = dd_srv.client;
    int rc = sub == COMMIT ? dlock_stock_commit_start(c, a->name, a->token, &j->pending)
             : sub == CANCEL
                 ? dlock_stock_cancel_start(c, a->name, a->token, &j->pending)
                 : dlock_stock_extend_start(c, a->name, a->token, a->ttl_ms, &j->pending);
    if (rc != DLOCK_OK) {
        dd_reply_dlock_error(out, rc);
        return false;
    }
    j->steps = sub == COMMIT ? &commit_steps : sub == CANCEL ? &cancel_steps : &extend_steps;
    dd_step(j);
    return true;
}

/* The subcommand's own arguments into j, and its work (or, for one in steps, its
 * start); false with the error in out. */
static bool parse(int sub, resp_arg *argv, size_t argc, dd_job *j, dd_buf *out)
{
    stock_args *a = j->args;
    const int64_t max = DLOCK_STOCK_QTY_MAX;
    switch (sub) {
    case SET:
        j->work = set_work;
        if (dd_arg_int(&argv[3], 0, max, &a->qty))
            return true;
        dd_reply_error(out, "ERR qty must be an integer from 0 to %lld", (long long)max);
        return false;
    case ADD:
        j->work = add_work;
        if (dd_arg_int(&argv[3], -max, max, &a->qty) && a->qty != 0)
            return true;
        dd_reply_error(out, "ERR delta must be a nonzero integer from -%lld to %lld",
                       (long long)max, (long long)max);
        return false;
    case RESERVE:
        if (!dd_arg_int(&argv[3], 1, max, &a->qty)) {
            dd_reply_error(out, "ERR qty must be an integer from 1 to %lld", (long long)max);
            return false;
        }
        return reserve_start(j, argv, argc, out);
    case COMMIT:
    case CANCEL:
        return id_arg(&argv[3], a->token, out) && end_start(sub, j, out);
    case EXTEND:
        return id_arg(&argv[3], a->token, out) && dd_arg_ttl(&argv[4], &a->ttl_ms, out) &&
               end_start(sub, j, out);
    default: /* STATUS */
        j->work = status_work;
        return true;
    }
}

static void dd_cmd_stock(dd_conn *c, resp_arg *argv, size_t argc, dd_buf *out)
{
    int sub = 0;
    while (sub < NSUBS && !dd_arg_is(&argv[1], subs[sub].name))
        sub++;
    if (sub == NSUBS) {
        dd_reply_error(out,
                       "ERR unknown STOCK subcommand '%.*s' (SET, ADD, RESERVE, COMMIT, CANCEL, "
                       "EXTEND, STATUS)",
                       (int)(argv[1].len > 64 ? 64 : argv[1].len), argv[1].p);
        return;
    }
    if (argc < subs[sub].min || argc > subs[sub].max) {
        dd_reply_error(out, "ERR wrong number of arguments for 'STOCK %s' (%s)", subs[sub].name,
                       subs[sub].syntax);
        return;
    }
    dd_job *j = dd_job_new(c);
    stock_args *a = dd_job_args(j, sizeof *a, stock_args_free);
    a->name = dd_arg_dup(&argv[2], "SKU", DLOCK_NAME_MAX, out);
    if (a->name == NULL || !parse(sub, argv, argc, j, out)) {
        dd_job_free(j);
        return;
    }
    if (sub == RESERVE || sub == COMMIT || sub == CANCEL || sub == EXTEND)
        return; /* running in steps */
    j->done = simple_done;
    dd_job_queue(j);
}

void dd_stock_register(void)
{
    static const dd_command_def stock = {"stock", -2, false, false, false, dd_cmd_stock};
    dd_commands_add(&stock, 1);
}
