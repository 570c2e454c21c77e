# Invariants: on a cluster, causal and consistent (and by message fifo and node_rules
# beside them) are decided by the walk split by column blocks of the vector clocks over
# tasks (each block's columns are exact by themselves, and a delivery is judged by the
# one block holding its sender's column). Every task reads the events from files written
# once by tasks, never through the driver or one JVM stream. Without a clock column
# (run_streamed, local): each process's linked events in a file of its own
# (arrays/per_process.py, written by a job of tasks by process group), streamed by every
# task a batch of each process at a time (arrays/streamed.py): no task holds the trace,
# only the model of streamed.task_bytes (docs/CHECKER.md, "The memory of a task").
# With a clock column to verify, or a causality cycle (run): every task places the
# events in the walk's layout (arrays/layout.py) and holds its own block's origin clocks
# (arrays/walk.py's task_bytes); blocks are then as many as the cluster has cores, and
# more when one block's clocks would pass BLOCK_BYTES, or what a Python worker's memory
# limit leaves. The tasks' answers merge into the one walk's answer: counts add up, the
# causal examples are the lowest (position, partner) pairs of all blocks (positions are
# the same in every task), the processes of the causal violations come in position
# order; consistent comes from task 0, fifo and node_rules from task 1 (task_properties).
# A usable clock column is read, verified and used by one task holding every column
# (vclock verification reads whole clocks).
from __future__ import annotations

import json
import time

from .. import vclock
from ..arrays.walk import BLOCK_BYTES, block_edges, even_edges, task_bytes
from .walk_task import (BESIDE, OUT_SCHEMA, kernel_task, summary_row, task_properties,
                        violation_rows)


# The Spark setting naming the directory, readable by every executor, under which a check
# on a cluster writes the files its tasks exchange (default: the temporary directory,
# enough when the executors share the driver's machine)
LINKED_DIR = "spark.bus1py.linkedDir"
# Spark's limit of a Python worker's memory (it sets the worker's RLIMIT_AS): when set,
# blocks are narrowed until the largest task's model (task_bytes) fits it, if they can
PYTHON_MEMORY = "spark.executor.pyspark.memory"


def run(c, want, sums, destroys, clocks, block_bytes=BLOCK_BYTES):
    """(the walk's info, processes of a property's violations by name, the clock
    column's status or None) for Checker c (its processes set), from the tasks by
    message's summaries `sums` (each names its file, the events of each process and its
    origins). clocks: whether a clock column is read (and reported). The info says
    `malformed` when the numbering is broken."""
    return _walk(c, want, *linked_input(sums, c.procs), destroys, clocks, block_bytes)


def clock_budget(limit, events, origins, block_bytes=BLOCK_BYTES):
    """The bytes one block's origin clocks may take: block_bytes, or less when a Python
    worker's memory is limited to `limit` bytes (spark.executor.pyspark.memory): what the
    limit leaves after the rest of the largest task (task_bytes with fifo beside, the
    column shared by the processes outside the block, and one more for a block a column
    wider than the even share). At least 1: the narrowest blocks when nothing is left."""
    if not limit:
        return block_bytes
    left = limit - task_bytes(events, origins, 1, beside=True)
    return max(1, min(block_bytes, left))


def _walk(c, want, files, counts, origins, destroys, clocks, block_bytes=BLOCK_BYTES):
    """run's answer from the files of the events, the events of each process and the
    origins."""
    vname, vstatus = (vclock.status(c.trace.files, c.span) if "causal" in want and clocks
                      else (None, None))
    if vname:
        edges = None
    elif c.walk_blocks:
        edges = even_edges(c.P, c.walk_blocks)
    else:
        limit = c.spark.conf.get(PYTHON_MEMORY, None)
        if limit:   # Spark's own size syntax, MiB without a unit
            limit = c.spark.sparkContext._jvm.org.apache.spark.network.util.JavaUtils \
                .byteStringAsMb(limit) << 20
        edges = block_edges(sum(counts), origins, c.P,
                            c.spark.sparkContext.defaultParallelism,
                            clock_budget(limit, sum(counts), origins, block_bytes))
    fn = kernel_task([int(p) for p in c.procs], c.span, c.max_examples, sorted(want),
                     list(c.trace.files) if vname else None, vname, destroys,
                     (files, counts, edges))
    return _collect(c, fn, len(edges or [None]), vstatus)


