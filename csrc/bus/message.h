/*
 * message.h -- the handles a message carries (message.c): registered for every
 * destination at the send, resolved at the receive, undone when a copy is dropped.
 *
 * Lock rules: each handle is registered, resolved or undone under its node owner's lock,
 * one at a time; the caller holds no lock, except b1_data_dropped_locked (the receiver's,
 * which owns the node).  NODE_RELEASE notices go into nt (handle.h).
 */
#ifndef BUS1PY_MESSAGE_H
#define BUS1PY_MESSAGE_H
#include "handle.h"

int b1_tx_register_handles(void *base, struct b1_tx *tx, const uint64_t *handles, uint32_t nh,
                           struct b1_notices *nt);
void b1_tx_unregister_handles(void *base, struct b1_msg *m, const struct b1_shape *s,
                              uint32_t dest_index, struct b1_notices *nt);
void b1_resolve_handles(void *base, const struct b1_entry *key, struct b1_msg *m,
                        const struct b1_shape *s, uint64_t *out, struct b1_notices *nt);
int b1_data_dropped_locked(void *base, struct b1_entry *e);
/* free claimed entry i, which nobody will read, undoing its registrations (no lock held) */
void b1_entry_drop(void *base, uint32_t i, struct b1_notices *nt);

#endif
