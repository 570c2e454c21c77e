/*
 * node.h -- nodes and their lifetimes (node.c): creation, transfer and release of handles,
 * destruction, and the NODE_RELEASE notices the layers below hand up.
 *
 * Lock rules: node fields change under the owner's lock only; a notice or a destruction is
 * a transaction (tx.h), run with no lock held.
 */
#ifndef BUS1PY_NODE_H
#define BUS1PY_NODE_H
#include "handle.h"

void b1_notify_release(void *base, uint32_t node, uint32_t gen);
/* send every notice in nt (no lock held), and empty it */
void b1_notices_send_all(void *base, struct b1_notices *nt);
static inline void b1_notices_send(void *base, struct b1_notices *nt) {
    if (nt->n || nt->v != nt->inline_v) b1_notices_send_all(base, nt);
}
void b1_destroy_delivered(void *base, struct b1_peer *p, struct b1_entry *e);
int b1_release_wanted_locked(void *base, struct b1_peer *p, struct b1_entry *e);
/* how b1_destroy_nodes runs: an owner's destroy (the owner gets NODE_DESTROY too), a
 * disconnect (the peer DISCONNECTING, reading nothing more) or a reset (the peer ACTIVE,
 * its queue about to be flushed: the owner is not notified either) */
enum { B1_DESTROY_NOTIFY = 0, B1_DESTROY_DISCONNECT = 1, B1_DESTROY_RESET = 2 };
int b1_destroy_nodes(void *base, uint32_t slot, uint64_t id, const uint32_t *nodes, uint32_t n,
                     int disconnecting, uint64_t *stamp);
void b1_drop_peer_handles(void *base, uint32_t slot, uint64_t id);
void b1_renotify_releases(void *base);
uint32_t b1_nodes_reap(void *base);

#endif
