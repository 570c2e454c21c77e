/*
 * alloc.h -- lock-free allocation of table slots, queue entries and pool records
 * (alloc.c).  Lowest layer: it takes no lock, so any layer may call it under a peer's lock.
 */
#ifndef BUS1PY_ALLOC_H
#define BUS1PY_ALLOC_H
#include "layout.h"
#include "proc.h"

uint32_t b1_alloc_index(void *base, b1_stack *stack, _Atomic uint32_t *bump, uint32_t limit,
                        size_t link_offset, size_t elem_size, char *table);
void b1_free_index(b1_stack *stack, uint32_t index, _Atomic uint32_t *link);
uint32_t b1_entry_alloc(void *base);
void b1_entry_free(void *base, uint32_t e);
uint32_t b1_msg_alloc(void *base, uint64_t size, uint32_t len, uint32_t refs);
void b1_msg_put(void *base, uint32_t unit);
void b1_entry_put_msg(void *base, struct b1_entry *e);
/* Walking the carved pool [64, end): is a whole record at off (its header written, its
 * class fitting; *cls, when given, the class as read, once), and where is the next one
 * after a record cut short while carved? */
int b1_pool_record_at(void *base, uint64_t off, uint64_t end, uint32_t *cls);
uint64_t b1_pool_next_record(void *base, uint64_t off, uint64_t end);
int64_t b1_usage_entries(void *base);
int64_t b1_usage_pool(void *base);

/* Mark an entry out of every queue as this process's, in the lock hold that unlinked it
 * (layout.h): from here on only this process, or gc once it is dead, releases it. */
static inline void b1_entry_claim(struct b1_entry *e) {
    b1_owner_t me = b1_self();
    e->left = (uint32_t)me;
    e->right = (uint32_t)(me >> 32);
    e->queue = 0;
    __atomic_store_n(&e->type, (uint16_t)(e->type | B1_ENTRY_RECEIVING), __ATOMIC_RELEASE);
}

#endif
