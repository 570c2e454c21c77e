/* ses.c - the C twin of bus1py/causal/ses.py (Schiper-Eggli-Sandoz: vector clocks plus
 * per-destination vectors, one-event multicast).
 *
 * Wire: `m u16 | t_M u32[n] | m x (pid u16, t u32[n]) | payload`; cost (2, 4n + m(2 + 4n),
 * 1 + m, data). All copies of a send share t_M; the copy to d carries the pairs of
 * sorted(present | Dests), with (d', t_M) for every other d' in Dests and d's own old pair
 * (or none, if d had none).
 * Delivery: m is delivered at i iff it has no pair for i, or its pair (i, c) has c <= t
 * componentwise; delivery max-merges every pair into V and t_M into t, then ticks t[me].
 *
 * Invariants (the Python module's, with its dicts and sets as flat arrays):
 *   - t[n] is the vector clock: it ticks t[me] at every send and every delivery and merges
 *     by max on delivery, never on receipt. V[n*n] row P is the pair (P, V[P]); present[P]
 *     (P != me; npresent of them) says P has a pair, and only those rows are ever sent.
 *   - q[j] holds the held messages from j (whole wires), sorted by t_M[j] ascending, in
 *     a[head .. count); every held message has a pair for us (one without is deliverable).
 *   - After every input no held message is deliverable. Only j's oldest held message can
 *     be; it is parked: parked[j] = the first k where its pair is ahead of t, need[j] its
 *     value there (nparked of them). release() collects every parked j whose need is met
 *     under one t, then works them in ascending id order, each from its oldest message on:
 *     ses.py's rounds exactly (its waiter dicts' order never matters: the ready list is
 *     complete before it is sorted).
 */
#include "machine.h"
#include "vec.h"

#include <stdlib.h>

struct pend { uint8_t *wire; uint32_t len, s, cond; };   /* our pair's vector at wire + cond */
struct queue { struct pend *a; uint32_t head, count, cap; };

struct ses {
    struct sim_machine base;
    uint32_t *t, *V, *need;
    int32_t *parked;            /* -1: j's oldest held message is not parked (none held) */
    uint8_t *present, *mark;    /* mark: scratch, a send's destinations or a wire's pids */
    uint32_t *pos;              /* scratch: a send's record index per process */
    uint8_t *full;              /* scratch: a send's records, n(2 + 4n) bytes */
    struct queue *q;
    size_t npresent, nparked;
    long held;
};

/* the vector at `vec` is <= t componentwise */
static int below(const struct ses *c, const uint8_t *vec)
{
    for (size_t x = 0; x < (size_t)c->base.n; x++)
        if (sim_get32(vec + 4 * x) > c->t[x])
            return 0;
    return 1;
}

static int ses_init(struct sim_machine *m)
{
    struct ses *c = (struct ses *)m;
    size_t n = (size_t)m->n;
    c->t = calloc(4 * n + n * n, sizeof *c->t);     /* t | need | pos | parked | V */
    c->present = calloc(2 * n, 1);                  /* present | mark */
    c->full = malloc(n * (2 + 4 * n));
    c->q = calloc(n, sizeof *c->q);
    if (!c->t || !c->present || !c->full || !c->q)
        return -1;
    c->need = c->t + n;
    c->pos = c->need + n;
    c->parked = (int32_t *)(c->pos + n);
    c->V = (uint32_t *)(c->parked + n);
    c->mark = c->present + n;
    for (size_t j = 0; j < n; j++)
        c->parked[j] = -1;
    return 0;
}

static void ses_fini(struct sim_machine *m)
{
    struct ses *c = (struct ses *)m;
    for (int j = 0; c->q && j < m->n; j++) {
        for (uint32_t i = c->q[j].head; i < c->q[j].count; i++)
            free(c->q[j].a[i].wire);
        free(c->q[j].a);
    }
    free(c->t);
    free(c->present);
    free(c->full);
    free(c->q);
}

/* records d's pair as t (d has one from now on) */
static void remember(struct ses *c, size_t d)
{
    memcpy(c->V + d * (size_t)c->base.n, c->t, (size_t)c->base.n * sizeof *c->t);
    c->npresent += !c->present[d];
    c->present[d] = 1;
}

/* a unicast's one copy, written straight into the wire: its pairs are exactly the present
 * rows (d's own old pair is one of them; if d has none, its t_M record is dropped) */
static int send_one(struct ses *c, size_t d, const uint8_t *payload, size_t len,
                    struct sim_step *step)
{
    size_t n = (size_t)c->base.n, es = 2 + 4 * n, mm = c->npresent, body = 2 + 4 * n + mm * es;
    uint8_t *w = sim_emit(step, (uint32_t)d, (uint32_t)(body + len),
                          (struct sim_cost){2, (uint32_t)(body - 2), (uint32_t)(1 + mm), 1});
    if (!w)
        return -1;
    sim_put16(w, (uint32_t)mm);
    vec_encode(w + 2, c->t, n);
    uint8_t *o = w + 2 + 4 * n;
    for (size_t p = 0; p < n; p++)
        if (c->present[p]) {
            sim_put16(o, (uint32_t)p);
            vec_encode(o + 2, c->V + p * n, n);
            o += es;
        }
    memcpy(w + body, payload, len);
    remember(c, d);
    return 0;
}

