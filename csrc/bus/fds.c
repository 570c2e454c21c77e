/*
 * fds.c -- file descriptors carried by messages (bus1's SEND fds, installed at RECV).
 *
 * The store of a peer R is R's fd_socks AF_UNIX datagram sockets, socket k bound at R's
 * abstract address "\0bus1py-fds/<R's nonce, 32 hex digits>/<R's id>/<k>".  The nonce is
 * random and lives in R's record, so only a process that may map the bus can name the
 * store (the trust boundary stays the uid).  The sockets belong to R's holder processes:
 * bus1py/fds.py binds them and registers them here; a fork inherits them.  The kernel
 * keeps descriptors queued in them valid whatever becomes of their sender, and closes
 * them when the last holder closes the sockets (a disconnected receiver drops them).
 * A datagram socket queues net.unix.max_dgram_qlen + 1 datagrams, so R has as many
 * sockets as its quota of descriptors needs (b1_fds_socks), one more for orphans.
 *
 * Invariants:
 *   - The quota is R's counter n_fds (queue.h): charged at the stage of a message to R,
 *     released where its copy leaves R's queue.  A datagram is posted only for a charged
 *     copy, so the store holds at most quota_fds datagrams of queued messages, plus
 *     orphans; a post that finds every socket full fails with EDQUOT all the same.
 *   - A datagram names its message -- (sender id, stamp, transaction seq, destination
 *     index) -- and which of its descriptors it carries (first, count, of total); a
 *     message of more than SCM_MAX descriptors travels in several, in any sockets.
 *   - A sender posts under its own lock, with the stamp computed and not yet stored (tx.c).
 *   - A receiver takes a message's descriptors in the lock hold that takes its entry
 *     (recv.c), before the entry leaves the queue, by peeking: it finds the message's
 *     datagrams wherever they are (SO_PEEK_OFF) and installs copies of their descriptors
 *     (MSG_PEEK with room for them), leaving the datagrams in the store.  Nothing of
 *     another message ever leaves the store in a receive, so a receiver killed anywhere
 *     loses nothing but what it claimed.
 *   - A take installs all of a message's descriptors found, or none: a copy the kernel
 *     cannot install (the receiver out of descriptor numbers: MSG_CTRUNC on one of the
 *     message's datagrams) fails the take with -EMFILE, the copies installed closed.  The
 *     copies are all a take changes, so the message stays queued as it was.  Datagrams
 *     missing for any other reason (no holder had the store at the post) are not waited
 *     for: the take returns the descriptors found, packed.
 *   - A datagram is removed only from the head of its socket and only when its message
 *     is no longer in the queue (taken, dropped, flushed, never committed): an orphan.
 *     Every receive that met descriptors (at the end of its hold) and every sweep pops
 *     the orphans at the heads of the sockets; an orphan behind a queued message's
 *     datagram waits until that one is taken (its descriptors stay in flight meanwhile,
 *     charged to nobody).
 *   - Nothing here takes a lock: post runs under the sender's, take and sweep under the
 *     receiver's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "fds.h"

#define SCM_MAX 253     /* the kernel's SCM_MAX_FD: descriptors one datagram carries */
#define WALK_MAX 4096   /* datagrams one take looks at in one socket, at most */

struct fd_dgram {
    uint64_t sender, ts, seq;
    uint32_t idx, total, first, count;
};

/* ---- the size of a store ---- */

/* datagrams a socket queues: net.unix.max_dgram_qlen + 1, read once */
static uint32_t dgram_room(void) {
    static _Atomic uint32_t room;
    uint32_t r = atomic_load(&room);
    if (r) return r;
    r = 11; /* the kernel's default */
    FILE *f = fopen("/proc/sys/net/unix/max_dgram_qlen", "r");
    unsigned q;
    if (f) {
        if (fscanf(f, "%u", &q) == 1 && q < (1u << 20)) r = q + 1;
        fclose(f);
    }
    atomic_store(&room, r);
    return r;
}

uint32_t b1_fds_socks(uint32_t quota) {
    uint32_t room = dgram_room(), n = (quota + room - 1) / room + 1;
    return n > B1_FD_SOCKS_MAX ? B1_FD_SOCKS_MAX : n;
}

