/*
 * tx.c -- the send transaction, as bus1 orders it (send.c runs it, node.c runs its own).
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
 * b1_tx_run_batch runs several transactions to the same destinations with one hold per
 * step and destination for all of them: a block of each is staged everywhere before any
 * is stamped, they stamp in order, and every destination is synced before any commits,
 * so each is the transaction it would have been alone, with the same ordering.
 *
 * Invariants:
 *   - Until the commit, a destination's copy is a block (odd ts) that keeps every later
 *     entry of that queue from being received: nothing can overtake a message in flight.
 *   - The message record holds one reference per destination not yet received or dropped.
 *   - A destination that disconnects mid-transaction flushes its queue; the transaction
 *     notices at its next step (peer no longer active) and frees its entry itself.  One
 *     that resets hands a data block back (queue 0): its commit drops it, as bus1's reset
 *     drops what is in flight.
 *   - Quotas are charged at the stage, under the destination's lock, so a commit never
 *     fails; a send that would exceed one fails with EDQUOT and unwinds what it staged.
 *   - At the front of a queue an entry may still be dropped rather than delivered: a data
 *     message ordered after its node's destruction, a NODE_RELEASE withdrawn because the
 *     node was re-acquired (recv.c asks message.c and node.c, under the owner's lock).
 *   - The B1_INJECT_* modes exist only to prove the checker; each breaks one rule above and
 *     is selected once, at bus creation.
 *
 * Lock rules: one peer's lock at a time, held for one queue operation (b1_tx_stamp_as's
 * `check` runs under the sender's); a copy is dropped with no lock held, and the notices
 * its carried handles owe are handed up in nt (tx.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "alloc.h"
#include "fds.h"
#include "kill.h"
#include "message.h"
#include "queue.h"
#include "tx.h"

static void inject_pause(void *base) {
    uint32_t ns = LIM(base).inject_pause_ns;
    if (ns) {
        struct timespec ts = {0, (long)ns};
        nanosleep(&ts, NULL);
    }
}

static int stages_block(void *base) {
    uint32_t inject = LIM(base).inject;
    return inject != B1_INJECT_NO_BLOCK && inject != B1_INJECT_FIFO;
}

/* Give up one destination's copy: free its entry, its handle registrations, its reference. */
static void drop_dest(void *base, struct b1_tx *tx, struct b1_dest *d, uint32_t i, struct b1_notices *nt) {
    struct b1_shape sh;
    if (tx->type == B1_MSG_DATA && b1_msg_shape(base, tx->msg, i, &sh))
        b1_tx_unregister_handles(base, MSG(base, tx->msg), &sh, i, nt);
    d->state = B1_DEST_DROPPED;
    b1_entry_free(base, d->entry); /* with it, the copy's reference to the record */
}

/* Has d's block been handed back to the transaction (a reset's flush took it, reset.c)? */
static int given_back(void *base, const struct b1_dest *d) {
    return stages_block(base) && d->state != B1_DEST_COMMITTED && ENTRY(base, d->entry)->queue == 0;
}

/* Take a staged copy out of a queue that is still its own (the peer's lock is held).
 * A DISCONNECTED queue was flushed already, and a given-back copy taken out by a reset:
 * neither is in it any more. */
