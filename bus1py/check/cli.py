# Invariants: `bus1py check` exits 0 when every judged property holds (--properties, default
# all), 1 when one is violated, 2 when the trace cannot be read or is malformed, the
# arguments are wrong, or Spark cannot start; it prints one line per property (to stderr
# with --json -, so that stdout is the JSON alone) and nothing from Spark (log4j is set to
# ERROR by bus1py/spark_session.py). Every option and output path is checked before any work
# starts. engine.py decides where a trace is checked: on the driver
# (arrays.whole.check_local, no JVM), or with Spark by message (spark/checker.py); both
# give the same summary. The progress display is a daemon thread that only *reads* the
# SparkContext status tracker; it never affects the result: a bar on a terminal, else
# timestamped phase lines (cli/term.py's PhaseLines).
from __future__ import annotations

import os
import re
import socket
import sys
import threading
import time

from ..cli.options import at_least, output_file
from ..cli.outcome import CommandError, add_json_option, write_json
from .summary import PROPERTIES

# a JVM heap size: digits and an optional unit, as -Xmx and spark.driver.memory take it
_MEMORY = re.compile(r"^[1-9][0-9]*[kmgt]?$", re.IGNORECASE)


def _memory(text):
    import argparse
    if not _MEMORY.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a heap size such as 512m or 4g")
    return text


def _properties(text):
    import argparse
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in PROPERTIES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown property {', '.join(unknown) or text!r}; "
                                         f"choose from {','.join(PROPERTIES)}")
    return tuple(n for n in PROPERTIES if n in names)


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
                   help="check with Spark (by message) even a trace small enough for the "
                        "driver alone (up to 32M rows, checked without a JVM)")
    add_json_option(p, "the summary")
    p.add_argument("--report", metavar="FILE.html", help="write a self-contained HTML report")
    p.add_argument("--shiviz", metavar="FILE",
                   help="also export the trace as a ShiViz log with vector clocks")
    p.add_argument("--exact", action="store_true",
                   help="accepted for scripts that pass it: every check is exact (stamps "
                        "are never read)")
    p.add_argument("--properties", type=_properties, default=PROPERTIES, metavar="P,...",
                   help="the properties the system under test promises: the verdict and exit "
                        "code judge these, the others are reported as information (default "
                        f"all: {','.join(PROPERTIES)})")
    p.add_argument("--examples", type=at_least(0), default=3,
                   help="counterexamples kept per property (default 3)")
    p.add_argument("--partitions", type=at_least(1), default=None,
                   help="spark.sql.shuffle.partitions (default: ~8 MB of Parquet each, "
                        "at least 2 per core)")
    p.add_argument("--driver-memory", type=_memory, default=None,
                   help="driver heap for local masters (default: a quarter of the machine's memory)")
    p.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help="show progress on stderr: a bar on a terminal, else timestamped "
                        "lines (auto: unless --json -)")
    p.set_defaults(func=run)


class StageProgress:
    """Polls the SparkContext status tracker (when there is a session) from a thread and
    shows the phase: a rich bar on a terminal, else timestamped lines (`mode` "bar",
    "lines" or None for nothing)."""

    def __init__(self, spark, mode):
        self.spark = spark
        self.mode = mode
        self.phase = "starting"
        self._stop = threading.Event()
        self._thread = None

    def set_phase(self, name):
        self.phase = name

    def __enter__(self):
        if self.mode:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=2)

    def _tasks(self):
        """(done, total, stage ids) of the active Spark stages; zeros without a session."""
        total = done = 0
        stages = []
        if self.spark is None:
            return done, total, stages
        tracker = self.spark.sparkContext.statusTracker()
        try:
            for sid in tracker.getActiveStageIds():
                info = tracker.getStageInfo(sid)
                if info is None:
                    continue
                total += info.numTasks
                done += info.numCompletedTasks
                stages.append(str(sid))
        except Exception:
            pass  # the context is shutting down
        return done, total, stages

    def _loop(self):
        if self.mode == "lines":
            from ..cli.term import PhaseLines
            lines, t0 = PhaseLines("bus1py check"), time.monotonic()
            while True:
                done, total, stages = self._tasks()
                tasks = f", stage {','.join(stages)}: {done}/{total} tasks" if stages else ""
                lines(self.phase, f"{time.monotonic() - t0:.0f} s{tasks}")
                if self._stop.wait(0.5):
                    # a phase set since the last poll is still said once: a short one too
                    lines(self.phase, f"{time.monotonic() - t0:.0f} s")
                    return
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        with Progress(TextColumn("{task.description}"), BarColumn(),
                      TextColumn("{task.completed}/{task.total} tasks"), TimeElapsedColumn(),
                      console=Console(stderr=True), transient=True) as prog:
            task = prog.add_task(self.phase, total=1)
            while not self._stop.wait(0.25):
                done, total, stages = self._tasks()
                desc = self.phase + (f" [stage {','.join(stages)}]" if stages else "")
                prog.update(task, description=desc, total=max(total, 1),
                            completed=done if total else 0)


def _progress_mode(args):
    if args.progress == "never" or (args.progress == "auto" and args.json == "-"):
        return None
    return "bar" if sys.stderr.isatty() else "lines"


def _human_out(args):
    """Where the verdict goes: stdout, unless stdout carries the JSON."""
    return sys.stderr if args.json == "-" else sys.stdout


def _print_summary(summary, out):
    from .explain import summary_lines
    print("\n".join(summary_lines(summary)), file=out)


