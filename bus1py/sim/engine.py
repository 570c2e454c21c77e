"""One run of the Jang–Park–Cho–Yoon study (seed 001 section 6.2) as a discrete-event simulation.

n processes run one protocol state machine each (`bus1py.causal`) over a reliable, non-FIFO
network. Each process sends on its own Poisson clock (inter-send times exponential, mean
`send_mean`, 0.1 s in the paper); a unicast goes to one other process drawn uniformly, a
multicast to a uniform random k-subset of the others with k uniform on 1..n-1 (mean n/2, as
the paper's "evenly distributed"). Every wire is delayed independently (`net_delay`, see
below), so two wires on one channel overtake each other freely.

Network delay (the paper does not state it): exponential with mean `net_delay` (0.05 s by
default, half the mean inter-send time). Memoryless delays are the harshest non-FIFO network
(any two wires in flight arrive in either order with probability 1/2), which is what the
protocols are designed for; `bus1py simulate --net-delay 0.01,0.05,0.2` shows how the results
move with the mean.

Send clock (`clock`): "process" gives every process its own Poisson clock of mean
`send_mean` (the reading used by default: the paper's "time interval between two send events"
per process); "system" reads it as one clock for the whole system, a send every `send_mean`
from a uniformly drawn process. A superposition of n Poisson processes of mean n*send_mean is
a Poisson process of mean send_mean whose every event comes from a uniform process, so
"system" runs each process at mean n*send_mean: the same distribution, the same loop.

Phases: warm-up until the last process has had `warmup` messages delivered to its
application; measurement from that moment until the last process has had `warmup + measure`
delivered (the paper: "every process received 10000 messages to go to stable state and 50000
messages for gathering results"; a process ahead of the slowest one is counted from where it
stands when the window opens, and the window closes when the last process reaches the
total). A protocol whose multicast is "sequential" (the buffer protocol) is handed a multicast as k one-copy sends, which is all it
implements; its figures still count one message. Counters cover the wires emitted
during measurement; per-message figures are per data copy transmitted times the copies a message
has (in steady state: the window's cost over its sends). After
measurement no new sends start and the network drains, so every message sent must be
delivered to each destination exactly once: `undelivered` counts those that were not (0 for a
live protocol).

Invariants:
  - Deterministic: the result depends only on the RunSpec (its seed drives one random.Random).
  - Wall time never enters the result except `seconds` and `receive_events_per_s`.
  - The C loop (`cloop`, csrc/sim/engine.c) is this loop's twin: for a protocol with a C
    machine it yields the same figures, bit for bit, and `_figures` serves both.
  - Event order: a heap of (time, tiebreak counter, ...); the counter makes equal times
    deterministic.
"""
from __future__ import annotations

import heapq
import math
import random
import struct
import time
from array import array
from dataclasses import asdict, dataclass

from .. import causal, schema
from . import cloop
from .ciwire import ci_stats

_MID = struct.Struct("<Q")
_NO_STAMP = dict.fromkeys(schema.STAMPS)
MODES = ("unicast", "multicast")
CLOCKS = ("process", "system")