static int unstage_locked(void *base, struct b1_peer *p, struct b1_dest *d) {
    if (p->id != d->peer_id || p->state == B1_PEER_DISCONNECTED || given_back(base, d)) return 0;
    return b1_queue_give_back_locked(base, p, d->entry, stages_block(base) || d->state == B1_DEST_COMMITTED);
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
    m->n_fds = 0; /* a send's own are recorded by b1_tx_prepare, as its flags and tag */
    m->flags = m->tag = 0;
    m->type = type;
    if (len && payload) memcpy(msg_payload(m), payload, len); /* NULL: written in place (send.c) */
    for (uint32_t i = 0; i < n; i++) {
        uint32_t e = b1_entry_alloc(base);
        if (!e) {
            /* each freed entry puts its reference; the record is still this call's alone,
             * so the references of the copies never made go in one */
            while (i--) b1_entry_free(base, tx->dests[i].entry);
            atomic_store(&m->refs, 1);
            b1_msg_put(base, tx->msg);
            tx->msg = 0;
            return -EXFULL;
        }
        tx->dests[i].entry = e;
        tx->dests[i].state = B1_DEST_PREPARED;
        /* the transaction's from here on (layout.h): the reaper frees it if the process dies */
        struct b1_entry *en = ENTRY(base, e);
        en->ts = 0;
        en->idx = i;
        en->queue = 0;
        en->type = type;
        __atomic_store_n(&en->msg, tx->msg, __ATOMIC_RELEASE);
    }
    struct b1_peer *sender = PEER(base, tx->sender_slot);
    tx->seq = atomic_fetch_add(&sender->tx_seq, 1);
    tx->max_ts = __atomic_load_n(&sender->clock, __ATOMIC_RELAXED); /* best first estimate */
    for (uint32_t i = 0; i < n; i++) {
        struct b1_dest *d = &tx->dests[i];
        struct b1_entry *e = ENTRY(base, d->entry);
        e->sender = tx->sender_id;
        e->seq = tx->seq;
        e->destination = d->owner_handle;
        e->node = d->node;
        e->node_gen = d->node_gen;
    }
    return 0;
}

/* Under p's lock, p active: charge d's copy to p's quota, sync p's clock to the running
 * maximum and insert d's block at clock + 1.  -EDQUOT changes nothing.  *woke: whether
 * the front changed. */
static inline __attribute__((always_inline)) int stage_locked(void *base, struct b1_tx *tx, struct b1_peer *p, struct b1_dest *d,
                        int *woke) {
    if (tx->type == B1_MSG_DATA) {
        struct b1_msg *m = MSG(base, tx->msg);
        int r = b1_charge_locked(p, tx->sender_id, m->len, m->n_fds);
        if (r) return r;
    }
    uint64_t t = b1_sync_clock(p, tx->max_ts);
    if (stages_block(base)) {
        struct b1_entry *en = ENTRY(base, d->entry);
        en->queue = (uint16_t)d->peer_slot; /* the queue's before it is a block (layout.h) */
        en->ts = t + 1;
        *woke |= b1_queue_insert_locked(base, p, d->entry);
        B1_KILL_POINT(B1_KILL_LOCKED);
    }
    tx->max_ts = t;
    d->state = B1_DEST_STAGED;
    return 0;
}

/* Under p's lock, p active: sync p's clock to the stamp (unicast: the sync round) and move
 * d's block to it; `next`, *moved as b1_queue_rekey_locked's.  Returns whether the front
 * changed. */
static inline __attribute__((always_inline)) int commit_locked(void *base, struct b1_tx *tx, struct b1_peer *p,
                                                               struct b1_dest *d, uint32_t next, int *moved) {
    uint32_t inject = LIM(base).inject;
    if (inject != B1_INJECT_NO_SYNC) b1_sync_clock(p, tx->ts);
    uint64_t ts = inject == B1_INJECT_FIFO ? 2 * ++p->fifo_counter : tx->ts;
    d->state = B1_DEST_COMMITTED;
    if (stages_block(base)) return b1_queue_rekey_locked(base, p, d->entry, ts, next, moved);
    ENTRY(base, d->entry)->queue = (uint16_t)d->peer_slot; /* the queue's from here on */
    ENTRY(base, d->entry)->ts = ts;
    return b1_queue_insert_locked(base, p, d->entry);
}

/* The sender's next stamp for tx: even, above its clock and every block tx staged. */
static uint64_t next_stamp(const struct b1_peer *s, const struct b1_tx *tx) {
    return (s->clock > tx->max_ts ? s->clock : tx->max_ts) + 2;
}

