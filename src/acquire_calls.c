/*
 * acquire_calls.c: the acquire calls, dlock_acquire, dlock_sem_acquire and their
 * _start forms: the checks of their arguments (the name, dlock_opts, a semaphore's
 * permits), then the client's backend, which acquires (acquire.c for Redis servers,
 * local_acquire.c for a file:// client).
 */
#include "internal.h"

#include <string.h>

static int check_opts(const dlock_opts *o, int64_t *ttl_ms, int64_t *wait_ms, dlock__err *e)
{
    static const dlock_opts defaults = {0};
    if (o == NULL)
        o = &defaults;
    int rc = dlock__check_reserved(o->reserved, sizeof o->reserved / sizeof *o->reserved,
                                   "dlock_opts", e);
    if (rc == DLOCK_OK)
        rc = dlock__check_lease_wait(o->ttl_ms, DLOCK_TTL_DEFAULT_MS, "ttl_ms", o->wait_ms,
                                     o->cancel_fd, ttl_ms, wait_ms, e);
    if (rc != DLOCK_OK)
        return rc;
    if (o->shared != 0 && o->shared != 1)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "dlock_opts.shared must be 0 or 1");
    if (o->on_lost != NULL && !o->auto_renew)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "on_lost is only called with auto_renew");
    if ((o->label_is_holder != 0 && o->label_is_holder != 1) || o->spare != 0)
        return dlock__err_set(e, DLOCK_ERR_INVALID,
                              "dlock_opts.label_is_holder must be 0 or 1, spare 0");
    if (o->label != NULL && strnlen(o->label, DLOCK_LABEL_MAX + 1) > DLOCK_LABEL_MAX)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "label longer than %d bytes", DLOCK_LABEL_MAX);
    if (o->linger_ms < 0 || o->linger_ms > DLOCK_LINGER_MAX_MS)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "dlock_opts.linger_ms %lld: 0 to %d",
                              (long long)o->linger_ms, DLOCK_LINGER_MAX_MS);
    if (o->linger_ms > 0 && o->shared)
        return dlock__err_set(e, DLOCK_ERR_INVALID,
                              "dlock_opts.linger_ms is for exclusive locks, not shared ones");
    return DLOCK_OK;
}

/* Where a lock may linger (dlock_opts.linger_ms): an exclusive one (limit 0) of a client
 * of one Redis server, taken by dlock_acquire, not in steps (linger.c says why). */
static int check_linger(const dlock_client *c, const dlock_opts *o, int64_t limit, bool steps,
                        dlock__err *e)
{
    if (o == NULL || o->linger_ms == 0)
        return DLOCK_OK;
    if (limit != 0)
        return dlock__err_set(e, DLOCK_ERR_INVALID,
                              "dlock_opts.linger_ms is for exclusive locks, not permits");
    if (steps)
        return dlock__err_set(e, DLOCK_ERR_INVALID,
                              "dlock_opts.linger_ms is for dlock_acquire, not its steps");
    if (c->local != NULL)
        return dlock__err_set(e, DLOCK_ERR_INVALID,
                              "dlock_opts.linger_ms is for Redis servers, not a file:// client");
    if (c->n > 1)
        return dlock__err_set(e, DLOCK_ERR_INVALID,
                              "dlock_opts.linger_ms needs a client of one server (this one has "
                              "%d): across several, a retake could keep the lock on some and "
                              "hand it on on others",
                              c->n);
    return DLOCK_OK;
}

/* The checks every acquisition makes before anything else. */
static int prepare(dlock_client *c, const char *name, const dlock_opts *opts, int64_t *ttl_ms,
                   int64_t *wait_ms, dlock__err *e)
{
    int rc = dlock__client_enter(c, e);
    if (rc == DLOCK_OK && (rc = dlock__check_name(name, e)) == DLOCK_OK)
        rc = check_opts(opts, ttl_ms, wait_ms, e);
    return rc;
}

/* dlock_acquire and dlock_sem_acquire: limit 0 takes the lock exclusively, else as one
 * of at most limit shared holders. The steps, with sleeps between them. */
