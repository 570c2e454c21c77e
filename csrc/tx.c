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
 *   - Quotas are charged at the stage, under the destination's lock, so a commit never
 *     fails; a send that would exceed one fails with EDQUOT and unwinds what it staged.
 *   - At the front of a queue an entry may still be dropped rather than delivered: a data
 *     message ordered after its node's destruction, a NODE_RELEASE withdrawn because the
 *     node was re-acquired (node.c decides both under the owner's lock).
 *   - The B1_INJECT_* modes exist only to prove the checker; each breaks one rule above and
 *     is selected once, at bus creation.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "layout.h"

int b1_data_dropped_locked(void *base, struct b1_entry *e);

static void inject_pause(void *base) {
    uint32_t ns = HDR(base)->limits.inject_pause_ns;
    if (ns) {
        struct timespec ts = {0, (long)ns};
        nanosleep(&ts, NULL);
    }
}

static int stages_block(void *base) {
    uint32_t inject = HDR(base)->limits.inject;
    return inject != B1_INJECT_NO_BLOCK && inject != B1_INJECT_FIFO;
}

/* Give up one destination's copy: free its entry, its handle registrations, its reference. */
static void drop_dest(void *base, struct b1_tx *tx, struct b1_dest *d, uint32_t i) {
    struct b1_msg *m = MSG(base, tx->msg);
    if (tx->type == B1_MSG_DATA) b1_tx_unregister_handles(base, m, i);
    b1_entry_free(base, d->entry);
    b1_msg_put(base, tx->msg);
    d->state = B1_DEST_DROPPED;
}

/* Take a staged copy out of a queue that is still its own (the peer's lock is held).
 * A DISCONNECTED queue was flushed already: the copy is no longer in it. */
static int unstage_locked(void *base, struct b1_tx *tx, struct b1_peer *p, struct b1_dest *d) {
    if (p->id != d->peer_id || p->state == B1_PEER_DISCONNECTED) return 0;
    int woke = 0;
    if (stages_block(base) || d->state == B1_DEST_COMMITTED) woke = b1_queue_remove_locked(base, p, d->entry);
    if (tx->type == B1_MSG_DATA) {
        p->n_messages--;
        p->n_bytes -= MSG(base, tx->msg)->len;
    }
    return woke;
}

/* Allocate the record and one entry per destination (tx->dests filled, n > 0). */
int b1_tx_prepare_raw(void *base, struct b1_tx *tx, uint32_t type, const char *payload,
                      uint32_t len, uint32_t n_handles) {
    uint32_t n = tx->n;
    tx->type = type;
    tx->ts = 0;
    tx->msg = b1_msg_alloc(base, msg_record_size(len, n, n_handles), len, n);
    if (!tx->msg) return -EXFULL;
    struct b1_msg *m = MSG(base, tx->msg);
    m->n_handles = n_handles;
    m->n_dests = n;
    m->type = type;
    m->stager_pid = b1_pid();
    if (len) memcpy(msg_payload(m), payload, len);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t e = b1_entry_alloc(base);
        if (!e) {
            while (i--) b1_entry_free(base, tx->dests[i].entry);
            atomic_store(&m->refs, 1);
            m->n_handles = 0;
            b1_msg_put(base, tx->msg);
            tx->msg = 0;
            return -EXFULL;
        }
        tx->dests[i].entry = e;
        tx->dests[i].state = B1_DEST_PREPARED;
        /* claimed by this process from here on: the reaper frees it if the process dies */
        ENTRY(base, e)->ts = 0;
        ENTRY(base, e)->idx = i;
        ENTRY(base, e)->type = type;
        __atomic_store_n(&ENTRY(base, e)->msg, tx->msg, __ATOMIC_RELEASE);
    }
    struct b1_peer *sender = PEER(base, tx->sender_slot);
    tx->seq = atomic_fetch_add(&sender->tx_seq, 1);
    tx->max_ts = __atomic_load_n(&sender->clock, __ATOMIC_RELAXED); /* best first estimate */
    for (uint32_t i = 0; i < n; i++) {
        struct b1_dest *d = &tx->dests[i];
        struct b1_entry *e = ENTRY(base, d->entry);
        e->ts = 0;
        e->sender = tx->sender_id;
        e->seq = tx->seq;
        e->idx = i;
        e->msg = tx->msg;
        e->type = type;
        e->destination = d->owner_handle;
        e->node = d->node;
        e->node_gen = d->node_gen;
    }
    return 0;
}

