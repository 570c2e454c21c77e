# Invariants: a trace whose exact path is certain and whose rows fit one task is checked
# whole in one Spark task, with the driver path's code (local.py: read with pyarrow and
# validated by the same rules, in the same order, with the same words as the main pass;
# local_check.py: exactly_once, fifo, node_rules) and the exact path's kernels
# (walk_kernel.decide: the walk, the causal scan, Tarjan, a verified clock column), so its
# summary is the one the main pass and walk.py would give (summary.py; all but `seconds`
# and `timings`). "Certain" means the stamps cannot witness anything, which the footers
# show before any row is read: --exact, no full stamps anywhere, or stamps too wide to
# pack (witness.py would answer "skipped", "absent" or "inconclusive" and the screen "no
# stamps to screen with"). Below driver_max_cells (rows x processes) causal and consistent
# are decided by driver.py's walk, as Checker.run does after a main pass. A history with a
# causality cycle is left to the usual phases (the Spark rounds define happened-before as
# reachability); so is a trace of more than ONE_TASK_MAX_ROWS rows, whose arrays would not
# fit one executor (about 310 bytes an event: 3.1 GB at 10M). The task reads the trace's
# files where Spark's own scan would, so they are as reachable as they are to Spark. With a
# local master the task's function runs in the driver's process (local executors share
# its machine), with a cluster as a one-task Spark job (mapInArrow).
from __future__ import annotations

import json
import time

from . import walk
from .load import TraceError, stamp_layout
from .witness import ABSENT, TOO_WIDE

ONE_TASK_MAX_ROWS = 12_000_000
OUT_SCHEMA = "rec string, process int, info string"
SKIPPED = "skipped (--exact)"


def stamps_cannot_witness(trace) -> bool:
    """From the footers: no stamp packs (none anywhere, or too wide), so neither the screen
    nor the witness can decide anything."""
    return trace.stamp_ranges is not None and stamp_layout(trace.stamp_ranges) is None


def applies(c) -> bool:
    """Does Checker c's trace go to the exact path whatever its rows say, and fit one task?"""
    return (0 < c.trace.rows <= c.one_task_max_rows and walk.available()
            and (c.force_exact or stamps_cannot_witness(c.trace)))


def _witness_message(c):
    if c.force_exact:
        return SKIPPED
    return TOO_WIDE if c.trace.stamp_ranges else ABSENT


def run(c):
    """(properties, witness message, processes, details) for Checker c, or None when the
    history has a causality cycle. details: property -> processes of its violations, or
    None (only with c.keep_details). Raises TraceError for a malformed trace."""
    from .load import Trace
    plain = Trace(path=c.trace.path, df=None, files=list(c.trace.files), rows=c.trace.rows,
                  stamp_ranges=c.trace.stamp_ranges)
    fn = task(plain, c.span, c.max_examples, c.driver_max_cells, c.keep_details,
              _witness_message(c), walk.vclock_status(plain.files, c.span))
    if c.spark.sparkContext.master.startswith("local"):
        # the executor would be a Python worker forked on this machine: the same code
        # runs here, without the worker's start and imports (seconds on a loaded machine)
        got = [r for batch in fn(iter(())) for r in batch.to_pylist()]
    else:
        got = [r.asDict() for r in
               c.spark.range(1, numPartitions=1).mapInArrow(fn, OUT_SCHEMA).collect()]
    rows = {}
    for r in got:
        rows.setdefault(r["rec"], []).append(r)
    if "error" in rows:
        raise TraceError(rows["error"][0]["info"])
    info = json.loads(rows["summary"][0]["info"])
    c.timings.update(info["seconds"])
    if info["cycle"]:
        return None
    details = {name: [r["process"] for r in rows.get(name, [])] for name in info["details"]}
    return info["properties"], info["witness"], info["processes"], details


