# Invariants: the overview is what a report shows of a run whatever the verdict: events per
# process, a histogram of delivery latency (wall time of a delivery minus that of its send;
# wall clocks are only displayed here, never used to decide anything), a small window of
# the run for a space-time diagram, and the stress tool's own summary when the trace
# directory (or the directory holding it) has one. It is computed only when a report is
# asked for: three small Spark jobs, each returning at most a few hundred rows.
from __future__ import annotations

import json
import os

from .. import schema as N
from . import kinds as K
from .examples import event

WINDOW_PROCESSES, WINDOW_EVENTS = 5, 8     # the diagram: first events of a few processes
STRESS_SUMMARY = "stress.json"


def overview(c) -> dict:
    """From a Spark check (checker.Checker): three small Spark jobs."""
    from pyspark.sql import functions as F
    df = c.trace.df
    counts = {int(r["process"]): int(r["count"]) for r in
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
    procs = sorted(counts)[:WINDOW_PROCESSES]
    rows = (df.where(F.col("process").isin(procs) & (F.col("seq") < WINDOW_EVENTS))
            .join(origins, "msg", "left")
            .select("process", "seq", "kind", "msg", "sender_process", "send_seq").collect())
    return _assemble(counts, hist, [r.asDict() for r in rows], c.trace.path)


def overview_local(ev) -> dict:
    """The same from the driver's events (local.Events), with numpy."""
    import numpy as np
    procs, counts = np.unique(ev.process, return_counts=True)
    d = np.flatnonzero(ev.code == K.DELIVER)
    o = ev.origin[d]
    ok = ev.has_wall[d] & ev.has_wall[o]
    # as Spark computes it: a double division, then log(x) / log(2)
    us = (ev.wall[d][ok] - ev.wall[o][ok]).astype(np.float64) / 1000.0
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.where(us < 0, -1, np.where(us < 1, 0, np.floor(
            np.log(np.maximum(us, 1)) / np.log(2.0)).astype(np.int64) + 1))
    keys, n = np.unique(b, return_counts=True)
    hist = dict(zip(keys.tolist(), n.tolist()))
    near = np.flatnonzero(np.isin(ev.process, procs[:WINDOW_PROCESSES])
                          & (ev.seq < WINDOW_EVENTS))
    rows = [{"process": int(ev.process[i]), "seq": int(ev.seq[i]),
             "kind": K.NAMES[int(ev.code[i])],
             "msg": int(ev.msg[i]) if ev.has_msg[i] else None,
             "sender_process": int(ev.sender[i]), "send_seq": int(ev.send_seq[i])}
            for i in near]
    return _assemble(dict(zip(procs.tolist(), counts.tolist())), hist, rows, ev.trace.path)


def empty_overview(path) -> dict:
    """The overview of a trace without rows."""
    return _assemble({}, {}, [], path)


def _assemble(counts, hist, rows, path):
    window = []
    for r in sorted(rows, key=lambda r: (r["process"], r["seq"])):
        o = None
        if r["kind"] == N.DELIVER and r["sender_process"] is not None:
            o = (r["sender_process"], r["send_seq"])
        window.append(event(r["process"], r["seq"], r["kind"], r["msg"], origin=o))
    return {"events_per_process": {str(p): counts[p] for p in sorted(counts)},
            "latency_log2_us": {str(k): hist[k] for k in sorted(hist)},
            "window": window, "stress": _stress_summary(path)}


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
