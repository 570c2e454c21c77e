/*
 * queue.c -- one peer's queue: a treap of entries under the peer's robust mutex.
 *
 * Invariants:
 *   - The tree is ordered by the key (ts, sender, seq, idx): the same total order at every
 *     queue, never by address.  Keys are unique because (sender, seq, idx) is.
 *   - Priorities are a hash of the entry's identity (sender, seq, idx), the part of the key
 *     that never changes, so the tree's shape depends only on the set of keys
 *     (reproducible) and its expected depth is O(log m): insert, remove and finding the
 *     front cost O(log m).  Because the priority ignores ts, a commit that raises the ts of
 *     the rightmost entry keeps the tree valid in place (b1_queue_rekey_locked): the usual
 *     unicast walks the tree once, at its stage, instead of three times.
 *   - p->front is the leftmost entry and p->front_ts its timestamp (0 when empty); both are
 *     updated under the lock by every change, front_ts is read without it by spinners.
 *   - p->back is the rightmost entry (0 when empty), also updated by every change.
 *   - Only a committed (even) front can be dequeued; an odd front blocks the whole queue.
 *   - A sleeper first registers in `waiters`, then reads wake_seq, then re-checks front_ts;
 *     a change of the front publishes front_ts and then, if anyone is registered and no
 *     wake is pending since the last sleeper's look (b1_wake), bumps wake_seq and wakes.  Either the sleeper sees the new front or its futex word has
 *     changed: no wake-up is lost, and without sleepers a change costs no shared write.
 *     While a receiver for one node sleeps (node_waiters), every change wakes, front or not.
 *
 * Lock rules: the peer's robust mutex guards its tree, clock and counters; every
 * *_locked call expects it held and takes no other.  This is the lowest layer with a
 * lock: it calls nothing above it, and a change of the front is returned to the caller,
 * who wakes the sleepers after unlocking.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "queue.h"

#define LOCK_SPINS 64 /* trylock attempts before sleeping in the kernel */

static int repair_locked(void *base, struct b1_peer *p);

static inline uint32_t slot_of(void *base, const struct b1_peer *p) {
    return (uint32_t)(p - PEER(base, 0));
}

/* Every hold of a queue lock is one short queue operation (~100 ns), so a collision is
 * better waited out spinning than with glibc's robust mutex, which goes straight to
 * FUTEX_WAIT (and makes the unlocker pay a FUTEX_WAKE).  After LOCK_SPINS tries, sleep.
 * A holder that died mid-operation leaves the mutex EOWNERDEAD and may have left the tree
 * half relinked (a split moves nodes before the new one is linked): the taker verifies
 * what the lock guards and rebuilds it from the entry table (repair_locked), or marks the
 * peer broken; it never goes on with a damaged tree.  What the layers above keep under
 * the same lock (the holder lists of the peer's nodes) it leaves flagged (`unverified`)
 * for them: this layer knows nothing of nodes (handle.c b1_lock_nodes). */
int b1_robust_mutex_init(pthread_mutex_t *m) {
    pthread_mutexattr_t a;
    int r = pthread_mutexattr_init(&a);
    if (!r) r = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    if (!r) r = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (!r) r = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return -r;
}

int b1_lock(void *base, struct b1_peer *p) {
    int r = pthread_mutex_trylock(&p->lock);
    for (int i = 0; r == EBUSY && i < LOCK_SPINS; i++) {
        for (int k = 0; k < 4 << (i < 4 ? i : 4); k++) b1_relax(); /* back off: 4..64 pauses */
        r = pthread_mutex_trylock(&p->lock);
    }
    if (r == EBUSY) r = pthread_mutex_lock(&p->lock);
    if (r == EOWNERDEAD) {
        pthread_mutex_consistent(&p->lock);
        p->lock_recoveries++;
        if (repair_locked(base, p)) p->broken = 1;
        p->unverified = 1; /* what the layers above guard under this lock: handle.c */
        r = 0;
    }
    if (!r && __builtin_expect(p->broken, 0)) {
        pthread_mutex_unlock(&p->lock);
        return -EBADMSG;
    }
    return r ? -r : 0;
}

