# Invariants: the exact `causal` and `consistent` formulations for a trace small enough to
# hold on the driver (rows x processes <= DRIVER_MAX_CELLS): the main pass's table (which
# has validated the rows: seq numbering, one origin per id, no dangling receive) is
# collected once through Arrow, and vector clocks are computed by walking the events in a
# topological order of happened-before. The definitions are the Spark formulations' (causal.py,
# consistent.py) and the reference's; a causality cycle (possible only in a broken trace)
# leaves the walk unfinished, and then the Spark formulations decide. A Spark job costs
# about as much as this whole walk on such a trace, and the Spark formulations need one
# or more jobs per round.
from __future__ import annotations

from collections import Counter, deque

from . import kinds as K
from .examples import (cycle_example, event, inversion, message_name, shortest_cycle,
                       unwind_path)

DRIVER_MAX_CELLS = 20_000_000      # rows x processes: vector clocks held at origins
# what the walk needs of each event (the main pass's columns, main_pass.py)
SKELETON_COLUMNS = ("process", "seq", "kind_code", "msg", "first_delivery",
                    "sender_process", "send_seq", "is_destroy")


class Skeleton:
    """The events of a validated trace, per process in seq order, with the maps the
    formulations and the path search need, from SKELETON_COLUMNS of Spark's main pass
    (from_arrow) or of the driver's (local.py)."""

    def __init__(self, columns):
        """columns: SKELETON_COLUMNS -> a list (or array) each, rows in (process, seq)
        order (from_arrow sorts)."""
        col = [columns[n] for n in SKELETON_COLUMNS]
        col = [c.tolist() if hasattr(c, "tolist") else c for c in col]
        self.procs = sorted(set(col[0]))
        self.index = {p: i for i, p in enumerate(self.procs)}
        self.events = {p: [] for p in self.procs}
        for p, _s, code, msg, first, sp, ss, destroy in zip(*col):
            self.events[p].append((code, msg, bool(first), sp, ss, bool(destroy)))
        self._origin = None

    def _maps(self):
        """The maps only examples need (built on first use: a clean trace never needs
        them)."""
        if self._origin is not None:
            return
        self._origin = {}       # (is_signal, id) -> (process, seq) of its origin
        self._receives = {}     # (is_signal, id) -> [(process, seq) of each receive]
        self._origins_at = {p: [] for p in self.procs}   # seqs of origins, ascending
        for p, evs in self.events.items():
            for s, (code, msg, *_rest) in enumerate(evs):
                if code <= K.SIGNAL_SEND:
                    self._origin[(code == K.SIGNAL_SEND, msg)] = (p, s)
                    self._origins_at[p].append(s)
                elif code <= K.SIGNAL_RECV:
                    self._receives.setdefault((code == K.SIGNAL_RECV, msg), []).append((p, s))

    @classmethod
    def from_arrow(cls, table):
        """From an Arrow table with SKELETON_COLUMNS, in any order."""
        t = table.sort_by([("process", "ascending"), ("seq", "ascending")])
        return cls({n: t.column(n).to_pylist() for n in SKELETON_COLUMNS})

    def describe(self, p, s):
        """The event (p, s) as a counterexample event."""
        self._maps()
        code, msg = self.events[p][s][:2]
        o = None
        if code >= K.DELIVER and code != K.INTERNAL:
            o = self._origin.get((code == K.SIGNAL_RECV, msg))
        return event(p, s, K.NAMES[code], msg, origin=o)

    def vector_clocks(self):
        """{origin key: its vector clock (tuple, by process index)}, or None when the
        history has a causality cycle (the walk cannot finish)."""
        P = len(self.procs)
        clock = {}
        pos = [0] * P
        cur = [[-1] * P for _ in range(P)]
        seqs = [self.events[p] for p in self.procs]
        moved = True
        while moved:
            moved = False
            for i in range(P):
                evs, k, v = seqs[i], pos[i], cur[i]
                start = k
                while k < len(evs):
                    code, msg = evs[k][0], evs[k][1]
                    if code == K.DELIVER or code == K.SIGNAL_RECV:
                        o = clock.get((code == K.SIGNAL_RECV, msg))
                        if o is None:
                            break       # its origin is not walked yet
                        v = list(map(max, v, o))
                    v[i] = k
                    if code <= K.SIGNAL_SEND:
                        clock[(code == K.SIGNAL_SEND, msg)] = tuple(v)
                    k += 1
                if k != start:
                    pos[i], cur[i], moved = k, v, True
        if any(pos[i] < len(seqs[i]) for i in range(P)):
            return None
        return clock

    def path(self, start, goal):
        """A happened-before path from event `start` to event `goal` with the fewest message
        and signal hops (a same-process step, of any length, is one edge), as events; None
        when goal is not reachable. BFS over processes: reaching p at an earlier seq
        dominates reaching it later, so each origin is expanded at most once."""
        self._maps()
        (p0, s0), (pg, sg) = start, goal
        reached = {p0: s0}          # process -> earliest seq reached
        expanded = {p0: None}       # process -> lowest origin seq already expanded from
        parent = {(p0, s0): None}   # receive (or start) -> (origin event, previous state)
        frontier = deque([(p0, s0)])
        end = None
        while frontier:
            p, s = frontier.popleft()
            if p == pg and s <= sg:
                end = (p, s)
                break
            hi = expanded.get(p)
            for o in self._origins_at[p]:
                if o < s or (hi is not None and o >= hi):
                    continue
                code, msg = self.events[p][o][:2]
                for q, r in self._receives.get((code == K.SIGNAL_SEND, msg), ()):
                    if q in reached and reached[q] <= r:
                        continue
                    reached[q] = r
                    parent[(q, r)] = ((p, o), (p, s))
                    frontier.append((q, r))
            expanded[p] = s if hi is None else min(hi, s)
        if end is None:
            return None
        return [self.describe(p, s) for p, s in unwind_path(parent, end, goal)]


