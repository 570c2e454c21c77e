"""`bus1py stress --churn`: processes come and go, some by SIGKILL, and the trace still
passes the checker; the bus's use is back to zero once everyone is gone.

Invariants: real processes, a real bus and the checker (on the driver, as `bus1py check`
decides a trace this small; tests/check holds that path to the Spark one).  The run is short
(8 processes, 3 of them mortal with a life of 30-90 messages) so it fits the default suite.
Seed 6 makes the first generation two SIGKILLs and one exit, and every mortal leaves before
the drain, so the counts below do not depend on how many generations the machine's speed
allows.  The soak's command and figures are in docs/RELIABILITY.md.
"""
from __future__ import annotations

import csv
import os

import pytest

from bus1py.check.load import read_footers
from bus1py.check.arrays.whole import check_local
from bus1py.stress.analyze import wellformed
from bus1py.stress.runner import StressConfig, run_stress


@pytest.mark.timeout(300)
def test_churn_run_passes_the_checker_and_leaks_nothing(tmp_path):
    trace = str(tmp_path / "trace")
    res = run_stress(StressConfig(processes=8, messages=250, seed=6, trace_dir=trace, churn=True,
                                  churn_slots=3, churn_life=60, sample_every=0.1, batch_rows=500))
    assert res.ok, res.failures
    c = res.churn
    # every mortal left, by exit or by SIGKILL, and each killed one's peer was reaped
    assert c["exited"] >= 1 and c["killed"] >= 2, c
    assert c["spawned"] == c["exited"] + c["killed"] and c["reaped"] == c["killed"], c
    mortal = [r for r in res.results if "departure" in r]
    assert len(mortal) == c["spawned"] and {r["departure"] for r in mortal} == {"exit", "kill"}
    # replaced processes are new trace processes: indices past the 8 slots (whether a mortal
    # is replaced before the stable ones finish depends on scheduling: each one that is
    # takes a fresh index, and the 3 first mortals keep theirs)
    replaced = c["spawned"] - 3
    assert sorted(r["index"] for r in mortal)[3:] == list(range(8, 8 + replaced)) if replaced > 0 else \
        sorted(r["index"] for r in mortal) == [5, 6, 7]
    assert res.final_use == {"peers": 0, "nodes": 0, "handles": 0, "entries_in_use": 0, "pool_used": 0}
    r = res.resources
    # sampled from the first loop on, one row a sample (how many depends on the run's
    # length at sample_every=0.1 s: 4 to dozens, by the machine's speed)
    with open(os.path.join(trace, "resources-bus.csv")) as f:
        rows = list(csv.DictReader(f))
    assert r["back_to_zero"] and r["samples"] >= 1 and len(rows) == r["samples"], r
    # the segment never holds more peers than there are slots plus the killed awaiting reaping
    assert max(int(x["peers"]) for x in rows) <= 8 + c["killed"]
    assert os.path.getsize(r["plot"]) > 0
    assert wellformed(trace) == []
    summary, _ = check_local(read_footers(trace))
    bad = {k: v["violations"] for k, v in summary["properties"].items() if not v["ok"]}
    assert summary["ok"], bad
    assert summary["properties"]["exactly_once"]["violations"] == 0
