/*
 * topo.c: which topology a node has, chosen once from its URL when the node is made.
 *
 * A URL names one server (redis://, rediss://, unix), the master a set of Sentinels
 * name (redis-sentinel://), or a Redis Cluster (redis-cluster://); each is a table of
 * operations (dlock__topology in transport.h), kept in the file of its kind: node.c,
 * sentinel.c, cluster.c. conn.c and fanout.c call only the table, so a new kind is a
 * new table in a file of its own, a scheme in url.c, and one line here. This choice
 * sits above the three tables (it names them all) and below nothing else of the
 * transport, so the files that implement a kind and the generic ones never call each
 * other in a circle.
 */
#include "transport.h"

int dlock__topo_attach(dlock__node *node)
{
    const dlock__addr *a = &node->addr;
    node->topo = a->cluster    ? &dlock__topo_cluster
                 : a->sentinel ? &dlock__topo_sentinel
                               : &dlock__topo_direct;
    return node->topo->node_new != NULL ? node->topo->node_new(node) : DLOCK_OK;
}

void dlock__topo_detach(dlock__node *node)
{
    if (node->topo != NULL && node->topo->node_free != NULL)
        node->topo->node_free(node);
}
