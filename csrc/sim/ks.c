/* ks.c - the C twin of bus1py/causal/ks.py: Kshemkalyani-Singhal optimal causal multicast
 * (Algorithm 6.3), O_M computed per destination, held messages as bus1py/causal/holdback.py.
 *
 * Wire (u16 ids, u32 clocks, little-endian), the columnar layout of bus1py/causal/base.py:
 *   k | t_k | nd | no | Dests[nd] | dlen[no] || sender[no] | clock[no] | ids[sum dlen] || payload
 * cost (10 + 2nd + 2no, 6no + 2 sum dlen, no, data). Delivery: a copy M from k is delivered
 * at j iff every entry (m, t) of O_M listing j has t <= SR[m].
 *
 * Invariants:
 *   - A decoded O_M entry (ev, gv) is S = W + 1 words: s << 32 | t, then its Dests mask
 *     (masks.h). Within one sender, entries compare as t does.
 *   - log[s] (row.h) holds sender s's entries in the insertion order of ks.py's dict log[s]: updated
 *     entries keep their place, SND appends the own entry, and a merged row follows the side
 *     ks.py's comprehension iterates. That order reaches the wire, so it is the Python one
 *     for every wire ks.py accepts (also for entries out of clock order).
 *   - Held records are held as holdback.h says, keyed k << 32 | t_k; a record's waits
 *     before its x are met.
 *   - A held record owns a copy of its wire and is decoded again when delivered (decoding is
 *     a function of the bytes); the scratch arrays hold nothing between calls.
 * The hot functions take W and are compiled for W == 1 too (masks.h's BY_W).
 */
#include "columns.h"
#include "holdback.h"
#include "row.h"

#define NONE UINT32_MAX

struct ent { uint32_t s, t; };
struct rec {
    struct hb_node hb;
    uint32_t x, nwait, len;
    struct ent w[];          /* the waits in wire order, then the wire's bytes */
};
/* an entry SND puts on some copy: on all (keep) and/or on those to its hit destinations */
struct item { uint32_t t, io, hit; uint16_t s, rl; uint8_t keep; };

struct ks {
    struct sim_machine base;
    size_t W;
    uint32_t clock, *sr;
    struct row *log;
    struct holdback hb;
    word *dm;
    /* SND scratch: items, their hit masks, the kept entries' ids (encoded), per-dest counts */
    struct item *it;
    word *hits;
    uint8_t *sid;
    uint32_t *hc, *hnk;
    size_t itcap, hitcap, sidcap;
    /* decode scratch: O_M's entries (the last is M itself) grouped by sender in wire order,
     * sender s's at gv[start[s] .. start[s] + cnt[s]); the waits; a row being merged */
    uint32_t k, tk, nw, *cnt, *start;
    const uint8_t *payload;
    size_t plen, evcap, gvcap, wcap;
    word *ev, *gv;
    struct row tmp;                     /* a row being merged */
    struct ent *w;
};

HOT int grow(void *arr, size_t *cap, size_t want, size_t size)
{
    return want <= *cap ? 0 : sim_reserve((void **)arr, cap, 0, want, size);
}

static int ks_init(struct sim_machine *m)
{
    struct ks *q = (struct ks *)m;
    size_t n = (size_t)m->n, W = q->W = (n + 63) / 64;
    q->sr = calloc(5 * n, sizeof *q->sr);      /* with hc, hnk, cnt and start */
    q->log = calloc(n, sizeof *q->log);
    q->dm = calloc(W, sizeof *q->dm);
    if (!q->sr || !q->log || !q->dm || holdback_init(&q->hb, m->n) < 0)
        return -1;
    q->hc = q->sr + n, q->hnk = q->hc + n, q->cnt = q->hnk + n, q->start = q->cnt + n;
    for (size_t s = 0; s < n; s++) {           /* the book's (s, 0, {}) for every s */
        if (row_room(&q->log[s], 1, W) < 0)
            return -1;
        q->log[s].t[0] = 0;
        mclear(q->log[s].m, W);
        q->log[s].len = 1;
    }
    return 0;
}

