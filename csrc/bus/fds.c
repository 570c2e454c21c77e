/*
 * fds.c -- file descriptors carried by messages (bus1's SEND fds, installed at RECV).
 *
 * The store of a peer R is three AF_UNIX datagram sockets, whatever R's quota: the inbox,
 * bound at the filesystem path B1_FDS_DIR "<R's nonce, 32 hex digits>/inbox", and a
 * socketpair (a, b) with no path.  The directory is made by bus1py/fds.py with the bus
 * segment's owner and mode (rwx for each class that may write the segment, nothing for the
 * others), no symbolic link: the kernel lets only those who may map the bus send to, bind
 * in or find a store (a path socket needs search and write permission).  The nonce is
 * random and lives in R's record, with the inode numbers of a and b (fd_pair) by which a
 * joining holder finds them in a live holder.  The sockets belong to R's holder processes:
 * bus1py/fds.py binds them (SO_PASSCRED set on the inbox before the bind) and registers
 * them here with the credentials allowed to post; a fork child drops them (it takes them
 * again at its first use of R).  The kernel keeps descriptors queued in them valid
 * whatever becomes of their sender, and closes them when the last holder closes them.
 *
 * Why a pair: a datagram socket queues at most net.unix.max_dgram_qlen + 1 datagrams from
 * others, but the kernel skips that limit for a socket's own connected peer, so b queues
 * what a sends it up to a's send buffer (set to the most the kernel allows).  Senders post
 * to the inbox; a move forwards datagrams from the inbox's head into b.  Only holders hold
 * a, so nobody else can post to b.
 *
 * Invariants:
 *   - The quota is R's counter n_fds (queue.h): charged at the stage of a message to R,
 *     released where its copy leaves R's queue.  A datagram is posted only for a charged
 *     copy, so the store holds at most quota_fds datagrams of queued messages, plus
 *     orphans and duplicates; a post that finds the store full (the pair's bytes spent)
 *     fails with EDQUOT all the same.
 *   - A post reaches the inbox or the send fails: a live receiver whose store is not bound
 *     (no holder could set it up) fails the send with ENOLINK, nothing stamped; only a
 *     receiver no longer connected is skipped (its copy is dropped anyway).  An inbox found
 *     full is moved by the sender itself when its process holds R's store, else the post
 *     fails with EAGAIN naming the destination: tx.c lets go of the sender's lock, wakes
 *     R's holder processes' movers (b1_fds_wait_room) and stamps again; past
 *     B1_FDS_WAIT_MS it fails with EDQUOT.
 *   - A holder process's mover socket on a bus is a path in the bus's mover directory
 *     (B1_FDS_MOVERS + the bus's nonce, which this process's view copied at attach; made
 *     and checked by bus1py/fds.py as a store's directory), named by the process's pid and
 *     pidfs inode, SO_PASSCRED set before its bind: only the bus's users reach it, and a
 *     request is acted on only for a store that lets its sender post (b1_fds_wakeup).
 *   - A datagram is valid when it is one header long, carries a header whose counts agree,
 *     exactly the descriptors the header counts and, in the inbox, SCM_CREDENTIALS of a
 *     user the store allows (the registered owner, its group for a group bus, root); b
 *     receives only from a.  Anything else is never matched nor forwarded and is popped
 *     (its descriptors closed by the kernel) when it reaches its socket's head.  A walk
 *     steps by each datagram's real length (SO_PEEK_OFF is in bytes).
 *   - A datagram names its message -- (sender id, stamp, transaction seq, destination
 *     index) -- and which of its descriptors it carries (first, count, of total); a
 *     message of more than B1_SCM_MAX descriptors travels in several.
 *   - A move (R's mover lock held) peeks the inbox's head, forwards a valid one on a with
 *     copies of its descriptors, THEN pops it.  Killed before the forward nothing is lost;
 *     killed between, b holds a duplicate: a take uses the first copy of each part and the
 *     other is an orphan.  So a move is finished by whoever moves next.
 *   - The mover lock (R's record, a robust mutex; fdio.c) is a leaf: held by every reader and
 *     popper of R's inbox (movers, takes, sweeps), since SO_PEEK_OFF is one per socket
 *     shared by every holder and a pop shifts it; nothing else is locked under it, and
 *     this process's table of stores is never locked while one is held.
 *   - A sender posts under its own lock, with the stamp computed and not yet stored (tx.c).
 *   - A receiver takes a message's descriptors in the lock hold that takes its entry
 *     (recv.c), before the entry leaves the queue, by peeking: it finds the message's
 *     datagrams in b or the inbox and installs copies of their descriptors, leaving the
 *     datagrams in the store.  Nothing of another message leaves the store in a receive,
 *     so a receiver killed anywhere loses nothing but what it claimed.
 *   - A take installs all of a message's descriptors found, or none: a copy the kernel
 *     cannot install (MSG_CTRUNC) fails the take with -EMFILE, the copies installed
 *     closed, the message queued as it was.  A message whose datagrams are missing (its
 *     store closed by its last holder before the take) fails it with -ENOLINK.
 *   - A datagram is removed only from the head of its socket and only when it is invalid,
 *     moved, or its message is no longer in the queue (an orphan).  Every receive that met
 *     descriptors (at the end of its hold) and every sweep pops the orphans at the heads,
 *     and moves the inbox into b once it holds B1_FDS_MOVE_AT datagrams.  A disconnected
 *     peer's store is emptied by the holder that lets go of it (b1_fds_drain) and its path
 *     unlinked by whoever finishes the disconnect (b1_fds_unlink).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include "fds.h"
#include "proc.h"

#define WALK_MAX 4096   /* datagrams one take looks at in one socket, at most */
#define MOVE_MAX 64     /* datagrams one move forwards, at most */
#define B1_FDS_MOVE_AT 4 /* a sweep moves an inbox holding this many datagrams */

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

