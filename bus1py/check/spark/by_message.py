# Invariants: every trace the driver does not check alone (engine.py) is checked here, by
# the array engine in two steps, never by Spark's row-at-a-time windows, and exactly from
# the rows (stamps are not read):
#   1. by message: the rows spread by id, so every row naming a message or signal meets
#      its origin in one task (internal rows go with the null id); each task links its
#      rows (arrays/events.py, Events.of_messages), finds exactly_once's violations
#      among them (arrays/properties.violations), the losses not yet excused (the
#      NODE_DESTROY that excuses one may be delivered in another task), and writes its
#      linked events to a file of its own (arrays/linked_files.py), with each origin's
#      receives and each first delivery's message's first deliveries;
#   2. the walk (walk_blocks.py): each process's events gathered into a file of its own,
#      then the streamed walk by column blocks (arrays/streamed.py: no task holds the
#      trace; past a causality cycle in rounds; a clock column checked as it walks), fifo
#      and node_rules beside causal and consistent; it also reports the (process, node)
#      pairs that delivered a NODE_DESTROY, with which the driver excuses the losses
#      (properties.excused, the driver's definition).
# Every exchange goes through files of this check, in a directory removed at its end.
# With a local master both steps run in the driver's process: buckets read with pyarrow
# (arrays/buckets.py), two linked side by side, the walk's tasks in threads; with a
# cluster, a task per group of trace files splits their rows into buckets, a task per
# bucket links them, then the walk's jobs (walk_blocks.run either way).
# So the summary is the driver's (all but `seconds` and `timings`). A trace breaking any
# rule (a per-row rule, the numbering, one origin per id, no dangling receive) is named by
# malformed.py in the driver's words. Only the tasks' summaries (with the first examples),
# the violations and the processes of the walk's violations reach the driver.
from __future__ import annotations

import json
import os
import time

from .. import engine, vclock
from .. import kinds as K
from ..arrays.properties import PROBLEMS, example
from ..examples import LOST
from . import malformed, walk_blocks, walk_task

EVENT, VIOLATION, SUMMARY = 0, 1, 2
OUT_SCHEMA = ("rec byte, process int, seq long, kind_code byte, msg long, "
              "first_delivery boolean, sender_process int, send_seq long, "
              "is_destroy boolean, node long, problem byte, info string")
WANT = ("causal", "consistent", "fifo", "node_rules")
# rows per bucket of the tasks by message (on a cluster, at least a bucket a core)
BUCKET_ROWS = 4_000_000
# tasks a core of the split on a cluster, each splitting consecutive files (fewer when
# the trace has fewer files)
SPLIT_TASKS_A_CORE = 4


def link_task(max_examples, where):
    """The function mapInArrow runs on each task of job 1: the rows of some ids in, their
    exactly_once violations and one summary row out, their linked events written to a
    file of their own under `where` (a directory every executor reads;
    arrays/linked_files.py), named in the summary with the events of each process."""
    def run(batches):
        import numpy as np
        import pyarrow as pa

        from ..arrays import linked_files
        from ..arrays import properties as P
        from ..arrays.events import Events
        from ..load import TraceError
        batches = list(batches)
        if not batches:
            return
        t = pa.Table.from_batches(batches)
        del batches
        try:
            ev = Events.of_messages(t)
            msg, proc, origin, problem = P.violations(ev, excuse=False)
        except TraceError:
            yield _summary({"malformed": True})
            return
        del t
        n = ev.n
        node = pa.array(ev.node, mask=~ev.has_node)
        events = _rows(n, EVENT, process=ev.process, seq=ev.seq, kind_code=ev.code,
                       msg=ev.msg, first_delivery=ev.first, sender_process=ev.sender,
                       send_seq=ev.send_seq, is_destroy=ev.is_destroy, node=node)
        procs, counts = np.unique(ev.process, return_counts=True)
        table = pa.Table.from_batches([events]).select(list(linked_files.COLUMNS[:-2]))
        written = {"file": linked_files.write(where, table.append_column(
                       "receives", pa.array(_receives(ev))).append_column(
                       "firsts", pa.array(_firsts(ev)))),
                   "counts": [procs.tolist(), counts.tolist()]}
        del events, table
        if len(msg):
            yield _rows(len(msg), VIOLATION, process=proc, msg=msg, problem=problem,
                        sender_process=ev.process[origin], send_seq=ev.seq[origin],
                        is_destroy=ev.code[origin] == K.DESTROY, node=node.take(origin))
        # the first examples of the violations no destroy can excuse (a loss's example is
        # built from its row); seqs of deliveries are found only here
        again = problem > 0
        ex = P.examples(ev, msg[again], proc[again], origin[again], problem[again],
                        max_examples)
        yield _summary(dict(written, procs=ev.procs.tolist(), violations=int(len(msg)),
                            destroys=int((ev.code == K.DESTROY).sum()),
                            examples=[[e["highlight"][0], e["process"], e] for e in ex]))
    return run


