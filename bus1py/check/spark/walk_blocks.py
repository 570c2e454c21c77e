# Invariants: causal, consistent, fifo and node_rules of every trace the driver does not
# check alone are decided by one design, the streamed walk split by column blocks of the
# vector clocks over tasks (each block's columns are exact by themselves, and a delivery is
# judged by the one block holding its sender's column), on a cluster by Spark's executors
# and on a local master by this process's threads (_rows: the same task functions either
# way). Every task reads the events from files written once by tasks, never through the
# driver or one JVM stream: each process's linked events in a file of its own
# (arrays/per_process.py, written by a job of tasks by process group), streamed by every
# task a batch of each process at a time (arrays/streamed.py), so no task holds the trace,
# only the model of streamed.task_bytes (docs/CHECKER.md, "The memory of a task"). A
# causality cycle (a broken trace) is walked past in rounds (csrc/check/rounds.c). A
# producer's clock column to verify travels to the per-process files as int32 columns
# (arrays/claims.py, split by a job of tasks over the trace's files), and each block task
# checks its own columns of it as it walks; the clocks are never trusted and never decide: verified, they
# are the walk's own. The tasks' answers merge into the one walk's answer: counts add up,
# the causal examples are the lowest (position, partner) pairs of all blocks (positions
# are the same in every task), the processes of the causal violations come in position
# order; consistent comes from task 0, fifo and node_rules from task 1 (task_properties);
# the clock column's first failure is the lowest (process, seq, column) of all blocks.
from __future__ import annotations

import json
import os

from .. import vclock
from ..arrays.walk import VERIFY_FAILURES, block_edges, even_edges
from .walk_task import BESIDE, OUT_SCHEMA, summary_row, task_properties, violation_rows


# The Spark setting naming the directory, readable by every executor, under which a check
# on a cluster writes the files its tasks exchange (default: the temporary directory,
# enough when the executors share the driver's machine)
LINKED_DIR = "spark.bus1py.linkedDir"
# tasks a core of the jobs over the trace's files (the clock column's split)
FILE_TASKS_A_CORE = 4


def run(c, want, sums, where, destroys, clocks):
    """(the walk's info, processes of a property's violations by name, the clock column's
    status or None) for Checker c (its processes set), from the tasks by message's
    summaries `sums` (each names its linked file and the events of each process), the
    exchanged files under `where`. clocks: whether a clock column is read
    (and reported). None when a process's numbering is broken."""
    procs = [int(p) for p in c.procs]
    counts = linked_input(sums, procs)[1]
    vname, vstatus = (vclock.status(c.trace.files, c.span) if "causal" in want and clocks
                      else (None, None))
    pieces = None
    if vname:
        c.phase("the clock column: each trace file's clocks by process")
        pieces = c.timed("clocks_split", split_clocks, c, vname, where)
    c.phase("the walk: each process's events in a file of its own, a task a group")
    got = c.timed("per_process", per_process_files, c, sums, procs, where, pieces)
    if got is None:
        return None
    files, broken = got
    claims = bool(pieces) and not broken
    edges = (even_edges(c.P, c.walk_blocks) if c.walk_blocks
             else block_edges(sum(counts), 0, c.P, _cores(c)))
    c.phase("the streamed walk by column blocks: causal, consistent, fifo and node_rules")
    fn = stream_task(procs, [files[p] for p in procs], counts, c.span, c.max_examples,
                     sorted(want), edges, destroys, claims, own=not _local(c))
    info, by_name = c.timed("walk", _collect, c, fn, len(edges or [None]))
    if vname and not info.get("malformed"):
        _clock_verdict(info, broken, procs)
    return info, by_name, vstatus


def _clock_verdict(info, broken, procs):
    """The clock column's status into the walk's info: a shape rule's first broken row,
    else the claim check's first failure, else it holds."""
    from ..arrays.claims import first_broken
    slot = {p: i for i, p in enumerate(procs)}
    first = first_broken({slot[p]: b for p, b in broken.items()})
    bad = info.pop("claim_bad", None)
    if first is not None:
        info["vclock"] = f"failed: {first[0]}"
        info["vclock_first_bad"] = first[2]
    elif bad is not None:
        info["vclock"] = f"failed: {VERIFY_FAILURES[bad[3]]}"
        info["vclock_first_bad"] = bad[4]
    else:
        info["vclock"] = "holds"


