/*
 * explore.h -- the test build's crash explorer (csrc/explore/explore.c), part of the cdef
 * of bus1py._b1x only (bus1py/_build_explore.py); the normal bus1py._b1 has none of it.
 *
 * The bus core of that build is compiled with -fsanitize-coverage=trace-pc: every basic
 * block it enters calls __sanitizer_cov_trace_pc.  A process armed with b1x_arm(k, ...)
 * counts those calls and SIGKILLs itself at the k-th, so a test can kill a workload at
 * every point of the code it runs, named or not.
 */
#ifndef BUS1PY_EXPLORE_H
#define BUS1PY_EXPLORE_H
#include <stdint.h>

/* cdef-begin */
/* Count from zero; with k > 0 die at the k-th call (k == 0: count only).  Before dying,
 * report[0] = the address in the instrumented code of that call, report[1] = k (report
 * may be NULL); a forked child inherits the arming, and the report is how it tells its
 * parent through a shared mapping. */
void b1x_arm(uint64_t k, uint64_t *report);
/* stop counting: returns the calls counted since b1x_arm */
uint64_t b1x_disarm(void);
/* the calls counted so far */
uint64_t b1x_count(void);
/* the offset of `pc` in the shared object that holds it (for addr2line), or 0 */
uint64_t b1x_offset(uint64_t pc);
/* cdef-end */

#endif
