/*
 * guard.h -- the boundary between Python and the C helper (included by the cffi glue
 * only, after bus1.h).
 *
 * Invariant: every call from Python that returns an int runs as B1_GUARD(call), which
 * clears b1_bad first and returns -EBADMSG if an index or offset read from the segment
 * was out of range during the call (layout.h); the out-of-range access itself was
 * redirected to a slot that is never used, so nothing outside the segment was touched.
 * bus1py/_build.py applies it to every int-returning function of the cdef.
 */
#ifndef BUS1PY_GUARD_H
#define BUS1PY_GUARD_H
#include <errno.h>

extern __thread int b1_bad __attribute__((tls_model("initial-exec")));

#define B1_GUARD(call) ({                                   \
    b1_bad = 0;                                              \
    __typeof__(call) b1_guard_r_ = (call);                   \
    b1_bad ? (__typeof__(call))-EBADMSG : b1_guard_r_;       \
})

#endif