int b1_tx_stage_nt(void *base, struct b1_tx *tx, uint32_t i, struct b1_notices *nt) {
    if (i >= tx->n || tx->dests[i].state != B1_DEST_PREPARED || tx->ts) return -EINVAL;
    struct b1_dest *d = &tx->dests[i];
    struct b1_peer *p = PEER(base, d->peer_slot);
    int r = b1_lock(base, p);
    if (r) return r;
    if (p->id != d->peer_id || p->state != B1_PEER_ACTIVE) {
        b1_unlock(p);
        drop_dest(base, tx, d, i, nt); /* the peer is gone: its nodes with it */
        return 0;
    }
    int woke = 0;
    r = stage_locked(base, tx, p, d, &woke);
    b1_unlock(p);
    if (r) return r;
    if (woke) b1_wake(p);
    B1_KILL_POINT(B1_KILL_STAGE);
    if (LIM(base).inject) inject_pause(base);
    return 0;
}

/* Stamp the transaction under its sender's lock; `check` (if any) runs under that lock
 * with tx->ts set (tx->msg 0 when no copy is staged) and may refuse the stamp. */
int b1_tx_stamp_as(void *base, struct b1_tx *tx, int allow_disconnecting,
                   int (*check)(void *, struct b1_tx *, void *), void *arg) {
    if (tx->ts) return -EINVAL;
    uint32_t staged = 0;
    for (uint32_t i = 0; i < tx->n; i++) {
        if (tx->dests[i].state == B1_DEST_PREPARED) return -EINVAL;
        staged += tx->dests[i].state == B1_DEST_STAGED;
    }
    /* every copy dropped put its reference: the record may be free, or another sender's by
     * now, so it is no longer the transaction's (tx->msg 0) and nothing of it is read or
     * written here, nor by `check` */
    if (!staged) tx->msg = 0;
    uint32_t msg = tx->msg;
    /* descriptors: the ones this thread names, as many as the prepare recorded */
    uint32_t n_fds = msg && tx->type == B1_MSG_DATA ? MSG(base, msg)->n_fds : 0;
    int sock = -1;
    if (n_fds) {
        if (n_fds != b1_fds_staged()) return -EINVAL;
        if ((sock = b1_fds_sender()) < 0) return sock;
    }
    struct b1_peer *p = PEER(base, tx->sender_slot);
    int64_t deadline = 0;
    int r;
again:
    if ((r = b1_lock(base, p))) goto out;
    int ok = p->state == B1_PEER_ACTIVE || (allow_disconnecting && p->state == B1_PEER_DISCONNECTING);
    if (p->id != tx->sender_id || !ok) {
        b1_unlock(p);
        r = -ESHUTDOWN;
        goto out;
    }
    uint64_t ts = next_stamp(p, tx);
    tx->ts = ts;
    if (check && (r = check(base, tx, arg))) {
        tx->ts = 0;
        b1_unlock(p);
        goto out;
    }
    /* posted under this lock, just before the stamp is stored: in stamp order (fds.c) */
    uint32_t full = 0;
    if (n_fds && (r = b1_fds_post(base, sock, tx, &full))) {
        tx->ts = 0;
        b1_unlock(p);
        if (r != -EAGAIN) goto out;
        /* a receiver's inbox full: its holders move it while nothing is locked, then the
         * stamp is made again (what was posted is an orphan, or a duplicate the take skips) */
        if (!deadline) deadline = b1_fds_deadline();
        const struct b1_dest *d = &tx->dests[full];
        if ((r = b1_fds_wait_room(base, d->peer_slot, d->peer_id, deadline))) goto out;
        goto again;
    }
    if (n_fds) B1_KILL_POINT(B1_KILL_FDS_SENT);
    p->clock = ts;
    if (msg) MSG(base, msg)->ts = ts;
    b1_unlock(p);
    B1_KILL_POINT(B1_KILL_STAMP);
out:
    if (sock >= 0) close(sock);
    return r;
}

