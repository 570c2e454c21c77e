/*
 * fds.c -- file descriptors carried by messages (bus1's SEND fds, installed at RECV).
 *
 * The store of a peer R is one AF_UNIX datagram socket bound at R's abstract address,
 * "\0bus1py-fds/<R's nonce, 32 hex digits>/<R's id>".  The nonce is random and lives in
 * R's record, so only a process that may map the bus can name the store (the trust
 * boundary stays the uid).  The socket belongs to R's holder processes: bus1py/fds.py
 * binds it and registers it here; a fork inherits both.  The kernel keeps descriptors
 * queued in it valid whatever becomes of their sender, and closes them when the last
 * holder closes the socket (a disconnected receiver drops them, as bus1 does).
 *
 * Invariants:
 *   - A datagram names its message -- (sender id, stamp, transaction seq, destination
 *     index) -- and which of its descriptors it carries (first, count, of total); a
 *     message of more than SCM_MAX descriptors travels in several.
 *   - A sender posts under its own lock, with the stamp computed and not yet stored
 *     (tx.c): its datagrams reach a store in stamp order.  A post whose stamp is never
 *     stored (the sender killed in that hold, a later destination refused) leaves
 *     orphans whose key is at or below the stamp of every later message of that sender.
 *   - A receiver takes a message's descriptors in the lock hold that takes its entry
 *     (recv.c), so two holder processes never take each other's.  Met on the way: an
 *     orphan of the same sender (key below) is closed; a datagram whose message is still
 *     in the queue (a block, or committed) goes back to the store's tail; any other is an
 *     orphan (its message was dropped where the store was not at hand) and is closed.
 *     The walk ends when the store is empty or a datagram it sent back comes round.
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
#define WALK_MAX 4096   /* datagrams one take or sweep looks at, at most */

struct fd_dgram {
    uint64_t sender, ts, seq;
    uint32_t idx, total, first, count;
};

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

static socklen_t store_address(const struct b1_peer *p, uint64_t id, struct sockaddr_un *a) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "bus1py-fds/%016llx%016llx/%llu",
                     (unsigned long long)p->fd_nonce[0], (unsigned long long)p->fd_nonce[1],
                     (unsigned long long)id);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

int b1_fds_address(void *base, uint32_t slot, uint64_t id, char *out, uint32_t cap) {
    if (!slot || slot > LIM(base).max_peers) return -EINVAL;
    struct b1_peer *p = PEER(base, slot);
    if (__atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id) return -ESHUTDOWN;
    struct sockaddr_un a;
    socklen_t len = store_address(p, id, &a) - offsetof(struct sockaddr_un, sun_path) - 1;
    if (len > cap) return -ENOSPC;
    memcpy(out, a.sun_path + 1, len);
    return (int)len;
}

/* this process's stores, by nonce (unique per peer, so per bus and mapping alike); a
 * fork child starts with the lock free (a thread of the parent may have held it) */
struct store { uint64_t nonce[2]; int sock; };
static struct store *stores;
static uint32_t n_stores;
static pthread_mutex_t stores_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t stores_once = PTHREAD_ONCE_INIT;

static void stores_after_fork(void) { pthread_mutex_init(&stores_lock, NULL); }
static void stores_init(void) { pthread_atfork(NULL, NULL, stores_after_fork); }

int b1_fds_register(void *base, uint32_t slot, uint64_t id, int32_t sock) {
    if (!slot || slot > LIM(base).max_peers) return -EINVAL;
    struct b1_peer *p = PEER(base, slot);
    if (__atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id) return -ESHUTDOWN;
    uint64_t nonce[2] = {p->fd_nonce[0], p->fd_nonce[1]};
    int r = 0;
    pthread_once(&stores_once, stores_init);
    pthread_mutex_lock(&stores_lock);
    uint32_t i = 0;
    while (i < n_stores && memcmp(stores[i].nonce, nonce, sizeof nonce)) i++;
    if (sock < 0) {
        if (i < n_stores) stores[i] = stores[--n_stores];
    } else if (i < n_stores) {
        stores[i].sock = sock;
    } else {
        struct store *grown = realloc(stores, (n_stores + 1) * sizeof *stores);
        if (!grown) {
            r = -ENOMEM;
        } else {
            stores = grown;
            stores[n_stores++] = (struct store){{nonce[0], nonce[1]}, sock};
        }
    }
    pthread_mutex_unlock(&stores_lock);
    return r;
}

