/*
 * fdio.h -- a descriptor store's datagrams and its mover lock (fdio.c; the store's rules
 * are fds.c's).
 *
 * Lock rules: b1_fds_mover_lock is a leaf, taken with or without a peer's lock; every
 * reader and popper of a store's inbox holds it (b1_fds_move_locked too).
 */
#ifndef BUS1PY_FDIO_H
#define BUS1PY_FDIO_H
#include <sys/socket.h>
#include <sys/un.h>
#include "layout.h"

#define B1_SCM_MAX 253 /* the kernel's SCM_MAX_FD: descriptors one datagram carries */
#define B1_FDS_SOCKS 3 /* sockets of a store: */
enum { B1_FDS_INBOX, B1_FDS_A, B1_FDS_B }; /* the inbox, the pair's a and b */
#define B1_AT_HEAD -1 /* b1_fd_read: peek the socket's head */
#define B1_POP -2     /* b1_fd_read: take the socket's head out (its descriptors closed by the kernel) */

/* this process's sockets of one store, and who may post to it: the credentials a datagram
 * must carry (uid, or gid when >= 0, anyone's for B1_FDS_ANYONE; root always) */
#define B1_FDS_ANYONE (-2)
struct b1_fds_store {
    uint32_t n, uid;
    int64_t gid;
    int socks[B1_FDS_SOCKS];
};

/* a datagram: its message (sender id, stamp, seq, destination index) and which of its
 * descriptors it carries (first, count, of total) */
struct b1_fd_dgram {
    uint64_t sender, ts, seq;
    uint32_t idx, total, first, count;
};

void b1_fds_mover_lock(struct b1_peer *p);
void b1_fds_mover_unlock(struct b1_peer *p);
/* one datagram on sock with h->count of fds, to `to` (NULL: its connected peer): 0 or -errno */
int b1_fd_send(int sock, const struct sockaddr_un *to, socklen_t tolen, const struct b1_fd_dgram *h,
               const int32_t *fds);
/* The datagram at byte offset `at` of socket k of the store (peeked, left in place), its
 * head (B1_AT_HEAD) or the head taken out (B1_POP), into *h; *len its length.  With fds
 * (room for B1_SCM_MAX), copies of its descriptors are installed there.  1 valid (with fds,
 * *nfds of them), 0 not (no copy left installed), -errno (-EAGAIN: none; -EMFILE: not all
 * copies could be installed, none left). */
int b1_fd_read(const struct b1_fds_store *st, int k, int at, struct b1_fd_dgram *h, uint32_t *len,
               int32_t *fds, uint32_t *nfds);
void b1_fd_close(const int32_t *fds, uint32_t n);
struct ucred;
/* may the sender of credentials cr post to (or ask a move of) the store? */
int b1_fd_trusted(const struct b1_fds_store *st, const struct ucred *cr);
/* Move up to max datagrams from the inbox's head into b (the mover lock held): how many
 * were moved or popped as invalid, or -errno when none (-EAGAIN: b full or the inbox
 * empty; -EMFILE: no numbers for the copies). */
int b1_fds_move_locked(const struct b1_fds_store *st, uint32_t max);

#endif