def _master_unreachable(master) -> str | None:
    """Why a spark://HOST:PORT master cannot be reached, in a few seconds, before any JVM
    starts (the JVM itself retries for a minute); None for a reachable or other master."""
    m = re.match(r"^spark://([^:/]+):(\d+)$", master or "")
    if not m:
        return None
    try:
        socket.create_connection((m.group(1), int(m.group(2))), timeout=3).close()
    except OSError as e:
        return f"cannot reach the Spark master {master}: {e.strerror or e}"
    return None


def run(args) -> int:
    t0 = time.perf_counter()
    problem = (output_file("--json", args.json) or output_file("--report", args.report)
               or output_file("--shiviz", args.shiviz) or _master_unreachable(args.master))
    if problem:
        raise CommandError(problem)
    from .load import TraceError, parquet_files, read_footers
    try:
        parquet_files(args.trace)
    except TraceError as e:
        raise CommandError(f"error: {e}")
    try:
        trace = read_footers(args.trace)   # footers only: before deciding on a JVM
    except TraceError as e:
        raise CommandError(f"malformed trace: {e}")
    from .engine import DRIVER_MAX_ROWS, on_driver
    if args.shiviz and trace.rows > DRIVER_MAX_ROWS:
        raise CommandError(f"--shiviz: the trace has {trace.rows:,} rows; a ShiViz log is "
                           f"written for at most {DRIVER_MAX_ROWS:,}")
    mode = _progress_mode(args)
    if not on_driver(trace, spark_asked=bool(args.spark or args.master)):
        return _with_spark(args, trace, t0, mode)
    from .arrays.whole import check_local
    if mode and trace.rows >= LONG_ROWS:
        _announce(trace, "on the driver", jvm=False)
    try:
        with StageProgress(None, mode) as prog:
            prog.set_phase(f"checking {trace.rows:,} rows on the driver")
            summary, _ = check_local(trace, max_examples=args.examples,
                                     overview=bool(args.report))
            _shiviz(args, trace, prog)
    except TraceError as e:
        raise CommandError(f"malformed trace: {e}")
    return _finish(args, summary)


def _shiviz(args, trace, prog):
    """The ShiViz log, when asked for (report.write_shiviz: the array engine, no JVM)."""
    if args.shiviz:
        from .report import write_shiviz
        prog.set_phase("exporting ShiViz log")
        n = write_shiviz(trace, args.shiviz)
        print(f"wrote ShiViz log of {n} events to {args.shiviz}", file=sys.stderr)


# A check's speed, measured from a loaded 2-core machine to a quiet cluster (rows/s), and
# the start of a JVM: the range an announcement gives before a long check.
ROWS_PER_S = (20_000, 500_000)
JVM_START_S = 10
LONG_ROWS = 1_000_000


def _announce(trace, engine, jvm):
    """Before the work: its size, the engine and, for a long check, how long it may take
    (a short one is all fixed costs, which the machine's load decides)."""
    slow, fast = (trace.rows / r + (JVM_START_S if jvm else 0) for r in ROWS_PER_S)
    expect = f"; expect {fast:,.0f}-{slow:,.0f} s" if trace.rows >= LONG_ROWS else ""
    print(f"bus1py check: {trace.rows:,} rows in {len(trace.files)} files, {engine}{expect}",
          file=sys.stderr)


def _start_spark(args, trace):
    """The session, or the one line saying why Spark did not start."""
    from ..spark_session import EarlySession, jvm_log_path
    # only the report's overview (and the naming of a malformed row) runs Spark over rows
    early = EarlySession(args.master, driver_memory=args.driver_memory,
                         quick_start=not args.report)
    try:
        return early.result(), None
    except ModuleNotFoundError:
        raise                      # a missing extra: the command line names it
    except Exception as e:
        # the JVM's own words went to its log, not to this terminal: say where they are
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        return None, (f"Spark did not start ({first}); the JVM's output is in "
                      f"{jvm_log_path()}")


def _with_spark(args, trace, t0, mode) -> int:
    from .load import TraceError
    from .spark.session import plan_for_trace
    if mode:
        _announce(trace, f"with Spark ({args.master or 'local[*]'})", jvm=True)
    spark, problem = _start_spark(args, trace)
    if problem:
        raise CommandError(problem)
    from .spark.checker import check_trace
    session_ready = time.perf_counter() - t0
    plan_for_trace(spark, trace, args.partitions)
    with StageProgress(spark, mode) as prog:
        try:
            summary, checker = check_trace(spark, trace, max_examples=args.examples,
                                           on_phase=prog.set_phase)
        except TraceError as e:   # named by spark/malformed.py
            raise CommandError(f"malformed trace: {e}")
        if args.report:
            prog.set_phase("summarising the run for the report")
            from .spark.overview import overview
            summary["overview"] = overview(checker)
        _shiviz(args, trace, prog)
    # seconds from the command's start until the session was up (the JVM start that the
    # footers and imports did not hide), beside the checker's own phases
    summary["timings"]["session_ready"] = round(session_ready, 3)
    return _finish(args, summary)


def _finish(args, summary) -> int:
    """Judge the promised properties, print the verdict, write the JSON and the report;
    the exit code."""
    from .summary import judge
    judge(summary, args.properties)
    _print_summary(summary, _human_out(args))
    if args.json:
        write_json(args.json, summary)
    if args.report:
        from .report import write_report
        write_report(summary, args.report)
        print(f"wrote report to {os.path.abspath(args.report)}", file=sys.stderr)
    return 0 if summary["ok"] else 1
