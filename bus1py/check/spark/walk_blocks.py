# Invariants: on a cluster, causal and consistent (and by message fifo and node_rules
# beside them) are decided by the walk split by column blocks of the vector clocks over
# tasks (arrays/walk.py's Block: each block's columns are exact by themselves, and a
# delivery is judged by the one block holding its sender's column). Every task reads the
# events from files written once by tasks (arrays/linked_files.py: the linked events of
# the tasks by message, or the main pass's table as Parquet), never through the driver or
# one JVM stream, and holds the walk's layout and only its own block's origin clocks
# (arrays/walk.py's task_bytes; docs/CHECKER.md, "The memory of a task"). Blocks are as
# many as the cluster has cores, and more when one block's clocks would pass
# BLOCK_BYTES, or what a Python worker's memory limit leaves. The tasks' answers merge
# into the one walk's answer: counts add up, the causal examples are the lowest
# (position, partner) pairs of all blocks (positions are the same in every task's
# layout), the processes of the causal violations come in position order; consistent
# comes from task 0, fifo and node_rules from task 1. A usable clock column is read,
# verified and used by one task holding every column (vclock verification reads whole
# clocks).
from __future__ import annotations

import json

from .. import vclock
from ..arrays.walk import BLOCK_BYTES, block_edges, even_edges, task_bytes
from ..arrays.layout import COLUMNS
from .walk_task import BESIDE, OUT_SCHEMA, kernel_task, task_properties


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


def exact(c, want):
    """walk_task.exact's answer on a cluster: the main pass's table (c.rows, validated)
    written once as Parquet by its own tasks, then the walk by column blocks over tasks
    reading it (causal and consistent only)."""
    import glob
    import os
    import shutil

    from pyspark.sql import functions as F

    from .. import kinds as K
    from ..arrays import linked_files
    from .walk_task import found
    where = linked_files.directory(c.spark.conf.get(LINKED_DIR, None))
    try:
        rows = c.rows.select(*COLUMNS)
        rows.write.parquet(os.path.join(where, "rows"))
        slot = {p: i for i, p in enumerate(c.procs)}
        counts, origins = [0] * len(c.procs), 0
        for r in rows.groupBy("process").agg(
                F.count("*").alias("n"),
                F.sum((F.col("kind_code") <= K.SIGNAL_SEND).cast("long")).alias("o")).collect():
            counts[slot[r["process"]]] = r["n"]
            origins += r["o"]
        files = sorted(glob.glob(os.path.join(where, "rows", "*.parquet")))
        info, by_name, vstatus = _walk(c, want, files, counts, origins, False, True)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    # the details as the one task's job gives them (a DataFrame), only when kept
    return found(c, want, info, vstatus, lambda name: c.spark.createDataFrame(
        [(int(p),) for p in by_name(name)], "process int") if c.keep_details
        else by_name(name))


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
    tasks = len(edges or [None])
    fn = kernel_task([int(p) for p in c.procs], c.span, c.max_examples, sorted(want),
                     list(c.trace.files) if vname else None, vname, destroys,
                     (files, counts, edges))
    got = (c.spark.range(tasks, numPartitions=tasks).mapInArrow(fn, OUT_SCHEMA)
           .toArrow().to_pylist())
    info = merge([json.loads(r["info"]) for r in got if r["rec"] == "summary"],
                 c.max_examples)
    if vstatus is not None and "vclock" not in info:
        info["vclock"] = vstatus
    by_name = {}
    for r in got:
        if r["rec"] != "summary":
            by_name.setdefault(r["rec"], []).append(r["process"])
    by_name["causal"] = sorted(by_name.get("causal", []))
    return info, lambda name: by_name.get(name, []), vstatus


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
    chosen = sorted(out.pop("causal", []), key=lambda e: e[0])[:max_examples]
    out["causal_examples"] = [e for _, e in chosen]
    return out
