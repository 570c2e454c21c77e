/*
 * reap.c -- what the bus does for processes that died: their peers are disconnected,
 * their half-done transactions finished or undone, and gone peers' slots reclaimed.
 *
 * Invariants:
 *   - A connected peer is reaped only when every process recorded in its pids[] is dead
 *     (pid and start time, so a reused pid is told apart); a pinned peer never is.
 *   - A dead stager's block is judged by its message record: stamped (m->ts set), it is
 *     committed at its stamp, as the sender would have, so every receiver agrees;
 *     unstamped, it is removed and its quota and handle registrations undone.  A
 *     NODE_DESTROY's record is judged only after its owner's lock was taken once since
 *     the death, so its nodes agree with the record (handle.c b1_lock_nodes).
 *   - Every gc takes every peer's lock with b1_lock_nodes first: what a holder killed in
 *     a hold left of the nodes is finished before anything else here reads them.
 *   - Each block is re-checked under its queue's lock before it is touched: another
 *     reaper (or the stager itself, if it was only slow) may have been first.
 *   - An entry in no queue is freed when the process claiming it died (layout.h,
 *     B1_ENTRY_RECEIVING): a sender's copy not yet staged belongs to a message without a
 *     stamp (the stamp comes after every stage), so it is undone like an unstamped block.
 *   - The dead's transactions are finished or undone before their peers are reaped, so
 *     the nodes those peers own are destroyed with the holders the finished messages made.
 *   - A NODE_RELEASE owed by a dead process (release_pending set, no notice queued) is
 *     queued again, once.
 *   - Names whose nodes are gone are removed last, after the dead peers' nodes were
 *     destroyed (names.c).
 *
 * Lock rules: one queue's lock at a time, re-taken per block; undone registrations take
 * their owners' locks after it is released.  One orphan sweeper at a time (orphan_reaper,
 * a compare-and-swap word, not a lock: a dead sweeper's claim is taken over).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "alloc.h"
#include "message.h"
#include "names.h"
#include "node.h"
#include "peer.h"
#include "queue.h"
#include "reap.h"
#include "reset.h"
#include "slot.h"

struct dead_block {
    uint32_t e;
    uint64_t ts, sender, seq;
    uint32_t idx, type, node, node_gen;
};

/* depth and visits are bounded: a scribbled tree may have cycles */
static void collect_dead(void *base, uint32_t t, struct dead_block *out, uint32_t cap, uint32_t *n,
                         uint32_t depth, uint32_t *visits) {
    if (depth > 4096) {
        b1_bad = 1;
        return;
    }
    while (t && *n < cap && b1_step(visits, LIM(base).max_entries)) {
        struct b1_entry *e = ENTRY(base, t);
        if ((e->ts & 1) && b1_msg_ok(base, e->msg, e->idx) && !b1_owner_alive(atomic_load(&MSG(base, e->msg)->stager)))
            out[(*n)++] = (struct dead_block){t, e->ts, e->sender, e->seq, e->idx, e->type, e->node, e->node_gen};
        collect_dead(base, e->left, out, cap, n, depth + 1, visits);
        t = e->right;
    }
}

