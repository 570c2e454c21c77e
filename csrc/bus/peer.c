/*
 * peer.c -- a peer's life: creation, the processes that use it, disconnection, and the
 * reuse of its slot (slot.c keeps the slot itself; reaping dead processes is reap.c).
 *
 * Invariants:
 *   - A peer slot's mutex is initialised once, when the slot is first carved, and never
 *     again: a process holding a stale (slot, id) may lock it at any moment, even after
 *     the slot was reused, so re-initialising it could corrupt a lock in use.  A reuse
 *     takes it like any locker (recovering it from a dead holder) and resets the rest.
 *   - Peer ids come from one counter and are never reused; every check of a (slot, id)
 *     compares the id under the slot's lock, so a stale id reads ESHUTDOWN, never the
 *     slot's new peer.
 *   - A slot is FREE again (on the free-peer stack) only when its peer is DISCONNECTED
 *     and nothing names the slot: no handle of the peer, held or in flight (n_handles),
 *     no node it owned (n_nodes), nothing in its queue.  The last of these to go
 *     reclaims it (b1_peer_reclaim*); b1_peer_new sweeps for any missed when the table
 *     is full.
 *   - A peer is held by the processes recorded in holders[] (each by its pidfs inode and
 *     start time, so a reused pid is not mistaken for the old process, and by its exec
 *     marker, so a holder that execs holds it no more: proc.h).  A peer with no recorded process
 *     was never used and is never reaped; one used by more processes than pids[] holds is
 *     pinned and only disconnected explicitly.
 *   - Disconnecting is: stop accepting (DISCONNECTING), destroy the peer's nodes in one
 *     transaction, flush the queue and the zero-copy slices still held (DISCONNECTED),
 *     drop every handle the peer holds.
 *     Blocks flushed from the queue stay owned by their transactions, which notice the
 *     peer is gone at their next step and free their entries themselves; a block whose
 *     stager died is freed by the flush, as nobody else will.  A NODE_DESTROY flushed
 *     unread counts as read by the owner, so the destroyed node can be freed.
 *
 * Lock rules: the peer's own lock for its state, pids and queue, released before the
 * destruction of its nodes (node.c) and before handles are dropped, which take their
 * owners' locks one at a time.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include "alloc.h"
#include "fds.h"
#include "message.h"
#include "node.h"
#include "peer.h"
#include "queue.h"
#include "slot.h"

/* ---- peers ---- */

/* The slot's peer afresh: everything but the lock (see the invariants), the futex word and
 * its waiters (stale sleepers may be registered), and the counts of what still names the
 * slot (zero: it was reclaimed).  The lock is held. */
static void reset_peer_locked(void *base, struct b1_peer *p, uint32_t quota_messages,
                              uint32_t quota_handles, uint64_t quota_bytes) {
    p->root = p->front = p->back = 0;
    p->clock = 0;
    p->n_bytes = 0;
    p->received = 0;
    p->n_entries = p->n_messages = p->n_fds = 0;
    p->n_chargers = 0;
    memset(p->shares, 0, sizeof p->shares);
    for (int i = 0; i < B1_CHARGERS; i++) atomic_store(&p->share_handles[i], 0); /* as n_handles: 0 */
    atomic_store(&p->front_ts, 0);
    p->lock_recoveries = 0;
    p->fifo_counter = 0;
    p->pinned = 0;
    p->held = 0;
    p->broken = 0;
    p->unverified = 0; /* nothing of the slot's old peer is left to verify (it was reclaimed) */
    atomic_store(&p->disconnector, 0);
    atomic_store(&p->resetter, 0);
    memset(p->holders, 0, sizeof p->holders);
    /* a new store name for the new peer: the old peer's store cannot receive its posts */
    if (getrandom(p->fd_nonce, sizeof p->fd_nonce, 0) != sizeof p->fd_nonce) {
        p->fd_nonce[0] = b1_now_ns();
        p->fd_nonce[1] ^= (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)p;
    }
    atomic_store(&p->tx_seq, 0);
    atomic_store(&p->sent, 0);
    p->quota_messages = quota_messages ? quota_messages : LIM(base).quota_messages;
    p->quota_handles = quota_handles ? quota_handles : LIM(base).quota_handles;
    p->quota_bytes = quota_bytes ? quota_bytes : LIM(base).quota_bytes;
    p->quota_fds = LIM(base).quota_fds;
    atomic_store(&p->fd_pair[0], 0);
    atomic_store(&p->fd_pair[1], 0);
    /* a stale caller compares the id first, the state after: the new id goes first */
    __atomic_store_n(&p->id, atomic_fetch_add(&HDR(base)->next_peer_id, 1), __ATOMIC_SEQ_CST);
    __atomic_store_n(&p->state, B1_PEER_ACTIVE, __ATOMIC_SEQ_CST);
}

