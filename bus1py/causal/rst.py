"""rst: Raynal-Schiper-Toueg matrix protocol, form B (one-event multicast).

Delivery condition: m from j, carrying the matrix ST, is delivered at i iff
    ST[j][i] = DELIV[j] + 1   and   ST[k][i] <= DELIV[k] for every k != j.
Source: seed 000 section 2 (the Kearns / Mattern-Fuenfrocken form of RST); Raynal, Schiper,
Toueg, "The causal ordering abstraction and a simple way to implement it", IPL 39(6), 1991;
docs/PROTOCOL_RULES.md section 4, form B.

Form B, not the paper's form A: a send to Dests first counts SENT[i][d] += 1 for *every*
d in Dests and attaches that one matrix to every copy, so each copy tells its receiver about
the other copies of the same send event (docs/PROTOCOL_RULES.md pitfall P1). Form A served as k
sequential unicasts is not causal for one-event multicast.

Wire: `ST u32[n*n] (row-major, ST[k][l] = messages from k to l) | payload`. No header:
the sender is `src`. Control 4n^2 bytes and n^2 dependents on every copy (seed 001 section
6.3 counts RST at n^2).

Selective receive (seed 000 section 4, docs/PROTOCOL_RULES.md section 8 tests T-A..T-C): with
`selective=True`, `receive` only buffers and never delivers; the application pulls with
`deliver_from(k)`, which delivers the next message from k if it is deliverable now. Matrix
knowledge lets any deliverable message from k be taken, whatever arrived before it.

Invariants:
  - `sent` (numpy '<u4', flat n*n row-major, so `tobytes()` is the wire encoding) is the
    elementwise maximum of every matrix sent or delivered here; `deliv[k]` counts messages
    from k delivered here; `_myrow` is sent[i][.] as ints.
  - `pending[j]` (present only while non-empty) maps ST[j][i] -> (column ST[.][i] as a
    tuple, the wire, payload), with ST[j][i] > deliv[j] and one entry per value.
  - In the default mode, after every input no held message is deliverable. Only j's next
    message (ST[j][i] = deliv[j] + 1) can be; while it is held it is parked in `waiters[k]`
    for a k != j with ST[k][i] > deliv[k]. A delivery from k raises only deliv[k], so it
    retries just k's next message and waiters[k]. (Selective mode parks nothing.)

Hot path: the column ST[.][i] and row ST[i][.] are read with one precompiled struct each (plain
ints, no array objects); numpy is used only for the n^2 elementwise maximum at delivery
(measured: 2-4 us at n = 50, where lists or array('I') take hundreds).
"""
from __future__ import annotations

import struct
from functools import lru_cache
from itertools import compress, count
from operator import gt, le
from typing import Any

import numpy as np

from .base import U32_MAX, Protocol, Step, WireCost, WireError

_U4 = np.dtype("<u4")


@lru_cache(maxsize=None)
def _structs(n):
    """Per-n codec shared by all machines: one column of a row-major n x n u32 matrix (one
    u32 every 4n bytes, read from offset 4*i), and one row."""
    return (struct.Struct("<" + ("I" + "x" * (4 * n - 4)) * (n - 1) + "I"),
            struct.Struct(f"<{n}I"))


