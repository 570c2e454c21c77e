/*
 * send.c -- sending: the public transaction steps and the whole send (tx.c orders them).
 *
 * Invariants:
 *   - A send is all-or-nothing until it stamps: every handle it names is the sender's,
 *     every copy and registration is made before anything is staged, and a failure before
 *     the stamp unwinds all of it.
 *   - Every public step returns with the NODE_RELEASE notices it owed sent (node.h):
 *     a caller that steps a transaction by hand sees the same bus as b1_send leaves.
 *   - A reserved send (b1_send_reserve) is a prepared transaction whose payload the caller
 *     writes in place; it is queued only by b1_send_commit, which ends it either way (run,
 *     or aborted by its failure), as b1_send_abort does: tx->msg is 0 once it has ended.
 *
 * Lock rules: none held across calls here; each step takes one peer's lock at a time.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "alloc.h"
#include "fds.h"
#include "message.h"
#include "node.h"
#include "queue.h"
#include "slot.h"
#include "tx.h"

/* The tag of the calling thread's b1_frame_send under way (0 for every other send). */
static __thread uint32_t send_tag;

/* The checks every prepare makes first: the limits, and the sender still itself. */
static int prepare_checks(void *base, struct b1_tx *tx, uint32_t slot, uint64_t id, uint32_t n, uint32_t len,
                          uint32_t n_handles) {
    tx->msg = 0;
    if (n == 0 || n > LIM(base).max_dests) return -EINVAL;
    if (len > LIM(base).max_payload || n_handles > LIM(base).max_msg_handles) return -EMSGSIZE;
    if (slot == 0 || slot > LIM(base).max_peers) return -EINVAL;
    struct b1_peer *sender = PEER(base, slot);
    if (__atomic_load_n(&sender->id, __ATOMIC_ACQUIRE) != id) return b1_peer_gone(base, id);
    if (__atomic_load_n(&sender->state, __ATOMIC_ACQUIRE) != B1_PEER_ACTIVE) return -ESHUTDOWN;
    return 0;
}

/* The rest of a prepare once tx->dests are resolved: quotas, the record, the entries, the
 * carried handles' registrations. */
static int prepare_resolved(void *base, struct b1_tx *tx, const char *payload, uint32_t len,
                            const uint64_t *handles, uint32_t n_handles, uint32_t flags) {
    uint32_t n = tx->n;
    /* quotas of a multicast, read without the locks: a refusal found here touches nothing,
     * not even a clock; the stage re-checks under each lock (a race there unwinds the
     * blocks).  A unicast's stage checks before it changes anything, and a partial send
     * (B1_SEND_CONTINUE) leaves each destination to its stage. */
    for (uint32_t i = 0; i < n && n > 1 && !(flags & B1_SEND_CONTINUE); i++) {
        struct b1_peer *p = PEER(base, tx->dests[i].peer_slot);
        if (!b1_charge_fits(p, tx->sender_id, len, 0)) return -EDQUOT;
    }
    int r = b1_tx_prepare_raw(base, tx, B1_MSG_DATA, payload, len, n_handles);
    if (!r) MSG(base, tx->msg)->n_fds = b1_fds_staged();
    if (!r && n_handles) {
        B1_NOTICES(nt);
        r = b1_tx_register_handles(base, tx, handles, n_handles, &nt);
        b1_notices_send(base, &nt);
        if (r) { /* the registrations are undone; each entry puts its reference */
            for (uint32_t i = 0; i < n; i++) b1_entry_free(base, tx->dests[i].entry);
            tx->msg = 0;
        }
    }
    return r;
}

int b1_tx_prepare(void *base, struct b1_tx *tx, uint32_t slot, uint64_t id,
                  const uint64_t *dests, uint32_t n, const char *payload, uint32_t len,
                  const uint64_t *handles, uint32_t n_handles, uint32_t flags) {
    int r = prepare_checks(base, tx, slot, id, n, len, n_handles);
    if (r) return r;
    if ((flags & B1_SEND_REQUEST) && !n_handles) return -EINVAL; /* no reply capability */
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
    r = prepare_resolved(base, tx, payload, len, handles, n_handles, flags);
    if (!r) {
        struct b1_msg *m = MSG(base, tx->msg);
        m->flags = flags & B1_SEND_REQUEST;
        m->tag = send_tag;
    }
    return r;
}

/* Prepare tx as first was, to the destinations first resolved, with its own payload and no
 * carried handles: a batch's next send, as if its handles were looked up when first's were. */
static int prepare_like(void *base, struct b1_tx *tx, const struct b1_tx *first, const char *payload,
                        uint32_t len) {
    int r = prepare_checks(base, tx, first->sender_slot, first->sender_id, first->n, len, 0);
    if (r) return r;
    tx->sender_slot = first->sender_slot;
    tx->sender_id = first->sender_id;
    tx->n = first->n;
    memcpy(tx->dests, first->dests, first->n * sizeof *tx->dests);
    return prepare_resolved(base, tx, payload, len, NULL, 0, 0);
}

