/* The streamed walk's shared parts (stream.c, chains.c): a table from an origin's key
 * (its slot and seq) to two int32 values, and a process's current batch.
 *
 * Invariants: the table is open addressing with linear probing, at most half full, its
 * deletion by backward shift (no tombstones), so a key is found by probing from its home
 * to the first empty place; keys are never -1 (slot and seq are not negative). */
#ifndef BUS1PY_CHECK_TABLE_H
#define BUS1PY_CHECK_TABLE_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SIGNAL_SEND 2
#define DELIVER 3
#define SIGNAL_RECV 4

/* ---- a table from an origin's key to two int32 values (linear probing, deletion by
 * backward shift, so no tombstones) ---- */
struct table {
    int64_t cap, used;      /* cap a power of two; used <= cap / 2 */
    int64_t *key;           /* -1: empty */
    int32_t *a, *b;
};

static inline uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static inline int t_init(struct table *t, int64_t cap)
{
    t->cap = cap;
    t->used = 0;
    t->key = malloc(sizeof(int64_t) * cap);
    t->a = malloc(sizeof(int32_t) * cap);
    t->b = malloc(sizeof(int32_t) * cap);
    if (!t->key || !t->a || !t->b)
        return -1;
    memset(t->key, 0xff, sizeof(int64_t) * cap);
    return 0;
}

static inline void t_free(struct table *t)
{
    free(t->key); free(t->a); free(t->b);
}

/* the slot of key, or of the empty place where it would go */
static inline int64_t t_find(const struct table *t, int64_t key)
{
    int64_t i = (int64_t)(mix((uint64_t)key) & (uint64_t)(t->cap - 1));
    while (t->key[i] != -1 && t->key[i] != key)
        i = (i + 1) & (t->cap - 1);
    return i;
}

static inline int t_grow(struct table *t)
{
    struct table n;
    if (t_init(&n, t->cap * 2))
        return -1;
    for (int64_t i = 0; i < t->cap; i++) {
        if (t->key[i] == -1)
            continue;
        int64_t j = t_find(&n, t->key[i]);
        n.key[j] = t->key[i];
        n.a[j] = t->a[i];
        n.b[j] = t->b[i];
    }
    n.used = t->used;
    t_free(t);
    *t = n;
    return 0;
}

/* the place of a new key (not present), the table grown first when half full; -1 */
static inline int64_t t_insert(struct table *t, int64_t key)
{
    if (2 * (t->used + 1) > t->cap && t_grow(t))
        return -1;
    int64_t i = t_find(t, key);
    t->key[i] = key;
    t->used++;
    return i;
}

static inline void t_delete(struct table *t, int64_t i)
{
    int64_t m = t->cap - 1, j = i;
    t->key[i] = -1;
    t->used--;
    for (;;) {
        j = (j + 1) & m;
        if (t->key[j] == -1)
            return;
        int64_t h = (int64_t)(mix((uint64_t)t->key[j]) & (uint64_t)m);
        /* the entry at j may move to the hole at i when its home h is not in (i, j] */
        if ((i <= j) ? (i < h && h <= j) : (i < h || h <= j))
            continue;
        t->key[i] = t->key[j];
        t->a[i] = t->a[j];
        t->b[i] = t->b[j];
        t->key[j] = -1;
        i = j;
    }
}

static inline int64_t key_of(int32_t slot, int64_t seq) { return ((int64_t)slot << 36) | seq; }

/* ---- a process's current batch ---- */
struct batch {
    int64_t n, off;
    const int8_t *kind, *first;
    const int32_t *sslot, *count;
    const int64_t *sseq;
    const int32_t *claim;       /* n x the claim's columns, or NULL (stream.c) */
};

#endif
