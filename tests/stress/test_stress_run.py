"""A small stress run between real processes produces a well-formed, correctly ordered trace.

Invariant: the trace is judged from its rows alone -- the producer-side self-check
(seq without gaps, every deliver matches a send, every destination delivered exactly once,
signals paired) and the checker's array engine (check_local).  The Spark checker runs in
test_stress_checker.py (opt-in: it needs minutes per trace on a 2-core machine).
"""
from __future__ import annotations

import os

import pytest

from bus1py.check.arrays.whole import check_local
from bus1py.check.load import read_footers
from bus1py.stress.analyze import latency_stats, load_events, wellformed
from bus1py.stress.runner import StressConfig, run_stress
from bus1py.stress.trace import read_trace


@pytest.mark.timeout(120)
def test_stress_small_run_trace_is_wellformed_and_ordered(trace_dir):
    res = run_stress(StressConfig(processes=8, duration=2.0, seed=11, trace_dir=trace_dir))
    assert res.ok, res.failures
    rs = res.results
    assert sum(r["sent"] for r in rs) > 500
    assert sum(r["signals_sent"] for r in rs) > 50
    kinds = set().union(*(r["kinds"] for r in rs))
    assert {"unicast", "multicast", "signal", "recv_signal", "node_create"} <= kinds

    t = read_trace(trace_dir)
    assert set(t.column("kind").unique().to_pylist()) >= {"send", "deliver", "signal_send", "signal_recv"}
    assert sorted(t.column("process").unique().to_pylist()) == list(range(8))
    # every process wrote its own files, none half-written
    files = os.listdir(trace_dir)
    assert all(f.startswith("p") and f.endswith(".parquet") for f in files), files

    events = load_events(trace_dir)
    assert wellformed(trace_dir, events) == []
    summary, _ = check_local(read_footers(trace_dir))
    assert summary["ok"], {k: v["violations"] for k, v in summary["properties"].items()}

    lat = latency_stats(trace_dir)
    assert lat["unmatched_deliveries"] == 0
    assert 0 <= lat["p50"] <= lat["p99"] <= lat["max"]


@pytest.mark.timeout(90)
def test_stress_no_trace_and_message_budget():
    res = run_stress(StressConfig(processes=4, messages=200, seed=3, trace_dir=None))
    assert res.ok, res.failures
    for r in res.results:
        # exactly the budget of message-sending actions was planned (errors aside, all sent)
        planned = sum(v for k, v in r["kinds"].items() if k in ("unicast", "multicast", "pass_handle"))
        assert planned == 200
        assert r["trace_rows"] == 0 and r["trace_files"] == 0
    assert sum(r["delivered"] for r in res.results) >= sum(r["sent"] for r in res.results)


@pytest.mark.timeout(60)
def test_stress_refuses_a_used_trace_dir(trace_dir):
    os.makedirs(trace_dir)
    open(os.path.join(trace_dir, "old.parquet"), "wb").close()
    with pytest.raises(FileExistsError):
        run_stress(StressConfig(processes=2, messages=5, trace_dir=trace_dir))
