# Invariants: the whole check of a trace in one process, without Spark, for a trace whose
# exact path is certain: the stamps cannot witness anything (--exact, no stamp column with a
# value in the footers' statistics, or stamps too wide to pack), which the footers show
# before any row is read. The rows are read and validated by local.py (the main pass's
# rules, order and words), exactly_once, fifo and node_rules decided by local_check.py,
# causal and consistent by the exact path's kernels (walk_kernel.decide, with a verified
# clock column) or, at most driver_max_cells rows x processes, by driver.py's walk, as
# Checker.run does after a main pass. So the answer is the one the main pass and the
# phases after it give (summary.py; all but `seconds` and `timings`), whether it runs on
# the driver (local_check.py), in the driver's process under a local master, or as one
# Spark task (one_task.py). Nothing here imports pyspark.
from __future__ import annotations

import time

from .load import stamp_layout

# Below this many rows the Spark path skips the screen (checker.py: a main pass alone is
# cheaper); at or above it the screen runs, and answers NO_STAMPS for such a trace.
SCREEN_MIN_ROWS = 1_000_000
# The arrays of the whole check take about 310 bytes an event (3.1 GB at 10M): larger
# traces take the main pass, whose exact phase holds about 40 bytes an event.
ONE_TASK_MAX_ROWS = 12_000_000
# the screen's, and the witness's answers when the stamps cannot witness anything
NO_STAMPS = "no stamps to screen with"
SKIPPED = "skipped (--exact)"
TOO_WIDE = "inconclusive: stamps too wide to pack into 62 bits"
ABSENT = "absent: some send/destroy row has no stamp"


def stamps_cannot_witness(trace) -> bool:
    """From the footers: no stamp packs (none anywhere, or too wide), so neither the screen
    nor the witness can decide anything."""
    return trace.stamp_ranges is not None and stamp_layout(trace.stamp_ranges) is None


def eligible(trace, exact, max_rows=ONE_TASK_MAX_ROWS) -> bool:
    """Does this trace (footers read) go to the exact path whatever its rows say, and fit?"""
    from .walk_kernel import available
    return (0 < trace.rows <= max_rows and available()
            and (exact or stamps_cannot_witness(trace)))


def screen_message(trace, exact, screen_min_rows=SCREEN_MIN_ROWS):
    """The summary's `screen` for an eligible trace, as Checker.run gives it."""
    if exact:
        return SKIPPED
    if trace.rows < screen_min_rows:
        return f"skipped: {trace.rows} rows, the main pass alone is cheaper"
    return NO_STAMPS


def witness_message(trace, exact):
    """The summary's `witness` for an eligible trace when the kernels decide."""
    if exact:
        return SKIPPED
    return TOO_WIDE if trace.stamp_ranges else ABSENT


def check(trace, span, max_examples, driver_max_cells, witness_message, vclock, ev=None):
    """(info, details): the whole check of `trace` here, without Spark (ev: its
    local.Events when already read). info: properties, witness, processes, cycle (a
    causality cycle: nothing decided), seconds. vclock: vclock.status of its files."""
    from .local import Events
    from .local_check import WITNESS, direct_properties, driver_walk
    seconds = {}

    def timed(name, fn, *args):
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            seconds[name] = round(time.perf_counter() - t, 3)

    if ev is None:
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
