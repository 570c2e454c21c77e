/*
 * proc.h -- the calling process: its pid, the clock, and whether another process lives.
 * The lowest layer (with alloc.h and kill.h): it knows nothing of the bus and takes no
 * lock.
 *
 * An owner token names one process for its whole life: (start << 32) | pid, where start
 * is its start time in clock ticks after boot (mod 2^32: 497 days at 100 Hz), so a reused
 * pid is another owner.  0 names nobody.  Every owner field in the segment holds one.
 */
#ifndef BUS1PY_PROC_H
#define BUS1PY_PROC_H
#include <stdint.h>

typedef uint64_t b1_owner_t;
#define B1_OWNER_PID(o) ((int32_t)(uint32_t)(o))

int32_t b1_pid(void);  /* cached; a fork child re-reads it (b1_process_init) */
uint64_t b1_now_ns(void);
/* start time (clock ticks after boot) of a process; 0 when it cannot be read */
uint64_t b1_proc_start(int32_t pid);
/* the calling process's token (cached; a fork child makes its own) */
extern b1_owner_t b1_cached_self __attribute__((visibility("hidden")));
b1_owner_t b1_self_slow(void);
static inline b1_owner_t b1_self(void) {
    b1_owner_t me = b1_cached_self;
    return __builtin_expect(me != 0, 1) ? me : b1_self_slow();
}
/* the token of process pid as it is now; 0 when pid is not a live process */
b1_owner_t b1_owner_of(int32_t pid);
/* Is the owner alive?  0 only when the kernel says its process is gone: no such pid
 * (ESRCH), a zombie, or a pid now held by a process with another start time.  Any doubt
 * (out of file descriptors, /proc unreadable, EPERM) answers alive. */
int b1_owner_alive(b1_owner_t o);
/* the same for a bare pid and a full start time (0: any process with that pid) */
int b1_pid_alive(int32_t pid, uint64_t start);

#endif
