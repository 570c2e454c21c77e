"""The shared `spark` fixture survives a test that fails inside a Spark call (a timeout):
that test fails, the next one gets a session that answers, where every later Spark test
used to fail "... does not exist in the JVM"."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))

# The middle test fails as pytest-timeout fails a test (pytest.fail from SIGALRM's
# handler, inside the py4j call), keeping the connection alive as a failure's traceback
# may: its answer goes unread.
INNER = '''
import signal

import pytest

KEPT = []


def test_starts_the_session(spark):
    assert spark.range(5).count() == 5


def test_fails_inside_a_spark_call(spark):
    KEPT.append(spark.sparkContext._gateway._gateway_client.get_thread_connection())
    signal.signal(signal.SIGALRM, lambda *a: pytest.fail("timed out"))
    signal.setitimer(signal.ITIMER_REAL, 2.0)
    # one partition from 0: id * id overflows (ending the job) only past id ~3e9, seconds
    # after the alarm on any machine, so the job cannot outlive the next test's revival
    try:
        spark.range(0, 10 ** 12, 1, 1).filter("id * id % 7 = 3").count()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def test_the_next_one_has_a_session_that_answers(spark):
    assert spark.range(5).count() == 5
    assert spark.range(3).selectExpr("sum(id)").first()[0] == 3
'''


@pytest.mark.timeout(300)
def test_a_failure_inside_spark_fails_one_test_not_the_rest(tmp_path):
    (tmp_path / "test_inner.py").write_text(INNER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest",
                        "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                        str(tmp_path / "test_inner.py")],
                       capture_output=True, text=True, timeout=280, env=env, cwd=tmp_path)
    out = p.stdout + p.stderr
    assert "1 failed, 2 passed" in out and "Failed: timed out" in out, out
