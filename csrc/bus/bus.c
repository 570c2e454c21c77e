/*
 * bus.c -- creating, checking and describing a bus segment.
 *
 * Invariants:
 *   - The layout is a pure function of the limits (view.c), so the size computed before
 *     creation is the size initialised.
 *   - The magic is stored last, with release order (see layout.h).
 *   - A bus's name is taken over only by the one process whose compare-and-swap claimed
 *     it (reclaimer) after it found every holder dead: no live bus is ever unlinked by
 *     someone who judged an older one, and a claimant that died is replaced.
 *   - A segment is attached (or created) only if its header is the layout of its limits,
 *     and this process keeps a copy of that layout (view.c): the bounds checks of
 *     layout.h read the copy, so every access stays inside the mapping even if the
 *     header is rewritten afterwards.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include "alloc.h"
#include "fds.h"
#include "names.h"
#include "proc.h"
#include "queue.h"
#include "slot.h"
#include "view.h"

uint64_t b1_segment_size(const struct b1_limits *l) {
    if (!b1_limits_valid(l)) return 0;
    uint64_t off[7];
    b1_layout_offsets(l, off);
    return off[6];
}

int b1_init(void *base, uint64_t size, const struct b1_limits *l) {
    if (!b1_limits_valid(l) || size < b1_segment_size(l)) return -EINVAL;
    struct b1_header *h = HDR(base);
    uint64_t off[7];
    b1_layout_offsets(l, off);
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
    h->off_names = off[5];
    h->creator_pid = b1_pid();
    h->creator_start = b1_proc_start(b1_pid());
    if (getrandom(h->nonce, sizeof h->nonce, 0) != sizeof h->nonce) {
        h->nonce[0] = b1_now_ns();
        h->nonce[1] = (uint64_t)b1_pid() << 32 ^ (uint64_t)(uintptr_t)base;
    }
    atomic_store(&h->next_peer_id, 1);
    /* index 0 of each table stands for "none" */
    atomic_store(&h->peers_bump, 1);
    atomic_store(&h->nodes_bump, 1);
    atomic_store(&h->handles_bump, 1);
    atomic_store(&h->entries_bump, 1);
    int r = b1_names_init(base, off[5]);
    if (r) return r;
    __atomic_store_n(&h->magic, B1_MAGIC, __ATOMIC_RELEASE);
    return b1_view_register(base, size);
}

int b1_attach(void *base, uint64_t size) { return b1_view_register(base, size); }

int b1_bus_info(void *base, struct b1_bus_info *out) {
    struct b1_header *h = HDR(base);
    out->version = h->version;
    out->inject = LIM(base).inject;
    out->segment_size = h->segment_size;
    /* counted by a walk over the carved slots, so the hot paths keep no shared counter;
     * exact when the bus is quiet, a snapshot otherwise */
    uint32_t peers = 0, nodes = 0, handles = 0;
    uint32_t bump = atomic_load(&h->peers_bump);
    for (uint32_t i = 1; i < bump && i <= LIM(base).max_peers; i++)
        peers += __atomic_load_n(&PEER(base, i)->state, __ATOMIC_RELAXED) != B1_PEER_FREE;
    bump = atomic_load(&h->nodes_bump);
    for (uint32_t i = 1; i < bump && i <= LIM(base).max_nodes; i++)
        nodes += __atomic_load_n(&NODE(base, i)->state, __ATOMIC_RELAXED) != B1_NODE_FREE;
    bump = atomic_load(&h->handles_bump);
    for (uint32_t i = 1; i < bump && i <= LIM(base).max_handles; i++) {
        struct b1_handle *hd = HANDLE(base, i);
        handles += __atomic_load_n(&hd->refs, __ATOMIC_RELAXED) || __atomic_load_n(&hd->pending, __ATOMIC_RELAXED);
    }
    out->peers_used = peers;
    out->nodes_used = nodes;
    out->handles_used = handles;
    out->entries_used = (uint32_t)b1_usage_entries(base);
    out->pool_used = (uint64_t)b1_usage_pool(base);
    out->pool_size = LIM(base).pool_size;
    out->creator_pid = h->creator_pid;
    out->creator_alive = b1_pid_alive(h->creator_pid, h->creator_start);
    out->limits = LIM(base);
    const struct b1_view *v = VIEW(base);
    uint64_t offs[5] = {v->off_peers, v->off_nodes, v->off_handles, v->off_entries, v->off_pool};
    uint32_t sizes[4] = {sizeof(struct b1_peer), sizeof(struct b1_node), sizeof(struct b1_handle),
                         sizeof(struct b1_entry)};
    memcpy(out->table_offsets, offs, sizeof offs);
    memcpy(out->slot_sizes, sizes, sizeof sizes);
    out->names_offset = v->off_names + sizeof(struct b1_names_head);
    out->name_slot_size = sizeof(struct b1_name);
    out->names_head_size = sizeof(struct b1_names_head);
    out->names_tombs = __atomic_load_n(&NAMES(base)->tombs, __ATOMIC_RELAXED);
    out->names_slots = v->names_slots;
    out->names_used = __atomic_load_n(&NAMES(base)->used, __ATOMIC_RELAXED);
    return 0;
}

