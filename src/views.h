/*
 * views.h: one INSPECT round, what every node holds for a name, shared by the check
 * of a handle (lock.c) and the inspect of a name (inspect.c), in one call or in steps
 * (views.c).
 */
#ifndef DLOCK_VIEWS_H
#define DLOCK_VIEWS_H

#include "internal.h"

/* What one node holds for a name (from the INSPECT script). */
typedef struct dlock__view {
    bool ok;
    char value[600]; /* "<token> <description>", truncated; "shared"; "" when free */
    long long pttl;
    uint64_t fence;
    long long mine;  /* the asked-for token's shared lease left in ms; -1: none */
    long long count; /* shared holders */
    char *list;      /* INSPECT's list of shared holders (owned; NULL when none) */
} dlock__view;

/* Every node's view of a name, and the error a round that could not decide gets. */
typedef struct dlock__views {
    dlock__view node[DLOCK_SERVERS_MAX];
    dlock__tally t;
    int64_t start_us;
    dlock__err undecided; /* the error to return when too few nodes answered */
    int undecided_rc;
} dlock__views;

void dlock__views_free(dlock__views *v);

/* Ask every node what it holds for the name (and, when token is not "", what lease
 * that token has as a shared holder), in one blocking round. Free v with
 * dlock__views_free, whatever this returns. */
int dlock__views_ask(struct dlock_client *c, const char *name, size_t name_len, const char *token,
                     dlock__views *v, dlock__err *e);

/* The same round in steps, for a dlock_pending: the call formatted at the start, the
 * round kept in flight between steps. */
typedef struct dlock__viewing {
    dlock__keys k;
    char most[16];
    const char *args[6];
    size_t lens[6];
    dlock__call call;
    dlock__step_round sr;
} dlock__viewing;

/* Format the call (no I/O) for pending p; free w with dlock__viewing_free, whatever
 * this returns. */
int dlock__viewing_init(struct dlock_client *c, dlock__viewing *w, dlock_pending *p,
                        const char *name, size_t name_len, const char *token, dlock__err *e);
/* The round's next step: DLOCK_OK with *v filled once its replies are in (free it with
 * dlock__views_free), else dlock__pending_again or a step's error. */
int dlock__viewing_step(struct dlock_client *c, dlock__viewing *w, dlock_pending *p, bool nowait,
                        dlock__views *v, dlock__err *e);
void dlock__viewing_free(struct dlock_client *c, dlock__viewing *w, dlock_pending *p);

/* The quorum-th largest of the m values in p (sorted in place): what a quorum agrees
 * on at least. -1 when fewer than a quorum have one. */
long long dlock__quorum_value(const struct dlock_client *c, long long *p, int m);
/* Among the nodes that hold something of `token`'s, the lease a quorum still has. -1
 * when fewer than a quorum hold it. */
long long dlock__quorum_pttl(const struct dlock_client *c, const dlock__views *v,
                             const char *token);
/* The lease node view nv gives `token` (-1: it holds nothing of token's). */
long long dlock__view_lease(const dlock__view *nv, const char *token);

#endif
