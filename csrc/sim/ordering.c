/* ordering.c - bus1py/ordering.py's Queue in C (see ordering.h for the invariants). */
#include "ordering.h"

#include <stdlib.h>
#include <string.h>

static int before(const struct sim_qentry *x, uint32_t ts, uint16_t sender, uint32_t seq)
{
    if (x->ts != ts)
        return x->ts < ts;
    if (x->sender != sender)
        return x->sender < sender;
    return x->seq < seq;
}

/* the offset from head of the first entry not below the key */
static size_t lower_bound(const struct sim_queue *q, uint32_t ts, uint16_t sender, uint32_t seq)
{
    const struct sim_qentry *e = q->e + q->head;
    size_t lo = 0, hi = q->len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (before(&e[mid], ts, sender, seq))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int found(const struct sim_queue *q, size_t r, uint32_t ts, uint16_t sender,
                 uint32_t seq)
{
    if (r >= q->len)
        return 0;
    const struct sim_qentry *x = &q->e[q->head + r];
    return x->ts == ts && x->sender == sender && x->seq == seq;
}

/* Makes head + len < cap: grows when the array would be over 3/4 full, else moves the live
 * entries down to a quarter of the free space (then at least 3 cap / 16 slots are free at
 * the back, so compactions stay amortised O(1) per insert). */
static int room(struct sim_queue *q)
{
    if (q->head + q->len < q->cap)
        return 0;
    if (4 * (q->len + 1) > 3 * q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 16;
        struct sim_qentry *e = malloc(cap * sizeof *e);
        if (!e)
            return -1;
        size_t head = (cap - q->len) / 4;
        if (q->len)
            memcpy(e + head, q->e + q->head, q->len * sizeof *e);
        free(q->e);
        q->e = e;
        q->cap = cap;
        q->head = head;
        return 0;
    }
    size_t head = (q->cap - q->len) / 4;
    memmove(q->e + head, q->e + q->head, q->len * sizeof *q->e);
    q->head = head;
    return 0;
}

/* puts x at offset r from head; there is a free slot before head or after the last entry */
static void put(struct sim_queue *q, size_t r, const struct sim_qentry *x)
{
    struct sim_qentry *e = q->e;
    if (q->head > 0 && (r < q->len - r || q->head + q->len == q->cap)) {
        memmove(e + q->head - 1, e + q->head, r * sizeof *e);
        q->head--;
    } else {
        memmove(e + q->head + r + 1, e + q->head + r, (q->len - r) * sizeof *e);
    }
    e[q->head + r] = *x;
    q->len++;
}

/* takes out the entry at offset r from head */
static void take(struct sim_queue *q, size_t r)
{
    struct sim_qentry *e = q->e;
    if (r < q->len - 1 - r) {
        memmove(e + q->head + 1, e + q->head, r * sizeof *e);
        q->head++;
    } else {
        memmove(e + q->head + r, e + q->head + r + 1, (q->len - 1 - r) * sizeof *e);
    }
    q->len--;
}

int sim_queue_stage(struct sim_queue *q, uint64_t t, uint16_t sender, uint32_t seq,
                    const uint8_t *payload, uint32_t len, uint32_t *block)
{
    uint64_t clock = q->clock >= t ? q->clock : t;
    if (clock >= UINT32_MAX)
        return -1;
    struct sim_qentry x = {.ts = (uint32_t)clock + 1, .seq = seq, .sender = sender, .len = len};
    size_t r = lower_bound(q, x.ts, sender, seq);
    if (found(q, r, x.ts, sender, seq) || room(q) < 0)
        return -1;
    if (len > SIM_QSHORT) {
        x.u.out = malloc(len);
        if (!x.u.out)
            return -1;
        memcpy(x.u.out, payload, len);
    } else if (len) {
        memcpy(x.u.in, payload, len);
    }
    q->clock = clock;
    put(q, r, &x);
    *block = x.ts;
    return 0;
}

int sim_queue_commit(struct sim_queue *q, uint32_t block, uint16_t sender, uint32_t seq,
                     uint32_t ts)
{
    if (ts & 1 || ts <= block)
        return -1;
    size_t r = lower_bound(q, block, sender, seq);
    if (!found(q, r, block, sender, seq))
        return -1;
    sim_queue_sync(q, ts);
    struct sim_qentry x = q->e[q->head + r];
    x.ts = ts;
    take(q, r);
    r = lower_bound(q, ts, sender, seq);
    put(q, r, &x);          /* take() freed a slot on one side, as put() needs */
    return 0;
}

const struct sim_qentry *sim_queue_ready(const struct sim_queue *q)
{
    const struct sim_qentry *x = q->len ? &q->e[q->head] : NULL;
    return x && !(x->ts & 1) ? x : NULL;
}

void sim_queue_pop(struct sim_queue *q)
{
    struct sim_qentry *x = &q->e[q->head];
    if (x->len > SIM_QSHORT)
        free(x->u.out);
    q->head++;
    q->len--;
}

void sim_queue_fini(struct sim_queue *q)
{
    for (size_t i = 0; i < q->len; i++) {
        struct sim_qentry *x = &q->e[q->head + i];
        if (x->len > SIM_QSHORT)
            free(x->u.out);
    }
    free(q->e);
    q->e = NULL;
    q->head = q->len = q->cap = 0;
}