/* Complete or remove the blocks of dead stagers in one queue; returns how many. */
static int reap_queue(void *base, uint32_t slot, struct b1_gc_stats *stats) {
    struct b1_peer *p = b1_peer_at_slot(base, slot);
    if (!p) return 0;
    if (b1_lock_nodes(base, slot, p)) return 0; /* every gc verifies every peer's nodes */
    uint32_t cap = p->n_entries, n = 0, visits = 0;
    if (cap > LIM(base).max_entries) cap = LIM(base).max_entries;
    struct dead_block *dead = cap ? malloc(cap * sizeof *dead) : NULL;
    if (dead) collect_dead(base, p->root, dead, cap, &n, 0, &visits);
    b1_unlock(p);
    int done = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (dead[i].type == B1_MSG_NODE_DESTROY) {
            /* a destruction cut in its stamp's hold is rolled forward or back at its owner's
             * lock before its record decides here (handle.c b1_lock_nodes) */
            struct b1_peer *owner = b1_lock_owner(base, dead[i].node, dead[i].node_gen);
            if (owner) b1_unlock(owner);
        }
        if (b1_lock(base, p)) break;
        struct b1_entry *e = ENTRY(base, dead[i].e);
        /* still the same block, still in this queue? (another reaper may have been first) */
        if (e->ts != dead[i].ts || e->sender != dead[i].sender || e->seq != dead[i].seq ||
            e->idx != dead[i].idx || !b1_queue_contains_locked(base, p, dead[i].e)) {
            b1_unlock(p);
            continue;
        }
        uint32_t unit = e->msg; /* read once: checked, then used */
        struct b1_msg *m = MSG(base, unit);
        struct b1_shape sh;
        if (!b1_msg_shape(base, unit, dead[i].idx, &sh)) {
            b1_unlock(p);
            continue;
        }
        int woke = b1_queue_remove_locked(base, p, dead[i].e);
        uint64_t stamped = __atomic_load_n(&m->ts, __ATOMIC_ACQUIRE); /* read once */
        if (stamped) {
            /* the sender had stamped: finish its commit here, as it would have */
            if (p->clock < stamped) p->clock = stamped;
            e->ts = stamped;
            woke |= b1_queue_insert_locked(base, p, dead[i].e);
            b1_unlock(p);
            if (stats) stats->blocks_completed++;
        } else {
            uint32_t type = e->type;
            if (type == B1_MSG_DATA) b1_uncharge_locked(p, e->sender, sh.len, sh.n_fds);
            b1_entry_claim(e); /* unlinked and claimed in one hold */
            b1_unlock(p);
            if (type == B1_MSG_DATA) {
                B1_NOTICES(nt);
                b1_tx_unregister_handles(base, m, &sh, dead[i].idx, &nt);
                b1_notices_send(base, &nt);
            }
            b1_entry_free(base, dead[i].e);
            if (stats) stats->blocks_removed++;
        }
        if (woke) b1_wake(p);
        done++;
    }
    free(dead);
    return done;
}

int b1_queue_reap(void *base, uint32_t slot) { return reap_queue(base, slot, NULL); }

/* One sweeper at a time (a claim must not race another sweeper's free and reuse of the
 * same entry); a dead sweeper's claim is taken over (its owner token, so a reused pid
 * does not keep the claim). */
static int orphan_lock(struct b1_header *h) {
    uint64_t cur = 0, me = b1_self();
    while (!atomic_compare_exchange_strong(&h->orphan_reaper, &cur, me))
        if (cur == me || b1_owner_alive(cur)) return 0;
    return 1;
}

/* Free the entries out of every queue whose owner died (layout.h): a sender's copies not
 * yet staged (owned by its record's stager), a receiver's entry taken out but not yet
 * freed (claimed).  Each gives back its record reference, if its owner had not, and for
 * data its handle registrations (undone only once: message.c). */
static uint32_t reap_orphans(void *base) {
    struct b1_header *h = HDR(base);
    /* injected modes stage no blocks: a staged entry would look unstaged */
    if (LIM(base).inject || !orphan_lock(h)) return 0;
    int saved_bad = b1_bad; /* live entries change under the sweep: a torn read is no damage */
    uint32_t bump = atomic_load(&h->entries_bump), freed = 0;
    if (bump > LIM(base).max_entries + 1) bump = LIM(base).max_entries + 1;
    for (uint32_t i = 1; i < bump; i++) {
        struct b1_entry *e = ENTRY(base, i);
        uint32_t type = __atomic_load_n(&e->type, __ATOMIC_ACQUIRE);
        if (type == B1_ENTRY_FREE) continue;
        uint32_t unit = __atomic_load_n(&e->msg, __ATOMIC_ACQUIRE);
        uint64_t owner;
        if (type & B1_ENTRY_RECEIVING) {
            owner = entry_owner(e);
        } else if (unit && e->ts == 0 && b1_msg_ok(base, unit, e->idx)) {
            owner = atomic_load(&MSG(base, unit)->stager);
        } else {
            continue; /* in a queue, on a held list, or being allocated */
        }
        if (b1_owner_alive(owner) || __atomic_load_n(&e->type, __ATOMIC_ACQUIRE) != type ||
            __atomic_load_n(&e->msg, __ATOMIC_ACQUIRE) != unit)
            continue;
        struct b1_shape sh;
        if (unit && (type & ~B1_ENTRY_RECEIVING) == B1_MSG_DATA && b1_msg_shape(base, unit, e->idx, &sh)) {
            B1_NOTICES(nt);
            b1_tx_unregister_handles(base, MSG(base, unit), &sh, e->idx, &nt);
            b1_notices_send(base, &nt);
        }
        b1_entry_free(base, i);
        freed++;
    }
    b1_bad = saved_bad;
    atomic_store(&h->orphan_reaper, 0);
    return freed;
}

