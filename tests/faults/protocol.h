/*
 * protocol.h: the fixture of scenario 13, protocol faults through the fault relay
 * (test_protocol.c, what the server answers; test_protocol_path.c, replies lost, cut
 * short, trickled or blackholed on their way back).
 *
 * One real redis-server behind a relay (relay.h), or three, each behind its own; one
 * client through them, with explicit deadlines. The helpers assert: include this
 * after <cmocka.h>, in a test linked with protocol.c.
 */
#ifndef DLOCK_FAULTS_PROTOCOL_H
#define DLOCK_FAULTS_PROTOCOL_H

#include "dlock.h"
#include "relay.h"
#include "support.h"

#include <stdint.h>

/* The lease of the tests' locks: far longer than the test waits for a key to go, so
 * that a key that is gone in time was released, not expired. */
#define PR_TTL_MS 10000

/* The servers, their relays (NULL when not started) and the client, through relay 0
 * only with one server, through all three with three. */
extern dh_server pr_srv[3];
extern fr_relay *pr_relay[3];
extern dlock_client *pr_c;

/* The client's per-node command deadline and its connect timeout. */
int64_t pr_timeout_ms(void);
int64_t pr_connect_ms(void);
/* The bound every call on a warm connection must keep: its deadline plus 100 ms. */
int64_t pr_call_bound_ms(void);

/* cmocka group setups: one server behind a relay, or three behind one each; and the
 * teardown of either. */
int pr_setup_one(void **state);
int pr_setup_three(void **state);
int pr_teardown_all(void **state);
/* A test's setup: no fault, and a warm connection (handshake done), so that a rule on
 * EVALSHA meets the call under test and nothing else. */
int pr_clean(void **state);

/* Wait up to 500 ms (times the slack) for key to be gone from server s. Returns how
 * long it took, or -1 if it is still there. */
int64_t pr_key_gone_ms(dh_server *s, const char *key);
/* dlock_acquire of name on c with the lease PR_TTL_MS and no wait; its code. */
int pr_acquire(dlock_client *c, const char *name, dlock_lock **l);
/* The client works: a full cycle, with replies that match their commands (the
 * server holds our token, inspect reports it, release removes it). */
void pr_assert_works(dlock_client *c, dh_server *s, const char *name);

#endif /* DLOCK_FAULTS_PROTOCOL_H */
