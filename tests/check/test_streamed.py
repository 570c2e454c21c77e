# Invariants: the streamed walk (arrays/streamed.py over arrays/per_process.py's files)
# gives the in-memory walk's answer (test_by_message.in_memory: a Layout of the linked
# files, rounds.decide a block, merged by walk_blocks.merge) on every trace: verdicts,
# counts, the processes of every violation, the examples with their paths, whatever the
# block count, the buckets of the linking and the batch size of the files (losses,
# duplicates, NODE_DESTROY among the draws), and past causality cycles (the rounds over
# the files are the rounds over the layout; test_walk.py holds those to the relaxed
# clocks' definition; it says a trace with a cycle is one); and one task's
# measured peak stays within its memory model (streamed.task_bytes) at any block width.
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bus1py.check.arrays import linked_files, per_process, streamed
from bus1py.check.arrays.walk import even_edges
from bus1py.check.load import read_footers
from bus1py.check.spark import by_message, walk_blocks
from test_by_message import SPAN, _linked, _write, in_memory, streamed as _streamed
from test_by_message import streams_of as _streams
from planted import CYCLE, INVERTED
from test_paths import _acyclic
from test_walk import _make, _unstamped, traces

K = 50


def _agree(batch, tmp, buckets, blocks):
    path = os.path.join(tmp, "u")
    _write(batch, path)
    where = linked_files.directory(tmp)
    sums = _linked(read_footers(path), where, buckets)
    if any(s.get("malformed") for s in sums):
        return None
    procs = sorted(set().union(*(s["procs"] for s in sums)))
    if not procs:
        return None
    destroys = any(s["destroys"] for s in sums)
    streams = _streams(sums, procs, where)
    ncols = max(p % SPAN for p in procs) + 1
    cyclic = not all(_acyclic(rows) for rows in batch)
    got = []
    for count in blocks:
        edges = even_edges(ncols, min(count, ncols)) if count else None
        one = in_memory(procs, sums, destroys, edges)
        two = _streamed(streams, destroys, edges)
        # past a causality cycle the streamed walk's rounds give relaxation's answer
        assert two == one, count
        assert two[0].get("cycle", False) == cyclic, count
        got.append(two[0])
    return got


@settings(max_examples=30, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.lists(traces, min_size=1, max_size=5), st.integers(1, 6),
       st.sampled_from([(), (INVERTED,), (CYCLE,)]), st.sampled_from([1, 3, 16, None]))
def test_the_streamed_walk_is_the_in_memory_walk(tmp_path_factory, drawn, buckets, more,
                                                  rows):
    batch = [_unstamped(_make(*c)) for c in drawn] + list(more)
    saved = per_process.MIN_ROWS, per_process.STREAM_ROWS_ALL
    try:
        if rows:        # batches of `rows` rows, else the default (one a process here)
            per_process.MIN_ROWS = per_process.STREAM_ROWS_ALL = rows
        _agree(batch, str(tmp_path_factory.mktemp("s")), buckets, (None, 2, 3, 64))
    finally:
        per_process.MIN_ROWS, per_process.STREAM_ROWS_ALL = saved


def test_violations_cycles_and_small_batches(tmp_path, monkeypatch):
    # batches of 7 rows: every process spans several, a walk waits across them; the
    # planted faults give causal examples with paths, components and a cycle
    monkeypatch.setattr(per_process, "MIN_ROWS", 7)
    monkeypatch.setattr(per_process, "STREAM_ROWS_ALL", 7)
    batch = [_unstamped(_make(9000 + i, 4, 60, m)) for i, m in enumerate(
        ("lose", "duplicate", "misdeliver", "swap", "adjacent_swap", "late_data"))]
    got = _agree(batch + [INVERTED], str(tmp_path / "a"), 3, (None, 2, 64))
    assert got[0]["walk_complete"] and got[0]["causal_count"]
    assert all(e["path"] for e in got[0]["causal_examples"])
    assert got[0]["consistent_count"] and got[0]["fifo_count"] and got[0]["node_rules_count"]
    got = _agree(batch + [CYCLE], str(tmp_path / "b"), 3, (None, 2))
    assert got[0]["walk_complete"] and got[0]["cycle"]