/* A set of holder records already judged, so each process is looked at once per call
 * however many peers name it: open addressing, key the whole record, verdict beside. */
struct judged {
    uint32_t mask;
    struct { struct b1_holder h; int alive; } *v;
};

static int judge(struct judged *j, const struct b1_holder *h) {
    uint32_t i = ((uint32_t)h->pid * 2654435761u) & j->mask;
    for (uint32_t k = 0; k <= j->mask; k++, i = (i + 1) & j->mask) {
        if (!memcmp(&j->v[i].h, h, sizeof *h)) return j->v[i].alive;
        if (j->v[i].h.pid == 0) {
            j->v[i].h = *h;
            return j->v[i].alive = b1_holder_alive(h) ? 2 : 0; /* 2: alive, new */
        }
    }
    return b1_holder_alive(h); /* full: judged again, never wrong */
}

uint32_t b1_holders_epoch(void *base) { return atomic_load(&HDR(base)->holders_epoch); }

int b1_peer_watchlist(void *base, struct b1_watched *out, uint32_t cap, uint32_t *dead) {
    uint32_t bump = atomic_load(&HDR(base)->peers_bump), n = 0, gone = 0;
    if (bump > LIM(base).max_peers + 1) bump = LIM(base).max_peers + 1;
    struct judged j = {0, NULL};
    for (j.mask = 15; j.mask < 2 * cap + 1 && j.mask < (1u << 20); j.mask = 2 * j.mask + 1) {}
    j.v = calloc((size_t)j.mask + 1, sizeof *j.v);
    if (!j.v) return -ENOMEM;
    for (uint32_t slot = 1; slot < bump; slot++) {
        struct b1_peer *p = b1_peer_at_slot(base, slot);
        if (!p) continue;
        uint32_t state = __atomic_load_n(&p->state, __ATOMIC_RELAXED);
        if (state == B1_PEER_DISCONNECTING) {
            gone += !b1_owner_alive(atomic_load(&p->disconnector));
            continue;
        }
        if (state != B1_PEER_ACTIVE || b1_lock(base, p)) continue;
        struct b1_holder mine[B1_PEER_PIDS];
        int pinned = p->pinned, active = p->state == B1_PEER_ACTIVE;
        memcpy(mine, p->holders, sizeof mine); /* read once */
        b1_unlock(p);
        if (!active || pinned) continue;
        int used = 0, alive = 0;
        for (int i = 0; i < B1_PEER_PIDS; i++) {
            if (!mine[i].pid) continue;
            used = 1;
            int verdict = judge(&j, &mine[i]);
            alive |= verdict != 0;
            if (verdict == 2 && n < cap) /* alive, listed once */
                out[n++] = (struct b1_watched){mine[i].pid, mine[i].marker_fd, mine[i].marker_ino};
        }
        gone += used && !alive;
    }
    free(j.v);
    *dead = gone;
    return (int)n;
}

int b1_gc(void *base, struct b1_gc_stats *out) {
    struct b1_header *h = HDR(base);
    struct b1_gc_stats stats = {0};
    uint32_t bump = b1_bounded(&h->peers_bump, LIM(base).max_peers);
    /* the dead's transactions first: a rolled-back message must not make its receivers
     * holders of the nodes it carried when the dead peers' nodes are destroyed below */
    for (uint32_t slot = 1; slot < bump; slot++) reap_queue(base, slot, &stats);
    stats.blocks_removed += reap_orphans(base);
    b1_nodes_reap(base);
    stats.peers_reaped += b1_peer_resume_disconnects(base);
    b1_peer_resume_resets(base);
    for (uint32_t slot = 1; slot < bump; slot++) {
        struct b1_peer *p = b1_peer_at_slot(base, slot);
        if (!p || b1_lock(base, p)) continue;
        int active = p->state == B1_PEER_ACTIVE, used = 0, alive = p->pinned;
        uint64_t id = p->id;
        for (int i = 0; i < B1_PEER_PIDS; i++) {
            struct b1_holder h = p->holders[i]; /* read once */
            if (h.pid) {
                used = 1;
                alive |= b1_holder_alive(&h);
            }
        }
        b1_unlock(p);
        if (active && used && !alive) {
            if (b1_peer_disconnect(base, slot, id) == 0) stats.peers_reaped++;
        } else if (active) {
            stats.live_peers++;
        }
    }
    b1_renotify_releases(base);
    b1_peer_reclaim_all(base);
    b1_names_sweep(base); /* the names of nodes destroyed above, or before (names.c) */
    if (out) *out = stats;
    return 0;
}
