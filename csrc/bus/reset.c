/*
 * reset.c -- bus1's PEER_RESET: a peer's queue flushed, its nodes destroyed and its
 * handles released, the peer itself staying connected and usable.
 *
 * Invariants:
 *   - A reset is, in order: the claim (resetter := this process, under the peer's lock),
 *     the destruction of the peer's nodes in one transaction (b1_destroy_nodes in its
 *     RESET mode: NODE_DESTROY to every holder, none to the peer, whose queue is flushed
 *     next), the flush of every committed entry of its queue in one lock hold, the release
 *     of every reference it holds (b1_drop_peer_handles, as a disconnect does), and the
 *     claim cleared.  The peer stays ACTIVE throughout: another call sees each step done
 *     or not, never half of one.
 *   - Each step can be run again: a reset whose resetter died is finished by gc
 *     (b1_peer_resume_resets), which claims it anew and runs every step; a node the dead
 *     resetter left DESTROYING is rolled back by gc first (node.c) or taken by the rerun.
 *   - A data message in flight (its copy a block, staged before the flush) is dropped, as
 *     bus1's reset drops it: the flush hands the block back to its transaction (queue 0,
 *     ts 0, its quota charge released; layout.h), whose commit then drops the copy -- its
 *     handle registrations undone, its descriptors left in the store as an orphan (fds.c)
 *     -- and gc frees it if the stager died.  A copy staged after the flush is sent after
 *     the reset.  Notices in flight (NODE_DESTROY, NODE_RELEASE) stay and are delivered:
 *     their bookkeeping (node.c) expects each to arrive.
 *   - Flushed committed entries are claimed in the lock hold that unlinks them, and freed (with
 *     their handle registrations and record references) after it (layout.h).
 *   - Zero-copy slices the peer's processes hold stay theirs until they give them back.
 *   - What another thread of the same peer makes while the reset runs (a node, a handle)
 *     may be destroyed or released by it, as with bus1's reset.
 *
 * Lock rules: the peer's own lock for the claim, the node list and the flush, one hold
 * each; the destruction and the release take owners' locks one at a time after it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include "alloc.h"
#include "message.h"
#include "node.h"
#include "queue.h"
#include "reset.h"
#include "slot.h"

#define ROUNDS 8 /* node collections retried when a concurrent destroy got there first */

/* The peer's nodes a reset destroys: ALIVE, or DESTROYING by a destroyer that died. */
static uint32_t collect_nodes(void *base, struct b1_peer *p, uint32_t slot, uint64_t id, uint32_t *nodes) {
    uint32_t bump = atomic_load(&HDR(base)->nodes_bump), n = 0;
    if (bump > LIM(base).max_nodes + 1) bump = LIM(base).max_nodes + 1;
    if (b1_lock_nodes(base, slot, p)) return 0;
    for (uint32_t i = 1; i < bump; i++) {
        struct b1_node *nd = NODE(base, i);
        if (nd->owner_slot == slot && nd->owner_id == id &&
            (nd->state == B1_NODE_ALIVE ||
             (nd->state == B1_NODE_DESTROYING && !b1_owner_alive(nd->destroyer))))
            nodes[n++] = i;
    }
    b1_unlock(p);
    return n;
}

/* Take every committed entry out of p's queue (p locked), claiming each, and hand every
 * data block back to its transaction (which drops it at its commit); unlocks, then frees
 * the committed ones.  Returns 0 or -ENOMEM (nothing taken). */
