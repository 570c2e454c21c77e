/*
 * kill.c -- test-only kill points: a process armed with b1_kill_at(point, after) SIGKILLs
 * itself the (after + 1)-th time it passes `point` (B1_KILL_POINT in the code), so a test
 * can prove that the bus recovers from a process dying at that exact step.
 *
 * Invariant: the state is per process and off (B1_KILL_NONE) unless the process itself
 * armed it; a fork inherits it, which is how a test arms a victim before it runs.
 */
#include <errno.h>
#include <signal.h>
#include "bus1.h"
#include "kill.h"

uint32_t b1_kill_point;
static uint32_t kill_after;

int b1_kill_at(uint32_t point, uint32_t after) {
    if (point >= B1_KILL_POINTS) return -EINVAL;
    kill_after = after;
    b1_kill_point = point;
    return 0;
}

void b1_kill_pass(void) {
    if (kill_after-- == 0) raise(SIGKILL);
}
