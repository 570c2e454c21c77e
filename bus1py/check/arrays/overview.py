"""The run's overview by the array engine: numpy over the validated events (events.py),
computed as the Spark engine computes it (spark/overview.py); bus1py.check.overview shapes
the result. Nothing here imports pyspark.
"""
from __future__ import annotations

import numpy as np

from .. import kinds as K
from ..overview import WINDOW_EVENTS, WINDOW_PROCESSES, assemble


def overview(ev) -> dict:
    """The overview of a trace from its Events."""
    procs, counts = np.unique(ev.process, return_counts=True)
    d = np.flatnonzero(ev.code == K.DELIVER)
    o = ev.origin[d]
    ok = ev.has_wall[d] & ev.has_wall[o]
    # as Spark computes it: a double division, then log(x) / log(2)
    us = (ev.wall[d][ok] - ev.wall[o][ok]).astype(np.float64) / 1000.0
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.where(us < 0, -1, np.where(us < 1, 0, np.floor(
            np.log(np.maximum(us, 1)) / np.log(2.0)).astype(np.int64) + 1))
    keys, n = np.unique(b, return_counts=True)
    hist = dict(zip(keys.tolist(), n.tolist()))
    near = np.flatnonzero(np.isin(ev.process, procs[:WINDOW_PROCESSES])
                          & (ev.seq < WINDOW_EVENTS))
    rows = [{"process": int(ev.process[i]), "seq": int(ev.seq[i]),
             "kind": K.NAMES[int(ev.code[i])],
             "msg": int(ev.msg[i]) if ev.has_msg[i] else None,
             "sender_process": int(ev.sender[i]), "send_seq": int(ev.send_seq[i])}
            for i in near]
    return assemble(dict(zip(procs.tolist(), counts.tolist())), hist, rows, ev.trace.path)
