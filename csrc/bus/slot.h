/*
 * slot.h -- a peer slot named by (slot, id): finding it, locking it while it is still
 * that peer and connected, and freeing it once nothing names it (slot.c).
 *
 * Lock rules: each call takes at most the one slot's lock and returns with it released,
 * except b1_lock_named and b1_lock_live, which return holding it on success.  Calls only
 * queue.h below.
 */
#ifndef BUS1PY_SLOT_H
#define BUS1PY_SLOT_H
#include "layout.h"

int b1_peer_gone(void *base, uint64_t id);
struct b1_peer *b1_peer_at_slot(void *base, uint32_t slot);
int b1_lock_named(void *base, uint32_t slot, uint64_t id, struct b1_peer **out);
int b1_lock_live(void *base, uint32_t slot, uint64_t id, struct b1_peer **out);
int b1_check_live(void *base, uint32_t slot, uint64_t id);
int b1_peer_reclaim_locked(void *base, uint32_t slot, struct b1_peer *p);
int b1_peer_reclaim(void *base, uint32_t slot);

#endif
