/*
 * fdio.c -- a descriptor store's datagrams (fds.c has the store's invariants): one
 * written, one read (peeked at an offset or at the head, or popped) and checked, and the
 * move of the inbox's head into the pair under the store's mover lock.
 *
 * Invariants:
 *   - A read installs copies of a datagram's descriptors only when asked (fds), and
 *     leaves none installed unless the datagram is valid and all of them were installed.
 *   - A move forwards a valid head on a, THEN pops it: killed between, b holds a
 *     duplicate; an invalid head is popped, never forwarded.
 *   - The mover lock is a leaf: nothing here takes another lock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "fdio.h"

/* ---- the mover lock ---- */

void b1_fds_mover_lock(struct b1_peer *p) {
    /* a mover killed under it left at most a duplicate in b (see the invariants) */
    if (pthread_mutex_lock(&p->fd_mover) == EOWNERDEAD) pthread_mutex_consistent(&p->fd_mover);
}

void b1_fds_mover_unlock(struct b1_peer *p) { pthread_mutex_unlock(&p->fd_mover); }

/* one datagram on sock, to `to` (NULL: its connected peer) */
int b1_fd_send(int sock, const struct sockaddr_un *to, socklen_t tolen,
                      const struct b1_fd_dgram *h, const int32_t *fds) {
    union {
        char buf[CMSG_SPACE(B1_SCM_MAX * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {(void *)h, sizeof *h};
    struct msghdr mh = {.msg_name = (void *)to, .msg_namelen = to ? tolen : 0, .msg_iov = &iov, .msg_iovlen = 1};
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

void b1_fd_close(const int32_t *fds, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) close(fds[i]);
}

int b1_fd_trusted(const struct b1_fds_store *st, const struct ucred *cr) {
    return cr->uid == 0 || cr->uid == st->uid || st->gid == B1_FDS_ANYONE ||
           (st->gid >= 0 && cr->gid == (gid_t)st->gid);
}

/* The datagram at byte offset `at` of socket k of the store (peeked, left in place), its
 * head (B1_AT_HEAD) or the head taken out (B1_POP), into *h; *len its length from there.  With
 * fds, copies of its descriptors are installed there, else none.  Returns 1 when it is
 * valid (see the invariants; with fds, *nfds of them), 0 when it is not (no copy left
 * installed), -errno (-EAGAIN: no such datagram; -EMFILE: with fds, not all could be
 * installed, and those that were are closed). */
int b1_fd_read(const struct b1_fds_store *st, int k, int at, struct b1_fd_dgram *h, uint32_t *len,
                      int32_t *fds, uint32_t *nfds) {
    union {
        char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(B1_SCM_MAX * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    int sock = st->socks[k];
    memset(h, 0, sizeof *h);
    struct iovec iov = {h, sizeof *h};
    /* without fds the room holds the inbox's credentials only (b has none): no descriptor
     * is installed */
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                        .msg_controllen = fds ? sizeof ctl.buf : k == B1_FDS_B ? 0 : CMSG_SPACE(sizeof(struct ucred))};
    int flags = MSG_DONTWAIT | MSG_CMSG_CLOEXEC | MSG_TRUNC;
    if (at != B1_POP) {
        int off = at; /* B1_AT_HEAD: -1, peeking off */
        if (setsockopt(sock, SOL_SOCKET, SO_PEEK_OFF, &off, sizeof off)) return -errno;
        flags |= MSG_PEEK;
    }
    ssize_t got = recvmsg(sock, &mh, flags);
    if (got < 0) return -errno;
    *len = (uint32_t)got;
    uint32_t n = 0, dropped = 0;
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
                if (fds && n < B1_SCM_MAX) fds[n++] = in[j];
                else if (fds) close(in[j]), dropped++;
            }
        }
    }
    /* the room holds B1_SCM_MAX: a truncation is a copy the kernel could not install -- no
     * number free (EMFILE), or one a security module refused, which reads the same */
    if (fds && (mh.msg_flags & MSG_CTRUNC)) {
        b1_fd_close(fds, n);
        return at == B1_POP ? 0 : -EMFILE;
    }
    /* b receives only from a, which only holders hold: its datagrams were checked at the move */
    int trusted = k == B1_FDS_B || (creds && b1_fd_trusted(st, &cr));
    int ok = got == (ssize_t)sizeof *h && trusted &&
             h->total && h->total <= B1_MAX_FDS && h->count && h->count <= B1_SCM_MAX && h->first % B1_SCM_MAX == 0 &&
             h->first < h->total && h->count <= h->total - h->first && (!fds || (h->count == n && !dropped));
    if (fds && !ok) {
        b1_fd_close(fds, n);
        n = 0;
    }
    if (nfds) *nfds = n;
    return ok;
}

/* ---- moving: the inbox's head into the pair ---- */

/* Move up to max datagrams from the inbox's head into b (p's mover lock held): the number
 * moved or popped as invalid, or -errno when none was (-EAGAIN: b is full, or the inbox
 * empty; -EMFILE: no numbers for the copies). */
int b1_fds_move_locked(const struct b1_fds_store *st, uint32_t max) {
    int32_t fds[B1_SCM_MAX];
    struct b1_fd_dgram h;
    uint32_t len, nfds, moved = 0;
    int r = -EAGAIN;
    while (moved < max) {
        r = b1_fd_read(st, B1_FDS_INBOX, B1_AT_HEAD, &h, &len, fds, &nfds);
        if (r < 0) break;
        if (r) {
            r = b1_fd_send(st->socks[B1_FDS_A], NULL, 0, &h, fds);
            b1_fd_close(fds, nfds);
            if (r) break;
        }
        if ((r = b1_fd_read(st, B1_FDS_INBOX, B1_POP, &h, &len, NULL, NULL)) < 0) break;
        moved++;
    }
    return moved ? (int)moved : (r < 0 ? r : -EAGAIN);
}
