/*
 * bus.c -- creating and attaching a bus segment, peers, nodes and handles.
 *
 * Invariants:
 *   - A peer slot's mutex is initialised once, when the slot is first carved, and never
 *     again: a slot is only ever recycled while unlocked, so re-initialising could corrupt
 *     a concurrent waiter.  Peer ids come from one counter and are never reused.
 *   - A handle id is (gen << 24) | index; gen is bumped whenever the slot is recycled, so an
 *     id is never reused and a stale id is told apart from the slot's new holder.
 *   - A node's fields and its holder list are changed only under its owner's lock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include "layout.h"

static uint64_t align64(uint64_t x) { return (x + 63) & ~(uint64_t)63; }

static void layout_offsets(const struct b1_limits *l, uint64_t *off) {
    uint64_t o = align64(sizeof(struct b1_header));
    off[0] = o; o = align64(o + (uint64_t)(l->max_peers + 1) * sizeof(struct b1_peer));
    off[1] = o; o = align64(o + (uint64_t)(l->max_nodes + 1) * sizeof(struct b1_node));
    off[2] = o; o = align64(o + (uint64_t)(l->max_handles + 1) * sizeof(struct b1_handle));
    off[3] = o; o = align64(o + (uint64_t)(l->max_entries + 1) * sizeof(struct b1_entry));
    off[4] = (o + 4095) & ~(uint64_t)4095;
    off[5] = off[4] + l->pool_size;
}

static int limits_valid(const struct b1_limits *l) {
    if (!l->max_peers || !l->max_nodes || !l->max_handles || !l->max_entries) return 0;
    if (l->max_handles >= B1_HANDLE_INDEX_MASK) return 0;
    if (!l->max_dests || l->max_dests > l->max_entries) return 0;
    if (l->pool_size < 4096 || l->pool_size > ((uint64_t)1 << 38)) return 0;
    if ((uint64_t)l->max_payload + sizeof(struct b1_msg) >
        ((uint64_t)1 << (B1_POOL_CLASSES - 1 + B1_POOL_MIN_SHIFT)))
        return 0;
    if (l->inject > B1_INJECT_FIFO) return 0;
    return 1;
}

uint64_t b1_segment_size(const struct b1_limits *l) {
    if (!limits_valid(l)) return 0;
    uint64_t off[6];
    layout_offsets(l, off);
    return off[5];
}

int b1_init(void *base, uint64_t size, const struct b1_limits *l) {
    if (!limits_valid(l) || size < b1_segment_size(l)) return -EINVAL;
    struct b1_header *h = HDR(base);
    uint64_t off[6];
    layout_offsets(l, off);
    memset(h, 0, sizeof(*h));
    h->version = B1_VERSION;
    h->header_size = sizeof(*h);
    h->segment_size = size;
    h->limits = *l;
    h->off_peers = off[0];
    h->off_nodes = off[1];
    h->off_handles = off[2];
    h->off_entries = off[3];
    h->off_pool = off[4];
    atomic_store(&h->next_peer_id, 1);
    /* index 0 of each table stands for "none" */
    atomic_store(&h->peers_bump, 1);
    atomic_store(&h->nodes_bump, 1);
    atomic_store(&h->handles_bump, 1);
    atomic_store(&h->entries_bump, 1);
    __atomic_store_n(&h->magic, B1_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

int b1_attach(void *base, uint64_t size) {
    struct b1_header *h = HDR(base);
    if (size < sizeof(*h)) return -EBADMSG;
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != B1_MAGIC) return -EBADMSG;
    if (h->version != B1_VERSION || h->header_size != sizeof(*h)) return -EPROTO;
    if (h->segment_size > size) return -EBADMSG;
    return 0;
}

int b1_bus_info(void *base, struct b1_bus_info *out) {
    struct b1_header *h = HDR(base);
    out->version = h->version;
    out->inject = h->limits.inject;
    out->segment_size = h->segment_size;
    out->peers_used = atomic_load(&h->peers_bump) - 1;
    out->entries_used = atomic_load(&h->entries_used);
    out->pool_used = atomic_load(&h->pool_used);
    out->pool_size = h->limits.pool_size;
    out->limits = h->limits;
    return 0;
}

/* ---- peers ---- */

static int init_peer_lock(struct b1_peer *p) {
    pthread_mutexattr_t a;
    int r = pthread_mutexattr_init(&a);
    if (!r) r = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    if (!r) r = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (!r) r = pthread_mutex_init(&p->lock, &a);
    pthread_mutexattr_destroy(&a);
    return -r;
}

