# Invariants: on the Spark path, a trace whose exact path is certain and whose rows fit one
# task (engine.whole_trace) is checked whole in one task by arrays.whole.check, so its
# summary is the one the main pass and the phases after it would give (all but `seconds`
# and `timings`).
# With a local master the task's function runs in the driver's process (local executors
# share its machine), with a cluster as a Spark job of one task (mapInArrow over one row)
# that reads the trace's files where Spark's own scan would. The task's result is rows: one
# per violation's process (details, only when asked) and one summary (JSON); a malformed
# trace comes back as an error row and is raised here as TraceError. A history with a
# causality cycle is left to the usual phases (the Spark rounds define happened-before as
# reachability).
from __future__ import annotations

import json
import time

from .. import engine, vclock
from ..arrays.whole import check
from ..load import TraceError
from .walk_task import OUT_SCHEMA, summary_row, violation_rows

def run(c):
    """(properties, witness message, processes, details) for Checker c, or None when the
    history has a causality cycle. details: property -> processes of its violations, or
    None (only with c.keep_details). Raises TraceError for a malformed trace."""
    from ..load import Trace
    plain = Trace(path=c.trace.path, df=None, files=list(c.trace.files), rows=c.trace.rows,
                  stamp_ranges=c.trace.stamp_ranges)
    fn = task(plain, c.span, c.max_examples, c.driver_max_cells, c.keep_details,
              engine.witness_skipped(c.trace, c.force_exact), vclock.status(plain.files, c.span))
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


def task(trace, span, max_examples, driver_max_cells, keep_details, witness, vclock):
    """The function mapInArrow runs on the one task (its one input row is ignored)."""
    def run(batches):
        t0 = time.perf_counter()
        for _ in batches:
            pass
        try:
            info, details = check(trace, span, max_examples, driver_max_cells,
                                  witness, vclock)
        except TraceError as e:
            yield summary_row(str(e), "error")
            return
        info["details"] = [k for k, v in details.items() if v is not None] if keep_details else []
        # the task's own time: the rest of the job's is Spark's and the Python worker's
        info["seconds"]["task"] = round(time.perf_counter() - t0, 3)
        for name in info["details"]:
            yield violation_rows(name, details[name])
        yield summary_row(info)
    return run
