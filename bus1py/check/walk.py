# Invariants: the exact path of `causal` and `consistent` as one Spark job: the main pass's
# persisted table (validated) is read by one task (coalesce(1), no shuffle) through Arrow
# (mapInArrow), and walk_kernel.py decides both properties on it with compiled kernels --
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

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import functions as F

from .. import schema as S
from .walk_kernel import COLUMNS

OUT_SCHEMA = "rec string, process int, info string"


def available():
    """Is the compiled kernel module importable (it is whenever the package is installed)?"""
    try:
        from . import _walk  # noqa: F401
    except ImportError:
        return False
    return True


def vclock_column(trace):
    """(usable, why): whether every file has a vclock column of the agreed type."""
    name, tname = S.VCLOCK
    for f in trace.files:
        sch = pq.read_schema(f)
        i = sch.get_field_index(name)
        if i < 0:
            return False, "absent" if f == trace.files[0] else f"absent from {f}"
        t = sch.field(i).type
        if not (pa.types.is_list(t) and pa.types.is_int32(t.value_type)):
            return False, f"not used: column '{name}' of {f} has type {t}, expected {tname}"
    return True, "present"


def kernel_task(procs, span, max_examples, want, vclock_files):
    """The function mapInArrow runs on the one task: all rows in, violation and summary
    rows out. vclock_files: the trace's files, read here for their vclock column (with
    pyarrow: Spark's conversion of a list column to Arrow costs several times the walk),
    or None. The task reads them where Spark's own scan would, so they are as reachable."""
    def run(batches):
        import pyarrow as pa

        from . import walk_kernel as W
        t0 = time.perf_counter()
        batches = list(batches)
        if not batches:
            return
        table = pa.Table.from_batches(batches)
        del batches
        received = time.perf_counter() - t0
        lay = W.Layout(table, procs, span)
        info = {"events": lay.n, "seconds": {"receive": round(received, 3)}}
        clock_rows = clocks = None
        if vclock_files:
            import pyarrow.parquet as pq
            vrows = pa.concat_tables(pq.read_table(f, columns=["process", "seq", S.VCLOCK[0]])
                                     for f in vclock_files)
            claimed, why = W.claimed_clocks(lay, lay.positions(vrows),
                                            vrows.column(S.VCLOCK[0]).combine_chunks())
            del vrows
            if claimed is not None:
                why = W.verify(lay, claimed)
            if why is None:
                info["vclock"] = "holds"
                clock_rows = _identity(lay.n)
                clocks = claimed.reshape(-1)
            else:
                info["vclock"] = f"failed: {why[0]}"
                info["vclock_first_bad"] = lay.event_at(why[1])
        del table
        info["seconds"]["layout"] = round(time.perf_counter() - t0 - received, 3)
        out = {"causal": [], "consistent": []}
        if "causal" in want:
            t = time.perf_counter()
            complete = True
            if clocks is None:
                clock_rows, clocks, complete = W.walk(lay)
            info["walk_complete"] = complete
            if complete:
                bad, info["causal_examples"] = W.causal(lay, clock_rows, clocks, max_examples)
                out["causal"] = lay.procs[lay.slot_of[bad]]
            info["seconds"]["causal"] = round(time.perf_counter() - t, 3)
        if "consistent" in want:
            t = time.perf_counter()
            out["consistent"], info["consistent_examples"] = W.consistent(lay, max_examples)
            info["seconds"]["consistent"] = round(time.perf_counter() - t, 3)
        for rec, procs_ in out.items():
            info[f"{rec}_count"] = len(procs_)
            if len(procs_):
                yield pa.RecordBatch.from_pydict(
                    {"rec": pa.array([rec] * len(procs_), pa.string()),
                     "process": pa.array(procs_, pa.int32()),
                     "info": pa.nulls(len(procs_), pa.string())})
        yield pa.RecordBatch.from_pydict({"rec": ["summary"], "process": pa.nulls(1, pa.int32()),
                                          "info": [json.dumps(info)]})
    return run


def _identity(n):
    import numpy as np
    return np.arange(n, dtype=np.int64)


def exact(c, want):
    """{property: (violations DataFrame, count, examples, extra)} for the properties in
    `want`; causal is (None, None, None, extra) when the history has a causality cycle
    (the walk cannot decide it). extra has causal's vclock status. The kernel's timings go
    to c.timings."""
    with_vclock = False
    vstatus = None
    if "causal" in want:
        with_vclock, vstatus = vclock_column(c.trace)
        if with_vclock and c.span:
            with_vclock, vstatus = False, "not used: the trace is a batch of sub-traces"
    rows = c.rows.select(*COLUMNS)
    fn = kernel_task([int(p) for p in c.procs], c.span, c.max_examples, sorted(want),
                     list(c.trace.files) if with_vclock else None)
    out = rows.coalesce(1).mapInArrow(fn, OUT_SCHEMA).persist(StorageLevel.MEMORY_AND_DISK)
    c._persisted.append(out)
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