int b1_tx_stamp(void *base, struct b1_tx *tx) { return b1_tx_stamp_as(base, tx, 0, NULL, NULL); }

int b1_tx_sync(void *base, struct b1_tx *tx, uint32_t i) {
    if (i >= tx->n || !tx->ts) return -EINVAL;
    struct b1_dest *d = &tx->dests[i];
    if (d->state == B1_DEST_DROPPED) return 0;
    if (d->state != B1_DEST_STAGED) return -EINVAL;
    if (LIM(base).inject != B1_INJECT_NO_SYNC) {
        struct b1_peer *p = PEER(base, d->peer_slot);
        int r = b1_lock(base, p);
        if (r) return r;
        if (p->id == d->peer_id) b1_sync_clock(p, tx->ts);
        b1_unlock(p);
    }
    d->state = B1_DEST_SYNCED;
    B1_KILL_POINT(B1_KILL_SYNC);
    return 0;
}

int b1_tx_commit_nt(void *base, struct b1_tx *tx, uint32_t i, struct b1_notices *nt) {
    if (i >= tx->n || !tx->ts) return -EINVAL;
    struct b1_dest *d = &tx->dests[i];
    if (d->state == B1_DEST_DROPPED) return 0;
    if (d->state != B1_DEST_STAGED && d->state != B1_DEST_SYNCED) return -EINVAL;
    struct b1_peer *p = PEER(base, d->peer_slot);
    int r = b1_lock(base, p);
    if (r) return r;
    if (p->id != d->peer_id || p->state != B1_PEER_ACTIVE || given_back(base, d)) {
        /* the peer left since staging, or reset: take the copy back out and drop it */
        int woke = unstage_locked(base, p, d);
        b1_unlock(p);
        if (woke) b1_wake(p);
        drop_dest(base, tx, d, i, nt);
        return 0;
    }
    int woke = commit_locked(base, tx, p, d, 0, NULL);
    b1_unlock(p);
    if (woke) b1_wake(p);
    B1_KILL_POINT(B1_KILL_COMMIT);
    if (LIM(base).inject) inject_pause(base);
    return 0;
}

/* Undo a transaction that has not been committed anywhere. */
void b1_tx_abort_nt(void *base, struct b1_tx *tx, struct b1_notices *nt) {
    if (!tx->msg) return;
    for (uint32_t i = 0; i < tx->n; i++) {
        struct b1_dest *d = &tx->dests[i];
        if (d->state == B1_DEST_STAGED || d->state == B1_DEST_SYNCED) {
            struct b1_peer *p = PEER(base, d->peer_slot);
            int woke = 0;
            if (b1_lock(base, p) == 0) {
                woke = unstage_locked(base, p, d);
                b1_unlock(p);
            }
            if (woke) b1_wake(p);
            drop_dest(base, tx, d, i, nt);
        } else if (d->state == B1_DEST_PREPARED) {
            drop_dest(base, tx, d, i, nt);
        }
    }
}

/* A staged transaction's rest: stamp, sync, commit (aborted if it cannot stamp). */
static int stamp_and_commit(void *base, struct b1_tx *tx, struct b1_notices *nt) {
    int r = b1_tx_stamp(base, tx);
    if (r) {
        b1_tx_abort_nt(base, tx, nt);
        return r;
    }
    if (tx->n > 1) /* a single destination is synced inside its commit */
        for (uint32_t i = 0; i < tx->n; i++) b1_tx_sync(base, tx, i);
    for (uint32_t i = 0; i < tx->n; i++) b1_tx_commit_nt(base, tx, i, nt);
    return 0;
}

/* Run a prepared transaction to the end: stage, stamp, sync, commit. */
int b1_tx_run(void *base, struct b1_tx *tx, struct b1_notices *nt) {
    int r = 0;
    for (uint32_t i = 0; i < tx->n && !r; i++) r = b1_tx_stage_nt(base, tx, i, nt);
    if (r) {
        b1_tx_abort_nt(base, tx, nt);
        return r;
    }
    return stamp_and_commit(base, tx, nt);
}

