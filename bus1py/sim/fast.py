"""The simulator's C machines (csrc/sim/), driven from Python.

`Machine(name, me, n)` is a `bus1py.causal.Protocol` whose transitions run in C: the twin
of the Python machine of the same name, byte for byte (tests/sim/test_fast_machines.py holds
every registered twin to that). `NAMES` lists the protocols that have one; without the
compiled module it is empty and the simulator runs the Python machines.

Invariants:
  - A Machine's results are plain Python values (bytes, `Step`, `WireCost`) that own no C
    memory: every wire and delivery is copied out and the C buffers freed in the same call.
  - A C failure raises WireError with the machine's message and leaves the Machine unusable
    (`broken`); the Python machines are the ones that promise all-or-nothing.
"""
from __future__ import annotations

from ..causal import Step, WireCost, WireError, protocol_class
from ..causal.base import Protocol

try:
    from ._fast import ffi, lib
except ImportError:          # a checkout whose C module was not built
    ffi = lib = None

NAMES: tuple = tuple(ffi.string(lib.sim_protocols()).decode().split(",")) \
    if lib is not None and ffi.string(lib.sim_protocols()) else ()
_KINDS = ("native", "broadcast", "sequential")


def seed_words(seed: int) -> list:
    """The key `random.Random(seed)` hands to MT19937's init_by_array: the 32-bit words of
    abs(seed), least significant first, and one zero word for 0 (csrc/sim/pyrandom.h)."""
    x = abs(seed)
    return [(x >> (32 * i)) & 0xFFFFFFFF for i in range(max(1, (x.bit_length() + 31) // 32))]


class Machine(Protocol):
    """The C machine for protocol `name`, process `me` of 0..n-1."""

    def __init__(self, name: str, me: int, n: int):
        if name not in NAMES:
            protocol_class(name)     # an unknown name raises the causal package's error
            raise ValueError(f"protocol {name!r} has no C machine")
        super().__init__(me, n)
        py = protocol_class(name)
        self.name, self.causal, self.rule = name, py.causal, py.rule
        self.multicast = _KINDS[lib.sim_multicast_kind(name.encode())]
        m = lib.sim_machine_new(name.encode(), me, n)
        if m == ffi.NULL:
            raise MemoryError(f"{name} machine for process {me} of {n}")
        self._m = ffi.gc(m, lib.sim_machine_free)
        step = ffi.new("struct sim_step *")
        lib.sim_step_init(step)
        self._step = ffi.gc(step, lib.sim_step_free)
        self.broken = False

    @property
    def held(self) -> int:
        return lib.sim_held(self._m)

    def _send(self, dests, payload):
        ids = ffi.new("uint16_t[]", list(dests))
        return self._run(lib.sim_send(self._m, ids, len(dests), payload, len(payload),
                                      self._step))

    def _receive(self, src, data):
        return self._run(lib.sim_receive(self._m, src, data, len(data), self._step))

    def _run(self, rc) -> Step:
        if self.broken:
            raise WireError(f"the {self.name} C machine failed earlier and is unusable")
        s = self._step
        step = Step()
        for i in range(s.nwires):
            w = s.wires[i]
            c = w.cost
            step.emit(w.dest, bytes(ffi.buffer(w.bytes, w.len)),
                      WireCost(c.header, c.control, c.dependents, bool(c.data)))
            lib.sim_wire_free(w.bytes)
        if rc < 0:
            self.broken = True
            err = ffi.string(s.err).decode()
            lib.sim_step_reset(s)
            raise WireError(err)
        payloads = bytes(ffi.buffer(s.dbytes, s.dlen)) if s.dlen else b""
        for i in range(s.ndeliv):
            d = s.deliv[i]
            step.delivered.append((d.sender, payloads[d.off:d.off + d.len]))
        lib.sim_step_reset(s)
        return step
