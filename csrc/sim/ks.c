/* ks.c - the C twin of bus1py/causal/ks.py: Kshemkalyani-Singhal optimal causal multicast
 * (Algorithm 6.3), O_M computed per destination, held messages as bus1py/causal/holdback.py.
 *
 * Wire (u16 ids, u32 clocks, little-endian), the columnar layout of bus1py/causal/base.py:
 *   k | t_k | nd | no | Dests[nd] | dlen[no] || sender[no] | clock[no] | ids[sum dlen] || payload
 * cost (10 + 2nd + 2no, 6no + 2 sum dlen, no, data). Delivery: a copy M from k is delivered
 * at j iff every entry (m, t) of O_M listing j has t <= SR[m].
 *
 * Invariants:
 *   - log[s] holds sender s's entries (t, Dests mask) in the insertion order of ks.py's dict
 *     log[s]: updated entries keep their place, SND appends the own entry, and a merged row
 *     follows the side ks.py's comprehension iterates. That order reaches the wire, so it
 *     is the Python one for every wire ks.py accepts (also entries out of clock order).
 *   - A mask is W = ceil(n/64) words, process x at bit x % 64 of word x / 64.
 *   - head[s]..tail[s] lists, in append order, the held records whose first unmet wait is on
 *     s; every held record is on exactly one list, and its key k << 32 | t_k (never 0, as
 *     t_k >= 1) is in the open-addressing set `ids`, which has no other keys.
 *   - A held record owns a copy of its wire and is decoded again when delivered (a decoding
 *     is a function of the bytes); the scratch arrays hold nothing between calls.
 */
#include "machine.h"

#include <stdlib.h>

typedef uint64_t word;
#define BIT(m, x) ((m)[(x) >> 6] >> ((x) & 63) & 1)
#define SET(m, x) ((m)[(x) >> 6] |= (word)1 << ((x) & 63))
#define CLR(m, x) ((m)[(x) >> 6] &= ~((word)1 << ((x) & 63)))
#define NONE UINT32_MAX

struct row { uint32_t *t; word *m; uint32_t len, cap; };
struct ent { uint32_t s, t; };
struct rec {
    struct rec *next;
    uint32_t k, tk, x, nwait, len;
    struct ent w[];          /* the waits in wire order, then the wire's bytes */
};
/* an entry SND puts on some copy: kept for all (keep) and/or hit (Dests meets M's) */
struct item { uint32_t t, io, hit; uint16_t s, rl; uint8_t keep; };

struct ks {
    struct sim_machine base;
    size_t W;
    uint32_t clock, *sr;
    struct row *log;
    struct rec **head, **tail, **stack;
    uint64_t *ids;
    size_t idcap, held, stcap;
    word *dm;
    /* SND scratch: items, their hit masks, the kept entries' ids (encoded), per-dest counts */
    struct item *it;
    word *hits;
    uint8_t *sid;
    uint32_t *hc, *hnk;
    size_t itcap, hitcap, sidcap;
    /* decode scratch: O_M entry i (i == no: M itself), grouped by sender via order/start */
    uint32_t k, tk, no, nw, *order, *cnt, *start, *nt;
    const uint8_t *payload;
    size_t plen, ecap, emcap, ocap, wcap, ntcap, nmcap;
    struct ent *e, *w;
    word *em, *nm;
};

static int grow(void *arr, size_t *cap, size_t want, size_t size)
{
    return sim_reserve((void **)arr, cap, 0, want, size);
}

static int zero(const word *a, size_t W)
{
    for (size_t i = 0; i < W; i++)
        if (a[i])
            return 0;
    return 1;
}

static int row_fit(struct row *r, size_t want, size_t W)
{
    if (want <= r->cap)
        return 0;
    size_t cap = r->cap ? r->cap : 1;
    while (cap < want)
        cap *= 2;
    uint32_t *t = realloc(r->t, cap * sizeof *t);
    if (t)
        r->t = t;
    word *m = t ? realloc(r->m, cap * W * sizeof *m) : NULL;
    if (!m)
        return -1;
    r->m = m;
    r->cap = (uint32_t)cap;
    return 0;
}

