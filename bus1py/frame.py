"""One thread's call frame on one bus: `struct b1_frame` and every buffer the hot calls use.

Invariants:
  - A Frame belongs to one thread and one mapping: `Bus.scratch()` keeps one per thread in a
    thread-local that `Bus.close` drops, so no two threads share a buffer and no frame is
    handed out after the mapping is gone.
  - `c` (struct b1_frame) points at the mapping and at `dests`, `handles`, `fds`, the
    payload buffer and, once a batch ran, `infos`: the Frame holds every cdata `c` points to, so
    each lives exactly as long as the frame.
  - A frame of a closed bus has `c.base` NULL and no `held` or `whole` (Bus.close drops
    them), so a frame a Peer keeps (csrc/py/peer.c checks `c.base` before each use) neither
    reaches the old mapping nor keeps it mapped.
  - `address` is `c`'s address, as bus1py._messages takes it; `infos_cap` is how many
    message infos `infos` holds (0 before the first batch), read here rather than from
    `c`, where a field read costs a cdata lookup.
  - `held` (the pool view and the bus, which keep a zero-copy payload's mapping alive) and
    `whole` (a writable view of the mapping, which reservations slice) are made on first
    use by receive.py and reserve.py; None until then.
"""
from __future__ import annotations

from ._lib import ffi, lib

_NO_CLEAR = ffi.new_allocator(should_clear_after_alloc=False)
_FIRST_INFOS = 64  # message infos of the first batch's array at least


class Frame:
    __slots__ = ("c", "address", "dests", "handles", "fds", "max_dests", "seq", "infos", "infos_cap", "held",
                 "whole", "errors", "errors_address", "_buf", "__weakref__")

    def __init__(self, base, limits):
        c = self.c = ffi.new("struct b1_frame *")
        self.dests = ffi.new("uint64_t[]", max(limits.max_dests, 1))
        self.max_dests = limits.max_dests
        self.handles = ffi.new("uint64_t[]", max(limits.max_msg_handles, 1))
        c.buflen = max(limits.max_payload, 1)
        self._buf = _NO_CLEAR("char[]", c.buflen)
        self.fds = ffi.new("int32_t[]", lib.B1_MAX_FDS)  # a receive's descriptors (fds.py)
        self.errors = ffi.new("int32_t[]", max(limits.max_dests, 1))  # a partial send's (partial.py)
        self.errors_address = int(ffi.cast("uintptr_t", self.errors))
        c.base, c.dests, c.handles, c.buf, c.fds = base, self.dests, self.handles, self._buf, self.fds
        self.address = int(ffi.cast("uintptr_t", c))
        # the last send's sequence number, read without a cdata field lookup
        self.seq = memoryview(ffi.buffer(ffi.addressof(c[0], "seq"))).cast("Q")
        self.infos, self.infos_cap = None, 0
        self.held = self.whole = None

    def grow_infos(self, n: int) -> None:
        """Room for `n` or more message infos (a batch of `n`)."""
        cap = max(n, _FIRST_INFOS)
        self.infos = ffi.new("struct b1_msg_info[]", cap)
        self.c.infos, self.c.infos_cap = self.infos, cap
        self.infos_cap = cap
