/*
 * fsck.c -- the whole segment checked against every invariant layout.h states, for
 * `bus1py fsck` and Bus.check(): what is wrong is written in words, one line a problem.
 *
 * What it checks:
 *   - free lists: no cycle, no slot twice, every slot on one in its free state (entries
 *     B1_ENTRY_FREE, records refs 0 and of the stack's class), counts matching the tables;
 *   - usage: the entries and pool bytes in use match the sharded usage counters;
 *   - every queue a valid treap with consistent counters, clock and held list
 *     (queue.c's takeover check), each linked entry naming a live record;
 *   - reference counts: each live record's refs equals the entries naming it;
 *   - handle registrations: each handle's pending equals the ids naming it in the records
 *     of live entries, and each holder list names handles of its node;
 *   - handle charges: each peer's n_handles and each share of it (share_handles) equal
 *     the handles it holds, in all and charged to that share, and the shares add up;
 *   - no object owned by a dead process: claimed entries, running transactions' records,
 *     disconnects, destructions, peers whose processes all died;
 *   - the name table (names.c): each name sound, reachable from its home slot, listed
 *     once, and the count matching.
 *
 * A bus in use changes under the walk: run it when the bus is quiet (after gc, with no
 * call in flight), as the kill harness and the stress tool's end-of-run check do.
 *
 * Lock rules: one peer's lock at a time, for its queue only, or the name table's alone;
 * everything else is read without locks (a quiet bus).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "alloc.h"
#include "names.h"
#include "queue.h"

#define UNFINISHED 0x80000000u /* in refs_found: some copy is a block or not yet staged */

struct report {
    char *out;
    uint32_t cap, len;
    int problems;
};

