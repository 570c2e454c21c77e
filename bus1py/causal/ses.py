"""ses: Schiper-Eggli-Sandoz, vector clocks plus per-destination vectors, one-event multicast.

Delivery condition: m (t_M, V_M) is delivered at i iff V_M has no pair for i, or its pair
(i, t) satisfies t <= t_i componentwise (i's current vector time, advanced only on delivery).
Source: seed 002 (after Singhal & Shivaratri pp. 106-108); Schiper, Eggli, Sandoz, "A new
algorithm to implement causal ordering", WDAG 1989, LNCS 392; PROTOCOLS.md section 3.

One-event multicast (PROTOCOLS.md pitfall P1): all copies of a send share t_M, and the copy
to d carries V_i with (d', t_M) for every other d' in Dests. Since every pair in V_i is <= t_i
<= t_M, that sup-merge is a plain overwrite. The pair for d itself is V_i's old one.

Wire: `m u16 | t_M u32[n] | m x (pid u16, t u32[n]) | payload`. Header 2 bytes (the pair
count); control 4n + m(2 + 4n) bytes. Dependents are counted as vector timestamps, 1 + m
(t_M and one per pair), the unit PROTOCOLS.md section 10 uses; integers would be n(1 + m).

Invariants:
  - `t` (numpy, n) is the vector clock: it ticks t[me] at every send and every delivery
    and merges by max on delivery, never on receipt.
  - `V` (numpy '<u4', n x n): row P is the pair (P, V[P]), a zero row means no pair. Row me
    stays zero. Every row is <= t componentwise.
  - A message from j with t_M[j] <= t[j] was already delivered: j's send event is known here
    only through messages that carry the pair (me, >= t_M) and so were delivered after it.
    Such a wire is a duplicate and raises WireError.
  - `pending[j]` (present only while non-empty) maps t_M[j] -> held message from j;
    after every input no held message is deliverable.
"""
from __future__ import annotations

import struct

import numpy as np

from .base import U32_MAX, Protocol, Step, WireCost, WireError

_U4 = np.dtype("<u4")
_H = struct.Struct("<H")


class SES(Protocol):
    name = "ses"
    rule = "deliver m at i iff V_M has no pair (i, t) or its pair has t <= t_i"

    def __init__(self, me: int, n: int):
        super().__init__(me, n)
        self.t = np.zeros(n, dtype=np.int64)
        self.V = np.zeros((n, n), dtype=_U4)
        self.pending = {}          # j -> {t_M[j]: (cond vector or None, t_M, pids, vecs, payload)}
        self._held = 0
        self._entry = np.dtype([("p", "<u2"), ("v", "<u4", (n,))])
        self._es = 2 + 4 * n
        self._ids = np.arange(n)

    @property
    def held(self) -> int:
        return self._held

    def _send(self, dests, payload):
        me, n, es = self.me, self.n, self._es
        t, V = self.t, self.V
        if t[me] >= U32_MAX:
            raise ValueError(f"process {me} exhausted its 32-bit clock")
        t[me] += 1
        tm = t.astype(_U4)
        W = V.copy()
        W[dests] = tm
        idx = np.flatnonzero(W.any(axis=1))
        rec = np.empty(len(idx), self._entry)
        rec["p"] = idx
        rec["v"] = W[idx]
        full = rec.tobytes()
        tmb = tm.tobytes()
        pos = np.searchsorted(idx, dests).tolist()
        has_old = V[dests].any(axis=1).tolist()
        m_all = len(idx)
        step = Step()
        for d, p, old in zip(dests, pos, has_old):
            a, b = p * es, (p + 1) * es
            if old:
                m = m_all
                pairs = b"".join((full[:a], _H.pack(d), V[d].tobytes(), full[b:]))
            else:
                m = m_all - 1
                pairs = full[:a] + full[b:]
            wire = b"".join((_H.pack(m), tmb, pairs, payload))
            step.emit(d, wire, WireCost(2, 4 * n + m * es, 1 + m, True))
        V[dests] = tm
        return step

    def _decode(self, src, data):
        n, me = self.n, self.me
        size = len(data)
        if size < 2:
            raise WireError(f"wire truncated: {size} bytes, needs at least 2")
        m = _H.unpack_from(data)[0]
        if m >= n:
            raise WireError(f"pair count {m} exceeds {n - 1}")
        end = 2 + 4 * n + m * self._es
        if size < end:
            raise WireError(f"wire truncated: {size} bytes, clock and pairs need {end}")
        tm = np.frombuffer(data, _U4, n, 2)
        rec = np.frombuffer(data, self._entry, m, 2 + 4 * n)
        pids = rec["p"].astype(np.intp)
        vecs = rec["v"]
        s = int(tm[src])
        if s == 0:
            raise WireError(f"clock from {src} has no send event of {src}")
        if m:
            if pids.max() >= n or (pids == src).any() or len(np.unique(pids)) != m:
                raise WireError(f"bad pair list {pids.tolist()} from {src}")
            if (vecs > tm).any():
                raise WireError("a pair's vector exceeds the message's clock")
        if tm[me] > self.t[me]:
            raise WireError(f"clock from {src} names our event {tm[me]}, we are at {self.t[me]}")
        if s <= self.t[src] or s in self.pending.get(src, ()):
            raise WireError(f"duplicate message {s} from {src}")
        mine = np.flatnonzero(pids == me)
        cond = vecs[mine[0]] if len(mine) else None
        keep = pids != me
        return s, (cond, tm, pids[keep], vecs[keep], data[end:])

    def _receive(self, src, data):
        s, e = self._decode(src, data)
        step = Step()
        cond = e[0]
        if cond is None or (cond <= self.t).all():
            self._apply(e)
            step.delivered.append((src, e[4]))
            if self._held:
                self._rescan(step.delivered)
        else:
            self.pending.setdefault(src, {})[s] = e
            self._held += 1
        return step

    def _apply(self, e):
        _, tm, pids, vecs, _ = e
        V, t = self.V, self.t
        if len(pids):
            V[pids] = np.maximum(V[pids], vecs)
        np.maximum(t, tm, out=t)
        t[self.me] += 1

    def _rescan(self, delivered):
        pending, t = self.pending, self.t
        progress = True
        while progress and pending:
            progress = False
            for j in list(pending):
                held = pending[j]
                for s in sorted(held):
                    e = held[s]
                    if (e[0] <= t).all():
                        del held[s]
                        self._held -= 1
                        self._apply(e)
                        delivered.append((j, e[4]))
                        progress = True
                if not held:
                    del pending[j]


PROTOCOL = SES
