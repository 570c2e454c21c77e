"""fifo: per-channel sequence numbers, the baseline that is *not* causal.

Delivery condition: a message from j is delivered at i iff its sequence number is the next one
expected on channel j -> i (`seq == expected[j]`); later ones wait, so each channel is FIFO
over a non-FIFO network. Nothing orders messages of different senders, so a chain
P1 -> P2 -> P3 may overtake P1's direct message to P3 (seed 000 section 4.1, Fig. 4).
Source: seed 000 section 2 ("sequence numbers on each communication channel").

Wire: `seq u32 | payload`. The 4-byte sequence number is the control information (one
dependent per copy); there is no header.

Invariants:
  - `out[d]` counts copies sent to d; `expected[j]` is the next sequence number from j.
  - `pending[j]` holds only sequence numbers > expected[j], each once.
"""
from __future__ import annotations

from .base import U32_MAX, Protocol, Reader, Step, WireCost, WireError, u32s


class Fifo(Protocol):
    name = "fifo"
    weight = 1.0
    style = ("#7f7f7f", "x", ":")
    causal = False
    rule = "deliver m from j iff seq(m) = expected[j]"

    def __init__(self, me: int, n: int):
        super().__init__(me, n)
        self.out = [0] * n
        self.expected = [1] * n
        self.pending: list[dict[int, bytes]] = [dict() for _ in range(n)]   # j -> {seq: payload}
        self._held = 0

    @property
    def held(self) -> int:
        return self._held

    def _send(self, dests, payload):
        step = Step()
        for d in dests:
            if self.out[d] >= U32_MAX:
                raise ValueError(f"channel {self.me}->{d} exhausted its 32-bit sequence numbers")
        for d in dests:
            self.out[d] += 1
            step.emit(d, u32s((self.out[d],)) + payload, WireCost(0, 4, 1, True))
        return step

    def _receive(self, src, data):
        r = Reader(data)
        seq = r.u32()
        payload = r.rest()
        pend = self.pending[src]
        if seq < self.expected[src] or seq in pend:
            raise WireError(f"duplicate sequence number {seq} from {src}")
        step = Step()
        if seq != self.expected[src]:
            pend[seq] = payload
            self._held += 1
            return step
        step.delivered.append((src, payload))
        nxt = seq + 1
        while nxt in pend:
            step.delivered.append((src, pend.pop(nxt)))
            self._held -= 1
            nxt += 1
        self.expected[src] = nxt
        return step


PROTOCOL = Fifo
