"""The simulator's event loop in C (csrc/sim/engine.c), one call per run.

`run(spec)` returns the counters `bus1py.sim.engine.run` collects with its Python loop,
for a protocol in `NAMES`: the same random draws, events and counters, so
`engine._figures` computes the same figures from either (tests/sim/test_fast_engine.py).

Invariants:
  - The result owns no C memory: the delays are copied out and the C buffers freed in the
    same call, also when the run fails.
  - A machine's failure raises WireError with its message, as the Python machine would;
    a spec the C loop refuses raises ValueError (engine.run checks specs first).
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass

from ..causal import WireError
from . import fast
from .fast import ffi, lib, seed_words

#: the protocols this loop runs: those with a C machine, if the built module has the loop
NAMES: tuple = fast.NAMES if lib is not None and hasattr(lib, "sim_run") else ()

#: FNV-1a 64's offset basis: the digest of no steps
FNV_OFFSET = 0xcbf29ce484222325
#: the fields of engine._Tally and struct sim_tally
TALLY = ("sends", "copies", "data_wires", "control_wires", "control", "data_control",
         "header", "dependents", "data_dependents", "copy_dests", "ci_tuples", "ci_empty",
         "ci_max")


@dataclass
class Counters:
    tally: dict             # TALLY -> count
    delays: array           # 'd', in delivery order
    held_max: int
    undelivered: int
    receives: int
    digest: int | None      # see csrc/sim/engine.c, if asked


def run(spec, digest: bool = False) -> Counters:
    if spec.protocol not in NAMES:
        raise ValueError(f"protocol {spec.protocol!r} has no C machine")
    words = seed_words(spec.seed)
    keep = [ffi.new("char[]", spec.protocol.encode()), ffi.new("uint32_t[]", words)]
    sp = ffi.new("struct sim_run_spec *", {
        "protocol": keep[0], "n": spec.n, "multicast": spec.mode == "multicast",
        "warmup": spec.warmup, "measure": spec.measure,
        "send_rate": 1.0 / spec.process_send_mean, "net_rate": 1.0 / spec.net_delay,
        "seed": keep[1], "nseed": len(words), "digest": digest})
    res = ffi.new("struct sim_run_result *")
    try:
        if lib.sim_run(sp, res) < 0:
            err = ffi.string(res.err).decode()
            raise ValueError(err) if err == "bad run spec" else WireError(err)
        delays = array("d")
        if res.ndelays:
            delays.frombytes(ffi.buffer(res.delays, res.ndelays * 8))
        tally = {k: getattr(res.tally, k) for k in TALLY}
        return Counters(tally, delays, res.held_max, res.undelivered, res.receives,
                        res.digest if digest else None)
    finally:
        lib.sim_run_result_free(res)
