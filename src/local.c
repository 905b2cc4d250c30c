/*
 * local.c: local locks, for a client made with file:///DIR: the same calls on one host
 * with no server, for a fleet of cron jobs on one machine, a laptop, or `dlock run`
 * where no Redis exists. Every entry point that acts on locks hands a local client's
 * call to a dlock__local_* function first; the rest of src/ never sees a local client.
 *
 * Three files share local.h. The format on disk and its rules are one concern, which
 * every call follows; taking a name, the one call that waits, is another:
 *   local_file.c     what is on disk: a name's file, its byte locks, the records in it,
 *                    the fence it keeps;
 *   local_acquire.c  taking a name: one try under the guard, and the wait between tries;
 *   local.c          the client (its directory, the boot id), the calls on a held or an
 *                    adopted handle (release, detach, extend, check), and inspect.
 */
#include "local.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the client ------------------------------------------------------------- */

bool dlock__local_url(const char *servers)
{
    for (const char *p = servers;;) {
        while (*p == ' ')
            p++;
        if (strncmp(p, "file:", 5) == 0)
            return true;
        if ((p = strchr(p, ',')) == NULL)
            return false;
        p++;
    }
}

/* The directory of "file:///path" (percent-escapes decoded) into out[outlen]. */
static int parse_file_url(const char *url, char *out, size_t outlen, dlock__err *e)
{
    static const char usage[] = "a local lock directory is file:///absolute/path";
    const char *p = url;
    while (*p == ' ')
        p++;
    size_t len = strlen(p);
    while (len > 0 && p[len - 1] == ' ')
        len--;
    if (strchr(p, ',') != NULL)
        return dlock__err_set(e, DLOCK_ERR_INVALID,
                              "a file:// URL must be the only server of a client (a comma in "
                              "the directory's name is written %%2C)");
    if (len < 7 || strncmp(p, "file://", 7) != 0)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "\"%.*s\": %s", (int)(len > 64 ? 64 : len), p,
                              usage);
    p += 7;
    len -= 7;
    if (len == 0)
        return dlock__err_set(e, DLOCK_ERR_INVALID, "file:// has no directory: %s", usage);
    if (p[0] != '/')
        return dlock__err_set(e, DLOCK_ERR_INVALID,
                              "file://%.*s: a host part or a relative path is not supported (%s, "
                              "on this host)",
                              (int)(len > 64 ? 64 : len), p, usage);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = p[i];
        if (ch == '?' || ch == '#')
            return dlock__err_set(e, DLOCK_ERR_INVALID,
                                  "file:// URL with '%c': write it %%%02X in a directory name", ch,
                                  (unsigned)ch);
        if (ch == '%') {
            int hi = i + 2 < len ? dlock__hexval(p[i + 1]) : -1;
            int lo = hi >= 0 ? dlock__hexval(p[i + 2]) : -1;
            if (lo < 0 || (hi == 0 && lo == 0))
                return dlock__err_set(e, DLOCK_ERR_INVALID,
                                      "file:// URL: bad percent-escape at byte %zu", i + 8);
            ch = (char)(hi * 16 + lo);
            i += 2;
        }
        if (n + 1 >= outlen)
            return dlock__err_set(e, DLOCK_ERR_INVALID, "file:// URL: the path is too long");
        out[n++] = ch;
    }
    out[n] = '\0';
    return DLOCK_OK;
}

/* The kernel's boot id: a detached lock's lease is kept on CLOCK_BOOTTIME, which starts
 * again at each boot, so a record says which boot its time belongs to. Without /proc the
 * id is "-", the same at every boot: a detached record from before a reboot then counts
 * as live until its lease end comes round on the new boot's clock. That errs towards
 * holding a name too long (at most the lease), never towards two holders. */
static void read_boot_id(char out[40])
{
    strcpy(out, "-");
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[64];
    ssize_t r = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (r < 36)
        return;
    memcpy(out, buf, 36);
    out[36] = '\0';
    for (int i = 0; i < 36; i++)
        if (!(out[i] == '-' || dlock__hexval(out[i]) >= 0))
            strcpy(out, "-");
}

