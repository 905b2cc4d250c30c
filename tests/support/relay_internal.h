/*
 * relay_internal.h: what the files of the fault relay share, and nothing else includes.
 *
 *   relay.c         the relay's thread (one ppoll() loop: reading, writing, accepting)
 *                   and its lifetime: start, stop, stats, the cluster helpers;
 *   relay_pair.c    one relayed connection (a "pair"): its queues, its parsers that cut
 *                   each direction into whole messages, and the pairing of each reply
 *                   with the command it answers;
 *   relay_faults.c  what a test can tell the relay to do: the canned replies, the rules
 *                   and every setter (fr_pass ... fr_clear_rules).
 *
 * Every function here is called with the relay's mutex held (fr__commit releases it).
 */
#ifndef DLOCK_TEST_RELAY_INTERNAL_H
#define DLOCK_TEST_RELAY_INTERNAL_H

#include "relay.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define MAX_RULES 16
#define NAME_LEN  32

/* How a chunk ends its connection, if it does. */
enum { CLOSE_NO = 0, CLOSE_FIN = 1, CLOSE_RST = 2 };

typedef struct chunk {
    struct chunk *next;
    int64_t due_ns;
    size_t len, off;
    uint64_t filler;  /* after data: this many filler bytes (FR_HUGE_BULK's stream) */
    bool close_after; /* close the pair once this chunk is out */
    bool rst;         /* ... with a reset */
    char data[];
} chunk;

typedef struct queue {
    chunk *head, *tail;
} queue;

/* The relay's FIFO lists (a queue's chunks, a pair's owed replies) are singly linked
 * with a tail pointer: FIFO_PUSH appends node (its next already NULL) at the tail,
 * FIFO_SHIFT unlinks the head, which must be there. */
#define FIFO_PUSH(head, tail, node)                                                                \
    do {                                                                                           \
        if ((tail) != NULL)                                                                        \
            (tail)->next = (node);                                                                 \
        else                                                                                       \
            (head) = (node);                                                                       \
        (tail) = (node);                                                                           \
    } while (0)
#define FIFO_SHIFT(head, tail)                                                                     \
    do {                                                                                           \
        (head) = (head)->next;                                                                     \
        if ((head) == NULL)                                                                        \
            (tail) = NULL;                                                                         \
    } while (0)

/* One direction's message parser: raw holds the bytes fed to rd that do not belong to
 * a message handed on yet. When rd completes a message, it ends where rd's unread
 * bytes begin, so its length is raw.len - (rd->len - rd->pos). */
typedef struct parser {
    redisReader *rd;
    bool off; /* the peer does not speak RESP (or we gave up): bytes pass as they are */
    char *raw;
    size_t len, cap;
} parser;

/* A command whose reply is still owed to the client. */
typedef struct expect {
    struct expect *next;
    bool canned; /* answered by the relay (FR_REPLACE_INSTEAD) */
    fr_canned what;
    char name[NAME_LEN];
} expect;

typedef struct pair {
    int fd[2];    /* [0] the client's socket, [1] the one to the server; -1 once closed */
    queue q[2];   /* q[0]: bytes for the server; q[1]: bytes for the client */
    parser ps[2]; /* ps[0]: commands from the client; ps[1]: replies from the server */
    expect *exp, *exp_tail;
    bool eof[2];
    bool subscribed;      /* sent a SUBSCRIBE: replies are no longer paired with commands */
    bool broken;          /* lost bytes to a blackhole */
    bool dead;            /* drops everything, for good (FR_HEAL_DEAD) */
    bool poisoned;        /* a canned reply made the stream garbage: later replies dropped */
    bool closing;         /* to be freed at the end of this pass */
    int64_t next_byte_ns; /* trickle: when the next byte may go */
} pair;

typedef struct rule {
    fr_rule r;
    char cmd[NAME_LEN];
} rule;

struct fr_relay {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    bool started, stop, exited;
    int lfd, efd, port;
    struct sockaddr_storage up_addr; /* the server, resolved once by fr_start_to */
    socklen_t up_len;
    char url[64];
    pair **pairs;
    int npairs, cap;
    /* settings */
    int64_t delay_ns[2]; /* [0] up, [1] down */
    int hold;
    bool blackhole;
    int heal;
    int64_t trickle_ns;
    bool refuse;
    rule rules[MAX_RULES];
    int nrules;
    /* actions the thread carries out on its next pass */
    bool reset_all, healing;
    unsigned long gen_req, gen_done;
    fr_stats st;
};

/* ---- relay.c --------------------------------------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds: the time chunks are due. */
int64_t fr__now_ns(void);
/* Wake the thread and wait until it has gone around its loop once with the current
 * settings. Called with r->mu held; returns with it released. */
void fr__commit(fr_relay *r);

/* ---- relay_pair.c ---------------------------------------------------------------- */

/* Close *fd (a reset when rst: SO_LINGER 0) and set it to -1; nothing when already -1. */
void fr__close_fd(int *fd, bool rst);
/* Close a pair's sockets now (the memory goes at the end of the pass, fr__pair_free). */
void fr__pair_close(fr_relay *r, pair *p, bool rst);
void fr__pair_free(pair *p);
/* Queue bytes for the client, due after the down delay; a chunk with close_after
 * (CLOSE_*) ends the connection once it is out. */
void fr__emit(fr_relay *r, pair *p, const char *data, size_t len, uint64_t filler, int close_after);
/* Feed bytes read from side (0 client, 1 server) to its parser and act on every
 * message they complete. */
void fr__ingest(fr_relay *r, pair *p, int side, const char *b, size_t n);

/* ---- relay_faults.c -------------------------------------------------------------- */

/* Queue a canned reply for the client (and mark the stream garbage after it when the
 * reply makes it so). */
void fr__emit_canned(fr_relay *r, pair *p, fr_canned what);
/* The first live rule among those whose action is in `actions` (a bit mask of
 * 1 << action) that matches the command `name` (NULL: an unsolicited reply); spends
 * one of its uses. NULL when none. */
const rule *fr__match(fr_relay *r, const char *name, unsigned actions);

#endif /* DLOCK_TEST_RELAY_INTERNAL_H */