def _scrambled(seed, swaps):
    """A simulated trace whose deliveries are swapped `swaps` times over (misdeliveries
    among them): many causality cycles, some through each other."""
    import random

    from bus1py.check.simulate import mutate
    rng = random.Random(seed)
    rows = _make(seed, 5, 90, None)
    for i in range(swaps):
        rows = mutate(rows, ("swap", "misdeliver", "adjacent_swap")[i % 3], rng)
    return _unstamped(rows)


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2 ** 32 - 1), st.integers(1, 12), st.sampled_from([2, 5, None]))
def test_past_causality_cycles_the_streamed_rounds_are_the_in_memory_walks(tmp_path_factory, seed, swaps,
                                                         rows):
    # rounds.c's rounds (a back edge taken where the walk stands still, until no back
    # edge's clock changes) over the per-process files give the in-memory walk's
    # violations, counts and examples, at every block count and batch size
    saved = per_process.MIN_ROWS, per_process.STREAM_ROWS_ALL
    try:
        if rows:
            per_process.MIN_ROWS = per_process.STREAM_ROWS_ALL = rows
        _agree([_scrambled(seed, swaps), _scrambled(seed + 1, swaps)],
               str(tmp_path_factory.mktemp("c")), 2, (None, 2, 3))
    finally:
        per_process.MIN_ROWS, per_process.STREAM_ROWS_ALL = saved


def test_a_broken_numbering_never_makes_a_process_file(tmp_path):
    rows = _unstamped(_make(7, 3, 40, None))
    path = str(tmp_path / "t")
    _write([rows], path)
    where = linked_files.directory(str(tmp_path))
    sums = _linked(read_footers(path), where, 3)
    procs = sorted(set().union(*(s["procs"] for s in sums)))
    with pytest.raises(ValueError, match="not numbered"):
        _streams(sums[1:], procs, where)


# one task of the streamed walk in a process of its own: its resident memory's growth
TASK = """
import json, sys
import psutil
from bus1py.check.arrays import events, per_process, properties, streamed, streamed_examples
from bus1py.check.spark import by_message
from bus1py.check.spark.walk_task import task_properties
a = json.loads(sys.argv[1])
streams = per_process.Streams(a["procs"], a["files"], a["counts"], a["claims"])
before = psutil.Process().memory_info().rss
mine = task_properties(sorted(by_message.WANT), a["i"], a["tasks"])
out, info = streamed.decide(streams, mine, 3, None, a["edge"], a["destroys"])
# the peak of this process's own memory (ru_maxrss would keep the parent's across exec)
with open("/proc/self/status") as f:
    peak = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) * 1024
grew = peak - before
print(json.dumps({"grew": grew, "live": info["live_origins"],
                  "vclock": None if not a["claims"] else
                  "holds" if info.get("claim_bad") is None else "failed"}))
"""


@pytest.mark.timeout(300)
def test_a_task_grows_by_what_the_memory_model_says(tmp_path):
    # a task's resident memory grows by at most its model (streamed.task_bytes) and by
    # at least half of it (the model is no loose bound), whatever the block's width, with
    # a producer's clock column checked beside the walk or not
    import json
    import subprocess
    import sys
    from pathlib import Path

    from bus1py import schema as S
    from bus1py.check.arrays import claims
    from bus1py.check.load import parquet_files
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from add_vclock import add_vclock
    from gen_trace import generate
    generate(str(tmp_path / "t"), 1_000_000, 64, stamps=False, quiet=True)
    add_vclock(str(tmp_path / "t"), str(tmp_path / "v"), flat=True)
    where = linked_files.directory(str(tmp_path))
    sums = _linked(read_footers(str(tmp_path / "v")), where, 2)
    procs = sorted(set().union(*(s["procs"] for s in sums)))
    linked = [(s["file"], *s["counts"]) for s in sums if "file" in s]
    pieces = claims.split(parquet_files(str(tmp_path / "v")), S.VCLOCK_BIN[0], where)
    files, broken = per_process.write_group(linked, set(procs), where,
                                            per_process.batch_rows(len(procs)), pieces,
                                            len(procs))
    assert not broken
    counts = walk_blocks.linked_input(sums, procs)[1]
    for checked in (False, True):
        for blocks in (1, 4):
            edges = even_edges(len(procs), blocks) or [None]
            for i in (0, 1 % blocks):
                arg = {"procs": procs, "files": [files[p] for p in procs],
                       "counts": counts, "i": i, "tasks": len(edges), "edge": edges[i],
                       "destroys": any(s["destroys"] for s in sums), "claims": checked}
                cp = subprocess.run([sys.executable, "-c", TASK, json.dumps(arg)],
                                    capture_output=True, text=True, timeout=120, check=True)
                got = json.loads(cp.stdout)
                assert got["vclock"] == (None if not checked else "holds"), got
                width = edges[i][1] - edges[i][0] if edges[i] else len(procs)
                model = streamed.task_bytes(counts, width, got["live"],
                                            beside=i == 1 % blocks,
                                            claims=width if checked else 0)
                assert 0.5 * model <= got["grew"] <= model, (checked, blocks, i, got, model)


