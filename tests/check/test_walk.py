# Invariants: the compiled walk (spark/walk_task.py, arrays/walk.py, csrc/check/walk.c)
# agrees with the brute-force reference on Hypothesis-drawn traces with every planted
# fault, every causal example's path is a chain of real happened-before edges from the
# earlier send to the later one, its vector clocks and arrays/relax.py's (cyclic histories
# too) equal clocks computed here by plain relaxation, and a producer's vclock column is
# used only when it is exactly right: every single-entry change is caught, and the check
# then says why, names the first offending event and decides by the walk. The kernel tests
# run without Spark (the linked columns built here from the rows).
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import strategies as st

from bus1py import schema as S
from bus1py.check import kinds as K
from bus1py.check.arrays import relax as R
from bus1py.check.arrays import rounds
from bus1py.check.arrays import walk as W
from bus1py.check.arrays.layout import COLUMNS, Layout
from bus1py.check.spark.checker import check_trace
from bus1py.check.load import load_trace
from bus1py.check.reference import reference_check
from bus1py.check.simulate import MUTATIONS, mutate, simulate
from drawn import gather
from test_check_agreement import _check_batch
from test_paths import assert_real_path

traces = st.tuples(st.integers(0, 2 ** 32 - 1), st.integers(1, 6), st.integers(0, 80),
                   st.sampled_from([None, *MUTATIONS]))


def _make(seed, nprocs, steps, mutation):
    rng = random.Random(seed)
    rows = simulate(rng, nprocs=nprocs, steps=steps, p_multicast=0.3, p_signal=0.2,
                    p_destroy=0.05)
    return mutate(rows, mutation, rng) if mutation else rows


def _unstamped(rows):
    return [dict(r, stamp_ts=None, stamp_peer=None, stamp_tx=None) for r in rows]


def _table(rows):
    """The main pass's columns that the kernel reads, computed here from the rows."""
    origin = {}
    for r in rows:
        if r["kind"] in ("send", "destroy", "signal_send"):
            origin[(r["kind"] == "signal_send", r["msg"])] = r
    seen, cols = set(), {c: [] for c in COLUMNS}
    for r in sorted(rows, key=lambda r: (r["process"], r["seq"])):
        code = {S.SEND: K.SEND, S.DESTROY: K.DESTROY, S.SIGNAL_SEND: K.SIGNAL_SEND,
                S.DELIVER: K.DELIVER, S.SIGNAL_RECV: K.SIGNAL_RECV}.get(r["kind"], K.INTERNAL)
        o = origin.get((code in K.SIGNALS, r["msg"])) if code != K.INTERNAL else None
        key = (r["process"], code in K.SIGNALS, r["msg"])
        recv = code in (K.DELIVER, K.SIGNAL_RECV)
        for c, v in (("process", r["process"]), ("seq", r["seq"]), ("kind_code", code),
                     ("msg", r["msg"]), ("first_delivery", recv and key not in seen),
                     ("sender_process", o["process"] if o else None),
                     ("send_seq", o["seq"] if o else None),
                     ("is_destroy", bool(o and o["kind"] == "destroy"))):
            cols[c].append(v)
        if recv:
            seen.add(key)
    types = (pa.int32(), pa.int64(), pa.int8(), pa.int64(), pa.bool_(), pa.int32(),
             pa.int64(), pa.bool_())
    return pa.table({c: pa.array(cols[c], t) for c, t in zip(COLUMNS, types)})


def true_clocks(rows, cyclic=False):
    """{(process, seq): clock} by relaxation to a fixpoint (None for a cyclic history):
    the join of the predecessor's and the origin's clock, own entry seq + 1. cyclic=True:
    a fixpoint of a cyclic history too (own entry at least seq + 1): clocks that agree with
    every edge but know their own future."""
    procs = sorted({r["process"] for r in rows})
    idx = {p: i for i, p in enumerate(procs)}
    origin = {(r["kind"] == "signal_send", r["msg"]): (r["process"], r["seq"])
              for r in rows if r["kind"] in ("send", "destroy", "signal_send")}
    order = sorted(rows, key=lambda r: (r["process"], r["seq"]))
    clock = {(r["process"], r["seq"]): [0] * len(procs) for r in rows}
    for _ in range(len(rows) + 2):
        changed = False
        for r in order:
            p, s = r["process"], r["seq"]
            v = list(clock[(p, s - 1)]) if s else [0] * len(procs)
            if r["kind"] in ("deliver", "signal_recv"):
                v = list(map(max, v, clock[origin[(r["kind"] == "signal_recv", r["msg"])]]))
            if v[idx[p]] > s and not cyclic:
                return None
            v[idx[p]] = max(v[idx[p]], s + 1)
            if v != clock[(p, s)]:
                clock[(p, s)], changed = v, True
        if not changed:
            return clock
    return None


def _with_vclock(rows, clock):
    return [dict(r, vclock=clock[(r["process"], r["seq"])]) for r in rows]


