/* bss.c - the C twin of bus1py/causal/bss.py (Birman-Schiper-Stephenson causal broadcast,
 * serving unicast and multicast by broadcast).
 *
 * Wire: `k u16 | dests u16[k] | VT_m u32[n] | payload`, to every other process in id order;
 * a non-destination's copy has no payload. Cost (2 + 2k, 4n, n, data), data = 1 only on the
 * destinations' copies. vt[me] ticks before the stamp is taken.
 * Delivery: m from j is delivered at i iff VT_m[j] = vt[j] + 1 and VT_m[k] <= vt[k] for every
 * k != j; delivery raises vt[j] by one, and a non-destination then discards the copy (it
 * never reaches sim_deliver).
 *
 * Invariants (the Python module's, with its dicts and sets as flat arrays):
 *   - vt[k] counts k's broadcasts delivered here; vt[me] counts our own sends.
 *   - win[j].a holds, at index s & (win[j].cap - 1), the whole wire of the held copy from j
 *     with VT_m[j] = s, for s in vt[j] + 1 .. vt[j] + win[j].cap (cap a power of two or 0);
 *     win[j].count counts them and held sums the counts, non-destinations' copies included.
 *   - After every input no held copy is deliverable. Only j's next copy (s = vt[j] + 1) can
 *     be; while it is held, bit j of waiters[k] (a bitset of n bits) is set for the first k
 *     with VT_m[k] > vt[k] (vt[j] counted as bumped). A delivery from k raises only vt[k], so
 *     release() retries k's next copy and the senders of waiters[k] in ascending id order
 *     (bss.py's `sorted(retry)`), working a LIFO stack of senders whose count grew: the
 *     same order bss.py delivers in. A bit may outlive its copy (bss.py's sets keep such
 *     entries too); a retry then finds nothing or retries the sender's current next copy,
 *     in both machines alike.
 */
#include "machine.h"

#include <stdlib.h>

/* the widest window of held copies from one sender (far beyond any simulator run; a wire
 * further ahead is refused rather than allocated for) */
#define BSS_MAX_WINDOW (1u << 24)

struct held { uint8_t *wire; uint32_t len, vm; uint8_t for_me; };   /* VT_m at wire + vm */
/* a sender's held messages: count of them, in a ring of cap slots */
struct ring { struct held *a; uint32_t cap, count; };

struct bss {
    struct sim_machine base;
    uint32_t *vt;
    struct ring *win;
    uint64_t *waiters, *retry;  /* n bitsets of `words` u64 each; one scratch bitset */
    uint64_t *mark;             /* scratch bitset: a send's or a wire's destinations */
    size_t words;
    uint16_t *work;             /* release()'s stack of senders whose count grew */
    size_t nwork, workcap;
    long held;
};

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define BSS_LE 1
#else
#define BSS_LE 0
#endif

static inline int has(const uint64_t *set, size_t x) { return set[x / 64] >> (x % 64) & 1; }
static inline void add(uint64_t *set, size_t x) { set[x / 64] |= 1ull << (x % 64); }

static int bss_init(struct sim_machine *m)
{
    struct bss *b = (struct bss *)m;
    size_t n = (size_t)m->n;
    b->words = (n + 63) / 64;
    b->vt = calloc(n, sizeof *b->vt);
    b->win = calloc(n, sizeof *b->win);
    b->waiters = calloc(n * b->words, sizeof *b->waiters);
    b->retry = calloc(b->words, sizeof *b->retry);
    b->mark = calloc(b->words, sizeof *b->mark);
    return b->vt && b->win && b->waiters && b->retry && b->mark ? 0 : -1;
}

static void bss_fini(struct sim_machine *m)
{
    struct bss *b = (struct bss *)m;
    for (int j = 0; b->win && j < m->n; j++) {
        for (uint32_t i = 0; i < b->win[j].cap; i++)
            free(b->win[j].a[i].wire);
        free(b->win[j].a);
    }
    free(b->vt);
    free(b->win);
    free(b->waiters);
    free(b->retry);
    free(b->mark);
    free(b->work);
}

