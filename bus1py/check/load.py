# Invariants: a trace is accepted only if every Parquet file has the SPEC section-7 columns
# with the SPEC types (extra columns are ignored, the optional ones -- wall_ns and the three
# stamp columns -- may be absent and then read as null), every row has a known kind and the
# fields that kind needs, each process's seq runs 0,1,2,... without gaps or duplicates and
# every id has one origin. Schemas, the row count and the stamp ranges come from the footers
# here; the row rules are checked by the checker's main pass, which reads every row and
# shuffles by process and by id anyway (main_pass.py). Any failure raises
# TraceError whose message names the file, the column and the row problem;
# the CLI maps it to exit code 2. Schema checks read Parquet footers only (pyarrow, no data);
# row checks are Spark jobs that return at most a few offending rows to the driver, so a
# 100M-event trace is never collected.
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..schema import COLUMNS as SPEC_COLUMNS
from ..schema import DESTROY, INTERNAL, KINDS, SEND, STAMPS, schema

# Arrow type name (bus1py/schema.py) -> the test a file's column type must pass. Readers
# accept what Parquet writers commonly produce for that type (large and dictionary strings,
# large lists), since Spark reads them all alike.
_TYPE_TESTS = {
    "int32": pa.types.is_int32,
    "int64": pa.types.is_int64,
    "string": lambda t: (pa.types.is_string(t) or pa.types.is_large_string(t)
                         or (pa.types.is_dictionary(t) and pa.types.is_string(t.value_type))),
    "list<int32>": lambda t: ((pa.types.is_list(t) or pa.types.is_large_list(t))
                              and pa.types.is_int32(t.value_type)),
}
# wall_ns and the stamps may be absent (then read as null); every other column is required
OPTIONAL = frozenset(("wall_ns",) + STAMPS)
# column -> ((arrow type test, type name), required)
COLUMNS = {name: ((_TYPE_TESTS[tname], tname), name not in OPTIONAL)
           for name, tname in SPEC_COLUMNS}


class TraceError(Exception):
    """The trace cannot be read or is malformed (exit code 2)."""


@dataclass
class Trace:
    """A validated trace: the Spark DataFrame of its rows plus facts learnt while checking."""
    path: str
    df: object                      # pyspark DataFrame with exactly the COLUMNS above
    files: list = field(default_factory=list)
    rows: int = 0
    processes: list = field(default_factory=list)   # sorted distinct process ids
    has_stamps: bool = False        # every send/destroy row carries a full stamp
    has_destroy: bool = False       # some row is a destroy (node_rules has work to do)
    stamp_ranges: dict = field(default_factory=dict)  # stamp column -> (min, max), all rows


def parquet_files(path: str) -> list[str]:
    if not os.path.exists(path):
        raise TraceError(f"{path}: no such trace directory")
    if os.path.isfile(path):
        return [path]
    out = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        for f in sorted(files):
            if f.endswith(".parquet") and not f.startswith((".", "_")):
                out.append(os.path.join(root, f))
    if not out:
        raise TraceError(f"{path}: no .parquet files in the trace directory")
    return out


def check_schemas(files: list[str]) -> set[str]:
    """Check every file's footer; return the optional columns absent from some file."""
    absent = set()
    for f in files:
        try:
            schema = pq.read_schema(f)
        except Exception as e:  # pyarrow raises several types for corrupt files
            raise TraceError(f"{f}: cannot read Parquet footer: {e}") from None
        for name, ((test, tname), required) in COLUMNS.items():
            idx = schema.get_field_index(name)
            if idx < 0:
                if required:
                    raise TraceError(f"{f}: missing column '{name}' ({tname})")
                absent.add(name)
                continue
            t = schema.field(idx).type
            if not test(t):
                raise TraceError(f"{f}: column '{name}' has type {t}, expected {tname}")
    return absent


def spark_schema():
    """The SPEC columns as a Spark schema (from the Arrow one, so they cannot disagree)."""
    from pyspark.sql.pandas.types import from_arrow_schema
    return from_arrow_schema(schema())


