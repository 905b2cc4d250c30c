/*
 * local.c: local locks, for a client made with file:///DIR: the same calls on one host
 * with no server, for a fleet of cron jobs on one machine, a laptop, or `dlock run`
 * where no Redis exists. Every entry point that acts on locks hands a local client's
 * call to this file first; the rest of src/ never sees a local client.
 *
 * One file per name in DIR, "<encoded name>.lock" (lock_file_name). Its locks are
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
 *   [0, 1024)               "dlock-local 1\nfence N\n", padded;
 *   [1024, 2048)            the exclusive holder's record;
 *   [2048 + 1024 j, ...)    shared holder j's record.
 *
 * A record is "A" (attached: the holder's process keeps it, and it is alive exactly as
 * long as its lock, the gate's write lock or its slot, is held) or "D" (detached: no
 * process holds it, and it lasts until its lease, kept on CLOCK_BOOTTIME with the
 * kernel's boot id, runs out or a release by token clears it). A record whose lock is
 * not held is what a dead holder left: it counts for nothing and is written over.
 *
 * Waiting: a waiter watches the file with inotify for a descriptor opened for writing
 * being closed. Every holder's descriptor is one, so a release or a holder's death
 * wakes the waiter, which tries again. The kernel reports the close of a dying
 * process's file before it drops that file's locks, so a try that follows a wake-up and
 * fails is repeated after 1, 2, 4 and 8 ms; a detached lock's lease end is a timer;
 * and a retry every second bounds anything missed.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/evp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define LK_GATE  0
#define LK_GUARD 1
#define LK_SLOT0 2

#define HDR_SIZE     1024
#define REC_SIZE     1024
#define REC_AT(slot) ((off_t)HDR_SIZE + (off_t)REC_SIZE * ((slot) + 1)) /* slot -1: exclusive */
#define SLOTS_MAX    65536 /* shared holders of one name at once (a 64 MiB file) */
#define DESC_MAX     600   /* "host:pid label" in a record */

/* A file name is the encoded name and ".lock"; an encoding longer than ENC_MAX keeps its
 * first ENC_KEEP bytes and adds "~" and the SHA-256 of the name. */
#define ENC_MAX  180
#define ENC_KEEP 120
#define FILE_MAX 192 /* either form, ".lock" and the NUL */
_Static_assert(ENC_MAX + 6 <= FILE_MAX && ENC_KEEP + 1 + 64 + 6 <= FILE_MAX && FILE_MAX < NAME_MAX,
               "a lock file name must fit FILE_MAX and NAME_MAX");

/* After a wake-up whose try failed: the retries that cover a dying holder's close being
 * seen before its locks are dropped (the first after 1 ms, doubling). */
#define BURST_RETRIES 4
/* The longest a waiter sleeps without trying, in case a wake-up was missed. */
#define SAFETY_RETRY_US 1000000

struct dlock__local {
    char *dir;        /* the directory, as a path, for messages */
    int dirfd;        /* the directory itself: names are opened relative to it */
    char boot_id[40]; /* the kernel's boot id ("-" if unknown): detached leases end */
    int64_t guard_us; /* the longest a call waits for another process's guard */
};

/* A holder's record in the file: who holds the name, until when. */
typedef struct record {
    char state; /* 'A' attached, 'D' detached, 0 none */
    char token[DLOCK_TOKEN_LEN + 1];
    uint64_t fence;
    int64_t ttl_ms;
    int64_t expires_us; /* D: CLOCK_BOOTTIME of boot `boot` */
    char boot[40];
    char desc[DESC_MAX + 1];
    bool live; /* set by read_view */
} record;

struct dlock__local_hold {
    int fd;         /* the handle's own open file description */
    int64_t slot;   /* -1: exclusive; else the shared holder's slot */
    int64_t ttl_ms; /* the lease asked for (acquire or the last extend) */
    record rec;     /* what the file says of it */
};

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

static int hex_digit(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
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
            int hi = i + 2 < len ? hex_digit(p[i + 1]) : -1;
            int lo = hi >= 0 ? hex_digit(p[i + 2]) : -1;
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
 * again at each boot, so a record says which boot its time belongs to. */
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
        if (!(out[i] == '-' || hex_digit(out[i]) >= 0))
            strcpy(out, "-");
}

