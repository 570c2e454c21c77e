# Invariants: simulate() produces traces of a *correct* bus1: every process's queue and clock
# follow bus1py.ordering, each send or destroy is one whole transaction there (stamps
# (ts, sender, tx), ties broken the same at every queue), a queue delivers its committed
# front entries in key order, NODE_DESTROY is a multicast with its own stamp, and data for a
# destroyed node is dropped at receive when its stamp is above the destruction stamp. Side-channel signals carry no clock (as in bus1): after a signal a
# process may send with a stamp below what the signaller knew (a correct bus is causal
# there all the same; the checker reads no stamps). wall_ns is one global
# step clock, so it increases along every happened-before edge, as CLOCK_MONOTONIC does.
# mutate() plants a violation of a chosen kind; bus1py.schema.write_rows() writes the rows as
# SPEC section-7 Parquet. Pure Python, deterministic for a given random.Random.
from __future__ import annotations

import random

from ..ordering import Queue, transact

MUTATIONS = ("lose", "duplicate", "misdeliver", "swap", "adjacent_swap", "cycle3",
             "late_data", "scramble_stamps", "drop_stamps")


def simulate(rng: random.Random, nprocs=4, steps=60, p_multicast=0.3, p_signal=0.15,
             p_destroy=0.05, p_internal=0.05):
    P = nprocs
    rows = {p: [] for p in range(P)}
    tx = [0] * P
    queue = [Queue() for _ in range(P)]
    inbox = {p: [] for p in range(P)}
    ids = iter(range(1, 10 ** 9))
    node_ids = iter(range(100, 10 ** 9))
    perm = {p: next(node_ids) for p in range(P)}
    eph, holders, dead_ts = {}, {}, {}

    def new_eph(p):
        n = next(node_ids)
        eph[p] = n
        holders[n] = {p} | {q for q in range(P) if rng.random() < 0.5}

    for p in range(P):
        new_eph(p)

    wall = iter(range(1000, 10 ** 12, 7))   # one global clock: strictly increasing

    def emit(p, kind, msg=None, dests=None, node=None, T=None):
        rows[p].append({"process": p, "seq": len(rows[p]), "kind": kind, "msg": msg,
                        "dests": dests, "node": node, "wall_ns": next(wall),
                        "stamp_ts": T[0] if T else None, "stamp_peer": T[1] if T else None,
                        "stamp_tx": T[2] if T else None})

    def transaction(p, dests, m, node, is_destroy):
        T = (transact(queue, p, tx[p], dests, (m, node, is_destroy)), p, tx[p])
        tx[p] += 1
        return T

    def deliver(p):
        while queue[p]:
            key, (m, node, is_destroy) = queue[p].pop()  # no transaction is left half done
            T = key[:3]
            node = perm[p] if node is None else node
            if not is_destroy and node in dead_ts and dead_ts[node] < T:
                continue  # dropped at recv by the node rule
            emit(p, "deliver", m, node=node, T=T)
            return True
        return False

    for _ in range(steps):
        p = rng.randrange(P)
        x = rng.random()
        if x < p_signal:
            if inbox[p] and rng.random() < 0.5:
                emit(p, "signal_recv", inbox[p].pop(0))
            else:
                q = rng.randrange(P)
                sid = next(ids)
                emit(p, "signal_send", sid)
                inbox[q].append(sid)
        elif x < p_signal + p_destroy:
            n = eph[p]
            dests = sorted(holders[n])
            m = next(ids)
            T = dead_ts[n] = transaction(p, dests, m, n, True)
            emit(p, "destroy", m, dests=dests, node=n, T=T)
            new_eph(p)
        elif x < p_signal + p_destroy + p_internal:
            emit(p, "internal")
        elif x < 0.6:
            if P > 1 and rng.random() < p_multicast:
                dests = sorted(rng.sample(range(P), rng.randint(2, P)))
                m = next(ids)
                T = transaction(p, dests, m, None, False)  # node None: each one's permanent node
                emit(p, "send", m, dests=dests, node=None, T=T)
            else:
                d = rng.randrange(P)
                cand = [n for n in (eph[d],) if p in holders[n]]
                node = cand[0] if cand and rng.random() < 0.6 else perm[d]
                m = next(ids)
                T = transaction(p, [d], m, node, False)
                emit(p, "send", m, dests=[d], node=node, T=T)
        else:
            deliver(p)
    # drain: every queue and inbox empties, in a random interleaving
    live = [p for p in range(P) if queue[p] or inbox[p]]
    while live:
        p = rng.choice(live)
        if inbox[p] and (not queue[p] or rng.random() < 0.3):
            emit(p, "signal_recv", inbox[p].pop(0))
        else:
            deliver(p)
        live = [p for p in range(P) if queue[p] or inbox[p]]
    return [r for p in range(P) for r in rows[p]]


def _renumber(rows):
    by = {}
    for r in rows:
        by.setdefault(r["process"], []).append(r)
    out = []
    for p in sorted(by):
        for i, r in enumerate(by[p]):
            r = dict(r)
            r["seq"] = i
            out.append(r)
    return out


def _ordered(rows):
    by = {}
    for r in sorted(rows, key=lambda r: (r["process"], r["seq"])):
        by.setdefault(r["process"], []).append(dict(r))
    return by


