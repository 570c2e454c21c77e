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
 * report[0] = k, report[1] = n and report[2..2+n) = the return addresses of the stack
 * from the instrumented block that made the call outwards (n <= B1X_FRAMES); report may
 * be NULL.  A forked child inherits the arming, and the report, in a shared mapping of
 * at least B1X_REPORT_WORDS words, is how it tells its parent where it died. */
#define B1X_FRAMES 12
#define B1X_REPORT_WORDS 14
void b1x_arm(uint64_t k, uint64_t *report);
/* stop counting: returns the calls counted since b1x_arm */
uint64_t b1x_disarm(void);
/* the calls counted so far */
uint64_t b1x_count(void);
/* the offset of `pc` in this module (for addr2line), or 0 when it is in another object */
uint64_t b1x_offset(uint64_t pc);
/* cdef-end */

#endif
