/*
 * pending.c: operations in steps (dlock_pending), for callers that wait without a
 * thread, and the loop that runs them for callers that do.
 *
 * An acquisition (acquire.c) and a stock reservation (stock.c) wait the same way: a
 * step makes the attempts that are due and, when it must wait, says on what (a
 * wake-up descriptor) and until when. A pending is the operation's own struct, which
 * begins with a dlock_pending carrying its step, its clean-up and those two facts.
 * This file holds what is common to both: the public calls, and dlock__pending_run,
 * the sleeping loop that the blocking calls are built on. So a blocking call and an
 * event loop run one code path.
 */
#include "internal.h"

void *dlock__pending_new(size_t size, int (*step)(dlock_pending *, dlock_lock **, dlock__err *),
                         void (*destroy)(dlock_pending *))
{
    dlock_pending *p = dlock__calloc(1, size);
    if (p != NULL) {
        p->step = step;
        p->destroy = destroy;
        p->fd = -1;
    }
    return p;
}

int dlock__pending_again(dlock__err *e)
{
    return dlock__err_set(e, DLOCK_ERR_AGAIN,
                          "waiting: step again when dlock_pending_fd is readable or "
                          "dlock_pending_due_ms has passed");
}

int dlock__pending_run(dlock_pending *p, int cancel_fd, int close_fd, dlock_lock **out,
                       dlock__err *e)
{
    int rc;
    while ((rc = p->step(p, out, e)) == DLOCK_ERR_AGAIN) {
        int src = dlock__sleep_on(p->fd, p->due_us, cancel_fd, close_fd);
        if (src != DLOCK_OK) {
            rc = dlock__sleep_ended(e, src);
            break; /* not finished: freeing it gives up */
        }
    }
    return rc;
}

int dlock_pending_step(dlock_pending *p, dlock_lock **out)
{
    if (out != NULL)
        *out = NULL;
    if (p == NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "pending is NULL");
    if (out == NULL && !p->reservation)
        return dlock__fail(DLOCK_ERR_INVALID, "out is NULL (it receives the lock)");
    if (p->done)
        return dlock__fail(DLOCK_ERR_INVALID,
                           "the operation has finished: only dlock_pending_free is left");
    dlock__err e;
    int rc = p->step(p, out, &e);
    p->done = rc != DLOCK_ERR_AGAIN;
    return dlock__err_raise(&e, rc);
}

int dlock_pending_fd(const dlock_pending *p)
{
    return p != NULL && !p->done ? p->fd : -1;
}

int64_t dlock_pending_due_ms(const dlock_pending *p)
{
    if (p == NULL || p->done)
        return 0;
    int64_t left = p->due_us - dlock__now_us();
    return left <= 0 ? 0 : (left + 999) / 1000; /* rounded up: never early */
}

const char *dlock_pending_id(const dlock_pending *p)
{
    return p != NULL ? p->id : "";
}

void dlock_pending_free(dlock_pending *p)
{
    if (p != NULL)
        p->destroy(p);
}
