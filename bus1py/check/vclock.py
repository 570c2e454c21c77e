# Invariants: a producer's vector-clock column is read here and nowhere else, and only as a
# claim: arrays.walk.verify decides whether it is the trace's true clocks. Two encodings are
# accepted (bus1py/schema.py): `vclock_bin` (one binary value of 4 x P bytes per event, the
# entries little-endian u32; also fixed_size_binary) and `vclock` (list<int32> of P
# entries); when a trace has both, the flat one is read (Parquet decodes it as one byte
# copy, the list one value by value). Every file must carry the chosen column with an
# accepted type, else the column is not used and the status says why. Entries above
# 2^31-1 read as negative int32 and can never verify (a true clock's entries are counts
# below 2^31). Nothing here imports Spark: it runs on an executor or on the driver.
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import schema as S


def _is_flat(t):
    return (pa.types.is_binary(t) or pa.types.is_large_binary(t)
            or pa.types.is_fixed_size_binary(t))


def _is_list(t):
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_int32(t.value_type)


def column(files):
    """(name or None, status): the clock column every file carries with an accepted type
    (status "present"), or None and why not ("absent", "not used: ...")."""
    schemas = [pq.read_schema(f) for f in files]
    for (name, tname), accepts, expected in (
            (S.VCLOCK_BIN, _is_flat, "binary of 4 x processes bytes"),
            (S.VCLOCK, _is_list, S.VCLOCK[1])):
        if schemas and schemas[0].get_field_index(name) < 0:
            continue
        for f, sch in zip(files, schemas):
            i = sch.get_field_index(name)
            if i < 0:
                return None, f"absent from {f}"
            t = sch.field(i).type
            if not accepts(t):
                return None, f"not used: column '{name}' of {f} has type {t}, expected {expected}"
        return name, "present"
    return None, "absent"


def status(files, span=None):
    """(column name or None, status) of the trace's clock column for the witness: None
    when absent, of a type not accepted, or the trace is a batch of sub-traces (span: the
    tests' group_span, whose clock entries would not be one per process)."""
    name, why = column(files)
    if name and span:
        return None, "not used: the trace is a batch of sub-traces"
    return name, why


def read(files, name):
    """The column `name` of every file, concatenated in file order, as one array."""
    return pa.concat_arrays([c for f in files
                             for c in pq.read_table(f, columns=[name]).column(0).chunks])


# the shape rules of a clock column, the first checked over every row before the second
NO_CLOCK = "a row has no clock"


def by_row(col, P):
    """(clocks, None) with clocks an (rows x P) int32 array in the column's row order, or
    (None, (why, rows)) naming every row, ascending, that breaks the first rule broken:
    null, then not P entries."""
    if col.null_count:
        return None, (NO_CLOCK, np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False)))
    n = len(col)
    if not n:
        return np.zeros((0, P), np.int32), None
    wrong = f"a clock does not have one entry per process ({P})"
    if pa.types.is_fixed_size_binary(col.type):
        if col.type.byte_width != 4 * P:
            return None, (wrong, np.arange(n))
        data = col.buffers()[1]
        values = np.frombuffer(data, dtype="<i4", count=n * P, offset=col.offset * 4 * P)
    elif _is_flat(col.type):
        widths = pc.binary_length(col).to_numpy(zero_copy_only=False)
        if np.any(widths != 4 * P):
            return None, (wrong, np.flatnonzero(widths != 4 * P))
        otype = np.int64 if pa.types.is_large_binary(col.type) else np.int32
        offsets = np.frombuffer(col.buffers()[1], dtype=otype, count=n + 1,
                                offset=col.offset * np.dtype(otype).itemsize)
        values = np.frombuffer(col.buffers()[2], dtype="<i4", count=n * P,
                               offset=int(offsets[0]))
    else:
        offsets = col.offsets.to_numpy()
        widths = np.diff(offsets)
        if np.any(widths != P):
            return None, (wrong, np.flatnonzero(widths != P))
        values = col.values.to_numpy(zero_copy_only=False)[offsets[0]:offsets[-1]]
    return values.astype(np.int32, copy=False).reshape(n, P), None
