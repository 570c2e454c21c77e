/* Kernels of the exact checker (bus1py/check/arrays/walk.py drives them; layout in walk.h).
 *
 * Invariants: kind codes are bus1py/check/kinds.py's (origins 0..2, receives 3..4,
 * internal 5); src[i] is the position of a receive's origin and -1 on other rows; row[i]
 * is the row of an event's clock in `clocks` (ncols entries per row), -1 for an event
 * whose clock is not kept (every origin's is). No function allocates more than O(n) or reads outside the arrays' stated sizes
 * (callers guarantee 0 <= src < n and 0 <= col < ncols). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SIGNAL_SEND 2
#define DELIVER 3
#define SIGNAL_RECV 4

static int is_recv(int8_t k) { return k == DELIVER || k == SIGNAL_RECV; }

/* Vector clocks of the events with row[k] >= 0 (every origin at least), by walking the
 * events in a topological order of happened-before: each process advances until it meets
 * a receive whose origin is not walked yet, and the processes take turns until none
 * moves. Returns the number of events
 * walked: n, or fewer when the history has a causality cycle. */
int64_t walk_clocks(int64_t n, int32_t ncols, int32_t nslots, const int64_t *start,
                    const int32_t *col, const int8_t *kind, const int64_t *src,
                    const int64_t *row, int32_t *clocks)
{
    int64_t *pos = malloc(sizeof(int64_t) * (nslots ? nslots : 1));
    int32_t *cur = calloc((size_t)nslots * ncols + 1, sizeof(int32_t));
    uint8_t *done = calloc(n + 1, 1);
    int64_t walked = 0;
    if (!pos || !cur || !done) {
        free(pos); free(cur); free(done);
        return -1;
    }
    for (int32_t s = 0; s < nslots; s++)
        pos[s] = start[s];
    int moved = 1;
    while (moved) {
        moved = 0;
        for (int32_t s = 0; s < nslots; s++) {
            int32_t *v = cur + (size_t)s * ncols;
            int64_t k = pos[s], end = start[s + 1];
            for (; k < end; k++) {
                if (is_recv(kind[k])) {
                    int64_t o = src[k];
                    if (!done[o])
                        break;
                    const int32_t *w = clocks + (size_t)row[o] * ncols;
                    for (int32_t c = 0; c < ncols; c++)
                        if (w[c] > v[c])
                            v[c] = w[c];
                }
                if ((int32_t)(k - start[s] + 1) > v[col[s]])
                    v[col[s]] = (int32_t)(k - start[s] + 1);
                if (row[k] >= 0)
                    memcpy(clocks + (size_t)row[k] * ncols, v, sizeof(int32_t) * ncols);
                done[k] = 1;
            }
            if (k != pos[s]) {
                walked += k - pos[s];
                pos[s] = k;
                moved = 1;
            }
        }
    }
    free(pos); free(cur); free(done);
    return walked;
}

/* Check a producer's clocks (claimed: n rows of ncols counts) in one pass: each event's
 * clock must be exactly the join of its process predecessor's and, for a receive, its
 * origin's, with its own column set to its own count (seq + 1), and that join's own entry
 * must be below it (otherwise a future event of its own process would be known: a
 * causality cycle). By induction along a topological order, clocks that pass are the
 * true vector clocks. Returns the first failing position (-1 if none) and its reason in
 * *bad_reason: 1 the clock differs from the join, 2 the join knows its own future. */
int64_t verify_clocks(int64_t n, int32_t ncols, int32_t nslots, const int64_t *start,
                      const int32_t *col, const int8_t *kind, const int64_t *src,
                      const int32_t *claimed, int64_t *bad_reason)
{
    (void)n;
    *bad_reason = 0;
    for (int32_t s = 0; s < nslots; s++) {
        int32_t own = col[s];
        for (int64_t k = start[s]; k < start[s + 1]; k++) {
            const int32_t *e = claimed + (size_t)k * ncols;
            const int32_t *p = k > start[s] ? e - ncols : NULL;
            const int32_t *o = is_recv(kind[k]) ? claimed + (size_t)src[k] * ncols : NULL;
            int32_t step = (int32_t)(k - start[s] + 1);
            for (int32_t c = 0; c < ncols; c++) {
                int32_t j = 0;
                if (p && p[c] > j)
                    j = p[c];
                if (o && o[c] > j)
                    j = o[c];
                if (c == own) {
                    if (j >= step) {
                        *bad_reason = 2;
                        return k;
                    }
                    j = step;
                }
                if (e[c] != j) {
                    *bad_reason = 1;
                    return k;
                }
            }
        }
    }
    return -1;
}

