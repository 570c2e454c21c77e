/* jpcy.c - the C twin of bus1py/causal/jpcy.py: Jang-Park-Cho-Yoon, steps S1-S5, R1-R9.
 *
 * Wire (jpcy.py's docstring; the columnar layout of bus1py/causal/base.py), little-endian:
 *   j u16 | tau u32 | nd u16 | nci u16 | ndc u16 | dests u16*nd | D lengths u16*nci   header
 *   CI senders u16*nci | CI taus u32*nci | D ids u16*sum | DC ids u16*ndc | DC taus u32*ndc
 *   payload;  cost (12 + 2nd + 2nci, 6nci + 2sum + 6ndc, nci + ndc, 1).
 * Delivery (R1): a copy is delivered iff every (k, t) of its DC has t <= dlv[k]. The
 * hold-back is bus1py/causal/holdback.py's: a held record waits in the list of the sender
 * of its first unmet constraint, and a delivery releases through a LIFO stack.
 *
 * Invariants:
 *   - ci[k] is the Python dict CI_i[k] = {tau: D} in its insertion order (taus t[x], masks
 *     of W words at m[x * W]); ord lists the senders in the order the dict CI_i got them.
 *     Rows are never emptied, so "k in CI_i" is ci[k].len != 0. Every step keeps the dict
 *     order (updates in place, deletions compact, a replaced row takes its source's order),
 *     so wires match byte for byte, also after wires whose CI is not sorted by tau. Honest
 *     machines keep every row ascending; lookups are linear merges then (`seek`).
 *   - After parse, the scratch (gr, group.h; et, em) holds CI_m as read_entries'
 *     dict: senders by first appearance, each group's tuples contiguous in wire order,
 *     the last slot of j's group R4's (tau, m.D - i); gsort[g] says the group ascends.
 *   - Held records are held as holdback.h says, keyed j << 32 | tau, every DC constraint
 *     before `wait` met. A held record owns a copy of its wire, allocated with it.
 */
#if defined(__GNUC__) && !defined(__clang__)
/* the mask loops run W = 1 word at n <= 64: a libc call per mask would cost more */
#pragma GCC optimize("no-tree-loop-distribute-patterns")
#endif

#include "columns.h"
#include "group.h"
#include "holdback.h"
#include "row.h"


struct rec {
    struct hb_node hb;
    const uint8_t *w;
    uint32_t j, tau, nd, nci, ndc, wait;
    size_t len, at_dl, at_ids, at_dc, at_pay;   /* D lengths, D ids, DC ids, payload */
};

struct jpcy {
    struct sim_machine base;
    int W;                             /* words per destination mask */
    uint32_t tau, nord;
    struct row *ci, tmp;
    struct holdback hb;
    size_t nhits, hitcap, idxcap, ecap, emcap;
    uint16_t *ord;
    /* per process: dlv; send scratch cnt, fill; per group of CI_m: it ascends */
    uint32_t *dlv, *cnt, *fill, *gsort;
    struct groups gr;
    uint32_t *hits, *idx, *et;         /* (d, k, t) of S2 in order; r8 order; CI_m taus */
    uint8_t **wp;                      /* per destination: its wire's DC section */
    word *dm, *seen, *em;              /* m.D, R8's seen, CI_m masks */
    const struct rec *grouped;         /* the record whose CI_m the scratch holds */
};

/* S3/R9: delete every empty tuple but the newest of its sender. */
HOT void drop_old_empty(struct row *r, const int W)
{
    row_purge(r, row_max(r->t, r->len), W);
}