int b1_tx_prepare(void *base, struct b1_tx *tx, uint32_t slot, uint64_t id,
                  const uint64_t *dests, uint32_t n, const char *payload, uint32_t len,
                  const uint64_t *handles, uint32_t n_handles, uint32_t flags) {
    struct b1_header *h = HDR(base);
    tx->msg = 0;
    if (n == 0 || n > h->limits.max_dests) return -EINVAL;
    if (len > h->limits.max_payload || n_handles > h->limits.max_msg_handles) return -EMSGSIZE;
    if (slot == 0 || slot > h->limits.max_peers) return -EINVAL;
    struct b1_peer *sender = PEER(base, slot);
    if (__atomic_load_n(&sender->id, __ATOMIC_ACQUIRE) != id) return b1_peer_gone(base, id);
    if (__atomic_load_n(&sender->state, __ATOMIC_ACQUIRE) != B1_PEER_ACTIVE) return -ESHUTDOWN;

    tx->sender_slot = slot;
    tx->sender_id = id;
    tx->n = n;
    uint32_t dead = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t hi = b1_handle_lookup(base, slot, id, dests[i]);
        if (!hi) return -ENXIO;
        struct b1_handle *hd = HANDLE(base, hi);
        struct b1_node *nd = NODE(base, hd->node);
        dead += atomic_load(&hd->dead) != 0;
        tx->dests[i] = (struct b1_dest){.handle = dests[i], .peer_id = nd->owner_id,
                                        .owner_handle = nd->owner_handle, .peer_slot = nd->owner_slot,
                                        .node = hd->node, .node_gen = hd->node_gen};
    }
    if ((flags & B1_SEND_UNREACHABLE_ERROR) && dead == n) return -EHOSTUNREACH;
    /* quotas of a multicast, read without the locks: a refusal found here touches nothing,
     * not even a clock; the stage re-checks under each lock (a race there unwinds the
     * blocks).  A unicast's stage checks before it changes anything. */
    for (uint32_t i = 0; i < n && n > 1; i++) {
        struct b1_peer *p = PEER(base, tx->dests[i].peer_slot);
        if (__atomic_load_n(&p->n_messages, __ATOMIC_RELAXED) + 1 > p->quota_messages ||
            __atomic_load_n(&p->n_bytes, __ATOMIC_RELAXED) + len > p->quota_bytes)
            return -EDQUOT;
    }
    int r = b1_tx_prepare_raw(base, tx, B1_MSG_DATA, payload, len, n_handles);
    if (!r && n_handles) {
        r = b1_tx_register_handles(base, tx, handles, n_handles);
        if (r) {
            for (uint32_t i = 0; i < n; i++) b1_entry_free(base, tx->dests[i].entry);
            struct b1_msg *m = MSG(base, tx->msg);
            m->n_handles = 0;
            atomic_store(&m->refs, 1);
            b1_msg_put(base, tx->msg);
            tx->msg = 0;
        }
    }
    return r;
}

