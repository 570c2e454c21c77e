/*
 * bus.c -- creating, checking and describing a bus segment.
 *
 * Invariants:
 *   - The layout is a pure function of the limits (layout_offsets), so the size computed
 *     before creation is the size initialised.
 *   - The magic is stored last, with release order (see layout.h).
 *   - A segment is attached only if its header is the layout of its limits, so the bounds
 *     checks of layout.h, which read the limits and offsets there, keep every access
 *     inside the mapping.
 *   - Every limit is bounded (limits_valid) and every size is computed in 64 bits, so no
 *     layout wraps: a table count + 1 fits 32 bits (the walks compare `i <= max` and
 *     `steps > max + 1`), a peer slot fits the 16 bits an entry names its queue in
 *     (B1_MAX_PEERS), and the tables end before the pool, which ends at the segment size.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include "alloc.h"

/* slots of the node, handle and entry tables at most: a handle id keeps 24 bits of index
 * (B1_HANDLE_INDEX_MASK is reserved), and the other two share the bound */
#define B1_MAX_SLOTS ((uint32_t)B1_HANDLE_INDEX_MASK - 1)
_Static_assert(B1_MAX_SLOTS == (1u << 24) - 2 && B1_MAX_PEERS == 65535u,
               "Limits.check (bus1py/bus.py) states these bounds");

static uint64_t align64(uint64_t x) { return (x + 63) & ~(uint64_t)63; }

static void layout_offsets(const struct b1_limits *l, uint64_t *off) {
    uint64_t o = align64(sizeof(struct b1_header));
    off[0] = o; o = align64(o + ((uint64_t)l->max_peers + 1) * sizeof(struct b1_peer));
    off[1] = o; o = align64(o + ((uint64_t)l->max_nodes + 1) * sizeof(struct b1_node));
    off[2] = o; o = align64(o + ((uint64_t)l->max_handles + 1) * sizeof(struct b1_handle));
    off[3] = o; o = align64(o + ((uint64_t)l->max_entries + 1) * sizeof(struct b1_entry));
    off[4] = (o + 4095) & ~(uint64_t)4095;
    off[5] = off[4] + l->pool_size;
}

/* the rules Limits.check (bus1py/bus.py) states in words; keep the two the same */
static int limits_valid(const struct b1_limits *l) {
    if (!l->max_peers || !l->max_nodes || !l->max_handles || !l->max_entries) return 0;
    if (l->max_peers > B1_MAX_PEERS) return 0;
    if (l->max_nodes > B1_MAX_SLOTS || l->max_handles > B1_MAX_SLOTS || l->max_entries > B1_MAX_SLOTS)
        return 0;
    if (!l->max_dests || l->max_dests > l->max_entries || l->max_dests > 65536) return 0;
    if (l->max_msg_handles > 65536) return 0;
    if (l->pool_size < 4096 || l->pool_size > ((uint64_t)1 << 38)) return 0;
    if ((uint64_t)l->max_payload + sizeof(struct b1_msg) > B1_CLASS_BYTES(B1_POOL_CLASSES - 1))
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
    h->creator_pid = b1_pid();
    h->creator_start = b1_proc_start(b1_pid());
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
    /* the tables must lie where the limits put them: every bounds check (layout.h)
     * trusts the header from here on */
    uint64_t off[6];
    if (!limits_valid(&h->limits)) return -EBADMSG;
    layout_offsets(&h->limits, off);
    if (h->off_peers != off[0] || h->off_nodes != off[1] || h->off_handles != off[2] ||
        h->off_entries != off[3] || h->off_pool != off[4] || off[5] > h->segment_size)
        return -EBADMSG;
    return 0;
}

int b1_bus_info(void *base, struct b1_bus_info *out) {
    struct b1_header *h = HDR(base);
    out->version = h->version;
    out->inject = h->limits.inject;
    out->segment_size = h->segment_size;
    /* counted by a walk over the carved slots, so the hot paths keep no shared counter;
     * exact when the bus is quiet, a snapshot otherwise */
    uint32_t peers = 0, nodes = 0, handles = 0;
    uint32_t bump = atomic_load(&h->peers_bump);
    for (uint32_t i = 1; i < bump && i <= h->limits.max_peers; i++)
        peers += __atomic_load_n(&PEER(base, i)->state, __ATOMIC_RELAXED) != B1_PEER_FREE;
    bump = atomic_load(&h->nodes_bump);
    for (uint32_t i = 1; i < bump && i <= h->limits.max_nodes; i++)
        nodes += __atomic_load_n(&NODE(base, i)->state, __ATOMIC_RELAXED) != B1_NODE_FREE;
    bump = atomic_load(&h->handles_bump);
    for (uint32_t i = 1; i < bump && i <= h->limits.max_handles; i++) {
        struct b1_handle *hd = HANDLE(base, i);
        handles += __atomic_load_n(&hd->refs, __ATOMIC_RELAXED) || __atomic_load_n(&hd->pending, __ATOMIC_RELAXED);
    }
    out->peers_used = peers;
    out->nodes_used = nodes;
    out->handles_used = handles;
    out->entries_used = (uint32_t)b1_usage_entries(base);
    out->pool_used = (uint64_t)b1_usage_pool(base);
    out->pool_size = h->limits.pool_size;
    out->creator_pid = h->creator_pid;
    out->creator_alive = b1_pid_alive(h->creator_pid, h->creator_start);
    out->limits = h->limits;
    uint64_t offs[5] = {h->off_peers, h->off_nodes, h->off_handles, h->off_entries, h->off_pool};
    uint32_t sizes[4] = {sizeof(struct b1_peer), sizeof(struct b1_node), sizeof(struct b1_handle),
                         sizeof(struct b1_entry)};
    memcpy(out->table_offsets, offs, sizeof offs);
    memcpy(out->slot_sizes, sizes, sizeof sizes);
    return 0;
}

