/* The checker's compiled kernels over a trace laid out by position: the events of the
 * slot-th process (processes in ascending id order) occupy positions start[slot] ..
 * start[slot+1]-1 in seq order, so an event's position is start[slot] + seq. Clocks are
 * counts: entry c of an event's clock is the number of events of the processes of
 * column c that happened-before it or are it (0: none), as in the trace's vclock column.
 * Every function reads only the arrays it is given and writes only its outputs; the
 * streamed walk (sw_*: stream.c; cp_*: chains.c) keeps its state behind a handle, given
 * the events of each process batch by batch. */
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
void *sw_new(int32_t nslots, int32_t ncols, int32_t inside, const int32_t *bcol,
             int32_t cw, int32_t clo);
void sw_free(void *h);
int sw_target(void *h, int64_t ntargets, const int64_t *targets);
void sw_rewind(void *h);
void sw_give(void *h, int32_t slot, int64_t n, const int8_t *kind, const int8_t *first,
             const int32_t *sslot, const int64_t *sseq, const int32_t *count,
             const int32_t *claim);
int64_t sw_run(void *h, int64_t *out, int64_t cap, int64_t *nout);
int64_t sw_break(void *h, int64_t *out, int64_t *nout);
int64_t sw_left(void *h, int32_t slot);
int64_t sw_max_live(void *h);
int64_t sw_partner(void *h, int64_t t);
int64_t sw_unfound(void *h);
int64_t sw_back_edges(void *h);
int64_t sw_settled(void *h);
int64_t sw_claim_bad(void *h, int64_t *out);
void *cp_new(int32_t nslots);
void cp_free(void *h);
void cp_give(void *h, int32_t slot, int64_t n, const int8_t *kind, const int8_t *first,
             const int32_t *sslot, const int64_t *sseq, const int32_t *firsts);
int64_t cp_run(void *h);
int64_t cp_left(void *h, int32_t slot);
int64_t cp_passed(void *h, int32_t slot);
/* cdef-end */
