/* The streamed walk's state (stream.c walks; rounds.c takes back edges past a causality
 * cycle; claim.c checks a producer's clock column beside the walk): one handle of one
 * column block, shared by the three, nothing else reads it.
 *
 * Invariants: stream.c's (at its top); a pool row is ncols + cw int32 (an origin's clock,
 * then its claim), a back row one more (whether its claim is known yet). */
#ifndef BUS1PY_CHECK_STREAM_H
#define BUS1PY_CHECK_STREAM_H
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
    /* the partners' round's targets (slot, seq, column, need), sorted by slot; a slot's
     * are t_lo[slot]..t_hi[slot]-1 */
    int64_t *target, *partner, *t_lo, *t_hi;
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

static inline int64_t row_len(const struct sw *s) { return (int64_t)s->ncols + s->cw; }

/* stream.c: walk the event at the batch's offset of slot p (sw_run's step) */
int walk_one(struct sw *s, int32_t p, const int32_t *w, const int32_t *wc, int64_t *out,
             int64_t *found);
/* rounds.c: an origin just walked at (p, seq) with clock v and claim c (or NULL): its back
 * edges' clock and claim recorded; the receives taken before it this round, or -2 */
int32_t back_walked(struct sw *s, int32_t p, int64_t seq, const int32_t *v,
                    const int32_t *c);
/* claim.c: verify_clocks at event seq of slot p (claim c, its origin's oc or NULL) */
void check_claim(struct sw *s, int32_t p, int64_t seq, const int32_t *c, const int32_t *oc);

#endif