def _flatten(by):
    return [r for p in sorted(by) for r in by[p]]


def mutate(rows, how, rng: random.Random):
    """Return a copy of rows with one planted fault of kind `how` (see MUTATIONS)."""
    by = _ordered(rows)
    dels = [(p, i) for p, lst in by.items() for i, r in enumerate(lst) if r["kind"] == "deliver"]
    sends = [r for lst in by.values() for r in lst if r["kind"] in ("send", "destroy")]
    procs = sorted(by)
    if how == "lose" and dels:
        p, i = rng.choice(dels)
        del by[p][i]
    elif how == "duplicate" and dels:
        p, i = rng.choice(dels)
        j = rng.randint(i + 1, len(by[p]))
        by[p].insert(j, dict(by[p][i]))
    elif how == "misdeliver" and sends:
        s = rng.choice(sends)
        others = [q for q in procs if q not in s["dests"]]
        if others:
            q = rng.choice(others)
            j = rng.randint(0, len(by[q]))
            by[q].insert(j, {"process": q, "seq": -1, "kind": "deliver", "msg": s["msg"],
                             "dests": None, "node": s["node"], "wall_ns": 0,
                             "stamp_ts": s["stamp_ts"], "stamp_peer": s["stamp_peer"],
                             "stamp_tx": s["stamp_tx"]})
    elif how in ("swap", "adjacent_swap") and dels:
        p = rng.choice(sorted({p for p, _ in dels}))
        idx = [i for i, r in enumerate(by[p]) if r["kind"] == "deliver"]
        if len(idx) >= 2:
            if how == "swap":
                i, j = sorted(rng.sample(idx, 2))
            else:
                k = rng.randrange(len(idx) - 1)
                i, j = idx[k], idx[k + 1]
            a, b = by[p][i], by[p][j]
            keep = ("process", "seq", "kind", "wall_ns")
            by[p][i] = {**{k: a[k] for k in keep}, **{k: v for k, v in b.items()
                                                        if k not in keep}}
            by[p][j] = {**{k: b[k] for k in keep}, **{k: v for k, v in a.items()
                                                        if k not in keep}}
    elif how == "cycle3" and len(procs) >= 3:
        p0, p1, p2 = rng.sample(procs, 3)
        base = max((r["msg"] or 0) for r in rows) + 1000
        a, b, c = base, base + 1, base + 2
        # each process delivers two of the three: pairwise agreeable, globally cyclic
        plan = {a: [p0, p2], b: [p0, p1], c: [p1, p2]}
        for m, dests in plan.items():
            snd = rng.choice(procs)
            by[snd].append({"process": snd, "seq": -1, "kind": "send", "msg": m,
                            "dests": sorted(dests), "node": None, "wall_ns": 0,
                            "stamp_ts": None, "stamp_peer": None, "stamp_tx": None})
        for p, order in ((p0, (a, b)), (p1, (b, c)), (p2, (c, a))):
            for m in order:
                by[p].append({"process": p, "seq": -1, "kind": "deliver", "msg": m,
                              "dests": None, "node": None, "wall_ns": 0,
                              "stamp_ts": None, "stamp_peer": None, "stamp_tx": None})
    elif how == "late_data" and procs:
        # a data message for a node delivered after that node's NODE_DESTROY
        notes = [r for lst in by.values() for r in lst if r["kind"] == "deliver"
                 and any(s["msg"] == r["msg"] and s["kind"] == "destroy" for s in sends)]
        base = max([(r["msg"] or 0) for r in rows] + [0]) + 5000
        blank = {"dests": None, "node": None, "wall_ns": 0, "stamp_ts": None,
                 "stamp_peer": None, "stamp_tx": None, "seq": -1}
        if notes:
            note = rng.choice(notes)
            p, node = note["process"], note["node"]
        else:
            p = rng.choice(procs)
            node = base + 1
            by[p].append({**blank, "process": p, "kind": "destroy", "msg": base + 2,
                          "dests": [p], "node": node})
            by[p].append({**blank, "process": p, "kind": "deliver", "msg": base + 2,
                          "node": node})
        q = rng.choice(procs)
        by[q].append({**blank, "process": q, "kind": "send", "msg": base + 3, "dests": [p],
                      "node": node})
        by[p].append({**blank, "process": p, "kind": "deliver", "msg": base + 3, "node": node})
    elif how == "scramble_stamps":
        for lst in by.values():
            for r in lst:
                if r["stamp_ts"] is not None:
                    r["stamp_ts"] = rng.randrange(1000)
    elif how == "drop_stamps":
        for lst in by.values():
            for r in lst:
                r["stamp_ts"] = r["stamp_peer"] = r["stamp_tx"] = None
    return _renumber(_flatten(by))


def offset_rows(rows, k, span=1000):
    """Shift process, message, node and stamp-peer ids so that traces can share one check."""
    out = []
    for r in rows:
        r = dict(r)
        r["process"] = r["process"] + k * span
        if r["msg"] is not None:
            r["msg"] = r["msg"] + k * 10 ** 9
        if r["node"] is not None:
            r["node"] = r["node"] + k * 10 ** 9
        if r["dests"] is not None:
            r["dests"] = [d + k * span for d in r["dests"]]
        if r["stamp_peer"] is not None:
            r["stamp_peer"] = r["stamp_peer"] + k * span
        out.append(r)
    return out
