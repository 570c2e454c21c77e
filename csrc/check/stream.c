/* The streamed walk (bus1py/check/arrays/streamed.py drives it): the causal walk of one
 * column block over the events of every process given batch by batch in seq order, never
 * the whole trace (the peel of consistent's chains: chains.c).
 *
 * Invariants: a process's events arrive in seq order, each batch given once (sw_give,
 * cp_give) and read until its end; an origin (slot, seq) is walked iff seq is below the
 * events walked of its slot, so no bit per message is kept; an origin's clock is held
 * from its walk until its last receive (its receive count, from the linking) and then
 * freed; a receive whose origin was walked but holds no clock means the counts lie, and
 * the run stops with -2. Memory: per process, its current and known clocks (2 x ncols
 * int32) and a batch's pointers; per live origin (walked, a receive still to come) one
 * clock row and a table entry, the table at most half full. */
#include "table.h"


/* ---- the streamed causal walk of one block ---- */
struct sw {
    int32_t nslots, ncols, inside;
    int32_t *bcol;                  /* the block column of each slot */
    int32_t *cur, *known;           /* nslots x ncols */
    int64_t *seq;                   /* events walked of each slot */
    struct batch *in;
    struct table live;              /* origin key -> (clock row, receives left) */
    int32_t *pool;                  /* clock rows */
    int64_t pool_cap, pool_top, *spare, nspare;
    int64_t max_live;
    /* the second pass's targets (slot, seq, column, need), sorted by slot */
    int64_t ntargets, *target, *partner, *t_lo, *t_hi;
    int64_t unfound;
};

void sw_free(void *h)
{
    struct sw *s = h;
    if (!s)
        return;
    free(s->bcol); free(s->cur); free(s->known); free(s->seq); free(s->in);
    t_free(&s->live);
    free(s->pool); free(s->spare);
    free(s->target); free(s->partner); free(s->t_lo); free(s->t_hi);
    free(s);
}

void *sw_new(int32_t nslots, int32_t ncols, int32_t inside, const int32_t *bcol,
             int64_t ntargets, const int64_t *targets)
{
    struct sw *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->nslots = nslots;
    s->ncols = ncols;
    s->inside = inside;
    s->bcol = malloc(sizeof(int32_t) * (nslots + 1));
    s->cur = calloc((size_t)nslots * ncols + 1, sizeof(int32_t));
    s->known = calloc((size_t)nslots * ncols + 1, sizeof(int32_t));
    s->seq = calloc(nslots + 1, sizeof(int64_t));
    s->in = calloc(nslots + 1, sizeof(struct batch));
    s->pool_cap = 1024;
    s->pool = malloc(sizeof(int32_t) * s->pool_cap * ncols);
    s->spare = malloc(sizeof(int64_t) * s->pool_cap);
    s->ntargets = ntargets;
    s->target = malloc(sizeof(int64_t) * 4 * (ntargets + 1));
    s->partner = malloc(sizeof(int64_t) * (ntargets + 1));
    s->t_lo = calloc(nslots + 1, sizeof(int64_t));
    s->t_hi = calloc(nslots + 1, sizeof(int64_t));
    if (!s->bcol || !s->cur || !s->known || !s->seq || !s->in || !s->pool || !s->spare
        || !s->target || !s->partner || !s->t_lo || !s->t_hi || t_init(&s->live, 1024)) {
        sw_free(s);
        return NULL;
    }
    memcpy(s->bcol, bcol, sizeof(int32_t) * nslots);
    memcpy(s->target, targets, sizeof(int64_t) * 4 * ntargets);
    for (int64_t t = 0; t < ntargets; t++)
        s->partner[t] = -1;
    for (int64_t t = ntargets - 1; t >= 0; t--)
        s->t_lo[targets[4 * t]] = t;
    for (int64_t t = 0; t < ntargets; t++)
        s->t_hi[targets[4 * t]] = t + 1;
    s->unfound = ntargets;
    return s;
}