def _layout(rows):
    return Layout(_table(rows), sorted({r["process"] for r in rows}), None)


def test_kernel_agrees_with_reference_and_relaxed_clocks():
    for case in gather(60, traces):
        rows = _make(*case)
        if not rows:
            continue
        lay = _layout(rows)
        ref = reference_check(rows)
        row, clocks, complete = W.walk(lay)
        expected = true_clocks(rows)
        assert complete == (expected is not None), case
        if complete:
            bad, examples = W.causal(lay, row, clocks, 3)
            assert len(bad) == ref["causal"], case
            rows_at = {(r["process"], r["seq"]): r for r in rows}
            for ex in examples:     # each a chain of real happened-before edges
                assert_real_path(ex["path"], rows_at, ex["earlier"], ex["later"])
            every = np.arange(lay.n, dtype=np.int64)
            _, all_clocks, _ = W.walk(lay, every)
            got = all_clocks.reshape(lay.n, -1)
            for (p, s), v in expected.items():
                k = lay.start[np.searchsorted(lay.procs, p)] + s
                assert list(got[k]) == v, (case, p, s)
        comps, examples = W.consistent(lay, 3)
        assert len(comps) == ref["consistent"], case
        # a component split wrongly has no cycle of its own, so it would lack an example
        assert len(examples) == min(3, len(comps)), case


def _relaxed_causal(lay, max_examples):
    """The causal test's definition on the relaxed clocks (relax.clocks, the least
    fixpoint): a first delivery of m1 (sender q, send seq s) violates causal iff an earlier
    first delivery at its process has a send clock whose q entry is at least s + 1; its
    partner is the earliest such. (violating positions, the first max_examples (position,
    partner) pairs)."""
    c = R.clocks(lay)
    first = np.flatnonzero((lay.kind == K.DELIVER) & (lay.first == 1))
    bad, pairs = [], []
    for j, k in enumerate(first.tolist()):
        src = int(lay.src[k])
        q = int(lay.sender_col[k])
        need = src - int(lay.start[lay.slot_of[src]]) + 1
        earlier = [e for e in first[:j].tolist() if lay.slot_of[e] == lay.slot_of[k]
                   and c[lay.src[e], q] >= need]
        if earlier:
            bad.append(k)
            if len(pairs) < max_examples:
                pairs.append((k, earlier[0]))
    return bad, pairs


def test_the_rounds_decide_causal_on_any_history_as_the_relaxed_clocks_define_it():
    # the relaxed clocks (arrays/relax.py) are the plain fixpoint's on every drawn trace,
    # causality cycles included; the driver's causal past a cycle (arrays/rounds.py: the
    # streamed walk's rounds over the layout, at one block and two) has the violations and
    # partners those clocks define, the reference's count, and real paths; where the walk
    # finishes, the definition is the walk's
    cyclic = 0
    for case in gather(60, traces) + [(s, 4, 60, m) for s in range(12)
                                      for m in ("misdeliver", "swap")]:
        rows = _make(*case)
        if not rows:
            continue
        lay = _layout(rows)
        expected = true_clocks(rows, cyclic=True)
        got = R.clocks(lay)
        for (p, s), v in expected.items():
            k = lay.start[np.searchsorted(lay.procs, p)] + s
            assert list(got[k]) == v, (case, p, s)
        bad, pairs = _relaxed_causal(lay, 3)
        assert len(bad) == reference_check(rows)["causal"], case
        row, clocks, complete = W.walk(lay)
        cyclic += not complete
        if complete:
            whole_bad, whole_pairs = W._scan(lay, row, clocks, 3)
            assert bad == whole_bad.tolist() and pairs == whole_pairs, case
            continue
        splits = [None] + ([[W.Block(lay, a, b) for a, b in W.even_edges(lay.ncols, 2)]]
                           if lay.ncols >= 2 else [])
        for parts in splits:
            out, info = rounds.decide(lay, ("causal",), 3, parts=parts)
            assert info["cycle"] and info["causal_count"] == len(bad), case
            assert info["causal_pairs"] == [list(p) for p in pairs], case
            assert sorted(out["causal"]) == sorted(lay.procs[lay.slot_of[bad]]), case
            rows_at = {(r["process"], r["seq"]): r for r in rows}
            for ex in info["causal_examples"]:
                assert_real_path(ex["path"], rows_at, ex["earlier"], ex["later"])
    assert cyclic >= 3


def test_column_blocks_decide_as_one_walk(monkeypatch):
    # every block count from 2 to one column a block: the same violations and examples
    monkeypatch.setattr(W, "BLOCK_MIN_EVENTS", 0)
    monkeypatch.setattr(W, "BLOCK_MIN_COLUMNS", 1)
    split = 0
    for case in gather(60, traces):
        rows = _make(*case)
        if not rows:
            continue
        lay = _layout(rows)
        row, clocks, complete = W.walk(lay)
        for cpus in (2, 3, 6):
            parts = W.blocks(lay, cpus)
            assert len(parts) == max(1, min(cpus, lay.ncols)), case
            split += parts[0] is not None
            done, bad, examples = W.causal_by_blocks(lay, 3, cpus)
            assert done == complete, case
            if complete:
                whole_bad, whole_examples = W.causal(lay, row, clocks, 3)
                assert bad.tolist() == whole_bad.tolist(), case
                assert examples == whole_examples, case
    assert split > 20


