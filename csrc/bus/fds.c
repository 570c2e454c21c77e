/*
 * fds.c -- file descriptors carried by messages (bus1's SEND fds, installed at RECV).
 *
 * The store of a peer R is R's fd_socks AF_UNIX datagram sockets, socket k bound at the
 * filesystem path B1_FDS_DIR "<R's nonce, 32 hex digits>/<k>".  The directory is made by
 * bus1py/fds.py with the bus segment's owner and mode (rwx for each class that may write
 * the segment, nothing for the others), no symbolic link: the kernel lets only those who
 * may map the bus send to, bind in or find a store (a path socket needs search and write
 * permission; an abstract one needs none).  The nonce is random and lives in R's record.
 * The sockets belong to R's holder processes: bus1py/fds.py binds them (SO_PASSCRED set
 * before the bind) and registers them here with the credentials allowed to post; a fork
 * child drops them (it takes them again at its first use of R).  The kernel keeps
 * descriptors queued in them valid whatever becomes of their sender, and closes them when
 * the last holder closes the sockets.  A datagram socket queues net.unix.max_dgram_qlen + 1
 * datagrams, so R has as many sockets as its quota of descriptors needs (b1_fds_socks).
 *
 * Invariants:
 *   - The quota is R's counter n_fds (queue.h): charged at the stage of a message to R,
 *     released where its copy leaves R's queue.  A datagram is posted only for a charged
 *     copy, so the store holds at most quota_fds datagrams of queued messages, plus
 *     orphans; a post that finds every socket full fails with EDQUOT all the same.
 *   - A post reaches every socket it needs or the send fails: a live receiver whose store
 *     is not bound (no holder could set it up) fails the send with ENOLINK, nothing stamped;
 *     only a receiver no longer connected is skipped (its copy is dropped anyway).
 *   - A datagram is valid when it is one header long, carries SCM_CREDENTIALS of a user the
 *     store allows (the registered owner, its group for a group bus, root), a header whose
 *     counts agree, and exactly the descriptors the header counts.  Anything else -- any
 *     length, any header, missing or extra descriptors, no or foreign credentials -- is
 *     never matched and is popped (its descriptors closed by the kernel) when it reaches
 *     its socket's head.  The walk steps by each datagram's real length (SO_PEEK_OFF is in
 *     bytes), so no datagram shifts where the next one is read.
 *   - A datagram names its message -- (sender id, stamp, transaction seq, destination
 *     index) -- and which of its descriptors it carries (first, count, of total); a
 *     message of more than SCM_MAX descriptors travels in several, in any sockets.
 *   - A sender posts under its own lock, with the stamp computed and not yet stored (tx.c).
 *   - A receiver takes a message's descriptors in the lock hold that takes its entry
 *     (recv.c), before the entry leaves the queue, by peeking: it finds the message's
 *     datagrams wherever they are and installs copies of their descriptors (MSG_PEEK with
 *     room for them), leaving the datagrams in the store.  Nothing of another message ever
 *     leaves the store in a receive, so a receiver killed anywhere loses nothing but what
 *     it claimed.  Every copy installed by a peek that is not used is closed at once.
 *   - A take installs all of a message's descriptors found, or none: a copy the kernel
 *     cannot install (the receiver out of descriptor numbers: MSG_CTRUNC on one of the
 *     message's datagrams) fails the take with -EMFILE, the copies installed closed.  The
 *     copies are all a take changes, so the message stays queued as it was.  A message
 *     whose datagrams are missing (its store closed by its last holder before the take)
 *     fails it with -ENOLINK, copies closed: recv.c drops it and says so.
 *   - A datagram is removed only from the head of its socket and only when it is invalid
 *     or its message is no longer in the queue (taken, dropped, flushed, never
 *     committed): an orphan.  Every receive that met descriptors (at the end of its hold)
 *     and every sweep pops the orphans at the heads of the sockets; an orphan behind a
 *     queued message's datagram waits until that one is taken.  A disconnected peer's
 *     store is emptied by the holder that lets go of it (b1_fds_drain) and its paths
 *     unlinked by whoever finishes the disconnect (b1_fds_unlink).
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

/* ---- the stores: paths, and the ones this process holds ---- */