static uint32_t row_max(const struct row *r)
{
    uint32_t top = 0;
    for (uint32_t i = 0; i < r->len; i++)
        top = r->t[i] > top ? r->t[i] : top;
    return top;
}

/* PURGE_NULL_ENTRIES: deletes the empty entries but `top`, keeping the order */
static void purge(struct row *r, size_t W, uint32_t top)
{
    uint32_t o = 0;
    for (uint32_t i = 0; i < r->len; i++) {
        if (r->t[i] != top && zero(r->m + i * W, W))
            continue;
        if (o != i) {
            r->t[o] = r->t[i];
            memcpy(r->m + o * W, r->m + i * W, W * sizeof(word));
        }
        o++;
    }
    r->len = o;
}

/* ---- the set of held keys: linear probing, backward-shift deletion ---- */

static size_t home(const struct ks *q, uint64_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (q->idcap - 1);
}

static long hs_find(const struct ks *q, uint64_t key)
{
    for (size_t i = q->idcap ? home(q, key) : 0; q->idcap && q->ids[i]; i = (i + 1) & (q->idcap - 1))
        if (q->ids[i] == key)
            return (long)i;
    return -1;
}

static int hs_add(struct ks *q, uint64_t key)
{
    if (2 * (q->held + 1) > q->idcap) {
        size_t old = q->idcap;
        uint64_t *was = q->ids, *now = calloc(old ? 2 * old : 16, sizeof *now);
        if (!now)
            return -1;
        q->ids = now;
        q->idcap = old ? 2 * old : 16;
        for (size_t i = 0; i < old; i++)
            if (was[i]) {
                size_t j = home(q, was[i]);
                while (now[j])
                    j = (j + 1) & (q->idcap - 1);
                now[j] = was[i];
            }
        free(was);
    }
    size_t j = home(q, key);
    while (q->ids[j])
        j = (j + 1) & (q->idcap - 1);
    q->ids[j] = key;
    q->held++;
    return 0;
}

static void hs_del(struct ks *q, uint64_t key)
{
    size_t mask = q->idcap - 1, i = (size_t)hs_find(q, key), j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!q->ids[j])
            break;
        /* the key at j may move to i unless its home lies in the cyclic range (i, j] */
        if (((j - home(q, q->ids[j])) & mask) >= ((j - i) & mask)) {
            q->ids[i] = q->ids[j];
            i = j;
        }
    }
    q->ids[i] = 0;
    q->held--;
}

static int ks_init(struct sim_machine *m)
{
    struct ks *q = (struct ks *)m;
    size_t n = (size_t)m->n, W = q->W = (n + 63) / 64;
    q->sr = calloc(n, sizeof *q->sr);
    q->log = calloc(n, sizeof *q->log);
    q->head = calloc(n, sizeof *q->head);
    q->tail = calloc(n, sizeof *q->tail);
    q->hc = calloc(n, sizeof *q->hc);
    q->hnk = calloc(n, sizeof *q->hnk);
    q->cnt = calloc(n, sizeof *q->cnt);
    q->start = calloc(n, sizeof *q->start);
    q->dm = calloc(W, sizeof *q->dm);
    if (!q->sr || !q->log || !q->head || !q->tail || !q->hc || !q->hnk || !q->cnt ||
        !q->start || !q->dm)
        return -1;
    for (size_t s = 0; s < n; s++) {           /* the book's (s, 0, {}) for every s */
        if (row_fit(&q->log[s], 1, W) < 0)
            return -1;
        q->log[s].t[0] = 0;
        memset(q->log[s].m, 0, W * sizeof(word));
        q->log[s].len = 1;
    }
    return 0;
}

