"""Vector clocks of any history, causality cycles included, by relaxation to the least
fixpoint; and `causal` decided from them where the walk (walk.py) cannot finish.

Invariants: the clock of position k is, per column, the count (seq + 1) of the latest
event of that column's process that happened-before k or is k, happened-before being
reachability over process order, send -> deliver and signal_send -> signal_recv, so it
is defined on a cyclic graph too (the reference's definition, reference.py). The clocks
are the least solution of C(k) >= C(prev(k)), C(receive) >= C(its origin), own entry >=
seq + 1: each round joins every receive with its origin's clock and then takes the
running maximum along each process; values only grow and are bounded, so the rounds stop
when a round changes nothing. On an acyclic history they are the walk's clocks. A
delivery of m1 (sender q, send seq s) violates causal iff an earlier first delivery at its
process has a send clock whose q entry is at least s + 1: the send's own entry may pass
s + 1 on a cycle, so the test compares with the count, not with that entry. Memory: one
int64 an event and a column, so this is for what the walk cannot finish (a broken trace)
and for exports of small traces (report.py's ShiViz log). Nothing here imports pyspark.
"""
from __future__ import annotations

import time

import numpy as np

from .. import kinds as K
from . import walk as W


def clocks(lay, block=None):
    """(n x w) int64: the clock of every position (counts), over the columns of `block`
    (a walk.Block; None: every column)."""
    col, w = (lay.col, lay.ncols) if block is None else (block.col, block.ncols)
    n = lay.n
    slot = lay.slot_of.astype(np.int64)
    c = np.zeros((n, max(w, 1)), np.int64)
    c[np.arange(n), col[slot]] = np.arange(n) - lay.start[slot] + 1
    recv = np.flatnonzero(lay.src >= 0)
    src = lay.src[recv]
    # slots ascend along the positions: with each slot's offset added, one running
    # maximum over all positions is each process's own
    offset = (slot << 32)[:, None]
    total = None
    while True:
        c[recv] = np.maximum(c[recv], c[src])
        c += offset
        np.maximum.accumulate(c, axis=0, out=c)
        c -= offset
        now = int(c.sum())
        if now == total:
            return c
        total = now


def causal(lay, max_examples, block=None):
    """(violating positions ascending, [(position, its partner)] of the first
    max_examples) of the causal test on the relaxed clocks of `block`'s columns (then only
    deliveries whose sender is in the block are judged), as walk.causal_block's."""
    c = clocks(lay, block)
    sender_col = lay.sender_col if block is None else block.sender_col
    first = np.flatnonzero((lay.kind == K.DELIVER) & (lay.first == 1))
    src = lay.src[first]
    sent = c[src]
    slot = lay.slot_of[first].astype(np.int64)
    offset = (slot << 32)[:, None]
    upto = np.maximum.accumulate(sent + offset, axis=0) - offset
    known = np.zeros_like(upto)
    same = np.flatnonzero(slot[1:] == slot[:-1]) + 1
    known[same] = upto[same - 1]
    q = sender_col[first]
    need = src - lay.start[lay.slot_of[src]] + 1
    hit = known[np.arange(len(first)), q] >= need
    if block is not None:
        hit &= block.judges(lay, first)
    at = np.flatnonzero(hit)
    pairs = []
    for j in at[:max_examples].tolist():
        lo = int(np.searchsorted(slot, slot[j]))      # its process's first deliveries
        earlier = lo + np.flatnonzero(sent[lo:j, q[j]] >= need[j])
        pairs.append((int(first[j]), int(first[earlier[0]])))
    return first[at], pairs


def decide(lay, want, max_examples, claimed=None, parts=None):
    """walk.decide's answer, with `causal` decided on a history with a causality cycle
    too: where the walk cannot finish, by the relaxed clocks of the same blocks
    (`info["cycle"]` then says so)."""
    out, info = W.decide(lay, want, max_examples, claimed, parts)
    if "causal" not in want or info["walk_complete"]:
        return out, info
    t = time.perf_counter()
    got = [causal(lay, max_examples, block) for block in (parts or [None])]
    bad = np.sort(np.concatenate([b for b, _ in got]))
    pairs = sorted(p for _, ps in got for p in ps)[:max_examples]
    info.update(walk_complete=True, cycle=True, causal_count=len(bad),
                causal_pairs=[list(p) for p in pairs],
                causal_examples=W.inversions(lay, pairs))
    out["causal"] = lay.procs[lay.slot_of[bad]].tolist()
    info["seconds"]["causal_relaxed"] = round(time.perf_counter() - t, 3)
    return out, info


def every_clock(lay):
    """The clock of every position (n x ncols counts): by the walk, or relaxed on a
    history with a causality cycle."""
    row = np.arange(lay.n, dtype=np.int64)
    _, got, complete = W.walk(lay, row)
    if complete:
        return got.reshape(lay.n, -1)[:, :lay.ncols]
    return clocks(lay)
