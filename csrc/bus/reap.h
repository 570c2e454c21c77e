/*
 * reap.h -- recovery from dead processes (reap.c): what recv.c needs beyond b1_gc.
 */
#ifndef BUS1PY_REAP_H
#define BUS1PY_REAP_H
#include "layout.h"

/* complete or remove the blocks of dead stagers in one queue; takes its lock */
int b1_queue_reap(void *base, uint32_t slot);

#endif
