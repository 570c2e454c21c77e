"""A trace's rows read once with pyarrow, validated, and
laid out as numpy arrays, one entry per event in (process, seq) order.

Invariants: the rules of a trace (SPEC section 7), checked in one order with one wording
of the TraceError that names the first broken row (per-row rules, seq numbering, one
origin per id, no dangling receive), which the Spark path repeats for a trace its tasks
find malformed (spark/malformed.py). Stamps are not read. Vectorised: no Python
loop runs over all rows. Nothing here imports pyspark: a small check never starts a JVM.
"""
from __future__ import annotations

from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import kinds as K
from ..load import ROW_RULES, TraceError, fmt_row, read_arrow


class _Unnamed:
    """The trace of rows read without their files (Events.of_messages)."""
    files = ("",)


_UNNAMED = _Unnamed()


def _codes():
    """The kind names as an Arrow array whose index is the kind code."""
    return pa.array([K.NAMES[c] for c in range(K.INTERNAL + 1)])


class Events:
    """A validated trace on the driver. Arrays, one entry per event in (process, seq)
    order: process, seq, code (kinds.py), msg, node/has_node (a delivery's own node, else
    its origin's), wall/has_wall, origin (row index of its message's or signal's origin;
    -1 for internal rows), first (a receive that is its process's first of that id),
    dup (a first delivery delivered again there), has_msg (msg not null), dest_of
    ((origin row, destination) pairs of message origins, distinct) and `order` (row i here is row order[i] as read, file after
    file; None when the rows were read in that order)."""

    def __init__(self, trace):
        t = read_arrow(trace)
        self.trace = trace
        self.n = t.num_rows
        code = pc.index_in(t.column("kind"), _codes())    # null: a null or unknown kind
        # the per-row rules run beside the rest (pyarrow computes without the GIL): when
        # a row breaks one, that is the error raised, whatever the rest met meanwhile
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(1) as pool:
            rows = pool.submit(_check_rows, t, code, trace)
            try:
                self._columns(t, code)
            except Exception:
                rows.result()
                raise
            rows.result()

    @classmethod
    def of_messages(cls, t):
        """The events of some messages and signals, every row naming one of their ids (and
        any internal rows), for exactly_once by message (spark/by_message.py). t: process,
        seq, kind_code, msg, dests, node, in any order, each row passing the per-row rules.
        Not checked here: the seq numbering (a process's rows are spread over the
        partitions). A broken rule raises TraceError without file names: the caller has
        the row named (spark/malformed.py)."""
        ev = cls.__new__(cls)
        ev.trace, ev.n = _UNNAMED, t.num_rows
        order = ev.order = _order(_np(t, "process"), _np(t, "seq"))

        def col(name, fill=None):
            a = _np(t, name, fill)
            return a if order is None else a[order]
        ev.files = np.zeros(ev.n, np.int32)
        ev.process, ev.seq = col("process").astype(np.int64), col("seq")
        ev.code, ev.msg = col("kind_code").astype(np.int8), col("msg", fill=0)
        ev.procs = ev.process[_starts(ev.process)]
        own_node = col("node", fill=0)
        has_own = _valid(t, "node") if order is None else _valid(t, "node")[order]
        ev._link(own_node, has_own)
        ev._dest_lists = t.column("dests")
        ev._firsts()
        return ev

    def _link(self, own_node, has_own):
        """origin, node, has_node, sender, send_seq, is_destroy (rows validated)."""
        self._link_origins()
        o = np.where(self.origin >= 0, self.origin, 0)
        linked = self.origin >= 0
        self.node = np.where(has_own & (self.code == K.DELIVER), own_node, own_node[o])
        self.has_node = np.where(self.code == K.DELIVER, has_own | has_own[o],
                                 has_own[o] & linked)
        self.sender = np.where(linked, self.process[o], -1)
        self.send_seq = np.where(linked, self.seq[o], -1)
        self.is_destroy = linked & (self.code[o] == K.DESTROY)

    def _columns(self, t, code):
        """The per-event arrays from the table as read (rows in file order)."""
        order = self.order = _order(_np(t, "process"), _np(t, "seq"))

        def col(name, fill=None):
            a = _np(t, name, fill)
            return a if order is None else a[order]

        def valid(name):
            a = _valid(t, name)
            return a if order is None else a[order]
        self.files = col("file")
        self.process = col("process").astype(np.int64)
        self.seq = col("seq")
        self.code = pc.fill_null(code, -1).to_numpy().astype(np.int8)
        if order is not None:
            self.code = self.code[order]
        self.msg, self.has_msg = col("msg", fill=0), valid("msg")
        self._check_numbering()
        self.procs = self.process[_starts(self.process)]
        self.wall, self.has_wall = col("wall_ns", fill=0), valid("wall_ns")
        self._link(col("node", fill=0), valid("node"))
        self._dest_lists = t.column("dests")
        self._firsts()

    def name_file(self, i) -> str:
        import os
        return os.path.basename(self.trace.files[self.files[i]])

    def _check_numbering(self):
        """Each process's seq runs 0, 1, 2, ... (rows are in (process, seq) order)."""
        p, s = self.process, self.seq
        same = np.zeros(self.n, bool)
        same[1:] = p[1:] == p[:-1]
        prev = np.where(same, np.roll(s, 1), -1)
        bad = np.flatnonzero(np.where(same, s != prev + 1, s != 0))
        if not len(bad):
            return
        i = bad[0]       # the first in (process, seq) order
        what = seq_problem(int(s[i]), int(prev[i]))
        j = np.flatnonzero((p == p[i]) & (s == s[i])).min()
        raise TraceError(f"{self.name_file(j)}: column 'seq' of process {int(p[i])}: {what}")

    def _link_origins(self):
        """origin[i] for every non-internal row: one origin per (space, id), each receive's
        found, else TraceError (several origins before dangling receives, messages before
        signals)."""
        code, msg = self.code, self.msg
        self.origin = np.full(self.n, -1, np.int64)
        spaces = []
        for signal in (False, True):
            is_origin = (code == K.SIGNAL_SEND) if signal else (code <= K.DESTROY)
            oi = np.flatnonzero(is_origin)
            oi = oi[stable_order(msg[oi])]
            om = msg[oi]
            again = np.flatnonzero(om[1:] == om[:-1])
            if len(again):
                self._several_origins(signal, om, oi, again)
            spaces.append((signal, oi, om))
        for signal, oi, om in spaces:
            self.origin[oi] = oi
            ri = np.flatnonzero(code == (K.SIGNAL_RECV if signal else K.DELIVER))
            pos = np.minimum(locate(om, msg[ri]), max(len(om) - 1, 0))
            found = (om[pos] == msg[ri]) if len(om) else np.zeros(len(ri), bool)
            if not found.all():
                self._dangling(signal, ri[~found])
            self.origin[ri] = oi[pos]

    def _several_origins(self, signal, om, oi, again):
        rows = oi[np.isin(om, om[again])]
        # the least (id, process, seq) is named
        i = rows[np.lexsort((self.seq[rows], self.process[rows], self.msg[rows]))[0]]
        m = int(self.msg[i])
        n = int((om == m).sum())
        space = "signal" if signal else "message"
        raise TraceError(f"{self.name_file(i)}: column 'msg': {space} id {m} is sent by {n} "
                         f"rows (ids must be unique in the trace)")

    def _dangling(self, signal, rows):
        i = rows[np.lexsort((self.seq[rows], self.process[rows], self.msg[rows]))[0]]
        m = int(self.msg[i])
        r = {"process": int(self.process[i]), "seq": int(self.seq[i]),
             "kind": K.NAMES[int(self.code[i])], "msg": m}
        what = "receives unknown signal" if signal else "delivers unknown message"
        src = "no signal_send row" if signal else "no send or destroy row"
        raise TraceError(f"{self.name_file(i)}: column 'msg': row {fmt_row(r)} {what} {m} "
                         f"({src} has that id)")

    @cached_property
    def starts(self):
        """Where each process's events begin (positions, ascending)."""
        return np.searchsorted(self.process, self.procs)

    @cached_property
    def dest_of(self):
        """(origin row, destination) pairs of message origins, distinct (built on first
        use: only exactly_once reads them, beside the walk)."""
        is_msg = np.flatnonzero(self.code <= K.DESTROY)
        read_at = is_msg if self.order is None else self.order[is_msg]
        lists = self._dest_lists.take(pa.array(read_at))
        counts = pc.list_value_length(lists).to_numpy(zero_copy_only=False)
        values = pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(np.int64)
        rows = np.repeat(is_msg, counts).astype(np.int64)
        # one sortable key per pair, (row, destination) in lexicographic order (a row
        # index is below 2^31, a destination an int32): sorted and deduplicated
        key = distinct_sorted((rows << 32) + (values + 2 ** 31))
        return np.stack([key >> 32, (key & 0xFFFFFFFF) - 2 ** 31], axis=1)

    def _firsts(self):
        """first and dup for receives: sorted by (origin, process, seq)."""
        self.first = np.zeros(self.n, bool)
        self.dup = np.zeros(self.n, bool)
        ri = np.flatnonzero(self.code >= K.DELIVER)
        ri = ri[self.code[ri] != K.INTERNAL]
        # ri is in (process, seq) order, so a stable sort by origin gives (origin,
        # process, seq) order
        ri = ri[stable_order(self.origin[ri])]
        key_o, key_p = self.origin[ri], self.process[ri]
        new = np.ones(len(ri), bool)
        new[1:] = (key_o[1:] != key_o[:-1]) | (key_p[1:] != key_p[:-1])
        self.first[ri[new]] = True
        again = np.zeros(len(ri), bool)
        again[:-1] = ~new[1:]
        self.dup[ri[new & again]] = True
        self.dup &= self.code == K.DELIVER


