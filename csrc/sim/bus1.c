/* bus1.c - the C twin of bus1py/causal/bus1.py: bus1's own ordering as message passing (a
 * send is one transaction: stage, stamp, sync round, commit round), over the queue of
 * ordering.h (the twin of bus1py/ordering.py's Queue).
 *
 * Wire (little-endian; the Python module's docstring gives the costs' reading):
 *   STAGE        u8 0 | sender u16 | tx u32 | clock u32 | payload   cost (1, 10, 1, data)
 *   REPLY        u8 1 | tx u32 | clock u32                          cost (0, 9, 0, -)
 *   SYNC         u8 2 | tx u32 | ts u32                             cost (0, 9, 0, -)
 *   ACK          u8 3 | tx u32                                      cost (0, 5, 0, -)
 *   COMMIT       u8 4 | tx u32                                      cost (0, 5, 0, -)
 *   SYNC_COMMIT  u8 5 | tx u32 | ts u32                             cost (0, 9, 0, -)
 * Delivery: the queue's front entry, once committed (even ts); entries sort by
 * (ts, sender, tx).
 *
 * Invariants:
 *   - The sends in flight (Python's `out`) are the transactions base .. base + nsync +
 *     nstage - 1, in slot seq & (cap - 1) of a ring (cap a power of two): the first nsync
 *     are stamped (`syncing`, their ACKs due), the other nstage are not (`staging`, their
 *     REPLYs due). A send leaves only from the front, after every send before it, so the
 *     seqs stay contiguous and base + nsync + nstage is the next transaction's seq.
 *   - A slot's `waiting` counts the bits set in its row of `bits`: the destinations whose
 *     REPLY (unstamped) or ACK (stamped) is due. Its destinations are its row of `dests`
 *     (stride n - 1), in the order the send named them, the order every round's wires go in.
 *   - open[src] lists src's transactions staged here and not yet committed (Python's `open`,
 *     split by sender, in no order): each with its block's ts and its synced ts, or 0 while
 *     unsynced (a synced ts is even and above its block, so never 0). last_tx[src] is the
 *     highest seq of src committed here, or -1.
 *   - held is the queue's length (blocks and the committed entries behind them).
 */
#include "machine.h"
#include "ordering.h"

#include <stdlib.h>

enum { STAGE, REPLY, SYNC, ACK, COMMIT, SYNC_COMMIT };
enum { STAGE_LEN = 11, TX_T_LEN = 9, TX_LEN = 5 };
#define U32_MAX 0xFFFFFFFFu

static const struct sim_cost STAGE_COST = {1, STAGE_LEN - 1, 1, 1};
static const struct sim_cost TX_T_COST = {0, TX_T_LEN, 0, 0};
static const struct sim_cost TX_COST = {0, TX_LEN, 0, 0};

struct rec {
    uint64_t max_ts;        /* the running maximum of the clocks seen (Transaction.max_ts) */
    uint32_t ts;            /* the stamp, 0 until stamped */
    uint32_t k, waiting;
    uint8_t commit;         /* COMMIT wires still due (0 once a SYNC_COMMIT left) */
};

struct open { uint32_t seq, block, synced; };
struct openv { struct open *v; uint32_t len, cap; };

struct bus1 {
    struct sim_machine base;
    struct sim_queue q;
    struct rec *rec;
    uint16_t *dests;
    uint64_t *bits;
    size_t cap, words, stride;
    int64_t first;          /* the oldest send in flight's seq (Python's out's lowest key) */
    size_t nsync, nstage;
    struct openv *open;
    int64_t *last_tx;
};

static int bus1_init(struct sim_machine *m)
{
    struct bus1 *b = (struct bus1 *)m;
    b->words = ((size_t)m->n + 63) / 64;
    b->stride = (size_t)m->n - 1;
    b->open = calloc((size_t)m->n, sizeof *b->open);
    b->last_tx = malloc((size_t)m->n * sizeof *b->last_tx);
    if (!b->open || !b->last_tx)
        return -1;
    for (int j = 0; j < m->n; j++)
        b->last_tx[j] = -1;
    return 0;
}

static void bus1_fini(struct sim_machine *m)
{
    struct bus1 *b = (struct bus1 *)m;
    sim_queue_fini(&b->q);
    free(b->rec);
    free(b->dests);
    free(b->bits);
    for (int j = 0; b->open && j < m->n; j++)
        free(b->open[j].v);
    free(b->open);
    free(b->last_tx);
}

