/*
 * alloc.c -- lock-free allocation of table slots and pool records.
 *
 * Invariants:
 *   - A slot is carved once from its table's bump pointer and afterwards only moves
 *     between "in use" and its free stack; memory is never returned to the system, so a
 *     racing reader of a stale free-list link reads garbage but never faults, and the tag
 *     in the stack head makes its compare-and-swap fail.
 *   - Pool records come in size classes of a power of two plus one unit for the header
 *     (B1_CLASS_BYTES: 64 B .. 128 MiB of room).  A record never
 *     changes class, so a free record goes back to the stack of the class it was cut for.
 *   - Nothing here takes a lock: allocation is wait-free on the bump path and lock-free on
 *     the stack path, so it cannot deadlock with the per-queue locks and a process that
 *     dies here can leak at most the one slot it was taking.
 */
#include <errno.h>
#include <string.h>
#include "alloc.h"

__thread int b1_bad __attribute__((tls_model("initial-exec"))); /* see layout.h: an out-of-range index met during this call */

#define TAG(h) ((h) >> 32)
#define IDX(h) ((uint32_t)(h))
#define HEAD(tag, idx) (((uint64_t)(tag) << 32) | (uint64_t)(idx))

/* Pop a slot of `table`, whose indices are below `limit`: a scribbled link out of range
 * is not followed (b1_bad). */
static uint32_t stack_pop(b1_stack *s, char *table, size_t elem_size, size_t link_offset, uint64_t limit) {
    uint64_t h = atomic_load_explicit(&s->head, memory_order_acquire);
    for (;;) {
        uint32_t idx = IDX(h);
        if (idx == 0) return 0;
        if (idx >= limit) {
            b1_bad = 1;
            return 0;
        }
        _Atomic uint32_t *link = (_Atomic uint32_t *)(table + (size_t)idx * elem_size + link_offset);
        uint32_t next = atomic_load_explicit(link, memory_order_relaxed);
        if (atomic_compare_exchange_weak_explicit(&s->head, &h, HEAD(TAG(h) + 1, next),
                                                  memory_order_acq_rel, memory_order_acquire))
            return idx;
    }
}

static void stack_push(b1_stack *s, uint32_t idx, _Atomic uint32_t *link) {
    uint64_t h = atomic_load_explicit(&s->head, memory_order_relaxed);
    do {
        atomic_store_explicit(link, IDX(h), memory_order_relaxed);
    } while (!atomic_compare_exchange_weak_explicit(&s->head, &h, HEAD(TAG(h) + 1, idx),
                                                    memory_order_release, memory_order_relaxed));
}

/* Take a slot below `limit`: a recycled one if any, else (with a bump pointer) a fresh
 * one; 0 when the table is full. */
uint32_t b1_alloc_index(void *base, b1_stack *stack, _Atomic uint32_t *bump, uint32_t limit,
                        size_t link_offset, size_t elem_size, char *table) {
    (void)base;
    uint32_t idx = stack_pop(stack, table, elem_size, link_offset, limit);
    if (idx || !bump) return idx;
    uint32_t cur = atomic_load_explicit(bump, memory_order_relaxed);
    do {
        if (cur >= limit) return 0;
    } while (!atomic_compare_exchange_weak_explicit(bump, &cur, cur + 1,
                                                    memory_order_relaxed, memory_order_relaxed));
    return cur;
}

void b1_free_index(b1_stack *stack, uint32_t index, _Atomic uint32_t *link) {
    stack_push(stack, index, link);
}

static inline __typeof__(&((struct b1_header *)0)->usage[0]) shard(struct b1_header *h) {
    return &h->usage[(uint32_t)b1_pid() % B1_USAGE_SHARDS];
}

int64_t b1_usage_entries(void *base) {
    int64_t sum = 0;
    for (int i = 0; i < B1_USAGE_SHARDS; i++) sum += atomic_load(&HDR(base)->usage[i].entries);
    return sum;
}

int64_t b1_usage_pool(void *base) {
    int64_t sum = 0;
    for (int i = 0; i < B1_USAGE_SHARDS; i++) sum += atomic_load(&HDR(base)->usage[i].pool);
    return sum;
}

uint32_t b1_entry_alloc(void *base) {
    struct b1_header *h = HDR(base);
    uint32_t e = b1_alloc_index(base, &h->free_entries, &h->entries_bump, LIM(base).max_entries + 1,
                                offsetof(struct b1_entry, next_free), sizeof(struct b1_entry),
                                (char *)ENTRY(base, 0));
    if (e) atomic_fetch_add_explicit(&shard(h)->entries, 1, memory_order_relaxed);
    return e;
}

/* Free an entry its caller owns (layout.h), giving back its record reference first. */
void b1_entry_free(void *base, uint32_t e) {
    struct b1_header *h = HDR(base);
    struct b1_entry *en = ENTRY(base, e);
    b1_entry_put_msg(base, en);
    __atomic_store_n(&en->type, B1_ENTRY_FREE, __ATOMIC_RELEASE);
    atomic_fetch_sub_explicit(&shard(h)->entries, 1, memory_order_relaxed);
    b1_free_index(&h->free_entries, e, &en->next_free);
}

/* ---- the payload pool ---- */

static uint32_t size_class(uint64_t bytes) {
    uint32_t c = 0;
    while (c < B1_POOL_CLASSES && B1_CLASS_BYTES(c) < bytes) c++;
    return c;
}

