/* The check of a producer's clock column beside the streamed walk (stream.c calls it for
 * each event; bus1py/check/arrays/streamed.py reads the verdict).
 *
 * Invariants: the rule is arrays/walk.py's verify_clocks over the block's claim columns
 * clo..clo+cw-1: a claim is the join of its process predecessor's claim and its origin's,
 * its own entry (the column of its slot, when in range) set to seq + 1 and above the
 * join's; the first failure by (slot, seq, column) is kept, so the blocks' failures merge
 * by their minimum into the one verify_clocks names; each slot's last claim is kept
 * whether it was checked or not (a back edge's receive is checked from the second round). */
#include "stream.h"

/* verify_clocks at event seq of slot p: its claim c against its predecessor's and its
 * origin's (oc, NULL off receives); the first failure by (slot, seq, column) kept. */
void check_claim(struct sw *s, int32_t p, int64_t seq, const int32_t *c, const int32_t *oc)
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

/* The claim check's first failure: 1 and (slot, seq, column, reason) in out, or 0. */
int64_t sw_claim_bad(void *h, int64_t *out)
{
    struct sw *s = h;
    memcpy(out, s->bad, sizeof(s->bad));
    return s->bad[0] >= 0;
}
