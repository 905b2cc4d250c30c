/*
 * local.c: local locks, for a client made with file:///DIR: the same calls on one host
 * with no server, for a fleet of cron jobs on one machine, a laptop, or `dlock run`
 * where no Redis exists. Its client's table (dlock__backend_file, at the end) is
 * what every public call that acts on locks hands its work to; the rest of src/ never
 * sees a local client.
 *
 * Four files share local.h. The format on disk and its rules are one concern, which
 * every call follows; taking a name, the one call that waits, is another:
 *   local_file.c     what is on disk: a name's file, its byte locks, the records in it,
 *                    the fence it keeps;
 *   local_acquire.c  taking a name: one try under the guard, and the wait between tries;
 *   local.c          the client (its directory, the boot id), the calls on a held or an
 *                    adopted handle (release, detach, extend, check), the table;
 *   local_list.c     what the directory holds: dlock_list, inspect.
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

int dlock__local_client_new(dlock_client *c, const char *servers, dlock__err *e)
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
    if (rc != DLOCK_OK)
        return rc;
    read_boot_id(lc->boot_id);
    lc->guard_us = c->rules.timeout_us + c->rules.connect_timeout_us;
    return DLOCK_OK;
}

static void local_client_free(dlock_client *c)
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

static int local_release(dlock_lock *l, dlock__err *e)
{
    struct dlock__local_hold *h = l->hold;
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

static int local_detach(dlock_lock *l, dlock__err *e)
{
    struct dlock__local_hold *h = l->hold;
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
    const struct dlock__local_hold *h = l->hold;
    int rc = dlock__local_file_name(l->name, l->name_len, file, e);
    if (rc == DLOCK_OK && !dlock__local_same_file(l->client, h->fd, file)) {
        dlock__lock_mark_lost(l);
        rc = dlock__err_set(e, DLOCK_ERR_LOST,
                            "%s/%s was removed while held: another process may have taken the "
                            "name since",
                            l->client->local->dir, file);
    }
    return rc;
}

static int local_extend(dlock_lock *l, int64_t ttl_ms, dlock__err *e)
{
    struct dlock__local_hold *h = l->hold;
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

static int local_check(dlock_lock *l, dlock__err *e)
{
    if (l->hold == NULL)
        return by_token(l, OP_CHECK, 0, e);
    if (l->lost)
        return dlock__err_set(e, DLOCK_ERR_LOST, "this handle already found the lock lost");
    return still_held(l, e);
}

/* The slot of this host's wall clock, and the last claim, in the name's lock file: read
 * and written under the guard by the holder of the gate, so no other claim can come
 * between (slot.c says what a claim is). */