def fmt_row(r, cols=("process", "seq", "kind", "msg")) -> str:
    d = r if isinstance(r, dict) else r.asDict()
    return ", ".join(f"{c}={d[c]!r}" for c in cols if c in d)


def file_of(df, fname, process, seq) -> str:
    from pyspark.sql import functions as F
    got = (df.where((F.col("process") == process) & (F.col("seq") == seq))
           .select(fname.alias("file")).limit(1).collect())
    return got[0]["file"] if got else "?"


def read_footers(path: str) -> Trace:
    """The trace's files, schemas, row count and stamp ranges, from Parquet footers only
    (no Spark, no data): what the checker needs to size its plan before the rows are read.
    The stamp ranges are None when a writer left out statistics (open_rows scans then)."""
    files = parquet_files(path)
    check_schemas(files)
    trace = Trace(path=path, df=None, files=files)
    try:
        _footer_facts(files, trace)
    except Exception as e:  # a footer that passed the schema check but fails to decode
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TraceError(f"{path}: cannot read trace footers: {first[:500]}") from None
    return trace


def open_rows(spark, trace: Trace) -> Trace:
    """Attach the Spark DataFrame of the rows to a trace from read_footers()."""
    # An explicit schema makes files that lack an optional column read it as null, and keeps
    # producers' extra columns out of every plan.
    try:
        trace.df = spark.read.schema(spark_schema()).parquet(*trace.files)
        if trace.stamp_ranges is None:
            _scan_ranges(trace.df, trace)
    except Exception as e:  # a file that passed its footer check but fails to decode
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TraceError(f"{trace.path}: cannot read trace rows: {first[:500]}") from None
    return trace


def load_trace(spark, path: str) -> Trace:
    """read_footers() then open_rows(). The row rules are checked by the checker's main
    pass (main_pass.py), which reads every row anyway: a trace loaded here is not yet known
    to be well formed."""
    return open_rows(spark, read_footers(path))


def _footer_facts(files, trace):
    """Row count and min/max of the stamp columns from the Parquet footers (no data)."""
    rows = 0
    lo = dict.fromkeys(STAMPS)
    hi = dict.fromkeys(STAMPS)
    complete = True
    for f in files:
        md = pq.ParquetFile(f).metadata
        rows += md.num_rows
        names = [md.schema.column(i).name for i in range(md.num_columns)]
        for c in STAMPS:
            if c not in names:
                continue
            j = names.index(c)
            for g in range(md.num_row_groups):
                col = md.row_group(g).column(j)
                st = col.statistics
                if col.num_values == 0 or (st is not None and st.null_count == col.num_values):
                    continue
                if st is None or not st.has_min_max:
                    complete = False
                    continue
                lo[c] = st.min if lo[c] is None else min(lo[c], st.min)
                hi[c] = st.max if hi[c] is None else max(hi[c], st.max)
    trace.rows = rows
    if complete:
        trace.stamp_ranges = {c: (int(lo[c]), int(hi[c])) for c in STAMPS
                              if lo[c] is not None}
        if len(trace.stamp_ranges) < len(STAMPS):
            trace.stamp_ranges = {}
    else:
        trace.stamp_ranges = None


def stamp_layout(ranges):
    """How a send stamp (ts, peer, tx) packs into one order-preserving long: a list of
    (column, offset, shift), least significant first, or None when the ranges are unknown
    or need more than 62 bits. Each component is offset by its minimum over the trace and
    given the bits its range needs, so the packing is injective and monotone for the
    lexicographic order: comparisons of packed stamps are comparisons of stamps."""
    if not ranges:
        return None
    out, shift = [], 0
    for c in ("stamp_tx", "stamp_peer", "stamp_ts"):
        out.append((c, ranges[c][0], shift))
        shift += max(1, (ranges[c][1] - ranges[c][0]).bit_length())
    return out if shift <= 62 else None


def _scan_ranges(df, trace):
    """Stamp ranges by a scan, for files written without column statistics."""
    from pyspark.sql import functions as F
    r = df.agg(*[F.min(c).alias(f"min_{c}") for c in STAMPS],
               *[F.max(c).alias(f"max_{c}") for c in STAMPS]).collect()[0]
    if all(r[f"min_{c}"] is not None for c in STAMPS):
        trace.stamp_ranges = {c: (int(r[f"min_{c}"]), int(r[f"max_{c}"])) for c in STAMPS}
    else:
        trace.stamp_ranges = {}