void b1_unlock(struct b1_peer *p) { pthread_mutex_unlock(&p->lock); }

/* ---- the treap ---- */

/* The entry's identity (sender, seq, idx): unique, and the key's tiebreak after ts. */
static inline int identity_less(const struct b1_entry *a, const struct b1_entry *b) {
    if (a->sender != b->sender) return a->sender < b->sender;
    if (a->seq != b->seq) return a->seq < b->seq;
    return a->idx < b->idx;
}

/* The key (ts, sender, seq, idx), the same total order at every queue. */
int b1_key_less(const struct b1_entry *a, const struct b1_entry *b) {
    return a->ts != b->ts ? a->ts < b->ts : identity_less(a, b);
}

/* The queue's order: the key, except on a bus created with B1_INJECT_ADDRESS_TIEBREAK,
 * which breaks timestamp ties by entry address (wrongly: each queue's copy has its own). */
static inline int key_less(void *base, const struct b1_entry *a, const struct b1_entry *b) {
    if (a->ts != b->ts) return a->ts < b->ts;
    if (LIM(base).inject == B1_INJECT_ADDRESS_TIEBREAK) return a < b;
    return identity_less(a, b);
}

static inline uint32_t key_priority(const struct b1_entry *e) {
    uint64_t x = e->sender * 0xbf58476d1ce4e5b9ull ^ e->seq * 0x94d049bb133111ebull ^
                 (uint64_t)e->idx * 0x9e3779b97f4a7c15ull;
    x ^= x >> 31;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    return (uint32_t)x;
}

/* Split t into keys below e (into *l) and above e (into *r). */
#define MAXE(base) (LIM(base).max_entries)

static void split(void *base, uint32_t t, const struct b1_entry *e, uint32_t *l, uint32_t *r) {
    const struct b1_view *v = VIEW(base);
    uint32_t steps = 0;
    while (t && b1_step(&steps, v->limits.max_entries)) {
        struct b1_entry *n = ENTRY_V(v, base, t);
        if (key_less(base, n, e)) {
            *l = t;
            l = &n->right;
            t = n->right;
        } else {
            *r = t;
            r = &n->left;
            t = n->left;
        }
    }
    *l = 0;
    *r = 0;
}

/* Join two trees where every key of a is below every key of b. */
static uint32_t merge(void *base, uint32_t a, uint32_t b) {
    const struct b1_view *v = VIEW(base);
    uint32_t root = 0, *slot = &root, steps = 0;
    while (a && b && b1_step(&steps, v->limits.max_entries)) {
        struct b1_entry *x = ENTRY_V(v, base, a), *y = ENTRY_V(v, base, b);
        if (x->prio > y->prio) {
            *slot = a;
            slot = &x->right;
            a = x->right;
        } else {
            *slot = b;
            slot = &y->left;
            b = y->left;
        }
    }
    *slot = a ? a : b;
    return root;
}

static uint32_t leftmost(void *base, uint32_t t) {
    const struct b1_view *v = VIEW(base);
    uint32_t steps = 0;
    if (!t) return 0;
    while (ENTRY_V(v, base, t)->left && b1_step(&steps, v->limits.max_entries)) t = ENTRY_V(v, base, t)->left;
    return t;
}

static uint32_t rightmost(void *base, uint32_t t) {
    const struct b1_view *v = VIEW(base);
    uint32_t steps = 0;
    if (!t) return 0;
    while (ENTRY_V(v, base, t)->right && b1_step(&steps, v->limits.max_entries)) t = ENTRY_V(v, base, t)->right;
    return t;
}

/* Returns whether the sleepers are owed a wake: the front changed, or one sleeps who waits
 * for an entry behind the front (a receive for one node, recv.c), for whom any change
 * may be the one. */
int b1_queue_publish_front(void *base, struct b1_peer *p) {
    const struct b1_view *v = VIEW(base);
    uint64_t ts = p->front ? ENTRY_V(v, base, p->front)->ts : 0;
    if (atomic_load_explicit(&p->front_ts, memory_order_relaxed) == ts)
        return atomic_load_explicit(&p->node_waiters, memory_order_seq_cst) != 0;
    atomic_store_explicit(&p->front_ts, ts, memory_order_seq_cst);
    return 1;
}

