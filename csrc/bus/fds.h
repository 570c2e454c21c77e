/*
 * fds.h -- file descriptors carried by messages (fds.c): staged per thread for the next
 * send, posted to each receiving peer's store under the sender's lock at the stamp, and
 * taken from the store under the receiver's lock in the hold that takes the message.
 *
 * Lock rules: b1_fds_post runs under the sender's lock, b1_fds_take_locked and
 * b1_fds_sweep_locked under the receiver's; none takes a lock.
 */
#ifndef BUS1PY_FDS_H
#define BUS1PY_FDS_H
#include "layout.h"

/* how many descriptors this thread's next send carries (b1_send_fds) */
uint32_t b1_fds_staged(void);
void b1_fds_unstage(void);
/* this process's descriptor store of peer (slot, id), or -1 when it has none */
int b1_fds_store(void *base, uint32_t slot, uint64_t id);
/* a socket to post with (-errno): opened before the sender's lock is taken */
int b1_fds_sender(void);
/* Under the sender's lock, tx->ts the stamp about to be stored: one datagram (or more,
 * past the kernel's 253 a datagram) per live destination to its store.  0, or -EDQUOT
 * (a store full, or the user's descriptors in flight at their limit), -EBADF. */
int b1_fds_post(void *base, int sock, const struct b1_tx *tx);
/* Under p's lock, e the data entry being taken, n its descriptors: move them from the
 * store into out[0..n) (out NULL: close them).  Returns how many were found. */
uint32_t b1_fds_take_locked(void *base, struct b1_peer *p, int store, const struct b1_entry *e,
                            uint32_t n, int32_t *out);
/* Under p's lock: close every datagram in the store whose message is no longer queued. */
void b1_fds_sweep_locked(void *base, struct b1_peer *p, int store);

#endif