def _collect(c, fn, tasks, vstatus=None):
    """The merged answer of a walk job of `tasks` tasks running fn, as _walk's."""
    got = (c.spark.range(tasks, numPartitions=tasks).mapInArrow(fn, OUT_SCHEMA)
           .toArrow().to_pylist())
    return _merged(c, got, vstatus)


def _merged(c, got, vstatus):
    """_collect's answer from the rows of every task of the walk."""
    info = merge([json.loads(r["info"]) for r in got if r["rec"] == "summary"],
                 c.max_examples)
    for k in WALK_FACTS:
        if k in info:
            c.timings[f"walk_{k}"] = info.pop(k)
    if vstatus is not None and "vclock" not in info:
        info["vclock"] = vstatus
    by_name = {}
    for r in got:
        if r["rec"] != "summary":
            by_name.setdefault(r["rec"], []).append(r["process"])
    by_name["causal"] = sorted(by_name.get("causal", []))
    return info, lambda name: by_name.get(name, []), vstatus


# the streamed walk's facts, reported in the timings: the most origins a task held at
# once (its memory model), its measured peak, and past a causality cycle its rounds and
# back edges (each block breaks at the same receives)
WALK_FACTS = ("live_origins", "task_peak_rss", "rounds", "back_edges")


def linked_input(sums, procs):
    """(files, events of each process of `procs`, origins) from the tasks by message's
    summaries."""
    slot = {p: i for i, p in enumerate(procs)}
    counts = [0] * len(procs)
    for s in sums:
        for p, n in zip(*s.get("counts", ((), ()))):
            counts[slot[p]] += n
    return ([s["file"] for s in sums if "file" in s], counts,
            sum(s.get("origins", 0) for s in sums))


def merge(infos, max_examples):
    """The one walk's info (walk_task.kernel_task's) from its blocks' infos."""
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
            if k.startswith(("consistent", "vclock", "destroyed")) or k.startswith(BESIDE):
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


def run_streamed(c, want, sums, where, destroys, vstatus=None):
    """run's answer by the streamed walk (arrays/streamed.py), when no clock column is
    read: each process's events gathered into a file of its own by a job of tasks by
    process group (arrays/per_process.py), then a task per column block streaming them
    all; run's own when it meets a causality cycle (the linked files are kept for it).
    vstatus: the trace's clock column status, reported with causal (or None). None when a
    process's numbering is broken."""
    procs = [int(p) for p in c.procs]
    _, counts, _ = linked_input(sums, procs)
    c.phase("the walk: each process's events in a file of its own, a task a group")
    files = c.timed("per_process", per_process_files, c, sums, procs, where)
    if files is None:
        return None
    # a block a core (no task holds its block's clocks of every origin: no more for memory)
    edges = (even_edges(c.P, c.walk_blocks) if c.walk_blocks
             else block_edges(sum(counts), 0, c.P, c.spark.sparkContext.defaultParallelism))
    c.phase("the streamed walk by column blocks: causal, consistent, fifo and node_rules")
    fn = stream_task(procs, [files[p] for p in procs], counts, c.span, c.max_examples,
                     sorted(want), edges, destroys)
    return c.timed("walk", _collect, c, fn, len(edges or [None]), vstatus)


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


# Events a task of the per-process step gathers at most, when the cluster has cores
# enough: its processes' events are held twice (read, then sorted)
GROUP_EVENTS = 4_000_000


