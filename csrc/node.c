/*
 * node.c -- nodes, handles and their lifetimes: transfer, release, handles carried in
 * messages, destruction.
 *
 * Invariants:
 *   - A node's fields, its holder list and the refs/pending counts of every handle to it
 *     are changed only under the node owner's lock; no other lock is held meanwhile.
 *   - A handle id is (gen << 24) | index; gen is bumped whenever the slot is reused, so an
 *     id is never reused.  A peer holds at most one handle per node.
 *   - A handle carried by a message is registered when the message is sent: the receiver's
 *     handle is created then (as `pending`), so a destruction that starts later notifies
 *     that receiver too.  At receive time the handle becomes held, or -- if the node's
 *     destruction is ordered before the message -- is dropped and reads HANDLE_INVALID.
 *   - A destruction is one transaction whose stamp fixes the destruction key
 *     (destroy_ts, owner id, destroy_seq).  Its stamp is refused, and the transaction
 *     restarted, if a holder was added after its destinations were collected; so every
 *     holder registered before the stamp gets NODE_DESTROY, and every message that carries
 *     the node later is stamped above the destruction (its sender syncs to destroy_ts).
 *   - A node slot is freed only when it is destroyed, the owner has read its NODE_DESTROY
 *     (or is gone), the owner's handle is released and no holder is left.
 *   - The process that drops a node's last holder owes the owner its NODE_RELEASE
 *     (release_pending, release_pid); if it dies owing it, b1_gc queues it instead.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "layout.h"

/* a node's holder list, walked at most max_handles steps (layout.h: bounds) */
#define FOR_HOLDERS(base, nd, i)                                                              \
    for (uint32_t i = (nd)->holders, i##_steps = 0;                                           \
         i && b1_step(&i##_steps, HDR(base)->limits.max_handles); i = HANDLE(base, i)->next_holder)

/* what handle_put_locked leaves for its caller to do once the owner's lock is released */
#define PUT_RELEASE 1 /* the node lost its last non-owner reference: notify the owner */
#define PUT_RECLAIM 2 /* a gone peer lost its last handle: its slot may be free (slot << 8) */

/* ---- handles ---- */

static uint32_t handle_alloc(void *base) {
    struct b1_header *h = HDR(base);
    uint32_t i = b1_alloc_index(base, &h->free_handles, &h->handles_bump, h->limits.max_handles + 1,
                                offsetof(struct b1_handle, next_free), sizeof(struct b1_handle),
                                (char *)HANDLE(base, 0));
    if (i) {
        struct b1_handle *hd = HANDLE(base, i);
        hd->gen++;
        hd->refs = 0;
        hd->pending = 0;
        hd->next_holder = 0;
        atomic_store(&hd->dead, 0);
    }
    return i;
}

static void handle_free(void *base, uint32_t i) {
    struct b1_handle *hd = HANDLE(base, i);
    hd->refs = 0;
    hd->pending = 0;
    b1_free_index(&HDR(base)->free_handles, i, &hd->next_free);
}

static uint64_t handle_id(void *base, uint32_t i) {
    return ((uint64_t)HANDLE(base, i)->gen << B1_HANDLE_INDEX_BITS) | i;
}

static uint32_t handle_index(void *base, uint64_t id) {
    uint32_t i = (uint32_t)(id & B1_HANDLE_INDEX_MASK);
    if (i == 0 || i > HDR(base)->limits.max_handles) return 0;
    return (id >> B1_HANDLE_INDEX_BITS) == HANDLE(base, i)->gen ? i : 0;
}

/* The handle slot behind an id, if the id is the caller's and held; 0 otherwise. */
uint32_t b1_handle_lookup(void *base, uint32_t slot, uint64_t peer_id, uint64_t id) {
    uint32_t i = handle_index(base, id);
    if (!i) return 0;
    struct b1_handle *hd = HANDLE(base, i);
    if (hd->peer_slot != slot || hd->peer_id != peer_id || hd->refs == 0) return 0;
    return i;
}

/* Lock the owner of node n (any owner state) if the node is still generation gen. */
static struct b1_peer *lock_owner(void *base, uint32_t n, uint32_t gen) {
    struct b1_node *nd = NODE(base, n);
    uint32_t slot = nd->owner_slot;
    if (!slot || slot > HDR(base)->limits.max_peers) return NULL;
    struct b1_peer *p = PEER(base, slot);
    if (b1_lock(p)) return NULL;
    if (nd->gen != gen || nd->owner_slot != slot || nd->state == B1_NODE_FREE) {
        b1_unlock(p);
        return NULL;
    }
    return p;
}

/* Free a destroyed node nothing names any more (the owner slot's lock held); the last
 * node of a gone owner frees the owner's slot too. */
static void maybe_free_node_locked(void *base, uint32_t n) {
    struct b1_node *nd = NODE(base, n);
    if (nd->state == B1_NODE_DESTROYED && !nd->holders && !nd->owner_handle_live && nd->owner_notified) {
        struct b1_peer *owner = PEER(base, nd->owner_slot);
        nd->state = B1_NODE_FREE;
        b1_free_index(&HDR(base)->free_nodes, n, &nd->next_free);
        if (--owner->n_nodes == 0) b1_peer_reclaim_locked(base, nd->owner_slot, owner);
    }
}

/* Finish what handle_put_locked asked for, with no lock held. */
static void put_done(void *base, int put, uint32_t n, uint32_t gen) {
    if (put & PUT_RELEASE) b1_notify_release(base, n, gen);
    if (put & PUT_RECLAIM) b1_peer_reclaim(base, (uint32_t)put >> 8);
}

/* Drop `held` references and `pending` in-flight ones of handle hi (owner lock held). */
static int handle_put_locked(void *base, uint32_t hi, uint32_t held, uint32_t pending) {
    struct b1_handle *hd = HANDLE(base, hi);
    struct b1_node *nd = NODE(base, hd->node);
    hd->refs -= held;
    hd->pending -= pending;
    if (hd->refs || hd->pending) return 0;
    int result = 0;
    if (handle_id(base, hi) == nd->owner_handle) {
        nd->owner_handle_live = 0;
    } else {
        uint32_t *link = &nd->holders;
        uint32_t steps = 0;
        while (*link && *link != hi && b1_step(&steps, HDR(base)->limits.max_handles))
            link = &HANDLE(base, *link)->next_holder;
        if (*link == hi) *link = hd->next_holder;
        if (!nd->holders && nd->state == B1_NODE_ALIVE && !nd->release_pending) {
            nd->release_pending = 1;
            nd->release_pid = b1_pid();
            result = PUT_RELEASE;
        }
    }
    /* seq_cst, then the state: see b1_peer_reclaim_locked */
    struct b1_peer *holder = PEER(base, hd->peer_slot);
    if (atomic_fetch_sub(&holder->n_handles, 1) == 1 &&
        __atomic_load_n(&holder->state, __ATOMIC_SEQ_CST) == B1_PEER_DISCONNECTED)
        result |= PUT_RECLAIM | (int)(hd->peer_slot << 8);
    uint32_t n = hd->node;
    handle_free(base, hi);
    maybe_free_node_locked(base, n);
    return result;
}

/* The handle of peer (slot, id) for node n, created if it has none (owner lock held). */
static int handle_get_locked(void *base, uint32_t n, uint32_t slot, uint64_t id, uint32_t *out) {
    struct b1_node *nd = NODE(base, n);
    if (slot == nd->owner_slot && id == nd->owner_id) {
        if (!nd->owner_handle_live) return -ESTALE;
        *out = (uint32_t)(nd->owner_handle & B1_HANDLE_INDEX_MASK);
        return 0;
    }
    FOR_HOLDERS(base, nd, i)
        if (HANDLE(base, i)->peer_slot == slot && HANDLE(base, i)->peer_id == id) {
            *out = i;
            return 0;
        }
    struct b1_peer *to = PEER(base, slot);
    /* counted first, then the peer checked (seq_cst): a slot being reclaimed either sees
     * the count or is seen here (b1_peer_reclaim_locked) */
    if (atomic_fetch_add(&to->n_handles, 1) >= to->quota_handles) {
        atomic_fetch_sub(&to->n_handles, 1);
        return -EDQUOT;
    }
    if (__atomic_load_n(&to->id, __ATOMIC_SEQ_CST) != id ||
        __atomic_load_n(&to->state, __ATOMIC_SEQ_CST) != B1_PEER_ACTIVE) {
        atomic_fetch_sub(&to->n_handles, 1);
        return -ESHUTDOWN;
    }
    uint32_t hi = handle_alloc(base); /* lock-free: allowed under the owner's lock */
    if (!hi) {
        atomic_fetch_sub(&to->n_handles, 1);
        return -ENOSPC;
    }
    struct b1_handle *hd = HANDLE(base, hi);
    hd->peer_id = id;
    hd->peer_slot = slot;
    hd->node = n;
    hd->node_gen = nd->gen;
    hd->next_holder = nd->holders;
    nd->holders = hi;
    nd->holders_version++;
    *out = hi;
    return 0;
}

/* ---- nodes ---- */

int b1_node_create(void *base, uint32_t slot, uint64_t id, uint64_t *out) {
    struct b1_header *h = HDR(base);
    uint32_t n = b1_alloc_index(base, &h->free_nodes, &h->nodes_bump, h->limits.max_nodes + 1,
                                offsetof(struct b1_node, next_free), sizeof(struct b1_node),
                                (char *)NODE(base, 0));
    if (!n) return -ENOSPC;
    uint32_t hi = handle_alloc(base);
    if (!hi) {
        b1_free_index(&h->free_nodes, n, &NODE(base, n)->next_free);
        return -ENOSPC;
    }
    struct b1_peer *p;
    int r = b1_lock_live(base, slot, id, &p);
    if (r == 0 && atomic_fetch_add(&p->n_handles, 1) >= p->quota_handles) {
        atomic_fetch_sub(&p->n_handles, 1);
        b1_unlock(p);
        r = -EDQUOT;
    }
    if (r) {
        handle_free(base, hi);
        b1_free_index(&h->free_nodes, n, &NODE(base, n)->next_free);
        return r;
    }
    struct b1_node *nd = NODE(base, n);
    struct b1_handle *hd = HANDLE(base, hi);
    p->n_nodes++;
    nd->gen++;
    nd->owner_id = id;
    nd->owner_slot = slot;
    nd->destroy_ts = nd->destroy_seq = 0;
    nd->holders = 0;
    nd->release_pending = 0;
    nd->owner_handle_live = 1;
    nd->owner_notified = 0;
    hd->peer_id = id;
    hd->peer_slot = slot;
    hd->node = n;
    hd->node_gen = nd->gen;
    hd->refs = 1;
    nd->owner_handle = handle_id(base, hi);
    nd->state = B1_NODE_ALIVE;
    *out = nd->owner_handle;
    b1_unlock(p);
    return 0;
}

int b1_handle_transfer(void *base, uint32_t slot, uint64_t id, uint64_t handle,
                       uint32_t to_slot, uint64_t to_id, uint64_t *out) {
    int r = b1_check_live(base, slot, id);
    if (r) return r;
    uint32_t src = b1_handle_lookup(base, slot, id, handle);
    if (!src) return -ENXIO;
    /* the receiving peer must be connected (checked under its own lock, then released:
     * never two locks at once) */
    r = b1_check_live(base, to_slot, to_id);
    if (r) return r == -ESHUTDOWN ? r : -EINVAL;
    uint32_t n = HANDLE(base, src)->node, gen = HANDLE(base, src)->node_gen;
    struct b1_peer *owner = lock_owner(base, n, gen);
    if (!owner) return -ESTALE;
    struct b1_node *nd = NODE(base, n);
    uint32_t hi;
    if (nd->state != B1_NODE_ALIVE && nd->state != B1_NODE_DESTROYING)
        r = -ESTALE;
    else
        r = handle_get_locked(base, n, to_slot, to_id, &hi);
    if (r == 0) {
        HANDLE(base, hi)->refs++;
        *out = handle_id(base, hi);
    }
    b1_unlock(owner);
    if (r == 0) B1_KILL_POINT(B1_KILL_TRANSFER);
    return r;
}

int b1_handle_release(void *base, uint32_t slot, uint64_t id, uint64_t handle) {
    int r = b1_check_live(base, slot, id);
    if (r) return r;
    uint32_t hi = b1_handle_lookup(base, slot, id, handle);
    if (!hi) return -ENXIO;
    struct b1_handle *hd = HANDLE(base, hi);
    uint32_t n = hd->node, gen = hd->node_gen;
    struct b1_peer *owner = lock_owner(base, n, gen);
    if (!owner) return -ENXIO;
    if (!b1_handle_lookup(base, slot, id, handle)) { /* released meanwhile by another thread */
        b1_unlock(owner);
        return -ENXIO;
    }
    struct b1_node *nd = NODE(base, n);
    if (handle == nd->owner_handle && nd->state == B1_NODE_ALIVE && hd->refs == 1) {
        b1_unlock(owner);
        return -EBUSY;
    }
    int put = handle_put_locked(base, hi, 1, 0);
    b1_unlock(owner);
    B1_KILL_POINT(B1_KILL_RELEASE);
    put_done(base, put, n, gen);
    return 0;
}

/* Release every reference a disconnected peer holds (in-flight ones go with their
 * messages, which are dropped at the peer). */
void b1_drop_peer_handles(void *base, uint32_t slot, uint64_t id) {
    uint32_t bump = atomic_load(&HDR(base)->handles_bump);
    for (uint32_t hi = 1; hi < bump; hi++) {
        struct b1_handle *hd = HANDLE(base, hi);
        if (hd->peer_slot != slot || hd->peer_id != id || hd->refs == 0) continue;
        uint32_t n = hd->node, gen = hd->node_gen, hgen = hd->gen;
        struct b1_peer *owner = lock_owner(base, n, gen);
        if (!owner) continue;
        int put = 0;
        if (hd->gen == hgen && hd->peer_slot == slot && hd->peer_id == id && hd->refs)
            put = handle_put_locked(base, hi, hd->refs, 0);
        b1_unlock(owner);
        put_done(base, put, n, gen);
    }
}

/* ---- handles carried by messages ---- */

/* Undo one destination's registrations: its message was dropped or aborted. */
void b1_tx_unregister_handles(void *base, struct b1_msg *m, uint32_t j) {
    uint32_t nh = m->n_handles;
    struct b1_carried *c = msg_carried(m);
    uint64_t *ids = msg_handle_ids(m) + (uint64_t)j * nh;
    for (uint32_t k = 0; k < nh; k++) {
        if (ids[k] == B1_HANDLE_INVALID) continue;
        struct b1_peer *owner = lock_owner(base, c[k].node, c[k].node_gen);
        if (!owner) continue;
        int put = 0;
        uint32_t hi = handle_index(base, ids[k]);
        if (hi && HANDLE(base, hi)->pending) put = handle_put_locked(base, hi, 0, 1);
        b1_unlock(owner);
        ids[k] = B1_HANDLE_INVALID;
        put_done(base, put, c[k].node, c[k].node_gen);
    }
}

int b1_tx_register_handles(void *base, struct b1_tx *tx, const uint64_t *handles, uint32_t nh) {
    struct b1_msg *m = MSG(base, tx->msg);
    struct b1_carried *c = msg_carried(m);
    uint64_t *ids = msg_handle_ids(m);
    for (uint64_t i = 0; i < (uint64_t)tx->n * nh; i++) ids[i] = B1_HANDLE_INVALID;
    for (uint32_t k = 0; k < nh; k++) {
        uint32_t hi = b1_handle_lookup(base, tx->sender_slot, tx->sender_id, handles[k]);
        int r = hi ? 0 : -ENXIO;
        struct b1_peer *owner = NULL;
        if (!r) {
            c[k].node = HANDLE(base, hi)->node;
            c[k].node_gen = HANDLE(base, hi)->node_gen;
            owner = lock_owner(base, c[k].node, c[k].node_gen);
            if (!owner) r = -ENXIO;
        }
        if (!r) {
            struct b1_node *nd = NODE(base, c[k].node);
            if (nd->state == B1_NODE_DESTROYED) {
                /* stamp above the destruction: the handle is invalid for every receiver */
                if (tx->max_ts < nd->destroy_ts) tx->max_ts = nd->destroy_ts;
            } else {
                for (uint32_t j = 0; j < tx->n && !r; j++) {
                    uint32_t rh;
                    r = handle_get_locked(base, c[k].node, tx->dests[j].peer_slot,
                                          tx->dests[j].peer_id, &rh);
                    if (r == -ESHUTDOWN) { /* a receiver leaving: its copy will be dropped */
                        r = 0;
                        continue;
                    }
                    if (!r) {
                        HANDLE(base, rh)->pending++;
                        ids[(uint64_t)j * nh + k] = handle_id(base, rh);
                    }
                }
            }
            b1_unlock(owner);
        }
        if (r) {
            for (uint32_t j = 0; j < tx->n; j++) b1_tx_unregister_handles(base, m, j);
            return r;
        }
    }
    return 0;
}

/* Is the node's destruction key (destroy_ts, owner id, destroy_seq) below the entry's
 * message key (owner lock held)? */
static int destroyed_before(const struct b1_node *nd, const struct b1_entry *e) {
    if (nd->state != B1_NODE_DESTROYED) return 0;
    struct b1_entry destruction = {.ts = nd->destroy_ts, .sender = nd->owner_id,
                                   .seq = nd->destroy_seq, .idx = 0};
    struct b1_entry message = {.ts = e->ts, .sender = e->sender, .seq = e->seq, .idx = 1};
    return b1_key_less(&destruction, &message);
}

/* The receiver's ids for the handles an entry carries, deciding validity now. */
void b1_resolve_handles(void *base, struct b1_entry *e, struct b1_msg *m, uint64_t *out) {
    uint32_t nh = m->n_handles;
    struct b1_carried *c = msg_carried(m);
    uint64_t *ids = msg_handle_ids(m) + (uint64_t)e->idx * nh;
    for (uint32_t k = 0; k < nh; k++) {
        out[k] = B1_HANDLE_INVALID;
        if (ids[k] == B1_HANDLE_INVALID) continue;
        struct b1_peer *owner = lock_owner(base, c[k].node, c[k].node_gen);
        if (!owner) continue;
        struct b1_node *nd = NODE(base, c[k].node);
        uint32_t hi = handle_index(base, ids[k]);
        int put = 0;
        if (hi && HANDLE(base, hi)->pending) {
            if (destroyed_before(nd, e)) {
                put = handle_put_locked(base, hi, 0, 1);
            } else {
                HANDLE(base, hi)->pending--;
                HANDLE(base, hi)->refs++;
                out[k] = ids[k];
                ids[k] = B1_HANDLE_INVALID; /* held now: nothing to undo for this copy */
            }
        }
        b1_unlock(owner);
        put_done(base, put, c[k].node, c[k].node_gen);
    }
}

/* Is a data entry, now at the front of its owner's queue, after its node's destruction?
 * (the receiver is the owner; its lock is held) */
int b1_data_dropped_locked(void *base, struct b1_entry *e) {
    struct b1_node *nd = NODE(base, e->node);
    if (nd->gen != e->node_gen || nd->state == B1_NODE_FREE) return 1;
    return destroyed_before(nd, e);
}

/* A NODE_DESTROY was read by peer p (its lock held). */
void b1_destroy_delivered(void *base, struct b1_peer *p, struct b1_entry *e) {
    struct b1_node *nd = NODE(base, e->node);
    if (nd->gen == e->node_gen && e->destination == nd->owner_handle && nd->owner_id == p->id) {
        nd->owner_notified = 1;
        maybe_free_node_locked(base, e->node);
        return;
    }
    uint32_t hi = handle_index(base, e->destination);
    if (hi) atomic_store(&HANDLE(base, hi)->dead, 1);
}

/* A NODE_RELEASE reached the front of the owner's queue (its lock held): deliver it only
 * if the node is still alive and unreferenced; otherwise it is withdrawn. */
int b1_release_wanted_locked(void *base, struct b1_peer *p, struct b1_entry *e) {
    struct b1_node *nd = NODE(base, e->node);
    if (nd->gen != e->node_gen || nd->state == B1_NODE_FREE) return 0;
    nd->release_pending = 0;
    return nd->state == B1_NODE_ALIVE && !nd->holders;
}

/* Is a NODE_RELEASE for node n (generation gen) in p's queue (p's lock held)? */
static int release_queued_locked(void *base, struct b1_peer *p, uint32_t n, uint32_t gen) {
    uint32_t max = HDR(base)->limits.max_entries, stack[64], top = 0, steps = 0;
    if (p->root) stack[top++] = p->root;
    while (top && b1_step(&steps, max)) {
        struct b1_entry *e = ENTRY(base, stack[--top]);
        if (e->type == B1_MSG_NODE_RELEASE && e->node == n && e->node_gen == gen) return 1;
        if (e->left && top < 64) stack[top++] = e->left;
        if (e->right && top < 64) stack[top++] = e->right;
    }
    return 0;
}

/* Queue the NODE_RELEASE that a dead process owed: it set release_pending and died before
 * its notice was stamped (an unstamped one was removed by the reaper).  For b1_gc. */
void b1_renotify_releases(void *base) {
    uint32_t bump = atomic_load(&HDR(base)->nodes_bump);
    if (bump > HDR(base)->limits.max_nodes + 1) bump = HDR(base)->limits.max_nodes + 1;
    for (uint32_t n = 1; n < bump; n++) {
        struct b1_node *nd = NODE(base, n);
        uint32_t gen = nd->gen;
        if (!nd->release_pending || nd->state != B1_NODE_ALIVE || b1_pid_alive(nd->release_pid, 0)) continue;
        struct b1_peer *owner = lock_owner(base, n, gen);
        if (!owner) continue;
        int owed = nd->release_pending && nd->state == B1_NODE_ALIVE && !nd->holders &&
                   !b1_pid_alive(nd->release_pid, 0) && !release_queued_locked(base, owner, n, gen);
        if (owed) nd->release_pid = b1_pid();
        b1_unlock(owner);
        if (owed) b1_notify_release(base, n, gen);
    }
}

/* Queue NODE_RELEASE at the owner: a transaction of the owner to itself. */
void b1_notify_release(void *base, uint32_t n, uint32_t gen) {
    struct b1_node *nd = NODE(base, n);
    struct b1_dest d = {.peer_id = nd->owner_id, .owner_handle = nd->owner_handle,
                        .peer_slot = nd->owner_slot, .node = n, .node_gen = gen};
    struct b1_tx tx = {.sender_slot = nd->owner_slot, .sender_id = nd->owner_id, .n = 1, .dests = &d};
    if (nd->gen != gen) return;
    if (b1_tx_prepare_raw(base, &tx, B1_MSG_NODE_RELEASE, NULL, 0, 0) == 0) b1_tx_run(base, &tx);
}

/* ---- destruction ---- */

struct destroy_check {
    const uint32_t *nodes;
    const uint32_t *versions;
    uint32_t n;
    int disconnecting;
};

/* Under the owner's lock at the stamp: refuse if a holder was added since the
 * destinations were collected; else fix the destruction key. */
static int destroy_stamp_check(void *base, struct b1_tx *tx, void *arg) {
    struct destroy_check *dc = arg;
    for (uint32_t i = 0; i < dc->n; i++)
        if (NODE(base, dc->nodes[i])->holders_version != dc->versions[i]) return -EAGAIN;
    for (uint32_t i = 0; i < dc->n; i++) {
        struct b1_node *nd = NODE(base, dc->nodes[i]);
        nd->state = B1_NODE_DESTROYED;
        nd->destroy_ts = tx->ts;
        nd->destroy_seq = tx->seq;
        nd->owner_notified = dc->disconnecting; /* a departing owner reads nothing more */
    }
    return 0;
}

int b1_destroy_nodes(void *base, uint32_t slot, uint64_t id, const uint32_t *nodes, uint32_t n,
                     int disconnecting, uint64_t *stamp) {
    uint32_t *versions = malloc(n * sizeof *versions);
    if (!versions) return -ENOMEM;
    struct b1_peer *p = PEER(base, slot);
    int r, first = 1;
    for (;;) {
        if ((r = b1_lock(p))) break;
        if (p->id != id || p->state != (disconnecting ? B1_PEER_DISCONNECTING : B1_PEER_ACTIVE)) {
            b1_unlock(p);
            r = -ESHUTDOWN;
            break;
        }
        /* validate all, then mark all: a failed call changes nothing */
        for (uint32_t i = 0; i < n && !r; i++) {
            struct b1_node *nd = NODE(base, nodes[i]);
            /* a departing owner also takes the nodes whose destroyer died before the stamp */
            int from = nd->state == B1_NODE_ALIVE || (disconnecting && nd->state == B1_NODE_DESTROYING);
            if (nd->owner_slot != slot || nd->owner_id != id) r = -EREMOTE;
            else if (first ? !from : nd->state != B1_NODE_DESTROYING) r = -ESTALE;
        }
        uint32_t count = 0;
        for (uint32_t i = 0; i < n && !r; i++) {
            struct b1_node *nd = NODE(base, nodes[i]);
            nd->state = B1_NODE_DESTROYING;
            versions[i] = nd->holders_version;
            count += !disconnecting;
            FOR_HOLDERS(base, nd, hi) count++;
        }
        struct b1_dest *dests = (!r && count) ? calloc(count, sizeof *dests) : NULL;
        if (!r && count && !dests) r = -ENOMEM;
        if (r) {
            b1_unlock(p);
            break;
        }
        uint32_t k = 0;
        for (uint32_t i = 0; i < n; i++) {
            struct b1_node *nd = NODE(base, nodes[i]);
            if (!disconnecting)
                dests[k++] = (struct b1_dest){.peer_id = id, .owner_handle = nd->owner_handle,
                                              .peer_slot = slot, .node = nodes[i], .node_gen = nd->gen};
            FOR_HOLDERS(base, nd, hi) {
                struct b1_handle *hd = HANDLE(base, hi);
                dests[k++] = (struct b1_dest){.peer_id = hd->peer_id, .owner_handle = handle_id(base, hi),
                                              .peer_slot = hd->peer_slot, .node = nodes[i],
                                              .node_gen = nd->gen};
            }
        }
        b1_unlock(p);
        first = 0;

        struct destroy_check dc = {nodes, versions, n, disconnecting};
        if (count == 0) {
            /* nobody to notify (a departing owner with no holders): stamp alone */
            struct b1_tx tx = {.sender_slot = slot, .sender_id = id, .n = 0, .dests = NULL};
            tx.seq = atomic_fetch_add(&p->tx_seq, 1);
            B1_KILL_POINT(B1_KILL_DESTROY);
            r = b1_tx_stamp_as(base, &tx, disconnecting, destroy_stamp_check, &dc);
            if (r == -EAGAIN) continue;
            if (!r && stamp) stamp[0] = tx.ts, stamp[1] = tx.seq;
            break;
        }
        struct b1_tx tx = {.sender_slot = slot, .sender_id = id, .n = count, .dests = dests};
        r = b1_tx_prepare_raw(base, &tx, B1_MSG_NODE_DESTROY, NULL, 0, 0);
        for (uint32_t i = 0; i < count && !r; i++) r = b1_tx_stage(base, &tx, i);
        if (!r) B1_KILL_POINT(B1_KILL_DESTROY);
        if (!r) r = b1_tx_stamp_as(base, &tx, disconnecting, destroy_stamp_check, &dc);
        if (r) {
            if (tx.msg) b1_tx_abort(base, &tx);
            free(dests);
            if (r == -EAGAIN) continue; /* a holder arrived: collect again */
            break;
        }
        for (uint32_t i = 0; i < count && count > 1; i++) b1_tx_sync(base, &tx, i);
        for (uint32_t i = 0; i < count; i++) b1_tx_commit(base, &tx, i);
        if (stamp) stamp[0] = tx.ts, stamp[1] = tx.seq;
        free(dests);
        break;
    }
    if (r && !first) {
        /* could not finish: the nodes stay alive */
        if (b1_lock(p) == 0) {
            for (uint32_t i = 0; i < n; i++)
                if (NODE(base, nodes[i])->state == B1_NODE_DESTROYING) NODE(base, nodes[i])->state = B1_NODE_ALIVE;
            b1_unlock(p);
        }
    }
    free(versions);
    return r;
}

int b1_destroy(void *base, uint32_t slot, uint64_t id, const uint64_t *handles, uint32_t n,
               int release, uint64_t *stamp) {
    if (n == 0 || n > HDR(base)->limits.max_dests) return -EINVAL;
    int r = b1_check_live(base, slot, id);
    if (r) return r;
    struct b1_peer *p = PEER(base, slot);
    uint32_t *nodes = malloc(n * sizeof *nodes);
    if (!nodes) return -ENOMEM;
    for (uint32_t i = 0; i < n && !r; i++) {
        for (uint32_t j = 0; j < i; j++)
            if (handles[j] == handles[i]) r = -ENOTUNIQ;
        uint32_t hi = b1_handle_lookup(base, slot, id, handles[i]);
        if (!r && !hi) r = -ENXIO;
        if (!r) {
            nodes[i] = HANDLE(base, hi)->node;
            if (NODE(base, nodes[i])->owner_handle != handles[i]) r = -EREMOTE;
        }
    }
    if (!r) r = b1_destroy_nodes(base, slot, id, nodes, n, 0, stamp);
    if (!r && release) {
        for (uint32_t i = 0; i < n; i++) {
            uint32_t hi = b1_handle_lookup(base, slot, id, handles[i]);
            if (!hi || b1_lock(p)) continue;
            int put = 0;
            if (b1_handle_lookup(base, slot, id, handles[i]))
                put = handle_put_locked(base, hi, HANDLE(base, hi)->refs, 0);
            b1_unlock(p);
            put_done(base, put, nodes[i], NODE(base, nodes[i])->gen);
        }
    }
    free(nodes);
    return r;
}
