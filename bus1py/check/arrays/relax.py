"""Vector clocks of any history, causality cycles included, by relaxation to the least
fixpoint; and `causal` decided from them where the walk (walk.py) cannot finish.

Invariants: the clock of position k is, per column, the count (seq + 1) of the latest
event of that column's process that happened-before k or is k, happened-before being
reachability over process order, send -> deliver and signal_send -> signal_recv, so it
is defined on a cyclic graph too (the reference's definition, reference.py). The clocks
are the least solution of C(k) >= C(prev(k)), C(receive) >= C(its origin), own entry >=
seq + 1: each round joins every receive with its origin's clock and then takes the
running maximum along each process; values only grow and are bounded, so the rounds stop
when a round changes nothing (a hop-minimal path of h message or signal hops is known
after h rounds). On an acyclic history they are the walk's clocks. A
delivery of m1 (sender q, send seq s) violates causal iff an earlier first delivery at its
process has a send clock whose q entry is at least s + 1: the send's own entry may pass
s + 1 on a cycle, so the test compares with the count, not with that entry. Memory: a
clock entry an event and a column of a block, with their temporaries (task_bytes; blocks
of columns relaxed one after the other within RELAX_BYTES), so this is for what the
driver's walk cannot finish (a broken trace) and for exports of small traces (report.py's
ShiViz log); the streamed walk reaches the same fixpoint by rounds over back edges
(csrc/check/stream.c), and the tests hold the two equal.
Nothing here imports pyspark.
"""
from __future__ import annotations

import math
import time

import numpy as np

from .. import kinds as K
from . import walk as W

# The most one block's relaxation may hold (task_bytes): past it the columns are relaxed
# in narrower blocks, one after the other, each exact by itself as the walk's blocks are.
RELAX_BYTES = 1 << 30
# Its model, bytes an event: the clocks and the temporaries of a round's joins, 4 bytes an
# entry three times over, a column a block's (its columns and the one the processes
# outside it share); the index arrays of the receives and the first deliveries whatever
# the width (tests/check/test_walk.py holds a block's peak to it).
COLUMN_BYTES = 12
EVENT_BYTES = 24


def task_bytes(events, ncols):
    """The most the relaxation of a block of `ncols` clock columns holds, by the model."""
    return events * (EVENT_BYTES + COLUMN_BYTES * ncols)


def clocks(lay, block=None):
    """(n x w) int32: the clock of every position (counts), over the columns of `block`
    (a walk.Block; None: every column)."""
    col, w = (lay.col, lay.ncols) if block is None else (block.col, block.ncols)
    n = lay.n
    slot = lay.slot_of
    c = np.zeros((n, max(w, 1)), np.int32)
    c[np.arange(n), col[slot]] = np.arange(n) - lay.start[slot] + 1
    recv = np.flatnonzero(lay.src >= 0)
    src = lay.src[recv]
    total = None
    while True:
        c[recv] = np.maximum(c[recv], c[src])
        _running_max(c, lay.start)
        now = int(c.sum(dtype=np.int64))
        if now == total:
            return c
        total = now


def _running_max(a, start):
    """Each run a[start[i]:start[i+1]] replaced by its running maximum along axis 0."""
    for lo, hi in zip(start[:-1].tolist(), start[1:].tolist()):
        if hi - lo > 1:
            np.maximum.accumulate(a[lo:hi], axis=0, out=a[lo:hi])


def causal(lay, max_examples, block=None):
    """(violating positions ascending, [(position, its partner)] of the first
    max_examples) of the causal test on the relaxed clocks of `block`'s columns (then only
    deliveries whose sender is in the block are judged), as walk.causal_block's."""
    c = clocks(lay, block)
    sender_col = lay.sender_col if block is None else block.sender_col
    first = np.flatnonzero((lay.kind == K.DELIVER) & (lay.first == 1))
    src = lay.src[first]
    sent = c[src]
    del c
    slot = lay.slot_of[first]
    runs = np.searchsorted(slot, np.arange(len(lay.procs) + 1))
    upto = sent.copy()
    _running_max(upto, runs)
    # what a first delivery's process knew before it: the running maximum one row back
    known = np.zeros_like(upto)
    same = np.flatnonzero(slot[1:] == slot[:-1]) + 1
    known[same] = upto[same - 1]
    del upto
    q = sender_col[first]
    need = src - lay.start[lay.slot_of[src]] + 1
    hit = known[np.arange(len(first)), q] >= need
    if block is not None:
        hit &= block.judges(lay, first)
    at = np.flatnonzero(hit)
    pairs = []
    for j in at[:max_examples].tolist():
        lo = int(runs[slot[j]])      # its process's first deliveries begin here
        earlier = lo + np.flatnonzero(sent[lo:j, q[j]] >= need[j])
        pairs.append((int(first[j]), int(first[earlier[0]])))
    return first[at], pairs


def blocks(lay, lo=0, hi=None):
    """Blocks covering columns lo..hi-1 (default every column), each narrow enough that
    its relaxation stays within RELAX_BYTES."""
    hi = lay.ncols if hi is None else hi
    n = max(lay.n, 1)
    # a block of w columns has w + 1 clock columns (the one outside shared)
    width = max(1, (RELAX_BYTES // n - EVENT_BYTES) // COLUMN_BYTES - 1)
    count = math.ceil((hi - lo) / width)
    edges = np.linspace(lo, hi, count + 1).round().astype(int)
    return [W.Block(lay, int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def decide(lay, want, max_examples, claimed=None, parts=None):
    """walk.decide's answer, with `causal` decided on a history with a causality cycle
    too: where the walk cannot finish, by the relaxed clocks of the same blocks, each
    split further when its relaxation would pass RELAX_BYTES (`info["cycle"]` then says
    so)."""
    out, info = W.decide(lay, want, max_examples, claimed, parts)
    if "causal" not in want or info["walk_complete"]:
        return out, info
    t = time.perf_counter()
    spans = [(0, lay.ncols)] if not parts or parts == [None] else [(b.lo, b.hi) for b in parts]
    got = [causal(lay, max_examples, block) for lo, hi in spans
           for block in blocks(lay, lo, hi)]
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