static int flush_committed(void *base, struct b1_peer *p) {
    uint32_t max = LIM(base).max_entries, cap = p->n_entries, n = 0, nb = 0, top = 0, steps = 0;
    if (cap > max) cap = max;
    uint32_t *stack = malloc(((size_t)cap + 1) * sizeof *stack), *taken = malloc(((size_t)cap + 1) * sizeof *taken);
    if (!stack || !taken) {
        b1_unlock(p);
        free(stack);
        free(taken);
        return -ENOMEM;
    }
    /* every node pushed once: the stack never holds more than the tree (cap, bounded) */
    if (p->root) stack[top++] = p->root;
    while (top && b1_step(&steps, max)) {
        uint32_t i = stack[--top];
        struct b1_entry *e = ENTRY(base, i);
        /* committed ones from the front of taken[], data blocks from its back */
        if (!(e->ts & 1) && n + nb < cap) taken[n++] = i;
        else if ((e->ts & 1) && e->type == B1_MSG_DATA && n + nb < cap) taken[cap - ++nb] = i;
        if (e->left && top < cap) stack[top++] = e->left;
        if (e->right && top < cap) stack[top++] = e->right;
    }
    int woke = 0;
    uint32_t kept = 0;
    for (uint32_t k = 0; k < nb && !b1_bad; k++) woke |= b1_queue_give_back_locked(base, p, taken[cap - 1 - k], 1);
    for (uint32_t k = 0; k < n && !b1_bad; k++) {
        struct b1_entry *e = ENTRY(base, taken[k]);
        struct b1_shape sh;
        if (!b1_msg_shape(base, e->msg, e->idx, &sh)) break; /* scribbled: leave the rest */
        woke |= b1_queue_remove_locked(base, p, taken[k]);
        if (e->type == B1_MSG_DATA) {
            b1_uncharge_locked(p, e->sender, sh.len, sh.n_fds);
        } else if (e->type == B1_MSG_NODE_DESTROY) {
            b1_destroy_delivered(base, p, e); /* read, as far as the node's freeing goes */
        } else if (e->type == B1_MSG_NODE_RELEASE) {
            b1_release_wanted_locked(base, p, e); /* withdrawn: a later one may be owed */
        }
        b1_entry_claim(e); /* ours until freed below */
        taken[kept++] = taken[k];
    }
    b1_unlock(p);
    if (woke) b1_wake(p);
    B1_NOTICES(nt);
    for (uint32_t k = 0; k < kept; k++) b1_entry_drop(base, taken[k], &nt);
    b1_notices_send(base, &nt);
    free(stack);
    free(taken);
    return 0;
}

int b1_peer_reset(void *base, uint32_t slot, uint64_t id) {
    struct b1_peer *p;
    int r = b1_lock_live(base, slot, id, &p);
    if (r) return r;
    uint64_t cur = atomic_load(&p->resetter), me = b1_self();
    if (cur && cur != me && b1_owner_alive(cur)) {
        b1_unlock(p);
        return -EBUSY; /* another process is resetting it */
    }
    atomic_store(&p->resetter, me);
    b1_unlock(p);

    uint32_t cap = LIM(base).max_nodes + 1;
    uint32_t *nodes = malloc((size_t)cap * sizeof *nodes);
    if (!nodes) return -ENOMEM; /* the claim stays: gc finishes the reset after this process */
    for (int round = 0; round < ROUNDS; round++) {
        uint32_t n = collect_nodes(base, p, slot, id, nodes);
        r = n ? b1_destroy_nodes(base, slot, id, nodes, n, B1_DESTROY_RESET, NULL) : 0;
        if (r != -ESTALE) break; /* ESTALE: one was destroyed meanwhile, collect again */
    }
    free(nodes);
    if (r) return r;

    if ((r = b1_lock_live(base, slot, id, &p))) return r;
    if ((r = flush_committed(base, p))) return r; /* unlocks */
    b1_drop_peer_handles(base, slot, id);

    if (b1_lock_live(base, slot, id, &p) == 0) {
        if (atomic_load(&p->resetter) == me) atomic_store(&p->resetter, 0);
        b1_unlock(p);
    }
    return 0;
}

uint32_t b1_peer_resume_resets(void *base) {
    uint32_t bump = atomic_load(&HDR(base)->peers_bump), done = 0;
    if (bump > LIM(base).max_peers + 1) bump = LIM(base).max_peers + 1;
    for (uint32_t s = 1; s < bump; s++) {
        struct b1_peer *p = b1_peer_at_slot(base, s);
        if (!p || __atomic_load_n(&p->state, __ATOMIC_SEQ_CST) != B1_PEER_ACTIVE) continue;
        uint64_t who = atomic_load(&p->resetter);
        if (!who || b1_owner_alive(who)) continue;
        done += b1_peer_reset(base, s, __atomic_load_n(&p->id, __ATOMIC_SEQ_CST)) == 0;
    }
    return done;
}
