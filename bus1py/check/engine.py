"""Which engine checks a trace: every choice of path, made here once, from the footers
(load.read_footers: rows, stamp statistics) and, for the walk on the driver, the process
count.

Invariants:
  - The array engine on the driver (arrays, no JVM) takes a trace whose exact path is
    certain (`whole_trace`) unless a cluster or Spark's own work is asked for (--master,
    --shiviz), and one of fewer than LOCAL_MAX_ROWS rows unless Spark is (--spark too).
    It hands a trace back to Spark only when the walk cannot fit (rows x processes above DRIVER_MAX_CELLS, the exact path not certain)
    or meets a causality cycle.
  - On Spark: an empty trace holds vacuously; a trace whose exact path is certain and
    whose rows fit one task is checked whole in one task (the array engine's whole check);
    one whose exact path is certain without stamps, past one task (on a cluster from
    CLUSTER_BY_MESSAGE_MIN_ROWS), by the array engine in tasks by message and the walk
    (`by_message`); else the screen (`screen_skipped` says when not), the main pass, exactly_once, fifo
    and node_rules, then causal and consistent by the exact walk on the driver when
    `walk_on_driver`, else the stamp witness and the exact formulations.
  - LOCAL_MAX_ROWS <= SCREEN_MIN_ROWS: a trace the driver takes is one Spark's path too
    checks without the screen and with the walk, so both give the same summary (all but
    `seconds` and `timings`).
  - The summary's `screen` and `witness` words for the paths that skip them are here.
"""
from __future__ import annotations

from .load import stamp_layout

# Below this many rows a trace is checked on the driver alone (docs/BENCHMARKS.md, "Small
# and medium checks": the driver answers before a JVM would have started).
LOCAL_MAX_ROWS = 1_000_000
# Below this many rows the Spark path skips the screen: a main pass alone is cheaper.
SCREEN_MIN_ROWS = 1_000_000
# rows x processes up to which causal and consistent are decided by the walk on the driver
# after Spark's main pass, and without a witness on the driver path.
DRIVER_MAX_CELLS = 20_000_000
# The arrays of the whole check take about 250 bytes an event (7.4 GB at 30M, 64
# processes; the walk's clocks are bounded by its column blocks, arrays/walk.py): larger
# traces take the main pass, whose exact phase holds about 40 bytes an event.
ONE_TASK_MAX_ROWS = 32_000_000

# On a cluster, a trace without stamps that could witness takes the path by message from
# this many rows: its walk is split by column blocks over tasks that each hold a bounded
# part (spark/walk_blocks.py), where the whole check in one task holds the whole trace in
# one executor.
CLUSTER_BY_MESSAGE_MIN_ROWS = SCREEN_MIN_ROWS

NO_STAMPS = "no stamps to screen with"
SKIPPED = "skipped (--exact)"
TOO_WIDE = "inconclusive: stamps too wide to pack into 62 bits"
ABSENT = "absent: some send/destroy row has no stamp"
WALKED = "not needed: decided exactly on the driver"


def stamps_cannot_witness(trace) -> bool:
    """From the footers: no stamp packs (none anywhere, or too wide), so neither the screen
    nor the witness can decide anything."""
    return trace.stamp_ranges is not None and stamp_layout(trace.stamp_ranges) is None


def whole_trace(trace, exact, max_rows=ONE_TASK_MAX_ROWS) -> bool:
    """Is the exact path certain for this trace (--exact, or stamps that cannot witness
    anything), and do its rows fit one whole check in one process?"""
    return 0 < trace.rows <= max_rows and (exact or stamps_cannot_witness(trace))


def by_message(trace, exact, min_rows=ONE_TASK_MAX_ROWS) -> bool:
    """Is the exact path certain for this trace, without stamps that could witness (so
    fifo too is decided exactly), and are its rows more than min_rows (by default: more
    than one task holds)? Spark then links them in tasks by message and walks them in one
    task (spark/by_message.py)."""
    return trace.rows > min_rows and stamps_cannot_witness(trace)


def on_driver(trace, exact, spark_asked, cluster_asked=False) -> bool:
    """Does the array engine on the driver take this trace (footers read)? The process
    count is known only after reading: see walk_on_driver. spark_asked: --spark;
    cluster_asked: --master or --shiviz (Spark's own work). A whole trace is taken with
    --spark too: on a local master Spark's one task is this same check in the driver's
    process (spark/one_task.py), so a JVM would add its start and nothing else."""
    if cluster_asked:
        return False
    if whole_trace(trace, exact):
        return True
    return not spark_asked and trace.rows < LOCAL_MAX_ROWS


def walk_on_driver(rows, processes, max_cells=DRIVER_MAX_CELLS) -> bool:
    """Are causal and consistent decided by the walk on the driver, without a witness?"""
    return rows * max(1, processes) <= max_cells


def screen_skipped(trace, exact, whole, min_rows=SCREEN_MIN_ROWS):
    """The summary's `screen` when the screen does not run, or None when it does. whole:
    whole_trace's answer (its stamps cannot screen anything)."""
    if exact:
        return SKIPPED
    if trace.rows < min_rows:
        return f"skipped: {trace.rows} rows, the main pass alone is cheaper"
    if whole:
        return NO_STAMPS
    return None


def witness_skipped(trace, exact):
    """The summary's `witness` for a whole trace (whole_trace) whose walk does not run on
    the driver."""
    if exact:
        return SKIPPED
    return TOO_WIDE if trace.stamp_ranges else ABSENT
