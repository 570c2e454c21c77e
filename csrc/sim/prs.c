/* prs.c - the C twin of bus1py/causal/prs.py: Prakash-Raynal-Singhal causal multicast with
 * direct dependencies only (a reconstruction; the rules and their sources are in prs.py).
 *
 * Wire (u16 ids, u32 sequence numbers, little-endian), columnar, the same bytes to every copy:
 *   j u16 | sn u32 | nd u16 | nk u16 | Dests u16[nd] | k u16[nk] | len u16[nk]
 *   | senders u16[total] | sns u32[total] | payload             (total = sum of len)
 * The lists (one per k with a nonempty CB[k]) are in increasing k, the entries of each in
 * increasing sender. Cost (10 + 2 nd + 4 nk, 6 total, total, data).
 *
 * Delivery: a copy M from j is delivered at i iff every (k, y) in CB_M[i] has y <= deliv[k];
 * a delivery sets deliv[j] = sn_M and merges CB_M into CB (prs.py's _merge):
 *   - for each destination d != i of M: drop every CB[d][s] <= CB_M[d][s], then
 *     CB[d][j] = max(CB[d][j], sn_M);
 *   - for each other list k != i of M: CB[k][s] = max(CB[k][s], CB_M[k][s]).
 * The hold-back is bus1py/causal/holdback.py's: a held message waits for the entries of
 * CB_M[i] in sender order and is indexed under the sender of the first unmet one; a delivery
 * from j retries, in the order they were indexed, the messages waiting on j, and delivers the
 * ones that pass last-in first-out (that order is part of the protocol: the multicast merge
 * is order-sensitive).
 *
 * Invariants:
 *   - cb is an n x n matrix of u32, cb[k * n + s] the sn of the direct predecessor from s of
 *     our next message to k, 0 for none. Row `me` and every cell cb[k * n + k] stay 0.
 *   - Every held message is held as holdback.h says, keyed j << 32 | sn, every wait
 *     before its `wpos` met. It owns a copy of its whole wire.
 *   - dm (the Dests mask of the copy being checked or merged), ids, sns and rowlen are
 *     scratch: nothing in them lasts between calls.
 */
#include "columns.h"
#include "holdback.h"

/* a wire's columns, decoded in place */
struct view {
    uint32_t j, sn, nd, nk, plen;
    const uint8_t *dests, *ks, *lens, *senders, *sns, *payload;
    const uint8_t *ws, *wt;            /* senders and sns of the list for `me` (the waits) */
    uint32_t nw;                       /* its length, 0 if there is none */
};

struct rec {
    struct hb_node hb;
    struct view v;                     /* over data */
    uint32_t wpos;                     /* the waits before it are met */
    uint8_t data[];                    /* the wire */
};

struct prs {
    struct sim_machine base;
    uint32_t sn;
    size_t W;
    uint32_t *deliv, *cb;
    word *dm;
    uint16_t *ids;                     /* the send's columns, n * n + 1 each, */
    uint32_t *sns, *rowlen;            /* and the length of each list */
    struct holdback hb;
};

static int prs_init(struct sim_machine *m)
{
    struct prs *p = (struct prs *)m;
    size_t n = (size_t)m->n;
    p->deliv = calloc(n, sizeof *p->deliv);
    p->cb = calloc(n * n, sizeof *p->cb);
    p->W = (n + 63) / 64;
    p->dm = calloc(p->W, sizeof *p->dm);
    p->ids = malloc((n * n + 1) * sizeof *p->ids);
    p->sns = malloc((n * n + 1) * sizeof *p->sns);
    p->rowlen = malloc(n * sizeof *p->rowlen);
    return p->deliv && p->cb && p->dm && p->ids && p->sns && p->rowlen &&
           holdback_init(&p->hb, m->n) == 0 ? 0 : -1;
}

static void prs_fini(struct sim_machine *m)
{
    struct prs *p = (struct prs *)m;
    holdback_fini(&p->hb, m->n);
    void *bufs[] = {p->deliv, p->cb, p->dm, p->ids, p->sns, p->rowlen};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
}

/* ---- send ---- */

