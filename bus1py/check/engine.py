"""Which path checks a trace: the one choice, made here from the footers
(load.read_footers: the rows) and the options.

Invariants:
  - Two paths. The driver's array check (arrays/whole.py, no JVM) takes every trace of at
    most DRIVER_MAX_ROWS rows unless Spark is asked for (--spark, --master). Every other
    trace takes the Spark path by message (spark/checker.py): tasks by message id link
    the rows, and the walk by column blocks decides the rest, on a local master in the
    driver's process and on a cluster over tasks exchanging files.
  - Both decide every property exactly from the rows (stamps are never read), causal on
    a history with a causality cycle too (by the streamed walk's rounds,
    csrc/check/rounds.c, over the driver's layout or the per-process files: the least
    fixpoint of the clocks), so both give the same summary (all but `seconds` and
    `timings`), and neither hands a trace to the other.
  - A producer's clock column is read (and verified) only past DRIVER_MAX_CELLS rows x
    processes, by either path: below, the walk alone is cheaper.
"""
from __future__ import annotations

# Up to this many rows the driver checks a trace alone: its arrays take about 250 bytes an
# event (7.4 GB at 30M events, 64 processes); past it the path by message bounds what
# each task holds (docs/CHECKER.md, "The memory of a task").
DRIVER_MAX_ROWS = 32_000_000
# rows x processes up to which causal is decided by the walk alone, a producer's clock
# column left unread
DRIVER_MAX_CELLS = 20_000_000


def on_driver(trace, spark_asked) -> bool:
    """Does the driver's array check take this trace (footers read)? spark_asked: --spark
    or --master."""
    return not spark_asked and trace.rows <= DRIVER_MAX_ROWS


def walk_alone(rows, processes, max_cells=DRIVER_MAX_CELLS) -> bool:
    """Is causal decided by the walk alone, without reading a clock column?"""
    return rows * max(1, processes) <= max_cells
