# Invariants: every causal counterexample carries a path from the send of the earlier
# message to the send of the later one, and every edge of every consistent cycle a path
# between the two deliveries that order it; each consecutive pair of a path must be a real
# happened-before edge of the trace's rows (same process and later seq; a send or destroy
# and a deliver of that message; a signal_send and a signal_recv of that signal). The edges
# are verified here against the rows themselves, sharing no code with the checker. Planted
# violations come from simulate.mutate, stress traces from `bus1py stress --inject`.
import json
import random
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from hypothesis import strategies as st

from bus1py.check.spark.checker import PROPERTIES, check_trace
from bus1py.check.load import load_trace
from bus1py.check.reference import reference_check
from bus1py.check.simulate import MUTATIONS, mutate, offset_rows, simulate
from bus1py.schema import write_rows as write_trace
from bus1py.cli import main
from drawn import gather

SPAN = 1000
ORIGIN_KINDS = {"send": "deliver", "destroy": "deliver", "signal_send": "signal_recv"}


def _causal_through_a_signal():
    """p0 sends m1 to p2, then m2 to p1; p1 delivers m2 and signals p3; p3 sends m3 to p2;
    p2 delivers m3 before m1: send(m1) -> send(m3) only through the signal."""
    events = [(0, "send", 1, [2]), (0, "send", 2, [1]), (1, "deliver", 2, None),
              (1, "signal_send", 7, None), (3, "signal_recv", 7, None), (3, "send", 3, [2]),
              (2, "deliver", 3, None), (2, "deliver", 1, None)]
    rows, seq = [], {}
    for step, (p, kind, msg, dests) in enumerate(events):
        rows.append({"process": p, "seq": seq.get(p, 0), "kind": kind, "msg": msg,
                     "dests": dests, "node": None, "wall_ns": step, "stamp_ts": None,
                     "stamp_peer": None, "stamp_tx": None})
        seq[p] = seq.get(p, 0) + 1
    return rows


def real_edge(a, b, rows_at):
    """Is (a, b) one happened-before edge of the rows? rows_at: (process, seq) -> row."""
    ra, rb = rows_at.get((a["process"], a["seq"])), rows_at.get((b["process"], b["seq"]))
    if ra is None or rb is None:
        return False
    if a["process"] == b["process"] and a["seq"] < b["seq"]:
        return True
    # a message or signal edge (within one process too: a cyclic history may deliver a
    # message before its own process sends it)
    return ORIGIN_KINDS.get(ra["kind"]) == rb["kind"] and ra["msg"] == rb["msg"]


def assert_real_path(path, rows_at, start, end):
    assert path, "no path"
    for ev in path:   # each event is the row it names
        row = rows_at[(ev["process"], ev["seq"])]
        assert (row["kind"], row["msg"]) == (ev["kind"], ev["msg"]), ev
    assert (path[0]["process"], path[0]["seq"]) == (start["process"], start["seq"])
    assert (path[-1]["process"], path[-1]["seq"]) == (end["process"], end["seq"])
    for a, b in zip(path, path[1:]):
        assert real_edge(a, b, rows_at), (a, b)


def assert_examples_explained(summary, rows):
    rows_at = {(r["process"], r["seq"]): r for r in rows}
    seen = 0
    for ex in summary["properties"]["causal"]["examples"]:
        assert_real_path(ex["path"], rows_at, ex["earlier"], ex["later"])
        # and the process really delivered the later message first
        p = ex["process"]
        seq = {r["msg"]: r["seq"] for r in rows if r["process"] == p and r["kind"] == "deliver"}
        assert seq[ex["later"]["msg"]] < seq[ex["earlier"]["msg"]]
        assert len(ex["steps"]) == len(ex["path"]) - 1
        seen += 1
    for ex in summary["properties"]["consistent"]["examples"]:
        edges = ex["edges"]
        for i, e in enumerate(edges):
            assert_real_path(e["path"], rows_at, e["before"], e["after"])
            assert e["before"]["kind"] == e["after"]["kind"] == "deliver"
            assert e["after"]["msg"] == edges[(i + 1) % len(edges)]["before"]["msg"]
        seen += 1
    return seen


def _acyclic(rows) -> bool:
    """Kahn's algorithm over process order, send -> deliver and signal_send -> signal_recv."""
    origin = {(r["kind"] in ("signal_send", "signal_recv"), r["msg"]): (r["process"], r["seq"])
              for r in rows if r["kind"] in ("send", "destroy", "signal_send")}
    succ, indeg = {}, {}
    by = {}
    for r in rows:
        by.setdefault(r["process"], []).append(r)
        indeg.setdefault((r["process"], r["seq"]), 0)
    edges = []
    for lst in by.values():
        lst.sort(key=lambda r: r["seq"])
        edges += [((a["process"], a["seq"]), (b["process"], b["seq"])) for a, b in zip(lst, lst[1:])]
    for r in rows:
        key = {"deliver": (False, r["msg"]), "signal_recv": (True, r["msg"])}.get(r["kind"])
        if key in origin:
            edges.append((origin[key], (r["process"], r["seq"])))
    for a, b in edges:
        succ.setdefault(a, []).append(b)
        indeg[b] += 1
    ready = [e for e, d in indeg.items() if d == 0]
    seen = 0
    while ready:
        e = ready.pop()
        seen += 1
        for f in succ.get(e, ()):
            indeg[f] -= 1
            if indeg[f] == 0:
                ready.append(f)
    return seen == len(indeg)


