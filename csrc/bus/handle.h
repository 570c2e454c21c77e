/*
 * handle.h -- handles, a peer's references to nodes (handle.c), and the NODE_RELEASE
 * notices that dropping them owes.
 *
 * Lock rules: a handle's refs/pending and its node's fields and holder list change only
 * under the node owner's lock (b1_lock_owner, b1_lock_nodes); *_locked calls expect it held.  No other
 * lock is taken meanwhile.  b1_put_done runs with no lock held.
 *
 * Layering: below message.h and tx.h.  Sending a NODE_RELEASE is a transaction, above this
 * layer, so nothing here sends one: a notice is handed up in a b1_notices (bus1's
 * postponed notifications), and the caller that is above tx.h sends it with
 * b1_notices_send (node.h) once it holds no lock.
 */
#ifndef BUS1PY_HANDLE_H
#define BUS1PY_HANDLE_H
#include "layout.h"

/* a NODE_RELEASE owed to the owner of node (node, gen) */
struct b1_notice {
    uint32_t node, gen;
};
#define B1_NOTICES_INLINE 4
struct b1_notices {
    uint32_t n, cap;
    struct b1_notice *v; /* inline_v, or a heap array once more are owed */
    struct b1_notice inline_v[B1_NOTICES_INLINE];
};
#define B1_NOTICES(name) struct b1_notices name = {0, B1_NOTICES_INLINE, &name.inline_v[0], {{0, 0}}}
void b1_notices_push(void *base, struct b1_notices *nt, uint32_t node, uint32_t gen);

/* a node's holder list, walked at most max_handles steps (layout.h: bounds) */
#define FOR_HOLDERS(base, nd, i)                                                              \
    for (uint32_t i = (nd)->holders, i##_steps = 0;                                           \
         i && b1_step(&i##_steps, LIM(base).max_handles); i = HANDLE(base, i)->next_holder)

uint32_t b1_handle_alloc(void *base);
void b1_handle_free(void *base, uint32_t i);
uint64_t b1_handle_id(void *base, uint32_t i);
uint32_t b1_handle_index(void *base, uint64_t id);
uint32_t b1_handle_lookup(void *base, uint32_t slot, uint64_t peer_id, uint64_t id);
/* Lock peer p (slot) for work on its nodes: b1_lock, then, if a takeover left them
 * unverified, what a holder killed in the hold left of its nodes finished (handle.c): a
 * destruction cut in its stamp rolled forward or back, the holder lists rebuilt, the drops
 * left undone carried out.  Every lock under which node or handle fields change is taken
 * with it. */
int b1_lock_nodes(void *base, uint32_t slot, struct b1_peer *p);
/* the owner of node n locked, if the node is still generation gen; NULL otherwise */
struct b1_peer *b1_lock_owner(void *base, uint32_t n, uint32_t gen);
void b1_node_free_unnamed_locked(void *base, uint32_t n);
int b1_handle_put_locked(void *base, uint32_t hi, uint32_t held, uint32_t pending);
int b1_handle_get_locked(void *base, uint32_t n, uint32_t slot, uint64_t id, uint64_t charger, uint32_t *out);
/* finish what b1_handle_put_locked returned: the notice into nt, the reclaim now */
void b1_put_done(void *base, int put, uint32_t n, uint32_t gen, struct b1_notices *nt);

#endif