static void ks_fini(struct sim_machine *m)
{
    struct ks *q = (struct ks *)m;
    for (int s = 0; s < m->n; s++) {
        if (q->log) {
            free(q->log[s].t);
            free(q->log[s].m);
        }
        for (struct rec *r = q->head ? q->head[s] : NULL, *next; r; r = next) {
            next = r->next;
            free(r);
        }
    }
    void *all[] = {q->sr, q->log, q->head, q->tail, q->stack, q->ids, q->dm, q->it, q->hits,
                   q->sid, q->hc, q->hnk, q->order, q->cnt, q->start, q->nt, q->e, q->w,
                   q->em, q->nm};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* ---- SND (ks.py Ks._send) ---- */

/* the copy to d (no entries): header, columns and payload */
static void write_copy(struct ks *q, uint8_t *w, uint32_t d, const uint16_t *dests, int nd,
                       uint32_t no, size_t ni, const uint8_t *payload, size_t len)
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
        int hasd = e->hit != NONE && BIT(q->hits + (size_t)e->hit * q->W, d);
        if (!e->keep && !hasd)
            continue;
        sim_put16(pl, e->rl + (uint32_t)hasd);
        sim_put16(ps, e->s);
        sim_put32(pc, e->t);
        pl += 2, ps += 2, pc += 4;
        if (e->rl) {
            memcpy(pi, q->sid + 2 * (size_t)e->io, 2 * (size_t)e->rl);
            pi += 2 * (size_t)e->rl;
        }
        if (hasd) {
            sim_put16(pi, d);
            pi += 2;
        }
    }
    memcpy(pi, payload, len);
}

static int ks_send(struct sim_machine *m, const uint16_t *dests, int nd,
                   const uint8_t *payload, size_t len, struct sim_step *step)
{
    struct ks *q = (struct ks *)m;
    size_t W = q->W, n = (size_t)m->n, me = (size_t)m->me, total = 0;
    if (q->clock == UINT32_MAX)
        return sim_fail(step, "process %d exhausted its 32-bit clock", m->me);
    for (size_t s = 0; s < n; s++)
        total += q->log[s].len;
    if (total > 0xFFFF)
        return sim_fail(step, "%d holds more than 65535 log entries, beyond the wire", m->me);
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
        uint32_t newest = row_max(r);
        int single = r->len == 1, touched = 0;
        for (uint32_t j = 0; j < r->len; j++) {
            word *D = r->m + j * W, *h = q->hits + nh * W, any = 0;
            uint32_t rl = 0;
            for (size_t x = 0; x < W; x++) {
                h[x] = D[x] & dm[x];
                any |= h[x];
                rl += (uint32_t)__builtin_popcountll(D[x] & ~dm[x]);
            }
            int keep = rl || single || r->t[j] == newest;
            if (!any && !keep)
                continue;
            q->it[ni++] = (struct item){r->t[j], (uint32_t)nids, any ? (uint32_t)nh : NONE,
                                        (uint16_t)s, (uint16_t)rl, (uint8_t)keep};
            if (any) {
                for (size_t x = 0; x < W; x++) {
                    D[x] &= ~dm[x];
                    for (word b = h[x]; b; b &= b - 1) {
                        size_t d = x * 64 + (size_t)__builtin_ctzll(b);
                        q->hc[d]++;
                        q->hnk[d] += !keep;
                    }
                }
                nh++;
                touched = 1;
            }
            if (keep) {
                nkept++;
                if (grow(&q->sid, &q->sidcap, 2 * (nids + rl), 1) < 0)
                    return sim_fail(step, "out of memory");
                for (size_t x = 0; x < W; x++)
                    for (word b = D[x]; b; b &= b - 1)
                        sim_put16(q->sid + 2 * nids++, (uint32_t)(x * 64 + (size_t)__builtin_ctzll(b)));
            }
        }
        if ((touched || s == me) && r->len > 1)
            purge(r, W, newest);
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
            write_copy(q, w, d, dests, nd, no, ni, payload, len);
        if (w && !q->hc[d])
            same = w;
    }
    for (int i = 0; i < nd; i++)
        q->hc[dests[i]] = q->hnk[dests[i]] = 0;
    struct row *r = &q->log[me];                /* step 4: the own entry, after the copies */
    if (rc || row_fit(r, r->len + 1, W) < 0)
        return rc ? rc : sim_fail(step, "out of memory");
    r->t[r->len] = q->clock;
    memcpy(r->m + r->len++ * W, dm, W * sizeof *dm);
    return 0;
}