static int local_slot_claim(dlock_lock *l, int64_t period_ms, dlock_slot *out, dlock__err *e)
{
    struct dlock__local_hold *h = l->hold;
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

/* A held handle's lease is the one asked for, since nothing expires while the
 * descriptor holds the lock; an adopted one's (by_token set it) runs on the clock. */
static int64_t local_remaining_ms(const dlock_lock *l)
{
    const struct dlock__local_hold *h = l->hold;
    return h != NULL ? h->ttl_ms : dlock__lock_valid_ms(l);
}

static void local_hold_free(dlock_lock *l)
{
    struct dlock__local_hold *h = l->hold;
    /* In a forked child this closes the child's reference only: the parent's lock
     * stays. */
    if (h->fd >= 0)
        close(h->fd);
    free(h);
    l->hold = NULL;
}

/* ---- the backend ------------------------------------------------------------ */

/* What a file:// client refuses: the calls in steps, since a file's wait is on the
 * calling thread, and the calls that only servers can answer. Each says why, and what
 * the caller may do instead. */

static int local_acquire_start(dlock_client *c, const char *name, const dlock_opts *opts,
                               int64_t ttl_ms, int64_t wait_ms, int64_t limit, dlock_pending **out,
                               dlock__err *e)
{
    (void)c, (void)name, (void)opts, (void)ttl_ms, (void)wait_ms, (void)limit, (void)out;
    return dlock__err_set(e, DLOCK_ERR_INVALID,
                          "a file:// client waits on its calling thread: use dlock_acquire");
}

/* The handle is the operation's: a refused start frees it, as a failed one does. */
static int local_release_start(dlock_lock *l, dlock_pending **out, dlock__err *e)
{
    (void)out;
    dlock__lock_free(l);
    return dlock__err_set(e, DLOCK_ERR_INVALID,
                          "a file:// client releases on its calling thread: use dlock_release");
}

static int local_extend_start(dlock_lock *l, int64_t ttl_ms, dlock_pending **out, dlock__err *e)
{
    (void)l, (void)ttl_ms, (void)out;
    return dlock__err_set(e, DLOCK_ERR_INVALID,
                          "a file:// client extends on its calling thread: use dlock_extend");
}

static int local_check_start(dlock_lock *l, dlock_pending **out, dlock__err *e)
{
    (void)l, (void)out;
    return dlock__err_set(e, DLOCK_ERR_INVALID,
                          "a file:// client checks on its calling thread: use dlock_check");
}

static int local_inspect_start(dlock_client *c, const char *name, dlock_holder *holder,
                               dlock_holder *shared, int max, int *n, dlock_pending **out,
                               dlock__err *e)
{
    (void)c, (void)name, (void)holder, (void)shared, (void)max, (void)n, (void)out;
    return dlock__err_set(e, DLOCK_ERR_INVALID,
                          "a file:// client inspects on its calling thread: use dlock_inspect");
}

/* The calls a file:// client refuses as a whole, and why: each needs a server's clock,
 * its scripts or its channels (a count that a crashed buyer's lease returns needs a
 * clock and scripts only a server runs). */
static int local_gate(dlock_client *c, enum dlock__gate g, dlock__err *e)
{
    static const char *const why[] = {
        [DLOCK_GATE_FENCED_SET] = ("dlock_fenced_set needs a Redis server: a file:// client keeps "
                                   "no register (check fences in the resource with "
                                   "dlock_fence_admit)"),
        [DLOCK_GATE_PROBE] = "a file:// client has no server to ask",
        [DLOCK_GATE_STOCK] = "the stock needs a Redis server: a file:// client has none",
        [DLOCK_GATE_ELECT] = "leader election needs Redis servers, not a file:// directory",
        [DLOCK_GATE_BREAK] = ("a file:// lock cannot be broken from another process: its holder "
                              "keeps it until it exits (the kernel then frees it)"),
    };
    (void)c;
    if (g == DLOCK_GATE_BREAK_LAST)
        return DLOCK_ERR_AGAIN; /* a file:// lock is never broken, so has no record */
    return dlock__err_set(e, DLOCK_ERR_INVALID, "%s", why[g]);
}

static const char *local_where(const dlock_client *c, int node)
{
    (void)c, (void)node;
    return "the lock directory";
}

static int local_nservers(const dlock_client *c)
{
    (void)c;
    return 1; /* its directory */
}

const dlock__backend dlock__backend_file = {
    .acquire = dlock__local_acquire,
    .acquire_start = local_acquire_start,
    .release = local_release,
    .release_start = local_release_start,
    .detach = local_detach,
    .extend = local_extend,
    .extend_start = local_extend_start,
    .check_start = local_check_start,
    .check = local_check,
    .slot_claim = local_slot_claim,
    .remaining_ms = local_remaining_ms,
    .hold_free = local_hold_free,
    .inspect = dlock__local_inspect,
    .inspect_shared = dlock__local_inspect_shared,
    .inspect_start = local_inspect_start,
    .list = dlock__local_list,
    .where = local_where,
    .nservers = local_nservers,
    .client_free = local_client_free,
    .gate = local_gate,
};