/* A never-used slot from the bump pointer, its lock initialised: 0 when all are carved. */
static uint32_t carve_peer(void *base) {
    struct b1_header *h = HDR(base);
    uint32_t cur = atomic_load(&h->peers_bump);
    do {
        if (cur > LIM(base).max_peers) return 0;
    } while (!atomic_compare_exchange_weak(&h->peers_bump, &cur, cur + 1));
    struct b1_peer *p = PEER(base, cur);
    /* cannot fail for a process-shared robust mutex */
    if (b1_robust_mutex_init(&p->lock) || b1_robust_mutex_init(&p->fd_mover)) return 0;
    __atomic_store_n(&p->lock_initialised, 1, __ATOMIC_RELEASE);
    return cur;
}

/* A slot carved by a process killed before it initialised the lock: initialised now and
 * FREE, for the gc of a bus held alone (rebuild.c) to put on the free stack. */
void b1_peer_carve_finish(void *base, uint32_t slot) {
    struct b1_peer *p = PEER(base, slot);
    if (__atomic_load_n(&p->lock_initialised, __ATOMIC_ACQUIRE) || b1_robust_mutex_init(&p->lock) ||
        b1_robust_mutex_init(&p->fd_mover))
        return;
    p->state = B1_PEER_FREE;
    __atomic_store_n(&p->lock_initialised, 1, __ATOMIC_RELEASE);
}

static uint32_t pop_free_peer(void *base) {
    struct b1_header *h = HDR(base);
    return b1_alloc_index(base, &h->free_peers, NULL, LIM(base).max_peers + 1,
                          offsetof(struct b1_peer, next_free), sizeof(struct b1_peer), (char *)PEER(base, 0));
}

int b1_peer_new(void *base, uint32_t quota_messages, uint32_t quota_handles,
                uint64_t quota_bytes, uint32_t *slot, uint64_t *id) {
    for (int round = 0; round < 2; round++) {
        uint32_t s = pop_free_peer(base);
        if (!s) s = carve_peer(base);
        if (!s && round == 0) {
            /* every slot carved and none known free: look for gone peers that became
             * unnamed without anyone noticing (see b1_peer_reclaim), then try again */
            b1_peer_reclaim_all(base);
            continue;
        }
        if (!s) return -ENOSPC;
        struct b1_peer *p = PEER(base, s);
        int r = b1_lock(base, p);
        if (r) return r; /* only a corrupted lock: the slot stays out of the free stack */
        reset_peer_locked(base, p, quota_messages, quota_handles, quota_bytes);
        *slot = s;
        *id = p->id;
        b1_unlock(p);
        return 0;
    }
    return -ENOSPC;
}

static void flush_queue(void *base, struct b1_peer *p);

/* Reclaim every gone peer that can be, finishing what its disconnect left: a queue or
 * held list still linked (a flush whose lock holder died: the takeover rebuilt it), and
 * held references (a disconnector that died, or a transfer that raced with its sweep). */
void b1_peer_reclaim_all(void *base) {
    uint32_t bump = b1_bounded(&HDR(base)->peers_bump, LIM(base).max_peers);
    for (uint32_t s = 1; s < bump; s++) {
        struct b1_peer *p = b1_peer_at_slot(base, s);
        if (!p || __atomic_load_n(&p->state, __ATOMIC_SEQ_CST) != B1_PEER_DISCONNECTED) continue;
        uint64_t id = __atomic_load_n(&p->id, __ATOMIC_SEQ_CST);
        if ((p->root || p->held) && b1_lock(base, p) == 0) {
            if (p->id == id && p->state == B1_PEER_DISCONNECTED)
                flush_queue(base, p); /* unlocks */
            else
                b1_unlock(p);
        }
        if (atomic_load(&p->n_handles)) b1_drop_peer_handles(base, s, id);
        b1_peer_reclaim(base, s);
    }
}

