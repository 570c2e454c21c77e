"""Vector clocks of any history, causality cycles included, by relaxation to the least
fixpoint: every event's clock for the ShiViz export of small traces (report.py), and the
definition the tests hold the walk's rounds (rounds.py, csrc/check/rounds.c) to.

Invariants: the clock of position k is, per column, the count (seq + 1) of the latest
event of that column's process that happened-before k or is k, happened-before being
reachability over process order, send -> deliver and signal_send -> signal_recv, so it
is defined on a cyclic graph too (the reference's definition, reference.py). The clocks
are the least solution of C(k) >= C(prev(k)), C(receive) >= C(its origin), own entry >=
seq + 1: each round joins every receive with its origin's clock and then takes the
running maximum along each process; values only grow and are bounded, so the rounds stop
when a round changes nothing (a hop-minimal path of h message or signal hops is known
after h rounds: many on a long trace, hence not the checker's way past a cycle). On an
acyclic history they are the walk's clocks. Memory: a clock entry an event and column.
Nothing here imports pyspark.
"""
from __future__ import annotations

import numpy as np

from . import walk as W


def clocks(lay):
    """(n x ncols) int32: the clock of every position (counts)."""
    col, w = lay.col, lay.ncols
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


def every_clock(lay):
    """The clock of every position (n x ncols counts): by the walk, or relaxed on a
    history with a causality cycle."""
    row = np.arange(lay.n, dtype=np.int64)
    _, got, complete = W.walk(lay, row)
    if complete:
        return got.reshape(lay.n, -1)[:, :lay.ncols]
    return clocks(lay)
