/*
 * proc.c -- the calling process and the others: a cached pid and owner token (reset in a
 * fork child), the monotonic clock, the exec marker, and liveness by an identity no later
 * process shares.
 *
 * Invariants:
 *   - Death is certain or it is not death: a process is reported dead only on the
 *     kernel's word -- kill(pid, 0) or pidfd_open fails with ESRCH, its pidfd polls
 *     readable (it exited: a zombie), the pid's pidfd has another inode (pidfs: another
 *     process, however soon the pid was reused) or, without pidfs, /proc/PID/stat shows
 *     another start time; for a holder also when its exec marker is no longer open at its
 *     number (exec closed it).  A failure to look (EMFILE, ENFILE, ENOMEM, EACCES, a
 *     short read) reports alive: reaping a live process loses its messages, waiting for
 *     a dead one only delays.
 *   - The exec marker is one memfd per process, O_CLOEXEC, made at its first record as a
 *     holder and inherited by fork children (the same inode at the same number: a child
 *     that records itself names the marker it has).  Only exec or an explicit close ends
 *     it, and either ends the process as a holder.
 *   - Nothing here touches the bus or takes a bus lock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "proc.h"
#include "bus1.h"

static int32_t cached_pid;
b1_owner_t b1_cached_self;
static pthread_mutex_t marker_lock = PTHREAD_MUTEX_INITIALIZER; /* the exec marker's fields */

/* In a fork child, before it runs anything: the token is computed here, not at the first
 * claim, so no call reads /proc inside a lock hold or between two stores it must make. */
static void reset_pid(void) {
    cached_pid = 0;
    b1_cached_self = 0;
    b1_self_slow();
}

static void in_fork_child(void) {
    /* a thread of the parent may have held it at the fork: the child has only this one */
    pthread_mutex_init(&marker_lock, NULL);
    reset_pid();
}

void b1_process_init(void) {
    static int registered;
    if (!registered) {
        registered = 1;
        pthread_atfork(NULL, NULL, in_fork_child);
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

#define PIDFS_MAGIC 0x50494446
#define IDENT_MASK ((1ull << (64 - B1_OWNER_PID_BITS)) - 1)

static int pidfs = -1; /* does a pidfd's inode name its process (pidfs)?  -1: not yet known */

/* pid's pidfd inode: STAT_LIVE with *ino, STAT_GONE when the kernel says the pid names no
 * process (ESRCH; EINVAL: a thread, not a process) or an exited one (its pidfd is
 * readable), STAT_UNKNOWN when it could not be looked at or there is no pidfs. */
static int read_ino(int32_t pid, uint64_t *ino) {
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0 && errno == ENOSYS) __atomic_store_n(&pidfs, 0, __ATOMIC_RELAXED); /* before 5.3, or filtered */
    if (fd < 0) return errno == ESRCH || errno == EINVAL ? STAT_GONE : STAT_UNKNOWN;
    struct pollfd pfd = {fd, POLLIN, 0};
    struct stat st;
    int s = STAT_UNKNOWN;
    if (poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN)) {
        s = STAT_GONE;
    } else if (fstat(fd, &st) == 0) {
        if (pidfs < 0) {
            struct statfs fs;
            if (fstatfs(fd, &fs) == 0) __atomic_store_n(&pidfs, fs.f_type == PIDFS_MAGIC, __ATOMIC_RELAXED);
        }
        if (pidfs == 1) {
            *ino = (uint64_t)st.st_ino;
            s = STAT_LIVE;
        }
    }
    close(fd);
    return s;
}

/* pid's identity for its token: the pidfs inode, else its start time (each mod 2^42), 0
 * when unknown; STAT_GONE when the pid names no live process. */
static int read_ident(int32_t pid, uint64_t *ident) {
    uint64_t v = 0;
    int s = read_ino(pid, &v);
    if (s == STAT_UNKNOWN && pidfs == 0) s = read_stat(pid, &v);
    *ident = s == STAT_LIVE ? v & IDENT_MASK : 0;
    return s;
}

static b1_owner_t token(int32_t pid, uint64_t ident) {
    return (ident << B1_OWNER_PID_BITS) | (uint32_t)pid;
}

