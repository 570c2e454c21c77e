/*
 * peer.c -- a peer's life: creation, the processes that use it, disconnection, reaping.
 *
 * Invariants:
 *   - A peer slot's mutex is initialised once, when the slot is first carved; slots are not
 *     recycled, and peer ids come from one counter and are never reused.
 *   - A peer is held by the processes recorded in pids[] (each with its start time, so a
 *     reused pid is not mistaken for the old process).  A peer with no recorded process
 *     was never used and is never reaped; one used by more processes than pids[] holds is
 *     pinned and only disconnected explicitly.
 *   - Disconnecting is: stop accepting (DISCONNECTING), destroy the peer's nodes in one
 *     transaction, flush the queue (DISCONNECTED), drop every handle the peer holds.
 *     Blocks flushed from the queue stay owned by their transactions, which notice the
 *     peer is gone at their next step and free their entries themselves.
 *   - Reaping treats a dead process's half-done transaction by its record: a stamped
 *     message is committed at its stamp everywhere it is still a block (as the sender
 *     would have), an unstamped one is removed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "layout.h"

/* ---- processes ---- */

/* Start time (clock ticks after boot) of a process, 0 if it is gone or a zombie. */
static uint64_t proc_start(int32_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may contain spaces and parentheses */
    if (!p || p[1] != ' ') return 0;
    char state = p[2];
    if (state == 'Z' || state == 'X' || state == 'x') return 0;
    /* fields after the name: state(3) ... starttime(22) */
    int field = 3;
    for (p += 2; *p && field < 22; p++)
        if (*p == ' ') field++;
    return strtoull(p, NULL, 10);
}

int b1_pid_alive(int32_t pid, uint64_t start) {
    if (pid <= 0) return 0;
    uint64_t now = proc_start(pid);
    return now != 0 && (start == 0 || now == start);
}

/* ---- peers ---- */

static int init_peer_lock(struct b1_peer *p) {
    pthread_mutexattr_t a;
    int r = pthread_mutexattr_init(&a);
    if (!r) r = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    if (!r) r = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (!r) r = pthread_mutex_init(&p->lock, &a);
    pthread_mutexattr_destroy(&a);
    return -r;
}

int b1_peer_new(void *base, uint32_t quota_messages, uint32_t quota_handles,
                uint64_t quota_bytes, uint32_t *slot, uint64_t *id) {
    struct b1_header *h = HDR(base);
    uint32_t cur = atomic_load(&h->peers_bump);
    do {
        if (cur > h->limits.max_peers) return -ENOSPC;
    } while (!atomic_compare_exchange_weak(&h->peers_bump, &cur, cur + 1));
    struct b1_peer *p = PEER(base, cur);
    int r = init_peer_lock(p);
    if (r) return r;
    r = b1_lock(p);
    if (r) return r;
    p->id = atomic_fetch_add(&h->next_peer_id, 1);
    p->quota_messages = quota_messages ? quota_messages : h->limits.quota_messages;
    p->quota_handles = quota_handles ? quota_handles : h->limits.quota_handles;
    p->quota_bytes = quota_bytes ? quota_bytes : h->limits.quota_bytes;
    p->state = B1_PEER_ACTIVE;
    __atomic_store_n(&p->lock_initialised, 1, __ATOMIC_RELEASE);
    *slot = cur;
    *id = p->id;
    b1_unlock(p);
    return 0;
}

static struct b1_peer *peer_at(void *base, uint32_t slot) {
    struct b1_header *h = HDR(base);
    if (slot == 0 || slot > h->limits.max_peers) return NULL;
    struct b1_peer *p = PEER(base, slot);
    return __atomic_load_n(&p->lock_initialised, __ATOMIC_ACQUIRE) ? p : NULL;
}

/* Lock a peer and check it is still the one named by id and connected. */
int b1_lock_live(void *base, uint32_t slot, uint64_t id, struct b1_peer **out) {
    struct b1_peer *p = peer_at(base, slot);
    if (!p) return -EINVAL;
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
    *out = p;
    return 0;
}

/* Is the peer (slot, id) still connected?  0, or the error of b1_lock_live. */
int b1_check_live(void *base, uint32_t slot, uint64_t id) {
    struct b1_peer *p;
    int r = b1_lock_live(base, slot, id, &p);
    if (!r) b1_unlock(p);
    return r;
}

int b1_peer_attach(void *base, uint32_t slot, uint64_t id, int32_t pid) {
    struct b1_peer *p;
    int r = b1_lock_live(base, slot, id, &p);
    if (r) return r;
    int free_slot = -1;
    for (int i = 0; i < B1_PEER_PIDS; i++) {
        if (p->pids[i] == pid) {
            b1_unlock(p);
            return 0;
        }
        if (free_slot < 0 && (p->pids[i] == 0 || !b1_pid_alive(p->pids[i], p->pid_starts[i])))
            free_slot = i;
    }
    if (free_slot >= 0) {
        p->pids[free_slot] = pid;
        p->pid_starts[free_slot] = proc_start(pid);
    } else {
        p->pinned = 1;
    }
    b1_unlock(p);
    return 0;
}

int b1_peer_detach(void *base, uint32_t slot, uint64_t id, int32_t pid) {
    struct b1_peer *p;
    int r = b1_lock_live(base, slot, id, &p);
    if (r) return r;
    int others = p->pinned ? 1 : 0;
    for (int i = 0; i < B1_PEER_PIDS; i++) {
        if (p->pids[i] == pid)
            p->pids[i] = 0;
        else if (p->pids[i] && b1_pid_alive(p->pids[i], p->pid_starts[i]))
            others++;
    }
    b1_unlock(p);
    return others;
}

