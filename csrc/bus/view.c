/*
 * view.c -- this process's validated copy of each bus's layout.
 *
 * Invariants:
 *   - The layout is a pure function of the limits (b1_layout_offsets); every limit is
 *     bounded (b1_limits_valid) and every size computed in 64 bits, so no layout wraps: a
 *     table count + 1 fits 32 bits (the walks compare `i <= max` and `steps > max + 1`), a
 *     peer slot fits the 16 bits an entry names its queue in (B1_MAX_PEERS), and the tables
 *     end before the pool, which ends at the segment size.
 *   - A view is made from one copy of the header, validated as a whole: the segment's
 *     header is read once, so a writer racing the check cannot pass one field and change
 *     the next.  A published view is never changed or freed (a thread may still read an
 *     older one for the same base); registering a base again publishes a new one.
 *   - The accessors of layout.h read only views: the bounds of every index and offset are
 *     this process's, fixed at attach.
 *
 * Lock rules: a process-local mutex guards the list of views; no peer lock is involved.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "view.h"

_Static_assert(B1_MAX_SLOTS == (1u << 24) - 2 && B1_MAX_PEERS == 65535u && B1_MAX_NAMES == 65536u,
               "Limits.check (bus1py/limits.py) states these bounds");

/* what an unknown, unvalidated base reads: every index is out of range */
static const struct b1_view no_view;
const struct b1_view *b1_last_view = &no_view; /* its base (NULL) matches no mapping */

struct view_node {
    struct b1_view v;
    struct view_node *next;
};
static struct view_node *views; /* newest first */
static pthread_mutex_t views_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t align64(uint64_t x) { return (x + 63) & ~(uint64_t)63; }

void b1_layout_offsets(const struct b1_limits *l, uint64_t off[7]) {
    uint64_t o = align64(sizeof(struct b1_header));
    off[0] = o; o = align64(o + ((uint64_t)l->max_peers + 1) * sizeof(struct b1_peer));
    off[1] = o; o = align64(o + ((uint64_t)l->max_nodes + 1) * sizeof(struct b1_node));
    off[2] = o; o = align64(o + ((uint64_t)l->max_handles + 1) * sizeof(struct b1_handle));
    off[3] = o; o = align64(o + ((uint64_t)l->max_entries + 1) * sizeof(struct b1_entry));
    off[4] = (o + 4095) & ~(uint64_t)4095;
    off[5] = align64(off[4] + l->pool_size);
    /* the name table's head and its slots (one at least, so NAME(base, 0) lies inside) */
    uint32_t slots = b1_names_slots(l);
    off[6] = off[5] + sizeof(struct b1_names_head) + (uint64_t)(slots ? slots : 1) * sizeof(struct b1_name);
}

/* the rules Limits.check (bus1py/limits.py) states in words; keep the two the same */
int b1_limits_valid(const struct b1_limits *l) {
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
    if (l->max_names > B1_MAX_NAMES) return 0;
    return 1;
}

/* Validate one copy of the header of a mapping of `size` bytes into *v. */
static int validate(void *base, uint64_t size, struct b1_view *v) {
    struct b1_header h;
    if (size < sizeof h) return -EBADMSG;
    if (__atomic_load_n(&HDR(base)->magic, __ATOMIC_ACQUIRE) != B1_MAGIC) return -EBADMSG;
    memcpy(&h, base, sizeof h);
    if (h.version != B1_VERSION || h.header_size != sizeof h) return -EPROTO;
    if (h.segment_size > size) return -EBADMSG;
    /* the tables must lie where the limits put them */
    uint64_t off[7];
    if (!b1_limits_valid(&h.limits)) return -EBADMSG;
    b1_layout_offsets(&h.limits, off);
    if (h.off_peers != off[0] || h.off_nodes != off[1] || h.off_handles != off[2] ||
        h.off_entries != off[3] || h.off_pool != off[4] || h.off_names != off[5] ||
        off[6] > h.segment_size)
        return -EBADMSG;
    *v = (struct b1_view){base, off[0], off[1], off[2], off[3], off[4], h.limits, off[5],
                          b1_names_slots(&h.limits), {h.nonce[0], h.nonce[1]}};
    return 0;
}

int b1_view_register(void *base, uint64_t size) {
    struct view_node *n = malloc(sizeof *n);
    if (!n) return -ENOMEM;
    int r = validate(base, size, &n->v);
    if (r) {
        free(n);
        return r;
    }
    pthread_mutex_lock(&views_lock);
    n->next = views;
    __atomic_store_n(&views, n, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&views_lock);
    __atomic_store_n(&b1_last_view, &n->v, __ATOMIC_RELEASE);
    return 0;
}

/* The newest view of base; a base this process never attached reads no_view (every
 * index out of range: b1_bad, EBADMSG). */
const struct b1_view *b1_view_find(void *base) {
    for (struct view_node *n = __atomic_load_n(&views, __ATOMIC_ACQUIRE); n; n = n->next)
        if (n->v.base == base) {
            __atomic_store_n(&b1_last_view, &n->v, __ATOMIC_RELEASE);
            return &n->v;
        }
    b1_bad = 1;
    return &no_view;
}