def _starts(keys):
    """Where each run of equal keys begins (a boolean mask)."""
    new = np.ones(len(keys), bool)
    new[1:] = keys[1:] != keys[:-1]
    return new


def distinct_sorted(x):
    """The distinct values of x, ascending (a sort and a comparison: numpy's hash-based
    unique is several times slower on a million distinct values)."""
    s = np.sort(x)
    return s[_starts(s)]


def stable_order(key):
    """np.argsort(key, kind="stable") of integer keys. When the key's range and the
    positions fit 63 bits together, each position rides in the low bits of its key and
    the values are sorted (numpy's vectorised sort of values is about ten times faster
    than any argsort on tens of millions)."""
    n = len(key)
    if n < 2:
        return np.arange(n)
    lo, hi = int(key.min()), int(key.max())
    bits = (n - 1).bit_length()
    if (hi - lo) >> (63 - bits):
        return np.argsort(key, kind="stable")
    packed = (key.astype(np.int64) - lo) << bits
    packed |= np.arange(n, dtype=np.int64)
    packed.sort()
    packed &= (1 << bits) - 1
    return packed


def lex_order(major, minor):
    """np.lexsort((minor, major)): rows by (major, minor), ties in their order, by one
    key when the two ranges multiply below 2^62."""
    if len(major) < 2:
        return np.arange(len(major))
    mlo, nlo = int(major.min()), int(minor.min())
    width = int(minor.max()) - nlo + 1
    if (int(major.max()) - mlo + 1) * width >= 2 ** 62:
        return np.lexsort((minor, major))
    return stable_order((major.astype(np.int64) - mlo) * width + (minor.astype(np.int64) - nlo))


