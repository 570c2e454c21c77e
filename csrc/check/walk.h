/* The checker's compiled kernels over a trace laid out by position: the events of the
 * slot-th process (processes in ascending id order) occupy positions start[slot] ..
 * start[slot+1]-1 in seq order, so an event's position is start[slot] + seq. Clocks are
 * counts: entry c of an event's clock is the number of events of the processes of
 * column c that happened-before it or are it (0: none), as in the trace's vclock column.
 * Every function reads only the arrays it is given and writes only its outputs. */
/* cdef-begin */
int64_t walk_clocks(int64_t n, int32_t ncols, int32_t nslots, const int64_t *start,
                    const int32_t *col, const int8_t *kind, const int64_t *src,
                    const int64_t *row, int32_t *clocks);
int64_t verify_clocks(int64_t n, int32_t ncols, int32_t nslots, const int64_t *start,
                      const int32_t *col, const int8_t *kind, const int64_t *src,
                      const int32_t *claimed, int64_t *bad_reason);
int64_t causal_scan(int64_t n, int32_t ncols, int32_t nslots, const int64_t *start,
                    const int8_t *kind, const int8_t *first, const int64_t *src,
                    const int32_t *sender_col, const int64_t *row, const int32_t *clocks,
                    int64_t *violations);
int64_t tarjan(int64_t nodes, const int64_t *indptr, const int64_t *succ, int64_t *comp,
               int64_t *scratch);
/* cdef-end */
