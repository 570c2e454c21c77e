"""The interface every causal-order protocol implements, and the wire codec they share.

Invariants every protocol module keeps (tests check them for all protocols):
  - Sans-I/O: no sockets, clocks, threads or randomness. Inputs are `send(dests, payload)`
    and `receive(src, data)`; outputs are the returned `Step`. The same inputs in the same
    order always give the same outputs, byte for byte.
  - All-or-nothing: a call that raises (`ValueError` for bad arguments, `WireError` for bytes
    that do not decode) has changed nothing.
  - Measured, never estimated: every wire's cost (`WireCost`) is taken from the lengths of the
    sections actually encoded, so `header + control + len(payload) == len(wire)` for a data
    wire and `header + control == len(wire)` for a control-only wire.
  - Sizes follow seed 001 section 6.2: counters and timestamps are 4 bytes (u32), process ids
    2 bytes (u16), little-endian.
  - Self-sends are refused (docs/PROTOCOL_RULES.md P3): a destination list never contains `me`.
  - A multicast is one send event (docs/PROTOCOL_RULES.md P1): every copy tells its receiver what it
    must about the other destinations of the same send.
"""
from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import ClassVar, NamedTuple


class WireError(ValueError):
    """Bytes handed to `receive` that are not a wire of this protocol (nothing was changed)."""


class WireCost(NamedTuple):
    """What one wire costs beyond its payload, measured from its encoding.

    Attributes:
        header: per-message framing the study does not count (type tag, sender id, the
            message's own timestamp or sequence number, its destination list).
        control: the control information the study counts (seed 001 section 6.2: "CI_m +
            DC_m in bytes"); for a control-only wire, its whole body beyond the header.
        dependents: the units seed 001 Fig. 2 counts (docs/PROTOCOL_RULES.md P4), per
            protocol.
        data: True when the wire carries the application payload to one of its
            destinations; False for acknowledgements, stage replies, and copies sent only
            because the protocol is broadcast-only (BSS to non-destinations).
    """

    header: int
    control: int
    dependents: int
    data: bool


@dataclass(slots=True)
class Step:
    """What one input produced: wires to transmit and payloads handed to the application.

    `wires[i]` is (destination process, bytes) and `costs[i]` its cost; `delivered` is
    (original sender, payload) in delivery order.
    """

    wires: list = field(default_factory=list)
    delivered: list = field(default_factory=list)
    costs: list = field(default_factory=list)

    def emit(self, dest: int, data: bytes, cost: WireCost) -> None:
        self.wires.append((dest, data))
        self.costs.append(cost)