@dataclass(frozen=True)
class RunSpec:
    protocol: str
    n: int
    mode: str
    run: int = 0
    seed: int = 1
    warmup: int = 10_000
    measure: int = 50_000
    send_mean: float = 0.1
    net_delay: float = 0.05
    clock: str = "process"

    @property
    def process_send_mean(self) -> float:
        """The mean interval between two sends of one process (see `clock`)."""
        return self.send_mean * self.n if self.clock == "system" else self.send_mean

    def check(self) -> None:
        causal.protocol_class(self.protocol)
        if self.n < 2:
            raise ValueError(f"n must be at least 2, got {self.n}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.warmup < 0 or self.measure < 1:
            raise ValueError("warmup must be >= 0 and measure >= 1")
        if self.clock not in CLOCKS:
            raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {self.clock!r}")
        if not self.send_mean > 0 or not self.net_delay > 0:
            raise ValueError("send_mean and net_delay must be positive")


class _Tally:
    """Costs of the wires emitted while measuring."""

    __slots__ = cloop.TALLY          # the fields of csrc/sim/engine.c's struct sim_tally

    def __init__(self, **counts):
        for k in self.__slots__:
            setattr(self, k, counts.get(k, 0))


def run(spec: RunSpec, trace: list | None = None, *, fast: bool = True) -> dict:
    """Simulate one run; return its figures. If `trace` is a list, SPEC section-7 row dicts
    of every send and delivery (whole run, warm-up included) are appended to it.

    Without a trace, a protocol with a C machine (`cloop.NAMES`) runs in the C loop
    (`cloop`), which yields the same figures; `fast=False` forces the Python machines and
    loop (the reference)."""
    spec.check()
    t0 = time.perf_counter()
    if fast and trace is None and spec.protocol in cloop.NAMES:
        c = cloop.run(spec)
        return _figures(spec, _Tally(**c.tally), c.delays, c.held_max, c.undelivered, c.receives,
                        time.perf_counter() - t0)
    n = spec.n
    rng = random.Random(spec.seed)
    expo, rand, sample = rng.expovariate, rng.random, rng.sample
    send_rate, net_rate = 1.0 / spec.process_send_mean, 1.0 / spec.net_delay
    procs = [causal.create(spec.protocol, i, n) for i in range(n)]
    others = [[q for q in range(n) if q != p] for p in range(n)]
    multicast = spec.mode == "multicast"
    # a protocol without one-event multicast is given k sends of one copy each (and the
    # trace records k send events); the figures still count one message
    sequential = procs[0].multicast == "sequential"
    jpcy = spec.protocol == "jpcy"

    heap: list = []
    push, pop = heapq.heappush, heapq.heappop
    log = math.log
    tick = 0
    for p in range(n):
        push(heap, (expo(send_rate), tick, -1, p, b""))
        tick += 1

    delivered = [0] * n
    warm_left = n if spec.warmup else 0
    done_left = n
    goal_warm, goal_done = spec.warmup, spec.warmup + spec.measure
    measuring = warm_left == 0
    sending = True
    tally = _Tally()
    outstanding: dict = {}          # message id -> [send time, copies not yet delivered]
    delays = array("d")
    held_max = 0
    receives = 0
    next_mid = 1
    seqs = [0] * n
    unpack_mid = _MID.unpack

    def account(step, now, where):
        nonlocal tick
        for dest, data in step.wires:
            # random.expovariate's own formula, inlined: the same numbers, less call overhead
            push(heap, (now - log(1.0 - rand()) / net_rate, tick, dest, where, data))
            tick += 1
        if measuring:
            for cost in step.costs:
                tally.control += cost.control
                tally.header += cost.header
                tally.dependents += cost.dependents
                if cost.data:
                    tally.data_wires += 1
                    tally.data_control += cost.control
                    tally.data_dependents += cost.dependents
                else:
                    tally.control_wires += 1
            if jpcy:
                for _dest, data in step.wires:
                    nd, nci, empty, largest = ci_stats(data)
                    tally.copy_dests += nd
                    tally.ci_tuples += nci
                    tally.ci_empty += empty
                    if largest > tally.ci_max:
                        tally.ci_max = largest

    # The machines are driven through `_send` and `_receive`, the unchecked entry points:
    # every argument here is valid by construction, and the checks would cost a fifth of a
    # cheap protocol's receive.
    while heap:
        now, _, dest, src, data = pop(heap)
        if dest < 0:                                     # a send timer fires at process src
            if not sending:
                continue
            p = src
            if multicast:
                dests = sorted(sample(others[p], 1 + int(rand() * (n - 1))))
            else:
                q = int(rand() * (n - 1))
                dests = [q + (q >= p)]
            if measuring:
                tally.sends += 1
                tally.copies += len(dests)
            for group in ([[d] for d in dests] if sequential else (dests,)):
                mid = next_mid
                next_mid += 1
                outstanding[mid] = [now, len(group)]
                if trace is not None:
                    trace.append({"process": p, "seq": seqs[p], "kind": schema.SEND,
                                  "msg": mid, "dests": group, "node": None,
                                  "wall_ns": int(now * 1e9), **_NO_STAMP})
                    seqs[p] += 1
                account(procs[p]._send(group, _MID.pack(mid)), now, p)
            push(heap, (now - log(1.0 - rand()) / send_rate, tick, -1, p, b""))
            tick += 1
            continue
        receives += 1
        proc = procs[dest]
        step = proc._receive(src, data)
        if step.wires:
            account(step, now, dest)
        for _sender, payload in step.delivered:
            mid = unpack_mid(payload)[0]
            entry = outstanding[mid]
            if entry[1] == 1:
                del outstanding[mid]
            else:
                entry[1] -= 1
            if measuring:
                delays.append(now - entry[0])
            if trace is not None:
                trace.append({"process": dest, "seq": seqs[dest], "kind": schema.DELIVER,
                              "msg": mid, "dests": None, "node": None,
                              "wall_ns": int(now * 1e9), **_NO_STAMP})
                seqs[dest] += 1
            c = delivered[dest] = delivered[dest] + 1
            if c == goal_warm and warm_left:
                warm_left -= 1
                if not warm_left:
                    measuring = True
            if c == goal_done:
                done_left -= 1
                if not done_left:
                    measuring = sending = False
        h = proc.held
        if h > held_max:
            held_max = h

    seconds = time.perf_counter() - t0
    return _figures(spec, tally, delays, held_max, len(outstanding), receives, seconds)


def _figures(spec, t, delays, held_max, undelivered, receives, seconds) -> dict:
    import numpy as np
    d = np.frombuffer(delays, dtype=np.float64) if len(delays) else np.zeros(1)
    fanout = t.copies / max(t.sends, 1)
    # Per message = per data copy transmitted, times the copies of a message. In steady state
    # the window's data wires are its sends' copies and this is "the window's cost over its
    # sends"; a protocol whose output backlog grows (buffer at high load) has sent fewer copies
    # than it accepted, and dividing by sends would under-count what each copy costs.
    per = max(t.sends, 1) * max(t.data_wires, 1)

    def per_msg(x):         # one division, so the ratio is exact whenever it can be
        return x * t.copies / per
    return {
        **asdict(spec),
        "sends": t.sends,
        "copies": t.copies,
        "fanout": fanout,
        # per message, summed over its destinations (seed 001 section 6.2)
        "dependents_per_msg": per_msg(t.dependents),
        "bytes_per_msg": per_msg(t.control),
        "control_msgs_per_msg": per_msg(t.control_wires),
        "header_bytes_per_msg": per_msg(t.header),
        # per data copy (the unit of the paper's claim "RST carries n^2")
        "dependents_per_copy": t.data_dependents / max(t.data_wires, 1),
        "bytes_per_copy": t.data_control / max(t.data_wires, 1),
        # the copies the window accepted that it also transmitted (< 1: a growing backlog)
        "posted_fraction": t.data_wires / max(t.copies, 1),
        **_ci_figures(spec, t),
        "delay_mean": float(d.mean()),
        "delay_p50": float(np.percentile(d, 50)),
        "delay_p99": float(np.percentile(d, 99)),
        "buffered_max": held_max,
        "undelivered": undelivered,
        # raw counters of the measurement window, to recompute any other definition
        "data_wires": t.data_wires,
        "copy_dests": t.copy_dests,
        "ci_tuples": t.ci_tuples,
        "ci_empty": t.ci_empty,
        "control_wires": t.control_wires,
        "control_bytes": t.control,
        "header_bytes": t.header,
        "dependents": t.dependents,
        "receive_events": receives,
        "seconds": seconds,
        "receive_events_per_s": receives / seconds if seconds > 0 else 0.0,
    }


def _ci_figures(spec, t) -> dict:
    """JPCY's CI on the wire (bus1py.sim.ciwire), and its bytes and dependents per copy under
    the two readings the paper leaves open; None for the other protocols. `ci_max` is the most
    tuples one CI component (one sender) held on any wire of the window, against the paper's
    bound of n - 1."""
    if spec.protocol != "jpcy":
        return dict.fromkeys(("ci_max", "ci_per_copy", "ci_empty_fraction",
                              "bytes_per_copy_indexed", "bytes_per_copy_literal",
                              "dependents_per_copy_literal"))
    w = max(t.data_wires, 1)
    return {
        "ci_max": t.ci_max,
        "ci_per_copy": t.ci_tuples / w,
        "ci_empty_fraction": t.ci_empty / max(t.ci_tuples, 1),
        # sender-indexed CI vector: each tuple loses its u16 sender id (the vector's index
        # names it; the component lengths are framing, like every section length)
        "bytes_per_copy_indexed": (t.data_control - 2 * t.ci_tuples) / w,
        # literal S4 before S5: every copy also carries (tau_m, m.D): 6 + 2|m.D| bytes
        "bytes_per_copy_literal": (t.data_control + 6 * t.data_wires + 2 * t.copy_dests) / w,
        "dependents_per_copy_literal": (t.data_dependents + t.data_wires) / w,
    }
