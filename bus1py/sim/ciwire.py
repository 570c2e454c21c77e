"""What a JPCY data wire says about its CI, read from the wire's own framing.

The engine tallies these for `jpcy` so the study can record the paper's bound on a CI
component (seed 001 section 6.1: "each component can have maximum of n - 1 tuples, one for
each process") and re-count the bytes under two readings the paper leaves open, from the
same runs (the readings change what a wire carries, not what a process keeps):
  - a sender-indexed CI vector: no 2-byte sender id per tuple (the vector's index names it);
  - the literal S4/S5 order: each copy also carries m's own tuple (tau_m, m.D).

Layout (bus1py/causal/jpcy.py): j u16 | tau u32 | |D| u16 | |CI| u16 | |DC| u16 | D ids
(|D| u16) | |D| of each CI tuple (|CI| u16) | CI senders (|CI| u16) | ... Only a data wire
of `jpcy` has it; csrc/sim/engine.c reads the same fields the same way.
"""
from __future__ import annotations

import struct

_COUNTS = struct.Struct("<HH")      # |D|, |CI| at offset 6


def ci_stats(data: bytes) -> tuple:
    """(|m.D|, |CI_m|, CI tuples with an empty D, the most tuples of one sender in CI_m)."""
    nd, nci = _COUNTS.unpack_from(data, 6)
    at = 12 + 2 * nd
    dlens = struct.unpack_from(f"<{nci}H", data, at)
    senders = struct.unpack_from(f"<{nci}H", data, at + 2 * nci)
    most = 0
    counts: dict = {}
    for k in senders:
        c = counts[k] = counts.get(k, 0) + 1
        if c > most:
            most = c
    return nd, nci, dlens.count(0), most
