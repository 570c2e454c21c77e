/*
 * names.h -- well-known names for nodes (names.c), the table's lock and its sweep.
 *
 * Lock rules: the name table's own robust mutex (b1_names_lock), never held together with
 * a peer lock: a node's ownership and liveness are read under its owner's lock, released
 * before the table's is taken, and the other way round.
 */
#ifndef BUS1PY_NAMES_H
#define BUS1PY_NAMES_H
#include "layout.h"

/* initialise the table's head at base + off (b1_init, before the view exists) */
int b1_names_init(void *base, uint64_t off);
int b1_names_lock(void *base);
void b1_names_unlock(void *base);
/* remove every name whose node is gone (b1_gc); returns how many */
uint32_t b1_names_sweep(void *base);
/* for fsck, the table's lock held: slot i read once into *c, 1 if it is USED and passes
 * its own checks (length, no NUL, hash; its name then NUL-terminated in *c).  And where
 * does a lookup of that copy's name land: its own slot, another (the name twice), or
 * UINT32_MAX (unreachable from its home slot)? */
int b1_name_read(void *base, uint32_t i, struct b1_name *c);
uint32_t b1_name_find_locked(void *base, const struct b1_name *c);

#endif
