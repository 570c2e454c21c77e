"""The run's overview, the shape both engines give it: what a report shows of a run
whatever the verdict.

Invariants: an overview is events per process, a histogram of delivery latency (wall time
of a delivery minus that of its send, by powers of two of microseconds; wall clocks are only
displayed, never used to decide anything), a small window of the run for a space-time
diagram (the first WINDOW_EVENTS events of the first WINDOW_PROCESSES processes), and the
stress tool's own summary when the trace directory (or the directory holding it) has one.
Each engine counts (spark/overview.py, arrays/overview.py); `assemble` alone shapes the
result, so both engines' overviews are equal on the same trace. Computed only when a
report is asked for.
"""
from __future__ import annotations

import json
import os

from .. import schema as S
from .examples import event

WINDOW_PROCESSES, WINDOW_EVENTS = 5, 8     # the diagram: first events of a few processes
STRESS_SUMMARY = "stress.json"


def empty_overview(path) -> dict:
    """The overview of a trace without rows."""
    return assemble({}, {}, [], path)


def assemble(counts, hist, rows, path):
    """The overview from an engine's counts: {process: events}, {latency bucket: deliveries}
    (bucket b >= 1 holds latencies in [2^(b-1), 2^b) us, 0 those under 1 us, -1 negative
    ones) and the window's rows (process, seq, kind, msg, sender_process, send_seq)."""
    window = []
    for r in sorted(rows, key=lambda r: (r["process"], r["seq"])):
        o = None
        if r["kind"] == S.DELIVER and r["sender_process"] is not None:
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