class Protocol:
    """Base class: argument checks and the attributes the simulator reads.

    Subclasses set the class attributes and implement `_send` and `_receive`; `held` counts
    messages received but not yet delivered (plus, for protocols that buffer on the sending
    side, messages accepted but not yet transmitted).
    """

    name: ClassVar[str]
    #: guarantees causal delivery for one-event multicast over a non-FIFO network
    causal: ClassVar[bool] = True
    #: how a multicast is served: "native" (copies to the destinations only), "broadcast"
    #: (a copy to every other process; non-destinations discard it), or "sequential"
    #: (k separate point-to-point sends, which is not one-event multicast)
    multicast: ClassVar[str] = "native"
    #: a one-line statement of the delivery condition, for tables and --help
    rule: ClassVar[str] = ""
    #: what a reader is told the protocol is, where that is more than its name
    label: ClassVar[str | None] = None
    #: relative per-delivery cost of its bookkeeping (a sweep submits the costliest runs first)
    weight: ClassVar[float]
    #: colour, marker and line style of its curves in plots; no two protocols alike
    style: ClassVar[tuple[str, str, str]]

    def __init__(self, me: int, n: int):
        if not isinstance(n, int) or isinstance(n, bool) or n < 2 or n > 0xFFFF:
            raise ValueError(f"n must be an integer from 2 to 65535, got {n!r}")
        if not isinstance(me, int) or isinstance(me, bool) or not 0 <= me < n:
            raise ValueError(f"me must be a process id in 0..{n - 1}, got {me!r}")
        self.me = me
        self.n = n

    # ---- public API ----

    def send(self, dests: Iterable[int], payload: bytes) -> Step:
        """The application sends `payload` to the processes `dests`: the wires to transmit
        (and anything delivered locally).  ValueError for a bad destination or a payload
        that is not bytes."""
        d = self._check_dests(dests)
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise ValueError(f"payload must be bytes, got {type(payload).__name__}")
        return self._send(d, bytes(payload))

    def receive(self, src: int, data: bytes) -> Step:
        """A wire `data` arrived from process `src`: the payloads now deliverable in causal
        order, and any wires the protocol answers with.  ValueError for a bad `src` or
        non-bytes data; WireError for a malformed wire."""
        if not isinstance(src, int) or isinstance(src, bool) or not 0 <= src < self.n \
                or src == self.me:
            raise ValueError(f"src must be another process id in 0..{self.n - 1}, got {src!r}")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ValueError(f"data must be bytes, got {type(data).__name__}")
        return self._receive(src, bytes(data))

    @property
    def held(self) -> int:
        return 0

    @property
    def busy(self) -> bool:
        """True while a send accepted earlier has not completed in the protocol's own sense
        (bus1: its transaction has not passed the sync round), so what this process tells
        others outside the protocol may not yet be ordered after that send."""
        return False

    # ---- for subclasses ----

    def _send(self, dests: list, payload: bytes) -> Step:
        raise NotImplementedError

    def _receive(self, src: int, data: bytes) -> Step:
        raise NotImplementedError

    def _check_dests(self, dests) -> list:
        try:
            d = [int(x) for x in dests]
        except (TypeError, ValueError):
            raise ValueError(f"dests must be a list of process ids, got {dests!r}") from None
        if not d:
            raise ValueError("dests must name at least one process")
        if len(set(d)) != len(d):
            raise ValueError(f"dests has a duplicate process id: {d}")
        for x in d:
            if not 0 <= x < self.n:
                raise ValueError(f"dests: {x} is not a process id in 0..{self.n - 1}")
            if x == self.me:
                raise ValueError(f"dests: {x} is the sending process itself (self-sends are "
                                 "delivered locally, outside the protocol)")
        return d


# ---- the wire codec: u16 ids, u32 counters, little-endian ----

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
U32_MAX = 0xFFFFFFFF


def u16s(values) -> bytes:
    return struct.pack(f"<{len(values)}H", *values)


def u32s(values) -> bytes:
    return struct.pack(f"<{len(values)}I", *values)


class Reader:
    """Reads a wire front to back; every short read raises WireError."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int = 0):
        self.data = data
        self.pos = pos

    def _take(self, size: int) -> int:
        p = self.pos
        if p + size > len(self.data):
            raise WireError(f"wire truncated: needs {size} bytes at offset {p}, "
                            f"has {len(self.data) - p}")
        self.pos = p + size
        return p

    def u8(self) -> int:
        return self.data[self._take(1)]

    def u16(self) -> int:
        return _U16.unpack_from(self.data, self._take(2))[0]

    def u32(self) -> int:
        return _U32.unpack_from(self.data, self._take(4))[0]

    def u16s(self, count: int) -> tuple:
        return struct.unpack_from(f"<{count}H", self.data, self._take(2 * count))

    def u32s(self, count: int) -> tuple:
        return struct.unpack_from(f"<{count}I", self.data, self._take(4 * count))

    def pid(self, n: int) -> int:
        """A u16 process id, checked to be in 0..n-1."""
        x = self.u16()
        if x >= n:
            raise WireError(f"process id {x} out of range 0..{n - 1}")
        return x

    def pids(self, count: int, n: int) -> tuple:
        xs = self.u16s(count)
        for x in xs:
            if x >= n:
                raise WireError(f"process id {x} out of range 0..{n - 1}")
        return xs

    def rest(self) -> bytes:
        p = self.pos
        self.pos = len(self.data)
        return self.data[p:]


@lru_cache(maxsize=4096)
def mask_ids(mask: int) -> tuple:
    """The process ids of a destination bitmask, lowest first (cached: the same few masks
    recur on every send)."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return tuple(out)


