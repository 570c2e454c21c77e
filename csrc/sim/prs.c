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
 *     our next message to k, 0 for none; cnt[k] counts the nonzero cells of row k. Row `me`
 *     and every cell cb[k * n + k] stay 0.
 *   - Every held message is in exactly one waiting list (waiting[s], FIFO, s the sender of
 *     its first unmet wait, every wait before `wpos` met) and in from[j] (its sender's list,
 *     for the duplicate check); `held` counts them. It owns a copy of its whole wire.
 *   - mark[] and at[] are all zero / unused between calls (decode scratch).
 */
#include "machine.h"

#include <stdlib.h>

struct rec {
    struct rec *next;                  /* waiting list, or the release stack */
    struct rec *fprev, *fnext;         /* from[j] */
    uint32_t j, sn, wpos;
    uint32_t mine, mlen;               /* as in its view */
    uint32_t len;
    uint8_t data[];                    /* the wire */
};

/* a wire's columns, decoded in place */
struct view {
    uint32_t j, sn, nd, nk, total, plen;
    uint32_t mine, mlen;               /* entry index and length of the list for `me` */
    const uint8_t *dests, *ks, *lens, *senders, *sns, *payload;
};

struct prs {
    struct sim_machine base;
    uint32_t sn;
    uint32_t *deliv, *cb, *cnt;
    uint8_t *mark;                     /* scratch: Dests of the copy being checked/merged */
    struct rec **wait_head, **wait_tail, **from;
    long held;
};

static int prs_init(struct sim_machine *m)
{
    struct prs *p = (struct prs *)m;
    size_t n = (size_t)m->n;
    p->deliv = calloc(n, sizeof *p->deliv);
    p->cb = calloc(n * n, sizeof *p->cb);
    p->cnt = calloc(n, sizeof *p->cnt);
    p->mark = calloc(n, 1);
    p->wait_head = calloc(n, sizeof *p->wait_head);
    p->wait_tail = calloc(n, sizeof *p->wait_tail);
    p->from = calloc(n, sizeof *p->from);
    if (!p->deliv || !p->cb || !p->cnt || !p->mark || !p->wait_head || !p->wait_tail || !p->from)
        return -1;
    return 0;
}

static void prs_fini(struct sim_machine *m)
{
    struct prs *p = (struct prs *)m;
    for (int k = 0; p->wait_head && k < m->n; k++)
        for (struct rec *r = p->wait_head[k], *nx; r; r = nx) {
            nx = r->next;
            free(r);
        }
    free(p->deliv);
    free(p->cb);
    free(p->cnt);
    free(p->mark);
    free(p->wait_head);
    free(p->wait_tail);
    free(p->from);
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
    for (uint32_t r = 0; r < n; r++)
        if (p->cnt[r]) {
            nk++;
            total += p->cnt[r];
        }
    uint32_t hlen = 10 + 2 * (uint32_t)k + 4 * nk, wlen = hlen + 6 * total + (uint32_t)len;
    struct sim_cost cost = {hlen, 6 * total, total, 1};
    uint8_t *w = sim_emit(step, dests[0], wlen, cost);
    if (!w)
        return -1;
    sim_put16(w, (uint32_t)m->me);
    sim_put32(w + 2, sn);
    sim_put16(w + 6, (uint32_t)k);
    sim_put16(w + 8, nk);
    for (int i = 0; i < k; i++)
        sim_put16(w + 10 + 2 * i, dests[i]);
    uint8_t *kcol = w + 10 + 2 * k, *lcol = kcol + 2 * nk;
    uint8_t *scol = lcol + 2 * nk, *tcol = scol + 2 * total;
    for (uint32_t r = 0; r < n; r++) {
        if (!p->cnt[r])
            continue;
        sim_put16(kcol, r);
        sim_put16(lcol, p->cnt[r]);
        kcol += 2;
        lcol += 2;
        const uint32_t *row = p->cb + (size_t)r * n;
        for (uint32_t s = 0; s < n; s++)
            if (row[s]) {
                sim_put16(scol, s);
                sim_put32(tcol, row[s]);
                scol += 2;
                tcol += 4;
            }
    }
    memcpy(tcol, payload, len);
    for (int i = 1; i < k; i++) {
        uint8_t *c = sim_emit(step, dests[i], wlen, cost);
        if (!c)
            return -1;
        memcpy(c, w, wlen);
    }
    /* M is now the only direct predecessor of our next message to each destination. */
    for (int i = 0; i < k; i++) {
        uint32_t *row = p->cb + (size_t)dests[i] * n;
        memset(row, 0, n * sizeof *row);
        row[m->me] = sn;
        p->cnt[dests[i]] = 1;
    }
    return 0;
}

