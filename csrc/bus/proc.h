/*
 * proc.h -- the calling process: its pid, the clock, and whether another process lives.
 * The lowest layer (with alloc.h and kill.h): it knows nothing of the bus and takes no
 * lock.
 *
 * An owner token names one process for its whole life: (ident << 22) | pid (a pid is
 * below PID_MAX_LIMIT, 2^22), where ident is the low 42 bits of the inode number of its
 * pidfd -- pidfs gives each process its own, from a counter that never goes back, so no
 * later process has it, not one forked within the same clock tick -- or, on a kernel
 * without pidfs, of its start time in clock ticks.  0 names nobody.  Every owner field in
 * the segment holds one.
 *
 * A holder record (struct b1_holder) names a process that uses a peer: pid, start time,
 * the full pidfs inode, and its exec marker -- a descriptor of its own, O_CLOEXEC, whose
 * number and inode others read through /proc/PID/fd: exec (or closing it) ends the
 * holder as death does, as exec closes a bus1 descriptor.
 */
#ifndef BUS1PY_PROC_H
#define BUS1PY_PROC_H
#include <stdint.h>
#include "layout.h" /* struct b1_holder: a record of the segment */

typedef uint64_t b1_owner_t;
#define B1_OWNER_PID_BITS 22
#define B1_OWNER_PID(o) ((int32_t)((o) & ((1u << B1_OWNER_PID_BITS) - 1)))


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
/* The record of process pid as it is now (its marker only when pid is this process:
 * another's is not known); pid 0 when pid is not a live process. */
void b1_holder_of(int32_t pid, struct b1_holder *out);
/* Is the recorded holder alive?  `h` is the caller's copy (read from the segment once).
 * 0 only on the kernel's word: its process is gone (as b1_owner_alive, by pidfs inode
 * when recorded, else start time), or its exec marker is no longer open at that number
 * (/proc/PID/fd/N gone or another file): it exec'd or closed it.  Any doubt (EACCES of a
 * non-dumpable process, out of descriptors) answers alive. */
int b1_holder_alive(const struct b1_holder *h);
/* b1_exec_marker (bus1.h): this process's exec marker, made at its first call */

#endif
