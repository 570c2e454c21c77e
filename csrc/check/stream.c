/* The streamed walk (bus1py/check/arrays/streamed.py drives it): the causal walk of one
 * column block over the events of every process given batch by batch in seq order, never
 * the whole trace (the peel of consistent's chains: chains.c). Its state: stream.h.
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
 * waits for an origin not walked: rounds.c then takes back edges, and the rounds repeat
 * until settled; an origin's clock is recorded for its back edges as it is walked
 * (back_walked). A producer's clock column is checked event by event (claim.c). */
#include "stream.h"


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
    s->unfound = ntargets;
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

/* Walk the event at b->off of slot p, a receive's origin's clock w and claim wc given
 * (wc NULL: not known yet, the claim not checked); a violation out as sw_run's. Returns
 * 0, -1 out of memory, -2 counts that lie. */
int walk_one(struct sw *s, int32_t p, const int32_t *w, const int32_t *wc,
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
        if (s->back.used && (left -= back_walked(s, p, seq, v, claim)) < 0)
            return -2;
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
