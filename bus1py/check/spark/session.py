# Invariants: a session (bus1py/spark_session.py) is sized to one trace by runtime SQL
# settings alone, so that sizing is also right for a session that already existed (tests,
# notebooks); nothing here starts a session.
from __future__ import annotations

import os


def auto_partitions(files, cores=None) -> int:
    """Shuffle partitions for a trace: ~8 MB of Parquet per partition, at least 2 per core,
    and one per core for a trace under 8 MB a core.

    Spark's default of 200 is far too many for small traces on few cores (each task costs
    tens of milliseconds, and there are a dozen shuffles) and too few for 100M events.
    """
    cores = cores or os.cpu_count() or 2
    size = sum(os.path.getsize(f) for f in files)
    if size < cores * (8 << 20):
        return cores
    return int(max(2 * cores, min(4000, -(-size // (8 << 20)))))


# Below this many rows a check is dominated by fixed costs per job and per stage, not by the
# rows: whole-stage code generation (a Java compile per stage) and adaptive re-planning
# (a planning round per shuffle) then cost more than they save.
SMALL_TRACE_ROWS = 1_000_000


def plan_for_trace(spark, trace, partitions=None) -> int:
    """Size the session's runtime SQL settings to a trace from load.read_footers(): shuffle
    partitions (set_shuffle_partitions), and for a small trace no whole-stage code
    generation and no adaptive execution. Returns the shuffle partitions set."""
    small = trace.rows < SMALL_TRACE_ROWS
    spark.conf.set("spark.sql.codegen.wholeStage", "false" if small else "true")
    spark.conf.set("spark.sql.adaptive.enabled", "false" if small else "true")
    return set_shuffle_partitions(spark, trace.path, partitions)


def set_shuffle_partitions(spark, trace_path: str, partitions: int | None = None) -> int:
    """Set spark.sql.shuffle.partitions for checking one trace: `partitions`, or
    auto_partitions of its Parquet files.  A runtime SQL setting, so it is also right when
    the session already existed (tests, notebooks).  Returns the number set."""
    from ..load import parquet_files
    n = partitions or auto_partitions(parquet_files(trace_path), spark.sparkContext.defaultParallelism)
    spark.conf.set("spark.sql.shuffle.partitions", str(n))
    return n
