/* row.h - one sender's row of a dependency log: Python's dict {stamp: Dests} as (stamp,
 * mask) tuples in the dict's insertion order (ks.py's log[s], jpcy.py's CI_i[k]).
 *
 * Invariants:
 *   - t[0 .. len) are the stamps and m[x * W ..] their masks (masks.h); both live in one
 *     block of cap tuples (t first, cap even so m is 8-byte aligned), so a short row is one
 *     cache line at n <= 64.
 *   - Every operation keeps the order of the tuples it keeps: that order reaches the wire,
 *     so it is the Python dict's for every wire the Python machine accepts, also for rows
 *     not in stamp order (which honest machines never build; `seek` is a merge on the
 *     ascending ones).
 * No cdef: this header declares nothing the Python side sees.
 */
#ifndef SIM_ROW_H
#define SIM_ROW_H

#include <stdlib.h>
#include <string.h>

#include "masks.h"

struct row { uint32_t *t; word *m; uint32_t len, cap; };

/* Room for `need` tuples (doubling from 4); -1 out of memory, the row unchanged. */
static inline int row_room(struct row *r, uint32_t need, size_t W)
{
    uint32_t cap = r->cap ? r->cap : 4;
    while (cap < need)
        cap *= 2;
    if (cap == r->cap)
        return 0;
    uint32_t *t = malloc(cap * (sizeof *t + W * sizeof(word)));
    if (!t)
        return -1;
    word *m = (word *)(t + cap);
    if (r->len) {
        memcpy(t, r->t, r->len * sizeof *t);
        memcpy(m, r->m, (size_t)r->len * W * sizeof *m);
    }
    free(r->t);
    r->t = t;
    r->m = m;
    r->cap = cap;
    return 0;
}

static inline uint32_t row_max(const uint32_t *t, uint32_t len)
{ uint32_t x = 0; for (uint32_t i = 0; i < len; i++) x = t[i] > x ? t[i] : x; return x; }
static inline int ascending(const uint32_t *t, uint32_t len)
{ for (uint32_t i = 1; i < len; i++) if (t[i - 1] >= t[i]) return 0; return 1; }

/* The index of u in t[0..len), or -1. With `at` (t ascending and the queries of a pass
 * ascending), a pass is one linear merge. */
HOT long seek(const uint32_t *t, uint32_t len, uint32_t u, uint32_t *at)
{
    if (!at) {
        for (uint32_t i = 0; i < len; i++)
            if (t[i] == u)
                return i;
        return -1;
    }
    while (*at < len && t[*at] < u)
        ++*at;
    return *at < len && t[*at] == u ? (long)(*at)++ : -1;
}

/* Keeps the tuples x of r with keep(x), in order (W in scope). */
#define ROW_FILTER(r, keep) do { uint32_t k_ = 0; \
    for (uint32_t x = 0; x < (r)->len; x++) if (keep) { \
        (r)->t[k_] = (r)->t[x]; mcopy(MASK((r)->m, k_), MASK((r)->m, x), W); k_++; } \
    (r)->len = k_; } while (0)

/* PURGE_NULL_ENTRIES (ks) / R9 (jpcy): deletes the empty tuples but the one stamped top. */
HOT void row_purge(struct row *r, uint32_t top, size_t W)
{
    ROW_FILTER(r, r->t[x] == top || !mzero(MASK(r->m, x), W));
}

#endif
