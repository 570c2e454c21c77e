/*
 * recv.c -- receiving: the front of a queue (or, for one node, the first of its entries)
 * taken out under one lock hold, copied out (or kept as a zero-copy slice) without it;
 * waiting; giving slices back.
 *
 * Invariants:
 *   - Only committed (even) entries are taken, each exactly once: the front, in key order;
 *     for one node, its first entry before the first block, the entries around it left in
 *     their order.  It leaves the queue under the lock, is claimed by this process
 *     (layout.h) before the lock goes, and is freed -- or moved to the peer's held list as
 *     a slice -- after.
 *   - An entry dropped at the front (a data message after its node's destruction, a
 *     withdrawn NODE_RELEASE) is consumed and not counted; its handle registrations are
 *     undone.
 *   - A slice keeps its record and the receiver's quota charged until it is given back,
 *     or until the peer is flushed (peer.c), whichever is first.
 *   - A waiter registers in `waiters` before it reads wake_seq (queue.c): no wake is lost.
 *     A node waiter registers in `node_waiters` too, and looks once more after that (under
 *     the lock only when the front is committed: an empty queue or an uncommitted front
 *     holds nothing it may take), so every change of the queue after its look wakes it.
 *   - A data message's descriptors are copied from the peer's store (fds.c) in the hold
 *     that takes its entry, before the entry leaves the queue: into the caller's room when
 *     it is delivered, none when it is dropped; its datagrams, orphans from then on, are
 *     popped from the store when they reach a socket's head.  A process without the store
 *     takes no message that carries descriptors (-EPERM), so none is delivered without them.
 *   - A message whose descriptors are no longer in the store (closed by its last holder
 *     before the receive) is consumed undelivered, alone in its call, which fails with
 *     -ENOLINK: never delivered without them, never left to block the queue.
 *   - A message whose descriptors cannot all be installed (the process out of descriptor
 *     numbers) is not taken: it and the messages after it stay queued, unclaimed, and the
 *     call returns those before it, or fails with -EMFILE when it is the first.  The take
 *     installed copies only, closed again, so the segment is as it was.
 *
 * Lock rules: the receiving peer's lock for the dequeue, released before anything is
 * copied; carried handles are resolved under their owners' locks after it (message.c);
 * the notices that owes are sent before the call returns (node.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include "alloc.h"
#include "fds.h"
#include "handle.h"
#include "kill.h"
#include "message.h"
#include "node.h"
#include "queue.h"
#include "reap.h"
#include "slot.h"


/* Where a receive puts what it takes: room for `max` infos, payloads and carried handles. */
struct recv_req {
    struct b1_msg_info *infos;
    uint32_t max;
    uint32_t flags;       /* B1_RECV_* */
    char *buf;
    uint64_t buflen;
    uint64_t *handles;    /* room for max_msg_handles */
    uint32_t n_handles;   /* out: how many of them the taken messages carried */
    int32_t *fds;         /* room for B1_MAX_FDS descriptors; NULL: close them */
    uint64_t node;        /* 0: the front; else only entries for this handle id (max 1) */
    uint64_t watch;       /* with node: a NODE_DESTROY for this handle id ends it, -ECONNRESET */
};

/* The entry a receive takes next under p's lock: the front if committed; for q->node, the
 * first committed entry addressed to it, looked for before the first uncommitted one (the
 * order recv would meet them in).  0 when none; *r = -ECONNRESET when a NODE_DESTROY of
 * q->watch comes first. */
static uint32_t next_entry_locked(void *base, struct b1_peer *p, const struct recv_req *q, int *r) {
    uint32_t ei = p->front, steps = 0, max = LIM(base).max_entries;
    if (!q->node) return ei && !(ENTRY(base, ei)->ts & 1) ? ei : 0;
    for (; ei && b1_step(&steps, max); ei = b1_queue_next_locked(base, p, ei)) {
        struct b1_entry *e = ENTRY(base, ei);
        if (e->ts & 1) return 0;
        if (e->destination == q->node) return ei;
        if (q->watch && e->destination == q->watch && e->type == B1_MSG_NODE_DESTROY) {
            *r = -ECONNRESET;
            return 0;
        }
    }
    return 0;
}

#define TAKE_ON_STACK 64

/* What a receive took out of the queue, as validated under the lock: only this copy is
 * used after the lock goes (a scribbler may change the record meanwhile). */
struct taken {
    struct b1_entry key; /* ts, sender, seq, idx as they were in the queue */
    struct b1_shape shape;
    uint32_t e, unit;
    uint32_t type;
    uint32_t delivered; /* 0: consumed, not delivered */
    uint32_t held;      /* left as a slice on the peer's held list */
};

/* Dequeue up to q->max committed front entries under one hold of the lock, then copy them
 * out unlocked (a record is immutable while an entry references it).  Entries dropped at
 * the front (message.c, node.c) are consumed and not counted.  -EAGAIN when none is committed. */
