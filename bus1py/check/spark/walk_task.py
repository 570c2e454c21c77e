# Invariants: what a task of the walk (walk_blocks.py's streamed walk by column blocks)
# gives out and how the driver reads it: rows of OUT_SCHEMA, one per violation (the
# process; the details) and one summary row (counts, examples and the walk's facts, as
# JSON); task i decides causal for its block, consistent in task 0, fifo and node_rules
# in task 1 (task_properties). A summary saying `malformed` means a process's numbering
# is broken, and nothing is decided. A producer's vector-clock column is a claim, never
# trusted: its status (vclock.py, and the walk's check) is reported beside causal.
from __future__ import annotations

import json

OUT_SCHEMA = "rec string, process int, info string"


# properties the task decides beside the walk, from the same layout (arrays/properties.py)
BESIDE = ("fifo", "node_rules")


def task_properties(want, i, tasks):
    """The properties of `want` task i of the walk by column blocks decides (of `tasks`):
    causal for its block, consistent in task 0, fifo and node_rules in task 1 (0 alone)."""
    return [name for name in want if name == "causal" or name == "consistent" and i == 0
            or name in BESIDE and i == 1 % tasks]


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
