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
 *   - h (held.h, base deliv[j]) holds the whole wire of every held message from j by its
 *     ST[j][i]; h.count counts them.
 *   - After every input no held message is deliverable. Only j's next message (s =
 *     deliv[j] + 1) can be; while it is held, bit j of h.waiters[k] (a bitset of n bits) is
 *     set for the first k with ST[k][i] > deliv[k] (deliv[j] counted as bumped). A delivery
 *     from k raises only deliv[k], so release() retries k's next message and the senders of
 *     waiters[k] in ascending id order (rst.py's `sorted(retry)`), working a LIFO stack of
 *     senders whose count grew: the same order rst.py delivers in. A bit may outlive its
 *     message (rst.py's sets keep such entries too); a retry then finds nothing or retries
 *     the sender's current next message, in both machines alike.
 */
#include "held.h"
#include "machine.h"
#include "vec.h"

#include <stdlib.h>

struct rst {
    struct sim_machine base;
    uint32_t *sent, *deliv;
    struct held h;
};

/* ST[k][me] of a wire: the column read on every receive */
static inline uint32_t col(const struct rst *r, const uint8_t *wire, size_t k)
{
    return sim_get32(wire + 4 * (k * (size_t)r->base.n + (size_t)r->base.me));
}

static int rst_init(struct sim_machine *m)
{
    struct rst *r = (struct rst *)m;
    size_t n = (size_t)m->n;
    int rc = held_init(&r->h, n);
    r->sent = calloc(n * n, sizeof *r->sent);
    r->deliv = calloc(n, sizeof *r->deliv);
    return rc == 0 && r->sent && r->deliv ? 0 : -1;
}

static void rst_fini(struct sim_machine *m)
{
    struct rst *r = (struct rst *)m;
    held_fini(&r->h, (size_t)m->n);
    free(r->sent);
    free(r->deliv);
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
        vec_encode(w, r->sent, n * n);
        memcpy(w + size, payload, len);
        first = w;
    }
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
    vec_max_into(r->sent, wire, n * n);
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
        held_add(r->h.waiters + k * r->h.words, (size_t)j);
}

/* rst.py's _release: deliv[j0] just grew */
static int release(struct rst *r, int j0, struct sim_step *step)
{
    size_t size = 4 * (size_t)r->base.n * (size_t)r->base.n;
    if (held_start(&r->h, j0, step) < 0)
        return -1;
    for (int j; (j = held_next(&r->h)) >= 0;) {
        struct held_wire *h = held_find(&r->h, j, r->deliv[j], r->deliv[j] + 1);
        if (!h)
            continue;
        if (!try_deliver(r, j, h->wire)) {
            park(r, j, h->wire);
            continue;
        }
        uint8_t *wire = held_take(&r->h, j, h);
        int rc = sim_deliver(step, (uint32_t)j, wire + size, (uint32_t)(h->len - size));
        free(wire);
        if (rc < 0 || held_push(&r->h, j, step) < 0)
            return -1;
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
    if (s <= r->deliv[src] || held_find(&r->h, src, r->deliv[src], s))
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
        return r->h.count ? release(r, src, step) : 0;
    }
    if (held_widen(&r->h, src, r->deliv[src], s) < 0)
        return sim_fail(step, "message %u from %d: no room to hold it", s, src);
    if (!held_put(&r->h, src, s, data, len))
        return sim_fail(step, "out of memory");
    if (s == r->deliv[src] + 1)     /* the next from src, waiting for another sender */
        park(r, src, data);
    return 0;
}

static long rst_held(struct sim_machine *m)
{
    return ((struct rst *)m)->h.count;
}

const struct sim_ops sim_rst_ops = {
    .name = "rst", .multicast = SIM_NATIVE, .size = sizeof(struct rst),
    .init = rst_init, .fini = rst_fini, .send = rst_send, .receive = rst_receive,
    .held = rst_held,
};
