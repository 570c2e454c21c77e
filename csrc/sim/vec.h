/* vec.h - the elementwise u32 loops of the vector-clock machines (bss.c, rst.c, ses.c): a
 * wire's little-endian u32 vector against a host array.
 *
 * Invariants:
 *   - Each loop reads exactly `count` u32 of the wire and gives the result of the plain
 *     one-by-one loop; on a little-endian host it runs in blocks of 8 with no early exit
 *     inside a block, so the compiler vectorises it, and the AVX2 clone (an unsigned
 *     max/compare per 8 lanes) is picked at load time where the CPU has it.
 *   - Nothing here allocates or keeps state.
 * static inline: a clone pair per including file, called directly (target_clones cannot be
 * inlined, and the ifunc resolves once at load).
 * No cdef: this header declares nothing the Python side sees.
 */
#ifndef SIM_VEC_H
#define SIM_VEC_H

#include "machine.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define VEC_LE 1
#else
#define VEC_LE 0
#endif

/* dst[x] = max(dst[x], u32 x of src) for x < count */
__attribute__((target_clones("avx2", "default"), unused))
static inline void vec_max_into(uint32_t *restrict dst, const uint8_t *restrict src, size_t count)
{
    size_t x = 0;
    for (; VEC_LE && x + 8 <= count; x += 8) {
        for (int i = 0; i < 8; i++) {
            uint32_t v;
            memcpy(&v, src + 4 * (x + i), sizeof v);
            dst[x + i] = v > dst[x + i] ? v : dst[x + i];
        }
    }
    for (; x < count; x++) {
        uint32_t v = sim_get32(src + 4 * x);
        dst[x] = v > dst[x] ? v : dst[x];
    }
}

/* the first x with u32 x of src > vt[x], or count: the block that has one, one by one */
__attribute__((target_clones("avx2", "default"), unused))
static inline size_t vec_first_above(const uint8_t *src, const uint32_t *vt, size_t count)
{
    size_t x = 0;
    for (; VEC_LE && x + 8 <= count; x += 8) {
        int any = 0;
        for (int i = 0; i < 8; i++) {
            uint32_t v;
            memcpy(&v, src + 4 * (x + i), sizeof v);
            any |= v > vt[x + i];
        }
        if (any)
            break;
    }
    for (; x < count && sim_get32(src + 4 * x) <= vt[x]; x++)
        ;
    return x;
}

/* the wire encoding of count u32 */
static inline void vec_encode(uint8_t *dst, const uint32_t *src, size_t count)
{
    if (VEC_LE) {
        memcpy(dst, src, 4 * count);
        return;
    }
    for (size_t x = 0; x < count; x++)
        sim_put32(dst + 4 * x, src[x]);
}

#endif
