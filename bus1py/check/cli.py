# Invariants: `bus1py check` exits 0 when every property holds, 1 when any is violated, 2 when
# the trace cannot be read or is malformed (or the arguments are wrong); it prints one line
# per property to stdout and nothing from Spark (log4j is set to ERROR by spark.py). A
# trace that fits on the driver (local.fits, local_check.check_local) is checked there and
# no JVM is started, unless --spark, --master or --shiviz asks for Spark; both engines give
# the same summary. The progress display (Spark only) is a daemon thread that only *reads*
# the SparkContext status tracker; it never affects the result and is off when stderr is
# not a terminal.
from __future__ import annotations

import json
import os
import sys
import threading


def register(subparsers):
    p = subparsers.add_parser(
        "check", help="check a trace for exactly-once, FIFO, causal and consistent delivery",
        description="Check a bus1py trace (a directory of Parquet files, SPEC section 7): "
                    "on the driver alone when it is small enough, else with Spark. Exit 0: "
                    "every property holds; 1: a property is violated; 2: the trace is "
                    "malformed or unreadable.")
    p.add_argument("trace", metavar="TRACE_DIR")
    p.add_argument("--master", default=None,
                   help="Spark master URL (default: local[*], an embedded session); "
                        "implies --spark")
    p.add_argument("--spark", action="store_true",
                   help="check with Spark even a trace small enough for the driver alone "
                        "(below 1M rows and 20M rows x processes, checked without a JVM)")
    p.add_argument("--json", metavar="FILE", help="write the JSON summary here ('-' = stdout)")
    p.add_argument("--report", metavar="FILE.html", help="write a self-contained HTML report")
    p.add_argument("--shiviz", metavar="FILE",
                   help="also export the trace as a ShiViz log with vector clocks")
    p.add_argument("--exact", action="store_true",
                   help="skip the stamp witness and always run the exact formulations")
    p.add_argument("--examples", type=int, default=3,
                   help="counterexamples kept per property (default 3)")
    p.add_argument("--partitions", type=int, default=None,
                   help="spark.sql.shuffle.partitions (default: ~8 MB of Parquet each, "
                        "at least 2 per core)")
    p.add_argument("--driver-memory", default=None,
                   help="driver heap for local masters (default: a quarter of the machine's memory)")
    p.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help="show Spark stage progress (auto: when stderr is a terminal)")
    p.set_defaults(func=run)


class StageProgress:
    """Polls the SparkContext status tracker from a thread and draws a rich progress bar."""

    def __init__(self, spark, enabled):
        self.spark = spark
        self.enabled = enabled
        self.phase = "starting"
        self._stop = threading.Event()
        self._thread = None

    def set_phase(self, name):
        self.phase = name

    def __enter__(self):
        if self.enabled:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=2)

    def _loop(self):
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        tracker = self.spark.sparkContext.statusTracker()
        with Progress(TextColumn("{task.description}"), BarColumn(),
                      TextColumn("{task.completed}/{task.total} tasks"), TimeElapsedColumn(),
                      console=Console(stderr=True), transient=True) as prog:
            task = prog.add_task(self.phase, total=1)
            while not self._stop.wait(0.25):
                total = done = 0
                stages = []
                try:
                    for sid in tracker.getActiveStageIds():
                        info = tracker.getStageInfo(sid)
                        if info is None:
                            continue
                        total += info.numTasks
                        done += info.numCompletedTasks
                        stages.append(str(sid))
                except Exception:
                    continue  # the context is shutting down
                desc = self.phase + (f" [stage {','.join(stages)}]" if stages else "")
                prog.update(task, description=desc, total=max(total, 1),
                            completed=done if total else 0)


def _print_summary(summary, out=None):
    from .explain import summary_lines
    print("\n".join(summary_lines(summary)), file=out or sys.stdout)


def run(args) -> int:
    import time
    t0 = time.perf_counter()
    from .load import TraceError, parquet_files, read_footers
    try:
        parquet_files(args.trace)
    except TraceError as e:
        print(f"bus1py check: error: {e}", file=sys.stderr)
        return 2
    try:
        trace = read_footers(args.trace)   # footers only: before deciding on a JVM
    except TraceError as e:
        print(f"bus1py check: malformed trace: {e}", file=sys.stderr)
        return 2
    if not (args.spark or args.master or args.shiviz) and _fits_on_driver(trace, args.exact):
        from .local_check import check_local
        try:
            done = check_local(trace, exact=args.exact, max_examples=args.examples,
                               overview=bool(args.report))
        except TraceError as e:
            print(f"bus1py check: malformed trace: {e}", file=sys.stderr)
            return 2
        if done is not None:       # else too many processes, or a causality cycle
            return _finish(args, done[0])
    return _with_spark(args, trace, t0)


def _fits_on_driver(trace, exact) -> bool:
    from . import local
    return local.fits(trace, exact)


def _with_spark(args, trace, t0) -> int:
    import time
    from .load import TraceError
    from .spark import QUICK_START_BYTES, EarlySession, plan_for_trace
    # The JVM boots in a thread while this one imports the checker.
    quick = sum(os.path.getsize(f) for f in trace.files) < QUICK_START_BYTES
    early = EarlySession(args.master, driver_memory=args.driver_memory, quick_start=quick)
    from .checker import check_trace
    from .load import open_rows
    from .report import write_shiviz
    try:
        spark = early.result()
    except Exception:
        # the JVM's own words went to its log, not to this terminal: say where they are
        from .spark import jvm_log_path
        print(f"bus1py check: Spark did not start; the JVM's output is in {jvm_log_path()}",
              file=sys.stderr)
        raise
    session_ready = time.perf_counter() - t0
    plan_for_trace(spark, trace, args.partitions)
    enabled = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())
    with StageProgress(spark, enabled) as prog:
        prog.set_phase("reading and validating the trace")
        try:
            trace = open_rows(spark, trace)
        except TraceError as e:
            print(f"bus1py check: malformed trace: {e}", file=sys.stderr)
            return 2
        try:
            summary, checker = check_trace(spark, trace, exact=args.exact,
                                           max_examples=args.examples,
                                           on_phase=prog.set_phase)
        except TraceError as e:   # the seq and id rules are checked in the main pass
            print(f"bus1py check: malformed trace: {e}", file=sys.stderr)
            return 2
        if args.report:
            prog.set_phase("summarising the run for the report")
            from .overview import overview
            summary["overview"] = overview(checker)
        if args.shiviz:
            prog.set_phase("exporting ShiViz log")
            n = write_shiviz(checker, args.shiviz)
            print(f"wrote ShiViz log of {n} events to {args.shiviz}", file=sys.stderr)
    # seconds from the command's start until the session was up (the JVM start that the
    # footers and imports did not hide), beside the checker's own phases
    summary["timings"]["session_ready"] = round(session_ready, 3)
    checker.unpersist()
    return _finish(args, summary)


def _finish(args, summary) -> int:
    """Print the verdict, write the JSON and the report; the exit code."""
    _print_summary(summary)
    if args.json:
        text = json.dumps(summary, indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    if args.report:
        from .report import write_report
        write_report(summary, args.report)
        print(f"wrote report to {os.path.abspath(args.report)}", file=sys.stderr)
    return 0 if summary["ok"] else 1
