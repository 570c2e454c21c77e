"""The exchange between the tasks of a check on a cluster, as Arrow IPC files: the pieces
of the trace's files by bucket, and the linked events, each written once by the task
that made it (spark/by_message.py), read by the task linking a bucket and by every task
of the walk by column blocks (spark/walk_blocks.py), so no event travels through the
driver or a JVM stream.

Invariants: a file appears under its final name only complete (written under a name of
its own, then renamed: one atomic step), so a reader never sees a partial file; a writer
names its file itself (a random name), so a retried task never overwrites the file an
earlier attempt left, and only the files the driver collected from the tasks' summaries
are read. The files are read batch by batch, each batch let go once used, so a reader
holds one batch of them at a time. The directory belongs to the one check that made it
(`directory`, mode 0700: reachable by its user only), which removes it whole; its name
carries that process's id and start time, so the directory of a check that died before
removing it is removed by the next check of the same user under the same base, once the
kernel says that process is gone. Nothing here imports pyspark.
"""
from __future__ import annotations

import os
import uuid

# The columns of the linked events: what the per-process files carry (per_process.py),
# `node` for node_rules, and for the streamed walk (streamed.py) `receives` (an origin's
# receives: its clock is freed after the last) and `firsts` (a first delivery's message's
# first deliveries: the chains of consistent keep it from two).
COLUMNS = ("process", "seq", "kind_code", "msg", "first_delivery", "sender_process",
           "send_seq", "is_destroy", "node", "receives", "firsts")
# Rows per written batch: a reader holds about one batch of them at a time.
BATCH_ROWS = 1 << 20


PREFIX = "bus1py-linked-"


def directory(base=None):
    """A new directory for one check's files (mode 0700), under `base` (a path every
    executor can read, on a cluster of several machines a shared one) or the temporary
    directory; the directories there of this user's dead checks are removed first."""
    import tempfile
    base = base or tempfile.gettempdir()
    _remove_dead(base)
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-{_started(os.getpid())}-",
                            dir=base)


def _started(pid):
    """The start time of process pid (clock ticks since boot, from /proc), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _remove_dead(base):
    """Remove this user's check directories under base whose process is gone (no such
    process, or another one started since under its id)."""
    import shutil
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        parts = name[len(PREFIX):].split("-")
        if not name.startswith(PREFIX) or len(parts) < 3:
            continue
        path = os.path.join(base, name)
        try:
            if os.lstat(path).st_uid != os.getuid():
                continue
            pid, started = int(parts[0]), int(parts[1])
        except (OSError, ValueError):
            continue
        if _started(pid) != started:
            shutil.rmtree(path, ignore_errors=True)


def write(where, table, rows=BATCH_ROWS):
    """Write the Arrow table `table` as a new file under `where`, in batches of `rows`
    rows; its name."""
    import pyarrow as pa
    name = os.path.join(where, f"part-{uuid.uuid4().hex}.arrow")
    tmp = name + ".partial"
    with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
        for batch in table.to_batches(max_chunksize=rows):
            out.write_batch(batch)
    os.rename(tmp, name)
    return name


def slices(pieces, group):
    """{process: [(file, offset, rows)]}: where each process of `group` lies in `pieces`,
    each (file, its processes, their rows) of a file holding its rows by process (a
    process's rows one slice of it), in the pieces' order."""
    import numpy as np
    out = {}
    for name, procs, counts in pieces:
        offsets = np.concatenate([[0], np.cumsum(counts)])
        for i, p in enumerate(procs):
            if p in group:
                out.setdefault(p, []).append((name, int(offsets[i]), int(counts[i])))
    return out


def read_slice(name, offset, rows):
    """Rows offset..offset+rows-1 of the file `name`, as a table of its mapped pages."""
    import pyarrow as pa
    with pa.memory_map(name) as source:
        return pa.ipc.open_file(source).read_all().slice(offset, rows)


def read(files):
    """The record batches of `files` (Arrow IPC, or Parquet written by Spark's tasks), one
    at a time (none held here once yielded)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    for name in files:
        if name.endswith(".parquet"):
            yield from pq.ParquetFile(name).iter_batches(batch_size=BATCH_ROWS)
            continue
        with pa.OSFile(name, "rb") as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)
