"""The streamed walk: causal (one column block), consistent, fifo and node_rules of a
trace read from per-process files (per_process.py) batch by batch, so a task holds a
bounded part of the trace whatever its size; the verdicts, counts and examples are the
in-memory walk's (walk.py's decide, properties.py's fifo and node_rules on a Layout).

Invariants: positions are the layout's (start[slot] + seq, processes in ascending id
order), so pairs and examples compare and merge with the in-memory walk's. The causal
walk (stream.c's sw_*) advances a process while its next receive's origin has been
walked, holds the block's current and known clocks of every process and the clock of each
origin with a receive still to come (freed after its last: the linking counted them); a
walk that cannot move with events left met a causality cycle, and goes on in rounds over
back edges (rounds.c) until their clocks settle. An example's partner is found by one
more round given the first violations as targets, run only when there are violations.
consistent peels the delivery-chain graph (chains.c's cp_*) from the front, and on a
cycle from the ends too: Tarjan (walk.chain_components) runs on what both left, which
holds every component. fifo and node_rules read one process at a time.
Memory of a task: task_bytes (a batch of each process, the block's clocks of each process
and of the live origins, one process's events for fifo and node_rules); what a broken
trace adds (its violations, its back edges, the chains the peels leave, the example
searches) is outside it. Nothing here imports pyspark.
"""
from __future__ import annotations

import numpy as np

from .. import kinds as K

# The memory model of one task of the streamed walk (docs/CHECKER.md, "The memory of a
# task"; tests/check/test_streamed.py holds a measured task's growth to it): one batch of
# each process's file (per_process.batch_rows rows, or the process's events when fewer),
# STREAM_ROW_BYTES a row as the task's resident memory grows (22 bytes of arrays, and
# what the conversion's temporaries leave in the allocator); each process's current and
# known clocks of the block; per live origin (walked, a receive still to come) a clock row
# of the block and its table entry (the table at most half full, a spare-row index); the
# task that decides fifo and node_rules holds one process's events at a time,
# PROCESS_EVENT_BYTES each; and TASK_FIXED_BYTES. A clock column checked beside the walk
# adds, for the block's c columns of it, CLAIM_ENTRY_BYTES an entry of a batch's row (the
# columns' copy, 4 bytes, measured 4.05-4.07 with the mapped pages of the batch being
# read), and 4 bytes an entry of each process's last claim and of each live origin's.
STREAM_ROW_BYTES = 80
LIVE_ENTRY_BYTES = 48
PROCESS_EVENT_BYTES = 120
TASK_FIXED_BYTES = 16 << 20
CLAIM_ENTRY_BYTES = 5


def task_bytes(counts, width, live, beside=False, claims=0):
    """The most one task of the streamed walk holds by the model above: counts, the events
    of each process; a block of `width` columns; `live` origins live at once at most;
    beside: the task decides fifo and node_rules too; claims: the columns of a clock column
    it checks (its block's width, or 0)."""
    from .per_process import batch_rows
    counts = np.asarray(counts, np.int64)
    P = len(counts)
    rows = int(np.minimum(counts, batch_rows(P)).sum())
    return (TASK_FIXED_BYTES + rows * (STREAM_ROW_BYTES + CLAIM_ENTRY_BYTES * claims)
            + P * 4 * (2 * (width + 1) + claims)
            + live * (LIVE_ENTRY_BYTES + 4 * (width + 1 + claims))
            + (int(counts.max(initial=0)) * PROCESS_EVENT_BYTES if beside else 0))


def _ptr(ffi, a, ctype):
    return ffi.cast(ctype + " *", a.ctypes.data) if a.size else ffi.NULL


def _drive(streams, handle, give, left, run, unstick=None):
    """Give each process its batches until run() (the events it moved) moves nothing and
    no process with events left can be given more, then unstick() (stream.c's sw_break)
    while it takes something: whether every event was taken."""
    streams.rewind()
    held = [None] * streams.P
    while True:
        refilled = False
        for slot in range(streams.P):
            if left(handle, slot) == 0:
                b = streams.next(slot)
                if b is not None:
                    held[slot] = b          # the arrays C reads stay alive
                    give(handle, slot, b)
                    refilled = True
        if run(handle) or refilled:
            continue
        if streams.finished() and all(left(handle, s) == 0 for s in range(streams.P)):
            return True
        if unstick is None or not unstick(handle):
            return False


