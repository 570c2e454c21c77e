# Invariants: every property is computed from the trace rows alone, with built-in DataFrame
# functions or, on the exact path, compiled kernels over Arrow batches (walk_task.py; no
# row-at-a-time Python UDFs, no extra JARs); happened-before is derived from process order,
# send->deliver and signal_send->signal_recv, never from stamps or wall clocks. Stamps are
# used only as a *witness*: if the witness holds, `consistent` and `causal` hold (proof in
# docs/CHECKER.md); if it fails or is absent, the exact formulations decide. Definitions
# (the reference checker in reference.py implements the same ones by brute force):
#   first delivery  = the lowest-seq deliver row of a message at a process; ordering
#                     properties look at first deliveries only, duplicates are exactly_once's.
#   exactly_once    = count of (message, process) pairs that are lost (a destination with no
#                     delivery, unless it delivered NODE_DESTROY for the message's node),
#                     duplicated (delivered more than once), or delivered to a non-destination.
#   fifo            = count of first deliveries of m at p preceded at p by a first delivery of
#                     a message the same sender sent later.
#   causal          = count of first deliveries of m1 at p preceded at p by a first delivery
#                     of some m2 with send(m1) happened-before send(m2).
#   consistent      = count of strongly connected components with more than one message in
#                     the graph whose edges join consecutive first deliveries of each process.
#   node_rules      = count of deliver rows of data messages for node n at p after p's first
#                     delivery of a NODE_DESTROY for n.
# Only a handful of counterexample rows ever reach the driver; everything else stays in Spark
# (persisted MEMORY_AND_DISK, so big traces spill instead of exhausting memory).
# This module owns one check's state and its order of phases: the screen (screen.py), the
# whole check in one task (one_task.py) or, past one task, by message (by_message.py; its
# walk by column blocks on a cluster, walk_blocks.py), the
# main pass (main_pass.py), exactly_once/fifo/node_rules (direct.py), the stamp witness
# (witness.py), then exact causal and consistent in one job (walk_task.py), and causal in
# Spark rounds (causal.py) when the walk meets a causality cycle; explain.py puts the
# counterexamples into words.
from __future__ import annotations

import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager

from pyspark import StorageLevel
from pyspark.sql import Observation
from pyspark.sql import functions as F

from .. import engine
from ..arrays import walk as arrays_walk
from ..arrays.layout import COLUMNS as WALK_COLUMNS, Layout
from ..summary import PROPERTIES, all_hold, build
from . import by_message, direct, main_pass, one_task, walk_blocks, walk_task
from .causal import causal_exact
from .screen import screen
from .witness import MAX_ROUNDS_FACTOR, witness



