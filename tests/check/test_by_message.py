# Invariants: a trace checked by message (spark/by_message.py: the array engine linking the
# rows in tasks by id, then the walk with fifo and node_rules) gets the summary the
# driver's array check gives (all but `seconds` and `timings`), counts equal to the
# reference's, whether its tasks run in the driver's process (a local master, over
# buckets read with pyarrow: many buckets here, so a message's loss and the NODE_DESTROY
# that excuses it land in different ones) or on a standalone cluster's executors
# (test_driver_path.py's cluster test, whose session this shares); with stamps or without
# and with causality cycles among the drawn traces (the rounds decide causal there); a
# malformed trace gets the driver's words (malformed.py). Each Spark test checks a batch
# of Hypothesis-drawn traces, every assertion holding for any draw.

import os

import pytest

from bus1py import schema as S
from bus1py.check.arrays.whole import check_local
from bus1py.check.load import TraceError, load_trace, read_footers
from bus1py.check.reference import reference_check
from bus1py.check.simulate import MUTATIONS, offset_rows
from bus1py.check.spark import by_message
from bus1py.check.spark.checker import PROPERTIES, check_trace
from drawn import gather
from planted import CYCLE, INVERTED
from test_paths import _acyclic
from test_walk import _make, _unstamped, traces

SPAN = 1000