int b1_fds_store(void *base, uint32_t slot, uint64_t id) {
    struct b1_peer *p = PEER(base, slot);
    int sock = -1;
    pthread_mutex_lock(&stores_lock);
    for (uint32_t i = 0; i < n_stores; i++)
        if (stores[i].nonce[0] == p->fd_nonce[0] && stores[i].nonce[1] == p->fd_nonce[1]) sock = stores[i].sock;
    pthread_mutex_unlock(&stores_lock);
    return p->id == id ? sock : -1;
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

int b1_fds_post(void *base, int sock, const struct b1_tx *tx) {
    uint32_t n = n_staged;
    for (uint32_t i = 0; i < tx->n; i++) {
        const struct b1_dest *d = &tx->dests[i];
        if (d->state == B1_DEST_DROPPED) continue;
        struct b1_peer *r = PEER(base, d->peer_slot);
        if (__atomic_load_n(&r->id, __ATOMIC_ACQUIRE) != d->peer_id) continue; /* gone: dropped */
        struct sockaddr_un to;
        socklen_t tolen = store_address(r, d->peer_id, &to);
        for (uint32_t first = 0; first < n; first += SCM_MAX) {
            struct fd_dgram h = {tx->sender_id, tx->ts, tx->seq, i, n, first,
                                 n - first < SCM_MAX ? n - first : SCM_MAX};
            int e = send_dgram(sock, &to, tolen, &h, staged + first);
            if (e == -ECONNREFUSED || e == -ENOENT) break; /* no holder has the store: none can receive */
            if (e == -EBADF) return e;
            if (e) return -EDQUOT; /* full (EAGAIN), or the user's descriptors in flight (ETOOMANYREFS) */
        }
    }
    return 0;
}

/* ---- taking ---- */

static void close_fds(const int32_t *fds, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) close(fds[i]);
}

/* The next datagram of the store into *h and fds (*nfds of them): 0, or -errno (-EAGAIN:
 * empty).  A datagram of the wrong shape reads as total 0. */
static int pop(int store, struct fd_dgram *h, int32_t *fds, uint32_t *nfds) {
    union {
        char buf[CMSG_SPACE(SCM_MAX * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {h, sizeof *h};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                        .msg_controllen = sizeof ctl.buf};
    ssize_t got = recvmsg(store, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (got < 0) return -errno;
    *nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        uint32_t k = (uint32_t)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        if (*nfds + k > SCM_MAX) k = SCM_MAX - *nfds;
        memcpy(fds + *nfds, CMSG_DATA(c), k * sizeof(int));
        *nfds += k;
    }
    if (got != sizeof *h || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || h->count != *nfds ||
        h->total > B1_MAX_FDS || h->first + h->count > h->total)
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

static int same(const struct fd_dgram *a, const struct fd_dgram *b) {
    return a->sender == b->sender && a->ts == b->ts && a->seq == b->seq && a->idx == b->idx &&
           a->first == b->first;
}

/* Back to the store's tail (p's lock held), this process's copies closed either way:
 * when the send fails the datagram is lost (whether it was sent back). */
static int send_back(int store, struct b1_peer *p, const struct fd_dgram *h, const int32_t *fds, uint32_t n) {
    struct sockaddr_un self;
    socklen_t len = store_address(p, p->id, &self);
    int ok = send_dgram(store, &self, len, h, fds) == 0;
    close_fds(fds, n);
    return ok;
}

/* One walk over the store for take (e set) or sweep (e NULL). */
static uint32_t walk_locked(void *base, struct b1_peer *p, int store, const struct b1_entry *e,
                            uint32_t n, int32_t *out) {
    int32_t fds[SCM_MAX];
    struct fd_dgram h, first_back = {0};
    uint32_t got = 0, nfds = 0, sent_back = 0;
    for (uint32_t i = 0; i < WALK_MAX && (!e || got < n); i++) {
        if (pop(store, &h, fds, &nfds)) break;
        if (!h.total) {
            close_fds(fds, nfds);
            continue;
        }
        if (e && h.sender == e->sender && h.ts == e->ts && h.seq == e->seq && h.idx == e->idx &&
            h.total == n) {
            if (out) memcpy(out + h.first, fds, nfds * sizeof *fds);
            else close_fds(fds, nfds);
            got += nfds;
            continue;
        }
        int orphan = e && h.sender == e->sender && (h.ts < e->ts || (h.ts == e->ts && h.seq != e->seq));
        if (orphan || !queued_locked(base, p, &h)) {
            close_fds(fds, nfds);
            continue;
        }
        int round = sent_back && same(&h, &first_back);
        if (send_back(store, p, &h, fds, nfds) && !sent_back) {
            sent_back = 1;
            first_back = h;
        }
        if (round) break;
    }
    return got;
}

uint32_t b1_fds_take_locked(void *base, struct b1_peer *p, int store, const struct b1_entry *e,
                            uint32_t n, int32_t *out) {
    if (out)
        for (uint32_t i = 0; i < n; i++) out[i] = -1;
    uint32_t got = walk_locked(base, p, store, e, n, out);
    if (out && got < n) { /* some were lost (a receiver killed mid-walk): the rest, packed */
        uint32_t k = 0;
        for (uint32_t i = 0; i < n; i++)
            if (out[i] >= 0) out[k++] = out[i];
        got = k;
    }
    return got;
}

void b1_fds_sweep_locked(void *base, struct b1_peer *p, int store) {
    walk_locked(base, p, store, NULL, 0, NULL);
}
