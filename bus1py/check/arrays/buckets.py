"""A trace too large for one Events, read into buckets by message id: the rows the tasks by
message of spark/by_message.py take, read here with pyarrow when those tasks run in the
driver's process (a local master).

Invariants: every row naming an id (its origin and every receive) lands in the bucket of
the id, internal rows (no id) in bucket 0, so each bucket links by itself; the columns
are the tasks' (process int32, seq, kind_code int8, msg, dests only on message origins,
node); each file is split as soon as it is read, so about one copy of these columns is
held. A row breaking a per-row rule raises TraceError (its words are left to the main
pass). Nothing here imports pyspark.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import kinds as K
from ..load import read_files
from .events import _check_rows, _codes, stable_order

COLUMNS = ("process", "seq", "kind", "msg", "dests", "node")
# Files read side by side at a time (each is split into the buckets before the next ones)
FILES_AT_ONCE = 4


def bucket_of(msg, count):
    """The bucket of each id (a multiplicative hash: ids that step regularly spread)."""
    return ((msg.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)) % count


def split(trace, files, count):
    """(bucket, table) for the rows of trace.files[i] for i in `files` (module
    invariants), each table a copy of its own."""
    for t in read_files(trace, files, COLUMNS):
        code = pc.index_in(t.column("kind"), _codes())
        _check_rows(t, code, trace)
        code = pc.fill_null(code, K.INTERNAL).cast(pa.int8())
        has = pc.is_valid(t.column("msg")).to_numpy(zero_copy_only=False)
        b = np.where(has, bucket_of(pc.fill_null(t.column("msg"), 0).to_numpy(), count), 0)
        origin = pc.less_equal(code, K.DESTROY)
        t = pa.table({"process": t.column("process"), "seq": t.column("seq"),
                      "kind_code": code, "msg": t.column("msg"),
                      "dests": pc.if_else(origin, t.column("dests"),
                                          pa.nulls(t.num_rows, t.column("dests").type)),
                      "node": t.column("node")}).combine_chunks()
        order = stable_order(b)
        cuts = np.searchsorted(b[order], np.arange(count + 1))
        # a copy per bucket (not slices of one): a bucket's rows are let go once linked;
        # taken from one chunk (a take from a chunked table joins its chunks each time)
        for k in range(count):
            if cuts[k + 1] > cuts[k]:
                yield k, t.take(pa.array(order[cuts[k]:cuts[k + 1]]))


def read_buckets(trace, count):
    """The trace's rows as `count` Arrow tables, by message id (module invariants)."""
    parts = [[] for _ in range(count)]
    files = range(len(trace.files))
    for lo in range(0, len(files), FILES_AT_ONCE):
        for k, piece in split(trace, files[lo:lo + FILES_AT_ONCE], count):
            parts[k].append(piece)
    for k in range(count):
        yield pa.concat_tables(parts[k]) if parts[k] else None
        parts[k] = None