def test_an_early_inconsistency_keeps_only_its_chains_for_tarjan(tmp_path):
    # planted.INVERTED first (p1 and p2 deliver m1 and m2 in opposite orders: a component
    # of two messages), then a long clean trace among the same processes: the peel from
    # the fronts stops at once, the peel from the ends comes back to it, and Tarjan gets
    # the four first deliveries of the component alone, with the in-memory walk's answer
    from bus1py.check.arrays import streamed
    clean = _unstamped(_make(11, 4, 400, None))
    shift = {p: 2 for p in (0, 1, 2)}
    rows = list(INVERTED) + [dict(r, seq=r["seq"] + shift.get(r["process"], 0),
                                  msg=None if r["msg"] is None else r["msg"] + 1000)
                             for r in clean]
    path = str(tmp_path / "t")
    _write([rows], path)
    where = linked_files.directory(str(tmp_path))
    sums = _linked(read_footers(path), where, 3)
    procs = sorted(set().union(*(s["procs"] for s in sums)))
    streams = _streams(sums, procs, where)
    bad, examples, kept = streamed.consistent(streams, 3)
    chains = sum(r["kind"] == "deliver" for r in rows)
    assert len(bad) == 1 and len(examples) == 1 and kept == 4 < chains // 10, (kept, chains)
    info, per = in_memory(procs, sums, True, None)
    assert sorted(bad) == per["consistent"] and examples == info["consistent_examples"]


def test_a_path_search_is_the_in_memory_one_at_any_budget(tmp_path):
    # streamed_examples.paths and walk.path give the same path, or both none, for every
    # budget: one that runs out within a level, and one that a level's receives pass
    # before it is looked at (then neither looks at it: the streamed search never holds
    # more receives than its budget)
    import random

    import numpy as np

    from bus1py.check import kinds as K
    from bus1py.check.arrays import streamed_examples, walk
    from bus1py.check.arrays.layout import Layout
    batch = [_unstamped(_make(21 + i, 5, 120, None)) for i in range(2)]
    path = os.path.join(str(tmp_path), "u")
    _write(batch, path)
    where = linked_files.directory(str(tmp_path))
    sums = _linked(read_footers(path), where, 2)
    procs = sorted(set().union(*(s["procs"] for s in sums)))
    streams = _streams(sums, procs, where)
    files, counts = walk_blocks.linked_input(sums, procs)
    lay = Layout(linked_files.read(files), procs, SPAN, (), counts)
    origins = np.flatnonzero(lay.kind <= K.SIGNAL_SEND)
    rng = random.Random(5)
    outcomes = set()
    for _ in range(60):
        a, b = sorted(rng.sample(origins.tolist(), 2))
        for budget in (1, 3, 10, 40, 10 ** 6):
            want = walk.path(lay, a, b, budget)
            got = streamed_examples.paths(streams, [(a, b)], budget)[0]
            assert (None if got is None else [lay.event_at(k) for k in got]) == want, \
                (a, b, budget)
            outcomes.add((budget, want is None))
    # both ways out are reached: a path at a large budget, none at a small one
    assert (10 ** 6, False) in outcomes and (1, True) in outcomes
