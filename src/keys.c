/*
 * keys.c: the key layout every script and every tool that reads the servers share.
 *
 * Key layout (fixed, so that other tools and bindings interoperate), with prefix P:
 *   P{name}                the lock: "<32-hex token> <holder description>", with a PX
 *                          lease; or "shared" while shared holders hold it
 *   P{name}:fence          the fence counter
 *   P{name}:queue          waiters, scored by ticket (scripts_queue.c)
 *   P{name}:holders        shared holders and semaphore permits: tokens scored by the
 *                          end of their lease
 *   P{name}:holders:info   their descriptions, by token, and under "limit" the number
 *                          of holders the name admits (a semaphore's K; DLOCK_PERMITS_MAX
 *                          for a shared lock), which no token can equal
 *   P{name}:break          the last time an operator broke the name (dlock_break): a
 *                          hash of at_ms, by, reason, holder and fence, kept a day
 *   P{name}:slot           the last slot of a scheduled job claimed under the name
 *                          (dlock_slot_claim): a hash of slot_ms, at_ms and by, kept
 *                          two periods and a minute
 *   P{name}:leader         an elected leader's record (elect.c): a hash of its term,
 *                          seq (its proclamations in the term), token and value, with
 *                          the lease of the lock; and, as a pub/sub channel (another
 *                          namespace than the keys), where the leader's changes and
 *                          renewals are published for observers
 * All share the hash tag {name}, so they live in one Cluster slot. A name that begins
 * with '}' would make that tag empty (Redis hashes the whole key then, each key to its
 * own slot), so such a name, and for the encoding to stay one-to-one every name that
 * begins with '%', is written in the tag as '%' and its bytes in lowercase hex: "}x"
 * is P{%7d78}, "%" is P{%25}; every other name is written as it is.
 */
#include "scripts.h"

#include <string.h>

/* Whether name is written in hex in its hash tag (the key layout above says why). */
static bool tag_encoded(const char *name, size_t name_len)
{
    return name_len > 0 && (name[0] == '}' || name[0] == '%');
}

size_t dlock__tag_len(const char *name, size_t name_len)
{
    return tag_encoded(name, name_len) ? 1 + 2 * name_len : name_len;
}

char *dlock__tag_write(char *out, const char *name, size_t name_len)
{
    if (!tag_encoded(name, name_len)) {
        memcpy(out, name, name_len);
        return out + name_len;
    }
    static const char hex[] = "0123456789abcdef";
    *out++ = '%';
    for (size_t i = 0; i < name_len; i++) {
        unsigned char b = (unsigned char)name[i];
        *out++ = hex[b >> 4];
        *out++ = hex[b & 15];
    }
    return out;
}

int dlock__keys_make(const char *prefix, size_t prefix_len, const char *name, size_t name_len,
                     dlock__keys *k, dlock__err *e)
{
    enum { N = 8 };
    static const char *const suffix[N] = {"",       ":fence", ":queue", ":holders", ":holders:info",
                                          ":break", ":slot",  ":leader"};
    const char **dst[N] = {&k->lock, &k->fence, &k->queue, &k->holders,
                           &k->info, &k->brk,   &k->slot,  &k->leader};
    size_t *len[N] = {&k->lock_len, &k->fence_len, &k->queue_len, &k->holders_len,
                      &k->info_len, &k->brk_len,   &k->slot_len,  &k->leader_len};
    size_t base = prefix_len + dlock__tag_len(name, name_len) + sizeof "{}";
    k->buf = dlock__malloc(N * base + sizeof ":fence:queue:holders:holders:info:break:slot:leader");
    if (k->buf == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    char *p = k->buf;
    for (int i = 0; i < N; i++) {
        char *q = p;
        *dst[i] = p;
        memcpy(q, prefix, prefix_len);
        q += prefix_len;
        *q++ = '{';
        q = dlock__tag_write(q, name, name_len);
        *q++ = '}';
        size_t slen = strlen(suffix[i]);
        memcpy(q, suffix[i], slen + 1);
        *len[i] = (size_t)(q - p) + slen;
        p += *len[i] + 1;
    }
    return DLOCK_OK;
}

void dlock__keys_all(const dlock__keys *k, const char **args, size_t *lens)
{
    const char *keys[DLOCK_KEYS_ALL] = {k->lock, k->fence, k->queue, k->holders, k->info};
    const size_t klens[DLOCK_KEYS_ALL] = {k->lock_len, k->fence_len, k->queue_len, k->holders_len,
                                          k->info_len};
    memcpy(args, keys, sizeof keys);
    memcpy(lens, klens, sizeof klens);
}
