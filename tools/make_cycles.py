#!/usr/bin/env python3
"""Write a copy of a trace with N causality cycles (a broken trace, for benchmarks of the
checker's rounds past a cycle): in each of N processes A, the seqs of a send of x (to B)
and of A's later delivery of a y that B sent after delivering x are swapped, so x's send
now follows y's delivery, which x's send happened-before.

Invariants: only the seqs of two rows a cycle change (the numbering stays 0, 1, 2, ...),
each in a process of its own, chosen among the first 400 events of each process; files
without a changed row are hard-linked (copied across devices); the input is a trace the
checker accepts. The trace's files are read for (process, seq, kind, msg, dests) of those
first events only, and the files holding a changed row rewritten whole.

    tools/make_cycles.py TRACE_DIR OUT_DIR N
"""
from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

FIRST = 400     # events of each process searched for a cycle to make


def _rows(files):
    parts = []
    for i, f in enumerate(files):
        t = pq.read_table(f, columns=["process", "seq", "kind", "msg", "dests"])
        t = t.filter(pc.less(t["seq"], FIRST))
        parts.append(t.append_column("file", pa.array(np.full(t.num_rows, i, np.int32))))
    return pa.concat_tables(parts).to_pylist()


def _cycles(rows, n):
    """[(x's send row, y's delivery row)] in n processes."""
    at = {(r["process"], r["seq"]): r for r in rows}
    delivered = {(r["process"], r["msg"]): r for r in rows if r["kind"] == "deliver"}
    found = []
    for a in sorted({r["process"] for r in rows}):
        for i in range(FIRST):
            x = at.get((a, i))
            if x is None or x["kind"] != "send":
                continue
            pick = next(((x, dy) for b in x["dests"] or ()
                         for dx in [delivered.get((b, x["msg"]))] if dx
                         for k in range(dx["seq"] + 1, FIRST)
                         for y in [at.get((b, k))]
                         if y and y["kind"] == "send" and a in (y["dests"] or ())
                         for dy in [delivered.get((a, y["msg"]))] if dy and dy["seq"] > i),
                        None)
            if pick:
                found.append(pick)
                break
        if len(found) == n:
            break
    return found


def make_cycles(src, out, n):
    files = sorted(os.path.join(src, f) for f in os.listdir(src) if f.endswith(".parquet"))
    rows = _rows(files)
    swaps = _cycles(rows, n)
    if len(swaps) < n:
        raise SystemExit(f"{src}: only {len(swaps)} cycles to make among the first {FIRST} "
                         f"events of each process")
    new_seq = {}
    for x, dy in swaps:
        new_seq[(x["process"], x["seq"])] = dy["seq"]
        new_seq[(dy["process"], dy["seq"])] = x["seq"]
    touched = {r["file"] for r in rows if (r["process"], r["seq"]) in new_seq}
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    for i, f in enumerate(files):
        dst = os.path.join(out, os.path.basename(f))
        if i not in touched:
            try:
                os.link(f, dst)
            except OSError:
                shutil.copy(f, dst)
            continue
        t = pq.read_table(f)
        proc, seq = t["process"].to_numpy(), t["seq"].to_numpy()
        changed = seq.copy()
        for (p, s), to in new_seq.items():
            changed[(proc == p) & (seq == s)] = to
        i_seq = t.schema.get_field_index("seq")
        pq.write_table(t.set_column(i_seq, "seq", pa.array(changed, t.schema.field("seq").type)),
                       dst)
    return [(x["process"], x["seq"], dy["seq"]) for x, dy in swaps]


if __name__ == "__main__":
    print(make_cycles(sys.argv[1], sys.argv[2], int(sys.argv[3])))
