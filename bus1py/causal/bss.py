"""bss: Birman-Schiper-Stephenson causal broadcast, serving unicast and multicast by broadcast.

Delivery condition: m from j, stamped VT_m, is delivered at i iff
    VT_m[j] = VT[j] + 1   and   VT_m[k] <= VT[k] for every k != j.
Source: seeds 002 and 003 (after Singhal & Shivaratri pp. 106-108); Birman, Schiper,
Stephenson, "Lightweight causal and atomic group multicast", ACM TOCS 9(3), 1991;
docs/PROTOCOL_RULES.md section 2.

The protocol is broadcast-only: a process whose VT[j] is not raised by every broadcast of j
blocks j's later messages forever. So every send, whatever its destinations, goes to all n-1
other processes (docs/PROTOCOL_RULES.md section 2, choice [R]). The destination list travels in the
header; a non-destination delivers the copy in the protocol's sense (VT advances, causal
order is kept) and then discards it: it never appears in `step.delivered`. Its copy carries
no payload and is reported with `WireCost(data=False)`; its control bytes are counted.

Wire: `k u16 | dests u16[k] | VT_m u32[n] | payload` (payload empty on non-destination
copies). Header 2 + 2k bytes; control 4n bytes, n dependents, on every one of the n-1 copies.

Invariants:
  - `vt[k]` is the number of k's broadcasts delivered here; `vt[me]` counts our own sends.
  - `pending[j]` (present only while non-empty) maps VT_m[j] -> held copy from j, with
    VT_m[j] > vt[j] and one copy per value; `_held` (the `held` property) is the total over
    all j, copies for non-destinations included: they are held until delivered and discarded.
  - After every input, no held copy is deliverable. Only j's next copy (VT_m[j] = vt[j] + 1)
    can be; while it is held it is parked in `waiters[k]` for a k != j with VT_m[k] > vt[k].
    A delivery from k raises only vt[k], so it retries just k's next copy and waiters[k].
"""
from __future__ import annotations

import struct
from functools import lru_cache
from itertools import compress, count
from operator import gt
from typing import Any

from .base import U32_MAX, Protocol, Step, WireCost, WireError


@lru_cache(maxsize=None)
def _u16s(k):
    return struct.Struct(f"<{k}H")


class BSS(Protocol):
    name = "bss"
    weight = 2.0
    style = ("#8c564b", "v", "-.")
    multicast = "broadcast"
    rule = "deliver m from j iff VT_m[j] = VT[j]+1 and VT_m[k] <= VT[k] for all k != j"

    def __init__(self, me: int, n: int):
        super().__init__(me, n)
        self.vt = [0] * n
        self.pending: dict[int, dict[int, Any]] = {}          # j -> {VT_m[j]: (VT_m tuple, for_me, payload)}
        self.waiters: dict[int, Any] = {}          # k -> senders whose next message waits for VT[k] to grow
        self._held = 0
        self._vts = struct.Struct(f"<{n}I")
        self._others = [d for d in range(n) if d != me]

    @property
    def held(self) -> int:
        return self._held

    def _send(self, dests, payload):
        vt = self.vt
        me, n = self.me, self.n
        if vt[me] >= U32_MAX:
            raise ValueError(f"process {me} exhausted its 32-bit broadcast counter")
        vt[me] += 1        # before the stamp is taken (docs/PROTOCOL_RULES.md section 2)
        k = len(dests)
        body = _u16s(k + 1).pack(k, *dests) + self._vts.pack(*vt)
        hl = 2 + 2 * k
        data_wire = body + payload
        data_cost = WireCost(hl, 4 * n, n, True)
        ctl_cost = WireCost(hl, 4 * n, n, False)
        dset = set(dests)
        step = Step()
        emit = step.emit
        for d in self._others:
            if d in dset:
                emit(d, data_wire, data_cost)
            else:
                emit(d, body, ctl_cost)
        return step

    def _decode(self, src, data):
        n = self.n
        size = len(data)
        if size < 2:
            raise WireError(f"wire truncated: {size} bytes, needs at least 2")
        k = data[0] | data[1] << 8
        if not 1 <= k < n:
            raise WireError(f"destination count {k} not in 1..{n - 1}")
        end = 2 + 2 * k + 4 * n
        if size < end:
            raise WireError(f"wire truncated: {size} bytes, header and VT need {end}")
        if k == 1:                      # unicast, the common case: no tuple, no set
            d = data[2] | data[3] << 8
            if d >= n or d == src:
                raise WireError(f"bad destination {d} from {src}")
            for_me = d == self.me
        else:
            dests = _u16s(k).unpack_from(data, 2)
            if max(dests) >= n or src in dests or len(set(dests)) != k:
                raise WireError(f"bad destination list {list(dests)} from {src}")
            for_me = self.me in dests
        vm = self._vts.unpack_from(data, 2 + 2 * k)
        payload = data[end:]
        if payload and not for_me:
            raise WireError("a copy to a non-destination carries a payload")
        s = vm[src]
        if s <= self.vt[src] or s in self.pending.get(src, ()):
            raise WireError(f"duplicate broadcast {s} from {src}")
        if vm[self.me] > self.vt[self.me]:
            raise WireError(f"stamp names our broadcast {vm[self.me]}, we sent {self.vt[self.me]}")
        return s, vm, for_me, payload

    def _receive(self, src, data):
        s, vm, for_me, payload = self._decode(src, data)
        vt = self.vt
        step = Step()
        # Given (a), delivery sets VT := max(VT, VT_m), which is VT[j] += 1: bump first, then
        # (a) and (b) together read VT_m <= VT componentwise.
        vt[src] += 1
        if s == vt[src]:
            # the first sender this copy is ahead of, if any (one pass: it is what a held
            # copy is parked on)
            k = next(compress(count(), map(gt, vm, vt)), None)
            if k is None:
                if for_me:
                    step.delivered.append((src, payload))
                if self._held:
                    self._release(src, step.delivered)
                return step
            self._park(src, k)          # the next from src, waiting for sender k
        vt[src] -= 1
        self.pending.setdefault(src, {})[s] = (vm, for_me, payload)
        self._held += 1
        return step

    def _park(self, j, k):
        """Park j's next copy on sender k, the first it is ahead of (vt[j] already bumped)."""
        w = self.waiters.get(k)
        if w is None:
            self.waiters[k] = {j}
        else:
            w.add(j)

    def _release(self, j0, delivered):
        """VT[j0] just advanced: retry j0's next message and every sender parked on j0, and so
        on for each delivery that follows (delivery raises only the sender's count)."""
        vt, pending, waiters = self.vt, self.pending, self.waiters
        work = [j0]
        while work:
            k = work.pop()
            retry = waiters.pop(k, set())
            retry.add(k)
            for j in sorted(retry):
                held = pending.get(j)
                if held is None:
                    continue
                e = held.get(vt[j] + 1)
                if e is None:
                    continue
                vt[j] += 1
                k = next(compress(count(), map(gt, e[0], vt)), None)
                if k is None:
                    del held[vt[j]]
                    if not held:
                        del pending[j]
                    self._held -= 1
                    if e[1]:
                        delivered.append((j, e[2]))
                    work.append(j)
                else:
                    self._park(j, k)
                    vt[j] -= 1


PROTOCOL = BSS