int dlock__local_client_new(dlock_client *c, const char *servers, dlock_client **out, dlock__err *e)
{
    char path[PATH_MAX];
    int rc = parse_file_url(servers, path, sizeof path, e);
    struct dlock__local *lc = NULL;
    if (rc == DLOCK_OK && (lc = dlock__calloc(1, sizeof *lc)) == NULL)
        rc = dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    if (rc == DLOCK_OK) {
        lc->dirfd = -1;
        c->local = lc;
        if ((lc->dir = dlock__strdup(path)) == NULL)
            rc = dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    }
    /* Checked now, and nothing created: a directory that cannot hold locks is a mistake
     * in the configuration, better told before a job starts than at its first lock. */
    if (rc == DLOCK_OK && (lc->dirfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
        int err = errno;
        rc = dlock__err_set(e, err == ENOMEM ? DLOCK_ERR_NOMEM : DLOCK_ERR_INVALID,
                            "lock directory %s: %s%s", path, strerror(err),
                            err == ENOENT ? " (dlock does not create it)" : "");
    }
    if (rc == DLOCK_OK && faccessat(AT_FDCWD, path, W_OK | X_OK, AT_EACCESS) != 0)
        rc = dlock__err_set(e, DLOCK_ERR_INVALID,
                            "lock directory %s is not writable by this process (uid %ld): %s", path,
                            (long)geteuid(), strerror(errno));
    if (rc != DLOCK_OK) {
        dlock_client_free(c);
        return rc;
    }
    read_boot_id(lc->boot_id);
    lc->guard_us = c->rules.timeout_us + c->rules.connect_timeout_us;
    *out = c;
    return DLOCK_OK;
}

void dlock__local_client_free(dlock_client *c)
{
    struct dlock__local *lc = c->local;
    if (lc == NULL)
        return;
    if (lc->dirfd >= 0)
        close(lc->dirfd);
    free(lc->dir);
    free(lc);
    c->local = NULL;
}

/* ---- held locks ------------------------------------------------------------- */

/* Let go of what l's descriptor holds and close it, with the guard held: the record is
 * cleared (or left for later, detached) before the locks go, and the locks go before
 * the close that wakes the waiters. */
static void drop_hold(struct dlock__local_hold *h)
{
    if (h->slot >= 0)
        dlock__local_ofd_unlock(h->fd, LK_SLOT0 + h->slot);
    dlock__local_ofd_unlock(h->fd, LK_GATE);
    dlock__local_ofd_unlock(h->fd, LK_GUARD);
    close(h->fd);
    h->fd = -1;
}

static const char not_ours[] =
    "the lock is not held with this token (expired, released or taken by another owner)";

/* The lock file of l's name, opened for a change by token. */
static int open_for_token(dlock_lock *l, char file[FILE_MAX], int *fd, dlock__err *e)
{
    int rc = dlock__local_file_name(l->name, l->name_len, file, e);
    if (rc == DLOCK_OK &&
        (rc = dlock__local_open_file(l->client, file, O_RDWR, fd, e)) == DLOCK_ERR_LOST)
        dlock__err_set(e, rc, "%s", not_ours);
    return rc;
}

enum token_op { OP_CHECK, OP_EXTEND, OP_RELEASE };

/* check, extend or release through a handle that holds nothing here (adopted): find
 * the record with l's token and act on it under the guard. */
static int by_token(dlock_lock *l, enum token_op op, int64_t ttl_ms, dlock__err *e)
{
    dlock_client *c = l->client;
    char file[FILE_MAX];
    int fd;
    int rc = open_for_token(l, file, &fd, e);
    if (rc != DLOCK_OK)
        return rc;
    view v = {0};
    if ((rc = dlock__local_guard_take(c, fd, F_WRLCK, file, e)) != DLOCK_OK) {
        close(fd);
        return rc;
    }
    rc = dlock__local_read_view(c, fd, file, &v, e);
    record *r = NULL;
    int64_t slot = -1;
    if (rc == DLOCK_OK) {
        if (v.excl.state != 0 && strcmp(v.excl.token, l->token) == 0)
            r = &v.excl;
        for (int64_t j = 0; r == NULL && j < v.nslots; j++)
            if (v.shared[j].state != 0 && strcmp(v.shared[j].token, l->token) == 0) {
                r = &v.shared[j];
                slot = j;
            }
        if (r == NULL || !r->live)
            rc = dlock__err_set(e, DLOCK_ERR_LOST, "%s", not_ours);
    }
    int64_t now = dlock__now_us();
    if (rc == DLOCK_OK && r->state == 'A') {
        /* Held by a live process: only that process's descriptor can let go of it. */
        if (op == OP_RELEASE)
            rc = dlock__err_set(e, DLOCK_ERR_INVALID,
                                "%s holds this lock in its own process: a local lock that was "
                                "not detached is released by that process, or when it exits",
                                r->desc);
        else if (op == OP_EXTEND)
            r->ttl_ms = ttl_ms;
        if (rc == DLOCK_OK)
            l->valid_until_us = now + r->ttl_ms * 1000;
    } else if (rc == DLOCK_OK) {
        if (op == OP_RELEASE)
            r->state = 0;
        else if (op == OP_EXTEND) {
            r->expires_us = now + ttl_ms * 1000;
            r->ttl_ms = ttl_ms;
        }
        l->valid_until_us = op == OP_RELEASE ? 0 : r->expires_us;
    }
    if (rc == DLOCK_OK && op != OP_CHECK)
        rc = dlock__local_write_record(c, fd, file, slot, r, e);
    dlock__local_ofd_unlock(fd, LK_GUARD);
    close(fd);
    dlock__local_view_free(&v);
    return rc;
}

int dlock__local_release(dlock_lock *l, dlock__err *e)
{
    struct dlock__local_hold *h = l->local;
    int rc = DLOCK_OK;
    if (h == NULL) {
        rc = by_token(l, OP_RELEASE, 0, e);
    } else if (dlock__client_forked(l->client)) {
        rc = dlock__err_set(e, DLOCK_ERR_CLOSED, "the lock belongs to the parent process");
    } else {
        dlock_client *c = l->client;
        char file[FILE_MAX];
        if ((rc = dlock__local_file_name(l->name, l->name_len, file, e)) == DLOCK_OK &&
            !dlock__local_same_file(c, h->fd, file))
            rc = dlock__err_set(e, DLOCK_ERR_LOST,
                                "%s/%s was removed while held: another process may have taken "
                                "the name since",
                                c->local->dir, file);
        /* Without the guard the record stays, and counts for nothing once the locks are
         * gone: the release itself cannot fail. */
        dlock__err ignored;
        if (rc == DLOCK_OK &&
            dlock__local_guard_take(c, h->fd, F_WRLCK, file, &ignored) == DLOCK_OK) {
            record none = {0};
            dlock__local_write_record(c, h->fd, file, h->slot, &none, &ignored);
        }
        drop_hold(h);
    }
    dlock__lock_free(l);
    return rc;
}

int dlock__local_detach(dlock_lock *l, dlock__err *e)
{
    struct dlock__local_hold *h = l->local;
    dlock_client *c = l->client;
    int rc = DLOCK_OK;
    /* An adopted handle holds nothing; a forked child's copy holds its parent's lock. */
    if (h != NULL && !l->lost && !dlock__client_forked(c)) {
        char file[FILE_MAX];
        rc = dlock__local_file_name(l->name, l->name_len, file, e);
        if (rc == DLOCK_OK &&
            (rc = dlock__local_guard_take(c, h->fd, F_WRLCK, file, e)) == DLOCK_OK) {
            h->rec.state = 'D';
            h->rec.ttl_ms = h->ttl_ms;
            h->rec.expires_us = dlock__now_us() + h->ttl_ms * 1000;
            rc = dlock__local_write_record(c, h->fd, file, h->slot, &h->rec, e);
        }
        if (rc != DLOCK_OK)
            dlock__err_append(e, "the lock could not be recorded as detached, and was released");
        drop_hold(h);
    }
    dlock__lock_free(l);
    return rc;
}

/* A held handle's file is still the directory's: else the lock is lost (someone removed
 * the file, and another process may hold the new one). */
static int still_held(dlock_lock *l, dlock__err *e)
{
    char file[FILE_MAX];
    int rc = dlock__local_file_name(l->name, l->name_len, file, e);
    if (rc == DLOCK_OK && !dlock__local_same_file(l->client, l->local->fd, file)) {
        dlock__lock_mark_lost(l);
        rc = dlock__err_set(e, DLOCK_ERR_LOST,
                            "%s/%s was removed while held: another process may have taken the "
                            "name since",
                            l->client->local->dir, file);
    }
    return rc;
}

int dlock__local_extend(dlock_lock *l, int64_t ttl_ms, dlock__err *e)
{
    struct dlock__local_hold *h = l->local;
    if (h == NULL)
        return by_token(l, OP_EXTEND, ttl_ms, e);
    if (l->lost)
        return dlock__err_set(e, DLOCK_ERR_LOST, "this handle already found the lock lost");
    int rc = still_held(l, e);
    if (rc != DLOCK_OK)
        return rc;
    /* Nothing expires while the descriptor holds the lock: the new lease is what
     * dlock_remaining_ms and `dlock status` report, and what a detach keeps. */
    h->ttl_ms = ttl_ms;
    l->valid_until_us = dlock__now_us() + ttl_ms * 1000;
    h->rec.ttl_ms = ttl_ms;
    char file[FILE_MAX];
    dlock__err ignored;
    if (dlock__local_file_name(l->name, l->name_len, file, &ignored) == DLOCK_OK &&
        dlock__local_guard_take(l->client, h->fd, F_WRLCK, file, &ignored) == DLOCK_OK) {
        dlock__local_write_record(l->client, h->fd, file, h->slot, &h->rec, &ignored);
        dlock__local_ofd_unlock(h->fd, LK_GUARD);
    }
    return DLOCK_OK;
}

int dlock__local_check(dlock_lock *l, dlock__err *e)
{
    if (l->local == NULL)
        return by_token(l, OP_CHECK, 0, e);
    if (l->lost)
        return dlock__err_set(e, DLOCK_ERR_LOST, "this handle already found the lock lost");
    return still_held(l, e);
}

/* The slot of this host's wall clock, and the last claim, in the name's lock file: read
 * and written under the guard by the holder of the gate, so no other claim can come
 * between (slot.c says what a claim is). */
int dlock__local_slot_claim(dlock_lock *l, int64_t period_ms, dlock_slot *out, dlock__err *e)
{
    struct dlock__local_hold *h = l->local;
    if (h == NULL)
        return dlock__err_set(e, DLOCK_ERR_INVALID,
                              "a file:// slot is claimed with the handle that took the lock, "
                              "not an adopted one");
    if (h->slot >= 0)
        return dlock__err_set(e, DLOCK_ERR_INVALID,
                              "a slot is claimed by an exclusive holder, not by a shared holder "
                              "or a semaphore permit");
    if (l->lost)
        return dlock__err_set(e, DLOCK_ERR_LOST, "this handle already found the lock lost");
    char file[FILE_MAX];
    int rc = dlock__local_file_name(l->name, l->name_len, file, e);
    if (rc != DLOCK_OK ||
        (rc = dlock__local_guard_take(l->client, h->fd, F_WRLCK, file, e)) != DLOCK_OK)
        return rc;
    /* Under the guard: a file removed or replaced before it would take the claim to an
     * inode nobody reads. */
    view v;
    if ((rc = still_held(l, e)) == DLOCK_OK &&
        (rc = dlock__local_read_view(l->client, h->fd, file, &v, e)) == DLOCK_OK) {
        int64_t now = dlock__wallclock_us() / 1000;
        out->start_ms = now - now % period_ms;
        out->last_ms = v.slot_ms;
        out->last_at_ms = v.slot_at_ms;
        dlock__copy_text(out->last_by, sizeof out->last_by, v.slot_by, strlen(v.slot_by));
        if (v.slot_ms >= out->start_ms) {
            rc = dlock__slot_refused(out, e);
        } else {
            v.slot_ms = out->start_ms;
            v.slot_at_ms = now;
            dlock__copy_text(v.slot_by, sizeof v.slot_by, l->client->holder,
                             strlen(l->client->holder));
            rc = dlock__local_write_slot(l->client, h->fd, file, &v, e);
        }
        dlock__local_view_free(&v);
    }
    dlock__local_ofd_unlock(h->fd, LK_GUARD);
    return rc;
}

int64_t dlock__local_remaining_ms(const dlock_lock *l)
{
    return l->local->ttl_ms;
}

void dlock__local_hold_free(dlock_lock *l)
{
    if (l->local == NULL)
        return;
    /* In a forked child this closes the child's reference only: the parent's lock
     * stays. */
    if (l->local->fd >= 0)
        close(l->local->fd);
    free(l->local);
    l->local = NULL;
}

/* ---- inspect ---------------------------------------------------------------- */

/* The view of name's file, read under a read guard; a missing file is a name never
 * held (v zeroed). */
static int look(dlock_client *c, const char *name, view *v, dlock__err *e)
{
    char file[FILE_MAX];
    int fd;
    memset(v, 0, sizeof *v);
    int rc = dlock__local_file_name(name, strlen(name), file, e);
    if (rc != DLOCK_OK)
        return rc;
    if ((rc = dlock__local_open_file(c, file, O_RDONLY, &fd, e)) != DLOCK_OK)
        return rc == DLOCK_ERR_LOST ? DLOCK_OK : rc;
    if ((rc = dlock__local_guard_take(c, fd, F_RDLCK, file, e)) == DLOCK_OK) {
        rc = dlock__local_read_view(c, fd, file, v, e);
        dlock__local_ofd_unlock(fd, LK_GUARD);
    }
    close(fd);
    return rc;
}

static void fill_holder(const record *r, int64_t now, dlock_holder *out)
{
    out->held = 1;
    memcpy(out->token, r->token, sizeof out->token);
    dlock__copy_text(out->description, sizeof out->description, r->desc, strlen(r->desc));
    out->remaining_ms = dlock__local_record_left_ms(r, now);
}

int dlock__local_inspect(dlock_client *c, const char *name, dlock_holder *out, dlock__err *e)
{
    view v;
    int rc = look(c, name, &v, e);
    if (rc != DLOCK_OK)
        return rc;
    int64_t now = dlock__now_us();
    out->fence = v.fence;
    if (v.excl.live) {
        fill_holder(&v.excl, now, out);
    } else if (v.nlive > 0) {
        out->held = 1;
        out->shared = v.nlive;
        for (int64_t j = 0; j < v.nslots; j++)
            if (v.shared[j].live &&
                dlock__local_record_left_ms(&v.shared[j], now) > out->remaining_ms)
                out->remaining_ms = dlock__local_record_left_ms(&v.shared[j], now);
    }
    dlock__local_view_free(&v);
    return DLOCK_OK;
}

static int cmp_left_desc(const void *a, const void *b)
{
    int64_t x = ((const dlock_holder *)a)->remaining_ms,
            y = ((const dlock_holder *)b)->remaining_ms;
    return (x < y) - (x > y);
}

int dlock__local_inspect_shared(dlock_client *c, const char *name, dlock_holder *out, int max,
                                int *n, int64_t *total, dlock__err *e)
{
    view v;
    int rc = look(c, name, &v, e);
    if (rc != DLOCK_OK)
        return rc;
    int64_t now = dlock__now_us();
    dlock_holder *all = dlock__calloc((size_t)v.nlive + 1, sizeof *all);
    if (all == NULL) {
        dlock__local_view_free(&v);
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    }
    int64_t k = 0;
    for (int64_t j = 0; j < v.nslots; j++)
        if (v.shared[j].live)
            fill_holder(&v.shared[j], now, &all[k++]);
    qsort(all, (size_t)k, sizeof *all, cmp_left_desc);
    if (max > DLOCK_INSPECT_SHARED_MAX)
        max = DLOCK_INSPECT_SHARED_MAX;
    *n = k < max ? (int)k : max;
    if (*n > 0)
        memcpy(out, all, (size_t)*n * sizeof *all);
    *total = k;
    free(all);
    dlock__local_view_free(&v);
    return DLOCK_OK;
}
