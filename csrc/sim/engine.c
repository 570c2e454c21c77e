/* engine.c - bus1py.sim.engine.run's loop over the C machines (see engine.h).
 *
 * Follows engine.py statement by statement; the comments name its variables. Draws, in
 * engine.py's order: one expovariate per process for its first send timer; at a timer,
 * the destinations (multicast: sorted(sample(others[p], 1 + int(random() * (n - 1)))),
 * unicast: q = int(random() * (n - 1)), q + (q >= p)), then one delay per emitted wire,
 * then the next timer; at a receive, one delay per emitted wire.
 *
 * Digest (res->digest, FNV-1a 64, when spec->digest): per machine call, in event order,
 *   send:    u8 0, u32 process, u32 k, k x u32 dest
 *   receive: u8 1, u32 process, u32 src
 * then u32 nwires, each wire (u32 dest, u32 len, bytes, u32 header, u32 control,
 * u32 dependents, u8 data), u32 ndelivered, each delivery (u32 sender, u32 len, payload),
 * and u64 held after the call; all little-endian. tests/sim/test_fast_engine.py computes
 * the same over the Python loop's steps.
 *
 * Invariants:
 *   - heap[0 .. nheap) is a binary min-heap on key, i.e. on (t, tick); ticks are unique, so
 *     the pop order is the total order engine.py's heapq yields, whatever the heap's shape.
 *   - Message ids are 1 .. next_mid - 1; left[mid] is how many copies of mid are not yet
 *     delivered (engine.py's outstanding[mid][1], 0 once deleted), sent_at[mid] its send
 *     time; undelivered counts the ids with left > 0 (len(outstanding)).
 *   - Every heap entry but a send timer owns its wire's bytes.
 */
#include "engine.h"
#include "machine.h"
#include "pyrandom.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* 32 bytes: two to a cache line. key orders events as engine.py's heap tuples (t, tick):
 * every t is +0.0 or more, or -0.0 (now - log(1 - u) / rate with log <= 0 and rate > 0), so
 * the bits of |t| order as t does (-0.0 == 0.0); the low bit keeps t's sign, below the tick. */
struct event {
    unsigned __int128 key;  /* bits(|t|) << 64 | tick << 1 | signbit(t) */
    uint8_t *data;          /* the wire's bytes; NULL for a timer */
    uint32_t len;
    uint16_t dest, src;     /* dest TIMER: a send timer of process src */
};

#define TIMER 0xFFFF        /* not a process id: n <= 65535 */

struct loop {
    const struct sim_run_spec *spec;
    struct sim_run_result *res;
    struct pyrandom rng;
    struct sim_machine **procs;
    struct sim_step step;
    struct event *heap;
    size_t nheap, hcap;
    uint64_t tick;
    double *sent_at;        /* by message id */
    uint32_t *left;
    size_t mcap;
    uint64_t next_mid;
    uint64_t *delivered;    /* per process */
    uint32_t *scratch, *picked;
    uint16_t *dests;
    uint8_t *mark;
    int sequential;         /* a multicast is k one-copy sends */
    int jpcy;               /* tally jpcy's CI figures (ci_stats) */
    uint32_t *ci_count;     /* ci_stats' tuples per sender: n words, zero between calls */
    int measuring, sending;
};

static inline double event_time(const struct event *e)
{
    uint64_t bits = (uint64_t)(e->key >> 64) | (uint64_t)(e->key & 1) << 63;
    double t;
    memcpy(&t, &bits, sizeof t);
    return t;
}

/* puts e at the hole i and lets it rise past every parent with a key not below its own
 * (keys are unique: the tick breaks ties in push order) */
static inline void sift_up(struct event *h, size_t i, struct event e)
{
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (h[up].key < e.key)
            break;
        h[i] = h[up];
        i = up;
    }
    h[i] = e;
}

static int push(struct loop *L, double t, uint16_t dest, uint16_t src, uint8_t *data,
                uint32_t len)
{
    if (L->nheap == L->hcap &&
        sim_reserve((void **)&L->heap, &L->hcap, L->nheap, 1, sizeof *L->heap) < 0)
        return -1;
    uint64_t bits;
    memcpy(&bits, &t, sizeof bits);
    unsigned __int128 k = (unsigned __int128)(bits & 0x7FFFFFFFFFFFFFFFULL) << 64 |
                          (unsigned __int128)(L->tick++ << 1 | bits >> 63);
    sift_up(L->heap, L->nheap++, (struct event){k, data, len, dest, src});
    return 0;
}