/* ---- the descriptors of this thread's next send ---- */

static __thread int32_t staged[B1_MAX_FDS];
static __thread uint32_t n_staged;

int b1_send_fds(const int32_t *fds, uint32_t n) {
    if (n > B1_MAX_FDS) return -EMSGSIZE;
    if (n && !fds) return -EINVAL;
    if (n) memcpy(staged, fds, n * sizeof *fds);
    n_staged = n;
    return 0;
}

uint32_t b1_fds_staged(void) { return n_staged; }

/* ---- the stores: addresses, and the ones this process holds ---- */

static uint32_t socks_of(const struct b1_peer *p) {
    uint32_t n = __atomic_load_n(&p->fd_socks, __ATOMIC_RELAXED);
    return n > B1_FD_SOCKS_MAX ? B1_FD_SOCKS_MAX : n;
}

static socklen_t store_address(const struct b1_peer *p, uint64_t id, uint32_t k, struct sockaddr_un *a) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "bus1py-fds/%016llx%016llx/%llu/%u",
                     (unsigned long long)p->fd_nonce[0], (unsigned long long)p->fd_nonce[1],
                     (unsigned long long)id, k);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

int b1_fds_address(void *base, uint32_t slot, uint64_t id, uint32_t k, char *out, uint32_t cap) {
    if (!slot || slot > LIM(base).max_peers) return -EINVAL;
    struct b1_peer *p = PEER(base, slot);
    if (__atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id) return -ESHUTDOWN;
    if (k >= socks_of(p)) return -ERANGE;
    struct sockaddr_un a;
    socklen_t len = store_address(p, id, k, &a) - offsetof(struct sockaddr_un, sun_path) - 1;
    if (len > cap) return -ENOSPC;
    memcpy(out, a.sun_path + 1, len);
    return (int)len;
}

/* this process's stores, by nonce (unique per peer, so per bus and mapping alike); a
 * fork child starts with the lock free (a thread of the parent may have held it) */
struct store { uint64_t nonce[2]; uint32_t n; int socks[B1_FD_SOCKS_MAX]; };
static struct store *stores;
static uint32_t n_stores;
static pthread_mutex_t stores_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t stores_once = PTHREAD_ONCE_INIT;

static void stores_after_fork(void) { pthread_mutex_init(&stores_lock, NULL); }
static void stores_init(void) { pthread_atfork(NULL, NULL, stores_after_fork); }

int b1_fds_register(void *base, uint32_t slot, uint64_t id, const int32_t *socks, uint32_t n) {
    if (!slot || slot > LIM(base).max_peers) return -EINVAL;
    struct b1_peer *p = PEER(base, slot);
    if (__atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id) return -ESHUTDOWN;
    if (n > socks_of(p) || (n && !socks)) return -EINVAL;
    uint64_t nonce[2] = {p->fd_nonce[0], p->fd_nonce[1]};
    int r = 0;
    pthread_once(&stores_once, stores_init);
    pthread_mutex_lock(&stores_lock);
    uint32_t i = 0;
    while (i < n_stores && memcmp(stores[i].nonce, nonce, sizeof nonce)) i++;
    if (!n) {
        if (i < n_stores) stores[i] = stores[--n_stores];
    } else {
        if (i == n_stores) {
            struct store *grown = realloc(stores, (n_stores + 1) * sizeof *stores);
            if (grown) {
                stores = grown;
                n_stores++;
            } else {
                r = -ENOMEM;
            }
        }
        if (!r) {
            stores[i].nonce[0] = nonce[0];
            stores[i].nonce[1] = nonce[1];
            stores[i].n = n;
            memcpy(stores[i].socks, socks, n * sizeof *socks);
        }
    }
    pthread_mutex_unlock(&stores_lock);
    return r;
}

