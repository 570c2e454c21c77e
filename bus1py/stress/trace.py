"""Per-process trace writer: SPEC section 7 rows, buffered, flushed as Parquet files.

Invariants:
  - One writer per process, no sharing: each process writes its own files
    (`p{index:05d}-{part:05d}.parquet`), so tracing needs no cross-process synchronisation.
  - `seq` is this process's local order, 0, 1, 2, ... with no gaps, across all its files:
    the row is numbered when the event is recorded, in the order events happened here.
  - Memory is bounded: at most `batch_rows` rows are buffered, then written out as one
    file.  A process's first file is shorter, by a fraction set by its index (a quarter to
    all of a batch): processes running one workload would otherwise reach every batch
    together and all stop to encode Parquet at once, a pause long enough (tens of
    processes on two cores) for the messages sent to them meanwhile to fill the bus.  A file appears under its final name only once complete (written to a
    dot-prefixed temporary name, then renamed), so a reader never sees half a file and
    a process that dies loses at most its unflushed batch.
  - `wall_ns` is CLOCK_MONOTONIC (time.monotonic_ns), comparable across processes of
    one machine; the stamp columns are the bus's diagnostic stamp, null where there is none.
  - pyarrow is imported only when a batch is written, i.e. in the child after fork: the
    parent never runs pyarrow's thread pools before forking.
"""
from __future__ import annotations

import os

from ..schema import COLUMN_NAMES
from ..schema import schema as _spec_schema

# SPEC section 7 columns (bus1py/schema.py), plus our own extras (allowed: "producers may
# add columns"):
#   action  the workload action that produced the event (send/signal/internal rows)
#   size    payload bytes of a sent message
EXTRA_COLUMNS = (("action", "string"), ("size", "int32"))
TRACE_COLUMNS = COLUMN_NAMES + tuple(name for name, _ in EXTRA_COLUMNS)


def schema():
    return _spec_schema(EXTRA_COLUMNS)


class TraceWriter:
    """Collects rows column-wise (cheap appends) and writes a file every `batch_rows`."""

    def __init__(self, directory: str | None, process: int, batch_rows: int = 50_000):
        self.directory = directory
        self.process = process
        self.batch_rows = max(1, batch_rows)
        # the golden ratio's fractional steps spread the first flushes of processes 0..n
        # evenly over [1/4, 1] of a batch, whatever n is
        self.next_flush = max(1, int(self.batch_rows * (0.25 + 0.75 * (process * 0.6180339887 % 1.0))))
        self.seq = 0
        self.part = 0
        self.files = 0
        self.bytes = 0
        self._reset()

    def _reset(self):
        self._cols = {c: [] for c in TRACE_COLUMNS if c != "process"}

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def record(self, kind, msg, wall_ns, dests=None, node=None, stamp=None, action=None, size=None):
        """Append one event (nothing when not tracing)."""
        if self.directory is None:
            return None
        c = self._cols
        c["seq"].append(self.seq)
        self.seq += 1
        c["kind"].append(kind)
        c["msg"].append(msg)
        c["dests"].append(dests)
        c["node"].append(node)
        c["wall_ns"].append(wall_ns)
        if stamp is None:
            c["stamp_ts"].append(None)
            c["stamp_peer"].append(None)
            c["stamp_tx"].append(None)
        else:
            c["stamp_ts"].append(stamp[0])
            c["stamp_peer"].append(stamp[1])
            c["stamp_tx"].append(stamp[2])
        c["action"].append(action)
        c["size"].append(size)
        if len(c["seq"]) >= self.next_flush:
            self.flush()

    def flush(self):
        if self.directory is None or not self._cols["seq"]:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        n = len(self._cols["seq"])
        sch = schema()
        arrays = [pa.array([self.process] * n, pa.int32())]
        arrays += [pa.array(self._cols[name], sch.field(name).type) for name in TRACE_COLUMNS[1:]]
        # from_arrays, not pa.table(dict): the latter imports pandas (0.3 s CPU per process)
        table = pa.Table.from_arrays(arrays, schema=sch)
        name = f"p{self.process:05d}-{self.part:05d}.parquet"
        tmp = os.path.join(self.directory, "." + name + ".tmp")
        pq.write_table(table, tmp, compression="zstd")
        final = os.path.join(self.directory, name)
        os.replace(tmp, final)
        self.bytes += os.path.getsize(final)
        self.part += 1
        self.files += 1
        self._reset()
        self.next_flush = self.batch_rows


def read_trace(directory: str, columns=None):
    """The whole trace as one pyarrow Table (only our `*.parquet` files, not temporaries)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(f for f in os.listdir(directory) if f.endswith(".parquet") and not f.startswith("."))
    if not files:
        return schema().empty_table() if columns is None else schema().empty_table().select(columns)
    tables = [pq.read_table(os.path.join(directory, f), columns=columns) for f in files]
    return pa.concat_tables(tables)