/* The causal test: a first delivery of m1 (sender column q, send count s) violates causal
 * iff some message first-delivered before it at the same process has a send clock whose
 * q entry is >= s (its send knew the send of m1). first[i] marks first deliveries of
 * messages; sender_col[i] is q on them. Writes the violating positions, ascending, and
 * returns how many. */
int64_t causal_scan(int64_t n, int32_t ncols, int32_t nslots, const int64_t *start,
                    const int8_t *kind, const int8_t *first, const int64_t *src,
                    const int32_t *sender_col, const int64_t *row, const int32_t *clocks,
                    int64_t *violations)
{
    int32_t *known = malloc(sizeof(int32_t) * (ncols ? ncols : 1));
    int64_t found = 0;
    (void)n;
    if (!known)
        return -1;
    for (int32_t s = 0; s < nslots; s++) {
        memset(known, 0, sizeof(int32_t) * ncols);
        for (int64_t k = start[s]; k < start[s + 1]; k++) {
            if (kind[k] != DELIVER || !first[k])
                continue;
            int64_t o = src[k];
            const int32_t *w = clocks + (size_t)row[o] * ncols;
            int32_t q = sender_col[k];
            /* w[q], the send's own entry, is its count (seq + 1): known[q] >= it means
             * an earlier delivery's send knew the send of m1 */
            if (known[q] >= w[q])
                violations[found++] = k;
            for (int32_t c = 0; c < ncols; c++)
                if (w[c] > known[c])
                    known[c] = w[c];
        }
    }
    free(known);
    return found;
}

/* Strongly connected components of a graph in CSR form (succ[indptr[v] .. indptr[v+1]]),
 * by an iterative Tarjan. comp[v] gets the component number; scratch holds 4 * nodes
 * int64. Returns the number of components. */
int64_t tarjan(int64_t nodes, const int64_t *indptr, const int64_t *succ, int64_t *comp,
               int64_t *scratch)
{
    int64_t *index = scratch, *low = scratch + nodes, *stack = scratch + 2 * nodes;
    int64_t *work = scratch + 3 * nodes;   /* call stack of nodes; edge cursor in comp */
    int64_t counter = 0, ncomp = 0, sp = 0, wp = 0;
    for (int64_t v = 0; v < nodes; v++) {
        index[v] = -1;
        comp[v] = -1;
    }
    for (int64_t root = 0; root < nodes; root++) {
        if (index[root] >= 0)
            continue;
        work[wp++] = root;
        index[root] = low[root] = counter++;
        stack[sp++] = root;
        comp[root] = -2 - indptr[root];    /* on the stack; next edge to look at */
        while (wp) {
            int64_t v = work[wp - 1];
            int64_t e = -2 - comp[v];
            if (e < indptr[v + 1]) {
                comp[v] = -2 - (e + 1);
                int64_t w = succ[e];
                if (index[w] < 0) {
                    index[w] = low[w] = counter++;
                    stack[sp++] = w;
                    comp[w] = -2 - indptr[w];
                    work[wp++] = w;
                } else if (comp[w] <= -2 && index[w] < low[v]) {
                    low[v] = index[w];
                }
                continue;
            }
            wp--;
            if (wp && low[v] < low[work[wp - 1]])
                low[work[wp - 1]] = low[v];
            if (low[v] == index[v]) {
                int64_t w;
                do {
                    w = stack[--sp];
                    comp[w] = ncomp;
                } while (w != v);
                ncomp++;
            }
        }
    }
    return ncomp;
}
