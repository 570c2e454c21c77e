"""The exact walk: `causal` and `consistent` of one whole trace in one process, the one
place the array engine decides them (on the driver, in the Spark path's one task, in the
kernel job after a main pass, and on the walk after it).

Invariants: the input is validated rows (seq numbering 0,1,2,... per process, one origin
per id, no dangling receive), laid out by position (layout.py) for the compiled kernels of
bus1py.check._walk. Vector clocks come from one topological walk, or from a producer's
`vclock` column once it has verified against the rows (never trusted: every event's clock
must be exactly the join of its predecessors' plus its own step). Definitions are the
Spark rounds' (spark/causal.py) and the reference's. A causality cycle
leaves the walk unfinished and `causal` undecided. Nothing here imports pyspark.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from .. import kinds as K
from ..examples import MAX_ROWS, cycle_example, inversion, shortest_cycle, unwind_path
from .events import stable_order

# Candidate receives a causal example's path search may hold and look at (path's
# levels; about a second of Python per million); a search that runs out leaves the
# example without a path.
PATH_BUDGET = 2_000_000

# The causal walk's column blocks (blocks()): one per core above BLOCK_MIN_EVENTS events,
# more when one block's origin clocks would pass BLOCK_BYTES, none under BLOCK_MIN_COLUMNS
# columns wide.
BLOCK_MIN_EVENTS = 1_000_000
BLOCK_BYTES = 1 << 30
BLOCK_MIN_COLUMNS = 4

def _ptr(ffi, a, ctype):
    return ffi.cast(ctype + " *", a.ctypes.data) if a.size else ffi.NULL


def origin_rows(lay):
    """row[k]: the row of position k's clock when only the origins' clocks are kept."""
    origin = lay.kind <= K.SIGNAL_SEND
    return np.where(origin, np.cumsum(origin) - 1, -1).astype(np.int64)


def walk(lay, row=None, block=None):
    """(row, clocks, complete) by the walk: row[k] is the row of position k's clock in
    `clocks` (-1: not kept); by default only the origins' clocks are kept. block: a
    Block, whose columns alone are walked (each column of a vector clock is a join of
    the same column only, so a block's columns are exact by themselves)."""
    from .._walk import ffi, lib
    if row is None:
        row = origin_rows(lay)
    col, ncols = (lay.col, lay.ncols) if block is None else (block.col, block.ncols)
    clocks = np.zeros(max(1, (int(row.max(initial=-1)) + 1) * ncols), dtype=np.int32)
    walked = lib.walk_clocks(lay.n, ncols, len(lay.procs), _ptr(ffi, lay.start, "int64_t"),
                             _ptr(ffi, col, "int32_t"), _ptr(ffi, lay.kind, "int8_t"),
                             _ptr(ffi, lay.src, "int64_t"), _ptr(ffi, row, "int64_t"),
                             _ptr(ffi, clocks, "int32_t"))
    if walked < 0:
        raise MemoryError("the vector-clock walk could not allocate its state")
    return row, clocks, walked == lay.n


class Block:
    """Clock columns lo..hi-1 of a layout, walked and scanned on their own: they become
    columns 0..hi-lo-1, and every other process shares one more column whose entries are
    never read (a delivery whose sender is outside the block is not judged by it)."""

    def __init__(self, lay, lo, hi):
        self.lo, self.hi, self.ncols = lo, hi, hi - lo + 1
        inside = (lay.col >= lo) & (lay.col < hi)
        self.col = np.where(inside, lay.col - lo, hi - lo).astype(np.int32)
        # the block column of each clock column (a few entries), then one gather over the
        # events
        cols = np.arange(lay.ncols)
        of_col = np.where((cols >= lo) & (cols < hi), cols - lo, hi - lo).astype(np.int32)
        self.sender_col = of_col[lay.sender_col]

    def judges(self, lay, k):
        return (lay.sender_col[k] >= self.lo) & (lay.sender_col[k] < self.hi)


def blocks(lay, cpus=None):
    """The column blocks of the causal walk ([None]: one walk of every column): one per core for a trace of more than
    BLOCK_MIN_EVENTS events (the blocks walk side by side, the kernels release the GIL),
    more when one block's origin clocks would pass BLOCK_BYTES; never narrower than
    BLOCK_MIN_COLUMNS columns."""
    import os
    cpus = cpus or os.cpu_count() or 1
    origins = int((lay.kind <= K.SIGNAL_SEND).sum())
    edges = block_edges(lay.n, origins, lay.ncols, cpus)
    if edges is None:
        return [None]       # every column at once
    return [Block(lay, a, b) for a, b in edges]


def block_edges(events, origins, ncols, parts, block_bytes=BLOCK_BYTES):
    """The (lo, hi) columns of each block: `parts` of them (the cores that walk them) for
    more than BLOCK_MIN_EVENTS events, more when one block's origin clocks (4 bytes an
    entry) would pass block_bytes, never narrower than BLOCK_MIN_COLUMNS columns; None for
    one walk of every column."""
    import math
    want = max(parts if events > BLOCK_MIN_EVENTS else 1,
               math.ceil(origins * ncols * 4 / block_bytes))
    return even_edges(ncols, min(want, ncols // BLOCK_MIN_COLUMNS))


def even_edges(ncols, count):
    """The (lo, hi) columns of `count` blocks as even as they go, at least one column
    each; None for one block of every column."""
    count = max(1, min(count, ncols))
    if count == 1:
        return None
    edges = np.linspace(0, ncols, count + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


# why a producer's clock fails verify_clocks (by its reason code; claim.c's check
# gives the same codes)
VERIFY_FAILURES = {1: "the clock is not the join of its predecessors' plus its own step",
                   2: "the clock knows a later event of its own process (a causality cycle)"}


def verify(lay, claimed):
    """None when the claimed clocks are the true vector clocks, else (why, position)."""
    from .._walk import ffi, lib
    reason = ffi.new("int64_t *")
    bad = lib.verify_clocks(lay.n, lay.ncols, len(lay.procs), _ptr(ffi, lay.start, "int64_t"),
                            _ptr(ffi, lay.col, "int32_t"), _ptr(ffi, lay.kind, "int8_t"),
                            _ptr(ffi, lay.src, "int64_t"), _ptr(ffi, claimed, "int32_t"),
                            reason)
    if bad < 0:
        return None
    return VERIFY_FAILURES[reason[0]], int(bad)


def decide(lay, want, max_examples, claimed=None, parts=None):
    """({property: processes of its violations}, info) for the properties in `want`
    (causal, consistent). claimed: None, or a function giving the producer's clocks by
    position (n x P int32) or (None, (why, position)), used for causal once verified.
    parts: the Blocks whose columns alone this walk decides (default: blocks(), every
    column). info: counts, examples (and their (position, partner) pairs as
    `causal_pairs`), the vclock status and the seconds of each step; walk_complete False
    means a causality cycle: causal is not decided (no "causal" entry)."""
    import time
    info = {"events": lay.n, "seconds": {}}
    clock_rows = clocks = None
    if claimed is not None and "causal" in want:
        t = time.perf_counter()
        got, why = claimed()
        if got is not None:
            why = verify(lay, got)
        if why is None:
            info["vclock"] = "holds"
            clock_rows, clocks = np.arange(lay.n, dtype=np.int64), got.reshape(-1)
        else:
            info["vclock"] = f"failed: {why[0]}"
            info["vclock_first_bad"] = lay.event_at(why[1])
        del got
        info["seconds"]["vclock"] = round(time.perf_counter() - t, 3)
    out = {}
    if "causal" in want:
        t = time.perf_counter()
        if clocks is None:
            complete, bad, pairs = _causal_blocks(lay, max_examples, parts)
        else:
            complete = True
            bad, pairs = _scan(lay, clock_rows, clocks, max_examples)
        info["walk_complete"] = complete
        if complete:
            info["causal_pairs"] = [[int(k), int(later)] for k, later in pairs]
            info["causal_examples"] = inversions(lay, pairs)
            out["causal"] = lay.procs[lay.slot_of[bad]].tolist()
        info["seconds"]["causal"] = round(time.perf_counter() - t, 3)
    if "consistent" in want:
        t = time.perf_counter()
        out["consistent"], info["consistent_examples"] = consistent(lay, max_examples)
        info["seconds"]["consistent"] = round(time.perf_counter() - t, 3)
    for name, procs in out.items():
        info[f"{name}_count"] = len(procs)
    return out, info


def entries(lay, max_examples, props, details, claimed=None, vstatus=None):
    """causal and consistent as the summary's entries, into props (and the process of each
    violation into details); (complete, decide's info), complete False (nothing added)
    when the walk meets a causality cycle. claimed: as decide's; vstatus: the trace's clock
    column status (vclock.status) when causal reports it, None when it does not."""
    out, info = decide(lay, ("causal", "consistent"), max_examples, claimed)
    if not info["walk_complete"]:
        return False, info
    props.update(summary_entries(info, vstatus))
    details.update((name, out[name]) for name in ("causal", "consistent"))
    return True, info


def summary_entries(info, vstatus):
    """causal and consistent as the summary's entries, from a decide's info (this walk's
    or relaxation's); vstatus: the trace's clock column status when causal reports it (a
    column was read), else None."""
    got = {}
    for name in ("causal", "consistent"):
        n = info[f"{name}_count"]
        entry = {"ok": n == 0, "violations": n, "examples": info[f"{name}_examples"]}
        if name == "causal" and vstatus is not None:
            entry["vclock"] = info.get("vclock", vstatus)
            if "vclock_first_bad" in info:
                entry["vclock_first_bad"] = info["vclock_first_bad"]
        entry["method"] = ("vector-clock witness" if entry.get("vclock") == "holds"
                           else "exact")
        got[name] = entry
    return got


def causal(lay, row, clocks, max_examples):
    """(violating positions, examples) of the causal test on the origins' clocks."""
    bad, pairs = _scan(lay, row, clocks, max_examples)
    return bad, [_inversion(lay, k, later) for k, later in pairs]


def _scan(lay, row, clocks, max_examples, block=None):
    """(violating positions, [(position, its partner)] of the first max_examples) of the
    causal test on the origins' clocks (of `block`'s columns: then only deliveries whose
    sender is in the block are judged)."""
    from .._walk import ffi, lib
    ncols, sender_col = ((lay.ncols, lay.sender_col) if block is None
                         else (block.ncols, block.sender_col))
    out = np.empty(max(1, int((lay.kind == K.DELIVER).sum())), dtype=np.int64)
    n = lib.causal_scan(lay.n, ncols, len(lay.procs), _ptr(ffi, lay.start, "int64_t"),
                        _ptr(ffi, lay.kind, "int8_t"), _ptr(ffi, lay.first, "int8_t"),
                        _ptr(ffi, lay.src, "int64_t"), _ptr(ffi, sender_col, "int32_t"),
                        _ptr(ffi, row, "int64_t"), _ptr(ffi, clocks, "int32_t"),
                        _ptr(ffi, out, "int64_t"))
    if n < 0:
        raise MemoryError("the causal scan could not allocate its state")
    bad = out[:n]
    if block is not None:
        bad = bad[block.judges(lay, bad)]
    examples = []
    clk = clocks.reshape(-1, ncols)
    for k in bad[:max_examples]:
        k = int(k)
        q = sender_col[k]
        need = clk[row[lay.src[k]], q]
        s0 = int(lay.start[lay.slot_of[k]])
        earlier = s0 + np.flatnonzero((lay.kind[s0:k] == K.DELIVER) & (lay.first[s0:k] == 1))
        later = int(earlier[clk[row[lay.src[earlier]], q] >= need][0])
        examples.append((k, later))
    return bad, examples


def causal_by_blocks(lay, max_examples, cpus=None):
    """(complete, violating positions, examples) of the causal test, the walk run block
    by block (blocks()), side by side; complete False: a causality cycle, nothing
    decided. Every delivery is judged by the one block holding its sender's column, so
    the positions and examples are the whole walk's."""
    complete, bad, pairs = _causal_blocks(lay, max_examples, None, cpus)
    return complete, bad, None if pairs is None else inversions(lay, pairs)


def _causal_blocks(lay, max_examples, parts=None, cpus=None):
    """causal_by_blocks over the Blocks `parts` (default blocks(lay, cpus)), its examples
    as (position, partner) pairs."""
    from concurrent.futures import ThreadPoolExecutor
    row = origin_rows(lay)
    parts = parts or blocks(lay, cpus)

    def one(block):
        return causal_block(lay, row, block, max_examples)

    if len(parts) == 1:
        got = [one(parts[0])]
    else:
        import os
        with ThreadPoolExecutor(min(len(parts), cpus or os.cpu_count() or 1)) as pool:
            got = list(pool.map(one, parts))
    if not all(complete for complete, _, _ in got):
        return False, None, None
    bad = np.sort(np.concatenate([b for _, b, _ in got]))
    return True, bad, sorted(e for _, _, ex in got for e in ex)[:max_examples]


def causal_block(lay, row, block, max_examples):
    """(complete, violating positions, [(position, its partner)] of the first
    max_examples) of the causal test by the walk of one Block's columns (None: every
    column); complete False: a causality cycle, nothing decided. row: origin_rows(lay).
    The blocks' pairs together, sorted, begin with the one walk's first max_examples."""
    _, clocks, complete = walk(lay, row, block)
    if not complete:
        return False, None, None
    return (True, *_scan(lay, row, clocks, max_examples, block))


def inversions(lay, pairs):
    """The causal examples of (position, partner) pairs."""
    return [_inversion(lay, k, later) for k, later in pairs]


def _inversion(lay, k, later):
    """The causal example of a delivery at position k preceded by the first delivery at
    `later` of a message whose send knew k's send."""
    ex = inversion(_delivery(lay, k), _delivery(lay, later), lay.process_at(k))
    ex["path"] = path(lay, int(lay.src[k]), int(lay.src[later]))
    return ex


def path(lay, start, goal, budget=PATH_BUDGET):
    """A happened-before path from position `start` to position `goal` with the fewest
    message and signal hops (a same-process step of any length is one edge), as events:
    BFS over processes, reaching a process at an earlier position dominates reaching it
    later, so each origin is expanded at most once. A level's candidates are the receives
    whose origin lies in a range the level may expand and which lie before where the
    search had reached their process when the level began (no other can extend it); None
    when goal is not reached after `budget` candidates, a level taken whole or not at all,
    so the streamed search (streamed_examples.py), which holds a level's candidates, holds
    at most `budget` of them."""
    if lay.receivers is None:     # receives grouped by origin, built on first use
        recv = np.flatnonzero(lay.src >= 0)
        lay.receivers = recv[stable_order(lay.src[recv])]
    rsrc = lay.src[lay.receivers]
    gen = search(start, goal, lambda k: int(lay.slot_of[k]), lay.start[1:], budget)
    sent = None
    try:
        while True:
            ranges, reached, left = gen.send(sent)
            before = np.full(len(lay.procs), lay.n, np.int64)
            for q, r in reached.items():
                before[q] = r
            rs = [lay.receivers[np.searchsorted(rsrc, lo):np.searchsorted(rsrc, hi)]
                  for lo, hi in ranges.values()]
            r = np.concatenate(rs) if rs else np.zeros(0, np.int64)
            r = r[r < before[lay.slot_of[r]]]
            o = lay.src[r]
            order = np.lexsort((r, o))
            sent = (None, None) if len(r) > left else (o[order], r[order])
    except StopIteration as stop:
        got = stop.value
    return None if got is None else [lay.event_at(k) for k in got]


def search(start, goal, slot_of, end_of, budget):
    """The path search of `path`, as a generator over levels: it yields each level's
    (ranges {slot: (lo, hi)} of origins, where it had reached each process, budget left)
    and is sent the level's candidates as (origins, receives) sorted by (origin, receive),
    or (None, None) when they pass the budget; it returns the path (positions) or None.
    path answers from the layout, streamed_examples.paths from the files."""
    goal_slot = slot_of(goal)
    reached = {slot_of(start): start}
    expanded = {}
    parent = {start: None}
    frontier = deque([start])
    end = None
    while frontier and end is None:
        ranges = {}
        for k in frontier:
            sl = slot_of(k)
            hi = expanded.get(sl, int(end_of[sl]))
            if k < hi:
                ranges[sl] = (min(k, ranges.get(sl, (k,))[0]), hi)
        eo, er = yield ranges, dict(reached), budget
        if eo is None:
            return None         # the level's candidates pass the budget (walk.path)
        budget -= len(eo)
        for _ in range(len(frontier)):
            k = frontier.popleft()
            sl = slot_of(k)
            if sl == goal_slot and k <= goal:
                end = k
                break
            hi = expanded.get(sl, int(end_of[sl]))
            if k >= hi:
                continue
            expanded[sl] = k
            a, b = np.searchsorted(eo, [k, hi])
            for r, o in zip(er[a:b].tolist(), eo[a:b].tolist()):
                q = slot_of(r)
                if reached.get(q, r + 1) <= r:
                    continue
                reached[q] = r
                parent[r] = (o, k)
                frontier.append(r)
    if end is None:
        return None
    return unwind_path(parent, end, goal)


def _delivery(lay, k):
    o = int(lay.src[k])
    return {"msg": int(lay.msg[k]), "sender_process": lay.process_at(o),
            "send_seq": lay.seq_at(o), "is_destroy": bool(lay.is_destroy[k]),
            "deliver_seq": lay.seq_at(k)}


def consistent(lay, max_examples):
    """(process of each component, examples): the strongly connected components (more than
    one message) of the delivery-chain graph, contracted to the messages first-delivered at
    two or more processes (a message delivered at one process only sits inside one chain,
    and every cycle switches chains)."""
    fpos = np.flatnonzero((lay.kind == K.DELIVER) & (lay.first == 1))
    origin = lay.src[fpos]
    shared = np.bincount(origin, minlength=lay.n)[origin] >= 2
    kpos, korigin = fpos[shared], origin[shared]

    def row(k, o):
        return {"process": lay.process_at(k), "deliver_seq": lay.seq_at(k),
                "msg": int(lay.msg[k]), "sender_process": lay.process_at(o),
                "send_seq": lay.seq_at(o)}
    return chain_components(kpos, korigin, lay.slot_of[kpos], lay.msg[kpos], lay.procs,
                            row, max_examples)


def chain_components(kpos, korigin, kslot, kmsg, procs, row, max_examples):
    """consistent's answer from the kept first deliveries: their positions (ascending),
    their origins' positions, slots and ids; row(position, origin): an example's row.
    Every delivery of a message must be among them (or none): the components are those of
    the graph they make."""
    from .._walk import ffi, lib
    nodes, node = np.unique(korigin, return_inverse=True)
    same = kslot[:-1] == kslot[1:]
    u, v = node[:-1][same], node[1:][same]
    order = stable_order(u)
    succ = v[order].astype(np.int64)
    V = len(nodes)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(u, minlength=V))]).astype(np.int64)
    comp = np.empty(max(1, V), dtype=np.int64)
    scratch = np.empty(max(1, 4 * V), dtype=np.int64)
    ncomp = lib.tarjan(V, _ptr(ffi, indptr, "int64_t"), _ptr(ffi, succ, "int64_t"),
                       _ptr(ffi, comp, "int64_t"), _ptr(ffi, scratch, "int64_t"))
    comp = comp[:V]
    size = np.bincount(comp, minlength=ncomp)
    big = np.flatnonzero(size > 1)
    if not len(big):
        return [], []
    row_comp = comp[node]
    first_proc = np.full(ncomp, np.iinfo(np.int64).max)
    np.minimum.at(first_proc, row_comp, procs[kslot])
    min_msg = np.full(ncomp, np.iinfo(np.int64).max)
    np.minimum.at(min_msg, row_comp, kmsg)
    ranked = big[np.lexsort((min_msg[big], size[big]))]
    examples = []
    for cc in ranked[:max_examples]:
        rows = [row(int(k), int(o))
                for k, o in zip(kpos[row_comp == cc][:MAX_ROWS], korigin[row_comp == cc])]
        cycle = shortest_cycle(rows)
        if cycle:
            origin_of = {r["msg"]: (r["sender_process"], r["send_seq"]) for r in rows}
            ex = cycle_example(cycle, int(size[cc]), origin_of)
            for step in ex["edges"]:
                step["path"] = [step["before"], step["after"]]
            examples.append(ex)
    return [int(p) for p in first_proc[big]], examples
