# Invariants: a producer's clock column (vclock.py) gets the same verdict from either path
# (the driver's array check, and the Spark path by message): list<int32> and the flat
# binary read to the same clocks, a wrong width or a null is named at its row, a tampered
# clock is caught and the walk decides, and a true one decides causal ("vector-clock
# witness", the reference's count).
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bus1py import schema as S
from bus1py.check import vclock as V
from bus1py.check.spark.checker import check_trace
from bus1py.check.load import load_trace, read_footers
from bus1py.check.arrays.whole import check_local
from bus1py.check.reference import reference_check
from test_walk import _make, _unstamped, _with_vclock, traces, true_clocks


def _both(spark, path, **kw):
    """The summary of the driver's check and of the Spark path's, equal."""
    out = []
    for summary in (check_local(read_footers(path), **kw)[0],
                    check_trace(spark, load_trace(spark, path), **kw)[0]):
        summary.pop("seconds")
        summary.pop("timings")
        out.append(summary)
    assert out[0] == out[1]
    return out[0]


def _clocked(encoding, tamper=False):
    """A trace without stamps with causal violations, and its clocks as a column."""
    for seed in range(100):
        rows = _unstamped(_make(seed, 4, 70, "swap"))
        clock = true_clocks(rows)
        if clock is not None and reference_check(rows)["causal"]:
            break
    if tamper:
        r = rows[len(rows) // 2]
        clock[(r["process"], r["seq"])][0] += 1
    if encoding == "list":
        return _with_vclock(rows, clock), (S.VCLOCK,)
    return ([dict(r, vclock_bin=np.asarray(clock[(r["process"], r["seq"])], "<u4").tobytes())
             for r in rows], (S.VCLOCK_BIN,))


@pytest.mark.timeout(300)
def test_either_clock_encoding_decides_causal_alike_on_either_path(spark, tmp_path):
    for encoding in ("list", "bin"):
        for tamper in (False, True):
            rows, extra = _clocked(encoding, tamper)
            path = str(tmp_path / f"{encoding}-{tamper}")
            S.write_rows(rows, path, files=2, extra=extra)
            summary = _both(spark, path, driver_max_cells=0)
            causal = summary["properties"]["causal"]
            assert causal["violations"] == reference_check(rows)["causal"] > 0
            if tamper:
                assert causal["method"] == "exact", causal
                assert causal["vclock"].startswith("failed: "), causal
            else:
                assert causal["method"] == "vector-clock witness", causal
                assert causal["vclock"] == "holds", causal


def _columns(clocks, P):
    flat = np.asarray(clocks, "<u4").reshape(-1, P)
    return {"list": pa.array([list(map(int, c)) for c in flat], pa.list_(pa.int32())),
            "binary": pa.array([c.tobytes() for c in flat], pa.binary()),
            "large": pa.array([c.tobytes() for c in flat], pa.large_binary()),
            "fixed": pa.array([c.tobytes() for c in flat], pa.binary(4 * P))}


def test_every_encoding_reads_the_same_clocks():
    rng = random.Random(3)
    for P in (1, 3, 8):
        n = rng.randint(1, 40)
        clocks = [rng.randint(0, 2 ** 31 - 1) for _ in range(n * P)]
        want = np.asarray(clocks, np.int32).reshape(n, P)
        for name, col in _columns(clocks, P).items():
            for sliced in (col, col.slice(1)):     # an offset into the buffers reads alike
                got, bad = V.by_row(sliced, P)
                assert bad is None and np.array_equal(got, want[len(col) - len(sliced):]), name


def test_a_bad_row_is_named():
    P = 3
    cols = _columns(list(range(12)), P)
    short = pa.array([b"\0" * 12, b"\0" * 8, b"\0" * 12], pa.binary())
    why, rows = V.by_row(short, P)[1]
    assert why == "a clock does not have one entry per process (3)" and rows.tolist() == [1]
    assert V.by_row(pa.array([[1, 2, 3], [1]], pa.list_(pa.int32())), P)[1][1].tolist() == [1]
    assert V.by_row(cols["fixed"], 4)[1][1].tolist() == list(range(len(cols["fixed"])))
    # the null rule first, every row breaking it named
    nulls = pa.array([b"\0" * 12, None, b"\0" * 8, None], pa.binary())
    why, rows = V.by_row(nulls, P)[1]
    assert why == "a row has no clock" and rows.tolist() == [1, 3]


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(traces, st.randoms(use_true_random=False),
       st.sampled_from(["none", "value", "values", "null", "width"]),
       st.sampled_from([1, 2, 3]), st.booleans())
def test_the_streamed_walks_clock_check_is_the_drivers_verify(spark, tmp_path_factory, case,
                                                               rng, tamper, blocks, split):
    # the Spark path carries the clock column to the per-process files and each block
    # task checks its own columns as it walks (claim.c's check, past a causality
    # cycle in rounds): the verdict, its words and the first offending event are the
    # driver's verify_clocks' over the whole trace, for true clocks, tampered values,
    # nulls and wrong widths, at any block count, the column in one file or spread
    rows = _unstamped(_make(*case))
    if not rows:
        return
    P = len({r["process"] for r in rows})
    clock = {k: list(v) for k, v in true_clocks(rows, cyclic=True).items()}
    keys = sorted(clock)
    for _ in range({"none": 0, "values": 3}.get(tamper, 1)):
        k = rng.choice(keys)
        if tamper in ("value", "values"):
            j = rng.randrange(P)
            clock[k][j] = max(0, clock[k][j] + rng.choice([-1, 1, 7]))
        elif tamper == "null":
            clock[k] = None
        elif tamper == "width":
            clock[k] = clock[k][:-1]
    bins = [dict(r, vclock_bin=None if clock[(r["process"], r["seq"])] is None else
                 np.asarray(clock[(r["process"], r["seq"])], "<u4").tobytes()) for r in rows]
    path = str(tmp_path_factory.mktemp("v") / "t")
    S.write_rows(bins, path, files=3 if split else 1, extra=(S.VCLOCK_BIN,))
    driver = check_local(read_footers(path), driver_max_cells=0)[0]
    streamed = check_trace(spark, load_trace(spark, path), driver_max_cells=0,
                           walk_blocks=blocks)[0]
    for s in (driver, streamed):
        s.pop("seconds")
        s.pop("timings")
    assert streamed == driver
    causal = driver["properties"]["causal"]
    if tamper == "none" and true_clocks(rows) is not None:
        assert causal["vclock"] == "holds", causal
    else:
        assert causal["vclock"].startswith("failed: ") and causal["vclock_first_bad"], causal