class Checker:
    """One check of one trace. `phase` callbacks feed the CLI's progress display."""

    def __init__(self, spark, trace, exact=False, max_examples=3, on_phase=None,
                 keep_details=False, group_span=None,
                 screen_min_rows=engine.SCREEN_MIN_ROWS,
                 driver_max_cells=engine.DRIVER_MAX_CELLS,
                 one_task_max_rows=engine.ONE_TASK_MAX_ROWS,
                 by_message_min_rows=engine.ONE_TASK_MAX_ROWS, walk_blocks=None):
        self.spark = spark
        # The limits of engine.py (tests lower them to reach every path with small traces)
        self.screen_min_rows = screen_min_rows
        self.driver_max_cells = driver_max_cells
        self.one_task_max_rows = one_task_max_rows
        self.by_message_min_rows = by_message_min_rows
        # column blocks of the walk on a cluster (None: by its cores and the clocks' size)
        self.walk_blocks = walk_blocks
        self.trace = trace
        self.force_exact = exact
        self.max_examples = max_examples
        self.on_phase = on_phase or (lambda name: None)
        self.keep_details = keep_details
        self.details = {}          # property -> violations DataFrame (tests group these)
        self.timings = {}
        self.rounds = {}
        self._persisted = []
        # group_span: the trace is a union of independent sub-traces whose process ids are
        # k*span + i (no event of one names a message or signal of another). Vector columns
        # can then be shared by index i across sub-traces, so a batch of many small traces
        # costs as many columns as its widest member instead of the sum (tests batch this way).
        self.span = group_span
        self.tier1_failed = False
        self.rows = None           # the main pass's table (main_pass.py), built when needed
        self.screen = "not run"
        self.set_procs(trace.processes)

    def set_procs(self, procs):
        self.procs = list(procs)
        self.P = len(self.procs)
        if self.span:
            self.P = max(p % self.span for p in self.procs) + 1 if self.procs else 0

    # ------------------------------------------------ operations the phase modules share
    def phase(self, name):
        self.on_phase(name)
        self.spark.sparkContext.setJobDescription(name)

    def persist(self, df):
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self._persisted.append(df)
        return df

    def checkpoint(self, df):
        # localCheckpoint cuts the lineage of iterative rounds (otherwise each round's plan
        # contains all previous ones and planning time grows quadratically).
        return df.localCheckpoint(eager=True)

    def fixpoint(self, step, cols):
        """Rounds state = step(state), from state None, until the sum of the columns `cols`
        stops changing; returns (state, rounds). Every round only grows values, so an
        unchanged sum means an unchanged table. Each round is local-checkpointed, and its
        sum is observed while the checkpoint is written (no second job per round)."""
        total = sum(F.sum(F.coalesce(F.col(c), F.lit(-1)).cast("long")) for c in cols)
        state, prev = None, None
        for rnd in range(1, MAX_ROUNDS_FACTOR * self.P + 17):
            seen = Observation()
            state = self.checkpoint(step(state).observe(seen, total.alias("t")))
            total_now = seen.get["t"]
            if total_now == prev:
                break
            prev = total_now
        return state, rnd

    @contextmanager
    def conf(self, **kv):
        """Runtime SQL settings for one phase (dots written as __), restored afterwards."""
        old = {}
        for k, v in kv.items():
            key = "spark.sql." + k.replace("__", ".")
            old[key] = self.spark.conf.get(key, None)
            self.spark.conf.set(key, v)
        try:
            yield
        finally:
            for key, v in old.items():
                if v is None:
                    self.spark.conf.unset(key)
                else:
                    self.spark.conf.set(key, v)

    def pidx(self, col):
        # dense process index 0..P-1, without a join: P is small (one per process)
        if self.span:
            return (col % F.lit(self.span)).cast("int")
        return (F.array_position(F.array(*[F.lit(p) for p in self.procs]), col) - 1).cast("int")

    def group(self, col):
        return (F.floor(col / F.lit(self.span)) if self.span else F.lit(0)).cast("long")

    def unpersist(self):
        for df in self._persisted:
            try:
                df.unpersist()
            except Exception:
                pass
        self._persisted = []

    def main_pass(self):
        main_pass.run(self)

    # ------------------------------------------------------------------ driver
    def run(self):
        t0 = time.perf_counter()
        if self.trace.rows == 0:  # an empty trace: every property holds vacuously
            return self._summary(t0, all_hold(()), "empty trace")
        local = self.spark.sparkContext.master.startswith("local")
        spread = engine.by_message(self.trace, self.force_exact, self.by_message_min_rows
                                   if local else min(self.by_message_min_rows,
                                                     engine.CLUSTER_BY_MESSAGE_MIN_ROWS))
        whole = not spread and engine.whole_trace(self.trace, self.force_exact,
                                                  self.one_task_max_rows)
        self.screen = engine.screen_skipped(self.trace, self.force_exact, whole or spread,
                                            self.screen_min_rows)
        if self.screen is None:
            self.phase("screen: by message and destination, by process")
            passed, self.screen = self.timed("screen", screen, self)
            if passed:
                return self._summary(t0, all_hold(("fifo", "causal", "consistent")), "holds")
        done = None
        if whole:
            self.phase("checking every property in one task")
            done = self.timed("one_task", one_task.run, self)
        elif spread:
            done = by_message.run(self)
        if done is not None:   # else a broken rule or a causality cycle: the phases below
            props, wmsg, procs, details = done
            self.trace.processes = procs
            self.set_procs(procs)
            if self.keep_details:
                self.details = {name: v if v is None or hasattr(v, "select")
                                else self.spark.createDataFrame(
                                    [(int(p),) for p in v], "process int")
                                for name, v in details.items()}
            return self._summary(t0, props, wmsg)
        if spread:
            self.unpersist()
        self.phase("main pass: by message, by process, one aggregation")
        self.timed("main_pass", self.main_pass)
        props = {}
        for name, fn in (("exactly_once", direct.exactly_once), ("fifo", direct.fifo),
                         ("node_rules", direct.node_rules)):
            self.phase(f"checking {name}")
            v, n, ex = self.timed(name, fn, self)
            props[name] = {"ok": n == 0, "violations": int(n), "examples": ex}
            if name == "fifo":
                props[name]["method"] = self.fifo_method
            if self.keep_details:
                self.details[name] = v
        if engine.walk_on_driver(self.trace.rows, len(self.procs), self.driver_max_cells):
            self.phase("checking causal and consistent (exact, on the driver)")
            if self.timed("driver", self._on_driver, props):
                return self._summary(t0, props, engine.WALKED)
        if self.force_exact:
            cons_ok, caus_ok, wmsg = False, False, engine.SKIPPED
        else:
            self.phase("checking the stamp witness")
            cons_ok, caus_ok, wmsg = self.timed("witness", witness, self)
        exact = []
        for name, ok in (("causal", caus_ok), ("consistent", cons_ok)):
            if ok:
                props[name] = {"ok": True, "violations": 0, "examples": [],
                               "method": "stamp witness"}
                if self.keep_details:
                    self.details[name] = None
            else:
                exact.append(name)
        if exact:
            self.phase(f"checking {' and '.join(exact)} (exact)")
            self._exact(exact, props)
        return self._summary(t0, props, wmsg)

    def _exact(self, exact, props):
        """Decide the properties of `exact` (names) exactly: by the compiled walk
        (walk_task.py), and causal by the Spark rounds (causal.py) when the history has a
        causality cycle (the walk cannot finish; Tarjan's components decide consistent on
        any graph)."""
        found = {}
        # on a cluster, the walk by column blocks over tasks (no one-task funnel)
        walk = (walk_task.exact if self.spark.sparkContext.master.startswith("local")
                else walk_blocks.exact)
        for name, (v, n, ex, extra) in self.timed("exact", walk, self, set(exact)).items():
            verified = extra.get("vclock") == "holds"
            extra = dict(extra, method="vector-clock witness" if verified else "exact")
            if v is None:
                # Rounds join tables laid out once by key with tables partitioned by
                # process: co-partitioning on a subset of the join keys avoids a shuffle per
                # round, and without adaptive execution both sides keep the same partition
                # count.
                with self.conf(requireAllClusterKeysForCoPartition="false",
                                adaptive__enabled="false"):
                    v, n, ex = self.timed(name, causal_exact, self)
                extra["method"] = "exact"
            found[name] = (v, n, ex, extra)
        for name, (v, n, ex, extra) in found.items():
            props[name] = dict({"ok": n == 0, "violations": int(n), "examples": ex}, **extra)
            if self.keep_details:
                self.details[name] = v

    def _on_driver(self, props):
        """causal and consistent into props by the exact walk on the main pass's table,
        collected once through Arrow; False (nothing added) when the history has a
        causality cycle (the Spark formulations then decide: they define happened-before
        as reachability, cycles included)."""
        table = self.rows.select(*WALK_COLUMNS).toArrow()
        lay = Layout(table, [int(p) for p in self.procs], self.span)
        details = {}
        if not arrays_walk.entries(lay, self.max_examples, props, details)[0]:
            return False
        if self.keep_details:
            for name, procs in details.items():
                self.details[name] = self.spark.createDataFrame(
                    [(int(p),) for p in procs], "process int")
        return True

    def timed(self, name, fn, *args):
        """fn(*args), its wall time recorded under timings[name] (also from a thread)."""
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.timings[name] = time.perf_counter() - t

    def side_by_side(self, calls):
        """Run {name: (fn, *args)} in one thread each, timed; returns {name: result}.

        If any call fails, or Ctrl-C interrupts the wait, every Spark job is cancelled again
        and again until all threads have stopped: cancelling only stops running jobs, and a
        thread between two jobs (planning its next round) would otherwise go on alone."""
        pool = ThreadPoolExecutor(len(calls))
        runs = {name: pool.submit(self.timed, name, *call) for name, call in calls.items()}
        try:
            # the first failure is raised at once, not after the calls submitted before it
            wait(list(runs.values()), return_when=FIRST_EXCEPTION)
            for run in runs.values():
                if run.done() and run.exception() is not None:
                    raise run.exception()
            return {name: run.result() for name, run in runs.items()}
        except BaseException:
            while not all(run.done() for run in runs.values()):
                self.spark.sparkContext.cancelAllJobs()
                wait(list(runs.values()), timeout=0.2)
            raise
        finally:
            pool.shutdown(wait=False)

    def _summary(self, t0, props, wmsg):
        if self.keep_details:
            for k in PROPERTIES:
                self.details.setdefault(k, None)
        self.elapsed = time.perf_counter() - t0
        return build(self.trace.path, self.trace.rows, len(self.procs), self.screen, wmsg,
                     props, self.rounds, self.elapsed, self.timings)


def check_trace(spark, trace, exact=False, max_examples=3, on_phase=None, keep_details=False,
                group_span=None, **plan):
    """Check one trace; `plan` may set Checker's screen_min_rows, driver_max_cells,
    one_task_max_rows, by_message_min_rows and walk_blocks."""
    c = Checker(spark, trace, exact=exact, max_examples=max_examples, on_phase=on_phase,
                keep_details=keep_details, group_span=group_span, **plan)
    try:
        summary = c.run()
    except BaseException:
        c.unpersist()   # a malformed trace (TraceError) must not leave tables cached
        raise
    return summary, c
