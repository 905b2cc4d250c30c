/*
 * handle.c: the dlock_lock handle: its making and freeing, its place on the client's
 * list, the argument checks every lock call shares, and the accessors.
 *
 * A handle is on its client's list from the moment a call hands it out until it is
 * released or detached, so that dlock_client_free can release what is still held. A
 * handle inherited across fork() belongs to the parent's lock: freeing the child's
 * copy touches no server and no mutex (see lock_free).
 */
#include "internal.h"

#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

int dlock__check_name(const char *name, dlock__err *e)
{
    return dlock__check_key_name(name, "name", e);
}

int dlock__check_key_name(const char *name, const char *what, dlock__err *e)
{
    if (name == NULL)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "%s is NULL", what);
    size_t len = strnlen(name, DLOCK_NAME_MAX + 1);
    if (len == 0)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "%s is empty", what);
    if (len > DLOCK_NAME_MAX)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "%s longer than %d bytes", what,
                              DLOCK_NAME_MAX);
    return DLOCK_OK;
}

int dlock__check_wait(int64_t wait_ms, int cancel_fd, dlock__err *e)
{
    if (wait_ms < -1)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "wait_ms %lld: use -1 (forever), 0 or more",
                              (long long)wait_ms);
    if (cancel_fd < 0)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "cancel_fd is negative (0 means none)");
    return DLOCK_OK;
}

int dlock__check_ttl(int64_t ttl_ms, const char *what, dlock__err *e)
{
    if (ttl_ms < DLOCK_TTL_MIN_MS || ttl_ms > DLOCK_TTL_MAX_MS)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "%s %lld ms is outside [%d, %d] ms", what,
                              (long long)ttl_ms, DLOCK_TTL_MIN_MS, DLOCK_TTL_MAX_MS);
    return DLOCK_OK;
}

int dlock__check_reserved(const uint64_t *w, size_t n, const char *what, dlock__err *e)
{
    for (size_t i = 0; i < n; i++)
        if (w[i] != 0)
            return dlock__err_set(e, DLOCK_ERR_INVALID, "%s.reserved must be zero", what);
    return DLOCK_OK;
}

int dlock__check_lease_wait(int64_t lease_ms, int64_t def_ms, const char *what, int64_t wait_ms,
                            int cancel_fd, int64_t *lease_out, int64_t *wait_out, dlock__err *e)
{
    *lease_out = lease_ms ? lease_ms : def_ms;
    *wait_out = wait_ms;
    int rc = dlock__check_ttl(*lease_out, what, e);
    return rc != DLOCK_OK ? rc : dlock__check_wait(wait_ms, cancel_fd, e);
}

int dlock__lock_enter(dlock_lock *l, dlock__err *e)
{
    if (l == NULL)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "lock is NULL");
    if (l->magic != DLOCK_LOCK_MAGIC)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "not a dlock_lock (released or corrupted?)");
    return dlock__client_enter(l->client, e);
}

int dlock__lock_new(dlock_client *c, const char *name, dlock_lock **out, dlock__err *e)
{
    dlock_lock *l = dlock__calloc(1, sizeof *l);
    if (l == NULL || (l->name = dlock__strdup(name)) == NULL) {
        free(l);
        /* The code, not dlock__err_set's return, so that the compiler sees *out set on
         * every DLOCK_OK path (gcc -O3 -Warray-bounds in dlock_lock_adopt). */
        dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
        return DLOCK_ERR_NOMEM;
    }
    l->magic = DLOCK_LOCK_MAGIC;
    l->client = c;
    l->name_len = strlen(name);
    l->lost_fd = -1;
    *out = l;
    return DLOCK_OK;
}

void dlock__lock_attach(dlock_lock *l)
{
    dlock_client *c = l->client;
    pthread_mutex_lock(&c->mu);
    l->next = c->locks;
    if (c->locks != NULL)
        c->locks->prev = l;
    c->locks = l;
    l->attached = true;
    pthread_mutex_unlock(&c->mu);
}

/* Take l off its client's list (the caller holds the list's mutex, or is a forked
 * child, where no other thread exists). */
static void unlink_handle(dlock_lock *l)
{
    if (!l->attached)
        return;
    dlock_client *c = l->client;
    if (l->prev != NULL)
        l->prev->next = l->next;
    else
        c->locks = l->next;
    if (l->next != NULL)
        l->next->prev = l->prev;
    l->attached = false;
}

