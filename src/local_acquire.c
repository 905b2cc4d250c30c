/*
 * local_acquire.c: dlock__local_acquire, taking a name on a local client (local.c): one
 * try under the guard, and the wait between tries. It is the one local call that waits,
 * and it uses the file only through local_file.c.
 *
 * Waiting: a waiter watches the file with inotify for a descriptor opened for writing
 * being closed. Every holder's descriptor is one, so a release or a holder's death
 * wakes the waiter, which tries again. The kernel reports the close of a dying
 * process's file before it drops that file's locks, so a try that follows a wake-up and
 * fails is repeated after 1, 2, 4 and 8 ms; a detached lock's lease end is a timer;
 * and a retry every second bounds anything missed.
 */
#include "local.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

/* After a wake-up whose try failed: the retries that cover a dying holder's close being
 * seen before its locks are dropped (the first after 1 ms, doubling). */
#define BURST_RETRIES 4
/* The longest a waiter sleeps without trying, in case a wake-up was missed. */
#define SAFETY_RETRY_US 1000000
/* Reopens in a row after which a file that keeps being removed or replaced is an
 * error: a try that meets a new file each time would otherwise never end. */
#define REOPEN_MAX 64

/* ---- acquire ---------------------------------------------------------------- */

/* What one acquisition asks for, the same in every try. */
typedef struct request {
    int64_t limit; /* 0: exclusive; else shared, among at most limit holders */
    char file[FILE_MAX];
} request;

/* The earliest end of a live detached lease among the records that refuse us. */
static void note_until(int64_t *until_us, const record *r)
{
    if (r->state == 'D' && (*until_us == 0 || r->expires_us < *until_us))
        *until_us = r->expires_us;
}

/* Whether the holders in v refuse q (gate: whether we could take the gate): DLOCK_OK,
 * or DLOCK_ERR_BUSY saying who holds the name, with *until_us the end of a detached
 * holder's lease (0: only a live process's release ends it). */
static int refusal(const request *q, const view *v, bool gate, int64_t *until_us, dlock__err *e)
{
    int64_t now = dlock__now_us();
    const record *x = &v->excl;
    if (x->live) {
        note_until(until_us, x);
        if (x->state == 'D')
            return dlock__err_set(e, DLOCK_ERR_BUSY,
                                  "held by %s (detached: its lease has %lld ms left)", x->desc,
                                  (long long)dlock__local_record_left_ms(x, now));
        return dlock__err_set(e, DLOCK_ERR_BUSY, "held by %s", x->desc);
    }
    bool full = q->limit == 0 ? v->nlive > 0 : v->nlive >= q->limit;
    if (full || !gate) {
        for (int64_t j = 0; j < v->nslots; j++)
            if (v->shared[j].live)
                note_until(until_us, &v->shared[j]);
        if (q->limit > 0 && q->limit < DLOCK_PERMITS_MAX)
            return dlock__err_set(e, DLOCK_ERR_BUSY, "all %lld permits are held (%lld holders)",
                                  (long long)q->limit, (long long)v->nlive);
        if (v->nlive > 0)
            return dlock__err_set(e, DLOCK_ERR_BUSY, "held by %lld shared holder(s)",
                                  (long long)v->nlive);
        return dlock__err_set(e, DLOCK_ERR_BUSY, "held by a holder that left no record");
    }
    return DLOCK_OK;
}

/* A slot for a new shared holder: the first whose record is not alive, taken with its
 * write lock (under the guard, so no other call is claiming it). -1 when all are. */
static int64_t claim_slot(int fd, const view *v)
{
    for (int64_t j = 0; j < SLOTS_MAX; j++)
        if ((j >= v->nslots || !v->shared[j].live) &&
            dlock__local_ofd_lock(fd, F_WRLCK, LK_SLOT0 + j) == 0)
            return j;
    return -1;
}

/* The try needs the file opened again: it was removed or replaced since. */
#define TRY_REOPEN (-1)

/* One try under the guard. DLOCK_OK with l holding the name (gate, slot, record, fence),
 * DLOCK_ERR_BUSY with *until_us as refusal() says, TRY_REOPEN, or an error. */
