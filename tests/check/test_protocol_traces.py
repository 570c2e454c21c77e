# Invariants: the Spark checker agrees with the reference checker on traces of the causal-order
# protocols (bus1py.causal) driven by adversarial schedules, and explains fifo's causal
# violation with a concrete counterexample. These traces carry no stamps, so the checker takes
# its exact path. One Spark run checks the whole batch (ids shifted apart by offset_rows).
import pytest
from hypothesis import strategies as st

from bus1py import causal
from bus1py.check.spark.checker import check_trace
from bus1py.check.load import load_trace
from bus1py.schema import write_rows
from bus1py.sim.adversary import play
from drawn import gather
from test_check_agreement import _check_batch


@st.composite
def protocol_runs(draw):
    name = draw(st.sampled_from(causal.PROTOCOLS))
    n = draw(st.integers(2, 4))
    ops = []
    for _ in range(draw(st.integers(1, 20))):
        if draw(st.booleans()):
            p = draw(st.integers(0, n - 1))
            others = [q for q in range(n) if q != p]
            ops.append(("send", p, draw(st.lists(st.sampled_from(others), min_size=1,
                                                 max_size=len(others), unique=True))))
        else:
            ops.append(("deliver", draw(st.integers(0, 1 << 16))))
    return name, n, ops, draw(st.sampled_from(["lifo", "fifo", 7]))


FIG4 = [("send", 0, [2]), ("send", 0, [1]), ("deliver", 1), ("send", 1, [2]), ("deliver", 1)]


@pytest.mark.timeout(600)
def test_spark_checker_agrees_on_protocol_traces(spark, tmp_path):
    runs = gather(30, protocol_runs())
    runs.append(("fifo", 3, FIG4, "fifo"))
    traces = [play(name, n, ops, drain).rows for name, n, ops, drain in runs]
    _, per = _check_batch(spark, tmp_path, traces)
    for (name, *_), counts in zip(runs, per.values()):
        if causal.protocol_class(name).causal:
            assert counts["causal"] == counts["fifo"] == counts["exactly_once"] == 0, name
    assert per[len(runs) - 1]["causal"] == 1


def test_fifo_is_caught_with_a_counterexample(spark, tmp_path):
    """Seed 000 Fig. 4 over the fifo protocol: P0 sends x to P2, then y to P1; P1 delivers y
    and sends z to P2, which delivers z before x."""
    write_rows(play("fifo", 3, FIG4, "fifo").rows, str(tmp_path / "t"), files=1)
    summary, _ = check_trace(spark, load_trace(spark, str(tmp_path / "t")))
    causal_ = summary["properties"]["causal"]
    assert not causal_["ok"] and causal_["violations"] == 1
    (ex,) = causal_["examples"]
    assert (ex["process"], ex["earlier"]["message"], ex["later"]["message"]) == \
        (2, "p0:0", "p1:1")
    assert all(summary["properties"][k]["ok"] for k in ("exactly_once", "fifo"))