def causal_and_consistent(c, sk, clock):
    """((violations, count, examples) for causal, the same for consistent)."""
    return _causal(c, sk, clock), _consistent(c, sk)


def _causal(c, sk, clock):
    """A first delivery of m1 (sender q, send seq s) at p violates causal iff the send
    clock of some message first-delivered at p before it has q entry >= s: per process,
    a running maximum down the matrix of send clocks (numpy, no loop over the clocks)."""
    import numpy as np
    P = len(sk.procs)
    violations, found, n = [], [], 0     # found: (process, row, later row) for examples
    for p in sk.procs:
        rows = [(s, msg, sp, ss, destroy) for s, (code, msg, first, sp, ss, destroy)
                in enumerate(sk.events[p]) if code == K.DELIVER and first]
        if not rows:
            continue
        vc = np.array([clock[(False, r[1])] for r in rows], np.int64).reshape(len(rows), P)
        q = np.array([sk.index[r[2]] for r in rows])
        ss = np.array([r[3] for r in rows], np.int64)
        known = np.full((len(rows), P), -1, np.int64)    # before each delivery
        known[1:] = np.maximum.accumulate(vc, axis=0)[:-1]
        bad = np.flatnonzero(known[np.arange(len(rows)), q] >= ss)
        n += len(bad)
        violations += [p] * len(bad)
        for j in bad[:max(0, c.max_examples - len(found))]:
            k = int(np.flatnonzero(vc[:j, q[j]] >= ss[j])[0])   # the earliest witness
            found.append((p, _row(rows[j]), _row(rows[k])))
    examples = []
    for p, row, later in found:
        ex = inversion(row, later, p)
        ex["path"] = sk.path((row["sender_process"], row["send_seq"]),
                             (later["sender_process"], later["send_seq"]))
        examples.append(ex)
    return violations, n, examples


def _row(r):
    s, msg, sp, ss, destroy = r
    return {"msg": msg, "sender_process": sp, "send_seq": ss, "is_destroy": destroy,
            "deliver_seq": s}


def _consistent(c, sk):
    """Components (more than one message) of the delivery-chain graph contracted to the
    messages first-delivered at two or more processes, as consistent.py counts them."""
    firsts = {p: [(s, msg, sp, ss) for s, (code, msg, first, sp, ss, _d)
                  in enumerate(sk.events[p]) if code == K.DELIVER and first]
              for p in sk.procs}
    at = Counter(msg for lst in firsts.values() for _s, msg, _sp, _ss in lst)
    rows, succ = [], {}
    for p, lst in firsts.items():
        prev = None
        for s, msg, sp, ss in lst:
            if at[msg] > 1:
                rows.append({"process": p, "deliver_seq": s, "msg": msg,
                             "sender_process": sp, "send_seq": ss})
                if prev is not None:
                    succ.setdefault(prev, []).append(msg)
                prev = msg
    comps = [sorted(cc) for cc in _sccs(succ) if len(cc) > 1]
    comps.sort(key=lambda cc: (len(cc), cc[0]))
    examples = []
    for cc in comps[:c.max_examples]:
        members = set(cc)
        mine = [r for r in rows if r["msg"] in members]
        cycle = shortest_cycle(mine)
        if cycle:
            origin = {r["msg"]: (r["sender_process"], r["send_seq"]) for r in mine}
            ex = cycle_example(cycle, len(cc), origin)
            for step in ex["edges"]:
                step["path"] = [step["before"], step["after"]]
            examples.append(ex)
    firsts = {r["msg"]: r["process"] for r in rows}
    return [min(firsts[m] for m in cc) for cc in comps], len(comps), examples


def _sccs(succ):
    """Strongly connected components of a graph {node: [successors]} (iterative Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    nodes = set(succ) | {b for bs in succ.values() for b in bs}
    for root in nodes:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on.add(v)
            nxt = succ.get(v, ())
            if i < len(nxt):
                work.append((v, i + 1))
                w = nxt[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            for w in nxt:
                if w in on:
                    low[v] = min(low[v], low[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
    return out


__all__ = ["DRIVER_MAX_CELLS", "SKELETON_COLUMNS", "Skeleton", "causal_and_consistent",
           "message_name"]