static void nonce_of(const struct b1_peer *p, uint64_t nonce[2]) {
    nonce[0] = __atomic_load_n(&p->fd_nonce[0], __ATOMIC_RELAXED);
    nonce[1] = __atomic_load_n(&p->fd_nonce[1], __ATOMIC_RELAXED);
}

static socklen_t store_address(const uint64_t nonce[2], struct sockaddr_un *a) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path, sizeof a->sun_path, B1_FDS_DIR "%016llx%016llx/inbox",
                     (unsigned long long)nonce[0], (unsigned long long)nonce[1]);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
}

/* The path of a holder process's mover socket on this bus (bus1py/watch.py binds it): in
 * the bus's mover directory (named by the bus's nonce, as this process's view copied it at
 * attach; made and checked like a store's, so only the bus's users may find, bind in or
 * send to it), named by the process's pid and pidfs inode (its start time without pidfs):
 * no live process has another's name, and a name whose process is gone is stale. */
static socklen_t mover_address(void *base, const struct b1_holder *h, struct sockaddr_un *a) {
    const uint64_t *bus = VIEW(base)->nonce;
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path, sizeof a->sun_path, B1_FDS_MOVERS "%016llx%016llx/%d-%llx",
                     (unsigned long long)bus[0], (unsigned long long)bus[1], (int)h->pid,
                     (unsigned long long)(h->ino ? h->ino : h->start));
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
}

int b1_fds_mover_address(void *base, char *out, uint32_t cap) {
    struct b1_holder me;
    b1_holder_of(b1_pid(), &me);
    if (!me.pid) return -ESRCH;
    struct sockaddr_un a;
    socklen_t len = mover_address(base, &me, &a) - offsetof(struct sockaddr_un, sun_path) - 1;
    if (len > cap) return -ENOSPC;
    memcpy(out, a.sun_path, len);
    return (int)len;
}

int b1_fds_mover_stale(const char *name) {
    int pid, end = 0;
    unsigned long long ident;
    if (sscanf(name, "%d-%llx%n", &pid, &ident, &end) != 2 || name[end] || pid <= 0) return 0;
    struct b1_holder now;
    b1_holder_of(pid, &now);
    /* gone, or its pid now another process's (by pidfs inode); any doubt is life */
    return !now.pid || (now.ino && now.ino != ident);
}

int b1_fds_address(void *base, uint32_t slot, uint64_t id, char *out, uint32_t cap, uint64_t *pair) {
    if (!slot || slot > LIM(base).max_peers) return -EINVAL;
    struct b1_peer *p = PEER(base, slot);
    uint64_t nonce[2];
    nonce_of(p, nonce);
    pair[0] = __atomic_load_n(&p->fd_pair[0], __ATOMIC_RELAXED);
    pair[1] = __atomic_load_n(&p->fd_pair[1], __ATOMIC_RELAXED);
    if (__atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id) return -ESHUTDOWN;
    struct sockaddr_un a;
    socklen_t len = store_address(nonce, &a) - offsetof(struct sockaddr_un, sun_path) - 1;
    if (len > cap) return -ENOSPC;
    memcpy(out, a.sun_path, len);
    return (int)len;
}

