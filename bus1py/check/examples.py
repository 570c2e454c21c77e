# Invariants: a counterexample is data, never prose: events as {process, seq, kind, msg,
# message} where `msg` is the raw id from the trace and `message` names the message by its
# origin event ("p6:757": sent by process 6 at seq 757; signals likewise by their
# signal_send), plus the fields its property's explainer (explain.py) reads. Builders here
# take plain values (ints from collected rows); nothing here runs a Spark job.
from __future__ import annotations

from collections import deque

MAX_ROWS = 200_000   # rows of one component, collected for its example
# the problems of an exactly_once example
LOST, DUPLICATED, NOT_A_DESTINATION = "lost", "duplicated", "not a destination"


def message_name(process, seq) -> str | None:
    """A message's name for people: its origin event, "p<process>:<seq>"."""
    if process is None or seq is None:
        return None
    return f"p{int(process)}:{int(seq)}"


def event(process, seq, kind, msg, origin=None, **extra):
    """One event of a counterexample; `origin` = (process, seq) of its message's origin."""
    d = {"process": int(process), "seq": int(seq), "kind": kind,
         "msg": None if msg is None else int(msg)}
    if origin is not None:
        d["message"] = message_name(*origin)
    elif kind in ("send", "destroy", "signal_send"):
        d["message"] = message_name(process, seq)
    d.update({k: v for k, v in extra.items() if v is not None})
    return d


def origin_kind(is_destroy) -> str:
    return "destroy" if is_destroy else "send"


def inversion(first, second, process):
    """A delivery-order counterexample: `process` delivered `second` before `first`.

    `first` and `second` are mappings with the message's msg, sender_process, send_seq,
    is_destroy and the delivering seq deliver_seq at `process`."""
    def origin(r):
        return event(r["sender_process"], r["send_seq"], origin_kind(r["is_destroy"]), r["msg"])

    def delivery(r):
        return event(process, r["deliver_seq"], "deliver", r["msg"],
                     origin=(r["sender_process"], r["send_seq"]))

    return {"process": int(process), "earlier": origin(first), "later": origin(second),
            "events": [origin(first), origin(second), delivery(second), delivery(first)],
            "highlight": [int(first["msg"]), int(second["msg"])]}


def shortest_cycle(rows):
    """Shortest cycle in the delivery-chain graph of one SCC (rows: process, deliver_seq,
    msg): a list of edges (a, b, process, seq of a's delivery, seq of b's delivery)."""
    chains = {}
    for r in rows:
        chains.setdefault(r["process"], []).append((r["deliver_seq"], r["msg"]))
    succ = {}
    for p, lst in chains.items():
        lst.sort()
        for (d1, a), (d2, b) in zip(lst, lst[1:]):
            succ.setdefault(a, []).append((b, p, d1, d2))
    best = None
    for s in sorted(succ)[:50]:
        parent = {s: None}
        dq = deque([s])
        found = None
        while dq and found is None:
            a = dq.popleft()
            for b, p, d1, d2 in succ.get(a, ()):
                if b == s:
                    found = (a, (b, p, d1, d2))
                    break
                if b not in parent:
                    parent[b] = (a, p, d1, d2)
                    dq.append(b)
        if found is None:
            continue
        a, (b, p, d1, d2) = found
        edges = [(a, b, p, d1, d2)]
        while parent[a] is not None:
            pa, pp, pd1, pd2 = parent[a]
            edges.append((pa, a, pp, pd1, pd2))
            a = pa
        edges.reverse()
        if best is None or len(edges) < len(best):
            best = edges
    return best


def cycle_example(edges, size, origin):
    """The data of a cycle counterexample: for each edge, the process whose first
    deliveries order a before b. `origin`: msg -> (sender process, send seq)."""
    cyc = [int(e[0]) for e in edges]
    steps, evs = [], []
    for a, b, p, d1, d2 in edges:
        da = event(p, d1, "deliver", a, origin=origin.get(a))
        db = event(p, d2, "deliver", b, origin=origin.get(b))
        steps.append({"process": int(p), "before": da, "after": db})
        evs += [da, db]
    # the senders too, so that a diagram shows where each message of the cycle came from
    sends = [event(*origin[m], "send", m) for m in cyc if m in origin]
    return {"cycle": cyc, "size": int(size), "edges": steps, "events": sends + evs,
            "highlight": cyc}


def unwind_path(parent, end, goal):
    """The events of a path search's result, first to last: `parent` maps each receive
    reached (and the start, to None) to (its origin, the event expanded from), `end` is
    the first event reached on the goal's process at or before `goal`."""
    out = [end] if end == goal else [goal, end]
    state = end
    while parent[state] is not None:
        origin, prev = parent[state]
        out.append(origin)
        if origin != prev:
            out.append(prev)
        state = prev
    out.reverse()
    return out
