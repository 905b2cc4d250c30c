/*
 * local_list.c: what a file:///DIR client's directory holds. dlock_list: every lock file
 * in the directory whose name is held now, read as dlock_inspect reads one (the guard
 * taken to read, so that no try is disturbed), written as the records a server's page
 * holds (list.c reads them the same way, sorted and filtered with the servers'). And
 * dlock_inspect and dlock_inspect_shared of one name.
 *
 * A name is known from its file's name, which encodes it one-to-one, except a name too
 * long for a file name: its file keeps the start of the encoding and a hash, the rest
 * of the name is not on disk, and such a name cannot be listed (local.h says where that
 * limit lies). Waiters of a local lock wait in their own processes, so none is counted.
 */
#include "list.h"
#include "local.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A growing buffer of "<length>:<bytes>" fields. */
typedef struct out {
    char *p;
    size_t len, cap;
    bool failed;
} out;

static void put(out *o, const char *s, size_t n)
{
    char head[24];
    int h = snprintf(head, sizeof head, "%zu:", n);
    if (o->failed)
        return;
    if (o->len + (size_t)h + n > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->len + (size_t)h + n)
            cap *= 2;
        char *p = dlock__realloc(o->p, cap);
        if (p == NULL) {
            o->failed = true;
            return;
        }
        o->p = p;
        o->cap = cap;
    }
    memcpy(o->p + o->len, head, (size_t)h);
    memcpy(o->p + o->len + h, s, n);
    o->len += (size_t)h + n;
}

static void put_str(out *o, const char *s)
{
    put(o, s, strlen(s));
}

static void put_int(out *o, long long v)
{
    char n[24];
    snprintf(n, sizeof n, "%lld", v);
    put_str(o, n);
}

/* The name a lock file's name encodes, into name (NUL-terminated); false for another
 * file, or a long name's (hashed). */
static bool file_to_name(const char *file, char *name, size_t size)
{
    size_t flen = strlen(file);
    if (flen <= 5 || strcmp(file + flen - 5, ".lock") != 0 || memchr(file, '~', flen) != NULL)
        return false;
    size_t n = 0;
    for (size_t i = 0; i < flen - 5; i++) {
        unsigned int b = (unsigned char)file[i];
        if (file[i] == '%') {
            if (i + 2 >= flen - 5 || sscanf(file + i + 1, "%2X", &b) != 1 || b == 0)
                return false;
            i += 2;
        }
        if (n + 1 >= size)
            return false;
        name[n++] = (char)b;
    }
    name[n] = '\0';
    return n > 0;
}

static int cmp_left(const void *a, const void *b)
{
    const record *x = *(record *const *)a, *y = *(record *const *)b;
    int64_t now = dlock__now_us();
    int64_t lx = dlock__local_record_left_ms(x, now), ly = dlock__local_record_left_ms(y, now);
    return (lx < ly) - (lx > ly);
}

/* One name's records, if it is held: as list.c's LIST script writes a key's. */
static void put_view(out *o, const dlock_client *c, const char *name, const view *v)
{
    int64_t now = dlock__now_us();
    if (!v->excl.live && v->nlive == 0)
        return;
    size_t nlen = strlen(name);
    char *key = dlock__malloc(c->prefix_len + dlock__tag_len(name, nlen) + 3);
    if (key == NULL) {
        o->failed = true;
        return;
    }
    char *k = key;
    memcpy(k, c->prefix, c->prefix_len);
    k += c->prefix_len;
    *k++ = '{';
    k = dlock__tag_write(k, name, nlen);
    *k++ = '}';
    put(o, key, (size_t)(k - key));
    free(key);
    if (v->excl.live) {
        char value[DLOCK_TOKEN_LEN + 2 + DESC_MAX];
        snprintf(value, sizeof value, "%s %s", v->excl.token, v->excl.desc);
        put_str(o, value);
        put_int(o, dlock__local_record_left_ms(&v->excl, now));
        put_int(o, (long long)v->fence);
        put_int(o, 0);
        put_str(o, "");
        put_int(o, 0);
        put_int(o, 0);
        return;
    }
    /* Shared holders, the longest lease first, as a server lists them. */
    const record **live = dlock__malloc((size_t)v->nlive * sizeof *live);
    if (live == NULL) {
        o->failed = true;
        return;
    }
    int64_t m = 0;
    for (int64_t j = 0; j < v->nslots; j++)
        if (v->shared[j].live)
            live[m++] = &v->shared[j];
    qsort(live, (size_t)m, sizeof *live, cmp_left);
    int listed = m < DLOCK_LIST_HOLDERS_MAX ? (int)m : DLOCK_LIST_HOLDERS_MAX;
    put_str(o, "shared");
    put_int(o, m > 0 ? dlock__local_record_left_ms(live[0], now) : 0);
    put_int(o, (long long)v->fence);
    put_int(o, 0);
    put_str(o, "0"); /* a file does not say how many holders the name admits */
    put_int(o, m);
    put_int(o, listed);
    for (int j = 0; j < listed; j++) {
        put_str(o, live[j]->token);
        put_int(o, dlock__local_record_left_ms(live[j], now));
        put_str(o, live[j]->desc);
    }
    free(live);
}

