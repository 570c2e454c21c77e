"""The rows of a trace laid out by position for the compiled kernels of
bus1py.check._walk (csrc/check/walk.c) and the walk (walk.py).

Invariants: a process's events sit in seq order and processes in ascending id order, so
the position of an event is start[slot] + seq and a receive reaches its origin without a
join (src); the numbering 0, 1, 2, ... per process is checked while the rows are placed
(a ValueError otherwise), so a layout is never built over a broken numbering; rows given
as batches are let go as they are placed. Nothing here imports pyspark.
"""
from __future__ import annotations

import numpy as np

from .. import kinds as K
from ..examples import event

# The columns the kernel reads (vclock only when the trace carries one).
COLUMNS = ("process", "seq", "kind_code", "msg", "first_delivery", "sender_process",
           "send_seq", "is_destroy")


class Layout:
    """The rows of a trace as arrays by position. procs: ascending process ids; span: the
    tests' group_span (clock columns shared by process id modulo span) or None."""

    def __init__(self, table, procs, span, extra=(), counts=None):
        """The layout of the rows of `table`: an Arrow table, or a list of record batches
        that is emptied as they are placed (each batch let go once its rows are, so the
        rows and their layout are not held twice), or, with `counts` (the events of each
        process of procs), any iterable of batches, read once. extra: more columns to
        place, as self.extra[name] = (values with nulls as 0, validity)."""
        if counts is None:
            batches = table.to_batches() if not isinstance(table, list) else table
            self._frame_of(procs, span, (b.column("process") for b in batches))
            batches = _drain(batches)
        else:
            self._frame_of(procs, span, (), counts)
            batches = iter(table)
        n = self.n

        def full(dtype, fill=0):
            return np.full(n, fill, dtype=dtype)
        placed = {"kind_code": full(np.int8, K.INTERNAL), "msg": full(np.int64),
                  "first_delivery": full(np.int8), "is_destroy": full(np.bool_),
                  "sender_process": full(np.int64, -1), "send_seq": full(np.int64, -1)}
        fills = {"kind_code": K.INTERNAL, "msg": 0, "first_delivery": False,
                 "is_destroy": False, "sender_process": -1, "send_seq": -1}
        self.extra = {name: (full(np.int64), full(np.bool_)) for name in extra}
        filled = np.zeros(n, bool)
        bad = ValueError("rows are not numbered 0,1,2,... per process below 2^31")
        rows = 0
        for b in batches:
            seq = b.column("seq").to_numpy(zero_copy_only=False)
            rows += len(seq)
            if len(seq) and (seq.min() < 0 or seq.max() >= 2 ** 31 - 1):
                raise bad
            pos = self.start[self._slots(b.column("process"))] + seq
            if len(pos) and pos.max() >= n:
                raise bad
            filled[pos] = True
            for name, out in placed.items():
                col = b.column(name)
                if col.null_count:
                    col = col.fill_null(fills[name])
                out[pos] = col.to_numpy(zero_copy_only=False)
            for name, (values, valid) in self.extra.items():
                col = b.column(name)
                values[pos] = col.fill_null(0).to_numpy(zero_copy_only=False)
                valid[pos] = col.is_valid().to_numpy(zero_copy_only=False)
            del b, seq, pos
        # every seq at least 0 and every position inside the rows: the numbering holds when
        # n rows fill the n positions, no two on one (by induction over the processes in
        # order, each one's rows then fill exactly its own positions)
        if rows != n or not filled.all():
            raise bad
        del filled
        self._link(placed.pop("kind_code"), placed.pop("msg"), placed.pop("first_delivery"),
                   placed.pop("is_destroy"), placed.pop("sender_process"),
                   placed.pop("send_seq"))

    @classmethod
    def of_events(cls, ev, span=None):
        """The layout of events.Events (validated, in (process, seq) order, so position k
        is row k): Events' own arrays, not copies."""
        lay = cls.__new__(cls)
        lay._frame_of([int(p) for p in ev.procs], span, [ev.process])
        lay.extra = {}
        lay._link(ev.code, ev.msg, ev.first.view(np.int8), ev.is_destroy, ev.sender,
                  ev.send_seq)
        return lay

    def _frame_of(self, procs, span, process_chunks, counts=None):
        """Processes, their columns and where each one's events start, from the process
        column in chunks (ids all among procs), or from the counts of each one's events."""
        self.procs = np.asarray(procs, dtype=np.int64)
        P = len(self.procs)
        self.col = (self.procs % span if span else np.arange(P)).astype(np.int32)
        self.ncols = int(self.col.max()) + 1 if P else 0
        counts = np.zeros(P, np.int64) if counts is None else np.asarray(counts, np.int64)
        for chunk in process_chunks:
            counts += np.bincount(self._slots(chunk), minlength=P)[:P]
        self.start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.n = int(self.start[-1])
        self.slot_of = np.repeat(np.arange(P, dtype=np.int32), counts)
        self.receivers = None    # for path(), built on first use

    def _slots(self, process):
        """The slot of each process id (an Arrow or numpy array of ids among procs)."""
        if not isinstance(process, np.ndarray):
            process = process.to_numpy(zero_copy_only=False)
        slot = np.searchsorted(self.procs, process)
        if len(slot) and (slot.max() >= len(self.procs)
                          or np.any(self.procs[slot] != process)):
            raise ValueError("a row's process is not among the trace's processes")
        return slot

    def _link(self, kind, msg, first, is_destroy, sender, send_seq):
        # a receive's send seq is kept only in src (its origin's position): the seq is
        # src - start[slot_of[src]]
        self.kind, self.msg, self.first, self.is_destroy = kind, msg, first, is_destroy
        recv = (kind == K.DELIVER) | (kind == K.SIGNAL_RECV)
        sslot = np.searchsorted(self.procs, sender)
        sslot[~recv] = 0
        self.src = self.start[sslot]
        self.src += send_seq
        self.src[~recv] = -1
        self.sender_col = self.col[sslot]
        self.sender_col[~recv] = 0

    def positions(self, table):
        """The positions of other rows of the same trace (process, seq columns)."""
        proc = table.column("process").to_numpy(zero_copy_only=False).astype(np.int64)
        seq = table.column("seq").to_numpy(zero_copy_only=False).astype(np.int64)
        return self.start[np.searchsorted(self.procs, proc)] + seq

    def process_at(self, k):
        return int(self.procs[self.slot_of[k]])

    def seq_at(self, k):
        return int(k - self.start[self.slot_of[k]])

    def event_at(self, k):
        """Position k as a counterexample event."""
        code = int(self.kind[k])
        o = None
        if code in (K.DELIVER, K.SIGNAL_RECV):
            o = (self.process_at(self.src[k]), self.seq_at(self.src[k]))
        return event(self.process_at(k), self.seq_at(k), K.NAMES[code],
                     None if code == K.INTERNAL else int(self.msg[k]), origin=o)


def _drain(batches):
    """The list's batches, each let go once taken (the caller then holds the only
    reference)."""
    batches.reverse()
    while batches:
        yield batches.pop()
