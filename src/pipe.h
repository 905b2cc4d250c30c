/*
 * pipe.h: what pipe.c (a pipe's line of replies) and pipe_pump.c (its reads and writes)
 * share: the line, and the steps on it that both take. Private to the two; the rest of
 * the transport sees dlock__pipe as opaque (transport.h).
 */
#ifndef DLOCK_PIPE_H
#define DLOCK_PIPE_H

#include "transport.h"

typedef struct pipe_ent {
    dlock__req *req;  /* NULL: nobody awaits its reply (never, or given up) */
    dlock__waker *wk; /* told when req is done */
    bool harmless;    /* run late, it harms nobody (conn.c's risky, for a reset) */
} pipe_ent;

typedef struct dlock__pipe {
    dlock__pipes *ps;
    pipe_ent *ring; /* commands sent, oldest first: ring[(head + k) % cap] for k < len */
    size_t cap, head, len;
    uint64_t head_seq; /* sequence number of ring[head] */
    /* Awaited, not sent yet, oldest first (held[hhead..nheld)): behind the connection's
     * handshake, or behind PIPE_DEPTH commands already on the line. */
    pipe_ent *held;
    size_t hhead, nheld, heldcap;
    bool stuck; /* the last flush left bytes the socket would not take */
} dlock__pipe;

/* Take wk off the ready list, if it is on it (the mutex held). */
void dlock__pipe_unready(dlock__waker *wk);
/* The oldest entry on p's line, taken off it. */
pipe_ent dlock__pipe_pop(dlock__pipe *p);
/* r is done with err; wk goes on the ready list, to be told. */
void dlock__pipe_done(dlock__pipes *ps, dlock__req *r, dlock__waker *wk, int err);
/* Every request on c fails with err: why (NULL: each missed its deadline, and the
 * message says so), and c is reset. */
void dlock__pipe_fail_all(dlock__conn *c, int err, const dlock__err *why);
/* Queue cmd (len bytes) for r and give it an entry; false when out of memory (then
 * everything on c failed). */
bool dlock__pipe_queue(dlock__conn *c, dlock__req *r, dlock__waker *wk, const char *cmd,
                       size_t len);
/* Send the requests that wait, while the handshake is done and the line has room. */
void dlock__pipe_send_held(dlock__conn *c);
/* Act on what c's socket says (ev: epoll's events; 0: only send what is queued). */
void dlock__pipe_pump_conn(dlock__conn *c, uint32_t ev);

#endif /* DLOCK_PIPE_H */