b1_owner_t b1_self_slow(void) {
    if (!b1_cached_self) {
        uint64_t ident = 0;
        read_ident(b1_pid(), &ident);
        /* unreadable now (out of descriptors): a token without an identity, not cached,
         * so the next call tries again; liveness of such a token rests on the pid alone */
        if (!ident) return token(b1_pid(), 0);
        b1_cached_self = token(b1_pid(), ident);
    }
    return b1_cached_self;
}

b1_owner_t b1_owner_of(int32_t pid) {
    uint64_t ident = 0;
    if (pid <= 0 || read_ident(pid, &ident) == STAT_GONE) return 0;
    return token(pid, ident);
}

/* pid alive, and (when known) still the process of that pidfs inode `ino`, of that token
 * identity `ident` (mod 2^42: an inode with pidfs, a start time without), or of that full
 * start time `full`.  An identity that cannot be compared answers alive. */
static int alive(int32_t pid, uint64_t ino, uint64_t ident, uint64_t full) {
    if (pid <= 0) return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
    uint64_t now = 0;
    int s = read_ino(pid, &now);
    if (s == STAT_GONE) return 0;
    if (s == STAT_LIVE) {
        if (ino) return now == ino;
        if (ident && pidfs == 1) return (now & IDENT_MASK) == ident;
    }
    if (!ident && !full) return 1;
    s = read_stat(pid, &now);
    if (s == STAT_GONE) return 0;
    if (s == STAT_UNKNOWN || (ident && pidfs != 0)) return 1; /* the inode could not be read */
    return full ? now == full : (now & IDENT_MASK) == ident;
}

int b1_owner_alive(b1_owner_t o) {
    return alive(B1_OWNER_PID(o), 0, o >> B1_OWNER_PID_BITS, 0);
}

int b1_pid_alive(int32_t pid, uint64_t start) { return alive(pid, 0, 0, start); }

/* ---- the exec marker ---- */

static int marker_fd = -1;
static uint64_t marker_ino;
static dev_t marker_dev;

int b1_exec_marker(void) {
    pthread_mutex_lock(&marker_lock);
    struct stat st;
    /* still ours (not closed, nor its number reused since)? */
    if (marker_fd >= 0 && !(fstat(marker_fd, &st) == 0 && st.st_ino == marker_ino && st.st_dev == marker_dev))
        marker_fd = -1;
    if (marker_fd < 0) {
        int fd = memfd_create("bus1py-exec-marker", MFD_CLOEXEC);
        if (fd >= 0 && fd <= 2) { /* never a standard stream's number, which a dup2 replaces */
            int high = fcntl(fd, F_DUPFD_CLOEXEC, 3);
            close(fd);
            fd = high;
        }
        if (fd >= 0 && fstat(fd, &st) == 0) {
            marker_fd = fd;
            marker_ino = st.st_ino;
            marker_dev = st.st_dev;
        } else if (fd >= 0) {
            close(fd);
        }
    }
    int r = marker_fd >= 0 ? marker_fd : -(errno ? errno : EMFILE);
    pthread_mutex_unlock(&marker_lock);
    return r;
}

void b1_holder_of(int32_t pid, struct b1_holder *out) {
    *out = (struct b1_holder){0, -1, 0, 0, 0};
    uint64_t ino = 0;
    if (pid <= 0 || read_ino(pid, &ino) == STAT_GONE) return;
    out->pid = pid;
    out->ino = ino;
    out->start = b1_proc_start(pid);
    if (pid == b1_pid() && b1_exec_marker() >= 0) {
        pthread_mutex_lock(&marker_lock);
        out->marker_fd = marker_fd;
        out->marker_ino = marker_fd >= 0 ? marker_ino : 0;
        pthread_mutex_unlock(&marker_lock);
    }
}

/* Is the marker (fd, ino) still open in pid?  0 only when /proc says that number is
 * closed or names another file; any other failure (EACCES, EMFILE) answers yes. */
static int marker_open(int32_t pid, int32_t fd, uint64_t ino) {
    char path[64];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
    if (stat(path, &st) != 0) return errno != ENOENT;
    return (uint64_t)st.st_ino == ino;
}

int b1_holder_alive(const struct b1_holder *h) {
    if (!alive(h->pid, h->ino, 0, h->start)) return 0;
    return !h->marker_ino || h->marker_fd < 0 || marker_open(h->pid, h->marker_fd, h->marker_ino);
}