int dlock__local_client_new(dlock_client *c, const char *servers, dlock_client **out)
{
    dlock__err e;
    char path[PATH_MAX];
    int rc = parse_file_url(servers, path, sizeof path, &e);
    struct dlock__local *lc = NULL;
    if (rc == DLOCK_OK && (lc = dlock__calloc(1, sizeof *lc)) == NULL)
        rc = dlock__err_set(&e, DLOCK_ERR_NOMEM, "out of memory");
    if (rc == DLOCK_OK) {
        lc->dirfd = -1;
        c->local = lc;
        if ((lc->dir = dlock__strdup(path)) == NULL)
            rc = dlock__err_set(&e, DLOCK_ERR_NOMEM, "out of memory");
    }
    /* Checked now, and nothing created: a directory that cannot hold locks is a mistake
     * in the configuration, better told before a job starts than at its first lock. */
    if (rc == DLOCK_OK && (lc->dirfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
        int err = errno;
        rc = dlock__err_set(&e, err == ENOMEM ? DLOCK_ERR_NOMEM : DLOCK_ERR_INVALID,
                            "lock directory %s: %s%s", path, strerror(err),
                            err == ENOENT ? " (dlock does not create it)" : "");
    }
    if (rc == DLOCK_OK && faccessat(AT_FDCWD, path, W_OK | X_OK, AT_EACCESS) != 0)
        rc = dlock__err_set(&e, DLOCK_ERR_INVALID,
                            "lock directory %s is not writable by this process (uid %ld): %s", path,
                            (long)geteuid(), strerror(errno));
    if (rc != DLOCK_OK) {
        dlock_client_free(c);
        return dlock__err_raise(&e, rc);
    }
    read_boot_id(lc->boot_id);
    lc->guard_us = c->rules.timeout_us + c->rules.connect_timeout_us;
    *out = c;
    return dlock__err_raise(&e, DLOCK_OK);
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

/* ---- names and files -------------------------------------------------------- */

/* Bytes a file name keeps as they are: never '.', '/', '%' or '~', so that no name is
 * "." or "..", holds a path, or looks like another name's encoding. */
static bool plain_byte(unsigned char b)
{
    return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || b == '_' ||
           b == '-';
}

/* "<encoded name>.lock": every byte but [A-Za-z0-9_-] as %XX. A name whose encoding is
 * longer than ENC_MAX keeps ENC_KEEP bytes of it (whole escapes), then "~" and the
 * SHA-256 of the whole name: '~' appears in no encoding, so a long name's file cannot
 * be a short name's, and two long names share a file only if their hashes collide. */
static int lock_file_name(const char *name, size_t len, char out[FILE_MAX], dlock__err *e)
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

/* Open name's file: O_RDWR, with O_CREAT for a holder, or O_RDONLY to look. Never
 * through a symbolic link: a link planted in a shared directory must not make us create
 * or lock a file elsewhere. A missing file is DLOCK_ERR_LOST, with no message, when it
 * is not to be created. */
static int open_lock_file(dlock_client *c, const char *file, int mode, int *fd, dlock__err *e)
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

/* True when fd is still the file the directory has under that name (not removed or
 * replaced since it was opened). */
static bool same_file(dlock_client *c, int fd, const char *file)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && a.st_nlink > 0 &&
           fstatat(c->local->dirfd, file, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* ---- byte locks ------------------------------------------------------------- */

static int ofd_lock(int fd, short type, off_t at)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = at, .l_len = 1};
    while (fcntl(fd, F_OFD_SETLK, &fl) != 0) {
        if (errno != EINTR)
            return -1;
    }
    return 0;
}

static void ofd_unlock(int fd, off_t at)
{
    ofd_lock(fd, F_UNLCK, at);
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

/* Take the guard (a write lock to change the content, a read lock to read it). Another
 * process holds it for microseconds; one that was stopped while holding it could hold
 * it for ever, so this gives up after the client's timeout plus connect timeout, the
 * deadline of a call to a server that does not answer. Polled: the guard's release
 * makes no event, and the wait is short unless something is wrong. */
static int guard_take(dlock_client *c, int fd, short type, const char *file, dlock__err *e)
{
    int64_t give_up = dlock__now_us() + c->local->guard_us, pause_us = 20;
    while (ofd_lock(fd, type, LK_GUARD) != 0) {
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

/* What the file says, with each record's liveness. */
typedef struct view {
    uint64_t fence;
    record excl;
    record *shared; /* [nslots] */
    int64_t nslots;
    int64_t nlive; /* live shared holders */
} view;

static void view_free(view *v)
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

static int write_record(dlock_client *c, int fd, const char *file, int64_t slot, const record *r,
                        dlock__err *e)
{
    char buf[REC_SIZE];
    format_record(r, buf);
    return write_at(c, fd, file, buf, sizeof buf, REC_AT(slot), e);
}

/* True while a detached record's lease runs: on this boot, and not past its end. */
static bool detached_live(dlock_client *c, const record *r, int64_t now)
{
    return strcmp(r->boot, c->local->boot_id) == 0 && r->expires_us > now;
}

/* Read the file (under the guard) and tell which records are alive. */
static int read_view(dlock_client *c, int fd, const char *file, view *v, dlock__err *e)
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
            view_free(v);
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

/* What is left of a live record's lease, in ms: a detached one's, or for an attached
 * one the lease its holder asked for (a held local lock does not expire). */
static int64_t record_left_ms(const record *r, int64_t now)
{
    if (r->state == 'D')
        return (r->expires_us - now) / 1000;
    return r->ttl_ms;
}

/* Issue the next fence and write it: max(counter + 1, wall clock in us). The counter
 * alone never goes back while the file lives; the floor keeps fences increasing when
 * the file was removed, and after a power loss that lost the counter's last write: a
 * fence not above the clock when issued is below the clock at any later boot, so it is
 * written without fdatasync. A fence ahead of the clock (more than one a microsecond,
 * or the clock was set back) is synced before it is handed out. */
static int next_fence(dlock_client *c, int fd, const char *file, view *v, uint64_t *out,
                      dlock__err *e)
{
    int64_t wall = dlock__wallclock_us();
    uint64_t f = v->fence + 1;
    if (wall > 0 && (uint64_t)wall > f)
        f = (uint64_t)wall;
    char hdr[HDR_SIZE];
    memset(hdr, ' ', sizeof hdr);
    int n = snprintf(hdr, sizeof hdr, "dlock-local 1\nfence %llu\n", (unsigned long long)f);
    hdr[n] = ' ';
    hdr[HDR_SIZE - 1] = '\n';
    int rc = write_at(c, fd, file, hdr, sizeof hdr, 0, e);
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
                                  (long long)record_left_ms(x, now));
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
        if ((j >= v->nslots || !v->shared[j].live) && ofd_lock(fd, F_WRLCK, LK_SLOT0 + j) == 0)
            return j;
    return -1;
}

/* The try needs the file opened again: it was removed or replaced since. */
#define TRY_REOPEN (-1)

/* One try under the guard. DLOCK_OK with l holding the name (gate, slot, record, fence),
 * DLOCK_ERR_BUSY with *until_us as refusal() says, TRY_REOPEN, or an error. */
static int try_once(dlock_client *c, dlock_lock *l, request *q, int64_t *until_us, dlock__err *e)
{
    struct dlock__local_hold *h = l->local;
    int fd = h->fd;
    *until_us = 0;
    int rc = guard_take(c, fd, F_WRLCK, q->file, e);
    if (rc != DLOCK_OK)
        return rc;
    if (!same_file(c, fd, q->file)) {
        ofd_unlock(fd, LK_GUARD);
        return TRY_REOPEN;
    }
    bool gate = ofd_lock(fd, q->limit == 0 ? F_WRLCK : F_RDLCK, LK_GATE) == 0;
    if (!gate && errno != EAGAIN && errno != EACCES)
        rc = dlock__err_set(e, errno == ENOLCK ? DLOCK_ERR_NOMEM : DLOCK_ERR_IO, "%s/%s: lock: %s",
                            c->local->dir, q->file, strerror(errno));
    view v = {0};
    int64_t slot = -1;
    if (rc == DLOCK_OK)
        rc = read_view(c, fd, q->file, &v, e);
    if (rc == DLOCK_OK)
        rc = refusal(q, &v, gate, until_us, e);
    if (rc == DLOCK_OK && q->limit != 0 && (slot = claim_slot(fd, &v)) < 0)
        rc = dlock__err_set(e, DLOCK_ERR_BUSY, "%d shared holders: no slot is free", SLOTS_MAX);
    if (rc == DLOCK_OK && (rc = next_fence(c, fd, q->file, &v, &l->fence, e)) == DLOCK_OK) {
        h->rec.fence = l->fence;
        rc = write_record(c, fd, q->file, slot, &h->rec, e);
    }
    if (rc != DLOCK_OK) {
        if (slot >= 0)
            ofd_unlock(fd, LK_SLOT0 + slot);
        if (gate)
            ofd_unlock(fd, LK_GATE);
    } else {
        h->slot = slot;
    }
    ofd_unlock(fd, LK_GUARD);
    view_free(&v);
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

/* Sleep until the watch fires (*changed), until_us, or cancel_fd is readable
 * (DLOCK_ERR_CANCELED). A signal ends the sleep early: the caller tries again. */
static int sleep_on_watch(int ifd, int cancel_fd, int64_t until_us, bool *changed)
{
    struct pollfd p[2] = {{.fd = ifd, .events = POLLIN},
                          {.fd = cancel_fd > 0 ? cancel_fd : -1, .events = POLLIN}};
    int64_t left = until_us - dlock__now_us();
    left = left > 0 ? left : 0;
    struct timespec ts = {(time_t)(left / 1000000), (long)(left % 1000000) * 1000};
    int r = ppoll(p, 2, &ts, NULL);
    if (r > 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
        return DLOCK_ERR_CANCELED;
    *changed = r > 0;
    char events[4096];
    while (r > 0 && read(ifd, events, sizeof events) > 0)
        ;
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
    if ((l->local = dlock__calloc(1, sizeof *l->local)) == NULL) {
        dlock__lock_free(l);
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    }
    l->local->fd = -1;
    l->local->slot = -1;
    l->local->ttl_ms = ttl_ms;
    if ((rc = dlock__token_new(l->token)) != DLOCK_OK)
        dlock__err_set(e, rc, "getrandom: %s", strerror(errno));
    if (rc == DLOCK_OK)
        rc = lock_file_name(name, l->name_len, q->file, e);
    if (rc == DLOCK_OK)
        rc = open_lock_file(c, q->file, O_RDWR | O_CREAT, &l->local->fd, e);
    if (rc != DLOCK_OK) {
        dlock__lock_free(l);
        return rc;
    }
    record *r = &l->local->rec;
    r->state = 'A';
    memcpy(r->token, l->token, sizeof r->token);
    r->ttl_ms = ttl_ms;
    snprintf(r->boot, sizeof r->boot, "%s", c->local->boot_id);
    const char *label = opts != NULL && opts->label != NULL ? opts->label : "";
    snprintf(r->desc, sizeof r->desc, "%s%s%s", c->holder, label[0] ? " " : "", label);
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
    int cancel_fd = opts != NULL ? opts->cancel_fd : 0;
    int64_t start = dlock__now_us();
    /* A wait longer than a century is a wait forever (and must not overflow). */
    int64_t deadline =
        wait_ms < 0 || wait_ms > INT64_C(3153600000000) ? INT64_MAX : start + wait_ms * 1000;
    int ifd = -1, burst = 0;
    bool unwatchable = false;
    for (int n = 0;; n++) {
        int64_t until = 0;
        rc = try_once(c, l, &q, &until, e);
        if (rc == TRY_REOPEN) {
            /* The file was removed or replaced: take the one the directory has now, and
             * watch it instead. */
            close(l->local->fd);
            l->local->fd = -1;
            if (ifd >= 0)
                close(ifd);
            ifd = -1;
            if ((rc = open_lock_file(c, q.file, O_RDWR | O_CREAT, &l->local->fd, e)) != DLOCK_OK)
                break;
            continue;
        }
        int64_t now = dlock__now_us();
        if (rc != DLOCK_ERR_BUSY || now >= deadline)
            break;
        if (ifd < 0 && !unwatchable) {
            /* Watch first, then try again at once: a release between the try and the
             * watch would otherwise pass unseen. */
            ifd = watch_file(l->local->fd);
            unwatchable = ifd < 0;
            continue;
        }
        int src;
        if (unwatchable) {
            src = dlock__backoff(n, until > now ? (until - now) / 1000 : 0, deadline, cancel_fd);
        } else {
            int64_t at = now + SAFETY_RETRY_US;
            if (until > 0 && until < at)
                at = until;
            if (burst > 0 && now + (INT64_C(1000) << (BURST_RETRIES - burst)) < at)
                at = now + (INT64_C(1000) << (BURST_RETRIES - burst));
            burst = burst > 0 ? burst - 1 : 0;
            bool changed = false;
            src = sleep_on_watch(ifd, cancel_fd, at < deadline ? at : deadline, &changed);
            if (changed)
                burst = BURST_RETRIES;
        }
        if (src != DLOCK_OK) {
            rc = dlock__err_set(e, src, "canceled through cancel_fd");
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

/* ---- held locks ------------------------------------------------------------- */

/* Let go of what l's descriptor holds and close it, with the guard held: the record is
 * cleared (or left for later, detached) before the locks go, and the locks go before
 * the close that wakes the waiters. */
static void drop_hold(struct dlock__local_hold *h)
{
    if (h->slot >= 0)
        ofd_unlock(h->fd, LK_SLOT0 + h->slot);
    ofd_unlock(h->fd, LK_GATE);
    ofd_unlock(h->fd, LK_GUARD);
    close(h->fd);
    h->fd = -1;
}

static const char not_ours[] =
    "the lock is not held with this token (expired, released or taken by another owner)";

/* The lock file of l's name, opened for a change by token. */
static int open_for_token(dlock_lock *l, char file[FILE_MAX], int *fd, dlock__err *e)
{
    int rc = lock_file_name(l->name, l->name_len, file, e);
    if (rc == DLOCK_OK && (rc = open_lock_file(l->client, file, O_RDWR, fd, e)) == DLOCK_ERR_LOST)
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
    if ((rc = guard_take(c, fd, F_WRLCK, file, e)) != DLOCK_OK) {
        close(fd);
        return rc;
    }
    rc = read_view(c, fd, file, &v, e);
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
        rc = write_record(c, fd, file, slot, r, e);
    ofd_unlock(fd, LK_GUARD);
    close(fd);
    view_free(&v);
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
        if ((rc = lock_file_name(l->name, l->name_len, file, e)) == DLOCK_OK &&
            !same_file(c, h->fd, file))
            rc = dlock__err_set(e, DLOCK_ERR_LOST,
                                "%s/%s was removed while held: another process may have taken "
                                "the name since",
                                c->local->dir, file);
        /* Without the guard the record stays, and counts for nothing once the locks are
         * gone: the release itself cannot fail. */
        dlock__err ignored;
        if (rc == DLOCK_OK && guard_take(c, h->fd, F_WRLCK, file, &ignored) == DLOCK_OK) {
            record none = {0};
            write_record(c, h->fd, file, h->slot, &none, &ignored);
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
        rc = lock_file_name(l->name, l->name_len, file, e);
        if (rc == DLOCK_OK && (rc = guard_take(c, h->fd, F_WRLCK, file, e)) == DLOCK_OK) {
            h->rec.state = 'D';
            h->rec.ttl_ms = h->ttl_ms;
            h->rec.expires_us = dlock__now_us() + h->ttl_ms * 1000;
            rc = write_record(c, h->fd, file, h->slot, &h->rec, e);
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
    int rc = lock_file_name(l->name, l->name_len, file, e);
    if (rc == DLOCK_OK && !same_file(l->client, l->local->fd, file)) {
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
    if (lock_file_name(l->name, l->name_len, file, &ignored) == DLOCK_OK &&
        guard_take(l->client, h->fd, F_WRLCK, file, &ignored) == DLOCK_OK) {
        write_record(l->client, h->fd, file, h->slot, &h->rec, &ignored);
        ofd_unlock(h->fd, LK_GUARD);
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
    int rc = lock_file_name(name, strlen(name), file, e);
    if (rc != DLOCK_OK)
        return rc;
    if ((rc = open_lock_file(c, file, O_RDONLY, &fd, e)) != DLOCK_OK)
        return rc == DLOCK_ERR_LOST ? DLOCK_OK : rc;
    if ((rc = guard_take(c, fd, F_RDLCK, file, e)) == DLOCK_OK) {
        rc = read_view(c, fd, file, v, e);
        ofd_unlock(fd, LK_GUARD);
    }
    close(fd);
    return rc;
}

static void fill_holder(const record *r, int64_t now, dlock_holder *out)
{
    out->held = 1;
    memcpy(out->token, r->token, sizeof out->token);
    /* Cut to the size of the field: a description is for people. */
    size_t len = strnlen(r->desc, sizeof out->description - 1);
    memcpy(out->description, r->desc, len);
    out->description[len] = '\0';
    out->remaining_ms = record_left_ms(r, now);
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
            if (v.shared[j].live && record_left_ms(&v.shared[j], now) > out->remaining_ms)
                out->remaining_ms = record_left_ms(&v.shared[j], now);
    }
    view_free(&v);
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
        view_free(&v);
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
    view_free(&v);
    return DLOCK_OK;
}
