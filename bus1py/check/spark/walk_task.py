# Invariants: the walk's task: the events linked by message (by_message.py, whose
# numbering the layout checks: a summary says `malformed` otherwise), read by the one
# task on a local master, or by each task of the walk by column blocks from the linked
# events' files (walk_blocks.py); arrays/walk.py decides causal and consistent on them
# with compiled kernels -- one topological walk for the vector clocks, one linear scan for
# causal, Tarjan for the components -- and arrays/relax.py decides causal where a
# causality cycle (a broken trace) stops the walk; `fifo` and `node_rules` are decided
# beside the walk on the same layout (arrays/properties.py). The task's output is rows:
# one per violation (the details) and one summary row (counts and examples, as JSON). A
# producer's vector-clock column (schema.VCLOCK) is a witness, never trusted: it is used
# only when it verifies against the rows in the same task; otherwise the result says why
# and the walk decides.
from __future__ import annotations

import json
import time

from .. import vclock

OUT_SCHEMA = "rec string, process int, info string"


# properties the task decides beside the walk, from the same layout (arrays/properties.py)
BESIDE = ("fifo", "node_rules")


def task_properties(want, i, tasks):
    """The properties of `want` task i of the walk by column blocks decides (of `tasks`):
    causal for its block, consistent in task 0, fifo and node_rules in task 1 (0 alone)."""
    return [name for name in want if name == "causal" or name == "consistent" and i == 0
            or name in BESIDE and i == 1 % tasks]


def kernel_task(procs, span, max_examples, want, vclock_files, vclock_name, destroys=False,
                linked=None):
    """The function mapInArrow runs on the one task: all rows in, violation and summary
    rows out. want: causal and consistent (the walk), and fifo and node_rules (BESIDE:
    the rows then carry `node` too and have no stamps). vclock_files: the trace's files,
    read here for their clock column `vclock_name` (with pyarrow: Spark's conversion of a
    list column to Arrow costs several times the walk), or None. The task reads them where
    Spark's own scan would, so they are as reachable. Rows not numbered 0, 1, 2, ... per
    process give a summary with `malformed` and nothing decided.
    linked: (files, counts, edges) for the walk by column blocks over tasks
    (walk_blocks.py): the rows are read from the linked events' files
    (arrays/linked_files.py; counts: the events of each process), the input row of a
    task is the index i of its block in edges ((lo, hi) columns; None: one block of
    every column), and the task decides causal for that block's senders, consistent
    when i is 0 and fifo and node_rules when i is 1 (0 with one block)."""
    def run(batches):
        import numpy as np
        import pyarrow as pa

        from .. import kinds as K
        from .. import vclock as V
        from ..arrays import linked_files
        from ..arrays import properties as P
        from ..arrays import relax
        from ..arrays import walk as W
        from ..arrays.layout import Layout
        from ..arrays.memory import give_back
        t0 = time.perf_counter()
        batches = list(batches)
        if not batches:
            return
        received = time.perf_counter() - t0
        mine, parts, counts = list(want), None, None
        if linked is not None:
            files, counts, edges = linked
            i = int(batches[0].column(0)[0].as_py())
            batches = linked_files.read(files)
            mine = task_properties(want, i, len(edges or [None]))
        beside = [name for name in BESIDE if name in mine]
        try:
            lay = Layout(batches, procs, span, ("node",) if destroys and beside else (),
                         counts)
        except ValueError:
            yield summary_row({"malformed": True})
            return
        del batches
        if linked is not None and edges is not None:
            parts = [W.Block(lay, *edges[i])]
        node = has_node = None
        destroyed = []
        if destroys and beside:
            node, has_node = lay.extra.pop("node")
            # the (process, node) pairs that delivered a NODE_DESTROY: what excuses a loss
            gone = np.flatnonzero((lay.kind == K.DELIVER) & lay.is_destroy & has_node)
            pairs = np.unique(np.stack([lay.procs[lay.slot_of[gone]], node[gone]]), axis=1)
            destroyed = pairs.T.tolist()
        give_back()
        layout = time.perf_counter() - t0 - received

        def claimed():
            import pyarrow.parquet as pq
            pos = lay.positions(pa.concat_tables(
                pq.read_table(f, columns=["process", "seq"]) for f in vclock_files))
            got, bad = V.by_row(V.read(vclock_files, vclock_name), len(lay.procs))
            if got is None:
                return None, (bad[0], int(pos[bad[1]]))
            by_pos = np.empty_like(got)
            by_pos[pos] = got
            return by_pos, None

        # fifo and node_rules beside the walk: numpy's sorts and the kernels release the GIL
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(1) as pool:
            view = P.ByPosition(lay, node, has_node)
            side = {name: pool.submit(_beside, getattr(P, name), view, max_examples)
                    for name in beside}
            out, info = relax.decide(lay, mine, max_examples, claimed if vclock_files else None,
                                 parts)
            for name, run_ in side.items():
                (method, procs_, n, examples), took = run_.result()
                out[name] = procs_ or []
                info.update({f"{name}_count": n, f"{name}_examples": examples})
                if method:
                    info[f"{name}_method"] = method
                info["seconds"][name] = took
        info["seconds"].update(receive=round(received, 3), layout=round(layout, 3))
        if beside:
            info["destroyed"] = destroyed
        for rec, procs_ in out.items():
            if len(procs_):
                yield violation_rows(rec, procs_)
        yield summary_row(info)
    return run