static uint32_t socks_of(const struct b1_peer *p) {
    uint32_t n = __atomic_load_n(&p->fd_socks, __ATOMIC_RELAXED);
    return n > B1_FD_SOCKS_MAX ? B1_FD_SOCKS_MAX : n;
}

static void nonce_of(const struct b1_peer *p, uint64_t nonce[2]) {
    nonce[0] = __atomic_load_n(&p->fd_nonce[0], __ATOMIC_RELAXED);
    nonce[1] = __atomic_load_n(&p->fd_nonce[1], __ATOMIC_RELAXED);
}

static socklen_t store_address(const uint64_t nonce[2], uint32_t k, struct sockaddr_un *a) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path, sizeof a->sun_path, B1_FDS_DIR "%016llx%016llx/%u",
                     (unsigned long long)nonce[0], (unsigned long long)nonce[1], k);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
}

int b1_fds_address(void *base, uint32_t slot, uint64_t id, uint32_t k, char *out, uint32_t cap) {
    if (!slot || slot > LIM(base).max_peers) return -EINVAL;
    struct b1_peer *p = PEER(base, slot);
    uint64_t nonce[2];
    nonce_of(p, nonce);
    uint32_t n = socks_of(p);
    if (__atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id) return -ESHUTDOWN;
    if (k >= n) return -ERANGE;
    struct sockaddr_un a;
    socklen_t len = store_address(nonce, k, &a) - offsetof(struct sockaddr_un, sun_path) - 1;
    if (len > cap) return -ENOSPC;
    memcpy(out, a.sun_path, len);
    return (int)len;
}

void b1_fds_unlink(const uint64_t nonce[2], uint32_t n) {
    struct sockaddr_un a;
    if (n > B1_FD_SOCKS_MAX) n = B1_FD_SOCKS_MAX;
    for (uint32_t k = 0; k < n; k++) {
        store_address(nonce, k, &a);
        unlink(a.sun_path);
    }
    *strrchr(a.sun_path, '/') = 0;
    rmdir(a.sun_path); /* fails while a holder binds afresh in it: the holder's own unlink then */
}

/* this process's stores, by nonce (unique per peer, so per bus and mapping alike); a
 * fork child starts with none (bus1py/fds.py closes their sockets there) and the lock
 * free (a thread of the parent may have held it) */
struct store { uint64_t nonce[2]; struct b1_fds_store s; };
static struct store *stores;
static uint32_t n_stores;
static pthread_mutex_t stores_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t stores_once = PTHREAD_ONCE_INIT;

static void stores_after_fork(void) {
    pthread_mutex_init(&stores_lock, NULL);
    n_stores = 0;
}
static void stores_init(void) { pthread_atfork(NULL, NULL, stores_after_fork); }

int b1_fds_register(void *base, uint32_t slot, uint64_t id, const int32_t *socks, uint32_t n,
                    uint32_t uid, int64_t gid) {
    if (!slot || slot > LIM(base).max_peers) return -EINVAL;
    struct b1_peer *p = PEER(base, slot);
    uint64_t nonce[2];
    nonce_of(p, nonce);
    uint32_t want = socks_of(p);
    if (__atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id) return -ESHUTDOWN;
    if ((n && n != want) || (n && !socks)) return -EINVAL;
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
            memcpy(stores[i].nonce, nonce, sizeof nonce);
            stores[i].s = (struct b1_fds_store){.n = n, .uid = uid, .gid = gid};
            memcpy(stores[i].s.socks, socks, n * sizeof *socks);
        }
    }
    pthread_mutex_unlock(&stores_lock);
    return r;
}

