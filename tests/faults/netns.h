/*
 * netns.h: the network-namespace tier of the fault suite (the partition scenario).
 *
 * A private network made of Linux network namespaces, all created by the test and
 * named "dlns<PID>-...", where PID is the test process:
 *
 *     dlns<PID>-sw      a bridge (br0): the one link layer everything is on
 *     dlns<PID>-n1..nN  one redis-server each, on 198.18.0.(1+i):6379
 *     dlns<PID>-c1..cM  client namespaces, 198.18.0.(101+j): worker processes run here
 *     dlns<PID>-adm     the test process itself, 198.18.0.200: setup, checks, admin
 *                       commands; never partitioned
 *
 * Each namespace reaches the bridge through its own veth pair (eth0 inside, a port of
 * br0 in the switch namespace). Addresses come from 198.18.0.0/24, inside the
 * 198.18.0.0/15 block that RFC 2544 reserves for benchmark networks: it is never
 * routed, and no namespace here has a route beyond 198.18.0.0/24 (no default route,
 * nothing in the host's own namespace). Nothing is configured outside the namespaces
 * the test creates, and deleting them deletes everything (their veths go with them).
 *
 * Faults, per node, applied with iptables-restore inside that node's namespace (one
 * atomic rule set per node, so a change never shows half a partition):
 *   DN_DROP   blackhole: the node's packets from and to a client are dropped;
 *   DN_RESET  packets from the client get a TCP reset (REJECT --reject-with tcp-reset),
 *             packets to it are dropped;
 * and a link fault: the node's eth0 down (flapping links). Healing flushes the rules
 * and brings links up.
 *
 * Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), ip (iproute2) and iptables-restore
 * (Debian: iptables). Without them dn_preflight fails with a message saying what is
 * missing: the tier never skips itself in silence.
 *
 * Cleanup: dn_teardown stops the servers and deletes the namespaces; an atexit hook
 * does the same if the test exits without it; a test killed outright leaves its
 * namespaces behind, and the next dn_setup deletes every "dlns<PID>-*" namespace whose
 * PID is no longer running (with the processes still inside them), before it builds its
 * own. Servers also die with the test (PR_SET_PDEATHSIG).
 */
#ifndef DLOCK_TEST_NETNS_H
#define DLOCK_TEST_NETNS_H

#include "support.h"

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define DN_NODES_MAX   5
#define DN_CLIENTS_MAX 4
#define DN_PORT        6379

enum dn_mode { DN_PASS = 0, DN_DROP = 1, DN_RESET = 2 };

typedef struct dn_net {
    bool active;     /* dn_setup started building it; dn_teardown not yet run */
    char prefix[32]; /* "dlns<PID>" */
    int nnodes, nclients;
    char sw[48], admin[48];
    char node[DN_NODES_MAX][48];
    char client[DN_CLIENTS_MAX][48];
    char node_addr[DN_NODES_MAX][16];
    char client_addr[DN_CLIENTS_MAX][16];
    char admin_addr[16];
    char urls[DN_NODES_MAX * 40];   /* "redis://198.18.0.1:6379,..." */
    dh_server server[DN_NODES_MAX]; /* node i's redis-server (tests/support) */
    /* The faults in force: cut[node][client], and whether a node's link is down. */
    int cut[DN_NODES_MAX][DN_CLIENTS_MAX];
    bool link_down[DN_NODES_MAX];
    int applied[DN_NODES_MAX][DN_CLIENTS_MAX]; /* what the node's rules say now */
    bool applied_down[DN_NODES_MAX];           /* and its link */
    int root_ns;                               /* the namespace the test started in */
} dn_net;

/* Check that this process can build the network: root, ip, iptables-restore,
 * redis-server. 0, or -1 after printing what is missing and how to get it. */
int dn_preflight(void);

/* Delete the leftovers of dead tests, build the network with nnodes servers and
 * nclients client namespaces, start a redis-server in each node namespace, and move
 * the calling thread (the test's main thread, before it starts any thread) into the
 * admin namespace. 0, or -1 after printing why (what was built is torn down). */
int dn_setup(dn_net *n, int nnodes, int nclients);

/* Stop the servers, return to the original namespace and delete every namespace of
 * the network. Safe to call twice and on a network that was only half built. */
void dn_teardown(dn_net *n);

/* Move the calling thread into client namespace j (a worker process, right after
 * fork). 0 or -1. */
int dn_enter_client(const dn_net *n, int j);

/* Set the fault between node i and client j (DN_PASS heals it); takes effect at the
 * next dn_apply. */
void dn_cut(dn_net *n, int i, int j, enum dn_mode mode);
/* The same for every client. */
void dn_cut_node(dn_net *n, int i, enum dn_mode mode);
/* Take node i's link down (or up again); takes effect at the next dn_apply. */
void dn_link(dn_net *n, int i, bool up);
/* Forget every fault (the next dn_apply heals everything). */
void dn_clear(dn_net *n);
/* Install the faults set since the last dn_apply: one iptables-restore per node whose
 * rules changed, then the link changes. 0, or -1 after printing why. */
int dn_apply(dn_net *n);

/* A connection from the admin namespace to node i, 2 s timeouts (redisFree it). NULL
 * after printing why. */
redisContext *dn_admin_connect(const dn_net *n, int i);

#endif /* DLOCK_TEST_NETNS_H */
