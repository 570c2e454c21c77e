# Invariants: the Spark path checks every trace the driver does not take (engine.py), by
# one design: by message (by_message.py: the rows linked in tasks by id, then the walk by
# column blocks, walk_blocks.py), on a local master in the driver's process and on a
# cluster over tasks that exchange files. Every property is computed exactly from the
# trace rows alone (stamps are never read); happened-before is derived from process order,
# send->deliver and signal_send->signal_recv, never from stamps or wall clocks; a
# producer's clock column is a witness for causal, used only once it verifies. The
# definitions (the reference checker in reference.py implements the same ones by brute
# force):
#   first delivery  = the lowest-seq deliver row of a message at a process; ordering
#                     properties look at first deliveries only, duplicates are exactly_once's.
#   exactly_once    = count of (message, process) pairs that are lost (a destination with no
#                     delivery, unless it delivered NODE_DESTROY for the message's node),
#                     duplicated (delivered more than once), or delivered to a non-destination.
#   fifo            = count of first deliveries of m at p preceded at p by a first delivery of
#                     a message the same sender sent later.
#   causal          = count of first deliveries of m1 at p preceded at p by a first delivery
#                     of some m2 with send(m1) happened-before send(m2) (reachability, so a
#                     causality cycle is judged too).
#   consistent      = count of strongly connected components with more than one message in
#                     the graph whose edges join consecutive first deliveries of each process.
#   node_rules      = count of deliver rows of data messages for node n at p after p's first
#                     delivery of a NODE_DESTROY for n.
# Only the tasks' summaries, a handful of counterexamples and the violations' processes
# reach the driver. This module owns one check's state; a malformed trace is named by
# malformed.py; explain.py puts the counterexamples into words.
from __future__ import annotations

import time

from .. import engine
from ..summary import PROPERTIES, all_hold, build
from . import by_message


class Checker:
    """One check of one trace. `phase` callbacks feed the CLI's progress display."""

    def __init__(self, spark, trace, max_examples=3, on_phase=None, keep_details=False,
                 group_span=None, driver_max_cells=engine.DRIVER_MAX_CELLS,
                 walk_blocks=None):
        self.spark = spark
        # rows x processes above which a clock column decides causal (engine.walk_alone;
        # tests lower it to reach the column with small traces)
        self.driver_max_cells = driver_max_cells
        # column blocks of the walk on a cluster (None: by its cores and the clocks' size)
        self.walk_blocks = walk_blocks
        self.trace = trace
        self.max_examples = max_examples
        self.on_phase = on_phase or (lambda name: None)
        self.keep_details = keep_details
        self.details = {}          # property -> its violations' processes (tests count them)
        self.timings = {}
        # group_span: the trace is a union of independent sub-traces whose process ids are
        # k*span + i (no event of one names a message or signal of another). Vector columns
        # can then be shared by index i across sub-traces, so a batch of many small traces
        # costs as many columns as its widest member instead of the sum (tests batch this way).
        self.span = group_span
        self.set_procs(trace.processes)

    def set_procs(self, procs):
        self.procs = list(procs)
        self.P = len(self.procs)
        if self.span:
            self.P = max(p % self.span for p in self.procs) + 1 if self.procs else 0

    def phase(self, name):
        self.on_phase(name)
        self.spark.sparkContext.setJobDescription(name)

    def run(self):
        t0 = time.perf_counter()
        if self.trace.rows == 0:  # an empty trace: every property holds vacuously
            return self._summary(t0, all_hold())
        props, procs, details = by_message.run(self)
        self.trace.processes = procs
        self.set_procs(procs)
        if self.keep_details:
            self.details = {name: v if v is None or hasattr(v, "select")
                            else self.spark.createDataFrame(
                                [(int(p),) for p in v], "process int")
                            for name, v in details.items()}
        return self._summary(t0, props)

    def timed(self, name, fn, *args):
        """fn(*args), its wall time recorded under timings[name]."""
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.timings[name] = time.perf_counter() - t

    def _summary(self, t0, props):
        if self.keep_details:
            for k in PROPERTIES:
                self.details.setdefault(k, None)
        self.elapsed = time.perf_counter() - t0
        return build(self.trace.path, self.trace.rows, len(self.procs), props,
                     self.elapsed, self.timings)


def check_trace(spark, trace, max_examples=3, on_phase=None, keep_details=False,
                group_span=None, **plan):
    """Check one trace; `plan` may set Checker's driver_max_cells and walk_blocks."""
    c = Checker(spark, trace, max_examples=max_examples, on_phase=on_phase,
                keep_details=keep_details, group_span=group_span, **plan)
    return c.run(), c
