/*
 * names.c -- well-known names: a bounded table in the segment mapping a name to a node,
 * so that a process that shares nothing with a service but the bus finds it.
 *
 * Invariants:
 *   - The table's structure is layout.h's (struct b1_name): open addressing with linear
 *     probing, each change one decisive store of a slot's state, so a kill leaves it
 *     valid and a lock taken over from a dead holder only recounts `used` and drops
 *     slots that fail their own checks (repair_locked).  Operations probe from the
 *     name's home slot to its match or the first EMPTY slot: O(1) expected while the
 *     table is at most half USED (max_names <= names_slots / 2) and tombstones are few: a
 *     tombstone is cleared as soon as the slot after it is EMPTY, and once a quarter of
 *     the slots are tombstones the table is compacted (compact_locked).
 *   - A name is live iff its slot is USED and its node is still the one it named (index,
 *     generation, owner) and ALIVE or DESTROYING.  A slot whose node was destroyed, or
 *     whose owner disconnected (which destroys its nodes), is dead: lookup and listing
 *     treat it as absent and remove it, publish takes its name over, and b1_gc sweeps
 *     the rest (b1_names_sweep).  So a name disappears with its node without the
 *     destroy and disconnect paths knowing about names.
 *   - A dead slot is removed only if it still holds the publish that was judged dead
 *     (its seq): a name published again meanwhile is never removed by a stale judge.
 *   - lookup gives the caller its own handle to the node and counts one reference, as a
 *     transfer does (b1_handle_get_locked under the owner's lock, with its quota).
 *   - Names are for finding a service, not a security boundary: any process of the user
 *     who may open the bus may publish, look up or take over a dead name.
 *
 * Lock rules: the table's robust mutex for the slots; a node's ownership and liveness are
 * read under the node owner's lock.  Never both at once: a slot is copied under the
 * table's lock and judged under the owner's after the first is released.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include "handle.h"
#include "names.h"
#include "queue.h"
#include "slot.h"

#define NONE UINT32_MAX
#define ROUNDS 64 /* retries of a publish or lookup that keeps meeting dead names */
#define CHUNK 64  /* slots copied per hold of the table's lock by the walks */

/* a USED slot as read under the table's lock */
struct name_copy {
    uint32_t i, node, gen, owner_slot;
    uint64_t owner_id, seq;
};

