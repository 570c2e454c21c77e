"""The stress trace writer: bounded batches, seq without gaps across files, and first
files of different lengths per process (so processes running one workload do not all stop
to write Parquet at the same moment)."""
from __future__ import annotations

import os

import pyarrow.parquet as pq

from bus1py.stress.trace import TraceWriter


def _files(directory, process):
    names = sorted(f for f in os.listdir(directory) if f.startswith(f"p{process:05d}-"))
    return [pq.read_table(os.path.join(directory, f)) for f in names]


def test_first_flushes_are_spread_and_batches_bounded(tmp_path):
    batch, procs = 1000, 64
    firsts = []
    for p in range(procs):
        w = TraceWriter(str(tmp_path), p, batch_rows=batch)
        for i in range(2500):
            w.record("internal", None, i)
        w.flush()
        tables = _files(tmp_path, p)
        sizes = [t.num_rows for t in tables]
        assert sum(sizes) == 2500 and max(sizes) <= batch, sizes
        assert all(s == batch for s in sizes[1:-1]), sizes
        seqs = [s for t in tables for s in t.column("seq").to_pylist()]
        assert seqs == list(range(2500))
        firsts.append(sizes[0])
    assert min(firsts) >= batch // 4 and max(firsts) <= batch
    # spread over [1/4, 1] of a batch: no tenth of that range holds more than a fifth of them
    span = 0.75 * batch / 10
    for lo in range(batch // 4, batch, int(span)):
        assert sum(lo <= f < lo + span for f in firsts) <= procs // 5, sorted(firsts)
