"""The checker (`bus1py check`) on stress traces: a clean run passes, every --inject
kind is rejected on the property it breaks.

Invariants: the checker is driven only through its command line (exit status 0 ok /
1 violated / 2 malformed, and its --json summary), so these tests do not depend on its
Python internals.  They run by default (about 5 minutes in all on an idle 2-core machine:
one JVM per trace); BUS1PY_STRESS_CHECKER=0 skips them for quick local runs, where the same
traces are still judged in seconds by test_stress_run/test_stress_inject through the
checker's array engine.
"""
from __future__ import annotations

import json
import os

import pytest

from bus1py.stress.demo import run_checker
from bus1py.stress.runner import StressConfig, run_stress

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("BUS1PY_STRESS_CHECKER") == "0",
                       reason="BUS1PY_STRESS_CHECKER=0: the Spark checker runs skipped"),
]

# the checker's property names (bus1py/check/properties.py PROPERTIES) each kind must violate
BREAKS = {
    "no-block": ("causal", "consistent"),
    "no-sync": ("causal",),
    "address-tiebreak": ("consistent",),
    "fifo": ("consistent",),
}


def check(trace_dir, tmp_path):
    out = str(tmp_path / "check.json")
    cp = run_checker(trace_dir, json_out=out, timeout=1500)
    assert cp.returncode in (0, 1), cp.stderr[-3000:]
    with open(out) as f:
        return cp.returncode, json.load(f)


@pytest.mark.timeout(1800)
def test_stress_checker_passes_a_clean_run(tmp_path):
    trace = str(tmp_path / "trace")
    res = run_stress(StressConfig(processes=8, messages=300, seed=21, trace_dir=trace))
    assert res.ok, res.failures
    code, summary = check(trace, tmp_path)
    bad = {k: v["violations"] for k, v in summary["properties"].items() if not v["ok"]}
    assert code == 0 and summary["ok"], bad


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("kind", sorted(BREAKS))
def test_stress_checker_rejects_inject(kind, tmp_path):
    trace = str(tmp_path / "trace")
    res = run_stress(StressConfig(processes=8, messages=400, seed=1, trace_dir=trace, inject=kind,
                                  inject_pause_ns=200_000))
    assert res.ok, res.failures
    code, summary = check(trace, tmp_path)
    assert code == 1 and not summary["ok"]
    violated = {k for k, v in summary["properties"].items() if not v["ok"]}
    assert violated & set(BREAKS[kind]), f"{kind}: violated {violated}, expected one of {BREAKS[kind]}"