/* ---- RCV (ks.py Ks._decode, _merge; holdback.py HoldBack.admit) ---- */

/* every check ks.py makes, filling the decode scratch; changes no state */
static int decode(struct ks *q, uint32_t src, const uint8_t *data, size_t len,
                  struct sim_step *step)
{
    size_t W = q->W;
    uint32_t n = (uint32_t)q->base.n, me = (uint32_t)q->base.me;
    if (len < 10)
        return sim_fail(step, "wire truncated: %zu bytes, header needs 10", len);
    uint32_t k = sim_get16(data), tk = sim_get32(data + 2), nd = sim_get16(data + 6);
    uint32_t no = sim_get16(data + 8);
    if (k != src)
        return sim_fail(step, "wire names sender %u but came from %u", k, src);
    if (!tk)
        return sim_fail(step, "clock 0 is never sent");
    size_t need = 10 + 2 * (size_t)nd + 8 * (size_t)no, total = 0;
    if (len < need)
        return sim_fail(step, "wire truncated: %zu bytes, sections need %zu", len, need);
    const uint8_t *pd = data + 10, *pl = pd + 2 * nd, *ps = pl + 2 * no, *pc = ps + 2 * no;
    const uint8_t *pi = pc + 4 * no;
    int bad = !nd;
    for (uint32_t i = 0; i < nd; i++)
        bad |= sim_get16(pd + 2 * i) >= n;
    for (uint32_t i = 0; i < no; i++) {
        bad |= sim_get16(ps + 2 * i) >= n;
        total += sim_get16(pl + 2 * i);
    }
    if (bad)
        return sim_fail(step, "a process id is out of range 0..%u", n - 1);
    word *dm = q->dm;
    memset(dm, 0, W * sizeof *dm);
    for (uint32_t i = 0; i < nd; i++) {
        uint32_t x = sim_get16(pd + 2 * i);
        bad |= (int)BIT(dm, x);
        SET(dm, x);
    }
    if (bad || !BIT(dm, me) || BIT(dm, k))
        return sim_fail(step, "bad destination list for a copy %u -> %u", k, me);
    if (len < need + 2 * total)
        return sim_fail(step, "wire truncated: %zu bytes, sections need %zu", len, need + 2 * total);
    for (size_t i = 0; i < total; i++)
        if (sim_get16(pi + 2 * i) >= n)
            return sim_fail(step, "a process id is out of range 0..%u", n - 1);
    if (grow(&q->e, &q->ecap, no + 1, sizeof *q->e) < 0 ||
        grow(&q->em, &q->emcap, (no + 1) * W, sizeof *q->em) < 0 ||
        grow(&q->order, &q->ocap, no + 1, sizeof *q->order) < 0 ||
        grow(&q->w, &q->wcap, no + 1, sizeof *q->w) < 0)
        return sim_fail(step, "out of memory");
    q->nw = 0;
    for (uint32_t i = 0, at = 0; i < no; i++) {
        uint32_t s = sim_get16(ps + 2 * i), t = sim_get32(pc + 4 * i), ln = sim_get16(pl + 2 * i);
        word *mk = q->em + i * W, clash;
        memset(mk, 0, W * sizeof *mk);
        for (uint32_t y = 0; y < ln; y++, at++) {
            uint32_t x = sim_get16(pi + 2 * (size_t)at);
            bad |= (int)BIT(mk, x);
            SET(mk, x);
        }
        if (bad)
            return sim_fail(step, "O_M entry (%u, %u) lists a destination twice", s, t);
        clash = BIT(mk, s);
        for (size_t x = 0; x < W; x++)
            clash |= mk[x] & dm[x] & ~(x == me >> 6 ? (word)1 << (me & 63) : 0);
        if (clash)
            return sim_fail(step, "bad O_M entry (%u, %u)", s, t);
        if (!t && !zero(mk, W))
            return sim_fail(step, "bad O_M entry: clock 0 with destinations");
        q->e[i] = (struct ent){s, t};
        if (BIT(mk, me)) {                      /* a wait; RCV step 3 then drops j */
            q->w[q->nw++] = (struct ent){s, t};
            CLR(mk, me);
        }
    }
    q->e[no] = (struct ent){k, tk};             /* step 3: M joins O_M, without j */
    memcpy(q->em + no * W, dm, W * sizeof *dm);
    CLR(q->em + no * W, me);
    /* group by sender, stably (the appended M last in k's group) */
    memset(q->cnt, 0, n * sizeof *q->cnt);
    for (uint32_t i = 0; i <= no; i++)
        q->cnt[q->e[i].s]++;
    for (uint32_t s = 0, sum = 0; s < n; s++)
        q->start[s] = sum += q->cnt[s];
    for (uint32_t i = no + 1; i-- > 0;)
        q->order[--q->start[q->e[i].s]] = i;
    for (uint32_t s = 0; s < n; s++) {
        uint32_t g = q->cnt[s] - (s == k), *idx = q->order + q->start[s], top = 0;
        for (uint32_t a = 0; a < g; a++) {
            uint32_t t = q->e[idx[a]].t;
            top = t > top ? t : top;
            for (uint32_t b = a + 1; b < g; b++)
                if (q->e[idx[b]].t == t)
                    return sim_fail(step, "O_M lists an entry twice");
        }
        if (g && s == k && top >= tk)
            return sim_fail(step, "O_M carries an entry of %u not older than M itself", k);
        if (g && s == me && top > q->clock)
            return sim_fail(step, "O_M carries an entry of %u that %u never sent", me, me);
    }
    q->k = k, q->tk = tk, q->no = no;
    q->payload = pi + 2 * total;
    q->plen = len - need - 2 * total;
    return 0;
}