uint32_t b1_fds_store(void *base, uint32_t slot, uint64_t id, struct b1_fds_store *out) {
    struct b1_peer *p = PEER(base, slot);
    uint64_t nonce[2];
    nonce_of(p, nonce);
    out->n = 0;
    pthread_mutex_lock(&stores_lock);
    for (uint32_t i = 0; i < n_stores; i++)
        if (!memcmp(stores[i].nonce, nonce, sizeof nonce)) *out = stores[i].s;
    pthread_mutex_unlock(&stores_lock);
    if (__atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id) out->n = 0;
    return out->n;
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

/* One datagram into the first of the store's n sockets with room: 0, 1 when a socket is
 * not bound (no holder set the store up), or -errno (-EDQUOT: every socket full). */
static int post_one(int sock, const uint64_t nonce[2], uint32_t n, const struct fd_dgram *h, const int32_t *fds) {
    for (uint32_t k = 0; k < n; k++) {
        struct sockaddr_un to;
        socklen_t tolen = store_address(nonce, k, &to);
        int e = send_dgram(sock, &to, tolen, h, fds);
        if (!e) return 0;
        if (e == -ECONNREFUSED || e == -ENOENT || e == -ENOTDIR) return 1;
        if (e == -EBADF || e == -EACCES || e == -EPERM) return e;
        if (e == -ETOOMANYREFS) break; /* the user's descriptors in flight at their limit */
        /* full (EAGAIN): the next one */
    }
    return -EDQUOT;
}

int b1_fds_post(void *base, int sock, const struct b1_tx *tx) {
    uint32_t n = n_staged;
    for (uint32_t i = 0; i < tx->n; i++) {
        const struct b1_dest *d = &tx->dests[i];
        if (d->state == B1_DEST_DROPPED) continue;
        struct b1_peer *r = PEER(base, d->peer_slot);
        uint64_t nonce[2];
        nonce_of(r, nonce);
        uint32_t n_socks = socks_of(r);
        if (__atomic_load_n(&r->id, __ATOMIC_ACQUIRE) != d->peer_id) continue; /* gone: dropped */
        for (uint32_t first = 0; first < n; first += SCM_MAX) {
            struct fd_dgram h = {tx->sender_id, tx->ts, tx->seq, i, n, first,
                                 n - first < SCM_MAX ? n - first : SCM_MAX};
            int e = post_one(sock, nonce, n_socks, &h, staged + first);
            if (e == 1) {
                /* no store: dropped if the receiver is gone, else the send fails */
                if (__atomic_load_n(&r->id, __ATOMIC_ACQUIRE) != d->peer_id ||
                    __atomic_load_n(&r->state, __ATOMIC_ACQUIRE) != B1_PEER_ACTIVE)
                    break;
                return -ENOLINK;
            }
            if (e) return e;
        }
    }
    return 0;
}

/* ---- taking ---- */

static void close_fds(const int32_t *fds, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) close(fds[i]);
}

#define AT_HEAD -1 /* peek the socket's head */
#define POP -2     /* take the socket's head out (its descriptors closed by the kernel) */

/* The datagram at byte offset `at` of the socket (peeked, left in place), its head
 * (AT_HEAD) or the head taken out (POP), into *h; *len its length from there.  With fds,
 * copies of its descriptors are installed there, else none.  Returns 1 when it is valid
 * (see the invariants; with fds, *nfds of them), 0 when it is not (no copy left
 * installed), -errno (-EAGAIN: no such datagram; -EMFILE: with fds, not all could be
 * installed, and those that were are closed). */
static int read_dgram(const struct b1_fds_store *st, int sock, int at, struct fd_dgram *h, uint32_t *len,
                      int32_t *fds, uint32_t *nfds) {
    union {
        char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(SCM_MAX * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(h, 0, sizeof *h);
    struct iovec iov = {h, sizeof *h};
    /* without fds the room holds the credentials only: no descriptor is installed */
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                        .msg_controllen = fds ? sizeof ctl.buf : CMSG_SPACE(sizeof(struct ucred))};
    int flags = MSG_DONTWAIT | MSG_CMSG_CLOEXEC | MSG_TRUNC;
    if (at != POP) {
        int off = at; /* AT_HEAD: -1, peeking off */
        if (setsockopt(sock, SOL_SOCKET, SO_PEEK_OFF, &off, sizeof off)) return -errno;
        flags |= MSG_PEEK;
    }
    ssize_t got = recvmsg(sock, &mh, flags);
    if (got < 0) return -errno;
    *len = (uint32_t)got;
    uint32_t k = 0, dropped = 0;
    struct ucred cr;
    int creds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET) continue;
        if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len == CMSG_LEN(sizeof cr)) {
            memcpy(&cr, CMSG_DATA(c), sizeof cr);
            creds = 1;
        } else if (c->cmsg_type == SCM_RIGHTS) {
            uint32_t m = (uint32_t)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            int32_t *in = (int32_t *)CMSG_DATA(c);
            for (uint32_t j = 0; j < m; j++) {
                if (fds && k < SCM_MAX) fds[k++] = in[j];
                else if (fds) close(in[j]), dropped++;
            }
        }
    }
    /* the room holds SCM_MAX: a truncation is a copy the kernel could not install -- no
     * number free (EMFILE), or one a security module refused, which reads the same */
    if (fds && (mh.msg_flags & MSG_CTRUNC)) {
        close_fds(fds, k);
        return at == POP ? 0 : -EMFILE;
    }
    int ok = got == (ssize_t)sizeof *h && creds &&
             (cr.uid == 0 || cr.uid == st->uid || st->gid == B1_FDS_ANYONE || (st->gid >= 0 && cr.gid == (gid_t)st->gid)) &&
             h->total && h->total <= B1_MAX_FDS && h->count && h->count <= SCM_MAX && h->first % SCM_MAX == 0 &&
             h->first < h->total && h->count <= h->total - h->first && (!fds || (h->count == k && !dropped));
    if (fds && !ok) {
        close_fds(fds, k);
        k = 0;
    }
    if (nfds) *nfds = k;
    return ok;
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

