"""`causal` of a history the walk (walk.py) cannot finish, on the driver: the streamed
walk's rounds (csrc/check/rounds.c, streamed.BlockWalk) over the Layout's own arrays, so a
broken trace is decided on either path by one algorithm, in about the walk's time a round.

Invariants: the Layout is given to the walk as one batch a process (LayoutStreams: views
of its arrays, and the receive counts, origin slots and seqs derived once, 17 bytes an
event), so the violations and partners are the streamed walk's on the same trace; rounds
take a back edge on a cycle of waits and repeat until no back edge's clock changes, which
is the least fixpoint of the clocks (relax.py computes it by relaxation, and the tests
hold the two equal). The blocks of `parts` (walk.Block) are walked side by side in
threads (the kernels release the GIL), each judging the deliveries whose sender's column
it holds. Nothing here imports pyspark.
"""
from __future__ import annotations

import time

import numpy as np

from . import walk as W


class LayoutStreams:
    """A Layout as per_process.Streams give the streamed walk its events: each process's
    events one batch (views of the layout's arrays)."""

    def __init__(self, lay):
        n = lay.n
        self.P, self.procs, self.start = len(lay.procs), lay.procs, lay.start
        self.counts = np.diff(lay.start)
        recv = np.flatnonzero(lay.src >= 0)
        src = lay.src[recv]
        sslot = np.zeros(n, np.int32)
        sslot[recv] = lay.slot_of[src]
        sseq = np.zeros(n, np.int64)
        sseq[recv] = src - lay.start[sslot[recv]]
        self._cols = {"kind": lay.kind.astype(np.int8, copy=False),
                      "first": lay.first.astype(np.int8, copy=False),
                      "sslot": sslot, "sseq": sseq,
                      "count": np.bincount(src, minlength=n).astype(np.int32)}
        self.rewind()

    def rewind(self):
        self._given = [False] * self.P

    def fresh(self):
        """These streams with a pass of their own (the arrays shared): one a walk."""
        import copy
        other = copy.copy(self)
        other.rewind()
        return other

    def done(self, slot):
        return self._given[slot] or not self.counts[slot]

    def finished(self):
        return all(self.done(s) for s in range(self.P))

    def next(self, slot):
        if self.done(slot):
            return None
        self._given[slot] = True
        lo, hi = int(self.start[slot]), int(self.start[slot + 1])
        return {k: v[lo:hi] for k, v in self._cols.items()}


def decide(lay, want, max_examples, claimed=None, parts=None):
    """walk.decide's answer, with `causal` decided on a history with a causality cycle
    too: where the walk cannot finish, by the rounds over the same blocks (parts: Blocks,
    default walk.blocks(lay)); `info["cycle"]` then says so."""
    from concurrent.futures import ThreadPoolExecutor

    from .streamed import causal
    out, info = W.decide(lay, want, max_examples, claimed, parts)
    if "causal" not in want or info["walk_complete"]:
        return out, info
    t = time.perf_counter()
    streams = LayoutStreams(lay)
    parts = [b for b in (parts or W.blocks(lay)) if b is not None] or [None]

    def one(block):
        if block is None:
            return causal(streams.fresh(), lay.col.astype(np.int32), lay.ncols,
                          max_examples)
        return causal(streams.fresh(), block.col, block.hi - block.lo, max_examples)
    with ThreadPoolExecutor(len(parts)) as pool:
        got = list(pool.map(one, parts))
    bad = np.sort(np.concatenate([b for b, _, _ in got]))
    pairs = sorted(p for _, ps, _ in got for p in ps)[:max_examples]
    info.update(walk_complete=True, cycle=True, causal_count=len(bad),
                causal_pairs=[list(p) for p in pairs],
                causal_examples=W.inversions(lay, pairs))
    out["causal"] = lay.procs[lay.slot_of[bad]].tolist()
    info["seconds"]["causal_rounds"] = round(time.perf_counter() - t, 3)
    return out, info
