"""What sits between the workload and a transport: nothing (`Direct`) or a causal-order
protocol machine (`Causal`, any of `bus1py.causal`), and the chaos delay line.

Invariants:
  - A layer turns an application send into wires and a received wire into wires (control
    replies) plus deliveries to the application; it never touches the transport itself.
  - `Causal` counts every wire's measured cost (WireCost): control bytes, control-only
    wires, data wires.  It also measures hold-back: a data wire whose payload the machine
    keeps (`held` grows) is remembered with its arrival time, and its delivery later adds
    one sample (delivery - arrival).  The application payload ends with its own 8-byte id
    (the worker puts it there), so a wire's last 8 bytes name the message it carries.
  - The delay line (`--chaos-delay D`) gives each wire its own seeded uniform delay in
    [0, D] on the sending side, so wires overtake each other even on a FIFO transport; the
    seed is (run seed, process index), so the delays drawn are a function of the seed and
    of how many wires were sent before.
"""
from __future__ import annotations

import heapq
import random
import time

from .. import causal


class Direct:
    """No protocol: a multicast is one native send where the transport has one, else one
    wire per destination."""

    multicast = "native"
    busy = False
    held = 0

    def __init__(self, native: bool):
        self.native = native

    def send(self, dests, payload):
        if self.native and len(dests) > 1:
            return [(list(dests), payload)]
        return [(d, payload) for d in dests]

    def receive(self, src, data, now):
        return [], [(src, data)]

    def stats(self):
        return {}


class Causal:
    def __init__(self, name: str, me: int, n: int):
        self.p = causal.create(name, me, n)
        self.multicast = self.p.multicast
        self.control_bytes = self.control_wires = self.data_wires = self.header_bytes = 0
        self.data_control = 0  # control bytes on data wires (the per-copy figure)
        self.arrived = {}     # message id -> arrival ns of the data wire the machine kept
        self.hold_ns = []     # one sample per message held back: delivery - arrival
        self.held_max = 0

    @property
    def busy(self):
        return self.p.busy

    @property
    def held(self):
        return self.p.held

    def _count(self, step):
        for c in step.costs:
            self.control_bytes += c.control
            self.header_bytes += c.header
            if c.data:
                self.data_wires += 1
                self.data_control += c.control
            else:
                self.control_wires += 1
        return step.wires

    def send(self, dests, payload):
        return self._count(self.p.send(dests, payload))

    def receive(self, src, data, now):
        before = self.p.held
        step = self.p.receive(src, data)
        wires = self._count(step) if step.wires else []
        delivered = step.delivered
        arrived = self.arrived
        if delivered and arrived:
            for _sender, payload in delivered:
                t = arrived.pop(payload[-8:], None)
                if t is not None:
                    self.hold_ns.append(now - t)
        after = self.p.held
        if after + len(delivered) > before and len(data) >= 8:
            # this wire brought a message; unless it was delivered at once, it is kept
            key = data[-8:]
            if not any(p[-8:] == key for _s, p in delivered):
                arrived[key] = now
            if after > self.held_max:
                self.held_max = after
        return wires, delivered

    def stats(self):
        return {"control_bytes": self.control_bytes, "control_wires": self.control_wires,
                "data_wires": self.data_wires, "header_bytes": self.header_bytes,
                "data_control": self.data_control,
                "held_max": self.held_max, "held_count": len(self.hold_ns),
                "hold_ns": self.hold_ns}


def make_layer(protocol: str | None, me: int, n: int, native_multicast: bool):
    return Causal(protocol, me, n) if protocol else Direct(native_multicast)


class DelayLine:
    """Wires wait here until due; `pop_due(now)` returns those whose time has come, in
    due order."""

    def __init__(self, max_delay: float, seed: int, index: int):
        self.max_ns = int(max_delay * 1e9)
        self.rng = random.Random(f"bus1py-chaos:{seed}:{index}")
        self.heap = []
        self.tick = 0

    def __len__(self):
        return len(self.heap)

    def push(self, dest, data):
        due = time.monotonic_ns() + int(self.rng.random() * self.max_ns)
        heapq.heappush(self.heap, (due, self.tick, dest, data))
        self.tick += 1

    def pop_due(self, now):
        h, out = self.heap, []
        while h and h[0][0] <= now:
            _, _, dest, data = heapq.heappop(h)
            out.append((dest, data))
        return out

    def next_due(self):
        return self.heap[0][0] if self.heap else None