static int acquire(dlock_client *c, const char *name, const dlock_opts *opts, int64_t limit,
                   dlock_lock **out)
{
    dlock__err e;
    if (out == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "out is NULL");
    *out = NULL;
    int64_t ttl_ms = 0, wait_ms = 0;
    int rc = prepare(c, name, opts, &ttl_ms, &wait_ms, &e);
    if (rc != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    if (limit == 0 && opts != NULL && opts->shared)
        limit = DLOCK_PERMITS_MAX;
    if ((rc = check_linger(c, opts, limit, false, &e)) != DLOCK_OK ||
        (rc = dlock__client_block_begin(c, &e)) != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    rc = c->backend->acquire(c, name, opts, ttl_ms, wait_ms, limit, out, &e);
    return dlock__err_raise(&e, dlock__client_block_end(c, rc, out, &e));
}

/* The limit of dlock_sem_acquire's permits, or an error. */
static int sem_limit(const dlock_client *c, int64_t permits, const dlock_opts *opts, int64_t *limit,
                     dlock__err *e)
{
    if (permits < 1 || permits > DLOCK_PERMITS_MAX)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "permits %lld: a semaphore has 1 to %d",
                              (long long)permits, DLOCK_PERMITS_MAX);
    if (opts != NULL && opts->shared)
        return dlock__err_set(e, DLOCK_ERR_INVALID,
                              "dlock_opts.shared is for dlock_acquire: a permit is shared already");
    /* Only a single server can count K >= 2 holders: N independent ones cannot, by a
     * quorum (docs/guarantees.md). One permit is the exclusive lock, which a quorum
     * can bound. */
    if (permits >= 2 && c != NULL && c->magic == DLOCK_CLIENT_MAGIC && c->n > 1)
        return dlock__err_set(e, DLOCK_ERR_INVALID,
                              "a semaphore of %lld permits needs a client of one server (this "
                              "one has %d): a quorum of independent servers cannot bound K >= 2 "
                              "holders",
                              (long long)permits, c->n);
    *limit = permits == 1 ? 0 : permits;
    return DLOCK_OK;
}

int dlock_acquire(dlock_client *c, const char *name, const dlock_opts *opts, dlock_lock **out)
{
    return acquire(c, name, opts, 0, out);
}

int dlock_sem_acquire(dlock_client *c, const char *name, int64_t permits, const dlock_opts *opts,
                      dlock_lock **out)
{
    dlock__err e;
    int64_t limit = 0;
    if (out != NULL)
        *out = NULL;
    int rc = sem_limit(c, permits, opts, &limit, &e);
    return rc != DLOCK_OK ? dlock__err_raise(&e, rc) : acquire(c, name, opts, limit, out);
}

/* dlock_acquire_start and dlock_sem_acquire_start. */
static int acquire_start(dlock_client *c, const char *name, const dlock_opts *opts, int64_t limit,
                         dlock_pending **out, dlock__err *e)
{
    int64_t ttl_ms = 0, wait_ms = 0;
    int rc = prepare(c, name, opts, &ttl_ms, &wait_ms, e);
    if (limit == 0 && opts != NULL && opts->shared)
        limit = DLOCK_PERMITS_MAX;
    if (rc == DLOCK_OK)
        rc = check_linger(c, opts, limit, true, e);
    return rc != DLOCK_OK
               ? rc
               : c->backend->acquire_start(c, name, opts, ttl_ms, wait_ms, limit, out, e);
}

int dlock_acquire_start(dlock_client *c, const char *name, const dlock_opts *opts,
                        dlock_pending **out)
{
    dlock__err e;
    if (out == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "out is NULL");
    *out = NULL;
    return dlock__err_raise(&e, acquire_start(c, name, opts, 0, out, &e));
}

int dlock_sem_acquire_start(dlock_client *c, const char *name, int64_t permits,
                            const dlock_opts *opts, dlock_pending **out)
{
    dlock__err e;
    int64_t limit = 0;
    if (out == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "out is NULL");
    *out = NULL;
    int rc = sem_limit(c, permits, opts, &limit, &e);
    if (rc == DLOCK_OK)
        rc = acquire_start(c, name, opts, limit, out, &e);
    return dlock__err_raise(&e, rc);
}
