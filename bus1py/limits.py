"""A bus's limits: the sizes fixed when it is created, and the fault kinds it may inject.

Invariants:
  - `Limits.check` accepts exactly the limits csrc/bus/bus.c limits_valid accepts and that
    the fields of struct b1_limits hold: a bus is never created from limits the C helper
    would refuse or truncate, and the error names the first limit out of range.
  - The bounds here (MAX_SLOTS, MAX_PEERS, MAX_NAMES) are the C layout's, named once.
  - Nothing here touches a segment: this module knows no bus.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ._lib import ffi, lib


# slots of the node, handle and entry tables at most (csrc/bus/bus.c B1_MAX_SLOTS): a handle
# id keeps 24 bits of index; peers at most (csrc/bus/layout.h B1_MAX_PEERS): an entry names
# its queue's peer slot in 16 bits
MAX_SLOTS = (1 << 24) - 2
MAX_PEERS = (1 << 16) - 1
# well-known names at most (csrc/bus/view.h B1_MAX_NAMES): the table has twice as many slots
MAX_NAMES = 1 << 16
# the width of each field of struct b1_limits (csrc/bus/bus1.h)
_LIMIT_BITS = {name: 8 * ffi.sizeof(field.type) for name, field in ffi.typeof("struct b1_limits").fields}


@dataclass(frozen=True)
class Limits:
    """Sizes fixed when a bus is created (keyword arguments of `Bus.create`): table sizes
    (max_peers, max_nodes, max_handles, max_entries, max_names), per-message bounds
    (max_payload bytes, max_dests, max_msg_handles), the pool's bytes (pool_size), each
    peer's default quotas (quota_messages, quota_handles, quota_bytes, quota_fds), the
    receive spin before sleeping (spin_ns), and the fault injection (inject,
    inject_pause_ns).  `check()` names the first one out of range."""

    max_peers: int = 1024
    max_nodes: int = 65536
    max_handles: int = 262144
    max_entries: int = 262144
    max_payload: int = 1 << 20
    max_dests: int = 1024
    max_msg_handles: int = 256
    spin_ns: int = 50_000
    pool_size: int = 64 << 20
    quota_messages: int = 65536
    quota_handles: int = 65536
    quota_bytes: int = 16 << 20
    inject: int = 0
    inject_pause_ns: int = 0
    max_names: int = 1024
    quota_fds: int = 64

    def check(self) -> None:
        """Raise ValueError naming the first limit that cannot work and its bound (the rules
        of csrc/bus/bus.c limits_valid, plus the width of each field of struct b1_limits)."""
        self.to_c()

    def to_c(self) -> Any:
        """The limits as the C helper's struct b1_limits (a cffi object), once `check`'s
        rules hold: ValueError naming the first limit that breaks one."""
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"bus limit {f.name} must be a non-negative int, not {value!r}")
        for name, most in (("max_peers", MAX_PEERS), ("max_nodes", MAX_SLOTS), ("max_handles", MAX_SLOTS),
                           ("max_entries", MAX_SLOTS)):
            if not 1 <= getattr(self, name) <= most:
                raise ValueError(f"bus limit {name}={getattr(self, name)} must be from 1 to {most}")
        if not 1 <= self.max_dests <= min(self.max_entries, 65536):
            raise ValueError(f"bus limit max_dests={self.max_dests} must be from 1 to "
                             f"max_entries={self.max_entries} and at most 65536")
        if self.max_msg_handles > 65536:
            raise ValueError(f"bus limit max_msg_handles={self.max_msg_handles} must be at most 65536")
        if not 4096 <= self.pool_size <= 1 << 38:
            raise ValueError(f"bus limit pool_size={self.pool_size} must be from 4096 to 2**38 bytes")
        if self.max_payload + 32 > 1 << 27:
            raise ValueError(f"bus limit max_payload={self.max_payload} must be at most {(1 << 27) - 32}")
        if self.max_names > MAX_NAMES:
            raise ValueError(f"bus limit max_names={self.max_names} must be from 0 to {MAX_NAMES}")
        if self.inject > lib.B1_INJECT_FIFO:
            raise ValueError(f"bus limit inject={self.inject} is not a known fault kind")
        c = ffi.new("struct b1_limits *")
        for f in fields(self):  # the rest: what their fields hold (cffi refuses the others)
            try:
                setattr(c, f.name, getattr(self, f.name))
            except OverflowError:
                raise ValueError(f"bus limit {f.name}={getattr(self, f.name)} must be below "
                                 f"2**{_LIMIT_BITS[f.name]}") from None
        return c

    @classmethod
    def asked(cls, inject: str | int, limits: dict[str, Any]) -> Limits:
        """The limits `Bus.create(inject=inject, **limits)` asks for, checked: TypeError
        naming an unknown keyword, ValueError an unknown inject kind or the first limit
        out of range (`check`)."""
        unknown = set(limits) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"unknown bus limit(s): {', '.join(sorted(unknown))}; "
                            f"known: {', '.join(f.name for f in fields(cls))}")
        if isinstance(inject, str):
            if inject not in INJECT_KINDS:
                raise ValueError(f"unknown inject kind {inject!r}; known: {', '.join(INJECT_KINDS)}")
            inject = INJECT_KINDS[inject]
        lim = cls(**limits, inject=inject)
        lim.check()
        return lim


INJECT_KINDS: dict[str, int] = {
    "no-block": lib.B1_INJECT_NO_BLOCK,
    "no-sync": lib.B1_INJECT_NO_SYNC,
    "address-tiebreak": lib.B1_INJECT_ADDRESS_TIEBREAK,
    "fifo": lib.B1_INJECT_FIFO,
}
"""The deliberately broken ordering paths `Bus.create(inject=...)` selects, to prove that
the checker catches each (never for real use): ``no-block`` (no blocks staged before the
stamp), ``no-sync`` (no sync round), ``address-tiebreak`` (ties broken by entry address),
``fifo`` (per-queue arrival order, no clocks); docs/DESIGN.md, "Fault injection"."""