int b1_queue_insert_locked(void *base, struct b1_peer *p, uint32_t e) {
    const struct b1_view *v = VIEW(base);
    struct b1_entry *n = ENTRY_V(v, base, e);
    n->prio = key_priority(n);
    n->left = n->right = 0;
    /* before any link: a repair finds it */
    n->queue = (uint16_t)(p - (struct b1_peer *)((char *)base + v->off_peers));
    uint32_t *slot = &p->root, steps = 0;
    if (p->back && key_less(base, ENTRY_V(v, base, p->back), n)) {
        /* above every key (a send's usual case): the path runs down the right spine and
         * the subtree found there is all below n, so it becomes n's left whole -- the tree
         * the general path builds, without a key comparison per step or the split */
        while (*slot && ENTRY_V(v, base, *slot)->prio >= n->prio && b1_step(&steps, v->limits.max_entries))
            slot = &ENTRY_V(v, base, *slot)->right;
        n->left = *slot;
        *slot = e;
        p->n_entries++;
        p->back = e;
        return b1_queue_publish_front(base, p);
    }
    while (*slot && ENTRY_V(v, base, *slot)->prio >= n->prio && b1_step(&steps, v->limits.max_entries)) {
        struct b1_entry *t = ENTRY_V(v, base, *slot);
        slot = key_less(base, n, t) ? &t->left : &t->right;
    }
    split(base, *slot, n, &n->left, &n->right);
    *slot = e;
    p->n_entries++;
    if (!p->front || key_less(base, n, ENTRY_V(v, base, p->front))) p->front = e;
    if (!p->back || key_less(base, ENTRY_V(v, base, p->back), n)) p->back = e;
    return b1_queue_publish_front(base, p);
}

int b1_queue_remove_locked(void *base, struct b1_peer *p, uint32_t e) {
    const struct b1_view *v = VIEW(base);
    struct b1_entry *n = ENTRY_V(v, base, e);
    p->n_entries--;
    if (e == p->front) {
        /* the dequeue: the front has no left child, so it sits at the end of the left
         * spine; its right subtree takes its place and holds the next front, if any */
        uint32_t *slot = &p->root, parent = 0, steps = 0;
        while (*slot != e) {
            if (!*slot || !b1_step(&steps, v->limits.max_entries)) { /* not in the tree: scribbled */
                b1_bad = 1;
                return 0;
            }
            parent = *slot;
            slot = &ENTRY_V(v, base, parent)->left;
        }
        *slot = n->right;
        p->front = n->right ? leftmost(base, n->right) : parent;
        if (e == p->back) p->back = 0; /* it was the only entry */
        return b1_queue_publish_front(base, p);
    }
    uint32_t *slot = &p->root, steps = 0;
    while (*slot != e) {
        if (!*slot || !b1_step(&steps, v->limits.max_entries)) {
            b1_bad = 1;
            return 0;
        }
        struct b1_entry *t = ENTRY_V(v, base, *slot);
        slot = key_less(base, n, t) ? &t->left : &t->right;
    }
    *slot = merge(base, n->left, n->right);
    if (e == p->back) p->back = rightmost(base, p->root);
    return b1_queue_publish_front(base, p);
}

/* The entry after e in key order (e linked in p's tree), or 0 for the back: the leftmost
 * of its right subtree, else the last ancestor it lies to the left of. */
static uint32_t successor(void *base, struct b1_peer *p, uint32_t e) {
    const struct b1_view *v = VIEW(base);
    struct b1_entry *n = ENTRY_V(v, base, e);
    if (n->right) return leftmost(base, n->right);
    uint32_t t = p->root, after = 0, steps = 0;
    while (t && t != e && b1_step(&steps, v->limits.max_entries)) {
        struct b1_entry *x = ENTRY_V(v, base, t);
        if (key_less(base, n, x)) {
            after = t;
            t = x->left;
        } else {
            t = x->right;
        }
    }
    return after;
}

uint32_t b1_queue_next_locked(void *base, struct b1_peer *p, uint32_t e) {
    return successor(base, p, e);
}

