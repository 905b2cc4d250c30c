/*
 * local.h: what the files of the file backend (local.c, local_file.c, local_acquire.c,
 * local_list.c) share. No other file of src/ includes it: the rest of the library knows
 * a file:// client only by its table, dlock__backend_file, and client.c by the two
 * entries in internal.h that make one, so the types and constants here keep the short
 * names they had in one file.
 */
#ifndef DLOCK_LOCAL_H
#define DLOCK_LOCAL_H

#include "internal.h"

#include <sys/types.h>

/* The byte locks of a lock file (local_file.c describes them and the file's layout). */
#define LK_GATE  0
#define LK_GUARD 1
#define LK_SLOT0 2

#define SLOTS_MAX 65536 /* shared holders of one name at once (a 64 MiB file) */
#define DESC_MAX  600   /* "host:pid label" in a record */
#define FILE_MAX  192   /* a lock file's name, ".lock" and the NUL (local_file.c) */

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
    bool live; /* set by dlock__local_read_view */
} record;

struct dlock__local_hold {
    int fd;         /* the handle's own open file description */
    int64_t slot;   /* -1: exclusive; else the shared holder's slot */
    int64_t ttl_ms; /* the lease asked for (acquire or the last extend) */
    record rec;     /* what the file says of it */
};

/* What the file says, with each record's liveness. */
typedef struct view {
    uint64_t fence;
    int64_t slot_ms, slot_at_ms; /* the last slot claimed (dlock_slot_claim); -1: none */
    char slot_by[DESC_MAX + 1];
    record excl;
    record *shared; /* [nslots] */
    int64_t nslots;
    int64_t nlive; /* live shared holders */
} view;

/* ---- the table's entries outside local.c --------------------------------------- */

/* dlock__backend.acquire (local_acquire.c). */
int dlock__local_acquire(dlock_client *c, const char *name, const dlock_opts *opts, int64_t ttl_ms,
                         int64_t wait_ms, int64_t limit, dlock_lock **out, dlock__err *e);
/* dlock__backend.list, .inspect and .inspect_shared (local_list.c). */
int dlock__local_list(struct dlock_lister *it, dlock__err *e);
int dlock__local_inspect(dlock_client *c, const char *name, dlock_holder *out, dlock__err *e);
int dlock__local_inspect_shared(dlock_client *c, const char *name, dlock_holder *out, int max,
                                int *n, int64_t *total, dlock__err *e);

/* ---- local_file.c ------------------------------------------------------------- */

/* "<encoded name>.lock": every byte but [A-Za-z0-9_-] as %XX. A name whose encoding is
 * longer than ENC_MAX keeps ENC_KEEP bytes of it (whole escapes), then "~" and the
 * SHA-256 of the whole name: '~' appears in no encoding, so a long name's file cannot
 * be a short name's, and two long names share a file only if their hashes collide. */
int dlock__local_file_name(const char *name, size_t len, char out[FILE_MAX], dlock__err *e);
/* Open name's file: O_RDWR, with O_CREAT for a holder, or O_RDONLY to look. Never
 * through a symbolic link: a link planted in a shared directory must not make us create
 * or lock a file elsewhere. A missing file is DLOCK_ERR_LOST, with no message, when it
 * is not to be created. */
int dlock__local_open_file(struct dlock_client *c, const char *file, int mode, int *fd,
                           dlock__err *e);
/* True when fd is still the file the directory has under that name (not removed or
 * replaced since it was opened). */
bool dlock__local_same_file(struct dlock_client *c, int fd, const char *file);
/* Lock byte `at` (type F_WRLCK, F_RDLCK or F_UNLCK) without waiting: -1 with errno
 * (EAGAIN or EACCES when another description holds it). */
int dlock__local_ofd_lock(int fd, short type, off_t at);
void dlock__local_ofd_unlock(int fd, off_t at);
/* Take the guard (a write lock to change the content, a read lock to read it). Another
 * process holds it for microseconds; one that was stopped while holding it could hold
 * it for ever, so this gives up after the client's timeout plus connect timeout, the
 * deadline of a call to a server that does not answer. Polled: the guard's release
 * makes no event, and the wait is short unless something is wrong. */
int dlock__local_guard_take(struct dlock_client *c, int fd, short type, const char *file,
                            dlock__err *e);
void dlock__local_view_free(view *v);
/* Write r as the record of slot (-1: the exclusive holder's). */
int dlock__local_write_record(struct dlock_client *c, int fd, const char *file, int64_t slot,
                              const record *r, dlock__err *e);
/* Read the file (under the guard) and tell which records are alive. */
int dlock__local_read_view(struct dlock_client *c, int fd, const char *file, view *v,
                           dlock__err *e);
/* What is left of a live record's lease, in ms: a detached one's, or for an attached
 * one the lease its holder asked for (a held local lock does not expire). */
int64_t dlock__local_record_left_ms(const record *r, int64_t now);
/* Issue the next fence and write it: max(counter + 1, wall clock in us). The counter
 * alone never goes back while the file lives; the floor keeps fences increasing when
 * the file was removed, and after a power loss that lost the counter's last write: a
 * fence not above the clock when issued is below the clock at any later boot, so it is
 * written without fdatasync. A fence ahead of the clock (more than one a microsecond,
 * or the clock was set back) is synced before it is handed out. */
int dlock__local_next_fence(struct dlock_client *c, int fd, const char *file, view *v,
                            uint64_t *out, dlock__err *e);

/* Record the slot claim in v (slot_ms, slot_at_ms, slot_by) in the header, with v's
 * fence, synced: a claim must not be forgotten by a crash once the job it let run has
 * started. */
int dlock__local_write_slot(struct dlock_client *c, int fd, const char *file, const view *v,
                            dlock__err *e);

#endif /* DLOCK_LOCAL_H */
