/* group.h - a decoded wire's entries grouped by sender, stably: the shape of
 * bus1py/causal/base.py's read_entries dict {sender: [entries in wire order]}.
 *
 * Use: groups_begin, groups_add(s) for every entry's sender in wire order, groups_layout,
 * then groups_place(s) for every entry again in the same order gives its slot.
 * Invariants (after groups_place of every entry):
 *   - The groups are numbered 0 .. count - 1 in the order their senders first appear (the
 *     dict's order); who[g] is group g's sender, idx[s] the group of sender s.
 *   - Group g's entries are slots start[g] .. start[g] + len[g], in wire order; the groups'
 *     slots are consecutive, so count entries take slots 0 .. count - 1.
 *   - seen[s] == stamp iff sender s has a group: a new wire bumps stamp instead of clearing
 *     seen (cleared only when the stamp wraps).
 * No cdef: this header declares nothing the Python side sees.
 */
#ifndef SIM_GROUP_H
#define SIM_GROUP_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct groups {
    uint32_t n, stamp, count;
    uint32_t *seen, *idx, *who, *start, *len;   /* n each, one allocation */
};

static inline int groups_init(struct groups *gr, int n)
{
    memset(gr, 0, sizeof *gr);
    gr->n = (uint32_t)n;
    gr->seen = calloc(5 * (size_t)n, sizeof *gr->seen);
    gr->idx = gr->seen + n, gr->who = gr->idx + n, gr->start = gr->who + n;
    gr->len = gr->start + n;
    return gr->seen ? 0 : -1;
}

static inline void groups_begin(struct groups *gr)
{
    if (++gr->stamp == 0) {
        memset(gr->seen, 0, gr->n * sizeof *gr->seen);
        gr->stamp = 1;
    }
    gr->count = 0;
}

static inline int groups_has(const struct groups *gr, uint32_t s)
{
    return gr->seen[s] == gr->stamp;
}

/* counts an entry of sender s (below n); its group */
static inline uint32_t groups_add(struct groups *gr, uint32_t s)
{
    if (gr->seen[s] != gr->stamp) {
        gr->seen[s] = gr->stamp;
        gr->idx[s] = gr->count;
        gr->who[gr->count] = s;
        gr->len[gr->count++] = 0;
    }
    gr->len[gr->idx[s]]++;
    return gr->idx[s];
}

/* the groups' slots; len[g] counts the entries placed since */
static inline void groups_layout(struct groups *gr)
{
    for (uint32_t g = 0, at = 0; g < gr->count; g++) {
        gr->start[g] = at;
        at += gr->len[g];
        gr->len[g] = 0;
    }
}

/* the slot of the next entry of sender s */
static inline uint32_t groups_place(struct groups *gr, uint32_t s)
{
    uint32_t g = gr->idx[s];
    return gr->start[g] + gr->len[g]++;
}

#endif
