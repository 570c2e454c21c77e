/*
 * reap.c -- what the bus does for processes that died: their peers are disconnected,
 * their half-done transactions finished or undone, and gone peers' slots reclaimed.
 *
 * Invariants:
 *   - A connected peer is reaped only when every process recorded in its pids[] is dead
 *     (pid and start time, so a reused pid is told apart); a pinned peer never is.
 *   - A dead stager's block is judged by its message record: stamped (m->ts set), it is
 *     committed at its stamp, as the sender would have, so every receiver agrees;
 *     unstamped, it is removed and its quota and handle registrations undone.
 *   - Each block is re-checked under its queue's lock before it is touched: another
 *     reaper (or the stager itself, if it was only slow) may have been first.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include "layout.h"

struct dead_block {
    uint32_t e;
    uint64_t ts, sender, seq;
    uint32_t idx;
};

/* depth and visits are bounded: a scribbled tree may have cycles */
static void collect_dead(void *base, uint32_t t, struct dead_block *out, uint32_t cap, uint32_t *n,
                         uint32_t depth, uint32_t *visits) {
    if (depth > 4096) {
        b1_bad = 1;
        return;
    }
    while (t && *n < cap && b1_step(visits, HDR(base)->limits.max_entries)) {
        struct b1_entry *e = ENTRY(base, t);
        if ((e->ts & 1) && b1_msg_ok(base, e->msg, e->idx) && !b1_pid_alive(MSG(base, e->msg)->stager_pid, 0))
            out[(*n)++] = (struct dead_block){t, e->ts, e->sender, e->seq, e->idx};
        collect_dead(base, e->left, out, cap, n, depth + 1, visits);
        t = e->right;
    }
}

/* Complete or remove the blocks of dead stagers in one queue; returns how many. */
static int reap_queue(void *base, uint32_t slot, struct b1_gc_stats *stats) {
    struct b1_peer *p = b1_peer_at_slot(base, slot);
    if (!p) return 0;
    if (b1_lock(p)) return 0;
    uint32_t cap = p->n_entries, n = 0, visits = 0;
    if (cap > HDR(base)->limits.max_entries) cap = HDR(base)->limits.max_entries;
    struct dead_block *dead = cap ? malloc(cap * sizeof *dead) : NULL;
    if (dead) collect_dead(base, p->root, dead, cap, &n, 0, &visits);
    b1_unlock(p);
    int done = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (b1_lock(p)) break;
        struct b1_entry *e = ENTRY(base, dead[i].e);
        /* still the same block, still in this queue? (another reaper may have been first) */
        if (e->ts != dead[i].ts || e->sender != dead[i].sender || e->seq != dead[i].seq ||
            e->idx != dead[i].idx || !b1_queue_contains_locked(base, p, dead[i].e)) {
            b1_unlock(p);
            continue;
        }
        struct b1_msg *m = MSG(base, e->msg);
        int woke = b1_queue_remove_locked(base, p, dead[i].e);
        if (m->ts) {
            /* the sender had stamped: finish its commit here, as it would have */
            if (p->clock < m->ts) p->clock = m->ts;
            e->ts = m->ts;
            woke |= b1_queue_insert_locked(base, p, dead[i].e);
            b1_unlock(p);
            if (stats) stats->blocks_completed++;
        } else {
            if (e->type == B1_MSG_DATA) {
                p->n_messages--;
                p->n_bytes -= m->len;
            }
            b1_unlock(p);
            if (e->type == B1_MSG_DATA) b1_tx_unregister_handles(base, m, e->idx);
            b1_msg_put(base, e->msg);
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

int b1_gc(void *base, struct b1_gc_stats *out) {
    struct b1_header *h = HDR(base);
    struct b1_gc_stats stats = {0};
    uint32_t bump = atomic_load(&h->peers_bump);
    for (uint32_t slot = 1; slot < bump; slot++) {
        struct b1_peer *p = b1_peer_at_slot(base, slot);
        if (!p || b1_lock(p)) continue;
        int active = p->state == B1_PEER_ACTIVE, used = 0, alive = p->pinned;
        uint64_t id = p->id;
        for (int i = 0; i < B1_PEER_PIDS; i++)
            if (p->pids[i]) {
                used = 1;
                alive |= b1_pid_alive(p->pids[i], p->pid_starts[i]);
            }
        b1_unlock(p);
        if (active && used && !alive) {
            if (b1_peer_disconnect(base, slot, id) == 0) stats.peers_reaped++;
        } else if (active) {
            stats.live_peers++;
        }
    }
    for (uint32_t slot = 1; slot < bump; slot++) reap_queue(base, slot, &stats);
    b1_peer_reclaim_all(base);
    if (out) *out = stats;
    return 0;
}