static inline __attribute__((always_inline)) uint32_t pool_pop(void *base, uint32_t cls) {
    struct b1_header *h = HDR(base);
    /* a pool record's free-list link is its next_free word; units are 64 bytes */
    uint64_t bytes = B1_CLASS_BYTES(cls);
    if (bytes > LIM(base).pool_size) return 0;
    /* a record of this class must end inside the pool */
    return stack_pop(&h->pool_free[cls], (char *)base + VIEW(base)->off_pool, (size_t)1 << B1_POOL_MIN_SHIFT,
                     offsetof(struct b1_msg, next_free),
                     ((LIM(base).pool_size - bytes) >> B1_POOL_MIN_SHIFT) + 1);
}

/* A record of the smallest class that fits; larger classes serve when the pool is carved
 * out, so a pool fragmented into big free records still accepts small messages. */
uint32_t b1_msg_alloc(void *base, uint64_t size_needed, uint32_t len, uint32_t refs) {
    struct b1_header *h = HDR(base);
    uint32_t cls = size_class(size_needed);
    if (cls >= B1_POOL_CLASSES) return 0;
    uint64_t size = B1_CLASS_BYTES(cls);
    uint32_t unit = pool_pop(base, cls);
    uint32_t got = cls;
    if (!unit) {
        uint64_t cur = atomic_load_explicit(&h->pool_bump, memory_order_relaxed);
        for (;;) {
            /* unit 0 is never handed out: it stands for "none" */
            uint64_t start = cur ? cur : ((uint64_t)1 << B1_POOL_MIN_SHIFT);
            if (start + size > LIM(base).pool_size) break;
            if (atomic_compare_exchange_weak_explicit(&h->pool_bump, &cur, start + size,
                                                      memory_order_relaxed, memory_order_relaxed)) {
                unit = (uint32_t)(start >> B1_POOL_MIN_SHIFT);
                break;
            }
        }
    }
    for (uint32_t c = cls + 1; !unit && c < B1_POOL_CLASSES; c++) {
        unit = pool_pop(base, c);
        got = c;
    }
    if (!unit) return 0;
    struct b1_msg *m = MSG(base, unit);
    /* owned before it is counted: a sweep never sees this record with refs and no owner */
    atomic_store_explicit(&m->stager, b1_self(), memory_order_relaxed);
    atomic_store_explicit(&m->refs, refs, memory_order_release);
    m->len = len;
    m->n_handles = 0;
    m->n_dests = 0;
    m->type = 0;
    m->ts = 0;
    m->size_class = got;
    atomic_store_explicit(&m->carved, B1_MSG_CARVED ^ unit, memory_order_release);
    atomic_fetch_add_explicit(&shard(h)->pool, (int64_t)B1_CLASS_BYTES(got),
                              memory_order_relaxed);
    return unit;
}

int b1_pool_record_at(void *base, uint64_t off, uint64_t end, uint32_t *cls) {
    uint32_t unit = (uint32_t)(off >> B1_POOL_MIN_SHIFT);
    struct b1_msg *m = MSG(base, unit);
    if (atomic_load_explicit(&m->carved, memory_order_acquire) != (B1_MSG_CARVED ^ unit)) return 0;
    uint32_t c = __atomic_load_n(&m->size_class, __ATOMIC_RELAXED); /* read once */
    if (cls) *cls = c;
    return c < B1_POOL_CLASSES && off + B1_CLASS_BYTES(c) <= end;
}

/* The next unit whose header names itself as carved (the word is the unit's own, so a
 * payload matches it only by a 2^-32 chance or on purpose -- a writer who can do that can
 * scribble anything anyway); `end` when none. */
uint64_t b1_pool_next_record(void *base, uint64_t off, uint64_t end) {
    for (off += (uint64_t)1 << B1_POOL_MIN_SHIFT; off < end; off += (uint64_t)1 << B1_POOL_MIN_SHIFT)
        if (b1_pool_record_at(base, off, end, NULL)) return off;
    return end;
}

/* Return a record whose last reference the caller took (refs now 0) to its class. */
static inline __attribute__((always_inline)) void msg_free(void *base, uint32_t unit) {
    struct b1_header *h = HDR(base);
    struct b1_msg *m = MSG(base, unit);
    uint32_t cls = __atomic_load_n(&m->size_class, __ATOMIC_RELAXED); /* read once */
    if (cls >= B1_POOL_CLASSES) { /* scribbled: leak it rather than guess */
        b1_bad = 1;
        return;
    }
    atomic_store_explicit(&m->stager, 0, memory_order_relaxed);
    atomic_fetch_sub_explicit(&shard(h)->pool, (int64_t)B1_CLASS_BYTES(cls), memory_order_relaxed);
    stack_push(&h->pool_free[cls], unit, &m->next_free);
}

/* Drop one reference; the last one returns the record to its class.  A put on a free
 * record (refs 0) is refused (b1_bad): applying it would corrupt the free stack. */
void b1_msg_put(void *base, uint32_t unit) {
    struct b1_msg *m = MSG(base, unit);
    uint32_t refs = atomic_load_explicit(&m->refs, memory_order_relaxed);
    do {
        if (refs == 0) {
            b1_bad = 1;
            return;
        }
    } while (!atomic_compare_exchange_weak_explicit(&m->refs, &refs, refs - 1, memory_order_acq_rel,
                                                    memory_order_relaxed));
    if (refs == 1) msg_free(base, unit);
}

/* The entry's reference to its record, released by the one party whose exchange of msg
 * to 0 saw it (layout.h): a kill before the put leaks the record, never frees it twice. */
void b1_entry_put_msg(void *base, struct b1_entry *e) {
    uint32_t unit = __atomic_exchange_n(&e->msg, 0, __ATOMIC_ACQ_REL);
    if (unit) b1_msg_put(base, unit);
}
