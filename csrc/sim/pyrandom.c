/* pyrandom.c - CPython 3.11's random.Random, bit for bit (see pyrandom.h).
 *
 * MT19937 as Modules/_randommodule.c (itself Matsumoto and Nishimura's reference code);
 * the Python-level methods as Lib/random.py of 3.11. Floating point: genrand_res53's
 * a * 2**26 + b is exact (below 2**53), so contraction into a fused multiply-add cannot
 * change it, and sample's log(k * 3) / log(4) calls the same libm log that math.log does.
 */
#include "pyrandom.h"

#include <math.h>
#include <stdlib.h>

#define M 397
#define MATRIX_A 0x9908b0dfU
#define UPPER_MASK 0x80000000U
#define LOWER_MASK 0x7fffffffU

static void init_genrand(struct pyrandom *r, uint32_t s)
{
    uint32_t *mt = r->state;
    mt[0] = s;
    for (int i = 1; i < PYR_N; i++)
        mt[i] = 1812433253U * (mt[i - 1] ^ (mt[i - 1] >> 30)) + (uint32_t)i;
    r->index = PYR_N;
}

void pyr_seed(struct pyrandom *r, const uint32_t *key, size_t nkey)
{
    uint32_t *mt = r->state;
    init_genrand(r, 19650218U);
    size_t i = 1, j = 0;
    for (size_t k = PYR_N > nkey ? PYR_N : nkey; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525U)) + key[j] + (uint32_t)j;
        i++;
        j++;
        if (i >= PYR_N) {
            mt[0] = mt[PYR_N - 1];
            i = 1;
        }
        if (j >= nkey)
            j = 0;
    }
    for (size_t k = PYR_N - 1; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941U)) - (uint32_t)i;
        i++;
        if (i >= PYR_N) {
            mt[0] = mt[PYR_N - 1];
            i = 1;
        }
    }
    mt[0] = 0x80000000U;
}

struct pyrandom *pyr_new(const uint32_t *key, size_t nkey)
{
    if (!nkey)
        return NULL;
    struct pyrandom *r = malloc(sizeof *r);
    if (r)
        pyr_seed(r, key, nkey);
    return r;
}

void pyr_free(struct pyrandom *r)
{
    free(r);
}

void pyr_twist(struct pyrandom *r)
{
    static const uint32_t mag01[2] = {0x0U, MATRIX_A};
    uint32_t *mt = r->state, y;
    int kk;
    for (kk = 0; kk < PYR_N - M; kk++) {
        y = (mt[kk] & UPPER_MASK) | (mt[kk + 1] & LOWER_MASK);
        mt[kk] = mt[kk + M] ^ (y >> 1) ^ mag01[y & 0x1U];
    }
    for (; kk < PYR_N - 1; kk++) {
        y = (mt[kk] & UPPER_MASK) | (mt[kk + 1] & LOWER_MASK);
        mt[kk] = mt[kk + (M - PYR_N)] ^ (y >> 1) ^ mag01[y & 0x1U];
    }
    y = (mt[PYR_N - 1] & UPPER_MASK) | (mt[0] & LOWER_MASK);
    mt[PYR_N - 1] = mt[M - 1] ^ (y >> 1) ^ mag01[y & 0x1U];
    r->index = 0;
}

double pyr_random(struct pyrandom *r)
{
    return pyr_next_double(r);
}

uint32_t pyr_getrandbits(struct pyrandom *r, int k)
{
    if (k <= 0)
        return 0;           /* getrandbits(0) is 0 and draws nothing */
    return pyr_next32(r) >> (32 - k);
}

uint32_t pyr_randbelow(struct pyrandom *r, uint32_t n)
{
    int k = 32 - __builtin_clz(n);      /* n.bit_length() (n > 0) */
    uint32_t x = pyr_getrandbits(r, k);
    while (x >= n)
        x = pyr_getrandbits(r, k);
    return x;
}

int pyr_sample(struct pyrandom *r, uint32_t n, uint32_t k, uint32_t *out, uint32_t *scratch)
{
    if (k > n)
        return -1;
    /* random.py: an n-length pool when it is smaller than a k-length set */
    uint64_t setsize = 21;
    if (k > 5)
        setsize += (uint64_t)1 << (2 * (int)ceil(log((double)k * 3) / log(4.0)));
    if (n <= setsize) {
        for (uint32_t i = 0; i < n; i++)        /* non-selected at scratch[0 .. n - i) */
            scratch[i] = i;
        for (uint32_t i = 0; i < k; i++) {
            uint32_t j = pyr_randbelow(r, n - i);
            out[i] = scratch[j];
            scratch[j] = scratch[n - i - 1];
        }
    } else {
        /* the selected set as a bitmap over the first (n + 31) / 32 words of scratch */
        uint32_t words = n / 32 + (n % 32 != 0);
        for (uint32_t w = 0; w < words; w++)
            scratch[w] = 0;
        for (uint32_t i = 0; i < k; i++) {
            uint32_t j = pyr_randbelow(r, n);
            while (scratch[j / 32] >> (j % 32) & 1)
                j = pyr_randbelow(r, n);
            scratch[j / 32] |= 1U << (j % 32);
            out[i] = j;
        }
    }
    return 0;
}
