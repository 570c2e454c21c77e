/*
 * queue.h -- one peer's queue and its lock (queue.c): the layer every other one stands on.
 *
 * Lock rules: b1_lock/b1_unlock take a peer's robust mutex; a function named *_locked
 * expects the caller to hold the lock of the peer it is given and neither takes nor
 * releases any lock.  Nothing here calls up: a change of the front is returned (1) and the
 * caller wakes the sleepers (b1_wake) after unlocking.
 */
#ifndef BUS1PY_QUEUE_H
#define BUS1PY_QUEUE_H
#include <errno.h>
#include "layout.h"

/* a process-shared robust mutex (every lock in the segment is one): 0 or -errno */
int b1_robust_mutex_init(pthread_mutex_t *m);
int b1_lock(void *base, struct b1_peer *p);
void b1_unlock(struct b1_peer *p);
/* insert, remove and rekey return 1 when the front changed (wake after unlocking) */
int b1_queue_insert_locked(void *base, struct b1_peer *p, uint32_t e);
int b1_queue_remove_locked(void *base, struct b1_peer *p, uint32_t e);
/* rekey: e's new ts; next, if not 0, is e's successor as the caller knows it (0: found) */
int b1_queue_rekey_locked(void *base, struct b1_peer *p, uint32_t e, uint64_t ts, uint32_t next,
                          int *moved);
int b1_queue_contains_locked(void *base, struct b1_peer *p, uint32_t e);
/* the entry after e (linked in p's tree) in key order, 0 after the last */
uint32_t b1_queue_next_locked(void *base, struct b1_peer *p, uint32_t e);
int b1_queue_publish_front(void *base, struct b1_peer *p);
int b1_key_less(const struct b1_entry *a, const struct b1_entry *b);
void b1_wake(struct b1_peer *p);
int b1_futex_wait(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ns);

/* A data copy's charge to its receiver p (p's lock held): one message, its payload bytes
 * and its descriptors, against p's quotas.  Charged at the stage (-EDQUOT: nothing
 * charged); released where the copy leaves the queue -- received, dropped, flushed,
 * given back -- except that a slice keeps its message and bytes charged until it is
 * given back, its descriptors having left with the take. */
static inline int b1_charge_locked(struct b1_peer *p, uint32_t len, uint32_t n_fds) {
    if (p->n_messages + 1 > p->quota_messages || p->n_bytes + len > p->quota_bytes ||
        (n_fds && p->n_fds + n_fds > p->quota_fds))
        return -EDQUOT;
    p->n_messages++;
    p->n_bytes += len;
    if (n_fds) p->n_fds += n_fds;
    return 0;
}
static inline void b1_uncharge_locked(struct b1_peer *p, uint32_t len, uint32_t n_fds) {
    p->n_messages--;
    p->n_bytes -= len;
    if (n_fds) p->n_fds -= n_fds;
}

/* Hand entry ei back to its transaction (p's lock held): out of p's queue when `linked`,
 * ts 0 and queue 0 (layout.h: the transaction's again, gc's if its stager is dead), a data
 * copy's charge released.  The transaction drops it at its next step.  Returns whether
 * the front changed. */
int b1_queue_give_back_locked(void *base, struct b1_peer *p, uint32_t ei, int linked);

/* raise the peer's clock to at least t (its lock held); returns the clock */
static inline uint64_t b1_sync_clock(struct b1_peer *p, uint64_t t) {
    if (p->clock < t) p->clock = t;
    return p->clock;
}

#endif
