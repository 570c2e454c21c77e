"""Fold a trace's processes whose lifetimes do not overlap into lanes: a stricter trace
that the checker can afford when processes come and go (`bus1py stress --churn`).

    python tools/trace_lanes.py TRACE_DIR OUT_DIR

A churn run leaves one trace process per generation of each mortal slot (896 for the
10-million-message soak), and the checker's costs grow with the number of processes: the
vector clocks of the walk take 4 bytes per process per origin (50 GB there). Here each process, in the order
of its first event's wall time, joins the lane whose last process ended earliest, if that
one ended before it began (wall_ns is CLOCK_MONOTONIC of one machine), else a new lane.
Two processes that share a message or a signal (as sender or destination) never share a
lane. A lane is one process in the output: its processes' rows one after the other, seq
renumbered, and every `dests` entry renamed to its lane.

Invariants: every row is kept, with its kind, msg, node, stamp and wall time; only
`process`, `seq` and `dests` change. A lane orders all events of a process before all
events of the next, so happened-before in the output contains the original's (the same
edges plus, within a lane, each process's last event before the next one's first):
every fifo or causal violation of the original is one of the output, and consistent,
exactly_once and node_rules do not depend on process order. So a verdict of no
violation on the output holds for the original; a violation found there may be one only
of the added edges, and the original must then be checked as it is.
"""
from __future__ import annotations

import argparse
import heapq
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


def lifetimes(files):
    """{process: (first wall, last wall, rows)} from the process, wall_ns columns; a
    process named only in `dests` (a broken trace) is (None, None, 0): it keeps a lane of
    its own."""
    first, last, rows, named = {}, {}, {}, set()
    for f in files:
        t = pq.read_table(f, columns=["process", "wall_ns", "dests"])
        procs = t.column("process").to_numpy()
        wall = t.column("wall_ns").to_numpy()
        for p in np.unique(procs):
            w = wall[procs == p]
            p = int(p)
            first[p] = min(first.get(p, w.min()), w.min())
            last[p] = max(last.get(p, w.max()), w.max())
            rows[p] = rows.get(p, 0) + len(w)
        dests = t.column("dests").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        named.update(np.unique(dests).tolist())
    life = {p: (None, None, 0) for p in named}
    life.update({p: (int(first[p]), int(last[p]), rows[p]) for p in first})
    return life


def conflicts(files, life):
    """{process: processes it may not share a lane with}: those it shares a message or a
    signal with (as sender or destination) although their lifetimes do not overlap (a
    process that ends right after a send, a destination whose first event is the
    delivery). Pairs that overlap can never share a lane, so only rows whose members do
    not all overlap are looked at; a process without rows overlaps every one."""
    ids = np.array(sorted(life), dtype=np.int64)
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    first = np.array([lo if life[p][0] is None else life[p][0] for p in ids])
    last = np.array([hi if life[p][1] is None else life[p][1] for p in ids])
    out = {}
    for f in files:
        t = pq.read_table(f, columns=["process", "dests"])
        dests = t.column("dests").combine_chunks()
        n = pc.list_value_length(dests).fill_null(0).to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(n > 0)
        if not len(rows):
            continue
        sender = np.searchsorted(ids, t.column("process").to_numpy()[rows])
        flat = np.searchsorted(ids, dests.flatten().to_numpy(zero_copy_only=False))
        starts = dests.offsets.to_numpy()[rows] - dests.offsets.to_numpy()[0]
        hi_first = np.maximum(first[sender], np.maximum.reduceat(first[flat], starts))
        lo_last = np.minimum(last[sender], np.minimum.reduceat(last[flat], starts))
        for i in np.flatnonzero(lo_last < hi_first):
            members = {int(ids[sender[i]])} | {int(ids[j]) for j in flat[starts[i]:starts[i] + n[rows[i]]]}
            for m in members:
                out.setdefault(m, set()).update(members - {m})
    return out


def lanes(life, avoid=None):
    """{process: (lane, seq offset)}: by first wall, each process joins the free lane
    (its last process ended before this one began) that ended earliest and holds none of
    the processes in avoid[process], else a new lane."""
    avoid = avoid or {}
    free = []            # (last wall of the lane's last process, lane)
    out, length, members = {}, [], []
    for p in sorted(life, key=lambda q: (life[q][0] is None, life[q][0] or 0, q)):
        begin, end, rows = life[p]
        if begin is None:  # no rows: a lane of its own, never shared
            out[p] = (len(length), 0)
            length.append(0)
            members.append({p})
            continue
        skipped, lane = [], None
        while free and free[0][0] < begin:
            cand = heapq.heappop(free)
            if members[cand[1]].isdisjoint(avoid.get(p, ())):
                lane = cand[1]
                break
            skipped.append(cand)
        for cand in skipped:
            heapq.heappush(free, cand)
        if lane is None:
            lane = len(length)
            length.append(0)
            members.append(set())
        out[p] = (lane, length[lane])
        length[lane] += rows
        members[lane].add(p)
        heapq.heappush(free, (end, lane))
    return out


def rewrite(src, dst, ids, lane_of, offset):
    """src's rows into dst with process ids[k] as lane lane_of[k], its seq moved up by
    offset[k]."""
    t = pq.read_table(src)
    procs = t.column("process").to_numpy()
    at = np.searchsorted(ids, procs)
    seq = t.column("seq").to_numpy() + offset[at]
    dests = t.column("dests").combine_chunks()
    flat = dests.flatten().to_numpy(zero_copy_only=False)   # all in ids (lifetimes)
    renamed = pa.ListArray.from_arrays(dests.offsets, pa.array(lane_of[np.searchsorted(ids, flat)]),
                                       mask=pc.is_null(dests))
    t = (t.set_column(t.schema.get_field_index("process"), "process", pa.array(lane_of[at]))
         .set_column(t.schema.get_field_index("seq"), "seq", pa.array(seq))
         .set_column(t.schema.get_field_index("dests"), "dests", renamed.cast(t.schema.field("dests").type)))
    pq.write_table(t, dst, compression="zstd")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("out")
    a = ap.parse_args(argv)
    files = sorted(os.path.join(a.trace, f) for f in os.listdir(a.trace)
                   if f.endswith(".parquet") and not f.startswith("."))
    if not files:
        raise SystemExit(f"{a.trace}: no Parquet files")
    os.makedirs(a.out, exist_ok=True)
    if any(f.endswith(".parquet") for f in os.listdir(a.out)):
        raise SystemExit(f"{a.out}: already holds Parquet files; give an empty directory")
    life = lifetimes(files)
    assign = lanes(life, conflicts(files, life))
    n_lanes = len({lane for lane, _ in assign.values()})
    print(f"{sum(1 for v in life.values() if v[2])} processes in {n_lanes} lanes; rewriting {len(files)} files", file=sys.stderr)
    ids = np.array(sorted(assign), dtype=np.int64)
    lane_of = np.array([assign[p][0] for p in ids], dtype=np.int32)
    offset = np.array([assign[p][1] for p in ids], dtype=np.int64)
    for i, f in enumerate(files):
        rewrite(f, os.path.join(a.out, os.path.basename(f)), ids, lane_of, offset)
        if i % 200 == 199:
            print(f"  {i + 1}/{len(files)}", file=sys.stderr)
    print(f"{a.out}: {n_lanes} lanes", file=sys.stderr)


if __name__ == "__main__":
    main()