def _beside(fn, *args):
    """fn(*args) and its seconds, run beside the walk; the pages of its freed temporaries
    handed back after it (glibc keeps them in the thread's arena, beside the walk's
    clocks)."""
    from ..arrays.memory import give_back
    t = time.perf_counter()
    got = fn(*args)
    give_back()
    return got, round(time.perf_counter() - t, 3)


def violation_rows(rec, procs):
    """The rows (OUT_SCHEMA) naming the process of each violation of property `rec`."""
    import pyarrow as pa
    return pa.RecordBatch.from_pydict({"rec": pa.array([rec] * len(procs), pa.string()),
                                       "process": pa.array(procs, pa.int32()),
                                       "info": pa.nulls(len(procs), pa.string())})


def summary_row(info, rec="summary"):
    """The one row (OUT_SCHEMA) carrying `info` as JSON."""
    import pyarrow as pa
    return pa.RecordBatch.from_pydict({"rec": [rec], "process": pa.nulls(1, pa.int32()),
                                       "info": [info if isinstance(info, str)
                                                else json.dumps(info, default=_plain)]})


def _plain(x):
    """numpy scalars as Python's (json's fallback)."""
    return x.item()


def task_for(c, want, clocks=True, destroys=False):
    """(kernel_task for Checker c, the trace's clock column status or None)."""
    vname, vstatus = (vclock.status(c.trace.files, c.span) if "causal" in want and clocks
                      else (None, None))
    fn = kernel_task([int(p) for p in c.procs], c.span, c.max_examples, sorted(want),
                     list(c.trace.files) if vname else None, vname, destroys)
    return fn, vstatus


def found(c, want, info, vstatus, violations):
    """{property: (its violations, count, examples, extra)} from the kernel task's summary
    `info`, or None when it says the rows are malformed; violations(name): the processes
    of that property's violations. extra: causal's clock column status, fifo's method."""
    if info.get("malformed"):
        return None
    c.timings.update({f"kernel_{k}": v for k, v in info["seconds"].items()})
    out = {}
    for name in want:
        extra = {}
        if name == "causal" and vstatus is not None:
            extra["vclock"] = info.get("vclock", vstatus)
            if "vclock_first_bad" in info:
                extra["vclock_first_bad"] = info["vclock_first_bad"]
        if f"{name}_method" in info:
            extra["method"] = info[f"{name}_method"]
        out[name] = (violations(name), info[f"{name}_count"],
                     info.get(f"{name}_examples", []), extra)
    return out