int b1_peer_new(void *base, uint32_t quota_messages, uint32_t quota_handles,
                uint64_t quota_bytes, uint32_t *slot, uint64_t *id) {
    struct b1_header *h = HDR(base);
    uint32_t cur = atomic_load(&h->peers_bump);
    do {
        if (cur > h->limits.max_peers) return -ENOSPC;
    } while (!atomic_compare_exchange_weak(&h->peers_bump, &cur, cur + 1));
    struct b1_peer *p = PEER(base, cur);
    int r = init_peer_lock(p);
    if (r) return r;
    r = b1_lock(p);
    if (r) return r;
    p->lock_initialised = 1;
    p->id = atomic_fetch_add(&h->next_peer_id, 1);
    p->quota_messages = quota_messages ? quota_messages : h->limits.quota_messages;
    p->quota_handles = quota_handles ? quota_handles : h->limits.quota_handles;
    p->quota_bytes = quota_bytes ? quota_bytes : h->limits.quota_bytes;
    p->state = B1_PEER_ACTIVE;
    *slot = cur;
    *id = p->id;
    b1_unlock(p);
    return 0;
}

/* Lock a peer and check it is still the one named by id and connected. */
static int lock_live(void *base, uint32_t slot, uint64_t id, struct b1_peer **out) {
    struct b1_header *h = HDR(base);
    if (slot == 0 || slot > h->limits.max_peers) return -EINVAL;
    struct b1_peer *p = PEER(base, slot);
    if (!p->lock_initialised) return -EINVAL;
    int r = b1_lock(p);
    if (r) return r;
    if (p->id != id) {
        b1_unlock(p);
        return -EINVAL;
    }
    if (p->state != B1_PEER_ACTIVE) {
        b1_unlock(p);
        return -ESHUTDOWN;
    }
    *out = p;
    return 0;
}

int b1_peer_disconnect(void *base, uint32_t slot, uint64_t id) {
    struct b1_peer *p;
    int r = lock_live(base, slot, id, &p);
    if (r) return r;
    p->state = B1_PEER_DISCONNECTED;
    /* flush: committed entries and blocks alike (a sender whose block vanished finds
     * the peer disconnected at commit and drops its copy) */
    while (p->root) {
        uint32_t e = p->front;
        b1_queue_remove_locked(base, p, e);
        struct b1_entry *n = ENTRY(base, e);
        if (!(n->ts & 1)) {
            b1_msg_put(base, n->msg);
            b1_entry_free(base, e);
        }
        /* a block stays owned by its transaction, which frees it */
    }
    p->n_messages = 0;
    p->n_bytes = 0;
    b1_unlock(p);
    b1_wake(p);
    return 0;
}

int b1_peer_query(void *base, uint32_t slot, uint64_t id, struct b1_peer_info *out) {
    struct b1_peer *p;
    int r = lock_live(base, slot, id, &p);
    if (r) return r;
    out->id = p->id;
    out->clock = p->clock;
    out->state = p->state;
    out->n_entries = p->n_entries;
    out->n_messages = p->n_messages;
    out->n_handles = p->n_handles;
    out->n_bytes = p->n_bytes;
    out->quota_messages = p->quota_messages;
    out->quota_handles = p->quota_handles;
    out->quota_bytes = p->quota_bytes;
    out->front_ts = atomic_load(&p->front_ts);
    out->sent = atomic_load(&p->sent);
    out->received = p->received;
    out->lock_recoveries = p->lock_recoveries;
    b1_unlock(p);
    return 0;
}

/* 1 when a committed entry is at the front, 0 when not, -errno for a bad peer.
 * Lock-free: front_ts is published under the lock by every change of the front. */
int b1_peer_ready(void *base, uint32_t slot, uint64_t id) {
    struct b1_header *h = HDR(base);
    if (slot == 0 || slot > h->limits.max_peers) return -EINVAL;
    struct b1_peer *p = PEER(base, slot);
    if (p->id != id) return -EINVAL;
    if (p->state != B1_PEER_ACTIVE) return -ESHUTDOWN;
    uint64_t ts = atomic_load(&p->front_ts);
    return ts && !(ts & 1);
}

uint32_t b1_peer_wake_seq(void *base, uint32_t slot) {
    return atomic_load(&PEER(base, slot)->wake_seq);
}

/* Sleep until the peer's front changes after the caller saw wake_seq == seen. */
int b1_peer_wait_change(void *base, uint32_t slot, uint32_t seen, int64_t timeout_ns) {
    struct b1_peer *p = PEER(base, slot);
    atomic_fetch_add(&p->waiters, 1);
    int r = b1_futex_wait(&p->wake_seq, seen, timeout_ns);
    atomic_fetch_sub(&p->waiters, 1);
    return r;
}

/* ---- nodes and handles ---- */

static uint32_t handle_alloc(void *base) {
    struct b1_header *h = HDR(base);
    uint32_t i = b1_alloc_index(base, &h->free_handles, &h->handles_bump, h->limits.max_handles + 1,
                                offsetof(struct b1_handle, next_free), sizeof(struct b1_handle),
                                (char *)HANDLE(base, 0));
    if (i) {
        HANDLE(base, i)->gen++;
        HANDLE(base, i)->refs = 0;
    }
    return i;
}

