# Invariants: the Spark path (by message) agrees with the brute-force reference checker on
# every trace Hypothesis generates -- correct-bus traces and traces with a planted fault of
# every kind -- and its verdict does not depend on the stamps (it never reads them). Spark
# runs are the expensive part, so each test gathers a batch of traces first, shifts their
# ids apart (offset_rows) and checks them in one Spark run; the per-trace counts are then
# recovered from the violation rows (process // SPAN).
import random

import pytest
from hypothesis import strategies as st
from pyspark.sql import functions as F

from bus1py.check.load import load_trace
from bus1py.check.spark.checker import PROPERTIES, check_trace
from bus1py.check.reference import reference_check
from bus1py.check.simulate import MUTATIONS, mutate, offset_rows, simulate
from bus1py.schema import write_rows as write_trace
from drawn import gather, make_trace as _make, params

SPAN = 1000


def _check_batch(spark, tmp_path, traces, driver_max_cells=0):
    """Check the traces in one run by message (driver_max_cells=0: a clock column, where
    the trace has one, is read)."""
    combined = []
    for k, rows in enumerate(traces):
        combined += offset_rows(rows, k, SPAN)
    write_trace(combined, str(tmp_path / "batch"), files=3)
    trace = load_trace(spark, str(tmp_path / "batch"))
    summary, checker = check_trace(spark, trace, keep_details=True, group_span=SPAN,
                                   driver_max_cells=driver_max_cells)
    per = {k: dict.fromkeys(PROPERTIES, 0) for k in range(len(traces))}
    for name, df in checker.details.items():
        if df is None:
            continue
        for r in (df.groupBy((F.col("process") / SPAN).cast("int").alias("k"))
                  .count().collect()):
            per[r["k"]][name] = r["count"]
    mismatches = []
    for k, rows in enumerate(traces):
        ref = reference_check(rows)
        if ref != per[k]:
            mismatches.append((k, ref, per[k], rows))
    assert not mismatches, (
        f"{len(mismatches)} traces disagree; first: reference={mismatches[0][1]} "
        f"spark={mismatches[0][2]} rows={mismatches[0][3]}")
    return summary, per


@pytest.mark.timeout(400)
def test_correct_traces_pass_and_agree(spark, tmp_path):
    traces = [_make(p) for p in gather(25, params)]
    summary, per = _check_batch(spark, tmp_path, traces)
    # a simulated correct bus drops only what the node rule allows: every property holds
    assert summary["ok"], summary["properties"]
    assert {summary["properties"][k]["method"] for k in ("causal", "consistent")} == \
        {"exact"}
    assert all(v == 0 for counts in per.values() for v in counts.values())


@pytest.mark.timeout(400)
def test_planted_violations_agree_with_reference(spark, tmp_path):
    faulty = st.tuples(params.filter(lambda p: p["nprocs"] >= 3 and p["steps"] >= 20),
                       st.sampled_from(MUTATIONS))
    got = gather(30, faulty)
    # every mutation kind is planted at least once, whatever Hypothesis drew
    got += [(dict(got[0][0], seed=got[0][0]["seed"] + i), m) for i, m in enumerate(MUTATIONS)]
    traces = [_make(p, m) for p, m in got]
    summary, per = _check_batch(spark, tmp_path, traces)
    assert not summary["ok"]
    # the batch must really contain violations of every property, or the test proves little
    for name in PROPERTIES:
        assert summary["properties"][name]["violations"] > 0, name
        assert summary["properties"][name]["examples"], name


@pytest.mark.timeout(300)
def test_stamps_change_no_verdict(spark, tmp_path):
    # the checker never reads stamps: scrambled or dropped, a trace's summary is the same
    rng = random.Random(11)
    rows = mutate(simulate(rng, nprocs=4, steps=70, p_signal=0.2, p_destroy=0.1), "swap",
                  rng)
    got = []
    for name, trace in (("as is", rows), ("scrambled", mutate(rows, "scramble_stamps", rng)),
                        ("dropped", mutate(rows, "drop_stamps", rng))):
        write_trace(trace, str(tmp_path / name))
        summary, _ = check_trace(spark, load_trace(spark, str(tmp_path / name)))
        for key in ("trace", "seconds", "timings"):
            summary.pop(key)
        got.append(summary)
    assert got[0] == got[1] == got[2] and not got[0]["ok"]
