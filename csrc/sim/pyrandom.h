/* pyrandom.h - CPython 3.11's random.Random, bit for bit, for the simulator's C loop.
 *
 * The simulator's figures must not depend on which loop ran (bus1py/sim/engine.py is the
 * reference), so the C loop draws exactly the numbers random.Random(seed) draws, in the
 * same order: MT19937 (Modules/_randommodule.c) seeded by init_by_array over the 32-bit
 * words of abs(seed), least significant first (one zero word for seed 0); `random()` as
 * genrand_res53; `getrandbits(k)` for k <= 32; `_randbelow` as
 * Lib/random.py's _randbelow_with_getrandbits; `sample` as Lib/random.py's, including its
 * choice between the pool and the set branch. tests/sim/test_pyrandom.py holds each to
 * random.Random on many seeds.
 *
 * Invariants:
 *   - state[0..623] and index are exactly CPython's RandomObject after the same calls.
 *   - No allocation per draw: pyr_sample works in the caller's scratch.
 */
#ifndef BUS1PY_SIM_PYRANDOM_H
#define BUS1PY_SIM_PYRANDOM_H

#include <stddef.h>
#include <stdint.h>

#define PYR_N 624

struct pyrandom {
    uint32_t state[PYR_N];
    int index;
};

/* cdef-begin */
struct pyrandom;
/* random.Random(seed): key = the 32-bit words of abs(seed), least significant first
 * (Python computes them); NULL on ENOMEM or nkey == 0 */
struct pyrandom *pyr_new(const uint32_t *key, size_t nkey);
void pyr_free(struct pyrandom *r);
/* Random.random(): a double in [0, 1) from two 32-bit draws */
double pyr_random(struct pyrandom *r);
/* Random.getrandbits(k), 0 <= k <= 32 */
uint32_t pyr_getrandbits(struct pyrandom *r, int k);
/* Random._randbelow(n), 0 < n < 2**32 */
uint32_t pyr_randbelow(struct pyrandom *r, uint32_t n);
/* Random.sample(range(n), k) into out[0..k), in selection order, 0 <= k <= n < 2**32
 * (population[i] for the sample of a sequence `population` of length n). scratch: n words
 * the caller owns, any contents, clobbered. Returns 0, or -1 if k > n. */
int pyr_sample(struct pyrandom *r, uint32_t n, uint32_t k, uint32_t *out, uint32_t *scratch);
/* cdef-end */

void pyr_seed(struct pyrandom *r, const uint32_t *key, size_t nkey);
/* regenerates state[] (MT19937's twist), index = 0 */
void pyr_twist(struct pyrandom *r);

/* genrand_uint32 and genrand_res53, inline for the simulator's loop */
static inline uint32_t pyr_next32(struct pyrandom *r)
{
    if (r->index >= PYR_N)
        pyr_twist(r);
    uint32_t y = r->state[r->index++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= y >> 18;
    return y;
}

static inline double pyr_next_double(struct pyrandom *r)
{
    uint32_t a = pyr_next32(r) >> 5, b = pyr_next32(r) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

#endif