void dlock__lock_free(dlock_lock *l)
{
    dlock_client *c = l->client;
    if (dlock__client_forked(c)) {
        /* A copy inherited across fork(): the parent's threads are not here, and a
         * mutex copied while one of them held it would never be released. Touch
         * nothing shared but the child's own copy of the list of handles (no other
         * thread of the child can hold its mutex: only the thread that forked is
         * copied, and dlock calls never fork). */
        unlink_handle(l);
    } else {
        dlock__watchdog_remove(c, l, true);
        pthread_mutex_lock(&c->mu);
        unlink_handle(l);
        pthread_mutex_unlock(&c->mu);
        dlock__confirm_free(c, atomic_exchange(&l->confirm, NULL)); /* its set goes back */
    }
    if (l->lost_fd >= 0)
        close(l->lost_fd);
    if (l->hold != NULL)
        c->backend->hold_free(l);
    free(l->renew_keys.buf);
    free(l->name);
    l->magic = 0;
    free(l);
}

void dlock__lock_mark_lost(dlock_lock *l)
{
    dlock_client *c = l->client;
    l->valid_until_us = 0;
    l->lost = true;
    pthread_mutex_lock(&c->mu);
    if (l->lost_fd >= 0) {
        uint64_t one = 1;
        /* A full counter (never, at one write per loss) only means already readable. */
        ssize_t w = write(l->lost_fd, &one, sizeof one);
        (void)w;
    }
    pthread_mutex_unlock(&c->mu);
}

int dlock_lock_detach(dlock_lock *l)
{
    dlock__err e;
    if (l == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "lock is NULL");
    if (l->magic != DLOCK_LOCK_MAGIC)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "not a dlock_lock (released or corrupted?)");
    return dlock__err_raise(&e, l->client->backend->detach(l, &e));
}

/* A server's lock outlives the handle by itself: detaching is freeing the handle. */
int dlock__redis_detach(dlock_lock *l, dlock__err *e)
{
    (void)e;
    dlock__lock_free(l);
    return DLOCK_OK;
}

int dlock_lock_adopt(dlock_client *c, const char *name, const char *token, dlock_lock **out)
{
    dlock__err e;
    if (out == NULL)
        return dlock__raise(&e, DLOCK_ERR_INVALID, "out is NULL");
    *out = NULL;
    int rc = dlock__client_enter(c, &e);
    if (rc != DLOCK_OK || (rc = dlock__check_name(name, &e)) != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    if (token == NULL || !dlock__token_valid(token))
        return dlock__raise(&e, DLOCK_ERR_INVALID, "token must be %d lowercase hex characters",
                            DLOCK_TOKEN_LEN);
    dlock_lock *l;
    if ((rc = dlock__lock_new(c, name, &l, &e)) != DLOCK_OK)
        return dlock__err_raise(&e, rc);
    memcpy(l->token, token, DLOCK_TOKEN_LEN + 1);
    l->adopted = true;
    dlock__lock_attach(l);
    *out = l;
    return dlock__err_raise(&e, DLOCK_OK);
}

/* ---- accessors -------------------------------------------------------------- */

uint64_t dlock_fence(const dlock_lock *l)
{
    return l != NULL && l->magic == DLOCK_LOCK_MAGIC ? l->fence : 0;
}

int64_t dlock_remaining_ms(const dlock_lock *l)
{
    if (l == NULL || l->magic != DLOCK_LOCK_MAGIC || l->lost || l->valid_until_us == 0)
        return 0;
    return l->client->backend->remaining_ms(l);
}

int64_t dlock__lock_valid_ms(const dlock_lock *l)
{
    int64_t left = l->valid_until_us - dlock__now_us();
    /* Round down: never claim a millisecond that is not all there. */
    return left > 0 ? left / 1000 : left / 1000 - 1;
}

const char *dlock_token(const dlock_lock *l)
{
    return l != NULL && l->magic == DLOCK_LOCK_MAGIC ? l->token : NULL;
}

const char *dlock_lock_name(const dlock_lock *l)
{
    return l != NULL && l->magic == DLOCK_LOCK_MAGIC ? l->name : NULL;
}

int dlock_lost_fd(dlock_lock *l)
{
    dlock__err e;
    int rc = dlock__lock_enter(l, &e);
    if (rc != DLOCK_OK) {
        dlock__err_raise(&e, rc);
        return -1;
    }
    dlock_client *c = l->client;
    /* The renewal thread may find the lock lost at any moment: create the fd and
     * check `lost` under the mutex that dlock__lock_mark_lost takes. */
    pthread_mutex_lock(&c->mu);
    if (l->lost_fd < 0) {
        l->lost_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (l->lost_fd < 0)
            rc = dlock__err_set(&e, DLOCK_ERR_IO, "eventfd: %s", strerror(errno));
        else if (l->lost) {
            uint64_t one = 1;
            ssize_t w = write(l->lost_fd, &one, sizeof one);
            (void)w;
        }
    }
    int fd = l->lost_fd;
    pthread_mutex_unlock(&c->mu);
    dlock__err_raise(&e, rc);
    return rc == DLOCK_OK ? fd : -1;
}
