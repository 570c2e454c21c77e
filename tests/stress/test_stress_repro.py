"""One seed, one action sequence per process -- whatever the timing.

Invariant: a process's plan depends only on (seed, process index, options); what it
receives depends on timing, what it does does not.  Checked twice: by the digest of every
planned action, and in the traces themselves (the sequence of multicast/unicast
destinations and sizes, and of signal targets, per process).
"""
from __future__ import annotations

from collections import defaultdict

import pytest

from bus1py.stress.runner import StressConfig, run_stress
from bus1py.stress.trace import read_trace
from bus1py.stress.workload import DEFAULT_MIX, Planner, PayloadSizes, Topology


def planned_rows(trace_dir):
    t = read_trace(trace_dir, columns=["process", "seq", "kind", "dests", "action", "size"]).to_pylist()
    out = defaultdict(list)
    for r in sorted(t, key=lambda r: (r["process"], r["seq"])):
        if r["kind"] == "send" and r["action"] == "multicast":
            out[r["process"]].append(("multicast", tuple(r["dests"]), r["size"]))
        elif r["kind"] == "signal_send":
            out[r["process"]].append((r["action"], tuple(r["dests"])))
    return dict(out)


def run(seed, trace_dir):
    res = run_stress(StressConfig(processes=6, messages=150, seed=seed, trace_dir=trace_dir))
    assert res.ok, res.failures
    return {r["index"]: r["plan_sha256"] for r in res.results}, planned_rows(trace_dir)


@pytest.mark.timeout(120)
def test_stress_same_seed_same_actions(tmp_path):
    plans1, rows1 = run(7, str(tmp_path / "a"))
    plans2, rows2 = run(7, str(tmp_path / "b"))
    plans3, _ = run(8, str(tmp_path / "c"))
    assert plans1 == plans2
    assert rows1 == rows2 and all(rows1.values())
    assert all(plans3[i] != plans1[i] for i in plans1)


def test_stress_planner_is_a_function_of_seed_and_index():
    topo = Topology.ring(16, 8)
    sizes = PayloadSizes.parse("lognormal:64:4096")

    def first(seed, index, n=500):
        p = Planner(seed, index, topo, DEFAULT_MIX, sizes, fanout=4)
        return [next(p) for _ in range(n)]

    assert first(1, 3) == first(1, 3)
    assert first(1, 3) != first(1, 4) and first(1, 3) != first(2, 3)
    for a in first(5, 0):
        assert set(a.targets) <= set(topo.reach[0])
        if a.kind == "multicast":
            assert 2 <= len(a.targets) <= 4 and len(set(a.targets)) == len(a.targets)
