# Invariants: the one shape of a check's result, whichever engine decided it (Spark,
# checker.py; or the driver alone, local.py): the same keys in the same order, the
# properties in PROPERTIES order, every example explained by explain.py. Only `seconds` and
# `timings` say how the answer was reached; everything else is a function of the trace.
# No Spark here: the driver-only path imports this.
from __future__ import annotations

from .explain import explain_summary

PROPERTIES = ("exactly_once", "fifo", "causal", "consistent", "node_rules")


def all_hold(by_witness=()):
    """Every property holding, those named in by_witness decided by the stamp witness."""
    return {name: dict({"ok": True, "violations": 0, "examples": []},
                       **({"method": "stamp witness"} if name in by_witness else {}))
            for name in PROPERTIES}


def build(path, events, processes, screen, witness, props, rounds, seconds, timings):
    """The summary: `props` maps each property to its {ok, violations, examples[, method]}."""
    ordered = {k: props[k] for k in PROPERTIES}
    return explain_summary({"trace": path, "events": events, "processes": processes,
                            "screen": screen, "witness": witness,
                            "ok": all(p["ok"] for p in ordered.values()),
                            "properties": ordered, "rounds": rounds,
                            "seconds": round(seconds, 3),
                            "timings": {k: round(v, 3) for k, v in timings.items()}})
