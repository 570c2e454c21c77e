/* held.h - the held wires of the sequence-numbered causal machines (bss.c, rst.c): per
 * sender, a ring of the wires that arrived ahead of their turn, and the waiter bitsets and
 * work stack their release() walks.
 *
 * Invariants:
 *   - For sender j with base = the count the machine has delivered from j, win[j].a holds
 *     at index s & (win[j].cap - 1) the held wire from j with stamp s, for s in base + 1 ..
 *     base + win[j].cap; cap is a power of two or 0 and never exceeds HELD_MAX_WINDOW (a
 *     stamp further ahead is refused rather than allocated for). A slot whose wire is NULL
 *     is empty; win[j].count counts the full ones and `count` sums them over all senders.
 *   - Every held wire is its own malloc'd copy, owned by the ring until held_take hands it
 *     to the caller.
 *   - waiters[k] (`words` u64 each) is a bitset of senders whose next wire waits on k.
 *   - A release walks held_start then held_next: work is the LIFO stack of senders whose
 *     count grew; each round pops k, moves waiters[k] and k into retry, and yields retry's
 *     senders in ascending id order (the Python machines' `sorted(retry)`); bits and w are
 *     the walk's place in retry (bits: retry[w]'s senders not yet yielded).
 * Everything is static inline: the machines' receive paths run as if written out in place.
 * No cdef: this header declares nothing the Python side sees.
 */
#ifndef SIM_HELD_H
#define SIM_HELD_H

#include "machine.h"

#include <stdlib.h>

/* the widest window of held wires from one sender (far beyond any simulator run) */
#define HELD_MAX_WINDOW (1u << 24)

/* a held wire; `off` and `for_me` are the machine's to set after held_put (bss: where
 * VT_m starts, whether we are a destination; rst does not use them) */
struct held_wire { uint8_t *wire; uint32_t len, off; uint8_t for_me; };
struct held_ring { struct held_wire *a; uint32_t cap, count; };

struct held {
    struct held_ring *win;      /* n rings */
    uint64_t *waiters, *retry;  /* n bitsets of `words` u64 each; one scratch bitset */
    size_t words;
    uint16_t *work;             /* release()'s stack of senders whose count grew */
    size_t nwork, workcap;
    uint64_t bits;
    size_t w;
    long count;
};

static inline int held_has(const uint64_t *set, size_t x) { return set[x / 64] >> (x % 64) & 1; }
static inline void held_add(uint64_t *set, size_t x) { set[x / 64] |= 1ull << (x % 64); }

static inline int held_init(struct held *h, size_t n)
{
    h->words = (n + 63) / 64;
    h->win = calloc(n, sizeof *h->win);
    h->waiters = calloc(n * h->words, sizeof *h->waiters);
    h->retry = calloc(h->words, sizeof *h->retry);
    return h->win && h->waiters && h->retry ? 0 : -1;
}

static inline void held_fini(struct held *h, size_t n)
{
    for (size_t j = 0; h->win && j < n; j++) {
        for (uint32_t i = 0; i < h->win[j].cap; i++)
            free(h->win[j].a[i].wire);
        free(h->win[j].a);
    }
    free(h->win);
    free(h->waiters);
    free(h->retry);
    free(h->work);
}

/* the held wire from j with stamp s (base delivered from j), or NULL */
static inline struct held_wire *held_find(const struct held *h, int j, uint32_t base, uint32_t s)
{
    const struct held_ring *r = &h->win[j];
    if (!r->count || s <= base || s - base - 1 >= r->cap)
        return NULL;
    struct held_wire *w = &r->a[s & (r->cap - 1)];
    return w->wire ? w : NULL;
}

/* makes win[j] cover s (> base); -1 on ENOMEM or a window too wide */
static inline int held_widen(struct held *h, int j, uint32_t base, uint32_t s)
{
    struct held_ring *r = &h->win[j];
    uint32_t cap = r->cap, first = base + 1, need = s - base, want;
    if (need <= cap)
        return 0;
    if (need > HELD_MAX_WINDOW)
        return -1;
    for (want = cap ? cap : 8; want < need; want *= 2)
        ;
    struct held_wire *a = calloc(want, sizeof *a);
    if (!a)
        return -1;
    for (uint32_t i = 0; i < cap; i++)
        if (r->a[i].wire) {
            uint32_t at = first + ((i - first) & (cap - 1));
            a[at & (want - 1)] = r->a[i];
        }
    free(r->a);
    r->a = a;
    r->cap = want;
    return 0;
}

/* holds a copy of the wire from j with stamp s (win[j] widened to cover it); NULL on ENOMEM */
static inline struct held_wire *held_put(struct held *h, int j, uint32_t s, const uint8_t *data,
                                         size_t len)
{
    struct held_wire *w = &h->win[j].a[s & (h->win[j].cap - 1)];
    w->wire = malloc(len);
    if (!w->wire)
        return NULL;
    memcpy(w->wire, data, len);
    w->len = (uint32_t)len;
    h->count++;
    h->win[j].count++;
    return w;
}

/* empties w's slot in win[j]; the wire is the caller's to free */
static inline uint8_t *held_take(struct held *h, int j, struct held_wire *w)
{
    uint8_t *wire = w->wire;
    w->wire = NULL;
    h->count--;
    h->win[j].count--;
    return wire;
}

static inline int held_push(struct held *h, int j, struct sim_step *step)
{
    if (sim_reserve((void **)&h->work, &h->workcap, h->nwork, 1, sizeof *h->work) < 0)
        return sim_fail(step, "out of memory");
    h->work[h->nwork++] = (uint16_t)j;
    return 0;
}

/* starts a release walk: the count from j0 just grew */
static inline int held_start(struct held *h, int j0, struct sim_step *step)
{
    h->nwork = 0;
    h->bits = 0;
    h->w = h->words;
    return held_push(h, j0, step);
}

/* the walk's next sender to retry, or -1 when the work stack is empty */
static inline int held_next(struct held *h)
{
    while (!h->bits) {
        if (++h->w >= h->words) {
            if (!h->nwork)
                return -1;
            int k = h->work[--h->nwork];
            uint64_t *wk = h->waiters + (size_t)k * h->words;
            memcpy(h->retry, wk, h->words * sizeof *wk);
            memset(wk, 0, h->words * sizeof *wk);
            held_add(h->retry, (size_t)k);
            h->w = 0;
        }
        h->bits = h->retry[h->w];
    }
    int j = (int)(h->w * 64 + (size_t)__builtin_ctzll(h->bits));
    h->bits &= h->bits - 1;
    return j;
}

#endif
