/* The streamed walk (bus1py/check/arrays/streamed.py drives it): the causal walk of one
 * column block over the events of every process given batch by batch in seq order, never
 * the whole trace (the peel of consistent's chains: chains.c); beside it, the check of a
 * producer's clock column over the block's columns.
 *
 * Invariants: a process's events arrive in seq order, each batch given once (sw_give,
 * cp_give) and read until its end; an origin (slot, seq) is walked iff seq is below the
 * events walked of its slot, so no bit per message is kept; an origin's clock is held
 * from its walk until its last receive (its receive count, from the linking, less the
 * receives taken before it) and then freed; a receive whose origin was walked but holds no
 * clock means the counts lie, and the run stops with -2. Memory: per process, its current
 * and known clocks (2 x ncols int32), its last claim (cw) and a batch's pointers; per live
 * origin (walked, a receive still to come) one clock and claim row and a table entry, the
 * table at most half full.
 *
 * A causality cycle (a broken trace) leaves the walk where every process with events left
 * waits for an origin not walked. sw_break then takes the receive of a process on a cycle
 * of those waits (so on a causality cycle) with the origin's clock of the previous round
 * (zeros in the first): a back edge, whose
 * origin's clock is recorded when it is walked. Clocks only grow from round to round and
 * stay below the least fixpoint (arrays/relax.py's clocks), and a round that changes no
 * back edge's clock computed that fixpoint: its violations are the answer (sw_settled).
 * The rounds break at the same receives (what can be walked depends on the order alone,
 * not on clock values), so a round is repeated exactly. A back edge costs a row of the
 * back table until the handle is freed: that is what a broken trace adds.
 *
 * The claim check is arrays/walk.py's verify_clocks, event by event, over the claim
 * columns clo..clo+cw-1: a claim must be the join of its process predecessor's claim and
 * its origin's, its own entry (the column of its slot, if in range) set to seq + 1 and
 * above the join's. The first failure by (slot, seq, column) is kept; a back edge's
 * receive is checked from the second round on (its origin's claim is recorded then). */
#include "table.h"


struct sw {
    int32_t nslots, ncols, inside;
    int32_t *bcol;                  /* the block column of each slot */
    int32_t *cur, *known;           /* nslots x ncols */
    int64_t *seq;                   /* events walked of each slot */
    struct batch *in;
    struct table live;              /* origin key -> (pool row, receives left) */
    int32_t *pool;                  /* rows of ncols + cw: an origin's clock and claim */
    int64_t pool_cap, pool_top, *spare, nspare;
    int64_t max_live;
    /* the second pass's targets (slot, seq, column, need), sorted by slot */
    int64_t ntargets, *target, *partner, *t_lo, *t_hi;
    int64_t unfound;
    /* back edges: origin key -> (back row, receives taken before the origin this round);
     * a back row: the origin's clock of the last round, its claim, whether it is known */
    struct table back;
    int32_t *bpool;
    int64_t bcap, btop, seen;
    int changed;
    /* the producer's claim, columns clo..clo+cw-1 (cw 0: none) */
    int32_t cw, clo;
    int32_t *cprev;                 /* nslots x cw: each slot's last claim */
    int64_t bad[4];                 /* slot, seq, column, reason of the first failure */
};

static int64_t row_len(const struct sw *s) { return (int64_t)s->ncols + s->cw; }

void sw_free(void *h)
{
    struct sw *s = h;
    if (!s)
        return;
    free(s->bcol); free(s->cur); free(s->known); free(s->seq); free(s->in);
    t_free(&s->live); t_free(&s->back);
    free(s->pool); free(s->spare); free(s->bpool); free(s->cprev);
    free(s->target); free(s->partner); free(s->t_lo); free(s->t_hi);
    free(s);
}

void *sw_new(int32_t nslots, int32_t ncols, int32_t inside, const int32_t *bcol,
             int32_t cw, int32_t clo)
{
    struct sw *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->nslots = nslots;
    s->ncols = ncols;
    s->inside = inside;
    s->cw = cw;
    s->clo = clo;
    s->bcol = malloc(sizeof(int32_t) * (nslots + 1));
    s->cur = calloc((size_t)nslots * ncols + 1, sizeof(int32_t));
    s->known = calloc((size_t)nslots * ncols + 1, sizeof(int32_t));
    s->cprev = calloc((size_t)nslots * cw + 1, sizeof(int32_t));
    s->seq = calloc(nslots + 1, sizeof(int64_t));
    s->in = calloc(nslots + 1, sizeof(struct batch));
    s->pool_cap = 1024;
    s->pool = malloc(sizeof(int32_t) * s->pool_cap * row_len(s));
    s->spare = malloc(sizeof(int64_t) * s->pool_cap);
    s->target = malloc(sizeof(int64_t) * 4);
    s->partner = malloc(sizeof(int64_t));
    s->t_lo = calloc(nslots + 1, sizeof(int64_t));
    s->t_hi = calloc(nslots + 1, sizeof(int64_t));
    if (!s->bcol || !s->cur || !s->known || !s->cprev || !s->seq || !s->in || !s->pool
        || !s->spare || !s->target || !s->partner || !s->t_lo || !s->t_hi
        || t_init(&s->live, 1024) || t_init(&s->back, 16)) {
        sw_free(s);
        return NULL;
    }
    memcpy(s->bcol, bcol, sizeof(int32_t) * nslots);
    s->bad[0] = -1;
    return s;
}

