/* machine.h - the C twins of bus1py.causal's state machines, for the simulator.
 *
 * Each protocol machine in csrc/sim/<name>.c is a byte-for-byte twin of
 * bus1py/causal/<name>.py: fed the same inputs in the same order it emits the same wires
 * (destination, bytes, cost, order), delivers the same payloads from the same senders in the
 * same order, and reports the same `held`. tests/sim/test_fast_machines.py checks this for
 * every registered machine over random and adversarial schedules. The Python machines are
 * the reference and own the all-or-nothing contract for bad input; a C machine only has to
 * refuse bad bytes without undefined behaviour (it may be unusable afterwards: the simulator
 * never feeds it bad wires).
 *
 * Invariants:
 *   - Sans-I/O, as the Python machines: no clock, randomness, I/O, or state shared between
 *     machines (read-only tables are fine).
 *   - A wire's bytes handed out by sim_emit belong to the caller of sim_send/sim_receive
 *     once the call returns (free with sim_wire_free), also when the call fails.
 *   - A step's wire list and deliveries stay valid until sim_step_reset; delivered payload
 *     bytes are copied into the step, so a machine frees its held copy when it delivers.
 *   - Every function returning int returns 0 or -1; -1 has set step->err.
 */
#ifndef BUS1PY_SIM_MACHINE_H
#define BUS1PY_SIM_MACHINE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* cdef-begin */
struct sim_cost {
    uint32_t header;        /* framing the study does not count */
    uint32_t control;       /* the control information the study counts, in bytes */
    uint32_t dependents;    /* seed 001's dependents */
    uint8_t data;           /* 1: carries the payload to one of its destinations */
};

struct sim_wire {
    uint32_t dest;
    uint32_t len;
    uint8_t *bytes;         /* malloc'd; the caller's after the call */
    struct sim_cost cost;
};

struct sim_delivery {
    uint32_t sender;        /* the message's original sender */
    uint32_t off;           /* payload = step->dbytes[off .. off + len) */
    uint32_t len;
};

struct sim_step {
    struct sim_wire *wires;
    size_t nwires, wcap;
    struct sim_delivery *deliv;
    size_t ndeliv, dcap;
    uint8_t *dbytes;
    size_t dlen, dbcap;
    char err[200];
};

struct sim_machine;

/* the names with a C machine, comma-separated, in bus1py.causal.PROTOCOLS order */
const char *sim_protocols(void);
/* 0 native, 1 broadcast, 2 sequential (bus1py.causal.base.Protocol.multicast); -1 unknown */
int sim_multicast_kind(const char *name);
/* NULL if `name` has no C machine, n is outside 2..65535, me outside 0..n-1, or ENOMEM */
struct sim_machine *sim_machine_new(const char *name, int me, int n);
void sim_machine_free(struct sim_machine *m);
/* dests: k distinct process ids, none `me` (the caller checked, as Protocol.send does) */
int sim_send(struct sim_machine *m, const uint16_t *dests, int k, const uint8_t *payload,
             size_t len, struct sim_step *step);
/* src: another process id (the caller checked); data: a wire src's twin emitted */
int sim_receive(struct sim_machine *m, int src, const uint8_t *data, size_t len,
                struct sim_step *step);
long sim_held(struct sim_machine *m);

void sim_step_init(struct sim_step *s);
/* forgets the wires (their bytes stay the caller's) and deliveries */
void sim_step_reset(struct sim_step *s);
void sim_step_free(struct sim_step *s);
void sim_wire_free(uint8_t *bytes);
/* cdef-end */

enum { SIM_NATIVE = 0, SIM_BROADCAST = 1, SIM_SEQUENTIAL = 2 };

/* Every machine struct begins with this; sim_machine_new callocs ops->size bytes. */
struct sim_machine {
    const struct sim_ops *ops;
    int me, n;
};

struct sim_ops {
    const char *name;
    int multicast;
    size_t size;
    /* the rest of the struct is zero; on -1 fini is still called */
    int (*init)(struct sim_machine *m);
    void (*fini)(struct sim_machine *m);
    int (*send)(struct sim_machine *m, const uint16_t *dests, int k, const uint8_t *payload,
                size_t len, struct sim_step *step);
    int (*receive)(struct sim_machine *m, int src, const uint8_t *data, size_t len,
                   struct sim_step *step);
    long (*held)(struct sim_machine *m);
};

/* ---- for the machines ---- */

/* A new wire of `len` bytes to `dest` appended to the step; NULL (err set) on ENOMEM. */
uint8_t *sim_emit(struct sim_step *s, uint32_t dest, uint32_t len, struct sim_cost cost);
/* Hands `payload` from `sender` to the application (copied into the step). */
int sim_deliver(struct sim_step *s, uint32_t sender, const uint8_t *payload, uint32_t len);
/* Sets s->err (printf-style) and returns -1. */
int sim_fail(struct sim_step *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Little-endian codec (the wire format of bus1py.causal.base: u16 ids, u32 counters). */
static inline void sim_put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void sim_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static inline uint32_t sim_get16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static inline uint32_t sim_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A bounds-checked cursor over a wire: a short read sets `bad` and yields zeros, so a
 * decoder reads everything and checks `bad` once. */
struct sim_reader {
    const uint8_t *p;
    size_t len, pos;
    int bad;
};

static inline const uint8_t *sim_take(struct sim_reader *r, size_t size)
{
    static const uint8_t zeros[8];
    if (r->bad || size > r->len - r->pos) {
        r->bad = 1;
        return size <= sizeof zeros ? zeros : NULL;
    }
    const uint8_t *at = r->p + r->pos;
    r->pos += size;
    return at;
}
static inline uint32_t sim_read16(struct sim_reader *r) { return sim_get16(sim_take(r, 2)); }
static inline uint32_t sim_read32(struct sim_reader *r) { return sim_get32(sim_take(r, 4)); }

/* Growable array helper: makes room for `more` items of `size` in *arr (count, cap). */
int sim_reserve(void **arr, size_t *cap, size_t count, size_t more, size_t size);

#endif
