/*
 * tx.c -- the send transaction and the receive, as bus1 orders them.
 *
 * A send is one transaction for any number of destinations (unicast is multicast to one):
 *   prepare  resolve handles, allocate the message record and every entry (all-or-nothing:
 *            nothing is staged before every copy is allocated);
 *   stage    per destination, under its lock: sync its clock to the running maximum, insert
 *            a block at clock + 1, carry the maximum forward;
 *   stamp    under the sender's lock: sync to the maximum and tick; the even result is the
 *            message's timestamp, above every block of the transaction;
 *   sync     per destination: sync its clock to the timestamp, before anything is visible,
 *            so a message caused by this one (even through a side channel) stamps higher;
 *   commit   per destination: move the block to the timestamp and wake readers.
 * Each step is one queue operation: one lock, held briefly, never two at once.
 *
 * Invariants:
 *   - Until the commit, a destination's copy is a block (odd ts) that keeps every later
 *     entry of that queue from being received: nothing can overtake a message in flight.
 *   - The message record holds one reference per destination not yet received or dropped.
 *   - A destination that disconnects mid-transaction flushes its queue; the transaction
 *     notices at its next step (peer no longer active) and frees its entry itself.
 *   - The B1_INJECT_* modes exist only to prove the checker; each breaks one rule above and
 *     is selected once, at bus creation.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <time.h>
#include "layout.h"

static void inject_pause(void *base) {
    uint32_t ns = HDR(base)->limits.inject_pause_ns;
    if (ns) {
        struct timespec ts = {0, (long)ns};
        nanosleep(&ts, NULL);
    }
}

static void drop_dest(void *base, struct b1_tx *tx, struct b1_dest *d) {
    b1_entry_free(base, d->entry);
    b1_msg_put(base, tx->msg);
    d->state = B1_DEST_DROPPED;
}

/* The destination's queue is the one the transaction staged into, and still connected. */
static int dest_alive(struct b1_peer *p, const struct b1_dest *d) {
    return p->id == d->peer_id && p->state == B1_PEER_ACTIVE;
}

int b1_tx_prepare(void *base, struct b1_tx *tx, uint32_t slot, uint64_t id,
                  const uint64_t *dests, uint32_t n, const char *payload, uint32_t len) {
    struct b1_header *h = HDR(base);
    if (n == 0 || n > h->limits.max_dests) return -EINVAL;
    if (len > h->limits.max_payload) return -EMSGSIZE;
    if (slot == 0 || slot > h->limits.max_peers) return -EINVAL;
    struct b1_peer *sender = PEER(base, slot);
    if (sender->id != id) return -EINVAL;
    if (sender->state != B1_PEER_ACTIVE) return -ESHUTDOWN;

    tx->sender_slot = slot;
    tx->sender_id = id;
    tx->n = n;
    tx->ts = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t hi = b1_handle_lookup(base, slot, id, dests[i]);
        if (!hi) return -ENXIO;
        struct b1_handle *hd = HANDLE(base, hi);
        struct b1_node *nd = NODE(base, hd->node);
        struct b1_dest *d = &tx->dests[i];
        d->handle = dests[i];
        d->node = hd->node;
        d->node_gen = hd->node_gen;
        d->peer_slot = nd->owner_slot;
        d->peer_id = nd->owner_id;
        d->owner_handle = nd->owner_handle;
        d->state = B1_DEST_PREPARED;
        d->entry = 0;
    }
    tx->msg = b1_msg_alloc(base, len, n);
    if (!tx->msg) return -EXFULL;
    memcpy((char *)(MSG(base, tx->msg) + 1), payload, len);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t e = b1_entry_alloc(base);
        if (!e) {
            while (i--) b1_entry_free(base, tx->dests[i].entry);
            atomic_store(&MSG(base, tx->msg)->refs, 1);
            b1_msg_put(base, tx->msg);
            return -EXFULL;
        }
        tx->dests[i].entry = e;
    }
    tx->seq = atomic_fetch_add(&sender->tx_seq, 1);
    tx->max_ts = __atomic_load_n(&sender->clock, __ATOMIC_RELAXED); /* best first estimate */
    int32_t pid = b1_pid();
    for (uint32_t i = 0; i < n; i++) {
        struct b1_dest *d = &tx->dests[i];
        struct b1_entry *e = ENTRY(base, d->entry);
        e->ts = 0;
        e->sender = id;
        e->seq = tx->seq;
        e->idx = i;
        e->msg = tx->msg;
        e->type = B1_MSG_DATA;
        e->destination = d->owner_handle;
        e->node = d->node;
        e->stager_pid = pid;
        e->tiebreak = 0;
    }
    return 0;
}