/* Set the targets of the next round (sorted by slot): their partners are found by it. */
int sw_target(void *h, int64_t ntargets, const int64_t *targets)
{
    struct sw *s = h;
    int64_t *t = realloc(s->target, sizeof(int64_t) * 4 * (ntargets + 1));
    int64_t *p = t ? realloc(s->partner, sizeof(int64_t) * (ntargets + 1)) : NULL;
    if (t)
        s->target = t;
    if (!p)
        return -1;
    s->partner = p;
    memcpy(s->target, targets, sizeof(int64_t) * 4 * ntargets);
    memset(s->t_lo, 0, sizeof(int64_t) * s->nslots);
    memset(s->t_hi, 0, sizeof(int64_t) * s->nslots);
    for (int64_t i = 0; i < ntargets; i++)
        s->partner[i] = -1;
    for (int64_t i = ntargets - 1; i >= 0; i--)
        s->t_lo[targets[4 * i]] = i;
    for (int64_t i = 0; i < ntargets; i++)
        s->t_hi[targets[4 * i]] = i + 1;
    s->ntargets = s->unfound = ntargets;
    return 0;
}

/* Start a round: every process unwalked, the back edges' clocks of the last round kept. */
void sw_rewind(void *h)
{
    struct sw *s = h;
    memset(s->cur, 0, sizeof(int32_t) * s->nslots * s->ncols);
    memset(s->known, 0, sizeof(int32_t) * s->nslots * s->ncols);
    memset(s->cprev, 0, sizeof(int32_t) * s->nslots * s->cw);
    memset(s->seq, 0, sizeof(int64_t) * s->nslots);
    memset(s->in, 0, sizeof(struct batch) * s->nslots);
    memset(s->live.key, 0xff, sizeof(int64_t) * s->live.cap);
    s->live.used = 0;
    s->pool_top = s->nspare = 0;
    for (int64_t i = 0; i < s->back.cap; i++)
        s->back.b[i] = 0;
    s->seen = 0;
    s->changed = 0;
    s->bad[0] = -1;
}

void sw_give(void *h, int32_t slot, int64_t n, const int8_t *kind, const int8_t *first,
             const int32_t *sslot, const int64_t *sseq, const int32_t *count,
             const int32_t *claim)
{
    struct sw *s = h;
    struct batch *b = &s->in[slot];
    b->n = n; b->off = 0;
    b->kind = kind; b->first = first; b->sslot = sslot; b->sseq = sseq; b->count = count;
    b->claim = claim;
}

int64_t sw_left(void *h, int32_t slot)
{
    struct sw *s = h;
    return s->in[slot].n - s->in[slot].off;
}
int64_t sw_max_live(void *h) { return ((struct sw *)h)->max_live; }
int64_t sw_partner(void *h, int64_t t) { return ((struct sw *)h)->partner[t]; }
int64_t sw_unfound(void *h) { return ((struct sw *)h)->unfound; }
int64_t sw_back_edges(void *h) { return ((struct sw *)h)->back.used; }

/* 1 when the round just walked changed no back edge's clock (the clocks are the least
 * fixpoint), 0 when another round is needed, -2 when a back edge's origin was never
 * walked (the counts lie). */
int64_t sw_settled(void *h)
{
    struct sw *s = h;
    if (s->seen != s->back.used)
        return -2;
    return !s->changed;
}

/* The claim check's first failure: 1 and (slot, seq, column, reason) in out, or 0. */
int64_t sw_claim_bad(void *h, int64_t *out)
{
    struct sw *s = h;
    memcpy(out, s->bad, sizeof(s->bad));
    return s->bad[0] >= 0;
}

static int64_t take_row(struct sw *s)
{
    if (s->nspare)
        return s->spare[--s->nspare];
    if (s->pool_top == s->pool_cap) {
        int64_t cap = s->pool_cap * 2;
        int32_t *p = realloc(s->pool, sizeof(int32_t) * cap * row_len(s));
        if (!p)
            return -1;
        s->pool = p;
        int64_t *q = realloc(s->spare, sizeof(int64_t) * cap);
        if (!q)
            return -1;
        s->spare = q;
        s->pool_cap = cap;
    }
    return s->pool_top++;
}