/* bus1's SEND_FLAG_CONTINUE: a destination that cannot take its copy (over its quota, its
 * queue broken) has the copy dropped before anything is stamped and its -errno left in
 * errors[i] (0 for the others, a gone one included); the staged rest is one transaction,
 * run as b1_tx_run runs it.  Nothing staged: nothing is stamped and tx->msg is 0 (the
 * dropped copies put the record).  Returns 0, or the stamp's failure (all aborted). */
int b1_tx_run_partial(void *base, struct b1_tx *tx, int32_t *errors, struct b1_notices *nt) {
    uint32_t staged = 0;
    for (uint32_t i = 0; i < tx->n; i++) {
        int r = b1_tx_stage_nt(base, tx, i, nt);
        errors[i] = r;
        if (r) drop_dest(base, tx, &tx->dests[i], i, nt);
        staged += tx->dests[i].state == B1_DEST_STAGED;
    }
    if (!staged) {
        tx->msg = 0;
        return 0;
    }
    return stamp_and_commit(base, tx, nt);
}

/* Does another of the n destinations name dests[i]'s peer?  (Answered "yes" past 16
 * destinations, where asking would cost more than it saves.) */
static int shares_peer(const struct b1_dest *dests, uint32_t n, uint32_t i) {
    if (n > 16) return 1;
    for (uint32_t k = 0; k < n; k++)
        if (k != i && dests[k].peer_slot == dests[i].peer_slot) return 1;
    return 0;
}

/* Run `count` prepared DATA transactions to the same destinations (dests[i] of every one
 * names the same peer slot and id; no inject mode) in order, each with its own stamp:
 * one hold of each destination's lock stages a block of every transaction, one of the
 * sender's stamps them in order, one of each destination's syncs it to the last stamp
 * (a multicast's sync round: before anything is visible), one of each commits them.
 * Nothing else can be received meanwhile from a queue holding one of these blocks, and
 * each stamp is above its own blocks and every earlier stamp, as count b1_tx_run calls
 * in order would leave them.  Returns how many ran: a prefix, the rest aborted, with
 * *err the first failure (0 when all ran).  A destination gone before the stage (or the
 * commit) has its copies dropped, the transactions still run, as b1_tx_run does. */
