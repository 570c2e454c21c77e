"""buffer: the Mattern-Fuenfrocken buffer protocol (FIFO output and input buffers, low ACKs).

Delivery condition: messages are delivered in their order of arrival at the input buffer;
an output buffer posts its next message only after the previous one was acknowledged.
Source: seed 000 section 3 (Mattern, Fuenfrocken, "A non-blocking lightweight implementation
of causal order message delivery", LNCS 938, 1995); restriction in seed 000 section 4;
docs/PROTOCOL_RULES.md section 8.

Nothing is piggybacked on data. Each data wire is answered by one ACK control wire from the
input buffer (IB) of the receiver to the output buffer (OB) of the sender. At most one copy per
OB is ever in flight, so the network need not be FIFO; footnote 4's shortcut (skip the ACK
wait between consecutive messages to the same receiver) needs a FIFO network and is not used.

Multicast: served as k sequential point-to-point sends, in the order of `dests`, each copy
posted only after the previous copy's ACK came back (`multicast = "sequential"`). Causal order
holds under that reading, where a multicast is k send events in that order. It does NOT hold
for a multicast read as one send event (docs/PROTOCOL_RULES.md pitfall P1): M to {a, b}, a delivers M
and sends M2 to b, and M2 may reach IB_b before M's copy to b, which is posted after a's
ACK. Unicast is fully causal.

Selective receive (seed 000 section 4): with `selective=True`, `receive` only fills IB and the
application pulls with `deliver_from(k)`, which can take only the IB head and only if it came
from k. IB is a FIFO with no dependency knowledge, so a program that selects a different
order than arrival blocks forever, even where causal order allows it (tests T-A, T-B).

Wire: data `0x00 u8 | payload` (header 1, control 0, no dependents); ACK `0x01 u8` (its one
byte is its control, since the ACK exists only as control; one control message per copy).

Invariants:
  - `outstanding` is the destination of the one posted, unacknowledged copy, or None;
    `ob` holds (dest, payload) accepted but not yet posted, and is empty when nothing is
    outstanding.
  - `ib` holds (src, payload) received and acknowledged but not delivered; it stays empty in
    the default (non-selective) mode, where every arrival is delivered at once.
"""
from __future__ import annotations

from collections import deque
from typing import Any

from .base import Protocol, Step, WireCost, WireError

DATA = 0
ACK = 1
_ACK_WIRE = bytes((ACK,))
_ACK_COST = WireCost(0, 1, 0, False)


class Buffer(Protocol):
    name = "buffer"
    weight = 1.5
    style = ("#bcbd22", "*", ":")
    multicast = "sequential"
    rule = "deliver in input-buffer arrival order; post the next output only after the ACK"

    def __init__(self, me: int, n: int, *, selective: bool = False):
        super().__init__(me, n)
        self.selective = bool(selective)
        self.ob: deque[Any] = deque()
        self.outstanding = None
        self.ib: deque[Any] = deque()

    @property
    def held(self) -> int:
        return len(self.ob) + len(self.ib)

    def _send(self, dests, payload):
        step = Step()
        ob = self.ob
        for d in dests:
            ob.append((d, payload))
        if self.outstanding is None:
            self._post(step)
        return step

    def _post(self, step):
        d, payload = self.ob.popleft()
        self.outstanding = d
        step.emit(d, b"\x00" + payload, WireCost(1, 0, 0, True))

    def _receive(self, src, data):
        if not data:
            raise WireError("empty wire: no type tag")
        tag = data[0]
        step = Step()
        if tag == DATA:
            step.emit(src, _ACK_WIRE, _ACK_COST)
            if self.selective:
                self.ib.append((src, data[1:]))
            else:
                step.delivered.append((src, data[1:]))
        elif tag == ACK:
            if len(data) != 1:
                raise WireError(f"ACK wire of {len(data)} bytes, expected 1")
            if self.outstanding != src:
                raise WireError(f"ACK from {src}, but the outstanding copy went to "
                                f"{self.outstanding}")
            self.outstanding = None
            if self.ob:
                self._post(step)
        else:
            raise WireError(f"unknown wire type {tag}")
        return step

    def deliver_from(self, k: int):
        """Selective receive: the IB head's payload if it came from k, else None."""
        if not self.selective:
            raise ValueError("deliver_from needs a machine made with selective=True")
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < self.n or k == self.me:
            raise ValueError(f"k must be another process id in 0..{self.n - 1}, got {k!r}")
        ib = self.ib
        if ib and ib[0][0] == k:
            return ib.popleft()[1]
        return None


PROTOCOL = Buffer