int b1_tx_stage(void *base, struct b1_tx *tx, uint32_t i) {
    struct b1_header *h = HDR(base);
    if (i >= tx->n || tx->dests[i].state != B1_DEST_PREPARED || tx->ts) return -EINVAL;
    struct b1_dest *d = &tx->dests[i];
    struct b1_peer *p = PEER(base, d->peer_slot);
    struct b1_entry *e = ENTRY(base, d->entry);
    int r = b1_lock(p);
    if (r) return r;
    if (p->id != d->peer_id || p->state != B1_PEER_ACTIVE) {
        b1_unlock(p);
        drop_dest(base, tx, d, i); /* the peer is gone: its nodes with it */
        return 0;
    }
    if (tx->type == B1_MSG_DATA) {
        uint32_t len = MSG(base, tx->msg)->len;
        if (p->n_messages + 1 > p->quota_messages || p->n_bytes + len > p->quota_bytes) {
            b1_unlock(p);
            return -EDQUOT;
        }
        p->n_messages++;
        p->n_bytes += len;
    }
    uint64_t t = b1_sync_clock(p, tx->max_ts);
    int woke = 0;
    uint32_t inject = h->limits.inject;
    if (stages_block(base)) {
        e->ts = t + 1;
        woke = b1_queue_insert_locked(base, p, d->entry);
        B1_KILL_POINT(B1_KILL_LOCKED);
    }
    tx->max_ts = t;
    b1_unlock(p);
    if (woke) b1_wake(p);
    d->state = B1_DEST_STAGED;
    B1_KILL_POINT(B1_KILL_STAGE);
    if (inject) inject_pause(base);
    return 0;
}

/* Stamp the transaction under its sender's lock; `check` (if any) runs under that lock
 * with tx->ts set and may refuse the stamp. */
int b1_tx_stamp_as(void *base, struct b1_tx *tx, int allow_disconnecting,
                   int (*check)(void *, struct b1_tx *, void *), void *arg) {
    if (tx->ts) return -EINVAL;
    for (uint32_t i = 0; i < tx->n; i++)
        if (tx->dests[i].state == B1_DEST_PREPARED) return -EINVAL;
    struct b1_peer *p = PEER(base, tx->sender_slot);
    int r = b1_lock(p);
    if (r) return r;
    int ok = p->state == B1_PEER_ACTIVE || (allow_disconnecting && p->state == B1_PEER_DISCONNECTING);
    if (p->id != tx->sender_id || !ok) {
        b1_unlock(p);
        return -ESHUTDOWN;
    }
    uint64_t ts = (p->clock > tx->max_ts ? p->clock : tx->max_ts) + 2;
    tx->ts = ts;
    if (check && (r = check(base, tx, arg))) {
        tx->ts = 0;
        b1_unlock(p);
        return r;
    }
    p->clock = ts;
    if (tx->msg) MSG(base, tx->msg)->ts = ts;
    b1_unlock(p);
    B1_KILL_POINT(B1_KILL_STAMP);
    return 0;
}

int b1_tx_stamp(void *base, struct b1_tx *tx) { return b1_tx_stamp_as(base, tx, 0, NULL, NULL); }

int b1_tx_sync(void *base, struct b1_tx *tx, uint32_t i) {
    if (i >= tx->n || !tx->ts) return -EINVAL;
    struct b1_dest *d = &tx->dests[i];
    if (d->state == B1_DEST_DROPPED) return 0;
    if (d->state != B1_DEST_STAGED) return -EINVAL;
    if (HDR(base)->limits.inject != B1_INJECT_NO_SYNC) {
        struct b1_peer *p = PEER(base, d->peer_slot);
        int r = b1_lock(p);
        if (r) return r;
        if (p->id == d->peer_id) b1_sync_clock(p, tx->ts);
        b1_unlock(p);
    }
    d->state = B1_DEST_SYNCED;
    B1_KILL_POINT(B1_KILL_SYNC);
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
    int r = b1_lock(p);
    if (r) return r;
    if (p->id != d->peer_id || p->state != B1_PEER_ACTIVE) {
        /* the peer left since staging: take the copy back out and drop it */
        int woke = unstage_locked(base, tx, p, d);
        b1_unlock(p);
        if (woke) b1_wake(p);
        drop_dest(base, tx, d, i);
        return 0;
    }
    uint32_t inject = h->limits.inject;
    if (inject != B1_INJECT_NO_SYNC) b1_sync_clock(p, tx->ts); /* unicast: the sync round */
    /* the block takes the timestamp */
    uint64_t ts = inject == B1_INJECT_FIFO ? 2 * ++p->fifo_counter : tx->ts;
    int woke;
    if (stages_block(base)) {
        woke = b1_queue_rekey_locked(base, p, d->entry, ts);
    } else {
        e->ts = ts;
        woke = b1_queue_insert_locked(base, p, d->entry);
    }
    b1_unlock(p);
    if (woke) b1_wake(p);
    d->state = B1_DEST_COMMITTED;
    B1_KILL_POINT(B1_KILL_COMMIT);
    if (inject) inject_pause(base);
    return 0;
}

