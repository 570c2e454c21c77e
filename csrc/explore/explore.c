/*
 * explore.c -- the counter behind csrc/explore/explore.h, linked into bus1py._b1x only.
 *
 * Invariants:
 *   - Unarmed, __sanitizer_cov_trace_pc is one load and a return: the instrumented code
 *     behaves as the normal build, only slower.
 *   - This file is compiled without the instrumentation (it would call itself).
 *   - The state is per process (a fork inherits it), never in the bus segment.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include "explore.h"

static int armed;
static uint64_t count, target;
static uint64_t *report;

void __sanitizer_cov_trace_pc(void) {
    if (__builtin_expect(!armed, 1)) return;
    if (++count != target) return;
    if (report) {
        void *frames[B1X_FRAMES + 1];
        int n = backtrace(frames, B1X_FRAMES + 1);  /* frames[0]: this function */
        report[0] = count;
        report[1] = n > 1 ? (uint64_t)(n - 1) : 0;
        for (int i = 1; i < n; i++) report[1 + i] = (uint64_t)(uintptr_t)frames[i];
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
    }
    raise(SIGKILL);
}

void b1x_arm(uint64_t k, uint64_t *out) {
    armed = 0;
    count = 0;
    target = k;
    report = out;
    armed = 1;
}

uint64_t b1x_disarm(void) {
    armed = 0;
    return count;
}

uint64_t b1x_count(void) { return count; }

uint64_t b1x_offset(uint64_t pc) {
    Dl_info info, mine;
    if (!dladdr((void *)(uintptr_t)pc, &info) || !dladdr((void *)&b1x_arm, &mine) ||
        info.dli_fbase != mine.dli_fbase)
        return 0;
    return pc - (uint64_t)(uintptr_t)info.dli_fbase;
}
