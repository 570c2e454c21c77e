"""The trace format (SPEC section 7), defined once for every producer and the checker.

Invariants:
  - `COLUMNS` lists the SPEC columns in order with their Arrow types; producers may add
    columns after them (SPEC: "producers may add columns"), never change these.
  - `KINDS` are the only values of `kind`; each has a named constant here.
  - pyarrow is imported only when a schema is built or a file written, so importing this
    module is cheap (the stress tool forks after importing it).
"""
from __future__ import annotations

import os

SEND = "send"
DELIVER = "deliver"
SIGNAL_SEND = "signal_send"
SIGNAL_RECV = "signal_recv"
DESTROY = "destroy"
INTERNAL = "internal"
KINDS = (SEND, DELIVER, SIGNAL_SEND, SIGNAL_RECV, DESTROY, INTERNAL)

STAMPS = ("stamp_ts", "stamp_peer", "stamp_tx")

# (name, arrow type name); "list<int32>" is a list of int32
COLUMNS = (("process", "int32"), ("seq", "int64"), ("kind", "string"), ("msg", "int64"),
           ("dests", "list<int32>"), ("node", "int64"), ("wall_ns", "int64"),
           ("stamp_ts", "int64"), ("stamp_peer", "int64"), ("stamp_tx", "int64"))
COLUMN_NAMES = tuple(name for name, _ in COLUMNS)

# An optional extra column (SPEC: producers may add columns): the event's vector clock,
# one entry per process of the trace in ascending process id order, each the number of
# that process's events that happened-before this event or are it. The checker uses it
# only after verifying it against the rows (docs/CHECKER.md, "A vector-clock column").
VCLOCK = ("vclock", "list<int32>")
# The same clock flat: one binary value per event, the entries as little-endian unsigned
# 32-bit integers (4 x processes bytes; fixed_size_binary of that width is read alike).
# Parquet stores it without repetition levels, so it reads at the speed of a byte copy.
VCLOCK_BIN = ("vclock_bin", "binary")


def _arrow_type(name: str):
    import pyarrow as pa
    if name == "list<int32>":
        return pa.list_(pa.int32())
    return getattr(pa, name)()


def schema(extra=()):
    """The Arrow schema: the SPEC columns, then `extra` as (name, arrow type name) pairs."""
    import pyarrow as pa
    return pa.schema([(n, _arrow_type(t)) for n, t in (*COLUMNS, *extra)])


def write_rows(rows, path: str, files: int = 2, extra=()) -> str:
    """Write row dicts (missing columns are null) as `files` Parquet files under `path`."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    sch = schema(extra)
    os.makedirs(path, exist_ok=True)
    files = max(1, min(files, len(rows) or 1))
    per = -(-len(rows) // files) if rows else 0
    for i in range(files):
        chunk = rows[i * per:(i + 1) * per]
        cols = {f.name: [r.get(f.name) for r in chunk] for f in sch}
        pq.write_table(pa.table(cols, schema=sch), os.path.join(path, f"part-{i:04d}.parquet"))
    return path
