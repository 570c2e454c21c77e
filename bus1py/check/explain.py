# Invariants: the one place that turns counterexample data (examples.py) into words, as
# Elle's explainers do: the analysis never writes prose, and tests compare data. Messages are
# named by their origin event ("p6:757"), never by raw id; a name that is unknown falls back
# to "message <id>". explain() only adds keys ("why", and "steps" for paths), never changes
# the data it was given.
from __future__ import annotations


def name(ev) -> str:
    """How a person reads the message of event `ev`."""
    if ev.get("message"):
        return ev["message"]
    return f"message {ev.get('msg')}"


def _event_words(ev) -> str:
    at = f"p{ev['process']}:{ev['seq']}"
    if ev["kind"] == "deliver":
        return f"{at} deliver of {name(ev)}"
    if ev["kind"] == "signal_recv":
        return f"{at} signal_recv of signal {ev.get('msg')}"
    return f"{at} {ev['kind']}"


def edge_words(a, b) -> str:
    """Why event a happened-before event b, for one edge of a path."""
    if a["process"] == b["process"]:
        return f"{_event_words(a)} precedes {_event_words(b)} at process {a['process']}"
    verb = "received" if a["kind"] == "signal_send" else "delivered"
    return f"{_event_words(a)}, {verb} at p{b['process']}:{b['seq']}"


def path_words(path) -> list[str]:
    """One line per edge of a happened-before path."""
    return [edge_words(a, b) for a, b in zip(path, path[1:])]


def _exactly_once(ex):
    m = name(ex["message"])
    return {"lost": f"{m} was never delivered at destination process {ex['process']}",
            "duplicated": f"{m} was delivered {ex['deliveries']} times at process "
                          f"{ex['process']}",
            "not a destination": f"{m} was delivered at process {ex['process']}, which is "
                                 f"not among its destinations"}[ex["problem"]]


def _fifo(ex):
    e, l = ex["earlier"], ex["later"]
    return (f"process {e['process']} sent {name(e)} before {name(l)}, but process "
            f"{ex['process']} delivered {name(l)} first")


def _causal(ex):
    e, l = ex["earlier"], ex["later"]
    # a path search that ran out of its budget (walk.PATH_BUDGET) leaves path None
    hops = len(ex["path"]) - 1 if ex.get("path") else None
    via = (f" (a chain of {hops} happened-before edges)" if hops
           else " (a chain too long to search for)" if "path" in ex and hops is None
           else "")
    return (f"send of {name(e)} happened-before send of {name(l)}{via}, but process "
            f"{ex['process']} delivered {name(l)} first")


def _consistent(ex):
    parts = [f"{name(s['before'])} before {name(s['after'])} at process {s['process']}"
             for s in ex["edges"]]
    return ("no global order: " + " -> ".join(parts)
            + f" (component of {ex['size']} messages)")


def _node_rules(ex):
    return (f"process {ex['process']} delivered NODE_DESTROY {name(ex['destroy'])} for node "
            f"{ex['node']} and afterwards data message {name(ex['data'])} for that node")


_WHY = {"exactly_once": _exactly_once, "fifo": _fifo, "causal": _causal,
        "consistent": _consistent, "node_rules": _node_rules}


def explain(prop, ex) -> dict:
    """`ex` with its sentence (`why`) and, where it has paths, the words for each edge."""
    out = dict(ex, why=_WHY[prop](ex))
    if ex.get("path"):
        out["steps"] = path_words(ex["path"])
    if prop == "consistent":
        out["edges"] = [dict(s, steps=path_words(s["path"])) if s.get("path") else s
                        for s in ex["edges"]]
    return out


def explain_summary(summary) -> dict:
    """Every example of every property explained (the summary is changed in place)."""
    for prop, p in summary["properties"].items():
        p["examples"] = [explain(prop, ex) for ex in p["examples"]]
    return summary


def summary_lines(summary, examples=1) -> list[str]:
    """What the CLI prints: one line per property, its first examples in words, a verdict."""
    out = []
    for prop, p in summary["properties"].items():
        mark = "ok  " if p["ok"] else "FAIL" if p.get("judged", True) else "info"
        method = f" ({p['method']})" if p.get("method") else ""
        out.append(f"{mark} {prop:<13} {p['violations']:>8} violation(s){method}")
        for ex in p["examples"][:examples]:
            out.append(f"     e.g. {ex.get('why') or _WHY[prop](ex)}")
            for line in ex.get("steps", ()):
                out.append(f"          because {line}")
            for s in ex.get("edges", ()) if prop == "consistent" else ():
                if s.get("steps"):
                    out.append(f"          {name(s['before'])} before {name(s['after'])} "
                               f"at p{s['process']} because:")
                    out += [f"            {line}" for line in s["steps"]]
    unjudged = [n for n, p in summary["properties"].items() if not p.get("judged", True)]
    out.append(f"{'OK' if summary['ok'] else 'VIOLATED'}: {summary['events']} events, "
               f"{summary['processes']} processes, {summary['seconds']} s"
               + (f" (not promised, not judged: {', '.join(unjudged)})" if unjudged else ""))
    return out