def locate(sorted_b, a):
    """np.searchsorted(sorted_b, a), the queries searched in ascending order: binary
    searches in order stay in cache, random ones miss (20x slower on a few million)."""
    if len(a) > 1 and not np.all(a[1:] >= a[:-1]):
        order = stable_order(a)
        out = np.empty(len(a), np.int64)
        out[order] = np.searchsorted(sorted_b, a[order])
        return out
    return np.searchsorted(sorted_b, a)


def member(a, sorted_b):
    """a[i] in sorted_b, for each i (sorted_b ascending)."""
    if not len(sorted_b):
        return np.zeros(len(a), bool)
    at = np.minimum(locate(sorted_b, a), len(sorted_b) - 1)
    return sorted_b[at] == a


def _order(process, seq):
    """The permutation that sorts rows by (process, seq), or None when they already are
    (a producer writing each process's events in order: no sort, no copy)."""
    p, s = process, seq
    if np.all(p[1:] >= p[:-1]) and np.all((p[1:] != p[:-1]) | (s[1:] > s[:-1])):
        return None
    return lex_order(p, s)


def _np(t, name, fill=None):
    col = t.column(name)
    if fill is not None:
        col = pc.fill_null(col, fill)
    return col.to_numpy()


def _valid(t, name):
    return pc.is_valid(t.column(name)).to_numpy(zero_copy_only=False)