/* Give entry e (linked in p's tree) the timestamp ts > its current one.  An entry whose
 * new key stays below its successor's keeps its place (its priority ignores ts, and
 * everything before it is below its old key); any other moves.  Committing a batch's
 * blocks last first keeps each in place.  `next`, if not 0, is e's successor, known to
 * the caller (0: found here).  Returns whether the front changed; *moved (if given):
 * whether e left its place. */
int b1_queue_rekey_locked(void *base, struct b1_peer *p, uint32_t e, uint64_t ts, uint32_t next,
                          int *moved) {
    const struct b1_view *v = VIEW(base);
    struct b1_entry *n = ENTRY_V(v, base, e);
    if (!next && e != p->back) next = successor(base, p, e);
    uint64_t old = n->ts;
    n->ts = ts;
    if (moved) *moved = 0;
    if (!next || key_less(base, n, ENTRY_V(v, base, next)))
        return b1_queue_publish_front(base, p);
    if (moved) *moved = 1;
    n->ts = old;
    int woke = b1_queue_remove_locked(base, p, e);
    ENTRY_V(v, base, e)->ts = ts;
    return b1_queue_insert_locked(base, p, e) | woke;
}

/* Is entry e linked in p's tree (searched by its key)? */
int b1_queue_contains_locked(void *base, struct b1_peer *p, uint32_t e) {
    const struct b1_view *v = VIEW(base);
    struct b1_entry *n = ENTRY_V(v, base, e);
    uint32_t steps = 0;
    for (uint32_t t = p->root; t && b1_step(&steps, v->limits.max_entries);) {
        if (t == e) return 1;
        struct b1_entry *x = ENTRY_V(v, base, t);
        t = key_less(base, n, x) ? x->left : x->right;
    }
    return 0;
}

/* ---- sleeping and waking ---- */

/* Called after a change of the front was published (front_ts, seq_cst).  A sleeper
 * registers in `waiters` before it reads wake_seq and re-checks front_ts, so when no one is
 * registered the change needs no write here -- the common case costs one shared read.
 * A wake marks `waiters` (B1_WAITERS_WOKEN) before it bumps wake_seq, and every sleeper
 * clears the mark after it has read wake_seq and before it looks at the queue: while the
 * mark stands, every registered sleeper either read wake_seq before that bump (its wait
 * returns) or looks after this change, so another wake is owed to no one and is skipped
 * -- a receiver woken and not yet run costs its senders no further syscalls.  A waker
 * killed between the mark and the bump leaves the mark to the next sleeper's clear; until
 * then a sleeper's wait ends by its own timeout (every wait is bounded: recv.c, peer.c). */