static uint32_t name_hash(const char *s, uint32_t len) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (uint32_t i = 0; i < len; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static int name_ok(const char *name, uint32_t len) {
    return len >= 1 && len <= B1_NAME_MAX && !memchr(name, 0, len);
}

int b1_names_init(void *base, uint64_t off) {
    struct b1_names_head *h = (struct b1_names_head *)((char *)base + off);
    int r = b1_robust_mutex_init(&h->lock);
    h->used = 0;
    h->next_seq = 1;
    return r;
}

/* Slot i read from the segment once into *c, which every later use reads (a scribbler
 * cannot move a length after it was checked): 1 if it is USED and passes its own checks
 * (length, no NUL, hash), its name then NUL-terminated in the copy. */
int b1_name_read(void *base, uint32_t i, struct b1_name *c) {
    memcpy(c, NAME(base, i), sizeof *c);
    uint32_t len = c->len;
    if (atomic_load_explicit(&c->state, memory_order_relaxed) != B1_NAME_USED || !name_ok(c->name, len) ||
        c->hash != name_hash(c->name, len))
        return 0;
    c->name[len] = 0;
    return 1;
}

static uint32_t find_locked(void *base, const char *name, uint32_t len, uint32_t hash, uint32_t *free_slot);

/* After a holder died with the lock: every store it made left the table valid, but for a
 * compaction's move cut short (a name twice: the first on its probe path is kept) and the
 * counts, off by its last change; a slot that fails its own checks (scribbled) is dropped
 * rather than trusted. */
static void repair_locked(void *base) {
    uint32_t slots = VIEW(base)->names_slots, used = 0, tombs = 0, f;
    struct b1_name c;
    for (uint32_t i = 0; i < slots; i++) {
        struct b1_name *s = NAME(base, i);
        uint32_t state = atomic_load(&s->state);
        if ((state == B1_NAME_USED && !b1_name_read(base, i, &c)) || state > B1_NAME_TOMB)
            atomic_store(&s->state, B1_NAME_TOMB);
    }
    for (uint32_t i = 0; i < slots; i++) {
        struct b1_name *s = NAME(base, i);
        if (b1_name_read(base, i, &c) && find_locked(base, c.name, c.len, c.hash, &f) != i)
            atomic_store(&s->state, B1_NAME_TOMB);
        used += atomic_load(&s->state) == B1_NAME_USED;
        tombs += atomic_load(&s->state) == B1_NAME_TOMB;
    }
    NAMES(base)->used = used;
    NAMES(base)->tombs = tombs;
}

int b1_names_lock(void *base) {
    struct b1_names_head *h = NAMES(base);
    int r = pthread_mutex_lock(&h->lock);
    if (r == EOWNERDEAD) {
        pthread_mutex_consistent(&h->lock);
        h->lock_recoveries++;
        repair_locked(base);
        r = 0;
    }
    return -r;
}

void b1_names_unlock(void *base) { pthread_mutex_unlock(&NAMES(base)->lock); }

/* The USED slot of `name`, or NONE; *free_slot: the first EMPTY or TOMB slot on its probe
 * path (NONE if there is none).  The table's lock held. */
static uint32_t find_locked(void *base, const char *name, uint32_t len, uint32_t hash, uint32_t *free_slot) {
    uint32_t slots = VIEW(base)->names_slots, mask = slots - 1;
    *free_slot = NONE;
    for (uint32_t k = 0, i = hash & mask; k < slots; k++, i = (i + 1) & mask) {
        struct b1_name *s = NAME(base, i);
        uint32_t state = atomic_load_explicit(&s->state, memory_order_acquire);
        if (state == B1_NAME_EMPTY) {
            if (*free_slot == NONE) *free_slot = i;
            return NONE;
        }
        if (state == B1_NAME_TOMB) {
            if (*free_slot == NONE) *free_slot = i;
        } else if (s->hash == hash && s->len == len && !memcmp(s->name, name, len)) {
            return i;
        }
    }
    return NONE;
}

uint32_t b1_name_find_locked(void *base, const struct b1_name *c) {
    uint32_t f;
    return find_locked(base, c->name, c->len, c->hash, &f);
}

static struct name_copy copy_of(uint32_t i, const struct b1_name *c) {
    return (struct name_copy){i, c->node, c->node_gen, c->owner_slot, c->owner_id, c->seq};
}

static struct name_copy copy_locked(void *base, uint32_t i) {
    struct b1_name c;
    memcpy(&c, NAME(base, i), sizeof c); /* read once */
    return copy_of(i, &c);
}

/* Move every name to the first removed slot on its probe path (a copy made USED, then the
 * original removed: layout.h), visiting the slots in probe order from an EMPTY one, so a
 * slot freed by a move is seen by the names after it.  Then, if no name's path crosses a
 * removed slot any more, every removed slot is cleared: probes are as short as if the
 * removed names had never been there.  O(slots) probes; run when a quarter of the slots
 * are removed ones, so amortised O(1) per removal. */
static void compact_locked(void *base) {
    uint32_t slots = VIEW(base)->names_slots, mask = slots - 1, start = 0, f;
    while (start < slots && atomic_load(&NAME(base, start)->state) != B1_NAME_EMPTY) start++;
    for (uint32_t k = 1; k <= slots; k++) {
        uint32_t i = (start + k) & mask;
        struct b1_name c;
        if (!b1_name_read(base, i, &c)) continue;
        if (find_locked(base, c.name, c.len, c.hash, &f) != i || f == NONE) continue;
        struct b1_name *d = NAME(base, f); /* a TOMB: the path up to i has no EMPTY slot */
        d->hash = c.hash;
        d->node = c.node;
        d->node_gen = c.node_gen;
        d->owner_id = c.owner_id;
        d->owner_slot = c.owner_slot;
        d->seq = c.seq;
        d->len = c.len;
        memcpy(d->name, c.name, (size_t)c.len + 1); /* NUL-terminated by b1_name_read */
        atomic_store_explicit(&d->state, B1_NAME_USED, memory_order_release);
        atomic_store(&NAME(base, i)->state, B1_NAME_TOMB); /* one removed slot used, one made */
    }
    for (uint32_t i = 0; i < slots; i++) {
        struct b1_name *s = NAME(base, i);
        if (atomic_load(&s->state) != B1_NAME_USED) continue;
        uint32_t home = __atomic_load_n(&s->hash, __ATOMIC_RELAXED) & mask; /* read once */
        for (uint32_t j = home, k = 0; j != i && k < slots; j = (j + 1) & mask, k++)
            if (atomic_load(&NAME(base, j)->state) == B1_NAME_TOMB) return; /* keep them */
    }
    for (uint32_t i = 0; i < slots; i++)
        if (atomic_load(&NAME(base, i)->state) == B1_NAME_TOMB) atomic_store(&NAME(base, i)->state, B1_NAME_EMPTY);
    NAMES(base)->tombs = 0;
}

/* USED -> TOMB, then the tombstones that end at an EMPTY slot cleared (layout.h). */
static void remove_locked(void *base, uint32_t i) {
    struct b1_names_head *h = NAMES(base);
    uint32_t slots = VIEW(base)->names_slots, mask = slots - 1;
    atomic_store(&NAME(base, i)->state, B1_NAME_TOMB);
    h->used--;
    h->tombs++;
    if (atomic_load(&NAME(base, (i + 1) & mask)->state) == B1_NAME_EMPTY) {
        for (uint32_t k = 0; k < slots && atomic_load(&NAME(base, i)->state) == B1_NAME_TOMB; k++) {
            atomic_store(&NAME(base, i)->state, B1_NAME_EMPTY);
            h->tombs--;
            i = (i - 1) & mask;
        }
    }
    if (h->tombs > slots / 4) compact_locked(base);
}

/* Remove slot c.i if it still holds the publish c; 1 if removed. */
static int remove_if_same(void *base, const struct name_copy *c) {
    if (b1_names_lock(base)) return 0;
    struct b1_name *s = NAME(base, c->i);
    int same = atomic_load(&s->state) == B1_NAME_USED && s->seq == c->seq;
    if (same) remove_locked(base, c->i);
    b1_names_unlock(base);
    return same;
}

/* Is the node the copy names still its node, owned as recorded and not destroyed?  The
 * owner's lock is taken and released (the table's is not held).  With `get`, the peer
 * (slot, id) is given its handle to it there, one reference counted: *get_r the result. */
static int node_live(void *base, const struct name_copy *c, uint32_t slot, uint64_t id, uint64_t *out, int *get_r) {
    struct b1_peer *owner = b1_lock_owner(base, c->node, c->gen);
    if (!owner) return 0;
    struct b1_node *nd = NODE(base, c->node);
    int live = nd->owner_id == c->owner_id && nd->owner_slot == c->owner_slot &&
               (nd->state == B1_NODE_ALIVE || nd->state == B1_NODE_DESTROYING);
    if (live && out) {
        uint32_t hi;
        *get_r = b1_handle_get_locked(base, c->node, slot, id, id, &hi);
        if (*get_r == 0) {
            HANDLE(base, hi)->refs++;
            *out = b1_handle_id(base, hi);
        }
    }
    b1_unlock(owner);
    return live;
}

/* The USED slot of `name` copied into *c (the table's lock taken and released): 1, or 0
 * when there is none, or -errno. */
static int find_copy(void *base, const char *name, uint32_t len, struct name_copy *c) {
    int r = b1_names_lock(base);
    if (r) return r;
    uint32_t f, i = find_locked(base, name, len, name_hash(name, len), &f);
    if (i != NONE) *c = copy_locked(base, i);
    b1_names_unlock(base);
    return i != NONE;
}

static int publish_once(void *base, uint32_t n, uint32_t gen, uint32_t slot, uint64_t id,
                        const char *name, uint32_t len) {
    uint32_t hash = name_hash(name, len);
    for (int round = 0; round < ROUNDS; round++) {
        int r = b1_names_lock(base);
        if (r) return r;
        struct b1_names_head *h = NAMES(base);
        uint32_t f, i = find_locked(base, name, len, hash, &f);
        if (i == NONE) {
            if (h->used >= LIM(base).max_names || f == NONE) {
                r = -ENOSPC;
            } else {
                /* written while EMPTY or TOMB, made USED last (layout.h) */
                struct b1_name *s = NAME(base, f);
                s->hash = hash;
                s->node = n;
                s->node_gen = gen;
                s->owner_id = id;
                s->owner_slot = slot;
                s->seq = h->next_seq++;
                s->len = (uint16_t)len;
                memcpy(s->name, name, len);
                s->name[len] = 0;
                uint32_t was = atomic_load(&s->state);
                atomic_store_explicit(&s->state, B1_NAME_USED, memory_order_release);
                h->used++;
                h->tombs -= was == B1_NAME_TOMB;
            }
            b1_names_unlock(base);
            return r;
        }
        struct name_copy c = copy_locked(base, i);
        b1_names_unlock(base);
        if (node_live(base, &c, 0, 0, NULL, NULL)) return -EEXIST;
        remove_if_same(base, &c); /* a dead node's name: taken over */
    }
    return -EBUSY;
}

int b1_name_publish(void *base, uint32_t slot, uint64_t id, uint64_t handle, const char *name,
                    uint32_t len) {
    if (!name_ok(name, len)) return -EINVAL;
    int r = b1_check_live(base, slot, id);
    if (r) return r;
    uint32_t hi = b1_handle_lookup(base, slot, id, handle);
    if (!hi) return -ENXIO;
    uint32_t n = HANDLE(base, hi)->node, gen = HANDLE(base, hi)->node_gen;
    struct b1_peer *owner = b1_lock_owner(base, n, gen);
    if (!owner) return -ESTALE;
    struct b1_node *nd = NODE(base, n);
    if (nd->owner_slot != slot || nd->owner_id != id || nd->owner_handle != handle) r = -EREMOTE;
    else if (nd->state != B1_NODE_ALIVE) r = -ESTALE;
    b1_unlock(owner);
    if (r) return r;
    if (!VIEW(base)->names_slots) return -ENOSPC;
    r = publish_once(base, n, gen, slot, id, name, len);
    if (r == -ENOSPC && b1_names_sweep(base)) /* dead names held the room */
        r = publish_once(base, n, gen, slot, id, name, len);
    return r;
}

int b1_name_lookup(void *base, uint32_t slot, uint64_t id, const char *name, uint32_t len,
                   uint64_t *out) {
    if (!name_ok(name, len)) return -EINVAL;
    int r = b1_check_live(base, slot, id);
    if (r) return r;
    if (!VIEW(base)->names_slots) return -ENOENT;
    for (int round = 0; round < ROUNDS; round++) {
        struct name_copy c;
        r = find_copy(base, name, len, &c);
        if (r <= 0) return r ? r : -ENOENT;
        int got = 0;
        if (node_live(base, &c, slot, id, out, &got)) return got;
        remove_if_same(base, &c);
    }
    return -EBUSY;
}

int b1_name_unpublish(void *base, uint32_t slot, uint64_t id, const char *name, uint32_t len) {
    if (!name_ok(name, len)) return -EINVAL;
    int r = b1_check_live(base, slot, id);
    if (r) return r;
    if (!VIEW(base)->names_slots) return -ENOENT;
    struct name_copy c;
    r = find_copy(base, name, len, &c);
    if (r <= 0) return r ? r : -ENOENT;
    if (!node_live(base, &c, 0, 0, NULL, NULL)) {
        remove_if_same(base, &c);
        return -ENOENT;
    }
    if (c.owner_slot != slot || c.owner_id != id) return -EREMOTE;
    return remove_if_same(base, &c) ? 0 : -ENOENT;
}

/* Up to CHUNK USED slots from *cursor on, copied in one hold of the table's lock (names
 * into out when it is given); returns how many, *cursor moved past them. */
static int copy_chunk(void *base, uint32_t *cursor, struct name_copy *cs, struct b1_name_info *out, uint32_t cap) {
    uint32_t slots = VIEW(base)->names_slots, n = 0, i = *cursor;
    if (cap > CHUNK) cap = CHUNK;
    int r = b1_names_lock(base);
    if (r) return r;
    for (; i < slots && n < cap; i++) {
        struct b1_name c;
        if (!b1_name_read(base, i, &c)) continue;
        cs[n] = copy_of(i, &c);
        if (out) {
            out[n].owner_id = c.owner_id;
            out[n].node = c.node;
            out[n].len = c.len;
            memcpy(out[n].name, c.name, (size_t)c.len + 1); /* NUL-terminated by b1_name_read */
        }
        n++;
    }
    b1_names_unlock(base);
    *cursor = i;
    return (int)n;
}

int b1_names_list(void *base, struct b1_name_info *out, uint32_t cap, uint32_t *cursor) {
    struct name_copy cs[CHUNK];
    int n = copy_chunk(base, cursor, cs, out, cap);
    if (n <= 0) return n;
    int k = 0;
    for (int j = 0; j < n; j++) {
        if (!node_live(base, &cs[j], 0, 0, NULL, NULL)) {
            remove_if_same(base, &cs[j]);
            continue;
        }
        if (k != j) out[k] = out[j];
        k++;
    }
    return k;
}

uint32_t b1_names_sweep(void *base) {
    struct name_copy cs[CHUNK];
    uint32_t cursor = 0, removed = 0, slots = VIEW(base)->names_slots;
    while (cursor < slots) {
        int n = copy_chunk(base, &cursor, cs, NULL, CHUNK);
        if (n < 0) break;
        for (int j = 0; j < n; j++)
            if (!node_live(base, &cs[j], 0, 0, NULL, NULL)) removed += remove_if_same(base, &cs[j]);
    }
    return removed;
}
