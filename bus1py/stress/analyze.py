"""Reading a stress trace back: latencies for the summary, and a structural self-check.

Invariants:
  - Everything here is computed from the trace rows alone (SPEC section 7 columns); the
    bus's stamps are never used to decide anything.
  - `wellformed` checks only what the *producer* promises (per-process seq 0..n-1 with no
    gap, unique send ids, every deliver matches a send to that process, every destination
    of every send delivered exactly once, signals paired).  It is not the ordering checker
    (`bus1py check`), which alone decides the ordering properties.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from .trace import read_trace
from .ids import DESTROY_BIT


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