/* the fields tests reach into (tests/segment.py), one line each: a field added anywhere
 * in a record moves nothing here but the compiler's numbers */
#define FIELD(record, field) {#record "." #field, offsetof(struct record, field)},
static const struct { const char *name; size_t at; } layout_names[] = {
    FIELD(b1_peer, id) FIELD(b1_peer, root) FIELD(b1_peer, front) FIELD(b1_peer, wake_seq)
    FIELD(b1_peer, waiters) FIELD(b1_peer, n_handles) FIELD(b1_peer, shares) FIELD(b1_peer, share_handles)
    {"b1_share", sizeof(struct b1_share)},
    FIELD(b1_entry, msg)
    FIELD(b1_handle, refs) FIELD(b1_handle, pending)
    FIELD(b1_msg, refs) FIELD(b1_msg, next_free) FIELD(b1_msg, ts) FIELD(b1_msg, stager) FIELD(b1_msg, carved)
};
#undef FIELD

int b1_layout_offset(const char *name) {
    for (size_t i = 0; i < sizeof layout_names / sizeof layout_names[0]; i++)
        if (strcmp(layout_names[i].name, name) == 0) return (int)layout_names[i].at;
    return -ENOENT;
}


int b1_bus_reclaim(void *base) {
    struct b1_header *h = HDR(base);
    if (b1_pid_alive(h->creator_pid, h->creator_start)) return -EBUSY;
    uint32_t bump = b1_bounded(&h->peers_bump, LIM(base).max_peers);
    for (uint32_t slot = 1; slot < bump; slot++) {
        struct b1_peer *p = b1_peer_at_slot(base, slot);
        if (!p) continue;
        if (b1_lock(base, p)) return -EBUSY; /* its holders unread: not known dead */
        uint32_t state = p->state;
        int busy = 0;
        if (state == B1_PEER_ACTIVE || state == B1_PEER_DISCONNECTING) {
            uint64_t d = atomic_load(&p->disconnector);
            busy = p->pinned || (state == B1_PEER_DISCONNECTING && d && b1_owner_alive(d));
            for (int i = 0; i < B1_PEER_PIDS && !busy; i++) {
                struct b1_holder hd = p->holders[i]; /* read once, under the lock that writes it */
                busy = hd.pid && b1_holder_alive(&hd);
            }
        }
        b1_unlock(p);
        if (busy) return -EBUSY;
    }
    uint64_t seen = atomic_load(&h->reclaimer), me = b1_self();
    if (seen == me) return 0;
    if (seen && b1_owner_alive(seen)) return -EALREADY;
    return atomic_compare_exchange_strong(&h->reclaimer, &seen, me) ? 0 : -EALREADY;
}

void b1_bus_unlink_stores(void *base) {
    uint32_t bump = b1_bounded(&HDR(base)->peers_bump, LIM(base).max_peers);
    for (uint32_t slot = 1; slot < bump; slot++) {
        struct b1_peer *p = b1_peer_at_slot(base, slot);
        if (!p) continue;
        /* read once: the nonce only names a path under B1_FDS_DIR, printed as hex */
        uint64_t nonce[2] = {__atomic_load_n(&p->fd_nonce[0], __ATOMIC_RELAXED),
                             __atomic_load_n(&p->fd_nonce[1], __ATOMIC_RELAXED)};
        if (nonce[0] | nonce[1]) b1_fds_unlink(nonce);
    }
}
