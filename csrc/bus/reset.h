/*
 * reset.h -- bus1's PEER_RESET (reset.c): the peer's queue flushed, its nodes destroyed
 * and its handles released, the peer staying connected.
 *
 * Lock rules: one peer lock at a time, never held across the destruction or the release.
 */
#ifndef BUS1PY_RESET_H
#define BUS1PY_RESET_H
#include "layout.h"

/* finish every reset whose resetter died (b1_gc); returns how many */
uint32_t b1_peer_resume_resets(void *base);

#endif
