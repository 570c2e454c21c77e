"""Shared fixtures: fresh buses that are always unlinked, leak checks, and Spark.

Every bus a test creates is named `bus1py-<pytest pid>-...` (Bus.create's default, or
`shm_name()` for named ones), so the checks below only look at this session's segments and
never at those of other test runs on the same machine.

Hypothesis draws the same examples on every run (`derandomize`: seeded from each test
function, no example database), so a test passes or fails the same way in any clone.
BUS1PY_HYPOTHESIS=explore draws anew each run, to look for new failures on purpose.
"""
from __future__ import annotations

import multiprocessing
import os
import secrets

import pytest
from hypothesis import settings

import bus1py

settings.register_profile("fixed", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile("explore" if os.environ.get("BUS1PY_HYPOTHESIS") == "explore" else "fixed")

SHM_DIR = "/dev/shm"


def our_prefix() -> str:
    return f"bus1py-{os.getpid()}-"


def our_segments() -> set:
    """The shared-memory objects of buses created by this pytest process."""
    try:
        names = os.listdir(SHM_DIR)
    except FileNotFoundError:  # not Linux: nothing to check
        return set()
    prefix = our_prefix()
    return {n for n in names if n.startswith(prefix)}


@pytest.fixture
def shm_name():
    """A factory of fresh bus names that the leak checks cover."""
    return lambda tag="named": f"{our_prefix()}{tag}-{secrets.token_hex(4)}"


@pytest.fixture
def make_bus():
    """`make_bus(**limits)` -> a new bus; closed and unlinked after the test."""
    made = []

    def make(**kw):
        bus = bus1py.Bus.create(**kw)
        made.append(bus)
        return bus

    yield make
    for bus in made:
        bus.__exit__(None, None, None)  # close + unlink (tolerates an already unlinked name)


@pytest.fixture
def bus():
    """A fresh bus with default limits, closed and unlinked after the test."""
    with bus1py.Bus.create() as b:
        yield b


@pytest.fixture
def no_leaks():
    """The test leaves no segment of its own behind and no child process running.
    (Used by test_errors.py and test_multiprocess.py through `pytestmark`.)"""
    before = our_segments()
    yield
    stray = multiprocessing.active_children()
    for p in stray:
        p.kill()
        p.join(5)
    left = our_segments() - before
    for name in left:  # clean up so one leak does not fail every later test
        try:
            os.unlink(os.path.join(SHM_DIR, name))
        except FileNotFoundError:
            pass
    assert not stray, f"test left child processes running: {stray}"
    assert not left, f"test left bus segments in {SHM_DIR}: {sorted(left)}"


@pytest.fixture(scope="session", autouse=True)
def _no_leaks_per_session():
    """At the end of the session no /dev/shm/bus1py-<our pid>-* segment is left."""
    yield
    left = our_segments()
    assert not left, f"test session left bus segments in {SHM_DIR}: {sorted(left)}"


def _start_spark():
    from bus1py.spark_session import get_session
    return get_session("local[2]", shuffle_partitions=2, extra_conf={
        "spark.sql.codegen.wholeStage": "false", "spark.sql.adaptive.enabled": "false"})


def _answers(s) -> bool:
    """Does the session answer each call with that call's answer? A test's timeout raised
    inside a py4j call leaves the answer unread on this thread's connection (kept alive by
    the failure's traceback), and every later call then reads the answer of the one before."""
    try:
        m = s._jvm.java.lang.Math
        return m.max(3, 11) == 11 and m.max(7, 5) == 7 and not s._jsc.sc().isStopped()
    except Exception:
        return False


def _revive(s):
    """A session that answers: this thread's connection replaced (the timed-out test's job
    cancelled), else, when the session itself is gone, a new JVM and session."""
    client = s.sparkContext._gateway._gateway_client
    conn = client.get_thread_connection()
    if conn is not None:
        conn.close()
    client.thread_connection.connection = None
    try:
        s.sparkContext.cancelAllJobs()
    except Exception:
        pass
    if _answers(s):
        return s
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    gateway = SparkContext._gateway
    gateway.proc.kill()
    gateway.proc.wait()
    gateway.close()
    SparkContext._gateway = SparkContext._jvm = SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = SparkSession._activeSession = None
    return _start_spark()


@pytest.fixture(scope="session")
def _spark_holder():
    """The session's one SparkSession, started before any test's own fixtures, so leak
    checks count its JVM as older."""
    return [_start_spark()]


@pytest.fixture
def spark(_spark_holder):
    """One real local SparkSession for the whole session (starting one costs seconds), with
    2 shuffle partitions: the test traces are tiny and Spark's default of 200 partitions
    makes every shuffle several times slower.  Whole-stage codegen and adaptive
    re-planning are off for the same reason (results depend on neither).  A session that
    no longer answers (a test timed out inside a Spark call) is revived before the next
    test, so one timeout fails one test, not every later one."""
    if not _answers(_spark_holder[0]):
        _spark_holder[0] = _revive(_spark_holder[0])
    return _spark_holder[0]


def pytest_collection_modifyitems(config, items):
    """`make test` runs the suite in two pytest-xdist workers (-n 2 --dist loadgroup): the
    tests of the standalone cluster run in one worker, so one cluster starts, not two."""
    for item in items:
        if "spark_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("spark-cluster"))


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """The URL of a real standalone Spark cluster (one master, one worker) on 127.0.0.1."""
    from spark_cluster import start_cluster
    url, stop = start_cluster(str(tmp_path_factory.mktemp("spark-cluster")))
    yield url
    stop()
