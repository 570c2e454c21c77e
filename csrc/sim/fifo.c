/* fifo.c - the C twin of bus1py/causal/fifo.py: per-channel sequence numbers, not causal.
 *
 * Wire: `seq u32 | payload`; cost (0, 4, 1, data).
 *
 * Invariants:
 *   - out[d] counts copies sent to d; expected[j] is the next sequence number from j.
 *   - win[j] holds the payloads j sent with sequence numbers expected[j] .. expected[j] +
 *     cap[j] - 1 that arrived early, at index seq & (cap[j] - 1) (cap a power of two, or 0);
 *     the slot of expected[j] itself is always empty.
 */
#include "machine.h"

#include <stdlib.h>

struct held { uint8_t *bytes; uint32_t len; };

struct fifo {
    struct sim_machine base;
    uint32_t *out, *expected, *cap;
    struct held **win;
    long held;
};

static int fifo_init(struct sim_machine *m)
{
    struct fifo *f = (struct fifo *)m;
    size_t n = (size_t)m->n;
    f->out = calloc(n, sizeof *f->out);
    f->expected = malloc(n * sizeof *f->expected);
    f->cap = calloc(n, sizeof *f->cap);
    f->win = calloc(n, sizeof *f->win);
    if (!f->out || !f->expected || !f->cap || !f->win)
        return -1;
    for (size_t j = 0; j < n; j++)
        f->expected[j] = 1;
    return 0;
}

static void fifo_fini(struct sim_machine *m)
{
    struct fifo *f = (struct fifo *)m;
    for (int j = 0; f->win && j < m->n; j++) {
        for (uint32_t i = 0; i < f->cap[j]; i++)
            free(f->win[j][i].bytes);
        free(f->win[j]);
    }
    free(f->out);
    free(f->expected);
    free(f->cap);
    free(f->win);
}

static int fifo_send(struct sim_machine *m, const uint16_t *dests, int k,
                     const uint8_t *payload, size_t len, struct sim_step *step)
{
    struct fifo *f = (struct fifo *)m;
    for (int i = 0; i < k; i++)
        if (f->out[dests[i]] == UINT32_MAX)
            return sim_fail(step, "channel %d->%u exhausted its 32-bit sequence numbers",
                            m->me, dests[i]);
    for (int i = 0; i < k; i++) {
        uint8_t *w = sim_emit(step, dests[i], (uint32_t)(4 + len),
                              (struct sim_cost){0, 4, 1, 1});
        if (!w)
            return -1;
        sim_put32(w, ++f->out[dests[i]]);
        memcpy(w + 4, payload, len);
    }
    return 0;
}

/* Most messages one channel may hold: a wire further ahead is refused rather than allocated
 * for (the Python machine accepts it; the simulator never comes near). */
#define FIFO_WINDOW (1u << 24)

/* makes win[j] cover seq (> expected[j]); -1 past FIFO_WINDOW or on ENOMEM */
static int widen(struct fifo *f, int j, uint32_t seq)
{
    uint32_t cap = f->cap[j], need = seq - f->expected[j] + 1, want = cap ? cap : 8;
    if (need <= cap)
        return 0;
    if (need > FIFO_WINDOW)
        return -1;
    while (want < need)
        want *= 2;
    struct held *w = calloc(want, sizeof *w);
    if (!w)
        return -1;
    for (uint32_t i = 0; i < cap; i++)
        if (f->win[j][i].bytes) {
            uint32_t s = f->expected[j] + ((i - f->expected[j]) & (cap - 1));
            w[s & (want - 1)] = f->win[j][i];
        }
    free(f->win[j]);
    f->win[j] = w;
    f->cap[j] = want;
    return 0;
}

static int fifo_receive(struct sim_machine *m, int src, const uint8_t *data, size_t len,
                        struct sim_step *step)
{
    struct fifo *f = (struct fifo *)m;
    if (len < 4)
        return sim_fail(step, "wire truncated: needs 4 bytes at offset 0, has %zu", len);
    uint32_t seq = sim_get32(data), exp = f->expected[src];
    const uint8_t *payload = data + 4;
    uint32_t plen = (uint32_t)(len - 4);
    if (seq < exp || (seq - exp < f->cap[src] && f->win[src][seq & (f->cap[src] - 1)].bytes))
        return sim_fail(step, "duplicate sequence number %u from %d", seq, src);
    if (seq != exp) {
        if (widen(f, src, seq) < 0)
            return sim_fail(step, "sequence number %u from %d is too far ahead (or out of memory)",
                            seq, src);
        struct held *h = &f->win[src][seq & (f->cap[src] - 1)];
        h->bytes = malloc(plen ? plen : 1);
        if (!h->bytes)
            return sim_fail(step, "out of memory");
        memcpy(h->bytes, payload, plen);
        h->len = plen;
        f->held++;
        return 0;
    }
    if (sim_deliver(step, (uint32_t)src, payload, plen) < 0)
        return -1;
    uint32_t next = seq + 1, cap = f->cap[src];
    for (struct held *h; cap && (h = &f->win[src][next & (cap - 1)])->bytes; next++) {
        int rc = sim_deliver(step, (uint32_t)src, h->bytes, h->len);
        free(h->bytes);
        h->bytes = NULL;
        f->held--;
        if (rc < 0)
            return -1;
    }
    f->expected[src] = next;
    return 0;
}

static long fifo_held(struct sim_machine *m)
{
    return ((struct fifo *)m)->held;
}

const struct sim_ops sim_fifo_ops = {
    .name = "fifo", .multicast = SIM_NATIVE, .size = sizeof(struct fifo),
    .init = fifo_init, .fini = fifo_fini, .send = fifo_send, .receive = fifo_receive,
    .held = fifo_held,
};