/* R8 (newest tuple first: strip what a newer tuple lists), then R9. */
HOT int r8_r9(struct jpcy *p, struct row *r, const int W)
{
    int sorted = ascending(r->t, r->len);
    if (!sorted && sim_reserve((void **)&p->idx, &p->idxcap, 0, r->len, sizeof *p->idx) < 0)
        return -1;
    for (uint32_t x = 0; !sorted && x < r->len; x++) {     /* insertion sort, descending */
        uint32_t y = x;
        for (; y && r->t[p->idx[y - 1]] < r->t[x]; y--)
            p->idx[y] = p->idx[y - 1];
        p->idx[y] = x;
    }
    mclear(p->seen, W);
    for (uint32_t x = 0; x < r->len; x++) {
        word *D = MASK(r->m, sorted ? r->len - 1 - x : p->idx[x]);
        for (int w = 0; w < W; w++) {
            word d = D[w];
            D[w] = d & ~p->seen[w];
            p->seen[w] |= d;
        }
    }
    drop_old_empty(r, W);
    return 0;
}

/* ---- machine ---- */

static int jpcy_init(struct sim_machine *m)
{
    struct jpcy *p = (struct jpcy *)m;
    size_t n = (size_t)m->n;
    p->W = (int)((n + 63) / 64);
    p->ci = calloc(n, sizeof *p->ci);
    p->dlv = calloc(4 * n, sizeof *p->dlv);
    p->ord = calloc(n, sizeof *p->ord);
    p->wp = calloc(n, sizeof *p->wp);
    p->dm = calloc(2 * (size_t)p->W, sizeof *p->dm);
    if (!p->ci || !p->dlv || !p->ord || !p->wp || !p->dm || holdback_init(&p->hb, m->n) < 0 ||
        groups_init(&p->gr, m->n) < 0)
        return -1;
    uint32_t **per[] = {&p->cnt, &p->fill, &p->gsort};
    for (size_t i = 0; i < 3; i++)
        *per[i] = p->dlv + (i + 1) * n;
    p->seen = p->dm + p->W;
    return 0;
}

