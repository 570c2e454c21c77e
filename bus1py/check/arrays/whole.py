"""The whole check of a trace in one process, by the array engine: on the driver
(check_local), or as the Spark path's one task (one_task.py runs `check`).

Invariants: the rows are read and validated by events.py (the main pass's rules, order and
words), exactly_once, fifo and node_rules decided by properties.py, causal and consistent
by the exact walk (walk.py): without a witness when the walk fits the driver
(engine.walk_on_driver), else with a verified clock column when the trace has one. So the
answer is the one Spark's main pass and the phases after it give for the same trace
(summary.py; all but `seconds` and `timings`). A history with a causality cycle is left
to Spark, whose rounds define happened-before as reachability. Nothing here imports
pyspark.
"""
from __future__ import annotations

import time

from .. import engine, vclock
from ..summary import PROPERTIES, all_hold, build
from .events import Events
from .properties import direct_properties
from .layout import Layout
from .walk import entries


def check_local(trace, exact=False, max_examples=3, keep_details=False, overview=False,
                driver_max_cells=engine.DRIVER_MAX_CELLS):
    """(summary, details) of a trace from load.read_footers, or None when Spark must
    decide (the walk does not fit and the exact path is not certain, or a causality
    cycle). details: property -> the process of each violation (keep_details; tests count
    them). overview: the summary gets the report's "overview" (arrays/overview.py).
    driver_max_cells: as Checker's (tests lower it to send small traces past the walk on
    the driver)."""
    t0 = time.perf_counter()
    timings = {}
    if trace.rows == 0:
        summary = build(trace.path, 0, 0, "not run", "empty trace", all_hold(), {},
                        time.perf_counter() - t0, timings)
        if overview:
            summary["overview"] = _overview(trace, None)
        return summary, (dict.fromkeys(PROPERTIES) if keep_details else {})
    ev = _timed(timings, "main_pass", Events, trace)
    whole = engine.whole_trace(trace, exact)
    if not (whole or engine.walk_on_driver(ev.n, len(ev.procs), driver_max_cells)):
        return None
    info, details = check(trace, None, max_examples, driver_max_cells,
                          engine.witness_skipped(trace, exact), vclock.status(trace.files),
                          ev=ev)
    if info["cycle"]:
        return None
    timings.update(info["seconds"])
    summary = build(trace.path, trace.rows, len(ev.procs),
                    engine.screen_skipped(trace, exact, whole), info["witness"],
                    info["properties"], {}, time.perf_counter() - t0, timings)
    if overview:
        summary["overview"] = _overview(trace, ev)
    return summary, ({k: details.get(k) for k in PROPERTIES} if keep_details else {})


def check(trace, span, max_examples, driver_max_cells, witness, vclock, ev=None):
    """(info, details): the whole check of `trace` here (ev: its Events when already read).
    info: properties, witness, processes, cycle (a causality cycle: nothing decided),
    seconds. witness: the summary's `witness` unless the walk runs on the driver.
    vclock: vclock.status of its files."""
    seconds = {}
    if ev is None:
        ev = _timed(seconds, "main_pass", Events, trace, rounded=True)
    info = {"processes": [int(p) for p in ev.procs], "witness": witness,
            "cycle": False, "seconds": seconds}

    def timed(*a):
        return _timed(seconds, *a, rounded=True)

    # exactly_once, fifo and node_rules beside the walk: each reads Events only, and
    # numpy's sorts and the kernels run without the GIL, so the two share the cores
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as pool:
        direct = pool.submit(direct_properties, ev, max_examples, timed)
        lay = timed("kernel_layout", Layout.of_events, ev, span)
        walked_props, walked_details = {}, {}
        if engine.walk_on_driver(ev.n, len(ev.procs), driver_max_cells):
            info["witness"] = engine.WALKED
            complete, walked = entries(lay, max_examples, walked_props, walked_details)
        else:
            complete, walked = entries(lay, max_examples, walked_props, walked_details,
                                       _claimed(ev, lay, vclock[0]) if vclock[0] else None,
                                       vclock[1])
        props, direct_details = direct.result()
    info["properties"] = dict(props, **walked_props)
    details = dict(direct_details, **walked_details)
    seconds.update({f"kernel_{k}": v for k, v in walked["seconds"].items()})
    info["cycle"] = not complete
    return info, details


def _claimed(ev, lay, name):
    """The clocks of the trace's column `name` by position (walk.decide's claimed)."""
    import numpy as np

    def claimed():
        # the column's rows are read file after file, as Events read them; positions
        # here are Events' (process, seq) order
        got, bad = vclock.by_row(vclock.read(ev.trace.files, name), len(lay.procs))
        if ev.order is None:
            return got, bad
        if got is None:
            return None, (bad[0], int(np.flatnonzero(ev.order == bad[1])[0]))
        return got[ev.order], None
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
