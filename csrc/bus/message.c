/*
 * message.c -- the handles a message carries, per destination.
 *
 * Invariants:
 *   - A handle carried by a message is registered when the message is sent: the receiver's
 *     handle is created then (as `pending`), so a destruction that starts later notifies
 *     that receiver too.  At receive time the handle becomes held, or -- if the node's
 *     destruction is ordered before the message -- is dropped and reads HANDLE_INVALID.
 *   - A copy that is dropped (aborted, flushed, reaped, or after its node's destruction)
 *     undoes its registrations, each exactly once: an undone id reads HANDLE_INVALID.
 *   - A message that carries a destroyed node is stamped above the destruction.
 *
 * Lock rules: each carried handle under its node owner's lock, one at a time, with no
 * other lock held; the notices this owes are handed up in nt (handle.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include "alloc.h"
#include "message.h"
#include "queue.h"

/* ---- handles carried by messages ---- */

/* Undo one destination's registrations: its message was dropped or aborted.  Each id is
 * exchanged for HANDLE_INVALID, under its owner's lock, before its registration is undone:
 * whoever's exchange saw it undoes it, so a kill in between leaks that registration (in a
 * lock hold the next taker verifies), never undoes it twice. */
void b1_tx_unregister_handles(void *base, struct b1_msg *m, const struct b1_shape *s, uint32_t j,
                              struct b1_notices *nt) {
    if (j >= s->n_dests) return;
    struct b1_carried *c = shape_carried(m, s);
    uint64_t *ids = shape_ids(m, s, j);
    for (uint32_t k = 0; k < s->n_handles; k++) {
        struct b1_carried ck = c[k];
        if (__atomic_load_n(&ids[k], __ATOMIC_ACQUIRE) == B1_HANDLE_INVALID) continue;
        struct b1_peer *owner = b1_lock_owner(base, ck.node, ck.node_gen);
        uint64_t id = __atomic_exchange_n(&ids[k], B1_HANDLE_INVALID, __ATOMIC_ACQ_REL);
        if (!owner) continue;
        int put = 0;
        uint32_t hi = id == B1_HANDLE_INVALID ? 0 : b1_handle_index(base, id);
        if (hi && HANDLE(base, hi)->pending) put = b1_handle_put_locked(base, hi, 0, 1);
        b1_unlock(owner);
        b1_put_done(base, put, ck.node, ck.node_gen, nt);
    }
}

int b1_tx_register_handles(void *base, struct b1_tx *tx, const uint64_t *handles, uint32_t nh,
                           struct b1_notices *nt) {
    struct b1_msg *m = MSG(base, tx->msg);
    struct b1_shape s = {.len = m->len, .n_handles = nh, .n_dests = tx->n};
    struct b1_carried *c = shape_carried(m, &s);
    uint64_t *ids = shape_ids(m, &s, 0);
    for (uint64_t i = 0; i < (uint64_t)tx->n * nh; i++) ids[i] = B1_HANDLE_INVALID;
    for (uint32_t k = 0; k < nh; k++) {
        uint32_t hi = b1_handle_lookup(base, tx->sender_slot, tx->sender_id, handles[k]);
        int r = hi ? 0 : -ENXIO;
        struct b1_peer *owner = NULL;
        if (!r) {
            c[k].node = HANDLE(base, hi)->node;
            c[k].node_gen = HANDLE(base, hi)->node_gen;
            owner = b1_lock_owner(base, c[k].node, c[k].node_gen);
            if (!owner) r = -ENXIO;
        }
        if (!r) {
            struct b1_node *nd = NODE(base, c[k].node);
            if (nd->state == B1_NODE_DESTROYED) {
                /* stamp above the destruction: the handle is invalid for every receiver */
                if (tx->max_ts < nd->destroy_ts) tx->max_ts = nd->destroy_ts;
            } else {
                for (uint32_t j = 0; j < tx->n && !r; j++) {
                    uint32_t rh;
                    r = b1_handle_get_locked(base, c[k].node, tx->dests[j].peer_slot,
                                          tx->dests[j].peer_id, tx->sender_id, &rh);
                    if (r == -ESHUTDOWN) { /* a receiver leaving: its copy will be dropped */
                        r = 0;
                        continue;
                    }
                    if (!r) {
                        HANDLE(base, rh)->pending++;
                        ids[(uint64_t)j * nh + k] = b1_handle_id(base, rh);
                    }
                }
            }
            b1_unlock(owner);
        }
        if (r) {
            for (uint32_t j = 0; j < tx->n; j++) b1_tx_unregister_handles(base, m, &s, j, nt);
            return r;
        }
    }
    return 0;
}

