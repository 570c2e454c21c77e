/* holdback.h - the C side of bus1py/causal/holdback.py: held messages waiting, per sender,
 * on their first unmet wait, released last-in first-out.
 *
 * A protocol's held record begins with a struct hb_node; its key is sender << 32 | stamp
 * (never 0: stamps start at 1), so the sender of a released record is key >> 32.
 *
 * Invariants:
 *   - Every held record is on exactly one waiting list, head[s] .. tail[s] in the order it
 *     was put there (holdback.py's waiting[s]), s the sender of its first unmet wait; and
 *     its key is in the open-addressing set `keys` (linear probing, at most half full),
 *     once; `held` counts them.
 *   - A record leaves both together, when its waits are all met, onto the caller's release
 *     stack; hb_drain then delivers the stack top first and pushes what each delivery
 *     releases on top (that order is part of the protocols: their merges are order-sensitive).
 * No cdef: this header declares nothing the Python side sees.
 */
#ifndef SIM_HOLDBACK_H
#define SIM_HOLDBACK_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

struct hb_node { struct hb_node *next; uint64_t key; };
struct sim_step;

struct holdback {
    struct hb_node **head, **tail;     /* n each, one allocation */
    uint64_t *keys;
    size_t cap, held;
};

int holdback_init(struct holdback *h, int n);
/* frees every held record (each one malloc'd block) and the lists */
void holdback_fini(struct holdback *h, int n);
/* adds a key not in the set; -1 out of memory (then unchanged) */
int holdback_add_key(struct holdback *h, uint64_t key);
void holdback_del_key(struct holdback *h, uint64_t key);

static inline size_t holdback_home(size_t cap, uint64_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

/* the slot of key, or of the empty slot ending its probe */
static inline size_t holdback_slot(const uint64_t *keys, size_t cap, uint64_t key)
{
    size_t i = holdback_home(cap, key);
    while (keys[i] && keys[i] != key)
        i = (i + 1) & (cap - 1);
    return i;
}

static inline int holdback_has(const struct holdback *h, uint64_t key)
{
    return h->cap && h->keys[holdback_slot(h->keys, h->cap, key)];
}

/* appends r to the list of sender s */
static inline void holdback_wait(struct holdback *h, uint32_t s, struct hb_node *r)
{
    r->next = NULL;
    *(h->tail[s] ? &h->tail[s]->next : &h->head[s]) = r;
    h->tail[s] = r;
}

/* Holds r (its key set): on the list of s; -1 out of memory (then not held). */
static inline int holdback_hold(struct holdback *h, uint32_t s, struct hb_node *r)
{
    if (holdback_add_key(h, r->key) < 0)
        return -1;
    holdback_wait(h, s, r);
    return 0;
}

/* Retries, in their order, the records waiting on s: `unmet` gives the sender of a record's
 * first unmet wait (>= 0) or -1; the records it clears go onto *stack in that order. */
static inline __attribute__((always_inline)) void
holdback_release(struct holdback *h, uint32_t s, void *m,
                 long (*unmet)(void *m, struct hb_node *r), struct hb_node **stack)
{
    struct hb_node *r = h->head[s], *nx;
    h->head[s] = h->tail[s] = NULL;
    for (; r; r = nx) {
        nx = r->next;
        long w = unmet(m, r);
        if (w >= 0) {
            holdback_wait(h, (uint32_t)w, r);
        } else {
            holdback_del_key(h, r->key);
            r->next = *stack;
            *stack = r;
        }
    }
}

/* After the caller delivered a message from s: delivers, through `deliver` (0 or -1), what
 * that releases, and what those release, top of the stack first; frees each record. After
 * a failure it frees the rest undelivered (the machine is unusable then) and returns -1. */
static inline __attribute__((always_inline)) int
holdback_drain(struct holdback *h, uint32_t s, void *m,
               long (*unmet)(void *m, struct hb_node *r),
               int (*deliver)(void *m, struct hb_node *r, struct sim_step *step),
               struct sim_step *step)
{
    struct hb_node *stack = NULL;
    holdback_release(h, s, m, unmet, &stack);
    int rc = 0;
    while (stack) {
        struct hb_node *r = stack;
        stack = r->next;
        if (rc == 0 && (rc = deliver(m, r, step)) == 0)
            holdback_release(h, (uint32_t)(r->key >> 32), m, unmet, &stack);
        free(r);
    }
    return rc;
}

#endif