/* verify_clocks at event seq of slot p: its claim c against its predecessor's and its
 * origin's (oc, NULL off receives); the first failure by (slot, seq, column) kept. */
static void check_claim(struct sw *s, int32_t p, int64_t seq, const int32_t *c,
                        const int32_t *oc)
{
    int32_t *prev = s->cprev + (size_t)p * s->cw;
    int32_t own = p - s->clo, step = (int32_t)(seq + 1);
    int64_t *bad = s->bad;
    if (bad[0] < 0 || p < bad[0] || (p == bad[0] && seq < bad[1])) {
        for (int32_t j = 0; j < s->cw; j++) {
            int32_t want = prev[j], reason = 1;
            if (oc && oc[j] > want)
                want = oc[j];
            if (j == own) {
                if (want >= step)
                    reason = 2;
                want = step;
            }
            if (reason == 2 || c[j] != want) {
                bad[0] = p; bad[1] = seq; bad[2] = s->clo + j; bad[3] = reason;
                break;
            }
        }
    }
    memcpy(prev, c, sizeof(int32_t) * s->cw);
}

/* Walk the event at b->off of slot p, a receive's origin's clock w and claim wc given
 * (wc NULL: not known yet, the claim not checked); a violation out as sw_run's. Returns
 * 0, -1 out of memory, -2 counts that lie. */
static int walk_one(struct sw *s, int32_t p, const int32_t *w, const int32_t *wc,
                    int64_t *out, int64_t *found)
{
    struct batch *b = &s->in[p];
    int32_t nc = s->ncols;
    int32_t *v = s->cur + (size_t)p * nc, *kn = s->known + (size_t)p * nc;
    int64_t i = b->off, seq = s->seq[p];
    int8_t k = b->kind[i];
    int recv = k == DELIVER || k == SIGNAL_RECV;
    if (recv) {
        int32_t os = b->sslot[i];
        if (k == DELIVER && b->first[i]) {
            int32_t q = s->bcol[os], need = (int32_t)(b->sseq[i] + 1);
            if (q < s->inside && kn[q] >= need) {
                int64_t *o = out + 4 * (*found)++;
                o[0] = p; o[1] = seq; o[2] = q; o[3] = need;
            }
            for (int64_t t = s->t_lo[p]; t < s->t_hi[p]; t++) {
                const int64_t *g = s->target + 4 * t;
                if (s->partner[t] < 0 && g[1] > seq && w[g[2]] >= g[3]) {
                    s->partner[t] = seq;
                    s->unfound--;
                }
            }
            for (int32_t c = 0; c < nc; c++)
                if (w[c] > kn[c])
                    kn[c] = w[c];
        }
        for (int32_t c = 0; c < nc; c++)
            if (w[c] > v[c])
                v[c] = w[c];
    }
    if ((int32_t)(seq + 1) > v[s->bcol[p]])
        v[s->bcol[p]] = (int32_t)(seq + 1);
    const int32_t *claim = s->cw && b->claim ? b->claim + (size_t)i * s->cw : NULL;
    if (claim && (!recv || wc))
        check_claim(s, p, seq, claim, recv ? wc : NULL);
    else if (claim)
        memcpy(s->cprev + (size_t)p * s->cw, claim, sizeof(int32_t) * s->cw);
    if (k <= SIGNAL_SEND && b->count[i] > 0) {
        int32_t left = b->count[i];
        if (s->back.used) {
            int64_t e = t_find(&s->back, key_of(p, seq));
            if (s->back.key[e] != -1) {
                int32_t *r = s->bpool + (size_t)s->back.a[e] * (row_len(s) + 1);
                if (memcmp(r, v, sizeof(int32_t) * nc)) {
                    memcpy(r, v, sizeof(int32_t) * nc);
                    s->changed = 1;
                }
                if (claim)
                    memcpy(r + nc, claim, sizeof(int32_t) * s->cw);
                r[row_len(s)] = 1;
                s->seen++;
                left -= s->back.b[e];
                if (left < 0)
                    return -2;
            }
        }
        if (left > 0) {
            int64_t r = take_row(s);
            int64_t e = r < 0 ? -1 : t_insert(&s->live, key_of(p, seq));
            if (e < 0)
                return -1;
            s->live.a[e] = (int32_t)r;
            s->live.b[e] = left;
            int32_t *row = s->pool + (size_t)r * row_len(s);
            memcpy(row, v, sizeof(int32_t) * nc);
            if (claim)
                memcpy(row + nc, claim, sizeof(int32_t) * s->cw);
            if (s->live.used > s->max_live)
                s->max_live = s->live.used;
        }
    }
    s->seq[p] = seq + 1;
    b->off++;
    return 0;
}

