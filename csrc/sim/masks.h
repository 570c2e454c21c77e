/* masks.h - sets of process ids as W-word bit masks, and hot functions compiled for W == 1.
 *
 * Invariants:
 *   - A mask is W = ceil(n / 64) words; process x is bit x % 64 of word x / 64. Only ids
 *     checked to be below n are ever set, so no bit at or above n is.
 *   - A function declared HOT with a trailing `const` W parameter and called through BY_W
 *     is inlined twice: with W the constant 1 (n <= 64, every size of the study, where the
 *     mask loops fold away) and with W from the machine. A caller of one of these helpers
 *     with a constant W gets straight-line code, no call.
 * No cdef: this header declares nothing the Python side sees.
 */
#ifndef SIM_MASKS_H
#define SIM_MASKS_H

#include <stddef.h>
#include <stdint.h>

typedef uint64_t word;

#define HOT static inline __attribute__((always_inline))
#define BY_W(W, f, ...) ((W) == 1 ? f(__VA_ARGS__, 1) : f(__VA_ARGS__, (W)))

#define BIT(m, x) ((m)[(x) >> 6] >> ((x) & 63) & 1)
#define SET(m, x) ((m)[(x) >> 6] |= (word)1 << ((x) & 63))
#define CLR(m, x) ((m)[(x) >> 6] &= ~((word)1 << ((x) & 63)))
/* mask x of an array of masks */
#define MASK(base, x) ((base) + (size_t)(x) * W)

HOT void mclear(word *d, size_t W) { for (size_t w = 0; w < W; w++) d[w] = 0; }
HOT void mcopy(word *d, const word *s, size_t W) { for (size_t w = 0; w < W; w++) d[w] = s[w]; }

/* no set bit; branch-free over the words */
HOT int mzero(const word *a, size_t W)
{
    word any = 0;
    for (size_t w = 0; w < W; w++)
        any |= a[w];
    return !any;
}

HOT int msame(const word *a, const word *b, size_t W)
{
    for (size_t w = 0; w < W; w++)
        if (a[w] != b[w])
            return 0;
    return 1;
}

HOT int mmeets(const word *a, const word *b, size_t W)
{
    for (size_t w = 0; w < W; w++)
        if (a[w] & b[w])
            return 1;
    return 0;
}

/* set bits of one word (no popcnt instruction at -O2 without -march) */
HOT uint32_t pop(word x)
{
    x -= x >> 1 & 0x5555555555555555u;
    x = (x & 0x3333333333333333u) + (x >> 2 & 0x3333333333333333u);
    return (uint32_t)(((x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Fu) * 0x0101010101010101u >> 56);
}

#endif
