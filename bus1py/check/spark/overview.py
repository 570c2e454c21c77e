"""The run's overview by the Spark engine: three small Spark jobs over the trace's rows,
each returning at most a few hundred rows; bus1py.check.overview shapes the result.
"""
from __future__ import annotations

from ... import schema as S
from ..overview import WINDOW_EVENTS, WINDOW_PROCESSES, assemble


def overview(c) -> dict:
    """From a Spark check (checker.Checker): three small Spark jobs."""
    from pyspark.sql import functions as F
    from ..load import rows_of
    df = rows_of(c.spark, c.trace)
    counts = {int(r["process"]): int(r["count"]) for r in
              df.groupBy("process").count().orderBy("process").collect()}
    origins = df.where(F.col("kind").isin(S.SEND, S.DESTROY)).select(
        "msg", F.col("process").alias("sender_process"), F.col("seq").alias("send_seq"),
        F.col("wall_ns").alias("send_wall"))
    lat = (df.where(F.col("kind") == S.DELIVER).select("msg", "wall_ns").join(origins, "msg")
           .select(((F.col("wall_ns") - F.col("send_wall")) / 1000.0).alias("us")))
    # bucket b >= 1 holds latencies in [2^(b-1), 2^b) us, 0 those under 1 us, -1 the
    # negative ones (wall clocks that disagree across processes)
    us = F.col("us")
    bucket = (F.when(us < 0, F.lit(-1)).when(us < 1, F.lit(0))
              .otherwise(F.floor(F.log2(us)).cast("int") + 1))
    hist = {int(r["b"]): int(r["n"]) for r in lat.where(F.col("us").isNotNull())
            .groupBy(bucket.alias("b")).agg(F.count(F.lit(1)).alias("n")).collect()}
    procs = sorted(counts)[:WINDOW_PROCESSES]
    rows = (df.where(F.col("process").isin(procs) & (F.col("seq") < WINDOW_EVENTS))
            .join(origins, "msg", "left")
            .select("process", "seq", "kind", "msg", "sender_process", "send_seq").collect())
    return assemble(counts, hist, [r.asDict() for r in rows], c.trace.path)