def _check_rows(t, code, trace):
    """The per-row rules (load.ROW_RULES, in order); the first failing row is named as
    the least (file, process, seq, kind, msg), nulls first."""
    kind = t.column("kind")
    null = {n: pc.is_null(t.column(n)) for n in ("process", "seq", "kind", "msg", "dests",
                                                 "node")}
    is_msg = pc.or_(pc.equal(code, K.SEND), pc.equal(code, K.DESTROY))
    is_msg = pc.fill_null(is_msg, False)
    lengths = pc.fill_null(pc.list_value_length(t.column("dests")), 0)
    flat_null = pc.is_null(pc.list_flatten(t.column("dests")))
    parents = pc.list_parent_indices(t.column("dests"))
    has_null_dest = np.zeros(t.num_rows, bool)
    has_null_dest[parents.to_numpy()[flat_null.to_numpy(zero_copy_only=False)]] = True
    conditions = [
        null["process"], null["seq"], pc.fill_null(pc.less(t.column("seq"), 0), False),
        null["kind"], pc.and_(pc.is_null(code), pc.invert(null["kind"])),
        pc.and_(pc.fill_null(pc.not_equal(code, K.INTERNAL), True), null["msg"]),
        pc.and_(is_msg, pc.or_(null["dests"], pc.equal(lengths, 0))),
        pc.and_(is_msg, pa.array(has_null_dest)),
        pc.and_(pc.fill_null(pc.equal(code, K.DESTROY), False), null["node"])]
    problem = np.full(t.num_rows, -1)
    for i, cond in reversed(list(enumerate(conditions))):
        problem[np.asarray(cond.to_numpy(zero_copy_only=False), bool)] = i
    bad = np.flatnonzero(problem >= 0)
    if not len(bad):
        return
    import os
    rows = [(os.path.basename(trace.files[f]), p, s, k, m, i) for f, p, s, k, m, i in zip(
        t.column("file").take(bad).to_pylist(), t.column("process").take(bad).to_pylist(),
        t.column("seq").take(bad).to_pylist(), kind.take(bad).to_pylist(),
        t.column("msg").take(bad).to_pylist(), problem[bad])]
    f, p, s, k, m, i = min(rows, key=lambda r: tuple((v is not None, v) for v in r[:5]))
    r = {"process": p, "seq": s, "kind": k, "msg": m}
    raise TraceError(f"{f}: row {fmt_row(r)}: {ROW_RULES[i].format(kind=k)}")


def seq_problem(seq, before):
    """The words for a process's seq `seq` following `before` (-1: its first row) where it
    should be before + 1: the driver's and spark/malformed.py's alike."""
    if before < 0:
        return f"first seq is {seq}, expected 0"
    if seq == before:
        return f"duplicate seq {seq}"
    return f"gap in seq: {before} is followed by {seq}"
