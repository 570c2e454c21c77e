/*
 * node.c -- nodes and their lifetimes: creation, transfer and release of handles,
 * destruction, and the NODE_RELEASE notices the layers below hand up.
 *
 * Invariants:
 *   - A node's fields and its holder list change only under the node owner's lock
 *     (handle.h); no other lock is held meanwhile.
 *   - A destruction is one transaction whose stamp fixes the destruction key
 *     (destroy_ts, owner id, destroy_seq).  Its stamp is refused, and the transaction
 *     restarted, if a holder was added after its destinations were collected; so every
 *     holder registered before the stamp gets NODE_DESTROY, and every message that carries
 *     the node later is stamped above the destruction (its sender syncs to destroy_ts).
 *   - A quiet node (B1_NODE_QUIET, a reply node) owes nobody a notice: no NODE_RELEASE to
 *     its owner, no NODE_DESTROY to its owner or holders (a holder's send to it after its
 *     destruction is dropped, as any; its handle goes when it is released).
 *   - The process that drops a node's last holder owes the owner its NODE_RELEASE
 *     (release_pending, release_owner): a transaction of the owner to itself, sent here for
 *     every notice handed up by handle.c, message.c and tx.c; if the process dies owing
 *     it, b1_gc queues it instead.
 *
 * Lock rules: the owner's lock for node fields, released before any transaction step
 * (each of which takes one queue lock at a time): never two locks at once.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "alloc.h"
#include "handle.h"
#include "kill.h"
#include "node.h"
#include "queue.h"
#include "slot.h"
#include "tx.h"

/* ---- nodes ---- */

int b1_node_create(void *base, uint32_t slot, uint64_t id, uint64_t *out) {
    return b1_node_create_flags(base, slot, id, 0, out);
}

