# Invariants: the exact path of `causal` and `consistent` as one Spark job: the main pass's
# persisted table (validated) is read by one task (coalesce(1), no shuffle) through Arrow
# (mapInArrow), and arrays/walk.py decides both properties on it with compiled kernels --
# one topological walk for the vector clocks, one linear scan for causal, Tarjan for the
# components. The job's output stays in Spark: one row per violation (the details) and one
# summary row (counts and examples, as JSON), so the driver collects one row. A producer's
# vector-clock column (schema.VCLOCK) is a witness, never trusted: it is used only when it
# verifies against the rows in the same job; otherwise the result says why and the walk
# decides. A causality cycle (a broken trace) leaves the walk unfinished; `causal` then
# goes back to the Spark rounds (causal.py), which define happened-before as reachability.
from __future__ import annotations

import json
import time

from pyspark.sql import functions as F

from .. import vclock
from ..arrays.walk import COLUMNS

OUT_SCHEMA = "rec string, process int, info string"


def kernel_task(procs, span, max_examples, want, vclock_files, vclock_name):
    """The function mapInArrow runs on the one task: all rows in, violation and summary
    rows out. vclock_files: the trace's files, read here for their clock column
    `vclock_name` (with pyarrow: Spark's conversion of a list column to Arrow costs several
    times the walk), or None. The task reads them where Spark's own scan would, so they
    are as reachable."""
    def run(batches):
        import numpy as np
        import pyarrow as pa

        from .. import vclock as V
        from ..arrays import walk as W
        t0 = time.perf_counter()
        batches = list(batches)
        if not batches:
            return
        table = pa.Table.from_batches(batches)
        del batches
        received = time.perf_counter() - t0
        lay = W.Layout(table, procs, span)
        del table
        layout = time.perf_counter() - t0 - received

        def claimed():
            import pyarrow.parquet as pq
            pos = lay.positions(pa.concat_tables(
                pq.read_table(f, columns=["process", "seq"]) for f in vclock_files))
            got, bad = V.by_row(V.read(vclock_files, vclock_name), len(lay.procs))
            if got is None:
                return None, (bad[0], int(pos[bad[1]]))
            by_pos = np.empty_like(got)
            by_pos[pos] = got
            return by_pos, None

        out, info = W.decide(lay, want, max_examples, claimed if vclock_files else None)
        info["seconds"].update(receive=round(received, 3), layout=round(layout, 3))
        for rec, procs_ in out.items():
            if len(procs_):
                yield pa.RecordBatch.from_pydict(
                    {"rec": pa.array([rec] * len(procs_), pa.string()),
                     "process": pa.array(procs_, pa.int32()),
                     "info": pa.nulls(len(procs_), pa.string())})
        yield pa.RecordBatch.from_pydict({"rec": ["summary"], "process": pa.nulls(1, pa.int32()),
                                          "info": [json.dumps(info)]})
    return run


def exact(c, want):
    """{property: (violations DataFrame, count, examples, extra)} for the properties in
    `want`; causal is (None, None, None, extra) when the history has a causality cycle
    (the walk cannot decide it). extra has causal's vclock status. The kernel's timings go
    to c.timings."""
    vname, vstatus = vclock.status(c.trace.files, c.span) if "causal" in want else (None, None)
    rows = c.rows.select(*COLUMNS)
    fn = kernel_task([int(p) for p in c.procs], c.span, c.max_examples, sorted(want),
                     list(c.trace.files) if vname else None, vname)
    out = c.persist(rows.coalesce(1).mapInArrow(fn, OUT_SCHEMA))
    info = json.loads(out.where(F.col("rec") == "summary").collect()[0]["info"])
    c.timings.update({f"kernel_{k}": v for k, v in info["seconds"].items()})
    found = {}
    for name in want:
        extra = {}
        if name == "causal" and vstatus is not None:
            extra["vclock"] = info.get("vclock", vstatus)
            if "vclock_first_bad" in info:
                extra["vclock_first_bad"] = info["vclock_first_bad"]
        if name == "causal" and not info.get("walk_complete"):
            found[name] = (None, None, None, extra)
            continue
        found[name] = (out.where(F.col("rec") == name).select("process"),
                       info[f"{name}_count"], info.get(f"{name}_examples", []), extra)
    return found