/* Holder i of p, read from the segment once into *h: is it a live process?  (0 for none.) */
static int holder_at(struct b1_peer *p, int i, struct b1_holder *h) {
    memcpy(h, &p->holders[i], sizeof *h);
    return h->pid && b1_holder_alive(h);
}

int b1_peer_attach(void *base, uint32_t slot, uint64_t id, int32_t pid) {
    struct b1_holder me, h;
    b1_holder_of(pid, &me); /* before the lock: it reads /proc and may make the marker */
    if (!me.pid) return -ESRCH;
    struct b1_peer *p;
    int r = b1_lock_live(base, slot, id, &p);
    if (r) return r;
    int own = -1, free_slot = -1;
    for (int i = 0; i < B1_PEER_PIDS; i++) {
        int live = holder_at(p, i, &h);
        if (live && h.pid == pid && h.ino == me.ino && h.marker_fd == me.marker_fd && h.marker_ino == me.marker_ino) {
            b1_unlock(p);
            return 0; /* recorded as it is */
        }
        if (h.pid == pid)
            own = i; /* its record, stale (another marker) or of the pid's dead process */
        else if (!live && free_slot < 0)
            free_slot = i;
    }
    int at = own >= 0 ? own : free_slot;
    if (at >= 0) {
        /* the pid last: a kill between the stores leaves no record, never a torn one */
        struct b1_holder *rec = &p->holders[at];
        __atomic_store_n(&rec->pid, 0, __ATOMIC_RELAXED);
        rec->marker_fd = me.marker_fd;
        rec->start = me.start;
        rec->ino = me.ino;
        rec->marker_ino = me.marker_ino;
        __atomic_store_n(&rec->pid, me.pid, __ATOMIC_RELEASE);
        atomic_fetch_add(&HDR(base)->holders_epoch, 1); /* a process to watch (watch.py) */
    } else {
        p->pinned = 1;
    }
    b1_unlock(p);
    return 0;
}

int b1_peer_detach(void *base, uint32_t slot, uint64_t id, int32_t pid) {
    struct b1_peer *p;
    struct b1_holder h;
    int r = b1_lock_live(base, slot, id, &p);
    if (r) return r;
    int others = p->pinned ? 1 : 0;
    for (int i = 0; i < B1_PEER_PIDS; i++) {
        if (holder_at(p, i, &h) && h.pid != pid)
            others++;
        else if (h.pid == pid)
            p->holders[i].pid = 0;
    }
    b1_unlock(p);
    return others;
}

/* Take every entry out of a disconnecting peer's queue, and its held slices, claiming
 * each in this lock hold (layout.h); unlocks, then frees them. */
static void flush_queue(void *base, struct b1_peer *p) {
    uint32_t max = LIM(base).max_entries;
    uint32_t cap = p->n_entries, n = 0, steps = 0;
    if (cap > max) cap = max;
    uint32_t *taken = cap ? malloc(cap * sizeof *taken) : NULL;
    B1_NOTICES(nt);
    while (p->root && b1_step(&steps, max)) {
        uint32_t e = p->front;
        b1_queue_remove_locked(base, p, e);
        if (b1_bad || p->front == e) { /* a scribbled tree: give up on the rest (leaked, not misused) */
            b1_bad = 1;
            p->root = p->front = p->back = 0;
            atomic_store(&p->front_ts, 0);
            break;
        }
        /* a block goes back to its transaction (ts 0: layout.h), which frees it at its
         * next step -- or gc does, if the stager dies first -- unless its stager died */
        struct b1_entry *en = ENTRY(base, e);
        if (!b1_msg_ok(base, en->msg, en->idx)) continue;
        if ((en->ts & 1) && b1_owner_alive(atomic_load(&MSG(base, en->msg)->stager))) {
            en->ts = 0;
            en->queue = 0;
            continue;
        }
        /* the owner reads nothing more: its destroyed node must not wait for it */
        if (en->type == B1_MSG_NODE_DESTROY) b1_destroy_delivered(base, p, en);
        if (taken && n < cap) {
            b1_entry_claim(en); /* ours until freed below */
            taken[n++] = e;
        }
    }
    p->n_messages = 0;
    p->n_bytes = 0;
    p->n_fds = 0;
    p->n_chargers = 0;
    memset(p->shares, 0, sizeof p->shares);
    /* the slices its processes still hold go with it: claimed here, freed below */
    uint32_t held = p->held, n_held = 0;
    p->held = 0;
    steps = 0;
    for (uint32_t i = held, next; i && b1_step(&steps, max); i = next, n_held++) {
        struct b1_entry *e = ENTRY(base, i);
        next = e->right;
        b1_entry_claim(e); /* first: a delivered slice is never relinked by a takeover */
        e->ts = 0;
        ENTRY(base, i)->prio = next; /* the chain, while the claim holds left and right */
    }
    b1_unlock(p);
    b1_wake(p);
    for (uint32_t i = held, k = 0; i && k < n_held; k++) {
        uint32_t next = ENTRY(base, i)->prio;
        b1_entry_drop(base, i, &nt);
        i = next;
    }
    for (uint32_t i = 0; i < n; i++) b1_entry_drop(base, taken[i], &nt);
    b1_notices_send(base, &nt);
    free(taken);
}