void b1_fds_unlink(const uint64_t nonce[2]) {
    struct sockaddr_un a;
    store_address(nonce, &a);
    unlink(a.sun_path);
    *strrchr(a.sun_path, '/') = 0;
    rmdir(a.sun_path); /* fails while a holder binds afresh in it: the holder's own unlink then */
}

/* this process's stores, by nonce (unique per peer, so per bus and mapping alike), each
 * with the mapping and slot it was registered through (valid while it is registered:
 * bus1py/fds.py lets go of it before the unmap); a fork child starts with none
 * (bus1py/fds.py closes their sockets there) and the lock free */
struct store { uint64_t nonce[2]; void *base; uint32_t slot; uint64_t id; struct b1_fds_store s; };
static struct store *stores;
static uint32_t n_stores;
static pthread_mutex_t stores_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t stores_once = PTHREAD_ONCE_INIT;

static void stores_after_fork(void) {
    pthread_mutex_init(&stores_lock, NULL);
    n_stores = 0;
}
static void stores_init(void) { pthread_atfork(NULL, NULL, stores_after_fork); }

static uint64_t inode_of(int fd) {
    struct stat st;
    return fstat(fd, &st) ? 0 : (uint64_t)st.st_ino;
}

int b1_fds_register(void *base, uint32_t slot, uint64_t id, const int32_t *socks, uint32_t n,
                    uint32_t uid, int64_t gid) {
    if (!slot || slot > LIM(base).max_peers) return -EINVAL;
    struct b1_peer *p = PEER(base, slot);
    uint64_t nonce[2];
    nonce_of(p, nonce);
    if (__atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id) return -ESHUTDOWN;
    if ((n && n != B1_FDS_SOCKS) || (n && !socks)) return -EINVAL;
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
            stores[i] = (struct store){.base = base, .slot = slot, .id = id,
                                       .s = {.n = n, .uid = uid, .gid = gid}};
            memcpy(stores[i].nonce, nonce, sizeof nonce);
            memcpy(stores[i].s.socks, socks, n * sizeof *socks);
            /* where a joiner finds the pair in a live holder (bus1py/fdpaths.py) */
            __atomic_store_n(&p->fd_pair[0], inode_of(socks[B1_FDS_A]), __ATOMIC_RELAXED);
            __atomic_store_n(&p->fd_pair[1], inode_of(socks[B1_FDS_B]), __ATOMIC_RELAXED);
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

/* ---- moving: what a process is asked for ---- */

/* A request is one store's nonce, from a user that store lets post (SO_PASSCRED on the
 * mover socket: a request without credentials is ignored as well). */
int b1_fds_wakeup(int sock) {
    uint64_t nonce[2];
    int moved = 0;
    for (int i = 0; i < 64; i++) {
        union {
            char buf[CMSG_SPACE(sizeof(struct ucred))];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = {nonce, sizeof nonce};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                            .msg_controllen = sizeof ctl.buf};
        ssize_t got = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
        if (got < 0) return errno == EAGAIN ? moved : -errno;
        struct ucred cr;
        int creds = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
                c->cmsg_len == CMSG_LEN(sizeof cr)) {
                memcpy(&cr, CMSG_DATA(c), sizeof cr);
                creds = 1;
            }
        if (got != sizeof nonce || !creds) continue;
        /* the store stays registered, its mapping with it, while stores_lock is held */
        pthread_mutex_lock(&stores_lock);
        for (uint32_t j = 0; j < n_stores; j++) {
            struct store *s = &stores[j];
            if (memcmp(s->nonce, nonce, sizeof nonce)) continue;
            if (!b1_fd_trusted(&s->s, &cr)) break;
            struct b1_peer *p = PEER(s->base, s->slot);
            if (__atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != s->id) break;
            b1_fds_mover_lock(p);
            int r;
            while ((r = b1_fds_move_locked(&s->s, MOVE_MAX)) > 0) moved += r;
            b1_fds_mover_unlock(p);
            break;
        }
        pthread_mutex_unlock(&stores_lock);
    }
    return moved;
}

/* ---- posting ---- */

int b1_fds_sender(void) {
    int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    return s < 0 ? -errno : s;
}