/* ---- receive ---- */

/* The columns of a wire whose framing was checked (or of a held copy). */
static int parse(struct view *v, const uint8_t *data, size_t len)
{
    if (len < 10)
        return -1;
    v->j = sim_get16(data);
    v->sn = sim_get32(data + 2);
    v->nd = sim_get16(data + 6);
    v->nk = sim_get16(data + 8);
    size_t need = 10 + 2 * (size_t)v->nd + 4 * (size_t)v->nk;
    if (len < need)
        return -1;
    v->dests = data + 10;
    v->ks = v->dests + 2 * v->nd;
    v->lens = v->ks + 2 * v->nk;
    size_t total = 0;
    for (uint32_t i = 0; i < v->nk; i++)
        total += sim_get16(v->lens + 2 * i);
    if (len - need < 6 * total)
        return -1;
    v->total = (uint32_t)total;
    v->senders = v->lens + 2 * v->nk;
    v->sns = v->senders + 2 * total;
    v->payload = v->sns + 4 * total;
    v->plen = (uint32_t)(len - need - 6 * total);
    return 0;
}

/* Every check of prs.py's _decode, on a parsed view; sets v->mine/mlen. No state change. */
static int check(struct prs *p, struct view *v, int src, struct sim_step *step)
{
    uint32_t n = (uint32_t)p->base.n, me = (uint32_t)p->base.me;
    if (v->j != (uint32_t)src)
        return sim_fail(step, "wire names sender %u but came from %d", v->j, src);
    if (v->sn == 0)
        return sim_fail(step, "sequence number 0 is never sent");
    int seen_me = 0;
    uint32_t marked = 0;                         /* dests[0 .. marked) are distinct, marked */
    for (; marked < v->nd; marked++) {
        uint32_t d = sim_get16(v->dests + 2 * marked);
        if (d >= n || d == v->j || p->mark[d])
            break;
        p->mark[d] = 1;
        seen_me |= d == me;
    }
    int bad = v->nd == 0 || marked < v->nd;
    while (marked--)
        p->mark[sim_get16(v->dests + 2 * marked)] = 0;
    if (bad || !seen_me)
        return sim_fail(step, "bad destination list for a copy %u -> %u", v->j, me);
    v->mine = v->mlen = 0;
    uint32_t at = 0, prevk = 0;
    for (uint32_t l = 0; l < v->nk; l++) {
        uint32_t k = sim_get16(v->ks + 2 * l), ln = sim_get16(v->lens + 2 * l);
        if (k >= n || k == v->j || (l && k <= prevk) || ln == 0)
            return sim_fail(step, "bad CB list keys (strictly increasing, below n, not the "
                            "sender's)");
        prevk = k;
        if (k == me) {
            v->mine = at;
            v->mlen = ln;
        }
        for (uint32_t e = at; e < at + ln; e++) {
            uint32_t s = sim_get16(v->senders + 2 * e), t = sim_get32(v->sns + 4 * e);
            if (s >= n || t == 0)
                return sim_fail(step, "CB entry with a bad process id or sequence number 0");
            if (e > at && s <= sim_get16(v->senders + 2 * (e - 1)))
                return sim_fail(step, "a CB list's senders are not strictly increasing");
            if (s == k || (s == v->j && t >= v->sn) || (s == me && t > p->sn))
                return sim_fail(step, "bad CB list for process %u", k);
        }
        at += ln;
    }
    return 0;
}

/* The first unmet wait from *wpos on, or -1 if every wait is met (*wpos then irrelevant). */
static long first_unmet(const struct prs *p, const struct view *v, uint32_t *wpos)
{
    for (uint32_t x = *wpos; x < v->mlen; x++) {
        uint32_t e = v->mine + x, s = sim_get16(v->senders + 2 * e);
        if (sim_get32(v->sns + 4 * e) > p->deliv[s]) {
            *wpos = x;
            return s;
        }
    }
    return -1;
}

static void wait_on(struct prs *p, struct rec *r, long s)
{
    r->next = NULL;
    if (p->wait_tail[s])
        p->wait_tail[s]->next = r;
    else
        p->wait_head[s] = r;
    p->wait_tail[s] = r;
}

