/*
 * local_file.c: what a local lock is on disk (local.c says what local locks are for):
 * a name's lock file, the byte locks on it, the records in it, and the fence counter it
 * keeps. Every local call reads and changes a name's state through these alone, so the
 * format and its rules (the guard, which records are alive) are read in one place.
 *
 * One file per name in DIR, "<encoded name>.lock" (dlock__local_file_name). Its locks are
 * Linux open-file-description locks (fcntl F_OFD_SETLK). Like flock(2), they belong to
 * an open file description: every handle opens the file itself, so threads of one
 * process exclude each other, and the kernel drops them when the last descriptor of
 * that description closes, so a holder that dies, even by SIGKILL, frees the name at
 * once. Unlike flock they cover byte ranges, which gives one file several locks, and
 * F_OFD_GETLK tests a lock without taking it, so that looking at a name (dlock status)
 * never makes a try fail:
 *
 *   byte 0      the gate: the exclusive holder's write lock, or the read locks of the
 *               shared holders (a semaphore's permits are shared holders);
 *   byte 1      the guard: held while a call reads and changes the file's content, a
 *               few microseconds, so that each decision is made on a stable state;
 *   byte 2 + j  shared holder j's slot: its write lock says holder j is alive.
 *
 * The gate is only ever taken under the guard, so a gate that a call holding the
 * guard finds taken belongs to a holder, never to another call in the middle of a try.
 *
 * The content (text, for a person with cat) says who holds the name, and the name's
 * fence counter:
 *
 *   [0, 1024)               "dlock-local 1\nfence N\n", then after a scheduled job's
 *                           claim "slot S AT BY\n" (its slot and when, in Unix ms,
 *                           and who), padded;
 *   [1024, 2048)            the exclusive holder's record;
 *   [2048 + 1024 j, ...)    shared holder j's record.
 *
 * A record is "A" (attached: the holder's process keeps it, and it is alive exactly as
 * long as its lock, the gate's write lock or its slot, is held) or "D" (detached: no
 * process holds it, and it lasts until its lease, kept on CLOCK_BOOTTIME with the
 * kernel's boot id, runs out or a release by token clears it). A record whose lock is
 * not held is what a dead holder left: it counts for nothing and is written over.
 */
#include "local.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HDR_SIZE     1024
#define REC_SIZE     1024
#define REC_AT(slot) ((off_t)HDR_SIZE + (off_t)REC_SIZE * ((slot) + 1)) /* slot -1: exclusive */

/* A file name is the encoded name and ".lock"; an encoding longer than ENC_MAX keeps its
 * first ENC_KEEP bytes and adds "~" and the SHA-256 of the name. */
#define ENC_MAX  180
#define ENC_KEEP 120
_Static_assert(ENC_MAX + 6 <= FILE_MAX && ENC_KEEP + 1 + 64 + 6 <= FILE_MAX && FILE_MAX < NAME_MAX,
               "a lock file name must fit FILE_MAX and NAME_MAX");

/* ---- names and files -------------------------------------------------------- */

/* Bytes a file name keeps as they are: never '.', '/', '%' or '~', so that no name is
 * "." or "..", holds a path, or looks like another name's encoding. */
static bool plain_byte(unsigned char b)
{
    return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || b == '_' ||
           b == '-';
}

int dlock__local_file_name(const char *name, size_t len, char out[FILE_MAX], dlock__err *e)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0, keep = 0;
    bool hashed = false;
    for (size_t i = 0; i < len && !hashed; i++) {
        unsigned char b = (unsigned char)name[i];
        size_t w = plain_byte(b) ? 1 : 3;
        if (n + w > ENC_MAX) {
            hashed = true;
            break;
        }
        if (n + w <= ENC_KEEP)
            keep = n + w;
        if (w == 1) {
            out[n++] = (char)b;
        } else {
            out[n++] = '%';
            out[n++] = hex[b >> 4];
            out[n++] = hex[b & 15];
        }
    }
    if (hashed) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned mdlen = 0;
        if (!EVP_Digest(name, len, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
            return dlock__err_set(e, DLOCK_ERR_NOMEM, "SHA-256 of a long name failed (OpenSSL)");
        n = keep;
        out[n++] = '~';
        for (unsigned i = 0; i < mdlen; i++) {
            out[n++] = "0123456789abcdef"[md[i] >> 4];
            out[n++] = "0123456789abcdef"[md[i] & 15];
        }
    }
    memcpy(out + n, ".lock", 6);
    return DLOCK_OK;
}