/* Undo a transaction that has not been committed anywhere. */
void b1_tx_abort(void *base, struct b1_tx *tx) {
    if (!tx->msg) return;
    for (uint32_t i = 0; i < tx->n; i++) {
        struct b1_dest *d = &tx->dests[i];
        if (d->state == B1_DEST_STAGED || d->state == B1_DEST_SYNCED) {
            struct b1_peer *p = PEER(base, d->peer_slot);
            int woke = 0;
            if (b1_lock(p) == 0) {
                woke = unstage_locked(base, tx, p, d);
                b1_unlock(p);
            }
            if (woke) b1_wake(p);
            drop_dest(base, tx, d, i);
        } else if (d->state == B1_DEST_PREPARED) {
            drop_dest(base, tx, d, i);
        }
    }
}

/* Run a prepared transaction to the end: stage, stamp, sync, commit. */
int b1_tx_run(void *base, struct b1_tx *tx) {
    int r = 0;
    for (uint32_t i = 0; i < tx->n && !r; i++) r = b1_tx_stage(base, tx, i);
    if (!r) r = b1_tx_stamp(base, tx);
    if (r) {
        b1_tx_abort(base, tx);
        return r;
    }
    if (tx->n > 1) /* a single destination is synced inside its commit */
        for (uint32_t i = 0; i < tx->n; i++) b1_tx_sync(base, tx, i);
    for (uint32_t i = 0; i < tx->n; i++) b1_tx_commit(base, tx, i);
    return 0;
}

int64_t b1_send(void *base, uint32_t slot, uint64_t id, const uint64_t *dests, uint32_t n,
                const char *payload, uint32_t len, const uint64_t *handles,
                uint32_t n_handles, uint32_t flags, uint64_t *seq) {
    if (n == 0 || n > HDR(base)->limits.max_dests) return -EINVAL;
    /* small multicasts on the stack, large ones on the heap (threads have small stacks) */
    struct b1_dest small[16], *ds = n <= 16 ? small : malloc(n * sizeof *ds);
    if (!ds) return -ENOMEM;
    struct b1_tx tx = {.dests = ds};
    int r = b1_tx_prepare(base, &tx, slot, id, dests, n, payload, len, handles, n_handles, flags);
    if (!r) r = b1_tx_run(base, &tx);
    if (ds != small) free(ds);
    if (r) return r;
    struct b1_peer *sender = PEER(base, slot);
    if (__atomic_load_n(&sender->id, __ATOMIC_RELAXED) == id) /* not a new peer of the slot */
        atomic_fetch_add_explicit(&sender->sent, 1, memory_order_relaxed);
    *seq = tx.seq;
    if (tx.ts > INT64_MAX) { /* only a scribbled clock gets here */
        b1_bad = 1;
        return -EBADMSG;
    }
    return (int64_t)tx.ts;
}

/* ---- receiving ---- */

/* Where a receive puts what it takes: room for `max` infos, payloads and carried handles. */
struct recv_req {
    struct b1_msg_info *infos;
    uint32_t max;
    uint32_t flags;       /* B1_RECV_* */
    char *buf;
    uint64_t buflen;
    uint64_t *handles;    /* room for max_msg_handles */
    uint32_t n_handles;   /* out: how many of them the taken messages carried */
};

#define TAKE_ON_STACK 64

/* Dequeue up to q->max committed front entries under one hold of the lock, then copy them
 * out unlocked (a record is immutable while an entry references it).  Entries dropped at
 * the front (node.c) are consumed and not counted.  -EAGAIN when none is committed. */
