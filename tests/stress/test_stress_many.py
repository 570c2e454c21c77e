"""256 processes on a 2-core machine: all start, run their few messages, drain and exit.

Invariant: nothing is left behind -- no child process, no /dev/shm/bus1py-* of ours (the
autouse fixture in conftest.py checks both), and every process's trace file is there.
"""
from __future__ import annotations

import os

import pytest

from bus1py.stress.analyze import load_events, wellformed
from bus1py.stress.runner import StressConfig, run_stress


@pytest.mark.timeout(170)
def test_stress_256_processes_start_run_and_exit(trace_dir):
    res = run_stress(StressConfig(processes=256, messages=4, seed=5, trace_dir=trace_dir,
                                  max_peers=300, reach=6, fanout=3))
    assert res.ok, res.failures[:5]
    assert len(res.results) == 256
    assert all(r["sent"] + sum(r["errors"].values()) >= 1 for r in res.results)
    files = {f.split("-")[0] for f in os.listdir(trace_dir)}
    assert files == {f"p{i:05d}" for i in range(256)}
    assert wellformed(trace_dir, load_events(trace_dir)) == []