static int bss_send(struct sim_machine *m, const uint16_t *dests, int k,
                    const uint8_t *payload, size_t len, struct sim_step *step)
{
    struct bss *b = (struct bss *)m;
    size_t n = (size_t)m->n, hl = 2 + 2 * (size_t)k, body = hl + 4 * n;
    if (len > UINT32_MAX - body)
        return sim_fail(step, "payload of %zu bytes too long for one wire", len);
    if (b->vt[m->me] >= UINT32_MAX)
        return sim_fail(step, "process %d exhausted its 32-bit broadcast counter", m->me);
    b->vt[m->me]++;
    for (int i = 0; i < k; i++)
        add(b->mark, dests[i]);
    struct sim_cost cost = {(uint32_t)hl, (uint32_t)(4 * n), (uint32_t)n, 0};
    const uint8_t *first = NULL;
    int rc = 0;
    for (size_t d = 0; d < n; d++) {
        if (d == (size_t)m->me)
            continue;
        cost.data = (uint8_t)has(b->mark, d);
        uint8_t *w = sim_emit(step, (uint32_t)d, (uint32_t)(body + (cost.data ? len : 0)), cost);
        if (!w) {
            rc = -1;
            break;
        }
        if (first)
            memcpy(w, first, body);
        else {
            sim_put16(w, (uint32_t)k);
            for (int i = 0; i < k; i++)
                sim_put16(w + 2 + 2 * i, dests[i]);
            for (size_t x = 0; x < n; x++)
                sim_put32(w + hl + 4 * x, b->vt[x]);
            first = w;
        }
        if (cost.data)
            memcpy(w + body, payload, len);
    }
    memset(b->mark, 0, b->words * sizeof *b->mark);
    return rc;
}

/* the held copy from j with VT_m[j] = s, or NULL */
static struct held *lookup(struct bss *b, int j, uint32_t s)
{
    uint32_t cap = b->win[j].cap;
    if (!b->win[j].count || s <= b->vt[j] || s - b->vt[j] - 1 >= cap)
        return NULL;
    struct held *h = &b->win[j].a[s & (cap - 1)];
    return h->wire ? h : NULL;
}

/* makes win[j] cover s (> vt[j]); -1 on ENOMEM or a window too wide */
static int widen(struct bss *b, int j, uint32_t s)
{
    uint32_t cap = b->win[j].cap, first = b->vt[j] + 1, need = s - b->vt[j], want;
    if (need <= cap)
        return 0;
    if (need > BSS_MAX_WINDOW)
        return -1;
    for (want = cap ? cap : 8; want < need; want *= 2)
        ;
    struct held *w = calloc(want, sizeof *w);
    if (!w)
        return -1;
    for (uint32_t i = 0; i < cap; i++)
        if (b->win[j].a[i].wire) {
            uint32_t at = first + ((i - first) & (cap - 1));
            w[at & (want - 1)] = b->win[j].a[i];
        }
    free(b->win[j].a);
    b->win[j].a = w;
    b->win[j].cap = want;
    return 0;
}

/* the first k with VT_m[k] > vt[k], or n: blocks of 8 without an early exit (so they
 * vectorise; the AVX2 clone is picked at load time where the CPU has it), then the block
 * that has one, one by one */
__attribute__((target_clones("avx2", "default")))
static size_t ahead(const struct bss *b, const uint8_t *vm)
{
    size_t n = (size_t)b->base.n, k = 0;
    const uint32_t *vt = b->vt;
    for (; BSS_LE && k + 8 <= n; k += 8) {
        int any = 0;
        for (int i = 0; i < 8; i++) {
            uint32_t v;
            memcpy(&v, vm + 4 * (k + i), sizeof v);
            any |= v > vt[k + i];
        }
        if (any)
            break;
    }
    for (; k < n && sim_get32(vm + 4 * k) <= vt[k]; k++)
        ;
    return k;
}

static int push(struct bss *b, int j, struct sim_step *step)
{
    if (sim_reserve((void **)&b->work, &b->workcap, b->nwork, 1, sizeof *b->work) < 0)
        return sim_fail(step, "out of memory");
    b->work[b->nwork++] = (uint16_t)j;
    return 0;
}