/* This process moves R's inbox itself when it holds R's store: 1 when room was made, 0
 * when it holds no store, -1 when it does and no room can be made (b full, or no numbers
 * for the copies): waiting for another mover would not help. */
static int move_mine(void *base, uint32_t slot, uint64_t id) {
    struct b1_fds_store st;
    if (!b1_fds_store(base, slot, id, &st)) return 0;
    struct b1_peer *p = PEER(base, slot);
    b1_fds_mover_lock(p);
    int r = b1_fds_move_locked(&st, MOVE_MAX);
    b1_fds_mover_unlock(p);
    return r > 0 ? 1 : -1;
}

int b1_fds_post(void *base, int sock, const struct b1_tx *tx, uint32_t *full) {
    uint32_t n = n_staged;
    for (uint32_t i = 0; i < tx->n; i++) {
        const struct b1_dest *d = &tx->dests[i];
        if (d->state == B1_DEST_DROPPED) continue;
        struct b1_peer *r = PEER(base, d->peer_slot);
        uint64_t nonce[2];
        nonce_of(r, nonce);
        if (__atomic_load_n(&r->id, __ATOMIC_ACQUIRE) != d->peer_id) continue; /* gone: dropped */
        struct sockaddr_un to;
        socklen_t tolen = store_address(nonce, &to);
        for (uint32_t first = 0; first < n; first += B1_SCM_MAX) {
            struct b1_fd_dgram h = {tx->sender_id, tx->ts, tx->seq, i, n, first,
                                 n - first < B1_SCM_MAX ? n - first : B1_SCM_MAX};
            int e, mine = 1;
            while ((e = b1_fd_send(sock, &to, tolen, &h, staged + first)) == -EAGAIN &&
                   (mine = move_mine(base, d->peer_slot, d->peer_id)) > 0)
                ;
            if (e == -EAGAIN && mine < 0) return -EDQUOT;
            if (e == -ECONNREFUSED || e == -ENOENT || e == -ENOTDIR) {
                /* no store: dropped if the receiver is gone, else the send fails */
                if (__atomic_load_n(&r->id, __ATOMIC_ACQUIRE) != d->peer_id ||
                    __atomic_load_n(&r->state, __ATOMIC_ACQUIRE) != B1_PEER_ACTIVE)
                    break;
                return -ENOLINK;
            }
            if (e == -EAGAIN) { /* full, and not this process's to move */
                *full = i;
                return -EAGAIN;
            }
            if (e == -ETOOMANYREFS) return -EDQUOT; /* the user's descriptors in flight at their limit */
            if (e) return e;
        }
    }
    return 0;
}

static int64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int b1_fds_wait_room(void *base, uint32_t slot, uint64_t id, int64_t deadline_ms) {
    struct b1_peer *p = PEER(base, slot);
    uint64_t nonce[2];
    struct b1_holder holders[B1_PEER_PIDS];
    nonce_of(p, nonce);
    for (int i = 0; i < B1_PEER_PIDS; i++) {
        holders[i].pid = __atomic_load_n(&p->holders[i].pid, __ATOMIC_RELAXED);
        holders[i].ino = __atomic_load_n(&p->holders[i].ino, __ATOMIC_RELAXED);
        holders[i].start = __atomic_load_n(&p->holders[i].start, __ATOMIC_RELAXED);
    }
    if (__atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id) return 0; /* gone: the post skips it */
    int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) return -errno;
    struct sockaddr_un to;
    socklen_t tolen = store_address(nonce, &to);
    int r = -ETIMEDOUT;
    if (connect(s, (struct sockaddr *)&to, tolen)) { /* gone meanwhile: the post will say */
        close(s);
        if (now_ms() >= deadline_ms) return -EDQUOT;
        poll(NULL, 0, 1);
        return 0;
    }
    while (r == -ETIMEDOUT) {
        for (int i = 0; i < B1_PEER_PIDS; i++) { /* each holder's mover: a lost wake is a retry */
            if (holders[i].pid <= 0) continue;
            struct sockaddr_un m;
            socklen_t mlen = mover_address(base, &holders[i], &m);
            sendto(s, nonce, sizeof nonce, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&m, mlen);
        }
        int64_t left = deadline_ms - now_ms();
        if (left <= 0) break;
        /* writable once the inbox has room; a wake that went nowhere is sent again */
        struct pollfd pfd = {s, POLLOUT, 0};
        int n = poll(&pfd, 1, left < 50 ? (int)left : 50);
        if (n > 0) r = 0;
        else if (n < 0 && errno != EINTR) r = -errno;
    }
    close(s);
    return r == -ETIMEDOUT ? -EDQUOT : r;
}

