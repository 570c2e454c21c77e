/* ordering.h - one queue of bus1's ordering (SPEC section 3) for the simulator's C machines:
 * the twin of bus1py/ordering.py's Queue, as bus1py/causal/bus1.py uses it.
 *
 * Invariants (those of bus1py/ordering.py, which states why they hold):
 *   - The clock only grows: sync(t) sets it to max(clock, t).
 *   - Entries are kept sorted by their key (ts, sender, seq) and keys are unique. The Python
 *     key's fourth part, the entry index, is always 0 for a message-passing queue (a
 *     transaction stages one entry per destination queue), so it is left out.
 *   - An odd ts is a block (staged, not committed); the front entry is handed out only when
 *     its ts is even.
 *   - The live entries are e[head .. head + len) of an array of cap; inserts and removals
 *     shift the shorter side (an insert the back side when no slot is free before head),
 *     so the usual case (stage and commit near the back, pop at the front) moves few
 *     entries. A payload of up to SIM_QSHORT bytes lives in its entry, a
 *     longer one in a malloc'd copy the entry owns.
 */
#ifndef BUS1PY_SIM_ORDERING_H
#define BUS1PY_SIM_ORDERING_H

#include <stddef.h>
#include <stdint.h>

#define SIM_QSHORT 16

struct sim_qentry {
    uint32_t ts, seq;
    uint16_t sender;
    uint32_t len;
    union {
        uint8_t in[SIM_QSHORT];
        uint8_t *out;
    } u;
};

struct sim_queue {
    uint64_t clock;
    struct sim_qentry *e;
    size_t head, len, cap;
};

static inline const uint8_t *sim_qentry_payload(const struct sim_qentry *x)
{
    return x->len <= SIM_QSHORT ? x->u.in : x->u.out;
}

static inline void sim_queue_sync(struct sim_queue *q, uint64_t t)
{
    if (t > q->clock)
        q->clock = t;
}

void sim_queue_fini(struct sim_queue *q);
/* Syncs to t and inserts a block at clock + 1 holding a copy of the payload; its ts is the
 * block's. -1 on ENOMEM or if the key is already queued (the caller keeps it unique). */
int sim_queue_stage(struct sim_queue *q, uint64_t t, uint16_t sender, uint32_t seq,
                    const uint8_t *payload, uint32_t len, uint32_t *block);
/* Syncs to ts and moves the block (block, sender, seq) to ts; -1 if it is not queued or ts
 * is odd or not above it. */
int sim_queue_commit(struct sim_queue *q, uint32_t block, uint16_t sender, uint32_t seq,
                     uint32_t ts);
/* The front entry if it is committed, else NULL; valid until the next call on q. */
const struct sim_qentry *sim_queue_ready(const struct sim_queue *q);
/* Drops the front entry (which sim_queue_ready returned), freeing its payload copy. */
void sim_queue_pop(struct sim_queue *q);

#endif