/* ---- the sends in flight ---- */

static size_t slot(const struct bus1 *b, int64_t seq) { return (size_t)seq & (b->cap - 1); }
static uint64_t *row(const struct bus1 *b, size_t s) { return b->bits + s * b->words; }
static int has(const uint64_t *bits, uint32_t d) { return bits[d / 64] >> (d % 64) & 1; }

/* room for one more send in the ring */
static int ring_reserve(struct bus1 *b)
{
    size_t count = b->nsync + b->nstage;
    if (count < b->cap)
        return 0;
    size_t cap = b->cap ? 2 * b->cap : 8;
    struct rec *rec = malloc(cap * sizeof *rec);
    uint16_t *dests = malloc(cap * b->stride * sizeof *dests);
    uint64_t *bits = malloc(cap * b->words * sizeof *bits);
    if (!rec || !dests || !bits) {
        free(rec);
        free(dests);
        free(bits);
        return -1;
    }
    for (int64_t seq = b->first; seq < b->first + (int64_t)count; seq++) {
        size_t from = slot(b, seq), to = (size_t)seq & (cap - 1);
        rec[to] = b->rec[from];
        memcpy(dests + to * b->stride, b->dests + from * b->stride, b->stride * sizeof *dests);
        memcpy(bits + to * b->words, row(b, from), b->words * sizeof *bits);
    }
    free(b->rec);
    free(b->dests);
    free(b->bits);
    b->rec = rec;
    b->dests = dests;
    b->bits = bits;
    b->cap = cap;
    return 0;
}

/* marks every destination of slot s as due to answer */
static void await_all(struct bus1 *b, size_t s)
{
    uint64_t *bits = row(b, s);
    const uint16_t *d = b->dests + s * b->stride;
    for (uint32_t i = 0; i < b->rec[s].k; i++)
        bits[d[i] / 64] |= (uint64_t)1 << (d[i] % 64);
    b->rec[s].waiting = b->rec[s].k;
}

/* the send seq in flight (its slot), or -1 */
static long lookup(const struct bus1 *b, uint32_t seq)
{
    if ((int64_t)seq < b->first || (int64_t)seq >= b->first + (int64_t)(b->nsync + b->nstage))
        return -1;
    return (long)slot(b, seq);
}

static uint8_t *emit_tx(struct sim_step *step, uint32_t dest, int tag, uint32_t seq)
{
    uint8_t *w = sim_emit(step, dest, TX_LEN, TX_COST);
    if (w) {
        w[0] = (uint8_t)tag;
        sim_put32(w + 1, seq);
    }
    return w;
}

static uint8_t *emit_tx_t(struct sim_step *step, uint32_t dest, int tag, uint32_t seq,
                          uint32_t t)
{
    uint8_t *w = sim_emit(step, dest, TX_T_LEN, TX_T_COST);
    if (w) {
        w[0] = (uint8_t)tag;
        sim_put32(w + 1, seq);
        sim_put32(w + 5, t);
    }
    return w;
}

static int bus1_send(struct sim_machine *m, const uint16_t *dests, int k,
                     const uint8_t *payload, size_t len, struct sim_step *step)
{
    struct bus1 *b = (struct bus1 *)m;
    int64_t seq = b->first + (int64_t)(b->nsync + b->nstage);
    if (seq > (int64_t)U32_MAX)
        return sim_fail(step, "process %d exhausted its 32-bit transaction numbers", m->me);
    if (len > U32_MAX - STAGE_LEN)
        return sim_fail(step, "payload of %zu bytes is too long", len);
    if (ring_reserve(b) < 0)
        return sim_fail(step, "out of memory");
    size_t s = slot(b, seq);
    b->rec[s] = (struct rec){.max_ts = b->q.clock, .k = (uint32_t)k, .commit = 1};
    memcpy(b->dests + s * b->stride, dests, (size_t)k * sizeof *dests);
    memset(row(b, s), 0, b->words * sizeof(uint64_t));
    await_all(b, s);
    b->nstage++;
    for (int i = 0; i < k; i++) {
        uint8_t *w = sim_emit(step, dests[i], (uint32_t)(STAGE_LEN + len), STAGE_COST);
        if (!w)
            return -1;
        w[0] = STAGE;
        sim_put16(w + 1, (uint32_t)m->me);
        sim_put32(w + 3, (uint32_t)seq);
        sim_put32(w + 7, (uint32_t)b->q.clock);
        memcpy(w + STAGE_LEN, payload, len);
    }
    return 0;
}