@pytest.mark.timeout(400)
def test_planted_violations_explained(spark, tmp_path):
    params = st.fixed_dictionaries({
        "seed": st.integers(0, 2 ** 32 - 1), "nprocs": st.integers(3, 5),
        "steps": st.integers(20, 70), "p_multicast": st.sampled_from([0.3, 0.7]),
        "p_signal": st.sampled_from([0.0, 0.15, 0.3]),
        "p_destroy": st.sampled_from([0.0, 0.05])})
    got = gather(25, st.tuples(params, st.sampled_from(MUTATIONS)))
    got += [(dict(got[0][0], seed=got[0][0]["seed"] + i), m) for i, m in enumerate(MUTATIONS)]
    traces = []
    for p, m in got:
        rng = random.Random(p["seed"])
        rows = simulate(rng, nprocs=p["nprocs"], steps=p["steps"],
                        p_multicast=p["p_multicast"], p_signal=p["p_signal"],
                        p_destroy=p["p_destroy"])
        traces.append(mutate(rows, m, rng))
    traces.append(_causal_through_a_signal())
    # a mutation may plant a happened-before cycle (a delivery before its send): the
    # relaxation decides causal there, and its examples carry paths too
    combined = []
    for k, rows in enumerate(traces):
        combined += offset_rows(rows, k, SPAN)
    write_trace(combined, str(tmp_path / "b"), files=3)
    summary, checker = check_trace(spark, load_trace(spark, str(tmp_path / "b")),
                                   max_examples=200, keep_details=True, group_span=SPAN)
    details = checker.details
    # the counts agree with the reference, trace by trace
    per = {k: dict.fromkeys(PROPERTIES, 0) for k in range(len(traces))}
    for name, df in details.items():
        for r in df.collect() if df is not None else ():
            per[r["process"] // SPAN][name] += 1
    for k, rows in enumerate(traces):
        assert reference_check(rows) == per[k], (k, rows)
    assert summary["properties"]["causal"]["violations"] > 0
    assert summary["properties"]["consistent"]["violations"] > 0
    assert assert_examples_explained(summary, combined) >= 2
    signalled = [ex for ex in summary["properties"]["causal"]["examples"]
                 if any(e["kind"] == "signal_recv" for e in ex["path"])]
    assert signalled, "the path through the side channel is missing"


def _rows_of(trace_dir):
    t = pq.read_table(trace_dir, columns=["process", "seq", "kind", "msg"])
    return t.to_pylist()


@pytest.mark.timeout(300)
def test_stress_inject_paths_are_real(spark, tmp_path, capsys):
    checked = 0
    for kind in ("no-sync", "fifo"):
        trace = str(tmp_path / kind)
        cp = subprocess.run([sys.executable, "-m", "bus1py.cli", "stress", "-n", "6",
                             "--messages", "200", "--seed", "1", "--inject", kind,
                             "--trace", trace, "--quiet"], capture_output=True, text=True,
                            timeout=240)
        assert cp.returncode == 0, cp.stderr[-2000:]
        out = str(tmp_path / f"{kind}.json")
        main(["check", trace, "--json", out, "--examples", "10", "--progress", "never"])
        with open(out) as f:
            summary = json.load(f)
        checked += assert_examples_explained(summary, _rows_of(trace))
    printed = capsys.readouterr().out
    assert "because" in printed      # the CLI prints the chains in words
    assert checked > 0


def test_a_causal_example_whose_path_search_ran_out_is_still_explained(tmp_path):
    # a search past walk.PATH_BUDGET leaves the example's path None: the summary is still
    # built and its words say why there are no steps
    from bus1py.check.arrays.whole import check_local
    from bus1py.check.explain import explain
    from bus1py.check.load import read_footers
    from planted import INVERTED as rows
    write_trace(rows, str(tmp_path / "t"))
    ex = check_local(read_footers(str(tmp_path / "t")))[0]["properties"]["causal"]["examples"][0]
    assert "steps" in ex and "too long" not in ex["why"]
    raw = {k: v for k, v in ex.items() if k not in ("why", "steps")}
    out = explain("causal", dict(raw, path=None))
    assert out["why"].endswith("but process 2 delivered p0:1 first")
    assert "a chain too long to search for" in out["why"] and "steps" not in out