int b1_tx_stage(void *base, struct b1_tx *tx, uint32_t i) {
    B1_NOTICES(nt);
    int r = b1_tx_stage_nt(base, tx, i, &nt);
    b1_notices_send(base, &nt);
    return r;
}

int b1_tx_commit(void *base, struct b1_tx *tx, uint32_t i) {
    B1_NOTICES(nt);
    int r = b1_tx_commit_nt(base, tx, i, &nt);
    b1_notices_send(base, &nt);
    return r;
}

void b1_tx_abort(void *base, struct b1_tx *tx) {
    B1_NOTICES(nt);
    b1_tx_abort_nt(base, tx, &nt);
    b1_notices_send(base, &nt);
}

/* A transaction that ran: counted as sent, its ts returned. */
static int64_t sent(void *base, struct b1_tx *tx) {
    struct b1_peer *sender = PEER(base, tx->sender_slot);
    if (__atomic_load_n(&sender->id, __ATOMIC_RELAXED) == tx->sender_id) /* not a new peer of the slot */
        atomic_fetch_add_explicit(&sender->sent, 1, memory_order_relaxed);
    if (tx->ts > INT64_MAX) { /* only a scribbled clock gets here */
        b1_bad = 1;
        return -EBADMSG;
    }
    return (int64_t)tx->ts;
}

/* A whole send: prepared and run, all-or-nothing -- or with `errors`, partial (each
 * destination's failure left there, B1_SEND_CONTINUE); 0 when a partial one reached none. */
static int64_t send_whole(void *base, uint32_t slot, uint64_t id, const uint64_t *dests, uint32_t n,
                          const char *payload, uint32_t len, const uint64_t *handles,
                          uint32_t n_handles, uint32_t flags, int32_t *errors, uint64_t *seq) {
    if (n == 0 || n > LIM(base).max_dests) return -EINVAL;
    /* small multicasts on the stack, large ones on the heap (threads have small stacks) */
    struct b1_dest small[16], *ds = n <= 16 ? small : malloc(n * sizeof *ds);
    if (!ds) return -ENOMEM;
    struct b1_tx tx = {.dests = ds};
    int r = b1_tx_prepare(base, &tx, slot, id, dests, n, payload, len, handles, n_handles, flags);
    if (!r) {
        B1_NOTICES(nt);
        r = errors ? b1_tx_run_partial(base, &tx, errors, &nt) : b1_tx_run(base, &tx, &nt);
        b1_notices_send(base, &nt);
    }
    if (ds != small) free(ds);
    if (r) return r;
    if (!tx.msg) return 0;
    *seq = tx.seq;
    return sent(base, &tx);
}

int64_t b1_send(void *base, uint32_t slot, uint64_t id, const uint64_t *dests, uint32_t n,
                const char *payload, uint32_t len, const uint64_t *handles,
                uint32_t n_handles, uint32_t flags, uint64_t *seq) {
    return send_whole(base, slot, id, dests, n, payload, len, handles, n_handles, flags, NULL, seq);
}

int64_t b1_send_partial(void *base, uint32_t slot, uint64_t id, const uint64_t *dests, uint32_t n,
                        const char *payload, uint32_t len, const uint64_t *handles,
                        uint32_t n_handles, uint32_t flags, int32_t *errors, uint64_t *seq) {
    if (n == 0 || n > LIM(base).max_dests || (flags & ~B1_SEND_SENDER_IDLE)) return -EINVAL;
    if ((flags & B1_SEND_SENDER_IDLE) && slot && slot <= LIM(base).max_peers) {
        /* lock-free, as b1_peer_ready reads it: a hint the caller asks again at each send */
        uint64_t ts = atomic_load(&PEER(base, slot)->front_ts);
        if (ts && !(ts & 1)) return -EAGAIN;
    }
    int64_t ts = send_whole(base, slot, id, dests, n, payload, len, handles, n_handles, B1_SEND_CONTINUE,
                            errors, seq);
    int64_t failed = 0;
    for (uint32_t i = 0; i < n && !failed && ts >= 0; i++) failed = errors[i] != 0;
    return ts < 0 ? ts : ts | failed; /* a stamp is even */
}

int64_t b1_frame_send_partial(struct b1_frame *f, uint32_t slot, uint64_t id, uint32_t n,
                              const char *payload, uint32_t len, uint32_t n_handles, uint32_t flags,
                              int32_t *errors) {
    return b1_send_partial(f->base, slot, id, f->dests, n, payload, len, f->handles, n_handles, flags, errors,
                           &f->seq);
}

/* ---- the hot calls over a per-thread frame (see struct b1_frame) ---- */

int64_t b1_frame_send(struct b1_frame *f, uint32_t slot, uint64_t id, uint64_t dest, uint32_t n,
                      const char *payload, uint32_t len, uint32_t n_handles, uint32_t flags) {
    send_tag = f->tag;
    f->tag = 0;
    int64_t r = b1_send(f->base, slot, id, n ? f->dests : &dest, n ? n : 1, payload, len,
                        f->handles, n_handles, flags, &f->seq);
    send_tag = 0;
    return r;
}

