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
/* for fsck, the table's lock held: does USED slot i pass its own checks (length, no NUL,
 * hash)?  And where does a lookup of slot i's (sound) name land: i itself, another slot
 * (the name twice), or UINT32_MAX (unreachable from its home slot)? */
int b1_name_sound(void *base, uint32_t i);
uint32_t b1_name_find_locked(void *base, uint32_t i);

#endif