class BlockWalk:
    """The causal walk of one block over the streams (stream.c's sw_*), in rounds past a
    causality cycle: bcol[slot] the block column of each slot (inside the block below
    `inside`); claim: (lo, hi), the clock column's columns checked beside it (the streams
    then give them), or None."""

    def __init__(self, streams, bcol, inside, claim=None):
        from .._walk import ffi, lib
        self.ffi, self.lib, self.streams = ffi, lib, streams
        ncols = int(max(bcol, default=0)) + 1
        self.bcol = np.ascontiguousarray(bcol, np.int32)
        lo, hi = claim or (0, 0)
        if claim:
            self.streams = streams.claiming(lo, hi)
        self.h = lib.sw_new(streams.P, ncols, inside, _ptr(ffi, self.bcol, "int32_t"),
                            hi - lo, lo)
        if self.h == ffi.NULL:
            raise MemoryError("the streamed walk could not allocate its state")
        self.cap = 1 << 16
        self.out = np.empty(4 * self.cap, np.int64)
        self.nout = ffi.new("int64_t *")
        self.targets = None

    def close(self):
        self.lib.sw_free(self.h)

    def _give(self, h, slot, b):
        ffi = self.ffi
        self.lib.sw_give(h, slot, len(b["kind"]), *(_ptr(ffi, b[c], t) for c, t in (
            ("kind", "int8_t"), ("first", "int8_t"), ("sslot", "int32_t"),
            ("sseq", "int64_t"), ("count", "int32_t"))),
            _ptr(ffi, b["claim"], "int32_t") if "claim" in b else ffi.NULL)

    def _pass(self):
        """One round over the streams: the violations it found ((slot, seq, column, need)
        rows) and whether it took every event."""
        lib, ffi, found = self.lib, self.ffi, []

        def kept(got):
            if got == -1:
                raise MemoryError("the streamed walk could not allocate an origin's clock")
            if got == -2:
                raise ValueError("a receive's origin was freed before it: the counts lie")
            if self.nout[0]:
                found.append(self.out[:4 * self.nout[0]].reshape(-1, 4).copy())
            return got

        def run(h):
            if self.targets is not None and not lib.sw_unfound(h):
                return 0            # every partner found: the round stops here
            return kept(lib.sw_run(h, _ptr(ffi, self.out, "int64_t"), self.cap,
                                   self.nout)) or self.nout[0]

        def unstick(h):
            if self.targets is not None and not lib.sw_unfound(h):
                return 0
            return kept(lib.sw_break(h, _ptr(ffi, self.out, "int64_t"), self.nout))
        lib.sw_rewind(self.h)
        complete = _drive(self.streams, self.h, self._give, lib.sw_left, run, unstick)
        bad = np.concatenate(found) if found else np.zeros((0, 4), np.int64)
        return bad, complete

    def rounds(self):
        """(violations of the last round, rounds walked): rounds until one changes no back
        edge's clock (one when the trace has no causality cycle)."""
        n = 0
        while True:
            n += 1
            bad, complete = self._pass()
            settled = self.lib.sw_settled(self.h)
            if not complete or settled < 0:
                raise ValueError("the streamed walk stood still: the counts lie")
            if settled:
                return bad, n

    def partners(self, targets):
        """{target: partner} for (slot, seq, column, need) violations of the settled
        clocks: the earliest earlier first delivery at that slot whose origin's clock
        reaches need there, found by one more round."""
        t = np.asarray(sorted(targets), np.int64).reshape(-1, 4)
        if self.lib.sw_target(self.h, len(t), _ptr(self.ffi, t, "int64_t")):
            raise MemoryError("the streamed walk could not hold its targets")
        self.targets = t
        self._pass()
        return {tuple(g): int(self.lib.sw_partner(self.h, i))
                for i, g in enumerate(t.tolist())}

    def max_live(self):
        return int(self.lib.sw_max_live(self.h))

    def back_edges(self):
        return int(self.lib.sw_back_edges(self.h))

    def claim_bad(self):
        """The claim check's first failure as (slot, seq, column, reason), or None."""
        got = np.zeros(4, np.int64)
        if self.lib.sw_claim_bad(self.h, _ptr(self.ffi, got, "int64_t")):
            return tuple(int(x) for x in got)
        return None