/* Stamps in send order whatever has all its REPLYs; then retires, in send order, what has
 * all its ACKs, sending its COMMITs (Bus1._advance). */
static int advance(struct bus1 *b, struct sim_step *step)
{
    while (b->nstage) {
        int64_t seq = b->first + (int64_t)b->nsync;
        size_t s = slot(b, seq);
        struct rec *r = &b->rec[s];
        if (r->waiting)
            break;
        sim_queue_sync(&b->q, r->max_ts);
        b->q.clock += 2;
        r->ts = (uint32_t)b->q.clock;
        await_all(b, s);
        const uint16_t *d = b->dests + s * b->stride;
        if (r->k == 1 && !b->nsync) {           /* free to commit: fold the sync in */
            r->commit = 0;
            if (!emit_tx_t(step, d[0], SYNC_COMMIT, (uint32_t)seq, r->ts))
                return -1;
        } else {
            for (uint32_t i = 0; i < r->k; i++)
                if (!emit_tx_t(step, d[i], SYNC, (uint32_t)seq, r->ts))
                    return -1;
        }
        b->nstage--;
        b->nsync++;
    }
    while (b->nsync) {
        size_t s = slot(b, b->first);
        struct rec *r = &b->rec[s];
        if (r->waiting)
            break;
        const uint16_t *d = b->dests + s * b->stride;
        for (uint32_t i = 0; r->commit && i < r->k; i++)
            if (!emit_tx(step, d[i], COMMIT, (uint32_t)b->first))
                return -1;
        b->first++;
        b->nsync--;
    }
    return 0;
}

static int on_reply(struct bus1 *b, int src, uint32_t seq, uint32_t clock,
                    struct sim_step *step)
{
    long s = lookup(b, seq);
    if (s < 0 || b->rec[s].ts || !has(row(b, (size_t)s), (uint32_t)src))
        return sim_fail(step, "REPLY from %d for transaction %u, which awaits none", src, seq);
    if (clock & 1)
        return sim_fail(step, "REPLY clock %u is odd", clock);
    struct rec *r = &b->rec[s];
    int head = (int64_t)seq == b->first + (int64_t)b->nsync;
    if (head && r->waiting == 1) {
        /* the stamps this reply releases stay below max(clocks) + 2 per transaction */
        uint64_t top = clock > b->q.clock ? clock : b->q.clock;
        for (size_t i = 0; i < b->nstage; i++) {
            uint64_t t = b->rec[slot(b, (int64_t)seq + (int64_t)i)].max_ts;
            if (t > top)
                top = t;
        }
        if (top + 2 * (uint64_t)b->nstage > U32_MAX)
            return sim_fail(step, "REPLY clock %u leaves no 32-bit timestamps above it", clock);
    }
    row(b, (size_t)s)[src / 64] &= ~((uint64_t)1 << (src % 64));
    r->waiting--;
    if (clock > r->max_ts)
        r->max_ts = clock;
    return head && !r->waiting ? advance(b, step) : 0;
}

static int on_ack(struct bus1 *b, int src, uint32_t seq, struct sim_step *step)
{
    long s = lookup(b, seq);
    if (s < 0 || !b->rec[s].ts || !has(row(b, (size_t)s), (uint32_t)src))
        return sim_fail(step, "ACK from %d for transaction %u, which awaits none", src, seq);
    row(b, (size_t)s)[src / 64] &= ~((uint64_t)1 << (src % 64));
    b->rec[s].waiting--;
    return (int64_t)seq == b->first && !b->rec[s].waiting ? advance(b, step) : 0;
}

/* ---- the transactions staged here ---- */

static struct open *find_open(struct bus1 *b, int src, uint32_t seq)
{
    struct openv *o = &b->open[src];
    for (uint32_t i = 0; i < o->len; i++)
        if (o->v[i].seq == seq)
            return &o->v[i];
    return NULL;
}