static void jpcy_fini(struct sim_machine *m)
{
    struct jpcy *p = (struct jpcy *)m;
    for (int k = 0; p->ci && k < m->n; k++)
        free(p->ci[k].t);                       /* the masks share its block */
    holdback_fini(&p->hb, m->n);
    void *all[] = {p->tmp.t, p->ci, p->gr.seen, p->dlv, p->ord, p->wp, p->dm,
                   p->hits, p->idx, p->et, p->em};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* ---- send: S1-S5 ---- */

HOT int send_w(struct sim_machine *m, const uint16_t *dests, int k, const uint8_t *payload,
                   size_t len, struct sim_step *step, const int W)
{
    struct jpcy *p = (struct jpcy *)m;
    size_t total = 0;
    for (uint32_t o = 0; o < p->nord; o++)
        total += p->ci[p->ord[o]].len;
    if (p->tau == UINT32_MAX)
        return sim_fail(step, "process %d exhausted its 32-bit timestamps", m->me);
    if (total > 0xFFFF)
        return sim_fail(step, "%d holds more than 65535 CI tuples, beyond the wire format", m->me);
    word *dm = p->dm;
    mclear(dm, W);
    for (int i = 0; i < k; i++) {
        SET(dm, dests[i]);
        p->cnt[dests[i]] = p->fill[dests[i]] = 0;
    }
    uint32_t tau = ++p->tau, nci = 0, nids = 0;
    p->nhits = 0;
    /* S2 (DC_i[d] gathers (k, t) in CI order, ids ascending), S3 */
    for (uint32_t o = 0; o < p->nord; o++) {
        uint32_t s = p->ord[o];
        struct row *r = &p->ci[s];
        int touched = 0;
        for (uint32_t x = 0; x < r->len; x++) {
            word *D = MASK(r->m, x);
            for (int w = 0; w < W; w++) {
                word hit = D[w] & dm[w];
                D[w] ^= hit;
                nids += pop(D[w]);
                if (hit && sim_reserve((void **)&p->hits, &p->hitcap, p->nhits, 3 * pop(hit),
                                       sizeof *p->hits) < 0)
                    return sim_fail(step, "out of memory");
                for (touched |= hit != 0; hit; hit &= hit - 1, p->nhits += 3) {
                    uint32_t *h = p->hits + p->nhits;
                    h[0] = (uint32_t)w * 64 + (uint32_t)__builtin_ctzll(hit);
                    h[1] = s, h[2] = r->t[x];
                    p->cnt[h[0]]++;
                }
            }
        }
        if ((touched || s == (uint32_t)m->me) && r->len > 1)
            drop_old_empty(r, W);          /* only empty tuples go: nids stays */
        nci += r->len;
    }
    /* S4: one CI section for every copy, only DC_i[d] differs */
    size_t head = 12 + 2 * (size_t)k + 2 * (size_t)nci, cis = 6 * (size_t)nci + 2 * (size_t)nids;
    const uint8_t *first = NULL;
    for (int i = 0; i < k; i++) {
        uint32_t d = dests[i], ndc = p->cnt[d];
        uint8_t *w = sim_emit(step, d, (uint32_t)(head + cis + 6 * ndc + len),
                              (struct sim_cost){(uint32_t)head, (uint32_t)(cis + 6 * ndc),
                                                nci + ndc, 1});
        if (!w)
            return -1;
        sim_put16(w, (uint32_t)m->me);
        sim_put32(w + 2, tau);
        sim_put16(w + 6, (uint32_t)k);
        sim_put16(w + 8, nci);
        sim_put16(w + 10, ndc);
        for (int x = 0; x < k; x++)
            sim_put16(w + 12 + 2 * x, dests[x]);
        uint8_t *dl = w + 12 + 2 * k, *sd = dl + 2 * nci, *ts = sd + 2 * nci, *id = ts + 4 * nci;
        if (first)
            memcpy(dl, first + 12 + 2 * k, 2 * (size_t)nci + cis);
        for (uint32_t o = 0; !first && o < p->nord; o++) {
            uint32_t s = p->ord[o];
            struct row *r = &p->ci[s];
            for (uint32_t x = 0; x < r->len; x++, dl += 2, sd += 2, ts += 4) {
                const word *D = MASK(r->m, x);
                uint32_t c = 0;
                for (int v = 0; v < W; v++)
                    for (word b = D[v]; b; b &= b - 1, c++, id += 2)
                        sim_put16(id, (uint32_t)v * 64 + (uint32_t)__builtin_ctzll(b));
                sim_put16(dl, c);
                sim_put16(sd, s);
                sim_put32(ts, r->t[x]);
            }
        }
        first = w;
        p->wp[d] = w + head + cis;
        memcpy(w + head + cis + 6 * ndc, payload, len);
    }
    for (uint32_t *e = p->hits; e < p->hits + p->nhits; e += 3) {
        uint32_t d = e[0], f = p->fill[d]++;
        sim_put16(p->wp[d] + 2 * f, e[1]);
        sim_put32(p->wp[d] + 2 * p->cnt[d] + 4 * f, e[2]);
    }
    /* S5: the own tuple, after the copies */
    struct row *own = &p->ci[m->me];
    if (row_room(own, own->len + 1, W) < 0)
        return sim_fail(step, "out of memory");
    if (!own->len)
        p->ord[p->nord++] = (uint16_t)m->me;
    own->t[own->len] = tau;
    mcopy(MASK(own->m, own->len++), dm, W);
    return 0;
}
static int jpcy_send(struct sim_machine *m, const uint16_t *dests, int k, const uint8_t *payload,
                     size_t len, struct sim_step *step)
{
    int W = ((struct jpcy *)m)->W;
    return W == 1 ? send_w(m, dests, k, payload, len, step, 1)
                  : send_w(m, dests, k, payload, len, step, W);
}

/* ---- receive: R1-R9 ---- */

/* The header and the section offsets; every section within the wire. */
static int frame(struct rec *r, const uint8_t *data, size_t len, struct sim_step *step)
{
    struct col_head h;
    if (!col_head(&h, data, len, 3))
        return sim_fail(step, "wire truncated: %zu bytes, header needs 12", len);
    r->w = data;
    r->len = len;
    r->j = h.j, r->tau = h.t, r->nd = h.c[0], r->nci = h.c[1], r->ndc = h.c[2];
    r->hb.key = (uint64_t)r->j << 32 | r->tau;
    r->at_dl = 12 + 2 * (size_t)r->nd;
    r->at_ids = r->at_dl + 8 * (size_t)r->nci;
    if (len < r->at_ids)
        return sim_fail(step, "wire truncated: %zu bytes, sections need %zu", len, r->at_ids);
    r->at_dc = r->at_ids + 2 * col_sum16(data + r->at_dl, r->nci);
    r->at_pay = r->at_dc + 6 * (size_t)r->ndc;
    if (len < r->at_pay)
        return sim_fail(step, "wire truncated: %zu bytes, sections need %zu", len, r->at_pay);
    return 0;
}


#define BAD(...) do { if (check) return sim_fail(step, __VA_ARGS__); } while (0)

/* m.D into dm and CI_m into the scratch (see the invariants); with `check`, refuses what
 * Jpcy._decode refuses (the header fields were checked by the caller). */
HOT int parse_w(struct jpcy *p, const struct rec *r, int check, struct sim_step *step,
                    const int W)
{
    int me = p->base.me;
    uint32_t n = (uint32_t)p->base.n, nci = r->nci, j = r->j;
    const uint8_t *w = r->w, *dl = w + r->at_dl, *sd = dl + 2 * nci, *ts = sd + 2 * nci;
    const uint8_t *id = w + r->at_ids, *dk = w + r->at_dc, *dt = dk + 2 * r->ndc;
    word *dm = p->dm;
    if (col_mask(dm, w + 12, r->nd, n, W) ||
        !r->nd || !BIT(dm, (uint32_t)me) || BIT(dm, j))
        BAD("bad destination list for a copy %u -> %d", j, me);
    for (uint32_t x = 0; check && x < r->ndc; x++) {
        uint32_t k = sim_get16(dk + 2 * x), t = sim_get32(dt + 4 * x);
        if (k >= n || t == 0 || k == (uint32_t)me || (k == j && t >= r->tau))
            BAD("bad delivery constraint (%u, %u)", k, t);
    }
    struct groups *gr = &p->gr;
    groups_begin(gr);
    for (uint32_t e = 0; e <= nci; e++) {              /* the groups, in dict order */
        uint32_t s = e < nci ? sim_get16(sd + 2 * e) : j;
        if (s >= n || (e < nci && sim_get32(ts + 4 * e) == 0))
            BAD("bad CI tuple: process id %u, timestamp %u", s, sim_get32(ts + 4 * e));
        p->gsort[groups_add(gr, s)] = 1;
    }
    groups_layout(gr);
    if (sim_reserve((void **)&p->et, &p->ecap, 0, nci + 1, sizeof *p->et) < 0 ||
        sim_reserve((void **)&p->em, &p->emcap, 0, (nci + 1) * (size_t)W, sizeof *p->em) < 0)
        return sim_fail(step, "out of memory");
    uint32_t *gidx = gr->idx, *gstart = gr->start, *glen = gr->len, *et = p->et;
    for (uint32_t e = 0; e < nci; e++) {                /* the tuples, in wire order */
        uint32_t s = sim_get16(sd + 2 * e), t = sim_get32(ts + 4 * e), ln = sim_get16(dl + 2 * e);
        uint32_t g = gidx[s], x = gstart[g] + glen[g]++;
        word *D = MASK(p->em, x);
        int baddest = col_mask(D, id, ln, n, W);
        id += 2 * (size_t)ln;
        if (baddest)
            BAD("CI tuple (%u, %u) lists a bad or repeated destination", s, t);
        if (mmeets(D, dm, W) || BIT(D, s))
            BAD("bad CI tuple (%u, %u)", s, t);
        if (x > gstart[g] && et[x - 1] >= t) {
            p->gsort[g] = 0;
            if (check && seek(et + gstart[g], x - gstart[g], t, NULL) >= 0)
                BAD("CI lists a tuple twice");
        }
        et[x] = t;
    }
    uint32_t g = gidx[j], x = gstart[g] + glen[g];
    if (check && row_max(p->et + gstart[g], glen[g]) >= r->tau)
        BAD("CI carries a tuple of %u not older than m itself", j);
    if (check && groups_has(gr, (uint32_t)me) &&
        row_max(p->et + gstart[gidx[me]], glen[gidx[me]]) > p->tau)
        BAD("CI carries a tuple of %d that %d never sent", me, me);
    glen[g]++;                                          /* R4: m.D - i */
    p->et[x] = r->tau;
    mcopy(MASK(p->em, x), dm, W);
    MASK(p->em, x)[me >> 6] &= ~((word)1 << (me & 63));
    p->grouped = r;
    return 0;
}

static int parse(struct jpcy *p, const struct rec *r, int check, struct sim_step *step)
{
    return p->W == 1 ? parse_w(p, r, check, step, 1) : parse_w(p, r, check, step, p->W);
}

/* R3, R5-R9, with CI_m in the scratch (parse). */
HOT int merge_w(struct jpcy *p, const struct rec *r, const int W)
{
    int me = p->base.me;
    p->dlv[r->j] = r->tau;
    for (uint32_t g = 0; g < p->gr.count; g++) {
        uint32_t s = p->gr.who[g], ml = p->gr.len[g], at = 0, *hint;
        const uint32_t *mt = p->et + p->gr.start[g];
        const word *mm = MASK(p->em, p->gr.start[g]);
        struct row *it = &p->ci[s];
        if (!it->len) {                                 /* R7, nothing to compare with */
            if (row_room(it, ml, W) < 0)
                return -1;
            p->ord[p->nord++] = (uint16_t)s;
            memcpy(it->t, mt, ml * sizeof *mt);
            memcpy(it->m, mm, (size_t)ml * W * sizeof *mm);
            it->len = ml;
            if (ml > 1 && r8_r9(p, it, W) < 0)
                return -1;
            continue;
        }
        int sorted = p->gsort[g] && ascending(it->t, it->len);
        if (it->len == ml) {                            /* equal as dicts: nothing changes */
            uint32_t x = 0;
            for (long y; x < ml && (y = seek(it->t, it->len, mt[x], sorted ? &at : NULL)) >= 0
                 && msame(MASK(it->m, y), MASK(mm, x), W); x++)
                ;
            if (x == ml)
                continue;
            at = 0;
        }
        hint = sorted ? &at : NULL;
        uint32_t mmax = sorted ? mt[ml - 1] : row_max(mt, ml);
        uint32_t imax = sorted ? it->t[it->len - 1] : row_max(it->t, it->len);
        if (mmax > imax) {      /* CI_m's order: the tuples we share (R6) and newer (R7) */
            struct row *o = &p->tmp;
            if (row_room(o, ml, W) < 0)
                return -1;
            o->len = 0;
            for (uint32_t x = 0; x < ml; x++) {
                long y = seek(it->t, it->len, mt[x], hint);
                if (y < 0 && mt[x] <= imax)
                    continue;                           /* R5 */
                word *D = MASK(o->m, o->len);
                mcopy(D, MASK(mm, x), W);
                for (int v = 0; y >= 0 && v < W; v++)
                    D[v] &= MASK(it->m, y)[v];
                o->t[o->len++] = mt[x];
            }
            if (row_room(it, o->len, W) < 0)
                return -1;
            memcpy(it->t, o->t, o->len * sizeof *o->t);
            memcpy(it->m, o->m, (size_t)o->len * W * sizeof *o->m);
            it->len = o->len;
            if (it->len > 1 && r8_r9(p, it, W) < 0)
                return -1;
            continue;
        }
        /* our order: the tuples we share (R6) and those newer than CI_m's newest (R5) */
        uint32_t kx = 0;
        int empty = 0;
        for (uint32_t x = 0; x < it->len; x++) {
            long y = seek(mt, ml, it->t[x], hint);
            if (y < 0 && it->t[x] <= mmax)
                continue;
            word *D = MASK(it->m, kx);
            it->t[kx] = it->t[x];
            mcopy(D, MASK(it->m, x), W);
            for (int v = 0; y >= 0 && v < W; v++)
                D[v] &= MASK(mm, y)[v];
            empty |= mzero(D, W);
            kx++;
        }
        it->len = kx;
        if (kx > 1 && empty)                            /* R9; R8 finds nothing here */
            ROW_FILTER(it, it->t[x] == imax || !mzero(MASK(it->m, x), W));
    }
    if (!groups_has(&p->gr, (uint32_t)me) && p->ci[me].len > 1)
        drop_old_empty(&p->ci[me], W);                  /* R9 for our own previous tuple */
    p->grouped = NULL;
    return 0;
}

static int merge(struct jpcy *p, const struct rec *r)
{
    return p->W == 1 ? merge_w(p, r, 1) : merge_w(p, r, p->W);
}

/* holdback_drain's view of a record: the sender of its first unmet constraint, or -1 */
static long unmet(void *m, struct hb_node *h)
{
    const struct jpcy *p = m;
    struct rec *r = (struct rec *)h;
    const uint8_t *dk = r->w + r->at_dc, *dt = dk + 2 * r->ndc;
    uint32_t x = r->wait;
    while (x < r->ndc && sim_get32(dt + 4 * x) <= p->dlv[sim_get16(dk + 2 * x)])
        x++;
    r->wait = x;
    return x < r->ndc ? (long)sim_get16(dk + 2 * x) : -1;
}

/* R2, then R3 and R5-R9; CI_m is parsed again unless the scratch holds it */
static int deliver(void *m, struct hb_node *h, struct sim_step *step)
{
    struct jpcy *p = m;
    struct rec *c = (struct rec *)h;
    if ((p->grouped != c && parse(p, c, 0, step) < 0) ||
        sim_deliver(step, c->j, c->w + c->at_pay, (uint32_t)(c->len - c->at_pay)) < 0)
        return -1;
    if (merge(p, c) < 0)
        return sim_fail(step, "out of memory");
    return 0;
}

static int jpcy_receive(struct sim_machine *m, int src, const uint8_t *data, size_t len,
                        struct sim_step *step)
{
    struct jpcy *p = (struct jpcy *)m;
    struct rec first = {0};
    if (frame(&first, data, len, step) < 0)
        return -1;
    if (first.j != (uint32_t)src || first.tau == 0)
        return sim_fail(step, "wire names sender %u (from %d) or timestamp 0", first.j, src);
    if (parse(p, &first, 1, step) < 0)
        return -1;
    if (first.tau <= p->dlv[first.j] || holdback_has(&p->hb, first.hb.key))
        return sim_fail(step, "duplicate message %u from %u", first.tau, first.j);
    long s = unmet(p, &first.hb);
    if (s >= 0) {                                       /* R1 fails: hold a copy */
        struct rec *h = malloc(sizeof *h + len);
        if (h) {
            *h = first;
            h->w = memcpy(h + 1, data, len);
        }
        if (!h || holdback_hold(&p->hb, (uint32_t)s, &h->hb) < 0) {
            free(h);
            return sim_fail(step, "out of memory");
        }
        p->grouped = NULL;
        return 0;
    }
    if (deliver(p, &first.hb, step) < 0)
        return -1;
    return holdback_drain(&p->hb, first.j, p, unmet, deliver, step);
}

static long jpcy_held(struct sim_machine *m)
{
    return (long)((struct jpcy *)m)->hb.held;
}

const struct sim_ops sim_jpcy_ops = {
    .name = "jpcy", .multicast = SIM_NATIVE, .size = sizeof(struct jpcy),
    .init = jpcy_init, .fini = jpcy_fini, .send = jpcy_send, .receive = jpcy_receive,
    .held = jpcy_held,
};