uint32_t b1_fds_store(void *base, uint32_t slot, uint64_t id, int *socks) {
    struct b1_peer *p = PEER(base, slot);
    uint32_t n = 0;
    pthread_mutex_lock(&stores_lock);
    for (uint32_t i = 0; i < n_stores; i++)
        if (stores[i].nonce[0] == p->fd_nonce[0] && stores[i].nonce[1] == p->fd_nonce[1]) {
            n = stores[i].n;
            memcpy(socks, stores[i].socks, n * sizeof *socks);
        }
    pthread_mutex_unlock(&stores_lock);
    return p->id == id ? n : 0;
}

/* ---- posting ---- */

int b1_fds_sender(void) {
    int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    return s < 0 ? -errno : s;
}

static int send_dgram(int sock, const struct sockaddr_un *to, socklen_t tolen,
                      const struct fd_dgram *h, const int32_t *fds) {
    union {
        char buf[CMSG_SPACE(SCM_MAX * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {(void *)h, sizeof *h};
    struct msghdr mh = {.msg_name = (void *)to, .msg_namelen = tolen, .msg_iov = &iov, .msg_iovlen = 1};
    if (h->count) {
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE(h->count * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(h->count * sizeof(int));
        memcpy(CMSG_DATA(c), fds, h->count * sizeof(int));
    }
    return sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 ? -errno : 0;
}

/* One datagram into the first of r's sockets with room: 0, 1 when r has no store bound
 * (no holder: none can receive), or -errno (-EDQUOT: every socket full). */
static int post_one(int sock, const struct b1_peer *r, uint64_t id, const struct fd_dgram *h, const int32_t *fds) {
    uint32_t n = socks_of(r);
    for (uint32_t k = 0; k < n; k++) {
        struct sockaddr_un to;
        socklen_t tolen = store_address(r, id, k, &to);
        int e = send_dgram(sock, &to, tolen, h, fds);
        if (!e) return 0;
        if ((e == -ECONNREFUSED || e == -ENOENT) && !k) return 1;
        if (e == -EBADF) return e;
        if (e == -ETOOMANYREFS) break; /* the user's descriptors in flight at their limit */
        /* full (EAGAIN), or a socket not bound: the next one */
    }
    return -EDQUOT;
}

int b1_fds_post(void *base, int sock, const struct b1_tx *tx) {
    uint32_t n = n_staged;
    for (uint32_t i = 0; i < tx->n; i++) {
        const struct b1_dest *d = &tx->dests[i];
        if (d->state == B1_DEST_DROPPED) continue;
        struct b1_peer *r = PEER(base, d->peer_slot);
        if (__atomic_load_n(&r->id, __ATOMIC_ACQUIRE) != d->peer_id) continue; /* gone: dropped */
        for (uint32_t first = 0; first < n; first += SCM_MAX) {
            struct fd_dgram h = {tx->sender_id, tx->ts, tx->seq, i, n, first,
                                 n - first < SCM_MAX ? n - first : SCM_MAX};
            int e = post_one(sock, r, d->peer_id, &h, staged + first);
            if (e == 1) break;
            if (e) return e;
        }
    }
    return 0;
}

/* ---- taking ---- */

static void close_fds(const int32_t *fds, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) close(fds[i]);
}

/* The datagram at position `at` of the socket into *h (peeked, left in place, at >= 0)
 * or its head (taken, at < 0); with fds, its descriptors too (*nfds of them: copies when
 * peeked), else none installed (a taken datagram's close with it).  0, or -errno
 * (-EAGAIN: no such datagram; -EMFILE: with fds, not all could be installed, and those
 * that were are closed).  A datagram of the wrong shape reads as total 0. */
static int read_dgram(int sock, int at, struct fd_dgram *h, int32_t *fds, uint32_t *nfds) {
    union {
        char buf[CMSG_SPACE(SCM_MAX * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {h, sizeof *h};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fds) {
        mh.msg_control = ctl.buf;
        mh.msg_controllen = sizeof ctl.buf;
    }
    int flags = MSG_DONTWAIT | MSG_CMSG_CLOEXEC;
    if (at >= 0) {
        int off = at * (int)sizeof *h; /* every datagram is one header long */
        if (setsockopt(sock, SOL_SOCKET, SO_PEEK_OFF, &off, sizeof off)) return -errno;
        flags |= MSG_PEEK;
    }
    ssize_t got = recvmsg(sock, &mh, flags);
    if (got < 0) return -errno;
    uint32_t k = 0;
    for (struct cmsghdr *c = fds ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        uint32_t m = (uint32_t)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        if (k + m > SCM_MAX) m = SCM_MAX - k;
        memcpy(fds + k, CMSG_DATA(c), m * sizeof(int));
        k += m;
    }
    /* the room holds SCM_MAX: a truncation is a copy the kernel could not install -- no
     * number free (EMFILE), or one a security module refused, which reads the same */
    if (fds && (mh.msg_flags & MSG_CTRUNC)) {
        close_fds(fds, k);
        return -EMFILE;
    }
    if (nfds) *nfds = k;
    if (got != sizeof *h || h->total > B1_MAX_FDS || h->first + h->count > h->total || h->count > SCM_MAX ||
        (fds && ((mh.msg_flags & MSG_TRUNC) || h->count != k)))
        h->total = 0;
    return 0;
}

/* Is h's message still in p's queue, as a block or committed (p's lock held)? */
static int queued_locked(void *base, struct b1_peer *p, const struct fd_dgram *h) {
    uint32_t max = LIM(base).max_entries, stack[64], top = 0, steps = 0;
    uint32_t t = p->root;
    /* in-order walk with a bounded stack; a deeper tree (far beyond a treap's expected
     * depth) is walked on to its right spine only, and what it misses reads as queued */
    while ((t || top) && b1_step(&steps, max)) {
        if (t) {
            if (top == 64) return 1;
            stack[top++] = t;
            t = ENTRY(base, t)->left;
            continue;
        }
        struct b1_entry *e = ENTRY(base, stack[--top]);
        if (e->sender == h->sender && e->seq == h->seq && e->idx == h->idx) return 1;
        t = e->right;
    }
    return 0;
}

/* Pop the orphans at the head of the socket (p's lock held). */
static void trim_locked(void *base, struct b1_peer *p, int sock) {
    struct fd_dgram h;
    for (uint32_t i = 0; i < WALK_MAX; i++) {
        if (read_dgram(sock, 0, &h, NULL, NULL)) return;
        if (h.total && queued_locked(base, p, &h)) return;
        if (read_dgram(sock, -1, &h, NULL, NULL)) return;
    }
}

int b1_fds_take_locked(const int *socks, uint32_t n_socks, const struct b1_entry *e, uint32_t n, int32_t *out) {
    int32_t fds[SCM_MAX];
    uint8_t have[(B1_MAX_FDS + SCM_MAX - 1) / SCM_MAX] = {0};
    struct fd_dgram h;
    uint32_t got = 0, nfds;
    for (uint32_t i = 0; i < n; i++) out[i] = -1;
    for (uint32_t s = 0; s < n_socks && got < n; s++) {
        for (int at = 0; at < WALK_MAX && got < n; at++) {
            if (read_dgram(socks[s], at, &h, NULL, NULL)) break;
            if (!h.total || h.sender != e->sender || h.ts != e->ts || h.seq != e->seq || h.idx != e->idx ||
                h.total != n || h.first % SCM_MAX || have[h.first / SCM_MAX])
                continue;
            int r = read_dgram(socks[s], at, &h, fds, &nfds);
            if (r == -EMFILE) { /* all or none: the message stays queued */
                for (uint32_t i = 0; i < n; i++)
                    if (out[i] >= 0) close(out[i]);
                return r;
            }
            if (r || !h.total) continue;
            have[h.first / SCM_MAX] = 1;
            memcpy(out + h.first, fds, nfds * sizeof *fds);
            got += nfds;
        }
    }
    if (got < n) { /* some are missing (no holder had the store at the post): the rest, packed */
        uint32_t k = 0;
        for (uint32_t i = 0; i < n; i++)
            if (out[i] >= 0) out[k++] = out[i];
        got = k;
    }
    return (int)got;
}

void b1_fds_sweep_locked(void *base, struct b1_peer *p, const int *socks, uint32_t n_socks) {
    for (uint32_t s = 0; s < n_socks; s++) trim_locked(base, p, socks[s]);
}
