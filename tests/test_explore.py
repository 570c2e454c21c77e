"""Crash exploration: each workload killed at every basic block of the C helper it runs
(at a fixed stride of them in `make test`, all of them with BUS1PY_LONG=1), and after
each kill the bus is consistent, nothing committed is lost or duplicated, no queue is
stuck and nothing leaks.  The harness and its rules: tests/explore.py; the command and the
figures: docs/RELIABILITY.md, "Crash exploration".

Each workload is explored by `tests/explore.py` in a process of its own, under the
instrumented build bus1py._b1x (BUS1PY_LIB), built here on first use and cached by a hash
of the sources (bus1py/_build_explore.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bus1py import _build_explore
from bus1py._lib import lib

from explore_workloads import WORKLOADS

HERE = Path(__file__).resolve().parent
SHORT_POINTS = 60  # crash points per workload in `make test`, at a fixed stride
long_run = pytest.mark.skipif(os.environ.get("BUS1PY_LONG") != "1",
                              reason="every crash point: set BUS1PY_LONG=1 (docs/RELIABILITY.md)")


@pytest.fixture(scope="module")
def instrumented():
    return str(_build_explore.build())


def explore(path, workload, points=None):
    """The explorer's summary of one workload (tests/explore.py), its report printed."""
    args = [sys.executable, str(HERE / "explore.py")]
    args += ["--points", str(points)] if points else ["--all"]
    r = subprocess.run([*args, workload], cwd=HERE, capture_output=True, text=True,
                       env=dict(os.environ, BUS1PY_LIB=path))
    print(r.stderr, flush=True)
    assert r.stdout, f"the explorer printed nothing (exit {r.returncode}): {r.stderr[-2000:]}"
    return json.loads(r.stdout.splitlines()[0])


def test_the_normal_build_is_not_instrumented(instrumented):
    import bus1py._b1 as normal
    assert lib is normal.lib and not hasattr(lib, "b1x_arm")
    assert b"__sanitizer_cov_trace_pc" not in Path(normal.__file__).read_bytes()
    assert b"__sanitizer_cov_trace_pc" in Path(instrumented).read_bytes()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_no_crash_point_breaks_the_bus(workload, instrumented):
    s = explore(instrumented, workload, SHORT_POINTS)
    assert s["blocks"] > 0 and s["explored"] >= min(SHORT_POINTS, s["blocks"]), s
    assert not s["failures"], f"{len(s['failures'])} failing crash points of {workload} (printed above)"


@pytest.mark.slow
@long_run
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_no_crash_point_breaks_the_bus_long(workload, instrumented):
    s = explore(instrumented, workload)
    assert s["explored"] == s["blocks"] > 0, s
    assert not s["failures"], f"{len(s['failures'])} failing crash points of {workload} (printed above)"