void b1_wake(struct b1_peer *p) {
    uint32_t w = atomic_load_explicit(&p->waiters, memory_order_seq_cst);
    if (!(w & ~B1_WAITERS_WOKEN) || (w & B1_WAITERS_WOKEN)) return;
    if (atomic_fetch_or_explicit(&p->waiters, B1_WAITERS_WOKEN, memory_order_seq_cst) & B1_WAITERS_WOKEN) return;
    atomic_fetch_add_explicit(&p->wake_seq, 1, memory_order_seq_cst);
    syscall(SYS_futex, &p->wake_seq, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

/* Sleep while *word == seen (shared futex: the word lives in shared memory). */
int b1_futex_wait(_Atomic uint32_t *word, uint32_t seen, int64_t timeout_ns) {
    struct timespec ts, *tsp = NULL;
    if (timeout_ns >= 0) {
        ts.tv_sec = timeout_ns / 1000000000;
        ts.tv_nsec = timeout_ns % 1000000000;
        tsp = &ts;
    }
    long r = syscall(SYS_futex, word, FUTEX_WAIT, seen, tsp, NULL, 0);
    if (r == 0) return 0;
    if (errno == EAGAIN) return 0; /* the word had already changed */
    return -errno;                 /* ETIMEDOUT or EINTR */
}

/* ---- inspection (tests, benchmarks) ---- */

static int check_subtree(void *base, uint32_t t, const struct b1_entry *lo,
                         const struct b1_entry *hi, uint32_t *count, uint32_t depth) {
    if (!t) return 0;
    if (*count > MAXE(base) || depth > 4096) return -EUCLEAN; /* a cycle, or no treap */
    struct b1_entry *n = ENTRY(base, t);
    if ((lo && !key_less(base, lo, n)) || (hi && !key_less(base, n, hi))) return -EUCLEAN;
    if (n->left && ENTRY(base, n->left)->prio > n->prio) return -EUCLEAN;
    if (n->right && ENTRY(base, n->right)->prio > n->prio) return -EUCLEAN;
    (*count)++;
    int r = check_subtree(base, n->left, lo, n, count, depth + 1);
    return r ? r : check_subtree(base, n->right, n, hi, count, depth + 1);
}

/* ---- verifying and repairing after a takeover ---- */

/* The counters a queue's entries imply: data copies queued, staged or held as slices
 * (n_messages, n_bytes), and the descriptors of those not yet taken (n_fds: a slice's
 * left with its take); the same by sender (shares, queue.h). */
struct queue_sums {
    uint32_t slot;
    uint32_t entries, messages, strangers; /* strangers: linked entries naming another queue */
    uint32_t fds;
    uint64_t bytes;
    struct b1_share shares[B1_CHARGERS];
};

static void add_entry(void *base, const struct b1_entry *e, struct queue_sums *s) {
    struct b1_shape sh;
    if ((e->type & 0xff) == B1_MSG_DATA && b1_msg_shape(base, e->msg, e->idx, &sh)) {
        struct b1_share *share = &s->shares[e->sender % B1_CHARGERS];
        s->messages++;
        s->bytes += sh.len;
        share->messages++;
        share->bytes += sh.len;
        if (e->ts != B1_TS_HELD) {
            s->fds += sh.n_fds;
            share->fds += sh.n_fds;
        }
    }
}

static uint32_t chargers(const struct queue_sums *s) {
    uint32_t n = 0;
    for (int i = 0; i < B1_CHARGERS; i++) n += s->shares[i].messages != 0;
    return n;
}

static void sum_tree(void *base, uint32_t t, struct queue_sums *s, uint32_t depth) {
    while (t && depth < 4096 && s->entries <= MAXE(base)) {
        struct b1_entry *e = ENTRY(base, t);
        s->entries++;
        s->strangers += e->queue != s->slot;
        add_entry(base, e, s);
        sum_tree(base, e->left, s, depth + 1);
        t = e->right;
        depth++;
    }
}

static int check_subtree(void *base, uint32_t t, const struct b1_entry *lo,
                         const struct b1_entry *hi, uint32_t *count, uint32_t depth);

/* Is everything the lock guards whole?  The tree (order, priorities, membership, count,
 * front, back, front_ts), the held list, the clock's parity and the quota counters. */
static int verify_locked(void *base, struct b1_peer *p) {
    uint32_t count = 0, slot = slot_of(base, p);
    int saved = b1_bad;
    b1_bad = 0;
    int bad = check_subtree(base, p->root, NULL, NULL, &count, 0) != 0 || count != p->n_entries ||
              p->front != leftmost(base, p->root) || p->back != rightmost(base, p->root) ||
              (p->clock & 1);
    if (!bad) {
        uint64_t fts = p->front ? ENTRY(base, p->front)->ts : 0;
        bad = atomic_load(&p->front_ts) != fts;
    }
    struct queue_sums s = {.slot = slot};
    if (!bad) sum_tree(base, p->root, &s, 0);
    bad |= s.strangers != 0;
    uint32_t steps = 0, prev = 0;
    for (uint32_t i = p->held; i && !bad; i = ENTRY(base, i)->right) {
        struct b1_entry *e = ENTRY(base, i);
        if (!b1_step(&steps, MAXE(base)) || e->ts != B1_TS_HELD || e->left != prev || e->queue != slot) bad = 1;
        add_entry(base, e, &s);
        prev = i;
    }
    /* every entry the table says this queue owns is in the tree or on the held list: a
     * holder killed between an unlink and the hand-over left one to be relinked */
    if (!bad) {
        uint32_t bump = atomic_load(&HDR(base)->entries_bump), owned = 0;
        if (bump > MAXE(base) + 1) bump = MAXE(base) + 1;
        for (uint32_t i = 1; i < bump; i++) {
            struct b1_entry *e = ENTRY(base, i);
            owned += e->queue == slot && e->type != B1_ENTRY_FREE && !(e->type & B1_ENTRY_RECEIVING);
        }
        bad = owned != s.entries + steps;
    }
    /* injected modes charge a copy at its stage but insert it only at its commit */
    uint32_t inject = LIM(base).inject;
    if (!bad && inject != B1_INJECT_NO_BLOCK && inject != B1_INJECT_FIFO)
        bad = s.messages != p->n_messages || s.bytes != p->n_bytes || s.fds != p->n_fds ||
              memcmp(s.shares, p->shares, sizeof s.shares) || chargers(&s) != p->n_chargers;
    bad |= b1_bad;
    b1_bad = saved;
    return bad;
}

/* Rebuild p's tree and held list from the entries that name p's slot (layout.h), and
 * its counters from them.  0 when the result verifies. */
static int repair_locked(void *base, struct b1_peer *p) {
    if (!verify_locked(base, p)) return 0;
    struct b1_header *h = HDR(base);
    uint32_t slot = slot_of(base, p), bump = atomic_load(&h->entries_bump);
    if (bump > LIM(base).max_entries + 1) bump = LIM(base).max_entries + 1;
    p->root = p->front = p->back = 0;
    p->n_entries = 0;
    p->held = 0;
    int saved = b1_bad;
    for (uint32_t i = 1; i < bump; i++) {
        struct b1_entry *e = ENTRY(base, i);
        if (e->queue != slot || e->type == B1_ENTRY_FREE || (e->type & B1_ENTRY_RECEIVING) || !e->msg) continue;
        if (e->ts == B1_TS_HELD) {
            e->left = 0;
            e->right = p->held;
            if (p->held) ENTRY(base, p->held)->left = i;
            p->held = i;
        } else {
            b1_queue_insert_locked(base, p, i);
        }
    }
    struct queue_sums s = {.slot = slot};
    sum_tree(base, p->root, &s, 0);
    for (uint32_t i = p->held, steps = 0; i && b1_step(&steps, MAXE(base)); i = ENTRY(base, i)->right)
        add_entry(base, ENTRY(base, i), &s);
    p->n_messages = s.messages;
    p->n_bytes = s.bytes;
    p->n_fds = s.fds;
    memcpy(p->shares, s.shares, sizeof s.shares);
    p->n_chargers = chargers(&s);
    if (p->clock & 1) p->clock++;
    b1_queue_publish_front(base, p);
    b1_bad = saved;
    return verify_locked(base, p);
}

int b1_queue_give_back_locked(void *base, struct b1_peer *p, uint32_t ei, int linked) {
    struct b1_entry *e = ENTRY(base, ei);
    int woke = linked ? b1_queue_remove_locked(base, p, ei) : 0;
    e->ts = 0;
    e->queue = 0;
    struct b1_shape sh;
    if (e->type == B1_MSG_DATA && b1_msg_shape(base, e->msg, e->idx, &sh)) b1_uncharge_locked(p, e->sender, sh.len, sh.n_fds);
    return woke;
}

int b1_queue_check(void *base, uint32_t slot) {
    if (!slot || slot > LIM(base).max_peers) return -EINVAL;
    struct b1_peer *p = PEER(base, slot);
    int r = b1_lock(base, p);
    if (r) return r;
    uint32_t count = p->n_entries;
    if (verify_locked(base, p)) r = -EUCLEAN;
    b1_unlock(p);
    return r ? r : (int)count;
}

int b1_queue_depth(void *base, uint32_t slot) {
    if (!slot || slot > LIM(base).max_peers) return -EINVAL;
    struct b1_peer *p = PEER(base, slot);
    int r = b1_lock(base, p);
    if (r) return r;
    /* depth of the front's path: what a dequeue walks */
    int depth = 0;
    uint32_t steps = 0;
    for (uint32_t t = p->root; t && b1_step(&steps, MAXE(base)); t = ENTRY(base, t)->left) depth++;
    b1_unlock(p);
    return depth;
}