def _summary_and_counts(spark, path, **kw):
    """(summary without its seconds, counts by (trace, property), timings) of the Spark
    path, or of the driver's check with spark=None."""
    if spark is None:
        summary, details = check_local(read_footers(path), keep_details=True, **kw)
    else:
        summary, c = check_trace(spark, load_trace(spark, path), keep_details=True, **kw)
        details = {name: None if v is None else [r["process"] for r in v.collect()]
                   for name, v in c.details.items()}
    per = {}
    for name, procs in details.items():
        for p in procs or ():
            per[(p // SPAN, name)] = per.get((p // SPAN, name), 0) + 1
    timings = summary.pop("timings")
    summary.pop("seconds")
    return summary, per, timings


def _write(batch, path, files=3):
    rows = []
    for k, trace in enumerate(batch):
        rows += offset_rows(trace, k, SPAN)
    S.write_rows(rows, path, files=files)


def _batch(n, seed_base):
    """Drawn traces, one of each mutation kind and one with a causality cycle, every other
    one without stamps."""
    got = gather(n, traces) + [(seed_base + i, 4, 60, m) for i, m in enumerate(MUTATIONS)]
    got.append(next((s, 4, 60, "misdeliver") for s in range(seed_base, seed_base + 1000)
                    if not _acyclic(_make(s, 4, 60, "misdeliver"))))
    return [_unstamped(_make(*c)) if i % 2 else _make(*c) for i, c in enumerate(got)]


@pytest.mark.timeout(600)
def test_by_message_gives_the_drivers_summary(spark, tmp_path, monkeypatch):
    batch = _batch(8, 4000)
    assert not all(_acyclic(rows) for rows in batch)   # the relaxation is reached
    path = str(tmp_path / "u")
    _write(batch, path)
    # buckets of ~50 rows: ids of one trace spread over many
    monkeypatch.setattr(by_message, "BUCKET_ROWS", 50)
    for kw in ({"driver_max_cells": 0}, {}):
        whole, per_whole, _ = _summary_and_counts(None, path, max_examples=50, **kw)
        spread, per, t = _summary_and_counts(spark, path, group_span=SPAN, max_examples=50,
                                             **kw)
        assert "by_message" in t and "per_process" in t, t
        assert spread == whole and per == per_whole
        for k, rows in enumerate(batch):
            assert {n: per.get((k, n), 0) for n in PROPERTIES} == reference_check(rows), k
    assert not whole["ok"]


@pytest.mark.timeout(300)
def test_a_malformed_trace_is_named_as_the_driver_names_it(spark, tmp_path):
    rows = _unstamped(_make(7, 3, 40, None))
    deliver = next(i for i, x in enumerate(rows) if x["kind"] == "deliver")
    send = next(i for i, x in enumerate(rows) if x["kind"] == "send")
    first = next(i for i, x in enumerate(rows) if x["seq"] == 0)
    broken = {
        "gap": [(5, {"seq": rows[5]["seq"] + 100})],              # found by the walk's task
        "first": [(first, {"seq": 7})],
        "dangling": [(deliver, {"msg": 10 ** 9})],                # by the link
        "several origins": [(send, {"msg": rows[deliver]["msg"]}),
                            (deliver, {"kind": "internal", "msg": None})],
        "row_rule": [(3, {"kind": "teleport"})],                  # by the buckets' reading
        "two row rules": [(3, {"kind": "teleport"}), (9, {"seq": -5})],
        "gap and dangling": [(5, {"seq": rows[5]["seq"] + 100}),
                             (deliver, {"msg": 10 ** 9})],
    }
    for name, changes in broken.items():
        bad = [dict(r) for r in rows]
        for i, change in changes:
            bad[i] = dict(bad[i], **change)
        path = str(tmp_path / name)
        S.write_rows(bad, path, files=2)
        with pytest.raises(TraceError) as on_driver:
            check_local(read_footers(path))
        with pytest.raises(TraceError) as spread:
            check_trace(spark, load_trace(spark, path))
        assert str(spread.value) == str(on_driver.value), name


@pytest.mark.timeout(300)
def test_a_causality_cycle_is_decided_by_rounds_on_either_path(spark, tmp_path):
    # planted.CYCLE: a causality cycle, which the walk cannot order (the driver's walk and
    # the streamed walk take a back edge and walk again), and one causal violation
    rows = CYCLE
    path = str(tmp_path / "cycle")
    S.write_rows(rows, path)
    whole, per_whole, t_whole = _summary_and_counts(None, path)
    summary, per, t = _summary_and_counts(spark, path)
    assert t["walk_rounds"] == 2 and t["walk_back_edges"] == 1, t
    assert "kernel_causal_rounds" in t_whole, t_whole
    assert summary == whole and per == per_whole
    assert {n: per.get((0, n), 0) for n in PROPERTIES} == reference_check(rows)
    assert summary["properties"]["causal"]["violations"] == 1


def test_fifo_by_chunks_of_processes_is_fifo_whole(tmp_path):
    # fifo works on whole processes a chunk at a time (its temporaries bounded): any chunk
    # size gives the violations, their order and the examples of one pass over the trace
    from bus1py.check.arrays.events import Events
    from bus1py.check.arrays.properties import fifo
    keys = dict.fromkeys(("dests", "node", "wall_ns", "stamp_ts", "stamp_peer", "stamp_tx"))
    # p0 sends m1 and then m2 to p1, which delivers m2 first: one fifo violation
    inverted = [dict(keys, process=0, seq=0, kind="send", msg=1, dests=[1]),
                dict(keys, process=0, seq=1, kind="send", msg=2, dests=[1]),
                dict(keys, process=1, seq=0, kind="deliver", msg=2),
                dict(keys, process=1, seq=1, kind="deliver", msg=1)]
    batch = _batch(6, 6000)
    batch[1:1] = [inverted, inverted]
    path = str(tmp_path / "u")
    _write(batch, path)
    ev = Events(read_footers(path))
    whole = fifo(ev, 50, chunk=ev.n + 1)
    assert whole[2] > 0           # the mutations plant fifo violations
    for chunk in (1, 2, 7, 100):
        assert fifo(ev, 50, chunk=chunk) == whole, chunk


def _linked(trace, where, buckets):
    """The tasks by message over `buckets` buckets of the trace, their linked events
    written under `where`: their summaries."""
    import json

    from bus1py.check.arrays.buckets import read_buckets
    link = by_message.link_task(50, where)
    sums = []
    for table in read_buckets(trace, buckets):
        for b in link(iter(table.to_batches()) if table is not None else iter(())):
            assert b.column("rec")[0].as_py() != by_message.EVENT   # written, not sent
            if b.column("rec")[0].as_py() == by_message.SUMMARY:
                sums.append(json.loads(b.column("info")[0].as_py()))
    return sums


def in_memory(procs, sums, destroys, edges):
    """The in-memory walk's answer over the linked files, the streamed walk's oracle: one
    Layout of every linked event (arrays/layout.py), causal by arrays/rounds.py's decide for
    each block of `edges` (the rounds past a causality cycle), consistent, fifo and
    node_rules on the same layout, the blocks' answers merged as the walk's tasks' are:
    (info without its seconds, the sorted processes of each property's violations)."""
    import numpy as np

    from bus1py.check import kinds as K
    from bus1py.check.arrays import linked_files
    from bus1py.check.arrays import properties as P
    from bus1py.check.arrays import rounds
    from bus1py.check.arrays import walk as W
    from bus1py.check.arrays.layout import Layout
    from bus1py.check.spark import walk_blocks
    files, counts = walk_blocks.linked_input(sums, procs)
    lay = Layout(linked_files.read(files), procs, SPAN, ("node",) if destroys else (),
                 counts)
    node, has_node = lay.extra.pop("node") if destroys else (None, None)
    destroyed = []
    if destroys:
        gone = np.flatnonzero((lay.kind == K.DELIVER) & lay.is_destroy & has_node)
        destroyed = np.unique(np.stack([lay.procs[lay.slot_of[gone]], node[gone]]),
                              axis=1).T.tolist()

    def block(edge, mine):
        parts = [W.Block(lay, *edge)] if edge else None
        out, info = rounds.decide(lay, [m for m in mine if m in ("causal", "consistent")],
                                  50, None, parts)
        for name in ("fifo", "node_rules"):
            if name in mine:
                method, got, n, examples = getattr(P, name)(
                    P.ByPosition(lay, node, has_node), 50)
                out[name] = got or []
                info.update({f"{name}_count": n, f"{name}_examples": examples})
                if method:
                    info[f"{name}_method"] = method
                info["destroyed"] = destroyed
        return out, info
    return _merged(edges, block)


def _merged(edges, block):
    """The blocks' answers merged as the walk's tasks' are (walk_blocks.merge), block(edge,
    properties) giving one task's (out, info): (info without its seconds, the sorted
    processes of each property's violations)."""
    from bus1py.check.spark import walk_blocks
    infos, per = [], {}
    tasks = edges or [None]
    for i, edge in enumerate(tasks):
        out, info = block(edge, walk_blocks.task_properties(sorted(by_message.WANT), i,
                                                            len(tasks)))
        infos.append(info)
        for name, got in out.items():
            per.setdefault(name, []).extend(got)
    info = walk_blocks.merge(infos, 50)
    info.pop("seconds", None)
    return info, {name: sorted(v) for name, v in per.items() if v}


def streams_of(sums, procs, where, groups=2):
    """The per-process files of the linked events of `sums`, written by `groups` tasks."""
    from bus1py.check.arrays import per_process
    from bus1py.check.spark import walk_blocks
    linked = [(s["file"], *s["counts"]) for s in sums if "file" in s]
    files = {}
    for g in range(groups):
        files.update(per_process.write_group(linked, set(procs[g::groups]), where,
                                             per_process.batch_rows(len(procs)))[0])
    counts = walk_blocks.linked_input(sums, procs)[1]
    return per_process.Streams(procs, [files[p] for p in procs], counts)


def streamed(streams, destroys, edges):
    """in_memory's answer by the streamed walk, one decide a block, the tasks' properties
    as walk_blocks gives them out."""
    from bus1py.check.arrays import streamed as St
    from bus1py.check.spark import walk_blocks

    def block(edge, mine):
        out, info = St.decide(streams, mine, 50, SPAN, edge, destroys)
        for k in walk_blocks.WALK_FACTS + ("events",):
            info.pop(k, None)
        return out, info
    return _merged(edges, block)


def test_the_streamed_walk_by_column_blocks_is_the_one_walk(tmp_path):
    # the tasks by message write their linked events to files, gathered by process; the
    # walk's tasks, one per column block, each stream them all and walk their own columns:
    # any block count merges into the one walk's answer, whose counts are the reference's
    from bus1py.check.arrays import linked_files
    from bus1py.check.arrays.walk import even_edges
    batch = _batch(6, 7000) + [INVERTED]
    path = str(tmp_path / "u")
    _write(batch, path)
    where = linked_files.directory(str(tmp_path))
    assert os.stat(where).st_mode & 0o777 == 0o700     # the check's user's alone
    sums = _linked(read_footers(path), where, 5)
    procs = sorted(set().union(*(s["procs"] for s in sums)))
    destroys = any(s["destroys"] for s in sums)
    streams = streams_of(sums, procs, where)
    one, per = streamed(streams, destroys, None)
    assert one["walk_complete"]
    ncols = max(p % SPAN for p in procs) + 1
    assert ncols >= 4
    for count in range(2, ncols + 1):
        assert streamed(streams, destroys, even_edges(ncols, count)) == (one, per)
    for k, rows in enumerate(batch):
        ref = reference_check(rows)
        for name in by_message.WANT:
            assert sum(p // SPAN == k for p in per.get(name, [])) == ref[name], (k, name)
    assert one["causal_count"] and one["causal_examples"]



def test_a_dead_checks_directory_is_removed_by_the_next(tmp_path):
    # a check killed before removing its files' directory leaves it; the next check
    # under the same base removes it once the kernel says that process is gone, and
    # never a live check's
    import subprocess
    import sys

    from bus1py.check.arrays import linked_files
    code = ("import sys; from bus1py.check.arrays import linked_files; "
            f"print(linked_files.directory({str(tmp_path)!r}))")
    dead = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True).stdout.strip()
    assert os.path.isdir(dead)
    live = linked_files.directory(str(tmp_path))
    assert not os.path.exists(dead) and os.path.isdir(live)
    again = linked_files.directory(str(tmp_path))
    assert os.path.isdir(live) and os.path.isdir(again)


@pytest.mark.timeout(300)
def test_a_trace_broken_by_make_cycles_checks_alike_on_either_path(spark, tmp_path):
    # tools/make_cycles.py (the broken trace of docs/BENCHMARKS.md) makes causality
    # cycles; the driver and the path by message decide them by rounds, alike
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from gen_trace import generate
    from make_cycles import make_cycles
    generate(str(tmp_path / "t"), 40_000, 8, stamps=False, quiet=True)
    made = make_cycles(str(tmp_path / "t"), str(tmp_path / "c"), 2)
    assert len(made) == 2 and len({p for p, _, _ in made}) == 2
    whole, per_whole, t_whole = _summary_and_counts(None, str(tmp_path / "c"))
    spread, per, t = _summary_and_counts(spark, str(tmp_path / "c"))
    assert "kernel_causal_rounds" in t_whole and t["walk_rounds"] > 1, (t_whole, t)
    assert spread == whole and per == per_whole
    assert whole["properties"]["causal"]["violations"] > 0


def _outsider_reaches(where, name):
    """In a child dropped to uid and gid 65534 (no groups): what it could do with a
    check's directory `where` and its file `name` (errnos of the refusals)."""
    out = {}
    for what, fn in (("list", lambda: os.listdir(where)),
                     ("read", lambda: open(name, "rb").read(1)),
                     ("create", lambda: open(os.path.join(where, "x"), "wb").close()),
                     ("remove", lambda: os.unlink(name)),
                     ("rename", lambda: os.rename(where, where + "-gone"))):
        try:
            fn()
            out[what] = 0
        except OSError as e:
            out[what] = e.errno
    return out


@pytest.mark.timeout(60)
def test_another_user_cannot_reach_a_checks_files(tmp_path):
    # the files a check exchanges (the trace's pieces, linked events, per-process events,
    # a clock column's pieces) lie in a directory of its own under /tmp (shared by every
    # user) by default: mode 0700, so another uid that never ran the check can neither
    # list, read, add, remove nor move them
    import errno
    import json
    import tempfile

    import pyarrow as pa

    from bus1py.check.arrays import linked_files
    if os.geteuid() != 0:
        pytest.skip("needs root to run a child as another uid")
    where = linked_files.directory(tempfile.gettempdir())
    try:
        name = linked_files.write(where, pa.table({"process": [1], "seq": [0]}))
        rd, wr = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(rd)
                os.setgroups([])
                os.setresgid(65534, 65534, 65534)
                os.setresuid(65534, 65534, 65534)
                os.write(wr, json.dumps(_outsider_reaches(where, name)).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(wr)
        with os.fdopen(rd, "rb") as f:
            got = json.loads(f.read())
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        assert set(got.values()) <= {errno.EACCES, errno.EPERM} and 0 not in got.values(), got
        assert os.listdir(where) == [os.path.basename(name)]
    finally:
        import shutil
        shutil.rmtree(where, ignore_errors=True)
