# Invariants: Checker.side_by_side (the screen's and the exact path's two threads) returns
# only when every thread it started has stopped, and a failure in one thread -- or Ctrl-C
# in the caller, the same path -- stops the other's Spark work instead of waiting for it.
import random
import time

import pytest

from bus1py.check.load import load_trace
from bus1py.check.spark.checker import Checker
from bus1py.check.simulate import simulate
from bus1py.schema import write_rows as write_trace

pytestmark = pytest.mark.timeout(200)
JOBS = 300   # a few tenths of a second each: a minute or more if nothing stops them


def test_a_failing_call_stops_the_other_threads_jobs(spark, tmp_path):
    rows = simulate(random.Random(1), nprocs=2, steps=10, p_multicast=0.0, p_signal=0.0,
                    p_destroy=0.0)
    write_trace(rows, str(tmp_path / "t"), files=1)
    checker = Checker(spark, load_trace(spark, str(tmp_path / "t")))
    ran = []

    def busy():
        for i in range(JOBS):
            spark.range(3_000_000).selectExpr("sum(id * id)").collect()
            ran.append(i)
        return "finished"

    def failing():
        while not ran:          # fail while the other thread is in the middle of its jobs
            time.sleep(0.05)
        raise RuntimeError("planted failure")

    with pytest.raises(RuntimeError, match="planted failure"):
        checker.side_by_side({"busy": (busy,), "failing": (failing,)})
    stopped_at = len(ran)
    assert 1 <= stopped_at < JOBS
    time.sleep(1.0)
    assert len(ran) == stopped_at, "the busy thread went on after side_by_side returned"
    assert set(checker.timings) >= {"busy", "failing"}


def test_results_come_back_by_name(spark, tmp_path):
    rows = simulate(random.Random(2), nprocs=2, steps=10, p_multicast=0.0, p_signal=0.0,
                    p_destroy=0.0)
    write_trace(rows, str(tmp_path / "t"), files=1)
    checker = Checker(spark, load_trace(spark, str(tmp_path / "t")))
    got = checker.side_by_side({
        "a": (lambda n: spark.range(n).count(), 7),
        "b": (lambda: spark.range(5).selectExpr("sum(id)").collect()[0][0],)})
    assert got == {"a": 7, "b": 10}