def test_every_changed_clock_entry_is_caught():
    cases = gather(40, st.tuples(traces, st.integers(0, 10 ** 6), st.integers(0, 10 ** 6),
                                 st.sampled_from([-2, -1, 1, 3])))
    for case, at, entry, delta in cases:
        rows = _make(*case)
        clock = true_clocks(rows)
        if clock is None or not rows:
            continue
        lay = _layout(rows)
        claimed = np.array([clock[(lay.process_at(k), lay.seq_at(k))] for k in range(lay.n)],
                           dtype=np.int32)
        assert W.verify(lay, claimed) is None, case
        k, c = at % lay.n, entry % len(lay.procs)
        claimed[k, c] += delta
        assert W.verify(lay, claimed) is not None, (case, k, c, delta)


def _check(spark, tmp_path, rows, name):
    extra = (S.VCLOCK,) if "vclock" in rows[0] else ()
    S.write_rows(rows, str(tmp_path / name), files=2, extra=extra)
    summary, _ = check_trace(spark, load_trace(spark, str(tmp_path / name)),
                             driver_max_cells=0)
    return summary


@pytest.mark.timeout(300)
def test_unstamped_planted_violations_agree_through_the_walk(spark, tmp_path):
    got = gather(6, traces)
    got += [(1000 + i, 4, 60, m) for i, m in enumerate(MUTATIONS)]
    summary, _ = _check_batch(spark, tmp_path, [_unstamped(_make(*c)) for c in got])
    assert "kernel_causal" in summary["timings"], summary["timings"]


def _violating():
    """A trace without stamps, with causal violations and no causality cycle."""
    for seed in range(100):
        rows = _unstamped(_make(seed, 4, 70, "swap"))
        clock = true_clocks(rows)
        if clock is not None and reference_check(rows)["causal"]:
            return rows, clock
    raise AssertionError("no seed gives a causal violation")


@pytest.mark.timeout(300)
def test_vclock_column_verified_decides_causal(spark, tmp_path):
    rows, clock = _violating()
    s = _check(spark, tmp_path, _with_vclock(rows, clock), "good")
    causal = s["properties"]["causal"]
    assert causal["method"] == "vector-clock witness" and causal["vclock"] == "holds", causal
    assert causal["violations"] == reference_check(rows)["causal"] > 0


@pytest.mark.timeout(300)
def test_tampered_vclock_column_is_caught_and_the_walk_decides(spark, tmp_path):
    rows, clock = _violating()
    p, s = rows[len(rows) // 2]["process"], rows[len(rows) // 2]["seq"]
    clock[(p, s)] = [v + 1 for v in clock[(p, s)]]      # knows one more of everybody
    got = _check(spark, tmp_path, _with_vclock(rows, clock), "tampered")
    causal = got["properties"]["causal"]
    assert causal["method"] == "exact", causal
    assert causal["vclock"].startswith("failed: "), causal
    bad = causal["vclock_first_bad"]
    # the tampered clock, its successor, or a receive that reads it
    assert (bad["process"], bad["seq"]) in {(p, s), (p, s + 1)} \
        or bad["kind"] in ("deliver", "signal_recv"), (bad, p, s)
    assert causal["violations"] == reference_check(rows)["causal"]


@pytest.mark.timeout(300)
def test_clocks_of_a_cyclic_history_fail_and_the_relaxation_decides(spark, tmp_path):
    # 3 sends m1 to {2, 4} after receiving the signal that 2 sends only after delivering
    # m1: a causality cycle, which the walk cannot order (the rounds decide causal)
    # and which clocks agreeing with every edge must betray by knowing their own future.
    def row(p, s, kind, msg, dests=None):
        return {"process": p, "seq": s, "kind": kind, "msg": msg, "dests": dests,
                "node": None, "wall_ns": 0}
    rows = [row(3, 0, "signal_recv", 100), row(3, 1, "send", 3, [4]),
            row(3, 2, "send", 1, [2, 4]), row(2, 0, "deliver", 1),
            row(2, 1, "signal_send", 100), row(4, 0, "deliver", 3), row(4, 1, "deliver", 1)]
    clock = true_clocks(rows, cyclic=True)
    s = _check(spark, tmp_path, _with_vclock(rows, clock), "cyclic")
    causal = s["properties"]["causal"]
    assert causal["method"] == "exact", causal
    assert "causality cycle" in causal["vclock"], causal
    assert causal["violations"] == reference_check(rows)["causal"] == 1
