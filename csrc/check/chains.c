/* The peel of the delivery-chain graph for consistent, over the events of every process
 * given batch by batch in seq order (bus1py/check/arrays/streamed.py drives it).
 *
 * Invariants: a message's entry in the table exists while some process has it at its head
 * and not every process that first-delivers it has passed it: (arrived, 0) until the last
 * arrives, then (-(waiting), 1) until the others pass; so the table holds at most one entry
 * per process. */
#include "table.h"

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

int64_t cp_left(void *h, int32_t slot)
{
    struct cp *c = h;
    return c->in[slot].n - c->in[slot].off;
}
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
