# Invariants: a trace is accepted only if every Parquet file has the SPEC section-7 columns
# with the SPEC types (extra columns are ignored, the optional ones -- wall_ns and the three
# stamp columns -- may be absent and then read as null), every row has a known kind and the
# fields that kind needs (checked here, one scan), and each process's seq runs 0,1,2,...
# without gaps or duplicates and every id has one origin (checked by the checker's main pass,
# which shuffles by process and by id anyway: properties.Checker._base). Any failure raises
# TraceError whose message names the file, the column and the row problem;
# the CLI maps it to exit code 2. Schema checks read Parquet footers only (pyarrow, no data);
# row checks are Spark jobs that return at most a few offending rows to the driver, so a
# 100M-event trace is never collected.
from __future__ import annotations

import os
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

STAMPS = ("stamp_ts", "stamp_peer", "stamp_tx")
KINDS = ("send", "deliver", "signal_send", "signal_recv", "destroy", "internal")

# column -> (arrow type test, human type name, required)
_INT32 = (pa.types.is_int32, "int32")
_INT64 = (pa.types.is_int64, "int64")
_STRING = (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)
           or (pa.types.is_dictionary(t) and pa.types.is_string(t.value_type)), "string")
_LIST32 = (lambda t: (pa.types.is_list(t) or pa.types.is_large_list(t))
           and pa.types.is_int32(t.value_type), "list<int32>")

COLUMNS = {
    "process": (_INT32, True),
    "seq": (_INT64, True),
    "kind": (_STRING, True),
    "msg": (_INT64, True),
    "dests": (_LIST32, True),
    "node": (_INT64, True),
    "wall_ns": (_INT64, False),
    "stamp_ts": (_INT64, False),
    "stamp_peer": (_INT64, False),
    "stamp_tx": (_INT64, False),
}


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
    stamp_ranges: dict = field(default_factory=dict)  # stamp column -> (min, max) over sends


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
    from pyspark.sql import types as T
    return T.StructType([
        T.StructField("process", T.IntegerType()),
        T.StructField("seq", T.LongType()),
        T.StructField("kind", T.StringType()),
        T.StructField("msg", T.LongType()),
        T.StructField("dests", T.ArrayType(T.IntegerType())),
        T.StructField("node", T.LongType()),
        T.StructField("wall_ns", T.LongType()),
        T.StructField("stamp_ts", T.LongType()),
        T.StructField("stamp_peer", T.LongType()),
        T.StructField("stamp_tx", T.LongType()),
    ])


def _fmt_row(r, cols=("process", "seq", "kind", "msg")) -> str:
    d = r if isinstance(r, dict) else r.asDict()
    return ", ".join(f"{c}={d[c]!r}" for c in cols if c in d)


def _file_of(df, fname, process, seq) -> str:
    from pyspark.sql import functions as F
    got = (df.where((F.col("process") == process) & (F.col("seq") == seq))
           .select(fname.alias("file")).limit(1).collect())
    return got[0]["file"] if got else "?"


def load_trace(spark, path: str, validate: bool = True) -> Trace:
    files = parquet_files(path)
    check_schemas(files)
    # An explicit schema makes files that lack an optional column read it as null, and keeps
    # producers' extra columns out of every plan.
    try:
        df = spark.read.schema(spark_schema()).parquet(*files)
    except Exception as e:
        raise TraceError(f"{path}: cannot read trace: {e}") from None
    trace = Trace(path=path, df=df, files=files)
    if not validate:
        return trace
    try:
        _validate(df, trace)
    except TraceError:
        raise
    except Exception as e:  # a file that passed its footer check but fails to decode
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TraceError(f"{path}: cannot read trace rows: {first[:500]}") from None
    return trace


def _validate(df, trace):
    from pyspark.sql import functions as F

    # the hidden metadata column is deterministic (input_file_name() is not, and cannot be
    # aggregated)
    fname = F.col("_metadata.file_name")
    kind = F.col("kind")
    is_msg = kind.isin("send", "destroy")
    # One scan: the first failing rule of each row (CASE order is the rule order).
    problem = (
        F.when(F.col("process").isNull(), F.lit("column 'process' is null"))
        .when(F.col("seq").isNull(), F.lit("column 'seq' is null"))
        .when(F.col("seq") < 0, F.lit("column 'seq' is negative"))
        .when(kind.isNull(), F.lit("column 'kind' is null"))
        .when(~kind.isin(*KINDS), F.concat(F.lit("column 'kind' has unknown value '"), kind,
                                           F.lit("'")))
        .when((kind != "internal") & F.col("msg").isNull(),
              F.concat(F.lit("column 'msg' is null for a "), kind, F.lit(" row")))
        .when(is_msg & (F.col("dests").isNull() | (F.size("dests") == 0)),
              F.concat(F.lit("column 'dests' is null or empty for a "), kind, F.lit(" row")))
        .when(is_msg & F.exists("dests", lambda d: d.isNull()),
              F.lit("column 'dests' contains a null process"))
        .when((kind == "destroy") & F.col("node").isNull(),
              F.lit("column 'node' is null for a destroy row"))
    )
    # Pass 1 (one scan): the first offending row, plus the facts the checker needs.
    row = F.struct(fname.alias("file"), "process", "seq", "kind", "msg",
                   problem.alias("problem"))
    stats = df.agg(
        F.min(F.when(problem.isNotNull(), row)).alias("bad"),
        F.count(F.lit(1)).alias("rows"),
        F.sort_array(F.collect_set("process")).alias("procs"),
        F.sum(F.when(is_msg & (F.col("stamp_ts").isNull() | F.col("stamp_peer").isNull()
                               | F.col("stamp_tx").isNull()), 1).otherwise(0)).alias("unstamped"),
        F.sum(F.when(is_msg, 1).otherwise(0)).alias("msgs"),
        F.count(F.when(kind == "destroy", 1)).alias("destroys"),
        *[F.min(F.when(is_msg, F.col(c))).alias(f"min_{c}") for c in STAMPS],
        *[F.max(F.when(is_msg, F.col(c))).alias(f"max_{c}") for c in STAMPS],
    ).collect()[0]
    if stats["bad"] is not None:
        r = stats["bad"]
        raise TraceError(f"{r['file']}: row {_fmt_row(r)}: {r['problem']}")

    # The other row rules -- each process's seq is 0, 1, 2, ... without gaps or duplicates;
    # every message or signal id has exactly one origin row and every deliver/signal_recv
    # names one -- need a shuffle by process and one by id. The checker's main pass makes
    # exactly those two shuffles anyway, so it checks them there (Checker._base) and raises
    # TraceError before reporting any property.
    trace.rows = int(stats["rows"])
    trace.processes = list(stats["procs"])
    trace.has_stamps = bool(stats["msgs"]) and int(stats["unstamped"]) == 0
    trace.has_destroy = int(stats["destroys"]) > 0
    if trace.has_stamps:
        trace.stamp_ranges = {c: (int(stats[f"min_{c}"]), int(stats[f"max_{c}"]))
                              for c in STAMPS}
