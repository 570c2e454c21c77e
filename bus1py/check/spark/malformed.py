# Invariants: a trace the tasks by message found malformed (by_message.py: a per-row rule, a
# broken numbering, an id with several origins, a receive of an unknown id) is named here
# as the driver's Events names it (arrays/events.py): the rules in that order, the least
# offending row of the first broken rule, the same words. Each rule is one Spark query over
# the rows, returning one row to the driver, so naming holds no more of the trace than
# Spark's own spilling sorts do. It runs only on a trace already known to be malformed.
from __future__ import annotations

from pyspark.sql import Window
from pyspark.sql import functions as F

from .. import kinds as K
from ..arrays.events import seq_problem
from ..load import TraceError, fmt_row, raise_row_problem, rows_of


def name(spark, trace):
    """Raise the TraceError naming the first broken row of `trace`."""
    df = rows_of(spark, trace)
    raise_row_problem(df)
    code = K.kind_code()
    rows = df.select("process", "seq", code.alias("kind_code"), "msg",
                     F.col("_metadata.file_name").alias("file"))
    _numbering(rows)
    c = F.col("kind_code")
    is_signal = c.isin(*K.SIGNALS).alias("is_signal")
    origins = rows.where((c <= K.DESTROY) | (c == K.SIGNAL_SEND)).select(
        is_signal, "msg", "process", "seq", "file")
    several = (origins.groupBy("is_signal", "msg")
               .agg(F.count(F.lit(1)).alias("n"),
                    F.min(F.struct("process", "seq", "file")).alias("first"))
               .where(F.col("n") > 1).orderBy("is_signal", "msg").limit(1).collect())
    if several:
        r = several[0]
        space = "signal" if r["is_signal"] else "message"
        raise TraceError(f"{r['first']['file']}: column 'msg': {space} id {r['msg']} is "
                         f"sent by {r['n']} rows (ids must be unique in the trace)")
    dangling = (rows.where(c.isin(*K.RECEIVES)).select(is_signal, "msg", "process", "seq",
                                                       "kind_code", "file")
                .join(origins.select("is_signal", "msg").distinct(), ["is_signal", "msg"],
                      "left_anti")
                .orderBy("is_signal", "msg", "process", "seq").limit(1).collect())
    if dangling:
        r = dangling[0]
        row = {"process": r["process"], "seq": r["seq"], "kind": K.NAMES[r["kind_code"]],
               "msg": r["msg"]}
        what = "receives unknown signal" if r["is_signal"] else "delivers unknown message"
        src = "no signal_send row" if r["is_signal"] else "no send or destroy row"
        raise TraceError(f"{r['file']}: column 'msg': row {fmt_row(row)} {what} "
                         f"{r['msg']} ({src} has that id)")
    raise TraceError(f"{trace.path}: malformed trace (its tasks found a broken rule that no "
                     f"query names)")


def _numbering(rows):
    """Raise the TraceError of the first row, in (process, seq) order, whose seq does not
    follow its process's previous one (the first must be 0)."""
    prev = F.lag("seq").over(Window.partitionBy("process").orderBy("seq"))
    bad = (rows.select("process", "seq", F.coalesce(prev, F.lit(-1)).alias("prev"))
           .where(F.col("seq") != F.col("prev") + 1)
           .agg(F.min(F.struct("process", "seq", "prev")).alias("b")).collect()[0]["b"])
    if bad is None:
        return
    p, seq = bad["process"], bad["seq"]
    what = seq_problem(seq, bad["prev"])
    f = (rows.where((F.col("process") == p) & (F.col("seq") == seq))
         .agg(F.min("file").alias("f")).collect()[0]["f"])
    raise TraceError(f"{f}: column 'seq' of process {p}: {what}")