/* bss.py's _release: vt[j0] just grew */
static int release(struct bss *b, int j0, struct sim_step *step)
{
    size_t words = b->words, n = (size_t)b->base.n;
    b->nwork = 0;
    if (push(b, j0, step) < 0)
        return -1;
    while (b->nwork) {
        int k = b->work[--b->nwork];
        uint64_t *wk = b->waiters + (size_t)k * words;
        memcpy(b->retry, wk, words * sizeof *wk);
        memset(wk, 0, words * sizeof *wk);
        add(b->retry, (size_t)k);
        for (size_t w = 0; w < words; w++)
            for (uint64_t bits = b->retry[w]; bits; bits &= bits - 1) {
                int j = (int)(w * 64 + (size_t)__builtin_ctzll(bits));
                struct held *h = lookup(b, j, b->vt[j] + 1);
                if (!h)
                    continue;
                b->vt[j]++;
                size_t at = ahead(b, h->wire + h->vm);
                if (at < n) {
                    add(b->waiters + at * words, (size_t)j);
                    b->vt[j]--;
                    continue;
                }
                uint8_t *wire = h->wire;
                h->wire = NULL;
                b->held--;
                b->win[j].count--;
                size_t end = h->vm + 4 * n;
                int rc = h->for_me ? sim_deliver(step, (uint32_t)j, wire + end,
                                                 (uint32_t)(h->len - end)) : 0;
                free(wire);
                if (rc < 0 || push(b, j, step) < 0)
                    return -1;
            }
    }
    return 0;
}

/* bss.py's _decode: every check, no state change; sets *for_me */
static int decode(struct bss *b, int src, const uint8_t *data, size_t size, int *for_me,
                  struct sim_step *step)
{
    size_t n = (size_t)b->base.n, me = (size_t)b->base.me;
    if (size < 2)
        return sim_fail(step, "wire truncated: %zu bytes, needs at least 2", size);
    size_t k = sim_get16(data);
    if (k < 1 || k >= n)
        return sim_fail(step, "destination count %zu not in 1..%zu", k, n - 1);
    size_t end = 2 + 2 * k + 4 * n;
    if (size < end)
        return sim_fail(step, "wire truncated: %zu bytes, header and VT need %zu", size, end);
    if (size > UINT32_MAX)
        return sim_fail(step, "wire of %zu bytes too long", size);
    int bad = 0;
    *for_me = 0;
    for (size_t i = 0; i < k; i++) {
        size_t d = sim_get16(data + 2 + 2 * i);
        if (d >= n || d == (size_t)src || has(b->mark, d)) {
            bad = 1;
            break;
        }
        add(b->mark, d);
        *for_me |= d == me;
    }
    memset(b->mark, 0, b->words * sizeof *b->mark);
    if (bad)
        return sim_fail(step, "bad destination list from %d", src);
    const uint8_t *vm = data + 2 + 2 * k;
    if (size > end && !*for_me)
        return sim_fail(step, "a copy to a non-destination carries a payload");
    uint32_t s = sim_get32(vm + 4 * (size_t)src);
    if (s <= b->vt[src] || lookup(b, src, s))
        return sim_fail(step, "duplicate broadcast %u from %d", s, src);
    if (sim_get32(vm + 4 * me) > b->vt[me])
        return sim_fail(step, "stamp names our broadcast %u, we sent %u",
                        sim_get32(vm + 4 * me), b->vt[me]);
    return 0;
}

static int bss_receive(struct sim_machine *m, int src, const uint8_t *data, size_t len,
                       struct sim_step *step)
{
    struct bss *b = (struct bss *)m;
    size_t n = (size_t)m->n;
    int for_me = 0;
    if (decode(b, src, data, len, &for_me, step) < 0)
        return -1;
    uint32_t vmo = 2 + 2 * sim_get16(data), s = sim_get32(data + vmo + 4 * (size_t)src);
    b->vt[src]++;
    if (s == b->vt[src]) {
        size_t at = ahead(b, data + vmo);
        if (at == n) {
            size_t end = vmo + 4 * n;
            if (for_me && sim_deliver(step, (uint32_t)src, data + end,
                                      (uint32_t)(len - end)) < 0)
                return -1;
            return b->held ? release(b, src, step) : 0;
        }
        add(b->waiters + at * b->words, (size_t)src);  /* the next from src, waiting for `at` */
    }
    b->vt[src]--;
    if (widen(b, src, s) < 0)
        return sim_fail(step, "broadcast %u from %d: no room to hold it", s, src);
    struct held *h = &b->win[src].a[s & (b->win[src].cap - 1)];
    h->wire = malloc(len);
    if (!h->wire)
        return sim_fail(step, "out of memory");
    memcpy(h->wire, data, len);
    *h = (struct held){h->wire, (uint32_t)len, vmo, (uint8_t)for_me};
    b->held++;
    b->win[src].count++;
    return 0;
}

static long bss_held(struct sim_machine *m)
{
    return ((struct bss *)m)->held;
}

const struct sim_ops sim_bss_ops = {
    .name = "bss", .multicast = SIM_BROADCAST, .size = sizeof(struct bss),
    .init = bss_init, .fini = bss_fini, .send = bss_send, .receive = bss_receive,
    .held = bss_held,
};