def _receives(ev):
    """The receives of each origin (0 on other rows)."""
    import numpy as np
    recv = (ev.code == K.DELIVER) | (ev.code == K.SIGNAL_RECV)
    return np.bincount(ev.origin[recv], minlength=ev.n).astype(np.int32)


def _firsts(ev):
    """On each first delivery, the first deliveries of its message (0 on other rows)."""
    import numpy as np
    fd = (ev.code == K.DELIVER) & ev.first
    out = np.zeros(ev.n, np.int32)
    out[fd] = np.bincount(ev.origin[fd], minlength=ev.n)[ev.origin[fd]]
    return out


def _arrow_schema():
    """OUT_SCHEMA in Arrow types (a task has no JVM to parse Spark's DDL)."""
    import pyarrow as pa
    types = {"byte": pa.int8(), "int": pa.int32(), "long": pa.int64(),
             "boolean": pa.bool_(), "string": pa.string()}
    return pa.schema([(name, types[t]) for name, t in
                      (f.split() for f in OUT_SCHEMA.split(", "))])


def _rows(n, rec, **cols):
    import numpy as np
    import pyarrow as pa
    schema = _arrow_schema()
    arrays = [pa.array(np.full(n, rec, np.int8)) if f.name == "rec"
              else pa.array(cols[f.name], f.type) if f.name in cols
              else pa.nulls(n, f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _summary(info):
    import numpy as np
    return _rows(1, SUMMARY, info=np.array([json.dumps(info)], object))


def run(c):
    """(properties, processes, details) for Checker c. details: property -> the processes
    of its violations (a list, or a DataFrame of them from a cluster). A malformed trace
    raises TraceError naming its first broken row (malformed.py)."""
    local = c.spark.sparkContext.master.startswith("local")
    got = (_local if local else _cluster)(c)
    found = None
    if got is not None:
        procs, violations, info, by_rec, sums, vstatus = got
        found = walk_task.found(c, WANT, info, vstatus, by_rec)
    if found is None:
        c.phase("naming the first broken row")
        malformed.name(c.spark, c.trace)
    props, details = {}, {}
    n, ex, eo = c.timed("exactly_once", _exactly_once, violations, info["destroyed"],
                        sums, c.max_examples)
    props["exactly_once"], details["exactly_once"] = _entry(n, ex, {}), eo
    for name, (v, n, ex, extra) in found.items():
        if name in ("causal", "consistent"):
            extra = dict(extra, method="vector-clock witness"
                         if extra.get("vclock") == "holds" else "exact")
        props[name], details[name] = _entry(n, ex, extra), v
    return props, procs, details


def _local(c):
    """Job 1's tasks over buckets read here and the walk's task, in the driver's process
    (local executors share its machine): (processes, violations table,
    the walk's info, processes by property, the tasks' summaries, the clock column's
    status), or None when the trace is malformed."""
    import pyarrow as pa

    return _in_files_of_check(c, _local_through)


def _local_through(c, where):
    """_local's steps, the linked events written to files under `where` and walked by
    walk_blocks.run (the streamed walk, its tasks in this process's threads)."""
    import pyarrow as pa

    from ..arrays.buckets import read_buckets
    from ..arrays.memory import give_back
    from ..load import TraceError
    parts = max(1, -(-c.trace.rows // BUCKET_ROWS))
    fn = link_task(c.max_examples, where)
    violations, sums = [], []
    c.phase("by message: linking and exactly_once, in buckets by id")

    def link(table):
        out = {EVENT: [], VIOLATION: [], SUMMARY: []}
        for b in fn(iter(table.to_batches()) if table is not None else iter(())):
            out[b.column(0)[0].as_py()].append(b)
        return out
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor
    t = time.perf_counter()

    def collect(out):
        violations.extend(out[VIOLATION])
        sums.extend(json.loads(b.column("info")[0].as_py()) for b in out[SUMMARY])
    try:
        # two buckets linked side by side (numpy and pyarrow release the GIL), the next
        # read only when one is done: a bucket's rows are held until it is linked
        with ThreadPoolExecutor(2) as pool:
            running = deque()
            for table in read_buckets(c.trace, parts):
                running.append(pool.submit(link, table))
                del table
                if len(running) == 2:
                    collect(running.popleft().result())
            while running:
                collect(running.popleft().result())
    except TraceError:
        return None
    give_back()
    c.timings["by_message"] = time.perf_counter() - t
    if any(s.get("malformed") for s in sums):
        return None
    procs = sorted(set().union(*(s["procs"] for s in sums)))
    c.set_procs(procs)
    # up to driver_max_cells the walk alone decides causal, no clock column read
    alone = engine.walk_alone(c.trace.rows, len(procs), c.driver_max_cells)
    got = walk_blocks.run(c, WANT, sums, where, any(s["destroys"] for s in sums),
                          not alone)
    if got is None:
        return None
    info, by_rec, vstatus = got
    violations = (pa.Table.from_batches(violations, _arrow_schema()) if violations
                  else _arrow_schema().empty_table())
    return procs, violations, info, by_rec, sums, vstatus


def _cluster(c):
    """Job 1 and the walk by column blocks on Spark's executors, every exchange through
    files of this check (arrays/linked_files.py): as _local."""
    return _in_files_of_check(c, _through_files)


def _through_files(c, where):
    """_cluster's jobs, their files under `where`: the trace's files split by id into
    buckets, a task a group of files (the rows read with pyarrow where Spark's own scan
    would read them); each bucket linked by a task (link_task, its linked events written
    to a file); then the walk by column blocks (walk_blocks.py)."""
    import pyarrow as pa

    from ..load import Trace
    plain = Trace(path=c.trace.path, df=None, files=list(c.trace.files), rows=c.trace.rows)
    cores = c.spark.sparkContext.defaultParallelism
    buckets = max(-(-c.trace.rows // BUCKET_ROWS), cores)
    # consecutive files a task, SPLIT_TASKS_A_CORE tasks a core (a task's fixed cost, a
    # Python worker's and the scheduler's, is paid per task, not per file)
    n = len(plain.files)
    tasks = min(n, SPLIT_TASKS_A_CORE * cores)
    groups = [list(range(n * g // tasks, n * (g + 1) // tasks)) for g in range(tasks)]
    c.phase("by message: the trace's files split by id, a task a group of files")
    pieces = c.timed("split", _tasks, c, tasks, _split_task(plain, groups, buckets, where))
    if any(s.get("malformed") for s in pieces[SUMMARY]):
        return None
    files = [[] for _ in range(buckets)]
    for s in pieces[SUMMARY]:
        files[s["bucket"]].append(s["file"])
    c.phase("by message: linking and exactly_once, a task a bucket")
    linked = c.timed("by_message", _tasks, c, buckets,
                     _bucket_task(link_task(c.max_examples, where), files))
    # the job is done, so no task reads a piece again: their pages go back before the
    # next steps write theirs (a page freed just now is cheaper to fill than a new one)
    for name in (f for fs in files for f in fs):
        os.unlink(name)
    sums = linked[SUMMARY]
    if any(s.get("malformed") for s in sums):
        return None
    procs = sorted(set().union(*(s["procs"] for s in sums)))
    c.set_procs(procs)
    alone = engine.walk_alone(c.trace.rows, len(procs), c.driver_max_cells)
    got = walk_blocks.run(c, WANT, sums, where, any(s["destroys"] for s in sums), not alone)
    if got is None:
        return None
    info, by_rec, vstatus = got
    violations = (pa.Table.from_batches(linked[VIOLATION], _arrow_schema())
                  if linked[VIOLATION] else _arrow_schema().empty_table())
    return procs, violations, info, by_rec, sums, vstatus


def _tasks(c, n, fn):
    """{VIOLATION: [batches], SUMMARY: [infos]} of a job of n tasks, task i given the one
    row i (fn: a mapInArrow function of OUT_SCHEMA writing no EVENT rows)."""
    got = {VIOLATION: [], SUMMARY: []}
    out = c.spark.range(n, numPartitions=n).mapInArrow(fn, OUT_SCHEMA).toArrow()
    for b in out.to_batches():
        rec = b.column("rec").to_numpy(zero_copy_only=False)
        if (rec == VIOLATION).any():
            got[VIOLATION].append(b.filter(rec == VIOLATION))
        for info in b.filter(rec == SUMMARY).column("info").to_pylist():
            got[SUMMARY].append(json.loads(info))
    return got


def _split_task(trace, groups, buckets, where):
    """The function of the tasks that split the trace's files: group g in, a summary
    naming each bucket's piece of each of the files `groups[g]`, written under `where`,
    out (one saying `malformed` when a row breaks a per-row rule: malformed.py names it).
    One file read at a time."""
    def run(batches):
        from ..arrays import linked_files
        from ..arrays.buckets import split
        from ..load import TraceError
        files = [i for b in batches for g in b.column(0).to_pylist() for i in groups[g]]
        if not files:
            return
        try:
            written = [(k, linked_files.write(where, piece)) for i in files
                       for k, piece in split(trace, [i], buckets)]
        except TraceError:
            yield _summary({"malformed": True})
            return
        for k, name in written:
            yield _summary({"bucket": k, "file": name})
    return run


def _bucket_task(link, files):
    """The function of the tasks that link: bucket k in, link's rows over the pieces
    `files[k]` out."""
    def run(batches):
        from ..arrays import linked_files
        for k in [k for b in batches for k in b.column(0).to_pylist()]:
            yield from link(linked_files.read(files[k]))
    return run


def _entry(n, examples, extra):
    return dict({"ok": n == 0, "violations": int(n), "examples": examples}, **extra)


def _exactly_once(v, destroyed, sums, k):
    """(count, examples, processes) of exactly_once from the tasks' violations `v`,
    losses at a node their destination saw destroyed (`destroyed`: (process, node)
    pairs) excused, as arrays/properties.violations."""
    import numpy as np

    from ..arrays.properties import excused
    col = {name: v.column(name) for name in ("msg", "process", "problem", "sender_process",
                                             "send_seq", "is_destroy")}
    msg, proc, problem, o_process, o_seq, o_destroy = (
        a.to_numpy() for a in col.values())
    if destroyed and len(msg):
        node = v.column("node")
        keep = (problem != PROBLEMS.index(LOST)) | (excused(
            o_destroy, node.is_valid().to_numpy(zero_copy_only=False), proc,
            node.fill_null(0).to_numpy(), {tuple(p) for p in destroyed}) == 0)
        msg, proc, problem, o_process, o_seq, o_destroy = (
            a[keep] for a in (msg, proc, problem, o_process, o_seq, o_destroy))
    kept = {(m, p): e for s in sums for m, p, e in s["examples"]}
    examples = []
    for j in np.lexsort((proc, msg))[:k]:
        m, p = int(msg[j]), int(proc[j])
        if PROBLEMS[problem[j]] == LOST:
            examples.append(example(LOST, p, m, int(o_process[j]), int(o_seq[j]),
                                    bool(o_destroy[j]), []))
        else:
            examples.append(kept[(m, p)])
    return len(msg), examples, proc.tolist()


def _in_files_of_check(c, steps):
    """steps(c, where), `where` a new directory of this check's files (under the
    LINKED_DIR setting, else the temporary directory), removed whole however it ends."""
    import shutil

    from ..arrays import linked_files
    where = linked_files.directory(c.spark.conf.get(walk_blocks.LINKED_DIR, None))
    try:
        return steps(c, where)
    finally:
        shutil.rmtree(where, ignore_errors=True)
