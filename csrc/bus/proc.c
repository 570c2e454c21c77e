/*
 * proc.c -- the calling process and the others: a cached pid and owner token (reset in a
 * fork child), the monotonic clock, and liveness by pid and start time.
 *
 * Invariants:
 *   - Death is certain or it is not death: a process is reported dead only on the
 *     kernel's word -- kill(pid, 0) fails with ESRCH, /proc/PID/stat shows a zombie, or
 *     it shows another start time (the pid was reused).  A failure to look (EMFILE,
 *     ENFILE, ENOMEM, EACCES, a short read) reports alive: reaping a live process loses
 *     its messages, waiting for a dead one only delays.
 *   - Nothing here touches the bus or takes a lock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "proc.h"
#include "bus1.h"

static int32_t cached_pid;
b1_owner_t b1_cached_self;

/* In a fork child, before it runs anything: the token is computed here, not at the first
 * claim, so no call reads /proc inside a lock hold or between two stores it must make. */
static void reset_pid(void) {
    cached_pid = 0;
    b1_cached_self = 0;
    b1_self_slow();
}

void b1_process_init(void) {
    static int registered;
    if (!registered) {
        registered = 1;
        pthread_atfork(NULL, NULL, reset_pid);
    }
    reset_pid();
    b1_self();
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

enum { STAT_UNKNOWN = -1, STAT_GONE = 0, STAT_LIVE = 1 };

/* Read pid's state and start time: STAT_LIVE with *start, STAT_GONE when the kernel says
 * it is gone or a zombie, STAT_UNKNOWN when it could not be read. */
static int read_stat(int32_t pid, uint64_t *start) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT || errno == ESRCH ? STAT_GONE : STAT_UNKNOWN;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return n < 0 && errno == ESRCH ? STAT_GONE : STAT_UNKNOWN;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may contain spaces and parentheses */
    if (!p || p[1] != ' ' || !p[2]) return STAT_UNKNOWN;
    char state = p[2];
    if (state == 'Z' || state == 'X' || state == 'x') return STAT_GONE;
    /* fields after the name: state(3) ... starttime(22) */
    int field = 3;
    for (p += 2; *p && field < 22; p++)
        if (*p == ' ') field++;
    if (!*p) return STAT_UNKNOWN;
    *start = strtoull(p, NULL, 10);
    return STAT_LIVE;
}

uint64_t b1_proc_start(int32_t pid) {
    uint64_t start = 0;
    return pid > 0 && read_stat(pid, &start) == STAT_LIVE ? start : 0;
}

static b1_owner_t token(int32_t pid, uint64_t start) {
    return ((uint64_t)(uint32_t)start << 32) | (uint32_t)pid;
}

b1_owner_t b1_self_slow(void) {
    if (!b1_cached_self) {
        uint64_t start = b1_proc_start(b1_pid());
        /* unreadable now (out of descriptors): a token without a start, not cached, so
         * the next call tries again; liveness of such a token rests on the pid alone */
        if (!start) return token(b1_pid(), 0);
        b1_cached_self = token(b1_pid(), start);
    }
    return b1_cached_self;
}

b1_owner_t b1_owner_of(int32_t pid) {
    uint64_t start = 0;
    int s = pid > 0 ? read_stat(pid, &start) : STAT_GONE;
    if (s == STAT_GONE) return 0;
    return token(pid, s == STAT_LIVE ? start : 0);
}

/* pid dead on the kernel's word?  `start32` is the recorded start (mod 2^32), or 0 with
 * `full` the full start, or neither known (0, 0): then any process with the pid counts. */
static int alive(int32_t pid, uint32_t start32, uint64_t full) {
    if (pid <= 0) return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
    uint64_t now = 0;
    int s = read_stat(pid, &now);
    if (s == STAT_GONE) return 0;
    if (s == STAT_UNKNOWN) return 1;
    if (full) return now == full;
    return !start32 || (uint32_t)now == start32;
}

int b1_owner_alive(b1_owner_t o) {
    return alive(B1_OWNER_PID(o), (uint32_t)(o >> 32), 0);
}

int b1_pid_alive(int32_t pid, uint64_t start) { return alive(pid, 0, start); }
