/* holdback.c - the cold half of holdback.h: setup, teardown and the key set's growth and
 * deletion (backward shift, so probes need no tombstones). Invariants: holdback.h's. */
#include "holdback.h"

#include <string.h>

int holdback_init(struct holdback *h, int n)
{
    memset(h, 0, sizeof *h);
    h->head = calloc(2 * (size_t)n, sizeof *h->head);
    h->tail = h->head + n;
    return h->head ? 0 : -1;
}

void holdback_fini(struct holdback *h, int n)
{
    for (int s = 0; h->head && s < n; s++)
        for (struct hb_node *r = h->head[s], *nx; r; r = nx) {
            nx = r->next;
            free(r);
        }
    free(h->head);
    free(h->keys);
}

int holdback_add_key(struct holdback *h, uint64_t key)
{
    if (2 * (h->held + 1) > h->cap) {
        size_t old = h->cap, cap = old ? 2 * old : 16;
        uint64_t *now = calloc(cap, sizeof *now);
        if (!now)
            return -1;
        for (size_t i = 0; i < old; i++)
            if (h->keys[i])
                now[holdback_slot(now, cap, h->keys[i])] = h->keys[i];
        free(h->keys);
        h->keys = now;
        h->cap = cap;
    }
    h->keys[holdback_slot(h->keys, h->cap, key)] = key;
    h->held++;
    return 0;
}

void holdback_del_key(struct holdback *h, uint64_t key)
{
    size_t mask = h->cap - 1, i = holdback_slot(h->keys, h->cap, key), j = i;
    while (h->keys[j = (j + 1) & mask])
        /* the key at j may move to i unless its home lies in the cyclic range (i, j] */
        if (((j - holdback_home(h->cap, h->keys[j])) & mask) >= ((j - i) & mask)) {
            h->keys[i] = h->keys[j];
            i = j;
        }
    h->keys[i] = 0;
    h->held--;
}