/* Walk every process as far as its batch and its receives' origins allow, the processes
 * taking turns until none moves or `cap` violations are out. Writes each causal
 * violation of a delivery whose sender's column q is inside the block as (slot, seq, q,
 * need) into out (need: its send's count, seq + 1); *nout their count. Returns the
 * events walked (0: none could move), -1 out of memory, -2 a receive's origin holds no
 * clock (counts that lie). */
int64_t sw_run(void *h, int64_t *out, int64_t cap, int64_t *nout)
{
    struct sw *s = h;
    int64_t walked = 0, found = 0, moved = 1;
    while (moved && found < cap) {
        moved = 0;
        for (int32_t p = 0; p < s->nslots && found < cap; p++) {
            struct batch *b = &s->in[p];
            int64_t start = b->off;
            while (b->off < b->n && found < cap) {
                int64_t i = b->off;
                const int32_t *w = NULL, *wc = NULL;
                int64_t e = -1;
                if (b->kind[i] == DELIVER || b->kind[i] == SIGNAL_RECV) {
                    int32_t os = b->sslot[i];
                    int64_t oq = b->sseq[i];
                    if (oq >= s->seq[os])
                        break;
                    e = t_find(&s->live, key_of(os, oq));
                    if (s->live.key[e] == -1)
                        return -2;
                    w = s->pool + (size_t)s->live.a[e] * row_len(s);
                    wc = w + s->ncols;
                }
                int rc = walk_one(s, p, w, wc, out, &found);
                if (rc)
                    return rc;
                if (e >= 0 && --s->live.b[e] == 0) {
                    s->spare[s->nspare++] = s->live.a[e];
                    t_delete(&s->live, e);
                }
            }
            if (b->off != start) {
                walked += b->off - start;
                moved = 1;
            }
        }
    }
    *nout = found;
    return walked;
}

/* The walk stands still with events left (a causality cycle): take a receive on a cycle of
 * waits as a back edge, with its origin's clock of the last round.
 * Returns 1 (taken; a violation it makes is written to out as sw_run's, *nout 0 or 1), 0
 * when no process waits at a receive of its batch, -1 out of memory, -2 counts that lie. */
int64_t sw_break(void *h, int64_t *out, int64_t *nout)
{
    struct sw *s = h;
    *nout = 0;
    /* from the lowest waiting process, follow each one's wait to the process of the
     * origin it waits for: the first process met twice lies on a cycle of waits, whose
     * receives and the events between them form a causality cycle; its receive is taken */
    int32_t p = -1;
    for (int32_t q = 0; q < s->nslots && p < 0; q++)
        if (s->in[q].off < s->in[q].n)
            p = q;
    for (int32_t steps = 0; p >= 0 && steps <= s->nslots; steps++) {
        struct batch *b = &s->in[p];
        int8_t k = b->off < b->n ? b->kind[b->off] : 0;
        if ((k != DELIVER && k != SIGNAL_RECV) || b->sseq[b->off] < s->seq[b->sslot[b->off]])
            return 0;           /* not waiting: the walk can move, or a batch is missing */
        if (steps == s->nslots)
            break;              /* nslots waits followed: p is on their cycle */
        p = b->sslot[b->off];
    }
    if (p < 0)
        return 0;
    struct batch *b = &s->in[p];
    int64_t key = key_of(b->sslot[b->off], b->sseq[b->off]);
    int64_t e = t_find(&s->back, key), len = row_len(s) + 1;
    if (s->back.key[e] == -1) {
        if (s->btop == s->bcap) {
            int64_t cap = s->bcap ? 2 * s->bcap : 64;
            int32_t *q = realloc(s->bpool, sizeof(int32_t) * cap * len);
            if (!q)
                return -1;
            s->bpool = q;
            s->bcap = cap;
        }
        e = t_insert(&s->back, key);
        if (e < 0)
            return -1;
        memset(s->bpool + (size_t)s->btop * len, 0, sizeof(int32_t) * len);
        s->back.a[e] = (int32_t)s->btop++;
        s->back.b[e] = 0;
        s->changed = 1;         /* a new back edge: its origin's clock is not known yet */
    }
    s->back.b[e]++;
    const int32_t *r = s->bpool + (size_t)s->back.a[e] * len;
    int64_t found = 0;
    int rc = walk_one(s, p, r, r[len - 1] ? r + s->ncols : NULL, out, &found);
    *nout = found;
    return rc ? rc : 1;
}
