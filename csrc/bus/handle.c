/*
 * handle.c -- handles: a peer's references to nodes, their ids, and the node owner's lock
 * that guards them.
 *
 * Invariants:
 *   - A node's fields, its holder list and the refs/pending counts of every handle to it
 *     are changed only under the node owner's lock; no other lock is held meanwhile.
 *   - A handle id is (gen << 24) | index; gen is bumped whenever the slot is reused, so an
 *     id is never reused.  A peer holds at most one handle per node.
 *   - The process that drops a node's last holder owes the owner its NODE_RELEASE
 *     (release_pending, release_owner; none for a quiet node): it is handed up as a notice (handle.h), never sent
 *     from here.  A notice that cannot be kept (no memory) is left to b1_gc, which queues
 *     the NODE_RELEASE of a node whose release_owner is not a live process.
 *   - A node slot is freed only when it is destroyed, the owner has read its NODE_DESTROY
 *     (or is gone), the owner's handle is released and no holder is left.
 *
 *   - A drop is decided before it is carried out: the NODE_RELEASE owed by the last
 *     holder is recorded (release_pending) before that holder leaves the list, and the
 *     holder's n_handles is given back after.  So a holder killed inside the owner's lock
 *     leaves at most a listed handle with no counts (a drop not carried out, or a handle
 *     made for a transfer that never counted it): the next b1_lock_nodes of the owner
 *     rebuilds the holder lists from the handles' own fields and finishes those drops,
 *     leaving the notice to b1_gc (release_owner 0).  Anything else a kill there leaves
 *     is a leak of one handle slot or one count, never a double free (b1_gc_sole).
 *
 * Lock rules: the node owner's lock around every *_locked call, taken with b1_lock_nodes;
 * a gone holder's slot is reclaimed (its own lock) only after that lock is released
 * (b1_put_done).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "alloc.h"
#include "handle.h"
#include "queue.h"
#include "slot.h"

#define PUT_RELEASE 1 /* the node lost its last non-owner reference: notify the owner */
#define PUT_RECLAIM 2 /* a gone peer lost its last handle: its slot may be free (slot << 8) */

/* ---- handles ---- */

uint32_t b1_handle_alloc(void *base) {
    struct b1_header *h = HDR(base);
    uint32_t i = b1_alloc_index(base, &h->free_handles, &h->handles_bump, LIM(base).max_handles + 1,
                                offsetof(struct b1_handle, next_free), sizeof(struct b1_handle),
                                (char *)HANDLE(base, 0));
    if (i) {
        struct b1_handle *hd = HANDLE(base, i);
        hd->gen++;
        hd->refs = 0;
        hd->pending = 0;
        hd->next_holder = 0;
        atomic_store(&hd->dead, 0);
    }
    return i;
}

void b1_handle_free(void *base, uint32_t i) {
    struct b1_handle *hd = HANDLE(base, i);
    hd->refs = 0;
    hd->pending = 0;
    b1_free_index(&HDR(base)->free_handles, i, &hd->next_free);
}

uint64_t b1_handle_id(void *base, uint32_t i) {
    return ((uint64_t)HANDLE(base, i)->gen << B1_HANDLE_INDEX_BITS) | i;
}

uint32_t b1_handle_index(void *base, uint64_t id) {
    uint32_t i = (uint32_t)(id & B1_HANDLE_INDEX_MASK);
    if (i == 0 || i > LIM(base).max_handles) return 0;
    return (id >> B1_HANDLE_INDEX_BITS) == HANDLE(base, i)->gen ? i : 0;
}

/* The handle slot behind an id, if the id is the caller's and held; 0 otherwise. */
uint32_t b1_handle_lookup(void *base, uint32_t slot, uint64_t peer_id, uint64_t id) {
    uint32_t i = b1_handle_index(base, id);
    if (!i) return 0;
    struct b1_handle *hd = HANDLE(base, i);
    if (hd->peer_slot != slot || hd->peer_id != peer_id || hd->refs == 0) return 0;
    return i;
}

