/* engine.h - the simulator's event loop in C: one call runs one bus1py.sim.engine.RunSpec.
 *
 * The twin of bus1py.sim.engine.run over the C machines (machine.h): the same random draws
 * from the same random.Random stream (pyrandom.h) in the same order, the same event order
 * (a heap on (time, tick)), the same phases and the same counters, so bus1py.sim.engine
 * computes the same figures from either loop (tests/sim/test_fast_engine.py checks every
 * protocol with a C machine).
 *
 * Invariants:
 *   - The result depends only on the spec: no clock, no I/O, no state between calls.
 *   - Times are the doubles engine.py computes: each is one expression evaluated in
 *     Python's order (no fused or reordered arithmetic: the build has no fast-math).
 *   - On return every wire, machine and buffer of the run is freed except res->delays,
 *     which sim_run_result_free releases (also after a failed run).
 */
#ifndef BUS1PY_SIM_ENGINE_H
#define BUS1PY_SIM_ENGINE_H

#include <stddef.h>
#include <stdint.h>

/* cdef-begin */
struct sim_run_spec {
    const char *protocol;       /* a name in sim_protocols() */
    int n;                      /* 2..65535 */
    int multicast;              /* 1: multicast mode, 0: unicast */
    uint64_t warmup, measure;   /* deliveries per process; measure >= 1 */
    double send_rate, net_rate; /* 1.0 / send_mean and 1.0 / net_delay, as Python divides */
    const uint32_t *seed;       /* random.Random(seed)'s key: abs(seed)'s 32-bit words */
    size_t nseed;
    int digest;                 /* 1: hash every machine step into res->digest */
};

/* engine.py's _Tally: the costs of the wires emitted while measuring; the last four are
 * jpcy's CI figures (bus1py/sim/ciwire.py), zero for every other protocol */
struct sim_tally {
    uint64_t sends, copies, data_wires, control_wires, control, data_control, header,
        dependents, data_dependents, copy_dests, ci_tuples, ci_empty, ci_max;
};

struct sim_run_result {
    struct sim_tally tally;
    double *delays;             /* measured delivery delays, in delivery order */
    size_t ndelays, dcap;
    long held_max;
    uint64_t undelivered, receives;
    uint64_t digest;            /* FNV-1a 64 of the steps (see engine.c), if asked */
    char err[200];
};

/* res: zeroed by the caller. 0, or -1 with res->err set (a bad spec, ENOMEM, or a machine
 * that failed: its message) */
int sim_run(const struct sim_run_spec *spec, struct sim_run_result *res);
void sim_run_result_free(struct sim_run_result *res);
/* FNV-1a 64 of len bytes, continuing from h (0xcbf29ce484222325 to start) */
uint64_t sim_fnv1a(uint64_t h, const uint8_t *p, size_t len);
/* cdef-end */

#endif