class RST(Protocol):
    name = "rst"
    weight = 4.0
    style = ("#1f77b4", "s", "-")
    rule = "deliver m from j iff ST[j][i] = DELIV[j]+1 and ST[k][i] <= DELIV[k] for all k != j"

    def __init__(self, me: int, n: int, *, selective: bool = False):
        super().__init__(me, n)
        self.selective = bool(selective)
        self.sent = np.zeros(n * n, dtype=_U4)
        self.deliv = [0] * n
        self.pending: dict[int, Any] = {}
        self.waiters: dict[int, Any] = {}          # k -> senders whose next message waits for DELIV[k] to grow
        self._held = 0
        self._size = 4 * n * n
        self._cost = WireCost(0, self._size, n * n, True)
        self._col, self._row = _structs(n)
        self._col_at = 4 * me
        self._row_at = 4 * n * me
        self._myrow = [0] * n      # sent[me][.] as ints, for validating wires

    @property
    def held(self) -> int:
        return self._held

    def _send(self, dests, payload):
        myrow = self._myrow
        if max(myrow[d] for d in dests) >= U32_MAX:
            raise ValueError(f"a channel from {self.me} exhausted its 32-bit counter")
        base = self.me * self.n
        for d in dests:
            myrow[d] += 1
        self.sent[[base + d for d in dests]] += 1
        wire = self.sent.tobytes() + payload
        step = Step()
        cost = self._cost
        for d in dests:
            step.emit(d, wire, cost)
        return step

    def _receive(self, src, data):
        size = self._size
        if len(data) < size:
            raise WireError(f"wire truncated: {len(data)} bytes, the matrix needs {size}")
        col = self._col.unpack_from(data, self._col_at)
        s = col[src]
        held = self.pending.get(src)
        if s <= self.deliv[src] or (held is not None and s in held):
            raise WireError(f"duplicate message {s} from {src}")
        if not all(map(le, self._row.unpack_from(data, self._row_at), self._myrow)):
            raise WireError(f"matrix from {src} counts messages from us that we never sent")
        payload = data[size:]
        step = Step()
        if not self.selective:
            if self._try(src, col, data):
                step.delivered.append((src, payload))
                if self._held:
                    self._release(src, step.delivered)
                return step
            if s == self.deliv[src] + 1:    # the next from src, waiting for another sender
                self._wait(src, col)
        if held is None:
            held = self.pending[src] = {}
        held[s] = (col, data, payload)
        self._held += 1
        return step

    def _try(self, j, col, data) -> bool:
        """Deliver (apply) a message from j, column `col` of its matrix, if the condition holds."""
        deliv = self.deliv
        deliv[j] += 1
        if col[j] == deliv[j] and all(map(le, col, deliv)):
            sent = self.sent
            np.maximum(sent, np.frombuffer(data, _U4, len(sent)), out=sent)
            return True
        deliv[j] -= 1
        return False

    def _wait(self, j, col):
        """Park j's next message on the first sender k != j whose count it is ahead of."""
        deliv = self.deliv
        deliv[j] += 1
        k = next(compress(count(), map(gt, col, deliv)))
        deliv[j] -= 1
        w = self.waiters.get(k)
        if w is None:
            self.waiters[k] = {j}
        else:
            w.add(j)

    def _release(self, j0, delivered):
        """DELIV[j0] just grew: retry j0's next message and every sender parked on j0, and so
        on for each delivery that follows (a delivery raises only its sender's count)."""
        pending, deliv, waiters = self.pending, self.deliv, self.waiters
        work = [j0]
        while work:
            k = work.pop()
            retry = waiters.pop(k, set())
            retry.add(k)
            for j in sorted(retry):
                held = pending.get(j)
                if held is None:
                    continue
                e = held.get(deliv[j] + 1)
                if e is None:
                    continue
                if self._try(j, e[0], e[1]):
                    del held[deliv[j]]
                    if not held:
                        del pending[j]
                    self._held -= 1
                    delivered.append((j, e[2]))
                    work.append(j)
                else:
                    self._wait(j, e[0])

    def deliver_from(self, k: int):
        """Selective receive: the next message from k if deliverable now, else None."""
        if not self.selective:
            raise ValueError("deliver_from needs a machine made with selective=True")
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < self.n or k == self.me:
            raise ValueError(f"k must be another process id in 0..{self.n - 1}, got {k!r}")
        held = self.pending.get(k)
        if not held:
            return None
        e = held.get(self.deliv[k] + 1)
        if e is None or not self._try(k, e[0], e[1]):
            return None
        del held[self.deliv[k]]
        if not held:
            del self.pending[k]
        self._held -= 1
        return e[2]


PROTOCOL = RST
