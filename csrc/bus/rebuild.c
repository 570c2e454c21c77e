/*
 * rebuild.c -- gc for a bus that one process holds alone (b1_gc_sole): after the usual
 * reaping, every free list and usage counter is rebuilt from the objects' own states.
 *
 * Why: a process killed right after it popped a slot from a lock-free stack, before its
 * first store to it, leaves that slot looking free but on no free list; one killed after
 * it exchanged a reference and before it released it leaves a count one too high (the
 * release rules of layout.h: a kill leaks at most that one object, never frees twice).
 * Nothing can tell such a slot from one a live process is about to fill -- except that
 * there is no other live process.  The caller states it (a harness after its workers
 * exited, `bus1py fsck --repair`); the call refuses (EBUSY) when a connected peer still
 * names another live process.
 *
 * Invariants, restored here:
 *   - an entry is free iff its type is B1_ENTRY_FREE (msg 0); a record iff refs is 0;
 *     a node iff FREE; a handle iff neither held nor in flight; a peer slot iff FREE --
 *     and exactly the free ones are on their stacks (records on their class's);
 *   - a live record's refs is the number of entries naming it, and a handle's pending
 *     the number of carried ids naming it in those entries' rows (a registration
 *     exchanged away by a process killed before it undid it is undone here, with the
 *     NODE_RELEASE it owes);
 *   - every carved peer slot has its lock (one carved by a process killed before it
 *     initialised the lock is initialised here, FREE);
 *   - the usage counters are the sums of what is in use, and each peer slot's n_handles
 *     and n_nodes the handles naming it and the nodes it owns (a kill between a drop and
 *     its count leaves one too high, which would pin a gone peer's slot for ever).
 *
 * Lock rules: none -- nobody else runs on the bus.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "alloc.h"
#include "message.h"
#include "node.h"
#include "queue.h"
#include "peer.h"
#include "reap.h"

#define HEAD(tag, idx) (((uint64_t)(tag) << 32) | (uint64_t)(idx))

/* Make `stack` hold exactly the indices below `limit` (from 1 to bump) that `is_free` says,
 * linked through the word at `link` of each. */
static uint32_t relink(b1_stack *stack, char *table, size_t elem, size_t link, uint32_t bump,
                       int (*is_free)(void *base, uint32_t i), void *base) {
    uint32_t head = 0, n = 0;
    for (uint32_t i = bump; i-- > 1;) {
        if (!is_free(base, i)) continue;
        atomic_store((_Atomic uint32_t *)(table + (size_t)i * elem + link), head);
        head = i;
        n++;
    }
    uint64_t old = atomic_load(&stack->head);
    atomic_store(&stack->head, HEAD((old >> 32) + 1, head));
    return n;
}

static int entry_free(void *base, uint32_t i) { return ENTRY(base, i)->type == B1_ENTRY_FREE; }
static int node_free(void *base, uint32_t i) { return NODE(base, i)->state == B1_NODE_FREE; }
static int handle_free(void *base, uint32_t i) { return !HANDLE(base, i)->refs && !HANDLE(base, i)->pending; }
static int peer_free(void *base, uint32_t i) {
    return __atomic_load_n(&PEER(base, i)->lock_initialised, __ATOMIC_ACQUIRE) && PEER(base, i)->state == B1_PEER_FREE;
}

/* Is any connected peer still used by a live process other than this one? */
static int others_alive(void *base) {
    uint32_t bump = b1_bounded(&HDR(base)->peers_bump, LIM(base).max_peers);
    for (uint32_t s = 1; s < bump; s++) {
        struct b1_peer *p = PEER(base, s);
        if (!__atomic_load_n(&p->lock_initialised, __ATOMIC_ACQUIRE) || p->state == B1_PEER_FREE) continue;
        if (p->pinned && p->state == B1_PEER_ACTIVE) return 1;
        for (int i = 0; i < B1_PEER_PIDS; i++) {
            struct b1_holder h = p->holders[i]; /* read once */
            if (h.pid && h.pid != b1_pid() && b1_holder_alive(&h)) return 1;
        }
    }
    return 0;
}

/* Each handle's pending count set to the carried ids naming it: the excess of a
 * registration leaked in hand is undone as the holder would have (handle.c), so an unheld
 * handle is freed and the owner notified. */