/* Lock the owner of node n (any owner state) if the node is still generation gen. */
struct b1_peer *b1_lock_owner(void *base, uint32_t n, uint32_t gen) {
    struct b1_node *nd = NODE(base, n);
    uint32_t slot = nd->owner_slot;
    if (!slot || slot > LIM(base).max_peers) return NULL;
    struct b1_peer *p = PEER(base, slot);
    if (b1_lock_nodes(base, slot, p)) return NULL;
    if (nd->gen != gen || nd->owner_slot != slot || nd->state == B1_NODE_FREE) {
        b1_unlock(p);
        return NULL;
    }
    return p;
}

/* Free a destroyed node nothing names any more (the owner slot's lock held); the last
 * node of a gone owner frees the owner's slot too. */
void b1_node_free_unnamed_locked(void *base, uint32_t n) {
    struct b1_node *nd = NODE(base, n);
    if (nd->state == B1_NODE_DESTROYED && !nd->holders && !nd->owner_handle_live && nd->owner_notified) {
        struct b1_peer *owner = PEER(base, nd->owner_slot);
        nd->state = B1_NODE_FREE;
        b1_free_index(&HDR(base)->free_nodes, n, &nd->next_free);
        if (--owner->n_nodes == 0) b1_peer_reclaim_locked(base, nd->owner_slot, owner);
    }
}

/* Finish what b1_handle_put_locked asked for, with no lock held. */
void b1_put_done(void *base, int put, uint32_t n, uint32_t gen, struct b1_notices *nt) {
    if (put & PUT_RELEASE) b1_notices_push(base, nt, n, gen);
    if (put & PUT_RECLAIM) b1_peer_reclaim(base, (uint32_t)put >> 8);
}

void b1_notices_push(void *base, struct b1_notices *nt, uint32_t node, uint32_t gen) {
    if (nt->n == nt->cap) {
        struct b1_notice *v = malloc(2 * nt->cap * sizeof *v);
        if (!v) { /* b1_gc sends it: no live process owes it any more */
            __atomic_store_n(&NODE(base, node)->release_owner, 0, __ATOMIC_RELAXED);
            return;
        }
        memcpy(v, nt->v, nt->n * sizeof *v);
        if (nt->v != nt->inline_v) free(nt->v);
        nt->v = v;
        nt->cap *= 2;
    }
    nt->v[nt->n++] = (struct b1_notice){node, gen};
}

/* Drop `held` references and `pending` in-flight ones of handle hi (owner lock held). */
int b1_handle_put_locked(void *base, uint32_t hi, uint32_t held, uint32_t pending) {
    struct b1_handle *hd = HANDLE(base, hi);
    struct b1_node *nd = NODE(base, hd->node);
    hd->refs -= held;
    hd->pending -= pending;
    if (hd->refs || hd->pending) return 0;
    int result = 0;
    if (b1_handle_id(base, hi) == nd->owner_handle) {
        nd->owner_handle_live = 0;
    } else {
        if (nd->holders == hi && !hd->next_holder && nd->state == B1_NODE_ALIVE && !nd->release_pending &&
            !(nd->flags & B1_NODE_QUIET)) {
            nd->release_pending = 1;
            nd->release_owner = b1_self();
            result = PUT_RELEASE;
        }
        uint32_t *link = &nd->holders;
        uint32_t steps = 0;
        while (*link && *link != hi && b1_step(&steps, LIM(base).max_handles))
            link = &HANDLE(base, *link)->next_holder;
        if (*link == hi) *link = hd->next_holder;
    }
    /* seq_cst, then the state: see b1_peer_reclaim_locked */
    struct b1_peer *holder = PEER(base, hd->peer_slot);
    b1_uncharge_handle(holder, hd->charger);
    if (atomic_fetch_sub(&holder->n_handles, 1) == 1 &&
        __atomic_load_n(&holder->state, __ATOMIC_SEQ_CST) == B1_PEER_DISCONNECTED)
        result |= PUT_RECLAIM | (int)(hd->peer_slot << 8);
    uint32_t n = hd->node;
    b1_handle_free(base, hi);
    b1_node_free_unnamed_locked(base, n);
    return result;
}

/* The handle of peer (slot, id) for node n, created if it has none (owner lock held) and
 * charged to the share of `charger` (queue.h). */