static int try_once(dlock_client *c, dlock_lock *l, request *q, int64_t *until_us, dlock__err *e)
{
    struct dlock__local_hold *h = l->hold;
    int fd = h->fd;
    *until_us = 0;
    int rc = dlock__local_guard_take(c, fd, F_WRLCK, q->file, e);
    if (rc != DLOCK_OK)
        return rc;
    if (!dlock__local_same_file(c, fd, q->file)) {
        dlock__local_ofd_unlock(fd, LK_GUARD);
        return TRY_REOPEN;
    }
    bool gate = dlock__local_ofd_lock(fd, q->limit == 0 ? F_WRLCK : F_RDLCK, LK_GATE) == 0;
    if (!gate && errno != EAGAIN && errno != EACCES)
        rc = dlock__err_set(e, errno == ENOLCK ? DLOCK_ERR_NOMEM : DLOCK_ERR_IO, "%s/%s: lock: %s",
                            c->local->dir, q->file, strerror(errno));
    view v = {0};
    int64_t slot = -1;
    if (rc == DLOCK_OK)
        rc = dlock__local_read_view(c, fd, q->file, &v, e);
    if (rc == DLOCK_OK)
        rc = refusal(q, &v, gate, until_us, e);
    if (rc == DLOCK_OK && q->limit != 0 && (slot = claim_slot(fd, &v)) < 0)
        rc = dlock__err_set(e, DLOCK_ERR_BUSY, "%d shared holders: no slot is free", SLOTS_MAX);
    if (rc == DLOCK_OK &&
        (rc = dlock__local_next_fence(c, fd, q->file, &v, &l->fence, e)) == DLOCK_OK) {
        h->rec.fence = l->fence;
        rc = dlock__local_write_record(c, fd, q->file, slot, &h->rec, e);
    }
    if (rc != DLOCK_OK) {
        if (slot >= 0)
            dlock__local_ofd_unlock(fd, LK_SLOT0 + slot);
        if (gate)
            dlock__local_ofd_unlock(fd, LK_GATE);
    } else {
        h->slot = slot;
    }
    dlock__local_ofd_unlock(fd, LK_GUARD);
    dlock__local_view_free(&v);
    return rc;
}

/* A watch on fd's file: readable when a descriptor of it opened for writing is closed
 * (a holder's release or death, a change by token), or when it is unlinked. -1 when it
 * cannot be had (the per-user inotify limit, no /proc). */
static int watch_file(int fd)
{
    int ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (ifd < 0)
        return -1;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    if (inotify_add_watch(ifd, path, IN_CLOSE_WRITE | IN_ATTRIB) < 0) {
        close(ifd);
        return -1;
    }
    return ifd;
}

/* Sleep until the watch fires (*changed: its events are read), until_us, or as
 * dlock__sleep_on ends early (cancel_fd, close_fd). */
static int sleep_on_watch(int ifd, int cancel_fd, int close_fd, int64_t until_us, bool *changed)
{
    int rc = dlock__sleep_on(ifd, until_us, cancel_fd, close_fd);
    if (rc != DLOCK_OK)
        return rc;
    char events[4096];
    *changed = false;
    while (read(ifd, events, sizeof events) > 0) /* non-blocking: until none is left */
        *changed = true;
    return DLOCK_OK;
}

/* A new handle for name, with its record filled and the name's file open. */
static int new_hold(dlock_client *c, const char *name, const dlock_opts *opts, int64_t ttl_ms,
                    request *q, dlock_lock **out, dlock__err *e)
{
    dlock_lock *l;
    int rc = dlock__lock_new(c, name, &l, e);
    if (rc != DLOCK_OK)
        return rc;
    struct dlock__local_hold *h = dlock__calloc(1, sizeof *h);
    if ((l->hold = h) == NULL) {
        dlock__lock_free(l);
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    }
    h->fd = -1;
    h->slot = -1;
    h->ttl_ms = ttl_ms;
    if ((rc = dlock__token_new(l->token)) != DLOCK_OK)
        dlock__err_set(e, rc, "getrandom: %s", strerror(errno));
    if (rc == DLOCK_OK)
        rc = dlock__local_file_name(name, l->name_len, q->file, e);
    if (rc == DLOCK_OK)
        rc = dlock__local_open_file(c, q->file, O_RDWR | O_CREAT, &h->fd, e);
    if (rc != DLOCK_OK) {
        dlock__lock_free(l);
        return rc;
    }
    record *r = &h->rec;
    r->state = 'A';
    memcpy(r->token, l->token, sizeof r->token);
    r->ttl_ms = ttl_ms;
    snprintf(r->boot, sizeof r->boot, "%s", c->local->boot_id);
    const char *label = opts != NULL && opts->label != NULL ? opts->label : "";
    bool own = label[0] != '\0' && opts->label_is_holder;
    snprintf(r->desc, sizeof r->desc, "%s%s%s", own ? "" : c->holder, label[0] && !own ? " " : "",
             label);
    *out = l;
    return DLOCK_OK;
}