def per_process_files(c, sums, procs, where):
    """{process: its file} written by a job of tasks by process group (as many as the
    cluster's cores, more when a group would pass GROUP_EVENTS events), or None when a
    numbering is broken."""
    import numpy as np

    _, counts, _ = linked_input(sums, procs)
    groups = min(len(procs), max(c.spark.sparkContext.defaultParallelism,
                                 -(-sum(counts) // GROUP_EVENTS)))
    # the largest processes first, each to the group holding the fewest events so far
    members, held = [[] for _ in range(groups)], np.zeros(groups, np.int64)
    for i in np.argsort(counts, kind="stable")[::-1]:
        g = int(np.argmin(held))
        members[g].append(procs[i])
        held[g] += counts[i]
    linked = [(s["file"], *s["counts"]) for s in sums if "file" in s]

    def run(batches):
        from ..arrays import per_process
        for g in [g for b in batches for g in b.column(0).to_pylist()]:
            _peak_reset()
            try:
                got = per_process.write_group(linked, set(members[g]), where,
                                              per_process.batch_rows(len(procs)))
            except ValueError:
                yield summary_row({"malformed": True})
                return
            yield summary_row({"files": [[p, f] for p, f in got.items()],
                               "peak": _peak()})
    got = (c.spark.range(groups, numPartitions=groups).mapInArrow(run, OUT_SCHEMA)
           .toArrow().to_pylist())
    infos = [json.loads(r["info"]) for r in got]
    if any(i.get("malformed") for i in infos):
        return None
    c.timings["per_process_task_peak_rss"] = max(i["peak"] for i in infos)
    return {p: f for i in infos for p, f in i["files"]}


def stream_task(procs, files, counts, span, max_examples, want, edges, destroys,
                own=True):
    """The function mapInArrow runs on each task of the streamed walk: the index i of its
    block in edges in, violation rows and a summary row out, as kernel_task's (task i
    decides causal for its block and task_properties' others). own: the task runs in a
    process of its own (an executor's Python worker), whose peak it measures."""
    def run(batches):
        import time

        from ..arrays import streamed
        from ..arrays.per_process import Streams
        for i in [i for b in batches for i in b.column(0).to_pylist()]:
            if own:
                _peak_reset()
            t = time.perf_counter()
            streams = Streams(procs, files, counts)
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


def local(c, want, sums, where, destroys, clocks):
    """run's answer in this process, for a local master: by the streamed walk (its
    per-process files written by a thread a core, its blocks, one a core, walked side by
    side in threads: the kernels release the GIL), or by one walk placing the linked
    events in a layout when there is a clock column to verify or the streamed walk meets a
    causality cycle (walk_task.kernel_task). None when a numbering is broken."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from ..arrays import per_process
    procs = [int(p) for p in c.procs]
    linked, counts, _ = linked_input(sums, procs)
    vname, vstatus = (vclock.status(c.trace.files, c.span) if "causal" in want and clocks
                      else (None, None))
    cpus = os.cpu_count() or 1
    if not vname:
        c.phase("the walk: each process's events in a file of its own")
        t = time.perf_counter()
        with ThreadPoolExecutor(cpus) as pool:
            try:
                got = list(pool.map(lambda g: per_process.write_group(
                    [(f, *s["counts"]) for f, s in zip(linked, sums)], set(procs[g::cpus]),
                    where, per_process.batch_rows(len(procs))), range(cpus)))
            except ValueError:
                return None
        files = {p: f for g in got for p, f in g.items()}
        c.timings["per_process"] = time.perf_counter() - t
        edges = (even_edges(c.P, c.walk_blocks) if c.walk_blocks
                 else block_edges(sum(counts), 0, c.P, cpus))
        fn = stream_task(procs, [files[p] for p in procs], counts, c.span, c.max_examples,
                         sorted(want), edges, destroys, own=False)
        c.phase("the streamed walk: causal, consistent, fifo and node_rules")
        return c.timed("walk", _here, c, fn, len(edges or [None]), cpus, vstatus)
    c.phase("the walk: causal, consistent, fifo and node_rules")
    fn = kernel_task(procs, c.span, c.max_examples, sorted(want),
                     list(c.trace.files) if vname else None, vname, destroys,
                     (linked, counts, None))
    return c.timed("walk", _here, c, fn, 1, 1, vstatus)


def _here(c, fn, tasks, cpus, vstatus):
    """_collect's answer with the tasks run in this process's threads."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa

    def one(i):
        return [r for b in fn(iter([pa.record_batch({"id": pa.array([i], pa.int64())})]))
                for r in b.to_pylist()]
    with ThreadPoolExecutor(min(tasks, cpus)) as pool:
        got = [r for rows in pool.map(one, range(tasks)) for r in rows]
    return _merged(c, got, vstatus)
