"""Drive protocol machines through an explicit schedule: the network is an adversary.

`play(protocol, n, ops, drain)` runs a program of operations with no clock at all:
  ("send", p, dests)   process p sends one message to dests
  ("deliver", k)       the network hands over in-flight wire number k (mod the number in
                       flight): any wire, in any order, so every reordering is reachable
  ("signal", p, q)     p tells q something outside the protocol (a side channel): trace rows
                       signal_send at p and signal_recv at q, nothing on the network; skipped
                       while p is `busy` (its last send has not completed) or p == q
then drains what is still in flight in the order `drain` names ("fifo", "lifo", or an int
seed for a random order). The result holds the SPEC section-7 rows for the checker.

Protocols whose multicast is "sequential" (the buffer protocol) are given a multicast as k
separate one-destination sends, and the trace records k send events, because that is what
they implement; every other protocol gets one send event for the whole multicast.

Invariants: deterministic for given arguments; a wire is delivered exactly once; `wires`
counts every wire transmitted, `undelivered` the copies never handed to an application.
"""
from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field

from .. import causal, schema

_MID = struct.Struct("<Q")


@dataclass
class Played:
    rows: list = field(default_factory=list)
    wires: int = 0
    control_wires: int = 0
    undelivered: int = 0
    held_max: int = 0


def play(protocol: str, n: int, ops, drain="lifo") -> Played:
    procs = [causal.create(protocol, i, n) for i in range(n)]
    sequential = procs[0].multicast == "sequential"
    out = Played()
    flight: list = []                 # (dest, src, data)
    seqs = [0] * n
    pending: dict = {}                # message id -> copies not yet delivered
    mids = iter(range(1, 1 << 62))
    sigs = iter(range(1 << 40, 1 << 62))

    def row(p, kind, msg, dests=None):
        out.rows.append({"process": p, "seq": seqs[p], "kind": kind, "msg": msg,
                         "dests": dests, "node": None, "wall_ns": len(out.rows),
                         "stamp_ts": None, "stamp_peer": None, "stamp_tx": None})
        seqs[p] += 1

    def transmit(step, src):
        for (dest, data), cost in zip(step.wires, step.costs):
            flight.append((dest, src, data))
            out.wires += 1
            out.control_wires += not cost.data

    def hand_over(k):
        dest, src, data = flight.pop(k)
        step = procs[dest].receive(src, data)
        transmit(step, dest)
        for _sender, payload in step.delivered:
            mid = _MID.unpack(payload)[0]
            pending[mid] -= 1
            row(dest, schema.DELIVER, mid)
        out.held_max = max(out.held_max, procs[dest].held)

    for op in ops:
        if op[0] == "send":
            _, p, dests = op
            groups = [[d] for d in dests] if sequential else [list(dests)]
            for g in groups:
                mid = next(mids)
                pending[mid] = len(g)
                row(p, schema.SEND, mid, sorted(g))
                transmit(procs[p].send(g, _MID.pack(mid)), p)
        elif op[0] == "deliver":
            if flight:
                hand_over(op[1] % len(flight))
        elif op[0] == "signal":
            _, p, q = op
            if p == q or procs[p].busy:
                continue          # p's last send has not completed: it has nothing to tell
            sid = next(sigs)
            row(p, schema.SIGNAL_SEND, sid)
            row(q, schema.SIGNAL_RECV, sid)
        else:
            raise ValueError(f"unknown operation {op!r}")
    rng = random.Random(drain) if isinstance(drain, int) else None
    while flight:
        if drain == "fifo":
            hand_over(0)
        elif drain == "lifo":
            hand_over(len(flight) - 1)
        elif rng is not None:
            hand_over(rng.randrange(len(flight)))
        else:
            raise ValueError(f"drain must be 'fifo', 'lifo' or an int seed, got {drain!r}")
    out.undelivered = sum(pending.values())
    return out