static void merge(struct prs *p, const struct view *v)
{
    uint32_t n = (uint32_t)p->base.n, me = (uint32_t)p->base.me, j = v->j;
    p->deliv[j] = v->sn;
    for (uint32_t i = 0; i < v->nd; i++)
        p->mark[sim_get16(v->dests + 2 * i)] = 1;
    uint32_t at = 0;
    for (uint32_t l = 0; l < v->nk; l++) {
        uint32_t k = sim_get16(v->ks + 2 * l), ln = sim_get16(v->lens + 2 * l);
        uint32_t *row = p->cb + (size_t)k * n, c = p->cnt[k];
        const uint8_t *ss = v->senders + 2 * at, *ts = v->sns + 4 * at;
        at += ln;
        if (k == me)
            continue;
        if (p->mark[k]) {
            /* everything M waits for at k is no longer a direct predecessor there */
            for (uint32_t e = 0; e < ln; e++) {
                uint32_t *cell = row + sim_get16(ss + 2 * e);
                if (*cell && *cell <= sim_get32(ts + 4 * e)) {
                    *cell = 0;
                    c--;
                }
            }
        } else {
            /* M's barrier for a non-destination is inherited, largest sn per sender */
            for (uint32_t e = 0; e < ln; e++) {
                uint32_t *cell = row + sim_get16(ss + 2 * e), t = sim_get32(ts + 4 * e);
                if (*cell < t) {
                    c += !*cell;
                    *cell = t;
                }
            }
        }
        p->cnt[k] = c;
    }
    for (uint32_t i = 0; i < v->nd; i++) {
        uint32_t d = sim_get16(v->dests + 2 * i);
        p->mark[d] = 0;
        if (d == me)
            continue;
        uint32_t *cell = p->cb + (size_t)d * n + j;
        if (*cell < v->sn) {
            p->cnt[d] += !*cell;
            *cell = v->sn;
        }
    }
}

static int deliver(struct prs *p, const struct view *v, struct sim_step *step)
{
    if (sim_deliver(step, v->j, v->payload, v->plen) < 0)
        return -1;
    merge(p, v);
    return 0;
}

static void unlink_from(struct prs *p, struct rec *r)
{
    if (r->fprev)
        r->fprev->fnext = r->fnext;
    else
        p->from[r->j] = r->fnext;
    if (r->fnext)
        r->fnext->fprev = r->fprev;
}

/* Pushes onto *stack, in their indexed order, the held messages waiting on s that are now
 * deliverable; the others are indexed again under their next unmet wait. */
static void release(struct prs *p, uint32_t s, struct rec **stack)
{
    struct rec *r = p->wait_head[s], *nx;
    p->wait_head[s] = p->wait_tail[s] = NULL;
    for (; r; r = nx) {
        nx = r->next;
        struct view v;
        parse(&v, r->data, r->len);
        v.mine = r->mine;
        v.mlen = r->mlen;
        long w = first_unmet(p, &v, &r->wpos);
        if (w >= 0) {
            wait_on(p, r, w);
        } else {
            unlink_from(p, r);
            p->held--;
            r->next = *stack;
            *stack = r;
        }
    }
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
    int dup = v.sn <= p->deliv[v.j];
    for (struct rec *r = p->from[v.j]; r && !dup; r = r->fnext)
        dup = r->sn == v.sn;
    if (dup)
        return sim_fail(step, "duplicate message %u from %u", v.sn, v.j);
    uint32_t wpos = 0;
    long w = first_unmet(p, &v, &wpos);
    if (w >= 0) {
        struct rec *r = malloc(sizeof *r + len);
        if (!r)
            return sim_fail(step, "out of memory");
        memcpy(r->data, data, len);
        r->len = (uint32_t)len;
        r->j = v.j;
        r->sn = v.sn;
        r->wpos = wpos;
        r->mine = v.mine;
        r->mlen = v.mlen;
        r->fprev = NULL;
        r->fnext = p->from[v.j];
        if (r->fnext)
            r->fnext->fprev = r;
        p->from[v.j] = r;
        wait_on(p, r, w);
        p->held++;
        return 0;
    }
    if (deliver(p, &v, step) < 0)
        return -1;
    struct rec *stack = NULL;
    release(p, v.j, &stack);
    int rc = 0;
    while (stack) {
        struct rec *r = stack;
        stack = r->next;
        if (rc == 0) {
            parse(&v, r->data, r->len);
            rc = deliver(p, &v, step);
            if (rc == 0)
                release(p, r->j, &stack);
        }
        free(r);
    }
    return rc;
}

static long prs_held(struct sim_machine *m)
{
    return ((struct prs *)m)->held;
}

const struct sim_ops sim_prs_ops = {
    .name = "prs", .multicast = SIM_NATIVE, .size = sizeof(struct prs),
    .init = prs_init, .fini = prs_fini, .send = prs_send, .receive = prs_receive,
    .held = prs_held,
};