/* Begin the disconnect of an ACTIVE peer, or take over one whose disconnector died
 * (DISCONNECTING): the caller becomes the disconnector.  -ESHUTDOWN when the peer is gone
 * or a live process is disconnecting it. */
static int disconnect_claim(void *base, uint32_t slot, uint64_t id, struct b1_peer **out) {
    struct b1_peer *p;
    int r = b1_lock_named(base, slot, id, &p);
    if (r) return r;
    if (p->state == B1_PEER_ACTIVE) {
        /* nothing new is staged here from now on, and no new handle made for it (seq_cst:
         * handle.c b1_handle_get_locked reads it after counting the handle) */
        atomic_store(&p->disconnector, b1_self());
        __atomic_store_n(&p->state, B1_PEER_DISCONNECTING, __ATOMIC_SEQ_CST);
    } else if (p->state == B1_PEER_DISCONNECTING && !b1_owner_alive(atomic_load(&p->disconnector))) {
        atomic_store(&p->disconnector, b1_self());
    } else {
        b1_unlock(p);
        return -ESHUTDOWN;
    }
    b1_unlock(p);
    *out = p;
    return 0;
}

/* Resume every disconnect whose disconnector died (gc); returns how many were finished. */
uint32_t b1_peer_resume_disconnects(void *base) {
    uint32_t bump = b1_bounded(&HDR(base)->peers_bump, LIM(base).max_peers), done = 0;
    for (uint32_t s = 1; s < bump; s++) {
        struct b1_peer *p = b1_peer_at_slot(base, s);
        if (!p || __atomic_load_n(&p->state, __ATOMIC_SEQ_CST) != B1_PEER_DISCONNECTING ||
            b1_owner_alive(atomic_load(&p->disconnector)))
            continue;
        done += b1_peer_disconnect(base, s, __atomic_load_n(&p->id, __ATOMIC_SEQ_CST)) == 0;
    }
    return done;
}

/* Disconnecting, step by step, each step safe to run again after a kill: claim (ACTIVE ->
 * DISCONNECTING, the disconnector recorded), destroy the peer's nodes (those still ALIVE
 * or DESTROYING: a destruction already stamped is not redone), DISCONNECTED and the
 * queue flushed in one lock hold, then its handles dropped and the slot reclaimed (both
 * also done by gc for any DISCONNECTED peer: b1_peer_reclaim_all). */
int b1_peer_disconnect(void *base, uint32_t slot, uint64_t id) {
    struct b1_header *h = HDR(base);
    struct b1_peer *p = NULL;
    int r = disconnect_claim(base, slot, id, &p);
    if (r) return r;

    /* destroy the peer's nodes, in one transaction */
    uint32_t bump = atomic_load(&h->nodes_bump), n = 0;
    if (bump > LIM(base).max_nodes + 1) bump = LIM(base).max_nodes + 1;
    uint32_t *nodes = malloc((bump + 1) * sizeof *nodes);
    if (!nodes) return -ENOMEM;
    if (b1_lock_nodes(base, slot, p) == 0) {
        for (uint32_t i = 1; i < bump; i++) {
            struct b1_node *nd = NODE(base, i);
            /* DESTROYING: a destroyer that died before its stamp left it so */
            if (nd->owner_slot == slot && nd->owner_id == id &&
                (nd->state == B1_NODE_ALIVE || nd->state == B1_NODE_DESTROYING))
                nodes[n++] = i;
        }
        b1_unlock(p);
    }
    if (n) b1_destroy_nodes(base, slot, id, nodes, n, B1_DESTROY_DISCONNECT, NULL);
    free(nodes);

    r = b1_lock(base, p);
    if (r) return r;
    /* seq_cst: a handle released from now on sees it and retries the reclaim (handle.c) */
    __atomic_store_n(&p->state, B1_PEER_DISCONNECTED, __ATOMIC_SEQ_CST);
    uint64_t nonce[2] = {p->fd_nonce[0], p->fd_nonce[1]};
    flush_queue(base, p); /* unlocks */
    /* its store: no path left to post to, and every holder's watcher prunes its copy */
    b1_fds_unlink(nonce);
    atomic_fetch_add(&HDR(base)->holders_epoch, 1);
    b1_drop_peer_handles(base, slot, id);
    b1_peer_reclaim(base, slot);
    return 0;
}

