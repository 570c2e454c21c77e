# The Spark session that `bus1py check` and `bus1py simulate` both start.
# Invariants: one SparkSession per process, created lazily by get_session(); the driver is
# bound to 127.0.0.1 (the machine may have no resolvable hostname and must never listen on a
# public interface); workers run the same interpreter as the driver (PYSPARK_PYTHON); Spark's
# own logging is cut to ERROR through a log4j2 file so the user sees our output, not warnings;
# the JVM we launch writes its stdout and stderr (the launcher's "Using incubator modules"
# line, anything log4j still prints) to jvm_log_path(), never to the terminal.
# Nothing here reads a trace: this module only owns the session and its
# configuration (check/spark/session.py sizes it to a trace).
from __future__ import annotations

import os
import sys
import tempfile
import threading

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


def jvm_log_path() -> str:
    """Where the JVM's own stdout and stderr go (one file per user, rewritten per launch)."""
    return os.path.join(tempfile.gettempdir(), f"bus1py-spark-{os.getuid()}.log")


def _launch_quiet_gateway(conf):
    """Launch the driver JVM with its stdout/stderr in jvm_log_path(), and install it as
    PySpark's gateway, unless a gateway already exists (then nothing changes). PySpark
    itself would let the JVM inherit our terminal."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway
    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        with open(jvm_log_path(), "wb") as log:
            gateway = launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm


# A JVM that runs no job over the rows (a check's: its tasks read the rows with pyarrow)
# spends most of its CPU compiling Spark's own code, so the quick first-tier compiler
# alone (C1) answers sooner and leaves the cores to the tasks, in the driver and in every
# executor; a job over every row (the report's overview) wants the optimising one (C2).
QUICK_START_JAVA_OPTS = "-XX:TieredStopAtLevel=1"


def _cds_options() -> str:
    """JVM options for a class-data-sharing archive of the classes a check loads.

    Loading and verifying Spark's classes is most of a cold JVM's start. The first check
    (per user, JDK and PySpark install) asks its JVM to dump the classes it loaded at exit
    (-XX:ArchiveClassesAtExit, into a file of its own, since the JVM cannot write it
    atomically); a later check adopts a finished dump (no live process names it) under the
    final name and maps it (-XX:SharedArchiveFile). A JVM that cannot use
    an archive (another JDK, a damaged file) says so in its log and starts without it, so a
    stale archive costs nothing but its speed-up. BUS1PY_CDS=0 turns this off."""
    if os.environ.get("BUS1PY_CDS", "1") == "0":
        return ""
    import hashlib
    import shutil
    try:
        import pyspark
        java = os.path.realpath(shutil.which("java") or os.path.join(
            os.environ.get("JAVA_HOME", ""), "bin", "java"))
        # the archive holds the classes of one class path: the jars of one PySpark install
        key = (f"{java}:{os.stat(java).st_mtime_ns}:{pyspark.__version__}:"
               f"{os.path.dirname(pyspark.__file__)}:{sys.version_info[:2]}")
    except OSError:
        return ""
    base = os.path.join(os.path.expanduser("~"), ".cache", "bus1py")
    final = os.path.join(base, f"spark-cds-{hashlib.sha1(key.encode()).hexdigest()[:12]}.jsa")
    try:
        os.makedirs(base, exist_ok=True)
        dumps = [os.path.join(base, n) for n in sorted(os.listdir(base))
                 if n.startswith(os.path.basename(final)) and n.endswith(".dump")]
        if any(_being_written(d) for d in dumps):
            return ""      # another check's JVM is writing one: no second dump meanwhile
        for d in dumps:    # finished: the first becomes the archive, the rest go
            if os.path.exists(final):
                os.unlink(d)
            else:
                os.replace(d, final)
    except OSError:
        return ""
    if os.path.exists(final):
        return f"-XX:SharedArchiveFile={final}"
    return f"-XX:ArchiveClassesAtExit={final}.{os.getpid()}.dump"


def _being_written(dump: str) -> bool:
    """Is a JVM that was told to dump into `dump` still alive? (It outlives the Python
    process that started it while it writes the archive.)"""
    needle = dump.encode()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if needle in f.read():
                        return True
            except OSError:
                continue
    return False


def default_driver_memory() -> str:
    """The heap of a local session when the user names none: a quarter of the machine's
    memory (the JVM's own default, which spark-submit replaces with 1g), at least 1g. In
    local mode the driver's heap is all the executors have: 1g ran out of heap on a
    10.9M-row, 303-process trace. The heap is reserved, not committed, so a small check
    pays nothing for it."""
    import psutil
    return f"{max(1, psutil.virtual_memory().total // 4 // 2**30)}g"


def get_session(master: str | None = None, shuffle_partitions: int | None = None,
                driver_memory: str | None = None, app_name: str = "bus1py-check",
                extra_conf: dict | None = None, quick_start: bool = False):
    """Return the process-wide SparkSession, creating it on first use.

    Environment must be set before the JVM starts, so it is done here, before the import of
    the builder has any effect. quick_start: JVM options for a session that runs no
    job over the rows (QUICK_START_JAVA_OPTS, the driver's and the executors');
    BUS1PY_JAVA_OPTS adds options of the user's. Neither changes a session that already
    exists.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log4j = _log4j_file()
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -Dlog4j.configurationFile=file:{log4j}"
    if quick_start:
        java_opts += " " + QUICK_START_JAVA_OPTS
    java_opts += " " + _cds_options() + " " + os.environ.get("BUS1PY_JAVA_OPTS", "")
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    master = master or "local[*]"
    conf = {"spark.master": master, "spark.app.name": app_name,
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.extraJavaOptions": java_opts,
            "spark.executor.extraJavaOptions": java_opts,
            "spark.sql.session.timeZone": "UTC",
            # Adaptive execution coalesces small shuffles: cheap wins on small traces.
            "spark.sql.adaptive.enabled": "true",
            # Our plans are iterative (rounds): keep lineage from exploding in the optimizer.
            "spark.sql.optimizer.maxIterations": "200"}
    if shuffle_partitions:
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    conf.update(extra_conf or {})
    if master.startswith("local"):
        conf["spark.driver.memory"] = driver_memory or default_driver_memory()
    _launch_quiet_gateway(SparkConf(loadDefaults=False).setAll(list(conf.items())))
    builder = SparkSession.builder
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class EarlySession:
    """get_session() in a thread, started at once: the JVM boots while the caller parses
    arguments and reads Parquet footers. result() returns the session or raises what
    get_session raised."""

    def __init__(self, *args, **kwargs):
        self._session = self._error = None
        self._thread = threading.Thread(target=self._run, args=args, kwargs=kwargs,
                                        name="bus1py-spark-start", daemon=True)
        self._thread.start()

    def _run(self, *args, **kwargs):
        try:
            self._session = get_session(*args, **kwargs)
        except BaseException as e:  # handed to the caller by result()
            self._error = e

    def result(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._session