def _local(c):
    return c.spark.sparkContext.master.startswith("local")


def _cores(c):
    return (os.cpu_count() or 1) if _local(c) else c.spark.sparkContext.defaultParallelism


def _rows(c, n, fn):
    """The rows (OUT_SCHEMA, as dicts) of n tasks running fn, task i given the one row i:
    Spark's executors, or this process's threads on a local master (the kernels and
    pyarrow release the GIL)."""
    import pyarrow as pa
    if not _local(c):
        return (c.spark.range(n, numPartitions=n).mapInArrow(fn, OUT_SCHEMA)
                .toArrow().to_pylist())
    from concurrent.futures import ThreadPoolExecutor

    def one(i):
        return [r for b in fn(iter([pa.record_batch({"id": pa.array([i], pa.int64())})]))
                for r in b.to_pylist()]
    with ThreadPoolExecutor(min(n, _cores(c))) as pool:
        return [r for rows in pool.map(one, range(n)) for r in rows]


def _ids(batches):
    return [i for b in batches for i in b.column(0).to_pylist()]


def _collect(c, fn, tasks):
    """(the walk's merged info, processes of a property's violations by name) of a walk
    job of `tasks` tasks running fn; the walk's facts go to the timings."""
    got = _rows(c, tasks, fn)
    info = merge([json.loads(r["info"]) for r in got if r["rec"] == "summary"],
                 c.max_examples)
    for k in WALK_FACTS:
        if k in info:
            c.timings[f"walk_{k}"] = info.pop(k)
    by_name = {}
    for r in got:
        if r["rec"] != "summary":
            by_name.setdefault(r["rec"], []).append(r["process"])
    by_name["causal"] = sorted(by_name.get("causal", []))
    return info, lambda name: by_name.get(name, [])


# the streamed walk's facts, reported in the timings: the most origins a task held at
# once (its memory model), its measured peak, past a causality cycle its rounds and
# back edges (each block breaks at the same receives), and on an inconsistent trace the
# first deliveries the chains' peels left for Tarjan
WALK_FACTS = ("live_origins", "task_peak_rss", "rounds", "back_edges", "chains_kept")


def linked_input(sums, procs):
    """(files, events of each process of `procs`) from the tasks by message's summaries."""
    slot = {p: i for i, p in enumerate(procs)}
    counts = [0] * len(procs)
    for s in sums:
        for p, n in zip(*s.get("counts", ((), ()))):
            counts[slot[p]] += n
    return [s["file"] for s in sums if "file" in s], counts


def merge(infos, max_examples):
    """The one walk's info from its blocks' infos (streamed.decide's)."""
    if any(i.get("malformed") for i in infos):
        return {"malformed": True}
    out = {"seconds": {}, "walk_complete": all(i.get("walk_complete") for i in infos)}
    for i in infos:
        for k, v in i.pop("seconds").items():
            out["seconds"][k] = max(v, out["seconds"].get(k, 0))
        pairs = i.pop("causal_pairs", None)
        examples = i.pop("causal_examples", None)
        if pairs is not None:
            out.setdefault("causal", []).extend(zip(map(tuple, pairs), examples))
        out["causal_count"] = out.get("causal_count", 0) + i.pop("causal_count", 0)
        for k, v in i.items():
            if k.startswith(("consistent", "destroyed")) or k.startswith(BESIDE):
                out[k] = v
            elif k in WALK_FACTS:
                out[k] = max(v, out.get(k, 0))
            elif k == "cycle":
                out[k] = True
            elif k == "claim_bad" and v is not None:
                out[k] = min(out.get(k) or v, v)
    chosen = sorted(out.pop("causal", []), key=lambda e: e[0])[:max_examples]
    out["causal_examples"] = [e for _, e in chosen]
    return out


