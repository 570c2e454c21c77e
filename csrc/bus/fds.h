/*
 * fds.h -- file descriptors carried by messages (fds.c): staged per thread for the next
 * send, posted to each receiving peer's store under the sender's lock at the stamp, and
 * taken from the store under the receiver's lock in the hold that takes the message.
 *
 * Lock rules: b1_fds_post runs under the sender's lock, b1_fds_take_locked and
 * b1_fds_sweep_locked under the receiver's; b1_fds_wait_room, b1_fds_unlink and
 * b1_fds_drain (a gone peer's store) under none.  The only lock taken here is a store's
 * mover lock (fdio.c), a leaf: nothing else is locked under it.
 */
#ifndef BUS1PY_FDS_H
#define BUS1PY_FDS_H
#include "fdio.h"

#define B1_FDS_DIR "/dev/shm/.bus1py-fds-" /* a store's directory: this, then its nonce */
#define B1_FDS_MOVERS "/dev/shm/.bus1py-movers-" /* a bus's mover sockets: this, its nonce, then
                                                   "/<pid>-<pidfs inode>" per process */
#define B1_FDS_WAIT_MS 2000 /* how long a send waits for room in a full inbox */

/* how many descriptors this thread's next send carries (b1_send_fds) */
uint32_t b1_fds_staged(void);
/* this process's store of peer (slot, id) into *out: how many sockets, 0 when it has none */
uint32_t b1_fds_store(void *base, uint32_t slot, uint64_t id, struct b1_fds_store *out);
/* a socket to post with (-errno): opened before the sender's lock is taken */
int b1_fds_sender(void);
/* Under the sender's lock, tx->ts the stamp about to be stored: one datagram (or more,
 * past the kernel's 253 a datagram) per live destination into its store's inbox, moved by
 * this process when it is full and this process holds the store.  0, or -EAGAIN (dest
 * *full's inbox full: not stamped; b1_fds_wait_room unlocked, then stamp again), -EDQUOT
 * (the store full, or the user's descriptors in flight at their limit), -ENOLINK (a
 * connected receiver's store not bound), -EACCES, -EBADF. */
int b1_fds_post(void *base, int sock, const struct b1_tx *tx, uint32_t *full);
/* Under no lock: wake the movers of peer (slot, id)'s holder processes and wait until its
 * inbox has room (0), or -EDQUOT past deadline_ms (b1_fds_deadline: B1_FDS_WAIT_MS from
 * the first wait of a send). */
int b1_fds_wait_room(void *base, uint32_t slot, uint64_t id, int64_t deadline_ms);
int64_t b1_fds_deadline(void);
/* Under the receiver's lock, e the data entry about to be taken (still in the queue), n
 * its descriptors: copies of them from the store into out[0..n).  Returns n, -EMFILE when
 * the process has no numbers for them all, or -ENOLINK when some are not in the store (it
 * was closed by its last holder): none installed then.  Pops nothing: the caller sweeps
 * once the entry is out of the queue. */
int b1_fds_take_locked(struct b1_peer *p, const struct b1_fds_store *st, const struct b1_entry *e,
                       uint32_t n, int32_t *out);
/* Under p's lock: pop the invalid datagrams and the orphans at the heads of the store's
 * sockets; an inbox filling is moved into the pair. */
void b1_fds_sweep_locked(void *base, struct b1_peer *p, const struct b1_fds_store *st);
/* The store of a peer that disconnected: its path unlinked, its directory removed (by
 * whoever finishes the disconnect; the nonce copied from the record before). */
void b1_fds_unlink(const uint64_t nonce[2]);

#endif
