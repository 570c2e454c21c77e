# Invariants: the Spark checker agrees with the brute-force reference checker on every trace
# Hypothesis generates -- correct-bus traces (witness path and forced exact path) and traces
# with a planted fault of every kind. Spark runs are the expensive part, so each test gathers
# a batch of traces first, shifts their ids apart (offset_rows) and checks them in one Spark
# run; the per-trace counts are then recovered from the violation rows (process // SPAN).
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


def _check_batch(spark, tmp_path, traces, exact, driver_max_cells=0):
    """Check the traces in one run; by default off the driver's walk, so the witness and
    the Spark formulations decide (test_paths.py batches through the driver)."""
    combined = []
    for k, rows in enumerate(traces):
        combined += offset_rows(rows, k, SPAN)
    write_trace(combined, str(tmp_path / "batch"), files=3)
    trace = load_trace(spark, str(tmp_path / "batch"))
    summary, checker = check_trace(spark, trace, exact=exact, keep_details=True,
                                   group_span=SPAN, driver_max_cells=driver_max_cells)
    per = {k: dict.fromkeys(PROPERTIES, 0) for k in range(len(traces))}
    for name, df in checker.details.items():
        if df is None:
            continue
        for r in (df.groupBy((F.col("process") / SPAN).cast("int").alias("k"))
                  .count().collect()):
            per[r["k"]][name] = r["count"]
    checker.unpersist()
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
def test_correct_traces_pass_via_witness_and_agree(spark, tmp_path):
    ps = [p for p in gather(25, params)]
    traces = [_make(p) for p in ps]
    summary, per = _check_batch(spark, tmp_path, traces, exact=False)
    # a simulated correct bus drops only what the node rule allows: every property holds
    assert summary["ok"], summary["properties"]
    # and its stamps (with its global wall clock) always witness causal and consistent,
    # side channels included: the fast path decides, the exact one is never needed
    assert summary["witness"] == "holds", summary["witness"]
    assert {summary["properties"][k]["method"] for k in ("causal", "consistent")} == \
        {"stamp witness"}
    assert all(v == 0 for counts in per.values() for v in counts.values())


@pytest.mark.timeout(400)
def test_correct_traces_pass_exact_path(spark, tmp_path):
    traces = [_make(p) for p in gather(20, params)]
    summary, _ = _check_batch(spark, tmp_path, traces, exact=True)
    assert summary["ok"], summary["properties"]
    assert summary["properties"]["causal"]["method"] == "exact"
    assert summary["properties"]["consistent"]["method"] == "exact"


@pytest.mark.timeout(400)
def test_planted_violations_agree_with_reference(spark, tmp_path):
    faulty = st.tuples(params.filter(lambda p: p["nprocs"] >= 3 and p["steps"] >= 20),
                       st.sampled_from(MUTATIONS))
    got = gather(30, faulty)
    # every mutation kind is planted at least once, whatever Hypothesis drew
    got += [(dict(got[0][0], seed=got[0][0]["seed"] + i), m) for i, m in enumerate(MUTATIONS)]
    traces = [_make(p, m) for p, m in got]
    summary, per = _check_batch(spark, tmp_path, traces, exact=False)
    assert not summary["ok"]
    # the batch must really contain violations of every property, or the test proves little
    for name in PROPERTIES:
        assert summary["properties"][name]["violations"] > 0, name
        assert summary["properties"][name]["examples"], name


@pytest.mark.timeout(300)
def test_witness_decides_signal_free_traces_and_exact_path_agrees(spark, tmp_path):
    # Without side channels a correct bus's stamps always witness causality and consistency,
    # so the fast path must decide; scrambled stamps must fall back and still pass.
    rng = random.Random(11)
    rows = simulate(rng, nprocs=4, steps=70, p_signal=0.0, p_destroy=0.1)
    write_trace(rows, str(tmp_path / "w"))
    summary, checker = check_trace(spark, load_trace(spark, str(tmp_path / "w")),
                                   driver_max_cells=0)
    checker.unpersist()
    assert summary["witness"] == "holds"
    assert summary["properties"]["causal"]["method"] == "stamp witness"
    assert summary["properties"]["consistent"]["method"] == "stamp witness"
    assert summary["ok"]
    scrambled = mutate(rows, "scramble_stamps", rng)
    write_trace(scrambled, str(tmp_path / "s"))
    summary, checker = check_trace(spark, load_trace(spark, str(tmp_path / "s")),
                                   driver_max_cells=0)
    checker.unpersist()
    assert summary["witness"].startswith(("failed", "partial"))
    assert summary["properties"]["consistent"]["method"] == "exact" or \
        summary["properties"]["causal"]["method"] == "exact"
    assert summary["ok"], summary["properties"]
