/* The streamed walk (bus1py/check/arrays/streamed.py drives it): the causal walk of one
 * column block and the peel of the delivery-chain graph, each over the events of every
 * process given batch by batch in seq order, never the whole trace.
 *
 * Invariants: a process's events arrive in seq order, each batch given once (sw_give,
 * cp_give) and read until its end; an origin (slot, seq) is walked iff seq is below the
 * events walked of its slot, so no bit per message is kept; an origin's clock is held
 * from its walk until its last receive (its receive count, from the linking) and then
 * freed; a receive whose origin was walked but holds no clock means the counts lie, and
 * the run stops with -2. Memory: per process, its current and known clocks (2 x ncols
 * int32) and a batch's pointers; per live origin (walked, a receive still to come) one
 * clock row and a table entry, the table at most half full. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SIGNAL_SEND 2
#define DELIVER 3
#define SIGNAL_RECV 4

/* ---- a table from an origin's key to two int32 values (linear probing, deletion by
 * backward shift, so no tombstones) ---- */
struct table {
    int64_t cap, used;      /* cap a power of two; used <= cap / 2 */
    int64_t *key;           /* -1: empty */
    int32_t *a, *b;
};

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static int t_init(struct table *t, int64_t cap)
{
    t->cap = cap;
    t->used = 0;
    t->key = malloc(sizeof(int64_t) * cap);
    t->a = malloc(sizeof(int32_t) * cap);
    t->b = malloc(sizeof(int32_t) * cap);
    if (!t->key || !t->a || !t->b)
        return -1;
    memset(t->key, 0xff, sizeof(int64_t) * cap);
    return 0;
}

static void t_free(struct table *t)
{
    free(t->key); free(t->a); free(t->b);
}

/* the slot of key, or of the empty place where it would go */
static int64_t t_find(const struct table *t, int64_t key)
{
    int64_t i = (int64_t)(mix((uint64_t)key) & (uint64_t)(t->cap - 1));
    while (t->key[i] != -1 && t->key[i] != key)
        i = (i + 1) & (t->cap - 1);
    return i;
}

static int t_grow(struct table *t)
{
    struct table n;
    if (t_init(&n, t->cap * 2))
        return -1;
    for (int64_t i = 0; i < t->cap; i++) {
        if (t->key[i] == -1)
            continue;
        int64_t j = t_find(&n, t->key[i]);
        n.key[j] = t->key[i];
        n.a[j] = t->a[i];
        n.b[j] = t->b[i];
    }
    n.used = t->used;
    t_free(t);
    *t = n;
    return 0;
}

/* the place of a new key (not present), the table grown first when half full; -1 */
static int64_t t_insert(struct table *t, int64_t key)
{
    if (2 * (t->used + 1) > t->cap && t_grow(t))
        return -1;
    int64_t i = t_find(t, key);
    t->key[i] = key;
    t->used++;
    return i;
}

static void t_delete(struct table *t, int64_t i)
{
    int64_t m = t->cap - 1, j = i;
    t->key[i] = -1;
    t->used--;
    for (;;) {
        j = (j + 1) & m;
        if (t->key[j] == -1)
            return;
        int64_t h = (int64_t)(mix((uint64_t)t->key[j]) & (uint64_t)m);
        /* the entry at j may move to the hole at i when its home h is not in (i, j] */
        if ((i <= j) ? (i < h && h <= j) : (i < h || h <= j))
            continue;
        t->key[i] = t->key[j];
        t->a[i] = t->a[j];
        t->b[i] = t->b[j];
        t->key[j] = -1;
        i = j;
    }
}

static int64_t key_of(int32_t slot, int64_t seq) { return ((int64_t)slot << 36) | seq; }

/* ---- a process's current batch ---- */
struct batch {
    int64_t n, off;
    const int8_t *kind, *first;
    const int32_t *sslot, *count;
    const int64_t *sseq;
};

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