# ---- the columnar layout of the dependency-list protocols (prs, ks, jpcy) ----
#
#   header struct (sender u16 | counter u32 | section counts...) | columns
#
# Columns are runs of u16 ('H') or u32 ('I') values back to back; a wire is read in two
# strides, the ones whose counts the header gives, then the ones whose counts are sums of
# the first stride's length columns.

_SIZE = {"H": 2, "I": 4}


def pack_columns(spec: str, *columns) -> bytes:
    """Columns `columns[i]` of type `spec[i]` ('H' u16, 'I' u32), back to back."""
    return b"".join([struct.pack(f"<{len(c)}{ch}", *c) for ch, c in zip(spec, columns)])


def read_head(data: bytes, src: int, head: struct.Struct, counter: str) -> tuple:
    """The header fields of a columnar wire: (sender, counter, counts...); the sender must be
    `src` and the counter (named `counter` in errors) nonzero."""
    if len(data) < head.size:
        raise WireError(f"wire truncated: {len(data)} bytes, header needs {head.size}")
    fields = head.unpack_from(data, 0)
    if fields[0] != src:
        raise WireError(f"wire names sender {fields[0]} but came from {src}")
    if fields[1] == 0:
        raise WireError(f"{counter} 0 is never sent")
    return fields


def read_columns(data: bytes, pos: int, spec: str, counts) -> tuple:
    """(columns as tuples, position after them); WireError if the wire is too short."""
    need = pos
    for ch, k in zip(spec, counts):
        need += _SIZE[ch] * k
    if len(data) < need:
        raise WireError(f"wire truncated: {len(data)} bytes, sections need {need}")
    cols = []
    for ch, k in zip(spec, counts):
        cols.append(struct.unpack_from(f"<{k}{ch}", data, pos))
        pos += _SIZE[ch] * k
    return cols, pos


def read_entries(data: bytes, pos: int, senders, counters, lens, bits: list, forbidden: int,
                 what: str):
    """The entries of a columnar wire, whose Dests are `lens[i]` u16 ids each, back to back
    from `pos`, with `bits[x] == 1 << x` for every process id x (the table is also n): (sender -> {counter: Dests bitmask} in wire order, each entry's mask in wire
    order, the position after the ids). WireError if the wire is too short, an id is not
    below n, a list names an id twice, or a mask shares a bit with `forbidden` or its own
    sender (nobody sends to itself); `what` names an entry in errors.

    One plain loop: the lists are short (about two ids at n=50) and so are the runs of one
    sender, so numpy or per-run dict building cost more than they save."""
    total = sum(lens)
    end = pos + 2 * total
    if len(data) < end:
        raise WireError(f"wire truncated: {len(data)} bytes, sections need {end}")
    ids = struct.unpack_from(f"<{total}H", data, pos)
    n = len(bits)
    if total and max(ids) >= n:
        raise WireError(f"a process id is out of range 0..{n - 1}")
    rows: dict = {}
    masks = []
    at = 0
    for s, t, ln in zip(senders, counters, lens):
        if ln == 1:
            mask = bits[ids[at]]
            at += 1
        elif not ln:
            mask = 0
        else:
            mask = 0
            for x in ids[at:at + ln]:
                mask |= bits[x]
            at += ln
            if mask.bit_count() != ln:
                raise WireError(f"{what} ({s}, {t}) lists a destination twice")
        if mask & (forbidden | bits[s]):
            raise WireError(f"bad {what} ({s}, {t}, {mask:#x})")
        masks.append(mask)
        row = rows.get(s)
        if row is None:
            rows[s] = {t: mask}
        else:
            row[t] = mask
    return rows, masks, end