/* Pop the invalid datagrams and the orphans at the head of the socket (p's lock held;
 * p NULL: every datagram, the peer being gone). */
static void trim_locked(void *base, struct b1_peer *p, const struct b1_fds_store *st, int sock) {
    struct fd_dgram h;
    uint32_t len;
    for (uint32_t i = 0; i < WALK_MAX; i++) {
        int ok = read_dgram(st, sock, AT_HEAD, &h, &len, NULL, NULL);
        if (ok < 0) return;
        if (ok && p && queued_locked(base, p, &h)) return;
        if (read_dgram(st, sock, POP, &h, &len, NULL, NULL) < 0) return;
    }
}

int b1_fds_take_locked(const struct b1_fds_store *st, const struct b1_entry *e, uint32_t n, int32_t *out) {
    int32_t fds[SCM_MAX];
    uint8_t have[(B1_MAX_FDS + SCM_MAX - 1) / SCM_MAX] = {0};
    struct fd_dgram h, again;
    uint32_t got = 0, nfds, len;
    for (uint32_t i = 0; i < n; i++) out[i] = -1;
    for (uint32_t s = 0; s < st->n && got < n; s++) {
        uint32_t off = 0;
        for (int i = 0; i < WALK_MAX && got < n && off <= INT32_MAX; i++, off += len) {
            int ok = read_dgram(st, st->socks[s], (int)off, &h, &len, NULL, NULL);
            if (ok < 0) break;
            if (!ok || h.sender != e->sender || h.ts != e->ts || h.seq != e->seq || h.idx != e->idx ||
                h.total != n || have[h.first / SCM_MAX])
                continue;
            ok = read_dgram(st, st->socks[s], (int)off, &again, &len, fds, &nfds);
            if (ok == -EMFILE) { /* all or none: the message stays queued */
                for (uint32_t j = 0; j < n; j++)
                    if (out[j] >= 0) close(out[j]);
                return ok;
            }
            if (ok <= 0) continue;
            if (memcmp(&again, &h, sizeof h)) { /* cannot happen: only this lock's holder pops */
                close_fds(fds, nfds);
                continue;
            }
            have[h.first / SCM_MAX] = 1;
            memcpy(out + h.first, fds, nfds * sizeof *fds);
            got += nfds;
        }
    }
    if (got < n) { /* some are missing: the store was lost with its last holder */
        for (uint32_t j = 0; j < n; j++)
            if (out[j] >= 0) close(out[j]);
        return -ENOLINK;
    }
    return (int)got;
}

void b1_fds_sweep_locked(void *base, struct b1_peer *p, const struct b1_fds_store *st) {
    for (uint32_t s = 0; s < st->n; s++) trim_locked(base, p, st, st->socks[s]);
}

void b1_fds_drain(const int32_t *socks, uint32_t n) {
    struct b1_fds_store st = {.n = 0};
    for (uint32_t s = 0; s < n; s++) trim_locked(NULL, NULL, &st, socks[s]);
}