static void say(struct report *r, const char *fmt, ...) {
    r->problems++;
    if (!r->out || r->len + 1 >= r->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(r->out + r->len, r->cap - r->len, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    r->len += (uint32_t)n < r->cap - r->len ? (uint32_t)n : r->cap - r->len - 1;
    if (r->len + 1 < r->cap) r->out[r->len++] = '\n';
    r->out[r->len] = 0;
}

/* Walk a free stack: its members marked in `seen` (bit per index); problems said. */
static uint32_t walk_stack(struct report *r, const char *what, b1_stack *s, char *table,
                           size_t elem, size_t link, uint32_t limit, uint8_t *seen) {
    uint32_t n = 0, i = (uint32_t)atomic_load(&s->head);
    while (i) {
        if (i >= limit) {
            say(r, "%s free list: index %u out of range", what, i);
            break;
        }
        if (seen[i]) {
            say(r, "%s free list: index %u listed twice (a cycle or a double free)", what, i);
            break;
        }
        seen[i] = 1;
        n++;
        i = atomic_load((_Atomic uint32_t *)(table + (size_t)i * elem + link));
    }
    return n;
}

static void check_tables(void *base, struct report *r, uint8_t *seen) {
    struct b1_header *h = HDR(base);
    uint32_t lim;
    lim = LIM(base).max_entries + 1;
    memset(seen, 0, lim);
    uint32_t bump = atomic_load(&h->entries_bump), free_n;
    free_n = walk_stack(r, "entry", &h->free_entries, (char *)ENTRY(base, 0), sizeof(struct b1_entry),
                        offsetof(struct b1_entry, next_free), lim, seen);
    int64_t used = 0;
    for (uint32_t i = 1; i < bump && i < lim; i++) {
        struct b1_entry *e = ENTRY(base, i);
        int is_free = e->type == B1_ENTRY_FREE && e->msg == 0;
        if (seen[i] && !is_free) say(r, "entry %u: on the free list but in use (type %u, record %u)", i, e->type, e->msg);
        if (!seen[i]) {
            used++;
            if (is_free) say(r, "entry %u: marked free but on no free list (leaked)", i);
        }
    }
    if (bump > lim || free_n > bump) say(r, "entry table: bump %u beyond %u slots", bump, lim - 1);
    if (used != b1_usage_entries(base))
        say(r, "entries in use: %lld found, the usage counters say %lld", (long long)used,
            (long long)b1_usage_entries(base));

    lim = LIM(base).max_nodes + 1;
    memset(seen, 0, lim);
    walk_stack(r, "node", &h->free_nodes, (char *)NODE(base, 0), sizeof(struct b1_node),
               offsetof(struct b1_node, next_free), lim, seen);
    bump = atomic_load(&h->nodes_bump);
    for (uint32_t i = 1; i < bump && i < lim; i++)
        if (seen[i] != (NODE(base, i)->state == B1_NODE_FREE))
            say(r, "node %u: state %u but %s the free list", i, NODE(base, i)->state, seen[i] ? "on" : "not on");

    lim = LIM(base).max_handles + 1;
    memset(seen, 0, lim);
    walk_stack(r, "handle", &h->free_handles, (char *)HANDLE(base, 0), sizeof(struct b1_handle),
               offsetof(struct b1_handle, next_free), lim, seen);

    lim = LIM(base).max_peers + 1;
    memset(seen, 0, lim);
    walk_stack(r, "peer", &h->free_peers, (char *)PEER(base, 0), sizeof(struct b1_peer),
               offsetof(struct b1_peer, next_free), lim, seen);
    bump = atomic_load(&h->peers_bump);
    for (uint32_t i = 1; i < bump && i < lim; i++)
        if (seen[i] != (PEER(base, i)->state == B1_PEER_FREE))
            say(r, "peer slot %u: state %u but %s the free list", i, PEER(base, i)->state, seen[i] ? "on" : "not on");
}

/* The pool, record by record from its start (records are carved contiguously): free ones
 * on their class's stack, live ones with refs equal to the entries naming them. */
static void check_pool(void *base, struct report *r, uint32_t *refs_found, uint8_t *on_stack) {
    struct b1_header *h = HDR(base);
    uint64_t units = LIM(base).pool_size >> B1_POOL_MIN_SHIFT;
    memset(on_stack, 0, units);
    char *pool = (char *)base + VIEW(base)->off_pool;
    for (uint32_t c = 0; c < B1_POOL_CLASSES; c++) {
        uint32_t steps = 0, i = (uint32_t)atomic_load(&h->pool_free[c].head);
        while (i) {
            if (i >= units || !b1_step(&steps, (uint32_t)units)) {
                say(r, "pool class %u free list: unit %u out of range or a cycle", c, i);
                break;
            }
            if (on_stack[i]) {
                say(r, "pool class %u free list: record %u listed twice (a double free)", c, i);
                break;
            }
            on_stack[i] = 1;
            struct b1_msg *m = MSG(base, i);
            uint32_t refs = atomic_load(&m->refs), cls = m->size_class; /* read once */
            if (refs != 0 || cls != c)
                say(r, "record %u: on the class %u free list with refs %u and class %u", i, c, refs, cls);
            i = atomic_load((_Atomic uint32_t *)(pool + ((uint64_t)i << B1_POOL_MIN_SHIFT) +
                                                 offsetof(struct b1_msg, next_free)));
        }
    }
    uint64_t end = atomic_load(&h->pool_bump), off = (uint64_t)1 << B1_POOL_MIN_SHIFT, live_bytes = 0;
    if (end > LIM(base).pool_size) end = LIM(base).pool_size; /* read once, bounded */
    while (off < end) {
        uint32_t unit = (uint32_t)(off >> B1_POOL_MIN_SHIFT);
        struct b1_msg *m = MSG(base, unit);
        uint32_t cls;
        if (!b1_pool_record_at(base, off, end, &cls)) {
            uint64_t next = b1_pool_next_record(base, off, end);
            say(r, "record %u: cut short while it was carved (%llu bytes lost until gc on a bus held alone)",
                unit, (unsigned long long)(next - off));
            off = next;
            continue;
        }
        uint32_t refs = atomic_load(&m->refs);
        if (refs) {
            live_bytes += B1_CLASS_BYTES(cls);
            if (on_stack[unit]) say(r, "record %u: refs %u but on a free list", unit, refs);
            uint32_t named = refs_found[unit] & ~UNFINISHED;
            if (refs != named)
                say(r, "record %u: refs %u but %u entries name it%s", unit, refs, named,
                    named < refs ? " (leaked references)" : "");
            uint64_t stager = atomic_load(&m->stager);
            if ((refs_found[unit] & UNFINISHED) && stager && !b1_owner_alive(stager))
                say(r, "record %u: its transaction's process %d died with it unfinished", unit, B1_OWNER_PID(stager));
        } else if (!on_stack[unit]) {
            say(r, "record %u: free (refs 0) but on no free list (leaked)", unit);
        }
        off += B1_CLASS_BYTES(cls);
    }
    if ((int64_t)live_bytes != b1_usage_pool(base))
        say(r, "pool bytes in live records: %llu found, the usage counters say %lld",
            (unsigned long long)live_bytes, (long long)b1_usage_pool(base));
}

/* Every in-use entry: the record it names counted, its handle ids counted per handle,
 * its owner alive. */
static void check_entries(void *base, struct report *r, uint32_t *refs_found, uint32_t *pending_found) {
    struct b1_header *h = HDR(base);
    uint32_t bump = atomic_load(&h->entries_bump);
    if (bump > LIM(base).max_entries + 1) bump = LIM(base).max_entries + 1;
    for (uint32_t i = 1; i < bump; i++) {
        struct b1_entry *e = ENTRY(base, i);
        if (e->type == B1_ENTRY_FREE) continue;
        if ((e->type & B1_ENTRY_RECEIVING) && !b1_owner_alive(entry_owner(e)))
            say(r, "entry %u: claimed by process %d, which died (run gc)", i, B1_OWNER_PID(entry_owner(e)));
        uint32_t unit = e->msg, idx = e->idx, type = e->type; /* read once: checked, then used */
        uint64_t ts = e->ts;
        if (!unit) continue;
        struct b1_shape sh;
        int saved = b1_bad;
        if (!b1_msg_shape(base, unit, idx, &sh)) {
            b1_bad = saved;
            say(r, "entry %u: names record %u, which is free or damaged", i, unit);
            continue;
        }
        refs_found[unit]++;
        /* a block or a copy not yet staged: its transaction has not finished (high bit) */
        if (!(type & B1_ENTRY_RECEIVING) && ts != B1_TS_HELD && (ts == 0 || (ts & 1)))
            refs_found[unit] |= UNFINISHED;
        if ((type & 0xff) != B1_MSG_DATA) continue;
        uint64_t *ids = shape_ids(MSG(base, unit), &sh, idx);
        for (uint32_t k = 0; k < sh.n_handles; k++) {
            if (ids[k] == B1_HANDLE_INVALID) continue;
            uint32_t hi = (uint32_t)(ids[k] & B1_HANDLE_INDEX_MASK);
            if (hi == 0 || hi > LIM(base).max_handles || (ids[k] >> B1_HANDLE_INDEX_BITS) != HANDLE(base, hi)->gen)
                say(r, "entry %u: carries handle id %llu, which names no handle", i, (unsigned long long)ids[k]);
            else
                pending_found[hi]++;
        }
    }
}

static void check_handles(void *base, struct report *r, const uint32_t *pending_found, const uint8_t *free_handle) {
    struct b1_header *h = HDR(base);
    uint32_t bump = atomic_load(&h->handles_bump);
    if (bump > LIM(base).max_handles + 1) bump = LIM(base).max_handles + 1;
    for (uint32_t i = 1; i < bump; i++) {
        struct b1_handle *hd = HANDLE(base, i);
        if (free_handle[i]) continue;
        if (hd->pending != pending_found[i])
            say(r, "handle %u: pending %u but %u messages in flight carry it", i, hd->pending, pending_found[i]);
        if (!hd->refs && !hd->pending) say(r, "handle %u: neither held nor in flight, yet not free (leaked)", i);
    }
    uint32_t nodes = atomic_load(&h->nodes_bump);
    if (nodes > LIM(base).max_nodes + 1) nodes = LIM(base).max_nodes + 1;
    for (uint32_t n = 1; n < nodes; n++) {
        struct b1_node *nd = NODE(base, n);
        if (nd->state == B1_NODE_FREE) continue;
        uint32_t steps = 0;
        for (uint32_t hi = nd->holders; hi; hi = HANDLE(base, hi)->next_holder) {
            if (!b1_step(&steps, LIM(base).max_handles) || hi > LIM(base).max_handles) {
                say(r, "node %u: its holder list has a cycle or an index out of range", n);
                break;
            }
            if (HANDLE(base, hi)->node != n || free_handle[hi])
                say(r, "node %u: holder list names handle %u, which is not a handle to it", n, hi);
        }
        if (nd->state == B1_NODE_DESTROYING && !b1_owner_alive(nd->destroyer))
            say(r, "node %u: its destroyer (process %d) died before the stamp (run gc)", n, B1_OWNER_PID(nd->destroyer));
    }
}

/* Each live peer's handle counters against the handle slots it holds (held or in flight,
 * as b1_gc_sole recounts them): n_handles, each share of it, and their sum.  Slots and
 * counters are read once each, bounded before they index. */
static int check_handle_charges(void *base, struct report *r) {
    uint32_t peers = b1_bounded(&HDR(base)->peers_bump, LIM(base).max_peers);
    uint32_t handles = b1_bounded(&HDR(base)->handles_bump, LIM(base).max_handles);
    uint32_t *held = calloc((size_t)peers * (B1_CHARGERS + 1), sizeof *held); /* [slot][share], then total */
    if (!held) return -ENOMEM;
    for (uint32_t i = 1; i < handles; i++) {
        struct b1_handle *hd = HANDLE(base, i);
        uint32_t owner = hd->peer_slot, charger = hd->charger; /* read once: checked, then indices */
        if ((hd->refs || hd->pending) && owner < peers) {
            held[(size_t)owner * (B1_CHARGERS + 1) + charger % B1_CHARGERS]++;
            held[(size_t)owner * (B1_CHARGERS + 1) + B1_CHARGERS]++;
        }
    }
    for (uint32_t s = 1; s < peers; s++) {
        struct b1_peer *p = PEER(base, s);
        if (!__atomic_load_n(&p->lock_initialised, __ATOMIC_ACQUIRE) || p->state == B1_PEER_FREE) continue;
        const uint32_t *found = held + (size_t)s * (B1_CHARGERS + 1);
        uint32_t n = atomic_load(&p->n_handles);
        uint64_t sum = 0;
        if (n != found[B1_CHARGERS])
            say(r, "peer slot %u: n_handles %u but it holds %u handles", s, n, found[B1_CHARGERS]);
        for (uint32_t c = 0; c < B1_CHARGERS; c++) {
            uint32_t share = atomic_load(&p->share_handles[c]);
            sum += share;
            if (share != found[c])
                say(r, "peer slot %u: share %u of its handles says %u, %u handles are charged to it", s, c,
                    share, found[c]);
        }
        if (sum != n)
            say(r, "peer slot %u: its shares of handles add up to %llu, n_handles says %u", s,
                (unsigned long long)sum, n);
    }
    free(held);
    return 0;
}

static void check_peers(void *base, struct report *r) {
    struct b1_header *h = HDR(base);
    uint32_t bump = atomic_load(&h->peers_bump);
    if (bump > LIM(base).max_peers + 1) bump = LIM(base).max_peers + 1;
    for (uint32_t s = 1; s < bump; s++) {
        struct b1_peer *p = PEER(base, s);
        if (!__atomic_load_n(&p->lock_initialised, __ATOMIC_ACQUIRE) || p->state == B1_PEER_FREE) continue;
        if (p->broken) {
            say(r, "peer slot %u: broken (a takeover could not repair its queue)", s);
            continue;
        }
        int q = b1_queue_check(base, s);
        if (q < 0) say(r, "peer slot %u: its queue fails verification (%s)", s, q == -EUCLEAN ? "tree, counters or clock" : "lock");
        if (p->state == B1_PEER_DISCONNECTING && !b1_owner_alive(atomic_load(&p->disconnector)))
            say(r, "peer slot %u: its disconnector (process %d) died mid-way (run gc)", s,
                B1_OWNER_PID(atomic_load(&p->disconnector)));
        uint64_t resetter = atomic_load(&p->resetter);
        if (p->state == B1_PEER_ACTIVE && resetter && !b1_owner_alive(resetter))
            say(r, "peer slot %u: its resetter (process %d) died mid-way (run gc)", s, B1_OWNER_PID(resetter));
        if (p->state == B1_PEER_ACTIVE && !p->pinned) {
            int used = 0, alive = 0;
            for (int i = 0; i < B1_PEER_PIDS; i++) {
                struct b1_holder h = p->holders[i]; /* read once */
                if (h.pid) {
                    used = 1;
                    alive |= b1_holder_alive(&h);
                }
            }
            if (used && !alive) say(r, "peer slot %u: every process that used it died (run gc)", s);
        }
    }
    uint64_t sweeper = atomic_load(&h->orphan_reaper);
    if (sweeper && !b1_owner_alive(sweeper)) say(r, "gc sweeper process %d died mid-sweep (run gc)", B1_OWNER_PID(sweeper));
}

/* The name table (names.c): each name sound, reached by its own lookup (its probe path
 * has no EMPTY slot, and it is the first of its name), the counts right. */
static void check_names(void *base, struct report *r) {
    uint32_t slots = VIEW(base)->names_slots, used = 0, tombs = 0;
    if (b1_names_lock(base)) {
        say(r, "name table: its lock cannot be taken");
        return;
    }
    for (uint32_t i = 0; i < slots; i++) {
        struct b1_name c; /* the slot read once: every check and message reads the copy */
        int sound = b1_name_read(base, i, &c);
        uint32_t state = atomic_load_explicit(&c.state, memory_order_relaxed);
        if (state > B1_NAME_TOMB) say(r, "name slot %u: state %u is none of empty, used, removed", i, state);
        tombs += state == B1_NAME_TOMB;
        if (state != B1_NAME_USED) continue;
        used++;
        if (!sound) {
            say(r, "name slot %u: its name fails its length, NUL or hash check", i);
            continue;
        }
        if (c.node == 0 || c.node > LIM(base).max_nodes)
            say(r, "name slot %u (%s): names node %u, out of range", i, c.name, c.node);
        uint32_t at = b1_name_find_locked(base, &c);
        if (at != i)
            say(r, "name slot %u (%s): %s", i, c.name,
                at == UINT32_MAX ? "not reachable from its home slot (an empty slot on its probe path)"
                                 : "the name is in the table twice");
    }
    if (used != NAMES(base)->used) say(r, "name table: %u names found, its count says %u", used, NAMES(base)->used);
    if (tombs != NAMES(base)->tombs)
        say(r, "name table: %u removed slots found, its count says %u", tombs, NAMES(base)->tombs);
    b1_names_unlock(base);
}

int b1_fsck(void *base, char *out, uint32_t outlen) {
    struct b1_header *h = HDR(base);
    struct report r = {out, outlen, 0, 0};
    if (out && outlen) out[0] = 0;
    uint64_t units = LIM(base).pool_size >> B1_POOL_MIN_SHIFT;
    uint32_t biggest = LIM(base).max_entries;
    if (LIM(base).max_nodes > biggest) biggest = LIM(base).max_nodes;
    if (LIM(base).max_handles > biggest) biggest = LIM(base).max_handles;
    if (LIM(base).max_peers > biggest) biggest = LIM(base).max_peers;
    uint8_t *seen = calloc((size_t)biggest + 2, 1), *on_stack = calloc(units + 1, 1),
            *free_handle = calloc((size_t)LIM(base).max_handles + 2, 1);
    uint32_t *refs_found = calloc(units + 1, sizeof *refs_found),
             *pending_found = calloc((size_t)LIM(base).max_handles + 2, sizeof *pending_found);
    int ret = -ENOMEM;
    if (seen && on_stack && free_handle && refs_found && pending_found) {
        check_tables(base, &r, seen);
        walk_stack(&(struct report){0}, "handle", &h->free_handles, (char *)HANDLE(base, 0),
                   sizeof(struct b1_handle), offsetof(struct b1_handle, next_free),
                   LIM(base).max_handles + 1, free_handle);
        check_entries(base, &r, refs_found, pending_found);
        check_pool(base, &r, refs_found, on_stack);
        check_handles(base, &r, pending_found, free_handle);
        check_peers(base, &r);
        check_names(base, &r);
        ret = check_handle_charges(base, &r) ? -ENOMEM : r.problems;
    }
    free(seen);
    free(on_stack);
    free(free_handle);
    free(refs_found);
    free(pending_found);
    return ret;
}
