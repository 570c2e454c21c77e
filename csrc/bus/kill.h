/*
 * kill.h -- the test-only kill points (bus1.h, kill.c).  Off, a point costs one load of a
 * process-local word and a branch predicted not taken.  Lowest layer: takes no lock.
 */
#ifndef BUS1PY_KILL_H
#define BUS1PY_KILL_H
#include <stdint.h>

extern uint32_t b1_kill_point __attribute__((visibility("hidden")));
void b1_kill_pass(void);
#define B1_KILL_POINT(pt) do { if (__builtin_expect(b1_kill_point == (pt), 0)) b1_kill_pass(); } while (0)

#endif