/* step 4-5 for sender s: LOG[s] against O_M's entries idx[0..g) (ks.py Ks._merge) */
static int merge_row(struct ks *q, struct row *r, const uint32_t *idx, uint32_t g)
{
    size_t W = q->W;
    uint32_t i, j, nl = 0;
    if (g == r->len) {                          /* equal as dicts: nothing changes */
        for (i = 0; i < g; i++) {
            for (j = 0; j < r->len && r->t[j] != q->e[idx[i]].t; j++)
                ;
            if (j == r->len || memcmp(r->m + j * W, q->em + idx[i] * W, W * sizeof(word)))
                break;
        }
        if (i == g)
            return 0;
    }
    uint32_t omax = 0, lmax = row_max(r);
    for (i = 0; i < g; i++)
        omax = q->e[idx[i]].t > omax ? q->e[idx[i]].t : omax;
    if (grow(&q->nt, &q->ntcap, g + r->len, sizeof *q->nt) < 0 ||
        grow(&q->nm, &q->nmcap, (g + r->len) * W, sizeof *q->nm) < 0)
        return -1;
    /* the side with the newest entry is iterated; an entry the other side lacks survives
     * only if newer than all of the other side's; common entries intersect their Dests */
    int ours = omax > lmax;
    uint32_t na = ours ? g : r->len, nb = ours ? r->len : g, bmax = ours ? lmax : omax;
    for (uint32_t a = 0; a < na; a++) {
        uint32_t t = ours ? q->e[idx[a]].t : r->t[a], b;
        const word *ma = ours ? q->em + idx[a] * W : r->m + a * W, *mb = NULL;
        for (b = 0; b < nb && (ours ? r->t[b] : q->e[idx[b]].t) != t; b++)
            ;
        if (b < nb)
            mb = ours ? r->m + b * W : q->em + idx[b] * W;
        else if (t <= bmax)
            continue;
        for (size_t x = 0; x < W; x++)
            q->nm[nl * W + x] = mb ? ma[x] & mb[x] : ma[x];
        q->nt[nl++] = t;
    }
    if (row_fit(r, nl, W) < 0)
        return -1;
    memcpy(r->t, q->nt, nl * sizeof *q->nt);
    memcpy(r->m, q->nm, nl * W * sizeof *q->nm);
    r->len = nl;
    if (nl > 1)
        purge(r, W, omax > lmax ? omax : lmax);
    return 0;
}

