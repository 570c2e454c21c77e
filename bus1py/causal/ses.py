"""ses: Schiper-Eggli-Sandoz, vector clocks plus per-destination vectors, one-event multicast.

Delivery condition: m (t_M, V_M) is delivered at i iff V_M has no pair for i, or its pair
(i, t) satisfies t <= t_i componentwise (i's current vector time, advanced only on delivery).
Source: seed 002 (after Singhal & Shivaratri pp. 106-108); Schiper, Eggli, Sandoz, "A new
algorithm to implement causal ordering", WDAG 1989, LNCS 392; docs/PROTOCOL_RULES.md section 3.

One-event multicast (docs/PROTOCOL_RULES.md pitfall P1): all copies of a send share t_M, and the copy
to d carries V_i with (d', t_M) for every other d' in Dests. Since every pair in V_i is <= t_i
<= t_M, that sup-merge is a plain overwrite. The pair for d itself is V_i's old one.

Wire: `m u16 | t_M u32[n] | m x (pid u16, t u32[n]) | payload`. Header 2 bytes (the pair
count); control 4n + m(2 + 4n) bytes. Dependents are counted as vector timestamps, 1 + m
(t_M and one per pair), the unit docs/PROTOCOL_RULES.md section 10 uses; integers would be n(1 + m).

Invariants:
  - `t` (list of n ints) is the vector clock: it ticks t[me] at every send and every
    delivery and merges by max on delivery, never on receipt.
  - `V` (numpy '<u4', n x n, aligned so the per-delivery merge runs at full speed): row P is
    the pair (P, V[P]). `present` is the set of P != me that have a pair; only those rows
    are ever sent (row me may hold our own pair, merged from wires, and is never read).
    Every pair is <= t componentwise.
  - A message from j with t_M[j] <= t[j] was already delivered: j's send event is known here
    only through messages that carry the pair (me, >= t_M) and so were delivered after it.
    Such a wire is a duplicate and raises WireError.
  - `pending[j]` (present only while non-empty) maps t_M[j] -> held message from j;
    after every input no held message is deliverable. Messages from one sender are
    delivered in t_M[j] order (each carries the pair (me, t_M) of the previous one), so only
    j's oldest held message can be; it is parked in `waiters[k][j]` (and `parked[j] = k`)
    for a k where its pair is ahead of t. Each delivery retries only the parked messages
    whose component k has reached the needed value.

Validation: a wire must decode, name distinct processes other than its sender, carry a pair
for us that is <= t_M and a clock that knows no event of ours we have not had. The values of
pairs for third processes are not checked (they only ever raise what is merged).

Hot path: the clock and our own pair are read with precompiled structs and compared as
Python ints (n <= 50 makes that cheaper than a numpy reduction); numpy does the n x m work
only: one record build per send and one max-merge of the pairs per delivery (two slices
when the wire has a pair for every process but its sender, the steady state).
"""
from __future__ import annotations

import struct
from bisect import bisect_left
from functools import lru_cache
from itertools import compress, count
from operator import gt, le
from typing import Any

import numpy as np

from .base import U32_MAX, Protocol, Step, WireCost, WireError

_H = struct.Struct("<H")


@lru_cache(maxsize=None)
def _layout(n):
    """Per-n codec shared by all machines: pair record dtype, clock struct, and for each
    sender j the pair ids of a full list (every process but j, in id order)."""
    entry = np.dtype([("p", "<u2"), ("v", "<u4", (n,))])
    all_but = [tuple(p for p in range(n) if p != j) for j in range(n)]
    return entry, struct.Struct(f"<{n}I"), all_but


@lru_cache(maxsize=None)
def _pid_struct(n, m):
    """Reads the m pair ids of a wire, skipping each pair's vector."""
    return struct.Struct("<" + ("H" + "x" * (4 * n)) * m)