def task(trace, span, max_examples, driver_max_cells, keep_details, witness_message, vclock):
    """The function mapInArrow runs on the one task (its one input row is ignored)."""
    def run(batches):
        t0 = time.perf_counter()
        import pyarrow as pa
        for _ in batches:
            pass
        try:
            info, details = check(trace, span, max_examples, driver_max_cells,
                                  witness_message, vclock)
        except TraceError as e:
            yield pa.RecordBatch.from_pydict({"rec": ["error"], "process": pa.nulls(1, pa.int32()),
                                              "info": [str(e)]})
            return
        info["details"] = [k for k, v in details.items() if v is not None] if keep_details else []
        # the task's own time: the rest of the job's is Spark's and the Python worker's
        info["seconds"]["task"] = round(time.perf_counter() - t0, 3)
        for name in info["details"]:
            yield pa.RecordBatch.from_pydict(
                {"rec": pa.array([name] * len(details[name]), pa.string()),
                 "process": pa.array(details[name], pa.int32()),
                 "info": pa.nulls(len(details[name]), pa.string())})
        yield pa.RecordBatch.from_pydict({"rec": ["summary"], "process": pa.nulls(1, pa.int32()),
                                          "info": [json.dumps(info, default=_plain)]})
    return run


def _plain(x):
    """numpy scalars as Python's (json's fallback)."""
    return x.item()


def check(trace, span, max_examples, driver_max_cells, witness_message, vclock):
    """(info, details): the whole check of `trace` here, without Spark. info: properties,
    witness, processes, cycle (a causality cycle: nothing decided), seconds."""
    from .local import Events
    from .local_check import WITNESS, direct_properties, driver_walk
    seconds = {}

    def timed(name, fn, *args):
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            seconds[name] = round(time.perf_counter() - t, 3)

    ev = timed("main_pass", Events, trace)
    info = {"processes": [int(p) for p in ev.procs], "witness": witness_message,
            "cycle": False, "seconds": seconds}
    props, details = direct_properties(ev, max_examples, timed)
    info["properties"] = props
    if ev.fits(driver_max_cells):
        info["witness"] = WITNESS
        info["cycle"] = not timed("driver", driver_walk, ev, max_examples, props, details)
        return info, details
    info["cycle"] = not _kernels(ev, span, max_examples, vclock, props, details, seconds)
    return info, details


def _kernels(ev, span, max_examples, vclock, props, details, seconds):
    """causal and consistent by walk_kernel.decide into props and details, as walk.exact
    and Checker._exact give them; False when the walk meets a causality cycle."""
    import numpy as np
    import pyarrow as pa

    from . import vclock as V
    from . import walk_kernel as W
    t = time.perf_counter()
    lay = W.Layout(pa.table(ev.skeleton_columns()), [int(p) for p in ev.procs], span)
    seconds["kernel_layout"] = round(time.perf_counter() - t, 3)
    vname, vstatus = vclock

    def claimed():
        # the column's rows are read file after file, as Events read them; positions
        # here are Events' (process, seq) order
        got, bad = V.by_row(V.read(ev.trace.files, vname), len(lay.procs))
        if ev.order is None:
            return got, bad
        if got is None:
            return None, (bad[0], int(np.flatnonzero(ev.order == bad[1])[0]))
        return got[ev.order], None

    out, info = W.decide(lay, ("causal", "consistent"), max_examples,
                         claimed if vname else None)
    seconds.update({f"kernel_{k}": v for k, v in info["seconds"].items()})
    if not info["walk_complete"]:
        return False
    for name in ("causal", "consistent"):
        n = info[f"{name}_count"]
        entry = {"ok": n == 0, "violations": n, "examples": info[f"{name}_examples"]}
        if name == "causal":
            entry["vclock"] = info.get("vclock", vstatus)
            if "vclock_first_bad" in info:
                entry["vclock_first_bad"] = info["vclock_first_bad"]
        entry["method"] = ("vector-clock witness" if entry.get("vclock") == "holds"
                           else "exact")
        props[name] = entry
        details[name] = out[name]
    return True
