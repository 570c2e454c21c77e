# Invariants: a trace is accepted only if every Parquet file has the SPEC section-7 columns
# with the SPEC types (extra columns are ignored, the optional ones -- wall_ns and the three
# stamp columns -- may be absent and then read as null), every row has a known kind and the
# fields that kind needs, each process's seq runs 0,1,2,... without gaps or duplicates and
# every id has one origin. Schemas and the row count come from the footers here; the row
# rules are checked where the rows are read (arrays/events.py on the driver, the tasks by
# message on Spark, spark/by_message.py, whose malformed traces spark/malformed.py names).
# Any failure raises TraceError whose message names the file, the column and the row
# problem; the CLI maps it to exit code 2. Schema checks read Parquet footers only
# (pyarrow, no data); Spark's naming of a broken row returns one row to the driver, so a
# 100M-event trace is never collected. Stamps are read by nobody: the checker decides from
# the rows alone.
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
    """A validated trace: its files, the facts learnt while checking, and the Spark
    DataFrame of its rows once opened (rows_of)."""
    path: str
    df: object                      # None, or the DataFrame with exactly the COLUMNS above
    files: list = field(default_factory=list)
    rows: int = 0
    processes: list = field(default_factory=list)   # sorted distinct process ids


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
    """The trace's files, schemas and row count, from Parquet footers only (no Spark, no
    data): what the checker needs to choose its path before the rows are read."""
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
    except Exception as e:  # a file that passed its footer check but fails to decode
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TraceError(f"{trace.path}: cannot read trace rows: {first[:500]}") from None
    return trace


def rows_of(spark, trace: Trace):
    """The Spark DataFrame of the trace's rows, opened (open_rows) on first use: only
    the naming of a malformed row and the report's overview read rows through Spark, and
    opening lists the files in a Spark job of its own."""
    return trace.df if trace.df is not None else open_rows(spark, trace).df


def load_trace(spark, path: str) -> Trace:
    """read_footers() then open_rows(). The row rules are checked by the check, which
    reads every row anyway: a trace loaded here is not yet known to be well formed."""
    return open_rows(spark, read_footers(path))


def _footer_facts(files, trace):
    """The row count from the Parquet footers (no data)."""
    trace.rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)


# The per-row rules in the order they are checked, as the words of a TraceError ("{kind}"
# stands for the row's kind); Spark's naming of a broken row (_problem_expr) and the
# driver's (arrays/events.py) test the same conditions in this order.
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