static int ses_send(struct sim_machine *m, const uint16_t *dests, int k,
                    const uint8_t *payload, size_t len, struct sim_step *step)
{
    struct ses *c = (struct ses *)m;
    size_t n = (size_t)m->n, es = 2 + 4 * n, me = (size_t)m->me;
    if (len > UINT32_MAX - 2 - 4 * n - n * es)
        return sim_fail(step, "payload of %zu bytes too long for one wire", len);
    if (c->t[me] >= UINT32_MAX)
        return sim_fail(step, "process %d exhausted its 32-bit clock", m->me);
    c->t[me]++;
    if (k == 1)
        return send_one(c, dests[0], payload, len, step);
    for (int i = 0; i < k; i++)
        c->mark[dests[i]] = 1;
    size_t mall = 0;            /* records of sorted(present | Dests), Dests' vectors t_M */
    for (size_t p = 0; p < n; p++)
        if (c->present[p] || c->mark[p]) {
            uint8_t *r = c->full + mall * es;
            sim_put16(r, (uint32_t)p);
            vec_encode(r + 2, c->mark[p] ? c->t : c->V + p * n, n);
            c->pos[p] = (uint32_t)mall++;
        }
    int rc = 0;
    for (int i = 0; i < k; i++) {
        size_t d = dests[i], at = c->pos[d] * es, mm = c->present[d] ? mall : mall - 1;
        size_t body = 2 + 4 * n + mm * es;
        uint8_t *w = sim_emit(step, (uint32_t)d, (uint32_t)(body + len),
                              (struct sim_cost){2, (uint32_t)(body - 2), (uint32_t)(1 + mm), 1});
        if (!w) {
            rc = -1;
            break;
        }
        sim_put16(w, (uint32_t)mm);
        vec_encode(w + 2, c->t, n);
        uint8_t *o = w + 2 + 4 * n;
        memcpy(o, c->full, at);
        o += at;
        if (c->present[d]) {        /* the copy to d carries d's old pair */
            sim_put16(o, (uint32_t)d);
            vec_encode(o + 2, c->V + d * n, n);
            o += es;
        }
        memcpy(o, c->full + at + es, (mall * es) - at - es);
        memcpy(w + body, payload, len);
    }
    for (int i = 0; i < k; i++) {
        size_t d = dests[i];
        c->mark[d] = 0;
        if (rc == 0)
            remember(c, d);
    }
    return rc;
}

