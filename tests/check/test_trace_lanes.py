"""tools/trace_lanes.py folds processes whose lifetimes do not overlap into lanes. The
folded trace's happened-before contains the original's, so the reference checker finds
every fifo and causal violation of the original there too, and the same exactly_once,
consistent and node_rules counts: a clean verdict on the folded trace holds for the
original. Drawn: two simulated traces, the second running after the first in wall time
(as a churn run's generations do), with a planted fault or none."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pyarrow.dataset as ds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bus1py.check.reference import reference_check
from bus1py.check.simulate import MUTATIONS, offset_rows
from bus1py.schema import COLUMN_NAMES, write_rows

from drawn import make_trace, params

_spec = importlib.util.spec_from_file_location(
    "trace_lanes", Path(__file__).resolve().parents[2] / "tools" / "trace_lanes.py")
lanes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lanes)

SAME = ("exactly_once", "consistent", "node_rules")


def _generations(first, second, mutation):
    a = make_trace(first, mutation)
    b = offset_rows(make_trace(second), 1, span=10)
    end = max((r["wall_ns"] for r in a), default=0)
    for r in b:
        r["wall_ns"] += end + 1
    return a + b


def _fold(rows, tmp):
    src, out = tmp / "src", tmp / "out"
    write_rows(rows, str(src), files=3)
    lanes.main([str(src), str(out)])
    return ds.dataset(str(out)).to_table().to_pylist()


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=params, second=params, mutation=st.sampled_from((None,) + MUTATIONS))
def test_folding_keeps_every_violation(tmp_path_factory, first, second, mutation):
    rows = _generations(first, second, mutation)
    if not rows:
        return
    folded = _fold(rows, tmp_path_factory.mktemp("lanes"))
    assert len(folded) == len(rows)
    procs = {r["process"] for r in rows}
    assert len({r["process"] for r in folded}) <= len(procs)
    got, want = reference_check(folded), reference_check(rows)
    for name in SAME:
        assert got[name] == want[name], (name, mutation, got, want)
    for name in ("fifo", "causal"):
        assert not want[name] or got[name], (name, mutation, got, want)


def test_disjoint_processes_share_a_lane_and_overlapping_ones_do_not():
    life = {0: (0, 100, 5), 1: (101, 200, 3), 2: (50, 150, 4), 3: (151, 300, 2)}
    assign = lanes.lanes(life)
    assert assign[0][1] == 0 and assign[1] == (assign[0][0], 5)
    assert assign[2][0] != assign[0][0]
    assert assign[3] == (assign[2][0], 4)


def test_a_destination_without_rows_keeps_a_lane_of_its_own(tmp_path):
    rows = [{"process": 0, "seq": 0, "kind": "send", "msg": 1, "dests": [7, 8], "wall_ns": 1},
            {"process": 8, "seq": 0, "kind": "deliver", "msg": 1, "wall_ns": 2},
            {"process": 3, "seq": 0, "kind": "send", "msg": 2, "dests": [3], "wall_ns": 5},
            {"process": 3, "seq": 1, "kind": "deliver", "msg": 2, "wall_ns": 6}]
    rows = [dict(dict.fromkeys(COLUMN_NAMES), **r) for r in rows]
    folded = _fold(rows, tmp_path)
    send = next(r for r in folded if r["msg"] == 1 and r["kind"] == "send")
    assert len(set(send["dests"])) == 2 and send["process"] not in send["dests"]
    assert reference_check(folded) == reference_check(rows)
