"""The whole check of a trace in one process, by the array engine: the driver's check
(check_local), the one path besides the Spark path by message (engine.py).

Invariants: the rows are read and validated by events.py (the rules, their order and
words of every path: a malformed trace raises TraceError), exactly_once, fifo and
node_rules decided by properties.py, causal and consistent by the exact walk (walk.py),
on a history with a causality cycle by the streamed walk's rounds (rounds.py); with a verified clock
column for causal when rows x processes pass driver_max_cells and the trace has one. So
the answer is the one the Spark path by message gives for the same trace (summary.py;
all but `seconds` and `timings`). Stamps are never read. Nothing here imports pyspark.
"""
from __future__ import annotations

import time

from .. import engine, vclock
from ..summary import PROPERTIES, all_hold, build
from .events import Events
from .properties import direct_properties
from .layout import Layout
from .rounds import decide
from .walk import summary_entries


def check_local(trace, max_examples=3, keep_details=False, overview=False,
                driver_max_cells=engine.DRIVER_MAX_CELLS):
    """(summary, details) of a trace from load.read_footers. details: property -> the
    process of each violation (keep_details; tests count them). overview: the summary
    gets the report's "overview" (arrays/overview.py). driver_max_cells: rows x processes
    above which a clock column, when the trace has one, decides causal (tests lower it)."""
    t0 = time.perf_counter()
    timings = {}
    if trace.rows == 0:
        summary = build(trace.path, 0, 0, all_hold(), time.perf_counter() - t0, timings)
        if overview:
            summary["overview"] = _overview(trace, None)
        return summary, (dict.fromkeys(PROPERTIES) if keep_details else {})
    ev = _timed(timings, "read", Events, trace)
    info, details = check(trace, None, max_examples, driver_max_cells,
                          vclock.status(trace.files), ev=ev)
    timings.update(info["seconds"])
    summary = build(trace.path, trace.rows, len(ev.procs), info["properties"],
                    time.perf_counter() - t0, timings)
    if overview:
        summary["overview"] = _overview(trace, ev)
    return summary, ({k: details.get(k) for k in PROPERTIES} if keep_details else {})


def check(trace, span, max_examples, driver_max_cells, vclock, ev=None):
    """(info, details): the whole check of `trace` here (ev: its Events when already read).
    info: properties, processes, seconds. vclock: vclock.status of its files."""
    seconds = {}
    if ev is None:
        ev = _timed(seconds, "read", Events, trace, rounded=True)
    info = {"processes": [int(p) for p in ev.procs], "seconds": seconds}

    def timed(*a):
        return _timed(seconds, *a, rounded=True)

    # exactly_once, fifo and node_rules beside the walk: each reads Events only, and
    # numpy's sorts and the kernels run without the GIL, so the two share the cores
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as pool:
        direct = pool.submit(direct_properties, ev, max_examples, timed)
        lay = timed("kernel_layout", Layout.of_events, ev, span)
        # the walk alone is cheaper than reading a clock column up to driver_max_cells
        alone = engine.walk_alone(ev.n, len(ev.procs), driver_max_cells)
        claimed = _claimed(ev, lay, vclock[0]) if vclock[0] and not alone else None
        out, walked = decide(lay, ("causal", "consistent"), max_examples, claimed)
        props, direct_details = direct.result()
    info["properties"] = dict(props, **summary_entries(walked, None if alone else vclock[1]))
    details = dict(direct_details, **out)
    seconds.update({f"kernel_{k}": v for k, v in walked["seconds"].items()})
    return info, details


def _claimed(ev, lay, name):
    """The clocks of the trace's column `name` by position (walk.decide's claimed)."""
    import numpy as np

    def claimed():
        # the column's rows are read file after file, as Events read them; positions
        # here are Events' (process, seq) order
        got, bad = vclock.by_row(vclock.read(ev.trace.files, name), len(lay.procs))
        if got is None:     # the first broken row by position
            rows = bad[1] if ev.order is None else np.flatnonzero(np.isin(ev.order, bad[1]))
            return None, (bad[0], int(rows.min()))
        return (got, None) if ev.order is None else (got[ev.order], None)
    return claimed


def _timed(into, name, fn, *args, rounded=False):
    """fn(*args), its wall time recorded as into[name]."""
    t = time.perf_counter()
    try:
        return fn(*args)
    finally:
        took = time.perf_counter() - t
        into[name] = round(took, 3) if rounded else took


def _overview(trace, ev):
    from ..overview import empty_overview
    from .overview import overview
    return overview(ev) if ev is not None else empty_overview(trace.path)
