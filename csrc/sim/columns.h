/* columns.h - the C side of bus1py/causal/base.py's columnar wires (pack_columns,
 * read_head, read_columns, read_entries), shared by the dependency-list protocols.
 *
 * A wire is a header, then columns, then the payload, every integer little-endian:
 *   sender u16 | stamp u32 | counts u16[c] | columns ... | payload
 * each column a run of u16 ids or u32 stamps whose length is a count of the header or the
 * sum of a u16 length column. The protocol file names its counts and columns.
 *
 * Invariants:
 *   - Nothing here reads past `len`: col_head checks the header's bytes, and a protocol
 *     checks each section end against len (col_sum16 for lengths columns) before reading it.
 *   - col_mask sets a bit only for an id below n, so a mask of W = ceil(n / 64) words (see
 *     masks.h) is never written out of bounds, whatever the wire holds.
 * No cdef: this header declares nothing the Python side sees.
 */
#ifndef SIM_COLUMNS_H
#define SIM_COLUMNS_H

#include "machine.h"
#include "masks.h"

/* Wire integers as plain loads and columns as one copy on a little-endian host. */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static inline uint32_t ld16(const uint8_t *w) { uint16_t v; memcpy(&v, w, 2); return v; }
static inline uint32_t ld32(const uint8_t *w) { uint32_t v; memcpy(&v, w, 4); return v; }
#define PUTS(w, v, k, size, put) memcpy(w, v, (size) * (size_t)(k))
#else
#define ld16 sim_get16
#define ld32 sim_get32
#define PUTS(w, v, k, size, put) for (uint32_t i_ = 0; i_ < (k); i_++) put((w) + (size) * i_, (v)[i_])
#endif

/* the header: sender, stamp and c counts; its size (6 + 2c), or 0 if the wire is shorter */
struct col_head { uint32_t j, t, c[3]; };

HOT size_t col_head(struct col_head *h, const uint8_t *w, size_t len, int c)
{
    size_t size = 6 + 2 * (size_t)c;
    if (len < size)
        return 0;
    h->j = ld16(w);
    h->t = ld32(w + 2);
    for (int i = 0; i < c; i++)
        h->c[i] = ld16(w + 6 + 2 * i);
    return size;
}

/* the sum of a u16 lengths column of k entries */
HOT size_t col_sum16(const uint8_t *col, size_t k)
{
    size_t sum = 0;
    for (size_t i = 0; i < k; i++)
        sum += ld16(col + 2 * i);
    return sum;
}

/* Nonzero if any of the k u16 ids is at or above n. Branch-free, so it vectorizes. */
HOT int col_range(const uint8_t *ids, size_t k, uint32_t n)
{
    int bad = 0;
    for (size_t i = 0; i < k; i++)
        bad |= ld16(ids + 2 * i) >= n;
    return bad;
}

/* The k u16 ids as a mask (cleared first); nonzero if one is at or above n or repeated,
 * the mask then holding the ids before it. */
HOT int col_mask(word *m, const uint8_t *ids, size_t k, uint32_t n, size_t W)
{
    mclear(m, W);
    for (size_t i = 0; i < k; i++) {
        uint32_t x = ld16(ids + 2 * i);
        if (x >= n || BIT(m, x))
            return 1;
        SET(m, x);
    }
    return 0;
}

/* col_mask for ids already checked below n (col_range): branch-free, nonzero if one is
 * repeated, the mask then holding them all. */
HOT int col_mask_in(word *m, const uint8_t *ids, size_t k, size_t W)
{
    word twice = 0;
    mclear(m, W);
    for (size_t i = 0; i < k; i++) {
        uint32_t x = ld16(ids + 2 * i);
        twice |= BIT(m, x);
        SET(m, x);
    }
    return twice != 0;
}

#endif