int b1_handle_get_locked(void *base, uint32_t n, uint32_t slot, uint64_t id, uint64_t charger, uint32_t *out) {
    struct b1_node *nd = NODE(base, n);
    if (slot == nd->owner_slot && id == nd->owner_id) {
        if (!nd->owner_handle_live) return -ESTALE;
        *out = (uint32_t)(nd->owner_handle & B1_HANDLE_INDEX_MASK);
        return 0;
    }
    FOR_HOLDERS(base, nd, i)
        if (HANDLE(base, i)->peer_slot == slot && HANDLE(base, i)->peer_id == id) {
            *out = i;
            return 0;
        }
    struct b1_peer *to = PEER(base, slot);
    /* counted first, then the peer checked (seq_cst): a slot being reclaimed either sees
     * the count or is seen here (b1_peer_reclaim_locked) */
    if (b1_charge_handle(to, charger)) return -EDQUOT;
    uint32_t share = (uint32_t)(charger % B1_CHARGERS);
    if (__atomic_load_n(&to->id, __ATOMIC_SEQ_CST) != id ||
        __atomic_load_n(&to->state, __ATOMIC_SEQ_CST) != B1_PEER_ACTIVE) {
        b1_uncharge_handle(to, share);
        atomic_fetch_sub(&to->n_handles, 1);
        return -ESHUTDOWN;
    }
    uint32_t hi = b1_handle_alloc(base); /* lock-free: allowed under the owner's lock */
    if (!hi) {
        b1_uncharge_handle(to, share);
        atomic_fetch_sub(&to->n_handles, 1);
        return -ENOSPC;
    }
    struct b1_handle *hd = HANDLE(base, hi);
    hd->charger = share;
    hd->peer_id = id;
    hd->peer_slot = slot;
    hd->node = n;
    hd->node_gen = nd->gen;
    hd->next_holder = nd->holders;
    nd->holders = hi;
    nd->holders_version++;
    *out = hi;
    return 0;
}

/* ---- after a takeover of an owner's lock ---- */

/* drops[] grown by one; with no memory the drop is left undone (a leak for b1_gc_sole) and
 * the walk goes on, so every list is still rebuilt */
static void push_drop(uint32_t **drops, uint32_t *n, uint32_t *cap, uint32_t hi) {
    if (*n == *cap) {
        uint32_t want = 2 * *cap + 8, *more = realloc(*drops, want * sizeof *more);
        if (!more) return;
        *drops = more;
        *cap = want;
    }
    (*drops)[(*n)++] = hi;
}

