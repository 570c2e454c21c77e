"""Per-process event files, and their reading batch by batch, for the streamed walk
(streamed.py): the linked events of one process in seq order, one Arrow IPC file a
process, written once by the task that gathers that process from the linked files
(arrays/linked_files.py), read by every task of the walk a batch at a time.

Invariants: a file holds exactly its process's events numbered 0, 1, 2, ... (checked
where it is written: a ValueError otherwise, so a walk never reads a broken numbering),
in batches of batch_rows(processes) rows, so the batch holding seq s is seq // those. A
linked file holds its events in (process, seq) order, so a process's rows there are one
slice, found from the counts its task reported. A reader holds one batch of each process
at a time. Nothing here imports pyspark.
"""
from __future__ import annotations

import numpy as np

# Rows of a batch of a per-process file: a walk task holds one batch of each process, so
# the batches of all processes together hold about STREAM_ROWS_ALL rows (batch_rows), and
# never fewer than MIN_ROWS a process.
STREAM_ROWS_ALL = 1 << 20
MIN_ROWS = 1 << 10


def batch_rows(processes):
    """The rows of a batch of each per-process file of a trace of `processes` processes."""
    return max(MIN_ROWS, STREAM_ROWS_ALL // max(1, processes))
# The columns of a per-process file (the process is the file's), and the prefix of the
# columns of a producer's clock, one int32 column an entry, when the trace has one
CLAIM = "claim"
COLUMNS = ("seq", "kind_code", "msg", "first_delivery", "sender_process", "send_seq",
           "is_destroy", "node", "receives", "firsts")


def write_group(linked, group, where, rows, claims=None, P=0):
    """Gather the processes of `group` from the linked files and write each one's events,
    sorted by seq, to a file of its own under `where`: ({process: file name}, {process:
    (why, seq) of its first clock breaking a shape rule}). linked: the (file, its
    processes, their counts) of every linked file; claims: the pieces of a producer's
    clock column (claims.split's) whose clocks of P entries the files then carry as
    columns CLAIM0.., or None. One process at a time: its slices are mapped, copied out in
    seq order and let go before the next."""
    import pyarrow as pa

    from . import claims as C
    from . import linked_files
    where_of = linked_files.slices(linked, group)
    clocks_of = linked_files.slices(claims, group) if claims is not None else {}
    out, broken = {}, {}
    for p in sorted(group):
        parts = [linked_files.read_slice(*at) for at in where_of.get(p, ())]
        t = pa.concat_tables(parts).select(list(COLUMNS)) if parts else None
        n = t.num_rows if t is not None else 0
        order = seq_order(t.column("seq").to_numpy() if n else np.zeros(0, np.int64))
        if order is None:
            raise ValueError(f"the events of process {p} are not numbered 0,1,2,...")
        t = t.take(order) if n else _empty()
        if claims is not None and n:
            clocks, bad = C.gather(clocks_of.get(p, ()), P, n)
            if bad is not None:
                broken[p] = (*bad, _event(p, t, bad[1]))
            else:       # each column a view of the clocks' rows (no copy)
                for c in range(P):
                    t = t.append_column(f"{CLAIM}{c}", pa.array(clocks[c]))
                del clocks
        out[p] = linked_files.write(where, t, rows)
        del parts, t, order
    return out, broken
def _event(process, t, seq):
    """Event seq of a process's table `t` (in seq order), as a counterexample's event."""
    from .. import kinds as K
    from ..examples import event
    r = {c: t.column(c)[seq].as_py() for c in ("kind_code", "msg", "sender_process",
                                               "send_seq")}
    code = int(r["kind_code"])
    o = (r["sender_process"], r["send_seq"]) if code in K.RECEIVES else None
    return event(process, seq, K.NAMES[code], None if code == K.INTERNAL else r["msg"],
                 origin=o)


def seq_order(seq):
    """The rows of seq in seq order, when seq numbers them 0, 1, 2, ... in some order
    (each seq's row placed at its seq: no sort); else None."""
    n = len(seq)
    if n and (seq.min() < 0 or seq.max() >= n):
        return None
    order = np.full(n, -1, np.int64)
    order[seq] = np.arange(n)
    # n seqs in [0, n): a repeated one leaves a place no row fills
    return order if not n or order.min() >= 0 else None


def _empty():
    import pyarrow as pa
    return pa.table({c: pa.array([], pa.int64()) for c in COLUMNS})


class Streams:
    """The per-process files of a trace, read batch by batch: files[slot] the file of the
    slot-th process of `procs` (ascending ids), counts[slot] its events. A batch is a dict
    of numpy arrays: kind, first (int8), sslot (the sender's slot, 0 off receives), sseq,
    count (the receives of an origin), firsts (the first deliveries of a first delivery's
    message), and on asking (`extra`) seq, msg, is_destroy, node, has_node."""

    # claims: the files carry a producer's clock column (claim0, claim1, ...: per_process
    # .CLAIM); claim_cols: (lo, hi), the columns a batch then gives as `claim`, or None
    claim_cols = None
    # backward: each process's batches are given last to first, each reversed (reversed())
    backward = False

    def __init__(self, procs, files, counts, claims=False):
        self.claims = claims
        self.procs = np.asarray(procs, np.int64)
        self.P = len(self.procs)
        self.rows_per_batch = batch_rows(self.P)
        self.files = list(files)
        self.counts = np.asarray(counts, np.int64)
        self.start = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self.rewind()

    def rewind(self):
        """Every process back to its first batch (a new pass)."""
        self._next = [0] * self.P

    def reversed(self):
        """These streams giving each process's events last to first (a pass of its own)."""
        return self._like(backward=True)

    def claiming(self, lo, hi):
        """These streams giving each batch the clock column's columns lo..hi-1 as `claim`
        (a pass of its own; the files carry the column: `claims`)."""
        return self._like(claim_cols=(lo, hi))

    def _like(self, **change):
        import copy
        other = copy.copy(self)
        vars(other).update(change)
        other.rewind()
        return other

    def _batches(self, slot):
        return -(-int(self.counts[slot]) // self.rows_per_batch)

    def done(self, slot):
        return self._next[slot] >= self._batches(slot)

    def finished(self):
        return all(self.done(s) for s in range(self.P))

    def next(self, slot):
        """The next batch of process `slot`, or None past its last."""
        if self.done(slot):
            return None
        i = self._next[slot]
        self._next[slot] += 1
        if self.backward:
            b = self._read(slot, self._batches(slot) - 1 - i)
            return {k: np.ascontiguousarray(v[::-1]) for k, v in b.items()}
        return self._read(slot, i)

    def _read(self, slot, i, extra=False):
        # mapped, only the columns read are touched, and copied out before the map closes
        import pyarrow as pa
        with pa.memory_map(self.files[slot]) as source:
            return self.arrays(pa.ipc.open_file(source).get_batch(i), extra)

    def arrays(self, b, extra=False):
        """A record batch of a per-process file as the walk's arrays (copies: nothing of
        the batch is held after)."""
        def col(name, dtype, fill=0):
            c = b.column(name)
            if c.null_count:
                c = c.fill_null(fill)
            return np.array(c.to_numpy(zero_copy_only=False), dtype, copy=True)
        kind = col("kind_code", np.int8)
        recv = (kind == 3) | (kind == 4)
        sender = col("sender_process", np.int64, -1)
        sslot = np.where(recv, np.searchsorted(self.procs, sender), 0).astype(np.int32)
        out = {"kind": kind, "first": col("first_delivery", np.int8),
               "sslot": sslot, "sseq": np.where(recv, col("send_seq", np.int64), 0),
               "count": col("receives", np.int32), "firsts": col("firsts", np.int32)}
        if self.claim_cols:
            out["claim"] = np.ascontiguousarray(np.stack(
                [b.column(f"{CLAIM}{c}").to_numpy() for c in range(*self.claim_cols)],
                axis=1), np.int32).reshape(b.num_rows, -1)
        if extra:
            node = b.column("node")
            out.update(seq=col("seq", np.int64), msg=col("msg", np.int64),
                       is_destroy=col("is_destroy", np.bool_), sender=sender,
                       node=col("node", np.int64),
                       has_node=node.is_valid().to_numpy(zero_copy_only=False))
        return out

    def batches(self, slot):
        """The batches of process `slot`, first to last (a pass of its own)."""
        for i in range(self._batches(slot)):
            yield self._read(slot, i)

    def rows(self, slot, seq0=0, seq1=None):
        """The batches of process `slot` from seq0 on (to seq1, excluded, when given), with
        the extra columns."""
        n = self.rows_per_batch
        seq1 = int(self.counts[slot]) if seq1 is None else seq1
        for i in range(seq0 // n, -(-seq1 // n)):
            b = self._read(slot, i, extra=True)
            lo, hi = max(seq0 - i * n, 0), seq1 - i * n
            if lo or hi < len(b["kind"]):
                b = {k: v[lo:hi] for k, v in b.items()}
            yield b

    def row(self, slot, seq):
        """The event seq of process `slot`, as a dict of scalars."""
        n = self.rows_per_batch
        b = self._read(slot, seq // n, extra=True)
        return {k: v[seq % n] for k, v in b.items()}
