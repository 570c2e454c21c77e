/*
 * proc.h -- the calling process: its pid, the clock, and whether another process lives.
 * The lowest layer (with alloc.h and kill.h): it knows nothing of the bus and takes no
 * lock.
 */
#ifndef BUS1PY_PROC_H
#define BUS1PY_PROC_H
#include <stdint.h>

int32_t b1_pid(void);  /* cached; a fork child re-reads it (b1_process_init) */
uint64_t b1_now_ns(void);
/* start time (clock ticks after boot) of a process, 0 if it is gone or a zombie */
uint64_t b1_proc_start(int32_t pid);
/* is pid alive, and (start != 0) still the process that started at `start`? */
int b1_pid_alive(int32_t pid, uint64_t start);

#endif