/* Is the node's destruction key (destroy_ts, owner id, destroy_seq) below the entry's
 * message key (owner lock held)? */
static int destroyed_before(const struct b1_node *nd, const struct b1_entry *e) {
    if (nd->state != B1_NODE_DESTROYED) return 0;
    struct b1_entry destruction = {.ts = nd->destroy_ts, .sender = nd->owner_id,
                                   .seq = nd->destroy_seq, .idx = 0};
    struct b1_entry message = {.ts = e->ts, .sender = e->sender, .seq = e->seq, .idx = 1};
    return b1_key_less(&destruction, &message);
}

/* The receiver's ids for the handles a message carries to destination `key->idx`, deciding
 * validity now; `key` is the entry's key as read under the receiver's lock.  Each id is
 * exchanged for HANDLE_INVALID under its owner's lock before the handle changes: a kill in
 * between leaks the registration, never applies it twice. */
void b1_resolve_handles(void *base, const struct b1_entry *key, struct b1_msg *m,
                        const struct b1_shape *s, uint64_t *out, struct b1_notices *nt) {
    struct b1_carried *c = shape_carried(m, s);
    uint64_t *ids = shape_ids(m, s, key->idx);
    for (uint32_t k = 0; k < s->n_handles; k++) {
        struct b1_carried ck = c[k];
        out[k] = B1_HANDLE_INVALID;
        if (__atomic_load_n(&ids[k], __ATOMIC_ACQUIRE) == B1_HANDLE_INVALID) continue;
        struct b1_peer *owner = b1_lock_owner(base, ck.node, ck.node_gen);
        if (!owner) continue;
        struct b1_node *nd = NODE(base, ck.node);
        uint64_t id = __atomic_exchange_n(&ids[k], B1_HANDLE_INVALID, __ATOMIC_ACQ_REL);
        uint32_t hi = id == B1_HANDLE_INVALID ? 0 : b1_handle_index(base, id);
        int put = 0;
        if (hi && HANDLE(base, hi)->pending) {
            if (destroyed_before(nd, key)) {
                put = b1_handle_put_locked(base, hi, 0, 1);
            } else {
                HANDLE(base, hi)->pending--;
                HANDLE(base, hi)->refs++;
                out[k] = id;
            }
        }
        b1_unlock(owner);
        b1_put_done(base, put, ck.node, ck.node_gen, nt);
    }
}

/* Free a claimed entry nobody will read: a data message's registrations for its
 * destination undone first (a delivered one's were resolved, unless its receiver died
 * before it resolved them: undoing is an exchange per id, so it happens once). */
void b1_entry_drop(void *base, uint32_t i, struct b1_notices *nt) {
    struct b1_entry *e = ENTRY(base, i);
    struct b1_shape sh;
    uint32_t unit = e->msg, idx = e->idx; /* read once: checked, then used */
    if ((e->type & ~B1_ENTRY_RECEIVING) == B1_MSG_DATA && b1_msg_shape(base, unit, idx, &sh) && sh.n_handles)
        b1_tx_unregister_handles(base, MSG(base, unit), &sh, idx, nt);
    b1_entry_free(base, i);
}

/* Is a data entry, now at the front of its owner's queue, after its node's destruction?
 * (the receiver is the owner; its lock is held) */
int b1_data_dropped_locked(void *base, struct b1_entry *e) {
    struct b1_node *nd = NODE(base, e->node);
    if (nd->gen != e->node_gen || nd->state == B1_NODE_FREE) return 1;
    return destroyed_before(nd, e);
}
