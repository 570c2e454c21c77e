/* Past a causality cycle: the streamed walk's rounds over back edges (stream.c walks a
 * round; bus1py/check/arrays/streamed.py repeats them until sw_settled).
 *
 * Invariants: a back edge is a receive taken before its origin was walked, with the
 * origin's clock of the previous round (zeros in the first); it is taken only on a cycle
 * of waits (so on a causality cycle), and the same ones each round (what can be walked
 * depends on the order, not on clock values); an origin's back row is written when the
 * origin is walked, and the round is settled when no back row changed and every back
 * edge's origin was walked. The back rows are kept until the handle is freed. */
#include "stream.h"

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

int32_t back_walked(struct sw *s, int32_t p, int64_t seq, const int32_t *v,
                    const int32_t *c)
{
    int64_t e = t_find(&s->back, key_of(p, seq));
    if (s->back.key[e] == -1)
        return 0;
    int32_t *r = s->bpool + (size_t)s->back.a[e] * (row_len(s) + 1);
    if (memcmp(r, v, sizeof(int32_t) * s->ncols)) {
        memcpy(r, v, sizeof(int32_t) * s->ncols);
        s->changed = 1;
    }
    if (c)
        memcpy(r + s->ncols, c, sizeof(int32_t) * s->cw);
    r[row_len(s)] = 1;
    s->seen++;
    return s->back.b[e];
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
