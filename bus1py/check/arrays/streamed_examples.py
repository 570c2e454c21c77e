"""The causal examples of the streamed walk (streamed.py): walk.py's inversions, their
events looked up in the per-process files and their happened-before paths found by the
same breadth-first search as walk.path, one pass over the files per level.

Invariants: an example is the one walk.inversions gives on the Layout of the same trace
(positions are the layout's). The search is walk.search, the one walk.path runs: within a
level the origins it expands on one process are [lowest position reached there, where the
last expansion there began), so the receives of one pass over the files for those ranges
are exactly the ones the in-memory search reads for that level; it holds the level's
candidates (those before where it had reached their process), at most what is left of
walk.PATH_BUDGET (a level past it ends the search without a path, on both paths). All
examples' searches share each pass.
"""
from __future__ import annotations

import numpy as np

from .. import kinds as K
from ..examples import event, inversion
from .walk import PATH_BUDGET, search


def inversions(streams, pairs, budget=PATH_BUDGET):
    """The causal examples of (position, partner) pairs, as walk.inversions."""
    if not pairs:
        return []
    where = _Where(streams)
    ds = [(where.delivery(k), where.delivery(later)) for k, later in pairs]
    found = paths(streams, [(d["origin"], e["origin"]) for d, e in ds], budget)
    out = []
    for (d, e), (k, _), got in zip(ds, pairs, found):
        ex = inversion(d, e, where.process_at(k))
        ex["path"] = None if got is None else [where.event_at(p) for p in got]
        out.append(ex)
    return out


class _Where:
    """Positions of the trace as processes, seqs and events (rows read from the files)."""

    def __init__(self, streams):
        self.s = streams

    def slot_seq(self, k):
        slot = int(np.searchsorted(self.s.start, k, side="right")) - 1
        return slot, int(k - self.s.start[slot])

    def process_at(self, k):
        return int(self.s.procs[self.slot_seq(k)[0]])

    def delivery(self, k):
        slot, seq = self.slot_seq(k)
        r = self.s.row(slot, seq)
        return {"msg": int(r["msg"]), "sender_process": int(self.s.procs[r["sslot"]]),
                "send_seq": int(r["sseq"]), "is_destroy": bool(r["is_destroy"]),
                "deliver_seq": seq, "origin": int(self.s.start[r["sslot"]] + r["sseq"])}

    def event_at(self, k):
        slot, seq = self.slot_seq(k)
        r = self.s.row(slot, seq)
        code = int(r["kind"])
        o = None
        if code in K.RECEIVES:
            o = (int(self.s.procs[r["sslot"]]), int(r["sseq"]))
        return event(int(self.s.procs[slot]), seq, K.NAMES[code],
                     None if code == K.INTERNAL else int(r["msg"]), origin=o)


def paths(streams, searches, budget=PATH_BUDGET):
    """walk.path's answer for each (start, goal) of `searches`, the searches side by side."""
    end_of = streams.start[1:]

    def slot_of(k):
        return int(np.searchsorted(streams.start, k, side="right")) - 1
    gens = [search(a, b, slot_of, end_of, budget) for a, b in searches]
    found = [None] * len(gens)
    asks = {}
    for i, g in enumerate(gens):
        _step(g, None, i, asks, found)
    while asks:
        edges = _receives(streams, asks)
        todo, asks = asks, {}
        for i in todo:
            _step(gens[i], edges[i], i, asks, found)
    return found


def _step(gen, sent, i, asks, found):
    """Run search i to its next question (its ranges, into asks) or its answer."""
    try:
        asks[i] = gen.send(sent)
    except StopIteration as stop:
        found[i] = stop.value


def _receives(streams, asks):
    """{search: (origins, receives)}: the level's candidates of each search (walk.path:
    the receives whose origin lies in one of its ranges, {slot: (lo, hi)} of positions, and
    which lie before where it had reached their process), sorted by (origin, receive), from
    one pass; (None, None) for a search whose candidates pass its budget (it ends there,
    and no more than its budget is held for it)."""
    P = streams.P
    bounds = {}
    for i, (ranges, reached, budget) in asks.items():
        lo, hi = np.zeros(P, np.int64), np.zeros(P, np.int64)
        for sl, (a, b) in ranges.items():
            lo[sl], hi[sl] = a, b
        before = np.full(P, streams.start[-1], np.int64)
        for q, r in reached.items():
            before[q] = r
        bounds[i] = (lo, hi, before, budget)
    got = {i: ([], []) for i in asks}
    held = dict.fromkeys(asks, 0)
    for slot in range(P):
        for j, b in enumerate(streams.batches(slot)):
            recv = np.flatnonzero((b["kind"] == K.DELIVER) | (b["kind"] == K.SIGNAL_RECV))
            if not len(recv):
                continue
            os_, opos = b["sslot"][recv], streams.start[b["sslot"][recv]] + b["sseq"][recv]
            rpos = streams.start[slot] + j * streams.rows_per_batch + recv
            for i, (lo, hi, before, budget) in bounds.items():
                if got[i] is None:
                    continue
                keep = (opos >= lo[os_]) & (opos < hi[os_]) & (rpos < before[slot])
                held[i] += int(keep.sum())
                if held[i] > budget:
                    got[i] = None
                elif held[i]:
                    got[i][0].append(opos[keep])
                    got[i][1].append(rpos[keep])
    out = {i: (None, None) for i, g in got.items() if g is None}
    for i, (o, r) in ((i, g) for i, g in got.items() if g is not None):
        o = np.concatenate(o) if o else np.zeros(0, np.int64)
        r = np.concatenate(r) if r else np.zeros(0, np.int64)
        order = np.lexsort((r, o))
        out[i] = (o[order], r[order])
    return out
