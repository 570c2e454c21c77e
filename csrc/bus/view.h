/*
 * view.h -- a bus's layout as this process validated it (view.c): the offsets and limits
 * read once from the header, at attach or creation, and checked; struct b1_view and the
 * accessors that read it are in layout.h.  The lowest layer with proc.h: it takes no lock
 * and knows nothing of the bus but its header.
 */
#ifndef BUS1PY_VIEW_H
#define BUS1PY_VIEW_H
#include "layout.h"

/* slots of the node, handle and entry tables at most: a handle id keeps 24 bits of index
 * (B1_HANDLE_INDEX_MASK is reserved), and the other two share the bound */
#define B1_MAX_SLOTS ((uint32_t)B1_HANDLE_INDEX_MASK - 1)

/* names at most: the table (twice as many slots, ~290 bytes each) stays under 40 MiB */
#define B1_MAX_NAMES 65536u

int b1_limits_valid(const struct b1_limits *l);
/* the tables' offsets (peers, nodes, handles, entries, pool, names) and the segment's size */
void b1_layout_offsets(const struct b1_limits *l, uint64_t off[7]);

#endif