def peel(streams):
    """(whether the delivery-chain graph peels whole, the events each process passed): a
    graph that does not has a cycle. On reversed streams (Streams.reversed), the peel from
    the chains' ends."""
    from .._walk import ffi, lib
    h = lib.cp_new(streams.P)
    if h == ffi.NULL:
        raise MemoryError("the chains' peel could not allocate its state")

    def give(h, slot, b):
        lib.cp_give(h, slot, len(b["kind"]), *(_ptr(ffi, b[c], t) for c, t in (
            ("kind", "int8_t"), ("first", "int8_t"), ("sslot", "int32_t"),
            ("sseq", "int64_t"), ("firsts", "int32_t"))))

    def run(h):
        moved = lib.cp_run(h)
        if moved < 0:
            raise MemoryError("the chains' peel could not allocate its state")
        return moved
    try:
        whole = _drive(streams, h, give, lib.cp_left, run)
        passed = [int(lib.cp_passed(h, s)) for s in range(streams.P)]
    finally:
        lib.cp_free(h)
    return whole, passed


def consistent(streams, max_examples):
    """walk.consistent's answer and the first deliveries kept for Tarjan, streamed: the
    peel from the chains' fronts, then, on a cycle, from their ends, and Tarjan on what
    both left: on each chain the events between where the two stopped (a message on a
    cycle passes neither, nor does one between two such on a chain, so every component
    lies there, whole)."""
    from .walk import chain_components
    whole, front = peel(streams)
    if whole:
        return [], [], 0
    back = peel(streams.reversed())[1]
    left = {s: (front[s], int(streams.counts[s]) - back[s]) for s in range(streams.P)
            if front[s] < streams.counts[s] - back[s]}
    cols = ("seq", "kind", "first", "firsts", "sslot", "sseq", "msg")
    parts = {c: [] for c in cols + ("slot",)}
    for slot, (seq0, seq1) in sorted(left.items()):
        for b in streams.rows(slot, seq0, seq1):
            keep = (b["kind"] == K.DELIVER) & (b["first"] == 1) & (b["firsts"] >= 2)
            for c in cols:
                parts[c].append(b[c][keep])
            parts["slot"].append(np.full(int(keep.sum()), slot, np.int64))
    k = {c: np.concatenate(v) if v else np.zeros(0, np.int64) for c, v in parts.items()}
    start = streams.start
    kpos = start[k["slot"]] + k["seq"]
    korigin = start[k["sslot"]] + k["sseq"]
    procs = streams.procs
    at = {int(p): i for i, p in enumerate(kpos.tolist())}

    def row(pos, o):
        i = at[pos]
        return {"process": int(procs[k["slot"][i]]), "deliver_seq": int(k["seq"][i]),
                "msg": int(k["msg"][i]), "sender_process": int(procs[k["sslot"][i]]),
                "send_seq": int(k["sseq"][i])}
    return (*chain_components(kpos, korigin, k["slot"], k["msg"], procs, row, max_examples),
            len(kpos))


def causal(streams, bcol, inside, max_examples, claim=None):
    """(violating positions, [(position, partner)] of the first max_examples, the walk's
    facts: most live origins, rounds, back edges, the claim check's first failure) of the
    causal test by the streamed walk of one block; as walk.causal_block, and on a history
    with a causality cycle as the relaxed clocks (relax.py) define it."""
    w = BlockWalk(streams, bcol, inside, claim)
    try:
        bad, rounds = w.rounds()
        facts = {"live_origins": w.max_live(), "rounds": rounds,
                 "back_edges": w.back_edges(), "claim_bad": w.claim_bad()}
        start = streams.start
        pos = start[bad[:, 0]] + bad[:, 1]
        order = np.argsort(pos, kind="stable")
        pos, bad = pos[order], bad[order]
        targets = [tuple(t) for t in bad[:max_examples].tolist()]
        partner = w.partners(targets) if targets else {}
    finally:
        w.close()
    pairs = [(int(start[t[0]] + t[1]), int(start[t[0]] + partner[t])) for t in targets]
    return pos, pairs, facts


class _Process:
    """One process's events as the arrays properties.fifo and node_rules read."""

    stamp = None

    def __init__(self, streams, slot):
        cols = {}
        for b in streams.rows(slot):
            for k, v in b.items():
                cols.setdefault(k, []).append(v)
        cols = {k: np.concatenate(v) for k, v in cols.items()}
        self.n = int(streams.counts[slot])
        self.code, self.first = cols.get("kind", np.zeros(0, np.int8)), None
        if self.n:
            self.first = cols["first"].view(np.bool_)
            self.seq, self.msg, self.sender = cols["seq"], cols["msg"], cols["sender"]
            self.send_seq, self.is_destroy = cols["sseq"], cols["is_destroy"]
            self.node, self.has_node = cols["node"], cols["has_node"]
        self.process = np.full(self.n, streams.procs[slot], np.int64)