class SES(Protocol):
    name = "ses"
    weight = 3.0
    style = ("#e377c2", "P", "-.")
    rule = "deliver m at i iff V_M has no pair (i, t) or its pair has t <= t_i"

    def __init__(self, me: int, n: int):
        super().__init__(me, n)
        self.t = [0] * n
        self._entry, self._vec, self._all_but = _layout(n)
        self.V = np.zeros((n, n), dtype=np.dtype("<u4"))
        self.present: set[Any] = set()
        self.pending: dict[int, dict[int, Any]] = {}          # j -> {t_M[j]: (cond, t_M, pids, wire, j, payload)}
        self.waiters: dict[int, dict[int, int]] = {}          # k -> {j: value t[k] must reach for j's oldest message}
        self.parked: dict[int, int] = {}           # j -> the k its oldest held message is parked on
        self._held = 0
        self._es = 2 + 4 * n

    @property
    def held(self) -> int:
        return self._held

    def _send(self, dests, payload):
        me, n, es = self.me, self.n, self._es
        t, V, present = self.t, self.V, self.present
        if t[me] >= U32_MAX:
            raise ValueError(f"process {me} exhausted its 32-bit clock")
        t[me] += 1
        tmb = self._vec.pack(*t)
        idx = sorted(present.union(dests))
        rec = np.empty(len(idx), self._entry)
        rec["p"] = idx
        rec["v"] = V[idx]
        dpos = [bisect_left(idx, d) for d in dests]
        rec["v"][dpos] = t                  # sup(old, t_M) = t_M: every pair is <= t
        full = rec.tobytes()
        m_all = len(idx)
        step = Step()
        for d, k in zip(dests, dpos):
            a, b = k * es, (k + 1) * es
            if d in present:                # the copy to d carries d's old pair
                m = m_all
                pairs = b"".join((full[:a], _H.pack(d), V[d].tobytes(), full[b:]))
            else:
                m = m_all - 1
                pairs = full[:a] + full[b:]
            step.emit(d, b"".join((_H.pack(m), tmb, pairs, payload)),
                      WireCost(2, 4 * n + m * es, 1 + m, True))
        V[dests] = t
        present.update(dests)
        return step

    def _decode(self, src, data):
        n, me, es = self.n, self.me, self._es
        size = len(data)
        if size < 2:
            raise WireError(f"wire truncated: {size} bytes, needs at least 2")
        m = _H.unpack_from(data)[0]
        if m >= n:
            raise WireError(f"pair count {m} exceeds {n - 1}")
        end = 2 + 4 * n + m * es
        if size < end:
            raise WireError(f"wire truncated: {size} bytes, clock and pairs need {end}")
        tm = self._vec.unpack_from(data, 2)
        s = tm[src]
        t = self.t
        if s == 0:
            raise WireError(f"clock from {src} has no send event of {src}")
        if tm[me] > t[me]:
            raise WireError(f"clock from {src} names our event {tm[me]}, we are at {t[me]}")
        if s <= t[src] or s in self.pending.get(src, ()):
            raise WireError(f"duplicate message {s} from {src}")
        cond = pids = None
        if m:
            base = 2 + 4 * n
            pl = _pid_struct(n, m).unpack_from(data, base)
            if max(pl) >= n or src in pl or len(set(pl)) != m:
                raise WireError(f"bad pair list {list(pl)} from {src}")
            if me in pl:
                cond = self._vec.unpack_from(data, base + pl.index(me) * es + 2)
                if not all(map(le, cond, tm)):
                    raise WireError("our pair's vector exceeds the message's clock")
            pids = pl
        return s, (cond, tm, pids, data, src, data[end:])

    def _receive(self, src, data):
        s, e = self._decode(src, data)
        step = Step()
        cond = e[0]
        if cond is None or all(map(le, cond, self.t)):
            self._apply(e)
            step.delivered.append((src, e[5]))
            if self._held:
                self._release(step.delivered)
            return step
        held = self.pending.get(src)
        if held is None:
            held = self.pending[src] = {}
        held[s] = e
        self._held += 1
        if s == min(held):                  # src's new oldest: park it instead of the old one
            old = self.parked.pop(src, None)
            if old is not None:
                del self.waiters[old][src]
            self._park(src, cond)
        return step

    def _park(self, j, cond):
        """Park j's oldest held message on the first component its pair is ahead of t."""
        t = self.t
        k = next(compress(count(), map(gt, cond, t)))
        self.parked[j] = k
        w = self.waiters.get(k)
        if w is None:
            self.waiters[k] = {j: cond[k]}
        else:
            w[j] = cond[k]

    def _apply(self, e):
        _, tm, pids, data, src, _ = e
        if pids:
            V = self.V
            rec = np.frombuffer(data, self._entry, len(pids), 2 + 4 * self.n)
            # our own pair (if any) lands in row me, which is never sent
            if pids == self._all_but[src]:  # two slices, no gather/scatter
                vecs = rec["v"]
                np.maximum(V[:src], vecs[:src], out=V[:src])
                np.maximum(V[src + 1:], vecs[src:], out=V[src + 1:])
            else:
                rows = rec["p"]
                V[rows] = np.maximum(V[rows], rec["v"])
            present = self.present
            if len(present) < self.n - 1:   # once every other process has a pair, it stays
                present.update(pids)
                present.discard(self.me)
        t = self.t
        t[:] = map(max, t, tm)
        t[self.me] += 1

    def _release(self, delivered):
        """t grew: retry every sender whose parked message's blocking component is now
        reached, delivering its held messages oldest first, until nothing is ready."""
        pending, waiters, parked, t = self.pending, self.waiters, self.parked, self.t
        while waiters:
            ready = []
            for k in list(waiters):
                w = waiters[k]
                tk = t[k]
                hit = [j for j, need in w.items() if need <= tk]
                for j in hit:
                    del w[j]
                    del parked[j]
                if not w:
                    del waiters[k]
                ready += hit
            if not ready:
                return
            for j in sorted(ready):
                held = pending[j]
                while held:
                    s = min(held)
                    e = held[s]
                    if not all(map(le, e[0], t)):
                        self._park(j, e[0])
                        break
                    del held[s]
                    self._held -= 1
                    self._apply(e)
                    delivered.append((j, e[5]))
                if not held:
                    del pending[j]


PROTOCOL = SES