int64_t sw_left(void *h, int32_t slot) { struct sw *s = h; return s->in[slot].n - s->in[slot].off; }
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

/* ---- the peel of the delivery-chain graph (consistent) ----
 * A process's chain is its first deliveries of messages first-delivered at two or more
 * processes (firsts >= 2). A message is peeled once every process of its chain has it at
 * its head; a process waits at its head until then. The peel stops when no process can
 * move: every chain peeled, or the heads left wait on each other (a cycle). Memory: one
 * table entry per message some head waits at, at most one per process. */
struct cp {
    int32_t nslots;
    struct batch *in;
    const int32_t **firsts;
    int64_t *seq;                   /* events passed of each slot */
    uint8_t *arrived;               /* the head is counted in its message's entry */
    struct table at;                /* message key -> (arrived, 0), or (-(waiting), 1) */
};

void cp_free(void *h)
{
    struct cp *c = h;
    if (!c)
        return;
    free(c->in); free(c->firsts); free(c->seq); free(c->arrived);
    t_free(&c->at);
    free(c);
}

void *cp_new(int32_t nslots)
{
    struct cp *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->nslots = nslots;
    c->in = calloc(nslots + 1, sizeof(struct batch));
    c->firsts = calloc(nslots + 1, sizeof(int32_t *));
    c->seq = calloc(nslots + 1, sizeof(int64_t));
    c->arrived = calloc(nslots + 1, 1);
    if (!c->in || !c->firsts || !c->seq || !c->arrived || t_init(&c->at, 64)) {
        cp_free(c);
        return NULL;
    }
    return c;
}

void cp_give(void *h, int32_t slot, int64_t n, const int8_t *kind, const int8_t *first,
             const int32_t *sslot, const int64_t *sseq, const int32_t *firsts)
{
    struct cp *c = h;
    struct batch *b = &c->in[slot];
    b->n = n; b->off = 0;
    b->kind = kind; b->first = first; b->sslot = sslot; b->sseq = sseq;
    c->firsts[slot] = firsts;
}

int64_t cp_left(void *h, int32_t slot) { struct cp *c = h; return c->in[slot].n - c->in[slot].off; }
int64_t cp_passed(void *h, int32_t slot) { return ((struct cp *)h)->seq[slot]; }

/* Move every process past the events it can pass; returns the events passed (0: none
 * could move), -1 out of memory. */
int64_t cp_run(void *h)
{
    struct cp *c = h;
    int64_t passed = 0, moved = 1;
    while (moved) {
        moved = 0;
        for (int32_t p = 0; p < c->nslots; p++) {
            struct batch *b = &c->in[p];
            int64_t start = b->off;
            for (; b->off < b->n; b->off++) {
                int64_t i = b->off;
                int32_t need = c->firsts[p][i];
                if (b->kind[i] == DELIVER && b->first[i] && need >= 2) {
                    int64_t key = key_of(b->sslot[i], b->sseq[i]);
                    int64_t e = t_find(&c->at, key);
                    if (c->at.key[e] == -1) {           /* the first to arrive */
                        e = t_insert(&c->at, key);
                        if (e < 0)
                            return -1;
                        c->at.a[e] = 1;
                        c->at.b[e] = 0;
                        c->arrived[p] = 1;
                        break;
                    }
                    if (c->at.b[e]) {                   /* peeled: pass it */
                        if (++c->at.a[e] == 0)
                            t_delete(&c->at, e);
                        c->arrived[p] = 0;
                        continue;
                    }
                    if (c->arrived[p])                  /* still waiting */
                        break;
                    if (++c->at.a[e] < need) {
                        c->arrived[p] = 1;
                        break;
                    }
                    /* the last to arrive peels it; the others pass it later */
                    c->at.a[e] = -(need - 1);
                    c->at.b[e] = 1;
                }
                c->arrived[p] = 0;
            }
            c->seq[p] += b->off - start;
            if (b->off != start) {
                passed += b->off - start;
                moved = 1;
            }
        }
    }
    return passed;
}
