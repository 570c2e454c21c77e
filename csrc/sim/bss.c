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
 *   - h (held.h, base vt[j]) holds the whole wire of every held copy from j by its VT_m[j],
 *     off its VT_m's offset and for_me whether we are a destination; h.count counts them,
 *     non-destinations' copies included.
 *   - After every input no held copy is deliverable. Only j's next copy (s = vt[j] + 1) can
 *     be; while it is held, bit j of h.waiters[k] (a bitset of n bits) is set for the first k
 *     with VT_m[k] > vt[k] (vt[j] counted as bumped). A delivery from k raises only vt[k], so
 *     release() retries k's next copy and the senders of waiters[k] in ascending id order
 *     (bss.py's `sorted(retry)`), working a LIFO stack of senders whose count grew: the
 *     same order bss.py delivers in. A bit may outlive its copy (bss.py's sets keep such
 *     entries too); a retry then finds nothing or retries the sender's current next copy,
 *     in both machines alike.
 */
#include "held.h"
#include "machine.h"
#include "vec.h"

#include <stdlib.h>

struct bss {
    struct sim_machine base;
    uint32_t *vt;
    struct held h;
    uint64_t *mark;             /* scratch bitset: a send's or a wire's destinations */
};

static int bss_init(struct sim_machine *m)
{
    struct bss *b = (struct bss *)m;
    size_t n = (size_t)m->n;
    int rc = held_init(&b->h, n);
    b->vt = calloc(n, sizeof *b->vt);
    b->mark = calloc(b->h.words, sizeof *b->mark);
    return rc == 0 && b->vt && b->mark ? 0 : -1;
}

static void bss_fini(struct sim_machine *m)
{
    struct bss *b = (struct bss *)m;
    held_fini(&b->h, (size_t)m->n);
    free(b->vt);
    free(b->mark);
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
        held_add(b->mark, dests[i]);
    struct sim_cost cost = {(uint32_t)hl, (uint32_t)(4 * n), (uint32_t)n, 0};
    const uint8_t *first = NULL;
    int rc = 0;
    for (size_t d = 0; d < n; d++) {
        if (d == (size_t)m->me)
            continue;
        cost.data = (uint8_t)held_has(b->mark, d);
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
    memset(b->mark, 0, b->h.words * sizeof *b->mark);
    return rc;
}

/* bss.py's _release: vt[j0] just grew */
static int release(struct bss *b, int j0, struct sim_step *step)
{
    size_t words = b->h.words, n = (size_t)b->base.n;
    if (held_start(&b->h, j0, step) < 0)
        return -1;
    for (int j; (j = held_next(&b->h)) >= 0;) {
        struct held_wire *h = held_find(&b->h, j, b->vt[j], b->vt[j] + 1);
        if (!h)
            continue;
        b->vt[j]++;
        size_t at = vec_first_above(h->wire + h->off, b->vt, n);
        if (at < n) {
            held_add(b->h.waiters + at * words, (size_t)j);
            b->vt[j]--;
            continue;
        }
        uint8_t *wire = held_take(&b->h, j, h);
        size_t end = h->off + 4 * n;
        int rc = h->for_me ? sim_deliver(step, (uint32_t)j, wire + end,
                                         (uint32_t)(h->len - end)) : 0;
        free(wire);
        if (rc < 0 || held_push(&b->h, j, step) < 0)
            return -1;
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
        if (d >= n || d == (size_t)src || held_has(b->mark, d)) {
            bad = 1;
            break;
        }
        held_add(b->mark, d);
        *for_me |= d == me;
    }
    memset(b->mark, 0, b->h.words * sizeof *b->mark);
    if (bad)
        return sim_fail(step, "bad destination list from %d", src);
    const uint8_t *vm = data + 2 + 2 * k;
    if (size > end && !*for_me)
        return sim_fail(step, "a copy to a non-destination carries a payload");
    uint32_t s = sim_get32(vm + 4 * (size_t)src);
    if (s <= b->vt[src] || held_find(&b->h, src, b->vt[src], s))
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
        size_t at = vec_first_above(data + vmo, b->vt, n);
        if (at == n) {
            size_t end = vmo + 4 * n;
            if (for_me && sim_deliver(step, (uint32_t)src, data + end,
                                      (uint32_t)(len - end)) < 0)
                return -1;
            return b->h.count ? release(b, src, step) : 0;
        }
        /* the next from src, waiting for `at` */
        held_add(b->h.waiters + at * b->h.words, (size_t)src);
    }
    b->vt[src]--;
    if (held_widen(&b->h, src, b->vt[src], s) < 0)
        return sim_fail(step, "broadcast %u from %d: no room to hold it", s, src);
    struct held_wire *h = held_put(&b->h, src, s, data, len);
    if (!h)
        return sim_fail(step, "out of memory");
    h->off = vmo;
    h->for_me = (uint8_t)for_me;
    return 0;
}

static long bss_held(struct sim_machine *m)
{
    return ((struct bss *)m)->h.count;
}

const struct sim_ops sim_bss_ops = {
    .name = "bss", .multicast = SIM_BROADCAST, .size = sizeof(struct bss),
    .init = bss_init, .fini = bss_fini, .send = bss_send, .receive = bss_receive,
    .held = bss_held,
};