static int recount_pending(void *base) {
    const struct b1_limits *l = &LIM(base);
    uint32_t entries = b1_bounded(&HDR(base)->entries_bump, l->max_entries);
    uint32_t handles = b1_bounded(&HDR(base)->handles_bump, l->max_handles);
    uint32_t *found = calloc((size_t)handles + 1, sizeof *found);
    if (!found) return -ENOMEM;
    for (uint32_t i = 1; i < entries; i++) {
        struct b1_entry *e = ENTRY(base, i);
        struct b1_shape sh;
        if (e->type == B1_ENTRY_FREE || !e->msg || (e->type & 0xff) != B1_MSG_DATA) continue;
        int saved = b1_bad;
        uint32_t unit = e->msg, idx = e->idx; /* read once: checked, then used */
        if (!b1_msg_shape(base, unit, idx, &sh)) {
            b1_bad = saved;
            continue;
        }
        uint64_t *ids = shape_ids(MSG(base, unit), &sh, idx);
        for (uint32_t k = 0; k < sh.n_handles; k++) {
            uint32_t hi = ids[k] == B1_HANDLE_INVALID ? 0 : b1_handle_index(base, ids[k]);
            if (hi && hi < handles) found[hi]++;
        }
    }
    B1_NOTICES(nt);
    for (uint32_t hi = 1; hi < handles; hi++) {
        struct b1_handle *hd = HANDLE(base, hi);
        if (hd->pending <= found[hi]) continue;
        uint32_t n = hd->node, gen = hd->node_gen;
        struct b1_peer *owner = b1_lock_owner(base, n, gen);
        if (!owner) continue;
        int put = hd->pending > found[hi] ? b1_handle_put_locked(base, hi, 0, hd->pending - found[hi]) : 0;
        b1_unlock(owner);
        b1_put_done(base, put, n, gen, &nt);
    }
    b1_notices_send(base, &nt);
    free(found);
    return 0;
}

/* A handle with counts whose node is free or of another generation names nothing: a node
 * creation cut between counting its owner's handle and making the node ALIVE (node.c) left
 * it.  With nobody else attached no creation is under way, so its counts go (the relink
 * below frees it, the recount below stops charging its peer). */
static void drop_orphan_handles(void *base) {
    const struct b1_limits *l = &LIM(base);
    uint32_t handles = b1_bounded(&HDR(base)->handles_bump, l->max_handles);
    for (uint32_t i = 1; i < handles; i++) {
        struct b1_handle *hd = HANDLE(base, i);
        if (!hd->refs && !hd->pending) continue;
        uint32_t n = hd->node;
        if (!n || n > l->max_nodes || NODE(base, n)->state == B1_NODE_FREE || NODE(base, n)->gen != hd->node_gen)
            hd->refs = hd->pending = 0;
    }
}

/* Each peer slot's n_handles and n_nodes set to what names it, and the gone peers nothing
 * names any more reclaimed. */
static int recount_peer_uses(void *base) {
    const struct b1_limits *l = &LIM(base);
    uint32_t peers = b1_bounded(&HDR(base)->peers_bump, l->max_peers);
    uint32_t handles = b1_bounded(&HDR(base)->handles_bump, l->max_handles);
    uint32_t nodes = b1_bounded(&HDR(base)->nodes_bump, l->max_nodes);
    uint32_t *n_handles = calloc((size_t)peers + 1, sizeof *n_handles);
    uint32_t *n_nodes = calloc((size_t)peers + 1, sizeof *n_nodes);
    uint32_t *shares = calloc(((size_t)peers + 1) * B1_CHARGERS, sizeof *shares);
    if (!n_handles || !n_nodes || !shares) {
        free(n_handles);
        free(n_nodes);
        free(shares);
        return -ENOMEM;
    }
    for (uint32_t i = 1; i < handles; i++) {
        struct b1_handle *hd = HANDLE(base, i);
        uint32_t owner = hd->peer_slot; /* read once: checked, then the index */
        if ((hd->refs || hd->pending) && owner < peers) {
            n_handles[owner]++;
            shares[(size_t)owner * B1_CHARGERS + hd->charger % B1_CHARGERS]++;
        }
    }
    for (uint32_t i = 1; i < nodes; i++) {
        struct b1_node *nd = NODE(base, i);
        uint32_t owner = nd->owner_slot; /* read once: checked, then the index */
        if (nd->state != B1_NODE_FREE && owner < peers) n_nodes[owner]++;
    }
    for (uint32_t s = 1; s < peers; s++) {
        struct b1_peer *p = PEER(base, s);
        if (!__atomic_load_n(&p->lock_initialised, __ATOMIC_ACQUIRE) || p->state == B1_PEER_FREE) continue;
        atomic_store(&p->n_handles, n_handles[s]);
        for (uint32_t c = 0; c < B1_CHARGERS; c++)
            atomic_store(&p->share_handles[c], shares[(size_t)s * B1_CHARGERS + c]);
        p->n_nodes = n_nodes[s];
    }
    free(n_handles);
    free(n_nodes);
    free(shares);
    for (uint32_t s = 1; s < peers; s++) b1_peer_carve_finish(base, s);
    b1_peer_reclaim_all(base);
    return 0;
}

