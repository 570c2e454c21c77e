/* buffer.c - the C twin of bus1py/causal/buffer.py: the Mattern-Fuenfrocken buffer protocol
 * (an output buffer posting one copy at a time, each answered by one ACK), in its default
 * non-selective mode (every arrival is delivered at once; the selective IB is Python only).
 *
 * Wire: data `0x00 u8 | payload`, cost (1, 0, 0, data); ACK `0x01 u8`, cost (0, 1, 0, -).
 * Multicast is "sequential": a send to k destinations queues k copies in `dests` order.
 *
 * Invariants:
 *   - `outstanding` is the destination of the one posted, unacknowledged copy, or -1; the
 *     output buffer (OB) holds the copies accepted but not yet posted, in send order, and is
 *     empty when nothing is outstanding.
 *   - OB is a ring of `cap` slots (a power of two, or 0) with `count` entries from `head`;
 *     push and pop are O(1), so a backlog that never drains (n=50 multicast) costs nothing
 *     per event. A payload of up to SHORT bytes lives in its slot, a longer one in a
 *     malloc'd copy the slot owns.
 *   - held is `count` (the IB is always empty here).
 */
#include "machine.h"

#include <stdlib.h>

enum { DATA = 0, ACK = 1, SHORT = 16 };

struct copy {
    uint32_t dest, len;
    union {
        uint8_t in[SHORT];
        uint8_t *out;
    } u;
};

struct buffer {
    struct sim_machine base;
    struct copy *ob;
    size_t head, count, cap;
    long outstanding;
};

static const uint8_t *copy_bytes(const struct copy *c)
{
    return c->len <= SHORT ? c->u.in : c->u.out;
}

static int buffer_init(struct sim_machine *m)
{
    ((struct buffer *)m)->outstanding = -1;
    return 0;
}

static void buffer_fini(struct sim_machine *m)
{
    struct buffer *b = (struct buffer *)m;
    for (size_t i = 0; i < b->count; i++) {
        struct copy *c = &b->ob[(b->head + i) & (b->cap - 1)];
        if (c->len > SHORT)
            free(c->u.out);
    }
    free(b->ob);
}

/* makes room for `more` copies in OB, keeping their order */
static int ob_reserve(struct buffer *b, size_t more)
{
    if (b->count + more <= b->cap)
        return 0;
    size_t want = b->cap ? b->cap * 2 : 16;
    while (want < b->count + more)
        want *= 2;
    struct copy *ob = malloc(want * sizeof *ob);
    if (!ob)
        return -1;
    for (size_t i = 0; i < b->count; i++)
        ob[i] = b->ob[(b->head + i) & (b->cap - 1)];
    free(b->ob);
    b->ob = ob;
    b->head = 0;
    b->cap = want;
    return 0;
}

/* posts OB's head copy (OB is not empty, nothing is outstanding) */
static int post(struct buffer *b, struct sim_step *step)
{
    struct copy *c = &b->ob[b->head];
    uint8_t *w = sim_emit(step, c->dest, 1 + c->len, (struct sim_cost){1, 0, 0, 1});
    if (!w)
        return -1;
    w[0] = DATA;
    memcpy(w + 1, copy_bytes(c), c->len);
    if (c->len > SHORT)
        free(c->u.out);
    b->outstanding = c->dest;
    b->head = (b->head + 1) & (b->cap - 1);
    b->count--;
    return 0;
}

static int buffer_send(struct sim_machine *m, const uint16_t *dests, int k,
                       const uint8_t *payload, size_t len, struct sim_step *step)
{
    struct buffer *b = (struct buffer *)m;
    if (len > UINT32_MAX - 1)
        return sim_fail(step, "payload of %zu bytes is too long", len);
    if (ob_reserve(b, (size_t)k) < 0)
        return sim_fail(step, "out of memory");
    for (int i = 0; i < k; i++) {
        struct copy *c = &b->ob[(b->head + b->count) & (b->cap - 1)];
        c->dest = dests[i];
        c->len = (uint32_t)len;
        if (len > SHORT) {
            c->u.out = malloc(len);
            if (!c->u.out)
                return sim_fail(step, "out of memory");
            memcpy(c->u.out, payload, len);
        } else {
            memcpy(c->u.in, payload, len);
        }
        b->count++;
    }
    return b->outstanding < 0 ? post(b, step) : 0;
}

static int buffer_receive(struct sim_machine *m, int src, const uint8_t *data, size_t len,
                          struct sim_step *step)
{
    struct buffer *b = (struct buffer *)m;
    if (!len)
        return sim_fail(step, "empty wire: no type tag");
    if (data[0] == DATA) {
        uint8_t *w = sim_emit(step, (uint32_t)src, 1, (struct sim_cost){0, 1, 0, 0});
        if (!w)
            return -1;
        w[0] = ACK;
        return sim_deliver(step, (uint32_t)src, data + 1, (uint32_t)(len - 1));
    }
    if (data[0] != ACK)
        return sim_fail(step, "unknown wire type %u", data[0]);
    if (len != 1)
        return sim_fail(step, "ACK wire of %zu bytes, expected 1", len);
    if (b->outstanding != src)
        return sim_fail(step, "ACK from %d, but the outstanding copy went to %ld", src,
                        b->outstanding);
    b->outstanding = -1;
    return b->count ? post(b, step) : 0;
}

static long buffer_held(struct sim_machine *m)
{
    return (long)((struct buffer *)m)->count;
}

const struct sim_ops sim_buffer_ops = {
    .name = "buffer", .multicast = SIM_SEQUENTIAL, .size = sizeof(struct buffer),
    .init = buffer_init, .fini = buffer_fini, .send = buffer_send, .receive = buffer_receive,
    .held = buffer_held,
};