static int deliver(struct ks *q, struct sim_step *step)
{
    uint32_t n = (uint32_t)q->base.n, me = (uint32_t)q->base.me;
    if (sim_deliver(step, q->k, q->payload, (uint32_t)q->plen) < 0)
        return -1;
    q->sr[q->k] = q->tk;
    for (uint32_t s = 0; s < n; s++)
        if (q->cnt[s] && merge_row(q, &q->log[s], q->order + q->start[s], q->cnt[s]) < 0)
            return sim_fail(step, "out of memory");
    if (!q->cnt[me] && q->log[me].len > 1)
        purge(&q->log[me], q->W, row_max(&q->log[me]));
    return 0;
}

/* the first wait from x on not yet met; the record goes on that sender's list */
static uint32_t unmet(const struct ks *q, const struct ent *w, uint32_t nw, uint32_t x)
{
    while (x < nw && w[x].t <= q->sr[w[x].s])
        x++;
    return x;
}

static void hold(struct ks *q, struct rec *r)
{
    uint32_t s = r->w[r->x].s;
    r->next = NULL;
    if (q->tail[s])
        q->tail[s]->next = r;
    else
        q->head[s] = r;
    q->tail[s] = r;
}

static int ks_receive(struct sim_machine *m, int src, const uint8_t *data, size_t len,
                      struct sim_step *step)
{
    struct ks *q = (struct ks *)m;
    if (decode(q, (uint32_t)src, data, len, step) < 0)
        return -1;
    uint64_t key = (uint64_t)q->k << 32 | q->tk;
    if (q->tk <= q->sr[q->k] || hs_find(q, key) >= 0)
        return sim_fail(step, "duplicate message %u from %u", q->tk, q->k);
    uint32_t x = unmet(q, q->w, q->nw, 0);
    if (x < q->nw) {
        struct rec *r = malloc(sizeof *r + q->nw * sizeof(struct ent) + len);
        if (!r || hs_add(q, key) < 0) {
            free(r);
            return sim_fail(step, "out of memory");
        }
        *r = (struct rec){NULL, q->k, q->tk, x, q->nw, (uint32_t)len};
        memcpy(r->w, q->w, q->nw * sizeof(struct ent));
        memcpy(r->w + q->nw, data, len);
        hold(q, r);
        return 0;
    }
    if (grow(&q->stack, &q->stcap, q->held + 1, sizeof *q->stack) < 0)
        return sim_fail(step, "out of memory");
    size_t top = 0;
    struct rec *cur = NULL;                     /* owns the bytes being delivered */
    for (uint32_t from = q->k;;) {              /* holdback.py admit: a LIFO of releases */
        int rc = deliver(q, step);
        free(cur);
        if (rc < 0)
            break;
        struct rec *r = q->head[from], *next;
        q->head[from] = q->tail[from] = NULL;
        for (; r; r = next) {
            next = r->next;
            if ((r->x = unmet(q, r->w, r->nwait, r->x)) < r->nwait) {
                hold(q, r);
            } else {
                hs_del(q, (uint64_t)r->k << 32 | r->tk);
                q->stack[top++] = r;
            }
        }
        if (!top)
            return 0;
        cur = q->stack[--top];
        from = cur->k;
        if (decode(q, cur->k, (const uint8_t *)(cur->w + cur->nwait), cur->len, step) < 0) {
            free(cur);
            break;
        }
    }
    while (top)                                 /* released, so on no list: the machine is */
        free(q->stack[--top]);                  /* unusable after a failure, but leaks none */
    return -1;
}

static long ks_held(struct sim_machine *m)
{
    return (long)((struct ks *)m)->held;
}

const struct sim_ops sim_ks_ops = {
    .name = "ks", .multicast = SIM_NATIVE, .size = sizeof(struct ks),
    .init = ks_init, .fini = ks_fini, .send = ks_send, .receive = ks_receive,
    .held = ks_held,
};