/* Take every entry out of a disconnecting peer's queue. */
static void flush_queue(void *base, struct b1_peer *p) {
    uint32_t cap = p->n_entries, n = 0;
    uint32_t *taken = cap ? malloc(cap * sizeof *taken) : NULL;
    while (p->root) {
        uint32_t e = p->front;
        b1_queue_remove_locked(base, p, e);
        /* a block stays owned by its transaction, which frees it */
        if (!(ENTRY(base, e)->ts & 1) && taken && n < cap) taken[n++] = e;
    }
    p->n_messages = 0;
    p->n_bytes = 0;
    b1_unlock(p);
    b1_wake(p);
    for (uint32_t i = 0; i < n; i++) {
        struct b1_entry *e = ENTRY(base, taken[i]);
        struct b1_msg *m = MSG(base, e->msg);
        if (e->type == B1_MSG_DATA) b1_tx_unregister_handles(base, m, e->idx);
        b1_msg_put(base, e->msg);
        b1_entry_free(base, taken[i]);
    }
    free(taken);
}

int b1_peer_disconnect(void *base, uint32_t slot, uint64_t id) {
    struct b1_header *h = HDR(base);
    struct b1_peer *p;
    int r = b1_lock_live(base, slot, id, &p);
    if (r) return r;
    p->state = B1_PEER_DISCONNECTING; /* nothing new is staged here from now on */
    b1_unlock(p);

    /* destroy the peer's nodes, in one transaction */
    uint32_t bump = atomic_load(&h->nodes_bump), n = 0;
    uint32_t *nodes = malloc((bump + 1) * sizeof *nodes);
    if (!nodes) return -ENOMEM;
    if (b1_lock(p) == 0) {
        for (uint32_t i = 1; i < bump; i++) {
            struct b1_node *nd = NODE(base, i);
            if (nd->owner_slot == slot && nd->owner_id == id && nd->state == B1_NODE_ALIVE)
                nodes[n++] = i;
        }
        b1_unlock(p);
    }
    if (n) b1_destroy_nodes(base, slot, id, nodes, n, 1, NULL);
    free(nodes);

    r = b1_lock(p);
    if (r) return r;
    p->state = B1_PEER_DISCONNECTED;
    flush_queue(base, p); /* unlocks */
    b1_drop_peer_handles(base, slot, id);
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
    out->front_ts = atomic_load(&p->front_ts);
    out->sent = atomic_load(&p->sent);
    out->received = p->received;
    out->lock_recoveries = p->lock_recoveries;
    out->pinned = p->pinned;
    for (int i = 0; i < B1_PEER_PIDS; i++) out->pids[i] = p->pids[i];
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
    struct b1_peer *p = peer_at(base, slot);
    if (!p) return -EAGAIN; /* carved but still being initialised */
    int r = b1_lock(p);
    if (r) return r;
    fill_info(p, out);
    b1_unlock(p);
    return 0;
}

/* 1 when a committed entry is at the front, 0 when not, -errno for a bad peer.
 * Lock-free: front_ts is published under the lock by every change of the front. */
int b1_peer_ready(void *base, uint32_t slot, uint64_t id) {
    struct b1_peer *p = peer_at(base, slot);
    if (!p || p->id != id) return -EINVAL;
    if (p->state != B1_PEER_ACTIVE) return -ESHUTDOWN;
    uint64_t ts = atomic_load(&p->front_ts);
    return ts && !(ts & 1);
}

uint32_t b1_peer_wake_seq(void *base, uint32_t slot) {
    return atomic_load(&PEER(base, slot)->wake_seq);
}

/* Wait until the peer's readiness (b1_peer_ready) differs from `last`, at most timeout_ns;
 * returns the readiness then.  Registers as a waiter before reading wake_seq (b1_wake). */
int b1_peer_watch(void *base, uint32_t slot, uint64_t id, int last, int64_t timeout_ns) {
    struct b1_peer *p = peer_at(base, slot);
    if (!p) return -EINVAL;
    atomic_fetch_add(&p->waiters, 1);
    uint32_t seen = atomic_load(&p->wake_seq);
    int ready = b1_peer_ready(base, slot, id);
    if (ready == last) b1_futex_wait(&p->wake_seq, seen, timeout_ns);
    atomic_fetch_sub(&p->waiters, 1);
    return ready == last ? b1_peer_ready(base, slot, id) : ready;
}

/* ---- reaping ---- */

struct dead_block {
    uint32_t e;
    uint64_t ts, sender, seq;
    uint32_t idx;
};

static void collect_dead(void *base, uint32_t t, struct dead_block *out, uint32_t cap, uint32_t *n) {
    while (t && *n < cap) {
        struct b1_entry *e = ENTRY(base, t);
        if ((e->ts & 1) && !b1_pid_alive(MSG(base, e->msg)->stager_pid, 0))
            out[(*n)++] = (struct dead_block){t, e->ts, e->sender, e->seq, e->idx};
        collect_dead(base, e->left, out, cap, n);
        t = e->right;
    }
}

/* Complete or remove the blocks of dead stagers in one queue; returns how many. */
static int reap_queue(void *base, uint32_t slot, struct b1_gc_stats *stats) {
    struct b1_peer *p = peer_at(base, slot);
    if (!p) return 0;
    if (b1_lock(p)) return 0;
    uint32_t cap = p->n_entries, n = 0;
    struct dead_block *dead = cap ? malloc(cap * sizeof *dead) : NULL;
    if (dead) collect_dead(base, p->root, dead, cap, &n);
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
        struct b1_peer *p = peer_at(base, slot);
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
    if (out) *out = stats;
    return 0;
}