static int recv_some(void *base, uint32_t slot, uint64_t id, struct recv_req *q) {
    uint32_t stack[TAKE_ON_STACK], *taken = stack;
    if (q->max > TAKE_ON_STACK && !(taken = malloc(q->max * sizeof *taken))) return -ENOMEM;
    int nocopy = q->flags & B1_RECV_NOCOPY;
    uint32_t max_entries = HDR(base)->limits.max_entries, max_nh = HDR(base)->limits.max_msg_handles;
    int r;
    /* each round takes at least one entry out for good: more rounds than entries is a cycle */
    for (uint32_t rounds = 0;;) {
        if (!b1_step(&rounds, max_entries)) {
            r = -EBADMSG;
            break;
        }
        struct b1_peer *p;
        r = b1_lock_live(base, slot, id, &p);
        if (r) break;
        uint32_t n = 0, delivered = 0, nh = 0, steps = 0;
        uint64_t used = 0;
        int woke = 0;
        r = 0;
        while (n < q->max && b1_step(&steps, max_entries)) {
            uint32_t ei = p->front;
            if (!ei || (ENTRY(base, ei)->ts & 1)) break;
            struct b1_entry *e = ENTRY(base, ei);
            struct b1_msg *m = MSG(base, e->msg);
            if (b1_bad || e->type > B1_MSG_NODE_RELEASE || !b1_msg_ok(base, e->msg, e->idx)) {
                r = -EBADMSG; /* a scribbled queue: leave it as it is */
                break;
            }
            int copied = !nocopy || e->type != B1_MSG_DATA;
            if ((copied && used + m->len > q->buflen) || nh + m->n_handles > max_nh) {
                if (!n) r = -EMSGSIZE; /* only a buffer smaller than max_payload */
                break;
            }
            woke |= b1_queue_remove_locked(base, p, ei);
            if (b1_bad || p->front == ei) { /* still linked: a cycle in a scribbled tree */
                b1_bad = 1;
                r = -EBADMSG;
                break;
            }
            int deliver = 1;
            if (e->type == B1_MSG_DATA) {
                deliver = !b1_data_dropped_locked(base, e);
                if (!deliver || copied) { /* a slice keeps its quota until it is given back */
                    p->n_messages--;
                    p->n_bytes -= m->len;
                }
            } else if (e->type == B1_MSG_NODE_DESTROY) {
                b1_destroy_delivered(base, p, e);
            } else {
                deliver = b1_release_wanted_locked(base, p, e);
            }
            taken[n++] = ei;
            if (deliver) {
                struct b1_msg_info *info = &q->infos[delivered++];
                info->ts = e->ts;
                info->sender = e->sender;
                info->seq = e->seq;
                info->destination = e->destination;
                info->type = e->type;
                if (copied) {
                    used += m->len;
                    info->slice = 0;
                } else { /* a slice: the entry moves to the held list, its token */
                    info->slice = ei;
                    e->ts = B1_TS_HELD;
                    e->left = 0;
                    e->right = p->held;
                    if (p->held) ENTRY(base, p->held)->left = ei;
                    p->held = ei;
                }
                nh += m->n_handles;
            } else {
                e->ts = 1; /* consumed, not delivered (the entry is ours now) */
            }
            if (e->ts != B1_TS_HELD) b1_entry_claim(e); /* a slice is its peer's */
        }
        p->received += delivered;
        b1_unlock(p);
        if (woke) b1_wake(p);
        if (n) B1_KILL_POINT(B1_KILL_RECV);
        used = nh = 0;
        uint32_t k = 0;
        for (uint32_t i = 0; i < n; i++) {
            struct b1_entry *e = ENTRY(base, taken[i]);
            struct b1_msg *m = MSG(base, e->msg);
            int keep = e->ts == B1_TS_HELD;
            if (e->ts != 1) {
                struct b1_msg_info *info = &q->infos[k++];
                info->len = m->len;
                info->n_handles = m->n_handles;
                if (keep) {
                    info->offset = (uint64_t)(msg_payload(m) - (char *)base);
                } else {
                    info->offset = used;
                    memcpy(q->buf + used, msg_payload(m), m->len);
                    used += m->len;
                }
                if (m->n_handles) b1_resolve_handles(base, e, m, q->handles + nh);
                nh += m->n_handles;
            } else if ((e->type & ~B1_ENTRY_RECEIVING) == B1_MSG_DATA && m->n_handles) {
                b1_tx_unregister_handles(base, m, e->idx);
            }
            if (!keep) {
                b1_msg_put(base, e->msg);
                b1_entry_free(base, taken[i]);
            }
        }
        q->n_handles = nh;
        if (k || r) {
            r = k ? (int)k : r;
            break;
        }
        if (!n) {
            r = -EAGAIN;
            break;
        }
    }
    if (taken != stack) free(taken);
    return r;
}