uint32_t b1_tx_run_batch(void *base, struct b1_tx *tx, uint32_t count, int *err,
                         struct b1_notices *nt) {
    *err = 0;
    uint32_t n = count ? tx[0].n : 0;
    /* stage: destination by destination, every transaction still in the batch; a refusal
     * ends the batch before the transaction it refused */
    for (uint32_t i = 0; i < n && count; i++) {
        struct b1_dest *d0 = &tx[0].dests[i];
        struct b1_peer *p = PEER(base, d0->peer_slot);
        uint32_t staged = 0;
        int woke = 0, r = b1_lock(base, p);
        if (!r && (p->id != d0->peer_id || p->state != B1_PEER_ACTIVE)) {
            b1_unlock(p);
            for (uint32_t j = 0; j < count; j++) drop_dest(base, &tx[j], &tx[j].dests[i], i, nt);
            continue;
        }
        if (!r) {
            for (; staged < count; staged++)
                if ((r = stage_locked(base, &tx[staged], p, &tx[staged].dests[i], &woke))) break;
            b1_unlock(p);
            if (woke) b1_wake(p);
            B1_KILL_POINT(B1_KILL_STAGE);
        }
        if (r && !*err) *err = r;
        for (uint32_t j = staged; j < count; j++) b1_tx_abort_nt(base, &tx[j], nt);
        count = staged;
    }
    /* stamp the staged ones in order under the sender's lock */
    uint32_t ran = 0;
    if (count) {
        struct b1_peer *s = PEER(base, tx[0].sender_slot);
        int r = b1_lock(base, s);
        if (!r && (s->id != tx[0].sender_id || s->state != B1_PEER_ACTIVE)) {
            b1_unlock(s);
            r = -ESHUTDOWN;
        }
        if (r) {
            if (!*err) *err = r;
        } else {
            /* a destination's copies are staged or dropped alike in every transaction of
             * the batch: with none staged the records were put (b1_tx_stamp_as) */
            uint32_t staged = 0;
            for (uint32_t i = 0; i < n; i++) staged += tx[0].dests[i].state == B1_DEST_STAGED;
            for (; ran < count; ran++) {
                struct b1_tx *t = &tx[ran];
                s->clock = t->ts = next_stamp(s, t);
                if (staged) MSG(base, t->msg)->ts = t->ts;
            }
            b1_unlock(s);
            B1_KILL_POINT(B1_KILL_STAMP);
        }
    }
    for (uint32_t j = ran; j < count; j++) b1_tx_abort_nt(base, &tx[j], nt);
    if (!ran) return 0;
    /* a multicast's sync round (a unicast syncs inside its commit); a copy's state is the
     * same for every transaction of the batch at one destination */
    for (uint32_t i = 0; i < n && n > 1; i++) {
        struct b1_dest *d0 = &tx[0].dests[i];
        if (d0->state != B1_DEST_STAGED) continue;
        struct b1_peer *p = PEER(base, d0->peer_slot);
        if (b1_lock(base, p) == 0) {
            if (p->id == d0->peer_id) b1_sync_clock(p, tx[ran - 1].ts);
            b1_unlock(p);
        }
        for (uint32_t j = 0; j < ran; j++) tx[j].dests[i].state = B1_DEST_SYNCED;
        B1_KILL_POINT(B1_KILL_SYNC);
    }
    /* commit: each destination's blocks move up to their stamps, last first */
    int consecutive = 1;
    for (uint32_t j = 1; j < ran; j++) consecutive &= tx[j].seq == tx[j - 1].seq + 1;
    for (uint32_t i = 0; i < n; i++) {
        struct b1_dest *d0 = &tx[0].dests[i];
        if (d0->state != B1_DEST_STAGED && d0->state != B1_DEST_SYNCED) continue;
        struct b1_peer *p = PEER(base, d0->peer_slot);
        if (b1_lock(base, p)) { /* the destination's lock is unusable: commit one by one (each retries it) */
            for (uint32_t j = 0; j < ran; j++) b1_tx_commit_nt(base, &tx[j], i, nt);
            continue;
        }
        int woke = 0, gone = p->id != d0->peer_id || p->state != B1_PEER_ACTIVE || given_back(base, d0);
        /* Each block's successor is the next transaction's, once that one stayed in place
         * (the last's is looked up): the blocks were staged in one hold at one timestamp,
         * so only an entry of this sender with a sequence number between two of theirs, or
         * another copy of theirs in this queue, could lie between them -- and neither
         * exists when their sequence numbers are consecutive and no other destination of
         * theirs is this peer. */
        int run = consecutive && !shares_peer(tx[0].dests, n, i) &&
                  ENTRY(base, d0->entry)->ts == ENTRY(base, tx[ran - 1].dests[i].entry)->ts;
        int moved = 1;
        for (uint32_t j = ran; j-- > 0;) {
            struct b1_dest *d = &tx[j].dests[i];
            uint32_t next = run && !moved ? tx[j + 1].dests[i].entry : 0;
            woke |= gone ? unstage_locked(base, p, d) : commit_locked(base, &tx[j], p, d, next, &moved);
        }
        b1_unlock(p);
        if (woke) b1_wake(p);
        if (gone)
            for (uint32_t j = 0; j < ran; j++) drop_dest(base, &tx[j], &tx[j].dests[i], i, nt);
        B1_KILL_POINT(B1_KILL_COMMIT);
    }
    return ran;
}