int dlock__local_open_file(dlock_client *c, const char *file, int mode, int *fd, dlock__err *e)
{
    struct dlock__local *lc = c->local;
    bool create = (mode & O_CREAT) != 0;
    int flags = mode | O_CLOEXEC | O_NOFOLLOW;
    for (;;) {
        *fd = openat(lc->dirfd, file, flags, 0666);
        if (*fd >= 0)
            break;
        if (errno == EINTR)
            continue;
        int err = errno;
        if (err == ENOENT && !create)
            return DLOCK_ERR_LOST;
        return dlock__err_set(e, err == ENOMEM || err == EMFILE ? DLOCK_ERR_NOMEM : DLOCK_ERR_IO,
                              "%s/%s: %s", lc->dir, file, strerror(err));
    }
    struct stat st;
    if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(*fd);
        *fd = -1;
        return dlock__err_set(e, DLOCK_ERR_IO, "%s/%s is not a regular file", lc->dir, file);
    }
    return DLOCK_OK;
}

bool dlock__local_same_file(dlock_client *c, int fd, const char *file)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && a.st_nlink > 0 &&
           fstatat(c->local->dirfd, file, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* ---- byte locks ------------------------------------------------------------- */

int dlock__local_ofd_lock(int fd, short type, off_t at)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = at, .l_len = 1};
    while (fcntl(fd, F_OFD_SETLK, &fl) != 0) {
        if (errno != EINTR)
            return -1;
    }
    return 0;
}

void dlock__local_ofd_unlock(int fd, off_t at)
{
    dlock__local_ofd_lock(fd, F_UNLCK, at);
}

/* The lock another description holds on byte `at` that a write lock would meet:
 * F_UNLCK, F_RDLCK or F_WRLCK (F_UNLCK when the test itself fails). */
static short ofd_test(int fd, off_t at)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = at, .l_len = 1};
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
        return F_UNLCK;
    return fl.l_type;
}

int dlock__local_guard_take(dlock_client *c, int fd, short type, const char *file, dlock__err *e)
{
    int64_t give_up = dlock__now_us() + c->local->guard_us, pause_us = 20;
    while (dlock__local_ofd_lock(fd, type, LK_GUARD) != 0) {
        if (errno != EAGAIN && errno != EACCES)
            return dlock__err_set(e, errno == ENOLCK ? DLOCK_ERR_NOMEM : DLOCK_ERR_IO,
                                  "%s/%s: lock: %s", c->local->dir, file, strerror(errno));
        if (dlock__now_us() >= give_up)
            return dlock__err_set(e, DLOCK_ERR_TIMEOUT,
                                  "%s/%s: another process has been changing the lock file for "
                                  "%lld ms (stopped while it did?)",
                                  c->local->dir, file, (long long)(c->local->guard_us / 1000));
        struct timespec ts = {0, (long)pause_us * 1000};
        nanosleep(&ts, NULL);
        pause_us = pause_us * 2 > 1000 ? 1000 : pause_us * 2;
    }
    return DLOCK_OK;
}

/* ---- the content ------------------------------------------------------------ */

void dlock__local_view_free(view *v)
{
    free(v->shared);
    v->shared = NULL;
}

