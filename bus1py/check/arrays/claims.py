"""A producer's clock column (vclock.py) carried to the per-process files, so the streamed
walk (streamed.py, claim.c's check) verifies it batch by batch: no task holds the
clocks of the trace.

Invariants: a piece holds one trace file's (process, seq, clock) rows ordered by process,
written once by the task that read that file (spark/by_message.py's split, or the
driver's threads on a local master), named with the count of each process's rows, so a
process's rows are one slice of it; `gather` takes one process's slices, places each row
at its seq (the events were numbered when linked) and reads the clocks with
vclock.by_row, so the shape rules and their words are the driver path's; a process whose
clocks break a shape rule gets no clock columns, and its first broken row is reported
(the null rule before the width rule, as by_row). Nothing here imports pyspark.
"""
from __future__ import annotations

import numpy as np

from .. import vclock
from . import linked_files


def split(files, name, where):
    """One piece for each trace file of `files` (paths), under `where`: [(piece, its
    processes, their rows)]."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .memory import give_back
    out = []
    for f in files:
        t = pq.read_table(f, columns=["process", "seq", name])
        proc = t.column("process").fill_null(-1).to_numpy().astype(np.int64)
        order = np.argsort(proc, kind="stable")
        t = pa.table({"process": pa.array(proc[order]),
                      "seq": t.column("seq").take(pa.array(order)).fill_null(-1),
                      "clock": t.column(name).take(pa.array(order))})
        procs, counts = np.unique(proc, return_counts=True)
        out.append((linked_files.write(where, t), procs.tolist(), counts.tolist()))
        del t
        give_back()         # a file's clocks are let go before the next file's are read
    return out


def gather(slices, P, n):
    """(clocks, None): a process's clocks (n events) as a (P x n) int32 array, entry c of
    event s at [c, s], from its slices of the pieces (linked_files.slices); or (None,
    (why, seq)) for its first row breaking a shape rule (vclock.by_row's words). Each
    slice is read in place and scattered by seq, so the clocks are held once."""
    out = np.empty((P, n), np.int32)
    bad = []            # (the null rule broken, seq) of each slice's first broken rule
    for at in slices:
        t = linked_files.read_slice(*at)
        seq = t.column("seq").to_numpy()
        for chunk in t.column("clock").chunks:
            got, why = vclock.by_row(chunk, P)
            rows, seq = seq[:len(chunk)], seq[len(chunk):]
            if got is None:
                bad.append((why[0] != vclock.NO_CLOCK, int(rows[why[1]].min()), why[0]))
            elif not bad:
                out[:, rows] = got.T
        del t
    if bad:
        _, seq, why = min(bad)
        return None, (why, seq)
    return out, None


def first_broken(reports):
    """The report, of the processes' {slot: (why, seq, ...)}, of the row by_row names
    first over the whole trace in (process, seq) order, or None."""
    if not reports:
        return None
    return reports[min(reports, key=lambda s: (reports[s][0] != vclock.NO_CLOCK, s))]
