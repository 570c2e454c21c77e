/*
 * proc.c -- the calling process and the others: a cached pid (reset in a fork child), the
 * monotonic clock, and liveness by pid and start time, so a reused pid is told apart.
 *
 * Invariant: nothing here touches the bus or takes a lock.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "proc.h"
#include "bus1.h"

static int32_t cached_pid;

static void reset_pid(void) { cached_pid = 0; }

void b1_process_init(void) {
    static int registered;
    if (!registered) {
        registered = 1;
        pthread_atfork(NULL, NULL, reset_pid);
    }
    cached_pid = 0;
}

int32_t b1_pid(void) {
    if (!cached_pid) cached_pid = (int32_t)getpid();
    return cached_pid;
}

uint64_t b1_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Start time (clock ticks after boot) of a process, 0 if it is gone or a zombie. */
uint64_t b1_proc_start(int32_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may contain spaces and parentheses */
    if (!p || p[1] != ' ') return 0;
    char state = p[2];
    if (state == 'Z' || state == 'X' || state == 'x') return 0;
    /* fields after the name: state(3) ... starttime(22) */
    int field = 3;
    for (p += 2; *p && field < 22; p++)
        if (*p == ' ') field++;
    return strtoull(p, NULL, 10);
}

int b1_pid_alive(int32_t pid, uint64_t start) {
    if (pid <= 0) return 0;
    uint64_t now = b1_proc_start(pid);
    return now != 0 && (start == 0 || now == start);
}