int b1_node_create_flags(void *base, uint32_t slot, uint64_t id, uint32_t flags, uint64_t *out) {
    if (flags & ~(uint32_t)B1_NODE_QUIET) return -EINVAL;
    struct b1_header *h = HDR(base);
    uint32_t n = b1_alloc_index(base, &h->free_nodes, &h->nodes_bump, LIM(base).max_nodes + 1,
                                offsetof(struct b1_node, next_free), sizeof(struct b1_node),
                                (char *)NODE(base, 0));
    if (!n) return -ENOSPC;
    uint32_t hi = b1_handle_alloc(base);
    if (!hi) {
        b1_free_index(&h->free_nodes, n, &NODE(base, n)->next_free);
        return -ENOSPC;
    }
    struct b1_peer *p;
    int r = b1_lock_live(base, slot, id, &p);
    if (r == 0 && (r = b1_charge_handle(p, id))) b1_unlock(p);
    if (r) {
        b1_handle_free(base, hi);
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
    nd->flags = flags;
    hd->peer_id = id;
    hd->peer_slot = slot;
    hd->charger = (uint32_t)(id % B1_CHARGERS); /* its own share */
    hd->node = n;
    hd->node_gen = nd->gen;
    hd->refs = 1;
    nd->owner_handle = b1_handle_id(base, hi);
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
    struct b1_peer *owner = b1_lock_owner(base, n, gen);
    if (!owner) return -ESTALE;
    struct b1_node *nd = NODE(base, n);
    uint32_t hi;
    if (nd->state != B1_NODE_ALIVE && nd->state != B1_NODE_DESTROYING)
        r = -ESTALE;
    else
        r = b1_handle_get_locked(base, n, to_slot, to_id, id, &hi);
    if (r == 0) {
        HANDLE(base, hi)->refs++;
        *out = b1_handle_id(base, hi);
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
    struct b1_peer *owner = b1_lock_owner(base, n, gen);
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
    int put = b1_handle_put_locked(base, hi, 1, 0);
    b1_unlock(owner);
    B1_KILL_POINT(B1_KILL_RELEASE);
    B1_NOTICES(nt);
    b1_put_done(base, put, n, gen, &nt);
    b1_notices_send(base, &nt);
    return 0;
}

/* Release every reference a disconnected peer holds (in-flight ones go with their
 * messages, which are dropped at the peer). */
void b1_drop_peer_handles(void *base, uint32_t slot, uint64_t id) {
    uint32_t bump = b1_bounded(&HDR(base)->handles_bump, LIM(base).max_handles);
    for (uint32_t hi = 1; hi < bump; hi++) {
        struct b1_handle *hd = HANDLE(base, hi);
        if (hd->peer_slot != slot || hd->peer_id != id || hd->refs == 0) continue;
        uint32_t n = hd->node, gen = hd->node_gen, hgen = hd->gen;
        struct b1_peer *owner = b1_lock_owner(base, n, gen);
        if (!owner) continue;
        int put = 0;
        if (hd->gen == hgen && hd->peer_slot == slot && hd->peer_id == id && hd->refs)
            put = b1_handle_put_locked(base, hi, hd->refs, 0);
        b1_unlock(owner);
        B1_NOTICES(nt);
        b1_put_done(base, put, n, gen, &nt);
        b1_notices_send(base, &nt);
    }
}


/* A NODE_DESTROY was read by peer p (its lock held). */
void b1_destroy_delivered(void *base, struct b1_peer *p, struct b1_entry *e) {
    struct b1_node *nd = NODE(base, e->node);
    if (nd->gen == e->node_gen && e->destination == nd->owner_handle && nd->owner_id == p->id) {
        nd->owner_notified = 1;
        b1_node_free_unnamed_locked(base, e->node);
        return;
    }
    uint32_t hi = b1_handle_index(base, e->destination);
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
    uint32_t max = LIM(base).max_entries, stack[64], top = 0, steps = 0;
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
    if (bump > LIM(base).max_nodes + 1) bump = LIM(base).max_nodes + 1;
    for (uint32_t n = 1; n < bump; n++) {
        struct b1_node *nd = NODE(base, n);
        uint32_t gen = nd->gen;
        if (!nd->release_pending || nd->state != B1_NODE_ALIVE || b1_owner_alive(nd->release_owner)) continue;
        struct b1_peer *owner = b1_lock_owner(base, n, gen);
        if (!owner) continue;
        int owed = nd->release_pending && nd->state == B1_NODE_ALIVE && !nd->holders &&
                   !b1_owner_alive(nd->release_owner) && !release_queued_locked(base, owner, n, gen);
        if (owed) nd->release_owner = b1_self();
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
    B1_NOTICES(nt); /* stays empty: a NODE_RELEASE carries no handle */
    if (b1_tx_prepare_raw(base, &tx, B1_MSG_NODE_RELEASE, NULL, 0, 0) == 0) b1_tx_run(base, &tx, &nt);
    b1_notices_send(base, &nt);
}

void b1_notices_send_all(void *base, struct b1_notices *nt) {
    for (uint32_t i = 0; i < nt->n; i++) b1_notify_release(base, nt->v[i].node, nt->v[i].gen);
    if (nt->v != nt->inline_v) free(nt->v);
    nt->n = 0;
    nt->cap = B1_NOTICES_INLINE;
    nt->v = nt->inline_v;
}

/* ---- destruction ---- */

struct destroy_check {
    const uint32_t *nodes;
    const uint32_t *versions;
    uint32_t n;
    int disconnecting;
};

/* Under the owner's lock at the stamp: refuse if a holder was added since the
 * destinations were collected; else fix the destruction key, stamp the record and mark the
 * nodes DESTROYED, in that order.  The record's stamp is the one store that decides: a
 * destroyer killed before it leaves nodes DESTROYING with their key set and an unstamped
 * record, one killed after it a stamped record; the next b1_lock_nodes of the owner rolls
 * the nodes back or forward to match (handle.c), before any reaper commits the record's
 * blocks (reap.c). */
static int destroy_stamp_check(void *base, struct b1_tx *tx, void *arg) {
    struct destroy_check *dc = arg;
    for (uint32_t i = 0; i < dc->n; i++)
        if (NODE(base, dc->nodes[i])->holders_version != dc->versions[i]) return -EAGAIN;
    for (uint32_t i = 0; i < dc->n; i++) {
        struct b1_node *nd = NODE(base, dc->nodes[i]);
        nd->destroy_msg = tx->msg; /* 0 when every copy was dropped: the record is gone */
        nd->destroy_seq = tx->seq;
        /* it reads nothing more (a quiet node's owner is sent nothing) */
        nd->owner_notified = dc->disconnecting != B1_DESTROY_NOTIFY || (nd->flags & B1_NODE_QUIET);
        nd->destroy_ts = tx->ts;
    }
    if (tx->msg) __atomic_store_n(&MSG(base, tx->msg)->ts, tx->ts, __ATOMIC_RELEASE);
    for (uint32_t i = 0; i < dc->n; i++) NODE(base, dc->nodes[i])->state = B1_NODE_DESTROYED;
    return 0;
}

/* Roll back the destructions whose destroyer died before its stamp: their nodes were left
 * DESTROYING (the stamp makes them DESTROYED under the same lock), their transactions'
 * blocks are removed by reap.c, so the nodes are ALIVE again and may be destroyed anew.
 * A departing owner's own disconnect takes such nodes as they are (peer.c).  Returns how
 * many. */
uint32_t b1_nodes_reap(void *base) {
    struct b1_header *h = HDR(base);
    uint32_t bump = atomic_load(&h->nodes_bump), done = 0;
    if (bump > LIM(base).max_nodes + 1) bump = LIM(base).max_nodes + 1;
    for (uint32_t i = 1; i < bump; i++) {
        struct b1_node *nd = NODE(base, i);
        if (__atomic_load_n(&nd->state, __ATOMIC_RELAXED) != B1_NODE_DESTROYING ||
            b1_owner_alive(__atomic_load_n(&nd->destroyer, __ATOMIC_RELAXED)))
            continue;
        struct b1_peer *owner = b1_lock_owner(base, i, nd->gen);
        if (!owner) continue;
        if (nd->state == B1_NODE_DESTROYING && owner->state == B1_PEER_ACTIVE && !b1_owner_alive(nd->destroyer)) {
            nd->state = B1_NODE_ALIVE;
            nd->destroyer = 0;
            done++;
        }
        b1_unlock(owner);
    }
    return done;
}

int b1_destroy_nodes(void *base, uint32_t slot, uint64_t id, const uint32_t *nodes, uint32_t n,
                     int disconnecting, uint64_t *stamp) {
    uint32_t *versions = malloc(n * sizeof *versions);
    if (!versions) return -ENOMEM;
    B1_NOTICES(nt); /* stays empty: a NODE_DESTROY carries no handle */
    struct b1_peer *p = PEER(base, slot);
    int r, first = 1;
    for (;;) {
        if ((r = b1_lock_nodes(base, slot, p))) break;
        if (p->id != id || p->state != (disconnecting == B1_DESTROY_DISCONNECT ? B1_PEER_DISCONNECTING : B1_PEER_ACTIVE)) {
            b1_unlock(p);
            r = -ESHUTDOWN;
            break;
        }
        /* validate all, then mark all: a failed call changes nothing */
        for (uint32_t i = 0; i < n && !r; i++) {
            struct b1_node *nd = NODE(base, nodes[i]);
            /* a departing owner also takes the nodes whose destroyer died before the stamp;
             * a reset only those (a live destroyer's transaction is its own) */
            int from = nd->state == B1_NODE_ALIVE ||
                       (nd->state == B1_NODE_DESTROYING &&
                        (disconnecting == B1_DESTROY_DISCONNECT ||
                         (disconnecting == B1_DESTROY_RESET && !b1_owner_alive(nd->destroyer))));
            if (nd->owner_slot != slot || nd->owner_id != id) r = -EREMOTE;
            else if (first ? !from : nd->state != B1_NODE_DESTROYING) r = -ESTALE;
        }
        uint32_t count = 0;
        for (uint32_t i = 0; i < n && !r; i++) {
            struct b1_node *nd = NODE(base, nodes[i]);
            nd->state = B1_NODE_DESTROYING;
            nd->destroyer = b1_self();
            nd->destroy_ts = 0; /* set only in the stamp's hold (destroy_stamp_check) */
            versions[i] = nd->holders_version;
            if (nd->flags & B1_NODE_QUIET) continue; /* a reply node: nobody is told */
            count += disconnecting == B1_DESTROY_NOTIFY;
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
            if (nd->flags & B1_NODE_QUIET) continue;
            if (disconnecting == B1_DESTROY_NOTIFY)
                dests[k++] = (struct b1_dest){.peer_id = id, .owner_handle = nd->owner_handle,
                                              .peer_slot = slot, .node = nodes[i], .node_gen = nd->gen};
            FOR_HOLDERS(base, nd, hi) {
                if (k == count) { /* longer than when counted: only a scribbler does that */
                    b1_bad = 1;
                    break;
                }
                struct b1_handle *hd = HANDLE(base, hi);
                dests[k++] = (struct b1_dest){.peer_id = hd->peer_id, .owner_handle = b1_handle_id(base, hi),
                                              .peer_slot = hd->peer_slot, .node = nodes[i],
                                              .node_gen = nd->gen};
            }
        }
        b1_unlock(p);
        first = 0;
        count = k; /* what was filled: the walk's count bounds it, never the other way */

        struct destroy_check dc = {nodes, versions, n, disconnecting};
        if (count == 0) {
            /* nobody to notify (a departing owner with no holders): stamp alone */
            struct b1_tx tx = {.sender_slot = slot, .sender_id = id, .n = 0, .dests = NULL};
            tx.seq = atomic_fetch_add(&p->tx_seq, 1);
            B1_KILL_POINT(B1_KILL_DESTROY);
            r = b1_tx_stamp_as(base, &tx, disconnecting == B1_DESTROY_DISCONNECT, destroy_stamp_check, &dc);
            if (r == -EAGAIN) continue;
            if (!r && stamp) stamp[0] = tx.ts, stamp[1] = tx.seq;
            break;
        }
        struct b1_tx tx = {.sender_slot = slot, .sender_id = id, .n = count, .dests = dests};
        r = b1_tx_prepare_raw(base, &tx, B1_MSG_NODE_DESTROY, NULL, 0, 0);
        for (uint32_t i = 0; i < count && !r; i++) r = b1_tx_stage_nt(base, &tx, i, &nt);
        if (!r) B1_KILL_POINT(B1_KILL_DESTROY);
        if (!r) r = b1_tx_stamp_as(base, &tx, disconnecting == B1_DESTROY_DISCONNECT, destroy_stamp_check, &dc);
        if (r) {
            if (tx.msg) b1_tx_abort_nt(base, &tx, &nt);
            free(dests);
            if (r == -EAGAIN) continue; /* a holder arrived: collect again */
            break;
        }
        for (uint32_t i = 0; i < count && count > 1; i++) b1_tx_sync(base, &tx, i);
        for (uint32_t i = 0; i < count; i++) b1_tx_commit_nt(base, &tx, i, &nt);
        if (stamp) stamp[0] = tx.ts, stamp[1] = tx.seq;
        free(dests);
        break;
    }
    if (r && !first) {
        /* could not finish: the nodes stay alive */
        if (b1_lock_nodes(base, slot, p) == 0) {
            for (uint32_t i = 0; i < n; i++)
                if (NODE(base, nodes[i])->state == B1_NODE_DESTROYING) NODE(base, nodes[i])->state = B1_NODE_ALIVE;
            b1_unlock(p);
        }
    }
    b1_notices_send(base, &nt);
    free(versions);
    return r;
}

int b1_destroy(void *base, uint32_t slot, uint64_t id, const uint64_t *handles, uint32_t n,
               int release, uint64_t *stamp) {
    if (n == 0 || n > LIM(base).max_dests) return -EINVAL;
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
    if (!r) r = b1_destroy_nodes(base, slot, id, nodes, n, B1_DESTROY_NOTIFY, stamp);
    if (!r && release) {
        for (uint32_t i = 0; i < n; i++) {
            uint32_t hi = b1_handle_lookup(base, slot, id, handles[i]);
            if (!hi || b1_lock_nodes(base, slot, p)) continue;
            int put = 0;
            /* one reference, as bus1's NODES_DESTROY_FLAG_RELEASE_HANDLES drops one */
            if (b1_handle_lookup(base, slot, id, handles[i]))
                put = b1_handle_put_locked(base, hi, 1, 0);
            b1_unlock(p);
            B1_NOTICES(nt);
            b1_put_done(base, put, nodes[i], NODE(base, nodes[i])->gen, &nt);
            b1_notices_send(base, &nt);
        }
    }
    free(nodes);
    return r;
}