int dlock__local_acquire(dlock_client *c, const char *name, const dlock_opts *opts, int64_t ttl_ms,
                         int64_t wait_ms, int64_t limit, dlock_lock **out, dlock__err *e)
{
    request q;
    memset(&q, 0, sizeof q);
    q.limit = limit;
    dlock_lock *l = NULL;
    int rc = new_hold(c, name, opts, ttl_ms, &q, &l, e);
    if (rc != DLOCK_OK)
        return rc;
    struct dlock__local_hold *h = l->hold;
    int cancel_fd = opts != NULL ? opts->cancel_fd : 0;
    int64_t start = dlock__now_us();
    /* A wait longer than a century is a wait forever (and must not overflow). */
    int64_t deadline =
        wait_ms < 0 || wait_ms > INT64_C(3153600000000) ? INT64_MAX : start + wait_ms * 1000;
    int ifd = -1, burst = 0, reopens = 0;
    bool unwatchable = false;
    for (int n = 0;; n++) {
        int64_t until = 0;
        rc = try_once(c, l, &q, &until, e);
        if (rc == TRY_REOPEN && ++reopens > REOPEN_MAX) {
            rc = dlock__err_set(e, DLOCK_ERR_IO,
                                "%s was removed or replaced %d times in a row while we "
                                "tried to lock it",
                                q.file, REOPEN_MAX);
            break;
        }
        if (rc == TRY_REOPEN) {
            /* The file was removed or replaced: take the one the directory has now, and
             * watch it instead. */
            close(h->fd);
            h->fd = -1;
            if (ifd >= 0)
                close(ifd);
            ifd = -1;
            if ((rc = dlock__local_open_file(c, q.file, O_RDWR | O_CREAT, &h->fd, e)) != DLOCK_OK)
                break;
            continue;
        }
        reopens = 0;
        int64_t now = dlock__now_us();
        if (rc != DLOCK_ERR_BUSY || now >= deadline)
            break;
        if (ifd < 0 && !unwatchable) {
            /* Watch first, then try again at once: a release between the try and the
             * watch would otherwise pass unseen. */
            ifd = watch_file(h->fd);
            unwatchable = ifd < 0;
            continue;
        }
        int src;
        if (unwatchable) {
            src = dlock__backoff(n, until > now ? (until - now) / 1000 : 0, deadline, cancel_fd,
                                 c->close_efd);
        } else {
            int64_t at = now + SAFETY_RETRY_US;
            if (until > 0 && until < at)
                at = until;
            if (burst > 0 && now + (INT64_C(1000) << (BURST_RETRIES - burst)) < at)
                at = now + (INT64_C(1000) << (BURST_RETRIES - burst));
            burst = burst > 0 ? burst - 1 : 0;
            bool changed = false;
            src = sleep_on_watch(ifd, cancel_fd, c->close_efd, at < deadline ? at : deadline,
                                 &changed);
            if (changed)
                burst = BURST_RETRIES;
        }
        if (src != DLOCK_OK) {
            rc = dlock__sleep_ended(e, src);
            break;
        }
    }
    if (ifd >= 0)
        close(ifd);
    if (rc != DLOCK_OK) {
        dlock__lock_free(l);
        return rc;
    }
    l->valid_until_us = dlock__now_us() + ttl_ms * 1000;
    dlock__lock_attach(l);
    *out = l;
    return DLOCK_OK;
}