int b1_tx_stage(void *base, struct b1_tx *tx, uint32_t i) {
    struct b1_header *h = HDR(base);
    if (i >= tx->n || tx->dests[i].state != B1_DEST_PREPARED || tx->ts) return -EINVAL;
    struct b1_dest *d = &tx->dests[i];
    struct b1_peer *p = PEER(base, d->peer_slot);
    struct b1_entry *e = ENTRY(base, d->entry);
    int r = b1_lock(p);
    if (r) return r;
    if (!dest_alive(p, d)) {
        b1_unlock(p);
        drop_dest(base, tx, d);
        return 0;
    }
    uint64_t t = b1_sync_clock(p, tx->max_ts);
    int woke = 0;
    uint32_t inject = h->limits.inject;
    if (inject != B1_INJECT_NO_BLOCK && inject != B1_INJECT_FIFO) {
        e->ts = t + 1;
        if (inject == B1_INJECT_ADDRESS_TIEBREAK) e->tiebreak = d->entry;
        woke = b1_queue_insert_locked(base, p, d->entry);
    }
    tx->max_ts = t;
    b1_unlock(p);
    if (woke) b1_wake(p);
    d->state = B1_DEST_STAGED;
    if (inject) inject_pause(base);
    return 0;
}

int b1_tx_stamp(void *base, struct b1_tx *tx) {
    if (tx->ts) return -EINVAL;
    for (uint32_t i = 0; i < tx->n; i++)
        if (tx->dests[i].state == B1_DEST_PREPARED) return -EINVAL;
    struct b1_peer *p = PEER(base, tx->sender_slot);
    int r = b1_lock(p);
    if (r) return r;
    if (p->id != tx->sender_id || p->state != B1_PEER_ACTIVE) {
        b1_unlock(p);
        return -ESHUTDOWN;
    }
    b1_sync_clock(p, tx->max_ts);
    p->clock += 2;
    tx->ts = p->clock;
    b1_unlock(p);
    return 0;
}

int b1_tx_sync(void *base, struct b1_tx *tx, uint32_t i) {
    if (i >= tx->n || !tx->ts) return -EINVAL;
    struct b1_dest *d = &tx->dests[i];
    if (d->state == B1_DEST_DROPPED) return 0;
    if (d->state != B1_DEST_STAGED) return -EINVAL;
    if (HDR(base)->limits.inject != B1_INJECT_NO_SYNC) {
        struct b1_peer *p = PEER(base, d->peer_slot);
        int r = b1_lock(p);
        if (r) return r;
        if (dest_alive(p, d)) b1_sync_clock(p, tx->ts);
        b1_unlock(p);
    }
    d->state = B1_DEST_SYNCED;
    return 0;
}

int b1_tx_commit(void *base, struct b1_tx *tx, uint32_t i) {
    struct b1_header *h = HDR(base);
    if (i >= tx->n || !tx->ts) return -EINVAL;
    struct b1_dest *d = &tx->dests[i];
    if (d->state == B1_DEST_DROPPED) return 0;
    if (d->state != B1_DEST_STAGED && d->state != B1_DEST_SYNCED) return -EINVAL;
    struct b1_peer *p = PEER(base, d->peer_slot);
    struct b1_entry *e = ENTRY(base, d->entry);
    struct b1_msg *m = MSG(base, tx->msg);
    int r = b1_lock(p);
    if (r) return r;
    if (!dest_alive(p, d)) {
        /* disconnected since staging: the flush took the block out already */
        b1_unlock(p);
        drop_dest(base, tx, d);
        return 0;
    }
    uint32_t inject = h->limits.inject;
    if (inject != B1_INJECT_NO_SYNC) b1_sync_clock(p, tx->ts); /* unicast: the sync round */
    int woke = 0; /* the front may change at the removal or at the insertion */
    if (inject != B1_INJECT_NO_BLOCK && inject != B1_INJECT_FIFO)
        woke = b1_queue_remove_locked(base, p, d->entry);
    if (inject == B1_INJECT_FIFO) {
        e->ts = 2 * ++p->fifo_counter;
    } else {
        e->ts = tx->ts;
        if (inject == B1_INJECT_ADDRESS_TIEBREAK) e->tiebreak = d->entry;
    }
    woke |= b1_queue_insert_locked(base, p, d->entry);
    p->n_messages++;
    p->n_bytes += m->len;
    b1_unlock(p);
    if (woke) b1_wake(p);
    d->state = B1_DEST_COMMITTED;
    if (inject) inject_pause(base);
    return 0;
}

/* Undo a transaction that has not been committed anywhere. */
void b1_tx_abort(void *base, struct b1_tx *tx) {
    uint32_t inject = HDR(base)->limits.inject;
    for (uint32_t i = 0; i < tx->n; i++) {
        struct b1_dest *d = &tx->dests[i];
        if (d->state == B1_DEST_STAGED || d->state == B1_DEST_SYNCED) {
            struct b1_peer *p = PEER(base, d->peer_slot);
            int woke = 0;
            if (b1_lock(p) == 0) {
                if (dest_alive(p, d) && inject != B1_INJECT_NO_BLOCK && inject != B1_INJECT_FIFO)
                    woke = b1_queue_remove_locked(base, p, d->entry);
                b1_unlock(p);
            }
            if (woke) b1_wake(p);
            drop_dest(base, tx, d);
        } else if (d->state == B1_DEST_PREPARED) {
            drop_dest(base, tx, d);
        }
    }
}