# The per-row rules in the order they are checked, as the words of a TraceError ("{kind}"
# stands for the row's kind); the Spark main pass (_problem_expr) and the driver's
# (arrays/events.py) test the same conditions in this order.
ROW_RULES = ("column 'process' is null", "column 'seq' is null", "column 'seq' is negative",
             "column 'kind' is null", "column 'kind' has unknown value '{kind}'",
             "column 'msg' is null for a {kind} row",
             "column 'dests' is null or empty for a {kind} row",
             "column 'dests' contains a null process",
             "column 'node' is null for a destroy row")


def read_arrow(trace: Trace):
    """Every row of the trace as one Arrow table with exactly the SPEC columns and types
    (absent optional columns as nulls, producers' extra columns left out), plus `file`: the
    index in trace.files of each row's file. On the driver: for traces that fit there."""
    return pa.concat_tables(read_files(trace, range(len(trace.files)))).combine_chunks()


def read_files(trace: Trace, indexes, columns=None):
    """The tables of trace.files[i] for i in indexes, as read_arrow's rows (only
    `columns`, when given), read side by side (pyarrow decodes without the GIL); the
    first file in order that fails is the one named."""
    target = schema()
    if columns is not None:
        target = pa.schema([target.field(n) for n in columns])

    def read(i):
        f = trace.files[i]
        have = set(pq.read_schema(f).names)
        t = pq.read_table(f, columns=[n for n in target.names if n in have])
        cols = [t.column(fld.name).cast(fld.type) if fld.name in have
                else pa.nulls(t.num_rows, fld.type) for fld in target]
        cols.append(pa.array(np.full(t.num_rows, i, np.int32)))
        return pa.table(cols, names=[*target.names, "file"])
    from concurrent.futures import ThreadPoolExecutor
    indexes = list(indexes)
    try:
        with ThreadPoolExecutor(min(4, max(1, len(indexes)))) as pool:
            return list(pool.map(read, indexes))
    except Exception as e:  # a file that passed its footer check but fails to decode
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TraceError(f"{trace.path}: cannot read trace rows: {first[:500]}") from None


def row_problem_code():
    """The first failing per-row rule as a small int (null when the row is fine); the
    checker's main pass carries it, and raise_row_problem() names the file and row."""
    from pyspark.sql import functions as F
    return _problem_expr(lambda i, msg: F.lit(i)).cast("byte")


def _problem_expr(out):
    from pyspark.sql import functions as F
    kind = F.col("kind")
    is_msg = kind.isin(SEND, DESTROY)
    conditions = [
        F.col("process").isNull(), F.col("seq").isNull(), F.col("seq") < 0, kind.isNull(),
        ~kind.isin(*KINDS), (kind != INTERNAL) & F.col("msg").isNull(),
        is_msg & (F.col("dests").isNull() | (F.size("dests") == 0)),
        is_msg & F.exists("dests", lambda d: d.isNull()),
        (kind == DESTROY) & F.col("node").isNull()]

    def words(template):
        before, _, after = template.partition("{kind}")
        return F.concat(F.lit(before), kind, F.lit(after)) if _ else F.lit(template)

    e = None
    for i, (cond, msg) in enumerate(zip(conditions, map(words, ROW_RULES))):
        e = F.when(cond, out(i, msg)) if e is None else e.when(cond, out(i, msg))
    return e


def raise_row_problem(df):
    """Find the first row breaking a per-row rule (one scan) and raise its TraceError."""
    from pyspark.sql import functions as F
    fname = F.col("_metadata.file_name")
    problem = _problem_expr(lambda i, msg: msg)
    row = F.struct(fname.alias("file"), "process", "seq", "kind", "msg",
                   problem.alias("problem"))
    r = df.agg(F.min(F.when(problem.isNotNull(), row)).alias("bad")).collect()[0]["bad"]
    if r is not None:
        raise TraceError(f"{r['file']}: row {fmt_row(r)}: {r['problem']}")
