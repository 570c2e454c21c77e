# Invariants: one SparkSession per process, created lazily by get_session(); the driver is
# bound to 127.0.0.1 (the machine may have no resolvable hostname and must never listen on a
# public interface); workers run the same interpreter as the driver (PYSPARK_PYTHON); Spark's
# own logging is cut to ERROR through a log4j2 file so the user sees our output, not warnings.
# Nothing here reads a trace: this module only owns the session and its configuration.
from __future__ import annotations

import os
import sys
import tempfile

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = error
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
"""


def _log4j_file() -> str:
    # Written once per user into the temp dir: the JVM reads it at start, and a fixed path
    # keeps repeated sessions from littering /tmp.
    path = os.path.join(tempfile.gettempdir(), f"bus1py-log4j2-{os.getuid()}.properties")
    try:
        with open(path) as f:
            if f.read() == _LOG4J:
                return path
    except OSError:
        pass
    tmp = path + f".{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(_LOG4J)
    os.replace(tmp, path)
    return path


def get_session(master: str | None = None, shuffle_partitions: int | None = None,
                driver_memory: str | None = None, app_name: str = "bus1py-check",
                extra_conf: dict | None = None):
    """Return the process-wide SparkSession, creating it on first use.

    Environment must be set before the JVM starts, so it is done here, before the import of
    the builder has any effect.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log4j = _log4j_file()
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -Dlog4j.configurationFile=file:{log4j}"
    from pyspark.sql import SparkSession

    master = master or "local[*]"
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.extraJavaOptions", java_opts)
               .config("spark.executor.extraJavaOptions", java_opts)
               .config("spark.sql.session.timeZone", "UTC")
               # Adaptive execution coalesces small shuffles: cheap wins on small traces.
               .config("spark.sql.adaptive.enabled", "true")
               # Our plans are iterative (rounds): keep lineage from exploding in the optimizer.
               .config("spark.sql.optimizer.maxIterations", "200"))
    if shuffle_partitions:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for k, v in (extra_conf or {}).items():
        builder = builder.config(k, v)
    if driver_memory and master.startswith("local"):
        builder = builder.config("spark.driver.memory", driver_memory)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def auto_partitions(files, cores=None) -> int:
    """Shuffle partitions for a trace: ~8 MB of Parquet per partition, at least 2 per core.

    Spark's default of 200 is far too many for small traces on few cores (each task costs
    tens of milliseconds, and there are a dozen shuffles) and too few for 100M events.
    """
    cores = cores or os.cpu_count() or 2
    size = sum(os.path.getsize(f) for f in files)
    return int(max(2 * cores, min(4000, -(-size // (8 << 20)))))


def set_shuffle_partitions(spark, trace_path: str, partitions: int | None = None) -> int:
    """Set spark.sql.shuffle.partitions for checking one trace: `partitions`, or
    auto_partitions of its Parquet files.  A runtime SQL setting, so it is also right when
    the session already existed (tests, notebooks).  Returns the number set."""
    from .load import parquet_files
    n = partitions or auto_partitions(parquet_files(trace_path), spark.sparkContext.defaultParallelism)
    spark.conf.set("spark.sql.shuffle.partitions", str(n))
    return n
