# Invariants: the overview is what a report shows of a run whatever the verdict: events per
# process, a histogram of delivery latency (wall time of a delivery minus that of its send;
# wall clocks are only displayed here, never used to decide anything), a small window of
# the run for a space-time diagram, and the stress tool's own summary when the trace
# directory (or the directory holding it) has one. It is computed only when a report is
# asked for: three small Spark jobs, each returning at most a few hundred rows.
from __future__ import annotations

import json
import os

from pyspark.sql import functions as F

from .. import schema as N
from .examples import event

WINDOW_PROCESSES, WINDOW_EVENTS = 5, 8     # the diagram: first events of a few processes
STRESS_SUMMARY = "stress.json"


def overview(c) -> dict:
    df = c.trace.df
    counts = {str(r["process"]): int(r["count"]) for r in
              df.groupBy("process").count().orderBy("process").collect()}
    origins = df.where(F.col("kind").isin(N.SEND, N.DESTROY)).select(
        "msg", F.col("process").alias("sender_process"), F.col("seq").alias("send_seq"),
        F.col("wall_ns").alias("send_wall"))
    lat = (df.where(F.col("kind") == N.DELIVER).select("msg", "wall_ns").join(origins, "msg")
           .select(((F.col("wall_ns") - F.col("send_wall")) / 1000.0).alias("us")))
    # bucket b >= 1 holds latencies in [2^(b-1), 2^b) us, 0 those under 1 us, -1 the
    # negative ones (wall clocks that disagree across processes)
    us = F.col("us")
    bucket = (F.when(us < 0, F.lit(-1)).when(us < 1, F.lit(0))
              .otherwise(F.floor(F.log2(us)).cast("int") + 1))
    hist = {int(r["b"]): int(r["n"]) for r in lat.where(F.col("us").isNotNull())
            .groupBy(bucket.alias("b")).agg(F.count(F.lit(1)).alias("n")).collect()}
    procs = sorted(int(p) for p in counts)[:WINDOW_PROCESSES]
    rows = (df.where(F.col("process").isin(procs) & (F.col("seq") < WINDOW_EVENTS))
            .join(origins, "msg", "left")
            .select("process", "seq", "kind", "msg", "sender_process", "send_seq").collect())
    window = []
    for r in sorted(rows, key=lambda r: (r["process"], r["seq"])):
        o = None
        if r["kind"] == N.DELIVER and r["sender_process"] is not None:
            o = (r["sender_process"], r["send_seq"])
        window.append(event(r["process"], r["seq"], r["kind"], r["msg"], origin=o))
    return {"events_per_process": counts,
            "latency_log2_us": {str(k): hist[k] for k in sorted(hist)},
            "window": window, "stress": _stress_summary(c.trace.path)}


def _stress_summary(path):
    """The stress tool's summary (rates, latency percentiles, errors), if it sits beside
    the trace: only its scalar fields and the small dicts the report shows."""
    for d in (path, os.path.dirname(os.path.abspath(path))):
        f = os.path.join(d, STRESS_SUMMARY)
        if os.path.isfile(f):
            try:
                with open(f) as fh:
                    s = json.load(fh)
            except (OSError, ValueError):
                return None
            keep = {k: v for k, v in s.items() if isinstance(v, (int, float, str, bool))}
            for k in ("latency_us", "errors", "peaks"):
                if isinstance(s.get(k), dict):
                    keep[k] = {a: b for a, b in s[k].items()
                               if isinstance(b, (int, float, str, bool))}
            return keep
    return None
