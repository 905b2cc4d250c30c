/*
 * relay.h: the fault relay of the fault-injection suite, also the emulated network of
 * dlock-bench's W4 (fr_delay).
 *
 * A TCP proxy on its own 127.0.0.1 port in front of one real redis-server, run by a
 * thread of the test process (no root needed). The test points a dlock client at the
 * relay's URL instead of the server's and changes, at any time, what the "network"
 * between them does:
 *
 *   pass-through          fr_pass (also clears every fault below)
 *   delay                 fr_delay: every byte D ms late, each way, order kept
 *   hold                  fr_hold / fr_release: bytes of a direction wait until released
 *   blackhole             fr_blackhole: accept, read and drop, never answer
 *   refuse                fr_refuse: new connections are reset as soon as accepted
 *   reset                 fr_reset_now: RST (SO_LINGER 0) on every open connection
 *   trickle               fr_trickle: replies go out one byte every period
 *   per command or reply  fr_add_rule / fr_replace: reset on a request, reset instead of
 *                         a reply, close after k bytes of a reply, or a canned reply
 *                         instead of the real one (the command was not run) or after it
 *                         (the server ran it and its reply is lost)
 *
 * The relay knows where each command and each reply ends: it parses both streams with
 * hiredis's redisReader, and pairs each reply with the command it answers (in order,
 * as RESP2 does). So a rule like "answer the next EVALSHA with -NOSCRIPT" hits exactly
 * one reply, whatever else the connection carries (the handshake's INFO, a release).
 * A connection that subscribes (SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE) stops being paired
 * from then on: its later commands are forwarded and its messages and replies count
 * as unsolicited (only rules without a command name apply to them).
 *
 * Thread-safety: every function may be called from any thread but the relay's own.
 * The setters return once the relay thread has applied the change, so a fault is in
 * force for every byte the relay handles after the call returns.
 *
 * Failures of fr_start are printed to stderr; NULL is returned.
 */
#ifndef DLOCK_TEST_RELAY_H
#define DLOCK_TEST_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "support.h"

typedef struct fr_relay fr_relay;

/* Directions, for fr_hold. */
#define FR_UP   1 /* client to server: requests */
#define FR_DOWN 2 /* server to client: replies */

/* For rule counts: apply to every match until the rule is cleared. */
#define FR_EVERY (-1)

/* Canned replies. Each is one RESP reply (or what takes its place on the wire). */
typedef enum fr_canned {
    FR_LOADING,
    FR_BUSY,
    FR_MASTERDOWN,
    FR_TRYAGAIN,
    FR_CLUSTERDOWN,
    FR_READONLY,
    FR_OOM,
    FR_MISCONF,
    FR_NOSCRIPT,
    FR_NOAUTH,
    FR_WRONGPASS,
    FR_NOPERM,
    FR_WRONGTYPE,
    FR_MOVED,
    FR_ASK,
    FR_CROSSSLOT,
    FR_ERR,          /* a plain -ERR */
    FR_INTEGER,      /* ":42" */
    FR_BULK,         /* "$5 hello" */
    FR_NIL,          /* "$-1" */
    FR_STATUS,       /* "+OK" */
    FR_EMPTY_ARRAY,  /* "*0" */
    FR_HUGE_ARRAY,   /* "*2147483647": hiredis's default reader would calloc 16 GiB */
    FR_HUGE_BULK,    /* "$1000000000" followed by a stream of 10^9 bytes */
    FR_HTTP,         /* an HTTP/1.1 400 answer, then the connection closes */
    FR_HUGE_INTEGER, /* ":9007199254740991": as a fence, the year 2255 in microseconds */
    FR_CANNED_COUNT
} fr_canned;

/* Its name ("LOADING", "HUGE_ARRAY", ...). Static. */
const char *fr_canned_name(fr_canned c);
/* Its bytes (for FR_HUGE_BULK, the header only), *len set. Static. */
const char *fr_canned_bytes(fr_canned c, size_t *len);

/* What a rule does to the commands or replies it matches. */
enum fr_action {
    FR_REPLACE_INSTEAD, /* the command is not forwarded; the relay answers it with `canned` */
    FR_REPLACE_AFTER,   /* the command runs; its reply is dropped and `canned` sent instead */
    FR_RESET_REQUEST,   /* the connection is reset instead of forwarding the command */
    FR_RESET_REPLY,     /* the command runs; k bytes of its reply go out (0: none), then
                           the relay resets the connection */
    FR_CLOSE_AFTER      /* the command runs; k bytes of its reply go out, then the relay
                           closes the connection (a FIN, not a reset) */
};

