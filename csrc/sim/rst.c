/* rst.c - the C twin of bus1py/causal/rst.py (Raynal-Schiper-Toueg matrix, form B), default
 * mode only: the selective mode's `deliver_from` is not a simulator input.
 *
 * Wire: `ST u32[n*n] (row-major, ST[k][l] = messages from k to l) | payload`, no header (the
 * sender is `src`); cost (0, 4n^2, n^2, data) on every copy. A send counts sent[me][d] += 1
 * for every d in Dests first and attaches that one matrix to every copy.
 * Delivery: m from j is delivered at i iff ST[j][i] = deliv[j] + 1 and ST[k][i] <= deliv[k]
 * for every k != j; delivery raises sent to the elementwise maximum with ST.
 *
 * Invariants (the Python module's, with its dicts and sets as flat arrays):
 *   - sent[n*n] is the elementwise maximum of every matrix sent or delivered here, so its row
 *     me is what we sent (a wire whose row me exceeds it is refused); deliv[k] counts
 *     messages from k delivered here.
 *   - win[j].a holds, at index s & (win[j].cap - 1), the whole wire of the held message
 *     from j with ST[j][i] = s, for s in deliv[j] + 1 .. deliv[j] + win[j].cap (cap a power
 *     of two or 0); win[j].count counts them and held sums the counts.
 *   - After every input no held message is deliverable. Only j's next message (s =
 *     deliv[j] + 1) can be; while it is held, bit j of waiters[k] (a bitset of n bits) is
 *     set for the first k with ST[k][i] > deliv[k] (deliv[j] counted as bumped). A delivery
 *     from k raises only deliv[k], so release() retries k's next message and the senders of
 *     waiters[k] in ascending id order (rst.py's `sorted(retry)`), working a LIFO stack of
 *     senders whose count grew: the same order rst.py delivers in. A bit may outlive its
 *     message (rst.py's sets keep such entries too); a retry then finds nothing or retries
 *     the sender's current next message, in both machines alike.
 */
#include "machine.h"

#include <stdlib.h>

/* the widest window of held messages from one sender (far beyond any simulator run; a
 * wire further ahead is refused rather than allocated for) */
#define RST_MAX_WINDOW (1u << 24)

struct held { uint8_t *wire; uint32_t len; };
/* a sender's held messages: count of them, in a ring of cap slots */
struct ring { struct held *a; uint32_t cap, count; };

struct rst {
    struct sim_machine base;
    uint32_t *sent, *deliv;
    struct ring *win;
    uint64_t *waiters, *retry;  /* n bitsets of `words` u64 each; one scratch bitset */
    size_t words;
    uint16_t *work;             /* release()'s stack of senders whose count grew */
    size_t nwork, workcap;
    long held;
};

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define RST_LE 1
#else
#define RST_LE 0
#endif

/* dst[x] = max(dst[x], u32 x of src) for x < count: the n^2 merge of every delivery, in
 * blocks of 8 so the compiler vectorises it at -O2, and compiled twice, the AVX2 clone
 * (an unsigned max per 8 lanes) picked at load time where the CPU has it */