def fifo_and_node_rules(streams, max_examples, destroys):
    """({fifo, node_rules: (method, processes, count, examples)}, destroyed pairs): as
    properties.fifo and node_rules on the whole trace (no stamps), one process at a time
    (violations and examples come in (process, seq) order either way)."""
    from . import properties as P
    got = {"fifo": ([], []), "node_rules": ([], [])}
    destroyed = []
    for slot in range(streams.P):
        ev = _Process(streams, slot)
        if not ev.n:
            continue
        bad, ex = P._fifo_among(ev, 0, ev.n, max_examples - len(got["fifo"][1]))
        got["fifo"][0].extend(ev.process[bad].tolist())
        got["fifo"][1].extend(ex)
        if destroys:
            _, procs, _, ex = P.node_rules_of(ev, max_examples - len(got["node_rules"][1]))
            got["node_rules"][0].extend(procs)
            got["node_rules"][1].extend(ex)
            gone = (ev.code == K.DELIVER) & ev.is_destroy & ev.has_node
            destroyed += [[int(streams.procs[slot]), int(n)]
                          for n in np.unique(ev.node[gone]).tolist()]
    out = {"fifo": ("exact", *got["fifo"]), "node_rules": (None, *got["node_rules"])}
    return {name: (m, v, len(v), ex[:max_examples]) for name, (m, v, ex) in out.items()}, \
        destroyed


def block_columns(streams, span, lo=None, hi=None):
    """(bcol, inside): each slot's column in the block of clock columns lo..hi-1 (every
    column without them; the processes outside share one column past the block), and the
    block's width."""
    col = (streams.procs % span if span else np.arange(streams.P)).astype(np.int32)
    ncols = int(col.max()) + 1 if streams.P else 0
    if lo is None:
        return col, ncols
    inside = (col >= lo) & (col < hi)
    return np.where(inside, col - lo, hi - lo).astype(np.int32), hi - lo


def decide(streams, want, max_examples, span=None, edge=None, destroys=False):
    """({property: processes of its violations}, info) of the properties in `want`
    (causal for the block `edge`, (lo, hi) columns or None for every column; consistent;
    fifo and node_rules), as rounds.decide (walk.decide, with the same rounds past a
    causality cycle) and properties.py give them on the Layout of the same trace. info
    has the causal pairs, the examples, the counts, the most live origins
    (`live_origins`) and the seconds of each step; `destroyed` with fifo."""
    import time

    from .streamed_examples import _Where, inversions
    info = {"events": int(streams.start[-1]), "seconds": {}}
    out = {}
    if "causal" in want:
        t = time.perf_counter()
        bcol, inside = block_columns(streams, span, *(edge or (None, None)))
        # the claim's columns are the block's (a clock column is read without span)
        claim = (edge or (0, streams.P)) if streams.claims else None
        bad, pairs, facts = causal(streams, bcol, inside, max_examples, claim)
        info["walk_complete"] = True
        info["live_origins"] = facts["live_origins"]
        if facts["rounds"] > 1:
            info["cycle"] = True
            info["rounds"], info["back_edges"] = facts["rounds"], facts["back_edges"]
        if claim and facts["claim_bad"] is not None:
            slot, seq = facts["claim_bad"][:2]
            info["claim_bad"] = [*facts["claim_bad"],
                                 _Where(streams).event_at(int(streams.start[slot]) + seq)]
        info["causal_pairs"] = [list(p) for p in pairs]
        info["causal_examples"] = inversions(streams, pairs)
        out["causal"] = streams.procs[
            np.searchsorted(streams.start, bad, side="right") - 1].tolist()
        info["seconds"]["causal"] = round(time.perf_counter() - t, 3)
    if "consistent" in want:
        t = time.perf_counter()
        out["consistent"], info["consistent_examples"], info["chains_kept"] = \
            consistent(streams, max_examples)
        info["seconds"]["consistent"] = round(time.perf_counter() - t, 3)
    if {"fifo", "node_rules"} & set(want):
        t = time.perf_counter()
        side, info["destroyed"] = fifo_and_node_rules(streams, max_examples, destroys)
        for name in ("fifo", "node_rules"):
            method, procs, n, examples = side[name]
            out[name] = procs
            info[f"{name}_examples"] = examples
            if method:
                info[f"{name}_method"] = method
        info["seconds"]["fifo"] = round(time.perf_counter() - t, 3)
    for name, procs in out.items():
        info[f"{name}_count"] = len(procs)
    return out, info