static int prs_send(struct sim_machine *m, const uint16_t *dests, int k, const uint8_t *payload,
                    size_t len, struct sim_step *step)
{
    struct prs *p = (struct prs *)m;
    uint32_t n = (uint32_t)m->n, nk = 0, total = 0;
    if (p->sn == UINT32_MAX)
        return sim_fail(step, "process %d exhausted its 32-bit sequence numbers", m->me);
    uint32_t sn = ++p->sn;
    /* The entries, row by row, into the scratch columns: every cell is written and the
     * cursor passes the nonzero ones, so there is no branch per cell. */
    uint16_t *ids = p->ids;
    uint32_t *sns = p->sns;
    for (uint32_t r = 0; r < n; r++) {
        const uint32_t *row = p->cb + (size_t)r * n;
        uint32_t at = total;
        for (uint32_t s = 0; s < n; s++) {
            uint32_t v = row[s];
            ids[total] = (uint16_t)s;
            sns[total] = v;
            total += v != 0;
        }
        p->rowlen[r] = total - at;
        nk += total != at;
    }
    uint32_t hlen = 10 + 2 * (uint32_t)k + 4 * nk, wlen = hlen + 6 * total + (uint32_t)len;
    if ((uint64_t)hlen + 6 * (uint64_t)total + len > UINT32_MAX)
        return sim_fail(step, "a wire of process %d would exceed 4 GiB", m->me);
    struct sim_cost cost = {hlen, 6 * total, total, 1};
    uint8_t *w = sim_emit(step, dests[0], wlen, cost);
    if (!w)
        return -1;
    sim_put16(w, (uint32_t)m->me);
    sim_put32(w + 2, sn);
    sim_put16(w + 6, (uint32_t)k);
    sim_put16(w + 8, nk);
    PUTS(w + 10, dests, (uint32_t)k, 2, sim_put16);
    uint8_t *kcol = w + 10 + 2 * k, *lcol = kcol + 2 * nk, *c = lcol + 2 * nk;
    for (uint32_t r = 0; r < n; r++)
        if (p->rowlen[r]) {
            sim_put16(kcol, r);
            sim_put16(lcol, p->rowlen[r]);
            kcol += 2;
            lcol += 2;
        }
    PUTS(c, ids, total, 2, sim_put16);
    PUTS(c + 2 * total, sns, total, 4, sim_put32);
    memcpy(c + 6 * total, payload, len);
    for (int i = 1; i < k; i++) {
        uint8_t *copy = sim_emit(step, dests[i], wlen, cost);
        if (!copy)
            return -1;
        memcpy(copy, w, wlen);
    }
    /* M is now the only direct predecessor of our next message to each destination. */
    for (int i = 0; i < k; i++) {
        uint32_t *row = p->cb + (size_t)dests[i] * n;
        memset(row, 0, n * sizeof *row);
        row[m->me] = sn;
    }
    return 0;
}

/* ---- receive ---- */

/* The columns of a wire whose framing was checked (or of a held copy). */
static int parse(struct view *v, const uint8_t *data, size_t len)
{
    struct col_head h;
    if (!col_head(&h, data, len, 2))
        return -1;
    v->j = h.j;
    v->sn = h.t;
    v->nd = h.c[0];
    v->nk = h.c[1];
    size_t need = 10 + 2 * (size_t)v->nd + 4 * (size_t)v->nk;
    if (len < need)
        return -1;
    v->dests = data + 10;
    v->ks = v->dests + 2 * v->nd;
    v->lens = v->ks + 2 * v->nk;
    size_t total = col_sum16(v->lens, v->nk);
    if (len - need < 6 * total)
        return -1;
    v->senders = v->lens + 2 * v->nk;
    v->sns = v->senders + 2 * total;
    v->payload = v->sns + 4 * total;
    v->plen = (uint32_t)(len - need - 6 * total);
    return 0;
}

/* Nonzero unless the list for k is good: senders strictly increasing and below n, none k
 * itself, sns nonzero, the sender's own (j) below its sn, ours (me) at most ours. Written as
 * flat loops over size_t indices so that they vectorize: checking is a third of a receive. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("O3")))
#endif
static uint32_t list_bad(const uint8_t *ss, const uint8_t *ts, size_t ln, uint32_t k, uint32_t j,
                         uint32_t capj, uint32_t me, uint32_t capme, uint32_t n)
{
    uint32_t bad = ld16(ss + 2 * (ln - 1)) >= n;
    for (size_t e = 1; e < ln; e++)
        bad |= ld16(ss + 2 * e) <= ld16(ss + 2 * e - 2);
    for (size_t e = 0; e < ln; e++) {
        uint32_t s = ld16(ss + 2 * e), t = ld32(ts + 4 * e);
        bad |= (t == 0) | (s == k) | ((s == j) & (t > capj)) | ((s == me) & (t > capme));
    }
    return bad;
}

/* Every check of prs.py's _decode, on a parsed view; sets v's waits. No state change. */
static int check(struct prs *p, struct view *v, int src, struct sim_step *step)
{
    uint32_t n = (uint32_t)p->base.n, me = (uint32_t)p->base.me;
    if (v->j != (uint32_t)src)
        return sim_fail(step, "wire names sender %u but came from %d", v->j, src);
    if (v->sn == 0)
        return sim_fail(step, "sequence number 0 is never sent");
    if (v->nd == 0 || col_mask(p->dm, v->dests, v->nd, n, p->W) || BIT(p->dm, v->j) ||
        !BIT(p->dm, me))
        return sim_fail(step, "bad destination list for a copy %u -> %u", v->j, me);
    uint32_t bad = 0, at = 0;
    int32_t prevk = -1;
    v->nw = 0;
    for (uint32_t l = 0; l < v->nk && !bad; l++) {
        uint32_t k = ld16(v->ks + 2 * l), ln = ld16(v->lens + 2 * l);
        bad = k >= n || k == v->j || (int32_t)k <= prevk || ln == 0 ||
              list_bad(v->senders + 2 * at, v->sns + 4 * at, ln, k, v->j, v->sn - 1, me, p->sn,
                       n);
        prevk = (int32_t)k;
        if (k == me) {
            v->ws = v->senders + 2 * at;
            v->wt = v->sns + 4 * at;
            v->nw = ln;
        }
        at += ln;
    }
    if (bad)
        return sim_fail(step, "bad CB lists from %u (keys and senders strictly increasing and "
                        "below n, none the sender's or its own, sns nonzero and in range)", v->j);
    return 0;
}

