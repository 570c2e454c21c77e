/*
 * fds.h -- file descriptors carried by messages (fds.c): staged per thread for the next
 * send, posted to each receiving peer's store under the sender's lock at the stamp, and
 * taken from the store under the receiver's lock in the hold that takes the message.
 *
 * Lock rules: b1_fds_post runs under the sender's lock, b1_fds_take_locked and
 * b1_fds_sweep_locked under the receiver's; b1_fds_unlink and b1_fds_drain (a gone peer's
 * store) under none; none takes a lock.
 */
#ifndef BUS1PY_FDS_H
#define BUS1PY_FDS_H
#include "layout.h"

#define B1_FD_SOCKS_MAX 64 /* sockets of one store, at most */
#define B1_FDS_DIR "/dev/shm/.bus1py-fds-" /* a store's directory: this, then its nonce */

/* this process's sockets of one store, and who may post to it: the credentials a datagram
 * must carry (uid, or gid when >= 0, anyone's for B1_FDS_ANYONE; root always) */
#define B1_FDS_ANYONE (-2)
struct b1_fds_store {
    uint32_t n, uid;
    int64_t gid;
    int socks[B1_FD_SOCKS_MAX];
};

/* the sockets of a store for a quota of `quota` descriptors (peer.c, at a peer's creation) */
uint32_t b1_fds_socks(uint32_t quota);
/* how many descriptors this thread's next send carries (b1_send_fds) */
uint32_t b1_fds_staged(void);
/* this process's store of peer (slot, id) into *out: how many sockets, 0 when it has none */
uint32_t b1_fds_store(void *base, uint32_t slot, uint64_t id, struct b1_fds_store *out);
/* a socket to post with (-errno): opened before the sender's lock is taken */
int b1_fds_sender(void);
/* Under the sender's lock, tx->ts the stamp about to be stored: one datagram (or more,
 * past the kernel's 253 a datagram) per live destination into a socket of its store with
 * room.  0, or -EDQUOT (a store full, or the user's descriptors in flight at their
 * limit), -ENOLINK (a connected receiver's store not bound), -EACCES, -EBADF. */
int b1_fds_post(void *base, int sock, const struct b1_tx *tx);
/* Under the receiver's lock, e the data entry about to be taken (still in the queue), n
 * its descriptors: copies of them from the store into out[0..n).  Returns n, -EMFILE when
 * the process has no numbers for them all, or -ENOLINK when some are not in the store (it
 * was closed by its last holder): none installed then.  Pops nothing: the caller sweeps
 * once the entry is out of the queue. */
int b1_fds_take_locked(const struct b1_fds_store *st, const struct b1_entry *e, uint32_t n, int32_t *out);
/* Under p's lock: pop the invalid datagrams and the orphans at the heads of the store's sockets. */
void b1_fds_sweep_locked(void *base, struct b1_peer *p, const struct b1_fds_store *st);
/* The store of a peer that disconnected: its paths unlinked, its directory removed (by
 * whoever finishes the disconnect; nonce and n copied from the record before). */
void b1_fds_unlink(const uint64_t nonce[2], uint32_t n);

#endif
