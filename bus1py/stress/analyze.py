"""Reading a stress trace back: latencies for the summary, and a structural self-check.

Invariants:
  - Everything here is computed from the trace rows alone (SPEC section 7 columns); the
    bus's stamps are never used to decide anything.
  - `wellformed` checks only what the *producer* promises (per-process seq 0..n-1 with no
    gap, unique send ids, every deliver matches a send to that process, every destination
    of every send delivered exactly once, signals paired).  It is not the ordering checker
    (`bus1py check`); `quick_order_check` is a small stand-in for it used while tuning
    fault injection, exact but quadratic-ish, meant for runs of a few processes.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from .trace import read_trace
from .worker import DESTROY_BIT


def latency_stats(trace_dir: str) -> dict:
    """Delivery latency (deliver wall_ns - send wall_ns) percentiles, in microseconds."""
    t = read_trace(trace_dir, columns=["kind", "msg", "wall_ns"])
    kind = t.column("kind").to_numpy(zero_copy_only=False)
    msg = t.column("msg").fill_null(-1).to_numpy()
    wall = t.column("wall_ns").to_numpy()
    send = kind == "send"
    deliver = (kind == "deliver") & (msg >= 0) & ((msg & DESTROY_BIT) == 0)
    s_msg, s_wall = msg[send], wall[send]
    order = np.argsort(s_msg, kind="stable")
    s_msg, s_wall = s_msg[order], s_wall[order]
    d_msg, d_wall = msg[deliver], wall[deliver]
    out = {"rows": len(t), "sends": int(send.sum()), "deliveries": int(deliver.sum())}
    if not len(d_msg) or not len(s_msg):
        return out
    pos = np.searchsorted(s_msg, d_msg).clip(0, len(s_msg) - 1)
    ok = s_msg[pos] == d_msg
    out["unmatched_deliveries"] = int((~ok).sum())
    lat = (d_wall[ok] - s_wall[pos[ok]]) / 1000.0
    if len(lat):
        for name, q in (("p50", 50), ("p90", 90), ("p99", 99), ("p99.9", 99.9)):
            out[name] = float(np.percentile(lat, q))
        out["max"] = float(lat.max())
        out["mean"] = float(lat.mean())
    return out


def load_events(trace_dir: str):
    """Per-process event lists in seq order: [(seq, kind, msg, dests, node)]."""
    t = read_trace(trace_dir, columns=["process", "seq", "kind", "msg", "dests", "node"])
    d = t.to_pydict()
    per = defaultdict(list)
    for p, s, k, m, ds, nd in zip(d["process"], d["seq"], d["kind"], d["msg"], d["dests"], d["node"]):
        per[p].append((s, k, m, ds, nd))
    for evs in per.values():
        evs.sort(key=lambda e: e[0])
    return per


def wellformed(trace_dir: str, events=None) -> list:
    """Producer-side problems of a trace, as readable strings (empty: well-formed)."""
    per = events if events is not None else load_events(trace_dir)
    problems = []
    sends = {}
    signals = {}
    for p, evs in per.items():
        seqs = [e[0] for e in evs]
        if seqs != list(range(len(seqs))):
            first = next(i for i, s in enumerate(seqs) if s != i)
            problems.append(f"process {p}: seq not 0..{len(seqs) - 1} without gaps (at position {first}: {seqs[first]})")
        for s, k, m, ds, nd in evs:
            if k in ("send", "destroy"):
                if m in sends:
                    problems.append(f"message {m:#x} sent twice (process {sends[m][0]} and {p})")
                sends[m] = (p, s, list(ds or []), nd)
            elif k == "signal_send":
                if m in signals:
                    problems.append(f"signal {m:#x} sent twice")
                signals[m] = (p, s, list(ds or []))
    got = defaultdict(list)
    sig_got = defaultdict(list)
    destroyed_at = set()  # (process, node): the process delivered NODE_DESTROY for the node
    for p, evs in per.items():
        for s, k, m, ds, nd in evs:
            if k == "deliver" and m is not None:
                got[m].append(p)
                if m & DESTROY_BIT:
                    destroyed_at.add((p, nd))
            elif k == "signal_recv":
                sig_got[m].append(p)
    for m, procs in got.items():
        if m not in sends:
            problems.append(f"process {procs[0]} delivered message {m:#x} that nobody sent")
            continue
        # a message to a node destroyed before it may be dropped (SPEC section 4)
        want = [q for q in sends[m][2] if q in procs or (q, sends[m][3]) not in destroyed_at]
        if sorted(procs) != sorted(want):
            problems.append(f"message {m:#x} sent by {sends[m][0]} to {sorted(sends[m][2])} "
                            f"was delivered at {sorted(procs)}")
    for m, (p, s, ds, nd) in sends.items():
        if m not in got and not all((q, nd) in destroyed_at for q in ds):
            problems.append(f"message {m:#x} sent by {p} (seq {s}) to {ds} was never delivered")
    for m, procs in sig_got.items():
        if m not in signals or procs != signals[m][2]:
            problems.append(f"signal {m:#x} received at {procs} does not match a signal_send")
    for m, (p, s, ds) in signals.items():
        if m not in sig_got:
            problems.append(f"signal {m:#x} from {p} to {ds} never received")
    return problems


def quick_order_check(trace_dir: str, events=None, limit: int = 20) -> dict:
    """Consistency and causality violations, found from the rows alone.

    causality: happened-before is process order + send->deliver + signal_send->signal_recv,
    computed as vector clocks; a violation is a process delivering b before a although
    send(a) happened before send(b).  consistency: two processes deliver a and b in opposite
    orders (checked on adjacent pairs of one process's deliveries, which finds at least
    one witness whenever any exists for that process pair)."""
    per = events if events is not None else load_events(trace_dir)
    procs = sorted(per)
    ix = {p: i for i, p in enumerate(procs)}
    n = len(procs)
    # vector clocks by a worklist over processes (an event waits for its cause)
    vc_of_send = {}
    vc_of_sig = {}
    pos = {p: 0 for p in procs}
    vc = {p: [0] * n for p in procs}  # vc[p][q] = 1 + last seq of q known at p (0 = none)
    pending = set(procs)
    while pending:
        progressed = False
        for p in list(pending):
            evs, i, v = per[p], pos[p], vc[p]
            me = ix[p]
            while i < len(evs):
                s, k, m, ds, *_ = evs[i]
                if k == "deliver" and m is not None:
                    src = vc_of_send.get(m)
                    if src is None:
                        break  # its send is not processed yet: come back later
                    v[:] = [max(a, b) for a, b in zip(v, src)]
                elif k == "signal_recv":
                    src = vc_of_sig.get(m)
                    if src is None:
                        break
                    v[:] = [max(a, b) for a, b in zip(v, src)]
                v[me] = s + 1
                if k in ("send", "destroy"):
                    vc_of_send[m] = list(v)
                elif k == "signal_send":
                    vc_of_sig[m] = list(v)
                i += 1
            if i != pos[p]:
                progressed = True
            pos[p] = i
            if i == len(evs):
                pending.discard(p)
        if not progressed:
            break  # a deliver without a send: wellformed() reports it
    sender = {m: (p, s) for p in procs for s, k, m, ds, *_ in per[p] if k in ("send", "destroy")}
    causal, consistent = [], []
    for q in procs:
        dl = [e for e in per[q] if e[1] == "deliver" and e[2] in sender]
        # scan from the end: min_later[p] = smallest send seq at p among later deliveries
        min_later = {}
        for s, k, m, ds, *_ in reversed(dl):
            v = vc_of_send.get(m)
            if v is not None:
                for p, (later, ls) in min_later.items():
                    if ls < v[ix[p]]:  # that later-delivered send is in m's causal past
                        causal.append(f"process {q} delivered {m:#x} (seq {s}) before {later:#x}, "
                                      f"whose send (process {p}, seq {ls}) happened before "
                                      f"{m:#x}'s send")
                        break
            sp, ss = sender[m]
            if sp not in min_later or ss < min_later[sp][1]:
                min_later[sp] = (m, ss)
            if len(causal) >= limit:
                break
    # consistency: a global position per process; compare adjacent common deliveries
    rank = {q: {e[2]: i for i, e in enumerate(x for x in per[q] if x[1] == "deliver")} for q in procs}
    for a in range(n):
        for b in range(a + 1, n):
            ra, rb = rank[procs[a]], rank[procs[b]]
            common = sorted((m for m in ra if m in rb), key=ra.get)
            for x, y in zip(common, common[1:]):
                if rb[x] > rb[y]:
                    consistent.append(f"processes {procs[a]} and {procs[b]} delivered {x:#x} and "
                                      f"{y:#x} in opposite orders")
                    break
            if len(consistent) >= limit:
                break
    return {"causality": causal, "consistency": consistent}

