/*
 * tx.h -- the transaction steps (tx.c): prepare, stage, stamp, sync, commit, abort.
 * b1_tx_stamp and b1_tx_sync are public as they are (bus1.h); the steps that can drop a
 * copy take a b1_notices for the NODE_RELEASE notices its carried handles owe (handle.h),
 * which their caller sends: send.c for the public steps, node.c for its own transactions.
 *
 * Lock rules: each step takes one peer's lock at a time and releases it before returning.
 */
#ifndef BUS1PY_TX_H
#define BUS1PY_TX_H
#include "handle.h"

int b1_tx_prepare_raw(void *base, struct b1_tx *tx, uint32_t type, const char *payload,
                      uint32_t len, uint32_t n_handles);
int b1_tx_stage_nt(void *base, struct b1_tx *tx, uint32_t i, struct b1_notices *nt);
int b1_tx_stamp_as(void *base, struct b1_tx *tx, int allow_disconnecting,
                   int (*check)(void *, struct b1_tx *, void *), void *arg);
int b1_tx_commit_nt(void *base, struct b1_tx *tx, uint32_t i, struct b1_notices *nt);
void b1_tx_abort_nt(void *base, struct b1_tx *tx, struct b1_notices *nt);
/* stage, stamp, sync and commit a prepared transaction (aborted if it cannot stamp) */
int b1_tx_run(void *base, struct b1_tx *tx, struct b1_notices *nt);
/* stage every destination that can take its copy (the others' -errno in errors[i]), then
 * run the staged ones as one transaction; tx->msg 0 when none could be staged */
int b1_tx_run_partial(void *base, struct b1_tx *tx, int32_t *errors, struct b1_notices *nt);
/* run count prepared transactions to the same destinations in order, one lock hold per
 * step and destination for all: how many ran (a prefix, the rest aborted), *err the
 * first failure */
uint32_t b1_tx_run_batch(void *base, struct b1_tx *tx, uint32_t count, int *err,
                         struct b1_notices *nt);

#endif
