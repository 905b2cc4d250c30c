/*
 * itest_pipe.h: the event loop the pipelining tests drive their pendings with
 * (itest_pipe.c): one thread, a poll of dlock_client_pipeline's descriptor until the
 * earliest due time, a pump after each wake and after each batch of steps, the pendings
 * the notify callback named (and those due) stepped.
 *
 * Include after <cmocka.h> and itest.h: the helpers assert.
 */
#ifndef DLOCK_ITEST_PIPE_H
#define DLOCK_ITEST_PIPE_H

#include <dlock.h>
#include <stdbool.h>
#include <stdint.h>

#define OPS_MAX 600

typedef struct loop loop;

/* One operation in steps: an acquisition, or a release (steps with out NULL). */
typedef struct op {
    loop *lp;
    char name[32];
    dlock_pending *p;
    dlock_lock *l;
    bool release, done, woken;
    int rc;
    int notified;   /* calls of the notify callback while it ran */
    int64_t end_us; /* when its last step returned */
} op;

/* The event loop of a pipelining client, and what it saw. */
struct loop {
    dlock_client *c;
    int fd; /* dlock_client_pipeline's */
    op *ops;
    int n;
    int again_in_flight; /* steps that returned DLOCK_ERR_AGAIN, their round in flight */
    int again_with_fd;   /* of those, the ones whose pending had a descriptor */
    int handed_back;     /* DLOCK_ERR_WOULDBLOCK: a pipelined try has nothing to hand back */
    int late_notifies;   /* the callback for a pending that had finished */
    int unsent;          /* first steps whose request waits for room on its line */
};

/* c pipelined, its operations in ops (at most OPS_MAX). */
void loop_init(loop *lp, dlock_client *c, op *ops);
/* Acquisitions of "PREFIX-I" for i < n, with a lease of ttl_ms and no wait: started,
 * not stepped. */
void start_acquisitions(loop *lp, const char *prefix, int n, int64_t ttl_ms);
/* The locks the acquisitions gave, released in steps: the acquisitions' pendings freed
 * (the locks stay), a release started for each, not stepped. */
void start_releases(loop *lp);
/* One step of o, as the loop takes it. */
void step(loop *lp, op *o);
/* The first step of operations from..to-1, together, then one pump that writes them
 * all: each round is then in flight on the pipes, told by the pump (no descriptor of
 * its own), and due by the client's deadlines at the latest, or, waiting for room on a
 * full line (DLOCK_PIPELINE_DEPTH), counted in lp->unsent, with no due time yet. */
void first_steps(loop *lp, int from, int to, int64_t due_max_ms);
/* Drive every operation to its end; fails after limit_ms. */
void loop_run(loop *lp, int64_t limit_ms);

#endif /* DLOCK_ITEST_PIPE_H */