/* Bottom-up: the hole left by the root goes down the smaller children to a leaf, where the
 * last entry fills it and rises (usually not far): one comparison per level. */
static struct event pop(struct loop *L)
{
    struct event *h = L->heap, top = h[0];
    size_t n = --L->nheap, i = 0;
    if (n == 0)
        return top;
    for (size_t c; (c = 2 * i + 1) < n; i = c) {
        if (c + 1 < n && h[c + 1].key < h[c].key)
            c++;
        h[i] = h[c];
    }
    sift_up(h, i, h[n]);
    return top;
}

uint64_t sim_fnv1a(uint64_t h, const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static void hash32(struct loop *L, uint32_t v)
{
    uint8_t b[4];
    sim_put32(b, v);
    L->res->digest = sim_fnv1a(L->res->digest, b, 4);
}

static void hash_step(struct loop *L, const struct sim_step *s, long held)
{
    struct sim_run_result *r = L->res;
    hash32(L, (uint32_t)s->nwires);
    for (size_t i = 0; i < s->nwires; i++) {
        const struct sim_wire *w = &s->wires[i];
        hash32(L, w->dest);
        hash32(L, w->len);
        r->digest = sim_fnv1a(r->digest, w->bytes, w->len);
        hash32(L, w->cost.header);
        hash32(L, w->cost.control);
        hash32(L, w->cost.dependents);
        r->digest = sim_fnv1a(r->digest, &w->cost.data, 1);
    }
    hash32(L, (uint32_t)s->ndeliv);
    for (size_t i = 0; i < s->ndeliv; i++) {
        hash32(L, s->deliv[i].sender);
        hash32(L, s->deliv[i].len);
        r->digest = sim_fnv1a(r->digest, s->dbytes + s->deliv[i].off, s->deliv[i].len);
    }
    hash32(L, (uint32_t)held);
    hash32(L, (uint32_t)((uint64_t)held >> 32));
}

/* bus1py/sim/ciwire.py's ci_stats over a jpcy data wire (its framing was checked by the
 * machine that built it), added to the tally; counts is n zeroed words, left zeroed */
static void ci_stats(struct sim_tally *t, const uint8_t *w, uint32_t *counts)
{
    uint32_t nd = sim_get16(w + 6), nci = sim_get16(w + 8), most = 0;
    const uint8_t *dlens = w + 12 + 2 * nd, *senders = dlens + 2 * nci;
    t->copy_dests += nd;
    t->ci_tuples += nci;
    for (uint32_t i = 0; i < nci; i++) {
        t->ci_empty += sim_get16(dlens + 2 * i) == 0;
        uint32_t c = ++counts[sim_get16(senders + 2 * i)];
        if (c > most)
            most = c;
    }
    for (uint32_t i = 0; i < nci; i++)
        counts[sim_get16(senders + 2 * i)] = 0;
    if (most > t->ci_max)
        t->ci_max = most;
}

/* engine.py's account(): each wire into the network with its own delay, its cost tallied
 * while measuring. Takes the wires' bytes (also on failure); refuses a wire to a process
 * that does not exist (engine.py would fail on it too). */
static int account(struct loop *L, double now, uint32_t where)
{
    struct sim_step *s = &L->step;
    struct sim_tally *t = &L->res->tally;
    size_t i = 0;
    for (; i < s->nwires; i++) {
        struct sim_wire *w = &s->wires[i];
        if (w->dest >= (uint32_t)L->spec->n)
            break;
        double at = now - log(1.0 - pyr_next_double(&L->rng)) / L->spec->net_rate;
        if (push(L, at, (uint16_t)w->dest, (uint16_t)where, w->bytes, w->len) < 0)
            break;
        if (L->measuring) {
            t->control += w->cost.control;
            t->header += w->cost.header;
            t->dependents += w->cost.dependents;
            if (w->cost.data) {
                t->data_wires++;
                t->data_control += w->cost.control;
                t->data_dependents += w->cost.dependents;
            } else {
                t->control_wires++;
            }
            if (L->jpcy)
                ci_stats(t, w->bytes, L->ci_count);
        }
    }
    if (i == s->nwires)
        return 0;
    uint32_t to = s->wires[i].dest;
    for (; i < s->nwires; i++)
        sim_wire_free(s->wires[i].bytes);
    if (to >= (uint32_t)L->spec->n)
        return sim_fail(s, "process %u emitted a wire to %u", where, to);
    return sim_fail(s, "out of memory");
}

/* a machine call's outcome: on failure its wires are freed and its message kept */
static int settled(struct loop *L, int rc, struct sim_machine *m)
{
    if (rc < 0) {
        for (size_t i = 0; i < L->step.nwires; i++)
            sim_wire_free(L->step.wires[i].bytes);
        L->step.nwires = 0;
        return -1;
    }
    if (L->spec->digest)
        hash_step(L, &L->step, sim_held(m));
    return 0;
}

static int send_timer(struct loop *L, double now, uint32_t p)
{
    const struct sim_run_spec *sp = L->spec;
    uint32_t n = (uint32_t)sp->n, k = 0;
    if (sp->multicast) {
        uint32_t want = 1 + (uint32_t)(pyr_next_double(&L->rng) * (n - 1));
        if (pyr_sample(&L->rng, n - 1, want, L->picked, L->scratch) < 0)
            return sim_fail(&L->step, "Sample larger than population or is negative");
        for (uint32_t i = 0; i < want; i++)                   /* others[p][j] */
            L->mark[L->picked[i] + (L->picked[i] >= p)] = 1;
        for (uint32_t q = 0; q < n; q++)                      /* sorted() */
            if (L->mark[q]) {
                L->mark[q] = 0;
                L->dests[k++] = (uint16_t)q;
            }
    } else {
        uint32_t q = (uint32_t)(pyr_next_double(&L->rng) * (n - 1));
        L->dests[k++] = (uint16_t)(q + (q >= p));
    }
    if (L->measuring) {
        L->res->tally.sends++;
        L->res->tally.copies += k;
    }
    uint32_t groups = L->sequential ? k : 1, size = L->sequential ? 1 : k;
    for (uint32_t g = 0; g < groups; g++) {
        const uint16_t *group = L->dests + g * size;
        uint64_t mid = L->next_mid++;
        size_t had = L->mcap;
        if (sim_reserve((void **)&L->sent_at, &L->mcap, mid, 1, sizeof *L->sent_at) < 0)
            return sim_fail(&L->step, "out of memory");
        if (L->mcap != had) {                 /* left grows with sent_at */
            uint32_t *nl = realloc(L->left, L->mcap * sizeof *L->left);
            if (!nl)
                return sim_fail(&L->step, "out of memory");
            L->left = nl;
        }
        L->sent_at[mid] = now;
        L->left[mid] = size;
        L->res->undelivered++;
        uint8_t payload[8];
        sim_put32(payload, (uint32_t)mid);
        sim_put32(payload + 4, (uint32_t)(mid >> 32));
        if (sp->digest) {
            uint8_t zero = 0;
            L->res->digest = sim_fnv1a(L->res->digest, &zero, 1);
            hash32(L, p);
            hash32(L, size);
            for (uint32_t i = 0; i < size; i++)
                hash32(L, group[i]);
        }
        sim_step_reset(&L->step);
        int rc = sim_send(L->procs[p], group, (int)size, payload, 8, &L->step);
        if (settled(L, rc, L->procs[p]) < 0 || account(L, now, p) < 0)
            return -1;
    }
    double next = now - log(1.0 - pyr_next_double(&L->rng)) / sp->send_rate;
    return push(L, next, TIMER, (uint16_t)p, NULL, 0) < 0 ? sim_fail(&L->step, "out of memory")
                                                          : 0;
}

static int receive(struct loop *L, double now, struct event *e, uint64_t *warm_left,
                   uint64_t *done_left)
{
    const struct sim_run_spec *sp = L->spec;
    struct sim_run_result *res = L->res;
    uint32_t d = e->dest;
    struct sim_machine *m = L->procs[d];
    res->receives++;
    if (sp->digest) {
        uint8_t one = 1;
        res->digest = sim_fnv1a(res->digest, &one, 1);
        hash32(L, d);
        hash32(L, e->src);
    }
    sim_step_reset(&L->step);
    int rc = sim_receive(m, (int)e->src, e->data, e->len, &L->step);
    sim_wire_free(e->data);
    e->data = NULL;
    if (settled(L, rc, m) < 0 || account(L, now, d) < 0)
        return -1;
    const uint64_t goal_warm = sp->warmup, goal_done = sp->warmup + sp->measure;
    for (size_t i = 0; i < L->step.ndeliv; i++) {
        const struct sim_delivery *dv = &L->step.deliv[i];
        const uint8_t *pl = L->step.dbytes + dv->off;
        uint64_t mid = dv->len == 8 ? sim_get32(pl) | (uint64_t)sim_get32(pl + 4) << 32 : 0;
        if (mid == 0 || mid >= L->next_mid || L->left[mid] == 0)
            return sim_fail(&L->step, "process %u delivered a message that is not "
                            "outstanding", d);
        if (--L->left[mid] == 0)
            res->undelivered--;
        if (L->measuring) {
            if (sim_reserve((void **)&res->delays, &res->dcap, res->ndelays, 1,
                            sizeof *res->delays) < 0)
                return sim_fail(&L->step, "out of memory");
            res->delays[res->ndelays++] = now - L->sent_at[mid];
        }
        uint64_t c = ++L->delivered[d];
        if (c == goal_warm && *warm_left && !--*warm_left)
            L->measuring = 1;
        if (c == goal_done && !--*done_left)
            L->measuring = L->sending = 0;
    }
    long h = sim_held(m);
    if (h > res->held_max)
        res->held_max = h;
    return 0;
}

static int loop(struct loop *L)
{
    const struct sim_run_spec *sp = L->spec;
    size_t n = (size_t)sp->n;
    for (uint32_t p = 0; p < n; p++)                          /* expovariate(send_rate) */
        if (push(L, -log(1.0 - pyr_next_double(&L->rng)) / sp->send_rate, TIMER,
                 (uint16_t)p, NULL, 0) < 0)
            return sim_fail(&L->step, "out of memory");
    uint64_t warm_left = sp->warmup ? n : 0, done_left = n;
    L->measuring = warm_left == 0;
    L->sending = 1;
    while (L->nheap) {
        struct event e = pop(L);
        int rc;
        if (e.dest == TIMER)
            rc = L->sending ? send_timer(L, event_time(&e), e.src) : 0;
        else
            rc = receive(L, event_time(&e), &e, &warm_left, &done_left);
        if (rc < 0) {
            sim_wire_free(e.data);
            return -1;
        }
    }
    return 0;
}

int sim_run(const struct sim_run_spec *sp, struct sim_run_result *res)
{
    if (sp->n < 2 || sp->n > 0xFFFF || sp->measure < 1 || !(sp->send_rate > 0) ||
        !(sp->net_rate > 0) || sp->nseed < 1 || sim_multicast_kind(sp->protocol) < 0) {
        snprintf(res->err, sizeof res->err, "bad run spec");
        return -1;
    }
    size_t n = (size_t)sp->n;
    struct loop L = {.spec = sp, .res = res, .next_mid = 1,
                     .sequential = sim_multicast_kind(sp->protocol) == SIM_SEQUENTIAL,
                     .jpcy = strcmp(sp->protocol, "jpcy") == 0};
    res->digest = 0xcbf29ce484222325ULL;
    pyr_seed(&L.rng, sp->seed, sp->nseed);
    sim_step_init(&L.step);
    L.procs = calloc(n, sizeof *L.procs);
    L.delivered = calloc(n, sizeof *L.delivered);
    L.scratch = malloc(n * sizeof *L.scratch);
    L.ci_count = calloc(n, sizeof *L.ci_count);
    L.picked = malloc(n * sizeof *L.picked);
    L.dests = malloc(n * sizeof *L.dests);
    L.mark = calloc(n, 1);
    int rc = L.procs && L.delivered && L.scratch && L.picked && L.dests && L.mark &&
             L.ci_count ? 0 : -1;
    for (size_t p = 0; rc == 0 && p < n; p++)
        if (!(L.procs[p] = sim_machine_new(sp->protocol, (int)p, sp->n)))
            rc = -1;
    if (rc < 0)
        sim_fail(&L.step, "out of memory");
    else
        rc = loop(&L);
    if (rc < 0)
        snprintf(res->err, sizeof res->err, "%s", L.step.err);
    for (size_t i = 0; i < L.nheap; i++)
        sim_wire_free(L.heap[i].data);
    for (size_t p = 0; L.procs && p < n; p++)
        sim_machine_free(L.procs[p]);
    free(L.procs);
    free(L.heap);
    free(L.sent_at);
    free(L.left);
    free(L.delivered);
    free(L.scratch);
    free(L.ci_count);
    free(L.picked);
    free(L.dests);
    free(L.mark);
    sim_step_free(&L.step);
    return rc;
}

void sim_run_result_free(struct sim_run_result *res)
{
    free(res->delays);
    res->delays = NULL;
    res->ndelays = res->dcap = 0;
}