int b1_gc_sole(void *base, struct b1_gc_stats *out) {
    if (others_alive(base)) return -EBUSY;
    b1_gc(base, out);
    if (recount_pending(base)) return -ENOMEM;
    drop_orphan_handles(base);
    if (recount_peer_uses(base)) return -ENOMEM;
    struct b1_header *h = HDR(base);
    const struct b1_limits *l = &LIM(base);
    uint32_t entries = b1_bounded(&h->entries_bump, l->max_entries);
    uint64_t units = l->pool_size >> B1_POOL_MIN_SHIFT, end = atomic_load(&h->pool_bump);
    if (end > l->pool_size) end = l->pool_size; /* read once, bounded */
    uint32_t *named = calloc(units + 1, sizeof *named);
    if (!named) return -ENOMEM;
    int64_t used_entries = 0, used_pool = 0;
    for (uint32_t i = 1; i < entries; i++) {
        struct b1_entry *e = ENTRY(base, i);
        /* popped and cut before its record was named: nobody's (gc freed the claimed ones) */
        if (e->type != B1_ENTRY_FREE && !e->msg) e->type = B1_ENTRY_FREE;
        if (e->type == B1_ENTRY_FREE) {
            e->msg = 0;
            e->queue = 0;
            continue;
        }
        used_entries++;
        uint32_t unit = e->msg; /* read once: checked, then the index */
        if (unit && unit <= units) named[unit]++;
    }
    /* the pool, record by record: references recounted, the unnamed given back */
    for (uint32_t c = 0; c < B1_POOL_CLASSES; c++) atomic_store(&h->pool_free[c].head, 0);
    uint64_t off = (uint64_t)1 << B1_POOL_MIN_SHIFT;
    while (off < end) {
        uint32_t unit = (uint32_t)(off >> B1_POOL_MIN_SHIFT);
        struct b1_msg *m = MSG(base, unit);
        uint32_t cls = 0;
        if (!b1_pool_record_at(base, off, end, &cls)) {
            /* a record cut short while it was carved: it spans to the next record (carving
             * is contiguous); given back whole if that is a class's size, else left out */
            uint64_t next = b1_pool_next_record(base, off, end);
            if (next >= end) {
                atomic_store(&h->pool_bump, off); /* the tail: carved again later */
                break;
            }
            for (cls = 0; cls < B1_POOL_CLASSES && B1_CLASS_BYTES(cls) != next - off; cls++) {
            }
            if (cls < B1_POOL_CLASSES) {
                m->size_class = (uint16_t)cls;
                atomic_store(&m->carved, B1_MSG_CARVED ^ unit);
                named[unit] = 0;
            } else {
                off = next;
                continue;
            }
        }
        atomic_store(&m->refs, named[unit]);
        if (named[unit]) {
            used_pool += (int64_t)B1_CLASS_BYTES(cls);
        } else {
            atomic_store(&m->stager, 0);
            uint64_t head = atomic_load(&h->pool_free[cls].head);
            atomic_store(&m->next_free, (uint32_t)head);
            atomic_store(&h->pool_free[cls].head, HEAD((head >> 32) + 1, unit));
        }
        off += B1_CLASS_BYTES(cls);
    }
    free(named);
    relink(&h->free_entries, (char *)ENTRY(base, 0), sizeof(struct b1_entry), offsetof(struct b1_entry, next_free),
           entries, entry_free, base);
    relink(&h->free_nodes, (char *)NODE(base, 0), sizeof(struct b1_node), offsetof(struct b1_node, next_free),
           b1_bounded(&h->nodes_bump, l->max_nodes), node_free, base);
    relink(&h->free_handles, (char *)HANDLE(base, 0), sizeof(struct b1_handle), offsetof(struct b1_handle, next_free),
           b1_bounded(&h->handles_bump, l->max_handles), handle_free, base);
    relink(&h->free_peers, (char *)PEER(base, 0), sizeof(struct b1_peer), offsetof(struct b1_peer, next_free),
           b1_bounded(&h->peers_bump, l->max_peers), peer_free, base);
    for (int i = 0; i < B1_USAGE_SHARDS; i++) {
        atomic_store(&h->usage[i].entries, i ? 0 : used_entries);
        atomic_store(&h->usage[i].pool, i ? 0 : used_pool);
    }
    atomic_store(&h->orphan_reaper, 0);
    return 0;
}