void sw_give(void *h, int32_t slot, int64_t n, const int8_t *kind, const int8_t *first,
             const int32_t *sslot, const int64_t *sseq, const int32_t *count)
{
    struct sw *s = h;
    struct batch *b = &s->in[slot];
    b->n = n; b->off = 0;
    b->kind = kind; b->first = first; b->sslot = sslot; b->sseq = sseq; b->count = count;
}

int64_t sw_left(void *h, int32_t slot)
{
    struct sw *s = h;
    return s->in[slot].n - s->in[slot].off;
}
int64_t sw_walked(void *h, int32_t slot) { return ((struct sw *)h)->seq[slot]; }
int64_t sw_max_live(void *h) { return ((struct sw *)h)->max_live; }
int64_t sw_partner(void *h, int64_t t) { return ((struct sw *)h)->partner[t]; }
int64_t sw_unfound(void *h) { return ((struct sw *)h)->unfound; }

static int64_t take_row(struct sw *s)
{
    if (s->nspare)
        return s->spare[--s->nspare];
    if (s->pool_top == s->pool_cap) {
        int64_t cap = s->pool_cap * 2;
        int32_t *p = realloc(s->pool, sizeof(int32_t) * cap * s->ncols);
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

/* Walk every process as far as its batch and its receives' origins allow, the processes
 * taking turns until none moves or `cap` violations are out. Writes each causal
 * violation of a delivery whose sender's column q is inside the block as (slot, seq, q,
 * need) into out (need: the q entry of its origin's clock); *nout their count. Returns the
 * events walked (0: none could move), -1 out of memory, -2 a receive's origin holds no
 * clock (counts that lie). */
int64_t sw_run(void *h, int64_t *out, int64_t cap, int64_t *nout)
{
    struct sw *s = h;
    int32_t nc = s->ncols;
    int64_t walked = 0, found = 0, moved = 1;
    while (moved && found < cap) {
        moved = 0;
        for (int32_t p = 0; p < s->nslots && found < cap; p++) {
            struct batch *b = &s->in[p];
            int32_t *v = s->cur + (size_t)p * nc, *kn = s->known + (size_t)p * nc;
            int32_t own = s->bcol[p];
            int64_t start = b->off;
            for (; b->off < b->n && found < cap; b->off++) {
                int64_t i = b->off, seq = s->seq[p];
                int8_t k = b->kind[i];
                if (k == DELIVER || k == SIGNAL_RECV) {
                    int32_t os = b->sslot[i];
                    int64_t oq = b->sseq[i];
                    if (oq >= s->seq[os])
                        break;
                    int64_t e = t_find(&s->live, key_of(os, oq));
                    if (s->live.key[e] == -1)
                        return -2;
                    const int32_t *w = s->pool + (size_t)s->live.a[e] * nc;
                    if (k == DELIVER && b->first[i]) {
                        int32_t q = s->bcol[os];
                        if (q < s->inside && kn[q] >= w[q]) {
                            out[4 * found] = p;
                            out[4 * found + 1] = seq;
                            out[4 * found + 2] = q;
                            out[4 * found + 3] = w[q];
                            found++;
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
                    if (--s->live.b[e] == 0) {
                        s->spare[s->nspare++] = s->live.a[e];
                        t_delete(&s->live, e);
                    }
                }
                if ((int32_t)(seq + 1) > v[own])
                    v[own] = (int32_t)(seq + 1);
                if (k <= SIGNAL_SEND && b->count[i] > 0) {
                    int64_t r = take_row(s);
                    int64_t e = r < 0 ? -1 : t_insert(&s->live, key_of(p, seq));
                    if (e < 0)
                        return -1;
                    s->live.a[e] = (int32_t)r;
                    s->live.b[e] = b->count[i];
                    memcpy(s->pool + (size_t)r * nc, v, sizeof(int32_t) * nc);
                    if (s->live.used > s->max_live)
                        s->max_live = s->live.used;
                }
                s->seq[p] = seq + 1;
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
