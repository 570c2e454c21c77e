"""The one-CPU floor of bus1py's 64 B rows: the very calls a two-process row makes, made in
one thread on one CPU, where no cache line crosses cores and nobody waits or wakes.

Invariants: a row's floor runs the callables its channel hands the two-process harness
(`sender()`, `receiver(0)`, through harness's own send and receive loops), so it costs
what that row's calls cost and nothing else; sends and receives are timed in separate
stretches of ROUND messages (the queue holds up to ROUND, as when a receiver falls behind),
in thread CPU time (time preempted by other jobs does not count), after one round not
counted; a figure is the minimum over rounds of the mean per message.  Two CPUs running
the sides in a pipeline could at best deliver one message per the dearer side's cost:
`reach` in msg/s.
"""
from __future__ import annotations

import gc
import time

from .common import payload_of
from .harness import _recv_n, _send_n

ROUND = 256
SIZE = 64


def _floor(t, rounds):
    ch = t.make(SIZE)
    try:
        send, recv = ch.sender(), ch.receiver(0)
        payload, cpu = payload_of(SIZE), time.thread_time_ns
        sends, recvs = [], []
        for r in range(rounds + 1):
            t0 = cpu()
            _send_n(send, payload, ROUND, ch.send_batch)
            t1 = cpu()
            last = _recv_n(recv, ROUND, ch.recv_batch)
            t2 = cpu()
            if (last if isinstance(last, int) else len(last)) != SIZE:
                raise RuntimeError(f"{t.name}: the floor's last message is not the payload sent")
            if r:
                sends.append((t1 - t0) / ROUND)
                recvs.append((t2 - t1) / ROUND)
    finally:
        ch.close()
    s, v = min(sends), min(recvs)
    return {"send_ns": s, "recv_ns": v, "reach": 1e9 / max(s, v)}


def bench_floor(transports, rounds=20):
    """{row name: {send_ns, recv_ns, reach}} for each bus1py row among `transports`."""
    gc.disable()
    try:
        return {t.name: _floor(t, rounds) for t in transports if t.peer == "bus1py"}
    finally:
        gc.enable()
