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
/* A sleeper's registration, in this order: b1_sleeper_register, read wake_seq, then
 * b1_sleeper_looked (the wake that came before is spent), then its look at the queue, then
 * b1_futex_wait on what it read; b1_sleeper_unregister after. */
#define B1_WAITERS_WOKEN 0x80000000u /* in waiters: woken since the last sleeper looked */
static inline void b1_sleeper_register(struct b1_peer *p) { atomic_fetch_add(&p->waiters, 1); }
static inline void b1_sleeper_looked(struct b1_peer *p) { atomic_fetch_and(&p->waiters, ~B1_WAITERS_WOKEN); }
static inline void b1_sleeper_unregister(struct b1_peer *p) { atomic_fetch_sub(&p->waiters, 1); }
int b1_futex_wait(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ns);

/* A data copy's charge to its receiver p (p's lock held): one message, its payload bytes
 * and its descriptors, against p's quotas.  Charged at the stage (-EDQUOT: nothing
 * charged); released where the copy leaves the queue -- received, dropped, flushed,
 * given back -- except that a slice keeps its message and bytes charged until it is
 * given back, its descriptors having left with the take.
 *
 * Fair shares, bus1's rule (ipc/bus1/user.c): the quotas are shared among the chargers,
 * the sending peers, each folded into share (id mod B1_CHARGERS).  n is the number of
 * shares holding a message, the charger's own counted even while it holds none (to a
 * newcomer, one more than the chargers known).  A charge c of a resource with quota Q,
 * U in use, s of it the charger's share, passes when c is 0 or Q - U >= (s + c) * n: what
 * is left before the charge is at least n times the share after it, as bus1's code
 * compares (docs/SPEC.md: where its comment and its refusal differ).  So a charger alone
 * takes about half, one of n an n'th of what it finds left, and a newcomer finds room
 * while one charge in n + 1 is left.  All of a message's resources pass or none is
 * charged.  The counters are p's, under its lock: a takeover recounts them from the
 * entries (queue.c), as it does n_messages. */
static inline struct b1_share *b1_share_of(struct b1_peer *p, uint64_t sender) {
    return &p->shares[sender % B1_CHARGERS];
}
/* n as counted from the segment: 1 to B1_CHARGERS + 1 whatever a scribbler left there */
static inline uint32_t b1_sharers(uint32_t n_chargers, uint32_t own_empty) {
    return (n_chargers < B1_CHARGERS ? n_chargers : B1_CHARGERS) + (own_empty || !n_chargers);
}
static inline int b1_fair(uint64_t quota, uint64_t used, uint64_t share, uint64_t c, uint32_t n) {
    uint64_t left = quota > used ? quota - used : 0;
    return !c || (share + c >= c && share + c <= left / n);
}
/* Would the charge pass?  Read relaxed, so a multicast can refuse before it stages
 * anything (send.c) without the lock; under the lock, the decision. */
static inline int b1_charge_fits(struct b1_peer *p, uint64_t sender, uint32_t len, uint32_t n_fds) {
#define B1_RD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
    struct b1_share *s = b1_share_of(p, sender);
    uint32_t n = b1_sharers(B1_RD(p->n_chargers), !B1_RD(s->messages));
    return b1_fair(p->quota_messages, B1_RD(p->n_messages), B1_RD(s->messages), 1, n) &&
           b1_fair(p->quota_bytes, B1_RD(p->n_bytes), B1_RD(s->bytes), len, n) &&
           b1_fair(p->quota_fds, B1_RD(p->n_fds), B1_RD(s->fds), n_fds, n);
#undef B1_RD
}
static inline int b1_charge_locked(struct b1_peer *p, uint64_t sender, uint32_t len, uint32_t n_fds) {
    if (!b1_charge_fits(p, sender, len, n_fds)) return -EDQUOT;
    struct b1_share *s = b1_share_of(p, sender);
    p->n_chargers += !s->messages;
    p->n_messages++;
    p->n_bytes += len;
    s->messages++;
    s->bytes += len;
    if (n_fds) {
        p->n_fds += n_fds;
        s->fds += n_fds;
    }
    return 0;
}
/* A handle slot's charge to its holder p, lock-free as n_handles is (bus1 charges its
 * handles the same way): the charger is the peer whose call makes the slot -- the sender
 * of a message carrying it, the peer transferring it, the holder itself for its own
 * node or a name it looks up -- and the rule b1_charge_locked's, with n read as a hint
 * (bus1: it need not be exact).  Counted first, decided after, undone when refused, so
 * two racing charges may both be refused, never both let past the rule. */
static inline int b1_charge_handle(struct b1_peer *p, uint64_t charger) {
    _Atomic uint32_t *s = &p->share_handles[charger % B1_CHARGERS];
    uint32_t share = atomic_fetch_add(s, 1);
    uint32_t used = atomic_fetch_add(&p->n_handles, 1);
    uint32_t n = b1_sharers(__atomic_load_n(&p->n_chargers, __ATOMIC_RELAXED),
                            !__atomic_load_n(&b1_share_of(p, charger)->messages, __ATOMIC_RELAXED));
    if (b1_fair(p->quota_handles, used, share, 1, n)) return 0;
    atomic_fetch_sub(&p->n_handles, 1);
    atomic_fetch_sub(s, 1);
    return -EDQUOT;
}
/* the share's part of giving a handle slot back (the caller then decrements n_handles) */
static inline void b1_uncharge_handle(struct b1_peer *p, uint32_t charger) {
    atomic_fetch_sub(&p->share_handles[charger % B1_CHARGERS], 1);
}

/* a take's descriptors leave its charge (a slice keeps the rest until given back) */
static inline void b1_uncharge_fds_locked(struct b1_peer *p, uint64_t sender, uint32_t n_fds) {
    p->n_fds -= n_fds;
    b1_share_of(p, sender)->fds -= n_fds;
}
static inline void b1_uncharge_locked(struct b1_peer *p, uint64_t sender, uint32_t len, uint32_t n_fds) {
    struct b1_share *s = b1_share_of(p, sender);
    p->n_messages--;
    p->n_bytes -= len;
    s->bytes -= len;
    if (n_fds) b1_uncharge_fds_locked(p, sender, n_fds);
    if (!--s->messages) p->n_chargers--;
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