typedef struct fr_rule {
    enum fr_action action;
    fr_canned canned; /* for the FR_REPLACE_* actions */
    long k;           /* for FR_CLOSE_AFTER and FR_RESET_REPLY: bytes of the reply sent
                         before the connection ends */
    int count;        /* matches it applies to (FR_EVERY: all); then it is spent */
    const char *cmd;  /* only commands with this name, case-insensitive; a trailing '*'
                         matches a prefix ("EVAL*": EVAL and EVALSHA); NULL or "": any,
                         including unsolicited replies. Copied. */
} fr_rule;

/* How connections that lost bytes to a blackhole behave when it ends. A real TCP
 * connection never loses bytes in the middle: it retransmits until the path heals or
 * it times out. The relay cannot retransmit what it dropped, so such a connection is
 * out of step for good; it is either reset, or left dead (dropping everything, as a
 * firewall that lost its connection-tracking entry does) for the client to detect. */
enum fr_heal { FR_HEAL_RESET = 0, FR_HEAL_DEAD = 1 };

/* What the relay has done since it started. */
typedef struct fr_stats {
    long accepted;           /* connections accepted */
    long open;               /* connections open now */
    long resets;             /* connections reset (RST) by the relay */
    long commands;           /* complete commands read from clients */
    long replies;            /* complete replies read from the server */
    long injected;           /* canned replies sent */
    long long up_bytes;      /* bytes written to the server */
    long long down_bytes;    /* bytes written to clients (canned ones included) */
    long long dropped_bytes; /* bytes read and dropped (blackhole, dead connections) */
} fr_stats;

/* Start a relay in front of 127.0.0.1:upstream_port, in pass-through. */
fr_relay *fr_start(int upstream_port);
/* The same in front of host:port (a name or an address, resolved once, here). */
fr_relay *fr_start_to(const char *host, int port);
/* Stop the thread, close every descriptor, free. NULL is a no-op. */
void fr_stop(fr_relay *r);

/* n redis-servers (support.h), each behind a relay of its own: urls gets the
 * relays' URLs joined by commas (what dlock_client_new takes). 0, or -1 with the
 * reason on stderr (what was started is stopped). */
int fr_cluster_start(int n, dh_server *srv, fr_relay **relays, char *urls, size_t size);
/* Stop the relays and the servers, and remove the servers' directories. */
void fr_cluster_stop(int n, dh_server *srv, fr_relay **relays);

/* The relay's port, and "redis://127.0.0.1:PORT" (valid while r lives). */
int fr_port(const fr_relay *r);
const char *fr_url(const fr_relay *r);

/* Clear every fault: no delay, no hold (held bytes go), no blackhole (healed as its
 * heal mode says), no trickle, no refusal, no rules. */
void fr_pass(fr_relay *r);
/* Delay bytes read from now on by up_ms (to the server) and down_ms (to the client). */
void fr_delay(fr_relay *r, int64_t up_ms, int64_t down_ms);
/* Hold the directions in dirs (FR_UP | FR_DOWN): bytes are read and kept, not sent. */
void fr_hold(fr_relay *r, int dirs);
/* Stop holding: what was held goes out at once, in order. */
void fr_release(fr_relay *r);
/* Blackhole on or off; heal says what becomes of the connections that lost bytes. */
void fr_blackhole(fr_relay *r, bool on, enum fr_heal heal);
/* Replies leave one byte every ms_per_byte ms (0: off; then what is queued goes at once). */
void fr_trickle(fr_relay *r, int64_t ms_per_byte);
/* Reset every connection as soon as it is accepted (a peer that refuses by RST). */
void fr_refuse(fr_relay *r, bool on);
/* Reset every open connection now. */
void fr_reset_now(fr_relay *r);

/* Add a rule (at most 16 live ones, spent rules not counted; the first that matches
 * applies). */
void fr_add_rule(fr_relay *r, const fr_rule *rule);
/* fr_add_rule with action FR_REPLACE_INSTEAD or FR_REPLACE_AFTER. */
void fr_replace(fr_relay *r, fr_canned what, enum fr_action how, int count, const char *cmd);
void fr_clear_rules(fr_relay *r);

void fr_get_stats(fr_relay *r, fr_stats *out);
/* Descriptors the relay holds now: its listening socket, its wake-up eventfd and two
 * per open connection (so a test can count the rest of /proc/self/fd). */
int fr_fds(fr_relay *r);

#endif /* DLOCK_TEST_RELAY_H */
