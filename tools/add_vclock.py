#!/usr/bin/env python3
"""Write a copy of a trace with an optional clock column (bus1py/schema.py): each event's
true vector clock, computed by the checker's compiled walk, as `vclock` (list<int32>) or,
with --bin, as `vclock_bin` (one fixed-size binary value of little-endian u32 entries). For
benchmarks and demonstrations of the vector-clock witness; the checker verifies the column
and never trusts it.

Invariants: the input is a well-formed trace (the checker would accept it) without a
causality cycle; the output has the same files, rows and columns, plus the clock column.
The whole trace and its clocks are held in memory (rows x processes x 4 bytes).

    tools/add_vclock.py TRACE_DIR OUT_DIR [--bin]
"""
from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from bus1py import schema as S  # noqa: E402
from bus1py.check import kinds as K  # noqa: E402
from bus1py.check.arrays import walk as W  # noqa: E402
from bus1py.check.arrays.layout import Layout  # noqa: E402
from bus1py.check.load import parquet_files  # noqa: E402


def _kernel_table(t):
    """The columns arrays.walk.Layout reads, from the raw rows (origins found by id)."""
    n = t.num_rows
    code = np.full(n, K.INTERNAL, dtype=np.int8)
    for c, name in K.NAMES.items():
        code[pc.equal(t["kind"], name).to_numpy(zero_copy_only=False)] = c
    msg = t["msg"].fill_null(0).to_numpy()
    proc = t["process"].to_numpy()
    seq = t["seq"].to_numpy()
    sender = np.zeros(n, dtype=np.int32)
    send_seq = np.zeros(n, dtype=np.int64)
    for origin_codes, recv_code in (((K.SEND, K.DESTROY), K.DELIVER),
                                    ((K.SIGNAL_SEND,), K.SIGNAL_RECV)):
        o = np.flatnonzero(np.isin(code, origin_codes))
        o = o[np.argsort(msg[o], kind="stable")]
        r = np.flatnonzero(code == recv_code)
        at = o[np.searchsorted(msg[o], msg[r])]
        sender[r], send_seq[r] = proc[at], seq[at]
    return pa.table({"process": proc, "seq": seq, "kind_code": code, "msg": msg,
                     "first_delivery": np.zeros(n, dtype=bool), "sender_process": sender,
                     "send_seq": send_seq, "is_destroy": np.zeros(n, dtype=bool)})


def add_vclock(src, out, flat=False):
    files = parquet_files(src)
    tables = [pq.read_table(f) for f in files]
    t = pa.concat_tables(tables)
    procs = np.unique(t["process"].to_numpy())
    lay = Layout(_kernel_table(t), procs, None)
    _, clocks, complete = W.walk(lay, np.arange(lay.n, dtype=np.int64))
    if not complete:
        raise SystemExit(f"{src}: the history has a causality cycle: no vector clocks")
    clocks = clocks.reshape(lay.n, len(procs))
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    name, _ = S.VCLOCK_BIN if flat else S.VCLOCK
    for f, ft in zip(files, tables):
        mine = clocks[lay.positions(ft)]
        if flat:
            data = pa.py_buffer(np.ascontiguousarray(mine, dtype="<u4").tobytes())
            col = pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(4 * len(procs)), len(mine), [None, data])
        else:
            values = mine.reshape(-1)
            offsets = np.arange(0, len(values) + 1, len(procs), dtype=np.int32)
            col = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, pa.int32()))
        # a clock column rarely repeats a value: a dictionary would only be a detour; the
        # flat one reads fastest as fixed-size values with LZ4 (about 4x snappy's speed)
        pq.write_table(ft.append_column(name, col),
                       os.path.join(out, os.path.relpath(f, src).replace(os.sep, "_")),
                       use_dictionary=[c for c in ft.column_names],
                       compression={**{c: "snappy" for c in ft.column_names},
                                    name: "lz4" if flat else "snappy"})


if __name__ == "__main__":
    add_vclock(sys.argv[1], sys.argv[2], flat="--bin" in sys.argv[3:])