static void parse_record(const char *buf, record *r)
{
    memset(r, 0, sizeof *r);
    if (buf[0] != 'A' && buf[0] != 'D')
        return;
    char text[REC_SIZE + 1];
    memcpy(text, buf, REC_SIZE);
    text[REC_SIZE] = '\0';
    char state;
    unsigned long long fence;
    long long ttl, expires;
    size_t dlen;
    int at = -1;
    if (sscanf(text, "%c %32s %llu %lld %lld %39s %zu:%n", &state, r->token, &fence, &ttl, &expires,
               r->boot, &dlen, &at) != 7 ||
        at < 0 || dlen > DESC_MAX || (size_t)at + dlen > REC_SIZE ||
        !dlock__token_valid(r->token)) {
        memset(r, 0, sizeof *r);
        return;
    }
    r->state = state;
    r->fence = fence;
    r->ttl_ms = ttl;
    r->expires_us = expires;
    memcpy(r->desc, text + at, dlen);
    r->desc[dlen] = '\0';
}

static void format_record(const record *r, char buf[REC_SIZE])
{
    memset(buf, ' ', REC_SIZE);
    if (r->state != 0) {
        size_t dlen = strlen(r->desc);
        int n = snprintf(buf, REC_SIZE, "%c %s %llu %lld %lld %s %zu:", r->state, r->token,
                         (unsigned long long)r->fence, (long long)r->ttl_ms,
                         (long long)r->expires_us, r->boot, dlen);
        memcpy(buf + n, r->desc, dlen);
        buf[n + (int)dlen] = ' ';
    } else {
        buf[0] = '-';
    }
    buf[REC_SIZE - 1] = '\n';
}

static int write_at(dlock_client *c, int fd, const char *file, const void *buf, size_t len,
                    off_t at, dlock__err *e)
{
    ssize_t w;
    while ((w = pwrite(fd, buf, len, at)) < 0 && errno == EINTR)
        ;
    if (w == (ssize_t)len)
        return DLOCK_OK;
    return dlock__err_set(e, DLOCK_ERR_IO, "%s/%s: write: %s", c->local->dir, file,
                          w < 0 ? strerror(errno) : "short write");
}

int dlock__local_write_record(dlock_client *c, int fd, const char *file, int64_t slot,
                              const record *r, dlock__err *e)
{
    char buf[REC_SIZE];
    format_record(r, buf);
    return write_at(c, fd, file, buf, sizeof buf, REC_AT(slot), e);
}

/* The header's slot line, if any, into v (else slot_ms and slot_at_ms are -1). */
static void parse_slot(const char *hdr, view *v)
{
    v->slot_ms = v->slot_at_ms = -1;
    v->slot_by[0] = '\0';
    const char *p = strstr(hdr, "\nslot ");
    long long slot, at;
    int used = 0;
    if (p == NULL || sscanf(p, "\nslot %lld %lld %n", &slot, &at, &used) != 2 || used == 0)
        return;
    v->slot_ms = slot;
    v->slot_at_ms = at;
    size_t n = strcspn(p + used, "\n");
    n = n < DESC_MAX ? n : DESC_MAX;
    memcpy(v->slot_by, p + used, n);
    v->slot_by[n] = '\0';
}

/* Write the header: v's fence and slot claim (the slot's holder text with its line
 * breaks made spaces, so that it stays one line), padded to HDR_SIZE. */
static int write_header(dlock_client *c, int fd, const char *file, const view *v, uint64_t fence,
                        dlock__err *e)
{
    char hdr[HDR_SIZE];
    memset(hdr, ' ', sizeof hdr);
    int n = snprintf(hdr, sizeof hdr, "dlock-local 1\nfence %llu\n", (unsigned long long)fence);
    if (v->slot_ms >= 0) {
        char by[DESC_MAX + 1];
        snprintf(by, sizeof by, "%s", v->slot_by);
        for (char *q = by; *q != '\0'; q++)
            if (*q == '\n' || *q == '\r')
                *q = ' ';
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, "slot %lld %lld %s\n", (long long)v->slot_ms,
                      (long long)v->slot_at_ms, by);
    }
    hdr[n] = ' ';
    hdr[HDR_SIZE - 1] = '\n';
    return write_at(c, fd, file, hdr, sizeof hdr, 0, e);
}