/* The records (list.c's format) of every held name in c's directory into a malloc'd
 * *blob of *len bytes. */
static int list_dir(dlock_client *c, char **blob, size_t *len, dlock__err *e)
{
    *blob = NULL;
    *len = 0;
    int dfd = openat(c->local->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (d == NULL) {
        if (dfd >= 0)
            close(dfd);
        return dlock__err_set(e, DLOCK_ERR_IO, "%s: %s", c->local->dir, strerror(errno));
    }
    out o = {0};
    int rc = DLOCK_OK;
    char name[FILE_MAX];
    for (struct dirent *de; rc == DLOCK_OK && !o.failed && (de = readdir(d)) != NULL;) {
        if (!file_to_name(de->d_name, name, sizeof name))
            continue;
        int fd;
        view v;
        memset(&v, 0, sizeof v);
        if (dlock__local_open_file(c, de->d_name, O_RDONLY, &fd, e) != DLOCK_OK)
            continue; /* gone since, or not ours to read: not a held name we can show */
        int frc = dlock__local_guard_take(c, fd, F_RDLCK, de->d_name, e);
        if (frc == DLOCK_OK) {
            frc = dlock__local_read_view(c, fd, de->d_name, &v, e);
            dlock__local_ofd_unlock(fd, LK_GUARD);
        }
        close(fd);
        /* A file that is not a lock file, or one held in its guard too long, is left
         * out of the list; only a lack of memory ends it. */
        if (frc == DLOCK_OK)
            put_view(&o, c, name, &v);
        else if (frc == DLOCK_ERR_NOMEM)
            rc = frc;
        dlock__local_view_free(&v);
    }
    closedir(d);
    if (rc == DLOCK_OK && o.failed)
        rc = dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    if (rc != DLOCK_OK) {
        free(o.p);
        return rc;
    }
    *blob = o.p;
    *len = o.len;
    return DLOCK_OK;
}

int dlock__local_list(dlock_lister *it, dlock__err *e)
{
    size_t len;
    int rc = list_dir(it->c, &it->blob, &len, e);
    return rc != DLOCK_OK ? rc : dlock__list_take_page(it, 0, it->blob, len, e);
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

static void fill_holder(const record *r, int64_t now, dlock_holder *dst)
{
    dst->held = 1;
    memcpy(dst->token, r->token, sizeof dst->token);
    dlock__copy_text(dst->description, sizeof dst->description, r->desc, strlen(r->desc));
    dst->remaining_ms = dlock__local_record_left_ms(r, now);
}

int dlock__local_inspect(dlock_client *c, const char *name, dlock_holder *dst, dlock__err *e)
{
    view v;
    int rc = look(c, name, &v, e);
    if (rc != DLOCK_OK)
        return rc;
    int64_t now = dlock__now_us();
    dst->fence = v.fence;
    if (v.excl.live) {
        fill_holder(&v.excl, now, dst);
    } else if (v.nlive > 0) {
        dst->held = 1;
        dst->shared = v.nlive;
        for (int64_t j = 0; j < v.nslots; j++)
            if (v.shared[j].live &&
                dlock__local_record_left_ms(&v.shared[j], now) > dst->remaining_ms)
                dst->remaining_ms = dlock__local_record_left_ms(&v.shared[j], now);
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

int dlock__local_inspect_shared(dlock_client *c, const char *name, dlock_holder *dst, int max,
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
        memcpy(dst, all, (size_t)*n * sizeof *all);
    *total = k;
    free(all);
    dlock__local_view_free(&v);
    return DLOCK_OK;
}
