# Invariants: the one shape of a check's result, whichever path decided it (the driver's
# array check, arrays/whole.py; or the Spark path by message, spark/checker.py): the same
# keys in the same order, the properties in PROPERTIES order, every example explained by
# explain.py. Only `seconds` and `timings` say how the answer was reached; everything else
# is a function of the trace.
# No Spark here: the driver-only path imports this.
from __future__ import annotations

from .explain import explain_summary

PROPERTIES = ("exactly_once", "fifo", "causal", "consistent", "node_rules")


def all_hold():
    """Every property holding (an empty trace's)."""
    return {name: {"ok": True, "violations": 0, "examples": []} for name in PROPERTIES}


def build(path, events, processes, props, seconds, timings):
    """The summary: `props` maps each property to its {ok, violations, examples[, method]}."""
    ordered = {k: props[k] for k in PROPERTIES}
    return explain_summary({"trace": path, "events": events, "processes": processes,
                            "ok": all(p["ok"] for p in ordered.values()),
                            "properties": ordered,
                            "seconds": round(seconds, 3),
                            "timings": {k: round(v, 3) for k, v in timings.items()}})


def judge(summary, promised=PROPERTIES):
    """Judge only the properties the system under test promises: each property gets
    `judged`, and the verdict `ok` is whether every judged one holds; the others stay
    in the summary as information. Changes `summary` in place."""
    for name, p in summary["properties"].items():
        p["judged"] = name in promised
    summary["judged"] = [n for n in PROPERTIES if n in promised]
    summary["ok"] = all(p["ok"] for p in summary["properties"].values() if p["judged"])
    return summary