int dlock__local_write_slot(dlock_client *c, int fd, const char *file, const view *v, dlock__err *e)
{
    int rc = write_header(c, fd, file, v, v->fence, e);
    if (rc == DLOCK_OK && fdatasync(fd) != 0)
        rc = dlock__err_set(e, DLOCK_ERR_IO, "%s/%s: fdatasync: %s", c->local->dir, file,
                            strerror(errno));
    return rc;
}

/* True while a detached record's lease runs: on this boot, and not past its end. */
static bool detached_live(dlock_client *c, const record *r, int64_t now)
{
    return strcmp(r->boot, c->local->boot_id) == 0 && r->expires_us > now;
}

int dlock__local_read_view(dlock_client *c, int fd, const char *file, view *v, dlock__err *e)
{
    memset(v, 0, sizeof *v);
    struct stat st;
    if (fstat(fd, &st) != 0)
        return dlock__err_set(e, DLOCK_ERR_IO, "%s/%s: %s", c->local->dir, file, strerror(errno));
    int64_t nslots =
        st.st_size > REC_AT(0) ? (st.st_size - REC_AT(0) + REC_SIZE - 1) / REC_SIZE : 0;
    if (nslots > SLOTS_MAX)
        nslots = SLOTS_MAX;
    size_t size = (size_t)REC_AT(nslots);
    char *buf = dlock__calloc(1, size);
    if (buf == NULL ||
        (nslots > 0 && (v->shared = dlock__calloc((size_t)nslots, sizeof *v->shared)) == NULL)) {
        free(buf);
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = pread(fd, buf + got, size - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int err = errno;
            free(buf);
            dlock__local_view_free(v);
            return dlock__err_set(e, DLOCK_ERR_IO, "%s/%s: read: %s", c->local->dir, file,
                                  strerror(err));
        }
        if (r == 0)
            break; /* the rest reads as zeros: no record */
        got += (size_t)r;
    }
    char hdr[HDR_SIZE + 1];
    memcpy(hdr, buf, HDR_SIZE);
    hdr[HDR_SIZE] = '\0';
    unsigned long long fence = 0;
    /* A header that does not parse (a new file; one torn by a power loss) reads as
     * fence 0: the clock floor below keeps fences increasing. */
    if (sscanf(hdr, "dlock-local 1 fence %llu", &fence) == 1)
        v->fence = fence;
    parse_slot(hdr, v);
    int64_t now = dlock__now_us();
    parse_record(buf + REC_AT(-1), &v->excl);
    if (v->excl.state == 'A')
        v->excl.live = ofd_test(fd, LK_GATE) == F_WRLCK;
    else if (v->excl.state == 'D')
        v->excl.live = detached_live(c, &v->excl, now);
    for (int64_t j = 0; j < nslots; j++) {
        record *r = &v->shared[j];
        parse_record(buf + REC_AT(j), r);
        if (r->state == 'A')
            r->live = ofd_test(fd, LK_SLOT0 + j) != F_UNLCK;
        else if (r->state == 'D')
            r->live = detached_live(c, r, now);
        v->nlive += r->live;
    }
    v->nslots = nslots;
    free(buf);
    return DLOCK_OK;
}

int64_t dlock__local_record_left_ms(const record *r, int64_t now)
{
    if (r->state == 'D')
        return (r->expires_us - now) / 1000;
    return r->ttl_ms;
}

int dlock__local_next_fence(dlock_client *c, int fd, const char *file, view *v, uint64_t *out,
                            dlock__err *e)
{
    int64_t wall = dlock__wallclock_us();
    uint64_t f = v->fence + 1;
    if (wall > 0 && (uint64_t)wall > f)
        f = (uint64_t)wall;
    int rc = write_header(c, fd, file, v, f, e);
    bool ahead = wall <= 0 || f > (uint64_t)wall;
    if (rc == DLOCK_OK && ahead && fdatasync(fd) != 0)
        rc = dlock__err_set(e, DLOCK_ERR_IO, "%s/%s: fdatasync: %s", c->local->dir, file,
                            strerror(errno));
    if (rc == DLOCK_OK) {
        v->fence = f;
        *out = f;
    }
    return rc;
}