static void ks_fini(struct sim_machine *m)
{
    struct ks *q = (struct ks *)m;
    for (int s = 0; q->log && s < m->n; s++)
        free(q->log[s].t);                      /* the masks share its block */
    holdback_fini(&q->hb, m->n);
    void *all[] = {q->sr, q->log, q->dm, q->it, q->hits, q->sid,
                   q->ev, q->gv, q->w, q->tmp.t};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* ---- SND (ks.py Ks._send) ---- */

/* the copy to d (no entries): header, columns and payload */
HOT void write_copy(struct ks *q, uint8_t *w, uint32_t d, const uint16_t *dests, int nd,
                    uint32_t no, size_t ni, const uint8_t *payload, size_t len, size_t W)
{
    sim_put16(w, (uint32_t)q->base.me);
    sim_put32(w + 2, q->clock);
    sim_put16(w + 6, (uint32_t)nd);
    sim_put16(w + 8, no);
    uint8_t *pl = w + 10;
    for (int x = 0; x < nd; x++, pl += 2)
        sim_put16(pl, dests[x]);
    uint8_t *ps = pl + 2 * no, *pc = ps + 2 * no, *pi = pc + 4 * no;
    for (size_t x = 0; x < ni; x++) {
        const struct item *e = &q->it[x];
        int hasd = e->hit != NONE && BIT(q->hits + (size_t)e->hit * W, d);
        if (!e->keep && !hasd)
            continue;
        sim_put16(pl, e->rl + (uint32_t)hasd);
        sim_put16(ps, e->s);
        sim_put32(pc, e->t);
        pl += 2, ps += 2, pc += 4;
        for (size_t y = 0; y < 2 * (size_t)e->rl; y++)
            *pi++ = q->sid[2 * (size_t)e->io + y];
        if (hasd) {
            sim_put16(pi, d);
            pi += 2;
        }
    }
    memcpy(pi, payload, len);
}

HOT int send_w(struct ks *q, const uint16_t *dests, int nd, const uint8_t *payload,
               size_t len, struct sim_step *step, size_t W)
{
    size_t n = (size_t)q->base.n, me = (size_t)q->base.me, total = 0;
    if (q->clock == UINT32_MAX)
        return sim_fail(step, "process %zu exhausted its 32-bit clock", me);
    for (size_t s = 0; s < n; s++)
        total += q->log[s].len;
    if (total > 0xFFFF)
        return sim_fail(step, "%zu holds more than 65535 log entries, beyond the wire", me);
    if (grow(&q->it, &q->itcap, total, sizeof *q->it) < 0 ||
        grow(&q->hits, &q->hitcap, total * W, sizeof *q->hits) < 0)
        return sim_fail(step, "out of memory");
    word *dm = q->dm;
    memset(dm, 0, W * sizeof *dm);
    for (int i = 0; i < nd; i++)
        SET(dm, dests[i]);
    q->clock++;
    /* Steps 2-3 in one pass over LOG, as ks.py: an entry goes on every copy if kept (its
     * Dests minus M's non-empty, or it is its sender's newest), and on the copies to the
     * destinations it shares with M (hit), which it then forgets. */
    size_t ni = 0, nh = 0, nids = 0, nkept = 0;
    for (size_t s = 0; s < n; s++) {
        struct row *r = &q->log[s];
        uint32_t newest = row_max(r->t, r->len);
        int touched = 0;
        for (size_t j = 0; j < r->len; j++) {
            word *D = MASK(r->m, j), *h = q->hits + nh * W, any = 0, rest = 0;
            for (size_t x = 0; x < W; x++) {
                h[x] = D[x] & dm[x];
                any |= h[x];
                rest |= D[x] ^= h[x];
            }
            int keep = rest || r->t[j] == newest;
            if (!any && !keep)
                continue;
            struct item *e = &q->it[ni++];
            *e = (struct item){r->t[j], (uint32_t)nids, any ? (uint32_t)nh : NONE,
                               (uint16_t)s, 0, (uint8_t)keep};
            if (any) {
                for (size_t x = 0; x < W; x++)
                    for (word b = h[x]; b; b &= b - 1) {
                        size_t d = x * 64 + (size_t)__builtin_ctzll(b);
                        q->hc[d]++;
                        q->hnk[d] += !keep;
                    }
                nh++;
                touched = 1;
            }
            if (keep && rest) {
                if (grow(&q->sid, &q->sidcap, 2 * (nids + n), 1) < 0)
                    return sim_fail(step, "out of memory");
                for (size_t x = 0; x < W; x++)
                    for (word b = D[x]; b; b &= b - 1, e->rl++)
                        sim_put16(q->sid + 2 * nids++, (uint32_t)(x * 64 + (size_t)__builtin_ctzll(b)));
            }
            nkept += (size_t)keep;
        }
        if ((touched || s == me) && r->len > 1)
            row_purge(r, newest, W);
    }
    /* the copies, in `dests` order; those without hits are all the same bytes */
    const uint8_t *same = NULL;
    int rc = 0;
    for (int i = 0; i < nd && !rc; i++) {
        uint32_t d = dests[i], no = (uint32_t)nkept + q->hnk[d];
        uint32_t hl = 10 + 2 * (uint32_t)nd + 2 * no, cl = 6 * no + 2 * ((uint32_t)nids + q->hc[d]);
        uint8_t *w = sim_emit(step, d, hl + cl + (uint32_t)len, (struct sim_cost){hl, cl, no, 1});
        if (!w)
            rc = -1;
        else if (!q->hc[d] && same)
            memcpy(w, same, hl + cl + len);
        else
            write_copy(q, w, d, dests, nd, no, ni, payload, len, W);
        if (w && !q->hc[d])
            same = w;
    }
    for (int i = 0; i < nd; i++)
        q->hc[dests[i]] = q->hnk[dests[i]] = 0;
    struct row *r = &q->log[me];                /* step 4: the own entry, after the copies */
    if (rc || row_room(r, r->len + 1, W) < 0)
        return rc ? rc : sim_fail(step, "out of memory");
    r->t[r->len] = q->clock;
    mcopy(MASK(r->m, r->len++), dm, W);
    return 0;
}

static int ks_send(struct sim_machine *m, const uint16_t *dests, int nd,
                   const uint8_t *payload, size_t len, struct sim_step *step)
{
    struct ks *q = (struct ks *)m;
    return BY_W(q->W, send_w, q, dests, nd, payload, len, step);
}

/* ---- RCV (ks.py Ks._decode, _merge; holdback.py HoldBack.admit) ---- */

/* every check ks.py makes, filling the decode scratch; changes no state */
HOT int decode_w(struct ks *q, uint32_t src, const uint8_t *data, size_t len,
                 struct sim_step *step, size_t W)
{
    size_t S = W + 1;
    uint32_t n = (uint32_t)q->base.n, me = (uint32_t)q->base.me;
    struct col_head h;
    if (!col_head(&h, data, len, 2))
        return sim_fail(step, "wire truncated: %zu bytes, header needs 10", len);
    uint32_t k = h.j, tk = h.t, nd = h.c[0], no = h.c[1];
    if (k != src)
        return sim_fail(step, "wire names sender %u but came from %u", k, src);
    if (!tk)
        return sim_fail(step, "clock 0 is never sent");
    size_t need = 10 + 2 * (size_t)nd + 8 * (size_t)no;
    if (len < need)
        return sim_fail(step, "wire truncated: %zu bytes, sections need %zu", len, need);
    const uint8_t *pd = data + 10, *pl = pd + 2 * nd, *ps = pl + 2 * no, *pc = ps + 2 * no;
    const uint8_t *pi = pc + 4 * no;
    size_t total = 0;
    int bad = !nd || col_range(pd, nd, n);
    for (uint32_t i = 0; i < no; i++) {        /* senders and lengths in one pass */
        bad |= ld16(ps + 2 * i) >= n;
        total += ld16(pl + 2 * i);
    }
    if (bad)
        return sim_fail(step, "a process id is out of range 0..%u", n - 1);
    word *dm = q->dm;
    if (col_mask_in(dm, pd, nd, W) || !BIT(dm, me) || BIT(dm, k))
        return sim_fail(step, "bad destination list for a copy %u -> %u", k, me);
    if (len < need + 2 * total)
        return sim_fail(step, "wire truncated: %zu bytes, sections need %zu", len, need + 2 * total);
    if (col_range(pi, total, n))
        return sim_fail(step, "a process id is out of range 0..%u", n - 1);
    if (grow(&q->ev, &q->evcap, (no + 1) * S, sizeof *q->ev) < 0 ||
        grow(&q->gv, &q->gvcap, (no + 1) * S, sizeof *q->gv) < 0 ||
        grow(&q->w, &q->wcap, no + 1, sizeof *q->w) < 0)
        return sim_fail(step, "out of memory");
    q->nw = 0;
    for (uint32_t i = 0, at = 0; i < no; i++) {
        uint32_t s = sim_get16(ps + 2 * i), t = sim_get32(pc + 4 * i), ln = sim_get16(pl + 2 * i);
        word *v = q->ev + i * S, *mk = v + 1, clash = 0;
        v[0] = (word)s << 32 | t;
        int twice = col_mask_in(mk, pi + 2 * (size_t)at, ln, W);
        at += ln;
        if (twice)
            return sim_fail(step, "O_M entry (%u, %u) lists a destination twice", s, t);
        for (size_t x = 0; x < W; x++)        /* no destination of M but j, nor s itself */
            clash |= mk[x] & dm[x] & ~(x == me >> 6 ? (word)1 << (me & 63) : 0);
        if (clash || BIT(mk, s))
            return sim_fail(step, "bad O_M entry (%u, %u)", s, t);
        if (!t && !mzero(mk, W))
            return sim_fail(step, "bad O_M entry: clock 0 with destinations");
        if (BIT(mk, me)) {                      /* a wait; RCV step 3 then drops j */
            q->w[q->nw++] = (struct ent){s, t};
            CLR(mk, me);
        }
    }
    word *v = q->ev + (size_t)no * S;           /* step 3: M joins O_M, without j */
    v[0] = (word)k << 32 | tk;
    memcpy(v + 1, dm, W * sizeof *dm);
    CLR(v + 1, me);
    /* group by sender, stably, so M comes last among k's */
    memset(q->cnt, 0, n * sizeof *q->cnt);
    for (uint32_t i = 0; i <= no; i++)
        q->cnt[q->ev[i * S] >> 32]++;
    for (uint32_t s = 0, sum = 0; s < n; s++)
        q->start[s] = sum += q->cnt[s];
    for (uint32_t i = no + 1; i-- > 0;)
        memcpy(q->gv + --q->start[q->ev[i * S] >> 32] * (size_t)S, q->ev + i * S, S * sizeof(word));
    for (uint32_t s = 0; s < n; s++) {
        const word *g = q->gv + (size_t)q->start[s] * S;
        uint32_t ng = q->cnt[s] - (s == k);
        word top = 0;
        for (uint32_t a = 0; a < ng; a++) {
            top = g[a * S] > top ? g[a * S] : top;
            for (uint32_t b = a + 1; b < ng; b++)
                if (g[b * S] == g[a * S])
                    return sim_fail(step, "O_M lists an entry twice");
        }
        if (ng && s == k && (uint32_t)top >= tk)
            return sim_fail(step, "O_M carries an entry of %u not older than M itself", k);
        if (ng && s == me && (uint32_t)top > q->clock)
            return sim_fail(step, "O_M carries an entry of %u that %u never sent", me, me);
    }
    q->k = k, q->tk = tk;
    q->payload = pi + 2 * total;
    q->plen = len - need - 2 * total;
    return 0;
}

static int decode(struct ks *q, uint32_t src, const uint8_t *data, size_t len,
                  struct sim_step *step)
{
    return BY_W(q->W, decode_w, q, src, data, len, step);
}

/* steps 4-5 for one sender: its row of LOG against O_M's entries o[0..no) (ks.py _merge) */
/* the tuples of the side iterated (O_M's if ours, else the row's), as ks.py _merge keeps
 * them; `ours` is a constant at each call */
HOT void merge_side(struct row *out, const struct row *r, const word *o, uint32_t no, int ours,
                    uint32_t bmax, size_t W)
{
    size_t S = W + 1;
    uint32_t na = ours ? no : r->len, nb = ours ? r->len : no;
    out->len = 0;
    for (uint32_t a = 0, b; a < na; a++) {
        uint32_t ta = ours ? (uint32_t)o[a * S] : r->t[a];
        for (b = 0; b < nb && (ours ? r->t[b] : (uint32_t)o[b * S]) != ta; b++)
            ;
        if (b == nb && ta <= bmax)
            continue;
        const word *ma = ours ? o + a * S + 1 : MASK(r->m, a);
        const word *mb = b == nb ? ma : ours ? MASK(r->m, b) : o + b * S + 1;
        word *d = MASK(out->m, out->len);
        out->t[out->len++] = ta;
        for (size_t x = 0; x < W; x++)
            d[x] = ma[x] & mb[x];
    }
}

/* steps 4-5 for one sender: its row of LOG against O_M's entries o[0..no) (ks.py _merge) */
HOT int merge_row(struct ks *q, struct row *r, const word *o, uint32_t no, size_t W)
{
    size_t S = W + 1;
    uint32_t a, b, omax = 0, lmax = 0;
    if (no == r->len) {                         /* equal as dicts: nothing changes */
        for (a = 0; a < no; a++) {
            for (b = 0; b < no && r->t[b] != (uint32_t)o[a * S]; b++)
                ;
            if (b == no || !msame(MASK(r->m, b), o + a * S + 1, W))
                break;
        }
        if (a == no)
            return 0;
    }
    for (a = 0; a < no; a++)
        omax = (uint32_t)o[a * S] > omax ? (uint32_t)o[a * S] : omax;
    for (a = 0; a < r->len; a++)
        lmax = r->t[a] > lmax ? r->t[a] : lmax;
    if (row_room(&q->tmp, no + r->len, W) < 0)
        return -1;
    /* the side with the newest entry is iterated; an entry the other side lacks survives
     * only if newer than all of the other side's; common entries intersect their Dests */
    int ours = omax > lmax;
    if (ours)
        merge_side(&q->tmp, r, o, no, 1, lmax, W);
    else
        merge_side(&q->tmp, r, o, no, 0, omax, W);
    struct row old = *r;                        /* the new row takes the scratch's block */
    *r = q->tmp;
    q->tmp = old;
    if (r->len > 1)
        row_purge(r, ours ? omax : lmax, W);
    return 0;
}

HOT int deliver_w(struct ks *q, struct sim_step *step, size_t W)
{
    uint32_t n = (uint32_t)q->base.n, me = (uint32_t)q->base.me;
    if (sim_deliver(step, q->k, q->payload, (uint32_t)q->plen) < 0)
        return -1;
    q->sr[q->k] = q->tk;
    for (uint32_t s = 0; s < n; s++)
        if (q->cnt[s] && merge_row(q, &q->log[s], q->gv + (size_t)q->start[s] * (W + 1),
                                   q->cnt[s], W) < 0)
            return sim_fail(step, "out of memory");
    if (!q->cnt[me] && q->log[me].len > 1)
        row_purge(&q->log[me], row_max(q->log[me].t, q->log[me].len), W);
    return 0;
}

/* the first wait from x on not yet met */
static uint32_t unmet(const struct ks *q, const struct ent *w, uint32_t nw, uint32_t x)
{
    while (x < nw && w[x].t <= q->sr[w[x].s])
        x++;
    return x;
}

/* holdback_drain's view of a held record */
static long unmet_held(void *q, struct hb_node *h)
{
    struct rec *r = (struct rec *)h;
    r->x = unmet(q, r->w, r->nwait, r->x);
    return r->x < r->nwait ? (long)r->w[r->x].s : -1;
}

static int deliver_held(void *m, struct hb_node *h, struct sim_step *step)
{
    struct ks *q = m;
    struct rec *r = (struct rec *)h;
    if (decode(q, (uint32_t)(h->key >> 32), (const uint8_t *)(r->w + r->nwait), r->len, step) < 0)
        return -1;
    return BY_W(q->W, deliver_w, q, step);
}

static int ks_receive(struct sim_machine *m, int src, const uint8_t *data, size_t len,
                      struct sim_step *step)
{
    struct ks *q = (struct ks *)m;
    if (decode(q, (uint32_t)src, data, len, step) < 0)
        return -1;
    uint64_t key = (uint64_t)q->k << 32 | q->tk;
    if (q->tk <= q->sr[q->k] || holdback_has(&q->hb, key))
        return sim_fail(step, "duplicate message %u from %u", q->tk, q->k);
    uint32_t x = unmet(q, q->w, q->nw, 0);
    if (x < q->nw) {
        struct rec *r = malloc(sizeof *r + q->nw * sizeof(struct ent) + len);
        if (!r)
            return sim_fail(step, "out of memory");
        *r = (struct rec){{NULL, key}, x, q->nw, (uint32_t)len};
        memcpy(r->w, q->w, q->nw * sizeof(struct ent));
        memcpy(r->w + q->nw, data, len);
        if (holdback_hold(&q->hb, q->w[x].s, &r->hb) < 0) {
            free(r);
            return sim_fail(step, "out of memory");
        }
        return 0;
    }
    if (BY_W(q->W, deliver_w, q, step) < 0)
        return -1;
    return holdback_drain(&q->hb, q->k, q, unmet_held, deliver_held, step);
}

static long ks_held(struct sim_machine *m)
{
    return (long)((struct ks *)m)->hb.held;
}

const struct sim_ops sim_ks_ops = {
    .name = "ks", .multicast = SIM_NATIVE, .size = sizeof(struct ks),
    .init = ks_init, .fini = ks_fini, .send = ks_send, .receive = ks_receive,
    .held = ks_held,
};