/* index of the first held message from j with t_M[j] >= s */
static uint32_t find(const struct queue *q, uint32_t s)
{
    uint32_t lo = q->head, hi = q->count;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (q->a[mid].s < s)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ses.py's _decode: every check, no state change; *cond = offset of our pair's vector or 0 */
static int decode(struct ses *c, int src, const uint8_t *data, size_t size, uint32_t *cond,
                  struct sim_step *step)
{
    size_t n = (size_t)c->base.n, me = (size_t)c->base.me, es = 2 + 4 * n;
    if (size < 2)
        return sim_fail(step, "wire truncated: %zu bytes, needs at least 2", size);
    size_t m = sim_get16(data), base = 2 + 4 * n, end = base + m * es;
    if (m >= n)
        return sim_fail(step, "pair count %zu exceeds %zu", m, n - 1);
    if (size < end)
        return sim_fail(step, "wire truncated: %zu bytes, clock and pairs need %zu", size, end);
    if (size > UINT32_MAX)
        return sim_fail(step, "wire of %zu bytes too long", size);
    const uint8_t *tm = data + 2;
    uint32_t s = sim_get32(tm + 4 * (size_t)src), mine = sim_get32(tm + 4 * me);
    if (s == 0)
        return sim_fail(step, "clock from %d has no send event of %d", src, src);
    if (mine > c->t[me])
        return sim_fail(step, "clock from %d names our event %u, we are at %u", src, mine,
                        c->t[me]);
    const struct queue *q = &c->q[src];
    uint32_t at = find(q, s);
    if (s <= c->t[src] || (at < q->count && q->a[at].s == s))
        return sim_fail(step, "duplicate message %u from %d", s, src);
    int bad = 0;
    *cond = 0;
    for (size_t i = 0; i < m; i++) {
        size_t p = sim_get16(data + base + i * es);
        if (p >= n || p == (size_t)src || c->mark[p]) {
            bad = 1;
            break;
        }
        c->mark[p] = 1;
        if (p == me)
            *cond = (uint32_t)(base + i * es + 2);
    }
    memset(c->mark, 0, n);
    if (bad)
        return sim_fail(step, "bad pair list from %d", src);
    for (size_t x = 0; *cond && x < n; x++)
        if (sim_get32(data + *cond + 4 * x) > sim_get32(tm + 4 * x))
            return sim_fail(step, "our pair's vector exceeds the message's clock");
    return 0;
}

/* ses.py's _apply: merge the pairs into V (ours lands in row me, never sent), then the clock */
static void apply(struct ses *c, const uint8_t *wire)
{
    size_t n = (size_t)c->base.n, es = 2 + 4 * n, m = sim_get16(wire), me = (size_t)c->base.me;
    const uint8_t *r = wire + 2 + 4 * n;
    for (size_t i = 0; i < m; i++, r += es) {
        size_t p = sim_get16(r);
        vec_max_into(c->V + p * n, r + 2, n);
        if (c->npresent < n - 1 && p != me && !c->present[p]) {
            c->present[p] = 1;
            c->npresent++;
        }
    }
    vec_max_into(c->t, wire + 2, n);
    c->t[me]++;
}

/* ses.py's _park: j's oldest held message waits for the first component its pair is ahead */
static void park(struct ses *c, int j, const uint8_t *vec)
{
    size_t k;
    for (k = 0; sim_get32(vec + 4 * k) <= c->t[k]; k++)
        ;       /* ends below n: the caller found the pair not below t */
    c->parked[j] = (int32_t)k;
    c->need[j] = sim_get32(vec + 4 * k);
    c->nparked++;
}

static int deliver(struct ses *c, int j, const uint8_t *wire, uint32_t len, struct sim_step *step)
{
    size_t end = 2 + 4 * (size_t)c->base.n + sim_get16(wire) * (2 + 4 * (size_t)c->base.n);
    apply(c, wire);
    return sim_deliver(step, (uint32_t)j, wire + end, (uint32_t)(len - end));
}

/* ses.py's _release: t grew */
static int release(struct ses *c, struct sim_step *step)
{
    size_t n = (size_t)c->base.n;
    uint8_t *ready = c->mark;
    while (c->nparked) {
        int any = 0;
        for (size_t j = 0; j < n; j++) {
            int32_t k = c->parked[j];
            ready[j] = k >= 0 && c->need[j] <= c->t[k];
            if (ready[j]) {
                c->parked[j] = -1;
                c->nparked--;
                any = 1;
            }
        }
        if (!any)
            return 0;
        for (size_t j = 0; j < n; j++) {
            if (!ready[j])
                continue;
            ready[j] = 0;
            struct queue *q = &c->q[j];
            while (q->head < q->count) {
                struct pend e = q->a[q->head];
                if (!below(c, e.wire + e.cond)) {
                    park(c, (int)j, e.wire + e.cond);
                    break;
                }
                q->head++;
                c->held--;
                int rc = deliver(c, (int)j, e.wire, e.len, step);
                free(e.wire);
                if (rc < 0) {
                    memset(ready, 0, n);
                    return -1;
                }
            }
            if (q->head == q->count)
                q->head = q->count = 0;
        }
    }
    return 0;
}

/* inserts a copy of the wire into q[src] in t_M[src] order; its index, or -1 on ENOMEM */
static long hold(struct ses *c, int src, const uint8_t *data, size_t len, uint32_t s,
                 uint32_t cond)
{
    struct queue *q = &c->q[src];
    if (q->count == q->cap && q->head) {
        memmove(q->a, q->a + q->head, (q->count - q->head) * sizeof *q->a);
        q->count -= q->head;
        q->head = 0;
    }
    if (q->count == q->cap) {
        uint32_t want = q->cap ? 2 * q->cap : 8;
        struct pend *a = realloc(q->a, want * sizeof *a);
        if (!a)
            return -1;
        q->a = a;
        q->cap = want;
    }
    uint8_t *wire = malloc(len);
    if (!wire)
        return -1;
    memcpy(wire, data, len);
    uint32_t at = find(q, s);
    memmove(q->a + at + 1, q->a + at, (q->count - at) * sizeof *q->a);
    q->a[at] = (struct pend){wire, (uint32_t)len, s, cond};
    q->count++;
    c->held++;
    return at;
}

static int ses_receive(struct sim_machine *m, int src, const uint8_t *data, size_t len,
                       struct sim_step *step)
{
    struct ses *c = (struct ses *)m;
    uint32_t cond = 0;
    if (decode(c, src, data, len, &cond, step) < 0)
        return -1;
    if (!cond || below(c, data + cond)) {
        if (deliver(c, src, data, (uint32_t)len, step) < 0)
            return -1;
        return c->held ? release(c, step) : 0;
    }
    uint32_t s = sim_get32(data + 2 + 4 * (size_t)src);
    long at = hold(c, src, data, len, s, cond);
    if (at < 0)
        return sim_fail(step, "out of memory");
    if ((uint32_t)at == c->q[src].head) {   /* src's new oldest: park it instead */
        if (c->parked[src] >= 0) {
            c->parked[src] = -1;
            c->nparked--;
        }
        park(c, src, data + cond);
    }
    return 0;
}

static long ses_held(struct sim_machine *m)
{
    return ((struct ses *)m)->held;
}

const struct sim_ops sim_ses_ops = {
    .name = "ses", .multicast = SIM_NATIVE, .size = sizeof(struct ses),
    .init = ses_init, .fini = ses_fini, .send = ses_send, .receive = ses_receive,
    .held = ses_held,
};