static int cmp_index(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Is handle hi one of node n's, with no counts (a drop a dead holder did not carry out)? */
static int unheld(void *base, uint32_t hi, uint32_t n) {
    if (!hi || hi > LIM(base).max_handles) return 0;
    struct b1_handle *hd = HANDLE(base, hi);
    return hd->node == n && hd->node_gen == NODE(base, n)->gen && !hd->refs && !hd->pending;
}

/* The drop of handle hi carried out: it is on no list and has no counts (owner lock held).
 * The NODE_RELEASE it may owe was recorded when it was found, for b1_gc to queue
 * (release_owner 0: no live owner). */
static void finish_drop_locked(void *base, uint32_t hi) {
    struct b1_handle *hd = HANDLE(base, hi);
    uint32_t n = hd->node;
    struct b1_node *nd = NODE(base, n);
    if (b1_handle_id(base, hi) == nd->owner_handle) nd->owner_handle_live = 0;
    /* a gone holder's slot this frees is reclaimed by b1_gc (one lock at a time here) */
    b1_uncharge_handle(PEER(base, hd->peer_slot), hd->charger);
    atomic_fetch_sub(&PEER(base, hd->peer_slot)->n_handles, 1);
    b1_handle_free(base, hi);
    b1_node_free_unnamed_locked(base, n);
}

/* A destruction cut inside its stamp's hold (node.c destroy_stamp_check): outside that
 * hold a DESTROYING node has no destruction key, so one with a key was being stamped when
 * the holder died.  Its record's stamp decides: stamped, the node is DESTROYED as the
 * holders will be told; not, the key is cleared and the node stays DESTROYING for b1_gc
 * to make ALIVE again (b1_nodes_reap), while the reaper removes the record's blocks.
 * The record is still there: its blocks are committed only after this ran (reap.c). */
static void finish_destruction_locked(void *base, struct b1_node *nd) {
    if (nd->state != B1_NODE_DESTROYING || !nd->destroy_ts) return;
    uint32_t m = nd->destroy_msg;
    if (!m || __atomic_load_n(&MSG(base, m)->ts, __ATOMIC_ACQUIRE) == nd->destroy_ts) {
        nd->state = B1_NODE_DESTROYED;
    } else {
        nd->destroy_ts = 0;
        nd->destroy_seq = 0;
    }
}

/* After a takeover of the slot's lock (held): destructions cut in their stamp finished
 * (above); the holder lists of every node of `slot` rebuilt from the handles' own fields (a
 * list is the node's handles with counts, other than the owner's), and the drops a killed
 * holder left listed carried out, the NODE_RELEASE they owe recorded first.  Handles of
 * other nodes change meanwhile under their owners' locks, but a handle being reused gets
 * its counts only after its fields name its new node (b1_handle_alloc zeroes them; the
 * counts are raised by callers in other files, after b1_handle_get_locked returns), so
 * none is taken for one of these nodes. */
static void verify_nodes_locked(void *base, uint32_t slot) {
    const struct b1_limits *l = &LIM(base);
    uint32_t nodes = b1_bounded(&HDR(base)->nodes_bump, l->max_nodes);
    uint32_t handles = b1_bounded(&HDR(base)->handles_bump, l->max_handles);
    uint32_t *drops = NULL, n_drops = 0, cap = 0;
    for (uint32_t n = 1; n < nodes; n++) {
        struct b1_node *nd = NODE(base, n);
        if (nd->owner_slot != slot || nd->state == B1_NODE_FREE) continue;
        finish_destruction_locked(base, nd);
        uint32_t own = (uint32_t)(nd->owner_handle & B1_HANDLE_INDEX_MASK), steps = 0, dropped = 0, held = 0;
        if (nd->owner_handle_live && b1_handle_index(base, nd->owner_handle) && unheld(base, own, n))
            push_drop(&drops, &n_drops, &cap, own);
        for (uint32_t hi = nd->holders; hi && hi <= l->max_handles && b1_step(&steps, l->max_handles);
             hi = HANDLE(base, hi)->next_holder) {
            struct b1_handle *hd = HANDLE(base, hi);
            if (unheld(base, hi, n)) {
                push_drop(&drops, &n_drops, &cap, hi);
                dropped = 1;
            } else if (hd->node == n && hd->node_gen == nd->gen) {
                held = 1; /* a stale link (another node's handle) is neither */
            }
        }
        /* the NODE_RELEASE the drops owe is recorded before the list that finds them is
         * cleared: a verifier killed from here on leaves them a leak, never the notice lost */
        if (dropped && !held && nd->state == B1_NODE_ALIVE && !nd->release_pending && !(nd->flags & B1_NODE_QUIET)) {
            nd->release_pending = 1;
            nd->release_owner = 0;
        }
        nd->holders = 0;
        nd->holders_version++; /* a destruction collecting holders starts again */
    }
    for (uint32_t hi = 1; hi < handles; hi++) {
        struct b1_handle *hd = HANDLE(base, hi);
        if (!hd->refs && !hd->pending) continue;
        uint32_t n = hd->node;
        if (!n || n >= nodes) continue;
        struct b1_node *nd = NODE(base, n);
        if (nd->owner_slot != slot || nd->state == B1_NODE_FREE || hd->node_gen != nd->gen ||
            b1_handle_id(base, hi) == nd->owner_handle)
            continue;
        hd->next_holder = nd->holders;
        nd->holders = hi;
    }
    if (drops) qsort(drops, n_drops, sizeof *drops, cmp_index); /* a looping list named one twice */
    for (uint32_t k = 0; k < n_drops; k++)
        if (!k || drops[k] != drops[k - 1]) finish_drop_locked(base, drops[k]);
    free(drops);
}

int b1_lock_nodes(void *base, uint32_t slot, struct b1_peer *p) {
    int r = b1_lock(base, p);
    if (!r && __builtin_expect(p->unverified, 0)) {
        verify_nodes_locked(base, slot);
        p->unverified = 0;
    }
    return r;
}