__attribute__((target_clones("avx2", "default")))
static void max_into(uint32_t *restrict dst, const uint8_t *restrict src, size_t count)
{
    size_t x = 0;
    for (; RST_LE && x + 8 <= count; x += 8) {
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

/* the matrix's wire encoding */
static void encode(uint8_t *dst, const uint32_t *src, size_t count)
{
    if (RST_LE) {
        memcpy(dst, src, 4 * count);
        return;
    }
    for (size_t x = 0; x < count; x++)
        sim_put32(dst + 4 * x, src[x]);
}

/* ST[k][me] of a wire: the column read on every receive */
static inline uint32_t col(const struct rst *r, const uint8_t *wire, size_t k)
{
    return sim_get32(wire + 4 * (k * (size_t)r->base.n + (size_t)r->base.me));
}

static int rst_init(struct sim_machine *m)
{
    struct rst *r = (struct rst *)m;
    size_t n = (size_t)m->n;
    r->words = (n + 63) / 64;
    r->sent = calloc(n * n, sizeof *r->sent);
    r->deliv = calloc(n, sizeof *r->deliv);
    r->win = calloc(n, sizeof *r->win);
    r->waiters = calloc(n * r->words, sizeof *r->waiters);
    r->retry = calloc(r->words, sizeof *r->retry);
    return r->sent && r->deliv && r->win && r->waiters && r->retry ? 0 : -1;
}

static void rst_fini(struct sim_machine *m)
{
    struct rst *r = (struct rst *)m;
    for (int j = 0; r->win && j < m->n; j++) {
        for (uint32_t i = 0; i < r->win[j].cap; i++)
            free(r->win[j].a[i].wire);
        free(r->win[j].a);
    }
    free(r->sent);
    free(r->deliv);
    free(r->win);
    free(r->waiters);
    free(r->retry);
    free(r->work);
}

static int rst_send(struct sim_machine *m, const uint16_t *dests, int k,
                    const uint8_t *payload, size_t len, struct sim_step *step)
{
    struct rst *r = (struct rst *)m;
    size_t n = (size_t)m->n, size = 4 * n * n;
    uint32_t *myrow = r->sent + (size_t)m->me * n;
    if (len > UINT32_MAX - size)
        return sim_fail(step, "payload of %zu bytes too long for one wire", len);
    for (int i = 0; i < k; i++)
        if (myrow[dests[i]] >= UINT32_MAX)
            return sim_fail(step, "a channel from %d exhausted its 32-bit counter", m->me);
    for (int i = 0; i < k; i++)
        myrow[dests[i]]++;
    const uint8_t *first = NULL;
    for (int i = 0; i < k; i++) {
        uint8_t *w = sim_emit(step, dests[i], (uint32_t)(size + len),
                              (struct sim_cost){0, (uint32_t)size, (uint32_t)(n * n), 1});
        if (!w)
            return -1;
        if (first) {
            memcpy(w, first, size + len);
            continue;
        }
        encode(w, r->sent, n * n);
        memcpy(w + size, payload, len);
        first = w;
    }
    return 0;
}

/* the held message from j with ST[j][me] = s, or NULL */
static struct held *lookup(struct rst *r, int j, uint32_t s)
{
    uint32_t cap = r->win[j].cap;
    if (!r->win[j].count || s <= r->deliv[j] || s - r->deliv[j] - 1 >= cap)
        return NULL;
    struct held *h = &r->win[j].a[s & (cap - 1)];
    return h->wire ? h : NULL;
}

/* makes win[j] cover s (> deliv[j]); -1 on ENOMEM or a window too wide */
static int widen(struct rst *r, int j, uint32_t s)
{
    uint32_t cap = r->win[j].cap, first = r->deliv[j] + 1, need = s - r->deliv[j], want;
    if (need <= cap)
        return 0;
    if (need > RST_MAX_WINDOW)
        return -1;
    for (want = cap ? cap : 8; want < need; want *= 2)
        ;
    struct held *w = calloc(want, sizeof *w);
    if (!w)
        return -1;
    for (uint32_t i = 0; i < cap; i++)
        if (r->win[j].a[i].wire) {
            uint32_t at = first + ((i - first) & (cap - 1));
            w[at & (want - 1)] = r->win[j].a[i];
        }
    free(r->win[j].a);
    r->win[j].a = w;
    r->win[j].cap = want;
    return 0;
}

/* rst.py's _try: delivers (applies) a message from j if the condition holds */
static int try_deliver(struct rst *r, int j, const uint8_t *wire)
{
    size_t n = (size_t)r->base.n;
    uint32_t *deliv = r->deliv;
    deliv[j]++;
    if (col(r, wire, (size_t)j) != deliv[j])
        goto no;
    for (size_t k = 0; k < n; k++)
        if (col(r, wire, k) > deliv[k])
            goto no;
    max_into(r->sent, wire, n * n);
    return 1;
no:
    deliv[j]--;
    return 0;
}

/* rst.py's _wait: parks j's next message on the first k it is ahead of */
static void park(struct rst *r, int j, const uint8_t *wire)
{
    size_t n = (size_t)r->base.n, k;
    r->deliv[j]++;
    for (k = 0; k < n && col(r, wire, k) <= r->deliv[k]; k++)
        ;
    r->deliv[j]--;
    if (k < n)              /* always: the caller's message was not deliverable */
        r->waiters[k * r->words + (size_t)j / 64] |= 1ull << (j % 64);
}

static int push(struct rst *r, int j, struct sim_step *step)
{
    if (sim_reserve((void **)&r->work, &r->workcap, r->nwork, 1, sizeof *r->work) < 0)
        return sim_fail(step, "out of memory");
    r->work[r->nwork++] = (uint16_t)j;
    return 0;
}

/* rst.py's _release: deliv[j0] just grew */
static int release(struct rst *r, int j0, struct sim_step *step)
{
    size_t words = r->words, size = 4 * (size_t)r->base.n * (size_t)r->base.n;
    r->nwork = 0;
    if (push(r, j0, step) < 0)
        return -1;
    while (r->nwork) {
        int k = r->work[--r->nwork];
        uint64_t *wk = r->waiters + (size_t)k * words;
        memcpy(r->retry, wk, words * sizeof *wk);
        memset(wk, 0, words * sizeof *wk);
        r->retry[k / 64] |= 1ull << (k % 64);
        for (size_t w = 0; w < words; w++)
            for (uint64_t bits = r->retry[w]; bits; bits &= bits - 1) {
                int j = (int)(w * 64 + (size_t)__builtin_ctzll(bits));
                struct held *h = lookup(r, j, r->deliv[j] + 1);
                if (!h)
                    continue;
                if (!try_deliver(r, j, h->wire)) {
                    park(r, j, h->wire);
                    continue;
                }
                uint8_t *wire = h->wire;
                h->wire = NULL;
                r->held--;
                r->win[j].count--;
                int rc = sim_deliver(step, (uint32_t)j, wire + size, (uint32_t)(h->len - size));
                free(wire);
                if (rc < 0 || push(r, j, step) < 0)
                    return -1;
            }
    }
    return 0;
}

static int rst_receive(struct sim_machine *m, int src, const uint8_t *data, size_t len,
                       struct sim_step *step)
{
    struct rst *r = (struct rst *)m;
    size_t n = (size_t)m->n, size = 4 * n * n;
    if (len < size)
        return sim_fail(step, "wire truncated: %zu bytes, the matrix needs %zu", len, size);
    if (len > UINT32_MAX)
        return sim_fail(step, "wire of %zu bytes too long", len);
    uint32_t s = col(r, data, (size_t)src);
    if (s <= r->deliv[src] || lookup(r, src, s))
        return sim_fail(step, "duplicate message %u from %d", s, src);
    const uint8_t *row = data + 4 * (size_t)m->me * n;
    const uint32_t *myrow = r->sent + (size_t)m->me * n;
    for (size_t l = 0; l < n; l++)
        if (sim_get32(row + 4 * l) > myrow[l])
            return sim_fail(step, "matrix from %d counts messages from us that we never sent",
                            src);
    if (try_deliver(r, src, data)) {
        if (sim_deliver(step, (uint32_t)src, data + size, (uint32_t)(len - size)) < 0)
            return -1;
        return r->held ? release(r, src, step) : 0;
    }
    if (widen(r, src, s) < 0)
        return sim_fail(step, "message %u from %d: no room to hold it", s, src);
    struct held *h = &r->win[src].a[s & (r->win[src].cap - 1)];
    h->wire = malloc(len);
    if (!h->wire)
        return sim_fail(step, "out of memory");
    memcpy(h->wire, data, len);
    h->len = (uint32_t)len;
    r->held++;
    r->win[src].count++;
    if (s == r->deliv[src] + 1)     /* the next from src, waiting for another sender */
        park(r, src, data);
    return 0;
}

static long rst_held(struct sim_machine *m)
{
    return ((struct rst *)m)->held;
}

const struct sim_ops sim_rst_ops = {
    .name = "rst", .multicast = SIM_NATIVE, .size = sizeof(struct rst),
    .init = rst_init, .fini = rst_fini, .send = rst_send, .receive = rst_receive,
    .held = rst_held,
};