static void fill_info(struct b1_peer *p, struct b1_peer_info *out) {
    out->id = p->id;
    out->clock = p->clock;
    out->state = p->state;
    out->n_entries = p->n_entries;
    out->n_messages = p->n_messages;
    out->n_handles = atomic_load(&p->n_handles);
    out->n_bytes = p->n_bytes;
    out->quota_messages = p->quota_messages;
    out->quota_handles = p->quota_handles;
    out->quota_bytes = p->quota_bytes;
    out->n_fds = p->n_fds;
    out->quota_fds = p->quota_fds;
    out->n_chargers = p->n_chargers;
    _Static_assert(B1_CHARGERS == sizeof out->share_messages / sizeof out->share_messages[0],
                   "the query reports every share");
    for (int i = 0; i < B1_CHARGERS; i++) {
        out->share_messages[i] = p->shares[i].messages;
        out->share_fds[i] = p->shares[i].fds;
        out->share_bytes[i] = p->shares[i].bytes;
        out->share_handles[i] = atomic_load(&p->share_handles[i]);
    }
    out->front_ts = atomic_load(&p->front_ts);
    out->sent = atomic_load(&p->sent);
    out->received = p->received;
    out->lock_recoveries = p->lock_recoveries;
    out->pinned = p->pinned;
    for (int i = 0; i < B1_PEER_PIDS; i++) out->pids[i] = p->holders[i].pid;
}

int b1_peer_query(void *base, uint32_t slot, uint64_t id, struct b1_peer_info *out) {
    struct b1_peer *p;
    int r = b1_lock_live(base, slot, id, &p);
    if (r) return r;
    fill_info(p, out);
    b1_unlock(p);
    return 0;
}

int b1_peer_at(void *base, uint32_t slot, struct b1_peer_info *out) {
    if (slot == 0) return -EINVAL;
    if (slot >= atomic_load(&HDR(base)->peers_bump)) return -ENOENT;
    struct b1_peer *p = b1_peer_at_slot(base, slot);
    if (!p) return -EAGAIN; /* carved but still being initialised */
    int r = b1_lock(base, p);
    if (r) return r;
    fill_info(p, out);
    b1_unlock(p);
    return 0;
}

/* 1 when a committed entry is at the front, 0 when not, -errno for a bad peer.
 * Lock-free: front_ts is published under the lock by every change of the front. */
int b1_peer_ready(void *base, uint32_t slot, uint64_t id) {
    struct b1_peer *p = b1_peer_at_slot(base, slot);
    if (!p) return -EINVAL;
    if (__atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id) return b1_peer_gone(base, id);
    if (__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != B1_PEER_ACTIVE) return -ESHUTDOWN;
    uint64_t ts = atomic_load(&p->front_ts);
    return ts && !(ts & 1);
}

uint32_t b1_peer_wake_seq(void *base, uint32_t slot) {
    return atomic_load(&PEER(base, slot)->wake_seq);
}

/* Wait until the peer's readiness (b1_peer_ready) differs from `last`, at most timeout_ns;
 * returns the readiness then.  Registers as a waiter before reading wake_seq (b1_wake). */
int b1_peer_watch(void *base, uint32_t slot, uint64_t id, int last, int64_t timeout_ns) {
    struct b1_peer *p = b1_peer_at_slot(base, slot);
    if (!p) return -EINVAL;
    b1_sleeper_register(p);
    uint32_t seen = atomic_load(&p->wake_seq);
    b1_sleeper_looked(p);
    int ready = b1_peer_ready(base, slot, id);
    if (ready == last) b1_futex_wait(&p->wake_seq, seen, timeout_ns);
    b1_sleeper_unregister(p);
    return ready == last ? b1_peer_ready(base, slot, id) : ready;
}