static int on_stage(struct bus1 *b, int src, const uint8_t *data, size_t len,
                    struct sim_step *step)
{
    if (len < STAGE_LEN)
        return sim_fail(step, "STAGE wire truncated: %zu bytes", len);
    uint32_t sender = sim_get16(data + 1), seq = sim_get32(data + 3), clock = sim_get32(data + 7);
    if (sender != (uint32_t)src)
        return sim_fail(step, "STAGE from %d names sender %u", src, sender);
    if ((int64_t)seq <= b->last_tx[src] || find_open(b, src, seq))
        return sim_fail(step, "transaction %u of %d was staged here before", seq, src);
    if (clock & 1)
        return sim_fail(step, "STAGE clock %u is odd", clock);
    struct openv *o = &b->open[src];
    size_t cap = o->cap;
    if (sim_reserve((void **)&o->v, &cap, o->len, 1, sizeof *o->v) < 0)
        return sim_fail(step, "out of memory");
    o->cap = (uint32_t)cap;
    uint32_t block;
    if (sim_queue_stage(&b->q, clock, (uint16_t)src, seq, data + STAGE_LEN,
                        (uint32_t)(len - STAGE_LEN), &block) < 0)
        return sim_fail(step, "out of memory staging transaction %u of %d", seq, src);
    o->v[o->len++] = (struct open){seq, block, 0};
    return emit_tx_t(step, (uint32_t)src, REPLY, seq, (uint32_t)b->q.clock) ? 0 : -1;
}

/* hands out every committed entry at the queue's front */
static int deliver(struct bus1 *b, struct sim_step *step)
{
    for (const struct sim_qentry *x; (x = sim_queue_ready(&b->q));) {
        if (sim_deliver(step, x->sender, sim_qentry_payload(x), x->len) < 0)
            return -1;
        sim_queue_pop(&b->q);
    }
    return 0;
}

/* commits open transaction o of src at ts and forgets it */
static int commit(struct bus1 *b, int src, struct open *o, uint32_t ts, struct sim_step *step)
{
    struct open x = *o;
    struct openv *v = &b->open[src];
    *o = v->v[--v->len];
    if ((int64_t)x.seq > b->last_tx[src])
        b->last_tx[src] = x.seq;
    if (sim_queue_commit(&b->q, x.block, (uint16_t)src, x.seq, ts) < 0)
        return sim_fail(step, "no block for transaction %u of %d", x.seq, src);
    return 0;
}

static int bus1_receive(struct sim_machine *m, int src, const uint8_t *data, size_t len,
                        struct sim_step *step)
{
    struct bus1 *b = (struct bus1 *)m;
    if (!len)
        return sim_fail(step, "empty wire");
    int tag = data[0];
    if (tag == STAGE)
        return on_stage(b, src, data, len, step);
    if (tag > SYNC_COMMIT)
        return sim_fail(step, "unknown wire type %d", tag);
    size_t want = tag == ACK || tag == COMMIT ? TX_LEN : TX_T_LEN;
    if (len != want)
        return sim_fail(step, "wire type %d of %zu bytes", tag, len);
    uint32_t seq = sim_get32(data + 1), t = want == TX_T_LEN ? sim_get32(data + 5) : 0;
    if (tag == REPLY)
        return on_reply(b, src, seq, t, step);
    if (tag == ACK)
        return on_ack(b, src, seq, step);
    struct open *o = find_open(b, src, seq);
    if (tag == COMMIT) {
        if (!o || !o->synced)
            return sim_fail(step, "COMMIT from %d for transaction %u, which is not synced "
                            "here", src, seq);
        return commit(b, src, o, o->synced, step) < 0 ? -1 : deliver(b, step);
    }
    /* SYNC or SYNC_COMMIT */
    if (!o || o->synced)
        return sim_fail(step, "wire type %d from %d for transaction %u, which is not staged "
                        "here", tag, src, seq);
    if (t & 1 || t <= o->block)
        return sim_fail(step, "timestamp %u is odd or not above its block", t);
    if (tag == SYNC) {
        sim_queue_sync(&b->q, t);
        o->synced = t;
        return emit_tx(step, (uint32_t)src, ACK, seq) ? 0 : -1;
    }
    if (commit(b, src, o, t, step) < 0 || !emit_tx(step, (uint32_t)src, ACK, seq))
        return -1;
    return deliver(b, step);
}

static long bus1_held(struct sim_machine *m)
{
    return (long)((struct bus1 *)m)->q.len;
}

const struct sim_ops sim_bus1_ops = {
    .name = "bus1", .multicast = SIM_NATIVE, .size = sizeof(struct bus1),
    .init = bus1_init, .fini = bus1_fini, .send = bus1_send, .receive = bus1_receive,
    .held = bus1_held,
};
