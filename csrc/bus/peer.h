/*
 * peer.h -- a peer's life (peer.c): what reap.c needs beyond the public calls of bus1.h.
 */
#ifndef BUS1PY_PEER_H
#define BUS1PY_PEER_H
#include "layout.h"

void b1_peer_reclaim_all(void *base);
void b1_peer_carve_finish(void *base, uint32_t slot);
uint32_t b1_peer_resume_disconnects(void *base);

#endif
