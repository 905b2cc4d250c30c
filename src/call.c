/*
 * call.c: a call on a client, as the calls of every backend enter and leave it: the
 * client's checks (its magic, a forked child refused), and the count of the calls that
 * can block for long, which dlock_client_free (client.c) ends and waits for.
 */
#include "internal.h"

#include <assert.h>
#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>

bool dlock__client_forked(const dlock_client *c)
{
    return dlock__forked_since(c->fork_gen, c->pid);
}

int dlock__client_enter(dlock_client *c, dlock__err *e)
{
    if (c == NULL)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "client is NULL");
    assert(c->magic == DLOCK_CLIENT_MAGIC);
    if (c->magic != DLOCK_CLIENT_MAGIC)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "not a dlock_client (freed or corrupted?)");
    /* After fork() the child shares the parent's sockets: one byte written by the
     * child would corrupt the parent's stream. The child must make its own client. */
    if (dlock__client_forked(c))
        return dlock__err_set(e, DLOCK_ERR_CLOSED,
                              "client was created by process %ld; create a new client after "
                              "fork()",
                              (long)c->pid);
    return DLOCK_OK;
}

int dlock__client_block_begin(dlock_client *c, dlock__err *e)
{
    pthread_mutex_lock(&c->close_mu);
    int rc = DLOCK_OK;
    if (c->closing)
        rc = dlock__err_set(e, DLOCK_ERR_CLOSED, "the client is being freed");
    else if (c->close_efd < 0 && (c->close_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
        rc = dlock__err_set(e, errno == ENOMEM ? DLOCK_ERR_NOMEM : DLOCK_ERR_IO,
                            "eventfd (to end this call if the client is freed): %s",
                            strerror(errno));
    else
        c->blocking++;
    pthread_mutex_unlock(&c->close_mu);
    return rc;
}

int dlock__client_block_end(dlock_client *c, int rc, dlock_lock **got, dlock__err *e)
{
    pthread_mutex_lock(&c->close_mu);
    bool closing = c->closing;
    if (!closing)
        c->blocking--;
    pthread_mutex_unlock(&c->close_mu);
    if (!closing)
        return rc;
    /* Still counted, so dlock_client_free waits: a lock just got is given back here,
     * as the free would release it, before the caller could ever see its handle. */
    if (rc == DLOCK_OK && got != NULL && *got != NULL) {
        dlock__err ignored;
        dlock__lock_release(*got, &ignored);
        *got = NULL;
        rc = dlock__err_set(e, DLOCK_ERR_CLOSED,
                            "the client was freed (dlock_client_free) during the call");
    }
    pthread_mutex_lock(&c->close_mu);
    if (--c->blocking == 0)
        pthread_cond_broadcast(&c->idle);
    pthread_mutex_unlock(&c->close_mu);
    return rc;
}