static int recv_some(void *base, uint32_t slot, uint64_t id, struct recv_req *q) {
    struct taken stack[TAKE_ON_STACK], *taken = stack;
    if (q->max > TAKE_ON_STACK && !(taken = malloc(q->max * sizeof *taken))) return -ENOMEM;
    int nocopy = q->flags & B1_RECV_NOCOPY;
    B1_NOTICES(nt);
    uint32_t max_entries = LIM(base).max_entries, max_nh = LIM(base).max_msg_handles;
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
        uint32_t n = 0, delivered = 0, nh = 0, steps = 0, nfd = 0;
        struct b1_fds_store st;
        int32_t n_socks = -1; /* the store, looked up at the first message that carries descriptors */
        uint64_t used = 0;
        int woke = 0;
        r = 0;
        while (n < q->max && b1_step(&steps, max_entries)) {
            uint32_t ei = next_entry_locked(base, p, q, &r);
            if (!ei) break;
            struct b1_entry *e = ENTRY(base, ei);
            struct taken *t = &taken[n];
            *t = (struct taken){.key = {.ts = e->ts, .sender = e->sender, .seq = e->seq, .idx = e->idx},
                                .e = ei, .unit = e->msg};
            uint32_t type = e->type;
            if (b1_bad || type > B1_MSG_NODE_RELEASE || !b1_msg_shape(base, t->unit, t->key.idx, &t->shape)) {
                r = -EBADMSG; /* a scribbled queue: leave it as it is */
                break;
            }
            int copied = !nocopy || type != B1_MSG_DATA;
            if ((copied && used + t->shape.len > q->buflen) || nh + t->shape.n_handles > max_nh ||
                (q->fds && nfd + t->shape.n_fds > B1_MAX_FDS)) {
                if (!n) r = -EMSGSIZE; /* only a buffer smaller than max_payload */
                break;
            }
            if (type == B1_MSG_DATA && t->shape.n_fds) {
                if (n_socks < 0) n_socks = (int32_t)b1_fds_store(base, slot, id, &st);
                if (!n_socks) {
                    if (!n) r = -EPERM;
                    break;
                }
            }
            int deliver = type != B1_MSG_DATA || !b1_data_dropped_locked(base, e);
            int got = 0, lost = 0;
            if (type == B1_MSG_DATA && t->shape.n_fds && deliver && q->fds) {
                got = b1_fds_take_locked(p, &st, &t->key, t->shape.n_fds, q->fds + nfd);
                if (got == -ENOLINK && !n) { /* its descriptors are gone: dropped, and said so */
                    got = deliver = 0;
                    lost = 1;
                } else if (got < 0) { /* out of descriptors (or lost, after others): it stays */
                    if (!n) r = got;
                    break;
                }
            }
            woke |= b1_queue_remove_locked(base, p, ei);
            if (b1_bad || p->front == ei) { /* still linked: a cycle in a scribbled tree */
                b1_bad = 1;
                r = -EBADMSG;
                break;
            }
            if (type == B1_MSG_DATA) {
                if (!deliver || copied) /* a slice keeps its quota until it is given back */
                    b1_uncharge_locked(p, t->key.sender, t->shape.len, t->shape.n_fds);
                else
                    b1_uncharge_fds_locked(p, t->key.sender, t->shape.n_fds); /* they leave with this take */
            } else if (type == B1_MSG_NODE_DESTROY) {
                b1_destroy_delivered(base, p, e);
            } else {
                deliver = b1_release_wanted_locked(base, p, e);
            }
            n++;
            t->delivered = deliver;
            if (deliver) {
                struct b1_msg_info *info = &q->infos[delivered++];
                info->ts = e->ts;
                info->sender = e->sender;
                info->seq = e->seq;
                info->destination = e->destination;
                info->type = type;
                info->len = t->shape.len;
                info->n_handles = t->shape.n_handles;
                info->n_fds = (uint32_t)got;
                info->fds_at = nfd;
                struct b1_msg *m = MSG(base, t->unit);
                /* a request names its reply capability: it carries a handle */
                info->flags = type == B1_MSG_DATA && t->shape.n_handles ? m->flags & B1_SEND_REQUEST : 0;
                info->tag = type == B1_MSG_DATA ? m->tag : 0;
                nfd += (uint32_t)got;
                if (copied) {
                    used += t->shape.len;
                    info->slice = 0;
                } else { /* a slice: the entry moves to the held list, its token */
                    info->slice = ei;
                    t->held = 1;
                    e->ts = B1_TS_HELD;
                    e->queue = (uint16_t)slot;
                    e->left = 0;
                    e->right = p->held;
                    if (p->held) ENTRY(base, p->held)->left = ei;
                    p->held = ei;
                }
                nh += t->shape.n_handles;
            }
            t->type = type;
            if (!t->held) b1_entry_claim(e); /* a slice is its peer's */
            if (type == B1_MSG_DATA && t->shape.n_fds) B1_KILL_POINT(B1_KILL_FDS_TAKEN);
            if (lost) {
                r = -ENOLINK;
                break;
            }
        }
        if (n_socks > 0) b1_fds_sweep_locked(base, p, &st);
        p->received += delivered;
        b1_unlock(p);
        if (woke) b1_wake(p);
        if (n) B1_KILL_POINT(B1_KILL_RECV);
        used = nh = 0;
        uint32_t k = 0;
        for (uint32_t i = 0; i < n; i++) {
            struct taken *t = &taken[i];
            struct b1_msg *m = MSG(base, t->unit);
            if (t->delivered) {
                struct b1_msg_info *info = &q->infos[k++];
                if (t->held) {
                    info->offset = (uint64_t)(msg_payload(m) - (char *)base);
                } else {
                    info->offset = used;
                    memcpy(q->buf + used, msg_payload(m), t->shape.len);
                    used += t->shape.len;
                }
                if (t->shape.n_handles) b1_resolve_handles(base, &t->key, m, &t->shape, q->handles + nh, &nt);
                nh += t->shape.n_handles;
            } else if (t->type == B1_MSG_DATA && t->shape.n_handles) {
                b1_tx_unregister_handles(base, m, &t->shape, t->key.idx, &nt);
            }
            if (!t->held) b1_entry_free(base, t->e);
        }
        q->n_handles = nh;
        b1_notices_send(base, &nt);
        if (k || r) {
            r = k ? (int)k : r;
            break;
        }
        if (!n) {
            if (!r) r = -EAGAIN;
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

/* Has the queue changed so that q may find an entry now?  For the front: it is committed.
 * For one node: the front's timestamp moved since `seen` and the front is committed --
 * behind an uncommitted front nothing is taken (next_entry_locked), so a transaction's
 * staging is not looked at under the lock its sender needs to commit; what lies behind
 * the front is found by the wake every change sends a node waiter. */
static inline int may_take(struct b1_peer *p, const struct recv_req *q, uint64_t seen) {
    if (!q->node) return front_ready(p);
    uint64_t ts = atomic_load_explicit(&p->front_ts, memory_order_acquire);
    return ts != seen && ts && !(ts & 1);
}

/* The handle `watch` of peer (slot, id) is known dead (its NODE_DESTROY was read)? */
static int watch_dead(void *base, uint32_t slot, uint64_t id, uint64_t watch) {
    uint32_t hi = watch ? b1_handle_lookup(base, slot, id, watch) : 0;
    return hi && atomic_load(&HANDLE(base, hi)->dead);
}

/* recv_some, waiting while nothing is committed at the front (for one node: while none of
 * its entries is): > 0 taken, or -errno.  A node waiter registers in node_waiters as well
 * and looks once more after registering, so every change after that look wakes it. */
static int recv_wait(void *base, uint32_t slot, uint64_t id, struct recv_req *q, int64_t timeout_ns) {
    uint64_t deadline = timeout_ns > 0 ? b1_now_ns() + (uint64_t)timeout_ns : 0;
    uint32_t spin_ns = LIM(base).spin_ns;
    struct b1_peer *p = PEER(base, slot);
    for (;;) {
        if (q->watch && watch_dead(base, slot, id, q->watch)) return -ECONNRESET;
        uint64_t seen_front = atomic_load_explicit(&p->front_ts, memory_order_acquire);
        int r = recv_some(base, slot, id, q);
        if (r != -EAGAIN || timeout_ns == 0) return r;
        /* spin briefly: a futex wake across CPUs costs tens of microseconds.  After a
         * short pure spin, yield instead: when processes outnumber CPUs the sender we wait
         * for may need this one (on an idle CPU sched_yield returns at once). */
        uint64_t now = b1_now_ns(), spin_end = now + spin_ns;
        if (deadline && spin_end > deadline) spin_end = deadline;
        for (uint32_t k = 0; !may_take(p, q, seen_front); k++) {
            if (k < 512) {
                b1_relax();
                if ((k & 63) == 63 && b1_now_ns() >= spin_end) break;
            } else {
                sched_yield();
                if (b1_now_ns() >= spin_end) break;
            }
        }
        if (may_take(p, q, seen_front)) continue;
        int64_t left = REAP_CHECK_NS;
        if (deadline) {
            now = b1_now_ns();
            if (now >= deadline) return -ETIMEDOUT;
            if ((int64_t)(deadline - now) < left) left = (int64_t)(deadline - now);
        }
        b1_sleeper_register(p); /* register first: see b1_wake */
        if (q->node) atomic_fetch_add(&p->node_waiters, 1);
        uint32_t seen = atomic_load(&p->wake_seq);
        b1_sleeper_looked(p);
        if (q->node) {
            /* what changed behind a committed front before the registration, looked for
             * under the lock; a queue empty or blocked at its front now holds nothing to
             * take, and every change after the registration wakes (no lock taken then) */
            seen_front = atomic_load_explicit(&p->front_ts, memory_order_seq_cst);
            if (seen_front && !(seen_front & 1)) r = recv_some(base, slot, id, q);
            if (r == -EAGAIN && q->watch && watch_dead(base, slot, id, q->watch)) r = -ECONNRESET;
        }
        if (r == -EAGAIN && !may_take(p, q, seen_front) && p->id == id && p->state == B1_PEER_ACTIVE)
            r = b1_futex_wait(&p->wake_seq, seen, left);
        else if (r == -EAGAIN)
            r = 0;
        if (q->node) atomic_fetch_sub(&p->node_waiters, 1);
        b1_sleeper_unregister(p);
        if (r > 0 || (r < 0 && r != -EINTR && r != -ETIMEDOUT && r != -EAGAIN)) return r;
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
    if (!slice || slice > LIM(base).max_entries) return -EINVAL;
    uint32_t ei = (uint32_t)slice;
    struct b1_entry *e = ENTRY(base, ei);
    struct b1_peer *p = b1_peer_at_slot(base, slot);
    if (!p) return -EINVAL;
    int r = b1_lock(base, p);
    if (r) return r;
    if (p->id != id || (p->state != B1_PEER_ACTIVE && p->state != B1_PEER_DISCONNECTING)) {
        b1_unlock(p);
        return 0;
    }
    /* on this peer's list: marked, not claimed (a claimed entry's links hold its owner's
     * token), and linked from its neighbour or the head; its left link read once */
    uint32_t left = e->left;
    int linked = e->ts == B1_TS_HELD && !(e->type & B1_ENTRY_RECEIVING) && left <= LIM(base).max_entries &&
                 (left ? ENTRY(base, left)->right == ei : p->held == ei);
    struct b1_shape sh;
    if (!linked || b1_bad || !b1_msg_shape(base, e->msg, e->idx, &sh)) {
        b1_unlock(p);
        return -EINVAL;
    }
    /* claimed before it is unlinked, in one hold: a slice was delivered, so a holder killed
     * in between must leave it to gc (claimed), never to the held list a takeover rebuilds
     * -- or, were it unclaimed, to the queue, which would deliver it again */
    uint32_t right = e->right;
    b1_entry_claim(e);
    if (left)
        ENTRY(base, left)->right = right;
    else
        p->held = right;
    if (right) ENTRY(base, right)->left = left;
    b1_uncharge_locked(p, e->sender, sh.len, 0); /* its descriptors left with its take */
    b1_unlock(p);
    b1_entry_free(base, ei);
    return 0;
}

int b1_frame_recv(struct b1_frame *f, uint32_t slot, uint64_t id, int64_t timeout_ns) {
    struct recv_req q = {.infos = &f->info, .max = 1, .buf = f->buf, .buflen = f->buflen,
                         .handles = f->handles, .fds = f->fds};
    int r = recv_wait(f->base, slot, id, &q, timeout_ns);
    return r > 0 ? 0 : r;
}

int b1_frame_recv_node(struct b1_frame *f, uint32_t slot, uint64_t id, uint64_t node, uint64_t watch,
                       int64_t timeout_ns) {
    if (!node) return -EINVAL;
    struct recv_req q = {.infos = &f->info, .max = 1, .buf = f->buf, .buflen = f->buflen,
                         .handles = f->handles, .fds = f->fds, .node = node, .watch = watch};
    int r = recv_wait(f->base, slot, id, &q, timeout_ns);
    return r > 0 ? 0 : r;
}

int b1_fds_sweep(void *base, uint32_t slot, uint64_t id) {
    struct b1_peer *p;
    struct b1_fds_store st;
    int r;
    if (!b1_fds_store(base, slot, id, &st)) return 0;
    if ((r = b1_lock_live(base, slot, id, &p))) return r;
    b1_fds_sweep_locked(base, p, &st);
    b1_unlock(p);
    return 0;
}

int b1_frame_recv_many(struct b1_frame *f, uint32_t slot, uint64_t id, uint32_t max,
                       int64_t timeout_ns, uint32_t flags) {
    if (!max || max > f->infos_cap) return -EINVAL;
    struct recv_req q = {.infos = f->infos, .max = max, .flags = flags, .buf = f->buf,
                         .buflen = f->buflen, .handles = f->handles, .fds = f->fds};
    int r = recv_wait(f->base, slot, id, &q, timeout_ns);
    f->n_handles = r > 0 ? q.n_handles : 0;
    return r;
}