int b1_recv(void *base, uint32_t slot, uint64_t id, struct b1_msg_info *info,
            char *buf, uint32_t buflen, uint64_t *handles_out) {
    struct recv_req q = {.infos = info, .max = 1, .buf = buf, .buflen = buflen, .handles = handles_out};
    int r = recv_some(base, slot, id, &q);
    return r > 0 ? 0 : r;
}

static inline int front_ready(struct b1_peer *p) {
    uint64_t ts = atomic_load_explicit(&p->front_ts, memory_order_acquire);
    return ts && !(ts & 1);
}

#define REAP_CHECK_NS 200000000 /* a block at the front this long: is its sender alive? */

/* recv_some, waiting while nothing is committed at the front: > 0 taken, or -errno */
static int recv_wait(void *base, uint32_t slot, uint64_t id, struct recv_req *q, int64_t timeout_ns) {
    uint64_t deadline = timeout_ns > 0 ? b1_now_ns() + (uint64_t)timeout_ns : 0;
    uint32_t spin_ns = HDR(base)->limits.spin_ns;
    struct b1_peer *p = PEER(base, slot);
    for (;;) {
        int r = recv_some(base, slot, id, q);
        if (r != -EAGAIN || timeout_ns == 0) return r;
        /* spin briefly: a futex wake across CPUs costs tens of microseconds.  After a
         * short pure spin, yield instead: when processes outnumber CPUs the sender we wait
         * for may need this one (on an idle CPU sched_yield returns at once). */
        uint64_t now = b1_now_ns(), spin_end = now + spin_ns;
        if (deadline && spin_end > deadline) spin_end = deadline;
        for (uint32_t k = 0; !front_ready(p); k++) {
            if (k < 512) {
                b1_relax();
                if ((k & 63) == 63 && b1_now_ns() >= spin_end) break;
            } else {
                sched_yield();
                if (b1_now_ns() >= spin_end) break;
            }
        }
        if (front_ready(p)) continue;
        int64_t left = REAP_CHECK_NS;
        if (deadline) {
            now = b1_now_ns();
            if (now >= deadline) return -ETIMEDOUT;
            if ((int64_t)(deadline - now) < left) left = (int64_t)(deadline - now);
        }
        atomic_fetch_add(&p->waiters, 1); /* register first: see b1_wake */
        uint32_t seen = atomic_load(&p->wake_seq);
        if (!front_ready(p) && p->id == id && p->state == B1_PEER_ACTIVE)
            r = b1_futex_wait(&p->wake_seq, seen, left);
        else
            r = 0;
        atomic_fetch_sub(&p->waiters, 1);
        if (r == -EINTR) {
            /* the caller runs its signal handlers and calls again with the time left */
            uint64_t t = b1_now_ns();
            q->infos[0].left_ns = deadline ? (deadline > t ? deadline - t : 0) : 0;
            return r;
        }
        if (r == -ETIMEDOUT) {
            /* a block that outlives its sender would hold the queue forever */
            uint64_t fts = atomic_load(&p->front_ts);
            if (fts & 1) b1_queue_reap(base, slot);
            if (deadline && b1_now_ns() >= deadline) {
                r = recv_some(base, slot, id, q);
                return r == -EAGAIN ? -ETIMEDOUT : r;
            }
        }
    }
}