/* Sends without carried handles go B1_BATCH at a time through b1_tx_run_batch (one lock
 * hold per step and destination for the batch); with handles, each is b1_frame_send. */
#define B1_BATCH 32

int b1_frame_send_iov(struct b1_frame *f, uint32_t slot, uint64_t id, uint64_t dest, uint32_t n,
                      const char *const *payloads, const uint32_t *lens, uint32_t count,
                      uint32_t n_handles, uint32_t flags) {
    void *base = f->base;
    if (n_handles || LIM(base).inject || b1_fds_staged()) { /* a batch posts no descriptors */
        for (uint32_t i = 0; i < count; i++) {
            int64_t r = b1_frame_send(f, slot, id, dest, n, payloads[i], lens[i], n_handles, flags);
            if (r < 0) return i ? (int)i : (int)r;
        }
        return (int)count;
    }
    const uint64_t *dests = n ? f->dests : &dest;
    uint32_t nd = n ? n : 1;
    if (nd > LIM(base).max_dests) return -EINVAL;
    struct b1_tx tx[B1_BATCH];
    /* a unicast batch's copies on the stack, a multicast's on the heap */
    struct b1_dest one[B1_BATCH], *ds = nd == 1 ? one : malloc(sizeof *ds * nd * B1_BATCH);
    if (!ds) return -ENOMEM;
    uint32_t done = 0;
    int ret = (int)count;
    while (done < count) {
        uint32_t k = count - done < B1_BATCH ? count - done : B1_BATCH, ready = 0;
        int r = 0;
        /* the handles are looked up once a batch: every send of it goes to the same peers */
        for (; ready < k; ready++) {
            tx[ready] = (struct b1_tx){.dests = &ds[ready * nd]};
            r = ready ? prepare_like(base, &tx[ready], &tx[0], payloads[done + ready], lens[done + ready])
                      : b1_tx_prepare(base, &tx[0], slot, id, dests, nd, payloads[done], lens[done], NULL, 0,
                                      flags);
            if (r) break;
        }
        int err = 0;
        B1_NOTICES(nt);
        uint32_t ran = b1_tx_run_batch(base, tx, ready, &err, &nt);
        b1_notices_send(base, &nt);
        for (uint32_t i = 0; i < ran; i++) {
            int64_t ts = sent(base, &tx[i]);
            if (ts < 0) {
                ret = done + i ? (int)(done + i) : (int)ts;
                goto out;
            }
            f->seq = tx[i].seq;
        }
        done += ran;
        if (!err) err = r;
        if (err) {
            ret = done ? (int)done : err;
            goto out;
        }
    }
out:
    if (ds != one) free(ds);
    return ret;
}

int b1_frame_send_many(struct b1_frame *f, uint32_t slot, uint64_t id, uint64_t dest, uint32_t n,
                       const char *data, const uint32_t *lens, uint32_t count,
                       uint32_t n_handles, uint32_t flags) {
    const char *ptrs[B1_BATCH];
    uint64_t off = 0;
    uint32_t done = 0;
    while (done < count) {
        uint32_t k = count - done < B1_BATCH ? count - done : B1_BATCH;
        for (uint32_t i = 0; i < k; i++) {
            ptrs[i] = data + off;
            off += lens[done + i];
        }
        int r = b1_frame_send_iov(f, slot, id, dest, n, ptrs, lens + done, k, n_handles, flags);
        if (r < 0) return done ? (int)done : r;
        done += (uint32_t)r;
        if ((uint32_t)r < k) return (int)done;
    }
    return (int)count;
}

/* ---- zero-copy send: reserve, write in place, commit ---- */

int64_t b1_send_reserve(void *base, struct b1_reservation *res, uint32_t slot, uint64_t id,
                        const uint64_t *dests, uint32_t n, uint32_t len, const uint64_t *handles,
                        uint32_t n_handles, uint32_t flags) {
    struct b1_tx *tx = &res->tx;
    if (n == 1) tx->dests = &res->one;
    if (!tx->dests) return -EINVAL;
    int r = b1_tx_prepare(base, tx, slot, id, dests, n, NULL, len, handles, n_handles, flags);
    if (r) return r;
    return (int64_t)(msg_payload(MSG(base, tx->msg)) - (char *)base);
}

int64_t b1_send_commit(void *base, struct b1_reservation *res) {
    struct b1_tx *tx = &res->tx;
    if (!tx->msg || tx->ts) return -EINVAL;
    B1_NOTICES(nt);
    int r = b1_tx_run(base, tx, &nt);
    b1_notices_send(base, &nt);
    tx->msg = 0;
    return r ? r : sent(base, tx);
}

int b1_send_abort(void *base, struct b1_reservation *res) {
    struct b1_tx *tx = &res->tx;
    if (!tx->msg || tx->ts) return -EINVAL;
    b1_tx_abort(base, tx);
    tx->msg = 0;
    return 0;
}