static uint64_t handle_id(void *base, uint32_t i) {
    return ((uint64_t)HANDLE(base, i)->gen << B1_HANDLE_INDEX_BITS) | i;
}

/* The handle slot behind an id, if the id is the caller's; 0 otherwise. */
uint32_t b1_handle_lookup(void *base, uint32_t slot, uint64_t peer_id, uint64_t id) {
    struct b1_header *h = HDR(base);
    uint32_t i = (uint32_t)(id & B1_HANDLE_INDEX_MASK);
    if (i == 0 || i > h->limits.max_handles) return 0;
    struct b1_handle *hd = HANDLE(base, i);
    if ((id >> B1_HANDLE_INDEX_BITS) != hd->gen || hd->peer_slot != slot ||
        hd->peer_id != peer_id || hd->refs == 0)
        return 0;
    return i;
}

int b1_node_create(void *base, uint32_t slot, uint64_t id, uint64_t *out) {
    struct b1_header *h = HDR(base);
    uint32_t n = b1_alloc_index(base, &h->free_nodes, &h->nodes_bump, h->limits.max_nodes + 1,
                                offsetof(struct b1_node, next_free), sizeof(struct b1_node),
                                (char *)NODE(base, 0));
    if (!n) return -ENOSPC;
    uint32_t hi = handle_alloc(base);
    if (!hi) {
        b1_free_index(&h->free_nodes, n, &NODE(base, n)->next_free);
        return -ENOSPC;
    }
    struct b1_peer *p;
    int r = lock_live(base, slot, id, &p);
    if (r) {
        b1_free_index(&h->free_handles, hi, &HANDLE(base, hi)->next_free);
        b1_free_index(&h->free_nodes, n, &NODE(base, n)->next_free);
        return r;
    }
    struct b1_node *nd = NODE(base, n);
    struct b1_handle *hd = HANDLE(base, hi);
    nd->gen++;
    nd->owner_id = id;
    nd->owner_slot = slot;
    nd->destroy_ts = 0;
    nd->holders = 0;
    hd->peer_id = id;
    hd->peer_slot = slot;
    hd->node = n;
    hd->node_gen = nd->gen;
    hd->refs = 1;
    hd->next_holder = 0;
    nd->owner_handle = handle_id(base, hi);
    *out = nd->owner_handle;
    b1_unlock(p);
    return 0;
}

int b1_handle_transfer(void *base, uint32_t slot, uint64_t id, uint64_t handle,
                       uint32_t to_slot, uint64_t to_id, uint64_t *out) {
    uint32_t src = b1_handle_lookup(base, slot, id, handle);
    if (!src) return -ENXIO;
    struct b1_handle *sh = HANDLE(base, src);
    uint32_t n = sh->node, node_gen = sh->node_gen;
    struct b1_node *nd = NODE(base, n);
    /* the receiving peer must be connected (checked under its own lock, then released:
     * never two locks at once) */
    struct b1_peer *to;
    int r = lock_live(base, to_slot, to_id, &to);
    if (r) return r == -ESHUTDOWN ? r : -EINVAL;
    b1_unlock(to);
    uint32_t fresh = handle_alloc(base); /* allocated outside any lock; returned if unused */
    if (!fresh) return -ENOSPC;
    struct b1_peer *owner;
    r = lock_live(base, nd->owner_slot, nd->owner_id, &owner);
    if (r == 0 && (nd->gen != node_gen || nd->destroy_ts)) {
        b1_unlock(owner);
        r = -ESTALE;
    }
    if (r) {
        b1_free_index(&HDR(base)->free_handles, fresh, &HANDLE(base, fresh)->next_free);
        return (r == -ESHUTDOWN || r == -ESTALE) ? -ESTALE : -ENXIO;
    }
    /* one handle per (peer, node): the owner's own, or one on the holder list */
    uint32_t found = 0;
    if (to_slot == nd->owner_slot && to_id == nd->owner_id) {
        found = (uint32_t)(nd->owner_handle & B1_HANDLE_INDEX_MASK);
    } else {
        for (uint32_t i = nd->holders; i; i = HANDLE(base, i)->next_holder)
            if (HANDLE(base, i)->peer_slot == to_slot && HANDLE(base, i)->peer_id == to_id) {
                found = i;
                break;
            }
    }
    if (found) {
        HANDLE(base, found)->refs++;
        *out = handle_id(base, found);
    } else {
        struct b1_handle *hd = HANDLE(base, fresh);
        hd->peer_id = to_id;
        hd->peer_slot = to_slot;
        hd->node = n;
        hd->node_gen = node_gen;
        hd->refs = 1;
        hd->next_holder = nd->holders;
        nd->holders = fresh;
        *out = handle_id(base, fresh);
    }
    b1_unlock(owner);
    if (found) b1_free_index(&HDR(base)->free_handles, fresh, &HANDLE(base, fresh)->next_free);
    return 0;
}
