/*
 * slot.c -- a peer slot named by (slot, id): finding it, locking it while it still holds
 * that peer, and putting it back on the free stack once nothing names it.
 *
 * Invariants:
 *   - Peer ids are never reused; every check of a (slot, id) compares the id under the
 *     slot's lock, so a stale id reads ESHUTDOWN, never the slot's new peer.
 *   - A slot is FREE again only when its peer is DISCONNECTED and nothing names it: no
 *     handle of the peer, held or in flight (n_handles), no node it owned (n_nodes),
 *     nothing in its queue.  The last of these to go reclaims it.
 *
 * Lock rules: the one slot's lock, and only the free stack (lock-free) under it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include "alloc.h"
#include "queue.h"
#include "slot.h"

/* Free the slot of a DISCONNECTED peer if nothing names it any more (its lock held):
 * no handle of it (held or in flight), no node it owned, nothing in its queue.
 * The state goes FREE before n_handles is read, and a new handle re-checks the state
 * after counting itself in n_handles (handle.c b1_handle_get_locked): one of the two sees the
 * other, so no handle is ever made for a reclaimed slot. */
int b1_peer_reclaim_locked(void *base, uint32_t slot, struct b1_peer *p) {
    if (p->state != B1_PEER_DISCONNECTED) return 0;
    __atomic_store_n(&p->state, B1_PEER_FREE, __ATOMIC_SEQ_CST);
    if (atomic_load(&p->n_handles) || p->n_nodes || p->root) {
        __atomic_store_n(&p->state, B1_PEER_DISCONNECTED, __ATOMIC_SEQ_CST);
        return 0;
    }
    b1_free_index(&HDR(base)->free_peers, slot, &p->next_free); /* lock-free: allowed */
    return 1;
}

int b1_peer_reclaim(void *base, uint32_t slot) {
    struct b1_peer *p = b1_peer_at_slot(base, slot);
    if (!p || __atomic_load_n(&p->state, __ATOMIC_SEQ_CST) != B1_PEER_DISCONNECTED) return 0;
    if (b1_lock(base, p)) return 0;
    int r = b1_peer_reclaim_locked(base, slot, p);
    b1_unlock(p);
    return r;
}

/* The error for a (slot, id) whose slot holds another peer: the id's peer is gone if the
 * bus ever issued it (ESHUTDOWN), otherwise the caller made the id up (EINVAL). */
int b1_peer_gone(void *base, uint64_t id) {
    return id && id < atomic_load(&HDR(base)->next_peer_id) ? -ESHUTDOWN : -EINVAL;
}

struct b1_peer *b1_peer_at_slot(void *base, uint32_t slot) {
    if (slot == 0 || slot > LIM(base).max_peers) return NULL;
    struct b1_peer *p = PEER(base, slot);
    return __atomic_load_n(&p->lock_initialised, __ATOMIC_ACQUIRE) ? p : NULL;
}

/* Lock a peer and check it is still the one named by id, in any state. */
int b1_lock_named(void *base, uint32_t slot, uint64_t id, struct b1_peer **out) {
    struct b1_peer *p = b1_peer_at_slot(base, slot);
    if (!p) return -EINVAL;
    int r = b1_lock(base, p);
    if (r) return r;
    if (p->id != id) {
        b1_unlock(p);
        return b1_peer_gone(base, id);
    }
    *out = p;
    return 0;
}

/* Lock a peer and check it is still the one named by id and connected. */
int b1_lock_live(void *base, uint32_t slot, uint64_t id, struct b1_peer **out) {
    struct b1_peer *p;
    int r = b1_lock_named(base, slot, id, &p);
    if (r) return r;
    if (p->state != B1_PEER_ACTIVE) {
        b1_unlock(p);
        return -ESHUTDOWN;
    }
    *out = p;
    return 0;
}

/* Is the peer (slot, id) still connected?  0, or the error of b1_lock_live. */
int b1_check_live(void *base, uint32_t slot, uint64_t id) {
    struct b1_peer *p;
    int r = b1_lock_live(base, slot, id, &p);
    if (!r) b1_unlock(p);
    return r;
}
