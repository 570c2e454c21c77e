# Invariants: an exact, deliberately naive checker over a list of row dicts, used by the tests
# as the oracle for the Spark checker. It shares no code with properties.py: happened-before
# is plain graph reachability (BFS from every send) instead of vector clocks, and the global
# order is decided by mutual reachability instead of ancestor vectors. The definitions of the
# counts are the ones stated at the top of properties.py. Cost is quadratic or worse: only for
# small traces.
from __future__ import annotations

from collections import defaultdict, deque


def _by_process(rows):
    procs = defaultdict(list)
    for r in rows:
        procs[r["process"]].append(r)
    for lst in procs.values():
        lst.sort(key=lambda r: r["seq"])
    return procs


def reference_check(rows) -> dict:
    procs = _by_process(rows)
    sends = {r["msg"]: r for r in rows if r["kind"] in ("send", "destroy")}
    sig_sends = {r["msg"]: r for r in rows if r["kind"] == "signal_send"}

    def nnode(d):
        return d["node"] if d["node"] is not None else sends[d["msg"]]["node"]

    # first deliveries in order, per process
    firsts = {}
    for p, lst in procs.items():
        seen = set()
        firsts[p] = []
        for r in lst:
            if r["kind"] == "deliver" and r["msg"] not in seen:
                seen.add(r["msg"])
                firsts[p].append(r)

    # exactly_once
    count = defaultdict(int)
    for r in rows:
        if r["kind"] == "deliver":
            count[(r["msg"], r["process"])] += 1
    destroyed = {(r["process"], nnode(r)) for r in rows
                 if r["kind"] == "deliver" and sends[r["msg"]]["kind"] == "destroy"}
    eo = 0
    expected = set()
    for m, s in sends.items():
        for d in set(s["dests"]):
            expected.add((m, d))
            n = count.get((m, d), 0)
            if n == 0:
                if not (s["kind"] == "send" and s["node"] is not None
                        and (d, s["node"]) in destroyed):
                    eo += 1
            elif n > 1:
                eo += 1
    for key in count:
        if key not in expected:
            eo += 1

    # fifo
    fifo = 0
    for p, lst in firsts.items():
        top = {}
        for r in lst:
            s = sends[r["msg"]]
            q = s["process"]
            if q in top and top[q] > s["seq"]:
                fifo += 1
            top[q] = max(top.get(q, -1), s["seq"])

    # happened-before by BFS over the event graph
    succ = defaultdict(list)
    for p, lst in procs.items():
        for a, b in zip(lst, lst[1:]):
            succ[(p, a["seq"])].append((p, b["seq"]))
    for r in rows:
        if r["kind"] == "deliver":
            s = sends[r["msg"]]
            succ[(s["process"], s["seq"])].append((r["process"], r["seq"]))
        elif r["kind"] == "signal_recv":
            s = sig_sends[r["msg"]]
            succ[(s["process"], s["seq"])].append((r["process"], r["seq"]))
    send_at = {(s["process"], s["seq"]): m for m, s in sends.items()}
    later_sends = {}
    for m, s in sends.items():
        start = (s["process"], s["seq"])
        seen = {start}
        dq = deque([start])
        out = set()
        while dq:
            e = dq.popleft()
            for f in succ.get(e, ()):
                if f not in seen:
                    seen.add(f)
                    dq.append(f)
                    if f in send_at:
                        out.add(send_at[f])
        out.discard(m)
        later_sends[m] = out

    causal = 0
    for p, lst in firsts.items():
        before = set()
        for r in lst:
            if later_sends[r["msg"]] & before:
                causal += 1
            before.add(r["msg"])

    # consistent: strongly connected components of the delivery-chain graph
    g = defaultdict(set)
    nodes = set()
    for p, lst in firsts.items():
        for r in lst:
            nodes.add(r["msg"])
        for a, b in zip(lst, lst[1:]):
            g[a["msg"]].add(b["msg"])
    reach = {}
    for n in nodes:
        seen = {n}
        dq = deque([n])
        while dq:
            a = dq.popleft()
            for b in g.get(a, ()):
                if b not in seen:
                    seen.add(b)
                    dq.append(b)
        reach[n] = seen
    done = set()
    sccs = 0
    for n in sorted(nodes):
        if n in done:
            continue
        comp = {m for m in reach[n] if n in reach[m]}
        done |= comp
        if len(comp) > 1:
            sccs += 1

    # node_rules
    nr = 0
    for p, lst in procs.items():
        dead = set()
        for r in lst:
            if r["kind"] != "deliver":
                continue
            s = sends[r["msg"]]
            nd = nnode(r)
            if s["kind"] == "destroy":
                dead.add(nd)
            elif nd is not None and nd in dead:
                nr += 1

    return {"exactly_once": eo, "fifo": fifo, "causal": causal, "consistent": sccs,
            "node_rules": nr}