int b1_send(void *base, uint32_t slot, uint64_t id, const uint64_t *dests, uint32_t n,
            const char *payload, uint32_t len, uint64_t *stamp) {
    if (n == 0 || n > HDR(base)->limits.max_dests) return -EINVAL;
    struct b1_dest ds[n];
    struct b1_tx tx = {.dests = ds};
    int r = b1_tx_prepare(base, &tx, slot, id, dests, n, payload, len);
    if (r) return r;
    for (uint32_t i = 0; i < n && !r; i++) r = b1_tx_stage(base, &tx, i);
    if (!r) r = b1_tx_stamp(base, &tx);
    if (r) {
        b1_tx_abort(base, &tx);
        return r;
    }
    if (n > 1) /* a single destination is synced inside its commit */
        for (uint32_t i = 0; i < n; i++) b1_tx_sync(base, &tx, i);
    for (uint32_t i = 0; i < n; i++) b1_tx_commit(base, &tx, i);
    atomic_fetch_add_explicit(&PEER(base, slot)->sent, 1, memory_order_relaxed);
    stamp[0] = tx.ts;
    stamp[1] = id;
    stamp[2] = tx.seq;
    return 0;
}

/* ---- receiving ---- */

int b1_recv(void *base, uint32_t slot, uint64_t id, struct b1_msg_info *info,
            char *buf, uint32_t buflen) {
    struct b1_header *h = HDR(base);
    if (slot == 0 || slot > h->limits.max_peers) return -EINVAL;
    struct b1_peer *p = PEER(base, slot);
    int r = b1_lock(p);
    if (r) return r;
    if (p->id != id) {
        b1_unlock(p);
        return -EINVAL;
    }
    if (p->state != B1_PEER_ACTIVE) {
        b1_unlock(p);
        return -ESHUTDOWN;
    }
    uint32_t ei = p->front;
    if (!ei || (ENTRY(base, ei)->ts & 1)) {
        b1_unlock(p);
        return -EAGAIN;
    }
    struct b1_entry *e = ENTRY(base, ei);
    struct b1_msg *m = MSG(base, e->msg);
    if (m->len > buflen) {
        b1_unlock(p);
        return -EMSGSIZE;
    }
    int woke = b1_queue_remove_locked(base, p, ei);
    p->n_messages--;
    p->n_bytes -= m->len;
    p->received++;
    b1_unlock(p);
    if (woke) b1_wake(p);
    /* the record is immutable and referenced by this entry: copy it out unlocked */
    info->ts = e->ts;
    info->sender = e->sender;
    info->seq = e->seq;
    info->destination = e->destination;
    info->type = e->type;
    info->len = m->len;
    info->n_handles = m->n_handles;
    memcpy(buf, (char *)(m + 1), m->len);
    b1_msg_put(base, e->msg);
    b1_entry_free(base, ei);
    return 0;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline int front_ready(struct b1_peer *p) {
    uint64_t ts = atomic_load_explicit(&p->front_ts, memory_order_acquire);
    return ts && !(ts & 1);
}

int b1_recv_wait(void *base, uint32_t slot, uint64_t id, struct b1_msg_info *info,
                 char *buf, uint32_t buflen, int64_t timeout_ns) {
    uint64_t deadline = timeout_ns > 0 ? b1_now_ns() + (uint64_t)timeout_ns : 0;
    uint32_t spin_ns = HDR(base)->limits.spin_ns;
    struct b1_peer *p = PEER(base, slot);
    for (;;) {
        int r = b1_recv(base, slot, id, info, buf, buflen);
        if (r != -EAGAIN || timeout_ns == 0) return r;
        /* spin briefly: a futex wake across CPUs costs tens of microseconds */
        uint64_t now = b1_now_ns(), spin_end = now + spin_ns;
        if (deadline && spin_end > deadline) spin_end = deadline;
        for (uint32_t k = 0; !front_ready(p); k++) {
            cpu_relax();
            if ((k & 63) == 63 && b1_now_ns() >= spin_end) break;
        }
        if (front_ready(p)) continue;
        int64_t left = -1;
        if (deadline) {
            now = b1_now_ns();
            if (now >= deadline) return -ETIMEDOUT;
            left = (int64_t)(deadline - now);
        }
        uint32_t seen = atomic_load(&p->wake_seq);
        atomic_fetch_add(&p->waiters, 1);
        if (!front_ready(p) && p->id == id && p->state == B1_PEER_ACTIVE)
            r = b1_futex_wait(&p->wake_seq, seen, left);
        else
            r = 0;
        atomic_fetch_sub(&p->waiters, 1);
        if (r == -EINTR) return r;
        if (r == -ETIMEDOUT) {
            r = b1_recv(base, slot, id, info, buf, buflen);
            return r == -EAGAIN ? -ETIMEDOUT : r;
        }
    }
}