def _peak_reset():
    """Start this process's resident peak (VmHWM) anew (a Python worker runs many
    tasks): a task's peak is then its own."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak():
    """This process's resident peak since _peak_reset (bytes; 0 where unknown)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) << 10 for line in f
                        if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return 0


def split_clocks(c, name, where):
    """The pieces of the trace's clock column `name` (arrays/claims.py), written by a job
    of tasks over consecutive trace files: [(piece, its processes, their rows)]."""
    files = list(c.trace.files)
    tasks = min(len(files), FILE_TASKS_A_CORE * _cores(c))

    def run(batches):
        from ..arrays import claims
        for g in _ids(batches):
            lo, hi = len(files) * g // tasks, len(files) * (g + 1) // tasks
            yield summary_row({"pieces": claims.split(files[lo:hi], name, where)})
    return [tuple(p) for r in _rows(c, tasks, run) for p in json.loads(r["info"])["pieces"]]


# Events a task of the per-process step gathers at most, when the cluster has cores
# enough: its processes' events are held twice (read, then sorted)
GROUP_EVENTS = 4_000_000


def per_process_files(c, sums, procs, where, pieces=None):
    """({process: its file}, {process: (why, seq, event) of its first clock breaking a
    shape rule}) written by a job of tasks by process group (as many as the cores, more
    when a group would pass GROUP_EVENTS events), the files carrying the clock column of
    `pieces` (split_clocks') when given; None when a numbering is broken."""
    import numpy as np

    counts = linked_input(sums, procs)[1]
    groups = min(len(procs), max(_cores(c), -(-sum(counts) // GROUP_EVENTS)))
    # the largest processes first, each to the group holding the fewest events so far
    members, held = [[] for _ in range(groups)], np.zeros(groups, np.int64)
    for i in np.argsort(counts, kind="stable")[::-1]:
        g = int(np.argmin(held))
        members[g].append(procs[i])
        held[g] += counts[i]
    linked = [(s["file"], *s["counts"]) for s in sums if "file" in s]
    own = not _local(c)

    def run(batches):
        from ..arrays import per_process
        for g in _ids(batches):
            if own:
                _peak_reset()
            try:
                got, broken = per_process.write_group(
                    linked, set(members[g]), where, per_process.batch_rows(len(procs)),
                    pieces, len(procs))
            except ValueError:
                yield summary_row({"malformed": True})
                return
            yield summary_row({"files": [[p, f] for p, f in got.items()],
                               "broken": [[p, *b] for p, b in broken.items()],
                               "peak": _peak() if own else 0})
    infos = [json.loads(r["info"]) for r in _rows(c, groups, run)]
    if any(i.get("malformed") for i in infos):
        return None
    if own:
        c.timings["per_process_task_peak_rss"] = max(i["peak"] for i in infos)
    return ({p: f for i in infos for p, f in i["files"]},
            {b[0]: tuple(b[1:]) for i in infos for b in i["broken"]})


def stream_task(procs, files, counts, span, max_examples, want, edges, destroys,
                claims=False, own=True):
    """The function mapInArrow runs on each task of the streamed walk: the index i of its
    block in edges in, violation rows and a summary row out (walk_task.py; task i
    decides causal for its block and task_properties' others). claims: the files carry
    a clock column, each task checking its block's columns of it. own: the task runs in a
    process of its own (an executor's Python worker), whose peak it measures."""
    def run(batches):
        import time

        from ..arrays import streamed
        from ..arrays.per_process import Streams
        for i in _ids(batches):
            if own:
                _peak_reset()
            t = time.perf_counter()
            streams = Streams(procs, files, counts, claims)
            edge = edges[i] if edges else None
            out, info = streamed.decide(streams, task_properties(want, i, len(edges or [None])),
                                        max_examples, span, edge, destroys)
            info["seconds"]["task"] = round(time.perf_counter() - t, 3)
            if own:
                info["task_peak_rss"] = _peak()
            for rec, procs_ in out.items():
                if len(procs_):
                    yield violation_rows(rec, procs_)
            yield summary_row(info)
    return run