int b1_recv_wait(void *base, uint32_t slot, uint64_t id, struct b1_msg_info *info,
                 char *buf, uint32_t buflen, uint64_t *handles_out, int64_t timeout_ns) {
    struct recv_req q = {.infos = info, .max = 1, .buf = buf, .buflen = buflen, .handles = handles_out};
    int r = recv_wait(base, slot, id, &q, timeout_ns);
    return r > 0 ? 0 : r;
}

/* A slice is an entry on its peer's held list, still referencing its record, its data
 * message still counted against the peer's quota.  A peer flushed since (disconnected)
 * freed its slices itself: giving one back then does nothing. */
int b1_slice_release(void *base, uint32_t slot, uint64_t id, uint64_t slice) {
    struct b1_header *h = HDR(base);
    if (!slice || slice > h->limits.max_entries) return -EINVAL;
    uint32_t ei = (uint32_t)slice;
    struct b1_entry *e = ENTRY(base, ei);
    struct b1_peer *p = b1_peer_at_slot(base, slot);
    if (!p) return -EINVAL;
    int r = b1_lock(p);
    if (r) return r;
    if (p->id != id || (p->state != B1_PEER_ACTIVE && p->state != B1_PEER_DISCONNECTING)) {
        b1_unlock(p);
        return 0;
    }
    /* on this peer's list: marked, and linked from its neighbour or the head */
    int linked = e->ts == B1_TS_HELD && (e->left ? ENTRY(base, e->left)->right == ei : p->held == ei);
    if (!linked || b1_bad || !b1_msg_ok(base, e->msg, e->idx)) {
        b1_unlock(p);
        return -EINVAL;
    }
    if (e->left)
        ENTRY(base, e->left)->right = e->right;
    else
        p->held = e->right;
    if (e->right) ENTRY(base, e->right)->left = e->left;
    p->n_messages--;
    p->n_bytes -= MSG(base, e->msg)->len;
    b1_unlock(p);
    b1_entry_claim(e);
    e->ts = 0;
    b1_msg_put(base, e->msg);
    b1_entry_free(base, ei);
    return 0;
}

/* ---- the hot calls over a per-thread frame (see struct b1_frame) ---- */

int64_t b1_frame_send(struct b1_frame *f, uint32_t slot, uint64_t id, uint64_t dest, uint32_t n,
                      const char *payload, uint32_t len, uint32_t n_handles, uint32_t flags) {
    return b1_send(f->base, slot, id, n ? f->dests : &dest, n ? n : 1, payload, len,
                   f->handles, n_handles, flags, &f->seq);
}

int b1_frame_recv(struct b1_frame *f, uint32_t slot, uint64_t id, int64_t timeout_ns) {
    return b1_recv_wait(f->base, slot, id, &f->info, f->buf, f->buflen, f->handles, timeout_ns);
}

int b1_frame_send_many(struct b1_frame *f, uint32_t slot, uint64_t id, uint64_t dest, uint32_t n,
                       const char *data, const uint32_t *lens, uint32_t count,
                       uint32_t n_handles, uint32_t flags) {
    uint64_t off = 0;
    for (uint32_t i = 0; i < count; i++) {
        int64_t r = b1_frame_send(f, slot, id, dest, n, data + off, lens[i], n_handles, flags);
        if (r < 0) return i ? (int)i : (int)r;
        off += lens[i];
    }
    return (int)count;
}

int b1_frame_recv_many(struct b1_frame *f, uint32_t slot, uint64_t id, uint32_t max,
                       int64_t timeout_ns, uint32_t flags) {
    if (!max || max > f->infos_cap) return -EINVAL;
    struct recv_req q = {.infos = f->infos, .max = max, .flags = flags, .buf = f->buf,
                         .buflen = f->buflen, .handles = f->handles};
    int r = recv_wait(f->base, slot, id, &q, timeout_ns);
    f->n_handles = r > 0 ? q.n_handles : 0;
    return r;
}
