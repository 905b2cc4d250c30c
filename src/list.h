/*
 * list.h: what list.c (walking the servers) and list_merge.c (one name's views merged
 * into what a quorum holds) share.
 */
#ifndef DLOCK_LIST_H
#define DLOCK_LIST_H

#include "internal.h"

#define LISTED_MAX DLOCK_LIST_HOLDERS_MAX

/* One node's view of one name: its fields point into the page reply that holds them. */
typedef struct dlock__list_rec {
    const char *name; /* decoded: owned, or into the reply when decoding left it as is */
    size_t name_len;
    char *owned; /* name, when decoding changed it (freed with the lister) */
    int node;
    const char *value;
    size_t value_len;
    long long pttl, queue, limit, count;
    uint64_t fence;
    int nlisted;
    const char *listed; /* nlisted runs of token, ms left, description */
    size_t listed_len;
} dlock__list_rec;

struct dlock_lister {
    dlock_client *c;
    char *pattern;
    redisReply **pages; /* the replies records point into */
    char *blob;         /* records a backend made in one piece, which recs point into */
    size_t npages, cap_pages;
    dlock__list_rec *recs;
    size_t nrecs, cap_recs;
    size_t at;                        /* the next record to look at */
    dlock_listed entry;               /* the last entry returned */
    dlock_holder holders[LISTED_MAX]; /* its listed holders */
    char name[DLOCK_NAME_MAX + 1];    /* its name */
};

/* One "<length>:<bytes>" field of a page's records at *p (before end): its bytes and
 * length; advances *p. False when malformed. */
bool dlock__list_field(const char **p, const char *end, const char **s, size_t *len);
/* The number a field's bytes s[0..len) write (a field is not NUL-terminated: the next
 * one follows it); 0 when they are not one. */
long long dlock__list_ll(const char *s, size_t len);
/* The records of one page (blob, len bytes) from node, those whose names match the
 * pattern, added to it->recs (they point into blob, which must outlive it). */
int dlock__list_take_page(dlock_lister *it, int node, const char *blob, size_t len, dlock__err *e);
/* Sort records by name, then by server. */
int dlock__list_cmp(const void *a, const void *b);
/* The views g[0..n) of one name merged into it->entry and it->holders: false when no
 * quorum holds the name. */
bool dlock__list_merge(dlock_lister *it, const dlock__list_rec *g, int n);

#endif /* DLOCK_LIST_H */