/* The first unmet wait from *wpos on, or -1 if every wait is met (*wpos then irrelevant). */
static long first_unmet(const struct prs *p, const struct view *v, uint32_t *wpos)
{
    for (uint32_t x = *wpos; x < v->nw; x++) {
        uint32_t s = ld16(v->ws + 2 * x);
        if (ld32(v->wt + 4 * x) > p->deliv[s]) {
            *wpos = x;
            return s;
        }
    }
    return -1;
}

static void merge(struct prs *p, const struct view *v)
{
    uint32_t n = (uint32_t)p->base.n, me = (uint32_t)p->base.me, j = v->j;
    p->deliv[j] = v->sn;
    mclear(p->dm, p->W);
    for (uint32_t i = 0; i < v->nd; i++)
        SET(p->dm, ld16(v->dests + 2 * i));
    uint32_t at = 0;
    for (uint32_t l = 0; l < v->nk; l++) {
        uint32_t k = ld16(v->ks + 2 * l), ln = ld16(v->lens + 2 * l);
        uint32_t *row = p->cb + (size_t)k * n;
        const uint8_t *ss = v->senders + 2 * at, *ts = v->sns + 4 * at;
        at += ln;
        if (k == me)
            continue;
        if (BIT(p->dm, k)) {
            /* everything M waits for at k is no longer a direct predecessor there */
            for (uint32_t e = 0; e < ln; e++) {
                uint32_t *cell = row + ld16(ss + 2 * e);
                *cell = *cell <= ld32(ts + 4 * e) ? 0 : *cell;
            }
        } else {
            /* M's barrier for a non-destination is inherited, largest sn per sender */
            for (uint32_t e = 0; e < ln; e++) {
                uint32_t *cell = row + ld16(ss + 2 * e), t = ld32(ts + 4 * e);
                *cell = *cell < t ? t : *cell;
            }
        }
    }
    for (uint32_t i = 0; i < v->nd; i++) {
        uint32_t d = ld16(v->dests + 2 * i);
        uint32_t *cell = p->cb + (size_t)d * n + j;
        if (d != me && *cell < v->sn)
            *cell = v->sn;
    }
}

static int deliver(struct prs *p, const struct view *v, struct sim_step *step)
{
    if (sim_deliver(step, v->j, v->payload, v->plen) < 0)
        return -1;
    merge(p, v);
    return 0;
}

/* holdback_drain's view of a held record */
static long unmet(void *p, struct hb_node *r)
{
    return first_unmet(p, &((struct rec *)r)->v, &((struct rec *)r)->wpos);
}

static int deliver_held(void *p, struct hb_node *r, struct sim_step *step)
{
    return deliver(p, &((struct rec *)r)->v, step);
}

static int prs_receive(struct sim_machine *m, int src, const uint8_t *data, size_t len,
                       struct sim_step *step)
{
    struct prs *p = (struct prs *)m;
    struct view v = {0};
    if (parse(&v, data, len) < 0)
        return sim_fail(step, "wire truncated: %zu bytes", len);
    if (check(p, &v, src, step) < 0)
        return -1;
    uint64_t key = (uint64_t)v.j << 32 | v.sn;
    if (v.sn <= p->deliv[v.j] || holdback_has(&p->hb, key))
        return sim_fail(step, "duplicate message %u from %u", v.sn, v.j);
    uint32_t wpos = 0;
    long w = first_unmet(p, &v, &wpos);
    if (w >= 0) {
        struct rec *r = malloc(sizeof *r + len);
        if (!r)
            return sim_fail(step, "out of memory");
        memcpy(r->data, data, len);
        parse(&r->v, r->data, len);            /* the same views, over the copy */
        r->v.ws = r->data + (v.ws - data);
        r->v.wt = r->data + (v.wt - data);
        r->v.nw = v.nw;
        r->wpos = wpos;
        r->hb.key = key;
        if (holdback_hold(&p->hb, (uint32_t)w, &r->hb) < 0) {
            free(r);
            return sim_fail(step, "out of memory");
        }
        return 0;
    }
    if (deliver(p, &v, step) < 0)
        return -1;
    return holdback_drain(&p->hb, v.j, p, unmet, deliver_held, step);
}

static long prs_held(struct sim_machine *m)
{
    return (long)((struct prs *)m)->hb.held;
}

const struct sim_ops sim_prs_ops = {
    .name = "prs", .multicast = SIM_NATIVE, .size = sizeof(struct prs),
    .init = prs_init, .fini = prs_fini, .send = prs_send, .receive = prs_receive,
    .held = prs_held,
};