int64_t b1_fds_deadline(void) { return now_ms() + B1_FDS_WAIT_MS; }

/* ---- taking ---- */

/* Is h's message still in p's queue, as a block or committed (p's lock held)? */
static int queued_locked(void *base, struct b1_peer *p, const struct b1_fd_dgram *h) {
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

/* Pop the invalid datagrams and the orphans at the head of socket k (p's lock held, and
 * its mover lock for the inbox; p NULL: every datagram, the peer being gone). */
static void trim_locked(void *base, struct b1_peer *p, const struct b1_fds_store *st, int k) {
    struct b1_fd_dgram h;
    uint32_t len;
    for (uint32_t i = 0; i < WALK_MAX; i++) {
        int ok = b1_fd_read(st, k, B1_AT_HEAD, &h, &len, NULL, NULL);
        if (ok < 0) return;
        if (ok && p && queued_locked(base, p, &h)) return;
        if (b1_fd_read(st, k, B1_POP, &h, &len, NULL, NULL) < 0) return;
    }
}

int b1_fds_take_locked(struct b1_peer *p, const struct b1_fds_store *st, const struct b1_entry *e,
                       uint32_t n, int32_t *out) {
    static const int order[] = {B1_FDS_B, B1_FDS_INBOX}; /* b holds the older ones */
    int32_t fds[B1_SCM_MAX];
    uint8_t have[(B1_MAX_FDS + B1_SCM_MAX - 1) / B1_SCM_MAX] = {0};
    struct b1_fd_dgram h, again;
    uint32_t got = 0, nfds, len;
    int r = 0;
    for (uint32_t i = 0; i < n; i++) out[i] = -1;
    b1_fds_mover_lock(p);
    for (int s = 0; s < 2 && got < n && !r; s++) {
        uint32_t off = 0;
        for (int i = 0; i < WALK_MAX && got < n && off <= INT32_MAX; i++, off += len) {
            int ok = b1_fd_read(st, order[s], (int)off, &h, &len, NULL, NULL);
            if (ok < 0) break;
            if (!ok || h.sender != e->sender || h.ts != e->ts || h.seq != e->seq || h.idx != e->idx ||
                h.total != n || have[h.first / B1_SCM_MAX])
                continue; /* another's, invalid, or a duplicate a killed move left */
            ok = b1_fd_read(st, order[s], (int)off, &again, &len, fds, &nfds);
            if (ok == -EMFILE) { /* all or none: the message stays queued */
                r = ok;
                break;
            }
            if (ok <= 0) continue;
            if (memcmp(&again, &h, sizeof h)) { /* cannot happen: only the mover lock's holder pops */
                b1_fd_close(fds, nfds);
                continue;
            }
            have[h.first / B1_SCM_MAX] = 1;
            memcpy(out + h.first, fds, nfds * sizeof *fds);
            got += nfds;
        }
    }
    b1_fds_mover_unlock(p);
    if (!r && got < n) r = -ENOLINK; /* some are missing: the store was lost with its last holder */
    if (r) {
        for (uint32_t j = 0; j < n; j++)
            if (out[j] >= 0) close(out[j]);
        return r;
    }
    return (int)got;
}

void b1_fds_sweep_locked(void *base, struct b1_peer *p, const struct b1_fds_store *st) {
    struct b1_fd_dgram h;
    uint32_t len;
    b1_fds_mover_lock(p);
    trim_locked(base, p, st, B1_FDS_B);
    trim_locked(base, p, st, B1_FDS_INBOX);
    /* an inbox filling (senders faster than this receiver): into b, before it refuses them */
    if (b1_fd_read(st, B1_FDS_INBOX, (int)(B1_FDS_MOVE_AT * sizeof h), &h, &len, NULL, NULL) >= 0)
        while (b1_fds_move_locked(st, MOVE_MAX) > 0)
            ;
    b1_fds_mover_unlock(p);
}

void b1_fds_drain(const int32_t *socks, uint32_t n) {
    struct b1_fds_store st = {.n = 0};
    if (n != B1_FDS_SOCKS) return;
    memcpy(st.socks, socks, sizeof st.socks);
    trim_locked(NULL, NULL, &st, B1_FDS_B);
    trim_locked(NULL, NULL, &st, B1_FDS_INBOX);
}
