# Invariants: a trace checked whole in one task (one_task.py) gets the summary the main
# pass and the phases after it give (all but `seconds` and `timings`), counts equal to the
# reference's, the same malformed-trace words, and the same verdict on a producer's clock
# column in either encoding (vclock.py): list<int32> and the flat binary read to the same
# clocks, a wrong width or a null is named at its row, and a tampered flat clock is caught.
# Each Spark test checks a batch of Hypothesis-drawn traces twice: with the one task, and
# with one_task_max_rows=0 (the main pass).
import random

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from bus1py import schema as S
from bus1py.check.engine import ONE_TASK_MAX_ROWS
from bus1py.check import vclock as V
from bus1py.check.spark.checker import PROPERTIES, check_trace
from bus1py.check.load import TraceError, load_trace, read_footers
from bus1py.check.arrays.whole import check_local
from bus1py.check.reference import reference_check
from bus1py.check.simulate import MUTATIONS, offset_rows
from drawn import gather
from test_paths import _acyclic
from test_walk import _make, _unstamped, _with_vclock, true_clocks, traces

SPAN = 1000


def _both(spark, path, **kw):
    """(summary, per-trace counts) from the one task and from the main pass."""
    out = []
    for max_rows in (ONE_TASK_MAX_ROWS, 0):
        summary, c = check_trace(spark, load_trace(spark, path), keep_details=True,
                                 one_task_max_rows=max_rows, **kw)
        assert ("one_task" in c.timings) == bool(max_rows), c.timings
        per = {}
        for name, df in c.details.items():
            if df is not None:
                for r in (df.groupBy((F.col("process") / SPAN).cast("int").alias("k"))
                          .count().collect()):
                    per[(r["k"], name)] = r["count"]
        c.unpersist()
        summary.pop("seconds")
        summary.pop("timings")
        out.append((summary, per))
    assert out[0] == out[1]
    return out[0]


def _write(batch, path, extra=()):
    rows = []
    for k, trace in enumerate(batch):
        rows += offset_rows(trace, k, SPAN)
    S.write_rows(rows, path, files=3, extra=extra)


@pytest.mark.timeout(600)
def test_one_task_gives_the_main_pass_summary(spark, tmp_path):
    got = gather(8, traces) + [(2000 + i, 4, 60, m) for i, m in enumerate(MUTATIONS)]
    batch = [rows for rows in (_unstamped(_make(*c)) for c in got) if _acyclic(rows)]
    _write(batch, str(tmp_path / "u"))
    # the walk with the trace's clock column (driver_max_cells=0), and without (the default)
    for cells in (0, None):
        kw = {} if cells is None else {"driver_max_cells": cells}
        summary, per = _both(spark, str(tmp_path / "u"), group_span=SPAN,
                             max_examples=50, **kw)
        assert summary["witness"].startswith("absent" if cells == 0 else "not needed")
        for k, rows in enumerate(batch):
            ref = reference_check(rows)
            assert {n: per.get((k, n), 0) for n in PROPERTIES} == ref, (k, cells)
    assert not summary["ok"]
    # --exact on stamped traces: the stamps may still witness fifo, as in direct.py
    _write([_make(*c) for c in got[:6]], str(tmp_path / "s"))
    summary, _ = _both(spark, str(tmp_path / "s"), exact=True, group_span=SPAN,
                       driver_max_cells=0)
    assert summary["witness"] == "skipped (--exact)"


@pytest.mark.timeout(300)
def test_the_driver_path_gives_the_one_task_summary(spark, tmp_path):
    # a trace without stamps is checked by the same code on the driver alone, kernels and
    # all, when it has more rows x processes than the walk on the driver takes
    got = gather(6, traces) + [(3000 + i, 4, 50, m) for i, m in enumerate(MUTATIONS)]
    _write([rows for rows in (_unstamped(_make(*c)) for c in got) if _acyclic(rows)],
           str(tmp_path / "u"))
    path = str(tmp_path / "u")
    on_driver, _ = check_local(read_footers(path), max_examples=50, driver_max_cells=0)
    summary, c = check_trace(spark, load_trace(spark, path), max_examples=50,
                             driver_max_cells=0)
    assert "one_task" in c.timings and "kernel_causal" in on_driver["timings"]
    for s in (on_driver, summary):
        s.pop("seconds")
        s.pop("timings")
    assert on_driver == summary and not summary["ok"]


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
            summary, _ = _both(spark, path, driver_max_cells=0)
            causal = summary["properties"]["causal"]
            assert causal["violations"] == reference_check(rows)["causal"] > 0
            if tamper:
                assert causal["method"] == "exact", causal
                assert causal["vclock"].startswith("failed: "), causal
            else:
                assert causal["method"] == "vector-clock witness", causal
                assert causal["vclock"] == "holds", causal


@pytest.mark.timeout(300)
def test_a_malformed_trace_is_named_alike(spark, tmp_path):
    rows = _unstamped(_make(7, 3, 40, None))
    rows[5] = dict(rows[5], seq=rows[5]["seq"] + 100)      # a gap in its process's seq
    S.write_rows(rows, str(tmp_path / "gap"), files=2)
    words = []
    for max_rows in (ONE_TASK_MAX_ROWS, 0):
        with pytest.raises(TraceError) as e:
            check_trace(spark, load_trace(spark, str(tmp_path / "gap")),
                        one_task_max_rows=max_rows, driver_max_cells=0)
        words.append(str(e.value))
    assert words[0] == words[1] and "seq" in words[0], words


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
    assert V.by_row(short, P)[1] == ("a clock does not have one entry per process (3)", 1)
    assert V.by_row(pa.array([[1, 2, 3], [1]], pa.list_(pa.int32())), P)[1][1] == 1
    assert V.by_row(cols["fixed"], 4)[1][1] == 0
    nulls = pa.array([b"\0" * 12, None, b"\0" * 12], pa.binary())
    assert V.by_row(nulls, P)[1] == ("a row has no clock", 1)
